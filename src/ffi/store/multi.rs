//! `tw_store_put_multi` / `tw_store_get_into_multi`: values in several pieces (Mooncake's
//! `batch_put_from_multi_buffers` / `batch_get_into_multi_buffers`). The pieces of all keys
//! come as two flat arrays (addresses, sizes), key `i` owning the next `piece_counts[i]` of them.

use super::args::{arr, arr_mut, counted, store_keys, write_config};
use super::codes::{TW_STORE_INTERNAL_ERROR, TW_STORE_OK, write_results};
use super::{tw_store, tw_store_replicate_config};
use crate::ffi::ffi_boundary;
use crate::store::caller_memory::{KeyPieces, Piece};
use std::ffi::{c_char, c_void};

/// Pairs key `i` with its `counts[i]` pieces out of `flat`, which holds exactly their sum
/// (see `counted`).
fn split<'a>(keys: &[&'a str], counts: &[usize], flat: &'a [Piece]) -> Vec<KeyPieces<'a>> {
    let mut at = 0;
    keys.iter()
        .zip(counts)
        .map(|(k, &c)| {
            let p = &flat[at..at + c];
            at += c;
            (*k, p)
        })
        .collect()
}

/// The flat piece arrays as `(address, size)` pairs.
///
/// # Safety
/// `ptrs` and `sizes` are NULL (only with `n_pieces == 0`) or hold `n_pieces` elements.
unsafe fn pieces<P: Copy>(
    ptrs: *const P,
    sizes: *const u64,
    n_pieces: usize,
    addr: impl Fn(P) -> u64,
) -> Result<Vec<Piece>, i32> {
    // SAFETY: per the contract above.
    let ps = unsafe { arr(ptrs, n_pieces, "piece_ptrs") }?;
    // SAFETY: per the contract above.
    let ss = unsafe { arr(sizes, n_pieces, "piece_sizes") }?;
    Ok(ps.iter().zip(ss).map(|(&p, &s)| (addr(p), s)).collect())
}

/// Zero-copy put of `n` keys whose values are in pieces (`upsert == 0`: create-only;
/// otherwise create-or-replace): key `i`'s value is the concatenation, in order, of the next
/// `piece_counts[i]` pieces `piece_ptrs[j][0..piece_sizes[j]]` of the flat arrays (key 0 owns
/// the first `piece_counts[0]`, key 1 the next, ...), which hold `n_pieces` elements in all.
/// Every piece of every key is written straight to its offset in the replica buffers, all in
/// one transfer batch; nothing is staged. One code per key in `results`: 0, or a negative
/// `TW_STORE_*` code (`TW_STORE_INVALID_PARAMS` for a bad key, a piece with a NULL address and
/// a nonzero size, a key whose pieces total 0 bytes (or none), a piece not mapped in this
/// process; `TW_STORE_NO_AVAILABLE_HANDLE` when no segment has room). Zero-size pieces are
/// skipped and their address is not read. Memory not registered with `tw_store_register_buffer`
/// is registered for the call only. A create-only put of an existing key is 0 and keeps the old
/// value. `cfg` may be NULL (Mooncake's defaults).
///
/// Returns `TW_STORE_OK` when the batch ran, or `TW_STORE_INVALID_PARAMS` without writing
/// `results` when the arguments are unusable: a NULL handle or array with a nonzero count, or
/// `piece_counts` not adding up to `n_pieces`. Thread-safe; no pointer is kept after the call.
///
/// # Safety
/// `s` is a live handle; `keys_in` and `key_lens` hold `n` keys as `TW_STORE_MAX_KEY_LEN`
/// describes; `piece_counts` holds `n` elements, `piece_ptrs` and `piece_sizes` `n_pieces`;
/// each piece is readable for its size and unchanged during the call; `results` is writable for
/// `n` elements.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn tw_store_put_multi(
    s: *const tw_store,
    keys_in: *const *const c_char,
    key_lens: *const usize,
    piece_counts: *const usize,
    n: usize,
    piece_ptrs: *const *const c_void,
    piece_sizes: *const u64,
    n_pieces: usize,
    upsert: i32,
    cfg: *const tw_store_replicate_config,
    results: *mut i32,
) -> i32 {
    ffi_boundary!(TW_STORE_INTERNAL_ERROR, {
        // SAFETY: pointers as documented in this function's contract.
        let (c, ks) = tri!(unsafe { store_keys(s, keys_in, key_lens, n) });
        // SAFETY: pointers as documented in this function's contract.
        let counts = tri!(unsafe { arr(piece_counts, n, "piece_counts") });
        tri!(counted(counts, n_pieces));
        // SAFETY: pointers as documented in this function's contract.
        let flat = tri!(unsafe { pieces(piece_ptrs, piece_sizes, n_pieces, |p| p as u64) });
        // SAFETY: pointers as documented in this function's contract.
        let out = tri!(unsafe { arr_mut(results, n, "results") });
        let items = split(&ks, counts, &flat);
        // SAFETY: per the contract above.
        let wcfg = unsafe { write_config(cfg) };
        // SAFETY: each piece is readable and unchanged during the call per the contract.
        write_results(out, &unsafe {
            c.put_from_pieces(&items, upsert != 0, &wcfg)
        });
        TW_STORE_OK
    })
}

