//! Route choice: fetching a segment's descriptor (from the peer or the metadata server) and
//! asking the backends (`backends/`, in order) which one reaches it: RDMA when both sides can,
//! memcpy for this process, TCP (switching to the verified same-host path, with shared buffers
//! mapped over it) otherwise, or none for a protocol this engine cannot speak.

use super::Inner;
use super::segments::{LOCAL_SEGMENT, Segment, SegmentId};
use crate::error::{Error, ErrorKind, Result, fail};
use crate::metadata::SegmentDesc;
use crate::metadata::rpc::{self, MsgType};
use crate::transport::{PeerSegment, Route};
use std::sync::{Arc, RwLock};

impl Inner {
    /// Where a segment's RPC port is.
    pub(super) fn rpc_address(&self, name: &str) -> Result<(String, u16)> {
        match &self.store {
            None => crate::metadata::parse_host_port(name, crate::metadata::DEFAULT_HANDSHAKE_PORT),
            Some(store) => {
                let body = store.get(&self.keys.rpc_meta(name))?.ok_or_else(|| {
                    Error::new(
                        ErrorKind::UnknownSegment,
                        format!("no rpc_meta for {name:?} on the metadata server"),
                    )
                })?;
                let v: serde_json::Value = serde_json::from_slice(&body).map_err(|e| {
                    Error::new(ErrorKind::Metadata, format!("rpc_meta of {name}: {e}"))
                })?;
                let host = v
                    .get("ip_or_host_name")
                    .and_then(|h| h.as_str())
                    .unwrap_or_default();
                let port = v.get("rpc_port").and_then(|p| p.as_u64()).unwrap_or(0);
                if host.is_empty() || port == 0 || port > 65535 {
                    return fail(
                        ErrorKind::Metadata,
                        format!("rpc_meta of {name} is incomplete: {v}"),
                    );
                }
                Ok((host.to_string(), port as u16))
            }
        }
    }

    pub(super) fn fetch_segment(&self, name: &str) -> Result<Segment> {
        let (host, port) = self.rpc_address(name).map_err(|e| {
            Error::new(
                ErrorKind::UnknownSegment,
                format!("segment {name:?}: {}", e.message()),
            )
        })?;
        let desc = match &self.store {
            None => {
                let body = rpc::call(
                    self.rpc_peer(&host, port),
                    MsgType::Metadata,
                    self.local_desc().encode().as_bytes(),
                )
                .map_err(|e| {
                    Error::new(
                        ErrorKind::UnknownSegment,
                        format!("segment {name:?}: {}", e.message()),
                    )
                })?;
                SegmentDesc::decode(&body)?
            }
            Some(store) => {
                let body = store.get(&self.keys.ram(name))?.ok_or_else(|| {
                    Error::new(
                        ErrorKind::UnknownSegment,
                        format!("segment {name:?} is not on the metadata server"),
                    )
                })?;
                SegmentDesc::decode(&body)?
            }
        };
        // A name that turns out to be this engine's own segment is the memcpy route; every
        // other segment goes to the first backend that takes it.
        let route = if desc.name == self.name {
            Some(self.own_route.clone())
        } else {
            let rpc = (host.clone(), port);
            self.connect(&PeerSegment {
                name,
                rpc: &rpc,
                desc: &desc,
            })?
        };
        Ok(Segment {
            name: name.to_string(),
            rpc: (host, port),
            state: RwLock::new((Arc::new(desc), route)),
        })
    }

    /// The route to segment `id` for a submit, through a one-entry cache (requests of a batch
    /// usually share a segment). `Unsupported` when the peer speaks a protocol this engine
    /// cannot.
    pub(crate) fn route(
        &self,
        id: SegmentId,
        cache: &mut Option<(SegmentId, Route)>,
    ) -> Result<Route> {
        if id == LOCAL_SEGMENT {
            return Ok(self.own_route.clone());
        }
        if let Some((cid, r)) = cache {
            if *cid == id {
                return Ok(r.clone());
            }
        }
        let seg = self.segment(id)?;
        let Some(r) = seg.route() else {
            return fail(
                ErrorKind::Unsupported,
                format!(
                    "segment {} speaks {:?}, which this engine does not",
                    seg.name,
                    seg.desc().protocol
                ),
            );
        };
        *cache = Some((id, r.clone()));
        Ok(r)
    }

    /// Checks that segment `id` can be reached, for scatter validation.
    pub(crate) fn route_kind(
        &self,
        id: SegmentId,
        cache: &mut Option<(SegmentId, Route)>,
    ) -> std::result::Result<(), ErrorKind> {
        self.route(id, cache).map(|_| ()).map_err(|e| e.kind())
    }
}
