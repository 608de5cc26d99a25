//! The master's HA journal replayed on a new leader, driven in-process (records collected in
//! memory, no etcd): complete objects and held write space come back, records in today's format
//! (what journals already in etcd hold) load, and a malformed record is skipped with the rest
//! restored, never read as an object of zeros.

mod common;
use common::requests::*;
use std::sync::{Arc, Mutex};
use tidewire::etcd::journal::Recovered;
use tidewire::store::proto::{StartResult, WriteConfig, code};
use tidewire_master::{Master, MasterConfig};

/// A master whose journal records are collected in memory (no etcd).
fn journaled(cfg: MasterConfig) -> (Master, Arc<Mutex<Vec<String>>>) {
    let log = Arc::new(Mutex::new(Vec::new()));
    let m = Master::new(cfg);
    let l = log.clone();
    m.record_into(Box::new(move |r| l.lock().unwrap().push(r)));
    mount_two(&m);
    (m, log)
}

fn failover(log: &Mutex<Vec<String>>) -> Master {
    replay(None, &log.lock().unwrap())
}

/// A new master rebuilt from a snapshot (optional) and the records after it.
fn replay(snapshot: Option<&str>, records: &[String]) -> Master {
    let next = Master::new(MasterConfig::default());
    let rec = Recovered {
        snapshot: snapshot.map(str::to_string),
        records: records.to_vec(),
        batches: 1,
    };
    next.restore(&rec).unwrap();
    next
}

#[test]
fn a_write_in_flight_across_a_failover_cannot_land_in_another_object() {
    // Known gap closed: the new leader rebuilt only complete objects, so it could hand the
    // space of a write still in flight to another object, and the stalled writer's bytes would
    // land in it. Now the journal keeps held write space until its writer reports.
    let (m, log) = journaled(MasterConfig::default());
    put(&m, "done", 1000, true);
    let stalled = start(&m, "stalled", 900 << 10, true, WriteConfig::default());
    let preempted = start(&m, "p", 900 << 10, true, WriteConfig::default());
    let winner = start(&m, "p", 64, true, WriteConfig::default());
    assert_eq!(end(&m, "p", winner.version), 0);
    // Another write finished cleanly: its space is not held at the new leader.
    let clean = start(&m, "clean", 50 << 10, true, WriteConfig::default());
    assert_eq!(end(&m, "clean", clean.version), 0);
    assert_eq!(remove(&m, "clean", true), 0);

    let next = failover(&log);
    assert_eq!(get(&next, "done").code, 0, "complete objects survive");
    assert_eq!(get(&next, "stalled").code, code::OBJECT_NOT_FOUND);
    let gp = get(&next, "p");
    assert_eq!(
        (gp.code, gp.size),
        (0, 64),
        "the pre-empting write was published"
    );
    // (The refused allocation below evicts what it can: "done", not "p", leased by that get.)
    // Both segments are nearly full of held write space: a new 900 KiB object fits nowhere.
    assert_eq!(
        start(&next, "other", 900 << 10, true, WriteConfig::default()).code,
        code::NO_AVAILABLE_HANDLE,
        "held write space was handed out"
    );
    let ranges = |s: &StartResult| (s.replicas[0].addr, s.replicas[0].addr + s.replicas[0].len);
    let small = start(&next, "small", 50 << 10, true, WriteConfig::default());
    assert_eq!(small.code, 0, "space freed by clean writes is usable");
    for held in [&stalled, &preempted] {
        let (a, b) = ranges(held);
        let (c, d) = ranges(&small);
        assert!(d <= a || c >= b, "new object overlaps held write space");
    }
    // The stalled writer reports at the new leader: its put failed, and its space comes back.
    assert_eq!(
        end(&next, "stalled", stalled.version),
        code::OBJECT_NOT_FOUND
    );
    assert_eq!(revoke(&next, "p", preempted.version), code::INVALID_WRITE);
    let again = start(&next, "other", 900 << 10, true, WriteConfig::default());
    assert_eq!(again.code, 0, "reported write space was freed");
    assert!(
        again.version > preempted.version,
        "version ids never repeat"
    );
}

