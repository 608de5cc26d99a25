//! A counter of outstanding units that wakes its waiters when it reaches zero, without a lost
//! wake-up. Waiters poll (yielding the CPU) for about 50 µs, then sleep on a condition variable.

use crate::sync::atomic::{AtomicU64, Ordering};
use crate::sync::{Condvar, Mutex};
use crate::sync::{LockClean, Recover};
use std::time::{Duration, Instant};

/// How long a waiter polls (yielding) before it sleeps.
const WAIT_SPIN: Duration = Duration::from_micros(50);

/// Counts outstanding slices; wakes waiters at zero.
#[derive(Default)]
pub struct Latch {
    pending: AtomicU64,
    /// Waiters asleep on `cv` (so that finishing needs no wake-up system call when none is).
    lock: Mutex<u32>,
    cv: Condvar,
}

impl Latch {
    /// Adds `n` outstanding units (before they are dispatched).
    pub fn add(&self, n: u64) {
        // Relaxed is enough: the dispatch that follows publishes the work through a channel.
        self.pending.fetch_add(n, Ordering::Relaxed);
    }

    /// Marks one unit done. Returns `true` for the unit that made the latch idle.
    pub fn done(&self) -> bool {
        // AcqRel: the last finisher sees every other finisher's writes, and the waiter's Acquire
        // load below sees ours.
        if self.pending.fetch_sub(1, Ordering::AcqRel) == 1 {
            // Taking the lock orders this check after a waiter's check-then-wait: a waiter not
            // counted yet will see the latch idle before it sleeps.
            let sleepers = *self.lock.lock_clean();
            if sleepers > 0 {
                self.cv.notify_all();
            }
            return true;
        }
        false
    }

    /// True when nothing is outstanding.
    pub fn is_idle(&self) -> bool {
        self.pending.load(Ordering::Acquire) == 0
    }

    /// Blocks until idle or `deadline` (None = forever). Returns whether idle.
    pub fn wait(&self, deadline: Option<Instant>) -> bool {
        // Short answers (a small request over loopback takes 15-40 µs) are caught by polling
        // with `yield_now` for a bounded time: the CPU stays awake and runs the threads that
        // complete the work, so nobody has to wake a sleeping waiter (on virtual machines the
        // wake-up of an idle CPU costs tens of microseconds; measured: sync-read p50 halves).
        // Long waits sleep after the poll.
        // (Under loom the poll is left out: it is a time-bounded retry of the check below.)
        let spin_until = Instant::now()
            + if cfg!(loom) {
                Duration::ZERO
            } else {
                WAIT_SPIN
            };
        while !self.is_idle() {
            let now = Instant::now();
            if now >= spin_until || deadline.is_some_and(|d| now >= d) {
                break;
            }
            std::thread::yield_now();
        }
        let mut guard = self.lock.lock_clean();
        loop {
            if self.is_idle() {
                return true;
            }
            match deadline {
                None => {
                    *guard += 1;
                    guard = self.cv.wait(guard).recover();
                    *guard -= 1;
                }
                Some(d) => {
                    let now = Instant::now();
                    if now >= d {
                        return false;
                    }
                    *guard += 1;
                    guard = self.cv.wait_timeout(guard, d - now).recover().0;
                    *guard -= 1;
                }
            }
        }
    }
}
