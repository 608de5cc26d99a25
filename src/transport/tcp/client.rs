//! Client side: per peer, a shared queue of slices served by several lanes. A lane is one
//! persistent connection with two named threads: the sender gathers queued slices and writes
//! their headers (and WRITE payloads) with one vectored syscall, without waiting for replies
//! (pipelining); the receiver reads replies in order, straight into READ destinations.
//!
//! Failure rules: a slice whose reply says "rejected" fails as `Rejected`; a slice lost to a
//! broken connection (peer reset) is re-sent once on a fresh connection, then fails as `Socket`;
//! a slice lost because a rejection ahead of it made the server close the stream (Mooncake
//! closes after any rejection, tidewire after a rejected WRITE) is re-sent without using that
//! retry (each rejection is final, so this is bounded); a peer that refuses connections fails
//! queued slices at once and is not retried for `cooldown`. A lane reconnects only when the
//! connection its receiver found broken is still the current one (generation numbers).

use super::net::{RecvBuf, send_all};
use super::wire::{HEADER_LEN, Header, STATUS_ADDR_REJECTED, STATUS_LEN, STATUS_OK, parse_status};
use crate::error::ErrorKind;
use crate::log::Level;
use crate::memory::raw;
use crate::transport::chan::{Receiver, Sender, TryRecvError, bounded, unbounded};
use crate::transport::{Opcode, Slice, samehost};
use std::collections::HashMap;
use std::io::IoSlice;
use std::net::{Shutdown, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Client tuning.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// Connections (lanes) per peer.
    pub lanes: usize,
    /// Connect deadline.
    pub connect_timeout: Duration,
    /// Deadline for any single socket read or write while a reply is due.
    pub io_timeout: Duration,
    /// After a failed connect, fail new work at once for this long.
    pub cooldown: Duration,
    /// Most slices gathered into one send.
    pub gather: usize,
    /// Most slices a lane has in flight (awaiting replies).
    pub max_inflight: usize,
}

