//! The engine's transports: the one list of [`Backend`]s (order = preference when routing a
//! segment), and walking it to start, publish, register, route and stop. Adding a transport is a
//! folder under `transport/`, its backend in `transport/backends/` and one line in [`list`]
//! (see `src/README.md`); nothing else in the engine names a transport.

use super::config::Config;
use super::{Engine, Inner};
use crate::error::{Error, ErrorKind, Result, fail};
use crate::memory::Registry;
use crate::metadata::SegmentDesc;
use crate::sync::LockClean;
use crate::transport::backends::{
    DataServerConfig, RdmaBackend, SameHostBackend, SharedBuffersBackend, TcpBackend,
};
use crate::transport::local::MemCopy;
use crate::transport::rdma;
use crate::transport::tcp::client::{self, ClientConfig, TcpClient};
use crate::transport::tcp::server::DataLimits;
use crate::transport::{Backend, PeerSegment, Route};
use std::net::TcpListener;
use std::sync::Arc;

/// An engine's transports, built from its configuration: the list of backends, the registry of
/// its memory (stamped with the same-host identity) and the route to its own segment.
pub(super) struct Transports {
    pub backends: Vec<Box<dyn Backend>>,
    pub registry: Arc<Registry>,
    pub own_route: Route,
}

/// Every backend of an engine named `name`, whose data server serves on `data_listener`,
/// advertised at `host`. A segment is routed by the first backend that does not decline, then
/// offered to every backend to layer over. This is the one place that names the transports.
pub(super) fn list(
    cfg: &Config,
    name: &str,
    host: &str,
    data_listener: TcpListener,
) -> Result<Transports> {
    let samehost = SameHostBackend::new(cfg.same_host, cfg.auth_key.clone());
    let registry = Arc::new(Registry::with_token(samehost.token()));
    let data = DataServerConfig {
        listener: data_listener,
        host: host.to_string(),
        limits: DataLimits {
            io_timeout: cfg.io_timeout,
            idle_timeout: cfg.data_idle_timeout,
            max_connections: cfg.max_data_connections,
            congestion: cfg.tcp_congestion,
        },
        auth_key: cfg.auth_key.clone(),
    };
    let backends: Vec<Box<dyn Backend>> = vec![
        Box::new(RdmaBackend::new(cfg.rdma, rdma_options(cfg), name)),
        Box::new(samehost),
        Box::new(TcpBackend::new(
            tcp_client(cfg),
            cfg.tcp_proto,
            cfg.same_host,
            data,
        )?),
        Box::new(SharedBuffersBackend::new(
            cfg.connect_timeout,
            cfg.auth_key.clone(),
        )),
    ];
    Ok(Transports {
        backends,
        own_route: Route::Memory(Arc::new(MemCopy::own(registry.clone()))),
        registry,
    })
}

fn rdma_options(cfg: &Config) -> rdma::Options {
    rdma::Options {
        devices: cfg.rdma_devices.clone(),
        qp_per_ep: cfg.rdma_qp_per_ep,
        max_wr: cfg.rdma_max_wr,
        retries: cfg.rdma_retries,
        connect_timeout: cfg.connect_timeout,
        handshake_max_len: cfg.handshake_max_len,
        max_passive: cfg.rdma_max_passive_endpoints,
        auth_key: cfg.auth_key.clone(),
    }
}

fn tcp_client(cfg: &Config) -> TcpClient {
    TcpClient::new(ClientConfig {
        lanes: cfg.tcp_lanes,
        spread: cfg.tcp_spread.unwrap_or_else(client::spread_by_default),
        congestion: cfg.tcp_congestion,
        connect_timeout: cfg.connect_timeout,
        io_timeout: cfg.io_timeout,
        transfer_timeout: cfg.transfer_timeout,
        auth_key: cfg.auth_key.clone(),
        ..ClientConfig::default()
    })
}

