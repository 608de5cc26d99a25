//! The Store from Rust: a real `tidewire-master` process and clients in this process (two
//! engines, so bytes cross engines), covering put/upsert/get/remove semantics, leases, sizes
//! above the 16 MiB slice, a full segment, bad input, keys of their full length (NUL bytes, the
//! 1 MiB limit, batches of long keys), and a master restart.

mod common;
use common::master::spawn_master;
use std::process::Child;
use std::time::{Duration, Instant};
use tidewire::store::{StoreClient, StoreConfig, WriteConfig, code, proto};

struct MasterProc {
    child: Child,
    port: u16,
    http_port: Option<u16>,
    metrics_port: u16,
}

impl MasterProc {
    fn start(extra: &[&str], port: u16) -> MasterProc {
        let mut args = vec![
            "--rpc_address=127.0.0.1".to_string(),
            format!("--rpc_port={port}"),
            "--metrics_port=0".to_string(),
        ];
        args.extend(extra.iter().map(|s| s.to_string()));
        let (child, v) = spawn_master(&args);
        MasterProc {
            child,
            port: v["rpc_port"].as_u64().unwrap() as u16,
            http_port: v["http_metadata_port"].as_u64().map(|p| p as u16),
            metrics_port: v["metrics_port"].as_u64().unwrap() as u16,
        }
    }

    fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }
}

impl Drop for MasterProc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn client(m: &MasterProc, seg: u64, metadata: &str) -> StoreClient {
    StoreClient::setup(&StoreConfig {
        local_hostname: "127.0.0.1".into(),
        metadata_server: metadata.into(),
        global_segment_size: seg,
        local_buffer_size: 64 << 20,
        protocol: "tcp".into(),
        device_name: String::new(),
        master_server_address: m.addr(),
        disk: None,
    })
    .expect("setup")
}

fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

fn put(c: &StoreClient, key: &str, v: &[u8], upsert: bool) -> i32 {
    c.put_values(&[(key, &[v])], upsert, &WriteConfig::default())[0]
}

fn get(c: &StoreClient, key: &str) -> Result<Vec<u8>, i32> {
    c.get_values(&[key])
        .pop()
        .unwrap()
        .map(|f| f.bytes().to_vec())
}

#[test]
fn put_get_upsert_remove_across_engines() {
    let m = MasterProc::start(&["--default_kv_lease_ttl=300"], 0);
    // The writer has no segment: every byte goes to the reader's segment through the engine.
    let server = client(&m, 256 << 20, "P2PHANDSHAKE");
    let writer = client(&m, 0, "P2PHANDSHAKE");
    let v1 = pattern(1 << 20, 1);
    assert_eq!(put(&writer, "k", &v1, false), 0);
    assert_eq!(get(&server, "k").unwrap(), v1);
    assert_eq!(get(&writer, "k").unwrap(), v1);
    // Create-only put of an existing key: success, old value kept.
    assert_eq!(put(&writer, "k", &pattern(1 << 20, 2), false), 0);
    assert_eq!(get(&writer, "k").unwrap(), v1);
    // Upsert: same size (in place), larger, smaller.
    for (n, seed) in [(1 << 20, 3u8), (3 << 20, 4), (1000, 5)] {
        let v = pattern(n, seed);
        assert_eq!(put(&writer, "k", &v, true), 0);
        assert_eq!(get(&writer, "k").unwrap(), v, "upsert to {n} bytes");
        assert_eq!(writer.sizes(&["k"])[0], Ok(n as u64));
    }
    // Misses and bad keys.
    assert_eq!(get(&writer, "missing").unwrap_err(), code::OBJECT_NOT_FOUND);
    assert_eq!(writer.sizes(&["missing"])[0], Err(code::OBJECT_NOT_FOUND));
    let long = "x".repeat(proto::MAX_KEY_LEN + 1);
    assert_eq!(put(&writer, &long, b"v", true), code::INVALID_PARAMS);
    assert_eq!(put(&writer, "", b"v", true), code::INVALID_PARAMS);
    assert_eq!(put(&writer, "empty", b"", true), code::INVALID_PARAMS);
    assert_eq!(
        writer.exist(&["k", "missing", &long]),
        vec![1, 0, code::INVALID_PARAMS]
    );
    // Leases: a fresh read holds the key against non-forced removal.
    get(&writer, "k").unwrap();
    assert_eq!(writer.remove(&["k"], false)[0], code::OBJECT_HAS_LEASE);
    std::thread::sleep(Duration::from_millis(400));
    assert_eq!(writer.remove(&["k"], false)[0], 0);
    assert_eq!(writer.remove(&["k"], false)[0], code::OBJECT_NOT_FOUND);
    // Regex and remove-all count what they removed.
    for k in ["re@1", "re@2", "other"] {
        assert_eq!(put(&writer, k, b"abc", true), 0);
    }
    assert_eq!(writer.remove_by_regex("^re@.*", true), 2);
    assert_eq!(
        writer.remove_by_regex("(", true),
        code::INVALID_PARAMS as i64
    );
    assert_eq!(writer.remove_all(true), 1);
}

