//! Client side: per peer, a shared queue of slices served by several lanes. A lane is one
//! persistent connection with two named threads: the sender gathers queued slices and writes
//! their headers (and WRITE payloads) with one vectored syscall, without waiting for replies
//! (pipelining); the receiver reads replies in order, straight into READ destinations.
//!
//! Failure rules: a slice whose reply says "rejected" fails as `Rejected`; when a connection
//! breaks (peer reset or close), the oldest unanswered slice on it is re-sent (at most
//! `MAX_RETRIES` times) on a fresh connection, then fails as `Socket`, and the slices behind it
//! (which the server, processing in order, never got to) are re-sent without using a retry:
//! each broken connection charges one slice, so this is bounded, and a Mooncake server that
//! closes after every rejection costs only the bad requests. A peer that refuses connections
//! fails queued slices at once and is not retried for `cooldown`. A lane reconnects only when
//! the connection its receiver found broken is still the current one (generation numbers).
//!
//! Deadlines: every slice carries its task's deadline (`transfer_timeout_ms`). Replies are
//! awaited at most until the deadline of the slice they answer; a slice past its deadline is
//! never sent or re-sent and fails as `Timeout`; connections carry keepalive and
//! `TCP_USER_TIMEOUT`, so a frozen, black-holed or half-open peer ends every task in time.
//!
//! Same-host path: a connection uses `process_vm_*` only after the kernel confirmed that the
//! peer's pid holds the server end of that very connection (`peer_identity`); a range the peer
//! reports as GPU memory is re-sent over the socket. An approval is used only within
//! `VM_APPROVAL_WINDOW` of sending its request (checked between chunks of a long copy; later,
//! the slice is re-validated), and every approval is reported over once its copy is over with a
//! "copy done" frame on the same connection (batched: carried in front of the lane's next send,
//! or written by a per-peer flusher thread a few milliseconds later; see `done.rs`), so the
//! server's `unregister` waits for exactly the copies in flight.

mod done;
mod inline;
mod pace;
mod pool;
mod reply;
mod send;

pub use inline::spread_by_default;
pub use pool::TcpClient;

use super::net::{RecvBuf, send_all};
use super::wire::{
    HEADER_LEN, Header, STATUS_ADDR_REJECTED, STATUS_LEN, STATUS_NOT_SAME_HOST, STATUS_OK,
    parse_status,
};
use crate::error::ErrorKind;
use crate::log::Level;
use crate::memory::raw;
use crate::sync::{LockClean, Recover};
use crate::transport::chan::{Receiver, Sender, TryRecvError, bounded, unbounded};
use crate::transport::{Opcode, Slice, samehost};
use reply::{LaneRx, receiver_loop};
use send::*;
use std::io::IoSlice;
use std::net::{Shutdown, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Client tuning.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// Connections (lanes) per peer.
    pub lanes: usize,
    /// Cut inline batches of [`SPREAD_MIN_BYTES`] or more over every idle lane.
    pub spread: bool,
    /// Congestion control of the lanes' connections.
    pub congestion: crate::transport::tcp::sockopt::Congestion,
    /// Connect deadline.
    pub connect_timeout: Duration,
    /// Deadline for any single socket read or write while a reply is due.
    pub io_timeout: Duration,
    /// Every slice ends within this time of its submission (its `deadline`).
    pub transfer_timeout: Duration,
    /// After a failed connect, fail new work at once for this long.
    pub cooldown: Duration,
    /// Most slices gathered into one send.
    pub gather: usize,
    /// Most slices a lane has in flight (awaiting replies).
    pub max_inflight: usize,
    /// Key proved on every new connection (off = Mooncake's plain connection).
    pub auth_key: crate::auth::AuthKey,
}

impl Default for ClientConfig {
    fn default() -> Self {
        ClientConfig {
            lanes: 2,
            spread: spread_by_default(),
            congestion: Default::default(),
            connect_timeout: Duration::from_secs(5),
            io_timeout: Duration::from_secs(30),
            transfer_timeout: Duration::from_secs(30),
            cooldown: Duration::from_millis(1000),
            gather: 256,
            max_inflight: 4096,
            auth_key: crate::auth::AuthKey::default(),
        }
    }
}

/// Where a peer's data server listens and which framing it speaks.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PeerAddr {
    /// Host name or address.
    pub host: String,
    /// Data port.
    pub port: u16,
    /// Acknowledged (v2) framing.
    pub v2: bool,
    /// Pid of a verified tidewire peer on this host (same-host path), 0 = none.
    pub vm_pid: u32,
}

enum Msg {
    Work(Slice),
    Stop,
}

