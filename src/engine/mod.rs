//! The engine: the [`Engine`] handle and its shared state. One job per file: `lifecycle.rs`
//! (start, stop), `registration.rs` (registered memory), `open.rs` (segments), `routing.rs`
//! (route choice), `samehost.rs` (same-host checks), `publish.rs` (descriptor and metadata
//! keys), `rpc.rs` (RPC handler, notifications), `rdma.rs` (the RDMA transport's engine side),
//! `transfer.rs` (batches), `submit.rs` (validating and dispatching requests), `scatter.rs`, `stream.rs`. See `README.md` here for the completion
//! protocol.

pub mod config;
pub mod ids;
mod lifecycle;
pub mod notify_queue;
mod open;
mod publish;
mod rdma;
mod registration;
mod routing;
mod rpc;
mod samehost;
pub mod scatter;
pub mod segments;
mod shared_buffers;
pub mod stream;
mod submit;
pub mod transfer;

pub use crate::completion::{TaskState, TaskStatus};
pub use config::{Config, RdmaMode};
pub use scatter::{FragmentResult, ScatterRange};
pub use segments::{LOCAL_SEGMENT, SegmentId};
pub use transfer::{AsRequest, Request};

use crate::completion::Batch;
use crate::memory::Registry;
use crate::metadata::server::RpcServer;
use crate::metadata::store::MetadataStore;
use crate::transport::Route;
use crate::transport::tcp::client::TcpClient;
use crate::transport::tcp::server::TcpServer;
use ids::IdTable;
use publish::MetadataKeys;
use scatter::ScatterOp;
use segments::SegmentTable;
use std::sync::{Arc, Mutex, RwLock};

/// Protocol revision that tidewire peers publish as `tw_version`. 2: the same-host path
/// reports finished copies ("copy done" frames); peers publishing 1 get plain TCP.
pub const TW_PROTOCOL_VERSION: u32 = 2;

/// A received notification.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Notification {
    /// Sender-chosen name.
    pub name: String,
    /// Message body.
    pub msg: String,
}

/// A transfer engine. Every method is thread-safe. Dropping it stops its threads; work still in
/// flight fails with [`ErrorKind::Shutdown`].
pub struct Engine {
    inner: Arc<Inner>,
}

pub(crate) struct Inner {
    cfg: Config,
    name: String,
    rpc_host: String,
    rpc_port: u16,
    data_port: u16,
    registry: Arc<Registry>,
    /// The memcpy route to this engine's own segment.
    own_route: Route,
    /// Metadata key names (cluster prefix read once at creation).
    keys: MetadataKeys,
    segments: RwLock<SegmentTable>,
    open_lock: Mutex<()>,
    batches: IdTable<Batch>,
    scatters: IdTable<ScatterOp>,
    client: TcpClient,
    notifies: notify_queue::NotifyQueue,
    /// `false` once shutdown began; submitters hold the read side while dispatching.
    live: RwLock<bool>,
    store: Option<MetadataStore>,
    servers: Mutex<Option<(RpcServer, TcpServer)>>,
    /// Random identity for the same-host path; boxed so its address (published as
    /// `tw_token_addr`) is stable and readable by a verifying peer.
    token: Box<u64>,
    /// The RDMA transport, once installed (`rdma.rs`), and why it is not when it is not.
    rdma: std::sync::OnceLock<Arc<crate::transport::rdma::Rdma>>,
    rdma_note: Mutex<String>,
}

impl Engine {
    /// The segment name peers open (`host:rpc_port` in P2P mode).
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// Advertised RPC host.
    pub fn rpc_host(&self) -> &str {
        &self.inner.rpc_host
    }

    /// RPC/handshake port.
    pub fn rpc_port(&self) -> u16 {
        self.inner.rpc_port
    }

    /// TCP data port.
    pub fn data_port(&self) -> u16 {
        self.inner.data_port
    }

    /// The configuration in use.
    pub fn config(&self) -> &Config {
        &self.inner.cfg
    }
}
