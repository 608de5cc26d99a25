//! The soak's worker threads: rounds of one WRITE batch of fresh pattern bytes into the thread's
//! own part of the current target's buffer, then one READ batch of the same ranges, every byte
//! read compared with what was written. Block sizes and batch lengths vary from round to round.
//!
//! A failed request is *attributed to a restart* when the target generation it was sent to had
//! been retired (its stop had begun) by the time the failure was seen; any other failure, and any
//! byte that reads back wrong, is a finding.

use crate::pattern::{self, AlignedBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tidewire::engine::{SegmentId, TaskState};
use tidewire::{Engine, Opcode, Request};

/// Block sizes a round picks from (4 KiB .. 4 MiB).
pub const BLOCKS: [u64; 6] = [4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20];
/// Remote (and local, twice: source and read-back) bytes each worker thread owns.
pub const SLOT: u64 = 8 << 20;
/// Most requests in one batch.
const MAX_BATCH: u64 = 16;
/// How long one batch may take before it counts as failed.
const BATCH_DEADLINE: Duration = Duration::from_secs(60);

/// One incarnation of the target, as the workers see it.
#[derive(Debug, Clone, Copy)]
pub struct Generation {
    /// 1 for the first target, +1 per restart.
    pub id: u64,
    /// Its segment in the initiator's engine.
    pub segment: SegmentId,
    /// Its registered buffer.
    pub addr: u64,
}

/// The current target and which generations are retired.
#[derive(Default)]
pub struct Targets {
    current: Mutex<Option<Generation>>,
    /// Generations below this id are retired.
    retired_below: AtomicU64,
}

impl Targets {
    /// The generation workers should use now (none while a restart is under way).
    pub fn current(&self) -> Option<Generation> {
        *self.current.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Marks the current generation retired before its process is stopped.
    pub fn retire(&self) -> Option<Generation> {
        let old = self
            .current
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(g) = old {
            // SeqCst: a worker that sees a failure after this store also sees the retirement.
            self.retired_below.store(g.id + 1, Ordering::SeqCst);
        }
        old
    }

    /// Makes `g` the current generation.
    pub fn publish(&self, g: Generation) {
        *self.current.lock().unwrap_or_else(|e| e.into_inner()) = Some(g);
    }

    fn is_retired(&self, id: u64) -> bool {
        id < self.retired_below.load(Ordering::SeqCst)
    }
}

/// Running totals, shared by the workers and the reporter.
#[derive(Default)]
pub struct Totals {
    /// Successful READ requests (bytes verified).
    pub read_ok: AtomicU64,
    /// Successful WRITE requests.
    pub write_ok: AtomicU64,
    /// Failed READ requests.
    pub read_failed: AtomicU64,
    /// Failed WRITE requests.
    pub write_failed: AtomicU64,
    /// Failed requests sent to a generation retired by then.
    pub attributed: AtomicU64,
    /// Failed requests sent to a live generation.
    pub unattributed: AtomicU64,
    /// READs that completed with bytes other than those written.
    pub corrupt: AtomicU64,
    /// Bytes moved by successful requests.
    pub bytes: AtomicU64,
    /// First unattributed failure or corruption, for the report.
    pub first_finding: Mutex<Option<String>>,
}

impl Totals {
    fn finding(&self, msg: String) {
        self.first_finding
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get_or_insert(msg);
    }
}

/// What one worker needs.
pub struct Worker {
    /// Thread index: selects its parts of both buffers.
    pub index: usize,
    /// Initiator engine.
    pub engine: Arc<Engine>,
    /// Local buffer: `2 * SLOT` bytes per thread (source, then read-back).
    pub local: Arc<AlignedBuf>,
    /// Target generations.
    pub targets: Arc<Targets>,
    /// Counters.
    pub totals: Arc<Totals>,
    /// Set when the soak ends.
    pub stop: Arc<AtomicBool>,
}

/// A small deterministic generator (xorshift64*) for block sizes and batch lengths.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) % n
    }
}

