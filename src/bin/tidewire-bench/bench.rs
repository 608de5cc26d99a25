//! The measurement loop shared by `initiator` and `loopback`: worker threads keep `queue_depth`
//! batches in flight each, the main thread prints progress and takes the CPU readings.

use crate::args::human_size;
use crate::pattern::{self, AlignedBuf};
use crate::sys;
use crate::target::TARGET_SEED;
use std::collections::VecDeque;
use std::io::Write;
use std::sync::Barrier;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use tidewire::engine::{SegmentId, TaskState};
use tidewire::{Engine, ErrorKind, Opcode, Request};

pub use crate::spec::{OpKind, PathChoice, Spec};
pub use crate::table::{fmt_us, print_table};

/// How long one batch may take before the run gives up on it.
const BATCH_DEADLINE: Duration = Duration::from_secs(60);

/// The peer side of a run.
pub struct Remote<'a> {
    /// Initiator engine.
    pub engine: &'a Engine,
    /// Opened target segment.
    pub segment: SegmentId,
    /// Target buffer address.
    pub addr: u64,
    /// Target buffer length.
    pub size: u64,
    /// Target pid, when it runs on this host (its CPU time is then included).
    pub pid: Option<u32>,
}

/// Measured outcome of one configuration.
#[derive(Debug, Clone)]
pub struct RunResult {
    /// The configuration.
    pub spec: Spec,
    /// How the bytes travelled (`Engine::segment_path` after the run).
    pub path: &'static str,
    /// Bytes moved by successful requests in the measured window.
    pub bytes: u64,
    /// Successful requests.
    pub requests: u64,
    /// Completed batches (latency samples).
    pub batches: u64,
    /// Measured wall time.
    pub secs: f64,
    /// Batch latency percentiles in microseconds: p50, p99, max.
    pub lat_us: [f64; 3],
    /// CPU seconds of this process during the window.
    pub cpu_self: f64,
    /// CPU seconds of the target during the window, when known.
    pub cpu_target: Option<f64>,
    /// Failed requests (transfer errors and verification mismatches).
    pub errors: u64,
    /// First error seen, for the report.
    pub first_error: Option<String>,
}

impl RunResult {
    /// Throughput in GB/s (10^9 bytes).
    pub fn gbps(&self) -> f64 {
        if self.secs > 0.0 {
            self.bytes as f64 / self.secs / 1e9
        } else {
            0.0
        }
    }

    /// Requests per second.
    pub fn ops(&self) -> f64 {
        if self.secs > 0.0 {
            self.requests as f64 / self.secs
        } else {
            0.0
        }
    }

    /// CPU seconds (both sides, when the target's is known) per GB moved.
    pub fn cpu_per_gb(&self) -> Option<f64> {
        (self.bytes > 0)
            .then(|| (self.cpu_self + self.cpu_target.unwrap_or(0.0)) / (self.bytes as f64 / 1e9))
    }

    /// The JSON form.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "op": self.spec.op.name(),
            "path": self.path,
            "block_size": self.spec.block,
            "batch_size": self.spec.batch,
            "threads": self.spec.threads,
            "queue_depth": self.spec.queue_depth,
            "verify": self.spec.verify,
            "seconds": self.secs,
            "bytes": self.bytes,
            "requests": self.requests,
            "batches": self.batches,
            "gb_per_s": self.gbps(),
            "ops_per_s": self.ops(),
            "latency_us": {"p50": self.lat_us[0], "p99": self.lat_us[1], "max": self.lat_us[2]},
            "cpu_self_s": self.cpu_self,
            "cpu_target_s": self.cpu_target,
            "cpu_s_per_gb": self.cpu_per_gb(),
            "errors": self.errors,
            "first_error": self.first_error,
        })
    }
}

/// Nearest-rank percentile of sorted samples.
pub fn percentile(sorted: &[u64], q: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

#[derive(Default)]
struct Counters {
    bytes: AtomicU64,
    requests: AtomicU64,
    finished: AtomicUsize,
    stop: AtomicBool,
}

struct WorkerOut {
    lat_ns: Vec<u64>,
    bytes: u64,
    requests: u64,
    errors: u64,
    first_error: Option<String>,
    start: Instant,
    end: Instant,
}

struct Ctx<'a> {
    remote: &'a Remote<'a>,
    local: &'a AlignedBuf,
    spec: &'a Spec,
    counters: &'a Counters,
    barrier: &'a Barrier,
}

