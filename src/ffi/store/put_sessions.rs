//! `tw_store_put_session_*`: put sessions and ranged writes from several buffers (Mooncake's
//! `batch_put_session_start` / `batch_put_from_multi_buffer_ranges` / `batch_put_session_end`
//! / `batch_put_session_revoke`).

use super::args::{arr, arr_mut, per_key, ranged, store_keys, write_config};
use super::codes::{TW_STORE_INTERNAL_ERROR, TW_STORE_OK, write_results};
use super::{tw_store, tw_store_replicate_config};
use crate::ffi::ffi_boundary;
use std::ffi::{c_char, c_void};

/// Reserves `sizes[i]` bytes for each of `n` keys, as a create-only put with `cfg` (NULL: one
/// replica) would, without writing anything: the keys stay unreadable until
/// `tw_store_put_session_end`. Per key in `results`: 0, `TW_STORE_INVALID_PARAMS` (a session
/// already open for the key, a bad key, a zero size), or the master's code
/// (`TW_STORE_OBJECT_ALREADY_EXISTS`, `TW_STORE_NO_AVAILABLE_HANDLE`, ...). A writer that dies
/// leaves its sessions to the master's discard timeout.
///
/// Returns `TW_STORE_OK` when the batch ran, or a negative code without writing `results` for
/// unusable arguments. Thread-safe.
///
/// # Safety
/// `s` is a live handle; `keys_in` and `key_lens` hold `n` keys as `TW_STORE_MAX_KEY_LEN`
/// describes; `sizes` and `results` hold `n` elements; `cfg` is NULL or valid.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn tw_store_put_session_start(
    s: *const tw_store,
    keys_in: *const *const c_char,
    key_lens: *const usize,
    sizes: *const u64,
    n: usize,
    cfg: *const tw_store_replicate_config,
    results: *mut i32,
) -> i32 {
    ffi_boundary!(TW_STORE_INTERNAL_ERROR, {
        // SAFETY: pointers as documented in this function's contract.
        let (c, ks) = tri!(unsafe { store_keys(s, keys_in, key_lens, n) });
        // SAFETY: pointers as documented in this function's contract.
        let ss = tri!(unsafe { arr(sizes, n, "sizes") });
        // SAFETY: pointers as documented in this function's contract.
        let out = tri!(unsafe { arr_mut(results, n, "results") });
        // SAFETY: per the contract above.
        let wcfg = unsafe { write_config(cfg) };
        write_results(out, &c.put_session_start(&ks, ss, &wcfg));
        TW_STORE_OK
    })
}

/// Ranged writes into open put sessions: key `i` owns the next `frag_counts[i]` fragments of
/// the flat arrays (`n_frags` in all), and fragment `j` writes `sizes[j]` bytes from
/// `src_ptrs[j]` at `dst_offsets[j]` of the object, in every replica. Every fragment goes in
/// one transfer batch. Per key in `results`: the bytes written (the sum of its sizes), or
/// `TW_STORE_INVALID_PARAMS` (no open session, a fragment past the object, a NULL or unmapped
/// source) or `TW_STORE_TRANSFER_FAIL`.
///
/// Returns `TW_STORE_OK` when the batch ran, or `TW_STORE_INVALID_PARAMS` without writing
/// `results` for unusable arguments. Thread-safe; no pointer is kept after the call.
///
/// # Safety
/// `s` is a live handle; `keys_in` and `key_lens` hold `n` keys; `frag_counts` and `results`
/// hold `n` elements, `src_ptrs`, `sizes` and `dst_offsets` `n_frags`; each source is
/// readable for its size and unchanged during the call.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn tw_store_put_session_ranges(
    s: *const tw_store,
    keys_in: *const *const c_char,
    key_lens: *const usize,
    frag_counts: *const usize,
    n: usize,
    src_ptrs: *const *const c_void,
    sizes: *const u64,
    dst_offsets: *const u64,
    n_frags: usize,
    results: *mut i64,
) -> i32 {
    ffi_boundary!(TW_STORE_INTERNAL_ERROR, {
        // SAFETY: pointers as documented in this function's contract.
        let args = unsafe {
            ranged(
                s,
                (keys_in, key_lens, frag_counts, n),
                (src_ptrs, sizes, dst_offsets, n_frags),
                results,
            )
        };
        let (c, items, out) = tri!(args);
        // SAFETY: each source is readable and unchanged per the contract.
        write_results(out, &unsafe { c.put_session_ranges(&items.items()) });
        TW_STORE_OK
    })
}

/// Publishes the put sessions of `n` keys (after the ranged writes running on them end): from
/// now on they are readable. Per key in `results`: 0, `TW_STORE_INVALID_PARAMS` (no open
/// session), or the master's code. Thread-safe.
///
/// # Safety
/// `s` is a live handle; `keys_in` and `key_lens` hold `n` keys; `results` holds `n` elements.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn tw_store_put_session_end(
    s: *const tw_store,
    keys_in: *const *const c_char,
    key_lens: *const usize,
    n: usize,
    results: *mut i32,
) -> i32 {
    ffi_boundary!(TW_STORE_INTERNAL_ERROR, {
        // SAFETY: pointers as documented in this function's contract.
        unsafe {
            per_key(s, keys_in, key_lens, n, results, |c, ks| {
                Ok(c.put_session_end(ks))
            })
        }
    })
}

/// Drops the put sessions of `n` keys (their space is freed; an older value of the key is
/// untouched). Per key in `results`: 0, `TW_STORE_INVALID_PARAMS` (no open session), or the
/// master's code. Thread-safe.
///
/// # Safety
/// `s` is a live handle; `keys_in` and `key_lens` hold `n` keys; `results` holds `n` elements.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn tw_store_put_session_revoke(
    s: *const tw_store,
    keys_in: *const *const c_char,
    key_lens: *const usize,
    n: usize,
    results: *mut i32,
) -> i32 {
    ffi_boundary!(TW_STORE_INTERNAL_ERROR, {
        // SAFETY: pointers as documented in this function's contract.
        unsafe {
            per_key(s, keys_in, key_lens, n, results, |c, ks| {
                Ok(c.put_session_revoke(ks))
            })
        }
    })
}
