//! The master's state in an etcd journal (HA with `--enable_oplog`): which segments are mounted
//! and which complete objects live where. Records are idempotent set/delete operations, queued
//! while the changed key's shard is locked; a mutating request is answered only once its records
//! are durable. A new leader rebuilds segments, their allocations and the objects from the latest
//! snapshot plus the records after it. Leases, pins' timers and reads in progress are not kept.
//! Unfinished writes are kept as held space only (`hold`/`unhold` records): a write in flight
//! during a failover fails at PutEnd and must be retried, but its space is not given to another
//! object until its writer reports or the release timeout passes, so a transfer stalled across
//! the failover cannot land in another object's bytes.

use super::Master;
use super::segments::Replica;
use serde_json::{Value, json};
use std::collections::HashSet;
use std::sync::Arc;
use tidewire::etcd::journal::Recovered;
use tidewire::etcd::journal_writer::JournalWriter;
use tidewire::log::Level;
use tidewire::tw_log;

/// A complete object's record; `replicas` are (segment name, offset) of `size` bytes each.
pub fn put_record(key: &str, size: u64, replicas: &[(Arc<str>, u64)], hard_pin: bool) -> String {
    json!({"op": "put", "key": key, "size": size, "hard_pin": hard_pin,
           "replicas": replica_list(replicas, size)})
    .to_string()
}

/// Each replica as `[segment name, offset, length]` (the journal's form since its first
/// version).
fn replica_list(replicas: &[(Arc<str>, u64)], len: u64) -> Vec<Value> {
    replicas
        .iter()
        .map(|(name, offset)| json!([&**name, offset, len]))
        .collect()
}

/// An unfinished write's space (`len` bytes per replica): a new leader keeps it from reuse
/// until the writer reports.
pub fn hold_record(
    key: &str,
    version: u64,
    writer: u64,
    replicas: &[(Arc<str>, u64)],
    len: u64,
) -> String {
    json!({"op": "hold", "key": key, "version": version, "writer": writer,
           "replicas": replica_list(replicas, len)})
    .to_string()
}

/// The write's space is no longer held (freed, or published: a put record follows).
pub fn unhold_record(key: &str, version: u64) -> String {
    json!({"op": "unhold", "key": key, "version": version}).to_string()
}

/// A removed key's record.
pub fn del_record(key: &str) -> String {
    json!({"op": "del", "key": key}).to_string()
}

fn mount_record(client: u64, name: &str, base: u64, size: u64) -> Value {
    json!({"op": "mount", "client": client, "name": name, "base": base, "size": size})
}

impl Master {
    /// Queues a record when this master journals (no-op otherwise).
    pub(super) fn journal_record(&self, record: impl FnOnce() -> String) {
        if let Some(sink) = self.objs.sink.get() {
            sink(record());
        }
    }

    pub(super) fn journal_mount(&self, client: u64, name: &str, base: u64, size: u64) {
        self.journal_record(|| mount_record(client, name, base, size).to_string());
    }

    pub(super) fn journal_unmount(&self, ids: &HashSet<u32>) {
        for id in ids {
            if let Some(name) = self.segs.name_of(*id) {
                self.journal_record(|| json!({"op": "unmount", "name": name}).to_string());
            }
        }
    }

    /// Waits until what this request queued is durable; an error once the journal failed
    /// (this master was deposed or lost etcd).
    pub(super) fn journal_sync(&self) -> Result<(), String> {
        match self.journal.get() {
            Some(j) => j.wait(j.ticket()).map_err(|e| e.to_string()),
            None => Ok(()),
        }
    }

    /// The whole durable state, for a journal snapshot.
    pub fn snapshot_json(&self) -> String {
        let segments: Vec<Value> = self
            .segs
            .list()
            .into_iter()
            .map(|(c, n, b, s)| mount_record(c, &n, b, s))
            .collect();
        let objects: Vec<Value> = self
            .objs
            .export()
            .into_iter()
            .map(|(k, size, reps, pin)| {
                let named = self.segs.named(&reps);
                serde_json::from_str(&put_record(&k, size, &named, pin)).unwrap_or(Value::Null)
            })
            .collect();
        let holds: Vec<Value> = self
            .objs
            .export_holds()
            .into_iter()
            .map(|(k, version, writer, len, reps)| {
                let named = self.segs.named(&reps);
                serde_json::from_str(&hold_record(&k, version, writer, &named, len))
                    .unwrap_or(Value::Null)
            })
            .collect();
        json!({"segments": segments, "objects": objects, "holds": holds}).to_string()
    }

