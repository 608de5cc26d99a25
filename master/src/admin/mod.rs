//! The master's admin HTTP routes, served on its metrics address (`--metrics_host`,
//! `--metrics_port`) as Mooncake's master serves them there: Prometheus metrics, health and HA
//! role, and read-only inspection of keys and segments.
//!
//! Shapes follow Mooncake's master (same paths, content types, JSON field names, status codes
//! where a client depends on them: SGLang's `check_server` reads `/get_all_segments` and waits
//! while its body is empty). Every route is bounded:
//! - lists stop at [`AdminOptions::max_list_items`] entries and
//!   [`AdminOptions::max_list_bytes`] bytes; every list reply carries `X-Tidewire-Total` (entries
//!   in all), `X-Tidewire-Listed` and `X-Tidewire-Truncated: true|false`, and
//!   `/get_segments_detail` also a `"truncated"` field;
//! - a query string longer than [`MAX_QUERY`] bytes is refused with 400, and
//!   `/batch_query_keys` takes at most [`MAX_BATCH_QUERY_KEYS`] keys;
//! - parameters are percent-decoded to their exact bytes (`%00` is a NUL, `+` a space);
//! - at most [`MAX_LISTS_AT_ONCE`] listings are built at once (one more gets 503) and the server
//!   takes at most [`ADMIN_MAX_CONNECTIONS`] connections;
//! - every view takes the master's locks briefly (each object shard once per listing) and
//!   changes nothing (no lease, no read hold); the reply is built before a byte is written.

mod ha;
mod kv;
mod operations;
mod replies;

pub use ha::{HaStatus, HaView, RuntimeState};
use replies::*;

use super::http::{HttpLimits, HttpRequest, HttpResponse, HttpServer};
use super::{Master, objects};
use tidewire::store::disk::TierName;
use tidewire::store::proto::{MAX_KEY_LEN, code};

use std::collections::BTreeMap;
use std::net::TcpListener;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Longest query string accepted, in bytes as sent (percent-encoded).
pub const MAX_QUERY: usize = 32 << 10;
/// Most keys one `/batch_query_keys` takes.
pub const MAX_BATCH_QUERY_KEYS: usize = 1024;
/// Default cap on the entries of one listing.
pub const MAX_LIST_ITEMS: usize = 100_000;
/// Default cap on the body of one listing, in bytes.
pub const MAX_LIST_BYTES: usize = 8 << 20;
/// Listings built at once.
pub const MAX_LISTS_AT_ONCE: usize = 4;
/// Connections the admin server serves at once.
pub const ADMIN_MAX_CONNECTIONS: usize = 32;
/// Longest request head the admin server reads (the query string and the rest).
const ADMIN_MAX_HEAD: usize = MAX_QUERY + (16 << 10);

const TEXT_METRICS: &str = "text/plain; version=0.0.4";
const TEXT_UTF8: &str = "text/plain; charset=utf-8";
pub(super) const JSON: &str = "application/json; charset=utf-8";
/// Mooncake's UNAVAILABLE_IN_CURRENT_MODE.
pub(super) const UNAVAILABLE_IN_CURRENT_MODE: i32 = -1011;
/// Mooncake's JOB_NOT_FOUND.
pub(super) const JOB_NOT_FOUND: i32 = -1402;

/// Whether a segment name is a disk tier's.
fn is_disk(name: &str) -> bool {
    name.starts_with(tidewire::store::disk::TIER_PREFIX)
}

/// A standby's (or a recovering leader's) answer to service routes, as Mooncake's.
fn not_active() -> HttpResponse {
    error(
        503,
        UNAVAILABLE_IN_CURRENT_MODE,
        "service plane is not active",
    )
}

