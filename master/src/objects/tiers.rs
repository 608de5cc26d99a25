//! Objects and the disk tier: choosing a version to write (held for its owner until the owner
//! reports), adding the disk replica it reports (or ending the record when the version is gone
//! by then), dropping memory replicas that a disk replica backs, and what a tier's owner
//! reports when it mounts its tier (records adopted or refused) or loses records to its quota.
//!
//! Disk replicas are not journaled: after a failover the new leader has never seen the tier,
//! and its owner's records are adopted again (see `Objects::adopt`). An object left with only
//! disk replicas is removed from the journal.

use super::*;
use crate::segments::DiskMount;
use std::collections::HashSet;
use tidewire::store::proto::{DiskRecord, OffloadDone, OffloadJob};

impl Version {
    fn has_disk(&self) -> bool {
        self.replicas.as_slice().iter().any(|r| r.on_disk())
    }

    fn memory_bytes(&self) -> u64 {
        let n = self
            .replicas
            .as_slice()
            .iter()
            .filter(|r| !r.on_disk())
            .count();
        self.size.saturating_mul(n as u64)
    }
}

/// What eviction may do with one object when a disk tier is on.
pub(super) enum TierChoice {
    /// Drop its memory replicas: a disk replica holds the value.
    Demote,
    /// Queue it for its owner's tier (then demote it).
    Offload,
    /// Keep it in memory (no room in the queue, and dropping it would lose it).
    Keep,
    /// Remove it as eviction always did (no tier can take it).
    Remove,
}

impl Objects {
    /// The memory bytes eviction may free from a complete version (its disk replicas stay).
    pub(super) fn memory_bytes(c: &Version) -> u64 {
        c.memory_bytes()
    }

    /// Holds the complete version of `key` for the owner of one of its memory replicas whose
    /// owner has a live disk tier, and returns the job to queue for that owner. `None` when it
    /// has a disk replica already, or no such owner.
    pub fn offload_job(
        &self,
        key: &str,
        segs: &Segments,
        evict: bool,
    ) -> Option<(u64, OffloadJob)> {
        let (hash, si) = self.locate(key);
        let now = self.now();
        let mut sh = self.shard(si);
        let slot = sh.table.find(hash, key)?;
        let o = sh.table.get_mut(slot)?;
        let c = o.complete.as_mut()?;
        if c.has_disk() {
            return None;
        }
        let (owner, _, addr) = c
            .replicas
            .as_slice()
            .iter()
            .find_map(|r| segs.offload_target(r))?;
        c.holds.add(owner, now);
        let job = OffloadJob {
            key: key.to_string(),
            version: c.id,
            addr,
            len: c.size,
            evict,
            promote: None,
        };
        sh.watch(now);
        Some((owner, job))
    }

    /// A promotion of `key` (complete, only on disk): memory in its tier owner's segment, and
    /// the job that reads the record into it. `None` when it has a memory replica, its tier's
    /// owner has no room, or it is gone.
    pub fn promote_job(
        &self,
        key: &str,
        segs: &Segments,
    ) -> Option<(u64, OffloadJob, (Replica, u64))> {
        let (hash, si) = self.locate(key);
        let sh = self.shard(si);
        let c = sh
            .table
            .lookup(hash, key)
            .and_then(|o| o.complete.as_ref())?;
        if c.replicas.as_slice().iter().any(|r| !r.on_disk()) {
            return None;
        }
        let disk = *c.replicas.as_slice().first()?;
        let owner = segs.owner_of(disk.seg)?;
        let (into, addr) = segs.alloc_beside(disk.seg, c.size)?;
        let job = OffloadJob {
            key: key.to_string(),
            version: c.id,
            addr,
            len: c.size,
            evict: false,
            promote: Some(disk.offset),
        };
        Some((owner, job, (into, c.size)))
    }

