//! Caller memory: where a value's bytes come from or go to, one range at an address or several
//! pieces concatenated in order. Every read and write takes a `Mem`, so the single-buffer
//! calls and the multi-buffer ones share one path.

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

    /// Whether the memory covers `len` bytes that may all be touched, each range judged by
    /// `usable(address, length)` (the client's rule: registered, or at least mapped).
    pub(crate) fn usable(self, usable: impl Fn(u64, u64) -> bool, len: u64) -> bool {
        if let Mem::One(a) = self {
            return usable(a, len);
        }
        let mut covered = 0;
        for (a, _, n) in self.spans(len) {
            if !usable(a, n) {
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
pub(crate) fn total(pieces: &[Piece]) -> Option<u64> {
    let t = pieces
        .iter()
        .try_fold(0u64, |t, &(a, l)| match a == 0 && l > 0 {
            true => None,
            false => t.checked_add(l),
        })?;
    (t > 0).then_some(t)
}

/// A ranged fragment: `(caller address, length, offset in the object)` (a read's destination,
/// or a ranged put's source).
pub type RangeFrag = (u64, u64, u64);

/// One read: `len` bytes at offset `off` of a found object, into caller memory `dst` (one
/// range, or pieces filled in order).
pub(crate) struct Read<'a> {
    pub(crate) key: &'a str,
    pub(crate) dst: Mem<'a>,
    pub(crate) off: u64,
    pub(crate) len: u64,
    pub(crate) found: &'a super::proto::GetResult,
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
