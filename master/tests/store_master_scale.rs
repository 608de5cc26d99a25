//! The master with hundreds of thousands of objects, driven through `Master::handle`: mass
//! removal answers with the right count, in stretches or in one call, leaves leased objects
//! alone unless forced, and lets other calls through while it runs; a snapshot and a
//! failover keep every object.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use tidewire::store::proto::{KeyVersion, PutItem, Reply, Request, WriteConfig, code};
use tidewire_master::{Master, MasterConfig};

const N: usize = 300_000;
const BATCH: usize = 1024;

fn key(i: usize) -> String {
    // 64 hex characters, like the keys of a KV cache.
    format!(
        "{:016x}{:048x}",
        (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15),
        i
    )
}

fn filled(n: usize, cfg: MasterConfig) -> Master {
    let m = Master::new(cfg);
    assert_eq!(
        m.handle(Request::Mount {
            client_id: 1,
            name: "a:1".into(),
            base: 0x10_0000,
            size: (n as u64 * 64).max(1 << 20),
        }),
        Some(Reply::Ok)
    );
    fill(&m, 0, n);
    m
}

fn fill(m: &Master, from: usize, to: usize) {
    for lo in (from..to).step_by(BATCH) {
        let hi = (lo + BATCH).min(to);
        let items = (lo..hi).map(|i| PutItem {
            key: key(i),
            size: 64,
        });
        let Some(Reply::Started { results }) = m.handle(Request::PutStart {
            client_id: 1,
            upsert: false,
            items: items.collect(),
            config: WriteConfig::default(),
        }) else {
            panic!("put_start")
        };
        let done: Vec<KeyVersion> = results
            .iter()
            .zip(lo..hi)
            .map(|(r, i)| {
                assert_eq!(r.code, 0, "{}", key(i));
                KeyVersion {
                    key: key(i),
                    version: r.version,
                }
            })
            .collect();
        let Some(Reply::Codes { codes }) = m.handle(Request::PutEnd {
            client_id: 1,
            items: done,
        }) else {
            panic!("put_end")
        };
        assert!(codes.iter().all(|&c| c == 0));
    }
}

fn exist(m: &Master, keys: Vec<String>) -> Vec<i32> {
    match m.handle(Request::Exist { keys }) {
        Some(Reply::Codes { codes }) => codes,
        other => panic!("{other:?}"),
    }
}

/// A removal in stretches, as the client drives it: (total removed, stretches).
fn remove_in_stretches(m: &Master, make: impl Fn(Option<u64>) -> Request) -> (i64, usize) {
    let (mut total, mut stretches, mut from) = (0, 0, 0);
    loop {
        stretches += 1;
        match m.handle(make(Some(from))) {
            Some(Reply::Removed { count, next }) => {
                total += count;
                match next {
                    Some(n) => from = n,
                    None => return (total, stretches),
                }
            }
            other => panic!("{other:?}"),
        }
    }
}

#[test]
fn remove_all_answers_other_calls_while_it_runs_and_counts_right() {
    let m = Arc::new(filled(N, MasterConfig::default()));
    assert_eq!(m.object_count(), N);
    let running = Arc::new(AtomicBool::new(true));
    let (m2, r2) = (m.clone(), running.clone());
    let remover = std::thread::spawn(move || {
        let t = Instant::now();
        let r = m2.handle(Request::RemoveAll {
            force: true,
            from: None,
        });
        r2.store(false, Ordering::Release);
        (r, t.elapsed())
    });
    // Probe with a key that is never stored (its shard is walked like any other) while the
    // removal runs; count the answers that came back before it finished.
    let mut answered_during = 0u32;
    let mut worst = Duration::ZERO;
    while running.load(Ordering::Acquire) {
        let t = Instant::now();
        assert_eq!(exist(&m, vec!["never-stored".into()]), vec![0]);
        let took = t.elapsed();
        if running.load(Ordering::Acquire) {
            answered_during += 1;
            worst = worst.max(took);
        }
    }
    let (reply, took) = remover.join().unwrap();
    eprintln!(
        "remove_all of {N}: {took:?}; {answered_during} exist calls answered during it, the \
         slowest in {worst:?}"
    );
    assert_eq!(reply, Some(Reply::Count { count: N as i64 }));
    assert_eq!(m.object_count(), 0);
    assert_eq!(exist(&m, (0..BATCH).map(key).collect()), vec![0; BATCH]);
    // Generous bounds for a loaded machine: other calls are answered while the removal runs,
    // and none waits for anything near the whole removal.
    assert!(
        answered_during > 0 || took < Duration::from_millis(5),
        "no exist answered during a {took:?} remove_all"
    );
    assert!(
        worst < Duration::from_millis(500).max(took / 2),
        "an exist waited {worst:?} during a {took:?} remove_all"
    );
    // The space is all free again: the same objects fit once more.
    fill(&m, 0, N);
    assert_eq!(m.object_count(), N);
}

