//! `tw_store_*`: the Store client's C API (Mooncake Store semantics).
//!
//! Return values: 0 (or a count / byte length) on success, a negative `TW_STORE_*` code
//! otherwise (Mooncake Store's codes, in the one code space of the C API: see `codes`); batch
//! calls write one code per key into a caller array and return 0 when the batch ran (a negative
//! code when the arguments themselves are unusable: NULL arrays, a NULL handle).
//! `tw_last_error_message()` gives the detail of a failed call. Every function is thread-safe
//! on one `tw_store`; none retains caller pointers.
//!
//! Keys: see [`TW_STORE_MAX_KEY_LEN`] (full-length byte strings, `key_lens` next to every
//! key array).

#[macro_use]
mod args;
pub mod codes;
mod disk;
mod host_memory;
mod multi;
mod put_sessions;
mod segments;
mod sessions;
mod sized;
mod split;
mod tasks;

use super::ffi_boundary;
use super::status::set_last_error;
use crate::store::copying::Fetched;
use crate::store::{StoreClient, StoreConfig};
use args::{arr, arr_mut, bad, key_buffers, per_key, store, store_keys, write_config};
use codes::{
    CResult, TW_STORE_BUFFER_OVERFLOW, TW_STORE_INTERNAL_ERROR, TW_STORE_OK, write_results,
};
use std::ffi::{c_char, c_void};

/// Longest key, in bytes (Mooncake's limit, 1 MiB).
///
/// Keys are byte strings of their full length. Every call that takes an array of keys
/// (`keys_in`) takes a `key_lens` array right after it: NULL means each key is a NUL-terminated
/// C string; otherwise key `i` is exactly `key_lens[i]` bytes at `keys_in[i]`, NUL bytes
/// included and no terminator read, so `"k\0a"` and `"k\0b"` are two keys. A key must be 1 to
/// `TW_STORE_MAX_KEY_LEN` bytes of UTF-8. A key that is NULL (with a nonzero length), empty,
/// longer or not UTF-8 fails on its own with `TW_STORE_INVALID_PARAMS` in its result slot, and
/// `tw_last_error_message()` names the first such key; a key longer than the limit is refused
/// without being read. `tw_store_get_size` takes one key and its length, with the same rules.
pub const TW_STORE_MAX_KEY_LEN: usize = 1048576;
const _: () = assert!(TW_STORE_MAX_KEY_LEN == crate::store::proto::MAX_KEY_LEN);

/// A store client handle (from `tw_store_setup`).
pub struct tw_store {
    client: StoreClient,
}

/// Mooncake's `ReplicateConfig`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct tw_store_replicate_config {
    /// Replicas on distinct segments, best effort (0 means 1).
    pub replica_num: u32,
    /// Never evicted (fixed when the object is created).
    pub with_hard_pin: bool,
    /// Evicted only after unpinned objects while the soft-pin TTL runs.
    pub with_soft_pin: bool,
    /// Comma-separated segment names to place replicas on first, or NULL.
    pub preferred_segments: *const c_char,
}

/// A value fetched by `tw_store_get_copy`: `data[0..len]`, valid until
/// `tw_store_value_release` (which must be called once per successful value).
#[repr(C)]
#[derive(Debug)]
pub struct tw_store_value {
    /// The bytes (NULL when the key failed).
    pub data: *const u8,
    /// Length.
    pub len: u64,
    /// Owner token for `tw_store_value_release`.
    pub owner: *mut c_void,
}