/// Every route served, with its method (Mooncake's master serves each path for one method,
/// `/api/v1/tenant_quotas` for three).
pub const ROUTES: [(&str, &str); 23] = [
    ("GET", "/metrics"),
    ("GET", "/metrics/summary"),
    ("GET", "/health"),
    ("GET", "/get_all_keys"),
    ("GET", "/get_all_segments"),
    ("GET", "/get_segments_detail"),
    ("GET", "/query_key"),
    ("GET", "/batch_query_keys"),
    ("GET", "/query_segment"),
    ("GET", "/ha_status"),
    ("GET", "/leader"),
    ("GET", "/role"),
    ("POST", "/api/v1/drain_jobs"),
    ("GET", "/api/v1/drain_jobs/query"),
    ("POST", "/api/v1/drain_jobs/cancel"),
    ("GET", "/api/v1/segments/status"),
    ("GET", "/api/v1/tenant_quotas"),
    ("PUT", "/api/v1/tenant_quotas"),
    ("DELETE", "/api/v1/tenant_quotas"),
    ("POST", "/api/v1/remove_all"),
    ("GET", "/kv_events/status"),
    ("GET", "/kv_events/snapshot"),
    ("GET", "/kv_events/replay"),
];

/// Caps on listings.
#[derive(Debug, Clone, Copy)]
pub struct AdminOptions {
    /// Most entries in one listing ([`MAX_LIST_ITEMS`]).
    pub max_list_items: usize,
    /// Most bytes in one listing's body ([`MAX_LIST_BYTES`]).
    pub max_list_bytes: usize,
}

impl Default for AdminOptions {
    fn default() -> Self {
        AdminOptions {
            max_list_items: MAX_LIST_ITEMS,
            max_list_bytes: MAX_LIST_BYTES,
        }
    }
}

/// The admin routes of one master.
pub struct Admin {
    master: Arc<Master>,
    ha: Arc<HaStatus>,
    opts: AdminOptions,
    lists: Arc<AtomicUsize>,
}

/// A listing in progress (counted against [`MAX_LISTS_AT_ONCE`]), until its reply is written.
struct ListSlot(Arc<AtomicUsize>);

impl Drop for ListSlot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Admin {
    /// The routes of `master`, reporting `ha`.
    pub fn new(master: Arc<Master>, ha: Arc<HaStatus>, opts: AdminOptions) -> Arc<Admin> {
        Arc::new(Admin {
            master,
            ha,
            opts,
            lists: Arc::new(AtomicUsize::new(0)),
        })
    }

    /// Serves the routes on `listener` (bound by the caller to exactly the configured address).
    pub fn serve(self: &Arc<Self>, listener: TcpListener) -> std::io::Result<HttpServer> {
        let a = self.clone();
        HttpServer::start_with(
            listener,
            Arc::new(move |r| a.handle(r)),
            HttpLimits {
                max_head: ADMIN_MAX_HEAD,
                max_connections: ADMIN_MAX_CONNECTIONS,
            },
        )
    }

