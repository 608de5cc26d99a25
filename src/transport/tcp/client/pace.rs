//! Who reads a large READ batch whose caller waits for it: the caller itself, on one stream
//! (the fastest way while the host moves cache lines between CPUs quickly), or the lanes'
//! receiver threads, two streams in parallel (steadier when copying out of socket buffers is
//! slow: then a second reader does what one cannot).
//!
//! Each peer keeps the caller's typical rate for its recent large READs: bytes over seconds of
//! about the last [`TYPICAL_SPAN`] of such reading (older batches fade exponentially). Slow
//! batches in a row (each under [`SLOW_FRACTION`] of that rate, [`SLOW_BYTES`] in all) send
//! the following ones to the lanes for [`LANES_HOLD`]; the first one after that is read by the
//! caller again, which measures afresh. Slow batches count too, so a peer that became slower
//! for good counts as normal after about a minute of such probes (a few seconds of slow reading
//! in all) and stays with the caller. Batches that took under [`MIN_TIMED`] (refused at once,
//! say: no data moved) are not counted, so they cannot make later batches look slow.
//!
//! On the 2-CPU VM of `BENCHMARKS.md` the cross-CPU copy rate drops two- to sixfold for seconds
//! at a time. Alternating 1 s windows with and without this, READ 16 MiB x32, 160 s: median
//! 5.48 vs 5.56 GB/s, 5th percentile 3.88 vs 2.14, windows under 3 GB/s 1 vs 7 of 76.

use crate::sync::LockClean;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Batches of at least this many bytes are measured and may go to the lanes. With 4 MiB
/// (READ 1 MiB x4, alternating 0.5 s windows for 120 s) the lanes were no steadier than the
/// caller in slow stretches (5th percentile 2.94 vs 3.63 GB/s): their hand-offs cost as much as
/// a second reader gains on batches that short.
pub(super) const PACED_MIN_BYTES: u64 = 16 << 20;

/// Batches that took less are not counted (16 MiB takes 1.7 ms at this machine's memcpy speed
/// of 10 GB/s, and longer over TCP).
const MIN_TIMED: Duration = Duration::from_millis(1);

/// A batch read at less than this fraction of the typical rate counts as slow.
const SLOW_FRACTION: f64 = 0.6;

/// Slow batches in a row of at least this many bytes in all send the following ones to the
/// lanes (two 64 MiB batches, one of 512 MiB: one short slow batch alone is noise).
const SLOW_BYTES: u64 = 96 << 20;

/// How long large READs go to the lanes after a run of slow ones.
const LANES_HOLD: Duration = Duration::from_secs(1);

/// The typical rate covers about this much reading time: before a batch that took `t` is
/// added, what came before is scaled by `exp(-t / TYPICAL_SPAN)`.
const TYPICAL_SPAN: Duration = Duration::from_secs(4);

/// Per peer: how its recent large READs went when the caller read them.
#[derive(Default)]
pub(super) struct ReadPace {
    state: Mutex<PaceState>,
}

#[derive(Default)]
struct PaceState {
    /// Bytes and seconds of the caller's recent large READs, both fading with reading time.
    recent_bytes: f64,
    recent_secs: f64,
    /// Bytes of the slow batches in a row so far.
    slow_bytes: u64,
    /// Large READs go to the lanes until then.
    lanes_until: Option<Instant>,
}

