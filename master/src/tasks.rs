//! Replica tasks (Mooncake's `ClientTaskManager`): copies and moves queued for the client that
//! runs them (the owner of the source segment), fetched by it, reported back, and kept by id
//! for `QueryTask`. A task is PENDING until its client fetches it, PROCESSING until the
//! client reports, then SUCCESS or FAILED with a message. A task whose client is gone, or that
//! waits or runs past its timeout, fails with a message saying so. At most
//! [`MAX_FINISHED`] finished tasks are remembered (the oldest are forgotten first) and at most
//! [`MAX_PENDING`] wait (Mooncake's defaults).

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tidewire::store::proto::{TaskId, TaskInfo, TaskJob, code};
use tidewire::sync::LockClean;

/// Finished tasks remembered for `QueryTask`.
pub const MAX_FINISHED: usize = 10_000;
/// Tasks waiting for their clients, at most.
pub const MAX_PENDING: usize = 10_000;
/// A task not fetched within this fails ("pending timeout").
pub const PENDING_TIMEOUT: Duration = Duration::from_secs(300);
/// A task fetched and not reported within this fails ("processing timeout").
pub const PROCESSING_TIMEOUT: Duration = Duration::from_secs(300);

/// Task kinds (Mooncake's `TaskType`).
pub const COPY: u8 = 0;
/// A move.
pub const MOVE: u8 = 1;

const PENDING: u8 = 0;
const PROCESSING: u8 = 1;
const FAILED: u8 = 2;
const SUCCESS: u8 = 3;

struct Task {
    info: TaskInfo,
    key: String,
    source: String,
    targets: Vec<String>,
}

#[derive(Default)]
struct Inner {
    all: HashMap<TaskId, Task>,
    /// Per client, its pending tasks in order.
    queued: HashMap<u64, VecDeque<TaskId>>,
    pending: usize,
    finished: VecDeque<TaskId>,
}

/// Every replica task. Thread-safe.
#[derive(Default)]
pub struct Tasks(Mutex<Inner>);

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

fn random_u64() -> u64 {
    let mut v = 0u64;
    // SAFETY: getrandom writes at most 8 bytes into `v`.
    let n = unsafe { libc::getrandom((&raw mut v).cast(), 8, 0) };
    if n != 8 {
        v = now_ms().rotate_left(17) ^ u64::from(std::process::id());
    }
    v
}

impl Inner {
    fn finish(&mut self, id: TaskId, ok: bool, message: String) {
        let Some(t) = self.all.get_mut(&id) else {
            return;
        };
        if t.info.status == PENDING {
            self.pending = self.pending.saturating_sub(1);
        }
        t.info.status = if ok { SUCCESS } else { FAILED };
        t.info.message = message;
        t.info.updated_ms = now_ms();
        self.finished.push_back(id);
        while self.finished.len() > MAX_FINISHED {
            if let Some(old) = self.finished.pop_front() {
                self.all.remove(&old);
            }
        }
    }
}

impl Tasks {
    /// Queues a task for `client`; its id, or `TASK_PENDING_LIMIT_EXCEEDED`.
    pub fn submit(
        &self,
        client: u64,
        kind: u8,
        key: &str,
        source: &str,
        targets: Vec<String>,
    ) -> Result<TaskId, i32> {
        let mut g = self.0.lock_clean();
        if g.pending >= MAX_PENDING {
            return Err(code::TASK_PENDING_LIMIT_EXCEEDED);
        }
        let mut id = (random_u64(), random_u64());
        while id == (0, 0) || g.all.contains_key(&id) {
            id = (random_u64(), random_u64());
        }
        let now = now_ms();
        g.all.insert(
            id,
            Task {
                info: TaskInfo {
                    id,
                    kind,
                    status: PENDING,
                    created_ms: now,
                    updated_ms: now,
                    client,
                    message: String::new(),
                },
                key: key.to_string(),
                source: source.to_string(),
                targets,
            },
        );
        g.queued.entry(client).or_default().push_back(id);
        g.pending += 1;
        Ok(id)
    }

    /// A task's state.
    pub fn query(&self, id: TaskId) -> Option<TaskInfo> {
        self.0.lock_clean().all.get(&id).map(|t| t.info.clone())
    }

    /// At most `max` of `client`'s pending tasks, processing from now on.
    pub fn fetch(&self, client: u64, max: usize) -> Vec<TaskJob> {
        let mut g = self.0.lock_clean();
        let g = &mut *g;
        let Some(q) = g.queued.get_mut(&client) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        while out.len() < max {
            let Some(id) = q.pop_front() else {
                break;
            };
            let Some(t) = g.all.get_mut(&id).filter(|t| t.info.status == PENDING) else {
                continue;
            };
            t.info.status = PROCESSING;
            t.info.updated_ms = now_ms();
            g.pending = g.pending.saturating_sub(1);
            out.push(TaskJob {
                id,
                kind: t.info.kind,
                key: t.key.clone(),
                source: t.source.clone(),
                targets: t.targets.clone(),
            });
        }
        if q.is_empty() {
            g.queued.remove(&client);
        }
        out
    }

