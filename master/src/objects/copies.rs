//! Replicas added to and cleared from complete objects: the two phases of a replica task's
//! transfer (`add_start` reserves the new buffers on the targets and holds the version for its
//! reader, `add_end` makes them replicas of that version, and for a move drops the source
//! replica after) and Mooncake's `BatchReplicaClear`.
//!
//! An object never loses its last replica here: a move's source leaves only once the target
//! (or another replica) is in the version, in the same step under the shard's lock. Buffers
//! that leave a version while reads of it may run are retired with a copy of its read holds.
//! The reserved buffers wait in `retired` as a write's space does (a task's client that dies
//! leaves them to the release timeout; an unmount of their segment drops them).

use super::*;
use tidewire::store::proto::{MAX_REPLICAS, ReplicaAdd, ReplicaDesc};

/// What `clear_replicas` did with one key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cleared {
    /// Left alone (absent, leased, being written, or nothing on the segment).
    Skipped,
    /// Replicas dropped; the object stays.
    Replicas,
    /// The object is gone.
    Object,
}

impl Objects {
    /// The mount ids of the segments holding `key`'s complete memory replicas (a task's
    /// possible sources). `OBJECT_NOT_FOUND`, or `REPLICA_IS_NOT_READY` while only a write
    /// is in flight.
    pub fn replica_segments(&self, key: &str) -> Result<Vec<u32>, i32> {
        let (hash, si) = self.locate(key);
        let sh = self.shard(si);
        let o = sh.table.lookup(hash, key).ok_or(code::OBJECT_NOT_FOUND)?;
        let c = o.complete.as_ref().ok_or(code::REPLICA_IS_NOT_READY)?;
        Ok(c.replicas
            .as_slice()
            .iter()
            .filter(|r| !r.on_disk())
            .map(|r| r.seg)
            .collect())
    }

    /// First phase of adding replicas: buffers for `key`'s complete version on each target
    /// without a replica of it, and a read hold of `client` on the version (its replica on
    /// `source` is read). Targets that hold a replica already are skipped (no ticket when all
    /// do). Codes: `OBJECT_NOT_FOUND`, `REPLICA_IS_NOT_READY`, `REPLICA_NOT_FOUND` (nothing
    /// on `source`), a target's `SEGMENT_NOT_FOUND`, `UNAVAILABLE_IN_CURRENT_STATUS` or
    /// `NO_AVAILABLE_HANDLE`, `INVALID_PARAMS` (more than `MAX_REPLICAS` in all).
    pub fn add_start(
        &self,
        key: &str,
        client: u64,
        source: &str,
        targets: &[String],
        segs: &Segments,
        cfg: &MasterConfig,
    ) -> Result<ReplicaAdd, i32> {
        let src_seg = segs.id_of(source).ok_or(code::REPLICA_NOT_FOUND)?;
        let (hash, si) = self.locate(key);
        let now = self.now();
        let mut sh = self.shard(si);
        let sh = &mut *sh;
        let o = sh
            .table
            .lookup_mut(hash, key)
            .ok_or(code::OBJECT_NOT_FOUND)?;
        let c = o.complete.as_mut().ok_or(code::REPLICA_IS_NOT_READY)?;
        let src = *c
            .replicas
            .as_slice()
            .iter()
            .find(|r| r.seg == src_seg && !r.on_disk())
            .ok_or(code::REPLICA_NOT_FOUND)?;
        let source_desc = segs
            .descs(&[src], c.size)
            .pop()
            .ok_or(code::REPLICA_NOT_FOUND)?;
        let mut fresh: Vec<Replica> = Vec::new();
        let mut descs = Vec::new();
        let undo = |fresh: &[Replica], size| fresh.iter().for_each(|r| segs.free(r, size));
        for name in targets {
            let held = segs
                .id_of(name)
                .is_some_and(|id| c.replicas.as_slice().iter().any(|r| r.seg == id));
            if held || descs.iter().any(|d: &ReplicaDesc| &d.endpoint == name) {
                continue;
            }
            match segs.alloc_on(name, c.size) {
                Ok((r, d)) => {
                    fresh.push(r);
                    descs.push(d);
                }
                Err(e) => {
                    undo(&fresh, c.size);
                    return Err(e);
                }
            }
        }
        if c.replicas.len() + fresh.len() > MAX_REPLICAS as usize {
            undo(&fresh, c.size);
            return Err(code::INVALID_PARAMS);
        }
        c.holds.add(client, now);
        let (version, size) = (c.id, c.size);
        sh.watch(now.saturating_add(nanos(cfg.lease_ttl)));
        let ticket = match Replicas::from_vec(fresh) {
            None => 0,
            Some(reps) => {
                let ticket = self.version_id();
                self.emit(|| {
                    let named = segs.named(reps.as_slice());
                    Record::hold(key, ticket, client, named, size)
                });
                let free_at = now.saturating_add(nanos(cfg.put_start_release_timeout));
                hold_write(&mut sh.retired, key, ticket, client, size, reps, free_at);
                ticket
            }
        };
        Ok(ReplicaAdd {
            version,
            ticket,
            size,
            source: source_desc,
            targets: descs,
        })
    }

