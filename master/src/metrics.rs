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
