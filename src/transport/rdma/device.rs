//! One RDMA device context: protection domain, completion channel and queue, port attributes and
//! GID. Opened by discovery; closed when the transport drops.

use super::sys::*;
use super::verbs::Verbs;
use std::ffi::CStr;
use std::sync::Arc;
use std::sync::atomic::AtomicU32;

/// Completion queue depth per device (Mooncake's `max_cqe`).
pub const CQ_DEPTH: i32 = 4096;

/// An opened, usable device.
pub struct Device {
    pub(crate) verbs: Arc<Verbs>,
    /// Kernel device name (`mlx5_0`).
    pub name: String,
    pub(crate) ctx: *mut ibv_context,
    pub(crate) pd: *mut ibv_pd,
    pub(crate) channel: *mut ibv_comp_channel,
    pub(crate) cq: *mut ibv_cq,
    /// Port used (1).
    pub port: u8,
    /// Port LID (0 on RoCE).
    pub lid: u16,
    /// GID used for connections.
    pub gid: ibv_gid,
    /// Its index in the port's GID table.
    pub gid_index: u8,
    /// Active MTU enum (`IBV_MTU_*`).
    pub mtu: i32,
    /// Work requests posted and not yet completed on this device (bounded by `CQ_DEPTH`).
    pub(crate) in_flight: AtomicU32,
}

// SAFETY: the verbs objects are thread-safe by the verbs contract; the pointers are only freed
// in `Drop`, after every thread that uses them has been joined.
unsafe impl Send for Device {}
// SAFETY: as above.
unsafe impl Sync for Device {}

