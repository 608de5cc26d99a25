//! The master RPC protocol (ours, not Mooncake's coro_rpc).
//!
//! Frame: a 12-byte header — magic `b"TWMS"`, `u8` version ([`VERSION`]), `u8` flags
//! ([`FLAG_ONE_WAY`]: no reply is sent), `u16` reserved (0), `u32` body length (little endian) —
//! then the body. A connection carries any number of request/reply pairs in order.
//!
//! Body encoding: postcard (serde's compact binary format: enum variants and lengths as
//! varints, integers as varints, strings as their bytes). The master handles only metadata
//! (keys, sizes, addresses), never object bytes, so a body is mostly keys; postcard copies a key
//! as it is, where JSON escaped it on the way out and parsed it back on the way in (a 1,024-key
//! `Exist` of 64-byte keys and its reply: 100-150 us of JSON work on the two sides, about 60 us
//! of postcard, most of that the master's allocation of each key). The format is
//! not self-describing: the order of the enum variants and of the fields below *is* the
//! protocol, so a change to it is a new [`VERSION`]; add variants only at the end of an enum.
//! Every decoded message is then checked by [`Request::validate`] against the bounds below
//! before the master acts on it; every read has a deadline set by the caller.

use serde::{Deserialize, Serialize};

mod checks;
mod exist;
mod frame;
mod items;
pub use checks::check_keys;
use checks::{check_batch, check_key, check_name, check_segment_name, check_versions};
pub use exist::{decode_exist, encode_exist};
pub use frame::*;
pub use items::*;

/// Longest accepted key, in bytes (Mooncake's limit). Keys are any UTF-8 of 1 to this many
/// bytes, NUL bytes included.
pub const MAX_KEY_LEN: usize = 1 << 20;
/// Most keys in one batch message.
pub const MAX_BATCH: usize = 4096;
/// Most encoded key bytes (see [`key_cost`]) in one batch message: half of [`MAX_FRAME`], which
/// leaves the rest of the frame for the other fields. One key of [`MAX_KEY_LEN`] bytes always
/// fits alone.
pub const MAX_BATCH_KEY_BYTES: usize = (MAX_FRAME as usize) / 2;
const _: () = assert!(MAX_KEY_LEN + KEY_OVERHEAD <= MAX_BATCH_KEY_BYTES);

/// What a batch item adds to a message beyond its key's bytes, at most: the key's length prefix
/// (a varint, 3 bytes up to [`MAX_KEY_LEN`]) and a `u64` beside it (a varint, up to 10 bytes).
const KEY_OVERHEAD: usize = 16;
/// Most replicas per object.
pub const MAX_REPLICAS: u32 = 8;
/// Longest segment name / endpoint.
pub const MAX_NAME_LEN: usize = 512;
/// Longest regex pattern.
pub const MAX_PATTERN_LEN: usize = 4096;
/// The longest a master works on one stretch of a mass removal before it answers (the client
/// then asks for the next one), far below any client's reply deadline.
pub const REMOVE_STRETCH_MS: u64 = 200;
/// Most preferred segments in one config.
pub const MAX_PREFERRED: usize = 64;
/// A read hold outlives its lease only while the reader's heartbeats arrive at most this far
/// apart (they are sent every second).
pub const HOLD_PING_GRACE_MS: u64 = 3_000;

pub mod code;

