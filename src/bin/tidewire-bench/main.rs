//! `tidewire-bench`: the benchmark and demo CLI.
//!
//! - `target`     serve one pattern-filled registered buffer, print a READY line
//! - `initiator`  drive READ/WRITE batches against a target and report throughput and latency
//! - `loopback`   start a target child process and run a sweep against it (`make bench`)
//! - `demo`       two processes, loopback TCP, every byte verified (`make run`)
//! - `soak`       verified traffic against a target restarted every 30 s; flat RSS/fds/threads?
//! - `handoff`    how fast one CPU's writes reach another (a limit of every loopback transfer)
//! - `master-load` many Store clients (one connection each) against one master

mod args;
mod bench;
mod child;
mod demo;
mod handoff;
mod master_load;
mod pattern;
mod procstat;
mod soak;
mod soak_report;
mod soak_work;
mod spec;
mod sys;
mod table;
mod target;

use args::UsageError;
use bench::{OpKind, PathChoice, Remote, RunResult, Spec};
use child::TargetChild;
use pattern::AlignedBuf;
use std::time::Duration;
use tidewire::{Config, Engine};

const USAGE: &str = "\
usage: tidewire-bench <command> [options]

commands:
  demo        start a target process, write and read a few hundred MiB over 127.0.0.1 in
              several block sizes, verify every byte, measure sync-read latency; once over
              TCP, once over the same-host kernel copy, once through a shared buffer
              (--path tcp|same-host|shared-memory|auto|both|all, default all)
  loopback    start a target process and run the initiator against it; without --op or
              --block-size: a sweep of read+write at 4K, 64K, 1M, 16M blocks x batch 32
  soak        mixed READ/WRITE batches (4 KiB..4 MiB blocks, every byte verified) from several
              threads against a target process restarted every 30 s; prints RSS, open fds and
              threads of the initiator and the target each minute, totals, and a verdict
  handoff     no engine: one thread pinned to a CPU copies blocks into a ring, another on a
              second CPU copies them out; prints GB/s per interval and the median
              (--block-size, default 256K; --duration, default 6s; --interval, default 0.5s;
              --cpus A,B, default 0,1). Every loopback transfer pays this handoff.
  master-load many Store clients against one tidewire-master (its own protocol), each with
              its own connection and segment, each in turn: put 4 KiB, exists, get, read done
              (--master HOST:PORT, --clients N default 1000, --threads N default 16,
              --duration S default 5, --master-pid P: print its threads and memory)
  initiator   run against a running target (needs --segment, --remote-addr, --remote-size)
  target      serve a pattern-filled buffer; prints
              READY segment=<name> addr=<addr> size=<len> pid=<pid> [shared=<addr>]
              and serves until stdin closes, a signal, or --max-seconds

target options:
  --host H             advertised and bound host (default 127.0.0.1)
  --buffer-size N      registered buffer size (default 256M)
  --metadata M         P2PHANDSHAKE (default) or http(s)://... metadata server
  --max-seconds S      exit after S seconds even if stdin stays open
  --lanes N            TCP connections per peer
  --shared             also serve a shared (memfd-backed) buffer of the same size, as
                       allocate_managed_buffer makes; READY then ends with shared=<addr>

initiator / loopback options:
  --segment NAME       target segment (initiator only)
  --remote-addr A      target buffer address (initiator only)
  --remote-size N      target buffer size (initiator only)
  --target-pid P       target pid on this host, to include its CPU (initiator only)
  --host H             local host (default 127.0.0.1)
  --op read|write|mixed
  --block-size N       bytes per request (default 64K; loopback sweep: 4K,64K,1M,16M)
  --batch-size N       requests per batch (default 32)
  --threads N          worker threads (default 1)
  --duration S         measured seconds per configuration (default 5; loopback sweep 1.25)
  --queue-depth N      batches in flight per thread (default 1)
  --lanes N            TCP connections per peer (engine default 2)
  --slice-size N       engine slice size
  --path P             auto (default: the engine decides), tcp (every byte through the TCP
                       wire protocol) or same-host (the engine's shortcut between tidewire
                       processes on one host; fails if unavailable) or shared-memory
                       (loopback only: the target's buffer is shared memory the initiator
                       maps and copies with memcpy)
  --verify             check every byte read against the target's pattern
  --json               print one JSON object instead of the table

soak options:
  --minutes M          how long (default 10)
  --restart-every S    seconds between target restarts (default 30)
  --sample-every S     seconds between table rows (default 60)
  --threads N          worker threads (default 4)
  --transfer-timeout S the initiator's transfer deadline (default 10; peers no segment uses are
                       released once their work is past it)
  --path P             tcp (default), same-host or auto
  --host H             local host (default 127.0.0.1)

Sizes accept K, M and G suffixes (binary). Exit status: 0 ok, 1 failure, 2 bad arguments.";

