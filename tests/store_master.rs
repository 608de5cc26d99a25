//! The master's semantics, driven through `Master::handle` (no network): two-phase writes,
//! upsert cases, readers and retired buffers, leases, pins, eviction, discard of stale writes,
//! client expiry, validation.

use std::time::Duration;
use tidewire::store::master::{Master, MasterConfig};
use tidewire::store::proto::{
    GetResult, KeyVersion, PutItem, Reply, Request, StartResult, WriteConfig, code,
};

const SEG: u64 = 1 << 20;

fn master(cfg: MasterConfig) -> Master {
    let m = Master::new(cfg);
    for (id, name, base) in [(1, "a:1", 0x10_0000u64), (2, "b:1", 0x1000_0000)] {
        assert_eq!(
            m.handle(Request::Mount {
                client_id: id,
                name: name.into(),
                base,
                size: SEG,
            }),
            Some(Reply::Ok)
        );
    }
    m
}

fn start(m: &Master, key: &str, size: u64, upsert: bool, cfg: WriteConfig) -> StartResult {
    match m.handle(Request::PutStart {
        client_id: 1,
        upsert,
        items: vec![PutItem {
            key: key.into(),
            size,
        }],
        config: cfg,
    }) {
        Some(Reply::Started { mut results }) => results.remove(0),
        other => panic!("{other:?}"),
    }
}

fn codes(r: Option<Reply>) -> Vec<i32> {
    match r {
        Some(Reply::Codes { codes }) => codes,
        other => panic!("{other:?}"),
    }
}

fn end(m: &Master, key: &str, version: u64) -> i32 {
    codes(m.handle(Request::PutEnd {
        client_id: 1,
        items: vec![KeyVersion {
            key: key.into(),
            version,
        }],
    }))[0]
}

fn get(m: &Master, key: &str) -> GetResult {
    match m.handle(Request::Get {
        keys: vec![key.into()],
    }) {
        Some(Reply::Replicas { mut results, .. }) => results.remove(0),
        other => panic!("{other:?}"),
    }
}

fn done(m: &Master, key: &str, version: u64) {
    assert_eq!(
        m.handle(Request::ReadDone {
            items: vec![KeyVersion {
                key: key.into(),
                version,
            }],
        }),
        None
    );
}

fn put(m: &Master, key: &str, size: u64, upsert: bool) -> StartResult {
    let s = start(m, key, size, upsert, WriteConfig::default());
    assert_eq!(s.code, 0, "{key}");
    assert_eq!(end(m, key, s.version), 0);
    s
}

fn remove(m: &Master, key: &str, force: bool) -> i32 {
    codes(m.handle(Request::Remove {
        keys: vec![key.into()],
        force,
    }))[0]
}

#[test]
fn writes_are_invisible_until_end_and_upsert_cases() {
    let m = master(MasterConfig::default());
    let s = start(&m, "k", 1000, false, WriteConfig::default());
    assert_eq!(get(&m, "k").code, code::REPLICA_IS_NOT_READY);
    assert_eq!(end(&m, "k", s.version + 99), code::INVALID_WRITE);
    assert_eq!(end(&m, "k", s.version), 0);
    let g = get(&m, "k");
    assert_eq!((g.code, g.size), (0, 1000));
    done(&m, "k", g.version);
    // Create-only on an existing key.
    assert_eq!(
        start(&m, "k", 10, false, WriteConfig::default()).code,
        code::OBJECT_ALREADY_EXISTS
    );
    // Same size, no reader: in place (same buffer), unreadable until End.
    let s2 = start(&m, "k", 1000, true, WriteConfig::default());
    assert_eq!(s2.replicas, s.replicas);
    assert_eq!(get(&m, "k").code, code::REPLICA_IS_NOT_READY);
    assert_eq!(end(&m, "k", s2.version), 0);
    // Same size with a reader in flight: fresh buffers, old value readable until End.
    let g = get(&m, "k");
    let s3 = start(&m, "k", 1000, true, WriteConfig::default());
    assert_ne!(s3.replicas[0].addr, s.replicas[0].addr);
    assert_eq!(get(&m, "k").code, 0, "old version still readable");
    assert_eq!(end(&m, "k", s3.version), 0);
    // The reader's old buffer is retired, not reused, until its ReadDone.
    let other = start(&m, "other", 1000, false, WriteConfig::default());
    assert_ne!(other.replicas[0].addr, s.replicas[0].addr);
    done(&m, "k", g.version);
    // New size: reallocated.
    let s4 = start(&m, "k", 5000, true, WriteConfig::default());
    assert_eq!(s4.code, 0);
    assert_eq!(end(&m, "k", s4.version), 0);
    assert_eq!(get(&m, "k").size, 5000);
}

#[test]
fn revoke_keeps_the_old_value_and_preemption() {
    let m = master(MasterConfig::default());
    put(&m, "k", 100, false);
    let s = start(&m, "k", 200, true, WriteConfig::default());
    let r = codes(m.handle(Request::PutRevoke {
        client_id: 1,
        items: vec![KeyVersion {
            key: "k".into(),
            version: s.version,
        }],
    }));
    assert_eq!(r, vec![0]);
    assert_eq!(get(&m, "k").size, 100);
    // A write in progress is pre-empted by a newer one; the first can no longer end.
    let a = start(&m, "n", 64, true, WriteConfig::default());
    let b = start(&m, "n", 64, true, WriteConfig::default());
    assert_ne!(
        a.replicas[0].addr, b.replicas[0].addr,
        "pre-empted space is not reused"
    );
    assert_eq!(end(&m, "n", a.version), code::INVALID_WRITE);
    assert_eq!(end(&m, "n", b.version), 0);
}

