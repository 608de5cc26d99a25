//! Object metadata, sharded by key: two-phase writes, versions with read holds, leases, pins,
//! retired buffers, eviction candidates. Lock order: one shard, then a segment allocator.
//!
//! A read hold is one client's reads of one version in progress: Get adds it, ReadDone ends it.
//! A hold keeps the version's buffers from reuse while it is live: for the lease after it was
//! granted, and beyond that, up to `MasterConfig::read_hold_max`, while its client's heartbeats
//! keep arriving. The sweep ends holds that are no longer live, so a reader that dies mid-read
//! holds its buffers for at most its lease (or a few seconds past its last heartbeat).

use super::MasterConfig;
use super::segments::{Replica, Segments};
use crate::store::proto::{GetResult, KeyVersion, PutItem, StartResult, WriteConfig, code};
use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::Instant;

mod holds;
mod journal;
mod upkeep;
mod view;

use holds::{Hold, Retired, Writer, add_hold, end_hold};
pub use view::{KeyInfo, KeyList};

const SHARDS: usize = 64;

/// One readable or in-flight value: its buffers and the reads in progress on them.
#[derive(Debug)]
struct Version {
    id: u64,
    size: u64,
    replicas: Vec<Replica>,
    holds: Vec<Hold>,
}

#[derive(Debug)]
struct Pending {
    v: Version,
    started: Instant,
    /// The writing client (only it can report the write finished).
    writer: u64,
}

#[derive(Debug)]
struct Object {
    complete: Option<Version>,
    pending: Option<Pending>,
    lease_until: Option<Instant>,
    hard_pin: bool,
    soft_pin_until: Option<Instant>,
    last_access: Instant,
}

#[derive(Default)]
struct Shard {
    map: HashMap<String, Object>,
    retired: HashMap<u64, Retired>,
}

/// Receives a journal record (queued, not yet durable) while the key's shard is locked, so the
/// records of one key are queued in the order its changes happened.
pub type Sink = Box<dyn Fn(String) + Send + Sync>;

/// A complete object as the journal keeps it: key, size, replicas, hard pin.
pub type Durable = (String, u64, Vec<Replica>, bool);

/// Space an unfinished write may still be writing, as the journal keeps it: key, write
/// version, writer, buffers. A new leader keeps it from reuse until that writer reports or the
/// release timeout passes, so a write stalled across a failover cannot land in another object.
pub type WriteHold = (String, u64, u64, Vec<Replica>);

/// Every object.
pub struct Objects {
    shards: Vec<Mutex<Shard>>,
    next_version: AtomicU64,
    /// Set on a master that journals its objects (HA with durability).
    pub sink: OnceLock<Sink>,
}

impl Default for Objects {
    fn default() -> Self {
        Objects {
            shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
            next_version: AtomicU64::new(1),
            sink: OnceLock::new(),
        }
    }
}

fn free_all(segs: &Segments, replicas: &[Replica]) {
    for r in replicas {
        segs.free(r);
    }
}

fn lease_active(o: &Object, now: Instant) -> bool {
    o.lease_until.is_some_and(|t| t > now)
}

impl Shard {
    /// Drops a complete version: freed now unless reads are in flight (then when they end).
    fn drop_complete(&mut self, segs: &Segments, v: Version) {
        if v.holds.is_empty() {
            free_all(segs, &v.replicas);
        } else {
            self.retired.insert(
                v.id,
                Retired {
                    replicas: v.replicas,
                    holds: v.holds,
                    writer: None,
                    free_at: Instant::now(),
                },
            );
        }
    }

    /// Drops an unfinished write whose writer may still be writing: the space is kept until the
    /// writer reports (PutEnd/PutRevoke of this version) or until `started + release_timeout`
    /// (a writer's transfer deadline can exceed the discard timeout, so only the release timeout
    /// is sure to outlast a silent writer).
    fn drop_pending(&mut self, key: &str, p: Pending, cfg: &MasterConfig) {
        let free_at = p.started + cfg.put_start_release_timeout;
        self.hold_write(key, p.v.id, p.writer, p.v.replicas, free_at);
    }

    /// Keeps `replicas` for the write `version` of `writer` until it reports or `free_at`.
    fn hold_write(
        &mut self,
        key: &str,
        version: u64,
        writer: u64,
        replicas: Vec<Replica>,
        free_at: Instant,
    ) {
        self.retired.insert(
            version,
            Retired {
                replicas,
                holds: Vec::new(),
                writer: Some(Writer {
                    client: writer,
                    key: key.into(),
                }),
                free_at,
            },
        );
    }