    /// A promotion finished: its memory `into` becomes a replica when the bytes are in place
    /// and the version is still the key's complete one without a memory replica; otherwise it
    /// is freed. Returns whether the object is in memory again.
    pub fn promotion_done(&self, d: &OffloadDone, into: (Replica, u64), segs: &Segments) -> bool {
        let (into, len) = into;
        let (hash, si) = self.locate(&d.key);
        let mut sh = self.shard(si);
        let o = sh
            .table
            .find(hash, &d.key)
            .and_then(|s| sh.table.get_mut(s));
        let hard_pin = o.as_ref().is_some_and(|o| o.hard_pin);
        let c = o.and_then(|o| o.complete.as_mut()).filter(|c| {
            d.loc.is_some()
                && c.id == d.version
                && c.replicas.as_slice().iter().all(|r| r.on_disk())
        });
        let Some(c) = c else {
            drop(sh);
            segs.free(&into, len);
            return false;
        };
        let mut reps = vec![into];
        reps.extend_from_slice(c.replicas.as_slice());
        if let Some(r) = Replicas::from_vec(reps) {
            c.replicas = r;
        }
        let (size, id) = (c.size, c.id);
        self.emit(|| Record::put(&d.key, size, segs.named(&[into]), hard_pin, Some(id)));
        self.kv_stored(&d.key, Medium::Cpu);
        true
    }

    /// Whether eviction keeps the object's value (demoting it to its disk replica, or writing
    /// it to its owner's tier first): then a lease, which guards removal, does not hold it in
    /// memory (its readers are protected by their read holds).
    pub(super) fn keeps_value(o: &Object, segs: &Segments, cfg: &MasterConfig) -> bool {
        let Some(c) = o.complete.as_ref() else {
            return false;
        };
        c.has_disk()
            || (cfg.tier.on_evict
                && c.replicas
                    .as_slice()
                    .iter()
                    .any(|r| segs.offload_target(r).is_some()))
    }

    /// What eviction does with the object in `slot` (see [`TierChoice`]).
    pub(super) fn tier_choice(
        o: &Object,
        segs: &Segments,
        cfg: &MasterConfig,
        room: bool,
    ) -> TierChoice {
        let Some(c) = o.complete.as_ref() else {
            return TierChoice::Remove;
        };
        if c.has_disk() {
            return TierChoice::Demote;
        }
        let owned = c
            .replicas
            .as_slice()
            .iter()
            .any(|r| segs.offload_target(r).is_some());
        match (owned, cfg.tier.on_evict, room) {
            (false, _, _) => TierChoice::Remove,
            (true, true, true) => TierChoice::Offload,
            (true, true, false) if !cfg.tier.force_evict => TierChoice::Keep,
            _ => TierChoice::Remove,
        }
    }

    /// The owner `owner` of tier `disk` reports a job. The disk replica is added when the
    /// version is still the key's complete one; otherwise the record is ended. With the job's
    /// `evict`, the memory replicas are dropped at once when no read holds them. Returns the
    /// memory bytes freed.
    pub fn offload_done(&self, owner: u64, disk: u32, d: &OffloadDone, segs: &Segments) -> u64 {
        let (hash, si) = self.locate(&d.key);
        let mut sh = self.shard(si);
        let sh = &mut *sh;
        let slot = sh.table.find(hash, &d.key);
        let current = slot
            .and_then(|s| sh.table.get_mut(s))
            .filter(|o| o.complete.as_ref().is_some_and(|c| c.id == d.version));
        let Some(o) = current else {
            if let Some(r) = sh.retired.get_mut(&d.version) {
                r.holds.end(owner);
            }
            if let Some(loc) = d.loc {
                segs.disk_refused(disk, loc);
            }
            return 0;
        };
        let Some(c) = o.complete.as_mut() else {
            return 0;
        };
        c.holds.end(owner);
        let Some(loc) = d.loc else {
            return 0;
        };
        if c.has_disk() {
            segs.disk_refused(disk, loc);
            return 0;
        }
        let mut reps = c.replicas.as_slice().to_vec();
        reps.push(Replica {
            seg: disk,
            offset: loc,
        });
        if let Some(r) = Replicas::from_vec(reps) {
            c.replicas = r;
        }
        segs.disk_added(disk, c.size);
        self.kv_stored(&d.key, Medium::Disk);
        if d.evict && c.holds.is_empty() {
            let key = d.key.as_str();
            return self.demote(key, c, segs);
        }
        0
    }

