//! The admin routes' reply bodies in Mooncake's JSON shapes, and the helpers that build
//! responses.

use super::super::http::HttpResponse;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use tidewire::store::proto::{ReplicaDesc, code};

use super::{JOB_NOT_FOUND, JSON, UNAVAILABLE_IN_CURRENT_MODE};

/// Mooncake's `AllocatedBuffer::Descriptor` in JSON.
#[derive(Serialize)]
pub(super) struct Descriptor {
    #[serde(rename = "size_")]
    pub(super) size: u64,
    #[serde(rename = "buffer_address_")]
    pub(super) buffer_address: u64,
    /// The master is not told the owner's transport: empty.
    #[serde(rename = "protocol_")]
    pub(super) protocol: &'static str,
    #[serde(rename = "transport_endpoint_")]
    pub(super) transport_endpoint: String,
}

impl From<&ReplicaDesc> for Descriptor {
    fn from(r: &ReplicaDesc) -> Self {
        Descriptor {
            size: r.len,
            buffer_address: r.addr,
            protocol: "",
            transport_endpoint: r.endpoint.clone(),
        }
    }
}

#[derive(Serialize)]
pub(super) struct ErrorReply<'a> {
    pub(super) success: bool,
    pub(super) error_code: i32,
    pub(super) error_message: &'a str,
}

#[derive(Serialize)]
pub(super) struct SimpleErrorReply<'a> {
    pub(super) success: bool,
    pub(super) error: &'a str,
}

#[derive(Serialize)]
pub(super) struct QueryKeyReply {
    pub(super) success: bool,
    pub(super) data: Vec<Descriptor>,
    // tidewire additions (a client reading `data` ignores them):
    pub(super) size: u64,
    pub(super) lease_remaining_ms: u64,
    pub(super) hard_pinned: bool,
    pub(super) soft_pinned: bool,
}

/// Mooncake's `HttpLocalDiskReplicaInfo`: a replica on its owner's local disk.
#[derive(Serialize)]
pub(super) struct LocalDiskReplica {
    pub(super) client_id: String,
    pub(super) object_size: u64,
    pub(super) transport_endpoint: String,
}

/// Mooncake's `HttpBatchQueryKeyResult`: every field always present (`null` when unset).
#[derive(Serialize)]
pub(super) struct BatchItem {
    pub(super) ok: bool,
    pub(super) error: Option<&'static str>,
    pub(super) values: Option<Vec<Descriptor>>,
    /// Shared-file replicas: tidewire has none.
    pub(super) disk_values: Option<Vec<()>>,
    pub(super) local_disk_values: Option<Vec<LocalDiskReplica>>,
    /// NVMe-oF replicas: tidewire has none.
    pub(super) nof_values: Option<Vec<()>>,
}

impl BatchItem {
    pub(super) fn failed(error: &'static str) -> BatchItem {
        BatchItem {
            ok: false,
            error: Some(error),
            values: None,
            disk_values: None,
            local_disk_values: None,
            nof_values: None,
        }
    }
}

#[derive(Serialize)]
pub(super) struct BatchReply {
    pub(super) success: bool,
    pub(super) data: BTreeMap<String, BatchItem>,
}

#[derive(Serialize)]
pub(super) struct HealthReply<'a> {
    pub(super) status: &'a str,
    pub(super) role: &'a str,
    pub(super) ha_state: &'a str,
    pub(super) service_ready: bool,
    pub(super) leader_address: Option<String>,
    pub(super) view_version: Option<u64>,
}

#[derive(Serialize)]
pub(super) struct LeaderReply {
    pub(super) present: bool,
    pub(super) leader_address: Option<String>,
    pub(super) view_version: Option<u64>,
}

/// Mooncake's `CreateDrainJobRequest` (missing fields take its defaults).
#[derive(Deserialize)]
pub(super) struct DrainJobRequest {
    #[serde(default)]
    pub(super) segments: Vec<String>,
    #[serde(default)]
    pub(super) target_segments: Vec<String>,
    #[serde(default)]
    #[allow(dead_code)] // read for its type only: no drain runs
    pub(super) max_concurrency: u32,
}