/// Zero-copy get of `n` keys into pieces: key `i`'s value fills, in order, the next
/// `piece_counts[i]` pieces `piece_ptrs[j][0..piece_sizes[j]]` of the flat arrays (laid out as
/// for `tw_store_put_multi`, `n_pieces` elements in all). The pieces may hold more than the
/// value: the first bytes of the value go to the first piece, and whatever is past the value's
/// end is left untouched. Per key in `results`: the value's size in bytes, or a negative code
/// (`TW_STORE_OBJECT_NOT_FOUND`; `TW_STORE_INVALID_PARAMS` for a bad key, pieces holding fewer
/// bytes than the value, a piece with a NULL address and a nonzero size or one not mapped in
/// this process; `TW_STORE_LEASE_EXPIRED`, `TW_STORE_TRANSFER_FAIL`). One lookup and one
/// transfer batch for the whole call (per master-sized chunk of keys).
///
/// Returns `TW_STORE_OK` when the batch ran, or `TW_STORE_INVALID_PARAMS` without writing
/// `results` when the arguments are unusable (as for `tw_store_put_multi`). Thread-safe; no
/// pointer is kept after the call.
///
/// # Safety
/// `s` is a live handle; `keys_in` and `key_lens` hold `n` keys as `TW_STORE_MAX_KEY_LEN`
/// describes; `piece_counts` holds `n` elements, `piece_ptrs` and `piece_sizes` `n_pieces`;
/// each piece is writable for its size, no two pieces overlap, and none is accessed by others
/// during the call; `results` is writable for `n` elements.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn tw_store_get_into_multi(
    s: *const tw_store,
    keys_in: *const *const c_char,
    key_lens: *const usize,
    piece_counts: *const usize,
    n: usize,
    piece_ptrs: *const *mut c_void,
    piece_sizes: *const u64,
    n_pieces: usize,
    results: *mut i64,
) -> i32 {
    ffi_boundary!(TW_STORE_INTERNAL_ERROR, {
        // SAFETY: pointers as documented in this function's contract.
        let (c, ks) = tri!(unsafe { store_keys(s, keys_in, key_lens, n) });
        // SAFETY: pointers as documented in this function's contract.
        let counts = tri!(unsafe { arr(piece_counts, n, "piece_counts") });
        tri!(counted(counts, n_pieces));
        // SAFETY: pointers as documented in this function's contract.
        let flat = tri!(unsafe { pieces(piece_ptrs, piece_sizes, n_pieces, |p| p as u64) });
        // SAFETY: pointers as documented in this function's contract.
        let out = tri!(unsafe { arr_mut(results, n, "results") });
        let items = split(&ks, counts, &flat);
        // SAFETY: each piece is writable, disjoint and unshared during the call per the contract.
        write_results(out, &unsafe { c.get_into_pieces(&items) });
        TW_STORE_OK
    })
}

#[cfg(test)]
mod tests {
    use super::{counted, split};

    #[test]
    fn pieces_are_split_by_count() {
        let flat = [(1, 1), (2, 2), (3, 3)];
        assert!(counted(&[2, 0, 1], 3).is_ok());
        let items = split(&["a", "b", "c"], &[2, 0, 1], &flat);
        assert_eq!(items[0], ("a", &flat[..2]));
        assert_eq!(items[1].1.len(), 0);
        assert_eq!(items[2], ("c", &flat[2..]));
        assert!(counted(&[2], 3).is_err());
        assert!(counted(&[usize::MAX, 4], 3).is_err());
        assert!(counted(&[], 0).is_ok());
    }
}