/// Checks that the buffers fit the configuration.
pub fn check_fit(spec: &Spec, local_len: u64, remote_size: u64) -> Result<(), String> {
    if local_len < spec.local_bytes() {
        return Err(format!(
            "local buffer of {local_len} bytes is smaller than the {} the run needs",
            spec.local_bytes()
        ));
    }
    if remote_size < spec.block {
        return Err(format!(
            "remote buffer of {remote_size} bytes is smaller than one block ({})",
            spec.block
        ));
    }
    if spec.verify && remote_size < spec.local_bytes() {
        return Err(format!(
            "--verify needs a remote buffer of at least {} bytes (block x batch x queue-depth x \
             threads); the target has {remote_size}",
            spec.local_bytes()
        ));
    }
    Ok(())
}

/// Runs one configuration. `local` must be registered with `remote.engine`, hold at least
/// `spec.local_bytes()` bytes and, for `--verify`, carry the target's pattern.
pub fn run(
    remote: &Remote<'_>,
    local: &AlignedBuf,
    spec: &Spec,
    progress: bool,
) -> Result<RunResult, String> {
    check_fit(spec, local.len() as u64, remote.size)?;
    let counters = Counters::default();
    let barrier = Barrier::new(spec.threads + 1);
    let ctx = Ctx {
        remote,
        local,
        spec,
        counters: &counters,
        barrier: &barrier,
    };
    let (outs, cpu_self, cpu_target) = std::thread::scope(|s| {
        let handles: Vec<_> = (0..spec.threads)
            .map(|t| {
                let ctx = &ctx;
                std::thread::Builder::new()
                    .name(format!("bench-{t}"))
                    .spawn_scoped(s, move || {
                        let out = worker(ctx, t);
                        // Release: the main thread's Acquire load sees the final counters.
                        ctx.counters.finished.fetch_add(1, Ordering::Release);
                        out
                    })
                    .expect("spawn bench thread")
            })
            .collect();
        barrier.wait();
        let t0 = Instant::now();
        let cpu0 = sys::self_cpu();
        let tcpu0 = remote.pid.and_then(sys::proc_cpu);
        monitor(&counters, spec, t0, progress);
        let cpu1 = sys::self_cpu();
        let tcpu1 = remote.pid.and_then(sys::proc_cpu);
        let outs: Vec<WorkerOut> = handles
            .into_iter()
            .map(|h| h.join().expect("bench thread panicked"))
            .collect();
        let tcpu = match (tcpu0, tcpu1) {
            (Some(a), Some(b)) => Some(b.saturating_sub(a).as_secs_f64()),
            _ => None,
        };
        (outs, cpu1.saturating_sub(cpu0).as_secs_f64(), tcpu)
    });
    let start = outs.iter().map(|o| o.start).min().expect("threads >= 1");
    let end = outs.iter().map(|o| o.end).max().expect("threads >= 1");
    let mut lat: Vec<u64> = outs.iter().flat_map(|o| o.lat_ns.iter().copied()).collect();
    lat.sort_unstable();
    let us = |ns: u64| ns as f64 / 1e3;
    Ok(RunResult {
        spec: spec.clone(),
        path: remote
            .engine
            .segment_path(remote.segment)
            .unwrap_or("unknown"),
        bytes: outs.iter().map(|o| o.bytes).sum(),
        requests: outs.iter().map(|o| o.requests).sum(),
        batches: lat.len() as u64,
        secs: end.saturating_duration_since(start).as_secs_f64(),
        lat_us: [
            us(percentile(&lat, 0.50)),
            us(percentile(&lat, 0.99)),
            us(lat.last().copied().unwrap_or(0)),
        ],
        cpu_self,
        cpu_target,
        errors: outs.iter().map(|o| o.errors).sum(),
        first_error: outs.into_iter().find_map(|o| o.first_error),
    })
}

/// Prints a progress line per second until every worker finished.
fn monitor(c: &Counters, spec: &Spec, t0: Instant, progress: bool) {
    let tty = sys::stderr_is_tty();
    let (mut last_t, mut last_b, mut last_r) = (t0, 0u64, 0u64);
    let mut next = t0 + Duration::from_secs(1);
    let mut printed = false;
    // Acquire pairs with the workers' Release increments.
    while c.finished.load(Ordering::Acquire) < spec.threads {
        std::thread::sleep(Duration::from_millis(20));
        let now = Instant::now();
        if !progress || now < next {
            continue;
        }
        next += Duration::from_secs(1);
        let (b, r) = (
            c.bytes.load(Ordering::Relaxed),
            c.requests.load(Ordering::Relaxed),
        );
        let dt = now.duration_since(last_t).as_secs_f64().max(1e-9);
        let line = format!(
            "[{:5.1} s] {} {} x{} ({} thr, qd {}): {:.3} GB/s, {:.0} ops/s",
            now.duration_since(t0).as_secs_f64(),
            spec.op.name(),
            human_size(spec.block),
            spec.batch,
            spec.threads,
            spec.queue_depth,
            (b - last_b) as f64 / dt / 1e9,
            (r - last_r) as f64 / dt,
        );
        let mut err = std::io::stderr().lock();
        let _ = if tty {
            write!(err, "\r\x1b[K{line}")
        } else {
            writeln!(err, "{line}")
        };
        let _ = err.flush();
        printed = true;
        (last_t, last_b, last_r) = (now, b, r);
    }
    if printed && tty {
        let _ = write!(std::io::stderr(), "\r\x1b[K");
    }
}