    /// Answers one request.
    pub fn handle(&self, r: &HttpRequest) -> HttpResponse {
        let methods: Vec<&str> = ROUTES
            .iter()
            .filter(|(_, p)| *p == r.path)
            .map(|(m, _)| *m)
            .collect();
        if methods.is_empty() {
            return HttpResponse::new(404, "text/plain", "not found");
        }
        if !methods.contains(&r.method.as_str()) {
            return HttpResponse::new(405, "text/plain", "method not allowed")
                .header("Allow", methods.join(", "));
        }
        if r.raw_query.len() > MAX_QUERY {
            return error(
                400,
                code::INVALID_PARAMS,
                &format!(
                    "query string of {} bytes exceeds {MAX_QUERY}",
                    r.raw_query.len()
                ),
            );
        }
        match (r.method.as_str(), r.path.as_str()) {
            (_, "/metrics") => HttpResponse::new(200, TEXT_METRICS, self.master.metrics_text()),
            (_, "/metrics/summary") => HttpResponse::new(200, TEXT_METRICS, self.summary()),
            (_, "/health") => self.health(),
            (_, "/role") => HttpResponse::new(200, TEXT_UTF8, self.ha.view().state.role()),
            (_, "/kv_events/status") => self.kv_status(),
            (_, "/kv_events/replay") => self.kv_replay(r),
            (_, "/ha_status") => HttpResponse::new(200, TEXT_UTF8, self.ha.view().state.as_str()),
            (_, "/leader") => {
                let v = self.ha.view();
                json(
                    200,
                    &LeaderReply {
                        present: v.leader.is_some(),
                        leader_address: v.leader,
                        view_version: v.view_version,
                    },
                )
            }
            // Mooncake checks these parameters before the service plane.
            (_, "/api/v1/drain_jobs") => self.create_drain_job(r),
            (_, "/api/v1/drain_jobs/query") | (_, "/api/v1/drain_jobs/cancel") => self.drain_job(r),
            (_, "/api/v1/segments/status") => self.segment_status(r),
            ("PUT", "/api/v1/tenant_quotas") => self.put_tenant_quota(r),
            ("DELETE", "/api/v1/tenant_quotas") => self.delete_tenant_quota(r),
            _ if !self.master.serving() => not_active(),
            (_, "/api/v1/tenant_quotas") => self.get_tenant_quotas(r),
            (_, "/api/v1/remove_all") => self.remove_all(r),
            (_, "/query_key") => self.query_key(r),
            (_, "/batch_query_keys") => self.batch_query_keys(r),
            (_, "/query_segment") => self.query_segment(r),
            (_, path) => {
                let Some(slot) = self.list_slot() else {
                    return HttpResponse::new(
                        503,
                        "text/plain",
                        format!("busy: {MAX_LISTS_AT_ONCE} listings in progress"),
                    )
                    .header("Retry-After", "1");
                };
                match path {
                    "/get_all_keys" => self.all_keys(slot),
                    "/kv_events/snapshot" => self.kv_snapshot(r),
                    "/get_all_segments" => self.all_segments(),
                    _ => self.segments_detail(),
                }
            }
        }
    }

    fn list_slot(&self) -> Option<ListSlot> {
        if self.lists.fetch_add(1, Ordering::AcqRel) >= MAX_LISTS_AT_ONCE {
            self.lists.fetch_sub(1, Ordering::AcqRel);
            return None;
        }
        Some(ListSlot(self.lists.clone()))
    }

    fn summary(&self) -> String {
        let v = self.ha.view();
        let segs = self.master.segment_details();
        let used: u64 = segs.iter().map(|s| s.used).sum();
        let cap: u64 = segs.iter().map(|s| s.capacity).sum();
        let mut s = format!(
            "role={}, state={}, service_ready={}, master={{keys={}, segments={}, clients={}, \
             allocated_bytes={used}, capacity_bytes={cap}, evictions={}}}, ha={{enabled={}}}",
            v.state.role(),
            v.state.as_str(),
            self.master.serving(),
            self.master.object_count(),
            segs.len(),
            self.master.client_count(),
            self.master.metrics.evictions.load(Ordering::Relaxed),
            self.ha.enabled(),
        );
        if let Some(l) = &v.leader {
            s.push_str(&format!(", leader={l}"));
            if let Some(n) = v.view_version {
                s.push_str(&format!(", view_version={n}"));
            }
        }
        s
    }

    fn health(&self) -> HttpResponse {
        let v = self.ha.view();
        json(
            200,
            &HealthReply {
                status: "ok",
                role: v.state.role(),
                ha_state: v.state.as_str(),
                service_ready: self.master.serving(),
                leader_address: v.leader,
                view_version: v.view_version,
            },
        )
    }

    /// The key in parameter `key`: present, non-empty, UTF-8, at most `MAX_KEY_LEN` bytes.
    fn key_param(r: &HttpRequest) -> Result<String, HttpResponse> {
        let bad = |m: &str| Err(error(400, code::INVALID_PARAMS, m));
        let Some(raw) = r.param("key").filter(|k| !k.is_empty()) else {
            return bad("Missing key query parameter");
        };
        if raw.len() > MAX_KEY_LEN {
            return bad(&format!("key of {} bytes exceeds {MAX_KEY_LEN}", raw.len()));
        }
        String::from_utf8(raw).or_else(|_| bad("key is not UTF-8 (no stored key can match)"))
    }

