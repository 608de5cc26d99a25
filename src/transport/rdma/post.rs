//! The data path: choosing a path (local device, peer device, queue pair), posting one-sided
//! READ/WRITE work requests, the completion loop, and retries on another path.

use super::Rdma;
use super::device::CQ_DEPTH;
use super::sys::*;
use super::{Endpoint, QpState};
use crate::error::ErrorKind;
use crate::log::Level;
use crate::metadata::SegmentDesc;
use crate::sync::LockClean;
use crate::transport::{Opcode, Slice};
use std::sync::atomic::Ordering;
use std::sync::{Arc, MutexGuard};
use std::time::{Duration, Instant};

/// How often a completion thread looks for posted work past its deadline.
const EXPIRY_CHECK_EVERY: Duration = Duration::from_millis(50);

/// One slice on its way through the RDMA path. Boxed: its address is the work request id.
pub struct Work {
    pub(crate) slice: Slice,
    pub(crate) peer: Arc<RdmaPeer>,
    /// Seed of the path choice; retries walk to the next path from here.
    base: usize,
    ep: Option<(Arc<Endpoint>, usize)>,
    sge: ibv_sge,
    wr: ibv_send_wr,
}

// SAFETY: the raw pointers inside `sge` and `wr` point into this boxed `Work` itself or at
// registered memory; they are only used by the thread that currently owns the box.
unsafe impl Send for Work {}

impl Work {
    /// Finishes the slice with an error.
    pub(crate) fn fail(self: Box<Self>, kind: ErrorKind) {
        let Work { slice, .. } = *self;
        slice.done.finish(Err(kind));
    }

    fn succeed(self: Box<Self>) {
        let Work { slice, .. } = *self;
        let n = slice.len;
        slice.done.finish(Ok(n));
    }
}

/// An opened segment reached over RDMA.
pub struct RdmaPeer {
    pub(crate) rdma: Arc<Rdma>,
    /// Segment name (the server part of the peer's NIC paths).
    pub name: String,
    /// RPC address for handshakes.
    pub rpc: (String, u16),
    /// The peer's descriptor (devices and per-device rkeys).
    pub desc: Arc<SegmentDesc>,
}

impl RdmaPeer {
    /// A peer handle.
    pub fn new(
        rdma: Arc<Rdma>,
        name: &str,
        rpc: (String, u16),
        desc: Arc<SegmentDesc>,
    ) -> Arc<RdmaPeer> {
        Arc::new(RdmaPeer {
            rdma,
            name: name.to_string(),
            rpc,
            desc,
        })
    }

    /// Moves one slice. Completion (or failure) is reported through its `SliceDone`.
    pub fn submit(self: &Arc<Self>, slice: Slice) {
        let base = self.rdma.rr.fetch_add(1, Ordering::Relaxed);
        let w = Box::new(Work {
            slice,
            peer: self.clone(),
            base,
            ep: None,
            sge: ibv_sge::default(),
            wr: ibv_send_wr::default(),
        });
        self.rdma.dispatch(w);
    }
}

impl crate::transport::Transport for Arc<RdmaPeer> {
    fn path_name(&self) -> &'static str {
        "rdma"
    }

    fn submit_all(&self, slices: Vec<Slice>) {
        for s in slices {
            self.submit(s);
        }
    }
}

