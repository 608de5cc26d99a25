//! The copying API (Mooncake's `put`/`get`/`upsert` on bytes): values are staged in the local
//! buffer (on the heap when it is full) and then move like the zero-copy calls.

use super::client::StoreClient;
use super::flows::{KeyBuf, key_ok};
use super::mem::Staged;
use super::proto::{MAX_BATCH, WriteConfig, code};

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
    /// Copying put/upsert: each value is staged in the local buffer (heap when full), then
    /// written as [`put_from`](Self::put_from).
    pub fn put_values(
        &self,
        items: &[(&str, &[&[u8]])],
        upsert: bool,
        cfg: &WriteConfig,
    ) -> Vec<i32> {
        let staged: Vec<Fetched> = items
            .iter()
            .map(|(_, parts)| {
                let len: usize = parts.iter().map(|p| p.len()).sum();
                let mut f = self.stage(len as u64);
                let dst: &mut [u8] = match &mut f {
                    Fetched::Staged(s) => s.bytes_mut(),
                    Fetched::Heap(v) => v,
                };
                let mut off = 0;
                for p in *parts {
                    dst[off..off + p.len()].copy_from_slice(p);
                    off += p.len();
                }
                f
            })
            .collect();
        let bufs: Vec<KeyBuf<'_>> = items
            .iter()
            .zip(&staged)
            .map(|((k, _), f)| {
                let b = f.bytes();
                (
                    *k,
                    if b.is_empty() { 0 } else { b.as_ptr() as u64 },
                    b.len() as u64,
                )
            })
            .collect();
        // SAFETY: every buffer is a staged allocation or heap vector owned by `staged`, alive
        // and unshared until this call returns.
        unsafe { self.put_from(&bufs, upsert, cfg) }
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
        for chunk in idx.chunks(MAX_BATCH) {
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
                Ok(a)
            };
            self.shared.get_chunk(&ks, &mut dst, &mut codes);
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
}
