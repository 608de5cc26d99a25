//! The master's semantics, driven through `Master::handle` (no network): two-phase writes,
//! upsert cases, readers and retired buffers, leases, pins, eviction, discard of stale writes,
//! client expiry, validation. (Journal replay on a new leader: `store_journal.rs`.)

mod common;
use common::requests::*;
use std::time::Duration;
use tidewire::store::proto::{KeyVersion, Reply, Request, WriteConfig, code};
use tidewire_master::{Master, MasterConfig};

#[test]
fn writes_are_invisible_until_end_and_upsert_cases() {
    let m = master(MasterConfig::default());
    let s = start(&m, "k", 1000, false, WriteConfig::default());
    assert_eq!(get(&m, "k").code, code::REPLICA_IS_NOT_READY);
    assert_eq!(end(&m, "k", s.version + 99), code::INVALID_WRITE);
    assert_eq!(end(&m, "k", s.version), 0);
    // The same end again (a client resending after a late reply) is OK and changes nothing.
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

/// A counter of the master's metrics.
fn counted(m: &Master, name: &str) -> u64 {
    let text = m.metrics_text();
    let line = text
        .lines()
        .find(|l| l.starts_with(&format!("{name} ")))
        .unwrap();
    line.rsplit(' ').next().unwrap().parse().unwrap()
}

#[test]
fn validation_and_client_expiry() {
    let cfg = MasterConfig {
        client_ttl: Duration::from_millis(200),
        client_grace: Duration::ZERO,
        ..MasterConfig::default()
    };
    let m = master(cfg);
    let bad = m.handle(Request::Get {
        client_id: READER,
        keys: vec![String::new()],
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
    assert_eq!(counted(&m, "tidewire_master_clients_dropped_total"), 1);
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

/// Whether `key`'s buffers are free of read holds: an upsert of the same size rewrites them in
/// place only then (it is published again at once).
fn unread(m: &Master, key: &str, size: u64) -> bool {
    let before = get(m, key);
    done(m, key, before.version);
    let s = start(m, key, size, true, WriteConfig::default());
    assert_eq!(s.code, 0);
    assert_eq!(end(m, key, s.version), 0);
    s.replicas[0].addr == before.replicas[0].addr
}

#[test]
fn a_dead_readers_hold_ends_at_its_lease() {
    // Regression: a reader killed inside get_into never sent ReadDone, and its object stayed
    // unevictable (and never rewritten in place) forever.
    let m = master(MasterConfig {
        lease_ttl: Duration::from_millis(150),
        ..MasterConfig::default()
    });
    put(&m, "k", 1000, false);
    let g = get_as(&m, 7, "k"); // client 7 dies here: no ReadDone, no heartbeat
    assert_eq!(g.code, 0);
    m.sweep();
    assert!(
        !unread(&m, "k", 1000),
        "the hold protects the buffers during the lease"
    );
    std::thread::sleep(Duration::from_millis(200));
    m.sweep();
    assert!(
        unread(&m, "k", 1000),
        "the dead reader's hold ended with its lease"
    );
    // And such an object is evictable again: fill both segments past it.
    let g = get_as(&m, 7, "k");
    assert_eq!(g.code, 0);
    std::thread::sleep(Duration::from_millis(200));
    m.sweep();
    for i in 0..9 {
        put(&m, &format!("fill{i}"), 256 << 10, true);
    }
    assert_eq!(get(&m, "k").code, code::OBJECT_NOT_FOUND, "k was evicted");
}

#[test]
fn a_live_readers_hold_outlasts_its_lease_up_to_the_cap() {
    let m = master(MasterConfig {
        lease_ttl: Duration::from_millis(100),
        read_hold_max: Duration::from_millis(700),
        ..MasterConfig::default()
    });
    put(&m, "k", 1000, false);
    let g = get_as(&m, 7, "k");
    // Reader 7 keeps its heartbeats while its (slow) read goes on past the lease.
    for _ in 0..4 {
        ping(&m, 7);
        std::thread::sleep(Duration::from_millis(60));
        m.sweep();
    }
    assert!(
        !unread(&m, "k", 1000),
        "a heartbeating reader keeps its hold past the lease"
    );
    // ... but not past the cap.
    for _ in 0..8 {
        ping(&m, 7);
        std::thread::sleep(Duration::from_millis(60));
    }
    m.sweep();
    assert!(unread(&m, "k", 1000), "the hold ended at read_hold_max");
    // A hold ended by ReadDone of its own client only: another client's ReadDone is ignored.
    let g2 = get_as(&m, 7, "k");
    assert_eq!(
        m.handle(Request::ReadDone {
            client_id: 8,
            items: vec![KeyVersion {
                key: "k".into(),
                version: g2.version,
            }],
        }),
        None
    );
    assert!(
        !unread(&m, "k", 1000),
        "client 8 cannot end client 7's hold"
    );
    let _ = g;
}

#[test]
fn a_preempted_writers_report_frees_its_space_at_once() {
    // Regression: concurrent upserts of one key pre-empt each other; the loser's End/Revoke got
    // -601 and its buffers stayed allocated for put_start_release_timeout (600 s).
    let m = master(MasterConfig::default());
    // Two 1 MiB segments: 600 KiB fits once per segment.
    let a = start(&m, "hot", 600 << 10, true, WriteConfig::default());
    let b = start(&m, "hot", 600 << 10, true, WriteConfig::default());
    assert_eq!((a.code, b.code), (0, 0));
    assert_eq!(
        start(&m, "third", 600 << 10, true, WriteConfig::default()).code,
        code::NO_AVAILABLE_HANDLE,
        "both segments hold one write each"
    );
    assert_eq!(
        end(&m, "hot", a.version),
        code::INVALID_WRITE,
        "a was pre-empted"
    );
    let c = start(&m, "third", 600 << 10, true, WriteConfig::default());
    assert_eq!(c.code, 0, "a's space came back when its writer reported");
    assert_eq!(end(&m, "hot", b.version), 0);
    assert_eq!(end(&m, "third", c.version), 0);
    // Same for a revoke of a pre-empted write, and only its own writer can free it.
    let m = master(MasterConfig::default());
    let d = start(&m, "n", 600 << 10, true, WriteConfig::default());
    let e = start(&m, "n", 600 << 10, true, WriteConfig::default());
    assert_eq!((d.code, e.code), (0, 0));
    let other_writer = codes(m.handle(Request::PutRevoke {
        client_id: 2,
        items: vec![KeyVersion {
            key: "n".into(),
            version: d.version,
        }],
    }));
    assert_eq!(other_writer, vec![code::INVALID_WRITE]);
    assert_eq!(
        start(&m, "x", 600 << 10, true, WriteConfig::default()).code,
        code::NO_AVAILABLE_HANDLE,
        "another client's report does not free d"
    );
    assert_eq!(revoke(&m, "n", d.version), code::INVALID_WRITE);
    assert_eq!(
        start(&m, "x", 600 << 10, true, WriteConfig::default()).code,
        0
    );
    assert_eq!(end(&m, "n", e.version), 0);
}

#[test]
fn a_reported_segment_takes_no_placements_until_its_owner_pings() {
    let m = master(MasterConfig::default());
    let on_a = WriteConfig {
        preferred_segments: vec!["a:1".into()],
        ..WriteConfig::default()
    };
    assert_eq!(
        start(&m, "p0", 10, true, on_a.clone()).replicas[0].endpoint,
        "a:1"
    );
    assert_eq!(
        m.handle(Request::ReportFailed {
            client_id: 2,
            segments: vec!["a:1".into(), "unknown:9".into()],
        }),
        None
    );
    for i in 0..20 {
        let s = start(&m, &format!("p{i}"), 10, true, on_a.clone());
        assert_eq!(
            s.replicas[0].endpoint, "b:1",
            "placed on the failed segment"
        );
        assert_eq!(s.replicas.len(), 1);
    }
    ping(&m, 1);
    assert_eq!(start(&m, "q", 10, true, on_a).replicas[0].endpoint, "a:1");
}

#[test]
fn a_client_back_within_the_grace_keeps_its_objects() {
    // Mooncake drops a client's segments at the first missed TTL; here a client that pings
    // again within client_ttl + client_grace keeps them (no new placements meanwhile).
    let m = master(MasterConfig {
        client_ttl: Duration::from_millis(100),
        client_grace: Duration::from_millis(400),
        ..MasterConfig::default()
    });
    let on_a = WriteConfig {
        preferred_segments: vec!["a:1".into()],
        ..WriteConfig::default()
    };
    let s = start(&m, "on-a", 100, true, on_a.clone());
    assert_eq!(end(&m, "on-a", s.version), 0);
    for _ in 0..4 {
        ping(&m, 2);
        m.tick();
        std::thread::sleep(Duration::from_millis(60));
    }
    assert_eq!(get(&m, "on-a").code, 0, "kept during the grace");
    assert_eq!(counted(&m, "tidewire_master_clients_suspended_total"), 1);
    assert_eq!(counted(&m, "tidewire_master_clients_dropped_total"), 0);
    let st = start(&m, "new", 100, true, on_a.clone());
    assert_eq!(
        st.replicas[0].endpoint, "b:1",
        "no placements on a suspended segment"
    );
    assert_eq!(end(&m, "new", st.version), 0);
    assert_eq!(
        m.handle(Request::Ping { client_id: 1 }),
        Some(Reply::Pong { remount: false }),
        "back within the grace: nothing to re-mount"
    );
    assert_eq!(
        start(&m, "again", 100, true, on_a).replicas[0].endpoint,
        "a:1"
    );
    // Silent past TTL + grace: dropped with its objects.
    for _ in 0..10 {
        ping(&m, 2);
        m.tick();
        std::thread::sleep(Duration::from_millis(60));
    }
    assert_eq!(get(&m, "on-a").code, code::OBJECT_NOT_FOUND);
    assert_eq!(counted(&m, "tidewire_master_clients_dropped_total"), 1);
    assert_eq!(
        m.handle(Request::Ping { client_id: 1 }),
        Some(Reply::Pong { remount: true })
    );
}

#[test]
fn a_restarted_owner_takes_over_its_suspended_segment_name() {
    let m = master(MasterConfig {
        client_ttl: Duration::from_millis(50),
        client_grace: Duration::from_secs(60),
        ..MasterConfig::default()
    });
    put(&m, "k", 100, true);
    let mount = |client_id| {
        m.handle(Request::Mount {
            client_id,
            name: "a:1".into(),
            base: 0x5000_0000,
            size: SEG,
        })
    };
    assert!(
        matches!(
            mount(9),
            Some(Reply::Error {
                code: code::SEGMENT_ALREADY_EXISTS,
                ..
            })
        ),
        "a live owner's name is refused"
    );
    std::thread::sleep(Duration::from_millis(80));
    ping(&m, 2);
    m.tick();
    assert_eq!(
        mount(9),
        Some(Reply::Ok),
        "the silent owner's name is taken over"
    );
}

/// `Master::exist` (the master server's path for `Exist`, its keys borrowed from the frame)
/// answers as `handle` does for `Request::Exist`: per key 1 or 0 and a lease, the same bounds
/// refused with `INVALID_PARAMS`, and a standby's refusal.
#[test]
fn borrowed_exist_answers_as_the_request() {
    let m = master(MasterConfig::default());
    put(&m, "here", 100, false);
    let keys = ["here", "absent"];
    let owned = m.handle(Request::Exist {
        keys: keys.iter().map(|k| k.to_string()).collect(),
    });
    assert_eq!(owned, Some(Reply::Codes { codes: vec![1, 0] }));
    assert_eq!(Some(m.exist(&keys)), owned);
    assert_eq!(
        remove(&m, "here", false),
        code::OBJECT_HAS_LEASE,
        "the borrowed query granted a lease too"
    );
    for bad in [vec![""], vec!["k"; 4097]] {
        assert!(
            matches!(
                m.exist(&bad),
                Reply::Error {
                    code: code::INVALID_PARAMS,
                    ..
                }
            ),
            "{} keys",
            bad.len()
        );
    }
    m.set_standby(Some("standby".into()));
    assert!(matches!(
        m.exist(&keys),
        Reply::Error {
            code: code::RPC_FAIL,
            ..
        }
    ));
}
