//! [`Backend`]: a transport as a whole, as the engine sees it. The engine holds an ordered list of
//! backends (`engine/backends/`) and never names one: it asks each to start, to add its keys
//! to the published descriptor, to keep memory registrations in step, to route (or decline) a
//! peer segment, and to stop. See `src/README.md` for adding one.

use super::Route;
use crate::error::Result;
use crate::memory::Registry;
use crate::metadata::SegmentDesc;
use std::sync::Arc;

/// A peer segment being opened: what the engine knows when it asks for a route.
pub struct PeerSegment<'a> {
    /// The name it was opened by.
    pub name: &'a str,
    /// Its RPC (handshake) address.
    pub rpc: &'a (String, u16),
    /// Its descriptor, fetched from the peer or the metadata server.
    pub desc: &'a SegmentDesc,
}

/// One transport backend of an engine (NIXL's backend engine, Mooncake's `Transport`): it owns
/// its connections, its memory registrations and its part of the descriptor. Every method has
/// a do-nothing default except [`name`](Self::name) and [`connect`](Self::connect).
pub trait Backend: Send + Sync {
    /// Name of the transport (`"rdma"`, `"tcp"`, ...), as `install_transport` takes it.
    fn name(&self) -> &'static str;

    /// At engine start-up, after the listeners are up and before the first publish.
    fn start(&self, _registry: &Arc<Registry>) -> Result<()> {
        Ok(())
    }

    /// Installs the transport on demand (Mooncake's `installTransport`). `Ok(true)` when it was
    /// installed now (the engine then republishes), `Ok(false)` when it already was.
    fn install(&self, _registry: &Registry) -> Result<bool> {
        Ok(false)
    }

    /// What the transport uses (devices, for RDMA), or why it is not in use.
    fn status(&self) -> std::result::Result<Vec<String>, String> {
        Ok(Vec::new())
    }

    /// Adds what peers need to reach this backend to the descriptor the engine publishes.
    fn publish(&self, _registry: &Registry, _desc: &mut SegmentDesc) {}

    /// Registers new ranges, all or none (on failure the backend undoes its own part).
    fn register(&self, _ranges: &[(u64, u64)], _remote: bool) -> std::result::Result<(), String> {
        Ok(())
    }

    /// Drops the registration of the region starting at `base`.
    fn unregister(&self, _base: u64) {}

    /// The route to a peer segment, or `Ok(None)` to decline (the next backend is asked). An
    /// error fails the open.
    fn connect(&self, peer: &PeerSegment<'_>) -> Result<Option<Route>>;

    /// Offered the route another backend chose: returns it, or a route layered over it (shared
    /// buffers wrap a same-host TCP route).
    fn upgrade(&self, _peer: &PeerSegment<'_>, route: Route) -> Route {
        route
    }

    /// Answers a peer's connection handshake (RPC `Connection`), or `None` when not its own.
    fn handshake(&self, _body: &[u8]) -> Option<String> {
        None
    }

    /// A segment was closed: connections nothing uses any more may be released.
    fn segment_closed(&self) {}

    /// The engine is going down: stop threads and release connections.
    fn shutdown(&self) {}
}
