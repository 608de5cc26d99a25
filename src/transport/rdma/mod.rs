//! RDMA transport over verbs loaded at run time (see `README.md` here). One protection domain,
//! completion channel and completion queue per device; one memory region per device for every
//! registered region; RC queue pairs per (local device, peer device) pair, connected over the
//! RPC socket with Mooncake's handshake messages; one-sided READ/WRITE; a completion thread per
//! device; failed slices retried on another device pair.

pub mod device;
pub mod endpoint;
pub mod post;
pub mod sys;
pub mod verbs;

use crate::log::Level;
use crate::metadata::SegmentDesc;
use crate::metadata::descriptor::DeviceDesc;
use crate::sync::{LockClean, Recover, RwLockClean};
use device::{Device, gid_string, parse_gid};
use endpoint::Remote;
use post::Work;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicUsize};
use std::sync::{Arc, Mutex, RwLock};
use std::thread::JoinHandle;
use std::time::Duration;
use sys::*;
use verbs::Verbs;

pub use post::RdmaPeer;

/// Queue pairs toward one peer device, queueing this transport's work requests.
pub(crate) type Endpoint = endpoint::Endpoint<Box<Work>>;
/// Send accounting of one queue pair of an [`Endpoint`].
pub(crate) type QpState = endpoint::QpState<Box<Work>>;

/// Transport settings (from the engine configuration).
#[derive(Debug, Clone)]
pub struct Options {
    /// Device names to use; empty = every active device.
    pub devices: Vec<String>,
    /// Queue pairs per endpoint.
    pub qp_per_ep: usize,
    /// Send queue depth per queue pair.
    pub max_wr: u32,
    /// Times a failed slice is retried on another path before its task fails.
    pub retries: u8,
    /// Handshake connect/read deadline.
    pub connect_timeout: Duration,
    /// Largest handshake frame.
    pub handshake_max_len: u64,
    /// Most passive endpoints (one per sender and local device); the oldest is evicted.
    pub max_passive: usize,
    /// Key proved on handshake connections (off = none).
    pub auth_key: crate::auth::AuthKey,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            devices: Vec::new(),
            qp_per_ep: 2,
            max_wr: 256,
            retries: 8,
            connect_timeout: Duration::from_secs(5),
            handshake_max_len: crate::metadata::rpc::DEFAULT_MAX_FRAME,
            max_passive: 256,
            auth_key: crate::auth::AuthKey::default(),
        }
    }
}

/// A passive endpoint and the sequence number of the handshake that made it (eviction order).
type PassiveEndpoint = (u64, Arc<Endpoint>);

struct MrSet {
    len: u64,
    mrs: Vec<*mut ibv_mr>,
}

/// The RDMA transport of one engine.
pub struct Rdma {
    pub(crate) verbs: Arc<Verbs>,
    pub(crate) devices: Vec<Arc<Device>>,
    pub(crate) opts: Options,
    server_name: String,
    mrs: RwLock<BTreeMap<u64, MrSet>>,
    pub(crate) active: Mutex<HashMap<(usize, String), Arc<Endpoint>>>,
    /// Passive endpoints by (local device, sender), with the sequence number of their handshake.
    passive: Mutex<HashMap<(usize, String), PassiveEndpoint>>,
    passive_seq: std::sync::atomic::AtomicU64,
    pub(crate) retired: Mutex<Vec<Arc<Endpoint>>>,
    pub(crate) stop: AtomicBool,
    pub(crate) retry_tx: crossbeam_channel::Sender<Box<Work>>,
    retry_rx: crossbeam_channel::Receiver<Box<Work>>,
    threads: Mutex<Vec<JoinHandle<()>>>,
    pub(crate) rr: AtomicUsize,
}

// SAFETY: the raw MR pointers are only used under `mrs`' lock and freed in Drop.
unsafe impl Send for Rdma {}
// SAFETY: as above.
unsafe impl Sync for Rdma {}

