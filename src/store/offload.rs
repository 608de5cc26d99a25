//! The owner's side of the disk tier: mounting it on the master with the records it holds, and
//! the `tw-store-offload` thread, which polls the master for objects to write from this
//! client's segment, writes them, reports them (with the next poll), ends the records the
//! master drops and keeps the tier under its quota. A poll that finds work is followed at once
//! by the next; an idle one backs off to [`IDLE_POLL`].

use super::StoreError;
use super::disk::{DiskTier, Held};
use super::proto::{DiskRecord, MAX_BATCH, OffloadDone, OffloadJob, Reply, Request, code};
use super::shared::Shared;
use crate::sync::{LockClean, Recover};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

/// The longest an idle owner waits between polls.
pub const IDLE_POLL: Duration = Duration::from_millis(20);

/// Jobs asked for per poll.
const JOBS_PER_POLL: u32 = 64;

fn records(held: &[Held]) -> Vec<DiskRecord> {
    held.iter()
        .map(|h| DiskRecord {
            key: h.key.clone(),
            loc: h.loc,
            size: h.len,
        })
        .collect()
}

impl Shared {
    /// Mounts this client's disk tier with every record it holds (in runs); records the master
    /// refuses get a tombstone.
    pub(crate) fn mount_disk(&self, tier: &DiskTier) -> Result<(), StoreError> {
        let held = tier.held();
        let name = tier.name(self.engine.name()).to_name();
        let runs: Vec<&[Held]> = match held.is_empty() {
            true => vec![&[][..]],
            false => held.chunks(MAX_BATCH).collect(),
        };
        let mut refused = Vec::new();
        for (i, run) in runs.iter().enumerate() {
            let reply = self.conn.call(&Request::MountDisk {
                client_id: self.client_id,
                name: name.clone(),
                capacity: tier.quota(),
                first: i == 0,
                last: i + 1 == runs.len(),
                records: records(run),
            })?;
            match reply {
                Reply::Codes { codes } => refused.extend(
                    run.iter()
                        .zip(codes)
                        .filter(|(_, c)| *c != code::OK)
                        .map(|(h, _)| h.loc),
                ),
                Reply::Error { code, message } => return Err(StoreError::new(code, message)),
                other => {
                    return Err(StoreError::new(
                        code::RPC_FAIL,
                        format!("unexpected disk mount reply {other:?}"),
                    ));
                }
            }
        }
        if !refused.is_empty() {
            tw_log!(
                crate::log::Level::Info,
                "store: disk tier: {} of {} records were removed or replaced while this \
                 client was away; ended",
                refused.len(),
                held.len()
            );
            tier.drop_records(&refused);
        }
        Ok(())
    }
}

/// The offload thread's loop, until `stop` is set.
pub(crate) fn run(sh: &Shared, tier: &DiskTier, stop: &(Mutex<bool>, Condvar)) {
    let name = tier.name(sh.engine.name()).to_name();
    let mut done: Vec<OffloadDone> = Vec::new();
    let mut lost: Vec<DiskRecord> = Vec::new();
    let mut idle = Duration::from_millis(1);
    loop {
        let pause = {
            let (lock, cv) = stop;
            let g = lock.lock_clean();
            let (g, _) = cv.wait_timeout_while(g, idle, |s| !*s).recover();
            *g
        };
        if pause || sh.disk_off.load(std::sync::atomic::Ordering::Acquire) {
            return;
        }
        let lost_now = lost.len().min(MAX_BATCH);
        let reply = sh.conn.call(&Request::OffloadPoll {
            client_id: sh.client_id,
            name: name.clone(),
            done: done.clone(),
            lost: lost[..lost_now].to_vec(),
            used: tier.used(),
            max: JOBS_PER_POLL,
        });
        let (jobs, drops) = match reply {
            Ok(Reply::OffloadWork { jobs, drops }) => (jobs, drops),
            Ok(Reply::Error { code, message }) if code == super::proto::code::SEGMENT_NOT_FOUND => {
                // The master forgot the tier (restarted, or this client was expired): mount
                // it again; what was reported is lost with the old state.
                tw_log!(
                    crate::log::Level::Info,
                    "store: disk tier: {message}; mounting again"
                );
                done.clear();
                lost.clear();
                let _ = sh.mount();
                idle = IDLE_POLL;
                continue;
            }
            _ => {
                idle = IDLE_POLL * 5;
                continue;
            }
        };
        done.clear();
        lost.drain(..lost_now);
        tier.drop_records(&drops);
        if jobs.is_empty() && drops.is_empty() {
            idle = (idle * 2).min(IDLE_POLL);
            continue;
        }
        idle = Duration::ZERO;
        let (promotions, jobs): (Vec<OffloadJob>, Vec<OffloadJob>) =
            jobs.into_iter().partition(|j| j.promote.is_some());
        for j in &promotions {
            done.push(promote(sh, tier, j));
        }
        let mut items: Vec<(&str, &[u8])> = Vec::with_capacity(jobs.len());
        let mut fit = Vec::with_capacity(jobs.len());
        for j in &jobs {
            // SAFETY: the master holds the version for us until we report it, so its bytes in
            // our own segment are neither freed nor rewritten while we read them.
            match unsafe { sh.own_bytes(j.addr, j.len) } {
                Some(b) => {
                    items.push((j.key.as_str(), b));
                    fit.push(true);
                }
                None => fit.push(false),
            }
        }
        let mut written = tier.append(&items).into_iter();
        for (j, ok) in jobs.iter().zip(fit) {
            let loc = match ok {
                true => written.next().and_then(|r| match r {
                    Ok(l) => Some(l),
                    Err(e) => {
                        tw_log!(crate::log::Level::Warn, "store: disk tier: {e}");
                        None
                    }
                }),
                false => None,
            };
            done.push(OffloadDone {
                key: j.key.clone(),
                version: j.version,
                loc,
                evict: j.evict,
                promote: false,
            });
        }
        lost.extend(records(&tier.enforce_quota()));
    }
}

/// A promotion: reads record `j.promote` of our tier into the memory the master gave it in our
/// own segment (nobody else writes there until we report).
fn promote(sh: &Shared, tier: &DiskTier, j: &OffloadJob) -> OffloadDone {
    let loc = j.promote.unwrap_or_default();
    // SAFETY: the master allocated `[addr, addr+len)` in our segment for this promotion and
    // hands it to nobody else until we report.
    let read = match unsafe { sh.own_bytes_mut(j.addr, j.len) } {
        Some(dst) => tier.files().read(loc, &j.key, j.len, 0, dst).is_ok(),
        None => false,
    };
    OffloadDone {
        key: j.key.clone(),
        version: j.version,
        loc: read.then_some(loc),
        evict: false,
        promote: true,
    }
}

/// Starts the offload thread.
pub(crate) fn start(
    sh: Arc<Shared>,
    tier: Arc<DiskTier>,
    stop: Arc<(Mutex<bool>, Condvar)>,
) -> Result<std::thread::JoinHandle<()>, StoreError> {
    std::thread::Builder::new()
        .name("tw-store-offload".into())
        .spawn(move || run(&sh, &tier, &stop))
        .map_err(|e| StoreError::new(code::INTERNAL_ERROR, format!("offload thread: {e}")))
}
