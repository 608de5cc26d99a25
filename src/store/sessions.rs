//! Get sessions (Mooncake's `batch_get_session_start` / `batch_get_into_multi_buffer_ranges` /
//! `batch_get_session_end`, used by SGLang's layer-wise direct linker): a session looks its keys
//! up once, keeping their replica lists and this client's read holds, so that the many ranged
//! reads that follow (one per layer) go straight to the replicas with no master round trip, and
//! the bytes they read cannot be freed or replaced under them. Ending the session sends the
//! ReadDone, once no ranged read of the key is still running. A hold outlives its lease only
//! while this client's heartbeats keep arriving, up to the master's `--max_read_hold_sec`; a
//! ranged read under a hold that no longer protects it reports `LEASE_EXPIRED`.
//!
//! Also here: the replica descriptors (`get_replica_desc`), a lookup whose hold ends at once.

use super::caller_memory::Mem;
use super::holds::Session;
use super::keys::key_ok;
use super::proto::{ReplicaDesc, code, key_chunks};
use super::reads::{Read, read_replicas};
use super::shared::StoreClient;
use std::sync::Arc;

/// Keys one client may hold in open sessions at once; a start past it gets
/// `NO_AVAILABLE_HANDLE` for the keys that do not fit.
pub const MAX_SESSION_KEYS: usize = 1 << 20;

pub use super::caller_memory::RangeFrag;

/// The `(index, key)` of each usable key.
fn valid_keys<'a>(keys: &[&'a str]) -> Vec<(usize, &'a str)> {
    keys.iter()
        .copied()
        .enumerate()
        .filter(|(_, k)| key_ok(k))
        .collect()
}

impl StoreClient {
    /// Starts a get session for each key: per key 0, or a negative code (`OBJECT_NOT_FOUND`,
    /// `INVALID_PARAMS` for a bad key, `NO_AVAILABLE_HANDLE` past [`MAX_SESSION_KEYS`], or the
    /// lookup's failure). Starting a key that already has a session replaces it (the old hold
    /// ends once no read runs under it).
    pub fn get_session_start(&self, keys: &[&str]) -> Vec<i32> {
        let sh = &self.shared;
        let mut out = vec![code::INVALID_PARAMS; keys.len()];
        for chunk in key_chunks(&valid_keys(keys), |v| v.1) {
            let ks: Vec<&str> = chunk.iter().map(|v| v.1).collect();
            let (hold, found) = match sh.lookup(&ks) {
                Ok(v) => v,
                Err(c) => {
                    chunk.iter().for_each(|v| out[v.0] = c);
                    continue;
                }
            };
            let mut ended = Vec::new();
            let mut map = sh.sessions();
            for (&(i, k), g) in chunk.iter().zip(found) {
                out[i] = g.code;
                if g.code != code::OK {
                    continue;
                }
                let s = Arc::new(Session {
                    key: k.to_string(),
                    hold,
                    found: g,
                });
                if map.len() >= MAX_SESSION_KEYS && !map.contains_key(k) {
                    out[i] = code::NO_AVAILABLE_HANDLE;
                    ended.push(s);
                } else if let Some(old) = map.insert(k.to_string(), s) {
                    ended.push(old);
                }
            }
            drop(map);
            sh.release(ended);
        }
        out
    }

    /// Ends the get sessions of `keys` (keys without one are ignored). Each hold ends as soon
    /// as no ranged read runs under it.
    pub fn get_session_end(&self, keys: &[&str]) {
        let sh = &self.shared;
        let ended: Vec<Arc<Session>> = {
            let mut map = sh.sessions();
            keys.iter().filter_map(|k| map.remove(*k)).collect()
        };
        sh.release(ended);
    }

    /// Keys of this client's open get sessions.
    pub fn open_sessions(&self) -> usize {
        self.shared.sessions().len()
    }