impl Rdma {
    /// Loads verbs, opens the usable devices and starts one completion thread per device.
    /// `Err` says why RDMA is unavailable (no library, no device, every port down, ...).
    pub fn open(opts: Options, server_name: &str) -> Result<Arc<Rdma>, String> {
        let verbs = Verbs::load()?;
        let (devs, skipped) = device::discover(&verbs, &opts.devices);
        for s in &skipped {
            tw_log!(Level::Info, "rdma: skipping {s}");
        }
        if devs.is_empty() {
            let why = if skipped.is_empty() {
                format!("no RDMA device found by {}", verbs.path)
            } else {
                format!("no usable RDMA device ({})", skipped.join("; "))
            };
            return Err(why);
        }
        let (retry_tx, retry_rx) = crossbeam_channel::unbounded();
        let rdma = Arc::new(Rdma {
            verbs,
            devices: devs.into_iter().map(Arc::new).collect(),
            opts,
            server_name: server_name.to_string(),
            mrs: RwLock::default(),
            active: Mutex::default(),
            passive: Mutex::default(),
            passive_seq: std::sync::atomic::AtomicU64::new(0),
            retired: Mutex::default(),
            stop: AtomicBool::new(false),
            retry_tx,
            retry_rx,
            threads: Mutex::default(),
            rr: AtomicUsize::new(0),
        });
        let mut threads = Vec::new();
        for i in 0..rdma.devices.len() {
            let r = rdma.clone();
            threads.push(
                std::thread::Builder::new()
                    .name(format!("tw-rdma-cq{i}"))
                    .spawn(move || {
                        crate::guard::guarded("rdma completion queue", || r.completion_loop(i))
                    })
                    .map_err(|e| format!("starting completion thread: {e}"))?,
            );
        }
        let r = rdma.clone();
        threads.push(
            std::thread::Builder::new()
                .name("tw-rdma-retry".into())
                .spawn(move || crate::guard::guarded("rdma retry", || r.retry_loop()))
                .map_err(|e| format!("starting retry thread: {e}"))?,
        );
        *rdma.threads.lock_clean() = threads;
        tw_log!(
            Level::Info,
            "rdma: {} via {} ({} device(s): {})",
            server_name,
            rdma.verbs.path,
            rdma.devices.len(),
            rdma.device_names().join(", ")
        );
        Ok(rdma)
    }

    /// Names of the devices in use, in descriptor order.
    pub fn device_names(&self) -> Vec<String> {
        self.devices.iter().map(|d| d.name.clone()).collect()
    }

    /// The `devices` array of the descriptor.
    pub fn device_descs(&self) -> Vec<DeviceDesc> {
        self.devices
            .iter()
            .map(|d| DeviceDesc {
                name: d.name.clone(),
                lid: d.lid,
                gid: gid_string(&d.gid),
            })
            .collect()
    }

    /// Registers `[base, base+len)` with every device. All or nothing.
    pub fn register(&self, base: u64, len: u64, remote: bool) -> Result<(), String> {
        let mut access = IBV_ACCESS_LOCAL_WRITE;
        if remote {
            access |= IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE;
        }
        let mut mrs = Vec::with_capacity(self.devices.len());
        for d in &self.devices {
            // SAFETY: the PD is live; the range is memory the caller registered with the engine.
            let mr = unsafe { (self.verbs.reg_mr)(d.pd, base as *mut _, len as usize, access) };
            if mr.is_null() {
                let e = device::errno();
                for m in mrs {
                    // SAFETY: registered just above.
                    unsafe { (self.verbs.dereg_mr)(m) };
                }
                return Err(format!("ibv_reg_mr({base:#x}+{len}) on {}: {e}", d.name));
            }
            mrs.push(mr);
        }
        let old = self.mrs.write_clean().insert(base, MrSet { len, mrs });
        if let Some(old) = old {
            self.dereg(old);
        }
        Ok(())
    }

    fn dereg(&self, set: MrSet) {
        for m in set.mrs {
            // SAFETY: each MR is deregistered once, after leaving the map.
            let rc = unsafe { (self.verbs.dereg_mr)(m) };
            if rc != 0 {
                tw_log!(Level::Warn, "rdma: ibv_dereg_mr failed ({rc})");
            }
        }
    }

    /// Deregisters the region starting at `base` from every device.
    pub fn unregister(&self, base: u64) {
        let set = self.mrs.write_clean().remove(&base);
        if let Some(set) = set {
            self.dereg(set);
        }
    }

    /// `(rkeys, lkeys)` of the region starting at `base`, one per device.
    pub fn keys(&self, base: u64) -> Option<(Vec<u32>, Vec<u32>)> {
        let map = self.mrs.read_clean();
        let set = map.get(&base)?;
        // SAFETY: live MRs (freed only after leaving the map, under the write lock).
        Some(unsafe {
            (
                set.mrs.iter().map(|&m| (*m).rkey).collect(),
                set.mrs.iter().map(|&m| (*m).lkey).collect(),
            )
        })
    }

    /// Local key of device `dev` for `[addr, addr+len)`.
    pub(crate) fn lkey(&self, addr: u64, len: u64, dev: usize) -> Option<u32> {
        let map = self.mrs.read_clean();
        let (base, set) = map.range(..=addr).next_back()?;
        if addr.checked_add(len)? > base + set.len {
            return None;
        }
        // SAFETY: live MR, see `keys`.
        set.mrs.get(dev).map(|&m| unsafe { (*m).lkey })
    }

