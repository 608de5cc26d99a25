//! The master's side of the disk tier: a tier's mount (or takeover, with the records its owner
//! found), its owner's polls for work, and write-behind after each put.

use super::Master;
use super::segments::DiskMount;
use std::collections::HashSet;
use std::sync::atomic::Ordering::Relaxed;
use tidewire::store::proto::{DiskRecord, GetResult, KeyVersion, OffloadDone, Reply, code};
use tidewire::sync::LockClean;
use tidewire::tw_log;

/// Whether a replica's segment is a disk tier.
fn on_disk(segment: &str) -> bool {
    segment.starts_with(tidewire::store::disk::TIER_PREFIX)
}

impl Master {
    fn tier_off() -> Reply {
        Reply::Error {
            code: code::UNAVAILABLE_IN_CURRENT_MODE,
            message: "this master has no disk tier: start it with --enable_offload".into(),
        }
    }

    /// `Request::MountDisk`.
    pub(super) fn mount_disk(
        &self,
        client_id: u64,
        name: &str,
        capacity: u64,
        first: bool,
        last: bool,
        records: &[DiskRecord],
    ) -> Reply {
        if !self.cfg.tier.enabled {
            return Self::tier_off();
        }
        self.touch(client_id);
        let mount = match first {
            true => self.segs.mount_disk(client_id, name, capacity),
            false => match self.segs.id_of(name) {
                Some(id) if self.segs.of_client(client_id).contains(&id) => Ok(
                    match LockClean::lock_clean(&self.offloads.confirming).contains_key(&id) {
                        true => DiskMount::Known(id),
                        false => DiskMount::Fresh(id),
                    },
                ),
                _ => Err(code::SEGMENT_NOT_FOUND),
            },
        };
        let mount = match mount {
            Ok(m) => m,
            Err(c) => {
                return Reply::Error {
                    code: c,
                    message: format!("disk tier {name:?} cannot be mounted"),
                };
            }
        };
        let mut confirming = self.offloads.confirming.lock_clean();
        let codes = match mount {
            DiskMount::Known(id) => {
                let seen = confirming.entry(id).or_default();
                self.objs.adopt(mount, records, &self.segs, seen)
            }
            DiskMount::Fresh(_) => self
                .objs
                .adopt(mount, records, &self.segs, &mut HashSet::new()),
        };
        if last {
            let (id, known) = match mount {
                DiskMount::Known(id) => (id, true),
                DiskMount::Fresh(id) => (id, false),
            };
            let seen = confirming.remove(&id).unwrap_or_default();
            drop(confirming);
            if known {
                let gone = self
                    .objs
                    .drop_disk_records(id, Some(&seen), None, &self.segs);
                tw_log!(
                    tidewire::log::Level::Info,
                    "master: disk tier {name:?} taken over by client {client_id:#x}: {} records \
                     kept, {gone} objects whose records were not found removed",
                    seen.len()
                );
            }
            self.segs.wake_disk(id);
        }
        Reply::Codes { codes }
    }

    /// `Request::OffloadPoll`.
    pub(super) fn offload_poll(
        &self,
        client_id: u64,
        name: &str,
        done: &[OffloadDone],
        lost: &[DiskRecord],
        max: u32,
    ) -> Reply {
        if !self.cfg.tier.enabled {
            return Self::tier_off();
        }
        self.touch(client_id);
        let Some(id) = self
            .segs
            .id_of(name)
            .filter(|id| self.segs.of_client(client_id).contains(id))
        else {
            return Reply::Error {
                code: code::SEGMENT_NOT_FOUND,
                message: format!("disk tier {name:?} is not mounted by this client"),
            };
        };
        for d in done.iter().filter(|d| d.promote) {
            if let Some(into) = self.offloads.promoted_into(&d.key, d.version) {
                if self.objs.promotion_done(d, into, &self.segs) {
                    self.offloads.promoted.fetch_add(1, Relaxed);
                }
            }
        }
        self.offloads
            .reported(client_id, done.iter().filter(|d| !d.promote).count());
        for d in done.iter().filter(|d| !d.promote) {
            match d.loc {
                Some(_) => self.offloads.written.fetch_add(1, Relaxed),
                None => self.offloads.failed.fetch_add(1, Relaxed),
            };
            if self.objs.offload_done(client_id, id, d, &self.segs) > 0 {
                self.offloads.demoted.fetch_add(1, Relaxed);
            }
        }
        if !lost.is_empty() {
            let locs: HashSet<u64> = lost.iter().map(|r| r.loc).collect();
            self.objs
                .drop_disk_records(id, None, Some(&locs), &self.segs);
            self.offloads.lost.fetch_add(lost.len() as u64, Relaxed);
        }
        let mut jobs = self
            .offloads
            .take_promotions(client_id, self.cfg.tier.promotion_per_poll);
        jobs.extend(self.offloads.take(client_id, max as usize));
        Reply::OffloadWork {
            jobs,
            drops: self.segs.take_drops(id),
        }
    }

