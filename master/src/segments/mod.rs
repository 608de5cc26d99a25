//! Mounted segments, one offset allocator each, and replica placement.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use tidewire::store::alloc::OffsetAllocator;
use tidewire::store::proto::{ReplicaDesc, WriteConfig, code};
use tidewire::sync::{LockClean, RwLockClean};
use tidewire::tw_log;

mod disks;
mod placement;

pub use disks::{DISK_BIT, DiskMount, DiskState};

/// Most segments mounted at once (a bound on what clients can make the master hold).
pub const MAX_SEGMENTS: usize = 16384;

/// How segments are chosen for new replicas (`--allocation_strategy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Strategy {
    /// A random segment with room, chosen in proportion to its free bytes (Mooncake's default
    /// picks uniformly).
    Random,
    /// The segment with the largest free fraction first.
    FreeRatioFirst,
    /// The requester's own segment first, then random.
    LocalFirst,
}

impl Strategy {
    /// Parses a flag value.
    pub fn parse(s: &str) -> Result<Strategy, String> {
        match s {
            "random" => Ok(Strategy::Random),
            "free_ratio_first" => Ok(Strategy::FreeRatioFirst),
            "local_first" => Ok(Strategy::LocalFirst),
            other => Err(format!(
                "allocation_strategy {other:?} is not supported (random | free_ratio_first | local_first)"
            )),
        }
    }
}

/// One mounted segment.
#[derive(Debug)]
pub struct Segment {
    /// Unique per mount (a re-mount gets a new id, so stale frees cannot hit it).
    pub id: u32,
    /// Segment name (owner's engine name).
    pub name: Arc<str>,
    /// Owning client.
    pub client_id: u64,
    /// Base address in the owner.
    pub base: u64,
    /// Bytes.
    pub size: u64,
    alloc: Mutex<OffsetAllocator>,
    /// Transfers with it failed since its owner's last heartbeat: no new placements.
    unhealthy: AtomicBool,
    /// Its owner missed its heartbeats: no new placements until it pings again.
    suspended: AtomicBool,
    /// A disk tier (its replicas' offsets are record locators; nothing is placed on it).
    pub disk: Option<DiskState>,
}

impl Segment {
    /// Whether new replicas may be placed here.
    fn placeable(&self) -> bool {
        self.disk.is_none()
            && !self.unhealthy.load(Ordering::Relaxed)
            && !self.suspended.load(Ordering::Relaxed)
    }
}

/// Where one replica's bytes live: a segment (by mount id) and an offset in it. Sixteen bytes,
/// copied freely: the length is the object's size, and the endpoint and absolute address come
/// from the segment (see [`Segments::descs`]), so an object does not carry them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Replica {
    /// Segment mount id.
    pub seg: u32,
    /// Offset inside the segment.
    pub offset: u64,
}

/// Buffers just allocated for a write: where they are, and their wire form.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placed {
    /// The replicas (at least one).
    pub replicas: Vec<Replica>,
    /// Their descriptors, in the same order.
    pub descs: Vec<ReplicaDesc>,
}

impl Segment {
    fn free_one(&self, offset: u64, len: u64) {
        let ok = self.alloc.lock_clean().free(offset, len);
        if !ok {
            self.refused_free(offset, len);
        }
    }

    fn refused_free(&self, offset: u64, len: u64) {
        tw_log!(
            tidewire::log::Level::Error,
            "master: refused a bad free of {offset}+{len} in {}",
            self.name
        );
    }
}

/// The engine endpoint behind a segment name: a segment a client mounted at run time is named
/// `<endpoint>#<id>` (see the client's `segments.rs`); a disk tier's name is its own.
pub fn endpoint_of(name: &str) -> &str {
    match name.starts_with(tidewire::store::disk::TIER_PREFIX) {
        true => name,
        false => name.split('#').next().unwrap_or(name),
    }
}

/// A read view of the segment table (see [`Segments::with_view`]).
pub struct SegView<'a>(&'a Table);

impl SegView<'_> {
    /// The wire form of one replica of `len` bytes; `None` when its segment is gone.
    pub fn desc(&self, r: &Replica, len: u64) -> Option<ReplicaDesc> {
        self.0.desc(r, len)
    }
}

