//! Master counters and their Prometheus text form. Lock-free: one pair of atomics per operation.

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Every operation name [`tidewire::store::proto::Request::name`] returns.
pub const OPS: [&str; 13] = [
    "mount",
    "unmount",
    "ping",
    "put_start",
    "upsert_start",
    "put_end",
    "put_revoke",
    "get",
    "read_done",
    "exist",
    "remove",
    "remove_by_regex",
    "remove_all",
];

/// Request counts and latency sums per operation, plus eviction passes.
#[derive(Default)]
pub struct Metrics {
    count: [AtomicU64; OPS.len()],
    micros: [AtomicU64; OPS.len()],
    /// Eviction passes that freed something.
    pub evictions: AtomicU64,
    /// Clients suspended for missing their heartbeats (`--client_ttl`).
    pub clients_suspended: AtomicU64,
    /// Clients dropped with their segments (`--client_ttl` plus `--client_grace_sec`).
    pub clients_dropped: AtomicU64,
    /// Mooncake's families ([`Metrics::observe`]).
    pub mooncake: MooncakeCounters,
}

impl Metrics {
    /// Records one handled request.
    pub fn record(&self, op: &'static str, took: Duration) {
        if let Some(i) = OPS.iter().position(|o| *o == op) {
            self.count[i].fetch_add(1, Ordering::Relaxed);
            self.micros[i].fetch_add(took.as_micros() as u64, Ordering::Relaxed);
        }
    }

    /// Renders every metric.
    pub fn render(
        &self,
        objects: usize,
        used: u64,
        capacity: u64,
        segments: usize,
        clients: usize,
    ) -> String {
        let mut s = String::new();
        let gauge = |s: &mut String, name: &str, help: &str, v: u64| {
            let _ = writeln!(s, "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {v}");
        };
        gauge(
            &mut s,
            "tidewire_master_objects",
            "Objects stored",
            objects as u64,
        );
        gauge(
            &mut s,
            "tidewire_master_allocated_bytes",
            "Bytes allocated in segments",
            used,
        );
        gauge(
            &mut s,
            "tidewire_master_capacity_bytes",
            "Bytes mounted",
            capacity,
        );
        gauge(
            &mut s,
            "tidewire_master_segments",
            "Mounted segments",
            segments as u64,
        );
        gauge(
            &mut s,
            "tidewire_master_clients",
            "Live clients",
            clients as u64,
        );
        let _ = writeln!(
            s,
            "# HELP tidewire_master_evictions_total Eviction passes\n# TYPE tidewire_master_evictions_total counter\ntidewire_master_evictions_total {}",
            self.evictions.load(Ordering::Relaxed)
        );
        let _ = writeln!(
            s,
            "# HELP tidewire_master_clients_suspended_total Clients that missed their heartbeats for --client_ttl (no new placements until they ping)\n# TYPE tidewire_master_clients_suspended_total counter\ntidewire_master_clients_suspended_total {}",
            self.clients_suspended.load(Ordering::Relaxed)
        );
        let _ = writeln!(
            s,
            "# HELP tidewire_master_clients_dropped_total Clients dropped with their segments and objects after --client_ttl plus --client_grace_sec of silence\n# TYPE tidewire_master_clients_dropped_total counter\ntidewire_master_clients_dropped_total {}",
            self.clients_dropped.load(Ordering::Relaxed)
        );
        let _ = writeln!(
            s,
            "# HELP tidewire_master_requests_total Requests handled\n# TYPE tidewire_master_requests_total counter"
        );
        for (i, op) in OPS.iter().enumerate() {
            let n = self.count[i].load(Ordering::Relaxed);
            if n > 0 {
                let _ = writeln!(s, "tidewire_master_requests_total{{op=\"{op}\"}} {n}");
            }
        }
        let _ = writeln!(
            s,
            "# HELP tidewire_master_request_seconds_total Time spent handling requests\n# TYPE tidewire_master_request_seconds_total counter"
        );
        for (i, op) in OPS.iter().enumerate() {
            if self.count[i].load(Ordering::Relaxed) > 0 {
                let us = self.micros[i].load(Ordering::Relaxed);
                let _ = writeln!(
                    s,
                    "tidewire_master_request_seconds_total{{op=\"{op}\"}} {:.6}",
                    us as f64 / 1e6
                );
            }
        }
        s
    }
}

