//! Submitting requests to a batch: one validating pass that builds the slices, then one
//! hand-over per run of consecutive slices to one route.
//!
//! Cost per request (the C ABI path of 16,384 x 4 KiB spends most of its time here): requests
//! are read straight from the caller's array ([`AsRequest`], no converted copy), the segment's
//! route and the local region are looked up once per run of requests that share them (a
//! one-entry cache each), task slots are filled in the same pass, the latch is raised once per
//! submit, and a submit to one route hands over the slice vector it built without copying it.

use super::Inner;
use super::segments::SegmentId;
use crate::completion::{Batch, SliceDone};
use crate::error::{Error, ErrorKind, Result, fail};
use crate::memory::Access;
use crate::sync::{LockClean, RwLockClean};
use crate::transport::Opcode;
use crate::transport::{Route, Slice, Transport};
use std::sync::Arc;

/// One transfer request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request {
    /// Direction.
    pub op: Opcode,
    /// Local address (must lie in registered memory).
    pub local: u64,
    /// Target segment (0 = this engine).
    pub segment: SegmentId,
    /// Absolute address in the target's memory.
    pub remote: u64,
    /// Bytes; 0 completes at once.
    pub len: u64,
}

/// Something that reads as a [`Request`]: the engine's own type, or a caller's C struct read
/// in place during a submit (each element is read exactly once).
pub trait AsRequest {
    /// The request; `index` (its position in the submit) is for error messages.
    fn to_request(&self, index: usize) -> Result<Request>;
}

impl AsRequest for Request {
    #[inline]
    fn to_request(&self, _index: usize) -> Result<Request> {
        Ok(*self)
    }
}

/// A validated local region: `[base, end)` and its device.
type RegionHit = (u64, u64, Option<u32>);

/// Routes seen by one submit, and which one the last segment used.
struct RouteCache {
    /// Distinct routes, each with its slice size.
    routes: Vec<(Route, u64)>,
    /// Last segment looked up and its index in `routes`.
    last: Option<(i32, usize)>,
    scratch: Option<(i32, Route)>,
}

impl RouteCache {
    /// Index in `routes` of segment `segment`'s route (the repeat of the last segment is the
    /// inlined fast path).
    #[inline(always)]
    fn index_of(&mut self, inner: &Inner, segment: i32) -> Result<usize> {
        match self.last {
            Some((s, i)) if s == segment => Ok(i),
            _ => self.look_up(inner, segment),
        }
    }

    #[inline(never)]
    fn look_up(&mut self, inner: &Inner, segment: i32) -> Result<usize> {
        let route = inner.route(segment, &mut self.scratch)?;
        let i = match self.routes.iter().position(|(r, _)| r.same(&route)) {
            Some(i) => i,
            None => {
                let slice = route.slice_size(inner.cfg.slice_size, inner.cfg.rdma_slice_size);
                self.routes.push((route, slice));
                self.routes.len() - 1
            }
        };
        self.last = Some((segment, i));
        Ok(i)
    }
}

fn with_index(i: usize, e: Error) -> Error {
    Error::new(e.kind(), format!("request {i}: {}", e.message()))
}

impl Inner {
    /// The device of the registered local range `[addr, addr + len)`, through a one-entry cache
    /// of the last region it fell in.
    fn local_device(
        &self,
        addr: u64,
        len: u64,
        hit: &mut Option<RegionHit>,
    ) -> Result<Option<u32>> {
        if let Some((base, end, dev)) = *hit {
            if addr >= base && addr.checked_add(len).is_some_and(|e| e <= end) {
                return Ok(dev);
            }
        }
        let dev = self.registry.check_place(addr, len, Access::Local)?;
        *hit = self
            .registry
            .region_of(addr)
            .map(|r| (r.base, r.end(), r.device));
        Ok(dev)
    }

