//! "Copy done" frames of the same-host path: after a `process_vm_*` copy (or giving it up) the
//! initiator owes the server a report, so that the server's `unregister` stops waiting for that
//! approval (`memory::pins`). Reports are counted per lane and connection and cost nothing while
//! work keeps flowing: the lane's next send carries them in front of its headers. When no send
//! follows, a per-peer flusher thread writes them [`FLUSH_AFTER`] later (or the receiver, every
//! 32 approvals), so an idle peer's approvals end within a few milliseconds of their copies.

use super::Shared;
use crate::sync::{LockClean, Recover};
use std::sync::{Condvar, Mutex};
use std::time::Duration;

/// How long owed reports wait for a send to carry them before the flusher writes them.
pub(super) const FLUSH_AFTER: Duration = Duration::from_millis(5);

/// Owed reports and the flusher's wake-up.
pub(super) struct DoneState {
    /// Per lane: (generation of the connection the approvals came on, approvals over).
    owed: Vec<Mutex<(u64, u64)>>,
    /// (flush requested, stopping).
    flag: Mutex<(bool, bool)>,
    cv: Condvar,
}

impl DoneState {
    pub(super) fn new(lanes: usize) -> DoneState {
        DoneState {
            owed: (0..lanes).map(|_| Mutex::new((0, 0))).collect(),
            flag: Mutex::new((false, false)),
            cv: Condvar::new(),
        }
    }

    /// Ends the flusher (at peer shutdown).
    pub(super) fn stop(&self) {
        self.flag.lock_clean().1 = true;
        self.cv.notify_all();
    }
}

impl Shared {
    /// One more same-host approval on connection `generation` of `lane` is over (copied, given
    /// up or refused): the server must be told.
    pub(super) fn owe_done(&self, lane: usize, generation: u64) {
        let mut o = self.done.owed[lane].lock_clean();
        if o.0 != generation {
            // Approvals of an older connection: that server session is gone (its leases
            // expire by themselves).
            *o = (generation, 0);
        }
        o.1 += 1;
    }

    /// How many approvals' reports are owed on `lane` now.
    pub(super) fn owed_count(&self, lane: usize) -> u64 {
        self.done.owed[lane].lock_clean().1
    }

    /// Takes the reports owed on connection `generation` of `lane` (0 if none).
    pub(super) fn take_owed(&self, lane: usize, generation: u64) -> u64 {
        let mut o = self.done.owed[lane].lock_clean();
        let n = if o.0 == generation { o.1 } else { 0 };
        o.1 = 0;
        n
    }

    /// Gives back `n` reports that could not be written (socket full) on `generation`.
    pub(super) fn reowe(&self, lane: usize, generation: u64, n: u64) {
        let mut o = self.done.owed[lane].lock_clean();
        if o.0 == generation {
            o.1 += n;
        }
    }

    /// Asks the flusher to write what is still owed in [`FLUSH_AFTER`] (a send meanwhile
    /// carries it instead). Cheap when already asked.
    pub(super) fn arm_done_flush(&self) {
        let mut f = self.done.flag.lock_clean();
        if !f.0 {
            f.0 = true;
            drop(f);
            self.done.cv.notify_one();
        }
    }

    /// Writes the reports owed on `lane` unless its sending half is busy. Returns whether
    /// some are still owed.
    pub(super) fn flush_done_if_free(&self, lane: usize) -> bool {
        loop {
            if self.owed_count(lane) == 0 {
                return false;
            }
            let mut tx = match self.lanes_tx[lane].try_lock_clean() {
                Some(g) => g,
                None => return true,
            };
            if !tx.flush_done(self, lane, false) {
                return self.owed_count(lane) > 0;
            }
        }
    }
}

/// The flusher thread of a same-host peer: sleeps until asked, waits [`FLUSH_AFTER`], then
/// writes whatever no send has carried meanwhile (asking itself again while some lane is busy).
pub(super) fn flusher_loop(sh: &Shared) {
    loop {
        {
            let mut f = sh.done.flag.lock_clean();
            while !f.0 && !f.1 {
                f = sh.done.cv.wait(f).recover();
            }
            if f.1 {
                return;
            }
        }
        std::thread::sleep(FLUSH_AFTER);
        sh.done.flag.lock_clean().0 = false;
        let mut left = false;
        for lane in 0..sh.done.owed.len() {
            left |= sh.flush_done_if_free(lane);
        }
        if left {
            sh.arm_done_flush();
        }
    }
}
