//! The C APIs. This is the only module that touches pointers handed in by C callers, and the
//! only one that exports symbols (`gpu` and `transport::rdma` hold pointers to CUDA and verbs
//! objects they created). `native` is tidewire's own `tw_*` API (`include/tidewire.h`); `mooncake` exports the 27
//! functions of Mooncake's `transfer_engine_c.h`.
#![allow(non_camel_case_types)]

pub mod mooncake;
pub mod native;
pub mod status;
pub mod store;

use std::ffi::{CStr, c_char};

/// Runs `$body`, turning a panic into `$on_panic` plus a last-error message.
macro_rules! ffi_boundary {
    ($on_panic:expr, $body:block) => {
        match ::std::panic::catch_unwind(::std::panic::AssertUnwindSafe(|| $body)) {
            Ok(ret) => ret,
            Err(payload) => {
                $crate::ffi::status::record_panic(&*payload);
                $on_panic
            }
        }
    };
}
pub(crate) use ffi_boundary;

/// A C handle type: the Rust value behind the `*const Self` (or `*mut Self`) pointers the C
/// APIs hand out and take back. [`try_ref`] is the one place such a pointer becomes a reference.
pub(crate) trait Castable {
    /// The Rust value the handle gives access to.
    type Target;
    /// What the handle is called in the error for a NULL one.
    const WHAT: &'static str;
    /// The value behind a live handle.
    fn target(&self) -> &Self::Target;
}

/// Borrows the value behind a handle argument of an exported C function: NULL →
/// `NullArgument`. Only for handle arguments: the contract of every exported function (its
/// documentation, the headers' conventions) is that a handle passed in is NULL or one this
/// library made and has not freed, and that no call freeing it runs meanwhile.
pub(crate) fn try_ref<'a, C: Castable + 'a>(p: *const C) -> crate::Result<&'a C::Target> {
    // SAFETY: NULL or a live handle from this library for the whole call, by the API contract
    // described above (the one justification of every handle borrow in `ffi`).
    match unsafe { p.as_ref() } {
        Some(h) => Ok(h.target()),
        None => Err(crate::Error::new(
            crate::ErrorKind::NullArgument,
            format!("{} is NULL", C::WHAT),
        )),
    }
}

/// Borrows the `name` and `msg` C strings of a notification (as [`str_arg`] does each).
///
/// # Safety
/// Each pointer is NULL or a valid NUL-terminated string that outlives the returned borrows.
pub(crate) unsafe fn notify_args<'a>(
    name: *const c_char,
    msg: *const c_char,
) -> crate::Result<(&'a str, &'a str)> {
    // SAFETY: forwarded from this function's contract.
    Ok(unsafe { (str_arg(name, "name")?, str_arg(msg, "msg")?) })
}

/// Borrows a C string argument: NULL → `NullArgument`, invalid UTF-8 → `InvalidArgument`.
///
/// # Safety
/// `p` is NULL or a valid NUL-terminated string that outlives the returned borrow.
pub(crate) unsafe fn str_arg<'a>(p: *const c_char, what: &str) -> crate::Result<&'a str> {
    if p.is_null() {
        return Err(crate::Error::new(
            crate::ErrorKind::NullArgument,
            format!("{what} is NULL"),
        ));
    }
    // SAFETY: non-NULL and NUL-terminated per the caller's contract.
    unsafe { CStr::from_ptr(p) }.to_str().map_err(|_| {
        crate::Error::new(
            crate::ErrorKind::InvalidArgument,
            format!("{what} is not valid UTF-8"),
        )
    })
}

/// Borrows `count` elements at `p`: NULL is allowed only for `count == 0`.
///
/// # Safety
/// `p` is NULL or points at `count` initialised elements that outlive the borrow.
pub(crate) unsafe fn slice_arg<'a, T>(
    p: *const T,
    count: usize,
    what: &str,
) -> crate::Result<&'a [T]> {
    if count == 0 {
        return Ok(&[]);
    }
    if p.is_null() {
        return Err(crate::Error::new(
            crate::ErrorKind::NullArgument,
            format!("{what} is NULL with count {count}"),
        ));
    }
    // SAFETY: non-NULL, `count` elements per the caller's contract.
    Ok(unsafe { std::slice::from_raw_parts(p, count) })
}

/// The one NUL-terminated copy of the C layers: `bytes`, then a NUL, at `dst`.
///
/// # Safety
/// `dst` is valid for `bytes.len() + 1` bytes of writes and does not overlap `bytes`.
pub(crate) unsafe fn copy_with_nul(bytes: &[u8], dst: *mut c_char) {
    // SAFETY: `dst` holds bytes.len() + 1 bytes per this function's contract.
    unsafe {
        std::ptr::copy_nonoverlapping(bytes.as_ptr(), dst.cast::<u8>(), bytes.len());
        *dst.add(bytes.len()) = 0;
    }
}

/// Copies `s` plus a NUL into `buf[..len]`; `false` when it does not fit (nothing written).
///
/// # Safety
/// `buf` is NULL or valid for `len` bytes of writes.
pub(crate) unsafe fn write_c_string(s: &str, buf: *mut c_char, len: usize) -> bool {
    if buf.is_null() || s.len() + 1 > len {
        return false;
    }
    // SAFETY: `buf` holds at least s.len()+1 bytes per the check above and the caller's contract.
    unsafe { copy_with_nul(s.as_bytes(), buf) };
    true
}

/// Copies as much of `s` as fits into `buf[..len]`, NUL-terminated (like `snprintf`); writes
/// nothing when `buf` is NULL or `len` is 0.
///
/// # Safety
/// `buf` is NULL or valid for `len` bytes of writes.
pub(crate) unsafe fn write_c_string_truncated(s: &str, buf: *mut c_char, len: usize) {
    if buf.is_null() || len == 0 {
        return;
    }
    let n = s.len().min(len - 1);
    // SAFETY: n + 1 <= len bytes, writable per the caller's contract.
    unsafe { copy_with_nul(&s.as_bytes()[..n], buf) };
}
