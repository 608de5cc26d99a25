//! Argument borrowing for `store.rs`: handles, key arrays, caller arrays, the replicate config.

use super::{tw_store, tw_store_replicate_config};
use crate::ffi::status::set_last_error;
use crate::store::proto::code;
use crate::store::{StoreClient, WriteConfig};
use std::ffi::{CStr, c_char};

pub(super) fn bad(msg: impl Into<String>) -> i32 {
    set_last_error(msg.into());
    code::INVALID_PARAMS
}

/// Borrows the handle.
///
/// # Safety
/// `s` is NULL or a live handle from `tw_store_setup`.
pub(super) unsafe fn store<'a>(s: *const tw_store) -> Result<&'a StoreClient, i32> {
    // SAFETY: per the contract above.
    unsafe { s.as_ref() }
        .map(|s| &s.client)
        .ok_or_else(|| bad("store handle is NULL"))
}

/// Borrows `n` NUL-terminated keys.
///
/// # Safety
/// `keys` is NULL (only with `n == 0`) or points at `n` pointers, each NULL or a valid C string.
pub(super) unsafe fn keys<'a>(keys: *const *const c_char, n: usize) -> Result<Vec<&'a str>, i32> {
    // SAFETY: per the contract above.
    let ptrs = unsafe { crate::ffi::slice_arg(keys, n, "keys") }.map_err(|e| bad(e.to_string()))?;
    ptrs.iter()
        .map(|&p| {
            if p.is_null() {
                // An unusable key fails on its own below (empty key = INVALID_PARAMS).
                Ok("")
            } else {
                // SAFETY: non-NULL and NUL-terminated per the contract.
                Ok(unsafe { CStr::from_ptr(p) }.to_str().unwrap_or(""))
            }
        })
        .collect()
}

/// # Safety
/// `p` is NULL or points at `n` elements.
pub(super) unsafe fn arr<'a, T>(p: *const T, n: usize, what: &str) -> Result<&'a [T], i32> {
    // SAFETY: per the contract above.
    unsafe { crate::ffi::slice_arg(p, n, what) }.map_err(|e| bad(e.to_string()))
}

/// # Safety
/// `p` is NULL or points at `n` writable elements.
pub(super) unsafe fn arr_mut<'a, T>(p: *mut T, n: usize, what: &str) -> Result<&'a mut [T], i32> {
    if n == 0 {
        return Ok(&mut []);
    }
    if p.is_null() {
        return Err(bad(format!("{what} is NULL with count {n}")));
    }
    // SAFETY: non-NULL, `n` writable elements per the contract.
    Ok(unsafe { std::slice::from_raw_parts_mut(p, n) })
}

/// # Safety
/// `cfg` is NULL or a valid config whose `preferred_segments` is NULL or a C string.
pub(super) unsafe fn write_config(cfg: *const tw_store_replicate_config) -> WriteConfig {
    // SAFETY: per the contract above.
    let Some(c) = (unsafe { cfg.as_ref() }) else {
        return WriteConfig::default();
    };
    let preferred = if c.preferred_segments.is_null() {
        Vec::new()
    } else {
        // SAFETY: non-NULL C string per the contract.
        unsafe { CStr::from_ptr(c.preferred_segments) }
            .to_str()
            .unwrap_or("")
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(String::from)
            .collect()
    };
    WriteConfig {
        replica_num: c.replica_num,
        hard_pin: c.with_hard_pin,
        soft_pin: c.with_soft_pin,
        preferred_segments: preferred,
        local_segment: String::new(),
    }
}
