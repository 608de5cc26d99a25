//! The store master: metadata only (segments, objects, leases, pins, client liveness), never
//! object bytes. [`Master`] answers [`Request`]s; `server` serves them over TCP, `http` the
//! optional HTTP metadata service, `admin` the admin routes on the metrics port (Prometheus
//! metrics and Mooncake's inspection routes); `tidewire-master` wires them up.

pub mod admin;
mod background;
mod config;
pub mod durable;
#[doc(hidden)]
pub mod fuzzing;
pub mod http;
pub mod journal_record;
pub mod kv_events;
pub mod metrics;
pub mod objects;
mod os_memory;
pub mod segments;
pub mod server;
mod task_requests;
pub mod tasks;
mod tier_requests;
pub mod tiering;
mod views;

pub use config::MasterConfig;
use os_memory::give_memory_back;
pub use os_memory::tune_allocator;

use metrics::Metrics;
use objects::Objects;
use segments::Segments;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock};
use std::time::{Duration, Instant};
use tidewire::etcd::journal_writer::JournalWriter;
use tidewire::store::proto::{
    self, KeyVersion, REMOVE_STRETCH_MS, Reply, Request, StartResult, code,
};
use tidewire::sync::{LockClean, RwLockClean};
use tidewire::tw_log;

/// The master's state. Every method is thread-safe.
pub struct Master {
    cfg: MasterConfig,
    segs: Segments,
    objs: Objects,
    /// client id -> last heartbeat.
    clients: Mutex<HashMap<u64, Instant>>,
    /// Prometheus counters.
    pub metrics: Metrics,
    /// Disk-tier work queues and counters.
    pub offloads: tiering::Offloads,
    /// Replica tasks (copies and moves) by id.
    pub tasks: tasks::Tasks,
    ticks: AtomicU64,
    /// Allocated bytes when the last watermark eviction freed nothing (skip until it changes).
    stuck_at: AtomicU64,
    /// Objects removed (not yet given back to the OS) as the previous sweep saw them.
    removed_seen: AtomicU64,
    /// Sweeps left in which a mass removal's memory may still be freed (buffers retired while
    /// reads of them were possible, slabs compacted later): see [`Master::trim_after_removals`].
    trim_followups: AtomicU64,
    /// A mass removal's walk reached its end since the last tick: the next tick gives the
    /// memory back at once instead of waiting for the sweep to see the removals settle.
    walk_ended: AtomicBool,
    /// HA: while set, every request is refused with this message (a standby, or a leader still
    /// rebuilding its state).
    standby: RwLock<Option<String>>,
    /// HA with durability: the journal this master's changes go to.
    journal: OnceLock<Arc<JournalWriter>>,
}