    /// Drops the memory replicas of `key`'s version `c` (which has a disk replica and no read
    /// hold); returns the bytes freed. The object leaves the journal (disk replicas are not
    /// journaled), and KV events say its memory copy is gone.
    pub(super) fn demote(&self, key: &str, c: &mut Version, segs: &Segments) -> u64 {
        let freed = c.memory_bytes();
        let Some(kept) = c.replicas.kept(|r| r.on_disk()) else {
            return 0;
        };
        for r in c.replicas.as_slice().iter().filter(|r| !r.on_disk()) {
            segs.free(r, c.size);
        }
        c.replicas = kept;
        self.emit(|| Record::del(key));
        self.kv_removed(key, Some(Medium::Cpu));
        freed
    }

    /// A tier's owner reports records at mount. A known tier (taken over): a record stays when
    /// it is the disk replica of the key's complete version. A fresh tier: a record becomes a
    /// new object when the key is absent. Others get a code and are ended by the owner.
    pub fn adopt(
        &self,
        mount: DiskMount,
        records: &[DiskRecord],
        segs: &Segments,
        confirmed: &mut HashSet<u64>,
    ) -> Vec<i32> {
        let now = self.now();
        records
            .iter()
            .map(|rec| {
                let (hash, si) = self.locate(&rec.key);
                let mut sh = self.shard(si);
                let found = sh.table.find(hash, &rec.key);
                match mount {
                    DiskMount::Known(id) => {
                        let mine = found
                            .and_then(|s| sh.table.get(s))
                            .and_then(|o| o.complete.as_ref())
                            .is_some_and(|c| {
                                c.size == rec.size
                                    && c.replicas.as_slice().contains(&Replica {
                                        seg: id,
                                        offset: rec.loc,
                                    })
                            });
                        if mine {
                            confirmed.insert(rec.loc);
                            code::OK
                        } else {
                            code::OBJECT_NOT_FOUND
                        }
                    }
                    DiskMount::Fresh(id) => {
                        if found.is_some() {
                            return code::OBJECT_ALREADY_EXISTS;
                        }
                        let slot = sh.table.insert(hash, &rec.key, Object::new(false, now));
                        let Some(o) = sh.table.get_mut(slot) else {
                            return code::INTERNAL_ERROR;
                        };
                        o.complete = Some(Version {
                            id: self.version_id(),
                            size: rec.size,
                            replicas: Replicas::One(Replica {
                                seg: id,
                                offset: rec.loc,
                            }),
                            holds: Holds::default(),
                        });
                        segs.disk_added(id, rec.size);
                        self.kv_stored(&rec.key, Medium::Disk);
                        code::OK
                    }
                }
            })
            .collect()
    }

    /// Drops the replicas on tier `disk` whose records are not in `keep` (after a takeover:
    /// records the owner did not find whole) or, with `only`, those in `only` (records lost to
    /// the owner's quota). Objects left with no replica are removed. Returns the objects
    /// removed.
    pub fn drop_disk_records(
        &self,
        disk: u32,
        keep: Option<&HashSet<u64>>,
        only: Option<&HashSet<u64>>,
        segs: &Segments,
    ) -> usize {
        let gone = |r: &Replica| {
            r.seg == disk
                && keep.is_none_or(|k| !k.contains(&r.offset))
                && only.is_none_or(|o| o.contains(&r.offset))
        };
        let mut removed = 0;
        let mut bytes = 0u64;
        for mut sh in self.all() {
            let sh = &mut *sh;
            let slots: Vec<u32> = sh
                .table
                .iter()
                .filter(|(_, _, o)| {
                    o.complete
                        .as_ref()
                        .is_some_and(|c| c.replicas.as_slice().iter().any(gone))
                })
                .map(|(s, _, _)| s)
                .collect();
            for s in slots {
                let Some((key, o)) = sh.table.entry_mut(s) else {
                    continue;
                };
                let Some(c) = o.complete.as_mut() else {
                    continue;
                };
                bytes += c.size;
                match c.replicas.kept(|r| !gone(r)) {
                    Some(kept) => c.replicas = kept,
                    None => {
                        // Nothing left to read: the object goes (its holds read nothing more).
                        self.kv_removed(key, Some(c.medium()));
                        o.complete = None;
                        if o.pending.is_none() {
                            sh.table.remove(s);
                        }
                        removed += 1;
                    }
                }
            }
        }
        segs.disk_forgot(disk, bytes);
        removed
    }
}
