//! One engine batch for a store call: submit (registering, for the call only, caller memory
//! the engine does not know), wait within a deadline scaled to the bytes, per-request outcome.

use super::client::Shared;
use super::proto::code;
use crate::engine::{Request as Xfer, TaskState};
use crate::error::ErrorKind;
use std::time::Duration;

/// How one engine batch ended.
pub(crate) enum BatchEnd {
    /// Per request: completed or not.
    Done(Vec<bool>),
    /// Rejected at submit (nothing moved): the code for every request.
    Rejected(i32),
    /// The deadline passed with work in flight: buffers may still be written.
    TimedOut,
}

impl Shared {
    /// Runs one batch of requests. Local ranges the engine does not know are registered for the
    /// duration of the batch (local-only), as Mooncake tolerates unregistered buffers on TCP.
    pub(crate) fn run_batch(&self, reqs: &[Xfer], bytes: u64) -> BatchEnd {
        if reqs.is_empty() {
            return BatchEnd::Done(Vec::new());
        }
        let e = &self.engine;
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
                ErrorKind::AddressNotRegistered | ErrorKind::InvalidArgument => {
                    code::INVALID_PARAMS
                }
                _ => code::TRANSFER_FAIL,
            }),
            Ok(()) => {
                let budget = self.transfer_timeout + Duration::from_millis(bytes / (64 << 10));
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
        if !matches!(end, BatchEnd::TimedOut) {
            let _ = e.free_batch(id);
            if !temp.is_empty() {
                let _ = e.unregister_memory_batch(&temp);
            }
        }
        end
    }
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
    use super::union_of;

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
