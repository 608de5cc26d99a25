//! What to run: direction, path and the configuration of one measurement.

use std::time::Duration;
use tidewire::{Config, Opcode};

/// Direction of the requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpKind {
    /// Remote → local.
    Read,
    /// Local → remote.
    Write,
    /// Alternating READ and WRITE requests within every batch.
    Mixed,
}

impl OpKind {
    /// From the `--op` value.
    pub fn parse(v: &str) -> Option<OpKind> {
        match v {
            "read" => Some(OpKind::Read),
            "write" => Some(OpKind::Write),
            "mixed" => Some(OpKind::Mixed),
            _ => None,
        }
    }

    /// The `--op` spelling.
    pub fn name(self) -> &'static str {
        match self {
            OpKind::Read => "read",
            OpKind::Write => "write",
            OpKind::Mixed => "mixed",
        }
    }

    /// The opcode of request `j` of a batch.
    pub fn opcode(self, j: usize) -> Opcode {
        match self {
            OpKind::Read => Opcode::Read,
            OpKind::Write => Opcode::Write,
            OpKind::Mixed if j % 2 == 0 => Opcode::Read,
            OpKind::Mixed => Opcode::Write,
        }
    }
}

/// Which way the bytes should travel between two tidewire processes on one host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PathChoice {
    /// Whatever the engine picks (its configuration and environment decide).
    Auto,
    /// Every byte through the TCP wire protocol (the engine's same-host shortcut off).
    Tcp,
    /// The same-host shortcut; a run fails when the engine cannot use it.
    SameHost,
    /// The target's buffer is a shared buffer the initiator maps (memcpy, no socket); a run
    /// fails when the engine cannot use it.
    SharedMemory,
}

impl PathChoice {
    /// From the `--path` value.
    pub fn parse(v: &str) -> Option<PathChoice> {
        match v {
            "auto" => Some(PathChoice::Auto),
            "tcp" => Some(PathChoice::Tcp),
            "same-host" => Some(PathChoice::SameHost),
            "shared-memory" => Some(PathChoice::SharedMemory),
            _ => None,
        }
    }

    /// The `--path` value naming it.
    pub fn name(self) -> &'static str {
        match self {
            PathChoice::Auto => "auto",
            PathChoice::Tcp => "tcp",
            PathChoice::SameHost => "same-host",
            PathChoice::SharedMemory => "shared-memory",
        }
    }

    /// Sets the engine option that selects this path.
    pub fn apply(self, cfg: &mut Config) -> Result<(), String> {
        let v = match self {
            PathChoice::Auto => return Ok(()),
            PathChoice::Tcp => "0",
            PathChoice::SameHost | PathChoice::SharedMemory => "1",
        };
        cfg.set("same_host", v)
            .map_err(|e| format!("same_host={v}: {e}"))
    }

    /// Checks the path the engine reports (`Engine::segment_path`) against the choice.
    pub fn check(self, actual: &str) -> Result<(), String> {
        let want = match self {
            PathChoice::Auto => return Ok(()),
            PathChoice::Tcp => "tcp",
            PathChoice::SameHost => "same-host",
            PathChoice::SharedMemory => "shared-memory",
        };
        if actual == want {
            Ok(())
        } else {
            Err(format!(
                "asked for the {want} path, but the engine uses {actual} for this segment"
            ))
        }
    }
}

/// One benchmark configuration.
#[derive(Debug, Clone)]
pub struct Spec {
    /// Direction.
    pub op: OpKind,
    /// Bytes per request.
    pub block: u64,
    /// Requests per batch.
    pub batch: usize,
    /// Worker threads.
    pub threads: usize,
    /// Batches in flight per thread.
    pub queue_depth: usize,
    /// Measured time (after one warm-up round per thread).
    pub duration: Duration,
    /// Check every byte read (and keep written bytes equal to the target's pattern).
    pub verify: bool,
}

impl Spec {
    /// Bytes of local (and remote) buffer one thread works on.
    pub fn per_thread(&self) -> u64 {
        self.block * self.batch as u64 * self.queue_depth as u64
    }

    /// Local buffer bytes the whole run needs.
    pub fn local_bytes(&self) -> u64 {
        self.per_thread() * self.threads as u64
    }
}
