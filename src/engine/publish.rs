//! Descriptor publishing: this engine's segment descriptor as peers see it, the metadata keys it
//! lives under, and keeping it current on the metadata server.

use super::Inner;
use crate::error::Result;
use crate::log::Level;
use crate::metadata::{BufferDesc, SegmentDesc};

/// Metadata-server key names, as Mooncake spells them. The cluster prefix
/// (`MC_METADATA_CLUSTER_ID`) is read once, when the engine is created.
pub(super) struct MetadataKeys {
    prefix: String,
}

impl MetadataKeys {
    /// Keys under `mooncake/` or `mooncake/<cluster id>/`.
    pub(super) fn from_env() -> MetadataKeys {
        let prefix = match std::env::var("MC_METADATA_CLUSTER_ID") {
            Ok(c) if !c.is_empty() => format!("mooncake/{c}/"),
            _ => "mooncake/".to_string(),
        };
        MetadataKeys { prefix }
    }

    /// The prefix every key starts with (what an etcd store watches).
    pub(super) fn prefix(&self) -> &str {
        &self.prefix
    }

    /// Key of a segment's descriptor.
    pub(super) fn ram(&self, name: &str) -> String {
        if name.contains('/') {
            format!("{}{name}", self.prefix)
        } else {
            format!("{}ram/{name}", self.prefix)
        }
    }

    /// Key of a segment's RPC address.
    pub(super) fn rpc_meta(&self, name: &str) -> String {
        format!("{}rpc_meta/{name}", self.prefix)
    }
}

impl Inner {
    /// This engine's descriptor: its name and remote-accessible buffers, then each backend's
    /// keys (`backends/`).
    pub(super) fn local_desc(&self) -> SegmentDesc {
        let mut d = SegmentDesc {
            buffers: self
                .registry
                .snapshot()
                .into_iter()
                .filter(|r| r.remote_accessible)
                .map(|r| BufferDesc {
                    name: self.name.clone(),
                    addr: r.base,
                    length: r.len,
                    ..Default::default()
                })
                .collect(),
            devices: Vec::new(),
            name: self.name.clone(),
            priority_matrix: None,
            protocol: "tcp".to_string(),
            rdma_server_name: String::new(),
            tcp_data_host: String::new(),
            tcp_data_port: 0,
            tcp_proto_version: 0,
            timestamp: crate::metadata::descriptor::timestamp_now(),
            tw_host_id: String::new(),
            tw_pid: 0,
            tw_token: 0,
            tw_token_addr: 0,
            tw_version: 0,
            tw_shm_ctl: 0,
            tw_shm: Vec::new(),
        };
        self.publish_backends(&mut d);
        d
    }

    pub(super) fn publish(&self) -> Result<()> {
        match &self.store {
            Some(store) => store.put(&self.keys.ram(&self.name), &self.local_desc().encode()),
            None => Ok(()),
        }
    }

    pub(super) fn publish_logged(&self) {
        if let Err(e) = self.publish() {
            tw_log!(Level::Warn, "publishing segment {}: {e}", self.name);
        }
    }
}
