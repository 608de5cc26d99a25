//! `tidewire-bench soak`: worker threads move mixed READ/WRITE batches (4 KiB .. 4 MiB blocks,
//! every byte verified) against a target process that is restarted every `--restart-every`
//! seconds, alternately killed (SIGKILL) and stopped (stdin closed); the initiator's and the
//! target's RSS, open fds and threads are printed each `--sample-every` (a minute), then totals
//! and a verdict: flat or not, every failure attributed to a restart or not.

use crate::args::{self, UsageError};
use crate::child::{self, TargetChild};
use crate::pattern::AlignedBuf;
use crate::procstat::{self, Usage};
use crate::soak_report::{self, Row};
use crate::soak_work::{Generation, SLOT, Targets, Totals, Worker};
use crate::spec::PathChoice;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use tidewire::{Config, Engine};

/// The initiator's transfer deadline unless `--transfer-timeout` says otherwise. A peer that no
/// open segment uses any more is released once its last work is past this deadline, so the
/// engine holds about `1 + deadline / restart period` peers at any time: with 10 s and restarts
/// every 30 s that steady state (the current target and the one just stopped) is reached before
/// the first reading, and growth after it is a leak. With the engine's 30 s default it takes
/// about a minute longer to settle.
const DEFAULT_TRANSFER_TIMEOUT: Duration = Duration::from_secs(10);

/// What a soak run was asked to do.
struct SoakOpts {
    run_for: Duration,
    restart_every: Duration,
    sample_every: Duration,
    threads: usize,
    host: String,
    path: PathChoice,
    transfer_timeout: Duration,
}

fn opts(argv: &[String]) -> Result<SoakOpts, UsageError> {
    let p = args::parse(
        argv,
        &[
            "minutes",
            "restart-every",
            "sample-every",
            "threads",
            "host",
            "path",
            "transfer-timeout",
        ],
        &[],
    )?;
    let minutes = match p.get("minutes") {
        None => 10.0,
        Some(v) => match v.trim().parse::<f64>() {
            Ok(m) if m.is_finite() && m > 0.0 && m <= 7.0 * 24.0 * 60.0 => m,
            _ => {
                return Err(UsageError(format!(
                    "--minutes: expected a positive number of minutes, got {v:?}"
                )));
            }
        },
    };
    let path = match p.get("path") {
        None => PathChoice::Tcp,
        Some(v) => PathChoice::parse(v).ok_or_else(|| {
            UsageError(format!(
                "--path: expected auto, tcp or same-host, got {v:?}"
            ))
        })?,
    };
    Ok(SoakOpts {
        run_for: Duration::from_secs_f64(minutes * 60.0),
        restart_every: p.duration("restart-every", Duration::from_secs(30))?,
        sample_every: p.duration("sample-every", Duration::from_secs(60))?,
        threads: p.count("threads", 4, 16)?,
        host: p.get("host").unwrap_or("127.0.0.1").to_string(),
        path,
        transfer_timeout: p.duration("transfer-timeout", DEFAULT_TRANSFER_TIMEOUT)?,
    })
}

/// Runs the soak; exit status 0 when it held (flat, no unattributed failure, no corruption).
pub fn main(argv: &[String]) -> Result<i32, UsageError> {
    let o = opts(argv)?;
    let mut cfg = Config::default();
    cfg.set("local_server_name", &o.host)
        .map_err(|e| UsageError(format!("--host: {e}")))?;
    o.path.apply(&mut cfg).map_err(UsageError)?;
    cfg.set(
        "transfer_timeout_ms",
        &o.transfer_timeout.as_millis().to_string(),
    )
    .map_err(|e| UsageError(format!("--transfer-timeout: {e}")))?;
    Ok(match run(&o, cfg) {
        Ok(held) => i32::from(!held),
        Err(e) => {
            eprintln!("tidewire-bench soak: {e}");
            1
        }
    })
}

/// The target process of the current generation and the initiator's view of it.
struct Live {
    child: TargetChild,
    generation: Generation,
}

fn start_target(o: &SoakOpts, engine: &Engine, id: u64) -> Result<Live, String> {
    let args = vec![
        "--host".to_string(),
        o.host.clone(),
        "--buffer-size".to_string(),
        (SLOT * o.threads as u64).to_string(),
    ];
    let child = TargetChild::spawn(&args, child::READY_TIMEOUT)?;
    let segment = engine
        .open_segment(&child.ready.segment)
        .map_err(|e| format!("opening segment {:?}: {e}", child.ready.segment))?;
    o.path
        .check(engine.segment_path(segment).unwrap_or("unknown"))?;
    let generation = Generation {
        id,
        segment,
        addr: child.ready.addr,
    };
    Ok(Live { child, generation })
}

/// One restart: retire, stop (alternately SIGKILL and a clean stop), forget the segment, start
/// the next target and publish it. Returns how long the workers had no target.
fn restart(
    o: &SoakOpts,
    engine: &Engine,
    targets: &Targets,
    live: &mut Live,
    kill: bool,
) -> Result<Duration, String> {
    let t0 = Instant::now();
    let old = targets.retire().unwrap_or(live.generation);
    if kill {
        live.child.kill()?;
    } else {
        live.child.stop()?;
    }
    engine
        .close_segment(old.segment)
        .map_err(|e| format!("closing segment of generation {}: {e}", old.id))?;
    *live = start_target(o, engine, old.id + 1)?;
    targets.publish(live.generation);
    Ok(t0.elapsed())
}

