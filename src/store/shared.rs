//! The state every verb works on: [`Shared`] (the engine, the master connection, this client's
//! segment and staging buffer, its heartbeats, open sessions and timed-out batches) and the
//! operations on it that several verbs use — mounting, the heartbeat's ping, telling our own
//! segment's replicas apart, resolving segments, the caller-memory rule, looking keys up under a
//! read hold and ending it, reporting failed segments, running one engine batch. The
//! [`StoreClient`] handle is defined here too; each verb adds its methods in its own file, and
//! `client.rs` sets it up.

use super::StoreError;
use super::batch::{BatchEnd, Stale, run_batch};
use super::conn::MasterConn;
use super::disk::DiskTier;
use super::disk::files::Neighbours;
use super::holds::{Heartbeats, ReadHold, Session, Sessions};
use super::mem::{LocalBuffer, Mapped};
use super::proto::{GetResult, KeyVersion, ReplicaDesc, Reply, Request, code, key_chunks};
use crate::engine::{Engine, Request as Xfer};
use crate::sync::LockClean;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// State shared with the heartbeat thread. Field order matters: the engine stops (no more
/// remote access) before the segment and buffer are unmapped.
pub(crate) struct Shared {
    pub(crate) engine: Engine,
    pub(crate) conn: MasterConn,
    pub(crate) client_id: u64,
    pub(crate) segment: Option<Mapped>,
    pub(crate) local: Option<Arc<LocalBuffer>>,
    pub(crate) master_ok: AtomicBool,
    pub(crate) transfer_timeout: Duration,
    /// Successful heartbeats (they keep this client's read holds alive past their lease).
    pub(crate) beats: Heartbeats,
    /// Open get sessions (see `sessions.rs`).
    pub(crate) sessions: Sessions,
    /// Batches that ran out of time, freed once their work ends (see `batch.rs`).
    pub(crate) stale: Stale,
    /// This client's disk tier (`enable_ssd_offload`).
    pub(crate) tier: Option<Arc<DiskTier>>,
    /// Other processes' tiers on this host, read directly.
    pub(crate) neighbours: Neighbours,
    /// Objects read from disk tiers.
    pub(crate) disk_reads: AtomicU64,
    /// Segments mounted at run time (see `segments.rs`).
    pub(crate) extra: super::mem::ExtraSegments,
    /// Open put sessions (see `put_sessions.rs`).
    pub(crate) put_sessions: super::holds::PutSessions,
    /// The disk tier was unmounted (`unmount_local_disk_segment`): no more polls or mounts.
    pub(crate) disk_off: AtomicBool,
    /// A thread runs replica tasks for the master (see `tasks.rs`).
    pub(crate) tasks_running: AtomicBool,
}

/// A store client. Every method is thread-safe; the data path takes no global lock.
pub struct StoreClient {
    pub(crate) shared: Arc<Shared>,
    pub(crate) stop: Arc<(Mutex<bool>, Condvar)>,
    pub(crate) heartbeat: Option<JoinHandle<()>>,
    pub(crate) offload: Option<JoinHandle<()>>,
}

impl Shared {
    pub(crate) fn mount(&self) -> Result<(), StoreError> {
        for (name, base, size) in self.extra.listed() {
            self.mount_one(&name, base, size)?;
        }
        let Some(seg) = &self.segment else {
            return Ok(());
        };
        self.mount_one(self.engine.name(), seg.addr(), seg.len() as u64)?;
        match &self.tier {
            Some(t) if !self.disk_off.load(std::sync::atomic::Ordering::Acquire) => {
                self.mount_disk(t)
            }
            _ => Ok(()),
        }
    }

    /// Mounts one memory segment of this client on the master.
    pub(crate) fn mount_one(&self, name: &str, base: u64, size: u64) -> Result<(), StoreError> {
        match self.conn.call(&Request::Mount {
            client_id: self.client_id,
            name: name.to_string(),
            base,
            size,
        })? {
            Reply::Ok => Ok(()),
            Reply::Error { code, message } => Err(StoreError::new(code, message)),
            other => Err(StoreError::new(
                code::RPC_FAIL,
                format!("unexpected mount reply {other:?}"),
            )),
        }
    }

    pub(crate) fn ping(&self) -> Result<(), StoreError> {
        let sent = std::time::Instant::now();
        match self.conn.call(&Request::Ping {
            client_id: self.client_id,
        })? {
            Reply::Pong { remount } => {
                self.beats.answered(sent);
                if remount {
                    self.mount()?;
                }
                Ok(())
            }
            other => Err(StoreError::new(
                code::RPC_FAIL,
                format!("unexpected ping reply {other:?}"),
            )),
        }
    }

    /// `len` bytes at `addr` of our own segment, when they lie in it.
    ///
    /// # Safety
    /// Nobody writes those bytes while the slice lives (the master holds their version for us).
    pub(crate) unsafe fn own_bytes(&self, addr: u64, len: u64) -> Option<&[u8]> {
        self.owns(addr, len).then_some(())?;
        // SAFETY: the range lies in one of our mapped segments (checked), which lives as long as
        // `self` (a run-time segment is unmapped only after its grace); the caller's contract
        // rules out writers.
        Some(unsafe { std::slice::from_raw_parts(addr as *const u8, len as usize) })
    }

