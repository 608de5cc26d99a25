//! `#[repr(C)]` mirrors of the structs in `transfer_engine_c.h`, with their layouts frozen
//! (x86_64 / LP64, the layouts Mooncake's header has there).

use std::ffi::{c_char, c_int, c_void};

/// One READ or WRITE, laid out as Mooncake's `struct transfer_request` (40 bytes).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct transfer_request {
    /// `OPCODE_READ` (0) or `OPCODE_WRITE` (1).
    pub opcode: c_int,
    /// Local address inside registered memory.
    pub source: *mut c_void,
    /// Target segment id (`openSegment`, or 0 for this engine).
    pub target_id: i32,
    /// Absolute address in the target process.
    pub target_offset: u64,
    /// Bytes to move.
    pub length: u64,
}

/// `struct transfer_status` (16 bytes).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct transfer_status {
    /// `STATUS_*` value.
    pub status: c_int,
    /// Bytes moved by finished slices.
    pub transferred_bytes: u64,
}

/// `struct notify_msg` (16 bytes).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct notify_msg {
    /// Notification name.
    pub name: *mut c_char,
    /// Notification body.
    pub msg: *mut c_char,
}

/// `struct buffer_entry` (16 bytes).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct buffer_entry {
    /// First byte.
    pub addr: *mut c_void,
    /// Length in bytes.
    pub length: usize,
}

/// `struct nic_load_stat` (80 bytes), one per RDMA NIC in `getNicLoadStats`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct nic_load_stat {
    /// NIC name, NUL-terminated.
    pub device_name: [c_char; 64],
    /// Bytes in flight on the NIC.
    pub inflight_bytes: u64,
    /// Smoothed bandwidth estimate.
    pub ewma_bandwidth_bps: f64,
}

/// The `rdma` arm of `segment_desc`'s union.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct segment_desc_rdma {
    /// Buffer address.
    pub addr: *mut c_void,
    /// Buffer size.
    pub size: u64,
    /// Memory location string.
    pub location: *const c_char,
}

/// The `nvmeof` arm of `segment_desc`'s union.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct segment_desc_nvmeof {
    /// Backing file.
    pub file_path: *const c_char,
    /// NVMe-oF subsystem.
    pub subsystem_name: *const c_char,
    /// Fabric protocol.
    pub proto: *const c_char,
    /// Target address.
    pub ip: *const c_char,
    /// Target port.
    pub port: u64,
}

/// The union inside `segment_desc`.
#[repr(C)]
#[derive(Clone, Copy)]
pub union segment_desc_union {
    /// RDMA buffer.
    pub rdma: segment_desc_rdma,
    /// NVMe-oF target.
    pub nvmeof: segment_desc_nvmeof,
}

/// `struct segment_desc` (48 bytes). No function takes it, as in Mooncake; kept so the layout is
/// checked.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct segment_desc {
    /// Descriptor type.
    pub kind: c_int,
    /// Type-specific part (`desc_` in C).
    pub desc: segment_desc_union,
}

const _: () = {
    use std::mem::{offset_of, size_of};
    assert!(size_of::<transfer_request>() == 40);
    assert!(offset_of!(transfer_request, source) == 8);
    assert!(offset_of!(transfer_request, target_id) == 16);
    assert!(offset_of!(transfer_request, target_offset) == 24);
    assert!(offset_of!(transfer_request, length) == 32);
    assert!(size_of::<transfer_status>() == 16);
    assert!(offset_of!(transfer_status, transferred_bytes) == 8);
    assert!(size_of::<notify_msg>() == 16);
    assert!(size_of::<buffer_entry>() == 16);
    assert!(size_of::<segment_desc>() == 48);
    assert!(offset_of!(segment_desc, desc) == 8);
    assert!(size_of::<nic_load_stat>() == 80);
    assert!(offset_of!(nic_load_stat, inflight_bytes) == 64);
    assert!(offset_of!(nic_load_stat, ewma_bandwidth_bps) == 72);
};
