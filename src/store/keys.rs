//! Keys, as every verb takes them: the validity rule, a key with its caller buffer, and the
//! split of a call into master-sized chunks.

use super::proto::{MAX_BATCH, MAX_KEY_LEN};

/// A key and a caller buffer (address and length).
pub type KeyBuf<'a> = (&'a str, u64, u64);

/// Whether a key may be stored: not empty, and at most `MAX_KEY_LEN` bytes.
pub(crate) fn key_ok(k: &str) -> bool {
    !k.is_empty() && k.len() <= MAX_KEY_LEN
}

/// Splits `items` into master-sized chunks (by key count and key bytes, see
/// [`key_chunks`](super::proto::key_chunks)), runs `f` on each with its slice of `out`.
pub(crate) fn chunked<'k, R>(
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
