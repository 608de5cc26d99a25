//! The RDMA backend: installing the transport (at start-up per [`RdmaMode`], or on demand),
//! keeping memory registrations in step, publishing devices and keys, answering handshakes and
//! choosing RDMA for a segment when both sides can.

use crate::error::{Error, ErrorKind, Result};
use crate::log::Level;
use crate::memory::Registry;
use crate::metadata::SegmentDesc;
use crate::sync::LockClean;
use crate::transport::rdma::{Options, Rdma, RdmaMode, RdmaPeer, peer_usable};
use crate::transport::{Backend, PeerSegment, Route};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

/// The RDMA transport of one engine, once installed, and why it is not when it is not.
pub struct RdmaBackend {
    mode: RdmaMode,
    opts: Options,
    engine_name: String,
    rdma: OnceLock<Arc<Rdma>>,
    note: Mutex<String>,
}

impl RdmaBackend {
    /// A backend for engine `engine_name`; nothing is opened before [`Backend::start`].
    pub fn new(mode: RdmaMode, opts: Options, engine_name: &str) -> RdmaBackend {
        RdmaBackend {
            mode,
            opts,
            engine_name: engine_name.to_string(),
            rdma: OnceLock::new(),
            note: Mutex::new(String::new()),
        }
    }

    fn note(&self) -> MutexGuard<'_, String> {
        self.note.lock_clean()
    }
}

impl Backend for RdmaBackend {
    fn name(&self) -> &'static str {
        "rdma"
    }

    /// Installs RDMA per the mode (one log line when it is not used).
    fn start(&self, registry: &Arc<Registry>) -> Result<()> {
        match self.mode {
            RdmaMode::Off => {
                *self.note() = "RDMA is off by configuration".into();
                Ok(())
            }
            RdmaMode::Auto => {
                if let Err(e) = self.install(registry) {
                    tw_log!(
                        Level::Info,
                        "engine {}: RDMA unavailable ({}); using TCP",
                        self.engine_name,
                        e.message()
                    );
                }
                Ok(())
            }
            RdmaMode::On => self.install(registry).map(|_| ()),
        }
    }

    /// Opens the devices and registers every region already registered. `Unsupported` with the
    /// reason when no device is usable.
    fn install(&self, registry: &Registry) -> Result<bool> {
        if self.rdma.get().is_some() {
            return Ok(false);
        }
        let r = Rdma::open(self.opts.clone(), &self.engine_name).map_err(|why| {
            *self.note() = why.clone();
            Error::new(ErrorKind::Unsupported, format!("RDMA unavailable: {why}"))
        })?;
        for region in registry.snapshot() {
            if let Err(e) = r.register(region.base, region.len, region.remote_accessible) {
                r.shutdown();
                *self.note() = e.clone();
                return Err(Error::new(ErrorKind::Internal, e));
            }
        }
        let _ = self.rdma.set(r);
        self.note().clear();
        Ok(true)
    }

    fn status(&self) -> std::result::Result<Vec<String>, String> {
        match self.rdma.get() {
            Some(r) => Ok(r.device_names()),
            None => Err(self.note().clone()),
        }
    }

    /// With RDMA installed, publishes `"rdma"`, the devices, per-device keys (buffers named by
    /// location) and a priority matrix, as Mooncake's RDMA transport does. TCP keys stay, so a
    /// tidewire peer without RDMA can still reach this engine.
    fn publish(&self, registry: &Registry, d: &mut SegmentDesc) {
        let Some(r) = self.rdma.get() else {
            return;
        };
        let regions = registry.snapshot();
        d.protocol = "rdma".into();
        d.devices = r.device_descs();
        let names = r.device_names();
        let mut matrix = serde_json::Map::new();
        for b in &mut d.buffers {
            if let Some(region) = regions.iter().find(|g| g.base == b.addr) {
                b.name = if region.location.is_empty() || region.location == "*" {
                    "cpu:0".into()
                } else {
                    region.location.clone()
                };
            }
            if let Some((rkey, lkey)) = r.keys(b.addr) {
                b.rkey = rkey;
                b.lkey = lkey;
            }
            matrix
                .entry(b.name.clone())
                .or_insert_with(|| serde_json::json!([names, []]));
        }
        if matrix.is_empty() {
            matrix.insert("cpu:0".into(), serde_json::json!([names, []]));
        }
        d.priority_matrix = Some(serde_json::Value::Object(matrix));
    }

    /// Registers new regions with every RDMA device, all or none.
    fn register(&self, ranges: &[(u64, u64)], remote: bool) -> std::result::Result<(), String> {
        let Some(r) = self.rdma.get() else {
            return Ok(());
        };
        for (i, &(base, len)) in ranges.iter().enumerate() {
            if let Err(e) = r.register(base, len, remote) {
                for &(b, _) in &ranges[..i] {
                    r.unregister(b);
                }
                return Err(e);
            }
        }
        Ok(())
    }

    fn unregister(&self, base: u64) {
        if let Some(r) = self.rdma.get() {
            r.unregister(base);
        }
    }

    /// The RDMA route when both sides can use RDMA; otherwise declines (TCP), with one log line
    /// saying why when either side publishes RDMA.
    fn connect(&self, peer: &PeerSegment<'_>) -> Result<Option<Route>> {
        let name = peer.name;
        Ok(match (self.rdma.get(), peer_usable(peer.desc)) {
            (Some(r), Ok(())) => Some(Route::Rdma(RdmaPeer::new(
                r.clone(),
                name,
                peer.rpc.clone(),
                Arc::new(peer.desc.clone()),
            ))),
            (Some(_), Err(why)) => {
                tw_log!(Level::Info, "segment {name}: no RDMA ({why}); using TCP");
                None
            }
            (None, Ok(())) => {
                tw_log!(
                    Level::Info,
                    "segment {name} publishes RDMA but this engine has none ({}); using TCP",
                    self.note()
                );
                None
            }
            (None, Err(_)) => None,
        })
    }

    fn handshake(&self, body: &[u8]) -> Option<String> {
        self.rdma.get().map(|r| r.on_handshake(body))
    }

    fn shutdown(&self) {
        if let Some(r) = self.rdma.get() {
            r.shutdown();
        }
    }
}
