//! Reading: Get on the master (it grants a lease and counts a reader), one engine READ batch into
//! the caller's memory (see `reads.rs`), a check that the hold still protects what was read, then
//! a one-way ReadDone. Whole values into one buffer each, and ranges of values.

use super::caller_memory::Mem;
use super::keys::{KeyBuf, chunked, key_ok};
use super::proto::code;
use super::reads::{Read, read_replicas};
use super::shared::{Shared, StoreClient};

/// Reads `keys`; `dst(i, size)` gives the destination memory for key `i` (one range, or
/// pieces filled in order; covering `size` bytes), or a code. `fresh`: the destinations are
/// memory just allocated for the values, whose pages are populated before or alongside the
/// transfer (see [`populate_behind`](super::mem::populate_behind)).
pub(crate) fn get_chunk<'m>(
    sh: &Shared,
    keys: &[&str],
    dst: &mut dyn FnMut(usize, u64) -> Result<Mem<'m>, i32>,
    fresh: bool,
    out: &mut [i64],
) {
    let (hold, found) = match sh.lookup(keys) {
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
            Ok(m) if m.usable(|a, n| sh.usable(a, n), g.size) => {
                reads.push(Read {
                    key: keys[i],
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
    let done = unsafe { read_replicas(sh, &reads, fresh) };
    for (r, i) in done.into_iter().zip(slot) {
        if let Err(c) = r {
            out[i] = c as i64;
        }
    }
    if !sh.still_held(&hold) {
        for (i, g) in found.iter().enumerate() {
            if g.code == code::OK && out[i] >= 0 {
                out[i] = code::LEASE_EXPIRED as i64;
            }
        }
    }
    sh.read_done(&found, keys);
}

impl StoreClient {
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
            get_chunk(&self.shared, &keys, &mut dst, fresh, o)
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
                key: k,
                dst: Mem::One(dst),
                off: src_off,
                len,
                found: g,
            });
            slot.push(i);
        }
        // SAFETY: the caller guarantees the destinations; each range lies inside its object
        // (bounds checked against the object size above), whose hold we have.
        let done = unsafe { read_replicas(sh, &reads, false) };
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