impl Rdma {
    /// Picks a path for `w` (walking to the next one on each retry) and posts it. Failures that
    /// happen before posting (handshake, queue pair errors) count as attempts too.
    pub(crate) fn dispatch(&self, mut w: Box<Work>) {
        loop {
            if self.stop.load(Ordering::Acquire) {
                return w.fail(ErrorKind::Shutdown);
            }
            if Instant::now() >= w.slice.deadline {
                return w.fail(ErrorKind::Timeout);
            }
            let (op, local, remote, len) = (w.slice.op, w.slice.local, w.slice.remote, w.slice.len);
            let desc = w.peer.desc.clone();
            let Some(buf) = desc.buffer_for(remote, len) else {
                tw_log!(
                    Level::Warn,
                    "rdma: {remote:#x}+{len} is not inside a buffer {} publishes",
                    w.peer.name
                );
                return w.fail(ErrorKind::Rejected);
            };
            let npeer = buf.rkey.len().min(desc.devices.len());
            if npeer == 0 {
                tw_log!(
                    Level::Warn,
                    "rdma: {} publishes no rkey for {remote:#x}",
                    w.peer.name
                );
                return w.fail(ErrorKind::Rejected);
            }
            let nl = self.devices.len();
            let p = w.base.wrapping_add(w.slice.retries as usize);
            let li = p % nl;
            let pj = (p / nl + p) % npeer;
            let Some(lkey) = self.lkey(local, len, li) else {
                return w.fail(ErrorKind::AddressNotRegistered);
            };
            let rkey = buf.rkey[pj];
            let err = match self.endpoint(li, &w.peer, pj) {
                Ok(ep) => {
                    let qi = ep.next.fetch_add(1, Ordering::Relaxed) % ep.qps.len();
                    w.sge = ibv_sge {
                        addr: local,
                        length: len as u32,
                        lkey,
                    };
                    w.wr.opcode = match op {
                        Opcode::Read => IBV_WR_RDMA_READ,
                        Opcode::Write => IBV_WR_RDMA_WRITE,
                    };
                    w.wr.send_flags = IBV_SEND_SIGNALED;
                    w.wr.num_sge = 1;
                    w.wr.rdma_remote_addr = remote;
                    w.wr.rdma_rkey = rkey;
                    w.wr.next = std::ptr::null_mut();
                    w.ep = Some((ep.clone(), qi));
                    let mut st = ep.state[qi].lock_clean();
                    match post_locked(&ep, qi, &mut st, w) {
                        Ok(_) => return,
                        Err((back, msg)) => {
                            drop(st);
                            ep.broken.store(true, Ordering::Release);
                            w = back;
                            msg
                        }
                    }
                }
                Err(e) => e,
            };
            if w.slice.retries >= self.opts.retries {
                tw_log!(
                    Level::Warn,
                    "rdma: slice to {} failed after {} attempts: {err}",
                    w.peer.name,
                    w.slice.retries as u32 + 1
                );
                return w.fail(ErrorKind::Socket);
            }
            tw_log!(Level::Debug, "rdma: {err}; trying another path");
            w.slice.retries += 1;
            w.ep = None;
        }
    }

    /// Completion thread of device `di`: polls; when idle, spins up to 2000 empty polls (yielding
    /// every 64), then arms the CQ and sleeps on the completion channel (at most 50 ms).
    pub(crate) fn completion_loop(self: Arc<Self>, di: usize) {
        let dev = self.devices[di].clone();
        let mut wc = [ibv_wc::default(); 64];
        let mut idle_spins = 0u32;
        let mut stop_deadline: Option<Instant> = None;
        let mut last_expiry_check = Instant::now();
        loop {
            if last_expiry_check.elapsed() >= EXPIRY_CHECK_EVERY {
                self.expire(di);
                last_expiry_check = Instant::now();
            }
            if self.stop.load(Ordering::Acquire) {
                let d =
                    *stop_deadline.get_or_insert_with(|| Instant::now() + Duration::from_secs(2));
                if dev.in_flight.load(Ordering::Acquire) == 0 || Instant::now() > d {
                    return;
                }
            }
            let n = dev.poll(&mut wc);
            if n < 0 {
                tw_log!(
                    Level::Error,
                    "rdma: ibv_poll_cq on {} failed ({n})",
                    dev.name
                );
                std::thread::sleep(Duration::from_millis(10));
                continue;
            }
            if n > 0 {
                idle_spins = 0;
                for c in &wc[..n as usize] {
                    self.on_completion(c);
                }
                continue;
            }
            idle_spins += 1;
            if idle_spins < 2000 {
                std::hint::spin_loop();
                if idle_spins % 64 == 0 {
                    std::thread::yield_now();
                }
                continue;
            }
            // Arm, then poll once more so a completion that raced the arming is not missed.
            if dev.arm() != 0 {
                std::thread::sleep(Duration::from_millis(1));
                continue;
            }
            let n = dev.poll(&mut wc);
            if n > 0 {
                for c in &wc[..n as usize] {
                    self.on_completion(c);
                }
                idle_spins = 0;
                continue;
            }
            dev.wait_event(50);
            self.sweep(di);
            idle_spins = 1000;
        }
    }