impl Engine {
    /// Installs the transport `name` now (Mooncake's `installTransport`) and republishes the
    /// descriptor. `Unsupported` for an unknown name, or with the reason when the transport
    /// cannot run here. Idempotent.
    pub fn install_transport(&self, name: &str) -> Result<()> {
        let inner = &self.inner;
        let _serial = inner.open_lock.lock_clean();
        if inner.backend(name)?.install(&inner.registry)? {
            inner.publish_logged();
        }
        Ok(())
    }

    /// Installs the RDMA transport now: opens the devices, registers every region already
    /// registered, and republishes the descriptor. `Unsupported` with the reason when no device
    /// is usable. Idempotent.
    pub fn install_rdma(&self) -> Result<()> {
        self.install_transport("rdma")
    }

    /// RDMA devices in use, or why RDMA is not in use.
    pub fn rdma_status(&self) -> std::result::Result<Vec<String>, String> {
        self.inner
            .backend("rdma")
            .map_err(|e| e.message().to_string())?
            .status()
    }
}

impl Inner {
    fn backend(&self, name: &str) -> Result<&dyn Backend> {
        match self.backends.iter().find(|b| b.name() == name) {
            Some(b) => Ok(b.as_ref()),
            None => fail(
                ErrorKind::Unsupported,
                format!("no transport {name:?} in this engine"),
            ),
        }
    }

    /// Starts every backend, in order.
    pub(super) fn start_backends(&self) -> Result<()> {
        self.backends
            .iter()
            .try_for_each(|b| b.start(&self.registry))
    }

    /// Each backend adds its keys to the descriptor.
    pub(super) fn publish_backends(&self, d: &mut SegmentDesc) {
        for b in &self.backends {
            b.publish(&self.registry, d);
        }
    }

    /// Registers new regions with every backend; on failure the backends that took them drop
    /// them again and the engine registration of those regions is undone.
    pub(super) fn register_backends(&self, ranges: &[(u64, u64)], remote: bool) -> Result<()> {
        register_all(&self.backends, &self.registry, ranges, remote)
    }

    /// Drops the region at `base` from every backend.
    pub(super) fn unregister_backends(&self, base: u64) {
        for b in &self.backends {
            b.unregister(base);
        }
    }

    /// The route the first backend that does not decline gives, with every backend's layer
    /// over it; `None` when all decline (a protocol this engine cannot speak).
    pub(super) fn connect(&self, peer: &PeerSegment<'_>) -> Result<Option<Route>> {
        connect_first(&self.backends, peer)
    }

    /// The answer of the backend that takes a peer's connection handshake, if any.
    pub(super) fn handshake(&self, body: &[u8]) -> Option<String> {
        self.backends.iter().find_map(|b| b.handshake(body))
    }

    /// A segment was closed.
    pub(super) fn segment_closed(&self) {
        for b in &self.backends {
            b.segment_closed();
        }
    }

    /// Stops every backend, in order.
    pub(super) fn shutdown_backends(&self) {
        for b in &self.backends {
            b.shutdown();
        }
    }
}

/// [`Inner::register_backends`] over any list.
fn register_all(
    backends: &[Box<dyn Backend>],
    registry: &Registry,
    ranges: &[(u64, u64)],
    remote: bool,
) -> Result<()> {
    for (i, b) in backends.iter().enumerate() {
        if let Err(e) = b.register(ranges, remote) {
            for done in &backends[..i] {
                for &(base, _) in ranges {
                    done.unregister(base);
                }
            }
            for &(base, _) in ranges {
                let _ = registry.unregister(base);
            }
            return Err(Error::new(ErrorKind::Internal, e));
        }
    }
    Ok(())
}

/// [`Inner::connect`] over any list.
fn connect_first(backends: &[Box<dyn Backend>], peer: &PeerSegment<'_>) -> Result<Option<Route>> {
    for b in backends {
        if let Some(route) = b.connect(peer)? {
            return Ok(Some(
                backends
                    .iter()
                    .fold(route, |r, layer| layer.upgrade(peer, r)),
            ));
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests;
