//! The leader's journal on a real etcd: batches within etcd's request limit, snapshots in chunks
//! that replace the log they cover (garbage deleted), a deposed writer fenced off, a successor
//! reading back exactly what was written, concurrent committers sharing group commits while
//! snapshots are taken.

mod common;
use common::etcd::Etcd;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::Mutex;
use std::time::Duration;
use tidewire::ErrorKind;
use tidewire::etcd::EtcdClient;
use tidewire::etcd::journal::{Fence, Journal, JournalTail, MAX_RECORD, MAX_VALUE, recover};
use tidewire::etcd::journal_writer::{CompactPolicy, JournalWriter};

fn setup(tag: &str) -> (Etcd, Arc<EtcdClient>, String, Fence) {
    let etcd = Etcd::single();
    let c = Arc::new(EtcdClient::new(&etcd.endpoints(), Duration::from_secs(3)).unwrap());
    let key = format!("tw-test/{tag}/leader");
    let out = c.put_if_absent(key.as_bytes(), b"me:1", 0).unwrap();
    assert!(out.succeeded);
    let fence = Fence {
        key,
        create_revision: out.revision,
    };
    (etcd, c, format!("tw-test/{tag}/journal/"), fence)
}

fn record(i: usize) -> String {
    // JSON with quotes, so escaping inside a batch is exercised.
    format!(
        r#"{{"op":"put","key":"k{i:06}","pad":"{}"}}"#,
        "x".repeat(i % 700)
    )
}

fn keys_under(c: &EtcdClient, prefix: &str) -> Vec<String> {
    c.get_prefix(prefix.as_bytes())
        .unwrap()
        .kvs
        .iter()
        .map(|kv| String::from_utf8_lossy(&kv.key).into_owned())
        .collect()
}

#[test]
fn appends_snapshots_and_reads_back() {
    let (_etcd, c, prefix, fence) = setup("roundtrip");
    let (mut j, rec) = Journal::open(c.clone(), &prefix, fence.clone()).unwrap();
    assert!(rec.snapshot.is_none() && rec.records.is_empty());
    let first: Vec<String> = (0..4000).map(record).collect();
    let total: usize = first.iter().map(|r| r.len()).sum();
    assert!(total > 2 * MAX_VALUE, "spans several batches");
    j.append(&first[..10]).unwrap();
    j.append(&first[10..]).unwrap();
    let (batches, _) = j.backlog();
    assert!(batches >= 4, "{batches} batches");
    let (r, _) = recover(&c, &prefix).unwrap();
    assert_eq!(r.records, first);
    // A snapshot bigger than one request replaces the log.
    let snapshot = "é".repeat(MAX_VALUE); // 2 bytes per char: exactly two chunks
    j.compact(&snapshot).unwrap();
    assert_eq!(j.backlog(), (0, 0));
    let second: Vec<String> = (5000..5100).map(record).collect();
    j.append(&second).unwrap();
    let (r, _) = recover(&c, &prefix).unwrap();
    assert_eq!(r.snapshot.as_deref(), Some(snapshot.as_str()));
    assert_eq!(r.records, second);
    let keys = keys_under(&c, &prefix);
    let logs = keys.iter().filter(|k| k.contains("/log/")).count();
    let chunks = keys.iter().filter(|k| k.contains("/snap/")).count();
    assert_eq!(logs, 1, "only the batch after the snapshot: {keys:?}");
    assert_eq!(chunks, 2, "{keys:?}");
    // A second compaction removes the first snapshot.
    j.compact("{}").unwrap();
    let keys = keys_under(&c, &prefix);
    assert_eq!(keys.len(), 2, "head and one chunk: {keys:?}");
    let (r, _) = recover(&c, &prefix).unwrap();
    assert_eq!(r.snapshot.as_deref(), Some("{}"));
    assert!(r.records.is_empty());
    // A successor continues after what it read.
    drop(j);
    let (mut j2, r) = Journal::open(c.clone(), &prefix, fence).unwrap();
    assert_eq!(r.snapshot.as_deref(), Some("{}"));
    j2.append(&["after".to_string()]).unwrap();
    assert_eq!(recover(&c, &prefix).unwrap().0.records, vec!["after"]);
}