    fn nic_path(&self, dev: usize) -> String {
        format!("{}@{}", self.server_name, self.devices[dev].name)
    }

    /// The connected endpoint from local device `li` to `peer`'s device `pj`, creating it (and
    /// running the handshake) when missing or broken.
    pub(crate) fn endpoint(
        &self,
        li: usize,
        peer: &RdmaPeer,
        pj: usize,
    ) -> Result<Arc<Endpoint>, String> {
        let pdev = &peer.desc.devices[pj];
        let key = (li, format!("{}@{}", peer.name, pdev.name));
        let mut map = self.active.lock_clean();
        if let Some(ep) = map.get(&key) {
            if !ep.broken.load(std::sync::atomic::Ordering::Acquire) {
                return Ok(ep.clone());
            }
            let old = map.remove(&key).expect("present");
            self.retired.lock_clean().push(old);
        }
        let ep = Endpoint::create(
            self.devices[li].clone(),
            li,
            key.1.clone(),
            self.opts.qp_per_ep,
            self.opts.max_wr,
        )?;
        let dev = &self.devices[li];
        let req = serde_json::json!({
            "local_nic_path": self.nic_path(li),
            "peer_nic_path": key.1,
            "local_lid": dev.lid,
            "local_gid": gid_string(&dev.gid),
            "qp_num": ep.qpns(),
            "payload": "",
            "reply_msg": "",
        });
        let to = crate::metadata::rpc::Peer {
            host: &peer.rpc.0,
            port: peer.rpc.1,
            timeout: self.opts.connect_timeout,
            max_len: self.opts.handshake_max_len,
            key: &self.opts.auth_key,
        };
        let reply = crate::metadata::rpc::call(
            to,
            crate::metadata::rpc::MsgType::Connection,
            req.to_string().as_bytes(),
        )
        .map_err(|e| format!("handshake with {}: {}", key.1, e.message()))?;
        let v: serde_json::Value = serde_json::from_slice(&reply)
            .map_err(|e| format!("handshake reply from {}: {e}", key.1))?;
        let msg = v.get("reply_msg").and_then(|m| m.as_str()).unwrap_or("");
        if !msg.is_empty() {
            return Err(format!("{} rejected the connection: {msg}", key.1));
        }
        let their_nic = v
            .get("local_nic_path")
            .and_then(|p| p.as_str())
            .unwrap_or("")
            .rsplit('@')
            .next()
            .unwrap_or("");
        if their_nic != pdev.name {
            return Err(format!(
                "handshake reply from {} names device {their_nic:?}",
                key.1
            ));
        }
        let gid = v
            .get("local_gid")
            .and_then(|g| g.as_str())
            .and_then(parse_gid)
            .or_else(|| parse_gid(&pdev.gid))
            .ok_or_else(|| format!("{}: no valid GID", key.1))?;
        let remote = Remote {
            lid: v.get("local_lid").and_then(|l| l.as_u64()).unwrap_or(0) as u16,
            gid,
            qpns: qp_list(&v),
        };
        ep.connect(&remote)?;
        let ep = Arc::new(ep);
        map.insert(key, ep.clone());
        Ok(ep)
    }

    /// Passive side of the handshake (RPC type 0): builds queue pairs toward the sender and
    /// answers with ours. Returns the reply JSON.
    pub fn on_handshake(&self, body: &[u8]) -> String {
        match self.accept(body) {
            Ok(v) => v.to_string(),
            Err(e) => {
                tw_log!(Level::Warn, "rdma: refusing connection: {e}");
                serde_json::json!({
                    "local_gid": "", "local_lid": 0, "local_nic_path": "", "peer_nic_path": "",
                    "qp_num": [], "payload": "", "reply_msg": e,
                })
                .to_string()
            }
        }
    }

