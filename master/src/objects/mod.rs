//! Object metadata, sharded by key: two-phase writes, versions with read holds, leases, pins,
//! retired buffers, eviction candidates. Lock order: one shard, then the segment table, then a
//! segment allocator.
//!
//! A read hold is one client's reads of one version in progress: Get adds it, ReadDone ends it.
//! A hold keeps the version's buffers from reuse while it is live: for the lease after it was
//! granted, and beyond that, up to `MasterConfig::read_hold_max`, while its client's heartbeats
//! keep arriving. The sweep ends holds that are no longer live, so a reader that dies mid-read
//! holds its buffers for at most its lease (or a few seconds past its last heartbeat).
//!
//! Memory: a shard keeps its objects as fixed-size records in a slab with an index of slot
//! numbers ([`table`]). A record is 96 bytes: where its key lies in the shard's key buffer
//! (the key is stored once, with no allocation of its own), the complete version with its
//! replica inline (a replica is a segment id and an offset: the length is the object's size,
//! the endpoint and address come from the segment), and times as nanosecond ticks. An
//! unfinished write, read holds and extra replicas are allocated only while they exist. Mass
//! removals walk the slots in chunks, letting go of the shard's lock between them ([`walk`]),
//! and compact the slab and the key buffer behind them.

use super::MasterConfig;
use super::journal_record::Record;
use super::kv_events::{Event, KvEvents, Medium};
use super::segments::{Placed, Replica, Segments};
use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};
use tidewire::store::proto::{GetResult, KeyVersion, PutItem, StartResult, WriteConfig, code};
use tidewire::sync::LockClean;

mod copies;
mod events;
mod holds;
mod journal;
mod replicas;
mod table;
mod tiers;
mod upkeep;
mod view;
mod walk;
mod write;

pub use copies::Cleared;
pub use events::Inventory;
use holds::{Holds, Retired, Writer};
use replicas::Replicas;
use table::Table;
pub use view::{KeyInfo, KeyList};
pub use walk::{Swept, WALK_START};

const SHARD_BITS: u32 = 10;
const SHARDS: usize = 1 << SHARD_BITS;

/// A point in time: nanoseconds since the master started, plus one (0 means "never").
type Tick = u64;

/// `d` in nanoseconds (saturating).
fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// One readable or in-flight value: its buffers and the reads in progress on them.
#[derive(Debug)]
struct Version {
    id: u64,
    size: u64,
    replicas: Replicas,
    holds: Holds,
}

#[derive(Debug)]
struct Pending {
    v: Version,
    started: Tick,
    /// The writing client (only it can report the write finished).
    writer: u64,
}

#[derive(Debug)]
struct Object {
    /// Where the key's bytes start in its table's key buffer (set by [`Table::insert`]).
    key_at: usize,
    /// The key's length in bytes.
    key_len: u32,
    complete: Option<Version>,
    pending: Option<Box<Pending>>,
    /// 0: no lease.
    lease_until: Tick,
    /// 0: not soft-pinned.
    soft_pin_until: Tick,
    last_access: Tick,
    hard_pin: bool,
}

const _: () = assert!(std::mem::size_of::<Option<Object>>() <= 96);

impl Object {
    /// A record with no value yet; [`Table::insert`] gives it its key.
    fn new(hard_pin: bool, now: Tick) -> Object {
        Object {
            key_at: 0,
            key_len: 0,
            complete: None,
            pending: None,
            lease_until: 0,
            soft_pin_until: 0,
            last_access: now,
            hard_pin,
        }
    }
}

struct Shard {
    table: Table,
    retired: HashMap<u64, Retired>,
    /// The earliest tick at which the sweep may find something to do among this shard's
    /// objects (a stale write, an expired soft pin, a read hold to check); [`NEVER`] when none
    /// has any. Every change that gives an object such state moves it earlier, and the sweep
    /// sets it again from what it leaves, so a shard of plain objects is never walked by it.
    watch_at: Tick,
}

/// No time at all (a shard with nothing for the sweep to watch).
const NEVER: Tick = Tick::MAX;

/// Receives a journal record (queued, not yet durable) while the key's shard is locked, so the
/// records of one key are queued in the order its changes happened.
pub type Sink = Box<dyn Fn(String) + Send + Sync>;

/// A complete object as the journal keeps it: key, size, replicas, hard pin.
pub type Durable = (String, u64, Vec<Replica>, bool, Option<u64>);

/// Space an unfinished write may still be writing, as the journal keeps it: key, write
/// version, writer, bytes per replica, buffers. A new leader keeps it from reuse until that
/// writer reports or the release timeout passes, so a write stalled across a failover cannot
/// land in another object.
pub type WriteHold = (String, u64, u64, u64, Vec<Replica>);

