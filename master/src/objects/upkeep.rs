//! Background passes over every shard: segments dropped, read holds and retired buffers ended,
//! stale writes discarded, soft pins expired, sparse slabs compacted, and eviction.

use super::super::MasterConfig;
use super::super::journal_record::Record;
use super::super::segments::Segments;
use super::holds::hold_live;
use super::tiers::TierChoice;
use super::{NEVER, Objects, SHARDS, Shard, Tick, drop_pending, lease_active, nanos};
use crate::tiering::Offloads;
use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashSet};
use std::sync::atomic::Ordering::Relaxed;

/// Records the sweep walks at most per pass (about 5-10 ms of one CPU), beyond the first shard.
pub(super) const SWEEP_RECORDS: usize = 256 << 10;

/// What an eviction pass may consider: where the object is and which version it was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Candidate {
    soft: bool,
    last_access: Tick,
    version: u64,
    shard: usize,
    slot: u32,
    bytes: u64,
}

impl Candidate {
    fn rank(&self) -> (bool, Tick, u64) {
        (self.soft, self.last_access, self.version)
    }
}

impl Ord for Candidate {
    fn cmp(&self, other: &Self) -> Ordering {
        self.rank().cmp(&other.rank())
    }
}

impl PartialOrd for Candidate {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Objects {
    /// Drops every replica on the given segments (they were unmounted); objects left with no
    /// replica disappear. Returns the objects dropped.
    pub fn drop_segments(&self, ids: &HashSet<u32>) -> usize {
        let keep = |r: &super::Replica| !ids.contains(&r.seg);
        let mut dropped = 0;
        for mut sh in self.all() {
            let sh = &mut *sh;
            let slots: Vec<u32> = sh.table.iter().map(|(s, _, _)| s).collect();
            for s in slots {
                let Some((key, o)) = sh.table.entry_mut(s) else {
                    continue;
                };
                if let Some(mut c) = o.complete.take() {
                    match c.replicas.kept(keep) {
                        Some(r) => {
                            c.replicas = r;
                            o.complete = Some(c);
                        }
                        None => self.kv_removed(key, Some(c.medium())),
                    }
                }
                if let Some(mut p) = o.pending.take() {
                    if let Some(r) = p.v.replicas.kept(keep) {
                        p.v.replicas = r;
                        o.pending = Some(p);
                    }
                }
                if o.complete.is_none() && o.pending.is_none() {
                    sh.table.remove(s);
                    dropped += 1;
                }
            }
            sh.retired.retain(|_, r| match r.replicas.kept(keep) {
                Some(x) => {
                    r.replicas = x;
                    true
                }
                None => false,
            });
            sh.table.compact();
        }
        self.removed.fetch_add(dropped as u64, Relaxed);
        dropped
    }

    /// Periodic work: ends read holds that are no longer live (`alive` tells whether a client's
    /// heartbeats are arriving), frees retired buffers that are due, discards writes older than
    /// the discard timeout, ends expired soft pins, compacts slabs left sparse by removals.
    ///
    /// Only shards whose watch time has come are walked object by object, so a master of
    /// millions of plain objects sweeps in microseconds. Those walks stop for this sweep after
    /// [`SWEEP_RECORDS`] records, and the next sweep goes on from the shard this one stopped
    /// at: the sweep thread never takes the CPUs from the calls for a walk of every record (a
    /// write discarded or a hold ended a few sweeps late costs nothing: both timers are
    /// seconds long).
    pub fn sweep(&self, segs: &Segments, cfg: &MasterConfig, alive: &dyn Fn(u64) -> bool) {
        let now = self.now();
        let first = self.sweep_from.load(Relaxed) % SHARDS;
        let mut budget = self.sweep_records.load(Relaxed);
        let mut resume = None;
        for i in (first..SHARDS).chain(0..first) {
            let mut sh = self.shard(i);
            let sh = &mut *sh;
            for r in sh.retired.values_mut() {
                r.holds.retain(|h| hold_live(h, now, cfg, alive));
            }
            for (key, version) in sh.free_due(now, segs) {
                self.emit(|| Record::unhold(&key, version));
            }
            if sh.watch_at <= now {
                if budget > 0 {
                    budget = budget.saturating_sub(sh.table.slots());
                    sh.watch_at = NEVER;
                    sweep_objects(sh, now, cfg, alive);
                } else if resume.is_none() {
                    resume = Some(i);
                }
            }
            sh.table.compact();
        }
        self.sweep_from.store(resume.unwrap_or(first), Relaxed);
    }