    /// PutEnd/PutRevoke of a version that is not the key's write in progress: if it is a dropped
    /// (pre-empted or discarded) write of this writer, its space is freed now. `INVALID_WRITE`,
    /// or `OBJECT_NOT_FOUND` when the key is gone.
    fn not_current(
        &mut self,
        kv: &KeyVersion,
        writer: u64,
        segs: &Segments,
        emit: &dyn Fn(String),
    ) -> i32 {
        if self.writer_done(kv.version, writer, segs) {
            emit(super::durable::unhold_record(&kv.key, kv.version));
        }
        match self.map.contains_key(&kv.key) {
            true => code::INVALID_WRITE,
            false => code::OBJECT_NOT_FOUND,
        }
    }

    /// The writer of a dropped write reports that it stopped writing: its space is freed now.
    /// Returns whether `version` was such a write of `writer`.
    fn writer_done(&mut self, version: u64, writer: u64, segs: &Segments) -> bool {
        let mine = |r: &Retired| r.writer.as_ref().is_some_and(|w| w.client == writer);
        match self.retired.remove(&version) {
            Some(r) if mine(&r) => {
                free_all(segs, &r.replicas);
                true
            }
            Some(r) => {
                self.retired.insert(version, r);
                false
            }
            None => false,
        }
    }

    /// Frees retired space that is due; returns the (key, version) of the writes among it.
    fn free_due(&mut self, now: Instant, segs: &Segments) -> Vec<(Box<str>, u64)> {
        let due: Vec<u64> = self
            .retired
            .iter()
            .filter(|(_, r)| r.due(now))
            .map(|(id, _)| *id)
            .collect();
        let mut writes = Vec::new();
        for id in due {
            if let Some(r) = self.retired.remove(&id) {
                free_all(segs, &r.replicas);
                if let Some(w) = r.writer {
                    writes.push((w.key, id));
                }
            }
        }
        writes
    }

    /// Removes `key` whatever its state (the caller checked leases).
    fn remove_object(&mut self, key: &str, segs: &Segments, cfg: &MasterConfig) -> bool {
        let Some(mut o) = self.map.remove(key) else {
            return false;
        };
        if let Some(p) = o.pending.take() {
            self.drop_pending(key, p, cfg);
        }
        if let Some(c) = o.complete.take() {
            self.drop_complete(segs, c);
        }
        true
    }

    fn try_remove(
        &mut self,
        key: &str,
        force: bool,
        now: Instant,
        segs: &Segments,
        cfg: &MasterConfig,
    ) -> i32 {
        let Some(o) = self.map.get(key) else {
            return code::OBJECT_NOT_FOUND;
        };
        if !force {
            if lease_active(o, now) {
                return code::OBJECT_HAS_LEASE;
            }
            if o.pending.is_some() {
                return code::REPLICA_IS_NOT_READY;
            }
        }
        self.remove_object(key, segs, cfg);
        code::OK
    }
}

impl Objects {
    fn shard_index(key: &str) -> usize {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        key.hash(&mut h);
        (h.finish() as usize) % SHARDS
    }

