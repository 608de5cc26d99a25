//! RC queue pairs toward one peer device: creation, the RESET → INIT → RTR → RTS state machine,
//! and per-queue-pair send accounting (work that does not fit waits in a pending queue).

use super::device::{Device, errno};
use super::sys::*;
use crate::sync::LockClean;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// Connection parameters of one side (what the handshake carries).
#[derive(Debug, Clone)]
pub struct Remote {
    /// Port LID.
    pub lid: u16,
    /// GID to address.
    pub gid: ibv_gid,
    /// Queue pair numbers, in order.
    pub qpns: Vec<u32>,
}

/// Per-queue-pair send state. `W` is the unit of work waiting for room (the posting code's
/// work request); generic so that this file does not depend on the code that posts.
pub(crate) struct QpState<W> {
    pub outstanding: u32,
    pub pending: VecDeque<W>,
    /// Posted work requests awaiting their completion: (work request id, slice deadline), in
    /// posting order (an RC send queue completes in that order).
    pub posted: VecDeque<(u64, std::time::Instant)>,
}

impl<W> Default for QpState<W> {
    fn default() -> Self {
        QpState {
            outstanding: 0,
            pending: VecDeque::new(),
            posted: VecDeque::new(),
        }
    }
}

/// Queue pairs of one (local device, peer device) pair.
pub struct Endpoint<W> {
    pub(crate) dev: Arc<Device>,
    /// Index of `dev` in the transport's device list.
    pub(crate) dev_index: usize,
    /// `"server@nic"` of the peer device.
    pub peer_nic_path: String,
    pub(crate) qps: Vec<*mut ibv_qp>,
    pub(crate) max_wr: u32,
    pub(crate) state: Vec<Mutex<QpState<W>>>,
    pub(crate) next: AtomicUsize,
    pub(crate) broken: AtomicBool,
    destroyed: AtomicBool,
}

// SAFETY: queue pairs are thread-safe verbs objects; they are destroyed once, in `destroy`.
unsafe impl<W: Send> Send for Endpoint<W> {}
// SAFETY: as above.
unsafe impl<W: Send> Sync for Endpoint<W> {}

impl<W> Endpoint<W> {
    /// Creates `n` RC queue pairs on `dev` and moves them to INIT.
    pub fn create(
        dev: Arc<Device>,
        dev_index: usize,
        peer_nic_path: String,
        n: usize,
        max_wr: u32,
    ) -> Result<Endpoint<W>, String> {
        let mut ep = Endpoint {
            dev: dev.clone(),
            dev_index,
            peer_nic_path,
            qps: Vec::with_capacity(n),
            max_wr,
            state: Vec::new(),
            next: AtomicUsize::new(0),
            broken: AtomicBool::new(false),
            destroyed: AtomicBool::new(false),
        };
        for _ in 0..n {
            let mut init = ibv_qp_init_attr {
                qp_context: std::ptr::null_mut(),
                send_cq: dev.cq,
                recv_cq: dev.cq,
                srq: std::ptr::null_mut(),
                cap: ibv_qp_cap {
                    max_send_wr: max_wr,
                    max_recv_wr: max_wr,
                    max_send_sge: 4,
                    max_recv_sge: 4,
                    max_inline_data: 64,
                },
                qp_type: IBV_QPT_RC,
                sq_sig_all: 0,
            };
            // SAFETY: the PD and CQ are live; `init` is a valid attribute block.
            let qp = unsafe { (dev.verbs.create_qp)(dev.pd, &mut init) };
            if qp.is_null() {
                return Err(format!("{}: ibv_create_qp failed: {}", dev.name, errno()));
            }
            ep.qps.push(qp);
            ep.max_wr = ep.max_wr.min(init.cap.max_send_wr.max(1));
            ep.state.push(Mutex::default());
        }
        for &qp in &ep.qps {
            let mut a = ibv_qp_attr {
                qp_state: IBV_QPS_INIT,
                port_num: dev.port,
                pkey_index: 0,
                qp_access_flags: (IBV_ACCESS_LOCAL_WRITE
                    | IBV_ACCESS_REMOTE_READ
                    | IBV_ACCESS_REMOTE_WRITE
                    | IBV_ACCESS_REMOTE_ATOMIC) as u32,
                ..Default::default()
            };
            ep.modify(
                qp,
                &mut a,
                IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS,
                "INIT",
            )?;
        }
        Ok(ep)
    }