/// Creates a store client (Mooncake's `setup`): starts an engine on `local_hostname` with
/// `metadata_server` (`P2PHANDSHAKE`, `http://host:port/metadata` or `etcd://h:p[;h:p]`), maps
/// and mounts a `global_segment_size` segment (0 = none), a `local_buffer_size` staging buffer,
/// and connects to `master_server_address` (`host:port`, or `etcd://h:p[;h:p]` to follow the
/// elected master). `protocol` is `tcp` or `rdma`; `device_name` may be
/// NULL. On success writes the handle to `*out` (free it with `tw_store_free`).
///
/// # Safety
/// Strings are NULL or valid C strings; `out` is writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn tw_store_setup(
    local_hostname: *const c_char,
    metadata_server: *const c_char,
    global_segment_size: u64,
    local_buffer_size: u64,
    protocol: *const c_char,
    device_name: *const c_char,
    master_server_address: *const c_char,
    out: *mut *mut tw_store,
) -> i32 {
    // SAFETY: the same contract, and no disk tier.
    unsafe {
        tw_store_setup_disk(
            local_hostname,
            metadata_server,
            global_segment_size,
            local_buffer_size,
            protocol,
            device_name,
            master_server_address,
            std::ptr::null(),
            out,
        )
    }
}

/// `tw_store_setup` with a disk tier (Mooncake's `enable_ssd_offload=True,
/// ssd_offload_path=...`): objects of this client's segment are written to record files in
/// `ssd_offload_path` (absolute, existing, writable, no symlink or `..`; NULL or empty: no
/// tier), as the master (`--enable_offload`) directs, and a restart on the same path adopts
/// them again. Quota and file size come from `MOONCAKE_OFFLOAD_BUCKET_MAX_TOTAL_SIZE` and
/// `MOONCAKE_OFFLOAD_BUCKET_SIZE_LIMIT_BYTES`. A bad path is `TW_STORE_INVALID_PARAMS`, a
/// master without a disk tier `TW_STORE_UNAVAILABLE_IN_CURRENT_MODE`, each with its reason in
/// `tw_last_error`.
///
/// # Safety
/// Strings are NULL or valid C strings; `out` is writable.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn tw_store_setup_disk(
    local_hostname: *const c_char,
    metadata_server: *const c_char,
    global_segment_size: u64,
    local_buffer_size: u64,
    protocol: *const c_char,
    device_name: *const c_char,
    master_server_address: *const c_char,
    ssd_offload_path: *const c_char,
    out: *mut *mut tw_store,
) -> i32 {
    ffi_boundary!(TW_STORE_INTERNAL_ERROR, {
        if out.is_null() {
            return bad("out is NULL");
        }
        let s = |p: *const c_char, what: &str, dflt: &str| -> Result<String, i32> {
            if p.is_null() {
                return Ok(dflt.to_string());
            }
            // SAFETY: non-NULL C string per the contract.
            unsafe { super::str_arg(p, what) }
                .map(String::from)
                .map_err(|e| bad(e.to_string()))
        };
        let disk_path = tri!(s(ssd_offload_path, "ssd_offload_path", ""));
        let cfg = StoreConfig {
            local_hostname: tri!(s(local_hostname, "local_hostname", "")),
            metadata_server: tri!(s(metadata_server, "metadata_server", "P2PHANDSHAKE")),
            global_segment_size,
            local_buffer_size,
            protocol: tri!(s(protocol, "protocol", "tcp")),
            device_name: tri!(s(device_name, "device_name", "")),
            master_server_address: tri!(s(
                master_server_address,
                "master_server_address",
                crate::store::client::DEFAULT_MASTER_ADDRESS
            )),
            disk: (!ssd_offload_path.is_null() && !disk_path.is_empty())
                .then(|| crate::store::disk::DiskConfig::from_env(&disk_path)),
        };
        match StoreClient::setup(&cfg) {
            Ok(client) => {
                // SAFETY: `out` is non-NULL and writable per the contract.
                unsafe { *out = Box::into_raw(Box::new(tw_store { client })) };
                TW_STORE_OK
            }
            Err(e) => {
                set_last_error(e.message.clone());
                codes::to_c(e.code)
            }
        }
    })
}