/// A client's request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Request {
    /// Mount (or re-mount) a segment owned by `client_id`.
    Mount {
        /// Owner.
        client_id: u64,
        /// Segment name (the owner's engine name).
        name: String,
        /// Base address.
        base: u64,
        /// Size in bytes.
        size: u64,
    },
    /// Unmount a segment; its objects' replicas there are dropped.
    Unmount {
        /// Owner.
        client_id: u64,
        /// Segment name.
        name: String,
    },
    /// Liveness heartbeat.
    Ping {
        /// Sender.
        client_id: u64,
    },
    /// First phase of put/upsert: allocate buffers.
    PutStart {
        /// Writer.
        client_id: u64,
        /// Create-or-replace (`true`) or create-only.
        upsert: bool,
        /// Keys and sizes.
        items: Vec<PutItem>,
        /// Placement and pinning.
        config: WriteConfig,
    },
    /// Second phase: the bytes are in place, publish.
    PutEnd {
        /// Writer.
        client_id: u64,
        /// Writes to finish.
        items: Vec<KeyVersion>,
    },
    /// Second phase after a failed transfer: drop the write.
    PutRevoke {
        /// Writer.
        client_id: u64,
        /// Writes to drop.
        items: Vec<KeyVersion>,
    },
    /// Replica lists for reading; grants a lease and, per key found, a read hold of this client
    /// on the version (its buffers are not reused while the hold lasts).
    Get {
        /// Reader (its heartbeats keep its holds alive past the lease).
        client_id: u64,
        /// Keys.
        keys: Vec<String>,
    },
    /// One-way: the reads of these versions finished (this client's holds on them end).
    ReadDone {
        /// Reader.
        client_id: u64,
        /// Versions read.
        items: Vec<KeyVersion>,
    },
    /// One-way: transfers to or from these segments just failed. The master places nothing new on
    /// them until their owner's next heartbeat.
    ReportFailed {
        /// Reporter.
        client_id: u64,
        /// Segment names.
        segments: Vec<String>,
    },
    /// Existence (1/0 per key); grants a lease.
    Exist {
        /// Keys.
        keys: Vec<String>,
    },
    /// Remove keys.
    Remove {
        /// Keys.
        keys: Vec<String>,
        /// Ignore leases.
        force: bool,
    },
    /// Remove every key matching a regex (RE2-like syntax of the `regex` crate).
    RemoveByRegex {
        /// Pattern.
        pattern: String,
        /// Ignore leases.
        force: bool,
        /// Work in stretches: `Some(cursor)` (0 to begin) makes the master remove for at most
        /// [`REMOVE_STRETCH_MS`] and answer [`Reply::Removed`] with where to go on; `None`
        /// (what clients before stretches send) removes everything before answering
        /// [`Reply::Count`].
        #[serde(default)]
        from: Option<u64>,
    },
    /// Remove every key.
    RemoveAll {
        /// Ignore leases.
        force: bool,
        /// As for [`Request::RemoveByRegex`].
        #[serde(default)]
        from: Option<u64>,
    },
    /// Mount a disk tier (`disk://` name), or take over one a restarted owner held before, with
    /// the records it holds, in runs of at most [`MAX_BATCH`]: `first` on the first run, `last`
    /// on the last. Answered with [`Reply::Codes`], one per record: 0 kept, otherwise the
    /// owner deletes it (removed or replaced while it was away, or another value won).
    MountDisk {
        /// Owner.
        client_id: u64,
        /// Tier name.
        name: String,
        /// Quota in bytes.
        capacity: u64,
        /// First run.
        first: bool,
        /// Last run.
        last: bool,
        /// Records.
        records: Vec<DiskRecord>,
    },
    /// A disk tier's owner reports finished jobs and records lost under its quota, and asks for
    /// at most `max` new jobs; answered with [`Reply::OffloadWork`].
    OffloadPoll {
        /// Owner.
        client_id: u64,
        /// Tier name.
        name: String,
        /// Jobs finished.
        done: Vec<OffloadDone>,
        /// Records deleted under the quota.
        lost: Vec<DiskRecord>,
        /// Bytes the tier's files take.
        used: u64,
        /// Most jobs wanted.
        max: u32,
    },
    /// A reader that cannot read these keys' disk replicas (another host's tier) asks for
    /// them in memory now: each disk-only key gets a promotion at once. [`Reply::Codes`]: 0
    /// promoted or already in memory, `OBJECT_NOT_FOUND`, or `NO_AVAILABLE_HANDLE` (no room).
    Promote {
        /// Reader.
        client_id: u64,
        /// Keys.
        keys: Vec<String>,
    },
    /// Mooncake's `BatchReplicaClear`: of each key whose lease has expired, the replicas on
    /// `segment` (the object goes when none is left), or with an empty `segment` the whole
    /// object when it has no write in flight. Answered with [`Reply::Keys`]: the keys cleared.
    ReplicaClear {
        /// Requester.
        client_id: u64,
        /// Keys.
        keys: Vec<String>,
        /// Segment name, or empty for every replica.
        segment: String,
    },
    /// Queue a task that copies `key` to each of `targets` ([`Reply::TaskId`]).
    CreateCopyTask {
        /// Requester.
        client_id: u64,
        /// Key.
        key: String,
        /// Target segment names.
        targets: Vec<String>,
    },
    /// Queue a task that moves `key`'s replica on `source` to `target` ([`Reply::TaskId`]).
    CreateMoveTask {
        /// Requester.
        client_id: u64,
        /// Key.
        key: String,
        /// Source segment name.
        source: String,
        /// Target segment name.
        target: String,
    },
    /// A task's state ([`Reply::Task`], or `TASK_NOT_FOUND`).
    QueryTask {
        /// Id.
        id: TaskId,
    },
    /// A client asks for at most `max` of the tasks queued for it ([`Reply::Tasks`]); they are
    /// processing from then on.
    FetchTasks {
        /// Client.
        client_id: u64,
        /// Most tasks wanted.
        max: u32,
    },
    /// A task's client reserves new replicas of `key` on `targets` and holds the complete
    /// version for reading from its replica on `source` ([`Reply::ReplicaAdd`]).
    AddReplicaStart {
        /// Client.
        client_id: u64,
        /// Key.
        key: String,
        /// Source segment name.
        source: String,
        /// Target segment names.
        targets: Vec<String>,
    },
    /// The new replicas of an `AddReplicaStart` are written (`ok`) or not: they join the
    /// object (then the replica on `drop_source` leaves it, when another is left) or are
    /// freed. Its read hold ends either way.
    AddReplicaEnd {
        /// Client.
        client_id: u64,
        /// Key.
        key: String,
        /// `ReplicaAdd::version`.
        version: u64,
        /// `ReplicaAdd::ticket`.
        ticket: u64,
        /// The bytes are in place.
        ok: bool,
        /// A move's source segment.
        drop_source: Option<String>,
    },
    /// A task's client reports it finished.
    TaskDone {
        /// Client.
        client_id: u64,
        /// Id.
        id: TaskId,
        /// Success.
        ok: bool,
        /// What happened.
        message: String,
    },
}

