//! Get sessions and replica descriptors (`get_session_start` / `get_session_ranges` /
//! `get_session_end`, `replicas`) against a real `tidewire-master`: layer-wise ranged reads of
//! values in another engine's segment, bad fragments, a session that keeps the bytes it looked
//! up while the key is upserted, and readers racing the end of their session.

mod common;
use common::master::TestMaster;
use tidewire::store::code;
use tidewire::store::sessions::RangeFrag;

fn value(i: usize, len: usize, salt: u8) -> Vec<u8> {
    (0..len).map(|j| (i * 31 + j * 7) as u8 ^ salt).collect()
}

fn put(c: &tidewire::store::StoreClient, key: &str, v: &[u8]) {
    let items = [(key, v.as_ptr() as u64, v.len() as u64)];
    // SAFETY: `v` is readable and unchanged during the call.
    let r = unsafe { c.put_from(&items, true, &Default::default()) };
    assert_eq!(r, vec![code::OK]);
}

#[test]
fn layer_wise_ranged_reads_under_a_session() {
    let m = TestMaster::start();
    let owner = m.client(64 << 20);
    let reader = m.client(0);
    let keys: Vec<String> = (0..16).map(|i| format!("s/{i}")).collect();
    let vals: Vec<Vec<u8>> = (0..16).map(|i| value(i, 64 << 10, 1)).collect();
    for (k, v) in keys.iter().zip(&vals) {
        put(&owner, k, v);
    }
    let ks: Vec<&str> = keys.iter().map(String::as_str).collect();
    let mut with_missing = ks.clone();
    with_missing.extend(["s/none", ""]);
    let mut want = vec![code::OK; 16];
    want.extend([code::OBJECT_NOT_FOUND, code::INVALID_PARAMS]);
    assert_eq!(reader.get_session_start(&with_missing), want);
    assert_eq!(reader.open_sessions(), 16);

    let mut dst = vec![0u8; 16 << 16];
    let layers = 4u64;
    let part = (64 << 10) / layers;
    for layer in 0..layers {
        let frags: Vec<Vec<RangeFrag>> = (0..16u64)
            .map(|i| {
                let at = dst.as_mut_ptr() as u64 + i * (64 << 10) + layer * part;
                vec![(at, part, layer * part), (at, 0, 0)]
            })
            .collect();
        let items: Vec<(&str, &[RangeFrag])> = ks
            .iter()
            .copied()
            .zip(frags.iter().map(Vec::as_slice))
            .collect();
        // SAFETY: every fragment lies inside `dst`, disjoint, unshared during the call.
        let got = unsafe { reader.get_session_ranges(&items) };
        assert_eq!(got, vec![part as i64; 16]);
    }
    for (i, v) in vals.iter().enumerate() {
        assert_eq!(&dst[i << 16..(i + 1) << 16], &v[..], "key {i}");
    }

    // Bad fragments fail their own key; keys without a session are -600.
    let base = dst.as_mut_ptr() as u64;
    let past: [RangeFrag; 1] = [(base, 2, (64 << 10) - 1)];
    let null: [RangeFrag; 1] = [(0, 8, 0)];
    let fine: [RangeFrag; 1] = [(base, 8, 8)];
    let items: Vec<(&str, &[RangeFrag])> = vec![
        (ks[0], &past),
        (ks[1], &null),
        (ks[2], &fine),
        ("s/none", &fine),
    ];
    // SAFETY: the usable destinations lie inside `dst`.
    let got = unsafe { reader.get_session_ranges(&items) };
    assert_eq!(got, vec![-600, -600, 8, -600]);
    assert_eq!(&dst[..8], &vals[2][8..16]);

    reader.get_session_end(&ks);
    assert_eq!(reader.open_sessions(), 0);
    // SAFETY: as above.
    let got = unsafe { reader.get_session_ranges(&[(ks[2], &fine[..])]) };
    assert_eq!(got, vec![code::INVALID_PARAMS as i64]);
    reader.get_session_end(&ks); // twice is fine
}

#[test]
fn a_session_keeps_its_version_and_replicas_describe_the_owner() {
    let m = TestMaster::start();
    let owner = m.client(32 << 20);
    let reader = m.client(0);
    let old = value(3, 1 << 20, 0);
    let new = value(3, 1 << 20, 0xa5);
    put(&owner, "keep", &old);
    assert_eq!(reader.get_session_start(&["keep"]), vec![code::OK]);
    put(&owner, "keep", &new);
    let mut dst = vec![0u8; 1 << 20];
    let frag = [(dst.as_mut_ptr() as u64, 1u64 << 20, 0u64)];
    // SAFETY: the fragment is `dst`, unshared during the call.
    let got = unsafe { reader.get_session_ranges(&[("keep", &frag[..])]) };
    assert_eq!(got, vec![1 << 20]);
    assert!(dst == old, "the session read the version it looked up");
    reader.get_session_end(&["keep"]);

    let reps = reader.replicas(&["keep", "missing", ""]);
    let r = reps[0].as_ref().expect("found");
    assert_eq!(r.len(), 1);
    assert_eq!(r[0].endpoint, owner.hostname());
    assert_eq!(r[0].len, 1 << 20);
    assert_eq!(reps[1], Err(code::OBJECT_NOT_FOUND));
    assert_eq!(reps[2], Err(code::INVALID_PARAMS));
    // The descriptor query holds nothing: a plain remove succeeds once the lease is over.
    std::thread::sleep(std::time::Duration::from_millis(400));
    assert_eq!(reader.remove(&["keep"], false), vec![code::OK]);
}

#[test]
fn readers_racing_the_end_of_their_session_never_see_freed_bytes() {
    let m = TestMaster::start();
    let owner = m.client(32 << 20);
    let reader = m.client(0);
    let v = value(9, 256 << 10, 7);
    put(&owner, "race", &v);
    for round in 0..20 {
        assert_eq!(reader.get_session_start(&["race"]), vec![code::OK]);
        std::thread::scope(|s| {
            let h = s.spawn(|| {
                let mut dst = vec![0u8; 256 << 10];
                let frag = [(dst.as_mut_ptr() as u64, 256u64 << 10, 0u64)];
                // SAFETY: the fragment is this thread's `dst`.
                let r = unsafe { reader.get_session_ranges(&[("race", &frag[..])]) };
                assert!(
                    r[0] == (256 << 10) && dst == v || r[0] == -600,
                    "round {round}: {r:?}"
                );
            });
            reader.get_session_end(&["race"]);
            h.join().unwrap();
        });
        // Whatever interleaving happened, the hold was ended exactly once: the upsert and a
        // plain remove after the lease go through.
        put(&owner, "race", &v);
    }
    std::thread::sleep(std::time::Duration::from_millis(400));
    assert_eq!(reader.remove(&["race"], false), vec![code::OK]);
}
