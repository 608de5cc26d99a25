//! The TCP backend: owns the data server (started with the engine on the listener it is given,
//! stopped with it), publishes its address and framing, and routes every peer that speaks TCP
//! to its lanes (which switch to the verified same-host path when the same-host backend vouches
//! for the peer's pid).

use crate::auth::AuthKey;
use crate::error::{Error, ErrorKind, Result, fail};
use crate::memory::Registry;
use crate::metadata::SegmentDesc;
use crate::sync::LockClean;
use crate::transport::tcp::client::{PeerAddr, TcpClient};
use crate::transport::tcp::server::{DataLimits, TcpServer};
use crate::transport::{Backend, PeerSegment, Route, samehost};
use std::net::TcpListener;
use std::sync::Arc;

/// The TCP transport of one engine: its lanes to peers and its data server.
pub struct TcpBackend {
    client: TcpClient,
    /// Highest framing this engine speaks (`tcp_proto`).
    proto: u32,
    /// The `same_host` option.
    same_host: bool,
    /// Advertised data host and port.
    data: (String, u16),
    /// The data server: its listener and rules until [`Backend::start`], then the server until
    /// [`Backend::shutdown`].
    server: std::sync::Mutex<DataServer>,
}

/// Where the data server is in its life.
enum DataServer {
    Bound(TcpListener, DataLimits, AuthKey),
    /// Held for its drop, which stops the server.
    Running(
        #[allow(
            dead_code,
            reason = "held until shutdown; dropping it stops the server"
        )]
        TcpServer,
    ),
    Stopped,
}

/// What the TCP backend needs to serve peers: the bound data listener, the host it is advertised
/// at, and the server's rules.
pub struct DataServerConfig {
    /// The listener, bound by the engine (its port is in the engine's name and descriptor).
    pub listener: TcpListener,
    /// Host advertised to peers.
    pub host: String,
    /// Deadlines and the connection cap.
    pub limits: DataLimits,
    /// Key every accepted connection must prove (off = Mooncake's plain protocol).
    pub auth_key: AuthKey,
}

impl TcpBackend {
    /// A backend over `client`, serving peers on `server`'s listener once started.
    pub fn new(
        client: TcpClient,
        proto: u32,
        same_host: bool,
        server: DataServerConfig,
    ) -> Result<TcpBackend> {
        let port = server
            .listener
            .local_addr()
            .map_err(|e| Error::new(ErrorKind::Socket, format!("data listener: {e}")))?
            .port();
        Ok(TcpBackend {
            client,
            proto,
            same_host,
            data: (server.host, port),
            server: std::sync::Mutex::new(DataServer::Bound(
                server.listener,
                server.limits,
                server.auth_key,
            )),
        })
    }
}

impl Backend for TcpBackend {
    fn name(&self) -> &'static str {
        "tcp"
    }

    /// Starts the data server on the listener the engine bound.
    fn start(&self, registry: &Arc<Registry>) -> Result<()> {
        let mut state = self.server.lock_clean();
        // A second start finds the server running and keeps it; a failed one leaves it stopped.
        *state = match std::mem::replace(&mut *state, DataServer::Stopped) {
            DataServer::Bound(listener, limits, key) => DataServer::Running(
                TcpServer::start(listener, registry.clone(), limits, key).map_err(|e| {
                    Error::new(ErrorKind::Internal, format!("starting tcp server: {e}"))
                })?,
            ),
            other => other,
        };
        Ok(())
    }

    fn publish(&self, _registry: &Registry, d: &mut SegmentDesc) {
        d.tcp_data_host = self.data.0.clone();
        d.tcp_data_port = self.data.1;
        d.tcp_proto_version = self.proto;
    }

    /// Lanes to the peer's data server; declines a peer that does not speak TCP.
    fn connect(&self, peer: &PeerSegment<'_>) -> Result<Option<Route>> {
        let desc = peer.desc;
        if !desc.tcp_reachable() {
            return Ok(None);
        }
        let host = if desc.tcp_data_host.is_empty() {
            peer.rpc.0.clone()
        } else {
            desc.tcp_data_host.clone()
        };
        let v2 = desc.tcp_proto_version >= 2 && self.proto >= 2;
        let addr = PeerAddr {
            host,
            port: desc.tcp_data_port,
            v2,
            vm_pid: if v2 {
                samehost::verified_pid(desc, self.same_host)
            } else {
                0
            },
        };
        if addr.port == 0 {
            return fail(
                ErrorKind::Metadata,
                format!("segment {:?} publishes no tcp_data_port", peer.name),
            );
        }
        let p = self
            .client
            .peer(&addr)
            .map_err(|e| Error::new(ErrorKind::Internal, format!("starting lanes: {e}")))?;
        Ok(Some(Route::Tcp(p)))
    }

    /// Stops the lanes of peers no open segment uses any more (and idle past the deadline).
    fn segment_closed(&self) {
        self.client.evict_unused();
    }

    /// Stops the lanes, then the data server.
    fn shutdown(&self) {
        self.client.shutdown();
        let server = std::mem::replace(&mut *self.server.lock_clean(), DataServer::Stopped);
        drop(server);
    }
}