fn main() {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let code = match argv.first().map(String::as_str) {
        None => Err(UsageError("no command given".into())),
        Some("-h" | "--help" | "help") => {
            println!("{USAGE}");
            Ok(0)
        }
        Some("target") => target::main(&argv[1..]),
        Some("initiator") => initiator(&argv[1..]),
        Some("loopback") => loopback(&argv[1..]),
        Some("demo") => demo::main(&argv[1..]),
        Some("soak") => soak::main(&argv[1..]),
        Some("handoff") => handoff::main(&argv[1..]),
        Some("master-load") => master_load::main(&argv[1..]),
        Some(other) => Err(UsageError(format!("unknown command {other:?}"))),
    };
    match code {
        Ok(c) => std::process::exit(c),
        Err(e) => {
            eprintln!("tidewire-bench: {e}\n\n{USAGE}");
            std::process::exit(2);
        }
    }
}

/// Options shared by `initiator` and `loopback`.
struct RunOpts {
    host: String,
    ops: Vec<OpKind>,
    blocks: Vec<u64>,
    batch: usize,
    threads: usize,
    queue_depth: usize,
    duration: Duration,
    verify: bool,
    json: bool,
    lanes: Option<String>,
    slice_size: Option<String>,
    path: PathChoice,
}

const RUN_VALUES: &[&str] = &[
    "host",
    "op",
    "block-size",
    "batch-size",
    "threads",
    "duration",
    "queue-depth",
    "lanes",
    "slice-size",
    "path",
];
const RUN_FLAGS: &[&str] = &["json", "verify"];

fn run_opts(p: &args::Parsed, sweep: bool) -> Result<RunOpts, UsageError> {
    let ops = match p.get("op") {
        Some(v) => vec![OpKind::parse(v).ok_or_else(|| {
            UsageError(format!("--op: expected read, write or mixed, got {v:?}"))
        })?],
        None if sweep => vec![OpKind::Read, OpKind::Write],
        None => vec![OpKind::Read],
    };
    let blocks = match p.get("block-size") {
        Some(_) => vec![p.size("block-size", 0)?],
        None if sweep => vec![4 << 10, 64 << 10, 1 << 20, 16 << 20],
        None => vec![64 << 10],
    };
    let sweeping = sweep && p.get("op").is_none() && p.get("block-size").is_none();
    let default_duration = if sweeping {
        Duration::from_millis(1250)
    } else {
        Duration::from_secs(5)
    };
    let opts = RunOpts {
        host: p.get("host").unwrap_or("127.0.0.1").to_string(),
        ops,
        blocks,
        batch: p.count("batch-size", 32, 1 << 16)?,
        threads: p.count("threads", 1, 256)?,
        queue_depth: p.count("queue-depth", 1, 1024)?,
        duration: p.duration("duration", default_duration)?,
        verify: p.flag("verify"),
        json: p.flag("json"),
        lanes: p.get("lanes").map(str::to_string),
        slice_size: p.get("slice-size").map(str::to_string),
        path: match p.get("path") {
            None => PathChoice::Auto,
            Some(v) => PathChoice::parse(v).ok_or_else(|| {
                UsageError(format!(
                    "--path: expected auto, tcp or same-host, got {v:?}"
                ))
            })?,
        },
    };
    for spec in opts.specs() {
        if spec.local_bytes() > 64 << 30 {
            return Err(UsageError(format!(
                "block x batch x queue-depth x threads = {} bytes is more than 64 GiB",
                spec.local_bytes()
            )));
        }
    }
    Ok(opts)
}

impl RunOpts {
    fn specs(&self) -> Vec<Spec> {
        let mut v = Vec::new();
        for &block in &self.blocks {
            for &op in &self.ops {
                v.push(Spec {
                    op,
                    block,
                    batch: self.batch,
                    threads: self.threads,
                    queue_depth: self.queue_depth,
                    duration: self.duration,
                    verify: self.verify,
                });
            }
        }
        v
    }

    fn config(&self) -> Result<Config, UsageError> {
        let mut cfg = Config::default();
        let mut set = |k: &str, v: &str| {
            cfg.set(k, v)
                .map_err(|e| UsageError(format!("{k}={v:?}: {e}")))
        };
        set("local_server_name", &self.host)?;
        if let Some(l) = &self.lanes {
            set("tcp_lanes", l)?;
        }
        if let Some(s) = &self.slice_size {
            let bytes =
                args::parse_size(s).map_err(|e| UsageError(format!("--slice-size: {e}")))?;
            set("slice_size", &bytes.to_string())?;
        }
        self.path.apply(&mut cfg).map_err(UsageError)?;
        Ok(cfg)
    }
}

