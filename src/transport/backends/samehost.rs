//! The same-host backend: publishes this engine's identity (`tw_pid`, `tw_host_id`, `tw_token`,
//! `tw_token_addr`, `tw_version`), announces the engine to others in this process, routes a peer
//! engine of this process to a checked memcpy, and tells the TCP backend whether a peer is a
//! verified tidewire process on this host (`process_vm_*` copies instead of TCP payloads).

use crate::auth::AuthKey;
use crate::error::Result;
use crate::memory::Registry;
use crate::metadata::SegmentDesc;
use crate::transport::local::MemCopy;
use crate::transport::samehost::TW_PROTOCOL_VERSION;
use crate::transport::{Backend, PeerSegment, Route};
use std::sync::{Arc, OnceLock};

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
            token: Box::new(crate::transport::samehost::new_token()),
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
        crate::transport::samehost::announce(
            *self.token,
            Arc::downgrade(registry),
            self.auth_key.clone(),
        );
        Ok(())
    }

    fn publish(&self, _registry: &Registry, d: &mut SegmentDesc) {
        d.tw_host_id = crate::transport::samehost::host_id().to_string();
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
            crate::transport::samehost::find_in_process(desc.tw_token, &self.auth_key),
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
        crate::transport::samehost::withdraw(*self.token);
    }
}
