//! `tidewire-bench handoff`: how fast bytes written by one CPU can be read by another, with no
//! engine and no kernel involved. One thread copies blocks into a small ring, another copies
//! them out, each pinned to its own CPU; the rate is printed per interval. Every transfer over
//! loopback TCP does this handoff (the sender's copy into socket buffers, the receiver's copy
//! out), so it bounds what any engine can reach here, and it shows whether the machine's rate
//! changes on its own (on the VM of BENCHMARKS.md it moves between two levels for seconds at a
//! time, whatever the processes do).

use crate::args::{self, UsageError};
use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Ring slots: enough for the producer to run ahead while the consumer copies.
const SLOTS: usize = 8;

/// Distinct source and destination blocks cycled through, so they do not stay in cache.
const SPAN: usize = 64;

/// Options: `--block-size` (default 256K), `--duration` (default 6 s), `--interval` (0.5 s),
/// `--cpus A,B` (default 0,1).
pub fn main(argv: &[String]) -> Result<i32, UsageError> {
    let p = args::parse(argv, &["block-size", "duration", "interval", "cpus"], &[])?;
    let block = p.size("block-size", 256 << 10)? as usize;
    if block == 0 || block > (64 << 20) {
        return Err(UsageError("--block-size must be 1 byte to 64 MiB".into()));
    }
    let total = p.duration("duration", Duration::from_secs(6))?;
    let every = p.duration("interval", Duration::from_millis(500))?;
    let cpus: Vec<usize> = p
        .get("cpus")
        .unwrap_or("0,1")
        .split(',')
        .map(|c| c.trim().parse::<usize>())
        .collect::<Result<_, _>>()
        .map_err(|_| UsageError("--cpus takes two CPU numbers, e.g. 0,1".into()))?;
    let [from, to] = cpus[..] else {
        return Err(UsageError("--cpus takes two CPU numbers, e.g. 0,1".into()));
    };
    let ring = Ring::new(block);
    let src = vec![0x5au8; block * SPAN];
    let mut dst = vec![0u8; block * SPAN];
    let stop = AtomicBool::new(false);
    let mut rates = Vec::new();
    std::thread::scope(|s| {
        s.spawn(|| {
            pin(from);
            ring.produce(&src, &stop);
        });
        pin(to);
        let (start, mut mark, mut moved) = (Instant::now(), Instant::now(), 0u64);
        let mut i = 0usize;
        while start.elapsed() < total {
            if ring.consume(i, &mut dst[(i % SPAN) * block..][..block], &stop) {
                i += 1;
                moved += block as u64;
            }
            if mark.elapsed() >= every {
                let gbps = moved as f64 / mark.elapsed().as_secs_f64() / 1e9;
                // A closed stdout (`| head`) ends nothing: the run and its summary go on.
                let mut out = std::io::stdout();
                let _ = write!(out, "{gbps:.1} ").and_then(|_| out.flush());
                rates.push(gbps);
                (mark, moved) = (Instant::now(), 0);
            }
        }
        stop.store(true, Ordering::Relaxed);
    });
    rates.sort_by(f64::total_cmp);
    let q = |f: f64| rates.get(((rates.len() - 1) as f64 * f) as usize).copied();
    let summary = match (q(0.0), q(0.5), q(1.0)) {
        (Some(lo), Some(mid), Some(hi)) => format!(
            "handoff CPU {from} -> CPU {to}, {} KiB blocks: median {mid:.2} GB/s \
             (intervals {lo:.1}-{hi:.1})",
            block >> 10
        ),
        _ => "no interval completed".to_string(),
    };
    let _ = writeln!(std::io::stdout(), "\n{summary}");
    Ok(0)
}

/// Single-producer, single-consumer ring of `SLOTS` blocks: slot `k` holds block `n` when
/// `filled[k] == n + 1`.
struct Ring {
    block: usize,
    data: Box<[std::cell::UnsafeCell<u8>]>,
    filled: [AtomicU64; SLOTS],
}

// SAFETY: a slot's bytes are written only by the producer while `filled` says it is free, and
// read only by the consumer after the Acquire load that sees it filled (and vice versa).
unsafe impl Sync for Ring {}

impl Ring {
    fn new(block: usize) -> Ring {
        Ring {
            block,
            data: (0..block * SLOTS).map(|_| 0u8.into()).collect(),
            filled: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }

    fn slot(&self, k: usize) -> *mut u8 {
        // A pointer from the whole slice (not one cell), so it may cover the whole block.
        std::cell::UnsafeCell::raw_get(self.data.as_ptr().wrapping_add(k * self.block))
    }

    /// Fills slots in order until `stop`.
    fn produce(&self, src: &[u8], stop: &AtomicBool) {
        let mut n = 0u64;
        while !stop.load(Ordering::Relaxed) {
            let k = n as usize % SLOTS;
            // The slot is free once the consumer has taken block n - SLOTS (or it never held one).
            while self.filled[k].load(Ordering::Acquire) != 0 {
                if stop.load(Ordering::Relaxed) {
                    return;
                }
                std::hint::spin_loop();
            }
            let from = &src[(n as usize % SPAN) * self.block..][..self.block];
            // SAFETY: slot `k` is free (Acquire above), so only this thread touches its bytes.
            unsafe { std::ptr::copy_nonoverlapping(from.as_ptr(), self.slot(k), self.block) };
            self.filled[k].store(n + 1, Ordering::Release);
            n += 1;
        }
    }

    /// Copies block `n` out into `out` once it is there; `false` if `stop` came first.
    fn consume(&self, n: usize, out: &mut [u8], stop: &AtomicBool) -> bool {
        let k = n % SLOTS;
        while self.filled[k].load(Ordering::Acquire) != n as u64 + 1 {
            if stop.load(Ordering::Relaxed) {
                return false;
            }
            std::hint::spin_loop();
        }
        // SAFETY: the producer filled slot `k` (Acquire above) and waits until we free it.
        unsafe { std::ptr::copy_nonoverlapping(self.slot(k), out.as_mut_ptr(), self.block) };
        self.filled[k].store(0, Ordering::Release);
        true
    }
}

/// Pins the calling thread to `cpu` (best effort: a refusal leaves it where it is).
fn pin(cpu: usize) {
    // SAFETY: cpu_set_t is plain data; all-zero is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: CPU_SET writes one bit inside `set`; sched_setaffinity reads it.
    unsafe {
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ring_hands_over_every_block_in_order() {
        let block = 4096;
        let ring = Ring::new(block);
        let src: Vec<u8> = (0..block * SPAN).map(|i| (i / block) as u8).collect();
        let stop = AtomicBool::new(false);
        let mut out = vec![0u8; block];
        std::thread::scope(|s| {
            s.spawn(|| ring.produce(&src, &stop));
            for n in 0..5 * SPAN {
                assert!(ring.consume(n, &mut out, &stop));
                assert!(out.iter().all(|&b| b == (n % SPAN) as u8), "block {n}");
            }
            stop.store(true, Ordering::Relaxed);
        });
    }
}
