//! Engine lifecycle: binding the listeners, starting the RPC server and the transports (the TCP
//! backend starts its data server on the data listener), publishing the segment at start-up,
//! and tearing it all down on drop.

use super::ids::IdTable;
use super::publish::MetadataKeys;
use super::rpc::handle_rpc;
use super::{Config, Engine, Inner};
use crate::error::{Error, ErrorKind, Result, fail};
use crate::log::Level;
use crate::metadata::rpc::MsgType;
use crate::metadata::server::RpcServer;
use crate::metadata::service::MetadataStore;
use crate::sync::{LockClean, RwLockClean};
use std::net::TcpListener;
use std::sync::{Arc, Mutex, RwLock};

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
    /// Starts an engine: binds the RPC and data listeners, starts their threads and, with a metadata
    /// server (HTTP or etcd), publishes this segment.
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
        let keys = MetadataKeys::from_env();
        let store = if cfg.is_p2p() {
            None
        } else {
            Some(MetadataStore::open(
                &cfg.metadata,
                cfg.connect_timeout.min(std::time::Duration::from_secs(3)),
                keys.prefix(),
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
        let notifies =
            super::notify_queue::NotifyQueue::new(cfg.notify_max_count, cfg.notify_max_bytes);
        let rpc_host = if cfg.bind_address.is_empty()
            || cfg.bind_address == "0.0.0.0"
            || cfg.bind_address == "::"
        {
            host
        } else {
            cfg.bind_address.clone()
        };
        let transports = super::backends::list(&cfg, &name, &rpc_host, data_listener)?;
        let inner = Arc::new(Inner {
            rpc_host,
            cfg,
            name,
            rpc_port,
            data_port,
            own_route: transports.own_route,
            registry: transports.registry,
            keys,
            segments: RwLock::default(),
            open_lock: Mutex::new(()),
            batches: IdTable::default(),
            scatters: IdTable::default(),
            notifies,
            live: RwLock::new(true),
            store,
            rpc_server: Mutex::new(None),
            backends: transports.backends,
        });
        let weak = Arc::downgrade(&inner);
        let handler = Arc::new(move |ty: MsgType, body: &[u8]| handle_rpc(&weak, ty, body));
        let io = inner.cfg.connect_timeout;
        let limits = crate::metadata::server::RpcLimits {
            io_timeout: io,
            max_len: inner.cfg.handshake_max_len,
            max_concurrent: inner.cfg.rpc_max_concurrent,
        };
        let rpc = RpcServer::start(rpc_listener, handler, limits, inner.cfg.auth_key.clone())
            .map_err(|e| Error::new(ErrorKind::Internal, format!("starting rpc thread: {e}")))?;
        *inner.rpc_server.lock_clean() = Some(rpc);
        let engine = Engine { inner };
        engine.inner.start_backends()?;
        if let Some(store) = &engine.inner.store {
            let meta =
                serde_json::json!({"ip_or_host_name": engine.inner.rpc_host, "rpc_port": rpc_port});
            store.put(
                &engine.inner.keys.rpc_meta(&engine.inner.name),
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
}

impl Drop for Engine {
    fn drop(&mut self) {
        *self.inner.live.write_clean() = false;
        self.inner.shutdown_backends();
        drop(self.inner.rpc_server.lock_clean().take());
        if let Some(store) = &self.inner.store {
            for key in [
                self.inner.keys.ram(&self.inner.name),
                self.inner.keys.rpc_meta(&self.inner.name),
            ] {
                if let Err(e) = store.delete(&key) {
                    tw_log!(Level::Warn, "removing {key}: {e}");
                }
            }
            store.close();
        }
        tw_log!(Level::Info, "engine {} down", self.inner.name);
    }
}
