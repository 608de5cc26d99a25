//! Batches of READ/WRITE requests: allocate, submit (validated all-or-nothing), poll, wait, free.

use super::Engine;
pub use super::submit::{AsRequest, Request};
use crate::completion::{Batch, PendingNotify, TaskState, TaskStatus};
use crate::error::{Error, ErrorKind, Result, fail};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Largest batch capacity accepted.
pub const MAX_BATCH_CAPACITY: usize = 1 << 24;

impl Engine {
    /// Allocates a batch that can hold `capacity` requests over all its submits.
    pub fn alloc_batch(&self, capacity: usize) -> Result<u64> {
        if capacity > MAX_BATCH_CAPACITY {
            return fail(
                ErrorKind::InvalidArgument,
                format!("batch capacity {capacity} exceeds {MAX_BATCH_CAPACITY}"),
            );
        }
        self.inner.batches.insert(Arc::new(Batch::new(capacity)))
    }

    fn batch(&self, id: u64) -> Result<Arc<Batch>> {
        self.inner
            .batches
            .get(id)
            .ok_or_else(|| Self::unknown_batch(id))
    }

    fn unknown_batch(id: u64) -> Error {
        Error::new(
            ErrorKind::InvalidId,
            format!("batch id {id:#x} is unknown or freed"),
        )
    }

    /// Submits requests to a batch. Every request is validated before any is started: too many
    /// requests, an unknown segment, an unregistered local range or an unsupported peer protocol
    /// rejects the whole call. Remote ranges are checked by the owner.
    pub fn submit<R: AsRequest>(&self, batch_id: u64, reqs: &[R]) -> Result<()> {
        let batch = self.batch(batch_id)?;
        self.inner.submit_to(&batch, reqs).map(|_| ())
    }

    /// [`Engine::submit`] then [`Engine::wait_batch`], from one thread. Knowing the caller
    /// waits, the TCP transport may send and receive READ batches of any size on this thread
    /// instead of handing them to its lane threads (no wake-ups in between). That work happens
    /// inside the submit, before `timeout` starts; every task is bounded by `transfer_timeout`
    /// in any case.
    pub fn submit_and_wait<R: AsRequest>(
        &self,
        batch_id: u64,
        reqs: &[R],
        timeout: Option<Duration>,
    ) -> Result<()> {
        self.submit_for_wait(batch_id, reqs)?;
        self.wait_batch(batch_id, timeout)
    }

    /// [`Engine::submit`] for a caller that waits for the batch right after, on this thread
    /// (as [`Engine::submit_and_wait`] does), when it needs to tell a refused submit from failed
    /// transfers. The submit may take as long as the transfers.
    pub fn submit_for_wait<R: AsRequest>(&self, batch_id: u64, reqs: &[R]) -> Result<()> {
        let batch = self.batch(batch_id)?;
        batch.set_caller_waits();
        self.inner.submit_to(&batch, reqs).map(|_| ())
    }

    /// Like [`Engine::submit`], and sends `name`/`msg` to the first request's segment once a
    /// status query or wait observes the whole batch completed (Mooncake's notify semantics).
    pub fn submit_with_notify<R: AsRequest>(
        &self,
        batch_id: u64,
        reqs: &[R],
        name: &str,
        msg: &str,
    ) -> Result<()> {
        let first = reqs
            .first()
            .ok_or_else(|| Error::new(ErrorKind::InvalidArgument, "no requests"))?
            .to_request(0)?;
        let batch = self.batch(batch_id)?;
        self.inner.submit_to(&batch, reqs)?;
        batch.set_notify(PendingNotify {
            segment: first.segment,
            name: name.into(),
            msg: msg.into(),
        });
        self.flush_notify(&batch);
        Ok(())
    }