/// The master's reply.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Reply {
    /// Done.
    Ok,
    /// The whole request failed.
    Error {
        /// Negative code.
        code: i32,
        /// Detail.
        message: String,
    },
    /// Heartbeat answer: `remount` when the master does not know this client's segments.
    Pong {
        /// Re-mount needed.
        remount: bool,
    },
    /// PutStart results, one per item.
    Started {
        /// Results.
        results: Vec<StartResult>,
    },
    /// One code per key.
    Codes {
        /// Codes.
        codes: Vec<i32>,
    },
    /// Get results, one per key. A read that finishes within `lease_ms` of the request is
    /// valid; one that finishes later, within `hold_ms`, is valid when this client's heartbeats
    /// reached the master throughout (each within [`HOLD_PING_GRACE_MS`] of the one before).
    Replicas {
        /// Lease granted (the hold lasts at least this long whatever the heartbeats).
        lease_ms: u64,
        /// The longest a read hold lasts while the client keeps its heartbeats.
        hold_ms: u64,
        /// Results.
        results: Vec<GetResult>,
    },
    /// A count (removed objects).
    Count {
        /// Count.
        count: i64,
    },
    /// One stretch of a removal: objects removed in it, and the cursor to send for the next
    /// stretch (`None`: the removal is done).
    Removed {
        /// Objects removed in this stretch.
        count: i64,
        /// Where the next stretch starts.
        next: Option<u64>,
    },
    /// Work for a disk tier's owner: objects to write, and records to end (their keys were
    /// removed or replaced).
    OffloadWork {
        /// Objects to write.
        jobs: Vec<OffloadJob>,
        /// Locators of records to end.
        drops: Vec<u64>,
    },
    /// Keys (those `ReplicaClear` cleared).
    Keys {
        /// Keys.
        keys: Vec<String>,
    },
    /// A task was queued.
    TaskId {
        /// Its id.
        id: TaskId,
    },
    /// A task's state.
    Task {
        /// State.
        info: TaskInfo,
    },
    /// Tasks for the client that asked.
    Tasks {
        /// Tasks.
        tasks: Vec<TaskJob>,
    },
    /// `AddReplicaStart`'s answer.
    ReplicaAdd {
        /// Space and source.
        add: ReplicaAdd,
    },
}

/// What `k` adds to a batch message, at most: its bytes and [`KEY_OVERHEAD`].
pub fn key_cost(k: &str) -> usize {
    k.len() + KEY_OVERHEAD
}

/// Splits `items` into consecutive runs that each fit one batch message: at most [`MAX_BATCH`]
/// items whose keys (`key(item)`) cost at most [`MAX_BATCH_KEY_BYTES`] together. Every run
/// holds at least one item.
pub fn key_chunks<'a, T>(
    items: &'a [T],
    key: impl Fn(&'a T) -> &'a str,
) -> impl Iterator<Item = &'a [T]> {
    let mut rest = items;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let mut n = 0;
        let mut bytes = 0;
        for it in rest.iter().take(MAX_BATCH) {
            let c = key_cost(key(it));
            if n > 0 && bytes + c > MAX_BATCH_KEY_BYTES {
                break;
            }
            bytes += c;
            n += 1;
        }
        let (run, tail) = rest.split_at(n);
        rest = tail;
        Some(run)
    })
}