#[test]
fn a_journal_and_a_snapshot_each_rebuild_the_same_objects() {
    let (m, log) = journaled(MasterConfig::default());
    put(&m, "a", 1000, true);
    put(&m, "b", 2000, true);
    assert_eq!(remove(&m, "a", true), 0);
    let held = start(&m, "c", 300, true, WriteConfig::default());
    for next in [failover(&log), replay(Some(&m.snapshot_json()), &[])] {
        assert_eq!(get(&next, "a").code, code::OBJECT_NOT_FOUND);
        let b = get(&next, "b");
        assert_eq!((b.code, b.size), (0, 2000));
        assert_eq!(
            get(&next, "c").code,
            code::OBJECT_NOT_FOUND,
            "never published"
        );
        // The held write reports at the new leader: its put failed, its space comes back.
        assert_eq!(end(&next, "c", held.version), code::OBJECT_NOT_FOUND);
    }
}

/// Records exactly as the journal has always written them (see `journal_record.rs`'s golden
/// test): a journal in etcd from an older binary loads.
#[test]
fn records_in_the_journals_format_load() {
    let lines = [
        r#"{"base":1048576,"client":1,"name":"a:1","op":"mount","size":1048576}"#,
        r#"{"hard_pin":true,"key":"k\u0000 1","op":"put","replicas":[["a:1",0,4096]],"size":4096}"#,
        r#"{"key":"w","op":"hold","replicas":[["a:1",4096,100]],"version":77,"writer":1}"#,
        r#"{"key":"gone","op":"del"}"#,
    ]
    .map(String::from);
    let next = replay(None, &lines);
    let k = get(&next, "k\0 1");
    assert_eq!((k.code, k.size), (0, 4096));
    assert_eq!(k.replicas[0].addr, 1048576, "at the journaled offset");
    assert_eq!(
        end(&next, "w", 77),
        code::OBJECT_NOT_FOUND,
        "the held write reports"
    );
    let s = start(&next, "new", 100, true, WriteConfig::default());
    assert_eq!(s.code, 0);
    assert!(s.version > 77, "version ids continue after the journal's");
}

#[test]
fn a_malformed_record_is_skipped_and_the_rest_restored() {
    let mount = r#"{"base":1048576,"client":1,"name":"a:1","op":"mount","size":1048576}"#;
    let good = r#"{"hard_pin":false,"key":"good","op":"put","replicas":[["a:1",0,64]],"size":64}"#;
    let lines = [
        mount,
        // No base: once read as a segment mounted at address 0; now refused.
        r#"{"client":2,"name":"b:1","op":"mount","size":1048576}"#,
        // No size: once read as a zero-byte object; now refused.
        r#"{"hard_pin":false,"key":"no_size","op":"put","replicas":[["a:1",64,64]]}"#,
        // A replica without its length.
        r#"{"hard_pin":false,"key":"short","op":"put","replicas":[["a:1",128]],"size":64}"#,
        r#"{"key":"x","op":"rename"}"#,
        "not json",
        good,
    ]
    .map(String::from);
    let next = replay(None, &lines);
    assert!(next.segment_detail("a:1").is_some());
    assert!(
        next.segment_detail("b:1").is_none(),
        "no segment at address 0"
    );
    assert_eq!(next.object_count(), 1, "only the well-formed put");
    assert_eq!(get(&next, "good").size, 64);
    for key in ["no_size", "short", "x"] {
        assert_eq!(get(&next, key).code, code::OBJECT_NOT_FOUND, "{key}");
    }
    // A snapshot that is not a JSON object fails the restore (nothing half-built is served).
    let m = Master::new(MasterConfig::default());
    let rec = Recovered {
        snapshot: Some("[1]".into()),
        records: vec![],
        batches: 1,
    };
    assert!(m.restore(&rec).is_err());
}

#[test]
fn a_put_end_resent_to_the_new_leader_finds_its_write_published() {
    // The leader published the write and journaled it, then died before its reply reached the
    // client, which resends the PutEnd to the new leader: the journal kept the write's
    // version, so the resend is OK (not INVALID_WRITE for a put that landed).
    let (m, log) = journaled(MasterConfig::default());
    let s = start(&m, "k", 4096, false, WriteConfig::default());
    assert_eq!(end(&m, "k", s.version), 0);
    let other = start(&m, "other", 64, false, WriteConfig::default());
    for next in [failover(&log), replay(Some(&m.snapshot_json()), &[])] {
        assert_eq!(end(&next, "k", s.version), 0, "resent PutEnd");
        assert_eq!(get(&next, "k").size, 4096);
        // Another version is still refused, and new versions come after the journal's.
        assert_eq!(end(&next, "k", s.version + 1000), code::INVALID_WRITE);
        let again = start(&next, "fresh", 64, false, WriteConfig::default());
        assert!(again.version > other.version, "version ids never repeat");
    }
}
