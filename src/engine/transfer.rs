//! Batches of READ/WRITE requests: allocate, submit (validated all-or-nothing), poll, wait, free.

use super::segments::SegmentId;
use super::{Engine, Inner};
use crate::completion::{Batch, PendingNotify, SliceDone, TaskState, TaskStatus};
use crate::error::{Error, ErrorKind, Result, fail};
use crate::memory::Access;
use crate::transport::{Opcode, Route, Slice, Transport};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Largest batch capacity accepted.
pub const MAX_BATCH_CAPACITY: usize = 1 << 24;

/// One transfer request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request {
    /// Direction.
    pub op: Opcode,
    /// Local address (must lie in registered memory).
    pub local: u64,
    /// Target segment (0 = this engine).
    pub segment: SegmentId,
    /// Absolute address in the target's memory.
    pub remote: u64,
    /// Bytes; 0 completes at once.
    pub len: u64,
}

impl Engine {
    /// Allocates a batch that can hold `capacity` requests over all its submits.
    pub fn alloc_batch(&self, capacity: usize) -> Result<u64> {
        if capacity > MAX_BATCH_CAPACITY {
            return fail(
                ErrorKind::InvalidArgument,
                format!("batch capacity {capacity} exceeds {MAX_BATCH_CAPACITY}"),
            );
        }
        Ok(self.inner.batches.insert(Arc::new(Batch::new(capacity))))
    }

    fn batch(&self, id: u64) -> Result<Arc<Batch>> {
        self.inner.batches.get(id).ok_or_else(|| {
            Error::new(
                ErrorKind::InvalidId,
                format!("batch id {id:#x} is unknown or freed"),
            )
        })
    }

    /// Submits requests to a batch. Every request is validated before any is started: too many
    /// requests, an unknown segment, an unregistered local range or an unsupported peer protocol
    /// rejects the whole call. Remote ranges are checked by the owner.
    pub fn submit(&self, batch_id: u64, reqs: &[Request]) -> Result<()> {
        let batch = self.batch(batch_id)?;
        self.inner.submit_to(&batch, reqs).map(|_| ())
    }

    /// Like [`Engine::submit`], and sends `name`/`msg` to the first request's segment once a
    /// status query or wait observes the whole batch completed (Mooncake's notify semantics).
    pub fn submit_with_notify(
        &self,
        batch_id: u64,
        reqs: &[Request],
        name: &str,
        msg: &str,
    ) -> Result<()> {
        let first = reqs
            .first()
            .ok_or_else(|| Error::new(ErrorKind::InvalidArgument, "no requests"))?;
        let batch = self.batch(batch_id)?;
        self.inner.submit_to(&batch, reqs)?;
        *batch.notify.lock().unwrap_or_else(|e| e.into_inner()) = Some(PendingNotify {
            segment: first.segment,
            name: name.into(),
            msg: msg.into(),
        });
        self.flush_notify(&batch);
        Ok(())
    }