/// Closes a client: unmounts its segment (its objects go with it), stops its engine and frees
/// the handle. NULL is ignored. No call may be running on the handle.
///
/// # Safety
/// `s` is NULL or a live handle, freed once.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn tw_store_free(s: *mut tw_store) {
    ffi_boundary!((), {
        if !s.is_null() {
            // SAFETY: a live handle from `tw_store_setup`, freed once per the contract.
            drop(unsafe { Box::from_raw(s) });
        }
    })
}

/// Copies this client's endpoint (`host:port`, its segment name) into `buf[..len]`,
/// NUL-terminated. `TW_STORE_BUFFER_OVERFLOW` when it does not fit.
///
/// # Safety
/// `s` is a live handle; `buf` is writable for `len` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn tw_store_hostname(
    s: *const tw_store,
    buf: *mut c_char,
    len: usize,
) -> i32 {
    ffi_boundary!(TW_STORE_INTERNAL_ERROR, {
        let c = tri!(store(s));
        // SAFETY: `buf` is writable for `len` bytes per the contract.
        if unsafe { super::write_c_string(&c.hostname(), buf, len) } {
            TW_STORE_OK
        } else {
            set_last_error("hostname buffer too small or NULL".into());
            TW_STORE_BUFFER_OVERFLOW
        }
    })
}

/// 0 healthy, 2 master unreachable.
///
/// # Safety
/// `s` is NULL or a live handle (NULL gives 1, "not initialised").
#[unsafe(no_mangle)]
pub unsafe extern "C" fn tw_store_health_check(s: *const tw_store) -> i32 {
    ffi_boundary!(TW_STORE_INTERNAL_ERROR, {
        match crate::ffi::try_ref(s) {
            Err(_) => 1,
            Ok(c) => c.health_check(),
        }
    })
}

/// Registers `[addr, addr+len)` with the client's engine (local-only) for zero-copy calls. The
/// range may be host memory or CUDA device memory (found through the CUDA driver's pointer
/// attributes when one is loaded): every put, get and ranged read then moves device bytes
/// through the driver (staged over TCP for remote segments, `cuMemcpy` for this client's own
/// segment). Device memory must be registered before it is used.
///
/// # Safety
/// `s` is a live handle; the range stays valid until `tw_store_unregister_buffer`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn tw_store_register_buffer(
    s: *const tw_store,
    addr: *mut c_void,
    len: u64,
) -> i32 {
    ffi_boundary!(TW_STORE_INTERNAL_ERROR, {
        let c = tri!(store(s));
        if addr.is_null() || len == 0 {
            return bad("register_buffer: NULL address or zero length");
        }
        // "*": the location is detected (GPU memory through the driver's pointer attributes,
        // when a CUDA driver is present), so device buffers move through the GPU paths.
        match c.engine().register_memory(addr as u64, len, "*", false) {
            Ok(()) => TW_STORE_OK,
            Err(e) => bad(e.to_string()),
        }
    })
}

/// Drops the registration starting at `addr`.
///
/// # Safety
/// `s` is a live handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn tw_store_unregister_buffer(s: *const tw_store, addr: *mut c_void) -> i32 {
    ffi_boundary!(TW_STORE_INTERNAL_ERROR, {
        let c = tri!(store(s));
        match c.engine().unregister_memory(addr as u64) {
            Ok(()) => TW_STORE_OK,
            Err(e) => bad(e.to_string()),
        }
    })
}