#[test]
fn a_deposed_writer_is_fenced_off() {
    let (_etcd, c, prefix, fence) = setup("fence");
    let (mut old, _) = Journal::open(c.clone(), &prefix, fence.clone()).unwrap();
    old.append(&["a".to_string()]).unwrap();
    // Leadership changes hands: the key is recreated with a new create revision.
    c.delete(fence.key.as_bytes()).unwrap();
    let won = c.put_if_absent(fence.key.as_bytes(), b"new:2", 0).unwrap();
    let new_fence = Fence {
        key: fence.key.clone(),
        create_revision: won.revision,
    };
    let err = old.append(&["b".to_string()]).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Metadata);
    assert!(err.message().contains("no longer the leader"), "{err}");
    assert!(old.compact("{}").is_err());
    let (mut new, r) = Journal::open(c.clone(), &prefix, new_fence).unwrap();
    assert_eq!(r.records, vec!["a"]);
    new.append(&["c".to_string()]).unwrap();
    assert_eq!(recover(&c, &prefix).unwrap().0.records, vec!["a", "c"]);
}

#[test]
fn bounds_are_enforced() {
    let (_etcd, c, prefix, fence) = setup("bounds");
    let (mut j, _) = Journal::open(c.clone(), &prefix, fence).unwrap();
    let too_big = "y".repeat(MAX_RECORD + 1);
    let err = j.append(&[too_big]).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgument);
    // The largest record that fits one batch goes through etcd's request limit; a larger one
    // (a Store object with a 1 MiB key of NULs: each journals as 7 bytes) goes in parts, each
    // within the limit too, between ordinary batches.
    let fits = "z".repeat(MAX_VALUE - 8);
    j.append(std::slice::from_ref(&fits)).unwrap();
    let huge = format!(r#"{{"op":"put","key":"{}"}}"#, "\\u0000".repeat(1 << 20));
    let after = "after".to_string();
    j.append(&[huge.clone(), after.clone()]).unwrap();
    let (batches, _) = j.backlog();
    assert!(batches > 12, "{batches} batches");
    assert_eq!(
        recover(&c, &prefix).unwrap().0.records,
        vec![fits, huge, after]
    );
    // A hole in the log is reported, not skipped.
    c.put(format!("{prefix}log/0000000000000040").as_bytes(), b"[]", 0)
        .unwrap();
    let err = recover(&c, &prefix).unwrap_err();
    assert!(err.message().contains("missing"), "{err}");
}

/// Applies `set k v` / `del k` records in order.
fn apply(state: &mut BTreeMap<String, String>, rec: &str) {
    let parts: Vec<&str> = rec.splitn(3, ' ').collect();
    match parts[0] {
        "set" => {
            state.insert(parts[1].to_string(), parts[2].to_string());
        }
        "del" => {
            state.remove(parts[1]);
        }
        other => panic!("bad record {other}"),
    }
}