    fn query_key(&self, r: &HttpRequest) -> HttpResponse {
        let key = match Self::key_param(r) {
            Ok(k) => k,
            Err(resp) => return resp,
        };
        match self.master.query_key(&key) {
            Ok(info) => json(
                200,
                &QueryKeyReply {
                    success: true,
                    // Mooncake lists memory replicas only.
                    data: info
                        .replicas
                        .iter()
                        .filter(|r| !is_disk(&r.endpoint))
                        .map(Descriptor::from)
                        .collect(),
                    size: info.size,
                    lease_remaining_ms: info.lease_left.map_or(0, |d| d.as_millis() as u64),
                    hard_pinned: info.hard_pin,
                    soft_pinned: info.soft_pin,
                },
            ),
            Err(c) => error(404, c, code_name(c)),
        }
    }

    fn batch_query_keys(&self, r: &HttpRequest) -> HttpResponse {
        let simple = |m: &str| {
            json(
                400,
                &SimpleErrorReply {
                    success: false,
                    error: m,
                },
            )
        };
        let raw = r.param("keys").unwrap_or_default();
        if raw.is_empty() {
            return simple("No keys provided. Use ?keys=key1,key2,...");
        }
        let parts: Vec<&[u8]> = raw.split(|b| *b == b',').collect();
        if parts.len() > MAX_BATCH_QUERY_KEYS {
            return simple(&format!(
                "{} keys exceed the {MAX_BATCH_QUERY_KEYS} one request takes",
                parts.len()
            ));
        }
        let mut data = BTreeMap::new();
        for p in parts {
            let item = match std::str::from_utf8(p) {
                Ok(k) if !k.is_empty() => match self.master.query_key(k) {
                    Ok(info) => self.batch_item(&info),
                    Err(c) => BatchItem::failed(code_name(c)),
                },
                // No stored key is empty (Mooncake: not found).
                Ok(_) => BatchItem::failed(code_name(code::OBJECT_NOT_FOUND)),
                Err(_) => BatchItem::failed(code_name(code::INVALID_PARAMS)),
            };
            data.insert(String::from_utf8_lossy(p).into_owned(), item);
        }
        json(
            200,
            &BatchReply {
                success: true,
                data,
            },
        )
    }

    /// One found key in Mooncake's shape: memory replicas in `values`, disk-tier replicas
    /// (written by their owner to its local disk) in `local_disk_values`; tidewire has no
    /// shared-file (`disk_values`) or NVMe-oF (`nof_values`) replicas.
    fn batch_item(&self, info: &objects::KeyInfo) -> BatchItem {
        let mut values = Vec::new();
        let mut local = Vec::new();
        for r in &info.replicas {
            match TierName::parse(&r.endpoint) {
                None => values.push(Descriptor::from(r)),
                Some(t) => local.push(LocalDiskReplica {
                    client_id: self
                        .master
                        .segment_detail(&r.endpoint)
                        .map_or_else(String::new, |s| format!("0-{}", s.client_id)),
                    object_size: r.len,
                    transport_endpoint: t.owner,
                }),
            }
        }
        BatchItem {
            ok: true,
            error: None,
            values: Some(values),
            disk_values: None,
            local_disk_values: (!local.is_empty()).then_some(local),
            nof_values: None,
        }
    }

