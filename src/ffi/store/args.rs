//! Argument borrowing for `store.rs`: handles, key arrays, caller arrays, the replicate config,
//! and the per-key result writing the batch calls share.

use super::codes::{CResult, TW_STORE_INVALID_PARAMS, TW_STORE_OK, to_c, write_results};
use super::{tw_store, tw_store_replicate_config};
use crate::ffi::status::set_last_error;
use crate::store::proto::MAX_KEY_LEN;
use crate::store::sessions::{RangeFrag, split_frags};
use crate::store::{StoreClient, WriteConfig};
use std::ffi::{CStr, c_char};

/// Unwraps `Ok`, or returns the error code (converted to the function's return type).
macro_rules! tri {
    ($e:expr) => {
        match $e {
            Ok(v) => v,
            Err(c) => return c.into(),
        }
    };
}

pub(super) fn bad(msg: impl Into<String>) -> i32 {
    set_last_error(msg.into());
    TW_STORE_INVALID_PARAMS
}

impl crate::ffi::Castable for tw_store {
    type Target = StoreClient;
    const WHAT: &'static str = "store handle";
    fn target(&self) -> &StoreClient {
        &self.client
    }
}

/// Borrows the client behind a handle argument (from `tw_store_setup`, not yet destroyed):
/// NULL → `TW_STORE_INVALID_PARAMS`.
pub(super) fn store<'a>(s: *const tw_store) -> Result<&'a StoreClient, i32> {
    crate::ffi::try_ref(s).map_err(|e| bad(e.message()))
}

/// Borrows what every batch call starts with: the handle, then its `n` keys (in that order, so
/// the first unusable argument is the one reported).
///
/// # Safety
/// As for `store` and `keys`.
pub(super) unsafe fn store_keys<'a>(
    s: *const tw_store,
    keys_in: *const *const c_char,
    key_lens: *const usize,
    n: usize,
) -> Result<(&'a StoreClient, Vec<&'a str>), i32> {
    let c = store(s)?;
    // SAFETY: per the contract above.
    let ks = unsafe { keys(keys_in, key_lens, n) }?;
    Ok((c, ks))
}

/// A batch call whose only arrays are its keys and `results`: borrows the handle, the `n` keys
/// and `results` (in that order), runs `run` and writes its one code per key into `results`
/// (in the C API's numbers). Returns OK, or the code of the first unusable argument, or `run`'s
/// own error.
///
/// # Safety
/// As for `store_keys`; `results` is NULL (only with `n == 0`) or writable for `n` elements.
pub(super) unsafe fn per_key<T: CResult>(
    s: *const tw_store,
    keys_in: *const *const c_char,
    key_lens: *const usize,
    n: usize,
    results: *mut T,
    run: impl FnOnce(&StoreClient, &[&str]) -> Result<Vec<T>, i32>,
) -> i32 {
    // SAFETY: per the contract above.
    let (c, ks) = tri!(unsafe { store_keys(s, keys_in, key_lens, n) });
    // SAFETY: per the contract above.
    let out = tri!(unsafe { arr_mut(results, n, "results") });
    match run(c, &ks) {
        Ok(r) => write_results(out, &r),
        Err(e) => return to_c(e),
    }
    TW_STORE_OK
}

/// A caller's pointer as the address the store client takes.
pub(super) trait Address: Copy {
    fn addr(self) -> u64;
}

impl<T> Address for *const T {
    fn addr(self) -> u64 {
        self as u64
    }
}

impl<T> Address for *mut T {
    fn addr(self) -> u64 {
        self as u64
    }
}

/// Pairs key `i` with buffer `ptrs[i]` of `lens[i]` bytes: `(key, address, length)`.
pub(super) fn key_buffers<'a, P: Address>(
    keys: &[&'a str],
    ptrs: &[P],
    lens: &[u64],
) -> Vec<(&'a str, u64, u64)> {
    keys.iter()
        .zip(ptrs.iter().zip(lens))
        .map(|(k, (p, l))| (*k, p.addr(), *l))
        .collect()
}

/// Borrows `n` keys: with `key_lens` NULL, key `i` is the C string at `keys[i]`; otherwise it is
/// the `key_lens[i]` bytes at `keys[i]`, NUL bytes included. A key that is NULL, empty, longer
/// than [`MAX_KEY_LEN`] bytes or not UTF-8 is returned empty, so that it fails on its own with
/// `INVALID_PARAMS` as an empty key does; the calling thread's last error then names the first
/// such key. Errors only for unusable arrays.
///
/// # Safety
/// `keys` is NULL (only with `n == 0`) or points at `n` pointers; `key_lens` is NULL or points
/// at `n` lengths. With `key_lens` NULL each pointer is NULL or a valid C string; otherwise each
/// is NULL or readable for its length whenever that is at most [`MAX_KEY_LEN`] (a longer key is
/// refused without being read).
pub(super) unsafe fn keys<'a>(
    keys: *const *const c_char,
    key_lens: *const usize,
    n: usize,
) -> Result<Vec<&'a str>, i32> {
    // SAFETY: per the contract above.
    let ptrs = unsafe { crate::ffi::slice_arg(keys, n, "keys") }.map_err(|e| bad(e.to_string()))?;
    let lens = if key_lens.is_null() {
        None
    } else {
        // SAFETY: non-NULL, `n` lengths per the contract above.
        Some(unsafe { arr(key_lens, n, "key_lens") }?)
    };
    let mut first_bad = None;
    let out = ptrs
        .iter()
        .enumerate()
        .map(|(i, &p)| {
            // SAFETY: `p` and its length as the contract above describes.
            match unsafe { key(p, lens.map(|l| l[i])) } {
                Ok(k) => k,
                Err(why) => {
                    first_bad.get_or_insert_with(|| format!("key {i} {why}"));
                    ""
                }
            }
        })
        .collect();
    if let Some(m) = first_bad {
        set_last_error(m);
    }
    Ok(out)
}

