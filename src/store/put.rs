//! Writing: PutStart on the master, then the bytes go straight from the caller's memory to each
//! replica (one engine batch for the whole call, or memcpy when the replica is in this process's
//! own segment), then PutEnd, or PutRevoke for keys whose transfer failed; a key whose transfer
//! to a segment failed is written once more (the master then places it elsewhere).

use super::batch::BatchEnd;
use super::caller_memory::Mem;
use super::keys::{KeyBuf, chunked, key_ok};
use super::mem::{Copy, copy_placed};
use super::proto::{KeyVersion, PutItem, Reply, Request, StartResult, WriteConfig, code};
use super::shared::{Shared, StoreClient};
use crate::engine::Request as Xfer;
use crate::transport::Opcode;
use std::time::{Duration, Instant};

/// Source of key `i`'s bytes for one replica (`true`: an engine WRITE will read it): memory
/// covering the key's whole length.
pub(crate) type SrcFn<'a> = dyn FnMut(usize, bool) -> Result<Mem<'a>, i32> + 'a;

/// One master-sized chunk of writes. `src(i, remote)` gives key `i`'s source memory (one
/// range, or pieces each written at its offset): for a copy into our own segment
/// (`remote == false`) any readable memory, for an engine WRITE memory the engine may use.
/// Keys whose transfer to a segment failed are revoked, the segments reported, and the
/// keys written once more (the master now places them elsewhere).
pub(crate) fn put_chunk(
    sh: &Shared,
    items: &[KeyBuf<'_>],
    src: &mut SrcFn<'_>,
    upsert: bool,
    cfg: &WriteConfig,
    out: &mut [i32],
) {
    let again = put_chunk_once(sh, items, src, upsert, cfg, out);
    if !again.is_empty() {
        let sub: Vec<KeyBuf<'_>> = again.iter().map(|&i| items[i]).collect();
        let mut sub_out = vec![code::OK; sub.len()];
        let mut sub_src = |j: usize, remote: bool| src(again[j], remote);
        let _ = put_chunk_once(sh, &sub, &mut sub_src, upsert, cfg, &mut sub_out);
        for (o, &i) in sub_out.into_iter().zip(&again) {
            out[i] = o;
        }
    }
    wait_for_room(sh, items, src, upsert, cfg, out);
}

/// How long a put waits for a disk tier to make room (`TW_STORE_PUT_ROOM_WAIT_MS`, 5,000).
fn room_wait() -> Duration {
    static WAIT: std::sync::OnceLock<Duration> = std::sync::OnceLock::new();
    *WAIT.get_or_init(|| {
        let ms = std::env::var("TW_STORE_PUT_ROOM_WAIT_MS")
            .ok()
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(5_000);
        Duration::from_millis(ms)
    })
}

/// Keys the master had no room for while a disk tier was writing objects out
/// (`ROOM_BEING_MADE`) are tried again, backing off from 1 to 16 ms, until they fit or
/// [`room_wait`] passes; then they fail with `NO_AVAILABLE_HANDLE`, as without a tier.
fn wait_for_room(
    sh: &Shared,
    items: &[KeyBuf<'_>],
    src: &mut SrcFn<'_>,
    upsert: bool,
    cfg: &WriteConfig,
    out: &mut [i32],
) {
    let deadline = Instant::now() + room_wait();
    let mut pause = Duration::from_millis(1);
    loop {
        let waiting: Vec<usize> = (0..out.len())
            .filter(|&i| out[i] == code::ROOM_BEING_MADE)
            .collect();
        if waiting.is_empty() {
            return;
        }
        if Instant::now() >= deadline {
            waiting
                .iter()
                .for_each(|&i| out[i] = code::NO_AVAILABLE_HANDLE);
            return;
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(16));
        let sub: Vec<KeyBuf<'_>> = waiting.iter().map(|&i| items[i]).collect();
        let mut sub_out = vec![code::OK; sub.len()];
        let mut sub_src = |j: usize, remote: bool| src(waiting[j], remote);
        let _ = put_chunk_once(sh, &sub, &mut sub_src, upsert, cfg, &mut sub_out);
        for (o, &i) in sub_out.into_iter().zip(&waiting) {
            out[i] = o;
        }
    }
}

/// One try of [`put_chunk`]; returns the keys worth a second try (their transfer to a
/// segment failed, their write was revoked, and the segment was reported).
fn put_chunk_once(
    sh: &Shared,
    items: &[KeyBuf<'_>],
    src: &mut SrcFn<'_>,
    upsert: bool,
    cfg: &WriteConfig,
    out: &mut [i32],
) -> Vec<usize> {
    let mut wcfg = cfg.clone();
    if sh.segment.is_some() {
        wcfg.local_segment = sh.engine.name().to_string();
    }
    let reply = sh.conn.call(&Request::PutStart {
        client_id: sh.client_id,
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
    let mut open = sh.resolver();
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
            let remote = !sh.own_segment(r);
            let from = match src(i, remote) {
                Ok(m) if m.usable(|a, n| sh.usable(a, n), len) => Some(m),
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
    let copied = unsafe { copy_placed(&copies, |a| sh.engine.memory_device(a)) };
    for (done, &i) in copied.into_iter().zip(&copy_owner) {
        if !done {
            failed[i] = true;
        }
    }
    match sh.run_batch(&reqs, bytes) {
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
            finish_writes(sh, items, &starts, &failed, out, &skip);
            return Vec::new();
        }
    }
    finish_writes(sh, items, &starts, &failed, out, &Default::default());
    if bad_segments.is_empty() {
        return Vec::new();
    }
    sh.report_failed(bad_segments);
    (0..items.len())
        .filter(|&i| failed[i] && out[i] == code::TRANSFER_FAIL)
        .collect()
}

fn finish_writes(
    sh: &Shared,
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
        let _ = sh.conn.call(&Request::PutRevoke {
            client_id: sh.client_id,
            items: revoke,
        });
    }
    if end.is_empty() {
        return;
    }
    match sh.conn.call(&Request::PutEnd {
        client_id: sh.client_id,
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
            put_chunk(&self.shared, c, &mut local, upsert, cfg, o);
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
}
