//! Scatter operations: many fragments described by offset arrays over one local and one remote
//! range each. Fragments adjacent on both sides are coalesced into one wire request; if a peer
//! rejects a coalesced request, its fragments are re-sent one by one so only the affected ones
//! fail. Results are delivered exactly once per fragment, on the thread that waits (or frees).

use super::Engine;
use super::segments::SegmentId;
use super::submit::Request;
use crate::completion::Batch;
use crate::error::{Error, ErrorKind, Result, fail};
use crate::memory::Access;
use crate::sync::LockClean;
use crate::transport::Opcode;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Outcome of one fragment.
pub type FragmentResult = std::result::Result<(), ErrorKind>;

/// Called once per fragment with its global index (ranges flattened in order).
pub type FragmentCallback = Box<dyn FnMut(usize, FragmentResult) + Send>;

/// One range of a scatter operation.
#[derive(Debug, Clone, Copy)]
pub struct ScatterRange<'a> {
    /// Direction.
    pub op: Opcode,
    /// Remote segment (0 = this engine).
    pub segment: SegmentId,
    /// Absolute remote address the remote offsets are relative to.
    pub remote_base: u64,
    /// Bytes addressable from `remote_base`.
    pub remote_size: u64,
    /// Local address the local offsets are relative to.
    pub local_base: u64,
    /// Bytes addressable from `local_base`.
    pub local_capacity: u64,
    /// Per-fragment local offsets.
    pub local_offsets: &'a [usize],
    /// Per-fragment remote offsets.
    pub remote_offsets: &'a [usize],
    /// Per-fragment lengths.
    pub lengths: &'a [usize],
}

struct Group {
    first: u32,
    count: u32,
    /// Per-fragment requests of a coalesced group, kept to re-send them one by one.
    members: Vec<Request>,
    reported: bool,
}

struct OpState {
    results: Vec<Option<FragmentResult>>,
    known: usize,
    first_error: Option<(usize, ErrorKind)>,
    fresh: Vec<u32>,
    groups: Vec<Group>,
    callback: Option<FragmentCallback>,
}

impl OpState {
    fn set(&mut self, frag: usize, r: FragmentResult) {
        if self.results[frag].is_some() {
            return;
        }
        self.results[frag] = Some(r);
        self.known += 1;
        self.fresh.push(frag as u32);
        if let Err(k) = r {
            if self.first_error.is_none_or(|(i, _)| frag < i) {
                self.first_error = Some((frag, k));
            }
        }
    }

    fn deliver(&mut self) {
        let fresh = std::mem::take(&mut self.fresh);
        if let Some(cb) = self.callback.as_mut() {
            for &f in &fresh {
                cb(f as usize, self.results[f as usize].expect("known"));
            }
        }
        self.fresh = fresh;
        self.fresh.clear();
    }
}

/// A submitted scatter operation.
pub struct ScatterOp {
    batch: Arc<Batch>,
    state: Mutex<OpState>,
}

impl ScatterOp {
    fn total(st: &OpState) -> usize {
        st.results.len()
    }
}