    /// Status of task `task` (submission order, from 0) of a batch. Lock-free: a table lookup
    /// and atomic loads (plus, once, the notification of a `submit_with_notify` batch). An
    /// answer of `Waiting` yields the CPU once (`sched_yield`) before it returns.
    pub fn task_status(&self, batch_id: u64, task: usize) -> Result<TaskStatus> {
        let found = self.inner.batches.with(batch_id, |batch| {
            let len = batch.len();
            if task >= len {
                return Err(len);
            }
            let st = batch.status(task);
            Ok((st, st.state == TaskState::Completed && batch.has_notify()))
        });
        match found {
            None => Err(Self::unknown_batch(batch_id)),
            Some(Err(len)) => fail(
                ErrorKind::InvalidArgument,
                format!("task {task} out of range (batch holds {len})"),
            ),
            Some(Ok((st, notify))) => {
                if st.state == TaskState::Waiting {
                    // Callers poll this in a tight loop (NIXL's plugin, Mooncake's Python
                    // users). Giving the CPU up once per unfinished answer lets the threads that
                    // finish the task run: on a host with fewer cores than busy pollers, a 4 KiB
                    // post otherwise waits out a scheduler slice (measured: 2.4 ms -> see
                    // BENCHMARKS.md). With nothing else to run, the yield returns at once.
                    std::thread::yield_now();
                }
                if notify {
                    if let Some(batch) = self.inner.batches.get(batch_id) {
                        self.flush_notify(&batch);
                    }
                }
                Ok(st)
            }
        }
    }

    /// Number of tasks submitted to a batch.
    pub fn batch_len(&self, batch_id: u64) -> Result<usize> {
        Ok(self.batch(batch_id)?.len())
    }

    /// Waits until every task of the batch is done or `timeout` passes (`None` = no limit).
    /// `Ok` when all completed; the first failed task's error otherwise; `Timeout` when time ran
    /// out (the work continues).
    pub fn wait_batch(&self, batch_id: u64, timeout: Option<Duration>) -> Result<()> {
        let batch = self.batch(batch_id)?;
        let deadline = timeout.map(|t| Instant::now() + t);
        if !batch.wait_idle(deadline) {
            return fail(
                ErrorKind::Timeout,
                format!("batch {batch_id:#x} still has work in flight"),
            );
        }
        batch.outcome()?;
        self.flush_notify(&batch);
        Ok(())
    }

    /// Frees a batch. Refused with `Busy` while one of its tasks is still in flight (or a submit
    /// to it is in progress); never refused once a status query has seen every task
    /// COMPLETED or FAILED. A notification that no status query has sent yet is sent here, so
    /// freeing at once after the last status query loses nothing.
    pub fn free_batch(&self, batch_id: u64) -> Result<()> {
        match self.inner.batches.remove_if(batch_id, |b| b.may_free()) {
            Ok(batch) => {
                self.flush_notify(&batch);
                Ok(())
            }
            Err(Some(_)) => fail(
                ErrorKind::Busy,
                format!("batch {batch_id:#x} still has work in flight"),
            ),
            Err(None) => fail(
                ErrorKind::InvalidId,
                format!("batch id {batch_id:#x} is unknown or already freed"),
            ),
        }
    }

    /// Sends the batch's notification once every task is done (the same per-task counts a
    /// status query reads), exactly once whoever gets here first: a status query, a wait, the
    /// submit itself or the free. A batch with a failed task drops its notification unsent.
    fn flush_notify(&self, batch: &Batch) {
        let Some((n, failure)) = batch.take_due_notify() else {
            return;
        };
        if let Some((task, kind)) = failure {
            tw_log!(
                crate::log::Level::Debug,
                "notification {:?} not sent: task {task} failed ({})",
                n.name,
                kind.name()
            );
        } else if let Err(e) = self.inner.send_notify(n.segment, &n.name, &n.msg) {
            tw_log!(
                crate::log::Level::Warn,
                "sending notification {:?}: {e}",
                n.name
            );
        }
    }
}