/// Every object.
pub struct Objects {
    shards: Box<[Mutex<Shard>]>,
    hasher: RandomState,
    epoch: Instant,
    next_version: AtomicU64,
    /// Set on a master that journals its objects (HA with durability).
    pub sink: OnceLock<Sink>,
    /// Set on a master that publishes KV events: every change of which keys are readable is
    /// pushed there while the key's shard is locked (so each key's events keep its order).
    pub kv: OnceLock<Arc<KvEvents>>,
    /// Objects removed since memory was last given back to the OS.
    removed: AtomicU64,
    /// The shard the sweep's object walks start at (where the last sweep ran out of budget).
    sweep_from: AtomicUsize,
    /// Records one sweep walks at most ([`upkeep::SWEEP_RECORDS`]; tests lower it).
    sweep_records: AtomicUsize,
}

impl Default for Objects {
    fn default() -> Self {
        let hasher = RandomState::new();
        Objects {
            shards: (0..SHARDS)
                .map(|_| {
                    Mutex::new(Shard {
                        table: Table::new(hasher.clone()),
                        retired: HashMap::new(),
                        watch_at: NEVER,
                    })
                })
                .collect(),
            hasher,
            epoch: Instant::now(),
            next_version: AtomicU64::new(1),
            sink: OnceLock::new(),
            kv: OnceLock::new(),
            removed: AtomicU64::new(0),
            sweep_from: AtomicUsize::new(0),
            sweep_records: AtomicUsize::new(upkeep::SWEEP_RECORDS),
        }
    }
}

fn free_all(segs: &Segments, size: u64, replicas: &Replicas) {
    for r in replicas.as_slice() {
        segs.free(r, size);
    }
}

fn lease_active(o: &Object, now: Tick) -> bool {
    o.lease_until > now
}

/// Drops a complete version: freed now unless reads are in flight (then when they end). With
/// `later`, buffers to free go there instead (the caller frees them after the shard's lock).
fn drop_complete(
    retired: &mut HashMap<u64, Retired>,
    segs: &Segments,
    v: Version,
    later: Option<&mut Vec<(Replica, u64)>>,
) {
    if v.holds.is_empty() {
        match later {
            Some(out) => out.extend(v.replicas.as_slice().iter().map(|r| (*r, v.size))),
            None => free_all(segs, v.size, &v.replicas),
        }
    } else {
        retired.insert(
            v.id,
            Retired {
                size: v.size,
                replicas: v.replicas,
                holds: v.holds,
                writer: None,
                free_at: 0,
            },
        );
    }
}

/// Drops an unfinished write whose writer may still be writing: the space is kept until the
/// writer reports (PutEnd/PutRevoke of this version) or until `started + release_timeout`
/// (a writer's transfer deadline can exceed the discard timeout, so only the release timeout
/// is sure to outlast a silent writer).
fn drop_pending(retired: &mut HashMap<u64, Retired>, key: &str, p: Pending, cfg: &MasterConfig) {
    let free_at = p
        .started
        .saturating_add(nanos(cfg.put_start_release_timeout));
    hold_write(
        retired,
        key,
        p.v.id,
        p.writer,
        p.v.size,
        p.v.replicas,
        free_at,
    );
}

/// Keeps `replicas` for the write `version` of `writer` until it reports or `free_at`.
fn hold_write(
    retired: &mut HashMap<u64, Retired>,
    key: &str,
    version: u64,
    writer: u64,
    size: u64,
    replicas: Replicas,
    free_at: Tick,
) {
    retired.insert(
        version,
        Retired {
            size,
            replicas,
            holds: Holds::default(),
            writer: Some(Writer {
                client: writer,
                key: key.into(),
            }),
            free_at,
        },
    );
}

/// The writer of a dropped write reports that it stopped writing: its space is freed now.
/// Returns whether `version` was such a write of `writer`.
fn writer_done(
    retired: &mut HashMap<u64, Retired>,
    version: u64,
    writer: u64,
    segs: &Segments,
) -> bool {
    let mine = |r: &Retired| r.writer.as_ref().is_some_and(|w| w.client == writer);
    match retired.remove(&version) {
        Some(r) if mine(&r) => {
            free_all(segs, r.size, &r.replicas);
            true
        }
        Some(r) => {
            retired.insert(version, r);
            false
        }
        None => false,
    }
}

impl Version {
    /// Where its value is, as KV events name it: memory when any replica is in memory.
    fn medium(&self) -> Medium {
        match self.replicas.as_slice().iter().all(|r| r.on_disk()) {
            true => Medium::Disk,
            false => Medium::Cpu,
        }
    }
}

impl Shard {
    /// The sweep must look at this shard's objects at `at` (or earlier, if already due then).
    fn watch(&mut self, at: Tick) {
        self.watch_at = self.watch_at.min(at);
    }

