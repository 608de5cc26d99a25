//! Batches: preallocated task slots updated with atomics by transport threads, and a
//! [`Latch`] that wakes waiters when the last slice of the batch completes.
//!
//! # One truth for "done"
//!
//! A task is done when its own slice count reaches zero; that is what a status query reports.
//! The batch is done when every submitted task is ([`Batch::tasks_done`]), read from the same
//! per-task counts, and that is what sending the batch's notification and freeing the batch act
//! on. The latch, counted down a moment after a task's count, only wakes waiters: nothing that a
//! status query has already reported COMPLETED can be refused or skipped because the latch lags.

use super::latch::Latch;
use crate::error::{Error, ErrorKind};
use crate::sync::atomic::{AtomicBool, AtomicU8, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use crate::sync::{LockClean, Mutex};
use std::sync::Arc;
use std::time::Instant;

/// State of one task, numbered as Mooncake's `STATUS_*`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(i32)]
pub enum TaskState {
    /// Slices still in flight.
    Waiting = 0,
    /// Every slice succeeded.
    Completed = 4,
    /// At least one slice failed.
    Failed = 6,
}

/// Snapshot of one task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TaskStatus {
    /// Current state.
    pub state: TaskState,
    /// First failure, when `state == Failed`.
    pub error: Option<ErrorKind>,
    /// Bytes moved by successful slices.
    pub transferred: u64,
}

#[derive(Default)]
struct TaskSlot {
    /// Slices not yet finished.
    pending: AtomicU32,
    /// `ErrorKind as u8` of the first failure; 0 = none.
    error: AtomicU8,
    transferred: AtomicU64,
}

/// A message to deliver to a peer once the whole batch has completed (Mooncake's
/// `submitTransferWithNotify`).
#[derive(Debug, Clone)]
pub struct PendingNotify {
    /// Segment to notify.
    pub segment: i32,
    /// Notification name.
    pub name: String,
    /// Notification body.
    pub msg: String,
}

/// One batch of tasks.
pub struct Batch {
    tasks: Box<[TaskSlot]>,
    /// Number of submitted tasks; writers hold `submit_lock`.
    count: AtomicUsize,
    /// Every task below this index is known done (tasks never become undone), so
    /// [`Batch::tasks_done`] scans each task once over the life of the batch.
    done_below: AtomicUsize,
    pub(crate) submit_lock: Mutex<()>,
    latch: Latch,
    notify: Mutex<Option<PendingNotify>>,
    /// Whether `notify` may hold a message: lets status queries skip the lock.
    has_notify: AtomicBool,
    /// Run once by whoever sees the batch go idle (stream-ordered transfers); `has_on_idle`
    /// keeps the common case to one relaxed load.
    on_idle: Mutex<Option<OnIdle>>,
    has_on_idle: AtomicBool,
    /// The submitting thread waits for the batch right after submitting it (`submit_and_wait`):
    /// transports may then do the whole round trip on that thread, whatever its size.
    caller_waits: AtomicBool,
}

type OnIdle = Box<dyn FnOnce() + Send>;

impl Batch {
    /// A batch able to hold `capacity` tasks in all.
    pub fn new(capacity: usize) -> Batch {
        Batch {
            tasks: (0..capacity).map(|_| TaskSlot::default()).collect(),
            count: AtomicUsize::new(0),
            done_below: AtomicUsize::new(0),
            submit_lock: Mutex::new(()),
            latch: Latch::default(),
            notify: Mutex::new(None),
            has_notify: AtomicBool::new(false),
            on_idle: Mutex::new(None),
            has_on_idle: AtomicBool::new(false),
            caller_waits: AtomicBool::new(false),
        }
    }

    /// Marks that the submitting thread will wait for the batch right after its submit.
    pub fn set_caller_waits(&self) {
        // Relaxed: read back by the same thread during its submit (a hint, no data hangs on it).
        self.caller_waits.store(true, Ordering::Relaxed);
    }

    /// See [`Batch::set_caller_waits`].
    pub fn caller_waits(&self) -> bool {
        // Relaxed: a hint, see `set_caller_waits`.
        self.caller_waits.load(Ordering::Relaxed)
    }

    /// Maximum number of tasks.
    pub fn capacity(&self) -> usize {
        self.tasks.len()
    }

    /// Number of tasks submitted so far.
    pub fn len(&self) -> usize {
        self.count.load(Ordering::Acquire)
    }

    /// True when no task was submitted.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Prepares task `index` (at or above `len()`) with `slices` outstanding slices (0 = already
    /// complete). Caller holds `submit_lock`; a prepared task stays invisible until
    /// [`Batch::publish`], and a submit that fails validation simply prepares it again later.
    pub(crate) fn prepare_task(&self, index: usize, slices: u32) {
        let t = &self.tasks[index];
        t.pending.store(slices, Ordering::Relaxed);
        t.error.store(0, Ordering::Relaxed);
        t.transferred.store(0, Ordering::Relaxed);
    }