fn row(at: Duration, live: Option<&Live>, restarts: u64, t: &Totals) -> Result<Row, String> {
    let load = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
    Ok(Row {
        secs: at.as_secs_f64().round() as u64,
        initiator: procstat::usage(std::process::id())
            .ok_or("cannot read this process's /proc entry")?,
        target: live.and_then(|l| {
            let pid = l.child.pid();
            procstat::usage(pid).map(|u| (pid, u))
        }),
        restarts,
        ok: load(&t.read_ok) + load(&t.write_ok),
        failed: load(&t.read_failed) + load(&t.write_failed),
        bytes: load(&t.bytes),
    })
}

fn run(o: &SoakOpts, cfg: Config) -> Result<bool, String> {
    let local_len = 2 * SLOT * o.threads as u64;
    // Declared before the engine: the engine is dropped first.
    let local = Arc::new(AlignedBuf::new(local_len as usize)?);
    let engine = Arc::new(Engine::new(cfg).map_err(|e| format!("starting engine: {e}"))?);
    engine
        .register_memory(local.addr(), local_len, "cpu:0", true)
        .map_err(|e| format!("registering local buffer: {e}"))?;
    let targets = Arc::new(Targets::default());
    let totals = Arc::new(Totals::default());
    let stop = Arc::new(AtomicBool::new(false));
    let mut live = start_target(o, &engine, 1)?;
    targets.publish(live.generation);
    println!(
        "soak: {} worker threads, blocks 4 KiB..4 MiB, WRITE then verified READ-back; target \
         restarted every {:.0} s (alternately SIGKILL and clean stop); {:.1} min; transfer \
         deadline {:.0} s; path {}",
        o.threads,
        o.restart_every.as_secs_f64(),
        o.run_for.as_secs_f64() / 60.0,
        o.transfer_timeout.as_secs_f64(),
        engine.segment_path(live.generation.segment).unwrap_or("?")
    );
    soak_report::print_header();
    let mut rows = vec![row(Duration::ZERO, Some(&live), 0, &totals)?];
    soak_report::print_row(&rows[0]);
    let workers: Vec<_> = (0..o.threads)
        .map(|index| {
            let w = Worker {
                index,
                engine: engine.clone(),
                local: local.clone(),
                targets: targets.clone(),
                totals: totals.clone(),
                stop: stop.clone(),
            };
            std::thread::Builder::new()
                .name(format!("soak-{index}"))
                .spawn(move || w.run())
                .map_err(|e| format!("starting worker: {e}"))
        })
        .collect::<Result<_, _>>()?;
    let t0 = Instant::now();
    let end = t0 + o.run_for;
    let (mut next_sample, mut next_restart) = (t0 + o.sample_every, t0 + o.restart_every);
    let (mut restarts, mut windows) = (0u64, Vec::new());
    let mut failure = None;
    loop {
        let now = Instant::now();
        if now >= next_sample || now >= end {
            rows.push(row(now - t0, Some(&live), restarts, &totals)?);
            soak_report::print_row(rows.last().expect("pushed"));
            next_sample += o.sample_every;
        }
        if now >= end {
            break;
        }
        if now >= next_restart {
            match restart(o, &engine, &targets, &mut live, restarts % 2 == 0) {
                Ok(w) => windows.push(w),
                Err(e) => {
                    failure = Some(format!("restart {}: {e}", restarts + 1));
                    break;
                }
            }
            restarts += 1;
            next_restart += o.restart_every;
        }
        let wake = next_sample.min(next_restart).min(end);
        std::thread::sleep(
            wake.saturating_duration_since(Instant::now())
                .min(Duration::from_millis(200)),
        );
    }
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        w.join()
            .map_err(|_| "a worker thread panicked".to_string())?;
    }
    let _ = live.child.stop();
    let _ = engine.close_segment(live.generation.segment);
    drop(engine);
    Ok(verdict(&rows, &totals, &windows, restarts, failure))
}

fn verdict(
    rows: &[Row],
    t: &Totals,
    windows: &[Duration],
    restarts: u64,
    failure: Option<String>,
) -> bool {
    let load = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
    let (ro, wo, rf, wf) = (
        load(&t.read_ok),
        load(&t.write_ok),
        load(&t.read_failed),
        load(&t.write_failed),
    );
    let (attributed, unattributed, corrupt) =
        (load(&t.attributed), load(&t.unattributed), load(&t.corrupt));
    let longest = windows.iter().max().copied().unwrap_or_default();
    println!(
        "totals: READ ok {ro} failed {rf}; WRITE ok {wo} failed {wf}; {:.2} GB moved; \
         {restarts} restarts (longest without a target: {} ms)",
        load(&t.bytes) as f64 / 1e9,
        longest.as_millis()
    );
    println!(
        "failures: {attributed} attributed to a restart (sent to a target already being \
         stopped), {unattributed} not attributed; {corrupt} READs returned wrong bytes"
    );
    if let Some(f) = t
        .first_finding
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .as_ref()
    {
        println!("first finding: {f}");
    }
    println!("rule: {}", soak_report::rule());
    let mut held = failure.is_none() && unattributed == 0 && corrupt == 0 && ro > 0 && wo > 0;
    if let Some(f) = &failure {
        println!("soak ended early: {f}");
    }
    let usage = |r: &Row| -> Usage { r.initiator };
    match (rows.get(1), rows.last()) {
        (Some(first), Some(last)) if rows.len() >= 3 => {
            let grew = soak_report::growth(&usage(first), &usage(last));
            if grew.is_empty() {
                println!(
                    "verdict: initiator RSS, fds and threads FLAT (first-interval vs last \
                     reading)"
                );
            } else {
                held = false;
                println!("verdict: initiator NOT flat: {}", grew.join(", "));
            }
        }
        _ => {
            held = false;
            println!("verdict: too short for a flatness verdict (needs two sample intervals)");
        }
    }
    println!("soak {}", if held { "PASSED" } else { "FAILED" });
    held
}
