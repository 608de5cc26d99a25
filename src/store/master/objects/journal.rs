//! The objects as the HA journal sees them: complete objects and held write space exported for
//! a snapshot, and rebuilt on a new leader.

use super::super::MasterConfig;
use super::super::segments::Segments;
use super::{Durable, Object, Objects, Version, WriteHold, free_all};
use std::sync::atomic::Ordering;
use std::time::Instant;

impl Objects {
    /// Every complete object (for a journal snapshot).
    pub fn export(&self) -> Vec<Durable> {
        let mut out = Vec::new();
        for sh in self.all() {
            for (k, o) in &sh.map {
                if let Some(c) = &o.complete {
                    out.push((k.clone(), c.size, c.replicas.clone(), o.hard_pin));
                }
            }
        }
        out
    }

    /// Every write still holding space (in progress, pre-empted or discarded), for a snapshot.
    pub fn export_holds(&self) -> Vec<WriteHold> {
        let mut out = Vec::new();
        for sh in self.all() {
            for (k, o) in &sh.map {
                if let Some(p) = &o.pending {
                    out.push((k.clone(), p.v.id, p.writer, p.v.replicas.clone()));
                }
            }
            for (id, r) in &sh.retired {
                if let Some(w) = &r.writer {
                    out.push((w.key.to_string(), *id, w.client, r.replicas.clone()));
                }
            }
        }
        out
    }

    /// Keeps the space of a write the journal says may still be in flight (after a failover),
    /// until its writer reports or the release timeout passes.
    pub fn restore_hold(&self, (key, version, writer, replicas): WriteHold, cfg: &MasterConfig) {
        self.next_version.fetch_max(version + 1, Ordering::Relaxed);
        let free_at = Instant::now() + cfg.put_start_release_timeout;
        self.shard(&key)
            .hold_write(&key, version, writer, replicas, free_at);
    }

    /// The journal says write `version` of `key` no longer holds its space: the space is freed
    /// (or, when the write was published, now belongs to the object the next record restores).
    pub fn release_hold(&self, key: &str, version: u64, segs: &Segments) {
        if let Some(r) = self.shard(key).retired.remove(&version) {
            free_all(segs, &r.replicas);
        }
    }

    /// Installs a complete object rebuilt from the journal (replaces any value of the key).
    pub fn restore(&self, (key, size, replicas, hard_pin): Durable, segs: &Segments) {
        let now = Instant::now();
        let id = self.version_id();
        let mut sh = self.shard(&key);
        let old = sh.map.insert(
            key,
            Object {
                complete: Some(Version {
                    id,
                    size,
                    replicas,
                    holds: Vec::new(),
                }),
                pending: None,
                lease_until: None,
                hard_pin,
                soft_pin_until: None,
                last_access: now,
            },
        );
        if let Some(c) = old.and_then(|o| o.complete) {
            free_all(segs, &c.replicas);
        }
    }
}