    fn query_segment(&self, r: &HttpRequest) -> HttpResponse {
        let Some(raw) = r.param("segment").filter(|s| !s.is_empty()) else {
            return HttpResponse::new(400, "text/plain", "Missing segment query parameter");
        };
        let Ok(name) = String::from_utf8(raw) else {
            return HttpResponse::new(400, "text/plain", "segment name is not UTF-8");
        };
        match self.master.segment_detail(&name) {
            Some(s) => HttpResponse::new(
                200,
                TEXT_METRICS,
                format!(
                    "{name}\nUsed(bytes): {}\nCapacity(bytes) : {}\n",
                    s.used, s.capacity
                ),
            ),
            // Mooncake's answer to an unknown segment.
            None => HttpResponse::new(500, TEXT_METRICS, "Failed to query segment"),
        }
    }

    /// Every key, one per line, as Mooncake lists them (no cap): streamed one object shard at
    /// a time, so neither the whole listing nor any lock is held while the peer reads.
    fn all_keys(&self, slot: ListSlot) -> HttpResponse {
        let master = self.master.clone();
        HttpResponse::streamed(200, TEXT_METRICS, move |out| {
            let _slot = &slot;
            master.each_key_chunk(out)
        })
    }

    fn all_segments(&self) -> HttpResponse {
        let segs = self.master.segment_details();
        let mut body = Vec::new();
        let mut listed = 0;
        for s in &segs {
            if listed >= self.opts.max_list_items
                || body.len() + s.name.len() + 1 > self.opts.max_list_bytes
            {
                break;
            }
            body.extend_from_slice(s.name.as_bytes());
            body.push(b'\n');
            listed += 1;
        }
        list_headers(
            HttpResponse::new(200, TEXT_METRICS, body),
            segs.len(),
            listed,
        )
    }

    fn segments_detail(&self) -> HttpResponse {
        let segs = self.master.segment_details();
        let mut items: Vec<Vec<u8>> = Vec::new();
        let mut bytes = 0;
        for s in &segs {
            let status = if s.suspended {
                "SUSPENDED"
            } else if s.unhealthy {
                "UNHEALTHY"
            } else {
                "OK"
            };
            let item = SegmentItem {
                segment_name: s.name.clone(),
                segment_id: format!("0-{}", s.id),
                client_id: format!("0-{}", s.client_id),
                base_address: format!("{:#x}", s.base),
                size_bytes: s.size,
                size_human: gib(s.size),
                te_endpoint: s.name.clone(),
                protocol: "",
                status,
                allocator_used_bytes: s.used,
                allocator_capacity_bytes: s.capacity,
                allocator_usage_percent: if s.capacity > 0 {
                    s.used as f64 / s.capacity as f64 * 100.0
                } else {
                    0.0
                },
            };
            let Ok(b) = serde_json::to_vec(&item) else {
                continue;
            };
            if items.len() >= self.opts.max_list_items
                || bytes + b.len() + 1 > self.opts.max_list_bytes
            {
                break;
            }
            bytes += b.len() + 1;
            items.push(b);
        }
        let truncated = items.len() < segs.len();
        let mut body = format!("{{\"total_segments\":{},\"segments\":[", segs.len()).into_bytes();
        for (i, b) in items.iter().enumerate() {
            if i > 0 {
                body.push(b',');
            }
            body.extend_from_slice(b);
        }
        body.extend_from_slice(format!("],\"truncated\":{truncated}}}").as_bytes());
        list_headers(HttpResponse::new(200, JSON, body), segs.len(), items.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_read_as_mooncake_writes_them() {
        assert_eq!(gib(16 << 30), "16 GiB");
        assert_eq!(gib(1 << 30), "1 GiB");
        assert_eq!(gib(256 << 20), "0.25 GiB");
        assert_eq!(gib(0), "0 GiB");
        assert_eq!(gib(1 << 20), "0.000976562 GiB");
    }

    #[test]
    fn roles_follow_the_state() {
        assert_eq!(RuntimeState::Serving.role(), "leader");
        assert_eq!(RuntimeState::LeaderWarmup.role(), "leader");
        assert_eq!(RuntimeState::CatchingUp.role(), "standby");
        assert_eq!(RuntimeState::CatchingUp.as_str(), "catching_up");
    }
}