    /// Write-behind (the tier on, not only on eviction): each object just published is queued
    /// for the owner of its memory replica, when that owner has a tier and the queue has room.
    pub(super) fn write_behind(&self, items: &[KeyVersion], codes: &[i32]) {
        let t = &self.cfg.tier;
        if !t.enabled || t.on_evict {
            return;
        }
        for (kv, c) in items.iter().zip(codes) {
            if *c != code::OK {
                continue;
            }
            if !self.offloads.has_room(t.queue_limit) {
                self.offloads.overflow.fetch_add(1, Relaxed);
                continue;
            }
            if let Some((owner, job)) = self.objs.offload_job(&kv.key, &self.segs, false) {
                self.offloads.push(owner, job);
            }
        }
    }

    /// Promotion on hit: counts the reads of objects found only on disk; one read often
    /// enough gets memory in its tier owner's segment and a job for the owner.
    pub(super) fn promote_hits(&self, keys: &[String], results: &[GetResult]) {
        let t = &self.cfg.tier;
        if !t.enabled || !t.promotion_on_hit {
            return;
        }
        for (k, r) in keys.iter().zip(results) {
            let disk_only = r.code == code::OK && r.replicas.iter().all(|d| on_disk(&d.endpoint));
            if disk_only && self.offloads.hit(k, t) {
                match self.objs.promote_job(k, &self.segs) {
                    Some((owner, job, into)) => self.queue_promotion(owner, job, into),
                    None => {
                        // No room in the owner's memory now: make some (demotions free it at
                        // once, offloads soon), and let the next read try again.
                        self.objs
                            .evict(r.size, &self.segs, &self.cfg, &self.offloads);
                        self.offloads.hit_again(k, t);
                    }
                }
            }
        }
    }

    /// `Request::Promote`: a promotion now for each disk-only key (making room once if needed).
    pub(super) fn promote_now(&self, keys: &[String]) -> Reply {
        if !self.cfg.tier.enabled {
            return Self::tier_off();
        }
        let codes = keys
            .iter()
            .map(|k| {
                let found = self.objs.peek(k, &self.segs);
                let Ok(info) = found else {
                    return code::OBJECT_NOT_FOUND;
                };
                let job = self.objs.promote_job(k, &self.segs).or_else(|| {
                    self.objs
                        .evict(info.size, &self.segs, &self.cfg, &self.offloads);
                    self.objs.promote_job(k, &self.segs)
                });
                match job {
                    Some((owner, job, into)) => {
                        self.queue_promotion(owner, job, into);
                        code::OK
                    }
                    // In memory already, or no room at all.
                    None if info.replicas.iter().any(|d| !on_disk(&d.endpoint)) => code::OK,
                    None => code::NO_AVAILABLE_HANDLE,
                }
            })
            .collect();
        Reply::Codes { codes }
    }

    fn queue_promotion(
        &self,
        owner: u64,
        job: tidewire::store::proto::OffloadJob,
        into: (crate::segments::Replica, u64),
    ) {
        if !self.offloads.push_promotion(owner, job, into) {
            self.segs.free(&into.0, into.1);
        }
    }

    /// Whether any disk tier is mounted (room may come from writes in flight).
    pub(super) fn offloading(&self) -> bool {
        self.cfg.tier.enabled && self.segs.disk_usage().0 > 0
    }
}
