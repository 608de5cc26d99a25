//! [`Route`]: the one way the engine reaches a segment, whichever transport carries it.

use super::local::MemCopy;
use super::rdma::RdmaPeer;
use super::shared_buffers::SharedRoute;
use super::tcp::client::Peer;
use super::{Slice, Transport};
use std::sync::Arc;

/// How bytes reach one segment. Dispatches to the transport behind it with a `match` (no
/// virtual call per slice).
#[derive(Clone)]
pub enum Route {
    /// Memory of this process (this engine, or a peer engine living here): checked memcpy.
    Memory(Arc<MemCopy>),
    /// A peer over TCP lanes (or the verified same-host path they switch to).
    Tcp(Arc<Peer>),
    /// A peer over RDMA.
    Rdma(Arc<RdmaPeer>),
    /// A same-host peer's mapped shared buffers, and another route for the rest.
    Shared(Arc<SharedRoute>),
    /// Any other transport, through a virtual call per submit (not per slice): a new backend
    /// starts here and gets a variant of its own only if that call shows in its numbers.
    Other(Arc<dyn Transport + Send + Sync>),
}

impl Route {
    /// Whether `self` and `other` are the same transport endpoint (so their slices may be
    /// handed over together).
    pub fn same(&self, other: &Route) -> bool {
        match (self, other) {
            (Route::Memory(a), Route::Memory(b)) => Arc::ptr_eq(a, b),
            (Route::Tcp(a), Route::Tcp(b)) => Arc::ptr_eq(a, b),
            (Route::Rdma(a), Route::Rdma(b)) => Arc::ptr_eq(a, b),
            (Route::Shared(a), Route::Shared(b)) => Arc::ptr_eq(a, b),
            (Route::Other(a), Route::Other(b)) => std::ptr::addr_eq(Arc::as_ptr(a), Arc::as_ptr(b)),
            _ => false,
        }
    }

    /// Slice size on this route: RDMA has its own, every other route uses `slice_size`.
    pub fn slice_size(&self, slice_size: u64, rdma_slice_size: u64) -> u64 {
        match self {
            Route::Rdma(_) => rdma_slice_size.max(1),
            _ => slice_size.max(1),
        }
    }
}

impl Transport for Route {
    fn path_name(&self) -> &'static str {
        match self {
            Route::Memory(m) => m.path_name(),
            Route::Tcp(p) => p.path_name(),
            Route::Rdma(p) => p.path_name(),
            Route::Shared(p) => p.path_name(),
            Route::Other(p) => p.path_name(),
        }
    }

    fn submit_all(&self, slices: Vec<Slice>) {
        match self {
            Route::Memory(m) => m.submit_all(slices),
            Route::Tcp(p) => p.submit_all(slices),
            Route::Rdma(p) => p.submit_all(slices),
            Route::Shared(p) => p.submit_all(slices),
            Route::Other(p) => p.submit_all(slices),
        }
    }
}
