//! The TCP backend: publishes the data server's address and framing, and routes every peer that
//! speaks TCP to its lanes (which switch to the verified same-host path when the same-host
//! backend vouches for the peer's pid).

use super::client::{PeerAddr, TcpClient};
use crate::error::{Error, ErrorKind, Result, fail};
use crate::memory::Registry;
use crate::metadata::SegmentDesc;
use crate::transport::{Backend, PeerSegment, Route, samehost};

/// The TCP transport of one engine: its lanes to peers and the address of its data server.
pub struct TcpBackend {
    client: TcpClient,
    /// Highest framing this engine speaks (`tcp_proto`).
    proto: u32,
    /// The `same_host` option.
    same_host: bool,
    /// Advertised data host and port.
    data: (String, u16),
}

impl TcpBackend {
    /// A backend over `client`, advertising the data server at `data`.
    pub fn new(client: TcpClient, proto: u32, same_host: bool, data: (String, u16)) -> TcpBackend {
        TcpBackend {
            client,
            proto,
            same_host,
            data,
        }
    }
}

impl Backend for TcpBackend {
    fn name(&self) -> &'static str {
        "tcp"
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

    fn shutdown(&self) {
        self.client.shutdown();
    }
}
