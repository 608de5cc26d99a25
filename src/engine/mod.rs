//! The engine: configuration, lifecycle, registered memory, segments and notifications.
//! Batches live in `transfer.rs`, scatter operations in `scatter.rs`; see `README.md` here for
//! the completion protocol.

pub mod config;
pub mod ids;
mod rdma;
pub mod scatter;
pub mod segments;
pub mod stream;
pub mod transfer;

pub use crate::completion::{TaskState, TaskStatus};
pub use config::{Config, RdmaMode};
pub use scatter::{FragmentResult, ScatterRange};
pub use segments::{LOCAL_SEGMENT, SegmentId};
pub use transfer::Request;

use crate::completion::Batch;
use crate::error::{Error, ErrorKind, Result, fail};
use crate::log::Level;
use crate::memory::Registry;
use crate::metadata::http::HttpStore;
use crate::metadata::rpc::{self, MsgType};
use crate::metadata::server::RpcServer;
use crate::metadata::{BufferDesc, SegmentDesc};
use crate::transport::samehost;
use crate::transport::tcp::client::{ClientConfig, PeerAddr, TcpClient};
use crate::transport::tcp::server::TcpServer;
use ids::IdTable;
use scatter::ScatterOp;
use segments::{Route, Segment, SegmentTable};
use std::collections::VecDeque;
use std::net::TcpListener;
use std::sync::{Arc, Mutex, RwLock, Weak};

/// Protocol revision that tidewire peers publish as `tw_version`.
pub const TW_PROTOCOL_VERSION: u32 = 1;

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
    segments: RwLock<SegmentTable>,
    open_lock: Mutex<()>,
    batches: IdTable<Batch>,
    scatters: IdTable<ScatterOp>,
    client: TcpClient,
    notifies: Mutex<VecDeque<Notification>>,
    /// `false` once shutdown began; submitters hold the read side while dispatching.
    live: RwLock<bool>,
    store: Option<HttpStore>,
    servers: Mutex<Option<(RpcServer, TcpServer)>>,
    /// Random identity for the same-host path; boxed so its address (published as
    /// `tw_token_addr`) is stable and readable by a verifying peer.
    token: Box<u64>,
    /// The RDMA transport, once installed (`rdma.rs`), and why it is not when it is not.
    rdma: std::sync::OnceLock<Arc<crate::transport::rdma::Rdma>>,
    rdma_note: Mutex<String>,
}

fn bind(host: &str, port: u16) -> Result<TcpListener> {
    let addrs = crate::metadata::resolve(host, port)?;
    let mut last = None;
    for a in addrs {
        match TcpListener::bind(a) {
            Ok(l) => return Ok(l),
            Err(e) => last = Some(format!("{a}: {e}")),
        }
    }
    fail(
        ErrorKind::Socket,
        format!("cannot bind {host}:{port}: {}", last.unwrap_or_default()),
    )
}