/// Zero-copy put (`upsert == 0`: create-only; otherwise create-or-replace) of `n` keys from
/// `ptrs[i][0..sizes[i]]`; one code per key in `results` (0 or negative). `copy != 0` stages
/// each value in the local buffer first (Mooncake's copying `put`/`upsert`). `cfg` may be NULL.
///
/// # Safety
/// `s` is a live handle; `keys_in` and `key_lens` hold `n` keys as `TW_STORE_MAX_KEY_LEN`
/// describes, each readable for its length; `ptrs`, `sizes` hold `n` elements, each `ptrs[i]` readable for
/// `sizes[i]` bytes and unchanged during the call; `results` is writable for `n` elements.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn tw_store_put(
    s: *const tw_store,
    keys_in: *const *const c_char,
    key_lens: *const usize,
    ptrs: *const *const c_void,
    sizes: *const u64,
    n: usize,
    upsert: i32,
    copy: i32,
    cfg: *const tw_store_replicate_config,
    results: *mut i32,
) -> i32 {
    ffi_boundary!(TW_STORE_INTERNAL_ERROR, {
        // SAFETY: pointers as documented in this function's contract.
        let (c, ks) = tri!(unsafe { store_keys(s, keys_in, key_lens, n) });
        // SAFETY: pointers as documented in this function's contract.
        let ps = tri!(unsafe { arr(ptrs, n, "ptrs") });
        // SAFETY: pointers as documented in this function's contract.
        let ss = tri!(unsafe { arr(sizes, n, "sizes") });
        // SAFETY: pointers as documented in this function's contract.
        let out = tri!(unsafe { arr_mut(results, n, "results") });
        // SAFETY: per the contract above.
        let wcfg = unsafe { write_config(cfg) };
        let r = if copy != 0 {
            let values: Vec<&[u8]> = ps
                .iter()
                .zip(ss)
                .map(|(&p, &l)| {
                    if p.is_null() || l == 0 {
                        &[][..]
                    } else {
                        // SAFETY: readable for `l` bytes per the contract.
                        unsafe { std::slice::from_raw_parts(p.cast::<u8>(), l as usize) }
                    }
                })
                .collect();
            let items: Vec<(&str, &[&[u8]])> = ks
                .iter()
                .zip(&values)
                .map(|(k, v)| (*k, std::slice::from_ref(v)))
                .collect();
            c.put_values(&items, upsert != 0, &wcfg)
        } else {
            let items = key_buffers(&ks, ps, ss);
            // SAFETY: each buffer is readable and unchanged during the call per the contract.
            unsafe { c.put_from(&items, upsert != 0, &wcfg) }
        };
        write_results(out, &r);
        TW_STORE_OK
    })
}

/// Zero-copy get of `n` keys into `ptrs[i][0..caps[i]]`; per key in `results`: bytes read or a
/// negative code (-704 missing, -600 buffer too small).
///
/// # Safety
/// `s` is a live handle; arrays hold `n` elements (`key_lens` may be NULL: see
/// `TW_STORE_MAX_KEY_LEN`); each key is readable for its length; each `ptrs[i]` is writable for `caps[i]` bytes and
/// unshared during the call; `results` is writable for `n` elements.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn tw_store_get_into(
    s: *const tw_store,
    keys_in: *const *const c_char,
    key_lens: *const usize,
    ptrs: *const *mut c_void,
    caps: *const u64,
    n: usize,
    results: *mut i64,
) -> i32 {
    ffi_boundary!(TW_STORE_INTERNAL_ERROR, {
        // SAFETY: pointers as documented in this function's contract.
        let (c, ks) = tri!(unsafe { store_keys(s, keys_in, key_lens, n) });
        // SAFETY: pointers as documented in this function's contract.
        let ps = tri!(unsafe { arr(ptrs, n, "ptrs") });
        // SAFETY: pointers as documented in this function's contract.
        let cs = tri!(unsafe { arr(caps, n, "caps") });
        // SAFETY: pointers as documented in this function's contract.
        let out = tri!(unsafe { arr_mut(results, n, "results") });
        let items = key_buffers(&ks, ps, cs);
        // SAFETY: each destination is writable and unshared per the contract.
        write_results(out, &unsafe { c.get_into(&items) });
        TW_STORE_OK
    })
}

