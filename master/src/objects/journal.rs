//! The objects as the HA journal sees them: complete objects and held write space exported for
//! a snapshot, and rebuilt on a new leader.

use super::super::MasterConfig;
use super::super::segments::Segments;
use super::replicas::Replicas;
use super::{Durable, Object, Objects, Version, WriteHold, free_all, hold_write, nanos};
use std::sync::atomic::Ordering;

impl Objects {
    /// Every complete object (for a journal snapshot).
    pub fn export(&self) -> Vec<Durable> {
        let mut out = Vec::new();
        for sh in self.all() {
            for (_, key, o) in sh.table.iter() {
                if let Some(c) = &o.complete {
                    out.push((
                        key.to_string(),
                        c.size,
                        c.replicas.as_slice().to_vec(),
                        o.hard_pin,
                        Some(c.id),
                    ));
                }
            }
        }
        out
    }

    /// Every write still holding space (in progress, pre-empted or discarded), for a snapshot.
    pub fn export_holds(&self) -> Vec<WriteHold> {
        let mut out = Vec::new();
        for sh in self.all() {
            for (_, key, o) in sh.table.iter() {
                if let Some(p) = &o.pending {
                    out.push((
                        key.to_string(),
                        p.v.id,
                        p.writer,
                        p.v.size,
                        p.v.replicas.as_slice().to_vec(),
                    ));
                }
            }
            for (id, r) in &sh.retired {
                if let Some(w) = &r.writer {
                    out.push((
                        w.key.to_string(),
                        *id,
                        w.client,
                        r.size,
                        r.replicas.as_slice().to_vec(),
                    ));
                }
            }
        }
        out
    }

    /// Keeps the space of a write the journal says may still be in flight (after a failover),
    /// until its writer reports or the release timeout passes.
    pub fn restore_hold(
        &self,
        (key, version, writer, size, replicas): WriteHold,
        cfg: &MasterConfig,
    ) {
        let Some(replicas) = Replicas::from_vec(replicas) else {
            return;
        };
        self.next_version.fetch_max(version + 1, Ordering::Relaxed);
        let free_at = self
            .now()
            .saturating_add(nanos(cfg.put_start_release_timeout));
        let (_, si) = self.locate(&key);
        let mut sh = self.shard(si);
        hold_write(
            &mut sh.retired,
            &key,
            version,
            writer,
            size,
            replicas,
            free_at,
        );
    }

    /// The journal says write `version` of `key` no longer holds its space: the space is freed
    /// (or, when the write was published, now belongs to the object the next record restores).
    pub fn release_hold(&self, key: &str, version: u64, segs: &Segments) {
        let (_, si) = self.locate(key);
        if let Some(r) = self.shard(si).retired.remove(&version) {
            free_all(segs, r.size, &r.replicas);
        }
    }

    /// Makes room for `records` objects with `key_bytes` of keys in all, spread over the
    /// shards (before a snapshot is restored).
    pub fn reserve(&self, records: usize, key_bytes: usize) {
        let n = self.shards.len();
        // Keys spread unevenly over the shards: a little more than the even share.
        let (per, bytes) = (
            records / n + records / n / 8 + 16,
            key_bytes / n + key_bytes / n / 8,
        );
        for mut sh in self.all() {
            sh.table.reserve(per, bytes);
        }
    }

    /// Installs a complete object rebuilt from the journal (replaces any value of the key).
    pub fn restore(&self, (key, size, replicas, hard_pin, version): Durable, segs: &Segments) {
        let Some(replicas) = Replicas::from_vec(replicas) else {
            return;
        };
        let now = self.now();
        // The write that published it keeps its id (a PutEnd resent to this leader is known);
        // ids handed out from now on are above it.
        let id = match version {
            Some(v) => {
                self.next_version.fetch_max(v + 1, Ordering::Relaxed);
                v
            }
            None => self.version_id(),
        };
        let (hash, si) = self.locate(&key);
        let mut sh = self.shard(si);
        let mut o = Object::new(hard_pin, now);
        o.complete = Some(Version {
            id,
            size,
            replicas,
            holds: Default::default(),
        });
        let old = match sh.table.find(hash, &key) {
            Some(slot) => sh.table.replace(slot, o),
            None => {
                sh.table.insert(hash, &key, o);
                None
            }
        };
        if let Some(c) = old.and_then(|o| o.complete) {
            free_all(segs, c.size, &c.replicas);
        }
    }
}