impl Engine {
    /// Starts an engine: binds the RPC and data listeners, starts their threads and, with an HTTP
    /// metadata server, publishes this segment.
    pub fn new(cfg: Config) -> Result<Engine> {
        // P2P: the name's host is advertised. Metadata-server mode: the name is just a key, so
        // (as Mooncake) advertise the bind address, else the first up non-loopback IPv4.
        let host = if cfg.is_p2p() {
            crate::metadata::parse_host_port(&cfg.local_server_name, 0)?.0
        } else if !cfg.bind_address.is_empty() {
            cfg.bind_address.clone()
        } else {
            crate::metadata::first_lan_ipv4().unwrap_or_else(|| "127.0.0.1".to_string())
        };
        if cfg.local_server_name.trim().is_empty() {
            return fail(ErrorKind::InvalidArgument, "local_server_name is empty");
        }
        let bind_host = if cfg.bind_address.is_empty() {
            host.clone()
        } else {
            cfg.bind_address.clone()
        };
        let store = if cfg.is_p2p() {
            None
        } else {
            Some(HttpStore::new(
                &cfg.metadata,
                cfg.connect_timeout.min(std::time::Duration::from_secs(3)),
            )?)
        };
        let rpc_listener = bind(&bind_host, cfg.rpc_port)?;
        let data_listener = bind(&bind_host, cfg.data_port)?;
        let rpc_port = rpc_listener
            .local_addr()
            .map_err(|e| Error::new(ErrorKind::Socket, e.to_string()))?
            .port();
        let data_port = data_listener
            .local_addr()
            .map_err(|e| Error::new(ErrorKind::Socket, e.to_string()))?
            .port();
        let name = if cfg.is_p2p() {
            crate::metadata::join_host_port(&host, rpc_port)
        } else {
            cfg.local_server_name.clone()
        };
        let client = TcpClient::new(ClientConfig {
            lanes: cfg.tcp_lanes,
            connect_timeout: cfg.connect_timeout,
            io_timeout: cfg.io_timeout,
            ..ClientConfig::default()
        });
        let registry = Arc::new(Registry::new());
        let inner = Arc::new(Inner {
            rpc_host: if cfg.bind_address.is_empty()
                || cfg.bind_address == "0.0.0.0"
                || cfg.bind_address == "::"
            {
                host
            } else {
                cfg.bind_address.clone()
            },
            cfg,
            name,
            rpc_port,
            data_port,
            registry: registry.clone(),
            segments: RwLock::default(),
            open_lock: Mutex::new(()),
            batches: IdTable::default(),
            scatters: IdTable::default(),
            client,
            notifies: Mutex::default(),
            live: RwLock::new(true),
            store,
            servers: Mutex::new(None),
            token: Box::new(samehost::new_token()),
            rdma: std::sync::OnceLock::new(),
            rdma_note: Mutex::new(String::new()),
        });
        samehost::announce(*inner.token, Arc::downgrade(&inner.registry));
        let weak = Arc::downgrade(&inner);
        let handler = Arc::new(move |ty: MsgType, body: &[u8]| handle_rpc(&weak, ty, body));
        let io = inner.cfg.connect_timeout;
        let rpc = RpcServer::start(rpc_listener, handler, io, inner.cfg.handshake_max_len)
            .map_err(|e| Error::new(ErrorKind::Internal, format!("starting rpc thread: {e}")))?;
        let tcp = TcpServer::start(data_listener, registry, inner.cfg.io_timeout)
            .map_err(|e| Error::new(ErrorKind::Internal, format!("starting tcp server: {e}")))?;
        *inner.servers.lock().unwrap_or_else(|e| e.into_inner()) = Some((rpc, tcp));
        let engine = Engine { inner };
        engine.start_rdma()?;
        if let Some(store) = &engine.inner.store {
            let meta =
                serde_json::json!({"ip_or_host_name": engine.inner.rpc_host, "rpc_port": rpc_port});
            store.put(
                &engine.inner.rpc_meta_key(&engine.inner.name),
                &meta.to_string(),
            )?;
            engine.inner.publish()?;
        }
        tw_log!(
            Level::Info,
            "engine {} up (rpc {rpc_port}, data {data_port})",
            engine.inner.name
        );
        Ok(engine)
    }

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

    /// Registers `[addr, addr+len)`. `location` is kept and published (`"cpu:N"`, `"cuda:N"`,
    /// `"*"`); peers can never touch a region registered with `remote_accessible == false`.
    pub fn register_memory(
        &self,
        addr: u64,
        len: u64,
        location: &str,
        remote_accessible: bool,
    ) -> Result<()> {
        let fresh = self
            .inner
            .registry
            .register(addr, len, location, remote_accessible)?;
        if fresh {
            self.inner
                .rdma_register(&[(addr, len)], remote_accessible)?;
        }
        self.inner.publish_logged();
        Ok(())
    }

    /// Registers several ranges, all or none.
    pub fn register_memory_batch(&self, ranges: &[(u64, u64)], location: &str) -> Result<()> {
        let fresh = self.inner.registry.register_all(ranges, location, true)?;
        let new: Vec<(u64, u64)> = ranges
            .iter()
            .zip(&fresh)
            .filter(|(_, f)| **f)
            .map(|(r, _)| *r)
            .collect();
        self.inner.rdma_register(&new, true)?;
        self.inner.publish_logged();
        Ok(())
    }

