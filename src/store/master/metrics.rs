//! Master counters and their Prometheus text form.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Request counts and latency sums per operation, plus eviction passes.
#[derive(Default)]
pub struct Metrics {
    /// op -> (count, total microseconds).
    ops: Mutex<BTreeMap<&'static str, (u64, u64)>>,
    /// Eviction passes that freed something.
    pub evictions: AtomicU64,
}

impl Metrics {
    /// Records one handled request.
    pub fn record(&self, op: &'static str, took: Duration) {
        let mut m = self.ops.lock().unwrap_or_else(|e| e.into_inner());
        let e = m.entry(op).or_default();
        e.0 += 1;
        e.1 += took.as_micros() as u64;
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
        let ops = self.ops.lock().unwrap_or_else(|e| e.into_inner());
        let _ = writeln!(
            s,
            "# HELP tidewire_master_requests_total Requests handled\n# TYPE tidewire_master_requests_total counter"
        );
        for (op, (n, _)) in ops.iter() {
            let _ = writeln!(s, "tidewire_master_requests_total{{op=\"{op}\"}} {n}");
        }
        let _ = writeln!(
            s,
            "# HELP tidewire_master_request_seconds_total Time spent handling requests\n# TYPE tidewire_master_request_seconds_total counter"
        );
        for (op, (_, us)) in ops.iter() {
            let _ = writeln!(
                s,
                "tidewire_master_request_seconds_total{{op=\"{op}\"}} {:.6}",
                *us as f64 / 1e6
            );
        }
        s
    }
}