/// The initiator side: engine, local buffer, every configuration. Returns results or a failure.
fn drive(
    opts: &RunOpts,
    cfg: Config,
    segment: &str,
    remote_addr: u64,
    remote_size: u64,
    pid: Option<u32>,
) -> Result<Vec<RunResult>, String> {
    let need = opts
        .specs()
        .iter()
        .map(Spec::local_bytes)
        .max()
        .unwrap_or(0);
    let len = usize::try_from(need).map_err(|_| "buffer too large".to_string())?;
    // Declared before the engine: the engine is dropped first.
    let mut local = AlignedBuf::new(len)?;
    // The target's pattern, so WRITEs keep its buffer verifiable.
    pattern::fill(local.as_mut_slice(), 0, target::TARGET_SEED);
    let engine = Engine::new(cfg).map_err(|e| format!("starting engine: {e}"))?;
    engine
        .register_memory(local.addr(), need, "cpu:0", true)
        .map_err(|e| format!("registering local buffer: {e}"))?;
    let seg = engine
        .open_segment(segment)
        .map_err(|e| format!("opening segment {segment:?}: {e}"))?;
    opts.path
        .check(engine.segment_path(seg).unwrap_or("unknown"))?;
    let remote = Remote {
        engine: &engine,
        segment: seg,
        addr: remote_addr,
        size: remote_size,
        pid,
    };
    let mut results = Vec::new();
    for spec in opts.specs() {
        results.push(bench::run(&remote, &local, &spec, true)?);
    }
    drop(engine);
    Ok(results)
}

fn report(
    opts: &RunOpts,
    mode: &str,
    segment: &str,
    results: &[RunResult],
    pid: Option<u32>,
) -> i32 {
    let errors: u64 = results.iter().map(|r| r.errors).sum();
    if opts.json {
        let v = serde_json::json!({
            "mode": mode,
            "segment": segment,
            "target_pid": pid,
            "results": results.iter().map(RunResult::to_json).collect::<Vec<_>>(),
            "errors": errors,
        });
        println!("{v}");
    } else {
        bench::print_table(results, results.iter().all(|r| r.cpu_target.is_some()));
    }
    if errors > 0 { 1 } else { 0 }
}

fn initiator(argv: &[String]) -> Result<i32, UsageError> {
    let mut values = RUN_VALUES.to_vec();
    values.extend(["segment", "remote-addr", "remote-size", "target-pid"]);
    let p = args::parse(argv, &values, RUN_FLAGS)?;
    let opts = run_opts(&p, false)?;
    let segment = p
        .get("segment")
        .ok_or_else(|| UsageError("initiator needs --segment".into()))?
        .to_string();
    let addr = p
        .u64("remote-addr")?
        .ok_or_else(|| UsageError("initiator needs --remote-addr".into()))?;
    let size = match p.get("remote-size") {
        Some(_) => p.size("remote-size", 0)?,
        None => return Err(UsageError("initiator needs --remote-size".into())),
    };
    let pid = p.u64("target-pid")?.map(|v| v as u32);
    let cfg = opts.config()?;
    Ok(match drive(&opts, cfg, &segment, addr, size, pid) {
        Ok(results) => report(&opts, "initiator", &segment, &results, pid),
        Err(e) => {
            eprintln!("tidewire-bench initiator: {e}");
            1
        }
    })
}

fn loopback(argv: &[String]) -> Result<i32, UsageError> {
    let p = args::parse(argv, RUN_VALUES, RUN_FLAGS)?;
    let opts = run_opts(&p, true)?;
    let cfg = opts.config()?;
    let need = opts
        .specs()
        .iter()
        .map(Spec::local_bytes)
        .max()
        .unwrap_or(0);
    let mut targs = vec![
        "--host".to_string(),
        opts.host.clone(),
        "--buffer-size".to_string(),
        need.to_string(),
    ];
    if let Some(l) = &opts.lanes {
        targs.extend(["--lanes".to_string(), l.clone()]);
    }
    if opts.path == PathChoice::SharedMemory {
        targs.push("--shared".to_string());
    }
    let mut child = match TargetChild::spawn(&targs, child::READY_TIMEOUT) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("tidewire-bench loopback: {e}");
            return Ok(1);
        }
    };
    let ready = child.ready.clone();
    if !opts.json {
        println!(
            "loopback: target pid {} segment {} ({} registered), {} per configuration",
            ready.pid,
            ready.segment,
            args::human_size(ready.size),
            fmt_secs(opts.duration)
        );
    }
    let remote = match (opts.path, ready.shared) {
        (PathChoice::SharedMemory, Some(a)) => a,
        _ => ready.addr,
    };
    let outcome = drive(
        &opts,
        cfg,
        &ready.segment,
        remote,
        ready.size,
        Some(child.pid()),
    );
    let stopped = child.stop();
    let mut code = match outcome {
        Ok(results) => report(&opts, "loopback", &ready.segment, &results, Some(ready.pid)),
        Err(e) => {
            eprintln!("tidewire-bench loopback: {e}");
            1
        }
    };
    match stopped {
        Ok((st, false)) if st.success() => {}
        Ok((st, killed)) => {
            eprintln!(
                "tidewire-bench loopback: target {}: {st}",
                if killed {
                    "did not exit in time and was killed"
                } else {
                    "exited badly"
                }
            );
            code = 1;
        }
        Err(e) => {
            eprintln!("tidewire-bench loopback: {e}");
            code = 1;
        }
    }
    Ok(code)
}

fn fmt_secs(d: Duration) -> String {
    format!("{} s", d.as_secs_f64())
}