impl Worker {
    /// Runs rounds until `stop` is set.
    pub fn run(self) {
        let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ (self.index as u64 + 1));
        let mut round = 0u64;
        while !self.stop.load(Ordering::Relaxed) {
            let Some(generation) = self.targets.current() else {
                std::thread::sleep(Duration::from_millis(5));
                continue;
            };
            let block = BLOCKS[rng.below(BLOCKS.len() as u64) as usize];
            let n = 1 + rng.below(MAX_BATCH.min(SLOT / block));
            round += 1;
            let seed = ((self.index as u64) << 40) | round;
            self.round(generation, block, n, seed);
        }
    }

    /// One WRITE batch then one READ batch of `n` blocks of `block` bytes.
    fn round(&self, g: Generation, block: u64, n: u64, seed: u64) {
        let src = self.index as u64 * 2 * SLOT;
        let dst = src + SLOT;
        let remote = g.addr + self.index as u64 * SLOT;
        let len = (n * block) as usize;
        // SAFETY: this thread owns [src, src+SLOT) and [dst, dst+SLOT) of the local buffer, and
        // none of its transfers is in flight between rounds.
        unsafe {
            self.local.fill_range(src as usize, len, 0, seed);
            self.local.zero_range(dst as usize, len);
        }
        let base = self.local.addr();
        let req = |op, local: u64, i: u64| Request {
            op,
            local: base + local + i * block,
            segment: g.segment,
            remote: remote + i * block,
            len: block,
        };
        let writes: Vec<Request> = (0..n).map(|i| req(Opcode::Write, src, i)).collect();
        let written = self.batch(g, &writes);
        let reads: Vec<Request> = (0..n)
            .filter(|&i| written[i as usize])
            .map(|i| req(Opcode::Read, dst, i))
            .collect();
        if reads.is_empty() {
            return;
        }
        let read = self.batch(g, &reads);
        for (r, ok) in reads.iter().zip(read) {
            if !ok {
                continue;
            }
            let off = r.local - base;
            let got = &self.local.as_slice()[off as usize..(off + r.len) as usize];
            let pat_off = off - dst;
            if let Some(bad) = pattern::first_mismatch(got, pat_off, seed) {
                self.totals.corrupt.fetch_add(1, Ordering::Relaxed);
                self.totals.finding(format!(
                    "generation {}: READ of {} bytes at remote {:#x} completed but byte {bad} \
                     differs from what was written",
                    g.id, r.len, r.remote
                ));
            }
        }
    }

    /// Submits `reqs` as one batch, waits, frees it; returns which requests completed and
    /// counts every request.
    fn batch(&self, g: Generation, reqs: &[Request]) -> Vec<bool> {
        let e = &self.engine;
        let outcome = e.alloc_batch(reqs.len()).and_then(|id| {
            if let Err(err) = e.submit(id, reqs) {
                let _ = e.free_batch(id);
                return Err(err);
            }
            Ok(id)
        });
        let mut done = vec![false; reqs.len()];
        let mut why = None;
        match outcome {
            Err(err) => why = Some(format!("submit: {err}")),
            Ok(id) => {
                let waited = e.wait_batch(id, Some(BATCH_DEADLINE));
                for (i, d) in done.iter_mut().enumerate() {
                    *d = waited.is_ok()
                        || matches!(e.task_status(id, i), Ok(st) if st.state == TaskState::Completed);
                    if !*d && why.is_none() {
                        let err = e.task_status(id, i).ok().and_then(|st| st.error);
                        why = Some(format!(
                            "{:?}",
                            err.or(waited.as_ref().err().map(|x| x.kind()))
                        ));
                    }
                }
                if let Err(err) = e.free_batch(id) {
                    self.totals
                        .finding(format!("free_batch after wait: {err} (batch leaked)"));
                    self.totals.unattributed.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        self.count(g, reqs, &done, why);
        done
    }

    fn count(&self, g: Generation, reqs: &[Request], done: &[bool], why: Option<String>) {
        let t = &self.totals;
        let retired = self.targets.is_retired(g.id);
        for (r, &ok) in reqs.iter().zip(done) {
            let (good, bad) = match r.op {
                Opcode::Read => (&t.read_ok, &t.read_failed),
                Opcode::Write => (&t.write_ok, &t.write_failed),
            };
            if ok {
                good.fetch_add(1, Ordering::Relaxed);
                t.bytes.fetch_add(r.len, Ordering::Relaxed);
                continue;
            }
            bad.fetch_add(1, Ordering::Relaxed);
            if retired {
                t.attributed.fetch_add(1, Ordering::Relaxed);
            } else {
                t.unattributed.fetch_add(1, Ordering::Relaxed);
                t.finding(format!(
                    "generation {} (live): {:?} of {} bytes failed: {}",
                    g.id,
                    r.op,
                    r.len,
                    why.as_deref().unwrap_or("?")
                ));
            }
        }
    }
}
