//! Put/upsert/get/remove flows. Writes: PutStart on the master, then the bytes go straight from
//! the caller's memory to each replica (one engine batch for the whole call, or memcpy when the
//! replica is in this process's own segment), then PutEnd, or PutRevoke for keys whose transfer
//! failed. Reads: Get (grants a lease and counts a reader), one engine READ batch into the
//! caller's memory, a lease check, then a one-way ReadDone. Results are per key.

use super::batch::BatchEnd;
use super::client::{Shared, StoreClient};
use super::mem::{Copy, copy_placed};
use super::multi::Mem;
use super::proto::{
    GetResult, KeyVersion, MAX_BATCH, MAX_KEY_LEN, PutItem, ReplicaDesc, Reply, Request,
    StartResult, WriteConfig, code,
};
use super::reads::Read;
use crate::engine::Request as Xfer;
use crate::transport::Opcode;
use std::time::Instant;

/// Source of key `i`'s bytes for one replica (`true`: an engine WRITE will read it): memory
/// covering the key's whole length.
pub(crate) type SrcFn<'a> = dyn FnMut(usize, bool) -> Result<Mem<'a>, i32> + 'a;

/// The read holds a Get granted: when it was sent, and the lease and hold bounds it returned.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ReadHold {
    since: Instant,
    lease_ms: u64,
    hold_ms: u64,
}

/// A key and a caller buffer (address and length).
pub type KeyBuf<'a> = (&'a str, u64, u64);

pub(crate) fn key_ok(k: &str) -> bool {
    !k.is_empty() && k.len() <= MAX_KEY_LEN
}

impl Shared {
    pub(crate) fn own_segment(&self, r: &ReplicaDesc) -> bool {
        r.endpoint == self.engine.name()
            && self
                .segment
                .as_ref()
                .is_some_and(|s| s.contains(r.addr, r.len))
    }