/// One request as Mooncake's master counts it (taken before the request is handled).
#[derive(Debug, Clone)]
pub struct Shape {
    /// Mooncake's name of the RPC (`put_start`, `get_replica_list`, ...); `None`: not counted.
    op: Option<&'static str>,
    /// Keys named (1 for the non-batch RPCs).
    items: usize,
    /// Value sizes of a PutStart's items.
    sizes: Vec<u64>,
}

/// Mooncake's RPCs that have a batch form, and whether each has one.
const BATCHED: [&str; 5] = [
    "exist_key",
    "get_replica_list",
    "put_start",
    "put_end",
    "put_revoke",
];
/// Mooncake's non-batch RPC counter families (`master_<op>_requests_total`, `_failures_total`).
pub const MOONCAKE_OPS: [&str; 11] = [
    "exist_key",
    "put_start",
    "put_end",
    "put_revoke",
    "get_replica_list",
    "remove",
    "remove_by_regex",
    "remove_all",
    "mount_segment",
    "unmount_segment",
    "ping",
];
/// Mooncake's `master_value_size_bytes` buckets.
const SIZE_BUCKETS: [u64; 7] = [4096, 65536, 262144, 1048576, 4194304, 16777216, 67108864];

impl Shape {
    /// How Mooncake would count `req`: a request naming one key as its single RPC, one naming
    /// more as the batch RPC; a removal by key once per key; a mass removal once (its later
    /// stretches are not counted again).
    pub fn of(req: &tidewire::store::proto::Request) -> Shape {
        use tidewire::store::proto::Request as R;
        let (op, items) = match req {
            R::Mount { .. } => (Some("mount_segment"), 1),
            R::Unmount { .. } => (Some("unmount_segment"), 1),
            R::Ping { .. } => (Some("ping"), 1),
            R::PutStart { items, .. } => (Some("put_start"), items.len()),
            R::PutEnd { items, .. } => (Some("put_end"), items.len()),
            R::PutRevoke { items, .. } => (Some("put_revoke"), items.len()),
            R::Get { keys, .. } => (Some("get_replica_list"), keys.len()),
            R::Exist { keys } => (Some("exist_key"), keys.len()),
            R::Remove { keys, .. } => (Some("remove"), keys.len()),
            R::RemoveByRegex { from, .. } if from.is_none_or(|f| f == 0) => {
                (Some("remove_by_regex"), 1)
            }
            R::RemoveAll { from, .. } if from.is_none_or(|f| f == 0) => (Some("remove_all"), 1),
            _ => (None, 0),
        };
        let sizes = match req {
            R::PutStart { items, .. } => items.iter().map(|i| i.size).collect(),
            _ => Vec::new(),
        };
        Shape { op, items, sizes }
    }

    /// An `Exist` of `n` keys.
    pub fn exist(n: usize) -> Shape {
        Shape {
            op: Some("exist_key"),
            items: n,
            sizes: Vec::new(),
        }
    }
}

/// Mooncake's families, counted from the requests and replies.
#[derive(Default)]
pub struct MooncakeCounters {
    /// Per [`MOONCAKE_OPS`]: requests, failures.
    single: [[AtomicU64; 2]; MOONCAKE_OPS.len()],
    /// Per [`BATCHED`]: requests, failures, partial successes, items, failed items.
    batch: [[AtomicU64; 5]; BATCHED.len()],
    put_start_alloc_failures: AtomicU64,
    /// Per [`SIZE_BUCKETS`] and `+Inf`, then the sum.
    value_sizes: [AtomicU64; SIZE_BUCKETS.len() + 1],
    value_size_sum: AtomicU64,
    /// total_get_nums_, valid_get_nums_, mem hits, mem hit bytes, file hits, file hit bytes.
    gets: [AtomicU64; 6],
    /// Eviction passes run (successful ones are [`Metrics::evictions`]) and bytes they freed.
    pub eviction_attempts: AtomicU64,
    /// Bytes eviction freed.
    pub evicted_bytes: AtomicU64,
}