    fn modify(
        &self,
        qp: *mut ibv_qp,
        a: &mut ibv_qp_attr,
        mask: i32,
        to: &str,
    ) -> Result<(), String> {
        // SAFETY: `qp` belongs to this endpoint and is live; `a` is a valid attribute block.
        let rc = unsafe { (self.dev.verbs.modify_qp)(qp, a, mask) };
        if rc != 0 {
            return Err(format!(
                "{}: ibv_modify_qp to {to} failed: {}",
                self.dev.name,
                std::io::Error::from_raw_os_error(rc)
            ));
        }
        Ok(())
    }

    /// Local queue pair numbers.
    pub fn qpns(&self) -> Vec<u32> {
        // SAFETY: live queue pairs.
        self.qps.iter().map(|&q| unsafe { (*q).qp_num }).collect()
    }

    /// Moves every queue pair to RTR then RTS toward `remote` (same count as ours).
    pub fn connect(&self, remote: &Remote) -> Result<(), String> {
        if remote.qpns.len() != self.qps.len() {
            return Err(format!(
                "QP count mismatch: {} local, {} remote",
                self.qps.len(),
                remote.qpns.len()
            ));
        }
        for (&qp, &dest) in self.qps.iter().zip(&remote.qpns) {
            let mut a = ibv_qp_attr {
                qp_state: IBV_QPS_RTR,
                path_mtu: self.dev.mtu,
                dest_qp_num: dest,
                rq_psn: 0,
                max_dest_rd_atomic: 16,
                min_rnr_timer: 12,
                ..Default::default()
            };
            a.ah_attr.is_global = 1;
            a.ah_attr.grh.dgid = remote.gid;
            a.ah_attr.grh.sgid_index = self.dev.gid_index;
            a.ah_attr.grh.hop_limit = 16;
            a.ah_attr.grh.traffic_class = std::env::var("MC_IB_TC")
                .ok()
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0);
            a.ah_attr.dlid = remote.lid;
            a.ah_attr.sl = std::env::var("MC_IB_SL")
                .ok()
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0);
            a.ah_attr.port_num = self.dev.port;
            self.modify(
                qp,
                &mut a,
                IBV_QP_STATE
                    | IBV_QP_AV
                    | IBV_QP_PATH_MTU
                    | IBV_QP_DEST_QPN
                    | IBV_QP_RQ_PSN
                    | IBV_QP_MAX_DEST_RD_ATOMIC
                    | IBV_QP_MIN_RNR_TIMER,
                "RTR",
            )?;
            let mut a = ibv_qp_attr {
                qp_state: IBV_QPS_RTS,
                timeout: 14,
                retry_cnt: 7,
                rnr_retry: 7,
                sq_psn: 0,
                max_rd_atomic: 16,
                ..Default::default()
            };
            self.modify(
                qp,
                &mut a,
                IBV_QP_STATE
                    | IBV_QP_TIMEOUT
                    | IBV_QP_RETRY_CNT
                    | IBV_QP_RNR_RETRY
                    | IBV_QP_SQ_PSN
                    | IBV_QP_MAX_QP_RD_ATOMIC,
                "RTS",
            )?;
        }
        Ok(())
    }

    /// Moves every queue pair to ERR (outstanding work flushes).
    pub fn to_error(&self) {
        for &qp in &self.qps {
            let mut a = ibv_qp_attr {
                qp_state: IBV_QPS_ERR,
                ..Default::default()
            };
            let _ = self.modify(qp, &mut a, IBV_QP_STATE, "ERR");
        }
    }

    /// True when nothing is posted or waiting on any queue pair.
    pub(crate) fn idle(&self) -> bool {
        self.state.iter().all(|s| {
            let s = s.lock_clean();
            s.outstanding == 0 && s.pending.is_empty()
        })
    }

    /// Destroys the queue pairs (once; callers make sure nothing is in flight).
    pub(crate) fn destroy(&self) {
        if self.destroyed.swap(true, Ordering::AcqRel) {
            return;
        }
        for &qp in &self.qps {
            // SAFETY: created here, destroyed once (guarded by `destroyed`).
            unsafe { (self.dev.verbs.destroy_qp)(qp) };
        }
    }
}

impl<W> Drop for Endpoint<W> {
    fn drop(&mut self) {
        self.destroy();
    }
}
