//! Values in several pieces (Mooncake's `batch_put_from_multi_buffers` /
//! `batch_get_into_multi_buffers`): a key's value is the concatenation of `(address, length)`
//! pieces of caller memory. Writes move every piece of every key straight into the replica
//! buffers at its offset, in the same one engine batch per call as
//! [`put_from`](StoreClient::put_from) (memcpy for our own segment); reads fill the pieces in
//! order from the object's bytes, also one batch. Nothing is staged.
//!
//! Both go through the same paths as the single-buffer calls (`put.rs`, `get.rs`), which take
//! the caller memory of each value as a `Mem` (`caller_memory.rs`): one range or pieces.

use super::caller_memory::{KeyPieces, Mem, total};
use super::get::get_chunk;
use super::keys::{KeyBuf, key_ok};
use super::proto::{WriteConfig, code, key_chunks};
use super::shared::StoreClient;

impl StoreClient {
    /// Writes each key's value from its pieces (create-only, or create-or-replace with
    /// `upsert`): one PutStart per master-sized chunk, then every piece of every key goes
    /// straight to its offset in each replica buffer (one engine batch, or memcpy into our own
    /// segment), then PutEnd. Per key: 0, or a negative code as [`put_from`](Self::put_from):
    /// `INVALID_PARAMS` also for pieces with a NULL address and a nonzero length, pieces
    /// totalling 0 bytes (or none), or pieces not mapped in this process. Zero-length pieces are
    /// skipped (their address is not read).
    ///
    /// # Safety
    /// Each piece `[addr, addr+len)` is readable and not written during the call.
    pub unsafe fn put_from_pieces(
        &self,
        items: &[KeyPieces<'_>],
        upsert: bool,
        cfg: &WriteConfig,
    ) -> Vec<i32> {
        let lens: Vec<Option<u64>> = items.iter().map(|(_, p)| total(p)).collect();
        let keys: Vec<KeyBuf<'_>> = items
            .iter()
            .zip(&lens)
            .map(|((k, _), l)| (*k, 0, l.unwrap_or(0)))
            .collect();
        let skip: Vec<bool> = lens.iter().map(Option::is_none).collect();
        let mut src = |i: usize, _remote: bool| Ok(Mem::Pieces(items[i].1));
        // SAFETY: forwarded contract: every piece is readable and unchanged during the call, and
        // the pieces of key `i` total its length (`total`).
        let mut out = unsafe { self.put_with(&keys, upsert, cfg, &mut src, &skip) };
        for (o, s) in out.iter_mut().zip(skip) {
            if s {
                *o = code::INVALID_PARAMS;
            }
        }
        out
    }

    /// Reads each key into its pieces, in order: the first piece gets the value's first bytes,
    /// and so on. The pieces may hold more than the value (the rest is left as it was), as in
    /// Mooncake. Per key: the value's size in bytes, or a negative code as
    /// [`get_into`](Self::get_into): `INVALID_PARAMS` also when the pieces hold fewer bytes
    /// than the value, when a piece has a NULL address and a nonzero length, or is not mapped
    /// in this process. One Get round trip and one engine batch per master-sized chunk.
    ///
    /// # Safety
    /// Each piece `[addr, addr+len)` is writable and not accessed by others during the call.
    pub unsafe fn get_into_pieces(&self, items: &[KeyPieces<'_>]) -> Vec<i64> {
        let mut out = vec![code::INVALID_PARAMS as i64; items.len()];
        let idx: Vec<usize> = (0..items.len())
            .filter(|&i| key_ok(items[i].0) && items[i].1.iter().all(|&(a, l)| a != 0 || l == 0))
            .collect();
        for chunk in key_chunks(&idx, |&i| items[i].0) {
            let ks: Vec<&str> = chunk.iter().map(|&i| items[i].0).collect();
            let mut codes = vec![0i64; ks.len()];
            let mut dst = |j: usize, size: u64| {
                let p = items[chunk[j]].1;
                let room = p.iter().fold(0u64, |t, &(_, l)| t.saturating_add(l));
                match room >= size {
                    true => Ok(Mem::Pieces(p)),
                    false => Err(code::INVALID_PARAMS),
                }
            };
            get_chunk(&self.shared, &ks, &mut dst, false, &mut codes);
            for (j, &i) in chunk.iter().enumerate() {
                out[i] = codes[j];
            }
        }
        out
    }
}
