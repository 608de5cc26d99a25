//! The master's side of replica tasks and replica clearing (Mooncake's `CreateCopyTask`,
//! `CreateMoveTask`, `QueryTask`, `FetchTasks`, `MarkTaskToComplete`, `BatchReplicaClear`),
//! and the two phases of a task's transfer (`AddReplicaStart` / `AddReplicaEnd`).
//!
//! A task is checked when it is created, with Mooncake's codes (`INVALID_PARAMS` for a target
//! that is not mounted or a source without a replica, `UNAVAILABLE_IN_CURRENT_STATUS` for a
//! target that takes no new replicas), and queued for the owner of the source segment (for a
//! copy, the first of the object's memory replicas whose owner is not suspended). That client
//! fetches it with its heartbeat, runs the transfer and reports.

use super::Master;
use super::objects::Cleared;
use super::tasks::{COPY, MOVE};
use tidewire::store::proto::{Reply, TaskId, code};

fn error(code: i32, message: impl Into<String>) -> Reply {
    Reply::Error {
        code,
        message: message.into(),
    }
}

impl Master {
    /// `Request::ReplicaClear`.
    pub(super) fn replica_clear(&self, keys: &[String], segment: &str) -> Reply {
        let seg = (!segment.is_empty()).then(|| self.segs.id_of(segment));
        let mut cleared = Vec::new();
        for k in keys {
            match self.objs.clear_replicas(k, seg, &self.segs, &self.cfg) {
                Cleared::Skipped => {}
                Cleared::Replicas | Cleared::Object => cleared.push(k.clone()),
            }
        }
        Reply::Keys { keys: cleared }
    }

    /// Checks a task's target as Mooncake does when the task is created.
    fn check_target(&self, key: &str, target: &str) -> Result<(), Reply> {
        match self.segs.takes_replicas(target) {
            None => Err(error(
                code::INVALID_PARAMS,
                format!("{key:?}: target segment {target:?} is not mounted"),
            )),
            Some(false) => Err(error(
                code::UNAVAILABLE_IN_CURRENT_STATUS,
                format!("{key:?}: target segment {target:?} takes no new replicas now"),
            )),
            Some(true) => Ok(()),
        }
    }

    fn queued(&self, r: Result<TaskId, i32>) -> Reply {
        match r {
            Ok(id) => Reply::TaskId { id },
            Err(c) => error(c, "too many replica tasks wait for their clients"),
        }
    }

    /// `Request::CreateCopyTask`.
    pub(super) fn create_copy_task(&self, key: &str, targets: Vec<String>) -> Reply {
        if targets.is_empty() {
            return error(code::INVALID_PARAMS, "a copy needs at least one target");
        }
        let sources = match self.objs.replica_segments(key) {
            Ok(s) => s,
            Err(c) => return error(c, format!("{key:?} has no complete replica")),
        };
        if let Some(e) = targets.iter().find_map(|t| self.check_target(key, t).err()) {
            return e;
        }
        let runner = sources.iter().find_map(|&s| {
            let client = self.segs.client_of(s)?;
            let name = self.segs.name_of(s)?;
            (!self.segs.suspended(s)).then_some((client, name))
        });
        let Some((client, source)) = runner else {
            return error(
                code::INTERNAL_ERROR,
                format!("{key:?}: no live client holds a replica to copy from"),
            );
        };
        self.queued(self.tasks.submit(client, COPY, key, &source, targets))
    }

    /// `Request::CreateMoveTask`.
    pub(super) fn create_move_task(&self, key: &str, source: &str, target: &str) -> Reply {
        let sources = match self.objs.replica_segments(key) {
            Ok(s) => s,
            Err(c) => return error(c, format!("{key:?} has no complete replica")),
        };
        if source == target {
            return error(
                code::INVALID_PARAMS,
                "source and target are the same segment",
            );
        }
        if let Err(e) = self.check_target(key, target) {
            return e;
        }
        let Some(src) = self.segs.id_of(source).filter(|s| sources.contains(s)) else {
            return error(
                code::INVALID_PARAMS,
                format!("{key:?} has no replica on {source:?}"),
            );
        };
        let Some(client) = self.segs.client_of(src) else {
            return error(code::INTERNAL_ERROR, format!("{source:?} has no owner"));
        };
        let targets = vec![target.to_string()];
        self.queued(self.tasks.submit(client, MOVE, key, source, targets))
    }

    /// `Request::QueryTask`.
    pub(super) fn query_task(&self, id: TaskId) -> Reply {
        match self.tasks.query(id) {
            Some(info) => Reply::Task { info },
            None => error(code::TASK_NOT_FOUND, "no such task"),
        }
    }

    /// `Request::AddReplicaStart`.
    pub(super) fn add_replica_start(
        &self,
        client_id: u64,
        key: &str,
        source: &str,
        targets: &[String],
    ) -> Reply {
        match self
            .objs
            .add_start(key, client_id, source, targets, &self.segs, &self.cfg)
        {
            Ok(add) => Reply::ReplicaAdd { add },
            Err(c) => error(c, format!("{key:?}: no replica can be added now")),
        }
    }

    /// `Request::AddReplicaEnd`.
    pub(super) fn add_replica_end(
        &self,
        client_id: u64,
        key: &str,
        (version, ticket): (u64, u64),
        ok: bool,
        drop_source: Option<&str>,
    ) -> Reply {
        let done = self
            .objs
            .add_end(key, client_id, version, ticket, ok, drop_source, &self.segs);
        match done {
            Ok(()) => Reply::Ok,
            Err(c) => error(c, format!("{key:?}: the new replica was not added")),
        }
    }

    /// `Request::TaskDone`.
    pub(super) fn task_done(&self, client_id: u64, id: TaskId, ok: bool, message: String) -> Reply {
        match self.tasks.complete(client_id, id, ok, message) {
            Ok(()) => Reply::Ok,
            Err(c) => error(c, "no such task of this client"),
        }
    }
}
