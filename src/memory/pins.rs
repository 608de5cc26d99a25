//! Fencing remote access against `unregister`.
//!
//! **Requests the server copies itself** (TCP): each data-server session owns a [`PinSlot`] that
//! names the region its current request is touching. A session sets its slot while the registry
//! is read-locked (so an `unregister`, which takes the write lock, sees it), touches the memory,
//! then clears it. `unregister` removes the region first (no new request can pass the check),
//! then shuts down the socket of every session still inside that region (a payload that has not
//! arrived yet will not land) and waits, bounded, until they have all left it.
//!
//! **Approvals the initiator copies with `process_vm_*`** (same-host path): the server only
//! validates; the bytes move later, in the initiator. Each approval is a *lease* on the region,
//! kept in the session's slot (in the order given) until the initiator's "copy done" frame on
//! that connection ends it, or until [`VM_LEASE`] has passed. `unregister` waits until no lease
//! on the region is left (bounded by `VM_LEASE`). The initiator starts a copy only within
//! [`VM_APPROVAL_WINDOW`] of sending the request and re-checks that window between chunks, so an
//! honest initiator's copy is over long before its lease ends. Leases outlive their session
//! (a closed connection says nothing about a copy still running in the initiator). The one
//! timing assumption: an initiator thread descheduled for more than `VM_LEASE -
//! VM_APPROVAL_WINDOW` (1.75 s) between its window check and the end of one 4 MiB piece could
//! still land that piece after the lease ended; `unregister` logs nothing in that case.
//!
//! Threat model of the same-host path: this fence makes `unregister` final against *honest*
//! tidewire peers that race it. It is no protection against a hostile process of the same user:
//! such a process can write this process's memory with `process_vm_writev` (or ptrace) at any
//! time, with or without an approval, and the kernel allows it. Turn `same_host` off, or run
//! engines as different users, where peers on the host are not trusted.

use crate::sync::LockClean;
use std::collections::VecDeque;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Longest `unregister` waits for sessions to leave a region after their sockets were shut down
/// (they leave as soon as their blocked read or write returns).
pub const FENCE_WAIT: Duration = Duration::from_secs(2);

/// How long a same-host approval holds its region (counted from when the server gave it).
pub const VM_LEASE: Duration = Duration::from_secs(2);

/// An initiator starts (or continues, chunk by chunk) a same-host copy only this long after it
/// sent the request that was approved; later, it re-validates. Well below [`VM_LEASE`].
pub const VM_APPROVAL_WINDOW: Duration = Duration::from_millis(250);

/// Most approvals one session holds at once; beyond, requests are answered "not same-host"
/// (the initiator re-sends them over the socket). Bounds what an initiator that never sends
/// "copy done" frames (an old tidewire) can make us keep.
pub const MAX_LEASES: usize = 4096;

/// The region one session is touching now (0 = none), the socket that session reads from, and
/// its same-host approvals not yet reported done (region base, expiry), oldest first.
#[derive(Debug)]
pub struct PinSlot {
    base: AtomicU64,
    /// The session's socket, -1 once the session is about to close it.
    fd: Mutex<RawFd>,
    leases: Mutex<VecDeque<(u64, Instant)>>,
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

    /// The session is about to close its socket: `unregister` must not shut it down any more
    /// (the number may be reused). Call before closing it.
    pub fn detach(&self) {
        self.leave();
        *self.fd.lock_clean() = -1;
    }

    fn lock_leases(&self) -> std::sync::MutexGuard<'_, VecDeque<(u64, Instant)>> {
        self.leases.lock_clean()
    }

    /// Turns the current request (inside the region entered last, not yet left) into a lease
    /// that outlives it. `false` when the session already holds [`MAX_LEASES`] live ones (the
    /// request must not be approved). Call before [`PinSlot::leave`], so that an `unregister`
    /// always sees the session inside the region or holding the lease.
    pub fn lease(&self) -> bool {
        // Acquire: pairs with our own `enter` (same thread); it only reads the value back.
        let base = self.base.load(Ordering::Acquire);
        let now = Instant::now();
        let mut l = self.lock_leases();
        if l.len() >= MAX_LEASES {
            // Expired ones are over anyway; the order of the rest is kept.
            l.retain(|&(_, until)| until > now);
            if l.len() >= MAX_LEASES {
                return false;
            }
        }
        l.push_back((base, now + VM_LEASE));
        true
    }

    /// The initiator reports its `count` oldest approvals on this connection done. `false` when
    /// it reports more than it was given (a protocol error).
    pub fn release(&self, count: u64) -> bool {
        let mut l = self.lock_leases();
        if count > l.len() as u64 {
            return false;
        }
        l.drain(..count as usize);
        true
    }

    /// Whether a lease on the region at `base` is still live.
    fn holds(&self, base: u64, now: Instant) -> bool {
        self.lock_leases()
            .iter()
            .any(|&(b, until)| b == base && until > now)
    }

    /// Whether any lease is still live.
    fn holds_any(&self, now: Instant) -> bool {
        self.lock_leases().iter().any(|&(_, until)| until > now)
    }
}

