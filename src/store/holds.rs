//! What this client holds at the master while it reads: the read hold a Get grants
//! ([`ReadHold`]), the open get sessions that keep holds across many reads ([`Sessions`]), and
//! whether those holds stayed alive through a read; and, on the write side, the open put
//! sessions whose buffers the master reserved for it ([`PutSessions`], see `put_sessions.rs`).
//!
//! The master keeps a read's buffers from reuse for the lease after the Get, and beyond it (up to
//! its `hold_ms`) while this client's heartbeats keep arriving, each within
//! [`HOLD_PING_GRACE_MS`] of the one before. The client proves the second case from its own
//! side: [`Heartbeats`] records when successful pings were sent and answered, and a read that
//! outlived its lease counts only when no gap between them could have let the master drop the
//! hold while the bytes moved.

use super::proto::{GetResult, HOLD_PING_GRACE_MS};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A gap this long between the send of one successful ping and the answer of the next counts as
/// broken: the master (which sees each ping between its send and its answer) may have gone
/// `HOLD_PING_GRACE_MS` without one. The margin covers the two clocks' tick rates.
const GAP_MS: u64 = HOLD_PING_GRACE_MS - 500;

/// Successful heartbeats, as milliseconds since `epoch` (0: none yet).
pub(crate) struct Heartbeats {
    epoch: Instant,
    last_sent: AtomicU64,
    broken_at: AtomicU64,
}

impl Heartbeats {
    pub(crate) fn new() -> Heartbeats {
        Heartbeats {
            epoch: Instant::now(),
            last_sent: AtomicU64::new(0),
            broken_at: AtomicU64::new(0),
        }
    }

    fn ms(&self, t: Instant) -> u64 {
        // +1 so that 0 stays "never".
        t.saturating_duration_since(self.epoch).as_millis() as u64 + 1
    }

    /// A ping sent at `sent` was answered just now.
    pub(crate) fn answered(&self, sent: Instant) {
        let now = self.ms(Instant::now());
        let prev = self.last_sent.fetch_max(self.ms(sent), Ordering::AcqRel);
        if prev != 0 && now.saturating_sub(prev) > GAP_MS {
            self.broken_at.fetch_max(now, Ordering::AcqRel);
        }
    }

    /// Whether a read whose Get was sent at `t0` and that ends now was covered by its hold: within
    /// the lease, or within `hold_ms` with heartbeats unbroken since `t0` and recent now.
    pub(crate) fn covered(&self, t0: Instant, lease_ms: u64, hold_ms: u64) -> bool {
        let elapsed = t0.elapsed();
        if elapsed <= Duration::from_millis(lease_ms) {
            return true;
        }
        let now = self.ms(Instant::now());
        let last = self.last_sent.load(Ordering::Acquire);
        elapsed <= Duration::from_millis(hold_ms)
            && self.broken_at.load(Ordering::Acquire) < self.ms(t0)
            && last != 0
            && now.saturating_sub(last) <= GAP_MS
    }
}

/// The read holds a Get granted: when it was sent, and the lease and hold bounds it returned.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ReadHold {
    pub(crate) since: Instant,
    pub(crate) lease_ms: u64,
    pub(crate) hold_ms: u64,
}

/// One key's open session: the key, what the lookup found and the hold it granted. Shared by
/// the map and the ranged reads running under it; whoever drops the last reference (see
/// `Shared::release`) ends the hold.
pub(crate) struct Session {
    pub(crate) key: String,
    pub(crate) hold: ReadHold,
    pub(crate) found: GetResult,
}

/// Open sessions by key.
pub(crate) type Sessions = Mutex<HashMap<String, Arc<Session>>>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn within_the_lease_always_covered() {
        let h = Heartbeats::new();
        assert!(h.covered(Instant::now(), 1000, 1000));
    }

    #[test]
    fn past_the_lease_needs_recent_unbroken_heartbeats() {
        let h = Heartbeats::new();
        let t0 = Instant::now() - Duration::from_millis(50);
        assert!(!h.covered(t0, 10, 60_000), "no heartbeat yet");
        h.answered(Instant::now());
        assert!(h.covered(t0, 10, 60_000));
        assert!(!h.covered(t0, 10, 20), "beyond the hold's cap");
        // A ping answered long after the previous one was sent: the master may have dropped
        // the hold in between.
        std::thread::sleep(Duration::from_millis(GAP_MS + 100));
        h.answered(Instant::now());
        assert!(!h.covered(t0, 10, 60_000), "broken since the read began");
        // A read that began after the break, with heartbeats since: covered again.
        std::thread::sleep(Duration::from_millis(5));
        let t1 = Instant::now();
        std::thread::sleep(Duration::from_millis(5));
        h.answered(Instant::now());
        assert!(h.covered(t1, 0, 60_000));
    }
}

/// One key's open put session.
#[derive(Debug)]
pub(crate) struct PutSession {
    pub(crate) version: u64,
    pub(crate) size: u64,
    pub(crate) replicas: Vec<super::proto::ReplicaDesc>,
    /// Ranged writes may still start (`false` once `end` or `revoke` began).
    pub(crate) writable: bool,
    /// Ranged writes running now (`end` and `revoke` wait for them).
    pub(crate) writing: u32,
}

/// Every open put session of a client, and the wake-up of those waiting for writes to end.
#[derive(Debug, Default)]
pub(crate) struct PutSessions {
    pub(crate) open: Mutex<HashMap<String, PutSession>>,
    pub(crate) idle: std::sync::Condvar,
}
