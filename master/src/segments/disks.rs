//! Disk tiers in the segment table. A tier is a segment whose mount id has [`DISK_BIT`] set and
//! whose replicas' offsets are its owner's record locators: nothing is placed on it, its use is
//! the bytes of the replicas it holds, and a replica freed there (its key removed, replaced or
//! evicted) becomes a drop its owner collects with its next poll and tombstones. A tier whose
//! owner went silent is dormant: its replicas are kept but not handed to readers, until the
//! owner (restarted, with a new client id and maybe a new engine name) takes it over with its
//! records, or until the dormancy ends and the tier is unmounted.

use super::*;
use std::time::{Duration, Instant};
use tidewire::store::disk::TierName;

/// Set in the mount id of every disk tier.
pub const DISK_BIT: u32 = 1 << 31;

impl Replica {
    /// Whether this replica is a record of a disk tier.
    pub fn on_disk(&self) -> bool {
        self.seg & DISK_BIT != 0
    }
}

/// What a disk tier adds to a segment.
#[derive(Debug, Default)]
pub struct DiskState {
    /// Bytes of the replicas it holds.
    used: AtomicU64,
    /// Records whose replicas were freed, for the owner to end.
    drops: Mutex<Vec<u64>>,
    /// Since when the owner has been silent (`None`: live).
    dormant_since: Mutex<Option<Instant>>,
}

impl DiskState {
    /// Bytes of the replicas it holds.
    pub fn used(&self) -> u64 {
        self.used.load(Ordering::Relaxed)
    }

    /// A replica was freed: its record is to be ended.
    pub(super) fn dropped(&self, loc: u64, len: u64) {
        self.used.fetch_sub(len.min(self.used()), Ordering::Relaxed);
        self.drops.lock_clean().push(loc);
    }

    /// Whether its owner is away.
    pub fn dormant(&self) -> bool {
        self.dormant_since.lock_clean().is_some()
    }
}

/// How a disk tier was mounted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DiskMount {
    /// Never seen by this master: every record its owner reports is new to it.
    Fresh(u32),
    /// Known (a restarted owner takes it over, or the same owner mounts it again): what the
    /// master remembers decides which records stay.
    Known(u32),
}

impl Segments {
    /// Mounts the disk tier `name` of `client_id` with a quota of `capacity` bytes, or takes
    /// over the tier of the same identity (its directory is locked by one process at a time, so
    /// a second mount means the first owner is gone). A known tier stays dormant until
    /// [`Segments::wake_disk`].
    pub fn mount_disk(&self, client_id: u64, name: &str, capacity: u64) -> Result<DiskMount, i32> {
        let Some(tier) = TierName::parse(name) else {
            return Err(code::INVALID_PARAMS);
        };
        let mut t = self.table.write_clean();
        let known = t.by_id.values().find(|s| {
            s.disk.is_some() && TierName::parse(&s.name).is_some_and(|n| n.id == tier.id)
        });
        if let Some(old) = known.cloned() {
            let state = DiskState {
                used: AtomicU64::new(old.disk.as_ref().map_or(0, |d| d.used())),
                drops: Mutex::new(Vec::new()),
                dormant_since: Mutex::new(Some(Instant::now())),
            };
            t.by_name.remove(&old.name);
            let name: Arc<str> = name.into();
            let seg = Arc::new(Segment {
                id: old.id,
                name: name.clone(),
                client_id,
                base: 0,
                size: capacity,
                alloc: Mutex::new(OffsetAllocator::new(0)),
                unhealthy: AtomicBool::new(false),
                suspended: AtomicBool::new(false),
                disk: Some(state),
            });
            self.clear_flags(&old);
            t.by_id.insert(old.id, seg);
            t.by_name.insert(name, old.id);
            return Ok(DiskMount::Known(old.id));
        }
        if t.by_id.len() >= MAX_SEGMENTS {
            return Err(code::NO_AVAILABLE_HANDLE);
        }
        let Ok(n) = u32::try_from(self.next_id.fetch_add(1, Ordering::Relaxed) + 1) else {
            return Err(code::NO_AVAILABLE_HANDLE);
        };
        let id = n | DISK_BIT;
        let name: Arc<str> = name.into();
        t.by_id.insert(
            id,
            Arc::new(Segment {
                id,
                name: name.clone(),
                client_id,
                base: 0,
                size: capacity,
                alloc: Mutex::new(OffsetAllocator::new(0)),
                unhealthy: AtomicBool::new(false),
                suspended: AtomicBool::new(false),
                disk: Some(DiskState::default()),
            }),
        );
        t.by_name.insert(name, id);
        Ok(DiskMount::Fresh(id))
    }

