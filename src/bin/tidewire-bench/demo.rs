//! `tidewire-bench demo`: the first thing to run. A target engine in a child process and an
//! initiator engine here, on 127.0.0.1: write a pattern, read it back into a zeroed buffer,
//! compare every byte, for several block sizes; then measure synchronous READ latency. By default
//! this runs twice: over the TCP wire protocol, then over the same-host shortcut the engine uses
//! between tidewire processes on one machine. Exit 0 only when every check passed.

use crate::args::{self, UsageError, human_size};
use crate::bench::{PathChoice, fmt_us, percentile};
use crate::child::{self, Ready, TargetChild};
use crate::pattern::{self, AlignedBuf};
use std::time::{Duration, Instant};
use tidewire::engine::SegmentId;
use tidewire::{Config, Engine, Opcode, Request};

/// Remote buffer size; also the largest amount moved per block size and direction.
const REMOTE: u64 = 128 << 20;
/// (block size, bytes written and then read back).
const ROUNDS: &[(u64, u64)] = &[
    (4 << 10, 32 << 20),
    (64 << 10, 64 << 20),
    (1 << 20, 128 << 20),
    (16 << 20, 128 << 20),
];
/// Requests per batch.
const BATCH: u64 = 32;
/// Synchronous READ sizes and how many of each.
const LATENCY: &[(u64, usize)] = &[(128, 3000), (4 << 10, 3000)];
const WAIT: Duration = Duration::from_secs(60);

struct Row {
    path: &'static str,
    block: u64,
    op: &'static str,
    bytes: u64,
    secs: f64,
    verified: bool,
}

struct LatRow {
    path: &'static str,
    size: u64,
    n: usize,
    p50: f64,
    p99: f64,
    ok: bool,
}

#[derive(Default)]
struct Outcome {
    rows: Vec<Row>,
    lat: Vec<LatRow>,
    failures: Vec<String>,
    notes: Vec<String>,
    engines: usize,
    paths: Vec<&'static str>,
}

/// Runs the demo; returns the exit status.
pub fn main(argv: &[String]) -> Result<i32, UsageError> {
    let p = args::parse(argv, &["host", "path"], &[])?;
    let host = p.get("host").unwrap_or("127.0.0.1").to_string();
    let passes = match p.get("path") {
        None | Some("all") => vec![
            PathChoice::Tcp,
            PathChoice::SameHost,
            PathChoice::SharedMemory,
        ],
        Some("both") => vec![PathChoice::Tcp, PathChoice::SameHost],
        Some(v) => vec![PathChoice::parse(v).ok_or_else(|| {
            UsageError(format!(
                "--path: expected tcp, same-host, shared-memory, auto, both or all, got {v:?}"
            ))
        })?],
    };
    let mut cfg = Config::default();
    cfg.set("local_server_name", &host)
        .map_err(|e| UsageError(format!("--host {host:?}: {e}")))?;
    let started = Instant::now();
    let mut child = match TargetChild::spawn(
        &[
            "--host".into(),
            host.clone(),
            "--buffer-size".into(),
            REMOTE.to_string(),
            "--shared".into(),
        ],
        child::READY_TIMEOUT,
    ) {
        Ok(c) => c,
        Err(e) => {
            println!("tidewire demo: FAILED — {e}");
            return Ok(1);
        }
    };
    let ready = child.ready.clone();
    println!(
        "tidewire demo: target process {} serves segment {} ({} registered)",
        ready.pid,
        ready.segment,
        human_size(ready.size)
    );
    let mut out = Outcome {
        engines: 1,
        ..Outcome::default()
    };
    run(&cfg, &ready, &passes, &mut out);
    match child.stop() {
        Ok((st, false)) if st.success() => {}
        Ok((st, killed)) => out.failures.push(format!(
            "target process {}: {st}",
            if killed {
                "did not exit within 5 s and was killed"
            } else {
                "exited badly"
            }
        )),
        Err(e) => out.failures.push(e),
    }
    print_tables(&out.rows, &out.lat);
    for n in &out.notes {
        println!("note: {n}");
    }
    let moved: u64 = out.rows.iter().map(|r| r.bytes).sum::<u64>()
        + out.lat.iter().map(|l| l.size * l.n as u64).sum::<u64>();
    if out.failures.is_empty() && !out.rows.is_empty() {
        println!(
            "tidewire demo: OK — {} engines, 2 processes, {} MiB moved over {host} ({}), every \
             byte verified ({:.1} s)",
            out.engines,
            moved >> 20,
            out.paths.join(", "),
            started.elapsed().as_secs_f64()
        );
        Ok(0)
    } else {
        println!(
            "tidewire demo: FAILED — {} problem(s):",
            out.failures.len().max(1)
        );
        for f in &out.failures {
            println!("  - {f}");
        }
        Ok(1)
    }
}

