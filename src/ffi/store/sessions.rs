//! `tw_store_get_session_*`: get sessions and ranged reads into several buffers (Mooncake's
//! `batch_get_session_start` / `batch_get_into_multi_buffer_ranges` / `batch_get_session_end`),
//! and `tw_store_get_replicas` (Mooncake's `batch_get_replica_desc`).

use super::args::{arr_mut, per_key, ranged, store_keys};
use super::codes::{TW_STORE_INTERNAL_ERROR, TW_STORE_OK, to_c, write_results};
use super::tw_store;
use crate::ffi::ffi_boundary;
use crate::store::proto::{MAX_NAME_LEN, MAX_REPLICAS};
use std::ffi::{c_char, c_void};

/// Most replicas one object has (`tw_store_get_replicas` writes up to this many per key).
pub const TW_STORE_MAX_REPLICAS: usize = 8;
const _: () = assert!(TW_STORE_MAX_REPLICAS == MAX_REPLICAS as usize);

/// Longest segment name (a replica's endpoint), in bytes.
pub const TW_STORE_MAX_ENDPOINT_LEN: usize = 512;
const _: () = assert!(TW_STORE_MAX_ENDPOINT_LEN == MAX_NAME_LEN);

/// Where one complete replica of an object lies (Mooncake's `ReplicaDescriptor` of a memory
/// replica): the owning segment's endpoint (`host:port`, NUL-terminated), the address of the
/// bytes in the owner's memory and their length.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct tw_store_replica {
    /// Segment name, NUL-terminated.
    pub endpoint: [c_char; 513],
    /// Address in the owner's memory.
    pub addr: u64,
    /// Bytes (the object's size).
    pub size: u64,
}

/// Starts a get session for each of `n` keys: the replicas are looked up once and this
/// client's read holds kept, so `tw_store_get_session_ranges` reads without a master round trip
/// and the bytes cannot be freed or replaced until `tw_store_get_session_end`. Per key in
/// `results`: 0, or a negative code (`TW_STORE_OBJECT_NOT_FOUND`; `TW_STORE_INVALID_PARAMS`
/// for a bad key; `TW_STORE_NO_AVAILABLE_HANDLE` past 1,048,576 keys in open sessions). A key
/// that already has a session gets a new one. A hold outlives the master's read lease only while
/// this client's heartbeats keep arriving, and never past the master's `--max_read_hold_sec`.
///
/// Returns `TW_STORE_OK` when the batch ran, or a negative code without writing `results` when
/// the arguments are unusable (a NULL handle or array with a nonzero count). Thread-safe.
///
/// # Safety
/// `s` is a live handle; `keys_in` and `key_lens` hold `n` keys as `TW_STORE_MAX_KEY_LEN`
/// describes; `results` is writable for `n` elements.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn tw_store_get_session_start(
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
                Ok(c.get_session_start(ks))
            })
        }
    })
}

/// Ends the get sessions of `n` keys (keys without one are ignored); each hold ends as soon as
/// no ranged read runs under it. Returns `TW_STORE_OK`, or a negative code for unusable
/// arguments. Thread-safe.
///
/// # Safety
/// `s` is a live handle; `keys_in` and `key_lens` hold `n` keys as `TW_STORE_MAX_KEY_LEN`
/// describes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn tw_store_get_session_end(
    s: *const tw_store,
    keys_in: *const *const c_char,
    key_lens: *const usize,
    n: usize,
) -> i32 {
    ffi_boundary!(TW_STORE_INTERNAL_ERROR, {
        // SAFETY: pointers as documented in this function's contract.
        let (c, ks) = tri!(unsafe { store_keys(s, keys_in, key_lens, n) });
        c.get_session_end(&ks);
        TW_STORE_OK
    })
}