    fn disk(&self, id: u32) -> Option<Arc<Segment>> {
        self.table
            .read_clean()
            .by_id
            .get(&id)
            .filter(|s| s.disk.is_some())
            .cloned()
    }

    /// The tier's reconciliation is over: its replicas are handed to readers again.
    pub fn wake_disk(&self, id: u32) {
        if let Some(d) = self.disk(id).as_ref().and_then(|s| s.disk.as_ref()) {
            *d.dormant_since.lock_clean() = None;
        }
    }

    /// The owner of `id` went silent: its replicas are kept but not handed out.
    pub fn doze_disk(&self, id: u32) {
        if let Some(d) = self.disk(id).as_ref().and_then(|s| s.disk.as_ref()) {
            d.dormant_since
                .lock_clean()
                .get_or_insert_with(Instant::now);
        }
    }

    /// Tiers dormant for longer than `ttl`.
    pub fn dormant_longer_than(&self, ttl: Duration) -> Vec<u32> {
        let t = self.table.read_clean();
        t.by_id
            .values()
            .filter(|s| {
                s.disk.as_ref().is_some_and(|d| {
                    d.dormant_since
                        .lock_clean()
                        .is_some_and(|at| at.elapsed() > ttl)
                })
            })
            .map(|s| s.id)
            .collect()
    }

    /// A replica of `len` bytes was added to tier `id`.
    pub fn disk_added(&self, id: u32, len: u64) {
        if let Some(d) = self.disk(id).as_ref().and_then(|s| s.disk.as_ref()) {
            d.used.fetch_add(len, Ordering::Relaxed);
        }
    }

    /// Replicas of `len` bytes in all left tier `id` without a record to end (it is gone).
    pub fn disk_forgot(&self, id: u32, len: u64) {
        if let Some(d) = self.disk(id).as_ref().and_then(|s| s.disk.as_ref()) {
            d.used.fetch_sub(len.min(d.used()), Ordering::Relaxed);
        }
    }

    /// Record `loc` of tier `id` is to be ended (it never became, or no longer is, a replica).
    pub fn disk_refused(&self, id: u32, loc: u64) {
        if let Some(d) = self.disk(id).as_ref().and_then(|s| s.disk.as_ref()) {
            d.drops.lock_clean().push(loc);
        }
    }

    /// The drops of tier `id`, taken.
    pub fn take_drops(&self, id: u32) -> Vec<u64> {
        self.disk(id)
            .as_ref()
            .and_then(|s| s.disk.as_ref())
            .map(|d| std::mem::take(&mut *d.drops.lock_clean()))
            .unwrap_or_default()
    }

    /// The live disk tier of `client_id` (owner of a memory replica), if it has one.
    pub fn disk_of_client(&self, client_id: u64) -> Option<u32> {
        let t = self.table.read_clean();
        t.by_id
            .values()
            .find(|s| s.client_id == client_id && s.disk.as_ref().is_some_and(|d| !d.dormant()))
            .map(|s| s.id)
    }

    /// For a memory replica: its owner, the owner's live disk tier and the replica's address.
    pub fn offload_target(&self, r: &Replica) -> Option<(u64, u32, u64)> {
        if r.on_disk() {
            return None;
        }
        let t = self.table.read_clean();
        let s = t.by_id.get(&r.seg)?;
        let disk = t.by_id.values().find(|d| {
            d.client_id == s.client_id && d.disk.as_ref().is_some_and(|d| !d.dormant())
        })?;
        Some((s.client_id, disk.id, s.base + r.offset))
    }

    /// `len` bytes in a memory segment of the owner of tier `disk` (for a promotion): the
    /// replica and its absolute address.
    pub fn alloc_beside(&self, disk: u32, len: u64) -> Option<(Replica, u64)> {
        let t = self.table.read_clean();
        let owner = t.by_id.get(&disk)?.client_id;
        t.by_id
            .values()
            .filter(|s| s.client_id == owner && s.placeable())
            .find_map(|s| {
                let offset = s.alloc.lock_clean().alloc(len)?;
                Some((Replica { seg: s.id, offset }, s.base + offset))
            })
    }

    /// The owner of tier `disk`.
    pub fn owner_of(&self, disk: u32) -> Option<u64> {
        self.disk(disk).map(|s| s.client_id)
    }

    /// (tiers, bytes held, quota) over every disk tier.
    pub fn disk_usage(&self) -> (usize, u64, u64) {
        let t = self.table.read_clean();
        t.by_id
            .values()
            .filter_map(|s| s.disk.as_ref().map(|d| (d.used(), s.size)))
            .fold((0, 0, 0), |(n, u, c), (du, dc)| (n + 1, u + du, c + dc))
    }
}
