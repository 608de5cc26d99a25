//! Mooncake's error codes (`types.h`), used per key in results and by the Python layer. The C API
//! gives -1 and -10 other numbers (`ffi::store::codes`); a code added here must be -1, -10 or
//! below -100 (its test reads this list).

/// Success.
pub const OK: i32 = 0;
/// Internal error.
pub const INTERNAL_ERROR: i32 = -1;
/// Buffer overflow (a value does not fit where it must go).
pub const BUFFER_OVERFLOW: i32 = -10;
/// Segment not found.
pub const SEGMENT_NOT_FOUND: i32 = -101;
/// Segment already exists (mounted by another client).
pub const SEGMENT_ALREADY_EXISTS: i32 = -102;
/// No space left in any segment.
pub const NO_AVAILABLE_HANDLE: i32 = -200;
/// Invalid parameters (bad sizes, pointers, keys; buffer too small).
pub const INVALID_PARAMS: i32 = -600;
/// Invalid write (End/Revoke of a write that is not in progress).
pub const INVALID_WRITE: i32 = -601;
/// The object exists but has no complete replica yet.
pub const REPLICA_IS_NOT_READY: i32 = -703;
/// No such object.
pub const OBJECT_NOT_FOUND: i32 = -704;
/// Create-only put of an existing key.
pub const OBJECT_ALREADY_EXISTS: i32 = -705;
/// Remove refused: a read lease is active.
pub const OBJECT_HAS_LEASE: i32 = -706;
/// The read lease ran out before the transfer finished.
pub const LEASE_EXPIRED: i32 = -707;
/// A replica is busy.
pub const OBJECT_REPLICA_BUSY: i32 = -714;
/// A data transfer failed.
pub const TRANSFER_FAIL: i32 = -800;
/// Between master and client only, never returned to a caller: no space now, but the disk
/// tier is making room (a put retries for a while, then reports `NO_AVAILABLE_HANDLE`).
pub const ROOM_BEING_MADE: i32 = -299;
/// The master could not be reached or broke the protocol.
pub const RPC_FAIL: i32 = -900;
/// The master did not answer in time.
pub const RPC_TIMEOUT: i32 = -901;
/// The operation needs a mode this deployment is not in (a disk tier on a master without
/// one).
pub const UNAVAILABLE_IN_CURRENT_MODE: i32 = -1300;
/// A replica named in the request is not there (a move's source).
pub const REPLICA_NOT_FOUND: i32 = -710;
/// The replica a task worked on is gone (the object was removed or replaced meanwhile).
pub const REPLICA_IS_GONE: i32 = -712;
/// The segment exists but takes no new replicas now (its owner is suspended or failing, or
/// it is a disk tier).
pub const UNAVAILABLE_IN_CURRENT_STATUS: i32 = -1010;
/// No replica task has this id (never created, or forgotten after it finished).
pub const TASK_NOT_FOUND: i32 = -1400;
/// Too many replica tasks wait for their clients.
pub const TASK_PENDING_LIMIT_EXCEEDED: i32 = -1401;
