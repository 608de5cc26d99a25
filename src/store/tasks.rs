//! Replica tasks and replica clearing (Mooncake's `create_copy_task`, `create_move_task`,
//! `query_task`, `batch_replica_clear`), and running the tasks the master queues for this
//! client.
//!
//! The master queues a task for the owner of its source segment. That client fetches it with
//! its heartbeat (once a second, only while it holds a segment) and runs it on a thread of its
//! own: `AddReplicaStart` reserves the new replicas on the targets and holds the object for
//! reading, one engine batch writes the bytes from this client's segment to each target, and
//! `AddReplicaEnd` adds them to the object (a move's source replica leaves it in the same step)
//! or frees them when the transfer failed. Then it reports the task done. Space that runs out
//! on a target is retried a few times, as Mooncake's client does.

use super::StoreError;
use super::batch::BatchEnd;
use super::keys::key_ok;
use super::proto::{Reply, Request, TaskId, TaskInfo, TaskJob, code, key_chunks};
use super::shared::{Shared, StoreClient};
use crate::engine::Request as Xfer;
use crate::transport::Opcode;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// Tasks fetched per heartbeat.
const FETCH_MAX: u32 = 8;
/// Attempts of a task whose target had no room (Mooncake's default retries).
const ATTEMPTS: u32 = 10;
/// Task kind of a move (`TaskJob::kind`).
const MOVE: u8 = 1;

/// The master's answer, with `Reply::Error` as an error.
fn call(sh: &Shared, req: &Request) -> Result<Reply, StoreError> {
    match sh.conn.call(req)? {
        Reply::Error { code, message } => Err(StoreError::new(code, message)),
        other => Ok(other),
    }
}

fn unexpected(what: &str, r: Reply) -> StoreError {
    StoreError::new(code::RPC_FAIL, format!("unexpected {what} reply {r:?}"))
}

impl StoreClient {
    /// Mooncake's `batch_replica_clear`: the keys whose lease has expired lose their replicas
    /// on `segment` (an object left with none goes), or with an empty `segment` go whole when
    /// no write of them is in flight. Returns the keys cleared; bad and empty keys are skipped.
    /// Unlike Mooncake, keys written by any client are cleared (the master does not record a
    /// complete object's writer).
    pub fn replica_clear(&self, keys: &[&str], segment: &str) -> Result<Vec<String>, StoreError> {
        let good: Vec<&str> = keys.iter().copied().filter(|k| key_ok(k)).collect();
        let mut out = Vec::new();
        for chunk in key_chunks(&good, |k| k) {
            let req = Request::ReplicaClear {
                client_id: self.shared.client_id,
                keys: chunk.iter().map(|k| k.to_string()).collect(),
                segment: segment.to_string(),
            };
            match call(&self.shared, &req)? {
                Reply::Keys { keys } => out.extend(keys),
                other => return Err(unexpected("replica clear", other)),
            }
        }
        Ok(out)
    }

    fn queue_task(&self, req: &Request) -> Result<TaskId, StoreError> {
        match call(&self.shared, req)? {
            Reply::TaskId { id } => Ok(id),
            other => Err(unexpected("task", other)),
        }
    }

    /// Queues a copy of `key` to each segment of `targets` (Mooncake's `create_copy_task`):
    /// the task's id. `INVALID_PARAMS` (no target, or one not mounted), `OBJECT_NOT_FOUND`,
    /// `UNAVAILABLE_IN_CURRENT_STATUS` (a target takes no new replicas now).
    pub fn create_copy_task(&self, key: &str, targets: &[&str]) -> Result<TaskId, StoreError> {
        if targets.is_empty() {
            return Err(StoreError::new(code::INVALID_PARAMS, "no target segment"));
        }
        if !key_ok(key) {
            return Err(StoreError::new(code::OBJECT_NOT_FOUND, "no such key"));
        }
        self.queue_task(&Request::CreateCopyTask {
            client_id: self.shared.client_id,
            key: key.into(),
            targets: targets.iter().map(|t| t.to_string()).collect(),
        })
    }

    /// Queues a move of `key`'s replica on `source` to `target` (Mooncake's
    /// `create_move_task`): the task's id. `OBJECT_NOT_FOUND`, `INVALID_PARAMS` (the same
    /// segment twice, a target not mounted, no replica on `source`),
    /// `UNAVAILABLE_IN_CURRENT_STATUS`.
    pub fn create_move_task(
        &self,
        key: &str,
        source: &str,
        target: &str,
    ) -> Result<TaskId, StoreError> {
        if !key_ok(key) {
            return Err(StoreError::new(code::OBJECT_NOT_FOUND, "no such key"));
        }
        self.queue_task(&Request::CreateMoveTask {
            client_id: self.shared.client_id,
            key: key.into(),
            source: source.into(),
            target: target.into(),
        })
    }

    /// A task's state (Mooncake's `query_task`); `TASK_NOT_FOUND`.
    pub fn query_task(&self, id: TaskId) -> Result<TaskInfo, StoreError> {
        match call(&self.shared, &Request::QueryTask { id })? {
            Reply::Task { info } => Ok(info),
            other => Err(unexpected("query task", other)),
        }
    }
}