    fn on_completion(&self, c: &ibv_wc) {
        // SAFETY: every signalled work request carries a `Box<Work>` leaked by `post_locked`,
        // completed exactly once.
        let mut w = unsafe { Box::from_raw(c.wr_id as *mut Work) };
        let Some((ep, qi)) = w.ep.take() else {
            return w.fail(ErrorKind::Internal);
        };
        let first_error = c.status != IBV_WC_SUCCESS && !ep.broken.swap(true, Ordering::AcqRel);
        {
            let mut st = ep.state[qi].lock_clean();
            if let Some(i) = st.posted.iter().position(|p| p.0 == c.wr_id) {
                st.posted.remove(i);
            }
            st.outstanding = st.outstanding.saturating_sub(1);
            ep.dev.in_flight.fetch_sub(1, Ordering::AcqRel);
            self.drain(&ep, qi, &mut st);
        }
        if c.status == IBV_WC_SUCCESS {
            return w.succeed();
        }
        let text = self.verbs.status_str(c.status);
        if first_error {
            tw_log!(
                Level::Warn,
                "rdma: {} {}: {text} (status {}, vendor error {:#x}); reconnecting",
                ep.dev.name,
                ep.peer_nic_path,
                c.status,
                c.vendor_err
            );
            ep.to_error();
        }
        if Instant::now() >= w.slice.deadline {
            // Its deadline passed (the queue pair was reset for it, or it failed late).
            return w.fail(ErrorKind::Timeout);
        }
        if w.slice.retries >= self.opts.retries || self.stop.load(Ordering::Acquire) {
            tw_log!(
                Level::Warn,
                "rdma: {:?} of {} bytes to {} failed after {} attempts: {text}",
                w.slice.op,
                w.slice.len,
                w.peer.name,
                w.slice.retries as u32 + 1
            );
            let kind = if c.status == IBV_WC_REM_ACCESS_ERR {
                ErrorKind::Rejected
            } else {
                ErrorKind::Socket
            };
            return w.fail(kind);
        }
        // Flushed work (behind another failure) counts too, so retries stay bounded.
        w.slice.retries += 1;
        if let Err(e) = self.retry_tx.send(w) {
            e.into_inner().fail(ErrorKind::Shutdown);
        }
    }

    /// Posts pending work of queue pair `qi` while it has room.
    fn drain(&self, ep: &Arc<Endpoint>, qi: usize, st: &mut MutexGuard<'_, QpState>) {
        while st.outstanding < ep.max_wr && !st.pending.is_empty() {
            if ep.dev.in_flight.load(Ordering::Acquire) >= CQ_DEPTH as u32 {
                return;
            }
            let w = st.pending.pop_front().expect("non-empty");
            if self.stop.load(Ordering::Acquire) {
                w.fail(ErrorKind::Shutdown);
                continue;
            }
            if Instant::now() >= w.slice.deadline {
                w.fail(ErrorKind::Timeout);
                continue;
            }
            if ep.broken.load(Ordering::Acquire) {
                let mut w = w;
                w.ep = None;
                if let Err(e) = self.retry_tx.send(w) {
                    e.into_inner().fail(ErrorKind::Shutdown);
                }
                continue;
            }
            match post_locked(ep, qi, st, w) {
                Ok(true) => {}
                // Queued again (the provider's queue is full): wait for the next completion.
                Ok(false) => return,
                Err((mut w, msg)) => {
                    tw_log!(Level::Debug, "rdma: {msg}");
                    ep.broken.store(true, Ordering::Release);
                    w.ep = None;
                    if let Err(e) = self.retry_tx.send(w) {
                        e.into_inner().fail(ErrorKind::Shutdown);
                    }
                }
            }
        }
    }

