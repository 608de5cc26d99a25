//! The store client: engine setup, the global segment (registered remote-accessible and mounted
//! on the master), the local staging buffer, and a 1 s heartbeat that re-mounts after the master
//! forgot us (restart or missed TTL).

use super::StoreError;
use super::conn::MasterConn;
use super::disk::{DiskConfig, DiskTier};
use super::mem::{LocalBuffer, Mapped};
use super::proto::{Request, code};
use super::shared::{Shared, StoreClient};
use crate::engine::{Config, Engine};
use crate::sync::{LockClean, Recover};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

/// Setup parameters (Mooncake's `setup` arguments).
#[derive(Debug, Clone)]
pub struct StoreConfig {
    /// Host (or `host:port`) this client's engine advertises; empty = the first LAN IPv4.
    pub local_hostname: String,
    /// `P2PHANDSHAKE`, `http://host:port/metadata`, or etcd (`etcd://h1:p;h2:p`).
    pub metadata_server: String,
    /// Bytes this client contributes to the pool (0 = pure client).
    pub global_segment_size: u64,
    /// Staging buffer for the copying APIs (0 = none; they then stage in heap memory).
    pub local_buffer_size: u64,
    /// `tcp` or `rdma`.
    pub protocol: String,
    /// RDMA device names (comma-separated), ignored for TCP.
    pub device_name: String,
    /// Master `host:port`, or `etcd://h1:p;h2:p` to follow the elected master (HA).
    pub master_server_address: String,
    /// The disk tier (`enable_ssd_offload`, `ssd_offload_path`): `None` keeps values in memory.
    pub disk: Option<DiskConfig>,
}

/// The master a client dials when none is given (Mooncake's default).
pub const DEFAULT_MASTER_ADDRESS: &str = "127.0.0.1:50051";

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig {
            local_hostname: "127.0.0.1".into(),
            metadata_server: "P2PHANDSHAKE".into(),
            global_segment_size: 16 << 20,
            local_buffer_size: 16 << 20,
            protocol: "tcp".into(),
            device_name: String::new(),
            master_server_address: DEFAULT_MASTER_ADDRESS.into(),
            disk: None,
        }
    }
}

fn random_id() -> u64 {
    let mut v = 0u64;
    // SAFETY: getrandom writes at most 8 bytes into `v`.
    let n = unsafe { libc::getrandom((&raw mut v).cast(), 8, 0) };
    if n != 8 {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        v = t ^ ((std::process::id() as u64) << 32);
    }
    v | 1
}

fn engine_config(cfg: &StoreConfig) -> Result<Config, StoreError> {
    let bad = |e: crate::Error| StoreError::new(code::INVALID_PARAMS, e.to_string());
    let mut ec = Config::default();
    ec.set("metadata", &cfg.metadata_server).map_err(bad)?;
    let host = if cfg.local_hostname.trim().is_empty() {
        crate::metadata::first_lan_ipv4().unwrap_or_else(|| "127.0.0.1".into())
    } else {
        cfg.local_hostname.trim().to_string()
    };
    let (h, port) = crate::metadata::parse_host_port(&host, 0).map_err(bad)?;
    if ec.is_p2p() {
        ec.set("local_server_name", &h).map_err(bad)?;
    } else {
        // With a metadata server the name is the key peers look up, so it must be unique per
        // process: give it this engine's RPC port, picked now when none was given.
        let port = if port != 0 {
            port
        } else {
            let l = std::net::TcpListener::bind((h.as_str(), 0)).map_err(|e| {
                StoreError::new(code::INVALID_PARAMS, format!("cannot bind {h}: {e}"))
            })?;
            l.local_addr().map(|a| a.port()).unwrap_or(0)
        };
        ec.set(
            "local_server_name",
            &crate::metadata::join_host_port(&h, port),
        )
        .map_err(bad)?;
        ec.set("rpc_port", &port.to_string()).map_err(bad)?;
    }
    match cfg.protocol.trim() {
        "" | "tcp" => ec.set("rdma", "off").map_err(bad)?,
        "rdma" => {
            ec.set("rdma", "on").map_err(bad)?;
            if !cfg.device_name.trim().is_empty() {
                ec.set("rdma_devices", cfg.device_name.trim())
                    .map_err(bad)?;
            }
        }
        other => {
            return Err(StoreError::new(
                code::INVALID_PARAMS,
                format!("protocol {other:?} is not supported (tcp | rdma)"),
            ));
        }
    }
    Ok(ec)
}