    /// Drops one registration of the region starting at `addr`.
    pub fn unregister_memory(&self, addr: u64) -> Result<()> {
        if self.inner.registry.unregister(addr)? {
            self.inner.rdma_unregister(addr);
        }
        self.inner.publish_logged();
        Ok(())
    }

    /// Location of the registered region containing `addr` (`"cuda:N"`, `"cpu:N"`, or what was
    /// given at registration).
    pub fn memory_location(&self, addr: u64) -> Result<String> {
        self.inner
            .registry
            .region_of(addr)
            .map(|r| r.location)
            .ok_or_else(|| {
                Error::new(
                    ErrorKind::AddressNotRegistered,
                    format!("{addr:#x} is not inside a registered region"),
                )
            })
    }

    /// Unregisters every address; returns the first error after trying them all.
    pub fn unregister_memory_batch(&self, addrs: &[u64]) -> Result<()> {
        let mut first = None;
        for &a in addrs {
            match self.inner.registry.unregister(a) {
                Ok(true) => self.inner.rdma_unregister(a),
                Ok(false) => {}
                Err(e) => {
                    first.get_or_insert(e);
                }
            }
        }
        self.inner.publish_logged();
        first.map_or(Ok(()), Err)
    }

    /// This engine's descriptor as peers see it.
    pub fn local_descriptor(&self) -> SegmentDesc {
        self.inner.local_desc()
    }

    /// Opens (or finds in the cache) the segment `name` and returns its id. The engine's own name
    /// is segment 0. Leading `/` are ignored, as in Mooncake.
    pub fn open_segment(&self, name: &str) -> Result<SegmentId> {
        let name = name.trim_start_matches('/');
        if name.is_empty() {
            return fail(ErrorKind::InvalidArgument, "empty segment name");
        }
        if name == self.inner.name {
            return Ok(LOCAL_SEGMENT);
        }
        let _serial = self
            .inner
            .open_lock
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if let Some(id) = self
            .inner
            .segments
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .id_of(name)
        {
            return Ok(id);
        }
        let seg = self.inner.fetch_segment(name)?;
        Ok(self
            .inner
            .segments
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(seg))
    }

    /// Forgets a segment id. Transfers already submitted to it finish normally.
    pub fn close_segment(&self, id: SegmentId) -> Result<()> {
        if id == LOCAL_SEGMENT {
            return Ok(());
        }
        if self
            .inner
            .segments
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .remove(id)
        {
            Ok(())
        } else {
            fail(
                ErrorKind::UnknownSegment,
                format!("segment {id} is not open"),
            )
        }
    }

    /// Re-fetches a segment's descriptor (after the peer registered more memory).
    pub fn refresh_segment(&self, id: SegmentId) -> Result<()> {
        if id == LOCAL_SEGMENT {
            return Ok(());
        }
        let seg = self.inner.segment(id)?;
        let fresh = self.inner.fetch_segment(&seg.name)?;
        let state = fresh.state.into_inner().unwrap_or_else(|e| e.into_inner());
        *seg.state.write().unwrap_or_else(|e| e.into_inner()) = state;
        Ok(())
    }

    /// Refreshes every open segment; returns the first error after trying them all.
    pub fn refresh_all_segments(&self) -> Result<()> {
        let all = self
            .inner
            .segments
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .all();
        let mut first = None;
        for (id, _) in all {
            if let Err(e) = self.refresh_segment(id) {
                first.get_or_insert(e);
            }
        }
        first.map_or(Ok(()), Err)
    }

    /// The cached descriptor of an open segment (0 = this engine).
    pub fn segment_descriptor(&self, id: SegmentId) -> Result<SegmentDesc> {
        if id == LOCAL_SEGMENT {
            return Ok(self.inner.local_desc());
        }
        Ok((*self.inner.segment(id)?.desc()).clone())
    }

