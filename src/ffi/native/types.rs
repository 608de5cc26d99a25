//! The C structs of the native API (layouts checked at compile time).

use super::*;

/// One READ or WRITE request (32 bytes).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct tw_transfer_request {
    /// `TW_OPCODE_READ` or `TW_OPCODE_WRITE`.
    pub opcode: i32,
    /// Target segment id (from `tw_segment_open`, or `TW_LOCAL_SEGMENT`).
    pub segment: i32,
    /// Local address inside registered memory.
    pub local_addr: *mut c_void,
    /// Absolute address in the target's registered memory.
    pub remote_addr: u64,
    /// Bytes to move; 0 completes at once.
    pub length: u64,
}

/// Status of one task (16 bytes).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct tw_transfer_status {
    /// `TW_TASK_WAITING`, `TW_TASK_COMPLETED` or `TW_TASK_FAILED`.
    pub state: i32,
    /// `TW_OK`, or why the task failed.
    pub result: tw_result,
    /// Bytes moved so far by finished slices.
    pub transferred_bytes: u64,
}

/// A memory range.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct tw_buffer {
    /// First byte.
    pub addr: *mut c_void,
    /// Length in bytes.
    pub length: usize,
}

/// One range of a scatter operation: `fragment_count` fragments, fragment i moving
/// `lengths[i]` bytes between `local_base + local_offsets[i]` and
/// `remote_base + remote_offsets[i]` of segment `segment`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct tw_scatter_range {
    /// `TW_OPCODE_READ` or `TW_OPCODE_WRITE`.
    pub opcode: i32,
    /// Remote segment id.
    pub segment: i32,
    /// Absolute remote address the remote offsets start from.
    pub remote_base: u64,
    /// Bytes addressable from `remote_base`.
    pub remote_size: u64,
    /// Local address the local offsets start from.
    pub local_base: *mut c_void,
    /// Bytes addressable from `local_base`.
    pub local_capacity: usize,
    /// `fragment_count` local offsets.
    pub local_offsets: *const usize,
    /// `fragment_count` remote offsets.
    pub remote_offsets: *const usize,
    /// `fragment_count` lengths.
    pub lengths: *const usize,
    /// Number of fragments.
    pub fragment_count: usize,
}

/// Called exactly once per scatter fragment, on the thread in `tw_scatter_wait` or
/// `tw_scatter_free`, with the fragment's index (ranges flattened in order) and its result.
pub type tw_fragment_callback =
    Option<extern "C" fn(user_data: *mut c_void, fragment: usize, result: tw_result)>;

/// A received notification; strings are owned by the array from `tw_notify_take`.
#[repr(C)]
#[derive(Debug)]
pub struct tw_notification {
    /// Sender-chosen name.
    pub name: *mut c_char,
    /// Message.
    pub msg: *mut c_char,
}

const _: () = assert!(std::mem::size_of::<tw_transfer_request>() == 32);
const _: () = assert!(std::mem::size_of::<tw_transfer_status>() == 16);
const _: () = assert!(std::mem::size_of::<tw_scatter_range>() == 72);