#[test]
fn keys_are_byte_strings_of_their_full_length() {
    let m = MasterProc::start(&["--default_kv_lease_ttl=300"], 0);
    let server = client(&m, 256 << 20, "P2PHANDSHAKE");
    let c = client(&m, 0, "P2PHANDSHAKE");
    let wcfg = WriteConfig::default();
    // Keys that differ after a NUL are two objects; the part before the NUL is a third key.
    assert_eq!(put(&c, "k\0a", b"AAAA", false), 0);
    assert_eq!(put(&c, "k\0b", b"BBBBBB", false), 0);
    assert_eq!(get(&server, "k\0a").unwrap(), b"AAAA");
    assert_eq!(get(&c, "k\0b").unwrap(), b"BBBBBB");
    assert_eq!(get(&c, "k").unwrap_err(), code::OBJECT_NOT_FOUND);
    assert_eq!(put(&c, "k\0b", b"C", true), 0);
    assert_eq!(
        get(&c, "k\0a").unwrap(),
        b"AAAA",
        "the upsert of k\\0b left k\\0a alone"
    );
    assert_eq!(
        c.sizes(&["k\0a", "k\0b", "k"]),
        vec![Ok(4), Ok(1), Err(code::OBJECT_NOT_FOUND)]
    );
    assert_eq!(c.exist(&["k\0a", "k\0b", "k"]), vec![1, 1, 0]);
    let mut buf = vec![0u8; 16];
    let addr = buf.as_mut_ptr() as u64;
    // SAFETY: `buf` is writable for 16 bytes and unshared during the calls.
    let got = unsafe { c.get_ranges(&[("k\0a", addr, 1, 2), ("k\0b", addr + 8, 0, 1)]) };
    assert_eq!(got, vec![2, 1]);
    assert_eq!((&buf[..2], buf[8]), (&b"AA"[..], b'C'));
    assert_eq!(
        c.remove(&["k\0a", "k"], true),
        vec![0, code::OBJECT_NOT_FOUND]
    );
    assert_eq!(c.exist(&["k\0a", "k\0b"]), vec![0, 1]);
    // The longest key works; one byte more is refused by every call alike.
    let longest = "x\0".repeat(proto::MAX_KEY_LEN / 2);
    let over = longest.clone() + "x";
    assert_eq!(put(&c, &longest, b"L", false), 0);
    assert_eq!(get(&c, &longest).unwrap(), b"L");
    assert_eq!(put(&c, &over, b"L", false), code::INVALID_PARAMS);
    assert_eq!(get(&c, &over).unwrap_err(), code::INVALID_PARAMS);
    assert_eq!(c.sizes(&[&over]), vec![Err(code::INVALID_PARAMS)]);
    assert_eq!(c.exist(&[&longest, &over]), vec![1, code::INVALID_PARAMS]);
    assert_eq!(
        c.remove(&[&over, &longest], true),
        vec![code::INVALID_PARAMS, 0]
    );
    // 40 keys of 1 MiB are more than one 32 MiB master frame: every call splits the batch by
    // key bytes, and each key keeps its own value.
    let keys: Vec<String> = (0..40)
        .map(|i| format!("{i:07}").repeat(proto::MAX_KEY_LEN / 7) + "\0")
        .collect();
    let refs: Vec<&str> = keys.iter().map(String::as_str).collect();
    let vals: Vec<Vec<u8>> = (0..40).map(|i| pattern(100 + i, i as u8)).collect();
    let slices: Vec<&[u8]> = vals.iter().map(Vec::as_slice).collect();
    let items: Vec<(&str, &[&[u8]])> = refs
        .iter()
        .zip(&slices)
        .map(|(k, v)| (*k, std::slice::from_ref(v)))
        .collect();
    assert_eq!(c.put_values(&items, false, &wcfg), vec![0; 40]);
    let back: Vec<Vec<u8>> = c
        .get_values(&refs)
        .into_iter()
        .map(|r| r.unwrap().bytes().to_vec())
        .collect();
    assert_eq!(back, vals);
    assert_eq!(c.exist(&refs), vec![1; 40]);
    assert_eq!(
        c.sizes(&refs),
        vals.iter().map(|v| Ok(v.len() as u64)).collect::<Vec<_>>()
    );
    assert_eq!(c.remove(&refs, true), vec![0; 40]);
}

