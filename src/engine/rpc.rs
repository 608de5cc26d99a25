//! The RPC side: answering peers (descriptor, probe, notifications, RDMA handshakes), sending
//! notifications and probes.

use super::segments::{LOCAL_SEGMENT, SegmentId};
use super::{Engine, Inner, Notification};
use crate::error::{Error, ErrorKind, Result, fail};
use crate::log::Level;
use crate::metadata::rpc::{self, MsgType};
use std::sync::Weak;

impl Engine {
    /// Sends a notification to the owner of segment `id` over its RPC port.
    pub fn send_notify(&self, id: SegmentId, name: &str, msg: &str) -> Result<()> {
        self.inner.send_notify(id, name, msg)
    }

    /// Takes every notification received so far, oldest first.
    pub fn take_notifications(&self) -> Vec<Notification> {
        let list = self.inner.notifies.take_all();
        if list.is_empty() {
            // Receivers poll this in a tight loop (NIXL's targets): an empty answer gives the
            // CPU up once, so the server threads that queue the next notification can run.
            std::thread::yield_now();
        }
        list
    }

    /// Probes a peer's RPC port (`host:port` or a metadata-mode segment name).
    pub fn probe(&self, name: &str) -> Result<()> {
        let (host, port) = self.inner.rpc_address(name)?;
        let reply = rpc::call(self.inner.rpc_peer(&host, port), MsgType::Probe, b"{}")?;
        let v: serde_json::Value = serde_json::from_slice(&reply)
            .map_err(|e| Error::new(ErrorKind::Protocol, format!("probe reply: {e}")))?;
        if v.get("status").and_then(|s| s.as_str()) == Some("success") {
            Ok(())
        } else {
            fail(ErrorKind::Protocol, format!("probe reply {v}"))
        }
    }
}

impl Inner {
    /// How this engine calls the RPC port `host:port`: its deadlines, frame cap and key.
    pub(super) fn rpc_peer<'a>(&'a self, host: &'a str, port: u16) -> rpc::Peer<'a> {
        rpc::Peer {
            host,
            port,
            timeout: self.cfg.connect_timeout,
            max_len: self.cfg.handshake_max_len,
            key: &self.cfg.auth_key,
        }
    }

    pub(super) fn send_notify(&self, id: SegmentId, name: &str, msg: &str) -> Result<()> {
        if id == LOCAL_SEGMENT {
            let queued = self.notifies.push(Notification {
                name: name.into(),
                msg: msg.into(),
            });
            return if queued {
                Ok(())
            } else {
                fail(ErrorKind::Busy, "the notification queue is full")
            };
        }
        let seg = self.segment(id)?;
        let body = serde_json::json!({"name": name, "notify_msg": msg}).to_string();
        let reply = rpc::call(
            self.rpc_peer(&seg.rpc.0, seg.rpc.1),
            MsgType::Notify,
            body.as_bytes(),
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
pub(super) fn handle_rpc(weak: &Weak<Inner>, ty: MsgType, body: &[u8]) -> Option<Vec<u8>> {
    let inner = weak.upgrade()?;
    let reply = match ty {
        MsgType::Metadata => inner.local_desc().encode(),
        MsgType::Probe => r#"{"status":"success"}"#.to_string(),
        MsgType::Notify => {
            let parsed: Option<(String, String)> = serde_json::from_slice::<serde_json::Value>(body).ok().and_then(|v| {
                Some((v.get("name")?.as_str()?.to_string(), v.get("notify_msg")?.as_str()?.to_string()))
            });
            match parsed.map(|(name, msg)| inner.notifies.push(Notification { name, msg })) {
                Some(true) => r#"{"name":"","notify_msg":"success"}"#.to_string(),
                Some(false) => {
                    tw_log!(Level::Warn, "rpc: notification queue full (notify_max_count/notify_max_bytes); refusing one");
                    r#"{"name":"","notify_msg":""}"#.to_string()
                }
                None => {
                    tw_log!(Level::Warn, "rpc: malformed notification {:?}", String::from_utf8_lossy(body));
                    r#"{"name":"","notify_msg":""}"#.to_string()
                }
            }
        }
        MsgType::Connection => inner.handshake(body).unwrap_or_else(|| serde_json::json!({
            "local_gid": "", "local_lid": 0, "local_nic_path": "", "peer_nic_path": "", "qp_num": [],
            "reply_msg": "tidewire: this engine has no RDMA transport"
        })
        .to_string()),
    };
    Some(reply.into_bytes())
}
