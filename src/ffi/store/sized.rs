//! `tw_store_get_sized`: the copying get without staging (the caller allocates each value once
//! its size is known, and the bytes are read straight into it).

use super::args::{bad, per_key};
use super::codes::TW_STORE_INTERNAL_ERROR;
use super::tw_store;
use crate::ffi::ffi_boundary;
use crate::store::StoreClient;
use crate::store::proto::code;
use std::ffi::{c_char, c_void};

/// Chooses where key `index`'s value (of `size` bytes) is read to: an address writable for
/// `size` bytes, or NULL to skip the key. `ctx` is the caller's, passed through.
pub type tw_store_alloc_fn =
    Option<unsafe extern "C" fn(ctx: *mut c_void, index: usize, size: u64) -> *mut c_void>;

/// Copying get without staging: once a key's size is known, `alloc(ctx, i, size)` is called
/// (on the calling thread, in key order, before any byte moves) and the value is read straight
/// into the memory it returns. Per key in `results`: bytes read, or a negative code (-704
/// missing; `TW_STORE_INTERNAL_ERROR` when `alloc` returned NULL). Keys `alloc` was called for
/// but whose result is negative may have been partly written.
///
/// # Safety
/// `s` is a live handle; `keys_in` and `key_lens` hold `n` keys as `TW_STORE_MAX_KEY_LEN`
/// describes, each readable for its length; `results` is writable for `n`; `alloc` is
/// non-NULL and each address it returns is writable for the size asked and unshared until this
/// call returns.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn tw_store_get_sized(
    s: *const tw_store,
    keys_in: *const *const c_char,
    key_lens: *const usize,
    n: usize,
    alloc: tw_store_alloc_fn,
    ctx: *mut c_void,
    results: *mut i64,
) -> i32 {
    ffi_boundary!(TW_STORE_INTERNAL_ERROR, {
        let run = |c: &StoreClient, ks: &[&str]| {
            let Some(alloc) = alloc else {
                return Err(bad("alloc is NULL"));
            };
            let mut dst = |i: usize, size: u64| {
                // SAFETY: the caller's callback, called as its contract describes.
                let p = unsafe { alloc(ctx, i, size) };
                if p.is_null() {
                    Err(code::INTERNAL_ERROR)
                } else {
                    Ok(p as u64)
                }
            };
            // SAFETY: every address `alloc` returns is writable for `size` bytes (contract above).
            Ok(unsafe { c.get_sized(ks, &mut dst) })
        };
        // SAFETY: pointers as documented in this function's contract.
        unsafe { per_key(s, keys_in, key_lens, n, results, run) }
    })
}