#[derive(Default)]
struct Table {
    by_id: HashMap<u32, Arc<Segment>>,
    by_name: HashMap<Arc<str>, u32>,
}

/// Every mounted segment.
#[derive(Default)]
pub struct Segments {
    table: RwLock<Table>,
    next_id: AtomicU64,
    rng: AtomicU64,
    /// Unhealthy or suspended flags set (so a heartbeat of a client with none skips the scan).
    flagged: AtomicU64,
}

impl Table {
    fn desc(&self, r: &Replica, len: u64) -> Option<ReplicaDesc> {
        let s = self.by_id.get(&r.seg)?;
        if s.disk.as_ref().is_some_and(|d| d.dormant()) {
            return None;
        }
        Some(s).map(|s| ReplicaDesc {
            endpoint: endpoint_of(&s.name).to_string(),
            addr: s.base + r.offset,
            len,
        })
    }
}

impl Segments {
    /// Mounts a segment. Mounting the same name again by the same owner with the same range is a
    /// no-op (re-mount); another owner's name is refused.
    pub fn mount(&self, client_id: u64, name: &str, base: u64, size: u64) -> Result<u32, i32> {
        let mut t = self.table.write_clean();
        if let Some(id) = t.by_name.get(name) {
            let s = &t.by_id[id];
            if s.client_id == client_id && s.base == base && s.size == size {
                return Ok(s.id);
            }
            return Err(code::SEGMENT_ALREADY_EXISTS);
        }
        if t.by_id.len() >= MAX_SEGMENTS {
            return Err(code::NO_AVAILABLE_HANDLE);
        }
        // Ids are never reused (a stale free cannot hit a later mount); 32 bits keep replicas
        // small, and four billion mounts outlast any master.
        let Ok(id) = u32::try_from(self.next_id.fetch_add(1, Ordering::Relaxed) + 1) else {
            return Err(code::NO_AVAILABLE_HANDLE);
        };
        let name: Arc<str> = name.into();
        let seg = Arc::new(Segment {
            id,
            name: name.clone(),
            client_id,
            base,
            size,
            alloc: Mutex::new(OffsetAllocator::new(size)),
            unhealthy: AtomicBool::new(false),
            suspended: AtomicBool::new(false),
            disk: None,
        });
        t.by_id.insert(id, seg);
        t.by_name.insert(name, id);
        Ok(id)
    }

    /// Removes a segment from the table (its replicas must be dropped by the caller).
    pub fn unmount(&self, id: u32) -> Option<Arc<Segment>> {
        let mut t = self.table.write_clean();
        let s = t.by_id.remove(&id)?;
        t.by_name.remove(&s.name);
        self.clear_flags(&s);
        Some(s)
    }

    /// Id of a mounted name.
    pub fn id_of(&self, name: &str) -> Option<u32> {
        self.table.read_clean().by_name.get(name).copied()
    }

    /// Marks the segment `name` unhealthy (until its owner's next heartbeat); returns whether it
    /// was healthy before.
    pub fn mark_unhealthy(&self, name: &str) -> bool {
        let t = self.table.read_clean();
        let newly = t
            .by_name
            .get(name)
            .is_some_and(|id| !t.by_id[id].unhealthy.swap(true, Ordering::Relaxed));
        if newly {
            self.flagged.fetch_add(1, Ordering::Relaxed);
        }
        newly
    }

    /// Suspends a silent client's segments; returns whether any was not suspended before.
    pub fn suspend_client(&self, client_id: u64) -> bool {
        let t = self.table.read_clean();
        let mut newly = 0;
        for s in t.by_id.values().filter(|s| s.client_id == client_id) {
            if !s.suspended.swap(true, Ordering::Relaxed) {
                newly += 1;
            }
        }
        self.flagged.fetch_add(newly, Ordering::Relaxed);
        newly > 0
    }

    /// The client was heard from: its segments are healthy and not suspended.
    pub fn resume_client(&self, client_id: u64) {
        if self.flagged.load(Ordering::Relaxed) == 0 {
            return;
        }
        let t = self.table.read_clean();
        for s in t.by_id.values().filter(|s| s.client_id == client_id) {
            self.clear_flags(s);
        }
    }

