//! The disk tier's settings (mooncake_master's offload flags) and its work queues: objects
//! waiting to be written by the owner of their memory segment, per owner, and what the master
//! counts about them.

use crate::segments::Replica;
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;
use tidewire::store::proto::OffloadJob;
use tidewire::sync::LockClean;

/// Disk-tier behaviour.
#[derive(Debug, Clone)]
pub struct TierConfig {
    /// Clients may mount disk tiers (`--enable_offload`).
    pub enabled: bool,
    /// Write to disk only when eviction picks an object, not after every put
    /// (`--offload_on_evict`).
    pub on_evict: bool,
    /// With `on_evict`: an object eviction picks that cannot be queued (queue full) is dropped
    /// instead of kept in memory (`--offload_force_evict`).
    pub force_evict: bool,
    /// Most objects queued for writing, over all owners (`--offloading_queue_limit`).
    pub queue_limit: usize,
    /// A tier whose owner went silent keeps its records known this long, for the owner's
    /// restart; then it is unmounted (`--disk_dormant_sec`, tidewire's).
    pub dormant_ttl: Duration,
    /// A disk-only object read often enough gets a memory replica again (`--promotion_on_hit`).
    pub promotion_on_hit: bool,
    /// Reads of a disk-only object that earn its promotion (`--promotion_admission_threshold`).
    pub promotion_threshold: u32,
    /// Promotions handed to an owner per poll (`--promotion_max_per_heartbeat`).
    pub promotion_per_poll: usize,
    /// Most promotions waiting (`--promotion_queue_limit`).
    pub promotion_queue_limit: usize,
}

impl Default for TierConfig {
    fn default() -> Self {
        TierConfig {
            enabled: false,
            on_evict: false,
            force_evict: false,
            queue_limit: 50_000,
            dormant_ttl: Duration::from_secs(3600),
            promotion_on_hit: false,
            promotion_threshold: 2,
            promotion_per_poll: 16,
            promotion_queue_limit: 50_000,
        }
    }
}

/// Objects queued for their owners, and counters.
#[derive(Default)]
pub struct Offloads {
    queues: Mutex<HashMap<u64, VecDeque<OffloadJob>>>,
    queued: AtomicUsize,
    /// Jobs each owner took and has not reported yet.
    taken: Mutex<HashMap<u64, usize>>,
    /// Objects not queued because the queue was full.
    pub overflow: AtomicU64,
    /// Objects written to disk.
    pub written: AtomicU64,
    /// Writes that failed.
    pub failed: AtomicU64,
    /// Records deleted under owners' quotas.
    pub lost: AtomicU64,
    /// Memory replicas dropped because a disk replica holds the value.
    pub demoted: AtomicU64,
    /// Tiers being taken over: the records their owner confirmed so far.
    pub(crate) confirming: Mutex<HashMap<u32, HashSet<u64>>>,
    /// Reads of disk-only objects not yet promoted, by key (forgotten past [`MAX_HITS`] keys).
    hits: Mutex<HashMap<String, u32>>,
    /// Promotions per owner, and the memory each was given (by key and version).
    promotions: Mutex<HashMap<u64, VecDeque<OffloadJob>>>,
    promoting: Mutex<HashMap<(String, u64), (Replica, u64)>>,
    /// Objects brought back to memory.
    pub promoted: AtomicU64,
}

/// Keys whose disk reads are counted at once, at most (the counts restart past it).
const MAX_HITS: usize = 1 << 16;

impl Offloads {
    /// Whether one more job fits under `limit`.
    pub fn has_room(&self, limit: usize) -> bool {
        self.queued.load(Ordering::Relaxed) < limit
    }

    /// Queues `job` for `owner`.
    pub fn push(&self, owner: u64, job: OffloadJob) {
        self.queues
            .lock_clean()
            .entry(owner)
            .or_default()
            .push_back(job);
        self.queued.fetch_add(1, Ordering::Relaxed);
    }

    /// Takes up to `max` of `owner`'s jobs.
    pub fn take(&self, owner: u64, max: usize) -> Vec<OffloadJob> {
        let mut q = self.queues.lock_clean();
        let Some(jobs) = q.get_mut(&owner) else {
            return Vec::new();
        };
        let n = max.min(jobs.len());
        let out: Vec<OffloadJob> = jobs.drain(..n).collect();
        if jobs.is_empty() {
            q.remove(&owner);
        }
        drop(q);
        self.queued.fetch_sub(out.len(), Ordering::Relaxed);
        *self.taken.lock_clean().entry(owner).or_default() += out.len();
        out
    }

    /// `owner` reported `n` of the jobs it took.
    pub fn reported(&self, owner: u64, n: usize) {
        let mut t = self.taken.lock_clean();
        if let Some(k) = t.get_mut(&owner) {
            *k = k.saturating_sub(n);
            if *k == 0 {
                t.remove(&owner);
            }
        }
    }

    /// Jobs taken by their owners and not reported yet.
    pub fn in_flight(&self) -> usize {
        self.taken.lock_clean().values().sum()
    }

