//! `tw_store_*_segment*`: segments mounted at run time (Mooncake's `mount_segment`,
//! `allocate_and_mount_segment`, `unmount_segment`, `unmount_and_free_segment`).

use super::args::{arr, bad, store};
use super::codes::{TW_STORE_INTERNAL_ERROR, TW_STORE_OK, to_c};
use super::tw_store;
use crate::ffi::ffi_boundary;
use crate::ffi::status::set_last_error;
use std::ffi::c_char;

/// Longest segment id written by the mount calls, NUL included.
pub const TW_STORE_MAX_SEGMENT_ID_LEN: usize = 64;
// An id is two u64 in decimal and a dash: at most 41 bytes and its NUL.
const _: () = assert!(TW_STORE_MAX_SEGMENT_ID_LEN >= 42);

/// Writes `id` and a NUL into `out` (`cap` bytes); false when it does not fit.
fn write_id(id: &str, out: *mut c_char, cap: usize) -> bool {
    if out.is_null() || id.len() + 1 > cap {
        return false;
    }
    // SAFETY: `out` is writable for `cap` bytes (checked non-NULL; the caller's contract), and
    // the id and its NUL fit.
    unsafe {
        std::ptr::copy_nonoverlapping(id.as_ptr(), out.cast::<u8>(), id.len());
        *out.add(id.len()) = 0;
    }
    true
}

/// Maps `size` bytes of the file at `path` from `offset` (page aligned; the range must lie in
/// the file) shared, registers them with the client's engine and mounts them on the master as
/// one more segment of this client: new objects may be placed there at once. Writes the
/// segment's id (NUL-terminated) to `id_out` (`id_cap` bytes; `TW_STORE_MAX_SEGMENT_ID_LEN`
/// suffice). Returns `TW_STORE_OK`, `TW_STORE_INVALID_PARAMS` (NULL arguments, a range outside
/// the file, an unaligned offset) or the master's code; `tw_last_error` says why.
///
/// # Safety
/// `s` is a live handle; `path` is a C string; `id_out` is writable for `id_cap` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn tw_store_mount_file_segment(
    s: *const tw_store,
    path: *const c_char,
    size: u64,
    offset: u64,
    id_out: *mut c_char,
    id_cap: usize,
) -> i32 {
    ffi_boundary!(TW_STORE_INTERNAL_ERROR, {
        let c = tri!(store(s));
        if path.is_null() || id_out.is_null() {
            return bad("path or id_out is NULL");
        }
        // SAFETY: a C string per the contract.
        let p = match unsafe { crate::ffi::str_arg(path, "path") } {
            Ok(p) => p,
            Err(e) => return bad(e.to_string()),
        };
        match c.mount_file_segment(p, size, offset) {
            Ok(id) if write_id(&id, id_out, id_cap) => TW_STORE_OK,
            Ok(id) => {
                let _ = c.unmount_segments(&[&id], std::time::Duration::ZERO, false);
                bad("id_out is too small")
            }
            Err(e) => {
                set_last_error(e.message.clone());
                to_c(e.code)
            }
        }
    })
}

/// Allocates `size` bytes, registers them with the client's engine and mounts them on the
/// master as one more segment of this client; writes its id as `tw_store_mount_file_segment`
/// does. Returns `TW_STORE_OK`, `TW_STORE_INVALID_PARAMS` (a zero size, NULL `id_out`) or the
/// master's code.
///
/// # Safety
/// `s` is a live handle; `id_out` is writable for `id_cap` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn tw_store_allocate_segment(
    s: *const tw_store,
    size: u64,
    id_out: *mut c_char,
    id_cap: usize,
) -> i32 {
    ffi_boundary!(TW_STORE_INTERNAL_ERROR, {
        let c = tri!(store(s));
        if id_out.is_null() {
            return bad("id_out is NULL");
        }
        match c.allocate_segment(size) {
            Ok(id) if write_id(&id, id_out, id_cap) => TW_STORE_OK,
            Ok(id) => {
                let _ = c.unmount_segments(&[&id], std::time::Duration::ZERO, true);
                bad("id_out is too small")
            }
            Err(e) => {
                set_last_error(e.message.clone());
                to_c(e.code)
            }
        }
    })
}

/// Unmounts `n` run-time segments by id: those `tw_store_mount_file_segment` mounted
/// (`allocated == 0`), or those `tw_store_allocate_segment` mounted (`allocated != 0`). The
/// master drops their replicas at once (an object keeps its other replicas; one left with none
/// is removed); the memory is unregistered and unmapped after `grace_period_seconds`. Returns
/// 0, or the first failure: -1 for an id this client did not mount that way (as Mooncake), or
/// the master's code.
///
/// # Safety
/// `s` is a live handle; `ids` holds `n` C strings.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn tw_store_unmount_segments(
    s: *const tw_store,
    ids: *const *const c_char,
    n: usize,
    grace_period_seconds: u64,
    allocated: i32,
) -> i32 {
    ffi_boundary!(TW_STORE_INTERNAL_ERROR, {
        let c = tri!(store(s));
        // SAFETY: `ids` holds `n` pointers per the contract.
        let ps = tri!(unsafe { arr(ids, n, "ids") });
        let mut names = Vec::with_capacity(n);
        for &p in ps {
            if p.is_null() {
                return bad("an id is NULL");
            }
            // SAFETY: a C string per the contract.
            match unsafe { crate::ffi::str_arg(p, "id") } {
                Ok(id) => names.push(id),
                Err(e) => return bad(e.to_string()),
            }
        }
        let grace = std::time::Duration::from_secs(grace_period_seconds);
        to_c(c.unmount_segments(&names, grace, allocated != 0))
    })
}