    fn clear_flags(&self, s: &Segment) {
        let cleared = s.unhealthy.swap(false, Ordering::Relaxed) as u64
            + s.suspended.swap(false, Ordering::Relaxed) as u64;
        self.flagged.fetch_sub(cleared, Ordering::Relaxed);
    }

    /// Whether segment `id`'s owner is suspended (missed its heartbeats).
    pub fn suspended(&self, id: u32) -> bool {
        let t = self.table.read_clean();
        t.by_id
            .get(&id)
            .is_some_and(|s| s.suspended.load(Ordering::Relaxed))
    }

    /// Ids of a client's segments.
    pub fn of_client(&self, client_id: u64) -> Vec<u32> {
        let t = self.table.read_clean();
        t.by_id
            .values()
            .filter(|s| s.client_id == client_id)
            .map(|s| s.id)
            .collect()
    }

    /// (segments, used bytes, capacity).
    pub fn usage(&self) -> (usize, u64, u64) {
        let t = self.table.read_clean();
        let mut used = 0;
        let mut cap = 0;
        for s in t.by_id.values().filter(|s| s.disk.is_none()) {
            let a = s.alloc.lock_clean();
            used += a.used();
            cap += a.size();
        }
        (t.by_id.len(), used, cap)
    }

    /// Every mounted segment: (client, name, base, size).
    pub fn list(&self) -> Vec<(u64, String, u64, u64)> {
        let t = self.table.read_clean();
        t.by_id
            .values()
            .map(|s| (s.client_id, s.name.to_string(), s.base, s.size))
            .collect()
    }

    /// Takes `[offset, offset+len)` of the segment `name` for a rebuilt replica.
    pub fn reserve(&self, name: &str, offset: u64, len: u64) -> Option<Replica> {
        let t = self.table.read_clean();
        let s = &t.by_id[t.by_name.get(name)?];
        if !s.alloc.lock_clean().reserve(offset, len) {
            return None;
        }
        Some(Replica { seg: s.id, offset })
    }

    /// Whether the mounted segment `name` takes new replicas now (`None`: not mounted).
    pub fn takes_replicas(&self, name: &str) -> Option<bool> {
        let t = self.table.read_clean();
        t.by_name.get(name).map(|id| t.by_id[id].placeable())
    }

    /// The owning client of segment `id`.
    pub fn client_of(&self, id: u32) -> Option<u64> {
        self.table.read_clean().by_id.get(&id).map(|s| s.client_id)
    }

    /// `len` bytes on the segment `name` for a new replica: the replica and its wire form.
    /// `SEGMENT_NOT_FOUND`, `UNAVAILABLE_IN_CURRENT_STATUS` (it takes no new replicas) or
    /// `NO_AVAILABLE_HANDLE` (no room).
    pub fn alloc_on(&self, name: &str, len: u64) -> Result<(Replica, ReplicaDesc), i32> {
        let t = self.table.read_clean();
        let s = t
            .by_name
            .get(name)
            .map(|id| &t.by_id[id])
            .ok_or(code::SEGMENT_NOT_FOUND)?;
        if !s.placeable() {
            return Err(code::UNAVAILABLE_IN_CURRENT_STATUS);
        }
        let offset = s
            .alloc
            .lock_clean()
            .alloc(len)
            .ok_or(code::NO_AVAILABLE_HANDLE)?;
        let desc = ReplicaDesc {
            endpoint: s.name.to_string(),
            addr: s.base + offset,
            len,
        };
        Ok((Replica { seg: s.id, offset }, desc))
    }

    /// Name of a mounted segment.
    pub fn name_of(&self, id: u32) -> Option<String> {
        let t = self.table.read_clean();
        t.by_id.get(&id).map(|s| s.name.to_string())
    }

    /// Returns a replica's buffer of `len` bytes to its segment (ignored when the segment is
    /// gone).
    pub fn free(&self, r: &Replica, len: u64) {
        let seg = self.table.read_clean().by_id.get(&r.seg).cloned();
        if let Some(s) = seg {
            match &s.disk {
                Some(d) => d.dropped(r.offset, len),
                None => s.free_one(r.offset, len),
            }
        }
    }

