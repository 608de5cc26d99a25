//! Put sessions (Mooncake's `batch_put_session_start` / `batch_put_from_multi_buffer_ranges` /
//! `batch_put_session_end` / `batch_put_session_revoke`): a key's buffers are reserved on the
//! master first (PutStart), written in ranges from any number of caller buffers by any number
//! of calls, and published together by `end` (PutEnd) or dropped by `revoke` (PutRevoke). A
//! reader sees nothing of a session before its `end`; a writer that dies leaves its session to
//! the master's discard rules (`--put_start_discard_timeout_sec`).

use super::batch::BatchEnd;
use super::caller_memory::RangeFrag;
use super::holds::PutSession;
use super::mem::{Copy, copy_placed};
use super::proto::{KeyVersion, PutItem, ReplicaDesc, Reply, Request, WriteConfig, code};
use super::shared::StoreClient;
use crate::engine::Request as Xfer;
use crate::sync::{LockClean, Recover};
use crate::transport::Opcode;
use std::collections::HashMap;

impl StoreClient {
    /// Reserves `sizes[i]` bytes for `keys[i]` (a PutStart with `cfg`, create-only as `put`):
    /// per key 0, `INVALID_PARAMS` (a session open already, a bad key or size, lists of
    /// different lengths), or the master's code (`OBJECT_ALREADY_EXISTS`,
    /// `NO_AVAILABLE_HANDLE`, ...).
    pub fn put_session_start(&self, keys: &[&str], sizes: &[u64], cfg: &WriteConfig) -> Vec<i32> {
        let sh = &self.shared;
        let mut out = vec![code::INVALID_PARAMS; keys.len()];
        if keys.len() != sizes.len() {
            return out;
        }
        let mut start: Vec<usize> = Vec::new();
        {
            let open = sh.put_sessions.open.lock_clean();
            for (i, (k, &n)) in keys.iter().zip(sizes).enumerate() {
                let dup = keys[..i].contains(k);
                if super::keys::key_ok(k) && n > 0 && !dup && !open.contains_key(*k) {
                    start.push(i);
                }
            }
        }
        if start.is_empty() {
            return out;
        }
        let mut wcfg = cfg.clone();
        if sh.segment.is_some() {
            wcfg.local_segment = sh.engine.name().to_string();
        }
        for chunk in start.chunks(super::proto::MAX_BATCH) {
            let reply = sh.conn.call(&Request::PutStart {
                client_id: sh.client_id,
                upsert: false,
                items: chunk
                    .iter()
                    .map(|&i| PutItem {
                        key: keys[i].to_string(),
                        size: sizes[i],
                    })
                    .collect(),
                config: wcfg.clone(),
            });
            let results = match reply {
                Ok(Reply::Started { results }) if results.len() == chunk.len() => results,
                Ok(_) => {
                    chunk.iter().for_each(|&i| out[i] = code::RPC_FAIL);
                    continue;
                }
                Err(e) => {
                    chunk.iter().for_each(|&i| out[i] = e.code);
                    continue;
                }
            };
            let mut open = sh.put_sessions.open.lock_clean();
            for (&i, st) in chunk.iter().zip(results) {
                out[i] = match st.code {
                    code::ROOM_BEING_MADE => code::NO_AVAILABLE_HANDLE,
                    c => c,
                };
                if st.code == code::OK {
                    open.insert(
                        keys[i].to_string(),
                        PutSession {
                            version: st.version,
                            size: sizes[i],
                            replicas: st.replicas,
                            writable: true,
                            writing: 0,
                        },
                    );
                }
            }
        }
        out
    }