impl Default for ClientConfig {
    fn default() -> Self {
        ClientConfig {
            lanes: 2,
            connect_timeout: Duration::from_secs(5),
            io_timeout: Duration::from_secs(30),
            cooldown: Duration::from_millis(1000),
            gather: 256,
            max_inflight: 4096,
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

enum Expect {
    /// Replies now come on this stream (with its generation).
    Conn(Arc<TcpStream>, u64),
    /// A reply is due for this slice; `true` when it was sent validate-only (same-host path).
    Reply(Slice, bool),
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
    credit: Vec<Credit>,
}

impl Shared {
    fn lane_tx(&self, lane: usize) -> std::sync::MutexGuard<'_, LaneTx> {
        self.lanes_tx[lane]
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }
}

impl Shared {
    /// Fails `s`, or re-queues it once when it was lost to a broken connection.
    fn fail_or_retry(&self, mut s: Slice, kind: ErrorKind, retryable: bool) {
        // Acquire pairs with the Release in `Peer::drop`.
        if retryable
            && kind == ErrorKind::Socket
            && s.retries < 1
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

/// Lanes to one peer.
pub struct Peer {
    shared: Arc<Shared>,
    rx: Receiver<Msg>,
    senders: Vec<JoinHandle<()>>,
    receivers: Vec<JoinHandle<()>>,
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
        self.used.lock().unwrap_or_else(|e| e.into_inner()).0 += n;
    }

    fn give(&self, n: u64) {
        let mut u = self.used.lock().unwrap_or_else(|e| e.into_inner());
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
        let mut u = self.used.lock().unwrap_or_else(|e| e.into_inner());
        // Acquire pairs with the Release in `Peer::drop`.
        while u.0 >= limit && !shutdown.load(Ordering::Acquire) {
            u.1 = true;
            u = self.cv.wait(u).unwrap_or_else(|e| e.into_inner());
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

/// Requests up to this many bytes in all may be written by the submitting thread itself when a
/// lane is idle; larger ones are queued so that the lanes share them.
const INLINE_MAX_BYTES: u64 = 64 << 10;

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
            }));
        }
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
            credit: (0..lanes).map(|_| Credit::default()).collect(),
        });
        let mut peer = Peer {
            shared: shared.clone(),
            rx: rx.clone(),
            senders: Vec::with_capacity(lanes),
            receivers: Vec::with_capacity(lanes),
        };
        for (lane, erx) in expect_rx.into_iter().enumerate() {
            let (sh, q) = (shared.clone(), rx.clone());
            peer.senders.push(
                std::thread::Builder::new()
                    .name(format!("tw-tcp-lane-{}-tx{lane}", shared.addr.port))
                    .spawn(move || sender_loop(&sh, lane, &q))?,
            );
            let sh = shared.clone();
            peer.receivers.push(
                std::thread::Builder::new()
                    .name(format!("tw-tcp-lane-{}-rx{lane}", shared.addr.port))
                    .spawn(move || receiver_loop(&sh, lane, &erx))?,
            );
        }
        Ok(peer)
    }

    /// `"same-host"` while the validated `process_vm_*` path is in use, else `"tcp"`.
    pub fn path_name(&self) -> &'static str {
        if self.shared.vm_on.load(Ordering::Relaxed) {
            "same-host"
        } else {
            "tcp"
        }
    }

    /// Sends `slices` from the calling thread when they are small, nothing is queued and a lane
    /// is idle; queues them for the lanes otherwise.
    pub fn submit_all(&self, mut slices: Vec<Slice>) {
        let sh = &self.shared;
        // GPU slices always go to the lanes: staging runs on a lane's own stream and buffers,
        // never on the application's thread.
        let (bytes, gpu) = slices
            .iter()
            .fold((0u64, false), |(b, g), s| (b + s.len, g || s.gpu.is_some()));
        if !gpu && bytes <= INLINE_MAX_BYTES && slices.len() <= sh.cfg.gather && sh.queue.is_empty()
        {
            for (lane, m) in sh.lanes_tx.iter().enumerate() {
                let guard = match m.try_lock() {
                    Ok(g) => Some(g),
                    Err(std::sync::TryLockError::Poisoned(p)) => Some(p.into_inner()),
                    Err(std::sync::TryLockError::WouldBlock) => None,
                };
                if let Some(mut tx) = guard {
                    tx.send(sh, lane, &mut slices);
                    return;
                }
            }
        }
        for s in slices {
            self.submit(s);
        }
    }

    /// Queues one slice for the lanes.
    pub fn submit(&self, slice: Slice) {
        if let Err(e) = self.shared.queue.send(Msg::Work(slice)) {
            if let Msg::Work(s) = e.into_inner() {
                s.done.finish(Err(ErrorKind::Shutdown));
            }
        }
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        // Release pairs with the Acquire loads in the lane threads.
        self.shared.shutdown.store(true, Ordering::Release);
        for _ in 0..self.shared.cfg.lanes.max(1) {
            let _ = self.shared.queue.send(Msg::Stop);
        }
        for c in &self.shared.credit {
            drop(c.used.lock().unwrap_or_else(|e| e.into_inner()));
            c.cv.notify_all();
        }
        for s in self
            .shared
            .streams
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .flatten()
        {
            let _ = s.shutdown(Shutdown::Both);
        }
        for t in self.senders.drain(..) {
            let _ = t.join();
        }
        // Senders are gone; tell each receiver to finish what it expects and exit.
        for lane in 0..self.shared.lanes_tx.len() {
            let _ = self.shared.lane_tx(lane).expect.send(Expect::Stop);
        }
        for t in self.receivers.drain(..) {
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

fn connect(sh: &Shared) -> Result<TcpStream, String> {
    let addrs = crate::metadata::resolve(&sh.addr.host, sh.addr.port).map_err(|e| e.to_string())?;
    let mut last = String::new();
    for a in addrs {
        match TcpStream::connect_timeout(&a, sh.cfg.connect_timeout) {
            Ok(s) => {
                let _ = s.set_nodelay(true);
                let _ = s.set_read_timeout(Some(sh.cfg.io_timeout));
                let _ = s.set_write_timeout(Some(sh.cfg.io_timeout));
                return Ok(s);
            }
            Err(e) => last = format!("{a}: {e}"),
        }
    }
    Err(last)
}

fn sender_loop(sh: &Shared, lane: usize, queue: &Receiver<Msg>) {
    let mut batch: Vec<Slice> = Vec::with_capacity(sh.cfg.gather);
    let mut stopping = false;
    while !stopping {
        // Take new work only while this lane's replies are not too far behind, so that large
        // transfers spread over every lane instead of piling up behind one.
        sh.credit[lane].wait_below(LANE_MAX_INFLIGHT_BYTES, &sh.shutdown);
        let mut bytes = 0;
        match queue.recv() {
            Ok(Msg::Work(s)) => {
                bytes += s.len;
                batch.push(s);
            }
            Ok(Msg::Stop) | Err(_) => break,
        }
        while batch.len() < sh.cfg.gather && bytes < GATHER_MAX_BYTES {
            match queue.try_recv() {
                Ok(Msg::Work(s)) => {
                    bytes += s.len;
                    batch.push(s);
                }
                Ok(Msg::Stop) => {
                    stopping = true;
                    break;
                }
                Err(TryRecvError::Empty | TryRecvError::Disconnected) => break,
            }
        }
        sh.lane_tx(lane).send(sh, lane, &mut batch);
    }
    if let Some(s) = sh.lane_tx(lane).conn.take() {
        let _ = s.shutdown(Shutdown::Both);
    }
}

/// The sending half of a lane. Its lock is held while writing, by the lane's sender thread or
/// by a submitting thread that found the lane idle (inline send, one thread wake-up less).
struct LaneTx {
    conn: Option<Arc<TcpStream>>,
    /// Generation of `conn` (counts connections made by this lane, from 1).
    generation: u64,
    headers: Vec<[u8; HEADER_LEN]>,
    expect: Sender<Expect>,
}

impl LaneTx {
    /// Sends `batch` (emptied) on this lane, connecting first if needed.
    fn send(&mut self, sh: &Shared, lane: usize, batch: &mut Vec<Slice>) {
        // Acquire pairs with the Release in `Peer::drop`.
        if sh.shutdown.load(Ordering::Acquire) {
            batch
                .drain(..)
                .for_each(|s| s.done.finish(Err(ErrorKind::Shutdown)));
            return;
        }
        // Acquire pairs with the receiver's Release when it marks a connection broken.
        if self.conn.is_some() && sh.broken[lane].load(Ordering::Acquire) == self.generation {
            if let Some(old) = self.conn.take() {
                let _ = old.shutdown(Shutdown::Both);
            }
        }
        if self.conn.is_none() {
            self.generation += 1;
            self.conn = open_lane(sh, lane, self.generation, &self.expect);
            if self.conn.is_none() {
                batch
                    .drain(..)
                    .for_each(|s| s.done.finish(Err(ErrorKind::Socket)));
                return;
            }
        }
        let stream = self.conn.as_ref().expect("connected").clone();
        if let Err(e) = send_batch(sh, lane, &stream, batch, &mut self.headers, &self.expect) {
            tw_log!(
                Level::Warn,
                "tcp lane to {}:{}: send failed: {e}",
                sh.addr.host,
                sh.addr.port
            );
            // The receiver sees the shutdown and fails or re-sends what it was expecting.
            let _ = stream.shutdown(Shutdown::Both);
            self.conn = None;
        }
    }
}

fn open_lane(
    sh: &Shared,
    lane: usize,
    generation: u64,
    expect: &Sender<Expect>,
) -> Option<Arc<TcpStream>> {
    let mut cd = sh.cooldown_until.lock().unwrap_or_else(|e| e.into_inner());
    if cd.is_some_and(|t| Instant::now() < t) {
        return None;
    }
    match connect(sh) {
        Ok(s) => {
            *cd = None;
            drop(cd);
            let s = Arc::new(s);
            sh.streams.lock().unwrap_or_else(|e| e.into_inner())[lane] = Some(s.clone());
            // The receiver switches to the new stream before any reply on it is expected.
            expect.send(Expect::Conn(s.clone(), generation)).ok()?;
            Some(s)
        }
        Err(e) => {
            tw_log!(
                Level::Warn,
                "tcp: cannot connect to {}:{}: {e}",
                sh.addr.host,
                sh.addr.port
            );
            *cd = Some(Instant::now() + sh.cfg.cooldown);
            None
        }
    }
}

/// Writes the headers (and WRITE payloads) of `batch` in one vectored send. Slices that expect a
/// reply are handed to the receiver first; v1 WRITEs complete once their bytes are sent.
fn send_batch(
    sh: &Shared,
    lane: usize,
    stream: &TcpStream,
    batch: &mut Vec<Slice>,
    headers: &mut Vec<[u8; HEADER_LEN]>,
    expect: &Sender<Expect>,
) -> std::io::Result<()> {
    let v2 = sh.addr.v2;
    // Relaxed: a stale value only means one more batch on the path that was just turned off,
    // which fails over by itself.
    let vm_on = sh.vm_on.load(Ordering::Relaxed);
    // Small requests are cheaper inline on the socket than as a validation round trip plus a
    // separate copy. GPU memory never takes the same-host kernel copy: it is staged over the
    // socket.
    let vm = |s: &Slice| vm_on && s.len >= VM_MIN_BYTES && s.gpu.is_none();
    headers.clear();
    headers.extend(batch.iter().map(|s| {
        Header {
            size: s.len,
            addr: s.remote,
            write: s.op == Opcode::Write,
            v2,
            vm: vm(s),
        }
        .encode()
    }));
    let mut iov: Vec<IoSlice<'_>> = Vec::with_capacity(batch.len() * 2);
    // WRITE payloads in GPU memory: (position in `iov`, device, address, length).
    let mut staged: Vec<(usize, u32, u64, usize)> = Vec::new();
    for (s, h) in batch.iter().zip(headers.iter()) {
        iov.push(IoSlice::new(h));
        if s.op == Opcode::Write && !vm(s) {
            match s.gpu {
                Some(dev) => staged.push((iov.len(), dev, s.local, s.len as usize)),
                // SAFETY: the local range was checked against the registry at submit time.
                None => iov.push(IoSlice::new(unsafe { raw::bytes(s.local, s.len as usize) })),
            }
        }
    }
    let mut v1_writes = Vec::new();
    for s in batch.drain(..) {
        if !v2 && s.op == Opcode::Write {
            v1_writes.push(s);
        } else if let Err(e) = {
            let via_vm = vm(&s);
            sh.credit[lane].take(s.len);
            expect.send(Expect::Reply(s, via_vm))
        } {
            if let Expect::Reply(s, _) = e.into_inner() {
                s.done.finish(Err(ErrorKind::Shutdown));
            }
        }
    }
    let result = if staged.is_empty() {
        send_all(stream.as_raw_fd(), &mut iov)
    } else {
        send_staged(stream.as_raw_fd(), &mut iov, &staged)
    };
    for s in v1_writes {
        match &result {
            Ok(()) => {
                let n = s.len;
                s.done.finish(Ok(n));
            }
            Err(_) => sh.fail_or_retry(s, ErrorKind::Socket, true),
        }
    }
    result
}

/// Sends `iov` with the GPU payloads of `staged` spliced in at their positions.
fn send_staged(
    fd: i32,
    iov: &mut [IoSlice<'_>],
    staged: &[(usize, u32, u64, usize)],
) -> std::io::Result<()> {
    let mut start = 0;
    for &(pos, dev, addr, len) in staged {
        send_all(fd, &mut iov[start..pos])?;
        super::stage::send_from_device(fd, &[], dev, addr, len)?;
        start = pos;
    }
    send_all(fd, &mut iov[start..])
}

enum ReplyError {
    Rejected,
    /// The local side failed (GPU copy); the payload was consumed, the stream is fine.
    Local(crate::error::Error),
    /// The kernel refused the same-host copy: fall back to TCP.
    VmRefused(std::io::Error),
    Protocol(String),
    Io(std::io::Error),
}

fn receiver_loop(sh: &Shared, lane: usize, expect: &Receiver<Expect>) {
    let mut stream: Option<(Arc<TcpStream>, u64)> = None;
    let mut broken = true;
    // A request on the current stream was rejected: a Mooncake server closes the stream after
    // any rejection (ours after a rejected WRITE), so requests behind it were never executed
    // and are re-sent without using their one retry. Each rejection is final, so this is bounded.
    let mut after_reject = false;
    let mut rb = RecvBuf::new(256 << 10);
    while let Ok(msg) = expect.recv() {
        let (slice, vm) = match msg {
            Expect::Conn(s, generation) => {
                stream = Some((s, generation));
                broken = false;
                after_reject = false;
                rb = RecvBuf::new(256 << 10);
                continue;
            }
            Expect::Reply(s, vm) => (s, vm),
            Expect::Stop => break,
        };
        let _credit = CreditBack(&sh.credit[lane], slice.len);
        let Some((st, generation)) = stream.as_ref().filter(|_| !broken) else {
            if after_reject {
                sh.resend(slice);
            } else {
                sh.fail_or_retry(slice, ErrorKind::Socket, true);
            }
            continue;
        };
        let end_stream = || {
            // Release pairs with the sender's Acquire load: it reconnects only if this is still
            // its current connection.
            sh.broken[lane].store(*generation, Ordering::Release);
            let _ = st.shutdown(Shutdown::Both);
        };
        let vm_pid = if vm { sh.addr.vm_pid } else { 0 };
        match read_reply(sh.addr.v2, vm_pid, st, &mut rb, &slice) {
            Ok(()) => {
                let n = slice.len;
                slice.done.finish(Ok(n));
            }
            Err(ReplyError::VmRefused(e)) => {
                tw_log!(
                    Level::Warn,
                    "same-host path to pid {} refused ({e}); using TCP",
                    sh.addr.vm_pid
                );
                sh.vm_on.store(false, Ordering::Relaxed);
                sh.resend(slice);
            }
            Err(ReplyError::Local(e)) => {
                tw_log!(Level::Error, "tcp: staging into GPU memory failed: {e}");
                slice.done.finish(Err(e.kind()));
            }
            Err(ReplyError::Rejected) => {
                tw_log!(
                    Level::Warn,
                    "tcp: {}:{} rejected {:#x}+{}",
                    sh.addr.host,
                    sh.addr.port,
                    slice.remote,
                    slice.len
                );
                after_reject = true;
                if slice.op == Opcode::Write {
                    // The payload that follows cannot be skipped: the stream is over.
                    broken = true;
                    end_stream();
                }
                slice.done.finish(Err(ErrorKind::Rejected));
            }
            Err(ReplyError::Protocol(m)) => {
                tw_log!(
                    Level::Error,
                    "tcp: protocol error from {}:{}: {m}",
                    sh.addr.host,
                    sh.addr.port
                );
                broken = true;
                end_stream();
                slice.done.finish(Err(ErrorKind::Protocol));
            }
            Err(ReplyError::Io(e)) => {
                let timed_out = matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                );
                broken = true;
                end_stream();
                if timed_out {
                    tw_log!(
                        Level::Warn,
                        "tcp: {}:{} did not answer in time",
                        sh.addr.host,
                        sh.addr.port
                    );
                    slice.done.finish(Err(ErrorKind::Timeout));
                } else if after_reject {
                    sh.resend(slice);
                } else {
                    tw_log!(
                        Level::Warn,
                        "tcp: connection to {}:{} lost: {e}",
                        sh.addr.host,
                        sh.addr.port
                    );
                    sh.fail_or_retry(slice, ErrorKind::Socket, true);
                }
            }
        }
    }
}

fn read_reply(
    v2: bool,
    vm_pid: u32,
    stream: &TcpStream,
    rb: &mut RecvBuf,
    s: &Slice,
) -> Result<(), ReplyError> {
    let mut r = stream;
    if v2 {
        // Before a large READ payload read only the status frame, so that the payload goes
        // straight into its destination instead of through the buffer (one copy, not two).
        let filled = if s.op == Opcode::Read && s.len >= DIRECT_PAYLOAD {
            rb.fill_exact(&mut r, STATUS_LEN)
        } else {
            rb.fill(&mut r, STATUS_LEN)
        };
        if !filled.map_err(ReplyError::Io)? {
            return Err(ReplyError::Io(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "peer closed the connection",
            )));
        }
        let frame: [u8; STATUS_LEN] = rb.take(STATUS_LEN).try_into().expect("8 bytes");
        match parse_status(&frame) {
            Some(STATUS_OK) => {}
            Some(STATUS_ADDR_REJECTED) => return Err(ReplyError::Rejected),
            Some(c) => return Err(ReplyError::Protocol(format!("unknown status code {c}"))),
            None => {
                return Err(ReplyError::Protocol(format!(
                    "bad status frame {frame:02x?}"
                )));
            }
        }
    }
    if vm_pid != 0 {
        // The owner validated the range; move the bytes with one kernel copy.
        let read = s.op == Opcode::Read;
        return match samehost::vm_copy(vm_pid, read, s.local, s.remote, s.len as usize) {
            Ok(()) => Ok(()),
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::EPERM | libc::ESRCH | libc::ENOSYS)
                ) =>
            {
                Err(ReplyError::VmRefused(e))
            }
            Err(e) => Err(ReplyError::Protocol(format!("same-host copy failed: {e}"))),
        };
    }
    if let (Opcode::Read, Some(dev)) = (s.op, s.gpu) {
        use super::stage::{StageError, recv_to_device};
        return match recv_to_device(rb, &mut r, dev, s.local, s.len as usize) {
            Ok(()) => Ok(()),
            Err(StageError::Io(e)) => Err(ReplyError::Io(e)),
            Err(StageError::Cuda(e)) => Err(ReplyError::Local(e)),
        };
    }
    if s.op == Opcode::Read {
        // SAFETY: the local range was checked against the registry at submit time.
        let dst = unsafe { raw::bytes_mut(s.local, s.len as usize) };
        rb.read_into(&mut r, dst).map_err(ReplyError::Io)?;
    }
    Ok(())
}

/// All peers of one engine.
pub struct TcpClient {
    cfg: ClientConfig,
    peers: Mutex<HashMap<PeerAddr, Arc<Peer>>>,
}

impl TcpClient {
    /// A client with no peers yet.
    pub fn new(cfg: ClientConfig) -> TcpClient {
        TcpClient {
            cfg,
            peers: Mutex::default(),
        }
    }

    /// The lanes to `addr`, started on first use.
    pub fn peer(&self, addr: &PeerAddr) -> std::io::Result<Arc<Peer>> {
        let mut peers = self.peers.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(p) = peers.get(addr) {
            return Ok(p.clone());
        }
        let p = Arc::new(Peer::start(addr.clone(), self.cfg.clone())?);
        peers.insert(addr.clone(), p.clone());
        Ok(p)
    }

    /// Stops every lane, failing queued work.
    pub fn shutdown(&self) {
        let peers: Vec<_> = self
            .peers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .drain()
            .map(|(_, p)| p)
            .collect();
        drop(peers);
    }
}
