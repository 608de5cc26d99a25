//! The write path of object metadata: the two phases of a put (`start` allocates and holds the
//! new version, `end` makes it the current one) and `revoke` of an unfinished write.

use super::*;

impl Objects {
    /// First phase of one put/upsert. `allocate` finds space (it may evict); it is called with
    /// no shard lock held.
    #[allow(clippy::too_many_arguments)]
    pub fn start(
        &self,
        item: &PutItem,
        writer: u64,
        upsert: bool,
        wcfg: &WriteConfig,
        cfg: &MasterConfig,
        segs: &Segments,
        allocate: impl FnOnce() -> Result<Placed, i32>,
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
        let (hash, si) = self.locate(key);
        let now = self.now();
        let soft_until = wcfg
            .soft_pin
            .then(|| now.saturating_add(nanos(cfg.soft_pin_ttl)));
        let discard = nanos(cfg.put_start_discard_timeout);
        {
            let mut sh = self.shard(si);
            if let Some(o) = sh.table.find(hash, key).and_then(|s| sh.table.get_mut(s)) {
                if !upsert && o.complete.is_some() {
                    return fail(code::OBJECT_ALREADY_EXISTS);
                }
                // Upsert case B: same size and nobody reading: rewrite in place. The key is
                // unreadable until PutEnd (readers get REPLICA_IS_NOT_READY, never a torn value).
                let in_place = upsert
                    && o.pending.is_none()
                    && o.complete.as_ref().is_some_and(|c| {
                        c.size == size
                            && c.holds.is_empty()
                            && c.replicas.as_slice().iter().all(|r| !r.on_disk())
                    });
                if in_place {
                    let mut v = o.complete.take().unwrap_or_else(|| unreachable!());
                    // Its bytes are about to be overwritten: no longer durable until PutEnd,
                    // and no longer readable.
                    self.emit(|| Record::del(key));
                    self.kv_removed(key, Some(v.medium()));
                    v.id = self.version_id();
                    let result = StartResult {
                        code: code::OK,
                        version: v.id,
                        replicas: segs.descs(v.replicas.as_slice(), v.size),
                    };
                    self.emit(|| {
                        let named = segs.named(v.replicas.as_slice());
                        Record::hold(key, v.id, writer, named, v.size)
                    });
                    o.pending = Some(Box::new(Pending {
                        v,
                        started: now,
                        writer,
                    }));
                    if let Some(t) = soft_until {
                        o.soft_pin_until = t;
                    }
                    sh.watch(now.saturating_add(discard).min(soft_until.unwrap_or(NEVER)));
                    return result;
                }
            }
        }
        // Case A (absent) and C (new size, or readers on the old buffers): fresh buffers; the old
        // value stays readable until PutEnd.
        let placed = match allocate() {
            Ok(p) => p,
            Err(c) => return fail(c),
        };
        let Some(replicas) = Replicas::from_vec(placed.replicas) else {
            return fail(code::NO_AVAILABLE_HANDLE);
        };
        let mut sh = self.shard(si);
        let sh = &mut *sh;
        let slot = match sh.table.find(hash, key) {
            Some(s) => s,
            None => sh.table.insert(hash, key, Object::new(wcfg.hard_pin, now)),
        };
        let Some(o) = sh.table.get_mut(slot) else {
            free_all(segs, size, &replicas);
            return fail(code::INTERNAL_ERROR);
        };
        if !upsert && o.complete.is_some() {
            free_all(segs, size, &replicas);
            return fail(code::OBJECT_ALREADY_EXISTS);
        }
        if let Some(t) = soft_until {
            o.soft_pin_until = t;
        }
        let id = self.version_id();
        let result = StartResult {
            code: code::OK,
            version: id,
            replicas: placed.descs,
        };
        self.emit(|| {
            let named = segs.named(replicas.as_slice());
            Record::hold(key, id, writer, named, size)
        });
        let old = o.pending.replace(Box::new(Pending {
            v: Version {
                id,
                size,
                replicas,
                holds: Holds::default(),
            },
            started: now,
            writer,
        }));
        sh.watch(now.saturating_add(discard).min(soft_until.unwrap_or(NEVER)));
        if let Some(p) = old {
            // A write already in progress on this key is pre-empted: its space comes back when
            // its writer reports.
            drop_pending(&mut sh.retired, key, *p, cfg);
        }
        result
    }

    /// PutEnd: publishes the write; the previous value (if any) is freed once unread. The end
    /// of a write that was pre-empted or discarded is `INVALID_WRITE`, and its space is freed;
    /// the end of a write already published (a resent request) is `OK` and changes nothing.
    pub fn end(&self, kv: &KeyVersion, writer: u64, segs: &Segments) -> i32 {
        let (hash, si) = self.locate(&kv.key);
        let now = self.now();
        let mut sh = self.shard(si);
        let sh = &mut *sh;
        let slot = sh.table.find(hash, &kv.key);
        let current = slot
            .and_then(|s| sh.table.get(s))
            .and_then(|o| o.pending.as_ref())
            .is_some_and(|p| p.v.id == kv.version);
        let Some(o) = slot.filter(|_| current).and_then(|s| sh.table.get_mut(s)) else {
            // The same end sent again (its reply was lost or late, and the client resent it):
            // the write it names is the key's value already.
            let landed = slot
                .and_then(|s| sh.table.get(s))
                .and_then(|o| o.complete.as_ref())
                .is_some_and(|v| v.id == kv.version);
            if landed {
                return code::OK;
            }
            return sh.not_current(slot.is_some(), kv, writer, segs, &|r| self.emit(|| r));
        };
        let Some(p) = o.pending.take() else {
            return code::INVALID_WRITE;
        };
        o.last_access = now;
        let hard_pin = o.hard_pin;
        self.emit(|| Record::unhold(&kv.key, kv.version));
        self.emit(|| {
            let named = segs.named(p.v.replicas.as_slice());
            Record::put(&kv.key, p.v.size, named, hard_pin, Some(kv.version))
        });
        self.kv_stored(&kv.key, p.v.medium());
        if let Some(old) = o.complete.replace(p.v) {
            drop_complete(&mut sh.retired, segs, old, None);
        }
        code::OK
    }

    /// PutRevoke: drops the write (the writer has stopped writing), keeping an older value. The
    /// revoke of a write that was pre-empted or discarded frees its space (`INVALID_WRITE`).
    pub fn revoke(&self, kv: &KeyVersion, writer: u64, segs: &Segments) -> i32 {
        let (hash, si) = self.locate(&kv.key);
        let mut sh = self.shard(si);
        let slot = sh.table.find(hash, &kv.key);
        let current = slot
            .and_then(|s| sh.table.get(s))
            .and_then(|o| o.pending.as_ref())
            .is_some_and(|p| p.v.id == kv.version);
        let (Some(slot), true) = (slot, current) else {
            return sh.not_current(slot.is_some(), kv, writer, segs, &|r| self.emit(|| r));
        };
        let Some(o) = sh.table.get_mut(slot) else {
            return code::OBJECT_NOT_FOUND;
        };
        let Some(p) = o.pending.take() else {
            return code::INVALID_WRITE;
        };
        free_all(segs, p.v.size, &p.v.replicas);
        if o.complete.is_none() {
            sh.table.remove(slot);
        }
        self.emit(|| Record::unhold(&kv.key, kv.version));
        code::OK
    }
}
