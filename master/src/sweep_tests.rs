//! The sweep walks a shard's objects only while one of them has something for it to do (a
//! write to discard, a soft pin to end, a read hold to check): a master full of plain objects
//! is not walked once a second.

use super::*;
use std::time::Duration;
use tidewire::store::proto::{KeyVersion, PutItem, Reply, Request, WriteConfig};

const SHORT: Duration = Duration::from_millis(60);

fn master() -> Master {
    let m = Master::new(MasterConfig {
        put_start_discard_timeout: SHORT,
        lease_ttl: SHORT,
        soft_pin_ttl: SHORT,
        ..MasterConfig::default()
    });
    let mounted = m.handle(Request::Mount {
        client_id: 1,
        name: "a:1".into(),
        base: 1 << 20,
        size: 64 << 20,
    });
    assert_eq!(mounted, Some(Reply::Ok));
    m
}

/// Starts writes of `keys` (64 bytes each); returns their versions.
fn start(m: &Master, keys: &[String], soft_pin: bool) -> Vec<u64> {
    let r = m.handle(Request::PutStart {
        client_id: 1,
        upsert: false,
        items: keys
            .iter()
            .map(|k| PutItem {
                key: k.clone(),
                size: 64,
            })
            .collect(),
        config: WriteConfig {
            soft_pin,
            ..WriteConfig::default()
        },
    });
    let Some(Reply::Started { results }) = r else {
        panic!("{r:?}")
    };
    results.iter().map(|s| s.version).collect()
}

fn end(m: &Master, keys: &[String], versions: &[u64]) {
    let items = keys
        .iter()
        .zip(versions)
        .map(|(k, &version)| KeyVersion {
            key: k.clone(),
            version,
        })
        .collect();
    m.handle(Request::PutEnd {
        client_id: 1,
        items,
    });
}

/// Writes `keys` (both phases).
fn put(m: &Master, keys: &[String], soft_pin: bool) {
    let v = start(m, keys, soft_pin);
    end(m, keys, &v);
}

fn keys(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}{i:060}")).collect()
}

fn watched(m: &Master) -> usize {
    m.objs.watched_shards()
}

fn settle(m: &Master) {
    std::thread::sleep(SHORT * 2);
    m.sweep();
}

#[test]
fn plain_objects_leave_no_shard_to_walk() {
    let m = master();
    let plain = keys("p", 4096);
    let v = start(&m, &plain, false);
    assert!(watched(&m) > 500, "writes in flight are watched");
    end(&m, &plain, &v);
    settle(&m);
    assert_eq!(watched(&m), 0, "finished writes leave nothing to watch");
    assert_eq!(m.object_count(), 4096);

    // A write left unfinished is watched until the sweep discards it.
    let stale = keys("s", 1);
    start(&m, &stale, false);
    assert_eq!(watched(&m), 1);
    m.sweep();
    assert_eq!(watched(&m), 1, "not due yet: still watched");
    assert_eq!(m.object_count(), 4097);
    settle(&m);
    assert_eq!(m.object_count(), 4096, "the stale write was discarded");
    assert_eq!(watched(&m), 0);

    // A soft pin is watched until it expires.
    put(&m, &keys("q", 1), true);
    settle(&m);
    assert_eq!(watched(&m), 0, "the soft pin expired");
    assert_eq!(m.object_count(), 4097, "the object stays");
}

#[test]
fn a_read_hold_is_watched_until_it_ends() {
    let m = master();
    let k = keys("h", 1);
    put(&m, &k, false);
    settle(&m);
    assert_eq!(watched(&m), 0);
    let r = m.handle(Request::Get {
        client_id: 9,
        keys: k.clone(),
    });
    assert!(matches!(r, Some(Reply::Replicas { .. })), "{r:?}");
    assert_eq!(watched(&m), 1, "a read hold is watched");
    m.sweep();
    assert_eq!(watched(&m), 1, "within its lease it stays");
    // Client 9 never heartbeats: its hold ends with the lease, and the shard with it.
    settle(&m);
    assert_eq!(watched(&m), 0);
}

#[test]
fn a_sweep_walks_a_bounded_share_and_the_next_goes_on() {
    let m = master();
    put(&m, &keys("b", 4096), false);
    std::thread::sleep(SHORT * 2);
    let due = watched(&m);
    assert!(due > 500, "{due}");
    // About 4 records a shard: a budget of 1,000 walks about 250 shards a sweep.
    m.objs.set_sweep_records(1000);
    m.sweep();
    let left = watched(&m);
    assert!(
        left > 0 && left < due,
        "{due} due, {left} left after one sweep"
    );
    for _ in 0..8 {
        m.sweep();
    }
    assert_eq!(
        watched(&m),
        0,
        "later sweeps went on where the first stopped"
    );
}