impl StoreClient {
    /// Starts the engine, maps and registers the segment and local buffer, mounts the segment on
    /// the master and starts the heartbeat.
    pub fn setup(cfg: &StoreConfig) -> Result<StoreClient, StoreError> {
        let engine_cfg = engine_config(cfg)?;
        // The tier's path is checked (and its directory locked) before anything starts.
        let tier = match &cfg.disk {
            Some(d) if cfg.global_segment_size > 0 => Some(Arc::new(DiskTier::open(d)?)),
            Some(_) => {
                tw_log!(
                    crate::log::Level::Warn,
                    "store: enable_ssd_offload without a global segment: this client holds no \
                     objects to write, so it opens no disk tier"
                );
                None
            }
            None => None,
        };
        let conn = MasterConn::new(
            &cfg.master_server_address,
            Duration::from_secs(3),
            Duration::from_secs(10),
            engine_cfg.auth_key.clone(),
        )?;
        let engine = Engine::new(engine_cfg)
            .map_err(|e| StoreError::new(code::INTERNAL_ERROR, format!("engine: {e}")))?;
        let map = |n: u64, what: &str| -> Result<Option<Mapped>, StoreError> {
            if n == 0 {
                return Ok(None);
            }
            let n = usize::try_from(n)
                .map_err(|_| StoreError::new(code::INVALID_PARAMS, format!("{what} too large")))?;
            Mapped::new(n).map(Some).map_err(|e| {
                StoreError::new(
                    code::INVALID_PARAMS,
                    format!("mapping {n} bytes for {what}: {e}"),
                )
            })
        };
        let segment = map(cfg.global_segment_size, "global segment")?;
        let local = map(cfg.local_buffer_size, "local buffer")?;
        let reg = |m: &Mapped, remote: bool| {
            engine
                .register_memory(m.addr(), m.len() as u64, "cpu:0", remote)
                .map_err(|e| StoreError::new(code::INTERNAL_ERROR, format!("register: {e}")))
        };
        if let Some(s) = &segment {
            reg(s, true)?;
        }
        if let Some(l) = &local {
            reg(l, false)?;
        }
        let shared = Arc::new(Shared {
            engine,
            conn,
            client_id: random_id(),
            segment,
            local: local.map(LocalBuffer::new),
            master_ok: AtomicBool::new(true),
            transfer_timeout: Duration::from_secs(120),
            beats: super::holds::Heartbeats::new(),
            sessions: Default::default(),
            stale: Default::default(),
            tier: tier.clone(),
            neighbours: Default::default(),
            disk_reads: Default::default(),
            disk_off: Default::default(),
            put_sessions: Default::default(),
            extra: Default::default(),
            tasks_running: Default::default(),
        });
        shared.ping()?;
        shared.mount()?;
        let stop = Arc::new((Mutex::new(false), Condvar::new()));
        let (sh, st) = (shared.clone(), stop.clone());
        let heartbeat = std::thread::Builder::new()
            .name("tw-store-ping".into())
            .spawn(move || heartbeat(&sh, &st))
            .map_err(|e| StoreError::new(code::INTERNAL_ERROR, format!("heartbeat thread: {e}")))?;
        let mut client = StoreClient {
            shared,
            stop,
            heartbeat: Some(heartbeat),
            offload: None,
        };
        if let Some(t) = tier {
            let t = super::offload::start(client.shared.clone(), t, client.stop.clone())?;
            client.offload = Some(t);
        }
        Ok(client)
    }

    /// This client's engine endpoint (`host:port`), also its segment name.
    pub fn hostname(&self) -> String {
        self.shared.engine.name().to_string()
    }

    /// The engine (to register user buffers).
    pub fn engine(&self) -> &Engine {
        &self.shared.engine
    }

    /// Objects this client has read from disk tiers (Mooncake's `get_offload_rpc_read_count`).
    pub fn disk_read_count(&self) -> u64 {
        self.shared
            .disk_reads
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Mooncake's `unmount_local_disk_segment`: after `grace` (reads in flight finish), the
    /// master drops this client's disk replicas (objects whose last replica they were go with
    /// them), the offload thread stops and the tier's record files are deleted.
    /// `SEGMENT_NOT_FOUND` when this client has no disk tier (or unmounted it already).
    pub fn unmount_disk(&self, grace: Duration) -> Result<(), StoreError> {
        let sh = &self.shared;
        let Some(tier) = sh.tier.as_ref() else {
            return Err(StoreError::new(
                code::SEGMENT_NOT_FOUND,
                "this client has no disk tier (setup without enable_ssd_offload)",
            ));
        };
        if sh.disk_off.swap(true, Ordering::AcqRel) {
            return Err(StoreError::new(
                code::SEGMENT_NOT_FOUND,
                "the disk tier is unmounted already",
            ));
        }
        std::thread::sleep(grace);
        let reply = sh.conn.call(&Request::Unmount {
            client_id: sh.client_id,
            name: tier.name(sh.engine.name()).to_name(),
        });
        tier.clear();
        match reply? {
            super::proto::Reply::Ok => Ok(()),
            super::proto::Reply::Error { code, message } => Err(StoreError::new(code, message)),
            other => Err(StoreError::new(
                code::RPC_FAIL,
                format!("unexpected unmount reply {other:?}"),
            )),
        }
    }

    /// 0 healthy, 2 master unreachable (Mooncake's `health_check`).
    pub fn health_check(&self) -> i32 {
        match self.shared.ping() {
            Ok(()) => 0,
            Err(_) => 2,
        }
    }
}

fn heartbeat(sh: &Arc<Shared>, stop: &(Mutex<bool>, Condvar)) {
    loop {
        let (lock, cv) = stop;
        let g = lock.lock_clean();
        let (g, _) = cv
            .wait_timeout_while(g, Duration::from_secs(1), |s| !*s)
            .recover();
        if *g {
            return;
        }
        drop(g);
        match sh.ping() {
            Ok(()) => {
                if !sh.master_ok.swap(true, Ordering::AcqRel) {
                    tw_log!(crate::log::Level::Info, "store: master reachable again");
                }
                sh.poll_tasks();
            }
            Err(e) => {
                sh.conn.reset();
                if sh.master_ok.swap(false, Ordering::AcqRel) {
                    tw_log!(crate::log::Level::Warn, "store: heartbeat failed: {e}");
                }
            }
        }
    }
}

impl Drop for StoreClient {
    fn drop(&mut self) {
        {
            let (lock, cv) = &*self.stop;
            *lock.lock_clean() = true;
            cv.notify_all();
        }
        if let Some(t) = self.heartbeat.take() {
            let _ = t.join();
        }
        if let Some(t) = self.offload.take() {
            let _ = t.join();
        }
        if self.shared.segment.is_some() {
            let _ = self.shared.conn.call(&Request::Unmount {
                client_id: self.shared.client_id,
                name: self.shared.engine.name().to_string(),
            });
        }
    }
}