    /// How bytes reach segment `id` now: `"local"`, `"in-process"`, `"same-host"`, `"tcp"` or
    /// `"unsupported"`.
    pub fn segment_path(&self, id: SegmentId) -> Result<&'static str> {
        if id == LOCAL_SEGMENT {
            return Ok("local");
        }
        Ok(match self.inner.segment(id)?.route() {
            Route::Local => "local",
            Route::InProcess(_) => "in-process",
            Route::Tcp(p) => p.path_name(),
            Route::Rdma(_) => "rdma",
            Route::Unsupported(_) => "unsupported",
        })
    }

    /// Sends a notification to the owner of segment `id` over its RPC port.
    pub fn send_notify(&self, id: SegmentId, name: &str, msg: &str) -> Result<()> {
        self.inner.send_notify(id, name, msg)
    }

    /// Takes every notification received so far, oldest first.
    pub fn take_notifications(&self) -> Vec<Notification> {
        self.inner
            .notifies
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .drain(..)
            .collect()
    }

    /// Probes a peer's RPC port (`host:port` or a metadata-mode segment name).
    pub fn probe(&self, name: &str) -> Result<()> {
        let (host, port) = self.inner.rpc_address(name)?;
        let reply = rpc::call(
            &host,
            port,
            MsgType::Probe,
            b"{}",
            self.inner.cfg.connect_timeout,
            self.inner.cfg.handshake_max_len,
        )?;
        let v: serde_json::Value = serde_json::from_slice(&reply)
            .map_err(|e| Error::new(ErrorKind::Protocol, format!("probe reply: {e}")))?;
        if v.get("status").and_then(|s| s.as_str()) == Some("success") {
            Ok(())
        } else {
            fail(ErrorKind::Protocol, format!("probe reply {v}"))
        }
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        samehost::withdraw(*self.inner.token);
        *self.inner.live.write().unwrap_or_else(|e| e.into_inner()) = false;
        self.inner.client.shutdown();
        if let Some(r) = self.inner.rdma.get() {
            r.shutdown();
        }
        drop(
            self.inner
                .servers
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .take(),
        );
        if let Some(store) = &self.inner.store {
            for key in [
                self.inner.ram_key(&self.inner.name),
                self.inner.rpc_meta_key(&self.inner.name),
            ] {
                if let Err(e) = store.delete(&key) {
                    tw_log!(Level::Warn, "removing {key}: {e}");
                }
            }
        }
        tw_log!(Level::Info, "engine {} down", self.inner.name);
    }
}

fn key_prefix() -> String {
    match std::env::var("MC_METADATA_CLUSTER_ID") {
        Ok(c) if !c.is_empty() => format!("mooncake/{c}/"),
        _ => "mooncake/".to_string(),
    }
}

impl Inner {
    fn ram_key(&self, name: &str) -> String {
        if name.contains('/') {
            format!("{}{name}", key_prefix())
        } else {
            format!("{}ram/{name}", key_prefix())
        }
    }

    fn rpc_meta_key(&self, name: &str) -> String {
        format!("{}rpc_meta/{name}", key_prefix())
    }

    fn local_desc(&self) -> SegmentDesc {
        let mut d = self.tcp_desc();
        self.add_rdma_desc(&mut d);
        d
    }

    fn tcp_desc(&self) -> SegmentDesc {
        SegmentDesc {
            buffers: self
                .registry
                .snapshot()
                .into_iter()
                .filter(|r| r.remote_accessible)
                .map(|r| BufferDesc {
                    name: self.name.clone(),
                    addr: r.base,
                    length: r.len,
                    ..Default::default()
                })
                .collect(),
            devices: Vec::new(),
            name: self.name.clone(),
            priority_matrix: None,
            protocol: "tcp".to_string(),
            rdma_server_name: String::new(),
            tcp_data_host: self.rpc_host.clone(),
            tcp_data_port: self.data_port,
            tcp_proto_version: self.cfg.tcp_proto,
            timestamp: crate::metadata::descriptor::timestamp_now(),
            tw_host_id: samehost::host_id().to_string(),
            tw_pid: std::process::id(),
            tw_token: *self.token,
            tw_token_addr: &*self.token as *const u64 as u64,
            tw_version: TW_PROTOCOL_VERSION,
        }
    }

    fn publish(&self) -> Result<()> {
        match &self.store {
            Some(store) => store.put(&self.ram_key(&self.name), &self.local_desc().encode()),
            None => Ok(()),
        }
    }