impl Metrics {
    /// Counts one handled request in Mooncake's families.
    pub fn observe(&self, shape: &Shape, reply: Option<&tidewire::store::proto::Reply>) {
        use tidewire::store::proto::{Reply as P, code};
        let Some(op) = shape.op else { return };
        let c = &self.mooncake;
        let inc = |a: &AtomicU64, n: u64| {
            a.fetch_add(n, Ordering::Relaxed);
        };
        // Failed items (codes below 0; an error reply fails every item).
        let failed = match reply {
            Some(P::Error { .. }) => shape.items,
            Some(P::Codes { codes }) => codes.iter().filter(|c| **c < 0).count(),
            Some(P::Started { results }) => results.iter().filter(|r| r.code != 0).count(),
            Some(P::Replicas { results, .. }) => results.iter().filter(|r| r.code != 0).count(),
            _ => 0,
        };
        if let Some(P::Started { results }) = reply {
            let no_room = results
                .iter()
                .filter(|r| r.code == code::NO_AVAILABLE_HANDLE)
                .count();
            inc(&c.put_start_alloc_failures, no_room as u64);
            for (r, size) in results.iter().zip(&shape.sizes) {
                if r.code == 0 {
                    let b = SIZE_BUCKETS
                        .iter()
                        .position(|le| size <= le)
                        .unwrap_or(SIZE_BUCKETS.len());
                    inc(&c.value_sizes[b], 1);
                    inc(&c.value_size_sum, *size);
                }
            }
        }
        if let Some(P::Replicas { results, .. }) = reply {
            inc(&c.gets[0], results.len() as u64);
            for r in results.iter().filter(|r| r.code == 0) {
                inc(&c.gets[1], 1);
                let disk = r
                    .replicas
                    .first()
                    .is_some_and(|d| d.endpoint.starts_with(tidewire::store::disk::TIER_PREFIX));
                let (n, bytes) = if disk { (4, 5) } else { (2, 3) };
                inc(&c.gets[n], 1);
                inc(&c.gets[bytes], r.size);
            }
        }
        let batched = BATCHED.iter().position(|b| *b == op);
        match batched {
            Some(i) if shape.items > 1 => {
                let b = &c.batch[i];
                inc(&b[0], 1);
                inc(&b[3], shape.items as u64);
                inc(&b[4], failed as u64);
                if failed == shape.items {
                    inc(&b[1], 1);
                } else if failed > 0 {
                    inc(&b[2], 1);
                }
            }
            _ => {
                let Some(i) = MOONCAKE_OPS.iter().position(|o| *o == op) else {
                    return;
                };
                // A removal by key counts once per key, as Mooncake's Remove RPC.
                let (n, f) = match op {
                    "remove" => (shape.items, failed),
                    _ => (1, (failed > 0) as usize),
                };
                inc(&c.single[i][0], n as u64);
                inc(&c.single[i][1], f as u64);
            }
        }
    }