    /// Writes ranges into open sessions: key `items[i].0` gets each `(source address, length,
    /// offset in the object)` of `items[i].1`, in every replica. Per key: the bytes written, or
    /// `INVALID_PARAMS` (no writable session, a range past the object, an unusable source) or
    /// `TRANSFER_FAIL`. All the call's ranges go in one engine batch (memcpy for this client's
    /// own segment).
    ///
    /// # Safety
    /// Each source is readable for its length and unchanged during the call.
    pub unsafe fn put_session_ranges(&self, items: &[(&str, &[RangeFrag])]) -> Vec<i64> {
        let sh = &self.shared;
        let mut out = vec![code::INVALID_PARAMS as i64; items.len()];
        let mut plans: Vec<(usize, Vec<ReplicaDesc>)> = Vec::new();
        {
            let mut open = sh.put_sessions.open.lock_clean();
            for (i, (k, frags)) in items.iter().enumerate() {
                let Some(s) = open.get_mut(*k).filter(|s| s.writable) else {
                    continue;
                };
                let fits = frags.iter().all(|&(src, len, off)| {
                    off.checked_add(len).is_some_and(|e| e <= s.size)
                        && (len == 0 || src != 0 && sh.usable(src, len))
                });
                if fits {
                    s.writing += 1;
                    plans.push((i, s.replicas.clone()));
                }
            }
        }
        let mut copies: Vec<Copy> = Vec::new();
        let mut copy_owner: Vec<usize> = Vec::new();
        let mut reqs: Vec<Xfer> = Vec::new();
        let mut owner: Vec<usize> = Vec::new();
        let mut failed: HashMap<usize, bool> = HashMap::new();
        let mut bytes = 0;
        let mut open_seg = sh.resolver();
        for (i, replicas) in &plans {
            failed.insert(*i, false);
            for r in replicas {
                let own = sh.own_segment(r);
                let seg = match own {
                    true => None,
                    false => match open_seg(&r.endpoint) {
                        Some(seg) => Some(seg),
                        None => {
                            failed.insert(*i, true);
                            continue;
                        }
                    },
                };
                for &(src, len, off) in items[*i].1.iter().filter(|f| f.1 > 0) {
                    match seg {
                        None => {
                            copies.push(Copy {
                                src,
                                dst: r.addr + off,
                                len,
                            });
                            copy_owner.push(*i);
                        }
                        Some(seg) => {
                            reqs.push(Xfer {
                                op: Opcode::Write,
                                local: src,
                                segment: seg,
                                remote: r.addr + off,
                                len,
                            });
                            owner.push(*i);
                            bytes += len;
                        }
                    }
                }
            }
        }
        // SAFETY: sources are caller memory per this fn's contract; destinations lie in our own
        // segment, inside buffers the master reserved for these sessions (offsets checked).
        let copied = unsafe { copy_placed(&copies, |a| sh.engine.memory_device(a)) };
        for (ok, i) in copied.into_iter().zip(copy_owner) {
            if !ok {
                failed.insert(i, true);
            }
        }
        match sh.run_batch(&reqs, bytes) {
            BatchEnd::Done(ok) => {
                for (done, i) in ok.into_iter().zip(&owner) {
                    if !done {
                        failed.insert(*i, true);
                    }
                }
            }
            BatchEnd::Rejected(_) | BatchEnd::TimedOut => {
                owner.iter().for_each(|i| {
                    failed.insert(*i, true);
                });
            }
        }
        let mut open = sh.put_sessions.open.lock_clean();
        for (i, _) in &plans {
            if let Some(s) = open.get_mut(items[*i].0) {
                s.writing = s.writing.saturating_sub(1);
            }
            out[*i] = match failed.get(i) {
                Some(true) => code::TRANSFER_FAIL as i64,
                _ => items[*i].1.iter().map(|f| f.1 as i64).sum(),
            };
        }
        drop(open);
        sh.put_sessions.idle.notify_all();
        out
    }

    /// Publishes open sessions (PutEnd; they are readable from now on): per key 0,
    /// `INVALID_PARAMS` (no session), or the master's code.
    pub fn put_session_end(&self, keys: &[&str]) -> Vec<i32> {
        self.close_put_sessions(keys, true)
    }

    /// Drops open sessions (PutRevoke; their space is freed): per key 0, `INVALID_PARAMS` (no
    /// session), or the master's code.
    pub fn put_session_revoke(&self, keys: &[&str]) -> Vec<i32> {
        self.close_put_sessions(keys, false)
    }

    fn close_put_sessions(&self, keys: &[&str], publish: bool) -> Vec<i32> {
        let sh = &self.shared;
        let mut out = vec![code::INVALID_PARAMS; keys.len()];
        let mut closing: Vec<(usize, KeyVersion)> = Vec::new();
        {
            let mut open = sh.put_sessions.open.lock_clean();
            for (i, k) in keys.iter().enumerate() {
                if let Some(s) = open.get_mut(*k).filter(|s| s.writable) {
                    // Sealed: no new ranged write starts.
                    s.writable = false;
                    closing.push((
                        i,
                        KeyVersion {
                            key: k.to_string(),
                            version: s.version,
                        },
                    ));
                }
            }
            // The writes already running end first.
            let busy = |open: &HashMap<String, PutSession>| {
                closing
                    .iter()
                    .any(|(_, kv)| open.get(&kv.key).is_some_and(|s| s.writing > 0))
            };
            while busy(&open) {
                open = sh.put_sessions.idle.wait(open).recover();
            }
            for (_, kv) in &closing {
                open.remove(&kv.key);
            }
        }
        for run in closing.chunks(super::proto::MAX_BATCH) {
            let items: Vec<KeyVersion> = run.iter().map(|(_, kv)| kv.clone()).collect();
            let req = match publish {
                true => Request::PutEnd {
                    client_id: sh.client_id,
                    items,
                },
                false => Request::PutRevoke {
                    client_id: sh.client_id,
                    items,
                },
            };
            match sh.conn.call(&req) {
                Ok(Reply::Codes { codes }) if codes.len() == run.len() => {
                    for ((i, _), c) in run.iter().zip(codes) {
                        out[*i] = c;
                    }
                }
                Ok(_) => run.iter().for_each(|(i, _)| out[*i] = code::RPC_FAIL),
                Err(e) => run.iter().for_each(|(i, _)| out[*i] = e.code),
            }
        }
        out
    }
}