/// Copying get of `n` keys: per key `values[i]` (release each successful one with
/// `tw_store_value_release`) and in `results` its length or a negative code.
///
/// # Safety
/// `s` is a live handle; `keys_in` and `key_lens` hold `n` keys as `TW_STORE_MAX_KEY_LEN`
/// describes, each readable for its length; `values` and `results` are writable for `n`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn tw_store_get_copy(
    s: *const tw_store,
    keys_in: *const *const c_char,
    key_lens: *const usize,
    n: usize,
    values: *mut tw_store_value,
    results: *mut i64,
) -> i32 {
    ffi_boundary!(TW_STORE_INTERNAL_ERROR, {
        // SAFETY: pointers as documented in this function's contract.
        let (c, ks) = tri!(unsafe { store_keys(s, keys_in, key_lens, n) });
        // SAFETY: pointers as documented in this function's contract.
        let vs = tri!(unsafe { arr_mut(values, n, "values") });
        // SAFETY: pointers as documented in this function's contract.
        let out = tri!(unsafe { arr_mut(results, n, "results") });
        for ((r, v), o) in c
            .get_values(&ks)
            .into_iter()
            .zip(vs.iter_mut())
            .zip(out.iter_mut())
        {
            match r {
                Ok(f) => {
                    let b = f.bytes();
                    let (data, len) = (b.as_ptr(), b.len() as u64);
                    *v = tw_store_value {
                        data,
                        len,
                        owner: Box::into_raw(Box::new(f)).cast(),
                    };
                    *o = len as i64;
                }
                Err(e) => {
                    *v = tw_store_value {
                        data: std::ptr::null(),
                        len: 0,
                        owner: std::ptr::null_mut(),
                    };
                    *o = i64::from(codes::to_c(e));
                }
            }
        }
        TW_STORE_OK
    })
}

/// Releases a value from `tw_store_get_copy` (NULL and already-released values are ignored).
///
/// # Safety
/// `v` is NULL or a value written by `tw_store_get_copy`, not copied elsewhere and released.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn tw_store_value_release(v: *mut tw_store_value) {
    ffi_boundary!((), {
        // SAFETY: per the contract above.
        if let Some(v) = unsafe { v.as_mut() } {
            if !v.owner.is_null() {
                // SAFETY: `owner` came from `Box::into_raw` in `tw_store_get_copy`, once.
                drop(unsafe { Box::from_raw(v.owner.cast::<Fetched>()) });
            }
            v.owner = std::ptr::null_mut();
            v.data = std::ptr::null();
            v.len = 0;
        }
    })
}

/// Ranged reads: fragment `i` copies `[src_offsets[i], +lens[i])` of object `keys[i]` to
/// `dsts[i]`; per fragment in `results`: bytes read or a negative code.
///
/// # Safety
/// `s` is a live handle; arrays hold `n` elements (`key_lens` may be NULL: see
/// `TW_STORE_MAX_KEY_LEN`); each key is readable for its length; each `dsts[i]` is writable for `lens[i]` bytes and
/// unshared during the call; `results` is writable for `n` elements.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn tw_store_get_ranges(
    s: *const tw_store,
    keys_in: *const *const c_char,
    key_lens: *const usize,
    dsts: *const *mut c_void,
    src_offsets: *const u64,
    lens: *const u64,
    n: usize,
    results: *mut i64,
) -> i32 {
    ffi_boundary!(TW_STORE_INTERNAL_ERROR, {
        // SAFETY: pointers as documented in this function's contract.
        let (c, ks) = tri!(unsafe { store_keys(s, keys_in, key_lens, n) });
        // SAFETY: pointers as documented in this function's contract.
        let ds = tri!(unsafe { arr(dsts, n, "dsts") });
        // SAFETY: pointers as documented in this function's contract.
        let os = tri!(unsafe { arr(src_offsets, n, "src_offsets") });
        // SAFETY: pointers as documented in this function's contract.
        let ls = tri!(unsafe { arr(lens, n, "lens") });
        // SAFETY: pointers as documented in this function's contract.
        let out = tri!(unsafe { arr_mut(results, n, "results") });
        let frags: Vec<(&str, u64, u64, u64)> = (0..n)
            .map(|i| (ks[i], ds[i] as u64, os[i], ls[i]))
            .collect();
        // SAFETY: each destination is writable and unshared per the contract.
        write_results(out, &unsafe { c.get_ranges(&frags) });
        TW_STORE_OK
    })
}