    /// Second phase: with `ok`, the buffers of `ticket` become replicas of `version` (one
    /// whose segment holds a replica by now is freed), then the replica on `drop_source`
    /// leaves the version when another is left; without `ok` they are freed. The read hold of
    /// `client` on the version ends either way. Codes: `REPLICA_IS_GONE` (the version is no
    /// longer the key's complete one: nothing added), `SEGMENT_NOT_FOUND` (the reserved
    /// buffers are gone: their segment was unmounted, or the release timeout passed),
    /// `INVALID_PARAMS` (the ticket is another client's).
    #[allow(clippy::too_many_arguments)]
    pub fn add_end(
        &self,
        key: &str,
        client: u64,
        version: u64,
        ticket: u64,
        ok: bool,
        drop_source: Option<&str>,
        segs: &Segments,
    ) -> Result<(), i32> {
        let drop_seg = drop_source.and_then(|n| segs.id_of(n));
        let (hash, si) = self.locate(key);
        let now = self.now();
        let mut sh = self.shard(si);
        let sh = &mut *sh;
        let mut reserved = None;
        if ticket != 0 {
            match sh.retired.remove(&ticket) {
                Some(r) if r.writer.as_ref().is_some_and(|w| w.client == client) => {
                    self.emit(|| Record::unhold(key, ticket));
                    reserved = Some(r);
                }
                Some(r) => {
                    sh.retired.insert(ticket, r);
                    return Err(code::INVALID_PARAMS);
                }
                None => {}
            }
        }
        let free_reserved = |reserved: Option<Retired>| {
            if let Some(r) = reserved {
                free_all(segs, r.size, &r.replicas);
            }
        };
        let slot = sh.table.find(hash, key);
        let current = slot
            .and_then(|s| sh.table.get_mut(s))
            .filter(|o| o.complete.as_ref().is_some_and(|c| c.id == version));
        let Some(o) = current else {
            if let Some(r) = sh.retired.get_mut(&version) {
                r.holds.end(client);
                if r.due(now) {
                    if let Some(r) = sh.retired.remove(&version) {
                        free_all(segs, r.size, &r.replicas);
                    }
                }
            }
            free_reserved(reserved);
            return Err(code::REPLICA_IS_GONE);
        };
        let hard_pin = o.hard_pin;
        let Some(c) = o.complete.as_mut() else {
            free_reserved(reserved);
            return Err(code::REPLICA_IS_GONE);
        };
        c.holds.end(client);
        if !ok {
            free_reserved(reserved);
            return Ok(());
        }
        if ticket != 0 && reserved.is_none() {
            return Err(code::SEGMENT_NOT_FOUND);
        }
        let mut reps = c.replicas.as_slice().to_vec();
        if let Some(r) = reserved {
            for n in r.replicas.as_slice() {
                let dup = reps.iter().any(|x| x.seg == n.seg);
                if dup || reps.len() >= MAX_REPLICAS as usize {
                    segs.free(n, r.size);
                } else {
                    reps.push(*n);
                }
            }
        }
        if let Some(d) = drop_seg {
            let at = reps.iter().position(|r| r.seg == d && !r.on_disk());
            if let (Some(i), true) = (at, reps.len() > 1) {
                let gone = reps.remove(i);
                if c.holds.is_empty() {
                    segs.free(&gone, c.size);
                } else {
                    sh.retired
                        .insert(self.version_id(), retired_buffer(c, gone));
                }
            }
        }
        if let Some(r) = Replicas::from_vec(reps) {
            c.replicas = r;
        }
        self.journal_replicas(key, c, hard_pin, segs);
        Ok(())
    }

