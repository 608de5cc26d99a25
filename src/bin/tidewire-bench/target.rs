//! `tidewire-bench target`: one engine serving one pattern-filled registered buffer until stdin
//! closes (or `--max-seconds` pass, or a signal ends the process).

use crate::args::{self, UsageError};
use crate::pattern::{self, AlignedBuf};
use std::io::{Read, Write};
use std::sync::mpsc;
use std::time::Duration;
use tidewire::{Config, Engine};

/// Seed of the pattern the target's buffer starts with.
pub const TARGET_SEED: u64 = 0;
/// Default registered buffer size.
pub const DEFAULT_BUFFER: u64 = 256 << 20;

/// Runs the target; returns the exit status.
pub fn main(argv: &[String]) -> Result<i32, UsageError> {
    let p = args::parse(
        argv,
        &["host", "buffer-size", "metadata", "max-seconds", "lanes"],
        &["shared"],
    )?;
    let host = p.get("host").unwrap_or("127.0.0.1").to_string();
    let size = p.size("buffer-size", DEFAULT_BUFFER)?;
    let max = p
        .get("max-seconds")
        .map(|_| p.duration("max-seconds", Duration::ZERO))
        .transpose()?;
    let mut cfg = Config::default();
    let mut set = |k: &str, v: &str| {
        cfg.set(k, v)
            .map_err(|e| UsageError(format!("{k}={v:?}: {e}")))
    };
    set("local_server_name", &host)?;
    if let Some(m) = p.get("metadata") {
        set("metadata", m)?;
    }
    if let Some(l) = p.get("lanes") {
        set("tcp_lanes", l)?;
    }
    Ok(match serve(cfg, size, max, p.flag("shared")) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("tidewire-bench target: {e}");
            1
        }
    })
}

fn serve(cfg: Config, size: u64, max: Option<Duration>, shared: bool) -> Result<(), String> {
    // Declared before the engine, so even an early return drops the engine (and its server
    // threads) before the buffer they serve.
    let len = usize::try_from(size).map_err(|_| "buffer too large".to_string())?;
    let mut buf = AlignedBuf::new(len)?;
    pattern::fill(buf.as_mut_slice(), 0, TARGET_SEED);
    let engine = Engine::new(cfg).map_err(|e| format!("starting engine: {e}"))?;
    engine
        .register_memory(buf.addr(), size, "cpu:0", true)
        .map_err(|e| format!("registering {size} bytes: {e}"))?;
    let mut also = String::new();
    if shared {
        let a = engine
            .alloc_shared(size)
            .map_err(|e| format!("allocating {size} shared bytes: {e}"))?;
        // SAFETY: the engine just allocated `len` writable bytes at `a`; they stay mapped until
        // the engine is dropped, after this function's last use of them.
        let bytes = unsafe { std::slice::from_raw_parts_mut(a as *mut u8, len) };
        pattern::fill(bytes, 0, TARGET_SEED);
        also = format!(" shared={a:#x}");
    }
    {
        let mut out = std::io::stdout().lock();
        writeln!(
            out,
            "READY segment={} addr={:#x} size={} pid={}{also}",
            engine.name(),
            buf.addr(),
            size,
            std::process::id()
        )
        .and_then(|()| out.flush())
        .map_err(|e| format!("writing READY: {e}"))?;
    }
    let (tx, rx) = mpsc::channel::<()>();
    // Detached: blocks in read(2) until stdin reaches EOF, then tells the main thread.
    std::thread::Builder::new()
        .name("stdin-watch".into())
        .spawn(move || {
            let mut sink = [0u8; 256];
            let mut stdin = std::io::stdin().lock();
            while matches!(stdin.read(&mut sink), Ok(n) if n > 0) {}
            let _ = tx.send(());
        })
        .map_err(|e| format!("starting stdin watcher: {e}"))?;
    match max {
        Some(d) => {
            let _ = rx.recv_timeout(d);
        }
        None => {
            let _ = rx.recv();
        }
    }
    // The engine (and its server threads) must be gone before the buffer is freed.
    drop(engine);
    drop(buf);
    Ok(())
}