    /// Status of task `task` (submission order, from 0) of a batch.
    pub fn task_status(&self, batch_id: u64, task: usize) -> Result<TaskStatus> {
        let batch = self.batch(batch_id)?;
        if task >= batch.len() {
            return fail(
                ErrorKind::InvalidArgument,
                format!("task {task} out of range (batch holds {})", batch.len()),
            );
        }
        let st = batch.status(task);
        if st.state == TaskState::Completed {
            self.flush_notify(&batch);
        }
        Ok(st)
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

    /// Frees a batch. Refused with `Busy` while any of its work is in flight.
    pub fn free_batch(&self, batch_id: u64) -> Result<()> {
        match self.inner.batches.remove_if(batch_id, |b| b.is_idle()) {
            Ok(_) => Ok(()),
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

    fn flush_notify(&self, batch: &Batch) {
        if !batch.is_idle() || batch.first_failure().is_some() {
            return;
        }
        let pending = batch
            .notify
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(n) = pending {
            if let Err(e) = self.inner.send_notify(n.segment, &n.name, &n.msg) {
                crate::tw_log!(
                    crate::log::Level::Warn,
                    "sending notification {:?}: {e}",
                    n.name
                );
            }
        }
    }
}

impl Inner {
    /// Validates then dispatches `reqs` as new tasks of `batch`. Returns the first task index.
    pub(crate) fn submit_to(&self, batch: &Arc<Batch>, reqs: &[Request]) -> Result<usize> {
        let live = self.live.read().unwrap_or_else(|e| e.into_inner());
        if !*live {
            return fail(ErrorKind::Shutdown, "engine is shutting down");
        }
        let _serial = batch.submit_lock.lock().unwrap_or_else(|e| e.into_inner());
        let start = batch.len();
        if reqs.len() > batch.capacity() - start {
            return fail(
                ErrorKind::TooManyRequests,
                format!(
                    "{} requests do not fit: batch holds {start} of {}",
                    reqs.len(),
                    batch.capacity()
                ),
            );
        }
        let mut cache = None;
        let mut targets = Vec::with_capacity(reqs.len());
        for (i, r) in reqs.iter().enumerate() {
            let t = self
                .route(r.segment, &mut cache)
                .map_err(|e| Error::new(e.kind(), format!("request {i}: {}", e.message())))?;
            let mut gpu = None;
            if r.len > 0 {
                gpu = self
                    .registry
                    .check_place(r.local, r.len, Access::Local)
                    .map_err(|e| {
                        Error::new(e.kind(), format!("request {i}: local {}", e.message()))
                    })?;
                if r.len
                    .div_ceil(self.cfg.slice_size.min(self.cfg.rdma_slice_size).max(1))
                    > u32::MAX as u64
                {
                    return fail(
                        ErrorKind::InvalidArgument,
                        format!("request {i}: length {} is too large", r.len),
                    );
                }
                if r.remote.checked_add(r.len).is_none() || r.remote == 0 {
                    return fail(
                        ErrorKind::InvalidArgument,
                        format!(
                            "request {i}: remote range {:#x}+{} is NULL or overflows",
                            r.remote, r.len
                        ),
                    );
                }
            }
            targets.push((t, gpu));
        }
        let slice_for = |t: &Route| t.slice_size(self.cfg.slice_size, self.cfg.rdma_slice_size);
        for (i, (r, (t, _))) in reqs.iter().zip(&targets).enumerate() {
            let n = r.len.div_ceil(slice_for(t));
            batch.prepare_task(start + i, n as u32);
        }
        batch.publish(start + reqs.len());
        // Consecutive slices to one route go down together (for TCP: one inline send when
        // small).
        let mut pending: Option<(Route, Vec<Slice>)> = None;
        let deadline = std::time::Instant::now() + self.cfg.transfer_timeout;
        for (i, (r, (t, gpu))) in reqs.iter().zip(targets).enumerate() {
            let task = (start + i) as u32;
            let slice = slice_for(&t);
            if pending.as_ref().is_some_and(|(p, _)| !p.same(&t)) {
                let (p, v) = pending.take().expect("checked");
                p.submit_all(v);
            }
            let (_, v) = pending.get_or_insert_with(|| (t, Vec::new()));
            // GPU regions go to the RDMA NIC as registered (GPUDirect); staging through host
            // memory, as TCP does, is not built for RDMA yet.
            v.extend((0..r.len).step_by(slice as usize).map(|off| Slice {
                op: r.op,
                local: r.local + off,
                remote: r.remote + off,
                len: slice.min(r.len - off),
                gpu,
                retries: 0,
                deadline,
                no_vm: false,
                done: SliceDone::new(batch.clone(), task),
            }));
        }
        if let Some((p, v)) = pending {
            p.submit_all(v);
        }
        Ok(start)
    }
}