impl Master {
    /// A master with no segments.
    pub fn new(cfg: MasterConfig) -> Master {
        Master {
            cfg,
            segs: Segments::default(),
            objs: Objects::default(),
            clients: Mutex::default(),
            metrics: Metrics::default(),
            offloads: tiering::Offloads::default(),
            tasks: tasks::Tasks::default(),
            ticks: AtomicU64::new(0),
            stuck_at: AtomicU64::new(u64::MAX),
            removed_seen: AtomicU64::new(0),
            trim_followups: AtomicU64::new(0),
            walk_ended: AtomicBool::new(false),
            standby: RwLock::new(None),
            journal: OnceLock::new(),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &MasterConfig {
        &self.cfg
    }

    /// Publishes KV events to `kv` from now on (set once, before requests are served).
    pub fn enable_kv_events(&self, kv: std::sync::Arc<kv_events::KvEvents>) {
        let _ = self.objs.kv.set(kv);
    }

    /// The KV-event publisher, when enabled.
    pub fn kv_events(&self) -> Option<&std::sync::Arc<kv_events::KvEvents>> {
        self.objs.kv.get()
    }

    /// KV events' inventory: one page of readable keys, from shard `from` (see
    /// [`objects::Objects::inventory`]).
    pub fn kv_inventory(&self, from: usize, max_keys: usize) -> objects::Inventory {
        self.objs.inventory(from, max_keys)
    }

    /// HA: refuse every request with `why` (`Some`), or serve (`None`).
    pub fn set_standby(&self, why: Option<String>) {
        *self.standby.write_clean() = why;
    }

    fn touch(&self, client_id: u64) {
        self.clients.lock_clean().insert(client_id, Instant::now());
    }

    /// Clients whose heartbeats are arriving (each within the hold grace of now).
    fn heartbeating(&self) -> HashSet<u64> {
        let grace = Duration::from_millis(tidewire::store::proto::HOLD_PING_GRACE_MS);
        let now = Instant::now();
        self.clients
            .lock_clean()
            .iter()
            .filter(|(_, t)| now.duration_since(**t) < grace)
            .map(|(id, _)| *id)
            .collect()
    }

    /// Answers one request (`None` for one-way messages).
    pub fn handle(&self, req: Request) -> Option<Reply> {
        if let Some(refused) = self.refusal(req.validate()) {
            return Some(refused);
        }
        let t0 = Instant::now();
        let name = req.name();
        let shape = metrics::Shape::of(&req);
        let mutating = !matches!(
            req,
            Request::Get { .. }
                | Request::Exist { .. }
                | Request::Ping { .. }
                | Request::ReadDone { .. }
                | Request::ReportFailed { .. }
                | Request::QueryTask { .. }
                | Request::FetchTasks { .. }
                | Request::TaskDone { .. }
        );
        let reply = self.dispatch(req);
        if mutating {
            if let Err(e) = self.journal_sync() {
                return Some(Reply::Error {
                    code: code::RPC_FAIL,
                    message: format!("master: change not made durable: {e}"),
                });
            }
        }
        self.metrics.record(name, t0.elapsed());
        self.metrics.observe(&shape, reply.as_ref());
        reply
    }

    /// `Exist` of borrowed keys (see [`proto::decode_exist`]): what [`Master::handle`] answers
    /// for `Request::Exist`, without the keys copied into the request first.
    pub fn exist(&self, keys: &[&str]) -> Reply {
        if let Some(refused) = self.refusal(proto::check_keys(keys)) {
            return refused;
        }
        let t0 = Instant::now();
        let codes = self.objs.exist(keys, &self.cfg);
        self.metrics.record("exist", t0.elapsed());
        let reply = Reply::Codes { codes };
        self.metrics
            .observe(&metrics::Shape::exist(keys.len()), Some(&reply));
        reply
    }

    /// The answer to a request that failed its checks (`checked`) or came to a standby; `None`
    /// when it is to be served.
    fn refusal(&self, checked: Result<(), String>) -> Option<Reply> {
        if let Err(m) = checked {
            return Some(Reply::Error {
                code: code::INVALID_PARAMS,
                message: m,
            });
        }
        self.standby.read_clean().as_ref().map(|why| Reply::Error {
            code: code::RPC_FAIL,
            message: why.clone(),
        })
    }

    fn dispatch(&self, req: Request) -> Option<Reply> {
        Some(match req {
            Request::Mount {
                client_id,
                name,
                base,
                size,
            } => {
                self.touch(client_id);
                let mut mounted = self.segs.mount(client_id, &name, base, size);
                if mounted == Err(code::SEGMENT_ALREADY_EXISTS) {
                    // The name's owner went silent (a restarted process mounts it again under a
                    // new client id): its segment and the objects there are gone for good.
                    if let Some(old) = self.segs.id_of(&name).filter(|&id| self.segs.suspended(id))
                    {
                        self.unmount(&HashSet::from([old]));
                        mounted = self.segs.mount(client_id, &name, base, size);
                    }
                }
                match mounted {
                    Ok(_) => {
                        self.journal_mount(client_id, &name, base, size);
                        Reply::Ok
                    }
                    Err(c) => Reply::Error {
                        code: c,
                        message: format!("segment {name:?} is mounted by another client"),
                    },
                }
            }
            Request::Unmount { client_id, name } => match self.segs.id_of(&name) {
                Some(id) if self.segs.of_client(client_id).contains(&id) => {
                    self.unmount(&HashSet::from([id]));
                    if self.segs.of_client(client_id).is_empty() {
                        self.tasks
                            .fail_client(client_id, "the client running the task unmounted");
                    }
                    Reply::Ok
                }
                _ => Reply::Error {
                    code: code::SEGMENT_NOT_FOUND,
                    message: format!("segment {name:?} is not mounted by this client"),
                },
            },
            Request::Ping { client_id } => {
                self.touch(client_id);
                // Its heartbeat: the client's segments take new placements again.
                self.segs.resume_client(client_id);
                // Re-mount whenever the master holds no segment of this client (restart, or
                // expired after missed heartbeats); clients without a segment ignore it.
                Reply::Pong {
                    remount: self.segs.of_client(client_id).is_empty(),
                }
            }
            Request::PutStart {
                client_id,
                upsert,
                items,
                config,
            } => {
                self.touch(client_id);
                let results: Vec<StartResult> = items
                    .iter()
                    .map(|it| {
                        self.objs.start(
                            it,
                            client_id,
                            upsert,
                            &config,
                            &self.cfg,
                            &self.segs,
                            || self.allocate(it.size, &config),
                        )
                    })
                    .collect();
                Reply::Started { results }
            }
            Request::PutEnd { client_id, items } => {
                let codes: Vec<i32> = items
                    .iter()
                    .map(|kv| self.objs.end(kv, client_id, &self.segs))
                    .collect();
                self.write_behind(&items, &codes);
                Reply::Codes { codes }
            }
            Request::PutRevoke { client_id, items } => Reply::Codes {
                codes: items
                    .iter()
                    .map(|kv| self.objs.revoke(kv, client_id, &self.segs))
                    .collect(),
            },
            Request::Get { client_id, keys } => {
                let results = self.objs.get(&keys, client_id, &self.cfg, &self.segs);
                self.promote_hits(&keys, &results);
                Reply::Replicas {
                    lease_ms: self.cfg.lease_ttl.as_millis() as u64,
                    hold_ms: self.cfg.read_hold_max.max(self.cfg.lease_ttl).as_millis() as u64,
                    results,
                }
            }
            Request::ReadDone { client_id, items } => {
                items
                    .iter()
                    .for_each(|kv: &KeyVersion| self.objs.read_done(kv, client_id, &self.segs));
                return None;
            }
            Request::ReportFailed {
                client_id,
                segments,
            } => {
                for name in &segments {
                    if self.segs.mark_unhealthy(name) {
                        tw_log!(
                            tidewire::log::Level::Warn,
                            "master: client {client_id:#x} reports failed transfers with segment \
                             {name:?}; no new placements there until its owner pings"
                        );
                    }
                }
                return None;
            }
            Request::Exist { keys } => Reply::Codes {
                codes: self.objs.exist(&keys, &self.cfg),
            },
            Request::Remove { keys, force } => Reply::Codes {
                codes: keys
                    .iter()
                    .map(|k| self.objs.remove(k, force, &self.segs, &self.cfg))
                    .collect(),
            },
            Request::RemoveByRegex {
                pattern,
                force,
                from,
            } => match regex::Regex::new(&pattern) {
                Ok(re) => self.remove_walk(|k| re.is_match(k), force, from),
                Err(e) => Reply::Error {
                    code: code::INVALID_PARAMS,
                    message: format!("bad regex: {e}"),
                },
            },
            Request::RemoveAll { force, from } => {
                let reply = self.remove_walk(|_| true, force, from);
                let ended = matches!(
                    reply,
                    Reply::Removed { next: None, .. } | Reply::Count { .. }
                );
                if ended {
                    self.objs.cleared_if_empty();
                }
                reply
            }
            Request::MountDisk {
                client_id,
                name,
                capacity,
                first,
                last,
                records,
            } => self.mount_disk(client_id, &name, capacity, first, last, &records),
            Request::OffloadPoll {
                client_id,
                name,
                done,
                lost,
                used: _,
                max,
            } => self.offload_poll(client_id, &name, &done, &lost, max),
            Request::Promote { client_id, keys } => {
                self.touch(client_id);
                self.promote_now(&keys)
            }
            Request::ReplicaClear { keys, segment, .. } => self.replica_clear(&keys, &segment),
            Request::CreateCopyTask { key, targets, .. } => self.create_copy_task(&key, targets),
            Request::CreateMoveTask {
                key,
                source,
                target,
                ..
            } => self.create_move_task(&key, &source, &target),
            Request::QueryTask { id } => self.query_task(id),
            Request::FetchTasks { client_id, max } => Reply::Tasks {
                tasks: self.tasks.fetch(client_id, max as usize),
            },
            Request::AddReplicaStart {
                client_id,
                key,
                source,
                targets,
            } => self.add_replica_start(client_id, &key, &source, &targets),
            Request::AddReplicaEnd {
                client_id,
                key,
                version,
                ticket,
                ok,
                drop_source,
            } => self.add_replica_end(
                client_id,
                &key,
                (version, ticket),
                ok,
                drop_source.as_deref(),
            ),
            Request::TaskDone {
                client_id,
                id,
                ok,
                message,
            } => self.task_done(client_id, id, ok, message),
        })
    }

    /// A mass removal: one stretch of at most [`REMOVE_STRETCH_MS`] from the cursor `from`,
    /// or, without a cursor, the whole walk (still letting go of each shard between chunks).
    fn remove_walk(&self, pred: impl Fn(&str) -> bool, force: bool, from: Option<u64>) -> Reply {
        let budget = from.map(|_| Duration::from_millis(REMOVE_STRETCH_MS));
        let start = from.unwrap_or(objects::WALK_START);
        let swept = self
            .objs
            .remove_matching(pred, force, &self.segs, &self.cfg, start, budget);
        if swept.as_ref().is_ok_and(|s| s.next.is_none()) {
            self.walk_ended.store(true, Ordering::Relaxed);
        }
        match swept {
            Ok(s) if from.is_some() => Reply::Removed {
                count: s.removed,
                next: s.next,
            },
            Ok(s) => Reply::Count { count: s.removed },
            Err(m) => Reply::Error {
                code: code::INVALID_PARAMS,
                message: m,
            },
        }
    }

    /// Allocates, evicting once when the segments are full.
    fn allocate(
        &self,
        size: u64,
        config: &tidewire::store::proto::WriteConfig,
    ) -> Result<segments::Placed, i32> {
        match self.segs.allocate(size, config, self.cfg.strategy) {
            Err(code::NO_AVAILABLE_HANDLE) => {
                let (_, _, cap) = self.segs.usage();
                let target = ((cap as f64 * self.cfg.eviction_ratio) as u64).max(size);
                let (freed, queued) =
                    self.objs
                        .evict(target, &self.segs, &self.cfg, &self.offloads);
                self.count_eviction(freed);
                if freed == 0 {
                    // Room comes when the disk tier's owners report their writes.
                    let busy = queued > 0 || self.offloads.queued() > 0 || self.offloading();
                    return Err(match busy {
                        true => code::ROOM_BEING_MADE,
                        false => code::NO_AVAILABLE_HANDLE,
                    });
                }
                self.metrics
                    .evictions
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                match self.segs.allocate(size, config, self.cfg.strategy) {
                    // Freed too little for this write, and a tier is still writing objects
                    // out: room is coming.
                    Err(code::NO_AVAILABLE_HANDLE) if queued > 0 || self.offloads.queued() > 0 => {
                        Err(code::ROOM_BEING_MADE)
                    }
                    other => other,
                }
            }
            other => other,
        }
    }

    /// Counts an eviction pass that freed `freed` bytes (Mooncake's eviction families).
    fn count_eviction(&self, freed: u64) {
        let m = &self.metrics.mooncake;
        m.eviction_attempts.fetch_add(1, Ordering::Relaxed);
        m.evicted_bytes.fetch_add(freed, Ordering::Relaxed);
    }

    fn unmount(&self, ids: &HashSet<u32>) {
        self.journal_unmount(ids);
        for id in ids {
            self.segs.unmount(*id);
        }
        let n = self.objs.drop_segments(ids);
        if n > 0 {
            tw_log!(
                tidewire::log::Level::Info,
                "master: dropped {n} objects with the unmounted segments"
            );
        }
    }

    /// Prometheus text exposition.
    pub fn metrics_text(&self) -> String {
        let (segments, used, cap) = self.segs.usage();
        let clients = self.clients.lock_clean().len();
        let objects = self.objs.count();
        let disks = self.segs.disk_usage();
        let mut text = self.metrics.render(objects, used, cap, segments, clients);
        if self.cfg.tier.enabled {
            text.push_str(&self.offloads.render(disks));
        }
        // Mooncake's families, for its dashboards (docs/master.md lists those without one).
        let memory: Vec<(String, u64, u64)> = self
            .segs
            .details()
            .into_iter()
            .filter(|s| !s.disk)
            .map(|s| (s.name, s.used, s.capacity))
            .collect();
        text.push_str(&self.metrics.render_mooncake(
            objects,
            clients,
            &memory,
            (disks.1, disks.2),
            self.offloads.promoted.load(Ordering::Relaxed),
        ));
        if let Some(kv) = self.kv_events() {
            text.push_str(&kv.render());
        }
        text
    }
}

#[cfg(test)]
mod sweep_tests;
#[cfg(test)]
mod trim_tests;