#[test]
fn leases_pins_and_eviction() {
    let cfg = MasterConfig {
        lease_ttl: Duration::from_millis(200),
        ..MasterConfig::default()
    };
    let m = master(cfg);
    let g = {
        put(&m, "leased", 1000, false);
        get(&m, "leased")
    };
    done(&m, "leased", g.version);
    assert_eq!(remove(&m, "leased", false), code::OBJECT_HAS_LEASE);
    std::thread::sleep(Duration::from_millis(250));
    assert_eq!(remove(&m, "leased", false), 0);
    assert_eq!(remove(&m, "leased", false), code::OBJECT_NOT_FOUND);
    // Fill both segments (2 x 1 MiB) with 256 KiB objects: one hard-pinned, the rest plain.
    let pin = WriteConfig {
        hard_pin: true,
        ..WriteConfig::default()
    };
    let s = start(&m, "pinned", 256 << 10, true, pin);
    assert_eq!(end(&m, "pinned", s.version), 0);
    // 2 MiB of segments hold 8 objects of 256 KiB: the pinned one and o0..o6.
    for i in 0..7 {
        put(&m, &format!("o{i}"), 256 << 10, true);
    }
    // Full: the next write evicts the least recently used unpinned object (o0).
    let _ = get(&m, "o0"); // o0 becomes most recently used (and leased for 200 ms)
    put(&m, "o7", 256 << 10, true);
    assert_eq!(
        get(&m, "o1").code,
        code::OBJECT_NOT_FOUND,
        "o1 was the LRU one"
    );
    assert_eq!(get(&m, "o0").code, 0, "leased o0 survived");
    assert_eq!(
        get(&m, "pinned").code,
        0,
        "hard-pinned objects are never evicted"
    );
    // Everything leased or pinned now: no space, not a crash.
    for i in 2..8 {
        assert_eq!(get(&m, &format!("o{i}")).code, 0);
    }
    assert_eq!(
        start(&m, "more", 256 << 10, true, WriteConfig::default()).code,
        code::NO_AVAILABLE_HANDLE
    );
}

#[test]
fn validation_and_client_expiry() {
    let cfg = MasterConfig {
        client_ttl: Duration::from_millis(200),
        ..MasterConfig::default()
    };
    let m = master(cfg);
    let bad = m.handle(Request::Get {
        keys: vec!["x".repeat(5000)],
    });
    assert!(matches!(
        bad,
        Some(Reply::Error {
            code: code::INVALID_PARAMS,
            ..
        })
    ));
    assert_eq!(
        start(&m, "z", 0, true, WriteConfig::default()).code,
        code::INVALID_PARAMS
    );
    // Client 2 pings, client 1 goes silent: its segment and objects go after the TTL.
    let pref = WriteConfig {
        preferred_segments: vec!["a:1".into()],
        ..WriteConfig::default()
    };
    let s = start(&m, "on-a", 100, true, pref);
    assert_eq!(s.replicas[0].endpoint, "a:1");
    assert_eq!(end(&m, "on-a", s.version), 0);
    for _ in 0..6 {
        m.handle(Request::Ping { client_id: 2 });
        m.tick();
        std::thread::sleep(Duration::from_millis(60));
    }
    assert_eq!(get(&m, "on-a").code, code::OBJECT_NOT_FOUND);
    assert_eq!(
        m.handle(Request::Ping { client_id: 1 }),
        Some(Reply::Pong { remount: true })
    );
    assert_eq!(
        m.handle(Request::Ping { client_id: 2 }),
        Some(Reply::Pong { remount: false })
    );
}

#[test]
fn stale_writes_are_discarded() {
    let cfg = MasterConfig {
        put_start_discard_timeout: Duration::from_millis(50),
        ..MasterConfig::default()
    };
    let m = master(cfg);
    let s = start(&m, "crashed", 100, true, WriteConfig::default());
    std::thread::sleep(Duration::from_millis(80));
    m.sweep();
    assert_eq!(get(&m, "crashed").code, code::OBJECT_NOT_FOUND);
    assert_eq!(end(&m, "crashed", s.version), code::OBJECT_NOT_FOUND);
}

#[test]
fn soft_pins_and_replicas() {
    let cfg = MasterConfig {
        allow_evict_soft_pinned: false,
        ..MasterConfig::default()
    };
    let m = master(cfg);
    let two = WriteConfig {
        replica_num: 2,
        ..WriteConfig::default()
    };
    let s = start(&m, "r", 1000, true, two);
    assert_eq!(s.replicas.len(), 2);
    assert_ne!(s.replicas[0].endpoint, s.replicas[1].endpoint);
    assert_eq!(end(&m, "r", s.version), 0);
    assert_eq!(get(&m, "r").replicas.len(), 2);
    // Soft-pinned objects are not evicted when the flag forbids it; unpinned ones are.
    let soft = WriteConfig {
        soft_pin: true,
        ..WriteConfig::default()
    };
    let mut n = 0;
    loop {
        let st = start(&m, &format!("s{n}"), 256 << 10, true, soft.clone());
        if st.code != 0 {
            assert_eq!(st.code, code::NO_AVAILABLE_HANDLE);
            break;
        }
        assert_eq!(end(&m, &format!("s{n}"), st.version), 0);
        n += 1;
        assert!(n < 20);
    }
    assert!(n >= 6, "{n}");
    // Nothing was evictable: "r" holds a read lease (10 s), the rest are soft-pinned.
    assert_eq!(get(&m, "r").code, 0);
    for i in 0..n {
        assert_eq!(get(&m, &format!("s{i}")).code, 0);
    }
}
