//! One internal error type. The FFI layer maps [`ErrorKind`] to the native `tw_result` codes and
//! to Mooncake's two code domains; the core never knows which C API called it.

use std::fmt;

/// What went wrong, without the detail. Stable: each kind has a fixed native code in `ffi`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum ErrorKind {
    /// A parameter is out of its domain (zero length, bad opcode, malformed name, ...).
    InvalidArgument = 1,
    /// A required pointer was NULL (raised by the FFI layer only).
    NullArgument,
    /// More requests than the batch was allocated for.
    TooManyRequests,
    /// A local or remote address range is not inside one registered region.
    AddressNotRegistered,
    /// A registration partially overlaps an existing region.
    AddressOverlapped,
    /// A batch or scatter id that is unknown, stale or already freed.
    InvalidId,
    /// A segment id that was never opened, or a peer that cannot be reached.
    UnknownSegment,
    /// The object still has work in flight.
    Busy,
    /// A bounded wait ran out before completion.
    Timeout,
    /// The peer refused the address range (not registered or not remote-accessible there).
    Rejected,
    /// A socket error: connect, reset, unexpected end of stream, I/O timeout.
    Socket,
    /// The peer sent bytes that break the protocol.
    Protocol,
    /// A descriptor could not be fetched, decoded or published.
    Metadata,
    /// The feature or transport is not available in this build or on this host.
    Unsupported,
    /// An output buffer is too small.
    BufferTooSmall,
    /// The engine is shutting down.
    Shutdown,
    /// A bug or resource failure inside the engine (thread spawn, panic caught).
    Internal,
}

impl ErrorKind {
    /// Every kind, for tables and tests.
    pub const ALL: [ErrorKind; 17] = [
        ErrorKind::InvalidArgument,
        ErrorKind::NullArgument,
        ErrorKind::TooManyRequests,
        ErrorKind::AddressNotRegistered,
        ErrorKind::AddressOverlapped,
        ErrorKind::InvalidId,
        ErrorKind::UnknownSegment,
        ErrorKind::Busy,
        ErrorKind::Timeout,
        ErrorKind::Rejected,
        ErrorKind::Socket,
        ErrorKind::Protocol,
        ErrorKind::Metadata,
        ErrorKind::Unsupported,
        ErrorKind::BufferTooSmall,
        ErrorKind::Shutdown,
        ErrorKind::Internal,
    ];

    /// Inverse of `kind as u8` (used to keep a task's failure in an atomic).
    pub fn from_u8(v: u8) -> Option<ErrorKind> {
        ErrorKind::ALL.iter().copied().find(|k| *k as u8 == v)
    }

    /// Short lowercase name.
    pub fn name(self) -> &'static str {
        match self {
            ErrorKind::InvalidArgument => "invalid argument",
            ErrorKind::NullArgument => "null argument",
            ErrorKind::TooManyRequests => "too many requests",
            ErrorKind::AddressNotRegistered => "address not registered",
            ErrorKind::AddressOverlapped => "address overlapped",
            ErrorKind::InvalidId => "invalid id",
            ErrorKind::UnknownSegment => "unknown segment",
            ErrorKind::Busy => "busy",
            ErrorKind::Timeout => "timeout",
            ErrorKind::Rejected => "rejected by peer",
            ErrorKind::Socket => "socket error",
            ErrorKind::Protocol => "protocol error",
            ErrorKind::Metadata => "metadata error",
            ErrorKind::Unsupported => "unsupported",
            ErrorKind::BufferTooSmall => "buffer too small",
            ErrorKind::Shutdown => "engine shut down",
            ErrorKind::Internal => "internal error",
        }
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
