//! The items master messages carry: placement settings, keys with sizes or versions, replica
//! buffers, per-key results, disk-tier records and jobs, replica tasks.

use serde::{Deserialize, Serialize};

/// Where a write goes and how it is kept (Mooncake's `ReplicateConfig`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WriteConfig {
    /// Replicas wanted, each on a distinct segment (best effort; at least one).
    pub replica_num: u32,
    /// Never evicted; fixed when the object is created.
    pub hard_pin: bool,
    /// Evicted only after unpinned objects, until the soft-pin TTL runs out.
    pub soft_pin: bool,
    /// Segment names to try first, in order.
    pub preferred_segments: Vec<String>,
    /// The requester's own segment name (for `local_first`), empty when it has none.
    pub local_segment: String,
}

/// One key and its value size.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PutItem {
    /// Key.
    pub key: String,
    /// Value size in bytes (> 0).
    pub size: u64,
}

/// A key and the write or read version it refers to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyVersion {
    /// Key.
    pub key: String,
    /// Version from a PutStart or Get reply.
    pub version: u64,
}

/// One replica's buffer: the segment's TE endpoint and an absolute address there.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplicaDesc {
    /// Segment name (the owning client's engine name).
    pub endpoint: String,
    /// Absolute address in the owner's memory.
    pub addr: u64,
    /// Bytes (the object size).
    pub len: u64,
}

/// Per-key answer to PutStart.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StartResult {
    /// 0, or a negative code (then the rest is empty).
    pub code: i32,
    /// Version to pass to PutEnd/PutRevoke.
    pub version: u64,
    /// Buffers to write.
    pub replicas: Vec<ReplicaDesc>,
}

/// Per-key answer to Get.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GetResult {
    /// 0, or a negative code (then the rest is empty).
    pub code: i32,
    /// Object size.
    pub size: u64,
    /// Version to pass to ReadDone.
    pub version: u64,
    /// Complete replicas.
    pub replicas: Vec<ReplicaDesc>,
}

impl GetResult {
    /// A key that cannot be read (`code`), with nothing else.
    pub fn miss(code: i32) -> GetResult {
        GetResult {
            code,
            size: 0,
            version: 0,
            replicas: Vec::new(),
        }
    }
}

/// One record of a disk tier, as its owner reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DiskRecord {
    /// Key.
    pub key: String,
    /// Where the record lies (the disk replica's address).
    pub loc: u64,
    /// Value bytes.
    pub size: u64,
}

/// An object the master asks a disk tier's owner to write from its memory segment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OffloadJob {
    /// Key.
    pub key: String,
    /// The complete version to write (the owner holds it for reading until it reports).
    pub version: u64,
    /// Its bytes in the owner's segment.
    pub addr: u64,
    /// Bytes.
    pub len: u64,
    /// Written because eviction chose it: once on disk its memory replica is dropped.
    pub evict: bool,
    /// Promotion on hit: read record `loc` of the owner's tier into `addr` (a buffer the master
    /// allocated in the owner's memory segment) instead of writing one.
    pub promote: Option<u64>,
}

/// What became of an [`OffloadJob`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OffloadDone {
    /// Key.
    pub key: String,
    /// The job's version.
    pub version: u64,
    /// The record written, or `None` when the write failed.
    pub loc: Option<u64>,
    /// The job's `evict`.
    pub evict: bool,
    /// The job was a promotion (`loc` is then `Some` when the bytes are in place).
    pub promote: bool,
}

/// A replica task's id: Mooncake's UUID as its two 64-bit halves.
pub type TaskId = (u64, u64);

/// A replica task's state, as `QueryTask` reports it (Mooncake's `QueryTaskResponse`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskInfo {
    /// Id.
    pub id: TaskId,
    /// 0 copy, 1 move (Mooncake's `TaskType`).
    pub kind: u8,
    /// 0 pending, 1 processing, 2 failed, 3 success (Mooncake's `TaskStatus`).
    pub status: u8,
    /// Created, in milliseconds since the Unix epoch.
    pub created_ms: u64,
    /// Last changed, in milliseconds since the Unix epoch.
    pub updated_ms: u64,
    /// The client that runs it.
    pub client: u64,
    /// Why it failed, or what it did.
    pub message: String,
}

/// A replica task handed to the client that runs it (the owner of the source segment).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskJob {
    /// Id (to report with `TaskDone`).
    pub id: TaskId,
    /// 0 copy, 1 move.
    pub kind: u8,
    /// Key.
    pub key: String,
    /// The segment whose replica is read.
    pub source: String,
    /// Segments that get a new replica (a move: one, and the source's replica goes after).
    pub targets: Vec<String>,
}

/// Space for new replicas of a complete object, and where to read it from
/// (`AddReplicaStart`'s answer).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplicaAdd {
    /// The complete version read (held for this client until `AddReplicaEnd`).
    pub version: u64,
    /// The new buffers' reservation (0: none, every target holds a replica already).
    pub ticket: u64,
    /// Object size.
    pub size: u64,
    /// The source replica.
    pub source: ReplicaDesc,
    /// New buffers to write, one per target that has no replica yet.
    pub targets: Vec<ReplicaDesc>,
}