/// Every pass, each with its own initiator engine over the same local buffers.
fn run(cfg: &Config, ready: &Ready, passes: &[PathChoice], out: &mut Outcome) {
    if ready.size < REMOTE {
        out.failures.push(format!(
            "target registered {} bytes, expected {REMOTE}",
            ready.size
        ));
        return;
    }
    // Buffers outlive every engine that registers them.
    let (mut src, mut dst) = match (
        AlignedBuf::new(REMOTE as usize),
        AlignedBuf::new(REMOTE as usize),
    ) {
        (Ok(a), Ok(b)) => (a, b),
        (Err(e), _) | (_, Err(e)) => {
            out.failures.push(e);
            return;
        }
    };
    for (k, &choice) in passes.iter().enumerate() {
        let mut cfg = cfg.clone();
        if let Err(e) = choice.apply(&mut cfg) {
            out.failures.push(e.to_string());
            return;
        }
        pass(&cfg, ready, choice, k as u64, &mut src, &mut dst, out);
    }
}

/// The path a pass uses: the segment's route, except that the same-host pass reads and writes
/// the target's plain buffer, which the kernel copy behind the shared-memory route serves.
fn pass_path(engine: &Engine, seg: i32, choice: PathChoice) -> &'static str {
    match engine.segment_path(seg).unwrap_or("unknown") {
        "shared-memory" if choice == PathChoice::SameHost => "same-host",
        p => p,
    }
}

/// One pass: an engine, the write/read/verify rounds, then the latency samples.
fn pass(
    cfg: &Config,
    ready: &Ready,
    choice: PathChoice,
    k: u64,
    src: &mut AlignedBuf,
    dst: &mut AlignedBuf,
    out: &mut Outcome,
) {
    let engine = match Engine::new(cfg.clone()) {
        Ok(e) => e,
        Err(e) => {
            out.failures.push(format!("starting the local engine: {e}"));
            return;
        }
    };
    out.engines += 1;
    for (name, b) in [("source", &*src), ("destination", &*dst)] {
        if let Err(e) = engine.register_memory(b.addr(), b.len() as u64, "cpu:0", true) {
            out.failures
                .push(format!("registering the {name} buffer: {e}"));
            return;
        }
    }
    let seg = match engine.open_segment(&ready.segment) {
        Ok(s) => s,
        Err(e) => {
            out.failures
                .push(format!("opening segment {}: {e}", ready.segment));
            return;
        }
    };
    let path = pass_path(&engine, seg, choice);
    if let Err(e) = choice.check(path) {
        if choice != PathChoice::Tcp && path == "tcp" && out.paths.contains(&"tcp") {
            // Both passes were asked for and the shortcut is not available here: say so, the
            // TCP pass already covered the transfers.
            out.notes
                .push(format!("{} pass skipped: {e}", choice.name()));
        } else {
            out.failures.push(e);
        }
        return;
    }
    let t = Xfer {
        engine: &engine,
        seg,
        remote: match (choice, ready.shared) {
            (PathChoice::SharedMemory, Some(a)) => a,
            _ => ready.addr,
        },
    };
    let mut last_seed = None;
    for &(block, total) in ROUNDS {
        // The pattern depends on the pass, the block size and the offset: stale bytes from an
        // earlier round, or bytes landing at the wrong offset, never pass.
        let seed = (k << 40) + 0xD3_0000 + block;
        pattern::fill(&mut src.as_mut_slice()[..total as usize], 0, seed);
        dst.as_mut_slice()[..total as usize].fill(0);
        let w = t.stream(Opcode::Write, src.addr(), total, block);
        if let Err(e) = &w {
            out.failures
                .push(format!("{path} write {}: {e}", human_size(block)));
        }
        let r = t.stream(Opcode::Read, dst.addr(), total, block);
        if let Err(e) = &r {
            out.failures
                .push(format!("{path} read {}: {e}", human_size(block)));
        }
        let got = &dst.as_slice()[..total as usize];
        let verified = match (&r, pattern::first_mismatch(got, 0, seed)) {
            (Err(_), _) => false,
            (Ok(_), None) => true,
            (Ok(_), Some(at)) => {
                out.failures.push(format!(
                    "{path} {} round: read-back differs from what was written: first bad byte at \
                     offset {at} (got {:#04x}, want {:#04x}), {} of {total} bytes wrong",
                    human_size(block),
                    got[at],
                    pattern::byte(seed, at as u64),
                    pattern::count_mismatches(got, 0, seed)
                ));
                false
            }
        };
        last_seed = (w.is_ok() && verified).then_some(seed);
        for (op, res) in [("write", &w), ("read", &r)] {
            out.rows.push(Row {
                path,
                block,
                op,
                bytes: if res.is_ok() { total } else { 0 },
                secs: *res.as_ref().unwrap_or(&0.0),
                verified,
            });
        }
    }
    match last_seed {
        None => out.failures.push(format!(
            "{path} latency: skipped, the remote contents are not known"
        )),
        Some(seed) => {
            for &(size, n) in LATENCY {
                let l = t.latency(dst, size, n, seed, path, &mut out.failures);
                out.lat.push(l);
            }
        }
    }
    // The route can fall back to TCP at run time; report what actually carried the bytes.
    let after = pass_path(&engine, seg, choice);
    if after != path {
        out.failures.push(format!(
            "the path changed from {path} to {after} during the pass"
        ));
    }
    out.paths.push(path);
}

