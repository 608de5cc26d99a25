//! One engine batch for a store call: submit (registering, for the call only, caller memory
//! the engine does not know), wait within a deadline scaled to the bytes, per-request outcome.
//! A batch that runs out of time keeps its id and temporary registrations until its work has
//! ended (every task ends in bounded time); a later batch of the same client frees them.

use super::proto::code;
use crate::engine::{Engine, Request as Xfer, TaskState};
use crate::error::ErrorKind;
use crate::sync::LockClean;
use std::sync::Mutex;
use std::time::Duration;

/// Batches that ran out of time with work in flight, each with the temporary registrations
/// it uses. Freed by [`Stale::sweep`] once the engine no longer refuses them as busy.
#[derive(Default)]
pub(crate) struct Stale(Mutex<Vec<(u64, Vec<u64>)>>);

impl Stale {
    fn push(&self, id: u64, temp: Vec<u64>) {
        self.0.lock_clean().push((id, temp));
    }

    /// Frees the batches whose work has ended, and their registrations; returns how many are
    /// left. Never waits: when another thread is sweeping, this one leaves it to it.
    pub(crate) fn sweep(&self, e: &Engine) -> usize {
        let mut list = match self.0.try_lock_clean() {
            Some(l) => l,
            None => return usize::MAX,
        };
        list.retain(|(id, temp)| {
            if matches!(e.free_batch(*id), Err(err) if err.kind() == ErrorKind::Busy) {
                return true;
            }
            if !temp.is_empty() {
                let _ = e.unregister_memory_batch(temp);
            }
            false
        });
        list.len()
    }

    /// How many timed-out batches are not freed yet.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.0.lock_clean().len()
    }
}

/// How one engine batch ended.
pub(crate) enum BatchEnd {
    /// Per request: completed or not.
    Done(Vec<bool>),
    /// Rejected at submit (nothing moved): the code for every request.
    Rejected(i32),
    /// The deadline passed with work in flight: buffers may still be written.
    TimedOut,
}

/// Runs one batch of requests on `engine`, within `transfer_timeout` plus time for the bytes.
/// Local ranges the engine does not know are registered for the duration of the batch
/// (local-only), as Mooncake tolerates unregistered buffers on TCP. A batch that runs out of
/// time goes to `stale`.
pub(crate) fn run_batch(
    engine: &Engine,
    stale: &Stale,
    transfer_timeout: Duration,
    reqs: &[Xfer],
    bytes: u64,
) -> BatchEnd {
    if reqs.is_empty() {
        return BatchEnd::Done(Vec::new());
    }
    let e = engine;
    stale.sweep(e);
    let Ok(id) = e.alloc_batch(reqs.len()) else {
        return BatchEnd::Rejected(code::INTERNAL_ERROR);
    };
    let mut temp: Vec<u64> = Vec::new();
    // The wait follows at once: large READs may run on this thread (no lane hand-off).
    let mut res = e.submit_for_wait(id, reqs);
    if matches!(&res, Err(err) if err.kind() == ErrorKind::AddressNotRegistered) {
        let mut ranges = union_of(reqs.iter().map(|r| (r.local, r.len)).collect());
        ranges.retain(|&(a, _)| e.memory_location(a).is_err());
        if e.register_memory_batch_local(&ranges, "cpu:0").is_ok() {
            temp.extend(ranges.iter().map(|r| r.0));
        } else {
            for (a, l) in ranges {
                if e.register_memory(a, l, "cpu:0", false).is_ok() {
                    temp.push(a);
                }
            }
        }
        res = e.submit_for_wait(id, reqs);
    }
    let end = match res {
        Err(err) => BatchEnd::Rejected(match err.kind() {
            ErrorKind::AddressNotRegistered | ErrorKind::InvalidArgument => code::INVALID_PARAMS,
            _ => code::TRANSFER_FAIL,
        }),
        Ok(()) => {
            let budget = transfer_timeout + Duration::from_millis(bytes / (64 << 10));
            let _ = e.wait_batch(id, Some(budget));
            let mut ok = Vec::with_capacity(reqs.len());
            let mut pending = false;
            for i in 0..reqs.len() {
                match e.task_status(id, i).map(|s| s.state) {
                    Ok(TaskState::Completed) => ok.push(true),
                    Ok(TaskState::Failed) | Err(_) => ok.push(false),
                    Ok(_) => {
                        pending = true;
                        ok.push(false);
                    }
                }
            }
            if pending {
                BatchEnd::TimedOut
            } else {
                BatchEnd::Done(ok)
            }
        }
    };
    if matches!(end, BatchEnd::TimedOut) {
        // The work may still read or write the registered memory: freed once it ends.
        stale.push(id, temp);
    } else {
        let _ = e.free_batch(id);
        if !temp.is_empty() {
            let _ = e.unregister_memory_batch(&temp);
        }
    }
    end
}

/// The union of `(addr, len)` ranges as disjoint ranges in address order (values may share or
/// overlap memory, e.g. slices of one buffer; registrations must not overlap).
fn union_of(mut ranges: Vec<(u64, u64)>) -> Vec<(u64, u64)> {
    ranges.sort_unstable();
    let mut out: Vec<(u64, u64)> = Vec::with_capacity(ranges.len());
    for (a, l) in ranges {
        let end = a.saturating_add(l);
        match out.last_mut() {
            Some((b, m)) if a <= *b + *m => *m = (*m).max(end - *b),
            _ => out.push((a, l)),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::{Stale, union_of};
    use crate::engine::{Config, Engine};
    use crate::error::ErrorKind;

    /// A timed-out batch and its temporary registration are freed by the next sweep once the
    /// batch is idle; the registration is gone afterwards.
    #[test]
    fn stale_batches_are_freed_with_their_registrations() {
        let mut cfg = Config::default();
        for (k, v) in [("rdma", "off"), ("same_host", "0")] {
            cfg.set(k, v).expect("valid option");
        }
        let e = Engine::new(cfg).expect("engine starts");
        let buf = vec![0u8; 4096];
        let addr = buf.as_ptr() as u64;
        e.register_memory(addr, 4096, "cpu:0", false)
            .expect("registers");
        let id = e.alloc_batch(1).expect("a batch");
        let stale = Stale::default();
        stale.push(id, vec![addr]);
        assert_eq!(stale.len(), 1);
        assert_eq!(stale.sweep(&e), 0);
        assert_eq!(stale.len(), 0);
        assert_eq!(
            e.free_batch(id).map_err(|err| err.kind()),
            Err(ErrorKind::InvalidId)
        );
        assert!(e.memory_location(addr).is_err(), "unregistered");
    }

    #[test]
    fn ranges_are_merged_into_disjoint_ones() {
        assert_eq!(union_of(vec![]), vec![]);
        assert_eq!(
            union_of(vec![
                (100, 10),
                (0, 10),
                (5, 10),
                (100, 10),
                (10, 5),
                (200, 1)
            ]),
            vec![(0, 15), (100, 10), (200, 1)]
        );
        assert_eq!(union_of(vec![(0, 100), (10, 5)]), vec![(0, 100)]);
    }
}