    /// Counts `slices` more outstanding slices (the sum over the tasks being published), before
    /// any of them is dispatched.
    pub(crate) fn add_slices(&self, slices: u64) {
        self.latch.add(slices);
    }

    /// Stores the message to send once the batch has completed.
    pub(crate) fn set_notify(&self, n: PendingNotify) {
        *self.notify.lock_clean() = Some(n);
        self.has_notify.store(true, Ordering::Release);
    }

    /// Whether a notification may be waiting (one relaxed-cost load).
    pub(crate) fn has_notify(&self) -> bool {
        self.has_notify.load(Ordering::Acquire)
    }

    /// The notification to act on now: `Some` once every task is done ([`Batch::tasks_done`])
    /// and the batch still carries one, to exactly one caller over the life of the batch, with
    /// the first failed task (a failed batch's notification is dropped, not sent).
    pub(crate) fn take_due_notify(&self) -> Option<(PendingNotify, Option<(usize, ErrorKind)>)> {
        // `has_notify` first: one atomic load for the batches (most) that carry none.
        if !self.has_notify() || !self.tasks_done() {
            return None;
        }
        let n = self.notify.lock_clean().take()?;
        self.has_notify.store(false, Ordering::Release);
        Some((n, self.first_failure()))
    }

    /// Makes tasks below `count` visible to status readers.
    pub(crate) fn publish(&self, count: usize) {
        // Release: readers that Acquire `count` see the prepared slots.
        self.count.store(count, Ordering::Release);
    }

    /// Records a failure on a task without a slice (validation after publish never happens, but
    /// scatter groups use this for early errors).
    pub(crate) fn slice_finished(&self, task: u32, result: Result<u64, ErrorKind>) {
        let t = &self.tasks[task as usize];
        match result {
            Ok(bytes) => {
                t.transferred.fetch_add(bytes, Ordering::Relaxed);
            }
            Err(kind) => {
                // First failure wins.
                let _ =
                    t.error
                        .compare_exchange(0, kind as u8, Ordering::Relaxed, Ordering::Relaxed);
            }
        }
        // Release publishes the bytes/error above to whoever Acquires `pending == 0`.
        t.pending.fetch_sub(1, Ordering::Release);
        // Relaxed: the hook is installed before any slice is dispatched (submit publishes it).
        if self.latch.done() && self.has_on_idle.load(Ordering::Relaxed) {
            self.run_on_idle();
        }
    }

    /// Installs `f`, to run once when the batch goes idle. Install before submitting, then call
    /// [`Batch::run_on_idle`] if the batch is already idle after the submit (nothing in flight).
    pub(crate) fn set_on_idle(&self, f: OnIdle) {
        *self.on_idle.lock_clean() = Some(f);
        self.has_on_idle.store(true, Ordering::Relaxed);
    }

    /// Runs the idle hook if it is still installed (at most once overall).
    pub(crate) fn run_on_idle(&self) {
        let f = self.on_idle.lock_clean().take();
        if let Some(f) = f {
            f();
        }
    }

    /// Status of task `index` (must be `< len()`).
    pub fn status(&self, index: usize) -> TaskStatus {
        let t = &self.tasks[index];
        let pending = t.pending.load(Ordering::Acquire);
        let error = ErrorKind::from_u8(t.error.load(Ordering::Relaxed));
        let state = match (pending, error) {
            (0, None) => TaskState::Completed,
            (0, Some(_)) => TaskState::Failed,
            _ => TaskState::Waiting,
        };
        TaskStatus {
            state,
            error: if state == TaskState::Failed {
                error
            } else {
                None
            },
            transferred: t.transferred.load(Ordering::Relaxed),
        }
    }

    /// True when every submitted slice has finished and its completion has been counted by the
    /// latch (what waiters wait for; see [`Batch::tasks_done`] for what a status query sees).
    pub fn is_idle(&self) -> bool {
        self.latch.is_idle()
    }

    /// True when every submitted task is done, read from the same per-task counts that
    /// [`Batch::status`] reports: once a status query has seen each task COMPLETED or FAILED,
    /// this is true too (the latch may lag it by a few instructions). Tasks prepared by a submit
    /// still in progress are not counted; see [`Batch::may_free`].
    pub fn tasks_done(&self) -> bool {
        let len = self.len();
        // Acquire pairs with the AcqRel below: a task skipped by the cursor was seen done by the
        // thread that moved it, and its bytes/error happen before this read.
        let mut i = self.done_below.load(Ordering::Acquire);
        while i < len {
            // Acquire pairs with the Release in `slice_finished`.
            if self.tasks[i].pending.load(Ordering::Acquire) != 0 {
                self.done_below.fetch_max(i, Ordering::AcqRel);
                return false;
            }
            i += 1;
        }
        self.done_below.fetch_max(len, Ordering::AcqRel);
        true
    }

