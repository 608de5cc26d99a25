//! Native result codes, their names, and the thread-local last-error message.

use crate::error::{Error, ErrorKind};
use std::cell::RefCell;
use std::ffi::c_char;

/// Result of every fallible `tw_*` call: 0 = success, negative = error. Numbers are stable.
pub type tw_result = i32;

/// Success.
pub const TW_OK: tw_result = 0;
/// A parameter is out of its domain.
pub const TW_ERR_INVALID_ARGUMENT: tw_result = -1;
/// A required pointer was NULL.
pub const TW_ERR_NULL_ARGUMENT: tw_result = -2;
/// More requests than the batch holds.
pub const TW_ERR_TOO_MANY_REQUESTS: tw_result = -3;
/// An address range is not inside one registered region.
pub const TW_ERR_ADDRESS_NOT_REGISTERED: tw_result = -4;
/// A registration partially overlaps an existing one.
pub const TW_ERR_ADDRESS_OVERLAPPED: tw_result = -5;
/// A batch or scatter id that is unknown, stale or freed.
pub const TW_ERR_INVALID_ID: tw_result = -6;
/// A segment that is not open or cannot be reached.
pub const TW_ERR_UNKNOWN_SEGMENT: tw_result = -7;
/// Work is still in flight.
pub const TW_ERR_BUSY: tw_result = -8;
/// A bounded wait ran out (the work continues).
pub const TW_ERR_TIMEOUT: tw_result = -9;
/// The peer refused the address range.
pub const TW_ERR_REJECTED: tw_result = -10;
/// Connect, reset, or I/O timeout on a socket.
pub const TW_ERR_SOCKET: tw_result = -11;
/// The peer broke the protocol.
pub const TW_ERR_PROTOCOL: tw_result = -12;
/// A descriptor could not be fetched, decoded or published.
pub const TW_ERR_METADATA: tw_result = -13;
/// Not available in this build or on this host.
pub const TW_ERR_UNSUPPORTED: tw_result = -14;
/// An output buffer is too small.
pub const TW_ERR_BUFFER_TOO_SMALL: tw_result = -15;
/// The engine is shutting down.
pub const TW_ERR_SHUTDOWN: tw_result = -16;
/// Internal failure.
pub const TW_ERR_INTERNAL: tw_result = -17;
/// A panic was caught at the API boundary (a bug; the engine stays usable).
pub const TW_ERR_PANIC: tw_result = -18;

macro_rules! native_codes {
    ($( $(#[$doc:meta])* $kind:ident = $v:literal, $name:literal, $code:ident,
        ($st:ident, $errno:ident); )*) => {
        // The constants above are written out for cbindgen; each must be minus its kind's value.
        const _: () = { $( assert!($code == -($v as tw_result)); )* };

        /// Native code of an error kind.
        pub fn code_of(kind: ErrorKind) -> tw_result {
            match kind {
                $(ErrorKind::$kind => $code,)*
            }
        }

        /// NUL-terminated name of an error code (`"TW_ERR_TIMEOUT\0"`), `None` when unknown.
        pub(crate) fn error_code_name(code: tw_result) -> Option<&'static str> {
            match code {
                $(c if c == $code => Some(concat!(stringify!($code), "\0")),)*
                _ => None,
            }
        }
    };
}
crate::error::error_kinds!(native_codes);

thread_local! {
    static LAST_ERROR: RefCell<String> = const { RefCell::new(String::new()) };
}

/// Stores `e` as this thread's last error and returns its code.
pub(crate) fn fail(e: &Error) -> tw_result {
    set_last_error(e.to_string());
    code_of(e.kind())
}

/// Stores a message as this thread's last error.
pub(crate) fn set_last_error(msg: String) {
    LAST_ERROR.with(|l| *l.borrow_mut() = msg);
}

/// Records a caught panic.
pub(crate) fn record_panic(payload: &(dyn std::any::Any + Send)) {
    let what = payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".into());
    tw_log!(
        crate::log::Level::Error,
        "panic caught at the C API boundary: {what}"
    );
    set_last_error(format!("internal panic: {what}"));
}

/// Copies the calling thread's last error message (NUL-terminated, truncated to fit) into
/// `buf[..len]` and returns the full message length plus one (the size needed). `buf` may be
/// NULL when `len` is 0, to query the size. The message is set by the last failing `tw_*` call
/// on this thread and is empty before any failure. Thread-safe (per-thread state).
#[unsafe(no_mangle)]
#[allow(
    clippy::not_unsafe_ptr_arg_deref,
    reason = "C entry point; the buffer contract is documented above"
)]
pub extern "C" fn tw_last_error_message(buf: *mut c_char, len: usize) -> usize {
    super::ffi_boundary!(0, {
        LAST_ERROR.with(|l| {
            let msg = l.borrow();
            // SAFETY: `buf` is NULL or writable for `len` bytes (API contract).
            unsafe { super::write_c_string_truncated(&msg, buf, len) };
            msg.len() + 1
        })
    })
}