    /// Returns many buffers at once (`(replica, len)`): the table is read once, and each
    /// segment's allocator is locked once per run of buffers in the same segment.
    pub fn free_many(&self, bufs: &[(Replica, u64)]) {
        if bufs.is_empty() {
            return;
        }
        let t = self.table.read_clean();
        let mut i = 0;
        while i < bufs.len() {
            let seg = bufs[i].0.seg;
            let run = bufs[i..].iter().take_while(|(r, _)| r.seg == seg).count();
            if let Some(d) = t.by_id.get(&seg).and_then(|s| s.disk.as_ref()) {
                bufs[i..i + run]
                    .iter()
                    .for_each(|(r, len)| d.dropped(r.offset, *len));
            } else if let Some(s) = t.by_id.get(&seg) {
                let mut a = s.alloc.lock_clean();
                for (r, len) in &bufs[i..i + run] {
                    if !a.free(r.offset, *len) {
                        s.refused_free(r.offset, *len);
                    }
                }
            }
            i += run;
        }
    }

    /// The wire form of replicas of `len` bytes (those whose segment is gone are left out).
    pub fn descs(&self, rs: &[Replica], len: u64) -> Vec<ReplicaDesc> {
        let t = self.table.read_clean();
        rs.iter().filter_map(|r| t.desc(r, len)).collect()
    }

    /// Runs `f` with a read view of the segment table, for resolving many replicas at once.
    pub fn with_view<R>(&self, f: impl FnOnce(&SegView<'_>) -> R) -> R {
        let t = self.table.read_clean();
        f(&SegView(&t))
    }

    /// Segment names and offsets of replicas, as the journal records them (those whose
    /// segment is gone are left out).
    pub fn named(&self, rs: &[Replica]) -> Vec<(Arc<str>, u64)> {
        let t = self.table.read_clean();
        rs.iter()
            .filter(|r| !r.on_disk())
            .filter_map(|r| t.by_id.get(&r.seg).map(|s| (s.name.clone(), r.offset)))
            .collect()
    }
}

/// One mounted segment as an admin listing shows it (see [`Segments::details`]).
#[derive(Debug, Clone)]
pub struct SegmentInfo {
    /// Mount id.
    pub id: u64,
    /// Name (the owner's engine endpoint).
    pub name: String,
    /// Owning client.
    pub client_id: u64,
    /// Base address in the owner.
    pub base: u64,
    /// Bytes mounted.
    pub size: u64,
    /// Bytes allocated.
    pub used: u64,
    /// Bytes the allocator manages.
    pub capacity: u64,
    /// Transfers with it failed since its owner's last heartbeat.
    pub unhealthy: bool,
    /// Its owner missed its heartbeats.
    pub suspended: bool,
    /// A disk tier (`used` and `capacity` are its bytes on disk and its quota).
    pub disk: bool,
}

impl Segment {
    fn info(&self) -> SegmentInfo {
        let (used, capacity) = match &self.disk {
            Some(d) => (d.used(), self.size),
            None => {
                let a = self.alloc.lock_clean();
                (a.used(), a.size())
            }
        };
        SegmentInfo {
            id: self.id as u64,
            name: self.name.to_string(),
            client_id: self.client_id,
            base: self.base,
            size: self.size,
            used,
            capacity,
            unhealthy: self.unhealthy.load(Ordering::Relaxed),
            suspended: self.suspended.load(Ordering::Relaxed),
            disk: self.disk.is_some(),
        }
    }
}

impl Segments {
    /// Read-only admin listing: every mounted segment (at most [`MAX_SEGMENTS`]), sorted by
    /// name. The table lock is held only to copy the segment handles out.
    pub fn details(&self) -> Vec<SegmentInfo> {
        let segs: Vec<Arc<Segment>> = self.table.read_clean().by_id.values().cloned().collect();
        let mut out: Vec<SegmentInfo> = segs.iter().map(|s| s.info()).collect();
        out.sort_by(|a, b| a.name.cmp(&b.name));
        out
    }

    /// Read-only admin query of the segment `name`.
    pub fn detail(&self, name: &str) -> Option<SegmentInfo> {
        let seg = {
            let t = self.table.read_clean();
            t.by_id.get(t.by_name.get(name)?).cloned()
        };
        seg.map(|s| s.info())
    }
}
