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

/// Both Mooncake codes for an error kind: `(Status code, error.h code)`.
///
/// An unknown segment id is `kInvalidArgument` for a submit (Mooncake's "no cached descriptor")
/// and `ERR_METADATA` for `genNotifyInEngine`; a peer refusing an address range is "address not
/// registered"; shutdown and internal failures use Mooncake's context codes.
pub(super) const fn codes(kind: ErrorKind) -> (c_int, c_int) {
    match kind {
        ErrorKind::InvalidArgument | ErrorKind::NullArgument | ErrorKind::BufferTooSmall => {
            (K_INVALID_ARGUMENT, ERR_INVALID_ARGUMENT)
        }
        ErrorKind::InvalidId => (K_INVALID_ARGUMENT, ERR_INVALID_ARGUMENT),
        ErrorKind::UnknownSegment => (K_INVALID_ARGUMENT, ERR_METADATA),
        ErrorKind::TooManyRequests => (K_TOO_MANY_REQUESTS, ERR_TOO_MANY_REQUESTS),
        ErrorKind::AddressNotRegistered | ErrorKind::Rejected => {
            (K_ADDRESS_NOT_REGISTERED, ERR_ADDRESS_NOT_REGISTERED)
        }
        ErrorKind::AddressOverlapped => (K_ADDRESS_OVERLAPPED, ERR_ADDRESS_OVERLAPPED),
        ErrorKind::Busy => (K_BATCH_BUSY, ERR_BATCH_BUSY),
        ErrorKind::Timeout | ErrorKind::Socket => (K_SOCKET, ERR_SOCKET),
        ErrorKind::Protocol => (K_MALFORMED_JSON, ERR_MALFORMED_JSON),
        ErrorKind::Metadata => (K_METADATA, ERR_METADATA),
        ErrorKind::Unsupported => (K_NOT_SUPPORTED_TRANSPORT, ERR_NOT_IMPLEMENTED),
        ErrorKind::Shutdown | ErrorKind::Internal => (K_CONTEXT, ERR_CONTEXT),
    }
}

/// Records and logs a failure of `func`; returns its kind.
pub(super) fn record(func: &str, e: &Error) -> ErrorKind {
    // Busy is the normal answer while polling a batch to completion: not worth a warning.
    if e.kind() == ErrorKind::Busy {
        crate::tw_log!(Level::Debug, "{func}: {e}");
    } else {
        crate::tw_log!(Level::Warn, "{func}: {e}");
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
