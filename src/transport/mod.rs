//! Transports move slices. A slice is one contiguous range on both sides; finishing it updates
//! its task through [`SliceDone`](crate::completion::SliceDone).
//!
//! Each transport is a [`Backend`] in a folder of its own (`rdma/`, `samehost/`, `tcp/`,
//! `shared_buffers/`): it publishes its keys, keeps registrations, and routes a peer to a
//! [`Route`], the one enum the engine dispatches slices through. `local.rs` is the memcpy used
//! for the engine's own segment and for peer engines of this process. `chan.rs` (the lanes'
//! channel) and `slots.rs` (a connection-count semaphore) serve the transports.

mod backend;
pub mod backends;
pub mod chan;
pub mod local;
pub mod rdma;
mod route;
pub mod samehost;
pub mod shared_buffers;
pub mod slots;
pub mod tcp;

use crate::completion::SliceDone;

pub use backend::{Backend, PeerSegment};
pub use route::Route;

/// What every transport does: take slices and fire each one's [`SliceDone`] exactly once
/// (success with the bytes moved, or the failure). Implemented by the TCP peer (which switches
/// itself to the verified same-host path), the in-process memcpy and the RDMA peer; the engine
/// reaches all of them through [`Route`].
pub trait Transport {
    /// Short name of the path in use: `"local"`, `"in-process"`, `"tcp"`, `"same-host"` or
    /// `"rdma"`.
    fn path_name(&self) -> &'static str;

    /// Moves `slices` (in any order, possibly on other threads).
    fn submit_all(&self, slices: Vec<Slice>);
}

/// Transfer direction, numbered as Mooncake's `OPCODE_*`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Opcode {
    /// Remote → local.
    Read = 0,
    /// Local → remote.
    Write = 1,
}

impl Opcode {
    /// From Mooncake's integer opcode.
    pub fn from_i32(v: i32) -> Option<Opcode> {
        match v {
            0 => Some(Opcode::Read),
            1 => Some(Opcode::Write),
            _ => None,
        }
    }
}

/// One unit of work for a transport.
pub struct Slice {
    /// Direction.
    pub op: Opcode,
    /// Local address (registered).
    pub local: u64,
    /// Remote absolute address.
    pub remote: u64,
    /// Bytes (> 0).
    pub len: u64,
    /// CUDA device of the local range (`None` = host memory): decided at registration, looked up
    /// at submit, so transports stage device memory without asking the driver per request.
    pub gpu: Option<u32>,
    /// Times this slice was re-sent after a connection loss it did not cause.
    pub retries: u8,
    /// The slice fails with `Timeout` if it has not ended by then (`transfer_timeout_ms`).
    pub deadline: std::time::Instant,
    /// Never use the same-host kernel copy for it (the peer said the range is GPU memory).
    pub no_vm: bool,
    /// Completion.
    pub done: SliceDone,
}
