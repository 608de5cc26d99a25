//! Same-host checks: whether a peer engine lives in this process (memcpy) or is a verified
//! tidewire process on this host (`process_vm_*` copies instead of TCP payloads).

use super::Inner;
use crate::log::Level;
use crate::memory::Registry;
use crate::metadata::SegmentDesc;
use crate::transport::samehost;
use std::sync::Weak;

impl Inner {
    /// The registry of a peer engine living in this process, when the shortcut is enabled.
    pub(super) fn in_process_peer(&self, desc: &SegmentDesc) -> Option<Weak<Registry>> {
        if !self.cfg.same_host || desc.tw_version == 0 || desc.tw_pid != std::process::id() {
            return None;
        }
        samehost::find_in_process(desc.tw_token, &self.cfg.auth_key)
    }

    /// Pid of a verified tidewire peer on this host, or 0 (plain TCP), with one log line why.
    pub(super) fn same_host_pid(&self, desc: &SegmentDesc) -> u32 {
        // Version 1 peers do not take "copy done" frames (their `unregister` would not wait for
        // our copies): plain TCP.
        if !self.cfg.same_host
            || desc.tw_version < 2
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

    /// Whether process `pid` holds the server end of a fresh connection to `host:port` (the
    /// kernel's socket table), with one log line when not.
    pub(super) fn serves_data_port(&self, pid: u32, host: &str, port: u16) -> bool {
        let conn = crate::metadata::rpc::connect(host, port, self.cfg.connect_timeout);
        let ok = conn.as_ref().is_ok_and(|c| {
            // With a key, prove it first (a keyed server would otherwise log the probe as an
            // intruder); then the server has accepted, and its socket names the owner.
            let by = std::time::Instant::now() + self.cfg.connect_timeout;
            let purpose = crate::auth::Purpose::Data;
            crate::auth::client(&mut &*c, &self.cfg.auth_key, purpose, by).is_ok()
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
