//! Background passes over every shard: segments dropped, read holds and retired buffers ended,
//! stale writes discarded, soft pins expired, and eviction.

use super::super::MasterConfig;
use super::super::segments::Segments;
use super::holds::hold_live;
use super::{Objects, lease_active};
use crate::store::proto::code;
use std::collections::HashSet;
use std::time::Instant;

/// What an eviction pass may consider.
struct Candidate {
    last_access: Instant,
    soft: bool,
    size: u64,
    key: String,
}

impl Objects {
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

    /// Periodic work: ends read holds that are no longer live (`alive` tells whether a client's
    /// heartbeats are arriving), frees retired buffers that are due, discards writes older than
    /// the discard timeout, ends expired soft pins.
    pub fn sweep(&self, segs: &Segments, cfg: &MasterConfig, alive: &dyn Fn(u64) -> bool) {
        let now = Instant::now();
        for mut sh in self.all() {
            let sh = &mut *sh;
            for r in sh.retired.values_mut() {
                r.holds.retain(|h| hold_live(h, now, cfg, alive));
            }
            for (key, version) in sh.free_due(now, segs) {
                self.emit(|| super::super::durable::unhold_record(&key, version));
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
                sh.drop_pending(&k, p, cfg);
                if gone {
                    sh.map.remove(&k);
                }
            }
            for o in sh.map.values_mut() {
                if o.soft_pin_until.is_some_and(|t| t <= now) {
                    o.soft_pin_until = None;
                }
                if let Some(c) = o.complete.as_mut() {
                    c.holds.retain(|h| hold_live(h, now, cfg, alive));
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
                    || !c.holds.is_empty()
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