    /// Evicts roughly least-recently-used objects until `target` bytes are freed, skipping
    /// leased, hard-pinned and unfinished objects (soft-pinned ones last, when allowed).
    /// Returns the bytes freed, and the bytes queued to be written to a disk tier first (see
    /// [`TierChoice`]). Only the oldest candidates that cover `target` are kept while the
    /// shards are scanned (a few words each, no keys), so the pass needs memory for what it
    /// evicts, not for every object.
    pub fn evict(
        &self,
        target: u64,
        segs: &Segments,
        cfg: &MasterConfig,
        offloads: &Offloads,
    ) -> (u64, u64) {
        if target == 0 {
            return (0, 0);
        }
        let now = self.now();
        let tiered = cfg.tier.enabled;
        // A lease keeps an object from removal, not from losing a memory replica its disk
        // replica backs (a reader is protected by its read hold, not by the lease).
        let evictable = |o: &super::Object| {
            let soft = o.soft_pin_until != 0;
            let demotable = tiered && Objects::keeps_value(o, segs, cfg);
            !(o.hard_pin
                || o.pending.is_some()
                || (lease_active(o, now) && !demotable)
                || o.complete.as_ref().is_none_or(|c| !c.holds.is_empty())
                || (soft && !cfg.allow_evict_soft_pinned))
        };
        let mut heap: BinaryHeap<Candidate> = BinaryHeap::new();
        let mut covered = 0u64;
        for (si, sh) in self.all().enumerate() {
            for (slot, _, o) in sh.table.iter() {
                let Some(c) = o.complete.as_ref().filter(|_| evictable(o)) else {
                    continue;
                };
                let bytes = match tiered {
                    true => Objects::memory_bytes(c),
                    false => c.size.saturating_mul(c.replicas.len() as u64),
                };
                if bytes == 0 {
                    continue;
                }
                let cand = Candidate {
                    soft: o.soft_pin_until != 0,
                    last_access: o.last_access,
                    version: c.id,
                    shard: si,
                    slot,
                    bytes,
                };
                if covered >= target && heap.peek().is_some_and(|top| cand >= *top) {
                    continue;
                }
                covered = covered.saturating_add(cand.bytes);
                heap.push(cand);
                while let Some(top) = heap.peek() {
                    if covered - top.bytes < target {
                        break;
                    }
                    covered -= top.bytes;
                    heap.pop();
                }
            }
        }
        let (mut freed, mut queued) = (0, 0);
        for c in heap.into_sorted_vec() {
            if freed + queued >= target {
                break;
            }
            let mut sh = self.shard(c.shard);
            let same = sh.table.get(c.slot).is_some_and(|o| {
                evictable(o) && o.complete.as_ref().is_some_and(|v| v.id == c.version)
            });
            if !same {
                continue;
            }
            let choice = match tiered {
                true => sh.table.get(c.slot).map(|o| {
                    Objects::tier_choice(o, segs, cfg, offloads.has_room(cfg.tier.queue_limit))
                }),
                false => Some(TierChoice::Remove),
            };
            // Only a removal needs the lease over and no write in flight.
            let removal = matches!(choice, Some(TierChoice::Remove));
            if removal && sh.removable(c.slot, false, now) != Ok(()) {
                continue;
            }
            match choice {
                Some(TierChoice::Demote) => {
                    let Some((key, o)) = sh.table.entry_mut(c.slot) else {
                        continue;
                    };
                    let Some(v) = o.complete.as_mut() else {
                        continue;
                    };
                    freed += self.demote(key, v, segs);
                    offloads.demoted.fetch_add(1, Relaxed);
                }
                Some(TierChoice::Offload) => {
                    let Some(key) = sh.table.entry_mut(c.slot).map(|(k, _)| k.to_string()) else {
                        continue;
                    };
                    drop(sh);
                    if let Some((owner, job)) = self.offload_job(&key, segs, true) {
                        offloads.push(owner, job);
                        queued += c.bytes;
                    }
                }
                Some(TierChoice::Keep) => {
                    offloads.overflow.fetch_add(1, Relaxed);
                }
                Some(TierChoice::Remove) => {
                    let removed = sh.remove_slot(c.slot, segs, cfg, None, |key, medium| {
                        self.emit(|| Record::del(key));
                        self.kv_removed(key, medium);
                    });
                    if removed {
                        self.removed.fetch_add(1, Relaxed);
                        freed += c.bytes;
                    }
                }
                None => {}
            }
        }
        (freed, queued)
    }
}

/// The sweep's walk of one shard's objects: discards stale writes, ends expired soft pins and
/// dead read holds, and sets the shard's watch time from what is left.
fn sweep_objects(sh: &mut Shard, now: Tick, cfg: &MasterConfig, alive: &dyn Fn(u64) -> bool) {
    let discard = nanos(cfg.put_start_discard_timeout);
    let lease = nanos(cfg.lease_ttl);
    let stale: Vec<u32> = sh
        .table
        .iter()
        .filter(|(_, _, o)| {
            o.pending
                .as_ref()
                .is_some_and(|p| p.started.saturating_add(discard) <= now)
        })
        .map(|(s, _, _)| s)
        .collect();
    for s in stale {
        let Some((key, o)) = sh.table.entry_mut(s) else {
            continue;
        };
        let Some(p) = o.pending.take() else {
            continue;
        };
        let gone = o.complete.is_none();
        drop_pending(&mut sh.retired, key, *p, cfg);
        if gone {
            sh.table.remove(s);
        }
    }
    let mut next = NEVER;
    for o in sh.table.values_mut() {
        if o.soft_pin_until != 0 && o.soft_pin_until <= now {
            o.soft_pin_until = 0;
        }
        if o.soft_pin_until != 0 {
            next = next.min(o.soft_pin_until);
        }
        if let Some(p) = &o.pending {
            next = next.min(p.started.saturating_add(discard));
        }
        if let Some(c) = o.complete.as_mut() {
            c.holds.retain(|h| hold_live(h, now, cfg, alive));
            for h in c.holds.iter() {
                // Within its lease a hold is live whatever its client does; past it, it lives
                // on the client's heartbeats, which every sweep checks.
                let lease_end = h.granted.saturating_add(lease);
                next = next.min(if lease_end > now { lease_end } else { now });
            }
        }
    }
    sh.watch(next);
}