    /// Validates then dispatches `reqs` as new tasks of `batch`; every request is checked before
    /// any is started (too many, an unknown segment, an unregistered local range, a bad remote
    /// range or opcode reject the whole call). Returns the first task index.
    pub(crate) fn submit_to<R: AsRequest>(&self, batch: &Arc<Batch>, reqs: &[R]) -> Result<usize> {
        let live = self.live.read_clean();
        if !*live {
            return fail(ErrorKind::Shutdown, "engine is shutting down");
        }
        let _serial = batch.submit_lock.lock_clean();
        let start = batch.len();
        if reqs.len() > batch.capacity() - start {
            return fail(
                ErrorKind::TooManyRequests,
                format!(
                    "{} requests do not fit: batch holds {start} of {}",
                    reqs.len(),
                    batch.capacity()
                ),
            );
        }
        let mut routes = RouteCache {
            routes: Vec::new(),
            last: None,
            scratch: None,
        };
        let mut region = None;
        // Slices in request order, and the runs of consecutive slices that share a route
        // (route index, end of the run in `slices`).
        let mut unsent = Unsent(Vec::with_capacity(reqs.len()));
        let slices = &mut unsent.0;
        let mut runs: Vec<(usize, usize)> = Vec::new();
        let mut run_route = usize::MAX;
        let mut total: u64 = 0;
        let min_slice = self.cfg.slice_size.min(self.cfg.rdma_slice_size).max(1);
        // Every task of this submit ends, COMPLETED or FAILED, by this instant.
        let deadline = std::time::Instant::now() + self.cfg.transfer_timeout;
        for (i, req) in reqs.iter().enumerate() {
            let r = req.to_request(i)?;
            let route = routes
                .index_of(self, r.segment)
                .map_err(|e| with_index(i, e))?;
            let mut n: u32 = 0;
            if r.len > 0 {
                let gpu = self
                    .local_device(r.local, r.len, &mut region)
                    .map_err(|e| {
                        with_index(i, Error::new(e.kind(), format!("local {}", e.message())))
                    })?;
                if r.len > u32::MAX as u64 && r.len.div_ceil(min_slice) > u32::MAX as u64 {
                    return fail(
                        ErrorKind::InvalidArgument,
                        format!("request {i}: length {} is too large", r.len),
                    );
                }
                if r.remote.checked_add(r.len).is_none() || r.remote == 0 {
                    return fail(
                        ErrorKind::InvalidArgument,
                        format!(
                            "request {i}: remote range {:#x}+{} is NULL or overflows",
                            r.remote, r.len
                        ),
                    );
                }
                if route != run_route {
                    if run_route != usize::MAX {
                        runs.push((run_route, slices.len()));
                    }
                    run_route = route;
                }
                let slice = routes.routes[route].1;
                let task = (start + i) as u32;
                // GPU regions go to the RDMA NIC as registered (GPUDirect); staging through
                // host memory, as TCP does, is not built for RDMA yet.
                let mut off = 0;
                while off < r.len {
                    slices.push(Slice {
                        op: r.op,
                        local: r.local + off,
                        remote: r.remote + off,
                        len: slice.min(r.len - off),
                        gpu,
                        retries: 0,
                        deadline,
                        no_vm: false,
                        done: SliceDone::new(batch.clone(), task),
                    });
                    off += slice;
                    n += 1;
                }
            }
            // Invisible until `publish`; a later failure leaves it to be prepared again.
            batch.prepare_task(start + i, n);
            total += n as u64;
        }
        if run_route != usize::MAX {
            runs.push((run_route, slices.len()));
        }
        batch.add_slices(total);
        let slices = std::mem::take(&mut unsent.0);
        batch.publish(start + reqs.len());
        // Consecutive slices to one route go down together (for TCP: one inline send when
        // small); the common single-route submit hands over `slices` itself.
        if let [(route, _)] = runs[..] {
            routes.routes[route].0.submit_all(slices);
        } else {
            let mut rest = slices.into_iter();
            let mut begin = 0;
            for (route, end) in runs {
                routes.routes[route]
                    .0
                    .submit_all(rest.by_ref().take(end - begin).collect());
                begin = end;
            }
        }
        Ok(start)
    }
}

/// The slices of a submit still being validated. If the submit is refused they are dropped
/// unsent, and disarmed: their batch never counted them, so they must not report a failure
/// (a dropped [`SliceDone`] otherwise fails its task).
struct Unsent(Vec<Slice>);

impl Drop for Unsent {
    fn drop(&mut self) {
        for s in self.0.drain(..) {
            s.done.disarm();
        }
    }
}
