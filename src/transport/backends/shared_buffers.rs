//! The shared-buffer backend: publishes this engine's shared buffers (`allocate_managed_buffer`,
//! see `memory::shared_buffers` for the memfd and the revocation fence), and layers a mapping of
//! a verified same-host peer's buffers over its TCP route, once the kernel confirmed that the
//! peer's pid serves the published data port (else an impostor could point us at another
//! process's buffers).

use crate::auth::{AuthKey, Purpose};
use crate::error::Result;
use crate::log::Level;
use crate::memory::Registry;
use crate::metadata::SegmentDesc;
use crate::metadata::descriptor::SharedBufDesc;
use crate::transport::shared_buffers::SharedRoute;
use crate::transport::{Backend, PeerSegment, Route};
use std::sync::Arc;
use std::time::Duration;

/// Shared buffers of one engine and the mappings of its peers'.
pub struct SharedBuffersBackend {
    connect_timeout: Duration,
    auth_key: AuthKey,
}

impl SharedBuffersBackend {
    /// `connect_timeout` bounds the probe of a peer's data port.
    pub fn new(connect_timeout: Duration, auth_key: AuthKey) -> SharedBuffersBackend {
        SharedBuffersBackend {
            connect_timeout,
            auth_key,
        }
    }

    /// Whether process `pid` holds the server end of a fresh connection to `host:port` (the
    /// kernel's socket table), with one log line when not.
    fn serves_data_port(&self, pid: u32, host: &str, port: u16) -> bool {
        let conn = crate::metadata::rpc::connect(host, port, self.connect_timeout);
        let ok = conn.as_ref().is_ok_and(|c| {
            // With a key, prove it first (a keyed server would otherwise log the probe as an
            // intruder); then the server has accepted, and its socket names the owner.
            let by = std::time::Instant::now() + self.connect_timeout;
            crate::auth::client(&mut &*c, &self.auth_key, Purpose::Data, by).is_ok()
                && crate::transport::tcp::peer_identity::peer_socket_owned_by(c, pid)
        });
        if !ok {
            tw_log!(
                Level::Info,
                "pid {pid} does not serve {host}:{port}; its shared buffers are not mapped"
            );
        }
        ok
    }
}

impl Backend for SharedBuffersBackend {
    fn name(&self) -> &'static str {
        "shared-buffers"
    }

    fn publish(&self, registry: &Registry, d: &mut SegmentDesc) {
        if let Some((ctl, list)) = registry.shared().published() {
            d.tw_shm_ctl = ctl;
            d.tw_shm = list
                .into_iter()
                .map(|b| SharedBufDesc {
                    addr: b.addr,
                    len: b.len,
                    fd: b.fd,
                    slot: b.slot,
                    generation: b.gen_,
                })
                .collect();
        }
    }

    /// Never a route of its own: it only layers over a same-host TCP route.
    fn connect(&self, _peer: &PeerSegment<'_>) -> Result<Option<Route>> {
        Ok(None)
    }

    fn upgrade(&self, peer: &PeerSegment<'_>, route: Route) -> Route {
        let desc = peer.desc;
        let Route::Tcp(tcp) = &route else {
            return route;
        };
        let addr = tcp.addr();
        let verified = addr.vm_pid != 0
            && !desc.tw_shm.is_empty()
            && self.serves_data_port(addr.vm_pid, &addr.host, addr.port);
        if !verified {
            return route;
        }
        let pid = addr.vm_pid;
        match SharedRoute::attach(
            pid,
            desc.tw_token,
            desc.tw_shm_ctl,
            &desc.tw_shm,
            tcp.clone(),
        ) {
            Some(s) => Route::Shared(Arc::new(s)),
            None => route,
        }
    }
}