    fn publish_logged(&self) {
        if let Err(e) = self.publish() {
            tw_log!(Level::Warn, "publishing segment {}: {e}", self.name);
        }
    }

    fn segment(&self, id: SegmentId) -> Result<Arc<Segment>> {
        self.segments
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(id)
            .ok_or_else(|| {
                Error::new(
                    ErrorKind::UnknownSegment,
                    format!("segment {id} is not open"),
                )
            })
    }

    /// Where a segment's RPC port is.
    fn rpc_address(&self, name: &str) -> Result<(String, u16)> {
        match &self.store {
            None => crate::metadata::parse_host_port(name, crate::metadata::DEFAULT_HANDSHAKE_PORT),
            Some(store) => {
                let body = store.get(&self.rpc_meta_key(name))?.ok_or_else(|| {
                    Error::new(
                        ErrorKind::UnknownSegment,
                        format!("no rpc_meta for {name:?} on the metadata server"),
                    )
                })?;
                let v: serde_json::Value = serde_json::from_slice(&body).map_err(|e| {
                    Error::new(ErrorKind::Metadata, format!("rpc_meta of {name}: {e}"))
                })?;
                let host = v
                    .get("ip_or_host_name")
                    .and_then(|h| h.as_str())
                    .unwrap_or_default();
                let port = v.get("rpc_port").and_then(|p| p.as_u64()).unwrap_or(0);
                if host.is_empty() || port == 0 || port > 65535 {
                    return fail(
                        ErrorKind::Metadata,
                        format!("rpc_meta of {name} is incomplete: {v}"),
                    );
                }
                Ok((host.to_string(), port as u16))
            }
        }
    }

    /// The registry of a peer engine living in this process, when the shortcut is enabled.
    fn in_process_peer(&self, desc: &SegmentDesc) -> Option<Weak<Registry>> {
        if !self.cfg.same_host || desc.tw_version == 0 || desc.tw_pid != std::process::id() {
            return None;
        }
        samehost::find_in_process(desc.tw_token)
    }

    /// Pid of a verified tidewire peer on this host, or 0 (plain TCP), with one log line why.
    fn same_host_pid(&self, desc: &SegmentDesc) -> u32 {
        if !self.cfg.same_host
            || desc.tw_version == 0
            || desc.tw_token == 0
            || desc.tw_pid == 0
            || desc.tw_host_id.is_empty()
            || desc.tw_host_id != samehost::host_id()
        {
            return 0;
        }
        match samehost::verify_peer(desc.tw_pid, desc.tw_token, desc.tw_token_addr) {
            Ok(true) => desc.tw_pid,
            Ok(false) => {
                tw_log!(
                    Level::Info,
                    "segment {}: pid {} is not the publishing engine (pid namespace?); using TCP",
                    desc.name,
                    desc.tw_pid
                );
                0
            }
            Err(e) => {
                tw_log!(
                    Level::Info,
                    "segment {}: same-host copy refused by the kernel ({e}); using TCP",
                    desc.name
                );
                0
            }
        }
    }