    /// Ranged reads under open sessions: key `i` reads each of its fragments
    /// `(dst, len, src_offset)`, copying `[src_offset, src_offset+len)` of the object to `dst`.
    /// Every fragment of every key goes in one engine batch (memcpy for our own segment). Per
    /// key: the bytes read (the sum of its lengths), or a negative code: `INVALID_PARAMS` for a
    /// key with no open session, a fragment past the object's end, a NULL or unmapped
    /// destination; `LEASE_EXPIRED` when the session's hold no longer protects the read;
    /// `TRANSFER_FAIL` when every replica failed. Zero-length fragments read nothing.
    ///
    /// # Safety
    /// Each fragment's `[dst, dst+len)` is writable and not accessed by others during the call;
    /// no two fragments overlap.
    pub unsafe fn get_session_ranges(&self, items: &[(&str, &[RangeFrag])]) -> Vec<i64> {
        let sh = &self.shared;
        let mut out = vec![code::INVALID_PARAMS as i64; items.len()];
        // References keep each session's hold alive until the reads are done, even if it is
        // ended meanwhile.
        let running: Vec<(usize, Arc<Session>)> = {
            let map = sh.sessions();
            items
                .iter()
                .enumerate()
                .filter_map(|(i, (k, _))| map.get(*k).map(|s| (i, s.clone())))
                .collect()
        };
        let mut reads: Vec<Read> = Vec::new();
        let mut owner: Vec<usize> = Vec::new();
        for (i, s) in &running {
            let frags = items[*i].1;
            let ok = frags.iter().all(|&(dst, len, off)| {
                off.checked_add(len).is_some_and(|e| e <= s.found.size)
                    && (len == 0 || dst != 0 && Mem::One(dst).usable(|a, n| sh.usable(a, n), len))
            });
            if !ok {
                continue;
            }
            out[*i] = frags.iter().map(|f| f.1 as i64).sum();
            for &(dst, len, off) in frags.iter().filter(|f| f.1 > 0) {
                reads.push(Read {
                    key: items[*i].0,
                    dst: Mem::One(dst),
                    off,
                    len,
                    found: &s.found,
                });
                owner.push(*i);
            }
        }
        // SAFETY: destinations per this function's contract; each range lies inside its object
        // (checked above), whose hold the session keeps until `running` is released.
        let done = unsafe { read_replicas(sh, &reads, false) };
        drop(reads);
        for (r, i) in done.into_iter().zip(owner) {
            if let Err(c) = r {
                out[i] = c as i64;
            }
        }
        for (i, s) in &running {
            if out[*i] >= 0 && !sh.still_held(&s.hold) {
                out[*i] = code::LEASE_EXPIRED as i64;
            }
        }
        sh.release(running.into_iter().map(|(_, s)| s).collect());
        out
    }

    /// The complete replicas of each key (where its bytes are), or a negative code
    /// (`OBJECT_NOT_FOUND`, `INVALID_PARAMS` for a bad key). The lookup's read hold ends at
    /// once: the descriptors say where the bytes were, not that they stay.
    pub fn replicas(&self, keys: &[&str]) -> Vec<Result<Vec<ReplicaDesc>, i32>> {
        let sh = &self.shared;
        let mut out: Vec<Result<Vec<ReplicaDesc>, i32>> =
            keys.iter().map(|_| Err(code::INVALID_PARAMS)).collect();
        for chunk in key_chunks(&valid_keys(keys), |v| v.1) {
            let ks: Vec<&str> = chunk.iter().map(|v| v.1).collect();
            match sh.lookup(&ks) {
                Ok((_, found)) => {
                    sh.read_done(&found, &ks);
                    for (&(i, _), g) in chunk.iter().zip(found) {
                        out[i] = match g.code {
                            code::OK => Ok(g.replicas),
                            c => Err(c),
                        };
                    }
                }
                Err(c) => chunk.iter().for_each(|v| out[v.0] = Err(c)),
            }
        }
        out
    }
}

/// Flat fragment arrays split per key: key `i` owns the next `counts[i]` fragments of `flat`,
/// which holds exactly their sum.
pub fn split_frags<'a>(counts: &[usize], flat: &'a [RangeFrag]) -> Vec<&'a [RangeFrag]> {
    let mut at = 0;
    counts
        .iter()
        .map(|&c| {
            let p = &flat[at..at + c];
            at += c;
            p
        })
        .collect()
}
