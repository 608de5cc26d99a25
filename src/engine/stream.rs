//! Stream-ordered transfers: a batch submitted when a CUDA stream reaches a point, with the
//! stream's later work held until the batch completes (see `gpu/stream.rs` for the mechanism).
//! Failures go to the operation's status, never to the process: no exit, no abort.

use super::ids::IdTable;
use super::submit::Request;
use super::{Engine, Inner, LOCAL_SEGMENT};
use crate::completion::{Batch, TaskState};
use crate::error::{Error, ErrorKind, Result, fail};
use crate::gpu::stream::{self as gs, Gate};
use crate::memory::Access;
use crate::sync::LockClean;
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::{Duration, Instant};

/// One stream-ordered batch.
pub struct StreamOp {
    owner: usize,
    batch: Arc<Batch>,
    gate: Arc<Gate>,
    result: Mutex<Option<Result<()>>>,
    kept: bool,
}

impl StreamOp {
    /// Records the outcome (first one wins) and lets the stream go on.
    fn finish(&self, r: Result<()>) {
        {
            let mut slot = self.result.lock_clean();
            if slot.is_some() {
                return;
            }
            if let (Err(e), false) = (&r, self.kept) {
                tw_log!(
                    crate::log::Level::Error,
                    "stream-ordered transfer failed: {e}"
                );
            }
            *slot = Some(r);
        }
        self.gate.open();
    }

    fn outcome(&self) -> Option<Result<()>> {
        self.result.lock_clean().clone()
    }
}

/// Snapshot of a stream-ordered operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamOpStatus {
    /// `Waiting` until the stream reached it and every byte moved (or it failed).
    pub state: TaskState,
    /// Why it failed.
    pub error: Option<Error>,
    /// Bytes moved so far.
    pub transferred: u64,
}

fn ops() -> &'static IdTable<StreamOp> {
    static OPS: OnceLock<IdTable<StreamOp>> = OnceLock::new();
    OPS.get_or_init(IdTable::default)
}

impl Engine {
    /// Enqueues `reqs` on CUDA stream `stream` (a `CUstream`; 0 = legacy default stream): the
    /// batch is submitted when the stream reaches this point, and the stream's later work waits
    /// until every request has finished (successfully or not). Requests are validated now
    /// (segments, registered local ranges) as far as possible; later failures go to the status.
    ///
    /// With `keep`, returns an id for [`Engine::stream_op_status`], [`Engine::stream_op_wait`]
    /// and [`Engine::stream_op_free`]; without it the operation cleans up after itself and logs
    /// failures (Mooncake's `transfer_*_on_cuda` behaviour, minus the process exit).
    /// `Unsupported` when no CUDA driver is available.
    pub fn transfer_on_stream(&self, reqs: &[Request], stream: usize, keep: bool) -> Result<u64> {
        crate::gpu::sys::driver()?;
        if reqs.is_empty() {
            return fail(ErrorKind::InvalidArgument, "no requests");
        }
        if reqs.len() > super::transfer::MAX_BATCH_CAPACITY {
            return fail(
                ErrorKind::TooManyRequests,
                "too many requests for one batch",
            );
        }
        let mut cache = None;
        for (i, r) in reqs.iter().enumerate() {
            if r.segment != LOCAL_SEGMENT {
                self.inner
                    .route_kind(r.segment, &mut cache)
                    .map_err(|k| Error::new(k, format!("request {i}: segment {}", r.segment)))?;
            }
            if r.len > 0 {
                self.inner
                    .registry
                    .check(r.local, r.len, Access::Local)
                    .map_err(|e| {
                        Error::new(e.kind(), format!("request {i}: local {}", e.message()))
                    })?;
            }
        }
        let gate = gs::gate(stream)?;
        let op = Arc::new(StreamOp {
            owner: Arc::as_ptr(&self.inner) as usize,
            batch: Arc::new(Batch::new(reqs.len())),
            gate: gate.clone(),
            result: Mutex::new(None),
            kept: keep,
        });
        let weak: Weak<Inner> = Arc::downgrade(&self.inner);
        let (job_op, reqs) = (op.clone(), reqs.to_vec());
        let job = Box::new(move || run(&weak, &job_op, &reqs));
        gs::enqueue(stream, &gate, job)?;
        Ok(if keep { ops().insert(op)? } else { 0 })
    }

    fn stream_op(&self, id: u64) -> Result<Arc<StreamOp>> {
        ops()
            .get(id)
            .filter(|op| op.owner == Arc::as_ptr(&self.inner) as usize)
            .ok_or_else(|| {
                Error::new(
                    ErrorKind::InvalidId,
                    format!("stream operation {id:#x} is unknown or freed"),
                )
            })
    }

    /// Status of a stream-ordered operation (cheap).
    pub fn stream_op_status(&self, id: u64) -> Result<StreamOpStatus> {
        let op = self.stream_op(id)?;
        let transferred = (0..op.batch.len())
            .map(|i| op.batch.status(i).transferred)
            .sum();
        Ok(match op.outcome() {
            None => StreamOpStatus {
                state: TaskState::Waiting,
                error: None,
                transferred,
            },
            Some(Ok(())) => StreamOpStatus {
                state: TaskState::Completed,
                error: None,
                transferred,
            },
            Some(Err(e)) => StreamOpStatus {
                state: TaskState::Failed,
                error: Some(e),
                transferred,
            },
        })
    }

    /// Waits until the operation finished or `timeout` passes (`None` = no limit): `Ok`, the
    /// transfer's error, or `Timeout` (nothing is cancelled).
    pub fn stream_op_wait(&self, id: u64, timeout: Option<Duration>) -> Result<()> {
        let op = self.stream_op(id)?;
        if !op.gate.wait(timeout.map(|t| Instant::now() + t)) {
            return fail(
                ErrorKind::Timeout,
                format!("stream operation {id:#x} has not finished"),
            );
        }
        op.outcome().unwrap_or(Ok(()))
    }

    /// Frees a finished operation; `Busy` while the stream has not reached it or it is in flight.
    pub fn stream_op_free(&self, id: u64) -> Result<()> {
        self.stream_op(id)?;
        match ops().remove_if(id, |op| op.gate.is_open()) {
            Ok(_) => Ok(()),
            Err(Some(_)) => fail(
                ErrorKind::Busy,
                format!("stream operation {id:#x} has not finished"),
            ),
            Err(None) => fail(
                ErrorKind::InvalidId,
                format!("stream operation {id:#x} is unknown or freed"),
            ),
        }
    }
}

/// On the `tw-gpu-stream` thread, once the stream reached the operation: submit, and open the
/// gate when the batch goes idle (from whichever thread finishes its last slice).
fn run(weak: &Weak<Inner>, op: &Arc<StreamOp>, reqs: &[Request]) {
    let Some(inner) = weak.upgrade() else {
        op.finish(fail(ErrorKind::Shutdown, "the engine was freed"));
        return;
    };
    let hook = op.clone();
    op.batch.set_on_idle(Box::new(move || {
        let r = hook.batch.outcome();
        hook.finish(r);
    }));
    match inner.submit_to(&op.batch, reqs) {
        Ok(_) => {
            if op.batch.is_idle() {
                op.batch.run_on_idle();
            }
        }
        Err(e) => {
            op.finish(Err(e));
            // Nothing was dispatched: drop the hook (and its reference to `op`).
            op.batch.run_on_idle();
        }
    }
}