/// When a validate-only (same-host) request was sent; `None` for a plain request.
type VmSent = Option<Instant>;

enum Expect {
    /// Replies now come on this stream (with its generation).
    Conn(Arc<TcpStream>, u64),
    /// A reply is due for this slice; `Some(when it was sent)` when it was sent validate-only
    /// (same-host path).
    Reply(Slice, VmSent),
    /// The peer is shutting down.
    Stop,
}

struct Shared {
    addr: PeerAddr,
    cfg: ClientConfig,
    queue: Sender<Msg>,
    shutdown: AtomicBool,
    streams: Mutex<Vec<Option<Arc<TcpStream>>>>,
    /// Per lane: generation of the connection the receiver found broken (0 = none), so the
    /// sender reconnects before sending more, and only if that is still its connection.
    broken: Vec<AtomicU64>,
    cooldown_until: Mutex<Option<Instant>>,
    /// Same-host path in use (turned off for good if the kernel refuses it).
    vm_on: AtomicBool,
    lanes_tx: Vec<Mutex<LaneTx>>,
    lanes_rx: Vec<Mutex<LaneRx>>,
    /// Per lane: messages posted to the receiver thread and not yet handled by it. Zero (seen
    /// while holding the lane's sending half) means a submitting thread may read replies itself.
    expected: Vec<AtomicUsize>,
    credit: Vec<Credit>,
    /// When the peer was started; `last_submit_ms` counts from here.
    born: Instant,
    /// Milliseconds after `born` of the latest submit (for evicting unused peers).
    last_submit_ms: AtomicU64,
    /// "Copy done" frames owed to the server (same-host path), and their flusher.
    done: done::DoneState,
    /// How the caller's recent large READs went (who reads the next ones).
    pace: pace::ReadPace,
}

impl Shared {
    fn lane_tx(&self, lane: usize) -> std::sync::MutexGuard<'_, LaneTx> {
        self.lanes_tx[lane].lock_clean()
    }

    /// The read timeout of a fresh stream: no reply is awaited longer than `io_timeout`, nor
    /// past the transfer deadline.
    fn base_read_timeout(&self) -> Duration {
        self.cfg.io_timeout.min(self.cfg.transfer_timeout)
    }

    fn lane_rx(&self, lane: usize) -> std::sync::MutexGuard<'_, LaneRx> {
        self.lanes_rx[lane].lock_clean()
    }

    /// Posts `msg` to `lane`'s receiver thread, counting it as expected until handled.
    fn post(&self, lane: usize, to: &Sender<Expect>, msg: Expect) -> Result<(), Expect> {
        // Relaxed: the count is only read by the holder of the lane's sending half, which is
        // also the only poster.
        self.expected[lane].fetch_add(1, Ordering::Relaxed);
        to.send(msg).map_err(|e| {
            self.expected[lane].fetch_sub(1, Ordering::Relaxed);
            e.into_inner()
        })
    }
}

impl Shared {
    /// Fails `s`, or re-queues it once when it was lost to a broken connection.
    fn fail_or_retry(&self, mut s: Slice, kind: ErrorKind, retryable: bool) {
        if Instant::now() >= s.deadline {
            s.done.finish(Err(ErrorKind::Timeout));
            return;
        }
        // Acquire pairs with the Release in `Peer::drop`.
        if retryable
            && kind == ErrorKind::Socket
            && s.retries < MAX_RETRIES
            && !self.shutdown.load(Ordering::Acquire)
        {
            s.retries += 1;
            if let Err(e) = self.queue.send(Msg::Work(s)) {
                if let Msg::Work(s) = e.into_inner() {
                    s.done.finish(Err(kind));
                }
            }
            return;
        }
        s.done.finish(Err(kind));
    }

    /// Re-queues `s` without using its retry: it was never executed because a rejected WRITE
    /// ahead of it ended the connection.
    fn resend(&self, s: Slice) {
        if Instant::now() >= s.deadline {
            s.done.finish(Err(ErrorKind::Timeout));
            return;
        }
        // Acquire pairs with the Release in `Peer::drop`.
        if self.shutdown.load(Ordering::Acquire) {
            s.done.finish(Err(ErrorKind::Shutdown));
            return;
        }
        if let Err(e) = self.queue.send(Msg::Work(s)) {
            if let Msg::Work(s) = e.into_inner() {
                s.done.finish(Err(ErrorKind::Shutdown));
            }
        }
    }
}

/// Times a slice is re-sent after a broken connection before it fails. Two, not one: a server
/// that closes with unread input (Mooncake after a rejection) resets the connection, and the
/// reset can drop replies it had not sent yet, so a good slice can be the oldest unanswered one
/// through no fault of its own.
const MAX_RETRIES: u8 = 2;