/// Every live session's slot, and the slots of ended sessions that still hold live leases.
#[derive(Debug, Default)]
pub struct Pins {
    slots: Mutex<Vec<Arc<PinSlot>>>,
}

impl Pins {
    /// A slot for a session reading from socket `fd`; it stays registered while the returned
    /// `Arc` lives (and afterwards while it holds live leases). The caller keeps `fd` open until
    /// it has called [`PinSlot::detach`].
    pub fn slot(&self, fd: RawFd) -> Arc<PinSlot> {
        let s = Arc::new(PinSlot {
            base: AtomicU64::new(0),
            fd: Mutex::new(fd),
            leases: Mutex::new(VecDeque::new()),
        });
        let now = Instant::now();
        let mut v = self.slots.lock_clean();
        v.retain(|w| Arc::strong_count(w) > 1 || w.holds_any(now));
        v.push(s.clone());
        s
    }

    /// After the region at `base` was removed from the registry (write lock released): ends the
    /// requests still inside it, waits for them to leave and for the same-host leases on it to
    /// end. Returns `false` when some session was still inside after [`FENCE_WAIT`] (leases end
    /// by themselves within [`VM_LEASE`]).
    pub fn fence(&self, base: u64) -> bool {
        let start = Instant::now();
        let inside: Vec<Arc<PinSlot>> = self
            .slots
            .lock_clean()
            .iter()
            // Acquire pairs with `enter`/`leave`: a slot seen left has its lease recorded.
            .filter(|s| s.base.load(Ordering::Acquire) == base || s.holds(base, start))
            .cloned()
            .collect();
        for s in &inside {
            let fd = s.fd.lock_clean();
            if s.base.load(Ordering::Acquire) == base && *fd >= 0 {
                // SAFETY: the session closes its socket only after `detach`, which waits for
                // this lock and then sets -1, so `fd` is its open socket; shutdown(2) only wakes
                // blocked I/O and ends the connection.
                unsafe { libc::shutdown(*fd, libc::SHUT_RDWR) };
            }
        }
        let until = start + FENCE_WAIT.max(VM_LEASE);
        loop {
            let now = Instant::now();
            let busy = inside
                .iter()
                .any(|s| s.base.load(Ordering::Acquire) == base || s.holds(base, now));
            if !busy {
                return true;
            }
            if now >= until {
                return false;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leases_are_released_in_order_and_bounded() {
        let pins = Pins::default();
        let s = pins.slot(-1);
        s.enter(0x1000);
        assert!(s.lease());
        s.leave();
        s.enter(0x2000);
        assert!(s.lease());
        s.leave();
        assert!(s.holds(0x1000, Instant::now()));
        assert!(s.release(1));
        assert!(!s.holds(0x1000, Instant::now()));
        assert!(s.holds(0x2000, Instant::now()));
        assert!(!s.release(2), "more than given");
        assert!(s.release(1));
        // Fenced at once when nothing is held.
        let t = Instant::now();
        assert!(pins.fence(0x2000));
        assert!(t.elapsed() < Duration::from_millis(100));
        for _ in 0..MAX_LEASES {
            assert!(s.lease());
        }
        assert!(!s.lease(), "cap");
    }

    #[test]
    fn fence_waits_for_a_lease_of_an_ended_session() {
        let pins = Arc::new(Pins::default());
        let s = pins.slot(-1);
        s.enter(0x1000);
        assert!(s.lease());
        s.leave();
        drop(s); // the session ended; its approval may still be copying
        let p2 = pins.clone();
        let t = Instant::now();
        assert!(p2.fence(0x1000));
        let took = t.elapsed();
        assert!(took >= VM_LEASE - Duration::from_millis(50), "{took:?}");
    }
}
