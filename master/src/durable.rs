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
use super::journal_record::{Record, ReplicaAt, decode_records, decode_snapshot, encode_snapshot};
use super::segments::Replica;
use std::borrow::Cow;
use std::collections::HashSet;
use std::sync::Arc;
use tidewire::etcd::journal::Recovered;
use tidewire::etcd::journal_writer::JournalWriter;
use tidewire::log::Level;
use tidewire::tw_log;

impl Master {
    /// Queues a record when this master journals (no-op otherwise).
    pub(super) fn journal_record<'a>(&self, record: impl FnOnce() -> Record<'a>) {
        if let Some(sink) = self.objs.sink.get() {
            sink(record().encode());
        }
    }

    pub(super) fn journal_mount(&self, client: u64, name: &str, base: u64, size: u64) {
        self.journal_record(|| Record::Mount {
            client,
            name: Cow::Borrowed(name),
            base,
            size,
        });
    }

    pub(super) fn journal_unmount(&self, ids: &HashSet<u32>) {
        for id in ids {
            if let Some(name) = self.segs.name_of(*id) {
                self.journal_record(|| Record::Unmount {
                    name: Cow::Borrowed(&*name),
                });
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
        let segments = self.segs.list();
        let objects = self.objs.export();
        let holds = self.objs.export_holds();
        let object_names: Vec<_> = objects.iter().map(|o| self.segs.named(&o.2)).collect();
        let hold_names: Vec<_> = holds.iter().map(|h| self.segs.named(&h.4)).collect();
        encode_snapshot(
            segments
                .iter()
                .map(|(client, name, base, size)| Record::Mount {
                    client: *client,
                    name: Cow::Borrowed(&**name),
                    base: *base,
                    size: *size,
                }),
            objects
                .iter()
                .zip(object_names)
                .map(|((key, size, _, pin, v), named)| Record::put(key, *size, named, *pin, *v)),
            holds
                .iter()
                .zip(hold_names)
                .map(|((key, version, writer, len, _), named)| {
                    Record::hold(key, *version, *writer, named, *len)
                }),
        )
    }

    /// Applies one record; `fresh`: a snapshot's object, whose key nothing holds yet.
    fn apply(&self, r: Record<'_>, fresh: bool) {
        match r {
            Record::Mount {
                client,
                name,
                base,
                size,
            } => {
                if self.segs.mount(client, &name, base, size).is_ok() {
                    self.touch(client);
                }
            }
            Record::Unmount { name } => {
                if let Some(id) = self.segs.id_of(&name) {
                    self.unmount(&HashSet::from([id]));
                }
            }
            Record::Del { key } => {
                self.objs.remove(&key, true, &self.segs, &self.cfg);
            }
            Record::Hold {
                key,
                version,
                writer,
                replicas,
            } => {
                // Every replica of a write has the same length: the first one's.
                let len = replicas.first().map_or(0, |p| p.len);
                let reps = self.reserve_replicas(&key, &replicas, len);
                if !reps.is_empty() {
                    let hold = (key.into_owned(), version, writer, len, reps);
                    self.objs.restore_hold(hold, &self.cfg);
                }
            }
            Record::Unhold { key, version } => self.objs.release_hold(&key, version, &self.segs),
            Record::Put {
                key,
                size,
                replicas,
                hard_pin,
                version,
            } => {
                // A replaced value's space first: the new one may lie where it did.
                if !fresh {
                    self.objs.remove(&key, true, &self.segs, &self.cfg);
                }
                let reps = self.reserve_replicas(&key, &replicas, size);
                if !reps.is_empty() {
                    self.objs.restore(
                        (key.into_owned(), size, reps, hard_pin, version),
                        &self.segs,
                    );
                }
            }
        }
    }

    /// Takes the buffers a record lists back from their segments (those that no longer fit, or
    /// are not `want` bytes long, are dropped, with a warning).
    fn reserve_replicas(&self, key: &str, replicas: &[ReplicaAt], want: u64) -> Vec<Replica> {
        let mut reps = Vec::new();
        for p in replicas {
            let (name, off, len) = (&*p.segment, p.offset, p.len);
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
    /// (segments, objects) restored. A snapshot that is not a JSON object fails the restore; a
    /// malformed record (in the snapshot or after it) is logged and skipped.
    pub fn restore(&self, rec: &Recovered) -> Result<(usize, usize), String> {
        let mut snapshot = Vec::new();
        if let Some(snap) = &rec.snapshot {
            snapshot = decode_snapshot(snap).map_err(|e| format!("journal snapshot: {e}"))?;
        }
        // The snapshot's objects (unique keys, each its own space) go in on several threads,
        // after its segments and before its held writes; the log after it in order.
        let (mut before, mut objects, mut after) = (Vec::new(), Vec::new(), Vec::new());
        for r in snapshot {
            match r {
                Ok(r @ Record::Put { .. }) => objects.push(r),
                r if objects.is_empty() => before.push(r),
                r => after.push(r),
            }
        }
        let key_bytes = objects.iter().map(|r| match r {
            Record::Put { key, .. } => key.len(),
            _ => 0,
        });
        self.objs.reserve(objects.len(), key_bytes.sum());
        let lines: Vec<&str> = rec.records.iter().map(String::as_str).collect();
        let log = decode_records(&lines);
        let apply = |r: Result<Record<'_>, _>| match r {
            Ok(r) => self.apply(r, false),
            Err(e) => tw_log!(Level::Warn, "master: {e}; skipped"),
        };
        before.into_iter().for_each(apply);
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
        let per = objects.len().div_ceil(threads).max(1 << 14);
        std::thread::scope(|s| {
            while !objects.is_empty() {
                let part = objects.split_off(objects.len().saturating_sub(per));
                s.spawn(move || part.into_iter().for_each(|r| self.apply(r, true)));
            }
        });
        after.into_iter().for_each(apply);
        log.into_iter().for_each(apply);
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
