//! The engine: the [`Engine`] handle and its shared state. One job per file: `lifecycle.rs`
//! (start, stop), `backends/` (the list of transports and walking it), `registration.rs`
//! (registered memory, shared buffers), `open.rs` (segments), `routing.rs` (fetching a
//! descriptor, asking the backends for a route), `publish.rs` (descriptor and metadata keys),
//! `rpc.rs` (RPC handler, notifications), `transfer.rs` (batches), `submit.rs` (validating and
//! dispatching requests), `scatter.rs`, `stream.rs`. See `README.md` here for the completion
//! protocol.

mod backends;
pub mod config;
pub mod ids;
mod lifecycle;
pub mod notify_queue;
mod open;
mod publish;
mod registration;
mod routing;
mod rpc;
pub mod scatter;
pub mod segments;
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
use crate::metadata::service::MetadataStore;
use crate::transport::{Backend, Route};
use ids::IdTable;
use publish::MetadataKeys;
use scatter::ScatterOp;
use segments::SegmentTable;
use std::sync::{Arc, Mutex, RwLock};

pub use crate::transport::samehost::TW_PROTOCOL_VERSION;

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
    notifies: notify_queue::NotifyQueue,
    /// `false` once shutdown began; submitters hold the read side while dispatching.
    live: RwLock<bool>,
    store: Option<MetadataStore>,
    rpc_server: Mutex<Option<RpcServer>>,
    /// The transports, in routing order (`backends/`).
    backends: Vec<Box<dyn Backend>>,
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
