//! Engine side of the RDMA transport: installing it, keeping memory registrations in step,
//! publishing devices and keys, and choosing RDMA or TCP per segment.

use super::config::RdmaMode;
use super::{Engine, Inner};
use crate::error::{Error, ErrorKind, Result};
use crate::log::Level;
use crate::metadata::SegmentDesc;
use crate::transport::Route;
use crate::transport::rdma::{self, Options, Rdma, RdmaPeer};
use std::sync::Arc;

impl Engine {
    /// At start-up: installs RDMA per the `rdma` option (one log line when it is not used).
    pub(super) fn start_rdma(&self) -> Result<()> {
        match self.inner.cfg.rdma {
            RdmaMode::Off => {
                *self.inner.note() = "RDMA is off by configuration".into();
                Ok(())
            }
            RdmaMode::Auto => {
                if let Err(e) = self.install_rdma() {
                    tw_log!(
                        Level::Info,
                        "engine {}: RDMA unavailable ({}); using TCP",
                        self.inner.name,
                        e.message()
                    );
                }
                Ok(())
            }
            RdmaMode::On => self.install_rdma(),
        }
    }

    /// Installs the RDMA transport now (Mooncake's `installTransport("rdma")`): opens the
    /// devices, registers every region already registered, and republishes the descriptor.
    /// `Unsupported` with the reason when no device is usable. Idempotent.
    pub fn install_rdma(&self) -> Result<()> {
        let inner = &self.inner;
        let _serial = inner.open_lock.lock().unwrap_or_else(|e| e.into_inner());
        if inner.rdma.get().is_some() {
            return Ok(());
        }
        let cfg = &inner.cfg;
        let opts = Options {
            devices: cfg.rdma_devices.clone(),
            qp_per_ep: cfg.rdma_qp_per_ep,
            max_wr: cfg.rdma_max_wr,
            retries: cfg.rdma_retries,
            connect_timeout: cfg.connect_timeout,
            handshake_max_len: cfg.handshake_max_len,
            max_passive: cfg.rdma_max_passive_endpoints,
            auth_key: cfg.auth_key.clone(),
        };
        let r = Rdma::open(opts, &inner.name).map_err(|why| {
            *inner.note() = why.clone();
            Error::new(ErrorKind::Unsupported, format!("RDMA unavailable: {why}"))
        })?;
        for region in inner.registry.snapshot() {
            if let Err(e) = r.register(region.base, region.len, region.remote_accessible) {
                r.shutdown();
                *inner.note() = e.clone();
                return Err(Error::new(ErrorKind::Internal, e));
            }
        }
        let _ = inner.rdma.set(r);
        inner.note().clear();
        inner.publish_logged();
        Ok(())
    }

    /// RDMA devices in use, or why RDMA is not in use.
    pub fn rdma_status(&self) -> std::result::Result<Vec<String>, String> {
        match self.inner.rdma.get() {
            Some(r) => Ok(r.device_names()),
            None => Err(self.inner.note().clone()),
        }
    }
}

impl Inner {
    fn note(&self) -> std::sync::MutexGuard<'_, String> {
        self.rdma_note.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Registers new regions with every RDMA device; on failure the engine registration of
    /// those regions is undone.
    pub(super) fn rdma_register(&self, ranges: &[(u64, u64)], remote: bool) -> Result<()> {
        let Some(r) = self.rdma.get() else {
            return Ok(());
        };
        for (i, &(base, len)) in ranges.iter().enumerate() {
            if let Err(e) = r.register(base, len, remote) {
                for &(b, _) in &ranges[..i] {
                    r.unregister(b);
                }
                for &(b, _) in ranges {
                    let _ = self.registry.unregister(b);
                }
                return Err(Error::new(ErrorKind::Internal, e));
            }
        }
        Ok(())
    }

    pub(super) fn rdma_unregister(&self, base: u64) {
        if let Some(r) = self.rdma.get() {
            r.unregister(base);
        }
    }

    /// With RDMA installed, publishes `"rdma"`, the devices, per-device keys (buffers named by
    /// location) and a priority matrix, as Mooncake's RDMA transport does. TCP keys stay, so a
    /// tidewire peer without RDMA can still reach this engine.
    pub(super) fn add_rdma_desc(&self, d: &mut SegmentDesc) {
        let Some(r) = self.rdma.get() else {
            return;
        };
        let regions = self.registry.snapshot();
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

    /// The RDMA route to a segment when both sides can use RDMA; otherwise `None` (TCP), with
    /// one log line saying why when either side publishes RDMA.
    pub(super) fn rdma_route(
        &self,
        name: &str,
        rpc: &(String, u16),
        desc: &SegmentDesc,
    ) -> Option<Route> {
        let theirs = rdma::peer_usable(desc);
        match (self.rdma.get(), theirs) {
            (Some(r), Ok(())) => Some(Route::Rdma(RdmaPeer::new(
                r.clone(),
                name,
                rpc.clone(),
                Arc::new(desc.clone()),
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
        }
    }
}