    /// Mooncake's `BatchReplicaClear` of one key: nothing while the object is leased. With
    /// `segment` (a mount id, `None` when the name is not mounted), the complete version's
    /// replica there leaves it, and the object goes when none is left; without, the whole
    /// object goes when no write is in flight. Reads in progress keep their buffers until
    /// they end.
    pub fn clear_replicas(
        &self,
        key: &str,
        segment: Option<Option<u32>>,
        segs: &Segments,
        cfg: &MasterConfig,
    ) -> Cleared {
        let (hash, si) = self.locate(key);
        let now = self.now();
        let mut sh = self.shard(si);
        let sh = &mut *sh;
        let Some(slot) = sh.table.find(hash, key) else {
            return Cleared::Skipped;
        };
        let Some(o) = sh.table.get_mut(slot) else {
            return Cleared::Skipped;
        };
        if lease_active(o, now) || o.complete.is_none() {
            return Cleared::Skipped;
        }
        let Some(seg) = segment else {
            if o.pending.is_some() {
                return Cleared::Skipped;
            }
            sh.remove_slot(slot, segs, cfg, None, |key, medium| {
                self.emit(|| Record::del(key));
                self.kv_removed(key, medium);
            });
            self.removed.fetch_add(1, Ordering::Relaxed);
            return Cleared::Object;
        };
        let hard_pin = o.hard_pin;
        let Some(c) = o.complete.as_mut() else {
            return Cleared::Skipped;
        };
        let Some(seg) = seg.filter(|s| c.replicas.as_slice().iter().any(|r| r.seg == *s)) else {
            return Cleared::Skipped;
        };
        for r in c.replicas.as_slice().iter().filter(|r| r.seg == seg) {
            if c.holds.is_empty() {
                segs.free(r, c.size);
            } else {
                sh.retired.insert(self.version_id(), retired_buffer(c, *r));
            }
        }
        if let Some(kept) = c.replicas.kept(|r| r.seg != seg) {
            c.replicas = kept;
            self.journal_replicas(key, c, hard_pin, segs);
            return Cleared::Replicas;
        }
        // No replica left: the version goes (its buffers were handled above).
        let medium = c.medium();
        o.complete = None;
        self.emit(|| Record::del(key));
        self.kv_removed(key, Some(medium));
        if o.pending.is_none() {
            sh.table.remove(slot);
            self.removed.fetch_add(1, Ordering::Relaxed);
        }
        Cleared::Object
    }

    /// Journals `key`'s complete version as it is now (out of the journal when only disk
    /// replicas are left: those are not journaled).
    fn journal_replicas(&self, key: &str, c: &Version, hard_pin: bool, segs: &Segments) {
        if self.sink.get().is_none() {
            return;
        }
        let named = segs.named(c.replicas.as_slice());
        if named.is_empty() {
            self.emit(|| Record::del(key));
        } else {
            self.emit(|| Record::put(key, c.size, named, hard_pin, Some(c.id)));
        }
    }
}

/// One buffer `r` leaving version `c` while reads of `c` may use it: kept until their holds
/// end (by lease or heartbeats; their `ReadDone` names the version, not this buffer).
fn retired_buffer(c: &Version, r: Replica) -> Retired {
    Retired {
        size: c.size,
        replicas: Replicas::One(r),
        holds: c.holds.copied(),
        writer: None,
        free_at: 0,
    }
}