/// Lanes to one peer.
pub struct Peer {
    shared: Arc<Shared>,
    rx: Receiver<Msg>,
    senders: Vec<JoinHandle<()>>,
    receivers: Vec<JoinHandle<()>>,
    /// Writes owed "copy done" frames (same-host peers only).
    flusher: Option<JoinHandle<()>>,
}

/// A lane's sender stops taking work while this many bytes await replies on it.
const LANE_MAX_INFLIGHT_BYTES: u64 = 2 << 20;
/// A lane's sender gathers queued slices into one send up to this many bytes.
const GATHER_MAX_BYTES: u64 = 512 << 10;

/// Bytes sent on a lane whose replies have not been read yet.
#[derive(Default)]
struct Credit {
    /// (bytes outstanding, whether the sender sleeps waiting for them to drop).
    used: Mutex<(u64, bool)>,
    cv: Condvar,
}

impl Credit {
    fn take(&self, n: u64) {
        self.used.lock_clean().0 += n;
    }

    fn give(&self, n: u64) {
        let mut u = self.used.lock_clean();
        u.0 = u.0.saturating_sub(n);
        // Only a sleeping sender needs the (system-call) wake-up.
        if u.1 && u.0 < LANE_MAX_INFLIGHT_BYTES {
            u.1 = false;
            drop(u);
            self.cv.notify_all();
        }
    }

    /// Blocks while `limit` or more bytes are outstanding (returns at shutdown).
    fn wait_below(&self, limit: u64, shutdown: &AtomicBool) {
        let mut u = self.used.lock_clean();
        // Acquire pairs with the Release in `Peer::drop`.
        while u.0 >= limit && !shutdown.load(Ordering::Acquire) {
            u.1 = true;
            u = self.cv.wait(u).recover();
        }
    }
}

/// Gives a reply's bytes back to its lane's credit when dropped.
struct CreditBack<'a>(&'a Credit, u64);

impl Drop for CreditBack<'_> {
    fn drop(&mut self) {
        self.0.give(self.1);
    }
}

/// Payloads at least this large are read straight into their destination.
pub(crate) const DIRECT_PAYLOAD: u64 = 64 << 10;

/// Slices smaller than this stay on the socket even when the same-host path is on.
const VM_MIN_BYTES: u64 = 64 << 10;

impl crate::transport::Transport for Peer {
    fn path_name(&self) -> &'static str {
        Peer::path_name(self)
    }

    fn submit_all(&self, slices: Vec<Slice>) {
        Peer::submit_all(self, slices)
    }
}

impl Peer {
    fn start(addr: PeerAddr, cfg: ClientConfig) -> std::io::Result<Peer> {
        let (tx, rx) = unbounded();
        let lanes = cfg.lanes.max(1);
        let mut expect_rx = Vec::with_capacity(lanes);
        let mut lanes_tx = Vec::with_capacity(lanes);
        for _ in 0..lanes {
            let (etx, erx) = bounded::<Expect>(cfg.max_inflight.max(1));
            expect_rx.push(erx);
            lanes_tx.push(Mutex::new(LaneTx {
                conn: None,
                generation: 0,
                headers: Vec::with_capacity(cfg.gather),
                expect: etx,
                last_send: Instant::now(),
            }));
        }
        let cfg_read_timeout = cfg.io_timeout.min(cfg.transfer_timeout);
        let shared = Arc::new(Shared {
            addr: addr.clone(),
            cfg,
            queue: tx,
            shutdown: AtomicBool::new(false),
            streams: Mutex::new(vec![None; lanes]),
            broken: (0..lanes).map(|_| AtomicU64::new(0)).collect(),
            cooldown_until: Mutex::new(None),
            vm_on: AtomicBool::new(addr.vm_pid != 0 && addr.v2),
            lanes_tx,
            lanes_rx: (0..lanes)
                .map(|_| Mutex::new(LaneRx::new(cfg_read_timeout)))
                .collect(),
            expected: (0..lanes).map(|_| AtomicUsize::new(0)).collect(),
            credit: (0..lanes).map(|_| Credit::default()).collect(),
            born: Instant::now(),
            last_submit_ms: AtomicU64::new(0),
            done: done::DoneState::new(lanes),
            pace: pace::ReadPace::default(),
        });
        let mut peer = Peer {
            shared: shared.clone(),
            rx: rx.clone(),
            senders: Vec::with_capacity(lanes),
            receivers: Vec::with_capacity(lanes),
            flusher: None,
        };
        if shared.vm_on.load(Ordering::Relaxed) {
            let sh = shared.clone();
            peer.flusher = Some(
                std::thread::Builder::new()
                    .name(format!("tw-tcp-done-{}", shared.addr.port))
                    .spawn(move || {
                        crate::guard::guarded("tcp copy-done flusher", || done::flusher_loop(&sh))
                    })?,
            );
        }
        for (lane, erx) in expect_rx.into_iter().enumerate() {
            let (sh, q) = (shared.clone(), rx.clone());
            peer.senders.push(
                std::thread::Builder::new()
                    .name(format!("tw-tcp-lane-{}-tx{lane}", shared.addr.port))
                    .spawn(move || {
                        crate::guard::guarded("tcp lane sender", || sender_loop(&sh, lane, &q))
                    })?,
            );
            let sh = shared.clone();
            peer.receivers.push(
                std::thread::Builder::new()
                    .name(format!("tw-tcp-lane-{}-rx{lane}", shared.addr.port))
                    .spawn(move || {
                        crate::guard::guarded("tcp lane receiver", || {
                            receiver_loop(&sh, lane, &erx)
                        })
                    })?,
            );
        }
        Ok(peer)
    }

