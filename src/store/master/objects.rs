//! Object metadata, sharded by key: two-phase writes, versions with reader counts, leases, pins,
//! retired buffers, eviction candidates. Lock order: one shard, then a segment allocator.

use super::MasterConfig;
use super::segments::{Replica, Segments};
use crate::store::proto::{GetResult, KeyVersion, PutItem, StartResult, WriteConfig, code};
use std::collections::{HashMap, HashSet};
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Instant;

const SHARDS: usize = 64;

/// One readable or in-flight value: its buffers and the reads in progress on them.
#[derive(Debug)]
struct Version {
    id: u64,
    size: u64,
    replicas: Vec<Replica>,
    readers: u32,
}

#[derive(Debug)]
struct Pending {
    v: Version,
    started: Instant,
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

/// Buffers no longer reachable by key, kept until their readers (or a pre-empted writer) are done.
#[derive(Debug)]
struct Retired {
    replicas: Vec<Replica>,
    readers: u32,
    /// A pre-empted writer may still be writing: wait for `free_at` whatever the readers.
    writer_hold: bool,
    free_at: Instant,
}

#[derive(Default)]
struct Shard {
    map: HashMap<String, Object>,
    retired: HashMap<u64, Retired>,
}

/// Every object.
pub struct Objects {
    shards: Vec<Mutex<Shard>>,
    next_version: AtomicU64,
}

impl Default for Objects {
    fn default() -> Self {
        Objects {
            shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
            next_version: AtomicU64::new(1),
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
    /// Drops a complete version: freed now unless reads are in flight.
    fn drop_complete(&mut self, segs: &Segments, v: Version, lease_until: Option<Instant>) {
        if v.readers == 0 {
            free_all(segs, &v.replicas);
        } else {
            self.retired.insert(
                v.id,
                Retired {
                    replicas: v.replicas,
                    readers: v.readers,
                    writer_hold: false,
                    free_at: lease_until.unwrap_or_else(Instant::now),
                },
            );
        }
    }

    /// Drops an unfinished write: its writer may still be writing, so the space is kept until
    /// `started + release_timeout`.
    fn drop_pending(&mut self, p: Pending, cfg: &MasterConfig) {
        self.retired.insert(
            p.v.id,
            Retired {
                replicas: p.v.replicas,
                readers: 0,
                writer_hold: true,
                free_at: p.started + cfg.put_start_release_timeout,
            },
        );
    }

    /// Removes `key` whatever its state (the caller checked leases).
    fn remove_object(&mut self, key: &str, segs: &Segments, cfg: &MasterConfig) -> bool {
        let Some(mut o) = self.map.remove(key) else {
            return false;
        };
        if let Some(p) = o.pending.take() {
            self.drop_pending(p, cfg);
        }
        if let Some(c) = o.complete.take() {
            self.drop_complete(segs, c, o.lease_until);
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

/// What an eviction pass may consider.
struct Candidate {
    last_access: Instant,
    soft: bool,
    size: u64,
    key: String,
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

    fn version_id(&self) -> u64 {
        self.next_version.fetch_add(1, Ordering::Relaxed)
    }

    /// Objects stored (complete or in flight).
    pub fn count(&self) -> usize {
        self.all().map(|s| s.map.len()).sum()
    }

    /// First phase of one put/upsert. `allocate` finds space (it may evict); it is called with
    /// no shard lock held.
    pub fn start(
        &self,
        item: &PutItem,
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
                        .is_some_and(|c| c.size == size && c.readers == 0);
                if in_place {
                    let mut v = o.complete.take().unwrap_or_else(|| unreachable!());
                    v.id = self.version_id();
                    let result = StartResult {
                        code: code::OK,
                        version: v.id,
                        replicas: v.replicas.iter().map(Replica::desc).collect(),
                    };
                    o.pending = Some(Pending { v, started: now });
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
        let old = o.pending.replace(Pending {
            v: Version {
                id,
                size,
                replicas,
                readers: 0,
            },
            started: now,
        });
        if let Some(p) = old {
            // A write already in progress on this key is pre-empted.
            sh.drop_pending(p, cfg);
        }
        result
    }

    /// PutEnd: publishes the write; the previous value (if any) is freed once unread.
    pub fn end(&self, kv: &KeyVersion, segs: &Segments) -> i32 {
        let mut sh = self.shard(&kv.key);
        let sh = &mut *sh;
        let Some(o) = sh.map.get_mut(&kv.key) else {
            return code::OBJECT_NOT_FOUND;
        };
        if o.pending.as_ref().is_none_or(|p| p.v.id != kv.version) {
            return code::INVALID_WRITE;
        }
        let p = o.pending.take().unwrap_or_else(|| unreachable!());
        o.last_access = Instant::now();
        let lease = o.lease_until;
        if let Some(old) = o.complete.replace(p.v) {
            sh.drop_complete(segs, old, lease);
        }
        code::OK
    }

    /// PutRevoke: drops the write (the writer has stopped writing), keeping an older value.
    pub fn revoke(&self, kv: &KeyVersion, segs: &Segments) -> i32 {
        let mut sh = self.shard(&kv.key);
        let Some(o) = sh.map.get_mut(&kv.key) else {
            return code::OBJECT_NOT_FOUND;
        };
        if o.pending.as_ref().is_none_or(|p| p.v.id != kv.version) {
            return code::INVALID_WRITE;
        }
        let p = o.pending.take().unwrap_or_else(|| unreachable!());
        free_all(segs, &p.v.replicas);
        if o.complete.is_none() {
            sh.map.remove(&kv.key);
        }
        code::OK
    }

    /// Replica lists for reading; each hit counts a reader and extends the lease.
    pub fn get(&self, key: &str, cfg: &MasterConfig) -> GetResult {
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
        c.readers = c.readers.saturating_add(1);
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

    /// A read of `kv.version` finished.
    pub fn read_done(&self, kv: &KeyVersion, segs: &Segments) {
        let mut sh = self.shard(&kv.key);
        if let Some(c) = sh
            .map
            .get_mut(&kv.key)
            .and_then(|o| o.complete.as_mut())
            .filter(|c| c.id == kv.version)
        {
            c.readers = c.readers.saturating_sub(1);
            return;
        }
        if let Some(r) = sh.retired.get_mut(&kv.version) {
            r.readers = r.readers.saturating_sub(1);
            if r.readers == 0 && !r.writer_hold {
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
        self.shard(key)
            .try_remove(key, force, Instant::now(), segs, cfg)
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
                    n += 1;
                }
            }
        }
        n
    }

    /// Drops every replica on the given segments (they were unmounted); objects left with no
    /// replica disappear. Returns the objects dropped.
    pub fn drop_segments(&self, ids: &HashSet<u64>) -> usize {
        let mut dropped = 0;
        for mut sh in self.all() {
            let before = sh.map.len();
            sh.map.retain(|_, o| {
                if let Some(c) = o.complete.as_mut() {
                    c.replicas.retain(|r| !ids.contains(&r.seg));
                    if c.replicas.is_empty() {
                        o.complete = None;
                    }
                }
                if let Some(p) = o.pending.as_mut() {
                    p.v.replicas.retain(|r| !ids.contains(&r.seg));
                    if p.v.replicas.is_empty() {
                        o.pending = None;
                    }
                }
                o.complete.is_some() || o.pending.is_some()
            });
            dropped += before - sh.map.len();
            sh.retired.retain(|_, r| {
                r.replicas.retain(|x| !ids.contains(&x.seg));
                !r.replicas.is_empty()
            });
        }
        dropped
    }

    /// Periodic work: frees retired buffers that are due, discards writes older than the discard
    /// timeout, ends expired soft pins.
    pub fn sweep(&self, segs: &Segments, cfg: &MasterConfig) {
        let now = Instant::now();
        for mut sh in self.all() {
            let sh = &mut *sh;
            let due: Vec<u64> = sh
                .retired
                .iter()
                .filter(|(_, r)| r.free_at <= now || (r.readers == 0 && !r.writer_hold))
                .map(|(id, _)| *id)
                .collect();
            for id in due {
                if let Some(r) = sh.retired.remove(&id) {
                    free_all(segs, &r.replicas);
                }
            }
            let stale: Vec<String> = sh
                .map
                .iter()
                .filter(|(_, o)| {
                    o.pending
                        .as_ref()
                        .is_some_and(|p| p.started + cfg.put_start_discard_timeout <= now)
                })
                .map(|(k, _)| k.clone())
                .collect();
            for k in stale {
                let Some(o) = sh.map.get_mut(&k) else {
                    continue;
                };
                let p = o.pending.take().unwrap_or_else(|| unreachable!());
                let gone = o.complete.is_none();
                sh.drop_pending(p, cfg);
                if gone {
                    sh.map.remove(&k);
                }
            }
            for o in sh.map.values_mut() {
                if o.soft_pin_until.is_some_and(|t| t <= now) {
                    o.soft_pin_until = None;
                }
            }
        }
    }

    /// Evicts roughly least-recently-used objects until `target` bytes are freed, skipping
    /// leased, hard-pinned and unfinished objects (soft-pinned ones last, when allowed).
    /// Returns the bytes freed.
    pub fn evict(&self, target: u64, segs: &Segments, cfg: &MasterConfig) -> u64 {
        let now = Instant::now();
        let mut cands: Vec<Candidate> = Vec::new();
        for sh in self.all() {
            for (k, o) in &sh.map {
                let Some(c) = &o.complete else { continue };
                let soft = o.soft_pin_until.is_some();
                if o.hard_pin
                    || o.pending.is_some()
                    || lease_active(o, now)
                    || c.readers > 0
                    || (soft && !cfg.allow_evict_soft_pinned)
                {
                    continue;
                }
                cands.push(Candidate {
                    last_access: o.last_access,
                    soft,
                    size: c.size * c.replicas.len() as u64,
                    key: k.clone(),
                });
            }
        }
        cands.sort_by_key(|c| (c.soft, c.last_access));
        let mut freed = 0;
        for c in cands {
            if freed >= target {
                break;
            }
            if self.remove(&c.key, false, segs, cfg) == code::OK {
                freed += c.size;
            }
        }
        freed
    }
}