impl Shared {
    /// The heartbeat's turn for tasks: a client with a segment fetches the tasks queued for it
    /// and runs them on a thread of its own (one such thread at a time).
    pub(crate) fn poll_tasks(self: &Arc<Self>) {
        if self.segment.is_none() || self.tasks_running.load(Ordering::Acquire) {
            return;
        }
        let req = Request::FetchTasks {
            client_id: self.client_id,
            max: FETCH_MAX,
        };
        let Ok(Reply::Tasks { tasks }) = call(self, &req) else {
            return;
        };
        if tasks.is_empty() {
            return;
        }
        self.tasks_running.store(true, Ordering::Release);
        let sh = self.clone();
        let spawned = std::thread::Builder::new()
            .name("tw-store-tasks".into())
            .spawn(move || {
                for job in tasks {
                    sh.run_task(job);
                }
                sh.tasks_running.store(false, Ordering::Release);
            });
        if spawned.is_err() {
            self.tasks_running.store(false, Ordering::Release);
        }
    }

    /// Runs one task and reports it.
    fn run_task(&self, job: TaskJob) {
        let drop_source = (job.kind == MOVE).then_some(job.source.as_str());
        let mut result = Ok(());
        for attempt in 0..ATTEMPTS {
            result = self.add_replicas(&job.key, &job.source, &job.targets, drop_source);
            match &result {
                Err(e) if e.code == code::NO_AVAILABLE_HANDLE && attempt + 1 < ATTEMPTS => {
                    std::thread::sleep(Duration::from_millis(50 * u64::from(attempt + 1)));
                }
                _ => break,
            }
        }
        let (ok, message) = match result {
            Ok(()) => (true, "Task completed successfully".to_string()),
            Err(e) => (false, e.to_string()),
        };
        let _ = call(
            self,
            &Request::TaskDone {
                client_id: self.client_id,
                id: job.id,
                ok,
                message,
            },
        );
    }

    /// One attempt of a task's transfer (see the module docs).
    fn add_replicas(
        &self,
        key: &str,
        source: &str,
        targets: &[String],
        drop_source: Option<&str>,
    ) -> Result<(), StoreError> {
        let start = Request::AddReplicaStart {
            client_id: self.client_id,
            key: key.into(),
            source: source.into(),
            targets: targets.to_vec(),
        };
        let add = match call(self, &start)? {
            Reply::ReplicaAdd { add } => add,
            other => return Err(unexpected("add replica", other)),
        };
        let written = self.write_replicas(&add);
        if matches!(&written, Err(e) if e.code == code::RPC_TIMEOUT) {
            // Writes may still land: the space stays reserved until the master's release
            // timeout, and the read hold ends with its lease.
            return written;
        }
        let end = Request::AddReplicaEnd {
            client_id: self.client_id,
            key: key.into(),
            version: add.version,
            ticket: add.ticket,
            ok: written.is_ok(),
            drop_source: drop_source.map(str::to_string),
        };
        let ended = call(self, &end).map(|_| ());
        written.and(ended)
    }

    /// Writes the object from this client's segment (the source replica) to every new buffer
    /// of `add`, in one engine batch. An `RPC_TIMEOUT` error: the batch ran out of time.
    fn write_replicas(&self, add: &super::proto::ReplicaAdd) -> Result<(), StoreError> {
        if add.targets.is_empty() {
            return Ok(());
        }
        if !self.own_segment(&add.source) || add.source.len != add.size {
            return Err(StoreError::new(
                code::INTERNAL_ERROR,
                "the source replica is not in this client's segment",
            ));
        }
        let mut open = self.resolver();
        let mut reqs = Vec::with_capacity(add.targets.len());
        for t in &add.targets {
            let Some(segment) = open(&t.endpoint) else {
                drop(open);
                self.report_failed(vec![t.endpoint.clone()]);
                return Err(StoreError::new(
                    code::TRANSFER_FAIL,
                    format!("target segment {:?} cannot be reached", t.endpoint),
                ));
            };
            reqs.push(Xfer {
                op: Opcode::Write,
                local: add.source.addr,
                segment,
                remote: t.addr,
                len: add.size,
            });
        }
        drop(open);
        let bytes = add.size.saturating_mul(reqs.len() as u64);
        match self.run_batch(&reqs, bytes) {
            BatchEnd::Done(done) if done.iter().all(|d| *d) => Ok(()),
            BatchEnd::Done(done) => {
                let bad = add
                    .targets
                    .iter()
                    .zip(done)
                    .filter(|(_, d)| !d)
                    .map(|(t, _)| t.endpoint.clone())
                    .collect();
                self.report_failed(bad);
                Err(StoreError::new(
                    code::TRANSFER_FAIL,
                    "writing the new replica failed",
                ))
            }
            BatchEnd::Rejected(c) => Err(StoreError::new(c, "the transfer was refused")),
            BatchEnd::TimedOut => Err(StoreError::new(
                code::RPC_TIMEOUT,
                "writing the new replica ran out of time",
            )),
        }
    }
}
