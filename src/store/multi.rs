//! Values in several pieces (Mooncake's `batch_put_from_multi_buffers` /
//! `batch_get_into_multi_buffers`): a key's value is the concatenation of `(address, length)`
//! pieces of caller memory. Writes move every piece of every key straight into the replica
//! buffers at its offset, in the same one engine batch per call as
//! [`put_from`](StoreClient::put_from) (memcpy for our own segment); reads fill the pieces in
//! order from the object's bytes, also one batch. Nothing is staged.
//!
//! [`Mem`] is the caller memory of one value, one range or several pieces; the put and get flows
//! ([`super::flows`], [`super::reads`]) take it for every call, so the single-buffer calls and
//! these share one path.

use super::client::{Shared, StoreClient};
use super::flows::{KeyBuf, key_ok};
use super::proto::{WriteConfig, code, key_chunks};

/// A range of caller memory: `(address, length)`.
pub type Piece = (u64, u64);

/// A key and the pieces whose concatenation, in order, is its value.
pub type KeyPieces<'a> = (&'a str, &'a [Piece]);

/// Caller memory of one value: one contiguous range at an address, or several pieces.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Mem<'a> {
    /// `[addr, addr + value length)`.
    One(u64),
    /// Pieces, concatenated in order.
    Pieces(&'a [Piece]),
}

impl<'a> Mem<'a> {
    /// The caller ranges covering bytes `[0, len)` of the value, in order, as
    /// `(address, offset in the value, length)`: zero-length pieces are skipped, and pieces past
    /// `len` dropped (the last one used is cut to fit).
    pub(crate) fn spans(self, len: u64) -> Spans<'a> {
        match self {
            Mem::One(a) => Spans {
                one: Some((a, len)),
                rest: Default::default(),
                off: 0,
                len,
            },
            Mem::Pieces(p) => Spans {
                one: None,
                rest: p.iter(),
                off: 0,
                len,
            },
        }
    }

    /// Whether the memory covers `len` bytes that may all be touched (see [`Shared::usable`]).
    pub(crate) fn usable(self, sh: &Shared, len: u64) -> bool {
        if let Mem::One(a) = self {
            return sh.usable(a, len);
        }
        let mut covered = 0;
        for (a, _, n) in self.spans(len) {
            if !sh.usable(a, n) {
                return false;
            }
            covered += n;
        }
        covered == len
    }
}

/// Iterator of [`Mem::spans`].
pub(crate) struct Spans<'a> {
    one: Option<Piece>,
    rest: std::slice::Iter<'a, Piece>,
    off: u64,
    len: u64,
}

impl Iterator for Spans<'_> {
    type Item = (u64, u64, u64);

    fn next(&mut self) -> Option<(u64, u64, u64)> {
        while self.off < self.len {
            let (a, l) = match self.one.take() {
                Some(p) => p,
                None => *self.rest.next()?,
            };
            if l == 0 {
                continue;
            }
            let n = l.min(self.len - self.off);
            let at = self.off;
            self.off += n;
            return Some((a, at, n));
        }
        None
    }
}

/// The value length the pieces make, or `None` when they are unusable: a NULL address with a
/// nonzero length, a sum past `u64`, or no bytes at all.
fn total(pieces: &[Piece]) -> Option<u64> {
    let t = pieces
        .iter()
        .try_fold(0u64, |t, &(a, l)| match a == 0 && l > 0 {
            true => None,
            false => t.checked_add(l),
        })?;
    (t > 0).then_some(t)
}

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
            self.shared.get_chunk(&ks, &mut dst, false, &mut codes);
            for (j, &i) in chunk.iter().enumerate() {
                out[i] = codes[j];
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spans(m: Mem<'_>, len: u64) -> Vec<(u64, u64, u64)> {
        m.spans(len).collect()
    }

    #[test]
    fn spans_cover_the_value_in_order() {
        assert_eq!(spans(Mem::One(100), 10), vec![(100, 0, 10)]);
        let p = [(10, 4), (0, 0), (50, 3), (90, 5)];
        assert_eq!(
            spans(Mem::Pieces(&p), 12),
            vec![(10, 0, 4), (50, 4, 3), (90, 7, 5)]
        );
        // Pieces past the value are dropped; the last one is cut.
        assert_eq!(spans(Mem::Pieces(&p), 6), vec![(10, 0, 4), (50, 4, 2)]);
        assert_eq!(spans(Mem::Pieces(&p), 0), vec![]);
        assert_eq!(spans(Mem::Pieces(&[]), 5), vec![]);
    }

    #[test]
    fn totals_refuse_null_and_empty_values() {
        assert_eq!(total(&[(1, 2), (0, 0), (5, 3)]), Some(5));
        assert_eq!(total(&[(0, 1)]), None);
        assert_eq!(total(&[]), None);
        assert_eq!(total(&[(1, 0)]), None);
        assert_eq!(total(&[(1, u64::MAX), (2, 1)]), None);
    }
}