    fn shard(&self, key: &str) -> MutexGuard<'_, Shard> {
        self.shards[Self::shard_index(key)]
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    fn all(&self) -> impl Iterator<Item = MutexGuard<'_, Shard>> {
        self.shards
            .iter()
            .map(|s| s.lock().unwrap_or_else(|e| e.into_inner()))
    }

    fn emit(&self, record: impl FnOnce() -> String) {
        if let Some(sink) = self.sink.get() {
            sink(record());
        }
    }

    fn version_id(&self) -> u64 {
        self.next_version.fetch_add(1, Ordering::Relaxed)
    }

    /// Objects stored (complete or in flight).
    pub fn count(&self) -> usize {
        self.all().map(|s| s.map.len()).sum()
    }

    /// First phase of one put/upsert. `allocate` finds space (it may evict); it is called with
    /// no shard lock held.
    #[allow(clippy::too_many_arguments)]
    pub fn start(
        &self,
        item: &PutItem,
        writer: u64,
        upsert: bool,
        wcfg: &WriteConfig,
        cfg: &MasterConfig,
        segs: &Segments,
        allocate: impl FnOnce() -> Result<Vec<Replica>, i32>,
    ) -> StartResult {
        let (key, size) = (item.key.as_str(), item.size);
        let fail = |code| StartResult {
            code,
            version: 0,
            replicas: Vec::new(),
        };
        if size == 0 {
            return fail(code::INVALID_PARAMS);
        }
        let now = Instant::now();
        let soft_until = wcfg.soft_pin.then(|| now + cfg.soft_pin_ttl);
        {
            let mut sh = self.shard(key);
            if let Some(o) = sh.map.get_mut(key) {
                if !upsert && o.complete.is_some() {
                    return fail(code::OBJECT_ALREADY_EXISTS);
                }
                // Upsert case B: same size and nobody reading: rewrite in place. The key is
                // unreadable until PutEnd (readers get REPLICA_IS_NOT_READY, never a torn value).
                let in_place = upsert
                    && o.pending.is_none()
                    && o.complete
                        .as_ref()
                        .is_some_and(|c| c.size == size && c.holds.is_empty());
                if in_place {
                    let mut v = o.complete.take().unwrap_or_else(|| unreachable!());
                    // Its bytes are about to be overwritten: no longer durable until PutEnd.
                    self.emit(|| super::durable::del_record(key));
                    v.id = self.version_id();
                    let result = StartResult {
                        code: code::OK,
                        version: v.id,
                        replicas: v.replicas.iter().map(Replica::desc).collect(),
                    };
                    self.emit(|| super::durable::hold_record(key, v.id, writer, &v.replicas));
                    o.pending = Some(Pending {
                        v,
                        started: now,
                        writer,
                    });
                    if soft_until.is_some() {
                        o.soft_pin_until = soft_until;
                    }
                    return result;
                }
            }
        }
        // Case A (absent) and C (new size, or readers on the old buffers): fresh buffers; the old
        // value stays readable until PutEnd.
        let replicas = match allocate() {
            Ok(r) => r,
            Err(c) => return fail(c),
        };
        let mut sh = self.shard(key);
        let hard_pin = wcfg.hard_pin;
        let o = sh.map.entry(key.to_string()).or_insert_with(|| Object {
            complete: None,
            pending: None,
            lease_until: None,
            hard_pin,
            soft_pin_until: None,
            last_access: now,
        });
        if !upsert && o.complete.is_some() {
            free_all(segs, &replicas);
            return fail(code::OBJECT_ALREADY_EXISTS);
        }
        if soft_until.is_some() {
            o.soft_pin_until = soft_until;
        }
        let id = self.version_id();
        let result = StartResult {
            code: code::OK,
            version: id,
            replicas: replicas.iter().map(Replica::desc).collect(),
        };
        self.emit(|| super::durable::hold_record(key, id, writer, &replicas));
        let old = o.pending.replace(Pending {
            v: Version {
                id,
                size,
                replicas,
                holds: Vec::new(),
            },
            started: now,
            writer,
        });
        if let Some(p) = old {
            // A write already in progress on this key is pre-empted: its space comes back when
            // its writer reports.
            sh.drop_pending(key, p, cfg);
        }
        result
    }

    /// PutEnd: publishes the write; the previous value (if any) is freed once unread. The end
    /// of a write that was pre-empted or discarded is `INVALID_WRITE`, and its space is freed.
    pub fn end(&self, kv: &KeyVersion, writer: u64, segs: &Segments) -> i32 {
        let mut sh = self.shard(&kv.key);
        let sh = &mut *sh;
        let current = sh
            .map
            .get(&kv.key)
            .and_then(|o| o.pending.as_ref())
            .is_some_and(|p| p.v.id == kv.version);
        if !current {
            return sh.not_current(kv, writer, segs, &|r| self.emit(|| r));
        }
        let o = sh.map.get_mut(&kv.key).unwrap_or_else(|| unreachable!());
        let p = o.pending.take().unwrap_or_else(|| unreachable!());
        o.last_access = Instant::now();
        let hard_pin = o.hard_pin;
        self.emit(|| super::durable::unhold_record(&kv.key, kv.version));
        self.emit(|| super::durable::put_record(&kv.key, p.v.size, &p.v.replicas, hard_pin));
        if let Some(old) = o.complete.replace(p.v) {
            sh.drop_complete(segs, old);
        }
        code::OK
    }

    /// PutRevoke: drops the write (the writer has stopped writing), keeping an older value. The
    /// revoke of a write that was pre-empted or discarded frees its space (`INVALID_WRITE`).
    pub fn revoke(&self, kv: &KeyVersion, writer: u64, segs: &Segments) -> i32 {
        let mut sh = self.shard(&kv.key);
        let current = sh
            .map
            .get(&kv.key)
            .and_then(|o| o.pending.as_ref())
            .is_some_and(|p| p.v.id == kv.version);
        if !current {
            return sh.not_current(kv, writer, segs, &|r| self.emit(|| r));
        }
        let Some(o) = sh.map.get_mut(&kv.key) else {
            return code::OBJECT_NOT_FOUND;
        };
        let p = o.pending.take().unwrap_or_else(|| unreachable!());
        free_all(segs, &p.v.replicas);
        if o.complete.is_none() {
            sh.map.remove(&kv.key);
        }
        self.emit(|| super::durable::unhold_record(&kv.key, kv.version));
        code::OK
    }

    /// Replica lists for reading; each hit adds a read hold of `reader` and extends the lease.
    pub fn get(&self, key: &str, reader: u64, cfg: &MasterConfig) -> GetResult {
        let now = Instant::now();
        let miss = |code| GetResult {
            code,
            size: 0,
            version: 0,
            replicas: Vec::new(),
        };
        let mut sh = self.shard(key);
        let Some(o) = sh.map.get_mut(key) else {
            return miss(code::OBJECT_NOT_FOUND);
        };
        let Some(c) = o.complete.as_mut() else {
            return miss(code::REPLICA_IS_NOT_READY);
        };
        add_hold(&mut c.holds, reader, now);
        let until = now + cfg.lease_ttl;
        o.lease_until = Some(o.lease_until.map_or(until, |t| t.max(until)));
        o.last_access = now;
        if o.soft_pin_until.is_some() {
            o.soft_pin_until = Some(now + cfg.soft_pin_ttl);
        }
        GetResult {
            code: code::OK,
            size: c.size,
            version: c.id,
            replicas: c.replicas.iter().map(Replica::desc).collect(),
        }
    }

    /// A read of `kv.version` by `reader` finished.
    pub fn read_done(&self, kv: &KeyVersion, reader: u64, segs: &Segments) {
        let mut sh = self.shard(&kv.key);
        if let Some(c) = sh
            .map
            .get_mut(&kv.key)
            .and_then(|o| o.complete.as_mut())
            .filter(|c| c.id == kv.version)
        {
            end_hold(&mut c.holds, reader);
            return;
        }
        if let Some(r) = sh.retired.get_mut(&kv.version) {
            end_hold(&mut r.holds, reader);
            if r.due(Instant::now()) {
                let r = sh
                    .retired
                    .remove(&kv.version)
                    .unwrap_or_else(|| unreachable!());
                free_all(segs, &r.replicas);
            }
        }
    }

    /// 1 when readable (granting a lease), 0 otherwise.
    pub fn exist(&self, key: &str, cfg: &MasterConfig) -> i32 {
        let now = Instant::now();
        let mut sh = self.shard(key);
        match sh.map.get_mut(key) {
            Some(o) if o.complete.is_some() => {
                let until = now + cfg.lease_ttl;
                o.lease_until = Some(o.lease_until.map_or(until, |t| t.max(until)));
                1
            }
            _ => 0,
        }
    }

    /// Removes one key: `OBJECT_HAS_LEASE` under a lease unless `force`.
    pub fn remove(&self, key: &str, force: bool, segs: &Segments, cfg: &MasterConfig) -> i32 {
        let mut sh = self.shard(key);
        let c = sh.try_remove(key, force, Instant::now(), segs, cfg);
        if c == code::OK {
            self.emit(|| super::durable::del_record(key));
        }
        c
    }

    /// Removes every key `pred` accepts (skipping leased ones unless `force`); returns the count.
    pub fn remove_matching(
        &self,
        pred: impl Fn(&str) -> bool,
        force: bool,
        segs: &Segments,
        cfg: &MasterConfig,
    ) -> i64 {
        let now = Instant::now();
        let mut n = 0;
        for mut sh in self.all() {
            let keys: Vec<String> = sh.map.keys().filter(|k| pred(k)).cloned().collect();
            for k in keys {
                if sh.try_remove(&k, force, now, segs, cfg) == code::OK {
                    self.emit(|| super::durable::del_record(&k));
                    n += 1;
                }
            }
        }
        n
    }
}