impl Request {
    /// Checks every bound; the master answers `INVALID_PARAMS` with the message otherwise.
    pub fn validate(&self) -> Result<(), String> {
        match self {
            Request::Mount {
                name, size, base, ..
            } => {
                check_name(name)?;
                if *size == 0 || base.checked_add(*size).is_none() {
                    return Err(format!("segment {base:#x}+{size} is empty or wraps"));
                }
                Ok(())
            }
            Request::Unmount { name, .. } => check_name(name),
            Request::Ping { .. } => Ok(()),
            Request::PutStart { items, config, .. } => {
                check_batch(items.len())?;
                for i in items {
                    check_key(&i.key)?;
                }
                if config.replica_num > MAX_REPLICAS {
                    return Err(format!(
                        "replica_num {} exceeds {MAX_REPLICAS}",
                        config.replica_num
                    ));
                }
                if config.preferred_segments.len() > MAX_PREFERRED {
                    return Err(format!("more than {MAX_PREFERRED} preferred segments"));
                }
                config
                    .preferred_segments
                    .iter()
                    .try_for_each(|s| check_name(s))?;
                if config.local_segment.len() > MAX_NAME_LEN {
                    return Err("local segment name too long".into());
                }
                Ok(())
            }
            Request::PutEnd { items, .. }
            | Request::PutRevoke { items, .. }
            | Request::ReadDone { items, .. } => check_versions(items),
            Request::ReportFailed { segments, .. } => {
                check_batch(segments.len())?;
                segments.iter().try_for_each(|n| check_name(n))
            }
            Request::Get { keys, .. } | Request::Exist { keys } | Request::Remove { keys, .. } => {
                check_keys(keys)
            }
            Request::RemoveByRegex { pattern, .. } => {
                if pattern.len() > MAX_PATTERN_LEN {
                    return Err(format!("pattern longer than {MAX_PATTERN_LEN} bytes"));
                }
                Ok(())
            }
            Request::RemoveAll { .. } => Ok(()),
            Request::MountDisk { name, records, .. } => {
                check_name(name)?;
                check_batch(records.len())?;
                records.iter().try_for_each(|r| check_key(&r.key))
            }
            Request::Promote { keys, .. } => check_keys(keys),
            Request::ReplicaClear { keys, segment, .. } => {
                check_keys(keys)?;
                check_segment_name(segment)
            }
            Request::CreateCopyTask { key, targets, .. }
            | Request::AddReplicaStart { key, targets, .. } => {
                check_key(key)?;
                if targets.len() > MAX_REPLICAS as usize {
                    return Err(format!("more than {MAX_REPLICAS} targets"));
                }
                targets.iter().try_for_each(|t| check_segment_name(t))?;
                match self {
                    Request::AddReplicaStart { source, .. } => check_segment_name(source),
                    _ => Ok(()),
                }
            }
            Request::CreateMoveTask {
                key,
                source,
                target,
                ..
            } => {
                check_key(key)?;
                check_segment_name(source)?;
                check_segment_name(target)
            }
            Request::AddReplicaEnd {
                key, drop_source, ..
            } => {
                check_key(key)?;
                drop_source.as_deref().map_or(Ok(()), check_segment_name)
            }
            Request::TaskDone { message, .. } => {
                if message.len() > MAX_PATTERN_LEN {
                    return Err(format!("message longer than {MAX_PATTERN_LEN} bytes"));
                }
                Ok(())
            }
            Request::QueryTask { .. } | Request::FetchTasks { .. } => Ok(()),
            Request::OffloadPoll {
                name, done, lost, ..
            } => {
                check_name(name)?;
                check_batch(done.len())?;
                check_batch(lost.len())?;
                done.iter().try_for_each(|d| check_key(&d.key))?;
                lost.iter().try_for_each(|r| check_key(&r.key))
            }
        }
    }

    /// Short name for metrics and logs.
    pub fn name(&self) -> &'static str {
        match self {
            Request::Mount { .. } => "mount",
            Request::Unmount { .. } => "unmount",
            Request::Ping { .. } => "ping",
            Request::PutStart { upsert: false, .. } => "put_start",
            Request::PutStart { upsert: true, .. } => "upsert_start",
            Request::PutEnd { .. } => "put_end",
            Request::PutRevoke { .. } => "put_revoke",
            Request::Get { .. } => "get",
            Request::ReadDone { .. } => "read_done",
            Request::ReportFailed { .. } => "report_failed",
            Request::Exist { .. } => "exist",
            Request::Remove { .. } => "remove",
            Request::RemoveByRegex { .. } => "remove_by_regex",
            Request::RemoveAll { .. } => "remove_all",
            Request::MountDisk { .. } => "mount_disk",
            Request::OffloadPoll { .. } => "offload_poll",
            Request::Promote { .. } => "promote",
            Request::ReplicaClear { .. } => "replica_clear",
            Request::CreateCopyTask { .. } => "create_copy_task",
            Request::CreateMoveTask { .. } => "create_move_task",
            Request::QueryTask { .. } => "query_task",
            Request::FetchTasks { .. } => "fetch_tasks",
            Request::AddReplicaStart { .. } => "add_replica_start",
            Request::AddReplicaEnd { .. } => "add_replica_end",
            Request::TaskDone { .. } => "task_done",
        }
    }
}

#[cfg(test)]
mod tests;