    /// Where this peer's data server is, and the pid vouched for on the same host.
    pub fn addr(&self) -> &PeerAddr {
        &self.shared.addr
    }

    /// `"same-host"` while the validated `process_vm_*` path is in use, else `"tcp"`.
    pub fn path_name(&self) -> &'static str {
        if self.shared.vm_on.load(Ordering::Relaxed) {
            "same-host"
        } else {
            "tcp"
        }
    }

    /// Sends `slices` from the calling thread, and reads their replies there, when
    /// [`inline::try_submit`] takes them; queues them for the lanes otherwise.
    pub fn submit_all(&self, slices: Vec<Slice>) {
        let sh = &self.shared;
        self.touch();
        let Err(slices) = inline::try_submit(sh, slices) else {
            return;
        };
        // One lock and at most one wake-up per lane for the whole vector.
        if let Err(e) = sh.queue.send_all(slices.into_iter().map(Msg::Work)) {
            for m in e.into_inner() {
                if let Msg::Work(s) = m {
                    s.done.finish(Err(ErrorKind::Shutdown));
                }
            }
        }
    }

    /// Records a submit now (before any of its slices can be queued).
    fn touch(&self) {
        let ms = self.shared.born.elapsed().as_millis() as u64;
        // Relaxed: a clock reading; eviction only needs it from the thread that submits or
        // from `TcpClient`, which holds the only reference when it reads it.
        self.shared.last_submit_ms.fetch_max(ms, Ordering::Relaxed);
    }

    /// Time since the latest submit (since the start when there was none).
    pub fn unused_for(&self) -> Duration {
        let last = Duration::from_millis(self.shared.last_submit_ms.load(Ordering::Relaxed));
        self.shared.born.elapsed().saturating_sub(last)
    }

    /// Queues one slice for the lanes.
    pub fn submit(&self, slice: Slice) {
        self.touch();
        if let Err(e) = self.shared.queue.send(Msg::Work(slice)) {
            if let Msg::Work(s) = e.into_inner() {
                s.done.finish(Err(ErrorKind::Shutdown));
            }
        }
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        // Same-host copies already done are reported before the connections close, so the
        // server's `unregister` need not wait for their leases to expire.
        for lane in 0..self.shared.lanes_tx.len() {
            self.shared.flush_done_if_free(lane);
        }
        // Release pairs with the Acquire loads in the lane threads.
        self.shared.shutdown.store(true, Ordering::Release);
        for _ in 0..self.shared.cfg.lanes.max(1) {
            let _ = self.shared.queue.send(Msg::Stop);
        }
        for c in &self.shared.credit {
            drop(c.used.lock_clean());
            c.cv.notify_all();
        }
        for s in self.shared.streams.lock_clean().iter().flatten() {
            let _ = s.shutdown(Shutdown::Both);
        }
        for t in self.senders.drain(..) {
            let _ = t.join();
        }
        // Senders are gone; tell each receiver to finish what it expects and exit.
        for lane in 0..self.shared.lanes_tx.len() {
            let tx = self.shared.lane_tx(lane);
            let _ = self.shared.post(lane, &tx.expect, Expect::Stop);
        }
        for t in self.receivers.drain(..) {
            let _ = t.join();
        }
        self.shared.done.stop();
        if let Some(t) = self.flusher.take() {
            let _ = t.join();
        }
        // No thread is left to re-queue: whatever is still queued fails now.
        while let Ok(m) = self.rx.try_recv() {
            if let Msg::Work(s) = m {
                s.done.finish(Err(ErrorKind::Shutdown));
            }
        }
    }
}