    /// Whether the batch may be freed now: every submitted task is done and no submit is in
    /// progress on it. A completion still finishing its bookkeeping holds its own reference.
    pub fn may_free(&self) -> bool {
        self.submit_lock.try_lock_clean().is_some() && self.tasks_done()
    }

    /// Blocks until every submitted slice finished or `deadline` passes.
    pub fn wait_idle(&self, deadline: Option<Instant>) -> bool {
        self.latch.wait(deadline)
    }

    /// The first failed task and its error, once idle.
    pub fn first_failure(&self) -> Option<(usize, ErrorKind)> {
        (0..self.len()).find_map(|i| self.status(i).error.map(|e| (i, e)))
    }

    /// Outcome once idle: Ok, or the first failed task's error.
    pub fn outcome(&self) -> Result<(), Error> {
        match self.first_failure() {
            None => Ok(()),
            Some((i, kind)) => Err(Error::new(
                kind,
                format!("task {i} failed: {}", kind.name()),
            )),
        }
    }
}

/// Completion handle carried by a slice: finishing it updates its task and the batch latch.
///
/// Dropping it unfinished (a worker thread that panicked, a queue dropped with work in it)
/// finishes the slice as failed (`Internal`), so every task ends whatever a transport does.
pub struct SliceDone {
    batch: Option<Arc<Batch>>,
    task: u32,
}

impl SliceDone {
    /// A handle for task `task` of `batch`.
    pub fn new(batch: Arc<Batch>, task: u32) -> SliceDone {
        SliceDone {
            batch: Some(batch),
            task,
        }
    }

    /// Drops the handle without reporting anything: for a slice built by a submit that was
    /// refused before its batch counted the slice (see [`Batch::add_slices`]).
    pub(crate) fn disarm(mut self) {
        self.batch = None;
    }

    /// Whether the thread that submitted the slice waits for its batch right away.
    pub fn caller_waits(&self) -> bool {
        self.batch.as_ref().is_some_and(|b| b.caller_waits())
    }

    /// Reports the slice's result (bytes moved, or the failure).
    pub fn finish(mut self, result: Result<u64, ErrorKind>) {
        if let Some(b) = self.batch.take() {
            b.slice_finished(self.task, result);
        }
    }
}

impl Drop for SliceDone {
    fn drop(&mut self) {
        if let Some(b) = self.batch.take() {
            b.slice_finished(self.task, Err(ErrorKind::Internal));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn latch_wakes_waiter_from_other_thread() {
        let b = Arc::new(Batch::new(2));
        {
            let _g = b.submit_lock.lock().unwrap();
            b.prepare_task(0, 2);
            b.prepare_task(1, 1);
            b.add_slices(3);
            b.publish(2);
        }
        assert_eq!(b.status(0).state, TaskState::Waiting);
        assert!(
            !b.wait_idle(Some(Instant::now() + Duration::from_millis(20))),
            "times out"
        );
        let b2 = b.clone();
        let t = std::thread::spawn(move || {
            SliceDone::new(b2.clone(), 0).finish(Ok(10));
            SliceDone::new(b2.clone(), 0).finish(Err(ErrorKind::Rejected));
            SliceDone::new(b2, 1).finish(Ok(5));
        });
        assert!(b.wait_idle(None));
        t.join().unwrap();
        let s0 = b.status(0);
        assert_eq!(
            (s0.state, s0.error, s0.transferred),
            (TaskState::Failed, Some(ErrorKind::Rejected), 10)
        );
        assert_eq!(b.status(1).state, TaskState::Completed);
        assert_eq!(b.outcome().unwrap_err().kind(), ErrorKind::Rejected);
    }

    /// A slice dropped unfinished, or held by a thread that panics, still ends
    /// its task (FAILED) and wakes the waiter.
    #[test]
    fn dropped_or_panicked_slices_fail_their_task() {
        let b = Arc::new(Batch::new(2));
        {
            let _g = b.submit_lock.lock().unwrap();
            b.prepare_task(0, 1);
            b.prepare_task(1, 1);
            b.add_slices(2);
            b.publish(2);
        }
        drop(SliceDone::new(b.clone(), 0));
        let held = SliceDone::new(b.clone(), 1);
        let t = std::thread::spawn(move || {
            let _mine = held;
            panic!("a worker thread dies holding a slice");
        });
        assert!(t.join().is_err());
        assert!(b.wait_idle(Some(Instant::now() + Duration::from_secs(5))));
        for i in 0..2 {
            let s = b.status(i);
            assert_eq!(
                (s.state, s.error),
                (TaskState::Failed, Some(ErrorKind::Internal))
            );
        }
    }
}