    /// `len` writable bytes at `addr` of our own segment, when they lie in it.
    ///
    /// # Safety
    /// Nobody else reads or writes those bytes while the slice lives (the master gave them to
    /// this client alone).
    #[allow(clippy::mut_from_ref)]
    pub(crate) unsafe fn own_bytes_mut(&self, addr: u64, len: u64) -> Option<&mut [u8]> {
        self.owns(addr, len).then_some(())?;
        // SAFETY: the range lies in one of our mapped segments (checked), which lives as long as
        // `self` (a run-time segment is unmapped only after its grace); the caller's contract
        // gives us the bytes alone.
        Some(unsafe { std::slice::from_raw_parts_mut(addr as *mut u8, len as usize) })
    }

    pub(crate) fn own_segment(&self, r: &ReplicaDesc) -> bool {
        r.endpoint == self.engine.name() && self.owns(r.addr, r.len)
    }

    /// Whether `[addr, addr+len)` lies in one of this client's segments.
    fn owns(&self, addr: u64, len: u64) -> bool {
        self.segment.as_ref().is_some_and(|s| s.contains(addr, len))
            || self.extra.holding(addr, len).is_some()
    }

    /// Resolves segment names to engine ids, each distinct name once per call.
    pub(crate) fn resolver(&self) -> impl FnMut(&str) -> Option<crate::engine::SegmentId> + '_ {
        let mut cache: Vec<(String, Option<crate::engine::SegmentId>)> = Vec::new();
        move |name: &str| {
            if let Some((_, id)) = cache.iter().find(|(n, _)| n == name) {
                return *id;
            }
            let id = self.engine.open_segment(name).ok();
            cache.push((name.to_string(), id));
            id
        }
    }

    /// Whether destinations of a read look freshly allocated (host memory never touched, see
    /// [`likely_fresh`](super::mem::likely_fresh)), registered or not: their pages are then
    /// populated on a second CPU alongside the transfer, instead of faulting one by one inside
    /// the receive copy. TransferQueue allocates its tensors, registers them and reads into
    /// them at once. Memory registered as a CUDA device's is never host-populated.
    pub(crate) fn fresh_destinations(&self, dsts: impl Iterator<Item = (u64, u64)>) -> bool {
        dsts.take(4)
            .any(|(a, n)| super::mem::likely_fresh(a, n) && self.engine.memory_device(a).is_none())
    }

    /// Whether caller memory may be touched: registered with the engine, or at least mapped.
    pub(crate) fn usable(&self, addr: u64, len: u64) -> bool {
        self.engine.memory_location(addr).is_ok() || super::mem::range_mapped(addr, len)
    }

    /// Looks `keys` up, granting read leases and holds: the hold and one result per key, or the
    /// code the whole call failed with.
    pub(crate) fn lookup(&self, keys: &[&str]) -> Result<(ReadHold, Vec<GetResult>), i32> {
        let since = Instant::now();
        let reply = self.conn.call(&Request::Get {
            client_id: self.client_id,
            keys: keys.iter().map(|k| k.to_string()).collect(),
        });
        match reply {
            Ok(Reply::Replicas {
                lease_ms,
                hold_ms,
                results,
            }) if results.len() == keys.len() => Ok((
                ReadHold {
                    since,
                    lease_ms,
                    hold_ms,
                },
                results,
            )),
            Ok(_) => Err(code::RPC_FAIL),
            Err(e) => Err(e.code),
        }
    }

    /// Whether the reads under `hold` may still be trusted now (see [`super::holds`]).
    pub(crate) fn still_held(&self, hold: &ReadHold) -> bool {
        self.beats.covered(hold.since, hold.lease_ms, hold.hold_ms)
    }

    /// Ends this client's read holds on the keys `found` (`code::OK`) with a one-way ReadDone.
    pub(crate) fn read_done(&self, found: &[GetResult], keys: &[&str]) {
        let done: Vec<KeyVersion> = found
            .iter()
            .zip(keys)
            .filter(|(g, _)| g.code == code::OK)
            .map(|(g, k)| KeyVersion {
                key: k.to_string(),
                version: g.version,
            })
            .collect();
        if !done.is_empty() {
            self.conn.notify(&Request::ReadDone {
                client_id: self.client_id,
                items: done,
            });
        }
    }

    pub(crate) fn sessions(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Session>>> {
        self.sessions.lock_clean()
    }

    /// Drops references to sessions; those that were the last end their holds (one ReadDone).
    pub(crate) fn release(&self, refs: Vec<Arc<Session>>) {
        let last: Vec<Session> = refs.into_iter().filter_map(Arc::into_inner).collect();
        for chunk in key_chunks(&last, |s| s.key.as_str()) {
            let found: Vec<GetResult> = chunk.iter().map(|s| s.found.clone()).collect();
            let keys: Vec<&str> = chunk.iter().map(|s| s.key.as_str()).collect();
            self.read_done(&found, &keys);
        }
    }

    /// Tells the master (one-way) that transfers with these segments just failed.
    pub(crate) fn report_failed(&self, mut segments: Vec<String>) {
        if segments.is_empty() {
            return;
        }
        segments.sort_unstable();
        segments.dedup();
        self.conn.notify(&Request::ReportFailed {
            client_id: self.client_id,
            segments,
        });
    }

    /// Runs one engine batch for a call (see [`run_batch`]).
    pub(crate) fn run_batch(&self, reqs: &[Xfer], bytes: u64) -> BatchEnd {
        run_batch(
            &self.engine,
            &self.stale,
            self.transfer_timeout,
            reqs,
            bytes,
        )
    }
}
