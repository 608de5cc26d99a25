//! One internal error type. The FFI layer maps [`ErrorKind`] to the native `tw_result` codes and
//! to Mooncake's two code domains; the core never knows which C API called it.

use std::fmt;

/// The one table of error kinds. Each row: the kind and its `u8` value, its short name, its
/// native `tw_result` constant (in `ffi/status.rs`, declared there for cbindgen and checked
/// against this table at compile time) and its Mooncake codes `(Status, error.h)` (constants in
/// `ffi/mooncake/codes.rs`). Invoked with the name of a macro that receives every row: the enum
/// below, the native codes and names, and the Mooncake mapping are all generated from it.
///
/// An unknown segment id is `kInvalidArgument` for a Mooncake submit ("no cached descriptor")
/// and `ERR_METADATA` for `genNotifyInEngine`; a peer refusing an address range is "address not
/// registered"; shutdown and internal failures use Mooncake's context codes.
macro_rules! error_kinds {
    ($then:ident) => {
        $then! {
            /// A parameter is out of its domain (zero length, bad opcode, malformed name, ...).
            InvalidArgument = 1, "invalid argument", TW_ERR_INVALID_ARGUMENT, (K_INVALID_ARGUMENT, ERR_INVALID_ARGUMENT);
            /// A required pointer was NULL (raised by the FFI layer only).
            NullArgument = 2, "null argument", TW_ERR_NULL_ARGUMENT, (K_INVALID_ARGUMENT, ERR_INVALID_ARGUMENT);
            /// More requests than the batch was allocated for.
            TooManyRequests = 3, "too many requests", TW_ERR_TOO_MANY_REQUESTS, (K_TOO_MANY_REQUESTS, ERR_TOO_MANY_REQUESTS);
            /// A local or remote address range is not inside one registered region.
            AddressNotRegistered = 4, "address not registered", TW_ERR_ADDRESS_NOT_REGISTERED, (K_ADDRESS_NOT_REGISTERED, ERR_ADDRESS_NOT_REGISTERED);
            /// A registration partially overlaps an existing region.
            AddressOverlapped = 5, "address overlapped", TW_ERR_ADDRESS_OVERLAPPED, (K_ADDRESS_OVERLAPPED, ERR_ADDRESS_OVERLAPPED);
            /// A batch or scatter id that is unknown, stale or already freed.
            InvalidId = 6, "invalid id", TW_ERR_INVALID_ID, (K_INVALID_ARGUMENT, ERR_INVALID_ARGUMENT);
            /// A segment id that was never opened, or a peer that cannot be reached.
            UnknownSegment = 7, "unknown segment", TW_ERR_UNKNOWN_SEGMENT, (K_INVALID_ARGUMENT, ERR_METADATA);
            /// The object still has work in flight.
            Busy = 8, "busy", TW_ERR_BUSY, (K_BATCH_BUSY, ERR_BATCH_BUSY);
            /// A bounded wait ran out before completion.
            Timeout = 9, "timeout", TW_ERR_TIMEOUT, (K_SOCKET, ERR_SOCKET);
            /// The peer refused the address range (not registered or not remote-accessible there).
            Rejected = 10, "rejected by peer", TW_ERR_REJECTED, (K_ADDRESS_NOT_REGISTERED, ERR_ADDRESS_NOT_REGISTERED);
            /// A socket error: connect, reset, unexpected end of stream, I/O timeout.
            Socket = 11, "socket error", TW_ERR_SOCKET, (K_SOCKET, ERR_SOCKET);
            /// The peer sent bytes that break the protocol.
            Protocol = 12, "protocol error", TW_ERR_PROTOCOL, (K_MALFORMED_JSON, ERR_MALFORMED_JSON);
            /// A descriptor could not be fetched, decoded or published.
            Metadata = 13, "metadata error", TW_ERR_METADATA, (K_METADATA, ERR_METADATA);
            /// The feature or transport is not available in this build or on this host.
            Unsupported = 14, "unsupported", TW_ERR_UNSUPPORTED, (K_NOT_SUPPORTED_TRANSPORT, ERR_NOT_IMPLEMENTED);
            /// An output buffer is too small.
            BufferTooSmall = 15, "buffer too small", TW_ERR_BUFFER_TOO_SMALL, (K_INVALID_ARGUMENT, ERR_INVALID_ARGUMENT);
            /// The engine is shutting down.
            Shutdown = 16, "engine shut down", TW_ERR_SHUTDOWN, (K_CONTEXT, ERR_CONTEXT);
            /// A bug or resource failure inside the engine (thread spawn, panic caught).
            Internal = 17, "internal error", TW_ERR_INTERNAL, (K_CONTEXT, ERR_CONTEXT);
        }
    };
}
pub(crate) use error_kinds;

macro_rules! define_error_kind {
    ($( $(#[$doc:meta])* $kind:ident = $v:literal, $name:literal, $code:ident,
        ($st:ident, $errno:ident); )*) => {
        /// What went wrong, without the detail. Stable: each kind has a fixed native code in
        /// `ffi`.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        #[repr(u8)]
        pub enum ErrorKind {
            $( $(#[$doc])* $kind = $v, )*
        }

        impl ErrorKind {
            /// Every kind, for tables and tests.
            pub const ALL: [ErrorKind; [$($v),*].len()] = [$(ErrorKind::$kind),*];

            /// Short lowercase name.
            pub fn name(self) -> &'static str {
                match self {
                    $(ErrorKind::$kind => $name,)*
                }
            }
        }
    };
}
error_kinds!(define_error_kind);

impl ErrorKind {
    /// Inverse of `kind as u8` (used to keep a task's failure in an atomic).
    pub fn from_u8(v: u8) -> Option<ErrorKind> {
        ErrorKind::ALL.iter().copied().find(|k| *k as u8 == v)
    }
}

/// An error kind plus a human-readable detail.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    kind: ErrorKind,
    message: String,
}

impl Error {
    /// A new error.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Error {
        Error {
            kind,
            message: message.into(),
        }
    }

    /// The kind.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// The detail.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.kind.name(), self.message)
    }
}

impl std::error::Error for Error {}

impl From<ErrorKind> for Error {
    fn from(kind: ErrorKind) -> Error {
        Error::new(kind, kind.name())
    }
}

/// Crate-wide result.
pub type Result<T> = std::result::Result<T, Error>;

/// Shorthand: `Err(Error::new(kind, msg))`.
pub(crate) fn fail<T>(kind: ErrorKind, message: impl Into<String>) -> Result<T> {
    Err(Error::new(kind, message))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_round_trip_through_u8() {
        for k in ErrorKind::ALL {
            assert_eq!(ErrorKind::from_u8(k as u8), Some(k));
        }
        assert_eq!(ErrorKind::from_u8(0), None);
        assert_eq!(ErrorKind::from_u8(200), None);
    }
}