    fn accept(&self, body: &[u8]) -> Result<serde_json::Value, String> {
        if self.stop.load(std::sync::atomic::Ordering::Acquire) {
            return Err("engine is shutting down".into());
        }
        let v: serde_json::Value =
            serde_json::from_slice(body).map_err(|e| format!("malformed handshake: {e}"))?;
        let field = |k: &str| v.get(k).and_then(|x| x.as_str()).unwrap_or("").to_string();
        let sender = field("local_nic_path");
        let mine = field("peer_nic_path");
        let nic = mine.rsplit('@').next().unwrap_or("");
        let li = self
            .devices
            .iter()
            .position(|d| d.name == nic)
            .ok_or_else(|| format!("no local device {nic:?} (asked for {mine:?})"))?;
        let qpns = qp_list(&v);
        if sender.is_empty() || qpns.is_empty() || qpns.len() > 64 {
            return Err(format!(
                "bad handshake from {sender:?}: {} queue pairs",
                qpns.len()
            ));
        }
        let gid = parse_gid(&field("local_gid")).ok_or("handshake without a valid local_gid")?;
        let remote = Remote {
            lid: v.get("local_lid").and_then(|l| l.as_u64()).unwrap_or(0) as u16,
            gid,
            qpns,
        };
        self.make_room_for_passive(li, &sender);
        let ep = Endpoint::create(
            self.devices[li].clone(),
            li,
            sender.clone(),
            remote.qpns.len(),
            self.opts.max_wr,
        )?;
        ep.connect(&remote)?;
        let reply = serde_json::json!({
            "local_nic_path": self.nic_path(li),
            "peer_nic_path": sender,
            "local_lid": self.devices[li].lid,
            "local_gid": gid_string(&self.devices[li].gid),
            "qp_num": ep.qpns(),
            "payload": "",
            "reply_msg": "",
        });
        // A re-handshake from the same sender replaces its old queue pairs (dropped = destroyed:
        // nothing is ever posted on passive queue pairs).
        // Relaxed: a tie-breaker for eviction order, not a synchronisation point.
        let seq = self
            .passive_seq
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.passive
            .lock_clean()
            .insert((li, sender), (seq, Arc::new(ep)));
        Ok(reply)
    }

    /// Before a new passive endpoint from `sender` on device `li`: at the cap, the endpoint with
    /// the oldest handshake is destroyed (its sender re-handshakes if it still needs it), so that
    /// many sender names cannot hold queue pairs without bound.
    fn make_room_for_passive(&self, li: usize, sender: &str) {
        let mut map = self.passive.lock_clean();
        let key = (li, sender.to_string());
        if map.contains_key(&key) {
            return;
        }
        while map.len() >= self.opts.max_passive.max(1) {
            let Some(oldest) = map
                .iter()
                .min_by_key(|(_, (seq, _))| *seq)
                .map(|(k, _)| k.clone())
            else {
                break;
            };
            tw_log!(
                Level::Info,
                "rdma: {} passive endpoints; evicting the one from {:?}",
                map.len(),
                oldest.1
            );
            map.remove(&oldest);
        }
    }

    /// Stops the threads. Work still queued or in flight fails with `Shutdown`.
    pub fn shutdown(&self) {
        if self.stop.swap(true, std::sync::atomic::Ordering::AcqRel) {
            return;
        }
        for ep in self.active.lock_clean().values() {
            ep.to_error();
        }
        let threads = std::mem::take(&mut *self.threads.lock_clean());
        for t in threads {
            let _ = t.join();
        }
        while let Ok(w) = self.retry_rx.try_recv() {
            w.fail(crate::error::ErrorKind::Shutdown);
        }
        let eps: Vec<Arc<Endpoint>> = self
            .active
            .lock_clean()
            .drain()
            .map(|(_, e)| e)
            .chain(self.retired.lock_clean().drain(..))
            .collect();
        for ep in &eps {
            for st in &ep.state {
                let pending: Vec<Box<Work>> = st.lock_clean().pending.drain(..).collect();
                for w in pending {
                    w.fail(crate::error::ErrorKind::Shutdown);
                }
            }
        }
        self.passive.lock_clean().clear();
    }
}

fn qp_list(v: &serde_json::Value) -> Vec<u32> {
    v.get("qp_num")
        .and_then(|q| q.as_array())
        .map(|a| {
            a.iter()
                .filter_map(|x| x.as_u64())
                .map(|x| x as u32)
                .collect()
        })
        .unwrap_or_default()
}

impl Drop for Rdma {
    fn drop(&mut self) {
        self.active.get_mut().recover().clear();
        self.passive.get_mut().recover().clear();
        self.retired.get_mut().recover().clear();
        let sets = std::mem::take(self.mrs.get_mut().recover());
        for (_, s) in sets {
            self.dereg(s);
        }
    }
}

/// What a descriptor says about reaching a peer over RDMA: `Ok` when both sides can, else the
/// reason TCP is used.
pub fn peer_usable(desc: &SegmentDesc) -> Result<(), String> {
    if desc.protocol != "rdma" {
        return Err(format!("it publishes protocol {:?}", desc.protocol));
    }
    if desc.devices.is_empty() {
        return Err("it publishes no RDMA devices".into());
    }
    Ok(())
}

/// Whether an engine uses RDMA (the `rdma` option).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RdmaMode {
    /// When a device is usable (the default).
    Auto,
    /// Never.
    Off,
    /// Always: creating the engine fails when RDMA is unavailable.
    On,
}