#[test]
fn large_values_full_segment_and_zero_copy() {
    let m = MasterProc::start(
        &[
            "--eviction_high_watermark_ratio=1.0",
            "--eviction_ratio=0.0",
        ],
        0,
    );
    let server = client(&m, 96 << 20, "P2PHANDSHAKE");
    let writer = client(&m, 0, "P2PHANDSHAKE");
    // 40 MiB crosses several 16 MiB slices; written and read zero-copy from registered memory.
    let big = pattern(40 << 20, 9);
    writer
        .engine()
        .register_memory(big.as_ptr() as u64, big.len() as u64, "cpu:0", false)
        .unwrap();
    let hard = WriteConfig {
        hard_pin: true,
        ..WriteConfig::default()
    };
    // SAFETY: `big` is alive and unchanged during the call.
    let r = unsafe {
        writer.put_from(
            &[("big", big.as_ptr() as u64, big.len() as u64)],
            true,
            &hard,
        )
    };
    assert_eq!(r, vec![0]);
    let mut back = vec![0u8; 40 << 20];
    // SAFETY: `back` is writable and unshared.
    let r = unsafe { writer.get_into(&[("big", back.as_mut_ptr() as u64, back.len() as u64)]) };
    assert_eq!(r, vec![40 << 20]);
    assert!(back == big);
    // A buffer too small is -600; an absent key -704 in the same batch.
    let mut small = vec![0u8; 10];
    // SAFETY: as above.
    let r = unsafe {
        writer.get_into(&[
            ("big", small.as_mut_ptr() as u64, 10),
            ("nope", small.as_mut_ptr() as u64, 10),
            ("big", 0, 10),
        ])
    };
    assert_eq!(
        r,
        vec![
            code::INVALID_PARAMS as i64,
            code::OBJECT_NOT_FOUND as i64,
            code::INVALID_PARAMS as i64
        ]
    );
    // The segment (96 MiB) cannot take another 60 MiB: -200, not a crash; nothing evictable.
    let huge = pattern(60 << 20, 1);
    assert_eq!(put(&writer, "huge", &huge, true), code::NO_AVAILABLE_HANDLE);
    // Ranged reads.
    let mut frag = vec![0u8; 100];
    // SAFETY: `frag` is writable and unshared.
    let r = unsafe {
        writer.get_ranges(&[
            ("big", frag.as_mut_ptr() as u64, 1000, 50),
            ("big", frag.as_mut_ptr() as u64 + 50, (40 << 20) - 50, 50),
            ("big", frag.as_mut_ptr() as u64, (40 << 20) - 10, 50),
            ("nope", frag.as_mut_ptr() as u64, 0, 1),
        ])
    };
    assert_eq!(
        r,
        vec![
            50,
            50,
            code::INVALID_PARAMS as i64,
            code::OBJECT_NOT_FOUND as i64
        ]
    );
    assert_eq!(&frag[..50], &big[1000..1050]);
    assert_eq!(&frag[50..], &big[(40 << 20) - 50..]);
    drop(server);
    // The server's segment is gone: its objects went with it.
    assert_eq!(writer.sizes(&["big"])[0], Err(code::OBJECT_NOT_FOUND));
}

#[test]
fn master_restart_reports_errors_then_recovers() {
    let m = MasterProc::start(&[], common::restartable_port());
    let port = m.port;
    let c = client(&m, 64 << 20, "P2PHANDSHAKE");
    assert_eq!(put(&c, "a", b"hello", true), 0);
    drop(m);
    let t = Instant::now();
    let r = put(&c, "b", b"hello", true);
    assert!(r == code::RPC_FAIL || r == code::RPC_TIMEOUT, "got {r}");
    assert_eq!(get(&c, "a").unwrap_err(), code::RPC_FAIL);
    assert_eq!(c.health_check(), 2);
    assert!(t.elapsed() < Duration::from_secs(10), "errors come fast");
    let _m2 = MasterProc::start(&[], port);
    // The heartbeat re-mounts the segment within about a second.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let r = put(&c, "b", b"again", true);
        eprintln!("retry: {r}");
        if r == 0 {
            break;
        }
        assert!(Instant::now() < deadline, "client did not recover");
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(get(&c, "b").unwrap(), b"again");
    assert_eq!(c.health_check(), 0);
}