    /// Deadline pass of the completion thread: a queue pair of device `di` with posted work
    /// past its slice's deadline (`transfer_timeout_ms`: the peer or the fabric is silent) is
    /// moved to the error state. The device then flushes everything posted on it (verbs
    /// semantics): overdue slices fail as `Timeout`, the others are retried on a fresh path, and
    /// the endpoint is rebuilt by the next transfer. Pending (not yet posted) overdue work fails
    /// as it is drained.
    fn expire(&self, di: usize) {
        let now = Instant::now();
        // One lock at a time (no order to keep with other users of these maps).
        let mut eps = self.active_on(di);
        eps.extend(
            self.retired
                .lock_clean()
                .iter()
                .filter(|e| e.dev_index == di)
                .cloned(),
        );
        for ep in eps {
            let late = (0..ep.qps.len()).any(|qi| {
                let st = ep.state[qi].lock_clean();
                st.posted.iter().any(|&(_, deadline)| deadline <= now)
            });
            if late && !ep.broken.swap(true, Ordering::AcqRel) {
                tw_log!(
                    Level::Warn,
                    "rdma: {} {}: no completion by the transfer deadline; resetting its queue pairs",
                    ep.dev.name,
                    ep.peer_nic_path
                );
                ep.to_error();
            }
        }
    }

    /// The active endpoints on device `di` (a snapshot; the map's lock is released).
    fn active_on(&self, di: usize) -> Vec<Arc<Endpoint>> {
        self.active
            .lock_clean()
            .values()
            .filter(|e| e.dev_index == di)
            .cloned()
            .collect()
    }

    /// Periodic pass of the completion thread: posts work left pending (device queue was full)
    /// and destroys retired endpoints once idle.
    fn sweep(&self, di: usize) {
        let eps = self.active_on(di);
        for ep in eps {
            for qi in 0..ep.qps.len() {
                let mut st = ep.state[qi].lock_clean();
                if !st.pending.is_empty() {
                    self.drain(&ep, qi, &mut st);
                }
            }
        }
        let mut retired = self.retired.lock_clean();
        retired.retain(|ep| {
            if ep.dev_index == di && ep.idle() {
                ep.destroy();
                false
            } else {
                true
            }
        });
    }

    /// Retry thread: re-dispatches slices whose work request failed.
    pub(crate) fn retry_loop(self: Arc<Self>) {
        loop {
            match self.retry_rx.recv_timeout(Duration::from_millis(50)) {
                Ok(w) => self.dispatch(w),
                Err(crossbeam_channel::RecvTimeoutError::Timeout) => {
                    if self.stop.load(Ordering::Acquire) {
                        return;
                    }
                }
                Err(crossbeam_channel::RecvTimeoutError::Disconnected) => return,
            }
        }
    }
}

/// Posts `w` on queue pair `qi` (state lock held): `Ok(true)`; or queues it when the queue
/// pair or the device's completion queue is full: `Ok(false)`. `Err` = the provider refused it
/// (not for lack of room).
fn post_locked(
    ep: &Arc<Endpoint>,
    qi: usize,
    st: &mut QpState,
    w: Box<Work>,
) -> Result<bool, (Box<Work>, String)> {
    let dev = &ep.dev;
    if st.outstanding >= ep.max_wr || dev.in_flight.load(Ordering::Acquire) >= CQ_DEPTH as u32 {
        st.pending.push_back(w);
        return Ok(false);
    }
    st.outstanding += 1;
    dev.in_flight.fetch_add(1, Ordering::AcqRel);
    let deadline = w.slice.deadline;
    let raw = Box::into_raw(w);
    // SAFETY: `raw` is a live, uniquely owned Work until its completion is polled; the
    // completion thread takes this queue pair's lock (held here) before touching it.
    let rc = unsafe {
        (*raw).wr.wr_id = raw as u64;
        (*raw).wr.sg_list = &mut (*raw).sge;
        dev.post_send(ep.qps[qi], &mut (*raw).wr)
    };
    if rc == 0 {
        st.posted.push_back((raw as u64, deadline));
        return Ok(true);
    }
    st.outstanding -= 1;
    dev.in_flight.fetch_sub(1, Ordering::AcqRel);
    // SAFETY: not posted, so still ours.
    let w = unsafe { Box::from_raw(raw) };
    if rc == libc::ENOMEM {
        // Send queue full by the provider's count: wait for a completion on this queue pair.
        st.pending.push_back(w);
        return Ok(false);
    }
    Err((
        w,
        format!(
            "ibv_post_send on {} to {}: {}",
            dev.name,
            ep.peer_nic_path,
            std::io::Error::from_raw_os_error(rc)
        ),
    ))
}
