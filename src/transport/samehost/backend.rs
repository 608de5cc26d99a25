//! The same-host backend: publishes this engine's identity (`tw_pid`, `tw_host_id`, `tw_token`,
//! `tw_token_addr`, `tw_version`), announces the engine to others in this process, routes a peer
//! engine of this process to a checked memcpy, and tells the TCP backend whether a peer is a
//! verified tidewire process on this host (`process_vm_*` copies instead of TCP payloads).

use crate::auth::AuthKey;
use crate::error::Result;
use crate::log::Level;
use crate::memory::Registry;
use crate::metadata::SegmentDesc;
use crate::transport::local::MemCopy;
use crate::transport::{Backend, PeerSegment, Route};
use std::sync::{Arc, OnceLock};

/// Protocol revision that tidewire peers publish as `tw_version`. 2: the same-host path
/// reports finished copies ("copy done" frames); peers publishing 1 get plain TCP.
pub const TW_PROTOCOL_VERSION: u32 = 2;

/// Same-host identity and in-process routes of one engine.
pub struct SameHostBackend {
    enabled: bool,
    auth_key: AuthKey,
    /// Random identity, boxed so its address (published as `tw_token_addr`) is stable and
    /// readable by a verifying peer.
    token: Box<u64>,
    registry: OnceLock<Arc<Registry>>,
}

impl SameHostBackend {
    /// A fresh identity; `enabled` is the `same_host` option.
    pub fn new(enabled: bool, auth_key: AuthKey) -> SameHostBackend {
        SameHostBackend {
            enabled,
            auth_key,
            token: Box::new(super::new_token()),
            registry: OnceLock::new(),
        }
    }

    /// The engine's random identity (also names its shared-buffer files).
    pub fn token(&self) -> u64 {
        *self.token
    }
}

impl Backend for SameHostBackend {
    fn name(&self) -> &'static str {
        "same-host"
    }

    fn start(&self, registry: &Arc<Registry>) -> Result<()> {
        let _ = self.registry.set(registry.clone());
        super::announce(*self.token, Arc::downgrade(registry), self.auth_key.clone());
        Ok(())
    }

    fn publish(&self, _registry: &Registry, d: &mut SegmentDesc) {
        d.tw_host_id = super::host_id().to_string();
        d.tw_pid = std::process::id();
        d.tw_token = *self.token;
        d.tw_token_addr = &*self.token as *const u64 as u64;
        d.tw_version = TW_PROTOCOL_VERSION;
    }

    /// A peer engine living in this process, when the shortcut is enabled: memcpy checked
    /// against its registry.
    fn connect(&self, peer: &PeerSegment<'_>) -> Result<Option<Route>> {
        let desc = peer.desc;
        if !desc.tcp_reachable()
            || !self.enabled
            || desc.tw_version == 0
            || desc.tw_pid != std::process::id()
        {
            return Ok(None);
        }
        let (Some(owner), Some(mine)) = (
            super::find_in_process(desc.tw_token, &self.auth_key),
            self.registry.get(),
        ) else {
            return Ok(None);
        };
        Ok(Some(Route::Memory(Arc::new(MemCopy::in_process(
            mine.clone(),
            owner,
        )))))
    }

    fn shutdown(&self) {
        super::withdraw(*self.token);
    }
}

/// Pid of a verified tidewire peer on this host, or 0 (plain TCP), with one log line why.
/// `enabled` is the `same_host` option.
pub fn verified_pid(desc: &SegmentDesc, enabled: bool) -> u32 {
    // Version 1 peers do not take "copy done" frames (their `unregister` would not wait for
    // our copies): plain TCP.
    if !enabled
        || desc.tw_version < 2
        || desc.tw_token == 0
        || desc.tw_pid == 0
        || desc.tw_host_id.is_empty()
        || desc.tw_host_id != super::host_id()
    {
        return 0;
    }
    match super::verify_peer(desc.tw_pid, desc.tw_token, desc.tw_token_addr) {
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