    fn apply(&self, r: &Value) {
        let s = |f: &str| r[f].as_str().unwrap_or_default().to_string();
        let n = |f: &str| r[f].as_u64().unwrap_or(0);
        match r["op"].as_str() {
            Some("mount") => {
                if self
                    .segs
                    .mount(n("client"), &s("name"), n("base"), n("size"))
                    .is_ok()
                {
                    self.touch(n("client"));
                }
            }
            Some("unmount") => {
                if let Some(id) = self.segs.id_of(&s("name")) {
                    self.unmount(&HashSet::from([id]));
                }
            }
            Some("del") => {
                self.objs.remove(&s("key"), true, &self.segs, &self.cfg);
            }
            Some("hold") => {
                let key = s("key");
                // Every replica of a write has the same length: the first one's.
                let len = r["replicas"][0][2].as_u64().unwrap_or(0);
                let reps = self.reserve_replicas(&key, r, len);
                if !reps.is_empty() {
                    let hold = (key, n("version"), n("writer"), len, reps);
                    self.objs.restore_hold(hold, &self.cfg);
                }
            }
            Some("unhold") => self.objs.release_hold(&s("key"), n("version"), &self.segs),
            Some("put") => {
                let key = s("key");
                self.objs.remove(&key, true, &self.segs, &self.cfg);
                let reps = self.reserve_replicas(&key, r, n("size"));
                if !reps.is_empty() {
                    let durable = (key, n("size"), reps, r["hard_pin"].as_bool() == Some(true));
                    self.objs.restore(durable, &self.segs);
                }
            }
            _ => tw_log!(Level::Warn, "master: unknown journal record {r}"),
        }
    }

    /// Takes the buffers a record lists back from their segments (those that no longer fit, or
    /// are not `want` bytes long, are dropped, with a warning).
    fn reserve_replicas(&self, key: &str, r: &Value, want: u64) -> Vec<Replica> {
        let mut reps = Vec::new();
        for x in r["replicas"].as_array().into_iter().flatten() {
            let (name, off, len) = (
                x[0].as_str().unwrap_or_default(),
                x[1].as_u64().unwrap_or(0),
                x[2].as_u64().unwrap_or(0),
            );
            if len != want || len == 0 {
                tw_log!(
                    Level::Warn,
                    "master: journal replica of {key:?} at {name}+{off} is {len} bytes, not \
                     {want}; dropped"
                );
                continue;
            }
            match self.segs.reserve(name, off, len) {
                Some(rep) => reps.push(rep),
                None => tw_log!(
                    Level::Warn,
                    "master: journal replica of {key:?} at {name}+{off} does not fit; dropped"
                ),
            }
        }
        reps
    }

    /// Rebuilds the state from a journal (on an empty master, before it serves); returns the
    /// (segments, objects) restored.
    pub fn restore(&self, rec: &Recovered) -> Result<(usize, usize), String> {
        if let Some(snap) = &rec.snapshot {
            let v: Value =
                serde_json::from_str(snap).map_err(|e| format!("journal snapshot: {e}"))?;
            for r in v["segments"].as_array().into_iter().flatten() {
                self.apply(r);
            }
            for r in v["objects"].as_array().into_iter().flatten() {
                self.apply(r);
            }
            for r in v["holds"].as_array().into_iter().flatten() {
                self.apply(r);
            }
        }
        for line in &rec.records {
            let r: Value =
                serde_json::from_str(line).map_err(|e| format!("journal record: {e}"))?;
            self.apply(&r);
        }
        Ok((self.segs.usage().0, self.objs.count()))
    }

    /// Starts journaling into `writer` (after [`restore`](Self::restore)).
    pub fn attach_journal(&self, writer: Arc<JournalWriter>) {
        let w = writer.clone();
        self.record_into(Box::new(move |r| {
            w.enqueue(vec![r]);
        }));
        let _ = self.journal.set(writer);
    }

    /// Sends every journal record to `sink` from now on (what `attach_journal` does, without
    /// etcd; a second call is ignored).
    pub fn record_into(&self, sink: super::objects::Sink) {
        let _ = self.objs.sink.set(sink);
    }
}