#[test]
fn http_metadata_mode_and_metrics() {
    let m = MasterProc::start(
        &[
            "--enable_http_metadata_server=true",
            "--http_metadata_server_host=127.0.0.1",
            "--http_metadata_server_port=0",
        ],
        0,
    );
    let url = format!("http://127.0.0.1:{}/metadata", m.http_port.unwrap());
    let a = client(&m, 32 << 20, &url);
    let b = client(&m, 0, &url);
    assert_ne!(a.hostname(), b.hostname());
    let v = pattern(3 << 20, 7);
    assert_eq!(put(&b, "hk", &v, true), 0);
    assert_eq!(get(&b, "hk").unwrap(), v);
    let mut s = std::net::TcpStream::connect(("127.0.0.1", m.metrics_port)).unwrap();
    use std::io::{Read, Write};
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    assert!(text.contains("tidewire_master_objects 1"), "{text}");
    assert!(text.contains("tidewire_master_segments 1"), "{text}");
    assert!(text.contains("op=\"upsert_start\""), "{text}");
}

#[test]
fn master_rejects_malformed_frames_and_keeps_serving() {
    use std::io::{Read, Write};
    use tidewire::store::proto::{self, Reply, Request};
    let m = MasterProc::start(&[], 0);
    let read_reply = |s: &mut std::net::TcpStream| -> Option<Reply> {
        let (_, body) = proto::read_frame(s).ok()?;
        proto::decode::<Reply>(&body).ok()
    };
    let connect = || {
        let s = std::net::TcpStream::connect(("127.0.0.1", m.port)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        s
    };
    // Bad magic: an error reply, then the connection closes.
    let mut s = connect();
    s.write_all(b"XXXX\x01\x00\x00\x00\x02\x00\x00\x00{}")
        .unwrap();
    assert!(matches!(
        read_reply(&mut s),
        Some(Reply::Error {
            code: code::INVALID_PARAMS,
            ..
        })
    ));
    let mut rest = Vec::new();
    assert_eq!(s.read_to_end(&mut rest).unwrap_or(0), 0);
    // A future protocol version, and version 1 (JSON bodies), are refused with a message
    // naming the version.
    for (version, body) in [(9u8, &b"{}"[..]), (1, br#"{"Ping":{"client_id":7}}"#)] {
        let mut s = connect();
        let mut frame = b"TWMS".to_vec();
        frame.extend_from_slice(&[version, 0, 0, 0]);
        frame.extend_from_slice(&(body.len() as u32).to_le_bytes());
        frame.extend_from_slice(body);
        s.write_all(&frame).unwrap();
        match read_reply(&mut s) {
            Some(Reply::Error { message, .. }) => {
                assert!(message.contains(&format!("version {version}")), "{message}")
            }
            other => panic!("{other:?}"),
        }
    }
    // An oversized length is refused before any allocation.
    let mut s = connect();
    s.write_all(b"TWMS\x02\x00\x00\x00\xff\xff\xff\xff")
        .unwrap();
    assert!(matches!(read_reply(&mut s), Some(Reply::Error { .. })));
    // A junk body and an out-of-bounds request get errors; the same connection keeps working.
    let mut s = connect();
    proto::write_frame(&mut s, 0, b"\xff\xff\xff\xff\xff\xff").unwrap();
    assert!(matches!(
        read_reply(&mut s),
        Some(Reply::Error {
            code: code::INVALID_PARAMS,
            ..
        })
    ));
    let too_many = Request::Exist {
        keys: vec!["k".into(); proto::MAX_BATCH + 1],
    };
    proto::write_frame(&mut s, 0, &proto::encode(&too_many)).unwrap();
    assert!(matches!(
        read_reply(&mut s),
        Some(Reply::Error {
            code: code::INVALID_PARAMS,
            ..
        })
    ));
    proto::write_frame(&mut s, 0, &proto::encode(&Request::Ping { client_id: 7 })).unwrap();
    assert_eq!(read_reply(&mut s), Some(Reply::Pong { remount: true }));
    // A truncated frame followed by a close does not disturb other clients.
    let mut t = connect();
    t.write_all(b"TWMS\x02\x00\x00\x00\x10\x00\x00\x00\x00")
        .unwrap();
    drop(t);
    proto::write_frame(&mut s, 0, &proto::encode(&Request::Ping { client_id: 7 })).unwrap();
    assert_eq!(read_reply(&mut s), Some(Reply::Pong { remount: true }));
}