#[test]
fn stretches_add_up_and_leases_are_kept_unless_forced() {
    let cfg = MasterConfig {
        lease_ttl: Duration::from_secs(60),
        ..MasterConfig::default()
    };
    let m = filled(N, cfg);
    // Lease the first 1000 keys (exist grants a lease).
    let leased: Vec<String> = (0..1000).map(key).collect();
    assert_eq!(exist(&m, leased.clone()), vec![1; 1000]);
    let (n, stretches) = remove_in_stretches(&m, |from| Request::RemoveAll { force: false, from });
    assert_eq!(n, (N - 1000) as i64, "leased objects stay without force");
    assert!(stretches >= 1);
    assert_eq!(m.object_count(), 1000);
    assert_eq!(exist(&m, leased.clone()), vec![1; 1000]);
    let (n, _) = remove_in_stretches(&m, |from| Request::RemoveAll { force: true, from });
    assert_eq!(n, 1000);
    assert_eq!(m.object_count(), 0);
    // A cursor from nowhere is refused, not a crash.
    match m.handle(Request::RemoveAll {
        force: true,
        from: Some(u64::MAX),
    }) {
        Some(Reply::Error { code: c, .. }) => assert_eq!(c, code::INVALID_PARAMS),
        other => panic!("{other:?}"),
    }
    // A cursor past the end of a shard (or a stale one) just goes on with the next shard.
    match m.handle(Request::RemoveAll {
        force: true,
        from: Some(0xFFFF_FFFF),
    }) {
        Some(Reply::Removed { count: 0, .. }) => {}
        other => panic!("{other:?}"),
    }
}

#[test]
fn remove_by_regex_in_stretches_removes_exactly_the_matches() {
    let n = 100_000;
    let m = filled(n, MasterConfig::default());
    // About half the keys start with 0-7.
    let re = regex::Regex::new("^[0-7]").unwrap();
    let matching = (0..n).filter(|&i| re.is_match(&key(i))).count();
    assert!(matching > 0 && matching < n);
    let (removed, _) = remove_in_stretches(&m, |from| Request::RemoveByRegex {
        pattern: "^[0-7]".into(),
        force: true,
        from,
    });
    assert_eq!(removed, matching as i64);
    assert_eq!(m.object_count(), n - matching);
    let some: Vec<usize> = (0..2048).collect();
    let codes = exist(&m, some.iter().map(|&i| key(i)).collect());
    for (&i, c) in some.iter().zip(codes) {
        assert_eq!(c, i32::from(!re.is_match(&key(i))), "{}", key(i));
    }
    // Removing half the objects left the slabs compact or reusable: writing them again works.
    fill_matching(&m, &re, n);
    assert_eq!(m.object_count(), n);
}

fn fill_matching(m: &Master, re: &regex::Regex, n: usize) {
    let idx: Vec<usize> = (0..n).filter(|&i| re.is_match(&key(i))).collect();
    for chunk in idx.chunks(BATCH) {
        let Some(Reply::Started { results }) = m.handle(Request::PutStart {
            client_id: 1,
            upsert: false,
            items: chunk
                .iter()
                .map(|&i| PutItem {
                    key: key(i),
                    size: 64,
                })
                .collect(),
            config: WriteConfig::default(),
        }) else {
            panic!("put_start")
        };
        let items = results
            .iter()
            .zip(chunk)
            .map(|(r, &i)| KeyVersion {
                key: key(i),
                version: r.version,
            })
            .collect();
        m.handle(Request::PutEnd {
            client_id: 1,
            items,
        });
    }
}

#[test]
fn a_snapshot_of_many_objects_restores_every_one() {
    let n = 50_000;
    let m = filled(n, MasterConfig::default());
    let snap = m.snapshot_json();
    let next = Master::new(MasterConfig::default());
    let rec = tidewire::etcd::journal::Recovered {
        snapshot: Some(snap),
        records: Vec::new(),
        batches: 1,
    };
    assert_eq!(next.restore(&rec).unwrap(), (1, n));
    assert_eq!(exist(&next, (0..BATCH).map(key).collect()), vec![1; BATCH]);
    // Their space is taken on the new leader: a new object does not land on an old one.
    let Some(Reply::Replicas { results, .. }) = next.handle(Request::Get {
        client_id: 3,
        keys: vec![key(0), key(1)],
    }) else {
        panic!("get")
    };
    assert_ne!(results[0].replicas[0].addr, results[1].replicas[0].addr);
}