    fn fetch_segment(&self, name: &str) -> Result<Segment> {
        let (host, port) = self.rpc_address(name).map_err(|e| {
            Error::new(
                ErrorKind::UnknownSegment,
                format!("segment {name:?}: {}", e.message()),
            )
        })?;
        let desc = match &self.store {
            None => {
                let body = rpc::call(
                    &host,
                    port,
                    MsgType::Metadata,
                    self.local_desc().encode().as_bytes(),
                    self.cfg.connect_timeout,
                    self.cfg.handshake_max_len,
                )
                .map_err(|e| {
                    Error::new(
                        ErrorKind::UnknownSegment,
                        format!("segment {name:?}: {}", e.message()),
                    )
                })?;
                SegmentDesc::decode(&body)?
            }
            Some(store) => {
                let body = store.get(&self.ram_key(name))?.ok_or_else(|| {
                    Error::new(
                        ErrorKind::UnknownSegment,
                        format!("segment {name:?} is not on the metadata server"),
                    )
                })?;
                SegmentDesc::decode(&body)?
            }
        };
        let rdma_route = if desc.name == self.name {
            None
        } else {
            self.rdma_route(name, &(host.clone(), port), &desc)
        };
        let route = if let Some(r) = rdma_route {
            r
        } else if desc.name == self.name {
            Route::Local
        } else if desc.protocol != "tcp" && (desc.protocol != "rdma" || desc.tcp_data_port == 0) {
            Route::Unsupported(desc.protocol.clone())
        } else {
            let data_host = if desc.tcp_data_host.is_empty() {
                host.clone()
            } else {
                desc.tcp_data_host.clone()
            };
            let v2 = desc.tcp_proto_version >= 2 && self.cfg.tcp_proto >= 2;
            if let Some(registry) = self.in_process_peer(&desc) {
                Route::InProcess(registry)
            } else {
                let addr = PeerAddr {
                    host: data_host,
                    port: desc.tcp_data_port,
                    v2,
                    vm_pid: if v2 { self.same_host_pid(&desc) } else { 0 },
                };
                if addr.port == 0 {
                    return fail(
                        ErrorKind::Metadata,
                        format!("segment {name:?} publishes no tcp_data_port"),
                    );
                }
                Route::Tcp(
                    self.client.peer(&addr).map_err(|e| {
                        Error::new(ErrorKind::Internal, format!("starting lanes: {e}"))
                    })?,
                )
            }
        };
        Ok(Segment {
            name: name.to_string(),
            rpc: (host, port),
            state: RwLock::new((Arc::new(desc), route)),
        })
    }

    fn send_notify(&self, id: SegmentId, name: &str, msg: &str) -> Result<()> {
        if id == LOCAL_SEGMENT {
            self.notifies
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push_back(Notification {
                    name: name.into(),
                    msg: msg.into(),
                });
            return Ok(());
        }
        let seg = self.segment(id)?;
        let body = serde_json::json!({"name": name, "notify_msg": msg}).to_string();
        let reply = rpc::call(
            &seg.rpc.0,
            seg.rpc.1,
            MsgType::Notify,
            body.as_bytes(),
            self.cfg.connect_timeout,
            self.cfg.handshake_max_len,
        )?;
        let v: serde_json::Value = serde_json::from_slice(&reply)
            .map_err(|e| Error::new(ErrorKind::Protocol, format!("notify reply: {e}")))?;
        match v.get("notify_msg").and_then(|m| m.as_str()) {
            Some(m) if !m.is_empty() => Ok(()),
            _ => fail(
                ErrorKind::Metadata,
                format!("peer {} rejected the notification", seg.name),
            ),
        }
    }
}

/// Answers a peer's RPC request.
fn handle_rpc(weak: &Weak<Inner>, ty: MsgType, body: &[u8]) -> Option<Vec<u8>> {
    let inner = weak.upgrade()?;
    let reply = match ty {
        MsgType::Metadata => inner.local_desc().encode(),
        MsgType::Probe => r#"{"status":"success"}"#.to_string(),
        MsgType::Notify => {
            let parsed: Option<(String, String)> = serde_json::from_slice::<serde_json::Value>(body).ok().and_then(|v| {
                Some((v.get("name")?.as_str()?.to_string(), v.get("notify_msg")?.as_str()?.to_string()))
            });
            match parsed {
                Some((name, msg)) => {
                    inner.notifies.lock().unwrap_or_else(|e| e.into_inner()).push_back(Notification { name, msg });
                    r#"{"name":"","notify_msg":"success"}"#.to_string()
                }
                None => {
                    tw_log!(Level::Warn, "rpc: malformed notification {:?}", String::from_utf8_lossy(body));
                    r#"{"name":"","notify_msg":""}"#.to_string()
                }
            }
        }
        MsgType::Connection if inner.rdma.get().is_some() => {
            inner.rdma.get().map(|r| r.on_handshake(body)).unwrap_or_default()
        }
        MsgType::Connection => serde_json::json!({
            "local_gid": "", "local_lid": 0, "local_nic_path": "", "peer_nic_path": "", "qp_num": [],
            "reply_msg": "tidewire: this engine has no RDMA transport"
        })
        .to_string(),
    };
    Some(reply.into_bytes())
}
