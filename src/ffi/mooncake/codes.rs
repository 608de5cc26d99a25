//! Mooncake's two return-code domains and the one mapping from [`ErrorKind`] into both.

use crate::error::{Error, ErrorKind, Result};
use crate::ffi::status::set_last_error;
use crate::log::Level;
use std::ffi::c_int;

// Positive `Status` codes (Mooncake `common/base/status.h`).
pub(super) const K_OK: c_int = 0;
pub(super) const K_INVALID_ARGUMENT: c_int = 1;
pub(super) const K_TOO_MANY_REQUESTS: c_int = 2;
pub(super) const K_ADDRESS_NOT_REGISTERED: c_int = 3;
pub(super) const K_BATCH_BUSY: c_int = 4;
pub(super) const K_ADDRESS_OVERLAPPED: c_int = 7;
pub(super) const K_NOT_SUPPORTED_TRANSPORT: c_int = 8;
pub(super) const K_SOCKET: c_int = 102;
pub(super) const K_MALFORMED_JSON: c_int = 103;
pub(super) const K_METADATA: c_int = 200;
pub(super) const K_CONTEXT: c_int = 202;

// Negative `error.h` codes.
pub(super) const ERR_INVALID_ARGUMENT: c_int = -1;
pub(super) const ERR_TOO_MANY_REQUESTS: c_int = -2;
pub(super) const ERR_ADDRESS_NOT_REGISTERED: c_int = -3;
pub(super) const ERR_BATCH_BUSY: c_int = -4;
pub(super) const ERR_ADDRESS_OVERLAPPED: c_int = -7;
pub(super) const ERR_SOCKET: c_int = -102;
pub(super) const ERR_MALFORMED_JSON: c_int = -103;
pub(super) const ERR_METADATA: c_int = -200;
pub(super) const ERR_CONTEXT: c_int = -202;
pub(super) const ERR_NOT_IMPLEMENTED: c_int = -303;

pub(super) const INVALID_BATCH: u64 = u64::MAX;
pub(super) const NO_RDMA: &str = "RDMA transport not available in this build/host";

macro_rules! mooncake_codes {
    ($( $(#[$doc:meta])* $kind:ident = $v:literal, $name:literal, $code:ident,
        ($st:ident, $errno:ident); )*) => {
        /// Both Mooncake codes for an error kind: `(Status code, error.h code)`, from the
        /// error-kind table in `error.rs`.
        pub(crate) const fn codes(kind: ErrorKind) -> (c_int, c_int) {
            match kind {
                $(ErrorKind::$kind => ($st, $errno),)*
            }
        }
    };
}
crate::error::error_kinds!(mooncake_codes);

/// Records and logs a failure of `func`; returns its kind.
pub(super) fn record(func: &str, e: &Error) -> ErrorKind {
    // Busy is the normal answer while polling a batch to completion: not worth a warning.
    if e.kind() == ErrorKind::Busy {
        tw_log!(Level::Debug, "{func}: {e}");
    } else {
        tw_log!(Level::Warn, "{func}: {e}");
    }
    set_last_error(format!("{func}: {e}"));
    e.kind()
}

/// Failure in the positive `Status` domain.
pub(super) fn fail_status(func: &str, e: &Error) -> c_int {
    codes(record(func, e)).0
}

/// Failure in the negative `error.h` domain.
pub(super) fn fail_errno(func: &str, e: &Error) -> c_int {
    codes(record(func, e)).1
}

/// Converts a `Result<()>` into the negative domain.
pub(super) fn errno_of(func: &str, r: Result<()>) -> c_int {
    match r {
        Ok(()) => 0,
        Err(e) => fail_errno(func, &e),
    }
}

/// Converts a `Result<()>` into the positive domain.
pub(super) fn status_of(func: &str, r: Result<()>) -> c_int {
    match r {
        Ok(()) => K_OK,
        Err(e) => fail_status(func, &e),
    }
}

pub(super) fn err(kind: ErrorKind, msg: impl Into<String>) -> Error {
    Error::new(kind, msg)
}