/// Size of an object, or a negative code (-704 missing, -600 for an unusable key). The key is
/// the `key_len` bytes at `key` (NUL bytes included; no terminator is read).
///
/// # Safety
/// `s` is a live handle; `key` is NULL (only with `key_len == 0`) or readable for `key_len`
/// bytes when `key_len <= TW_STORE_MAX_KEY_LEN` (a longer key is refused without being read).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn tw_store_get_size(
    s: *const tw_store,
    key: *const c_char,
    key_len: usize,
) -> i64 {
    ffi_boundary!(TW_STORE_INTERNAL_ERROR as i64, {
        let c = tri!(store(s).map_err(i64::from));
        // SAFETY: `key` is readable for `key_len` bytes per the contract above.
        let k = match unsafe { args::key(key, Some(key_len)) } {
            Ok(k) => k,
            Err(why) => return bad(format!("key {why}")) as i64,
        };
        match c.sizes(&[k])[0] {
            Ok(n) => n as i64,
            Err(e) => i64::from(codes::to_c(e)),
        }
    })
}

/// Existence of `n` keys: per key 1, 0, or a negative code.
///
/// # Safety
/// `s` is a live handle; `keys_in` and `key_lens` hold `n` keys as `TW_STORE_MAX_KEY_LEN`
/// describes, each readable for its length; `results` is writable for `n`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn tw_store_exist(
    s: *const tw_store,
    keys_in: *const *const c_char,
    key_lens: *const usize,
    n: usize,
    results: *mut i32,
) -> i32 {
    ffi_boundary!(TW_STORE_INTERNAL_ERROR, {
        // SAFETY: pointers as documented in this function's contract.
        unsafe { per_key(s, keys_in, key_lens, n, results, |c, ks| Ok(c.exist(ks))) }
    })
}

/// Removes `n` keys: per key 0, -704 missing, -706 leased (unless `force`).
///
/// # Safety
/// `s` is a live handle; `keys_in` and `key_lens` hold `n` keys as `TW_STORE_MAX_KEY_LEN`
/// describes, each readable for its length; `results` is writable for `n`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn tw_store_remove(
    s: *const tw_store,
    keys_in: *const *const c_char,
    key_lens: *const usize,
    n: usize,
    force: bool,
    results: *mut i32,
) -> i32 {
    ffi_boundary!(TW_STORE_INTERNAL_ERROR, {
        // SAFETY: pointers as documented in this function's contract.
        unsafe {
            per_key(s, keys_in, key_lens, n, results, |c, ks| {
                Ok(c.remove(ks, force))
            })
        }
    })
}

/// Removes every key matching `pattern` (regex); the count, or a negative code.
///
/// # Safety
/// `s` is a live handle; `pattern` is a C string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn tw_store_remove_by_regex(
    s: *const tw_store,
    pattern: *const c_char,
    force: bool,
) -> i64 {
    ffi_boundary!(TW_STORE_INTERNAL_ERROR as i64, {
        let c = tri!(store(s).map_err(i64::from));
        // SAFETY: `pattern` is a C string per the contract above.
        let p = unsafe { super::str_arg(pattern, "pattern") };
        let p = tri!(p.map_err(|e| bad(e.to_string()) as i64));
        c.remove_by_regex(p, force).to_c()
    })
}

/// Removes every key; the count, or a negative code.
///
/// # Safety
/// `s` is a live handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn tw_store_remove_all(s: *const tw_store, force: bool) -> i64 {
    ffi_boundary!(TW_STORE_INTERNAL_ERROR as i64, {
        let c = tri!(store(s).map_err(i64::from));
        c.remove_all(force).to_c()
    })
}