    /// `client` reports task `id` finished. `TASK_NOT_FOUND`, or `INVALID_PARAMS` when the
    /// task is another client's. A task finished already keeps its state.
    pub fn complete(&self, client: u64, id: TaskId, ok: bool, message: String) -> Result<(), i32> {
        let mut g = self.0.lock_clean();
        let t = g.all.get(&id).ok_or(code::TASK_NOT_FOUND)?;
        if t.info.client != client {
            return Err(code::INVALID_PARAMS);
        }
        if t.info.status == PENDING || t.info.status == PROCESSING {
            g.finish(id, ok, message);
        }
        Ok(())
    }

    /// Fails every unfinished task of `client` (it is gone) with `why`.
    pub fn fail_client(&self, client: u64, why: &str) {
        let mut g = self.0.lock_clean();
        g.queued.remove(&client);
        let ids: Vec<TaskId> = g
            .all
            .values()
            .filter(|t| t.info.client == client && t.info.status <= PROCESSING)
            .map(|t| t.info.id)
            .collect();
        for id in ids {
            g.finish(id, false, why.to_string());
        }
    }

    /// Fails the tasks that waited or ran past their timeouts.
    pub fn expire(&self) {
        let now = now_ms();
        let mut g = self.0.lock_clean();
        let late: Vec<(TaskId, &'static str)> = g
            .all
            .values()
            .filter_map(|t| {
                let (since, limit, why) = match t.info.status {
                    PENDING => (t.info.created_ms, PENDING_TIMEOUT, "pending timeout"),
                    PROCESSING => (t.info.updated_ms, PROCESSING_TIMEOUT, "processing timeout"),
                    _ => return None,
                };
                (now.saturating_sub(since) > limit.as_millis() as u64).then_some((t.info.id, why))
            })
            .collect();
        for (id, why) in late {
            g.finish(id, false, why.to_string());
        }
    }

    /// Whether any task is unfinished (the sweep looks for late ones only then).
    pub fn any_open(&self) -> bool {
        let g = self.0.lock_clean();
        g.all.len() > g.finished.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_task_goes_pending_processing_finished() {
        let t = Tasks::default();
        let id = t.submit(7, COPY, "k", "a", vec!["b".into()]).unwrap();
        assert_eq!(t.query(id).unwrap().status, PENDING);
        assert!(t.fetch(8, 4).is_empty(), "another client's task");
        let jobs = t.fetch(7, 4);
        assert_eq!(jobs.len(), 1);
        assert_eq!((jobs[0].key.as_str(), jobs[0].kind), ("k", COPY));
        assert_eq!(t.query(id).unwrap().status, PROCESSING);
        assert!(t.fetch(7, 4).is_empty());
        assert_eq!(
            t.complete(8, id, true, "x".into()),
            Err(code::INVALID_PARAMS)
        );
        t.complete(7, id, true, "done".into()).unwrap();
        let info = t.query(id).unwrap();
        assert_eq!((info.status, info.message.as_str()), (SUCCESS, "done"));
        // A second report changes nothing.
        t.complete(7, id, false, "late".into()).unwrap();
        assert_eq!(t.query(id).unwrap().status, SUCCESS);
        assert_eq!(
            t.complete(7, (1, 2), true, String::new()),
            Err(code::TASK_NOT_FOUND)
        );
        assert!(!t.any_open());
    }

    #[test]
    fn a_gone_client_fails_its_tasks() {
        let t = Tasks::default();
        let a = t.submit(7, MOVE, "k", "a", vec!["b".into()]).unwrap();
        let b = t.submit(7, COPY, "k2", "a", vec!["b".into()]).unwrap();
        t.fetch(7, 1);
        t.fail_client(7, "client gone");
        for id in [a, b] {
            let info = t.query(id).unwrap();
            assert_eq!(
                (info.status, info.message.as_str()),
                (FAILED, "client gone")
            );
        }
        assert!(t.fetch(7, 4).is_empty());
    }

    #[test]
    fn finished_tasks_are_forgotten_oldest_first() {
        let t = Tasks::default();
        let first = t.submit(1, COPY, "k", "a", Vec::new()).unwrap();
        t.complete(1, first, true, String::new()).unwrap();
        for _ in 0..MAX_FINISHED {
            let id = t.submit(1, COPY, "k", "a", Vec::new()).unwrap();
            t.complete(1, id, true, String::new()).unwrap();
        }
        assert!(t.query(first).is_none());
    }
}