/// The requests of every in-flight slot of thread `t`.
fn slot_requests(ctx: &Ctx<'_>, t: usize) -> Vec<Vec<Request>> {
    let spec = ctx.spec;
    let span = ctx.remote.size / spec.block * spec.block;
    let base = t as u64 * spec.per_thread();
    (0..spec.queue_depth)
        .map(|s| {
            (0..spec.batch)
                .map(|j| {
                    let off = base + (s * spec.batch + j) as u64 * spec.block;
                    Request {
                        op: spec.op.opcode(j),
                        local: ctx.local.addr() + off,
                        segment: ctx.remote.segment,
                        remote: ctx.remote.addr + off % span,
                        len: spec.block,
                    }
                })
                .collect()
        })
        .collect()
}

struct InFlight {
    id: u64,
    slot: usize,
    at: Instant,
}

fn worker(ctx: &Ctx<'_>, t: usize) -> WorkerOut {
    let spec = ctx.spec;
    let slots = slot_requests(ctx, t);
    let mut out = WorkerOut {
        lat_ns: Vec::with_capacity(4096),
        bytes: 0,
        requests: 0,
        errors: 0,
        first_error: None,
        start: Instant::now(),
        end: Instant::now(),
    };
    let mut queue: VecDeque<InFlight> = VecDeque::with_capacity(spec.queue_depth);
    // Warm-up: one round of every slot (connections, page faults), not measured.
    let mut ok = true;
    for (s, reqs) in slots.iter().enumerate() {
        match submit(ctx, reqs) {
            Ok(id) => queue.push_back(InFlight {
                id,
                slot: s,
                at: Instant::now(),
            }),
            Err(e) => {
                out.note(spec.batch as u64, e);
                ok = false;
                break;
            }
        }
    }
    while let Some(f) = queue.pop_front() {
        let mut scratch = WorkerOut::scratch();
        ok &= complete(ctx, &slots[f.slot], f.id, &mut scratch);
        if let Some(e) = scratch.first_error {
            out.note(scratch.errors, format!("warm-up: {e}"));
        }
    }
    if !ok {
        // Tell the others not to start measuring a broken setup.
        ctx.counters.stop.store(true, Ordering::Relaxed);
    }
    ctx.barrier.wait();
    out.start = Instant::now();
    out.end = out.start;
    if ctx.counters.stop.load(Ordering::Relaxed) {
        return out;
    }
    let deadline = out.start + spec.duration;
    let mut next_slot = 0;
    loop {
        while queue.len() < spec.queue_depth && Instant::now() < deadline {
            let s = next_slot;
            next_slot = (next_slot + 1) % spec.queue_depth;
            match submit(ctx, &slots[s]) {
                Ok(id) => queue.push_back(InFlight {
                    id,
                    slot: s,
                    at: Instant::now(),
                }),
                Err(e) => {
                    out.note(spec.batch as u64, e);
                    ctx.counters.stop.store(true, Ordering::Relaxed);
                    break;
                }
            }
        }
        let Some(f) = queue.pop_front() else { break };
        let before = (out.bytes, out.requests);
        let fine = complete(ctx, &slots[f.slot], f.id, &mut out);
        let now = Instant::now();
        out.end = now;
        out.lat_ns.push(now.duration_since(f.at).as_nanos() as u64);
        ctx.counters
            .bytes
            .fetch_add(out.bytes - before.0, Ordering::Relaxed);
        ctx.counters
            .requests
            .fetch_add(out.requests - before.1, Ordering::Relaxed);
        if !fine || ctx.counters.stop.load(Ordering::Relaxed) {
            // Finish what is in flight, start nothing new.
            ctx.counters.stop.store(true, Ordering::Relaxed);
            while let Some(f) = queue.pop_front() {
                complete(ctx, &slots[f.slot], f.id, &mut out);
            }
            break;
        }
    }
    out
}

