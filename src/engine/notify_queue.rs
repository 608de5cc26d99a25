//! The received-notification queue, bounded by count and by bytes (name + message).
//!
//! Policy: when a notification would exceed either bound it is refused, and the sender's
//! `send_notify` fails (the RPC reply carries an empty `notify_msg`, which Mooncake peers read as
//! failure too). What is queued is never dropped: receivers see notifications oldest first, and
//! taking them makes room again. A single notification is already bounded by the handshake frame
//! limit (`handshake_max_len`).

use super::Notification;
use crate::sync::LockClean;
use std::collections::VecDeque;
use std::sync::Mutex;

/// Default most notifications held (`notify_max_count`).
pub const DEFAULT_MAX_COUNT: usize = 65_536;
/// Default most bytes held (`notify_max_bytes`).
pub const DEFAULT_MAX_BYTES: usize = 64 << 20;

/// A bounded FIFO of notifications. Thread-safe.
pub struct NotifyQueue {
    max_count: usize,
    max_bytes: usize,
    inner: Mutex<(VecDeque<Notification>, usize)>,
}

fn size_of(n: &Notification) -> usize {
    n.name.len() + n.msg.len()
}

impl NotifyQueue {
    /// An empty queue with these bounds.
    pub fn new(max_count: usize, max_bytes: usize) -> NotifyQueue {
        NotifyQueue {
            max_count,
            max_bytes,
            inner: Mutex::default(),
        }
    }

    /// Queues `n`; `false` (and nothing queued) when a bound would be exceeded.
    pub fn push(&self, n: Notification) -> bool {
        let size = size_of(&n);
        let mut g = self.inner.lock_clean();
        if g.0.len() >= self.max_count || g.1 + size > self.max_bytes {
            return false;
        }
        g.1 += size;
        g.0.push_back(n);
        true
    }

    /// Takes everything queued, oldest first.
    pub fn take_all(&self) -> Vec<Notification> {
        let mut g = self.inner.lock_clean();
        g.1 = 0;
        g.0.drain(..).collect()
    }

    /// (notifications, bytes) held now.
    pub fn usage(&self) -> (usize, usize) {
        let g = self.inner.lock_clean();
        (g.0.len(), g.1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn n(name: &str, len: usize) -> Notification {
        Notification {
            name: name.into(),
            msg: "m".repeat(len),
        }
    }

    #[test]
    fn bounds_by_count_and_bytes_and_refuses_new() {
        let q = NotifyQueue::new(3, 100);
        assert!(q.push(n("a", 10)));
        assert!(q.push(n("b", 10)));
        assert!(!q.push(n("c", 90)), "bytes bound");
        assert!(q.push(n("c", 10)));
        assert!(!q.push(n("d", 1)), "count bound");
        assert_eq!(q.usage(), (3, 33));
        let got = q.take_all();
        assert_eq!(
            got.iter().map(|x| x.name.as_str()).collect::<Vec<_>>(),
            ["a", "b", "c"]
        );
        assert_eq!(q.usage(), (0, 0));
        assert!(q.push(n("e", 98)));
    }
}