struct Xfer<'a> {
    engine: &'a Engine,
    seg: SegmentId,
    remote: u64,
}

impl Xfer<'_> {
    /// Moves `[0, total)` in batches of `BATCH` requests of `block` bytes; returns the seconds
    /// spent in transfers.
    fn stream(&self, op: Opcode, local: u64, total: u64, block: u64) -> Result<f64, String> {
        let start = Instant::now();
        let mut off = 0;
        while off < total {
            let reqs: Vec<Request> = (0..BATCH)
                .map(|j| off + j * block)
                .take_while(|&o| o < total)
                .map(|o| Request {
                    op,
                    local: local + o,
                    segment: self.seg,
                    remote: self.remote + o,
                    len: block.min(total - o),
                })
                .collect();
            off += reqs.iter().map(|r| r.len).sum::<u64>();
            self.batch(&reqs)?;
        }
        Ok(start.elapsed().as_secs_f64())
    }

    fn batch(&self, reqs: &[Request]) -> Result<(), String> {
        let e = self.engine;
        let id = e
            .alloc_batch(reqs.len())
            .map_err(|x| format!("alloc_batch: {x}"))?;
        let res = e
            .submit(id, reqs)
            .map_err(|x| format!("submit: {x}"))
            .and_then(|()| {
                e.wait_batch(id, Some(WAIT))
                    .map_err(|x| format!("transfer: {x}"))
            });
        if let Err(x) = e.free_batch(id) {
            return Err(res.err().unwrap_or_else(|| format!("free_batch: {x}")));
        }
        res
    }

    /// `n` synchronous READs of `size` bytes at spread-out offsets, each verified.
    fn latency(
        &self,
        dst: &AlignedBuf,
        size: u64,
        n: usize,
        seed: u64,
        path: &'static str,
        failures: &mut Vec<String>,
    ) -> LatRow {
        let mut samples = Vec::with_capacity(n);
        let mut ok = true;
        let span = (REMOTE - size) / 64;
        for i in 0..n as u64 {
            // Distinct, unaligned-to-page offsets across the whole buffer.
            let off = (i.wrapping_mul(7_919) % span) * 64 + (i % 8) * 8;
            // SAFETY: nothing is in flight on the destination buffer between transfers.
            unsafe { dst.zero_range(0, size as usize) };
            let req = Request {
                op: Opcode::Read,
                local: dst.addr(),
                segment: self.seg,
                remote: self.remote + off,
                len: size,
            };
            let t0 = Instant::now();
            let r = self.batch(&[req]);
            let dt = t0.elapsed();
            if let Err(e) = r {
                failures.push(format!(
                    "{path} latency {}: READ {i}: {e}",
                    human_size(size)
                ));
                ok = false;
                break;
            }
            samples.push(dt.as_nanos() as u64);
            if let Some(at) = pattern::first_mismatch(&dst.as_slice()[..size as usize], off, seed) {
                failures.push(format!(
                    "{path} latency {}: READ {i} at remote offset {off}: byte {at} differs",
                    human_size(size)
                ));
                ok = false;
                break;
            }
        }
        samples.sort_unstable();
        LatRow {
            path,
            size,
            n: samples.len(),
            p50: percentile(&samples, 0.5) as f64 / 1e3,
            p99: percentile(&samples, 0.99) as f64 / 1e3,
            ok,
        }
    }
}

fn print_tables(rows: &[Row], lat: &[LatRow]) {
    println!();
    println!(
        "{:<10} {:>8}  {:<6} {:>6} {:>8}  verified",
        "path", "block", "op", "MiB", "GB/s"
    );
    for r in rows {
        let gbps = if r.secs > 0.0 {
            r.bytes as f64 / r.secs / 1e9
        } else {
            0.0
        };
        println!(
            "{:<10} {:>8}  {:<6} {:>6} {:>8.3}  {}",
            r.path,
            human_size(r.block),
            r.op,
            r.bytes >> 20,
            gbps,
            if r.verified { "yes" } else { "NO" }
        );
    }
    if !lat.is_empty() {
        println!();
        println!(
            "{:<10} {:>8}  {:<10} {:>6} {:>9} {:>9}  verified",
            "path", "size", "latency", "ops", "p50 µs", "p99 µs"
        );
        for l in lat {
            println!(
                "{:<10} {:>8}  {:<10} {:>6} {:>9} {:>9}  {}",
                l.path,
                human_size(l.size),
                "sync read",
                l.n,
                fmt_us(l.p50),
                fmt_us(l.p99),
                if l.ok { "yes" } else { "NO" }
            );
        }
    }
    println!();
}