    /// Resolves segment names to engine ids, each distinct name once per call.
    pub(crate) fn resolver(&self) -> impl FnMut(&str) -> Option<crate::engine::SegmentId> + '_ {
        let mut cache: Vec<(String, Option<crate::engine::SegmentId>)> = Vec::new();
        move |name: &str| {
            if let Some((_, id)) = cache.iter().find(|(n, _)| n == name) {
                return *id;
            }
            let id = self.engine.open_segment(name).ok();
            cache.push((name.to_string(), id));
            id
        }
    }

    /// Whether destinations of a read look freshly allocated (host memory never touched, see
    /// [`likely_fresh`](super::mem::likely_fresh)), registered or not: their pages are then
    /// populated on a second CPU alongside the transfer, instead of faulting one by one inside
    /// the receive copy. TransferQueue allocates its tensors, registers them and reads into
    /// them at once. Memory registered as a CUDA device's is never host-populated.
    pub(crate) fn fresh_destinations(&self, dsts: impl Iterator<Item = (u64, u64)>) -> bool {
        dsts.take(4)
            .any(|(a, n)| super::mem::likely_fresh(a, n) && self.engine.memory_device(a).is_none())
    }

    /// Whether caller memory may be touched: registered with the engine, or at least mapped.
    pub(crate) fn usable(&self, addr: u64, len: u64) -> bool {
        self.engine.memory_location(addr).is_ok() || super::mem::range_mapped(addr, len)
    }

    /// One master-sized chunk of writes. `src(i, remote)` gives key `i`'s source memory (one
    /// range, or pieces each written at its offset): for a copy into our own segment
    /// (`remote == false`) any readable memory, for an engine WRITE memory the engine may use.
    /// Keys whose transfer to a segment failed are revoked, the segments reported, and the
    /// keys written once more (the master now places them elsewhere).
    fn put_chunk(
        &self,
        items: &[KeyBuf<'_>],
        src: &mut SrcFn<'_>,
        upsert: bool,
        cfg: &WriteConfig,
        out: &mut [i32],
    ) {
        let again = self.put_chunk_once(items, src, upsert, cfg, out);
        if again.is_empty() {
            return;
        }
        let sub: Vec<KeyBuf<'_>> = again.iter().map(|&i| items[i]).collect();
        let mut sub_out = vec![code::OK; sub.len()];
        let mut sub_src = |j: usize, remote: bool| src(again[j], remote);
        let _ = self.put_chunk_once(&sub, &mut sub_src, upsert, cfg, &mut sub_out);
        for (o, &i) in sub_out.into_iter().zip(&again) {
            out[i] = o;
        }
    }

    /// One try of [`Self::put_chunk`]; returns the keys worth a second try (their transfer to a
    /// segment failed, their write was revoked, and the segment was reported).
    fn put_chunk_once(
        &self,
        items: &[KeyBuf<'_>],
        src: &mut SrcFn<'_>,
        upsert: bool,
        cfg: &WriteConfig,
        out: &mut [i32],
    ) -> Vec<usize> {
        let mut wcfg = cfg.clone();
        if self.segment.is_some() {
            wcfg.local_segment = self.engine.name().to_string();
        }
        let reply = self.conn.call(&Request::PutStart {
            client_id: self.client_id,
            upsert,
            items: items
                .iter()
                .map(|(k, _, len)| PutItem {
                    key: k.to_string(),
                    size: *len,
                })
                .collect(),
            config: wcfg,
        });
        let starts: Vec<StartResult> = match reply {
            Ok(Reply::Started { results }) if results.len() == items.len() => results,
            Ok(_) => {
                out.fill(code::RPC_FAIL);
                return Vec::new();
            }
            Err(e) => {
                out.fill(e.code);
                return Vec::new();
            }
        };
        // Plan: memcpy to our own segment now; engine WRITEs for the rest.
        let mut open = self.resolver();
        let mut reqs: Vec<Xfer> = Vec::new();
        let mut owner: Vec<usize> = Vec::new();
        let mut endpoint: Vec<&str> = Vec::new();
        let mut failed = vec![false; items.len()];
        let mut bad_segments: Vec<String> = Vec::new();
        let mut bytes = 0;
        let mut copies: Vec<Copy> = Vec::new();
        let mut copy_owner: Vec<usize> = Vec::new();
        for (i, (st, &(_, _, len))) in starts.iter().zip(items).enumerate() {
            if st.code != code::OK {
                out[i] = st.code;
                continue;
            }
            for r in &st.replicas {
                let remote = !self.own_segment(r);
                let from = match src(i, remote) {
                    Ok(m) if m.usable(self, len) => Some(m),
                    Ok(_) => None,
                    Err(c) => {
                        out[i] = c;
                        None
                    }
                };
                let Some(from) = from else {
                    if out[i] == code::OK {
                        out[i] = code::INVALID_PARAMS;
                    }
                    failed[i] = true;
                    break;
                };
                if r.len != len {
                    failed[i] = true;
                } else if !remote {
                    for (a, off, n) in from.spans(len) {
                        copies.push(Copy {
                            src: a,
                            dst: r.addr + off,
                            len: n,
                        });
                        copy_owner.push(i);
                    }
                } else {
                    match open(&r.endpoint) {
                        Some(seg) => {
                            for (a, off, n) in from.spans(len) {
                                reqs.push(Xfer {
                                    op: Opcode::Write,
                                    local: a,
                                    segment: seg,
                                    remote: r.addr + off,
                                    len: n,
                                });
                                owner.push(i);
                                endpoint.push(&r.endpoint);
                            }
                            bytes += len;
                        }
                        None => {
                            failed[i] = true;
                            bad_segments.push(r.endpoint.clone());
                        }
                    }
                }
            }
        }
        // SAFETY: sources are caller memory readable for `len` (the `unsafe fn` contracts and
        // `SrcFn`'s), destinations lie in our own live segment in buffers the master allocated
        // to these writes (checked by `own_segment`); the ranges do not overlap. A source in GPU
        // memory is registered (`usable`), so its device is known.
        let copied = unsafe { copy_placed(&copies, |a| self.engine.memory_device(a)) };
        for (done, &i) in copied.into_iter().zip(&copy_owner) {
            if !done {
                failed[i] = true;
            }
        }
        match self.run_batch(&reqs, bytes) {
            BatchEnd::Done(ok) => {
                for (j, done) in ok.into_iter().enumerate() {
                    if !done {
                        failed[owner[j]] = true;
                        bad_segments.push(endpoint[j].to_string());
                    }
                }
            }
            BatchEnd::Rejected(c) => {
                for &i in &owner {
                    failed[i] = true;
                    out[i] = c;
                }
            }
            BatchEnd::TimedOut => {
                // Writes may still land: send neither End nor Revoke for those keys; the master
                // discards them after its timeout and reuses the space only later.
                for &i in &owner {
                    out[i] = code::TRANSFER_FAIL;
                }
                let skip: std::collections::HashSet<usize> = owner.iter().copied().collect();
                self.finish_writes(items, &starts, &failed, out, &skip);
                return Vec::new();
            }
        }
        self.finish_writes(items, &starts, &failed, out, &Default::default());
        if bad_segments.is_empty() {
            return Vec::new();
        }
        self.report_failed(bad_segments);
        (0..items.len())
            .filter(|&i| failed[i] && out[i] == code::TRANSFER_FAIL)
            .collect()
    }

    fn finish_writes(
        &self,
        items: &[KeyBuf<'_>],
        starts: &[StartResult],
        failed: &[bool],
        out: &mut [i32],
        skip: &std::collections::HashSet<usize>,
    ) {
        let mut end = Vec::new();
        let mut end_idx = Vec::new();
        let mut revoke = Vec::new();
        for (i, st) in starts.iter().enumerate() {
            if st.code != code::OK || skip.contains(&i) {
                continue;
            }
            let kv = KeyVersion {
                key: items[i].0.to_string(),
                version: st.version,
            };
            if failed[i] {
                if out[i] == code::OK {
                    out[i] = code::TRANSFER_FAIL;
                }
                revoke.push(kv);
            } else {
                end.push(kv);
                end_idx.push(i);
            }
        }
        if !revoke.is_empty() {
            let _ = self.conn.call(&Request::PutRevoke {
                client_id: self.client_id,
                items: revoke,
            });
        }
        if end.is_empty() {
            return;
        }
        match self.conn.call(&Request::PutEnd {
            client_id: self.client_id,
            items: end,
        }) {
            Ok(Reply::Codes { codes }) if codes.len() == end_idx.len() => {
                for (c, i) in codes.into_iter().zip(end_idx) {
                    out[i] = c;
                }
            }
            Ok(_) => end_idx.into_iter().for_each(|i| out[i] = code::RPC_FAIL),
            Err(e) => end_idx.into_iter().for_each(|i| out[i] = e.code),
        }
    }

    /// Looks `keys` up, granting read leases and holds: the hold and one result per key, or the
    /// code the whole call failed with.
    pub(crate) fn lookup(&self, keys: &[&str]) -> Result<(ReadHold, Vec<GetResult>), i32> {
        let since = Instant::now();
        let reply = self.conn.call(&Request::Get {
            client_id: self.client_id,
            keys: keys.iter().map(|k| k.to_string()).collect(),
        });
        match reply {
            Ok(Reply::Replicas {
                lease_ms,
                hold_ms,
                results,
            }) if results.len() == keys.len() => Ok((
                ReadHold {
                    since,
                    lease_ms,
                    hold_ms,
                },
                results,
            )),
            Ok(_) => Err(code::RPC_FAIL),
            Err(e) => Err(e.code),
        }
    }

    /// Whether the reads under `hold` may still be trusted now (see [`super::holds`]).
    pub(crate) fn still_held(&self, hold: &ReadHold) -> bool {
        self.beats.covered(hold.since, hold.lease_ms, hold.hold_ms)
    }

    /// Ends this client's read holds on the keys `found` (`code::OK`) with a one-way ReadDone.
    pub(crate) fn read_done(&self, found: &[GetResult], keys: &[&str]) {
        let done: Vec<KeyVersion> = found
            .iter()
            .zip(keys)
            .filter(|(g, _)| g.code == code::OK)
            .map(|(g, k)| KeyVersion {
                key: k.to_string(),
                version: g.version,
            })
            .collect();
        if !done.is_empty() {
            self.conn.notify(&Request::ReadDone {
                client_id: self.client_id,
                items: done,
            });
        }
    }

    /// Reads `keys`; `dst(i, size)` gives the destination memory for key `i` (one range, or
    /// pieces filled in order; covering `size` bytes), or a code. `fresh`: the destinations are
    /// memory just allocated for the values, whose pages are populated before or alongside the
    /// transfer (see [`populate_behind`](super::mem::populate_behind)).
    pub(crate) fn get_chunk<'m>(
        &self,
        keys: &[&str],
        dst: &mut dyn FnMut(usize, u64) -> Result<Mem<'m>, i32>,
        fresh: bool,
        out: &mut [i64],
    ) {
        let (hold, found) = match self.lookup(keys) {
            Ok(v) => v,
            Err(c) => return out.fill(c as i64),
        };
        let mut reads: Vec<Read> = Vec::new();
        let mut slot: Vec<usize> = Vec::new();
        for (i, g) in found.iter().enumerate() {
            if g.code != code::OK {
                out[i] = g.code as i64;
                continue;
            }
            out[i] = match dst(i, g.size) {
                Ok(m) if m.usable(self, g.size) => {
                    reads.push(Read {
                        dst: m,
                        off: 0,
                        len: g.size,
                        found: g,
                    });
                    slot.push(i);
                    g.size as i64
                }
                Ok(_) => code::INVALID_PARAMS as i64,
                Err(c) => c as i64,
            };
        }
        // SAFETY: destinations are caller memory of at least `size` writable bytes (`dst`'s
        // contract), whole objects whose holds we have.
        let done = unsafe { self.read_replicas(&reads, fresh) };
        for (r, i) in done.into_iter().zip(slot) {
            if let Err(c) = r {
                out[i] = c as i64;
            }
        }
        if !self.still_held(&hold) {
            for (i, g) in found.iter().enumerate() {
                if g.code == code::OK && out[i] >= 0 {
                    out[i] = code::LEASE_EXPIRED as i64;
                }
            }
        }
        self.read_done(&found, keys);
    }
}

/// Splits `items` into master-sized chunks (by key count and key bytes, see
/// [`key_chunks`](super::proto::key_chunks)), runs `f` on each with its slice of `out`.
fn chunked<'k, R>(
    items: &[KeyBuf<'k>],
    mut out: &mut [R],
    mut f: impl FnMut(&[KeyBuf<'k>], &mut [R]),
) {
    for c in super::proto::key_chunks(items, |it| it.0) {
        debug_assert!(c.len() <= MAX_BATCH);
        let (o, rest) = std::mem::take(&mut out).split_at_mut(c.len());
        f(c, o);
        out = rest;
    }
}

impl StoreClient {
    /// Writes each `(key, addr, len)` (create-only, or create-or-replace with `upsert`).
    /// Per key: 0, or a negative code (`INVALID_PARAMS` for an empty/over-long key, a zero
    /// length or a NULL address; `NO_AVAILABLE_HANDLE` when no segment has room). A create-only
    /// put of an existing key is 0 and keeps the old value (Mooncake semantics).
    ///
    /// # Safety
    /// Each `[addr, addr+len)` must be readable and not written during the call.
    pub unsafe fn put_from(
        &self,
        items: &[KeyBuf<'_>],
        upsert: bool,
        cfg: &WriteConfig,
    ) -> Vec<i32> {
        let bad: Vec<bool> = items.iter().map(|it| it.1 == 0).collect();
        let mut src = |i: usize, _remote: bool| Ok(Mem::One(items[i].1));
        // SAFETY: forwarded contract: each source is readable and unchanged during the call.
        let mut out = unsafe { self.put_with(items, upsert, cfg, &mut src, &bad) };
        for (o, b) in out.iter_mut().zip(bad) {
            if b {
                *o = code::INVALID_PARAMS;
            }
        }
        out
    }

    /// Writes `items` (`(key, _, len)`), taking each source from `src(index, remote)`; keys
    /// with `skip[i]` are not written (their result is left 0 for the caller to set).
    ///
    /// # Safety
    /// All memory `src` returns is readable for the key's `len` bytes during the call.
    pub(crate) unsafe fn put_with(
        &self,
        items: &[KeyBuf<'_>],
        upsert: bool,
        cfg: &WriteConfig,
        src: &mut SrcFn<'_>,
        skip: &[bool],
    ) -> Vec<i32> {
        let mut out = vec![code::OK; items.len()];
        let mut valid = Vec::with_capacity(items.len());
        let mut idx = Vec::with_capacity(items.len());
        for (i, it) in items.iter().enumerate() {
            if skip[i] {
                continue;
            }
            if !key_ok(it.0) || it.2 == 0 {
                out[i] = code::INVALID_PARAMS;
            } else {
                valid.push(*it);
                idx.push(i);
            }
        }
        let mut sub = vec![code::OK; valid.len()];
        let mut base = 0;
        chunked(&valid, &mut sub, |c, o| {
            let map = &idx[base..base + c.len()];
            let mut local = |i: usize, remote: bool| src(map[i], remote);
            self.shared.put_chunk(c, &mut local, upsert, cfg, o);
            base += c.len();
        });
        for (r, i) in sub.into_iter().zip(idx) {
            out[i] = if r == code::OBJECT_ALREADY_EXISTS && !upsert {
                code::OK
            } else {
                r
            };
        }
        out
    }

    /// Reads each key into `(addr, capacity)`. Per key: bytes read, or a negative code
    /// (`OBJECT_NOT_FOUND`, `INVALID_PARAMS` when the buffer is too small or the arguments are
    /// bad, `LEASE_EXPIRED`, `TRANSFER_FAIL`, `RPC_FAIL`).
    ///
    /// # Safety
    /// Each `[addr, addr+capacity)` must be writable and not accessed by others during the call.
    pub unsafe fn get_into(&self, items: &[KeyBuf<'_>]) -> Vec<i64> {
        let mut out = vec![0i64; items.len()];
        let mut valid = Vec::with_capacity(items.len());
        let mut idx = Vec::with_capacity(items.len());
        for (i, it) in items.iter().enumerate() {
            if !key_ok(it.0) || it.1 == 0 {
                out[i] = code::INVALID_PARAMS as i64;
            } else {
                valid.push(*it);
                idx.push(i);
            }
        }
        let mut sub = vec![0i64; valid.len()];
        chunked(&valid, &mut sub, |c, o| {
            let keys: Vec<&str> = c.iter().map(|it| it.0).collect();
            let mut dst = |i: usize, size: u64| {
                if size > c[i].2 {
                    Err(code::INVALID_PARAMS)
                } else {
                    Ok(Mem::One(c[i].1))
                }
            };
            let fresh = self
                .shared
                .fresh_destinations(c.iter().map(|it| (it.1, it.2)));
            self.shared.get_chunk(&keys, &mut dst, fresh, o)
        });
        for (r, i) in sub.into_iter().zip(idx) {
            out[i] = r;
        }
        out
    }

    /// Ranged reads: for each `(key, dst_addr, src_offset, len)` fragment, reads
    /// `[src_offset, src_offset+len)` of the object into `dst_addr`. Per fragment: bytes read or
    /// a negative code (`INVALID_PARAMS` when the range exceeds the object). A zero-length
    /// fragment within the object reads nothing and is 0, as in Mooncake.
    ///
    /// # Safety
    /// Each `[dst_addr, dst_addr+len)` must be writable and unshared during the call.
    pub unsafe fn get_ranges(&self, frags: &[(&str, u64, u64, u64)]) -> Vec<i64> {
        let mut out = vec![code::INVALID_PARAMS as i64; frags.len()];
        let mut keys: Vec<&str> = frags.iter().map(|f| f.0).filter(|k| key_ok(k)).collect();
        keys.sort_unstable();
        keys.dedup();
        let sh = &self.shared;
        let (hold, found) = match sh.lookup(&keys) {
            Ok(v) => v,
            Err(c) => return vec![c as i64; frags.len()],
        };
        let mut reads: Vec<Read> = Vec::new();
        let mut slot: Vec<usize> = Vec::new();
        for (i, &(k, dst, src_off, len)) in frags.iter().enumerate() {
            let Ok(ki) = keys.binary_search(&k) else {
                continue;
            };
            let g = &found[ki];
            if g.code != code::OK {
                out[i] = g.code as i64;
                continue;
            }
            if len == 0 && src_off <= g.size {
                out[i] = 0;
                continue;
            }
            if dst == 0
                || src_off.checked_add(len).is_none_or(|e| e > g.size)
                || !sh.usable(dst, len)
            {
                continue;
            }
            out[i] = len as i64;
            reads.push(Read {
                dst: Mem::One(dst),
                off: src_off,
                len,
                found: g,
            });
            slot.push(i);
        }
        // SAFETY: the caller guarantees the destinations; each range lies inside its object
        // (bounds checked against the object size above), whose hold we have.
        let done = unsafe { sh.read_replicas(&reads, false) };
        for (r, i) in done.into_iter().zip(slot) {
            if let Err(c) = r {
                out[i] = c as i64;
            }
        }
        if !sh.still_held(&hold) {
            out.iter_mut()
                .filter(|r| **r >= 0)
                .for_each(|r| *r = code::LEASE_EXPIRED as i64);
        }
        sh.read_done(&found, &keys);
        out
    }
}