/// Ranged reads of `n` keys under their open sessions: key `i` owns the next
/// `frag_counts[i]` fragments of the flat arrays (`n_frags` in all), and fragment `j` copies
/// `[src_offsets[j], src_offsets[j] + sizes[j])` of the object to `dst_ptrs[j]`. Every
/// fragment goes in one transfer batch. Per key in `results`: the bytes read (the sum of its
/// sizes), or a negative code: `TW_STORE_INVALID_PARAMS` for a key with no open session, a
/// fragment past the object's end or a NULL or unmapped destination;
/// `TW_STORE_LEASE_EXPIRED` when the session's hold no longer protects the read;
/// `TW_STORE_TRANSFER_FAIL`. Zero-size fragments read nothing.
///
/// Returns `TW_STORE_OK` when the batch ran, or `TW_STORE_INVALID_PARAMS` without writing
/// `results` for unusable arguments (NULL arrays with nonzero counts, `frag_counts` not adding
/// up to `n_frags`). Thread-safe; no pointer is kept after the call.
///
/// # Safety
/// `s` is a live handle; `keys_in` and `key_lens` hold `n` keys as `TW_STORE_MAX_KEY_LEN`
/// describes; `frag_counts` and `results` hold `n` elements, `dst_ptrs`, `sizes` and
/// `src_offsets` `n_frags`; each destination is writable for its size, no two overlap, and none
/// is accessed by others during the call.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn tw_store_get_session_ranges(
    s: *const tw_store,
    keys_in: *const *const c_char,
    key_lens: *const usize,
    frag_counts: *const usize,
    n: usize,
    dst_ptrs: *const *mut c_void,
    sizes: *const u64,
    src_offsets: *const u64,
    n_frags: usize,
    results: *mut i64,
) -> i32 {
    ffi_boundary!(TW_STORE_INTERNAL_ERROR, {
        // SAFETY: pointers as documented in this function's contract.
        let args = unsafe {
            ranged(
                s,
                (keys_in, key_lens, frag_counts, n),
                (dst_ptrs, sizes, src_offsets, n_frags),
                results,
            )
        };
        let (c, items, out) = tri!(args);
        // SAFETY: each destination is writable, disjoint and unshared per the contract.
        write_results(out, &unsafe { c.get_session_ranges(&items.items()) });
        TW_STORE_OK
    })
}

/// Where the complete replicas of `n` keys lie (Mooncake's `batch_get_replica_desc`). Key `i`'s
/// replicas go to `replicas[i * TW_STORE_MAX_REPLICAS ..]`, and `counts[i]` is how many were
/// written, or a negative code (`TW_STORE_OBJECT_NOT_FOUND`, `TW_STORE_INVALID_PARAMS` for a
/// bad key). Nothing stays held: the bytes may move or be freed after the call.
///
/// Returns `TW_STORE_OK` when the batch ran, or a negative code without writing the arrays for
/// unusable arguments. Thread-safe.
///
/// # Safety
/// `s` is a live handle; `keys_in` and `key_lens` hold `n` keys as `TW_STORE_MAX_KEY_LEN`
/// describes; `replicas` is writable for `n * TW_STORE_MAX_REPLICAS` elements and `counts` for
/// `n`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn tw_store_get_replicas(
    s: *const tw_store,
    keys_in: *const *const c_char,
    key_lens: *const usize,
    n: usize,
    replicas: *mut tw_store_replica,
    counts: *mut i64,
) -> i32 {
    ffi_boundary!(TW_STORE_INTERNAL_ERROR, {
        // SAFETY: pointers as documented in this function's contract.
        let (c, ks) = tri!(unsafe { store_keys(s, keys_in, key_lens, n) });
        let Some(cap) = n.checked_mul(TW_STORE_MAX_REPLICAS) else {
            return super::args::bad("n * TW_STORE_MAX_REPLICAS overflows");
        };
        // SAFETY: pointers as documented in this function's contract.
        let slots = tri!(unsafe { arr_mut(replicas, cap, "replicas") });
        // SAFETY: pointers as documented in this function's contract.
        let out = tri!(unsafe { arr_mut(counts, n, "counts") });
        for (i, r) in c.replicas(&ks).into_iter().enumerate() {
            out[i] = match r {
                Ok(reps) => {
                    let mine = &mut slots[i * TW_STORE_MAX_REPLICAS..][..TW_STORE_MAX_REPLICAS];
                    for (slot, d) in mine.iter_mut().zip(&reps) {
                        let mut name = [0 as c_char; 513];
                        for (b, &x) in name
                            .iter_mut()
                            .zip(d.endpoint.as_bytes())
                            .take(TW_STORE_MAX_ENDPOINT_LEN)
                        {
                            *b = x as c_char;
                        }
                        *slot = tw_store_replica {
                            endpoint: name,
                            addr: d.addr,
                            size: d.len,
                        };
                    }
                    reps.len().min(TW_STORE_MAX_REPLICAS) as i64
                }
                Err(code) => i64::from(to_c(code)),
            };
        }
        TW_STORE_OK
    })
}
