//! The master's background work (`Master::tick`, run every ~100 ms by the server): silent
//! clients expired, dormant disk tiers unmounted, the object sweep, watermark eviction, and
//! memory given back to the OS after mass removals.

use super::*;

/// Objects removed after which the master gives freed memory back to the OS.
pub(crate) const TRIM_AFTER: u64 = 65_536;

/// Sweeps (about a second apart) after a mass removal's trim within which it is repeated once,
/// for the memory freed after it (see `Master::trim_after_removals`).
pub(crate) const TRIM_FOLLOWUPS: u64 = 30;

impl Master {
    /// Background work, run every ~100 ms by the server: expires silent clients (unmounting their
    /// segments) every tick; every 10th tick frees retired buffers, discards stale writes, ends
    /// dead read holds and expired soft pins (walking only the shards that hold such state) and
    /// evicts above the watermark (a scan of every object).
    pub fn tick(&self) {
        let n = self.ticks.fetch_add(1, Ordering::Relaxed);
        self.expire_clients();
        let dormant: HashSet<u32> = self
            .segs
            .dormant_longer_than(self.cfg.tier.dormant_ttl)
            .into_iter()
            .collect();
        if !dormant.is_empty() {
            self.unmount(&dormant);
        }
        if self.walk_ended.swap(false, Ordering::Relaxed) {
            let removed = self.objs.removed_lately();
            if removed >= TRIM_AFTER {
                self.trim(removed);
            }
        }
        if n % 10 == 0 {
            self.sweep();
            if self.tasks.any_open() {
                self.tasks.expire();
            }
        }
    }

    /// Runs the object passes now (also what `tick` does every 10th call).
    pub fn sweep(&self) {
        let alive = self.heartbeating();
        self.objs
            .sweep(&self.segs, &self.cfg, &|c| alive.contains(&c));
        self.trim_after_removals();
        let (_, used, cap) = self.segs.usage();
        if cap > 0
            && used as f64 >= cap as f64 * self.cfg.eviction_high_watermark
            && self.stuck_at.load(Ordering::Relaxed) != used
        {
            let target = (cap as f64 * self.cfg.eviction_ratio) as u64;
            let (freed, queued) = match target {
                0 => (0, 0),
                t => self.objs.evict(t, &self.segs, &self.cfg, &self.offloads),
            };
            self.count_eviction(freed);
            if freed + queued > 0 {
                self.metrics.evictions.fetch_add(1, Ordering::Relaxed);
                self.stuck_at.store(u64::MAX, Ordering::Relaxed);
            } else {
                self.stuck_at.store(used, Ordering::Relaxed);
            }
        }
    }

    /// After a mass removal (at least [`TRIM_AFTER`] objects, and no more removed since the
    /// previous sweep, or far more than that while removals go on), gives the memory the
    /// allocator keeps free back to the OS. The slabs were compacted already (by the removal
    /// walk and the sweep); what is left is the allocator's free space, mostly the freed keys.
    /// Some of the removal's memory is freed only later: buffers retired while a read of them
    /// could still run (freed when their hold ends) and slabs the next sweeps compact. So the
    /// trim is repeated once nothing retired is left, or after [`TRIM_FOLLOWUPS`] sweeps.
    pub(crate) fn trim_after_removals(&self) {
        let removed = self.objs.removed_lately();
        let seen = self.removed_seen.swap(removed, Ordering::Relaxed);
        let settled = removed == seen;
        if removed < TRIM_AFTER || (!settled && removed < 16 * TRIM_AFTER) {
            // No mass removal to trim after: a follow-up of the last one may be due, though
            // not while a removal goes on (its own trims come first).
            let followups = self.trim_followups.load(Ordering::Relaxed);
            if followups > 0 && settled {
                let left = followups - 1;
                if left == 0 || self.objs.retired_count() == 0 {
                    self.trim_followups.store(0, Ordering::Relaxed);
                    give_memory_back();
                } else {
                    self.trim_followups.store(left, Ordering::Relaxed);
                }
            }
            return;
        }
        self.trim(removed);
    }

    /// Gives the memory freed by `removed` removals back to the OS now, and arms the follow-up.
    pub(crate) fn trim(&self, removed: u64) {
        self.objs.take_removed();
        self.removed_seen.store(0, Ordering::Relaxed);
        self.trim_followups.store(TRIM_FOLLOWUPS, Ordering::Relaxed);
        let t = Instant::now();
        give_memory_back();
        tw_log!(
            tidewire::log::Level::Debug,
            "master: {removed} objects removed; freed memory given back to the OS in {:?}",
            t.elapsed()
        );
    }

    /// A client silent for `client_ttl` is suspended (no new placements on its segments; it
    /// resumes when it pings); one silent for `client_ttl + client_grace` is dropped with its
    /// segments and the objects there.
    pub(crate) fn expire_clients(&self) {
        let now = Instant::now();
        let (silent, expired): (Vec<u64>, Vec<u64>) = {
            let mut c = self.clients.lock_clean();
            let silent: Vec<u64> = c
                .iter()
                .filter(|(_, t)| now.duration_since(**t) > self.cfg.client_ttl)
                .map(|(id, _)| *id)
                .collect();
            let gone: Vec<u64> = silent
                .iter()
                .copied()
                .filter(|id| {
                    now.duration_since(c[id]) > self.cfg.client_ttl + self.cfg.client_grace
                })
                .collect();
            for id in &gone {
                c.remove(id);
            }
            (silent, gone)
        };
        for id in silent {
            if self.segs.suspend_client(id) {
                self.metrics
                    .clients_suspended
                    .fetch_add(1, Ordering::Relaxed);
                tw_log!(
                    tidewire::log::Level::Warn,
                    "master: client {id:#x} missed its heartbeats; no new placements on its \
                     segments until it pings (dropped after {:?} more)",
                    self.cfg.client_grace
                );
            }
        }
        for id in expired {
            self.metrics.clients_dropped.fetch_add(1, Ordering::Relaxed);
            // Promotions' memory was in its segments, unmounted below.
            let _ = self.offloads.forget(id);
            self.tasks
                .fail_client(id, "the client running the task missed its heartbeats");
            let (disks, segs): (Vec<u32>, Vec<u32>) = self
                .segs
                .of_client(id)
                .into_iter()
                .partition(|s| s & segments::DISK_BIT != 0);
            // A disk tier outlives its owner's process: kept, unread, for its restart.
            disks.iter().for_each(|&d| self.segs.doze_disk(d));
            let segs: HashSet<u32> = segs.into_iter().collect();
            tw_log!(
                tidewire::log::Level::Warn,
                "master: client {id:#x} missed its heartbeats; unmounting {} segment(s)",
                segs.len()
            );
            self.unmount(&segs);
        }
    }
}
