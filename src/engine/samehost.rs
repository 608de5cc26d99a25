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
}