/// Mooncake's `HttpTenantQuotaPolicyRequest`.
#[derive(Deserialize)]
pub(super) struct TenantQuotaRequest {
    #[serde(default)]
    pub(super) requested_quota_bytes: u64,
}

/// Mooncake's `HttpSegmentStatusResponse`.
#[derive(Serialize)]
pub(super) struct SegmentStatusReply {
    pub(super) success: bool,
    pub(super) segment: String,
    pub(super) status: i32,
    pub(super) status_name: &'static str,
    pub(super) error_code: i32,
    pub(super) error_message: &'static str,
}

/// Mooncake's `HttpRemoveAllResponse`.
#[derive(Serialize)]
pub(super) struct RemoveAllReply {
    pub(super) success: bool,
    pub(super) removed_count: i64,
}

#[derive(Serialize)]
pub(super) struct SegmentItem {
    pub(super) segment_name: String,
    pub(super) segment_id: String,
    pub(super) client_id: String,
    pub(super) base_address: String,
    pub(super) size_bytes: u64,
    pub(super) size_human: String,
    pub(super) te_endpoint: String,
    pub(super) protocol: &'static str,
    pub(super) status: &'static str,
    pub(super) allocator_used_bytes: u64,
    pub(super) allocator_capacity_bytes: u64,
    pub(super) allocator_usage_percent: f64,
}

/// Mooncake's name of an error code.
pub(super) fn code_name(c: i32) -> &'static str {
    match c {
        code::OBJECT_NOT_FOUND => "OBJECT_NOT_FOUND",
        code::REPLICA_IS_NOT_READY => "REPLICA_IS_NOT_READY",
        code::INVALID_PARAMS => "INVALID_PARAMS",
        code::SEGMENT_NOT_FOUND => "SEGMENT_NOT_FOUND",
        UNAVAILABLE_IN_CURRENT_MODE => "UNAVAILABLE_IN_CURRENT_MODE",
        JOB_NOT_FOUND => "JOB_NOT_FOUND",
        _ => "INTERNAL_ERROR",
    }
}

pub(super) fn json(status: u16, v: &impl Serialize) -> HttpResponse {
    match serde_json::to_vec(v) {
        Ok(b) => HttpResponse::new(status, JSON, b),
        Err(e) => HttpResponse::new(500, "text/plain", format!("encoding the reply: {e}")),
    }
}

pub(super) fn error(status: u16, c: i32, message: &str) -> HttpResponse {
    json(
        status,
        &ErrorReply {
            success: false,
            error_code: c,
            error_message: message,
        },
    )
}

/// Mooncake's answer to a feature off in this mode (tenants without
/// `--enable_multi_tenants`): 409, -1011, the code's name as the message.
pub(super) fn unavailable() -> HttpResponse {
    error(
        409,
        UNAVAILABLE_IN_CURRENT_MODE,
        code_name(UNAVAILABLE_IN_CURRENT_MODE),
    )
}

/// The list headers: entries in all, listed, truncated.
pub(super) fn list_headers(r: HttpResponse, total: usize, listed: usize) -> HttpResponse {
    r.header("X-Tidewire-Total", total.to_string())
        .header("X-Tidewire-Listed", listed.to_string())
        .header("X-Tidewire-Truncated", (listed < total).to_string())
}

/// `bytes / 2^30` as C++'s default stream formatting writes a double (6 significant digits).
pub(super) fn gib(bytes: u64) -> String {
    let v = bytes as f64 / (1u64 << 30) as f64;
    if v == 0.0 {
        return "0 GiB".into();
    }
    let int_digits = v.abs().log10().floor() as i32 + 1;
    let decimals = (6 - int_digits).clamp(0, 17) as usize;
    let mut s = format!("{v:.decimals$}");
    if s.contains('.') {
        s = s.trim_end_matches('0').trim_end_matches('.').to_string();
    }
    format!("{s} GiB")
}