impl ReadPace {
    fn state(&self) -> std::sync::MutexGuard<'_, PaceState> {
        self.state.lock_clean()
    }

    /// Whether the caller should read a large waited READ batch itself at `now`.
    pub(super) fn caller_reads(&self, now: Instant) -> bool {
        self.state().lanes_until.is_none_or(|t| now >= t)
    }

    /// Records that the caller read `bytes` in `took`, ending at `now`.
    pub(super) fn record(&self, bytes: u64, took: Duration, now: Instant) {
        if took < MIN_TIMED {
            return;
        }
        let secs = took.as_secs_f64();
        let rate = bytes as f64 / secs;
        let mut st = self.state();
        let typical = if st.recent_secs > 0.0 {
            st.recent_bytes / st.recent_secs
        } else {
            0.0
        };
        if rate < SLOW_FRACTION * typical {
            st.slow_bytes += bytes;
            if st.slow_bytes >= SLOW_BYTES {
                st.slow_bytes = 0;
                st.lanes_until = Some(now + LANES_HOLD);
            }
        } else {
            st.slow_bytes = 0;
        }
        // Slow batches count too, so a peer that became slower for good becomes the norm.
        let fade = (-secs / TYPICAL_SPAN.as_secs_f64()).exp();
        st.recent_bytes = st.recent_bytes * fade + bytes as f64;
        st.recent_secs = st.recent_secs * fade + secs;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GB: u64 = 1_000_000_000;
    const MIB64: u64 = 64 << 20;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// Records `n` batches of `bytes` at `gbps`, back to back from `*t`.
    fn batches(p: &ReadPace, t: &mut Instant, n: usize, bytes: u64, gbps: f64) {
        for _ in 0..n {
            let took = Duration::from_secs_f64(bytes as f64 / (gbps * GB as f64));
            *t += took;
            p.record(bytes, took, *t);
        }
    }

    #[test]
    fn slow_batches_in_a_row_send_the_next_ones_to_the_lanes_for_a_while() {
        let p = ReadPace::default();
        let mut t = Instant::now();
        assert!(p.caller_reads(t), "no history: the caller reads");
        batches(&p, &mut t, 50, MIB64, 6.0);
        assert!(p.caller_reads(t));
        batches(&p, &mut t, 1, MIB64, 2.0);
        assert!(p.caller_reads(t), "one slow 64 MiB batch is noise");
        batches(&p, &mut t, 1, MIB64, 2.0);
        assert!(!p.caller_reads(t), "two in a row (128 MiB) are not");
        assert!(!p.caller_reads(t + LANES_HOLD - ms(1)));
        assert!(
            p.caller_reads(t + LANES_HOLD),
            "the caller probes again after the hold"
        );
    }

    #[test]
    fn one_slow_batch_of_512_mib_is_enough() {
        let p = ReadPace::default();
        let mut t = Instant::now();
        batches(&p, &mut t, 20, 512 << 20, 6.0);
        batches(&p, &mut t, 1, 512 << 20, 2.0);
        assert!(!p.caller_reads(t));
    }

    #[test]
    fn a_batch_that_ends_at_once_does_not_make_the_rest_look_slow() {
        let p = ReadPace::default();
        let mut t = Instant::now();
        // 64 MiB "read" in 50 us (refused at once), then ordinary batches.
        p.record(MIB64, Duration::from_micros(50), t);
        for i in 0..50 {
            batches(&p, &mut t, 1, MIB64, 6.0);
            assert!(p.caller_reads(t), "batch {i}");
        }
    }

    #[test]
    fn ordinary_variation_keeps_the_caller_reading() {
        let p = ReadPace::default();
        let mut t = Instant::now();
        for i in 0..200 {
            // 4.0-7.0 GB/s: the spread of a fast period on that VM.
            batches(&p, &mut t, 1, MIB64, 4.0 + (i % 7) as f64 * 0.5);
            assert!(p.caller_reads(t), "batch {i}");
        }
    }

    #[test]
    fn a_fast_batch_between_slow_ones_restarts_the_count() {
        let p = ReadPace::default();
        let mut t = Instant::now();
        batches(&p, &mut t, 50, MIB64, 6.0);
        for _ in 0..5 {
            batches(&p, &mut t, 1, MIB64, 2.0);
            batches(&p, &mut t, 1, MIB64, 6.0);
        }
        assert!(p.caller_reads(t));
    }

    #[test]
    fn a_lasting_slowdown_becomes_the_norm() {
        let p = ReadPace::default();
        let mut t = Instant::now();
        batches(&p, &mut t, 50, MIB64, 6.0);
        // From now on the peer serves 2 GB/s; the caller probes after every hold.
        let mut holds = 0;
        for _ in 0..200 {
            batches(&p, &mut t, 1, MIB64, 2.0);
            if !p.caller_reads(t) {
                holds += 1;
                t += LANES_HOLD;
            }
        }
        assert!(holds > 0, "the first slow batches start a hold");
        assert!(
            holds < 100,
            "{holds} holds: the slower rate should have become the norm"
        );
        batches(&p, &mut t, 2, MIB64, 2.0);
        assert!(p.caller_reads(t));
    }
}