impl WorkerOut {
    fn scratch() -> WorkerOut {
        WorkerOut {
            lat_ns: Vec::new(),
            bytes: 0,
            requests: 0,
            errors: 0,
            first_error: None,
            start: Instant::now(),
            end: Instant::now(),
        }
    }

    fn note(&mut self, failed: u64, msg: String) {
        self.errors += failed;
        self.first_error.get_or_insert(msg);
    }
}

fn submit(ctx: &Ctx<'_>, reqs: &[Request]) -> Result<u64, String> {
    let engine = ctx.remote.engine;
    if ctx.spec.verify {
        for r in reqs.iter().filter(|r| r.op == Opcode::Read) {
            let off = (r.local - ctx.local.addr()) as usize;
            // SAFETY: this thread owns its part of the buffer and nothing is in flight on it.
            unsafe { ctx.local.zero_range(off, r.len as usize) };
        }
    }
    let id = engine
        .alloc_batch(reqs.len())
        .map_err(|e| format!("alloc_batch: {e}"))?;
    if let Err(e) = engine.submit(id, reqs) {
        let _ = engine.free_batch(id);
        return Err(format!("submit: {e}"));
    }
    Ok(id)
}

/// Waits for batch `id`, accounts for it and frees it. Returns false when the run must stop.
fn complete(ctx: &Ctx<'_>, reqs: &[Request], id: u64, out: &mut WorkerOut) -> bool {
    let engine = ctx.remote.engine;
    let waited = engine.wait_batch(id, Some(BATCH_DEADLINE));
    if let Err(e) = &waited {
        if e.kind() == ErrorKind::Timeout {
            out.note(
                reqs.len() as u64,
                format!("batch not done after {BATCH_DEADLINE:?}: {e}"),
            );
            return false;
        }
    }
    let mut keep_going = true;
    for (i, r) in reqs.iter().enumerate() {
        let done = match &waited {
            Ok(()) => true,
            Err(_) => {
                matches!(engine.task_status(id, i), Ok(st) if st.state == TaskState::Completed)
            }
        };
        if !done {
            let why = engine
                .task_status(id, i)
                .ok()
                .and_then(|st| st.error)
                .map_or_else(|| "failed".to_string(), |k| format!("{k:?}"));
            out.note(
                1,
                format!(
                    "{:?} {} bytes at remote {:#x}: {why}",
                    r.op, r.len, r.remote
                ),
            );
            continue;
        }
        if ctx.spec.verify && r.op == Opcode::Read {
            let off = r.local - ctx.local.addr();
            let got = &ctx.local.as_slice()[off as usize..(off + r.len) as usize];
            if let Some(bad) = pattern::first_mismatch(got, off, TARGET_SEED) {
                out.note(
                    1,
                    format!(
                        "verify: READ of {} bytes at remote {:#x}: byte {bad} differs",
                        r.len, r.remote
                    ),
                );
                keep_going = false;
                continue;
            }
        }
        out.bytes += r.len;
        out.requests += 1;
    }
    if let Err(e) = engine.free_batch(id) {
        out.note(0, format!("free_batch: {e}"));
        keep_going = false;
    }
    keep_going && waited.is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles() {
        let v: Vec<u64> = (1..=100).collect();
        assert_eq!(percentile(&v, 0.5), 50);
        assert_eq!(percentile(&v, 0.99), 99);
        assert_eq!(percentile(&v, 1.0), 100);
        assert_eq!(percentile(&[7], 0.99), 7);
        assert_eq!(percentile(&[], 0.5), 0);
    }

    #[test]
    fn fit_rules() {
        let spec = Spec {
            op: OpKind::Read,
            block: 4096,
            batch: 4,
            threads: 2,
            queue_depth: 2,
            duration: Duration::from_secs(1),
            verify: true,
        };
        assert_eq!(spec.local_bytes(), 4096 * 16);
        assert!(check_fit(&spec, 4096 * 16, 4096 * 16).is_ok());
        assert!(check_fit(&spec, 4096 * 15, 4096 * 16).is_err());
        assert!(
            check_fit(&spec, 4096 * 16, 4096 * 8).is_err(),
            "verify needs no wrap"
        );
        let wrap = Spec {
            verify: false,
            ..spec
        };
        assert!(check_fit(&wrap, 4096 * 16, 4096).is_ok());
        assert!(check_fit(&wrap, 4096 * 16, 100).is_err());
        assert_eq!(OpKind::Mixed.opcode(0), Opcode::Read);
        assert_eq!(OpKind::Mixed.opcode(1), Opcode::Write);
    }
}