    /// PutEnd/PutRevoke of a version that is not the key's write in progress: if it is a dropped
    /// (pre-empted or discarded) write of this writer, its space is freed now. `INVALID_WRITE`,
    /// or `OBJECT_NOT_FOUND` when the key is gone.
    fn not_current(
        &mut self,
        present: bool,
        kv: &KeyVersion,
        writer: u64,
        segs: &Segments,
        emit: &dyn Fn(Record<'_>),
    ) -> i32 {
        if writer_done(&mut self.retired, kv.version, writer, segs) {
            emit(Record::unhold(&kv.key, kv.version));
        }
        match present {
            true => code::INVALID_WRITE,
            false => code::OBJECT_NOT_FOUND,
        }
    }

    /// Frees retired space that is due; returns the (key, version) of the writes among it.
    fn free_due(&mut self, now: Tick, segs: &Segments) -> Vec<(Box<str>, u64)> {
        let due: Vec<u64> = self
            .retired
            .iter()
            .filter(|(_, r)| r.due(now))
            .map(|(id, _)| *id)
            .collect();
        let mut writes = Vec::new();
        for id in due {
            if let Some(r) = self.retired.remove(&id) {
                free_all(segs, r.size, &r.replicas);
                if let Some(w) = r.writer {
                    writes.push((w.key, id));
                }
            }
        }
        if self.retired.is_empty() && self.retired.capacity() > 64 {
            self.retired = HashMap::new();
        }
        writes
    }

    /// Removes the object in `slot` whatever its state (the caller checked leases); `removed`
    /// sees its key, and the medium of its readable value if it had one. See [`drop_complete`]
    /// for `later`. Returns whether `slot` held an object.
    fn remove_slot(
        &mut self,
        slot: u32,
        segs: &Segments,
        cfg: &MasterConfig,
        later: Option<&mut Vec<(Replica, u64)>>,
        removed: impl FnOnce(&str, Option<Medium>),
    ) -> bool {
        let retired = &mut self.retired;
        self.table
            .remove_with(slot, |mut o, key| {
                if let Some(p) = o.pending.take() {
                    drop_pending(retired, key, *p, cfg);
                }
                let medium = o.complete.as_ref().map(Version::medium);
                if let Some(c) = o.complete.take() {
                    drop_complete(retired, segs, c, later);
                }
                removed(key, medium);
            })
            .is_some()
    }

    /// Whether the object in `slot` may be removed now: always with `force`, otherwise only
    /// without a lease and without a write in flight (else the code why not).
    fn removable(&self, slot: u32, force: bool, now: Tick) -> Result<(), i32> {
        let Some(o) = self.table.get(slot) else {
            return Err(code::OBJECT_NOT_FOUND);
        };
        if !force {
            if lease_active(o, now) {
                return Err(code::OBJECT_HAS_LEASE);
            }
            if o.pending.is_some() {
                return Err(code::REPLICA_IS_NOT_READY);
            }
        }
        Ok(())
    }
}

impl Objects {
    /// The key's hash and shard. The shard comes from a multiplicative mix of the hash, so the
    /// keys of one shard still spread over all of its index's buckets and tags.
    fn locate(&self, key: &str) -> (u64, usize) {
        let h = self.hasher.hash_one(key);
        let shard = h.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - SHARD_BITS);
        (h, shard as usize)
    }