    /// Forgets `owner`'s queue (it went away; its holds end with its heartbeats).
    pub fn forget(&self, owner: u64) -> Vec<(Replica, u64)> {
        if let Some(jobs) = self.queues.lock_clean().remove(&owner) {
            self.queued.fetch_sub(jobs.len(), Ordering::Relaxed);
        }
        self.taken.lock_clean().remove(&owner);
        let jobs = self
            .promotions
            .lock_clean()
            .remove(&owner)
            .unwrap_or_default();
        jobs.iter()
            .filter_map(|j| self.promoted_into(&j.key, j.version))
            .collect()
    }

    /// Counts a read of the disk-only object `key`; `true` when it earns its promotion now.
    pub fn hit(&self, key: &str, cfg: &TierConfig) -> bool {
        let mut hits = self.hits.lock_clean();
        if hits.len() >= MAX_HITS && !hits.contains_key(key) {
            hits.clear();
        }
        let n = hits.entry(key.to_string()).or_default();
        *n += 1;
        if *n < cfg.promotion_threshold.max(1) {
            return false;
        }
        hits.remove(key);
        self.promoting.lock_clean().len() < cfg.promotion_queue_limit
    }

    /// A promotion that `hit` granted could not start: the key's next read grants it again.
    pub fn hit_again(&self, key: &str, cfg: &TierConfig) {
        let mut hits = self.hits.lock_clean();
        if hits.len() < MAX_HITS {
            hits.insert(key.to_string(), cfg.promotion_threshold.max(1) - 1);
        }
    }

    /// Queues a promotion whose memory is `into`; `false` (nothing queued: the caller frees
    /// `into`) when the same version is being promoted already.
    #[must_use]
    pub fn push_promotion(&self, owner: u64, job: OffloadJob, into: (Replica, u64)) -> bool {
        let mut p = self.promoting.lock_clean();
        let id = (job.key.clone(), job.version);
        if p.contains_key(&id) {
            return false;
        }
        p.insert(id, into);
        drop(p);
        self.promotions
            .lock_clean()
            .entry(owner)
            .or_default()
            .push_back(job);
        true
    }

    /// Takes up to `max` of `owner`'s promotions.
    pub fn take_promotions(&self, owner: u64, max: usize) -> Vec<OffloadJob> {
        let mut q = self.promotions.lock_clean();
        let Some(jobs) = q.get_mut(&owner) else {
            return Vec::new();
        };
        let out: Vec<OffloadJob> = jobs.drain(..max.min(jobs.len())).collect();
        if jobs.is_empty() {
            q.remove(&owner);
        }
        out
    }

    /// The memory given to a promotion, taken.
    pub fn promoted_into(&self, key: &str, version: u64) -> Option<(Replica, u64)> {
        self.promoting
            .lock_clean()
            .remove(&(key.to_string(), version))
    }

    /// Jobs queued.
    pub fn queued(&self) -> usize {
        self.queued.load(Ordering::Relaxed)
    }

    /// Prometheus text for the disk tier; `disks` is (tiers, bytes held, quota).
    pub fn render(&self, disks: (usize, u64, u64)) -> String {
        use std::fmt::Write;
        let mut s = String::new();
        let mut one = |name: &str, kind: &str, help: &str, v: u64| {
            let _ = writeln!(
                s,
                "# HELP tidewire_master_{name} {help}\n# TYPE tidewire_master_{name} {kind}\n\
                 tidewire_master_{name} {v}"
            );
        };
        let c = |a: &AtomicU64| a.load(Ordering::Relaxed);
        one("disk_tiers", "gauge", "Disk tiers mounted", disks.0 as u64);
        one(
            "disk_used_bytes",
            "gauge",
            "Bytes of objects on disk tiers",
            disks.1,
        );
        one(
            "disk_capacity_bytes",
            "gauge",
            "Quota of the disk tiers",
            disks.2,
        );
        one(
            "offload_queued",
            "gauge",
            "Objects waiting to be written to disk",
            self.queued() as u64,
        );
        one(
            "offload_in_flight",
            "gauge",
            "Objects their owners are writing to disk now (taken, not reported)",
            self.in_flight() as u64,
        );
        one(
            "offload_written_total",
            "counter",
            "Objects written to disk",
            c(&self.written),
        );
        one(
            "offload_failed_total",
            "counter",
            "Writes to disk that failed",
            c(&self.failed),
        );
        one(
            "offload_queue_overflow_total",
            "counter",
            "Objects kept in memory (or evicted) because the write queue was full",
            c(&self.overflow),
        );
        one(
            "offload_lost_total",
            "counter",
            "Disk records deleted under a quota",
            c(&self.lost),
        );
        one(
            "promoted_total",
            "counter",
            "Disk-only objects brought back to memory",
            c(&self.promoted),
        );
        one(
            "offload_demoted_total",
            "counter",
            "Memory replicas dropped because a disk replica holds the value",
            c(&self.demoted),
        );
        s
    }
}