impl Engine {
    /// Submits a scatter operation and returns its id. Per-fragment problems (bounds, overflow,
    /// unregistered local memory, unknown segment) do not fail the call: those fragments fail
    /// with their own error. `callback` (optional) is called exactly once per fragment, from the
    /// thread calling [`Engine::scatter_wait`] or [`Engine::scatter_free`].
    pub fn submit_scatter(
        &self,
        ranges: &[ScatterRange<'_>],
        callback: Option<FragmentCallback>,
    ) -> Result<u64> {
        let total: usize = ranges.iter().map(|r| r.lengths.len()).sum();
        if total > u32::MAX as usize / 2 {
            return fail(
                ErrorKind::InvalidArgument,
                format!("{total} fragments is too many"),
            );
        }
        let mut st = OpState {
            results: vec![None; total],
            known: 0,
            first_error: None,
            fresh: Vec::new(),
            groups: Vec::new(),
            callback,
        };
        let mut reqs: Vec<Request> = Vec::new();
        let mut base = 0usize;
        let mut cache = None;
        for r in ranges {
            let n = r.lengths.len();
            let range_error =
                if r.local_offsets.len() != n || r.remote_offsets.len() != n || r.local_base == 0 {
                    Some(ErrorKind::InvalidArgument)
                } else {
                    self.inner.route_kind(r.segment, &mut cache).err()
                };
            if let Some(k) = range_error {
                (base..base + n).for_each(|f| st.set(f, Err(k)));
                base += n;
                continue;
            }
            let whole_local_ok = self
                .inner
                .registry
                .check(r.local_base, r.local_capacity, Access::Local)
                .is_ok();
            for i in 0..n {
                let f = base + i;
                let (lo, ro, len) = (
                    r.local_offsets[i] as u64,
                    r.remote_offsets[i] as u64,
                    r.lengths[i] as u64,
                );
                if len == 0 {
                    st.set(f, Ok(()));
                    continue;
                }
                let in_bounds = lo.checked_add(len).is_some_and(|e| e <= r.local_capacity)
                    && ro.checked_add(len).is_some_and(|e| e <= r.remote_size)
                    && r.remote_base
                        .checked_add(ro)
                        .and_then(|a| a.checked_add(len))
                        .is_some()
                    && r.local_base.checked_add(lo + len).is_some();
                if !in_bounds {
                    st.set(f, Err(ErrorKind::InvalidArgument));
                    continue;
                }
                let req = Request {
                    op: r.op,
                    local: r.local_base + lo,
                    segment: r.segment,
                    remote: r.remote_base + ro,
                    len,
                };
                if !whole_local_ok {
                    if let Err(e) = self.inner.registry.check(req.local, len, Access::Local) {
                        st.set(f, Err(e.kind()));
                        continue;
                    }
                }
                // Coalesce with the previous fragment when it is the previous index and adjacent
                // on both sides.
                if let (Some(g), Some(last)) = (st.groups.last_mut(), reqs.last_mut()) {
                    let prev_end = (g.first + g.count) as usize;
                    if prev_end == f
                        && i > 0
                        && last.local + last.len == req.local
                        && last.remote + last.len == req.remote
                        && last.segment == req.segment
                        && last.op == req.op
                    {
                        if g.members.is_empty() {
                            g.members.push(Request {
                                len: last.len,
                                ..*last
                            });
                        }
                        g.members.push(req);
                        g.count += 1;
                        last.len += len;
                        continue;
                    }
                }
                st.groups.push(Group {
                    first: f as u32,
                    count: 1,
                    members: Vec::new(),
                    reported: false,
                });
                reqs.push(req);
            }
            base += n;
        }
        let split_room: usize = st
            .groups
            .iter()
            .filter(|g| g.count > 1)
            .map(|g| g.count as usize)
            .sum();
        let batch = Arc::new(Batch::new(reqs.len() + split_room));
        if !reqs.is_empty() {
            if let Err(e) = self.inner.submit_to(&batch, &reqs) {
                tw_log!(crate::log::Level::Warn, "scatter submit: {e}");
                let groups = std::mem::take(&mut st.groups);
                for g in &groups {
                    (g.first..g.first + g.count).for_each(|f| st.set(f as usize, Err(e.kind())));
                }
            }
        }
        self.inner.scatters.insert(Arc::new(ScatterOp {
            batch,
            state: Mutex::new(st),
        }))
    }

    fn scatter(&self, id: u64) -> Result<Arc<ScatterOp>> {
        self.inner.scatters.get(id).ok_or_else(|| {
            Error::new(
                ErrorKind::InvalidId,
                format!("scatter id {id:#x} is unknown or freed"),
            )
        })
    }

    /// Number of fragments in a scatter operation.
    pub fn scatter_len(&self, id: u64) -> Result<usize> {
        let op = self.scatter(id)?;
        let st = op.state.lock_clean();
        Ok(ScatterOp::total(&st))
    }

    /// Waits up to `timeout` (`None` = no limit) for the operation, firing callbacks for
    /// fragments that finished. Then `report` (optional) sees every fragment whose result is
    /// known. Returns `Ok` when all fragments succeeded, the lowest-indexed fragment's error when
    /// some failed, or `Timeout` (nothing is cancelled; wait again).
    pub fn scatter_wait(
        &self,
        id: u64,
        timeout: Option<Duration>,
        report: Option<&mut dyn FnMut(usize, FragmentResult)>,
    ) -> Result<()> {
        let op = self.scatter(id)?;
        let deadline = timeout.map(|t| Instant::now() + t);
        let done = self.drive(&op, deadline);
        let st = op.state.lock_clean();
        if let Some(f) = report {
            for (i, r) in st.results.iter().enumerate() {
                if let Some(r) = r {
                    f(i, *r);
                }
            }
        }
        if !done {
            return fail(
                ErrorKind::Timeout,
                format!(
                    "scatter {id:#x}: {} of {} fragments done",
                    st.known,
                    ScatterOp::total(&st)
                ),
            );
        }
        match st.first_error {
            None => Ok(()),
            Some((i, k)) => fail(k, format!("fragment {i} failed: {}", k.name())),
        }
    }

    /// Waits for physical completion (firing any remaining callbacks), then frees the operation.
    pub fn scatter_free(&self, id: u64) -> Result<()> {
        let op = self.scatter(id)?;
        self.drive(&op, None);
        match self.inner.scatters.remove_if(id, |_| true) {
            Ok(_) => Ok(()),
            Err(_) => fail(
                ErrorKind::InvalidId,
                format!("scatter id {id:#x} was freed concurrently"),
            ),
        }
    }

    /// Collects finished groups, re-sends rejected coalesced groups fragment by fragment, fires
    /// callbacks. Returns whether every fragment is known.
    fn drive(&self, op: &ScatterOp, deadline: Option<Instant>) -> bool {
        loop {
            let mut st = op.state.lock_clean();
            let mut splits: Vec<(usize, Vec<Request>)> = Vec::new();
            let n = st.groups.len().min(op.batch.len());
            for t in 0..n {
                if st.groups[t].reported {
                    continue;
                }
                let s = op.batch.status(t);
                let (first, count) = (st.groups[t].first as usize, st.groups[t].count as usize);
                match (s.state, s.error) {
                    (super::TaskState::Waiting, _) => continue,
                    (super::TaskState::Failed, Some(ErrorKind::Rejected)) if count > 1 => {
                        let members = std::mem::take(&mut st.groups[t].members);
                        splits.push((first, members));
                    }
                    (super::TaskState::Failed, e) => (first..first + count)
                        .for_each(|f| st.set(f, Err(e.unwrap_or(ErrorKind::Internal)))),
                    (super::TaskState::Completed, _) => {
                        (first..first + count).for_each(|f| st.set(f, Ok(())))
                    }
                }
                st.groups[t].reported = true;
            }
            for (first, members) in splits {
                // Each member becomes its own task, appended after the existing ones.
                match self.inner.submit_to(&op.batch, &members) {
                    Ok(_) => {
                        for (k, _) in members.iter().enumerate() {
                            st.groups.push(Group {
                                first: (first + k) as u32,
                                count: 1,
                                members: Vec::new(),
                                reported: false,
                            });
                        }
                    }
                    Err(e) => (first..first + members.len()).for_each(|f| st.set(f, Err(e.kind()))),
                }
            }
            st.deliver();
            if st.known == ScatterOp::total(&st) {
                return true;
            }
            drop(st);
            if !op.batch.wait_idle(deadline) {
                return false;
            }
        }
    }
}