    fn shard(&self, i: usize) -> MutexGuard<'_, Shard> {
        self.shards[i].lock_clean()
    }

    /// Buffers of removed or replaced objects not freed yet (a read of them could still run).
    pub fn retired_count(&self) -> usize {
        self.all().map(|sh| sh.retired.len()).sum()
    }

    fn all(&self) -> impl Iterator<Item = MutexGuard<'_, Shard>> {
        self.shards.iter().map(|s| s.lock_clean())
    }

    fn now(&self) -> Tick {
        nanos(self.epoch.elapsed()).saturating_add(1)
    }

    /// Queues a journal record when this master journals (built only then).
    fn emit<'a>(&self, record: impl FnOnce() -> Record<'a>) {
        if let Some(sink) = self.sink.get() {
            sink(record().encode());
        }
    }

    /// KV events: `key` became readable, in `medium`.
    fn kv_stored(&self, key: &str, medium: Medium) {
        if let Some(kv) = self.kv.get() {
            kv.push(Event::Stored {
                key: key.into(),
                medium,
            });
        }
    }

    /// KV events: `key` is no longer readable (when it was: `medium` is `Some`).
    fn kv_removed(&self, key: &str, medium: Option<Medium>) {
        if let (Some(kv), Some(medium)) = (self.kv.get(), medium) {
            kv.push(Event::Removed {
                key: key.into(),
                medium,
            });
        }
    }

    fn version_id(&self) -> u64 {
        self.next_version.fetch_add(1, Ordering::Relaxed)
    }

    /// Objects stored (complete or in flight).
    pub fn count(&self) -> usize {
        self.all().map(|s| s.table.len()).sum()
    }

    /// Replica lists for reading; each hit adds a read hold of `reader` and extends the lease.
    /// The shard locks are let go before the replicas are resolved against the segment table.
    pub fn get(
        &self,
        keys: &[String],
        reader: u64,
        cfg: &MasterConfig,
        segs: &Segments,
    ) -> Vec<GetResult> {
        let now = self.now();
        let lease_until = now.saturating_add(nanos(cfg.lease_ttl));
        let soft_until = now.saturating_add(nanos(cfg.soft_pin_ttl));
        let found: Vec<Result<(u64, u64, Replicas), i32>> = keys
            .iter()
            .map(|key| {
                let (hash, si) = self.locate(key);
                let mut sh = self.shard(si);
                let slot = sh.table.find(hash, key).ok_or(code::OBJECT_NOT_FOUND)?;
                let o = sh.table.get_mut(slot).ok_or(code::OBJECT_NOT_FOUND)?;
                let c = o.complete.as_mut().ok_or(code::REPLICA_IS_NOT_READY)?;
                c.holds.add(reader, now);
                let found = (c.size, c.id, c.replicas.clone());
                o.lease_until = o.lease_until.max(lease_until);
                o.last_access = now;
                if o.soft_pin_until != 0 {
                    o.soft_pin_until = soft_until;
                }
                // The hold is live at least for the lease; the sweep checks it from then on.
                sh.watch(lease_until);
                Ok(found)
            })
            .collect();
        segs.with_view(|view| {
            found
                .into_iter()
                .map(|f| {
                    let (size, version, reps) = match f {
                        Ok(found) => found,
                        Err(code) => return GetResult::miss(code),
                    };
                    let replicas: Vec<_> = reps
                        .as_slice()
                        .iter()
                        .filter_map(|r| view.desc(r, size))
                        .collect();
                    if replicas.is_empty() {
                        // Its segments were unmounted since the shard was read: the object
                        // went with them.
                        return GetResult::miss(code::OBJECT_NOT_FOUND);
                    }
                    GetResult {
                        code: code::OK,
                        size,
                        version,
                        replicas,
                    }
                })
                .collect()
        })
    }

    /// A read of `kv.version` by `reader` finished.
    pub fn read_done(&self, kv: &KeyVersion, reader: u64, segs: &Segments) {
        let (hash, si) = self.locate(&kv.key);
        let mut sh = self.shard(si);
        let sh = &mut *sh;
        if let Some(c) = sh
            .table
            .find(hash, &kv.key)
            .and_then(|s| sh.table.get_mut(s))
            .and_then(|o| o.complete.as_mut())
            .filter(|c| c.id == kv.version)
        {
            c.holds.end(reader);
            return;
        }
        if let Some(r) = sh.retired.get_mut(&kv.version) {
            r.holds.end(reader);
            if r.due(self.now()) {
                if let Some(r) = sh.retired.remove(&kv.version) {
                    free_all(segs, r.size, &r.replicas);
                }
            }
        }
    }

    /// Per key: 1 when readable (granting a lease), 0 otherwise.
    pub fn exist<K: AsRef<str>>(&self, keys: &[K], cfg: &MasterConfig) -> Vec<i32> {
        let now = self.now();
        let until = now.saturating_add(nanos(cfg.lease_ttl));
        keys.iter()
            .map(|key| {
                let key = key.as_ref();
                let (hash, si) = self.locate(key);
                let mut sh = self.shard(si);
                match sh.table.find(hash, key).and_then(|s| sh.table.get_mut(s)) {
                    Some(o) if o.complete.is_some() => {
                        o.lease_until = o.lease_until.max(until);
                        1
                    }
                    _ => 0,
                }
            })
            .collect()
    }

    /// Removes one key: `OBJECT_HAS_LEASE` under a lease unless `force`.
    pub fn remove(&self, key: &str, force: bool, segs: &Segments, cfg: &MasterConfig) -> i32 {
        let (hash, si) = self.locate(key);
        let now = self.now();
        let mut sh = self.shard(si);
        let Some(slot) = sh.table.find(hash, key) else {
            return code::OBJECT_NOT_FOUND;
        };
        if let Err(c) = sh.removable(slot, force, now) {
            return c;
        }
        sh.remove_slot(slot, segs, cfg, None, |key, medium| {
            self.emit(|| Record::del(key));
            self.kv_removed(key, medium);
        });
        self.removed.fetch_add(1, Ordering::Relaxed);
        code::OK
    }
}