    /// Mooncake's metric families that have a meaning in tidewire, under Mooncake's names
    /// (`segments`: name, allocated and capacity bytes of each memory segment; `disk`: bytes on
    /// the disk tiers and their quota).
    pub fn render_mooncake(
        &self,
        objects: usize,
        clients: usize,
        segments: &[(String, u64, u64)],
        disk: (u64, u64),
        promoted: u64,
    ) -> String {
        let mut s = String::new();
        let c = &self.mooncake;
        let v = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let one = |s: &mut String, name: &str, kind: &str, help: &str, x: u64| {
            let _ = writeln!(s, "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {x}");
        };
        let used: u64 = segments.iter().map(|x| x.1).sum();
        let cap: u64 = segments.iter().map(|x| x.2).sum();
        one(
            &mut s,
            "master_allocated_bytes",
            "gauge",
            "Total allocated memory bytes",
            used,
        );
        one(
            &mut s,
            "master_total_capacity_bytes",
            "gauge",
            "Total memory capacity bytes",
            cap,
        );
        let label = |n: &str| {
            n.replace('\\', "\\\\")
                .replace('"', "\\\"")
                .replace('\n', "\\n")
        };
        for (name, i, help) in [
            (
                "segment_allocated_bytes",
                1,
                "Allocated bytes per memory segment",
            ),
            (
                "segment_total_capacity_bytes",
                2,
                "Capacity bytes per memory segment",
            ),
        ] {
            let _ = writeln!(s, "# HELP {name} {help}\n# TYPE {name} gauge");
            for seg in segments {
                let x = if i == 1 { seg.1 } else { seg.2 };
                let _ = writeln!(s, "{name}{{segment=\"{}\"}} {x}", label(&seg.0));
            }
        }
        one(
            &mut s,
            "master_allocated_file_size_bytes",
            "gauge",
            "Bytes of objects on the disk tiers",
            disk.0,
        );
        one(
            &mut s,
            "master_total_file_capacity_bytes",
            "gauge",
            "Quota of the disk tiers",
            disk.1,
        );
        one(
            &mut s,
            "master_key_count",
            "gauge",
            "Objects stored",
            objects as u64,
        );
        one(
            &mut s,
            "master_active_clients",
            "gauge",
            "Live clients",
            clients as u64,
        );
        let _ = writeln!(
            s,
            "# HELP master_value_size_bytes Value sizes of the writes started\n# TYPE master_value_size_bytes histogram"
        );
        let mut cum = 0;
        for (i, le) in SIZE_BUCKETS.iter().enumerate() {
            cum += v(&c.value_sizes[i]);
            let _ = writeln!(
                s,
                "master_value_size_bytes_bucket{{le=\"{le}.000000\"}} {cum}"
            );
        }
        cum += v(&c.value_sizes[SIZE_BUCKETS.len()]);
        let _ = writeln!(s, "master_value_size_bytes_bucket{{le=\"+Inf\"}} {cum}");
        let _ = writeln!(s, "master_value_size_bytes_sum {}", v(&c.value_size_sum));
        let _ = writeln!(s, "master_value_size_bytes_count {cum}");
        for (i, op) in MOONCAKE_OPS.iter().enumerate() {
            one(
                &mut s,
                &format!("master_{op}_requests_total"),
                "counter",
                "Requests",
                v(&c.single[i][0]),
            );
            one(
                &mut s,
                &format!("master_{op}_failures_total"),
                "counter",
                "Failed requests",
                v(&c.single[i][1]),
            );
            if *op == "put_start" {
                one(
                    &mut s,
                    "master_put_start_alloc_failures_total",
                    "counter",
                    "Items refused for want of space",
                    v(&c.put_start_alloc_failures),
                );
            }
        }
        for (i, op) in BATCHED.iter().enumerate() {
            for (j, what) in [
                "requests",
                "failures",
                "partial_successes",
                "items",
                "failed_items",
            ]
            .iter()
            .enumerate()
            {
                one(
                    &mut s,
                    &format!("master_batch_{op}_{what}_total"),
                    "counter",
                    "Batch requests",
                    v(&c.batch[i][j]),
                );
            }
        }
        for (name, i) in [("mem_cache_hit_nums_", 2), ("file_cache_hit_nums_", 4)] {
            one(
                &mut s,
                name,
                "counter",
                "Reads whose first replica is in this tier",
                v(&c.gets[i]),
            );
        }
        for (name, i) in [
            ("mem_cache_hit_bytes_total", 3),
            ("file_cache_hit_bytes_total", 5),
        ] {
            one(
                &mut s,
                name,
                "counter",
                "Bytes of those reads",
                v(&c.gets[i]),
            );
        }
        one(
            &mut s,
            "valid_get_nums_",
            "counter",
            "Reads of keys found",
            v(&c.gets[1]),
        );
        one(&mut s, "total_get_nums_", "counter", "Reads", v(&c.gets[0]));
        one(
            &mut s,
            "master_successful_evictions_total",
            "counter",
            "Eviction passes that freed space",
            v(&self.evictions),
        );
        one(
            &mut s,
            "master_attempted_evictions_total",
            "counter",
            "Eviction passes",
            v(&c.eviction_attempts),
        );
        one(
            &mut s,
            "master_evicted_size_bytes",
            "counter",
            "Bytes eviction freed",
            v(&c.evicted_bytes),
        );
        one(
            &mut s,
            "master_promotion_completed_total",
            "counter",
            "Disk-only objects brought back to memory",
            promoted,
        );
        s
    }
}
