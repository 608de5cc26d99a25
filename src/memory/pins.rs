//! Fencing remote access against `unregister`: each data-server session owns a [`PinSlot`] that
//! names the region its current request is touching. A session sets its slot while the registry
//! is read-locked (so an `unregister`, which takes the write lock, sees it), touches the memory,
//! then clears it. `unregister` removes the region first (no new request can pass the check),
//! then shuts down the socket of every session still inside that region (a payload that has not
//! arrived yet will not land) and waits, bounded, until they have all left it.

use std::os::fd::RawFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

/// Longest `unregister` waits for sessions to leave a region after their sockets were shut down
/// (they leave as soon as their blocked read or write returns).
pub const FENCE_WAIT: Duration = Duration::from_secs(2);

/// The region one session is touching now (0 = none), and the socket that session reads from.
#[derive(Debug)]
pub struct PinSlot {
    base: AtomicU64,
    fd: RawFd,
}

impl PinSlot {
    /// Marks the session inside the region starting at `base`. Call only while holding the
    /// registry's read lock (see the module docs).
    pub(crate) fn enter(&self, base: u64) {
        // Release: an `unregister` that Acquires the slot after taking the write lock sees it.
        self.base.store(base, Ordering::Release);
    }

    /// The session left the region (its copy is complete).
    pub fn leave(&self) {
        // Release: the copy happens-before an `unregister` that sees 0.
        self.base.store(0, Ordering::Release);
    }
}

/// Every live session's slot.
#[derive(Debug, Default)]
pub struct Pins {
    slots: Mutex<Vec<Weak<PinSlot>>>,
}

impl Pins {
    /// A slot for a session reading from socket `fd`; it stays registered while the returned
    /// `Arc` lives. The caller keeps `fd` open for as long as the slot lives.
    pub fn slot(&self, fd: RawFd) -> Arc<PinSlot> {
        let s = Arc::new(PinSlot {
            base: AtomicU64::new(0),
            fd,
        });
        let mut v = self.slots.lock().unwrap_or_else(|e| e.into_inner());
        v.retain(|w| w.strong_count() > 0);
        v.push(Arc::downgrade(&s));
        s
    }

    /// After the region at `base` was removed from the registry (write lock released): ends the
    /// requests still inside it and waits for them to leave. Returns `false` when some session
    /// was still inside after [`FENCE_WAIT`].
    pub fn fence(&self, base: u64) -> bool {
        let inside: Vec<Arc<PinSlot>> = self
            .slots
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .filter_map(Weak::upgrade)
            // Acquire pairs with `enter`/`leave`.
            .filter(|s| s.base.load(Ordering::Acquire) == base)
            .collect();
        for s in &inside {
            // SAFETY: the slot is alive (we hold an Arc), and its owner keeps `fd` open while
            // the slot lives; shutdown(2) only wakes blocked I/O and ends the connection.
            unsafe { libc::shutdown(s.fd, libc::SHUT_RDWR) };
        }
        let until = Instant::now() + FENCE_WAIT;
        while inside
            .iter()
            .any(|s| s.base.load(Ordering::Acquire) == base)
        {
            if Instant::now() >= until {
                return false;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        true
    }
}
