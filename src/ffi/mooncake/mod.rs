//! Mooncake's C ABI: the 27 functions of `transfer_engine_c.h` (declared in
//! `include/transfer_engine_c.h`), built on [`Engine`].
//!
//! Mooncake mixes two return-code domains and this module keeps both: `submitTransfer`,
//! `submitTransferWithNotify`, `getTransferStatus` and `freeBatchID` return positive `Status`
//! codes; every other `int` function returns 0 or a negative `error.h` code. `codes::codes` is the one
//! place where an [`ErrorKind`] becomes either.
//!
//! The contract is Mooncake's; misuse behaves better: NULL arguments return an error instead of
//! crashing, batch ids are validated table ids, unsupported metadata schemes make
//! `createTransferEngine` return NULL instead of aborting, and `freeBatchID` is refused only while
//! work is really in flight. Every function taking an engine is thread-safe, except
//! `destroyTransferEngine`, which must not race with other calls on the same handle.

use super::{ffi_boundary, slice_arg, str_arg, write_c_string_truncated};
use crate::engine::{AsRequest, Config, Engine, LOCAL_SEGMENT, Request, SegmentId, TaskState};
use crate::error::{Error, ErrorKind, Result};
use crate::log::Level;
use crate::sync::LockClean;
use crate::transport::Opcode;
use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_void};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

mod batch;
pub(crate) mod codes;
mod lifecycle;
mod links;
mod memory;
mod notify;
mod segment;
mod types;

#[cfg(test)]
use {batch::*, lifecycle::*, memory::*, notify::*, segment::*};

use codes::*;
use types::*;

/// What a `transfer_engine_t` points at.
struct MooncakeEngine {
    engine: Engine,
    /// Set once the TCP transport is installed; its address is the `transport_t` handed out.
    tcp: AtomicBool,
    /// Remote segments opened through this handle, by name (for `openSegmentNoCache` and
    /// `removeLocalSegment`).
    opened: Mutex<HashMap<String, SegmentId>>,
}

impl MooncakeEngine {
    fn tcp_installed(&self) -> bool {
        // Acquire pairs with the Release store in `installTransport`.
        self.tcp.load(Ordering::Acquire)
    }

    fn opened(&self) -> std::sync::MutexGuard<'_, HashMap<String, SegmentId>> {
        self.opened.lock_clean()
    }

    fn no_transport(&self) -> Error {
        err(
            ErrorKind::Unsupported,
            "no transport installed: call installTransport(engine, \"tcp\", NULL) first",
        )
    }
}

impl super::Castable for MooncakeEngine {
    type Target = MooncakeEngine;
    const WHAT: &'static str = "engine";
    fn target(&self) -> &MooncakeEngine {
        self
    }
}

/// Borrows the engine behind a `transfer_engine_t` argument (from `createTransferEngine`, a
/// leaked `Box<MooncakeEngine>`, not yet passed to `destroyTransferEngine`): NULL →
/// `NullArgument`. See [`super::try_ref`].
fn handle<'a>(p: *mut c_void) -> Result<&'a MooncakeEngine> {
    super::try_ref(p.cast::<MooncakeEngine>().cast_const())
}

/// Borrows an output argument: NULL → `NullArgument`.
///
/// # Safety
/// `p` is NULL or a valid, aligned, writable `T` that nothing else touches during the borrow.
unsafe fn out<'a, T>(p: *mut T, what: &str) -> Result<&'a mut T> {
    // SAFETY: NULL (refused here) or valid per this function's contract.
    unsafe { p.as_mut() }.ok_or_else(|| err(ErrorKind::NullArgument, format!("{what} is NULL")))
}

/// Borrows a C string argument: NULL → `NullArgument`, invalid UTF-8 → `InvalidArgument`.
///
/// # Safety
/// `p` is NULL or a NUL-terminated string that stays valid for the borrow.
unsafe fn string<'a>(p: *const c_char, what: &str) -> Result<&'a str> {
    // SAFETY: NULL (refused by `str_arg`) or a valid C string per this function's contract.
    unsafe { str_arg(p, what) }
}

/// Duplicates `s` into a `malloc`ed NUL-terminated string (NULL when out of memory). A NUL inside
/// `s` ends the C string early.
fn malloc_str(s: &str) -> *mut c_char {
    // SAFETY: plain allocation; checked for NULL below.
    let p = unsafe { libc::malloc(s.len() + 1) }.cast::<c_char>();
    if !p.is_null() {
        // SAFETY: `p` holds s.len() + 1 bytes.
        unsafe { super::copy_with_nul(s.as_bytes(), p) };
    }
    p
}

fn truthy_env(var: &str) -> bool {
    std::env::var(var).is_ok_and(|v| {
        !matches!(
            v.trim().to_ascii_lowercase().as_str(),
            "" | "0" | "false" | "off" | "no"
        )
    })
}

#[cfg(test)]
mod tests;
