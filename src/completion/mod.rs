//! Completion of transfers, below every transport: a [`Batch`] of task slots, the [`SliceDone`]
//! token a transport fires once per slice, and the [`Latch`] that wakes waiters. Transports
//! depend on this module; the engine creates batches and reads their state.

mod batch;
mod latch;

pub use batch::{Batch, PendingNotify, SliceDone, TaskState, TaskStatus};
pub use latch::Latch;