/// Formats a GID as Mooncake does: 16 lowercase hex bytes joined by `:`.
pub fn gid_string(g: &ibv_gid) -> String {
    g.raw
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// Parses [`gid_string`]'s format.
pub fn parse_gid(s: &str) -> Option<ibv_gid> {
    let mut g = ibv_gid::default();
    let parts: Vec<&str> = s.split(':').collect();
    if parts.len() != 16 {
        return None;
    }
    for (i, p) in parts.iter().enumerate() {
        g.raw[i] = u8::from_str_radix(p, 16).ok()?;
    }
    Some(g)
}

/// Picks a GID index: `MC_GID_INDEX`/`NCCL_IB_GID_INDEX` when set, else the first RoCE v2
/// IPv4-mapped GID (sysfs `gid_attrs/types`), else the first non-zero GID.
fn pick_gid(
    verbs: &Verbs,
    ctx: *mut ibv_context,
    name: &str,
    tbl_len: i32,
) -> Option<(u8, ibv_gid)> {
    let query = |i: i32| {
        let mut g = ibv_gid::default();
        // SAFETY: `ctx` is an open context; `g` is a valid out-parameter.
        let rc = unsafe { (verbs.query_gid)(ctx, 1, i, &mut g) };
        (rc == 0 && g.raw != [0u8; 16]).then_some(g)
    };
    for var in ["MC_GID_INDEX", "NCCL_IB_GID_INDEX"] {
        if let Some(i) = std::env::var(var)
            .ok()
            .and_then(|v| v.trim().parse::<u8>().ok())
        {
            return query(i32::from(i)).map(|g| (i, g));
        }
    }
    let n = tbl_len.clamp(1, 256);
    let mut first = None;
    for i in 0..n {
        let Some(g) = query(i) else { continue };
        first.get_or_insert((i as u8, g));
        let ty = std::fs::read_to_string(format!(
            "/sys/class/infiniband/{name}/ports/1/gid_attrs/types/{i}"
        ))
        .unwrap_or_default();
        let v4_mapped = g.raw[..10] == [0u8; 10] && g.raw[10] == 0xff && g.raw[11] == 0xff;
        if ty.trim().eq_ignore_ascii_case("RoCE v2") && v4_mapped {
            return Some((i as u8, g));
        }
    }
    first
}

impl Device {
    /// Opens `dev` and allocates its PD, completion channel and CQ. `Err` = not usable (reason).
    pub(crate) fn open(verbs: &Arc<Verbs>, dev: *mut ibv_device) -> Result<Device, String> {
        // SAFETY: `dev` comes from the current device list.
        let name = unsafe { CStr::from_ptr((verbs.get_device_name)(dev)) }
            .to_string_lossy()
            .into_owned();
        // SAFETY: as above.
        let ctx = unsafe { (verbs.open_device)(dev) };
        if ctx.is_null() {
            return Err(format!("{name}: ibv_open_device failed: {}", errno()));
        }
        let mut d = Device {
            verbs: verbs.clone(),
            name: name.clone(),
            ctx,
            pd: std::ptr::null_mut(),
            channel: std::ptr::null_mut(),
            cq: std::ptr::null_mut(),
            port: 1,
            lid: 0,
            gid: ibv_gid::default(),
            gid_index: 0,
            mtu: IBV_MTU_1024,
            in_flight: AtomicU32::new(0),
        };
        // From here `d`'s Drop releases whatever was allocated.
        let mut attr = ibv_port_attr::default();
        // SAFETY: `ctx` is open; `attr` is larger than the compat prefix libibverbs writes.
        let rc = unsafe { (verbs.query_port)(ctx, 1, &mut attr) };
        if rc != 0 {
            return Err(format!("{name}: ibv_query_port failed ({rc})"));
        }
        if attr.state != IBV_PORT_ACTIVE {
            return Err(format!(
                "{name}: port 1 is not active (state {})",
                attr.state
            ));
        }
        d.lid = attr.lid;
        let mtu_cap = std::env::var("MC_MTU")
            .ok()
            .and_then(|v| v.trim().parse::<i32>().ok())
            .map(|b| match b {
                256 => 1,
                512 => 2,
                1024 => 3,
                2048 => 4,
                _ => IBV_MTU_4096,
            })
            .unwrap_or(IBV_MTU_4096);
        d.mtu = attr.active_mtu.clamp(1, IBV_MTU_4096).min(mtu_cap);
        let (gi, gid) = pick_gid(verbs, ctx, &name, attr.gid_tbl_len)
            .ok_or_else(|| format!("{name}: no usable GID"))?;
        d.gid_index = gi;
        d.gid = gid;
        // SAFETY: `ctx` is open.
        d.pd = unsafe { (verbs.alloc_pd)(ctx) };
        if d.pd.is_null() {
            return Err(format!("{name}: ibv_alloc_pd failed: {}", errno()));
        }
        // SAFETY: `ctx` is open.
        d.channel = unsafe { (verbs.create_comp_channel)(ctx) };
        if d.channel.is_null() {
            return Err(format!(
                "{name}: ibv_create_comp_channel failed: {}",
                errno()
            ));
        }
        // SAFETY: `ctx` and `channel` are live.
        d.cq = unsafe { (verbs.create_cq)(ctx, CQ_DEPTH, std::ptr::null_mut(), d.channel, 0) };
        if d.cq.is_null() {
            return Err(format!("{name}: ibv_create_cq failed: {}", errno()));
        }
        // SAFETY: `ctx` is open; the ops table is part of the context.
        if unsafe {
            (*ctx).ops.poll_cq.is_none()
                || (*ctx).ops.post_send.is_none()
                || (*ctx).ops.req_notify_cq.is_none()
        } {
            return Err(format!("{name}: provider ops table lacks data-path calls"));
        }
        Ok(d)
    }

    /// `ibv_poll_cq` through the ops table.
    pub(crate) fn poll(&self, wc: &mut [ibv_wc]) -> i32 {
        // SAFETY: checked non-None in `open`; `wc` holds `len` entries.
        unsafe {
            let f = (*self.ctx).ops.poll_cq.unwrap_unchecked();
            f(self.cq, wc.len() as i32, wc.as_mut_ptr())
        }
    }

    /// `ibv_req_notify_cq` through the ops table.
    pub(crate) fn arm(&self) -> i32 {
        // SAFETY: checked non-None in `open`.
        unsafe {
            let f = (*self.ctx).ops.req_notify_cq.unwrap_unchecked();
            f(self.cq, 0)
        }
    }

    /// `ibv_post_send` through the ops table.
    pub(crate) fn post_send(&self, qp: *mut ibv_qp, wr: &mut ibv_send_wr) -> i32 {
        let mut bad: *mut ibv_send_wr = std::ptr::null_mut();
        // SAFETY: checked non-None in `open`; `wr` and its SGE outlive the call.
        unsafe {
            let f = (*self.ctx).ops.post_send.unwrap_unchecked();
            f(qp, wr, &mut bad)
        }
    }

    /// Waits up to `ms` for a completion event; acknowledges it.
    pub(crate) fn wait_event(&self, ms: i32) {
        // SAFETY: the channel is live until Drop.
        let fd = unsafe { (*self.channel).fd };
        let mut p = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        let n = unsafe { libc::poll(&mut p, 1, ms) };
        if n > 0 && p.revents & libc::POLLIN != 0 {
            let mut cq = std::ptr::null_mut();
            let mut ctx = std::ptr::null_mut();
            // SAFETY: the fd is readable, so this does not block; out-pointers are valid.
            if unsafe { (self.verbs.get_cq_event)(self.channel, &mut cq, &mut ctx) } == 0 {
                // SAFETY: `cq` is the CQ the event was for.
                unsafe { (self.verbs.ack_cq_events)(cq, 1) };
            }
        }
    }
}

impl Drop for Device {
    fn drop(&mut self) {
        let v = &self.verbs;
        // SAFETY: each object was created here and is destroyed once, children first.
        unsafe {
            if !self.cq.is_null() {
                (v.destroy_cq)(self.cq);
            }
            if !self.channel.is_null() {
                (v.destroy_comp_channel)(self.channel);
            }
            if !self.pd.is_null() {
                (v.dealloc_pd)(self.pd);
            }
            (v.close_device)(self.ctx);
        }
    }
}

pub(crate) fn errno() -> std::io::Error {
    std::io::Error::last_os_error()
}

/// Opens every device whose port is active and whose name passes `filter` (empty = all).
/// Returns the usable devices and one line per skipped device.
pub fn discover(verbs: &Arc<Verbs>, filter: &[String]) -> (Vec<Device>, Vec<String>) {
    let mut n = 0;
    // SAFETY: `n` is a valid out-parameter.
    let list = unsafe { (verbs.get_device_list)(&mut n) };
    if list.is_null() {
        return (
            Vec::new(),
            vec![format!("ibv_get_device_list failed: {}", errno())],
        );
    }
    let mut out = Vec::new();
    let mut skipped = Vec::new();
    for i in 0..n.max(0) as usize {
        // SAFETY: the list holds `n` entries.
        let dev = unsafe { *list.add(i) };
        if dev.is_null() {
            break;
        }
        // SAFETY: `dev` is in the live list.
        let name = unsafe { CStr::from_ptr((verbs.get_device_name)(dev)) }
            .to_string_lossy()
            .into_owned();
        if !filter.is_empty() && !filter.iter().any(|f| f == &name) {
            skipped.push(format!("{name}: not in the device filter"));
            continue;
        }
        match Device::open(verbs, dev) {
            Ok(d) => out.push(d),
            Err(e) => skipped.push(e),
        }
    }
    // SAFETY: frees the list returned above (the opened contexts stay valid).
    unsafe { (verbs.free_device_list)(list) };
    (out, skipped)
}
