//! Descriptor publishing: this engine's segment descriptor as peers see it, the metadata keys it
//! lives under, and keeping it current on the metadata server.

use super::{Inner, TW_PROTOCOL_VERSION};
use crate::error::Result;
use crate::log::Level;
use crate::metadata::descriptor::SharedBufDesc;
use crate::metadata::{BufferDesc, SegmentDesc};
use crate::transport::samehost;

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
    pub(super) fn local_desc(&self) -> SegmentDesc {
        let mut d = self.tcp_desc();
        self.add_rdma_desc(&mut d);
        d
    }

    fn tcp_desc(&self) -> SegmentDesc {
        let (shm_ctl, shm) = match self.registry.shared().published() {
            Some((ctl, list)) => (
                ctl,
                list.into_iter()
                    .map(|b| SharedBufDesc {
                        addr: b.addr,
                        len: b.len,
                        fd: b.fd,
                        slot: b.slot,
                        generation: b.gen_,
                    })
                    .collect(),
            ),
            None => (0, Vec::new()),
        };
        SegmentDesc {
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
            tcp_data_host: self.rpc_host.clone(),
            tcp_data_port: self.data_port,
            tcp_proto_version: self.cfg.tcp_proto,
            timestamp: crate::metadata::descriptor::timestamp_now(),
            tw_host_id: samehost::host_id().to_string(),
            tw_pid: std::process::id(),
            tw_token: *self.token,
            tw_token_addr: &*self.token as *const u64 as u64,
            tw_version: TW_PROTOCOL_VERSION,
            tw_shm_ctl: shm_ctl,
            tw_shm: shm,
        }
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
