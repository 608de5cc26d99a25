//! The copying API (Mooncake's `put`/`get`/`upsert` on bytes): values are staged in the local
//! buffer (on the heap when it is full) and then move like the zero-copy calls.

use super::caller_memory::Mem;
use super::get::get_chunk;
use super::keys::{KeyBuf, key_ok};
use super::mem::Staged;
use super::proto::{WriteConfig, code, key_chunks};
use super::shared::StoreClient;

/// Bytes fetched by the copying API: staged in the local buffer, or on the heap when it is full.
#[derive(Debug)]
pub enum Fetched {
    /// In the local buffer (freed on drop).
    Staged(Staged),
    /// On the heap.
    Heap(Vec<u8>),
}

impl Fetched {
    /// The value.
    pub fn bytes(&self) -> &[u8] {
        match self {
            Fetched::Staged(s) => s.bytes(),
            Fetched::Heap(v) => v,
        }
    }
}

impl StoreClient {
    /// Copying put/upsert. A single-part value moves straight from `items` (copied into this
    /// process's own segment, or sent by the engine, which registers the memory for the call);
    /// a value in several parts is first joined in the local buffer (heap when full). Results
    /// as [`put_from`](Self::put_from).
    pub fn put_values(
        &self,
        items: &[(&str, &[&[u8]])],
        upsert: bool,
        cfg: &WriteConfig,
    ) -> Vec<i32> {
        let lens: Vec<u64> = items
            .iter()
            .map(|(_, parts)| parts.iter().map(|p| p.len() as u64).sum())
            .collect();
        let keys: Vec<KeyBuf<'_>> = items
            .iter()
            .zip(&lens)
            .map(|((k, _), l)| (*k, 0, *l))
            .collect();
        let mut staged: Vec<Option<Fetched>> = (0..items.len()).map(|_| None).collect();
        let mut src = |i: usize, _remote: bool| {
            let parts = items[i].1;
            if parts.len() == 1 {
                return Ok(Mem::One(parts[0].as_ptr() as u64));
            }
            if staged[i].is_none() {
                let mut f = self.stage(lens[i]);
                let dst: &mut [u8] = match &mut f {
                    Fetched::Staged(s) => s.bytes_mut(),
                    Fetched::Heap(v) => v,
                };
                let mut off = 0;
                for p in parts {
                    dst[off..off + p.len()].copy_from_slice(p);
                    off += p.len();
                }
                staged[i] = Some(f);
            }
            Ok(Mem::One(
                staged[i].as_ref().map_or(0, |f| f.bytes().as_ptr() as u64),
            ))
        };
        let skip = vec![false; items.len()];
        // SAFETY: every address `src` returns is a caller slice (alive for this call) or a
        // staged buffer owned by `staged`, which outlives the call.
        unsafe { self.put_with(&keys, upsert, cfg, &mut src, &skip) }
    }

    fn stage(&self, len: u64) -> Fetched {
        self.shared
            .local
            .as_ref()
            .filter(|_| len > 0)
            .and_then(|l| l.take(len))
            .map_or_else(|| Fetched::Heap(vec![0u8; len as usize]), Fetched::Staged)
    }

    /// Copying get: per key the value (staged in the local buffer, heap when full), or a
    /// negative code. One Get round trip per chunk.
    pub fn get_values(&self, keys: &[&str]) -> Vec<Result<Fetched, i32>> {
        let mut out: Vec<Result<Fetched, i32>> =
            keys.iter().map(|_| Err(code::INVALID_PARAMS)).collect();
        let idx: Vec<usize> = (0..keys.len()).filter(|&i| key_ok(keys[i])).collect();
        for chunk in key_chunks(&idx, |&i| keys[i]) {
            let ks: Vec<&str> = chunk.iter().map(|&i| keys[i]).collect();
            let mut bufs: Vec<Option<Fetched>> = (0..ks.len()).map(|_| None).collect();
            let mut codes = vec![0i64; ks.len()];
            let mut dst = |i: usize, size: u64| {
                let mut f = self.stage(size);
                let a = match &mut f {
                    Fetched::Staged(s) => s.addr(),
                    Fetched::Heap(v) => v.as_mut_ptr() as u64,
                };
                bufs[i] = Some(f);
                Ok(Mem::One(a))
            };
            get_chunk(&self.shared, &ks, &mut dst, false, &mut codes);
            for (j, &i) in chunk.iter().enumerate() {
                out[i] = match (codes[j], bufs[j].take()) {
                    (n, Some(f)) if n >= 0 => Ok(f),
                    (n, _) if n >= 0 => Err(code::INTERNAL_ERROR),
                    (n, _) => Err(n as i32),
                };
            }
        }
        out
    }
    /// Reads each key straight into memory the caller supplies once the key's size is known
    /// (no staging): `dst(i, size)` returns an address writable for `size` bytes, or a negative
    /// code for that key. Per key: bytes read or a negative code, as
    /// [`get_into`](Self::get_into). One Get round trip per chunk.
    ///
    /// # Safety
    /// Every address `dst` returns is writable for the size it was asked for and not accessed
    /// by others until this call returns.
    pub unsafe fn get_sized(
        &self,
        keys: &[&str],
        dst: &mut dyn FnMut(usize, u64) -> Result<u64, i32>,
    ) -> Vec<i64> {
        let mut out = vec![code::INVALID_PARAMS as i64; keys.len()];
        let idx: Vec<usize> = (0..keys.len()).filter(|&i| key_ok(keys[i])).collect();
        for chunk in key_chunks(&idx, |&i| keys[i]) {
            let ks: Vec<&str> = chunk.iter().map(|&i| keys[i]).collect();
            let mut codes = vec![0i64; ks.len()];
            let mut at = |j: usize, size: u64| dst(chunk[j], size).map(Mem::One);
            // Fresh memory for the values: populated ahead of the copy, not a fault per page.
            get_chunk(&self.shared, &ks, &mut at, true, &mut codes);
            for (j, &i) in chunk.iter().enumerate() {
                out[i] = codes[j];
            }
        }
        out
    }
}