/// One key: the `len` bytes at `p`, or with `len` `None` the C string at `p`; why it is
/// unusable otherwise (for "key N ...").
///
/// # Safety
/// `p` is NULL or, with `len` `None`, a valid C string, and with `Some(len)` readable for `len`
/// bytes if `len <= MAX_KEY_LEN`.
pub(super) unsafe fn key<'a>(p: *const c_char, len: Option<usize>) -> Result<&'a str, String> {
    if p.is_null() && len.unwrap_or(0) > 0 {
        return Err(format!("is NULL with length {}", len.unwrap_or(0)));
    }
    let bytes: &[u8] = match len {
        Some(l) if l > MAX_KEY_LEN => {
            return Err(format!("is {l} bytes, over the {MAX_KEY_LEN}-byte limit"));
        }
        _ if p.is_null() => &[],
        // SAFETY: non-NULL and readable for `l <= MAX_KEY_LEN` bytes per the contract.
        Some(l) => unsafe { std::slice::from_raw_parts(p.cast::<u8>(), l) },
        // SAFETY: non-NULL and NUL-terminated per the contract.
        None => unsafe { CStr::from_ptr(p) }.to_bytes(),
    };
    if bytes.is_empty() {
        return Err("is empty".into());
    }
    if bytes.len() > MAX_KEY_LEN {
        return Err(format!(
            "is {} bytes, over the {MAX_KEY_LEN}-byte limit",
            bytes.len()
        ));
    }
    std::str::from_utf8(bytes).map_err(|e| format!("is not valid UTF-8 ({e})"))
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

/// Checks that the per-key piece counts add up to the length of the flat arrays (before they
/// are read).
pub(super) fn counted(counts: &[usize], n_pieces: usize) -> Result<(), i32> {
    match counts.iter().try_fold(0usize, |t, &c| t.checked_add(c)) {
        Some(sum) if sum == n_pieces => Ok(()),
        Some(sum) => Err(bad(format!(
            "piece_counts add up to {sum}, but n_pieces is {n_pieces}"
        ))),
        None => Err(bad("piece_counts add up to more than SIZE_MAX")),
    }
}

/// The arguments of a ranged call (`tw_store_get_session_ranges`, `tw_store_put_session_ranges`),
/// borrowed: keys, and per key its next `frag_counts[i]` fragments `(address, size, offset in
/// the object)` of the flat arrays.
pub(super) struct Ranged<'a> {
    keys: Vec<&'a str>,
    counts: &'a [usize],
    flat: Vec<RangeFrag>,
}

impl Ranged<'_> {
    /// Each key with its fragments.
    pub(super) fn items(&self) -> Vec<(&str, &[RangeFrag])> {
        self.keys
            .iter()
            .copied()
            .zip(split_frags(self.counts, &self.flat))
            .collect()
    }
}

/// Borrows a ranged call's arguments: the handle, `(keys_in, key_lens, frag_counts, n)`,
/// `(addresses, sizes, offsets, n_frags)` and `results` (`n` elements). An unusable argument
/// (NULL with a nonzero count, counts that do not add up to `n_frags`) is the code to return.
///
/// # Safety
/// As the ranged calls document: `n` keys, counts and results; `n_frags` of each array.
pub(super) unsafe fn ranged<'a, P: Address>(
    s: *const tw_store,
    keys: (*const *const c_char, *const usize, *const usize, usize),
    frags: (*const P, *const u64, *const u64, usize),
    results: *mut i64,
) -> Result<(&'a StoreClient, Ranged<'a>, &'a mut [i64]), i32> {
    let (keys_in, key_lens, frag_counts, n) = keys;
    let (addrs, sizes, offsets, n_frags) = frags;
    // SAFETY: pointers as documented in this function's contract.
    let (c, ks) = unsafe { store_keys(s, keys_in, key_lens, n) }?;
    // SAFETY: as above.
    let counts = unsafe { arr(frag_counts, n, "frag_counts") }?;
    counted(counts, n_frags)?;
    // SAFETY: as above.
    let ptrs = unsafe { arr(addrs, n_frags, "addresses") }?;
    // SAFETY: as above.
    let lens = unsafe { arr(sizes, n_frags, "sizes") }?;
    // SAFETY: as above.
    let offs = unsafe { arr(offsets, n_frags, "offsets") }?;
    // SAFETY: as above.
    let out = unsafe { arr_mut(results, n, "results") }?;
    let flat = (0..n_frags)
        .map(|j| (ptrs[j].addr(), lens[j], offs[j]))
        .collect();
    Ok((
        c,
        Ranged {
            keys: ks,
            counts,
            flat,
        },
        out,
    ))
}