#[test]
fn concurrent_commits_with_snapshots_rebuild_the_same_state() {
    let (_etcd, c, prefix, fence) = setup("writer");
    let (j, _) = Journal::open(c.clone(), &prefix, fence.clone()).unwrap();
    let state: Arc<Mutex<BTreeMap<String, String>>> = Arc::default();
    let snap_state = state.clone();
    let snapshots = Arc::new(std::sync::atomic::AtomicU32::new(0));
    let snaps = snapshots.clone();
    let w = Arc::new(
        JournalWriter::start(
            j,
            Box::new(move || {
                snaps.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                serde_json::to_string(&*snap_state.lock().unwrap()).unwrap()
            }),
            CompactPolicy {
                max_batches: 20,
                max_bytes: 1 << 20,
            },
        )
        .unwrap(),
    );
    let threads: Vec<_> = (0..8)
        .map(|t| {
            let (w, state) = (w.clone(), state.clone());
            std::thread::spawn(move || {
                for i in 0..150 {
                    let key = format!("t{t}-k{}", i % 40);
                    // Mutate, then commit (as a master does before replying).
                    let rec = if i % 7 == 6 {
                        format!("del {key}")
                    } else {
                        format!("set {key} v{i}")
                    };
                    apply(&mut state.lock().unwrap(), &rec);
                    w.commit(vec![rec]).unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert!(
        snapshots.load(std::sync::atomic::Ordering::Relaxed) >= 1,
        "compacted"
    );
    drop(w);
    let (r, _) = recover(&c, &prefix).unwrap();
    let mut rebuilt: BTreeMap<String, String> = match &r.snapshot {
        Some(s) => serde_json::from_str(s).unwrap(),
        None => BTreeMap::new(),
    };
    for rec in &r.records {
        apply(&mut rebuilt, rec);
    }
    assert_eq!(rebuilt, *state.lock().unwrap());
    assert!(
        r.batches < 40,
        "the log stays bounded: {} batches",
        r.batches
    );
}

#[test]
fn a_fenced_writer_fails_every_commit() {
    let (_etcd, c, prefix, fence) = setup("writer-fence");
    let (j, _) = Journal::open(c.clone(), &prefix, fence.clone()).unwrap();
    let w = JournalWriter::start(j, Box::new(|| "{}".into()), CompactPolicy::default()).unwrap();
    w.commit(vec!["set a 1".into()]).unwrap();
    c.delete(fence.key.as_bytes()).unwrap();
    let err = w.commit(vec!["set a 2".into()]).unwrap_err();
    assert!(err.message().contains("no longer the leader"), "{err}");
    assert!(w.commit(vec!["set a 3".into()]).is_err());
    assert!(w.failure().is_some());
    assert_eq!(recover(&c, &prefix).unwrap().0.records, vec!["set a 1"]);
}

#[test]
fn compaction_compacts_etcd_history_one_snapshot_behind() {
    let (_etcd, c, prefix, fence) = setup("history");
    let (mut j, _) = Journal::open(c.clone(), &prefix, fence).unwrap();
    let old_at = |rev: i64| {
        c.call(
            "/v3/kv/range",
            &serde_json::json!({"key": tidewire::etcd::b64(b"x"), "revision": rev.to_string()}),
        )
    };
    j.append(&[record(1)]).unwrap();
    let (_, first) = c.get(b"x").unwrap();
    j.compact("snap-1").unwrap();
    // One compaction keeps etcd's history: what it deleted is still there at old revisions.
    assert!(old_at(first).is_ok());
    j.append(&[record(2)]).unwrap();
    j.compact("snap-2").unwrap();
    assert_eq!(j.snapshot_bytes(), 6);
    // The second drops the history before the first ended.
    let err = old_at(first).unwrap_err();
    assert!(err.message().contains("compacted"), "{err}");
    let (r, _) = recover(&c, &prefix).unwrap();
    assert_eq!(r.snapshot.as_deref(), Some("snap-2"));
    // A compaction etcd already made (its own --auto-compaction-retention) counts as done.
    let (_, now) = c.get(b"x").unwrap();
    c.compact(now).unwrap();
    c.compact(now - 1).unwrap();
}

#[test]
fn the_snapshot_limits_grow_with_the_snapshot() {
    let p = CompactPolicy {
        max_batches: 10,
        max_bytes: 100,
    };
    assert!(!p.due(9, 99, 0));
    assert!(p.due(10, 0, 0) && p.due(0, 100, 50));
    // Up to twice the byte limit, the limits stay; a 1000-byte snapshot: five times both.
    assert!(!p.due(9, 99, 200) && p.due(10, 0, 200));
    assert!(!p.due(49, 499, 1000));
    assert!(p.due(50, 0, 1000) && p.due(0, 500, 1000));
}

#[test]
fn commits_land_while_a_snapshot_is_written_and_a_successor_reads_both() {
    let (_etcd, c, prefix, fence) = setup("snapshot-beside");
    let (j, _) = Journal::open(c.clone(), &prefix, fence.clone()).unwrap();
    // The snapshot callback holds until the test lets it go (a large state taking seconds).
    let gate = Arc::new((Mutex::new(false), std::sync::Condvar::new()));
    let (taken_tx, taken_rx) = std::sync::mpsc::channel();
    let g = gate.clone();
    let taken_tx = Mutex::new(taken_tx);
    let w = Arc::new(
        JournalWriter::start(
            j,
            Box::new(move || {
                let _ = taken_tx.lock().unwrap().send(());
                let (open, cv) = &*g;
                let _unused = cv.wait_while(open.lock().unwrap(), |o| !*o).unwrap();
                "set a 1".to_string()
            }),
            CompactPolicy {
                max_batches: 1,
                max_bytes: 1 << 20,
            },
        )
        .unwrap(),
    );
    w.commit(vec!["set a 1".into()]).unwrap();
    taken_rx
        .recv_timeout(Duration::from_secs(10))
        .expect("a snapshot started after the first batch");
    // The snapshot is held; commits still land (on the old writer they waited for it).
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    let w2 = w.clone();
    std::thread::spawn(move || {
        for i in 2..=6 {
            w2.commit(vec![format!("set b {i}")]).unwrap();
        }
        let _ = done_tx.send(());
    });
    done_rx
        .recv_timeout(Duration::from_secs(10))
        .expect("commits land while the snapshot is being taken");
    let (r, _) = recover(&c, &prefix).unwrap();
    assert!(r.snapshot.is_none(), "not written yet");
    assert_eq!(r.records.len(), 6);
    {
        let (open, cv) = &*gate;
        *open.lock().unwrap() = true;
        cv.notify_all();
    }
    // Further commits take the finished snapshot in; at most one more is started.
    w.commit(vec!["set c 7".into()]).unwrap();
    drop(w);
    let (r, _) = recover(&c, &prefix).unwrap();
    assert_eq!(r.snapshot.as_deref(), Some("set a 1"));
    let mut want: Vec<String> = (2..=6).map(|i| format!("set b {i}")).collect();
    want.push("set c 7".into());
    // What the successor replays after the snapshot: every batch after the one it covers
    // (the records appended while it was written included), or nothing when a second
    // snapshot was started after the last commit (it covers them all).
    assert!(r.records == want || r.records.is_empty(), "{:?}", r.records);
}

#[test]
fn a_head_in_the_earlier_form_still_reads_back() {
    let (_etcd, c, prefix, fence) = setup("old-head");
    // As journals were written before snapshots went beside the log: the snapshot took a
    // batch number of its own, and its directory has no take number.
    let put = |k: &str, v: &str| c.put(format!("{prefix}{k}").as_bytes(), v.as_bytes(), 0);
    put("snap/0000000000000005/00000000", "old-").unwrap();
    put("snap/0000000000000005/00000001", "snapshot").unwrap();
    put("head", r#"{"snapshot":5,"chunks":2}"#).unwrap();
    put("log/0000000000000006", r#"["after"]"#).unwrap();
    let (r, next) = recover(&c, &prefix).unwrap();
    assert_eq!(r.snapshot.as_deref(), Some("old-snapshot"));
    assert_eq!((r.records, next), (vec!["after".to_string()], 7));
    // A successor writes its snapshot in today's form, and the old one goes.
    let (mut j, _) = Journal::open(c.clone(), &prefix, fence).unwrap();
    j.compact("new").unwrap();
    let keys = keys_under(&c, &prefix);
    assert_eq!(keys.len(), 2, "head and one chunk: {keys:?}");
    assert_eq!(
        recover(&c, &prefix).unwrap().0.snapshot.as_deref(),
        Some("new")
    );
}

#[test]
fn a_standby_tail_reads_what_is_new_and_opens_as_a_full_read_would() {
    let (_etcd, c, prefix, fence) = setup("tail");
    let (mut j, _) = Journal::open(c.clone(), &prefix, fence.clone()).unwrap();
    let mut tail = JournalTail::new(c.clone(), &prefix);
    tail.poll().unwrap();
    assert_eq!(tail.records(), 0);
    let recs = |r: std::ops::Range<usize>| r.map(record).collect::<Vec<_>>();
    j.append(&recs(0..3000)).unwrap();
    tail.poll().unwrap();
    assert_eq!(tail.records(), 3000);
    // A snapshot replaces what the tail read: it reads the snapshot and the log after it.
    j.compact("snapshot-1").unwrap();
    j.append(&recs(3000..3010)).unwrap();
    tail.poll().unwrap();
    assert_eq!(tail.records(), 10);
    // A record in parts, the tail polling between them, is read whole.
    let huge = format!(r#"{{"op":"put","key":"{}"}}"#, "q".repeat(3 * MAX_VALUE));
    j.append(std::slice::from_ref(&huge)).unwrap();
    tail.poll().unwrap();
    j.append(&recs(3010..3020)).unwrap();
    drop(j);
    // The new leader opens from the tail; the old one is fenced off.
    c.delete(fence.key.as_bytes()).unwrap();
    let won = c.put_if_absent(fence.key.as_bytes(), b"new:2", 0).unwrap();
    let new_fence = Fence {
        key: fence.key.clone(),
        create_revision: won.revision,
    };
    let (mut j2, r) = Journal::open_from_tail(c.clone(), &prefix, new_fence, tail).unwrap();
    let (full, _) = recover(&c, &prefix).unwrap();
    assert_eq!(r.snapshot.as_deref(), Some("snapshot-1"));
    let mut want = recs(3000..3010);
    want.push(huge);
    want.extend(recs(3010..3020));
    assert_eq!(r.records, want);
    assert_eq!((r.records, r.snapshot), (full.records, full.snapshot));
    // It appends after what it read.
    j2.append(&["next".to_string()]).unwrap();
    assert_eq!(
        recover(&c, &prefix).unwrap().0.records.last().unwrap(),
        "next"
    );
}
