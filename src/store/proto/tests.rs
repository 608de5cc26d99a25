//! Frames, bounds and chunking of the master protocol.

use super::*;

#[test]
fn frames_round_trip_and_bad_headers_are_refused() {
    let req = Request::Get {
        client_id: 1,
        keys: vec!["a".into(), "b".into()],
    };
    let mut buf = Vec::new();
    write_frame(&mut buf, 0, &encode(&req)).unwrap();
    let (h, body) = read_frame(&mut &buf[..]).unwrap();
    assert_eq!(h.flags, 0);
    assert_eq!(decode::<Request>(&body).unwrap(), req);
    let mut bad = buf.clone();
    bad[4] = 9;
    assert!(matches!(read_frame(&mut &bad[..]), Err(FrameError::Bad(_))));
    let mut bad = buf.clone();
    bad[0] = b'X';
    assert!(matches!(read_frame(&mut &bad[..]), Err(FrameError::Bad(_))));
    let mut big = buf.clone();
    big[8..12].copy_from_slice(&(MAX_FRAME + 1).to_le_bytes());
    assert!(matches!(read_frame(&mut &big[..]), Err(FrameError::Bad(_))));
    assert!(matches!(
        read_frame(&mut &buf[..5]),
        Err(FrameError::Bad(_))
    ));
    assert!(matches!(read_frame(&mut &[][..]), Err(FrameError::Closed)));
    // An unknown variant, a truncated body, trailing bytes, and the JSON of version 1.
    assert!(decode::<Request>(&[0x7f]).is_err());
    let body = encode(&req);
    assert!(decode::<Request>(&body[..body.len() - 1]).is_err());
    let mut long = body.clone();
    long.push(0);
    let e = decode::<Request>(&long).unwrap_err();
    assert!(e.contains("1 bytes after its end"), "{e}");
    assert!(decode::<Request>(b"{\"Ping\":{\"client_id\":7}}").is_err());
}

#[test]
fn bounds_are_checked() {
    let long = "k".repeat(MAX_KEY_LEN + 1);
    assert!(
        Request::Get {
            client_id: 1,
            keys: vec![long]
        }
        .validate()
        .is_err()
    );
    assert!(
        Request::Get {
            client_id: 1,
            keys: vec![String::new()]
        }
        .validate()
        .is_err()
    );
    let many = vec!["k".to_string(); MAX_BATCH + 1];
    assert!(Request::Exist { keys: many }.validate().is_err());
    let cfg = WriteConfig {
        replica_num: MAX_REPLICAS + 1,
        ..WriteConfig::default()
    };
    let put = Request::PutStart {
        client_id: 1,
        upsert: false,
        items: vec![],
        config: cfg,
    };
    assert!(put.validate().is_err());
    let mount = Request::Mount {
        client_id: 1,
        name: "h:1".into(),
        base: u64::MAX,
        size: 2,
    };
    assert!(mount.validate().is_err());
    assert!(
        Request::Get {
            client_id: 1,
            keys: vec!["ok".into()]
        }
        .validate()
        .is_ok()
    );
}

#[test]
fn key_chunks_bound_keys_and_bytes() {
    assert_eq!(key_cost("a\0\"\\"), 4 + KEY_OVERHEAD);
    let short = vec!["k".to_string(); 2 * MAX_BATCH + 1];
    let runs: Vec<usize> = key_chunks(&short, |k| k).map(<[_]>::len).collect();
    assert_eq!(runs, [MAX_BATCH, MAX_BATCH, 1]);
    // Keys of the longest length: each run's encoded keys fit one frame.
    let long = vec!["\0".repeat(MAX_KEY_LEN); 20];
    let runs: Vec<&[String]> = key_chunks(&long, |k| k).collect();
    assert_eq!(runs.iter().map(|r| r.len()).sum::<usize>(), long.len());
    assert!(runs.len() > 1);
    for r in &runs {
        let req = Request::Exist { keys: r.to_vec() };
        assert!(req.validate().is_ok());
        assert!(encode(&req).len() <= MAX_FRAME as usize);
        assert!(r.iter().map(|k| key_cost(k)).sum::<usize>() <= MAX_BATCH_KEY_BYTES);
    }
    // The longest key is accepted, one byte more is not, and a NUL is just a byte.
    let max = "k\0".repeat(MAX_KEY_LEN / 2);
    assert!(
        Request::Exist {
            keys: vec![max.clone()]
        }
        .validate()
        .is_ok()
    );
    assert!(
        Request::Exist {
            keys: vec![max + "k"]
        }
        .validate()
        .is_err()
    );
    let req = Request::Exist {
        keys: vec!["k\0a".into(), "k\0b".into()],
    };
    assert_eq!(decode::<Request>(&encode(&req)).unwrap(), req);
    assert!(key_chunks(&[] as &[String], |k| k).next().is_none());
}
