//! The sending half of a lane: connecting, gathering queued slices into one write, staging GPU
//! payloads, and the inline send from the submitting thread.

use super::*;
use crate::sync::LockClean;

pub(super) fn connect(sh: &Shared) -> Result<TcpStream, String> {
    let addrs = crate::metadata::resolve(&sh.addr.host, sh.addr.port).map_err(|e| e.to_string())?;
    let mut last = String::new();
    let io = sh.base_read_timeout();
    for a in addrs {
        match TcpStream::connect_timeout(&a, sh.cfg.connect_timeout.min(sh.cfg.transfer_timeout)) {
            Ok(s) => {
                let _ = s.set_nodelay(true);
                let _ = s.set_read_timeout(Some(io));
                let _ = s.set_write_timeout(Some(io));
                // A dead or silent peer ends the connection within the transfer deadline.
                let idle = sh.cfg.transfer_timeout.min(Duration::from_secs(30));
                if let Err(e) = crate::transport::tcp::sockopt::harden(&s, idle, io) {
                    tw_log!(Level::Debug, "tcp: keepalive/user timeout not set: {e}");
                }
                if let Err(e) = sh.cfg.congestion.apply(&s) {
                    tw_log!(Level::Debug, "tcp: congestion control not set: {e}");
                }
                let by = Instant::now() + sh.cfg.connect_timeout.min(sh.cfg.transfer_timeout);
                let purpose = crate::auth::Purpose::Data;
                // An authentication failure is final for this address: no other one is tried.
                crate::auth::client(&mut &s, &sh.cfg.auth_key, purpose, by)
                    .map_err(|e| e.to_string())?;
                let _ = s.set_read_timeout(Some(io));
                return Ok(s);
            }
            Err(e) => last = format!("{a}: {e}"),
        }
    }
    Err(last)
}

pub(super) fn sender_loop(sh: &Shared, lane: usize, queue: &Receiver<Msg>) {
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
        sh.lane_tx(lane).send(sh, lane, &mut batch, false);
    }
    if let Some(s) = sh.lane_tx(lane).conn.take() {
        let _ = s.shutdown(Shutdown::Both);
    }
}

/// The sending half of a lane. Its lock is held while writing, by the lane's sender thread or
/// by a submitting thread that found the lane idle (inline send, one thread wake-up less).
pub(super) struct LaneTx {
    pub(super) conn: Option<Arc<TcpStream>>,
    /// Generation of `conn` (counts connections made by this lane, from 1).
    pub(super) generation: u64,
    pub(super) headers: Vec<[u8; HEADER_LEN]>,
    pub(super) expect: Sender<Expect>,
    /// When this lane last sent: after an idle gap the connection is checked before use.
    pub(super) last_send: Instant,
}

/// A connection idle this long is checked (without blocking) before it is used again: the peer
/// may have closed it meanwhile (its idle timeout, a restart), and a v1 WRITE written into such a
/// connection would be reported sent although nobody reads it.
const IDLE_CHECK_AFTER: Duration = Duration::from_millis(2);

/// True when the peer has closed (or reset) `s`: a non-blocking peek sees end-of-file or an
/// error. Pending reply bytes mean it is alive.
fn peer_closed(s: &TcpStream) -> bool {
    let mut b = [0u8; 1];
    // SAFETY: `s` is an open socket; the buffer is one writable byte; MSG_PEEK leaves the data
    // in the socket, MSG_DONTWAIT never blocks.
    let n = unsafe {
        libc::recv(
            s.as_raw_fd(),
            b.as_mut_ptr().cast(),
            1,
            libc::MSG_PEEK | libc::MSG_DONTWAIT,
        )
    };
    match n {
        0 => true,
        n if n > 0 => false,
        _ => !matches!(
            std::io::Error::last_os_error().kind(),
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::Interrupted
        ),
    }
}

impl LaneTx {
    /// Sends `batch` (emptied) on this lane, connecting first if needed. With `inline_rx`, and
    /// when nothing else awaits a reply on the lane, the calling thread also reads the replies
    /// (one thread wake-up less per request, two fewer hand-offs); replies that have not begun
    /// to arrive within [`INLINE_WAIT`] are handed to the receiver thread.
    pub(super) fn send(
        &mut self,
        sh: &Shared,
        lane: usize,
        batch: &mut Vec<Slice>,
        inline_rx: bool,
    ) {
        let mine = self.send_collect(sh, lane, batch, inline_rx);
        if !mine.is_empty() {
            inline::receive(sh, &mut [(lane, &self.expect, mine.into_iter())]);
            if sh.addr.vm_pid != 0 && sh.owed_count(lane) > 0 {
                sh.arm_done_flush();
            }
        }
    }

    /// Writes one "copy done" frame for the same-host approvals owed on this lane's current
    /// connection (see `done`). `blocking = false` never waits for socket space: the count stays
    /// owed for the next send or flush. Returns whether a frame was written.
    pub(super) fn flush_done(&mut self, sh: &Shared, lane: usize, blocking: bool) -> bool {
        let n = sh.take_owed(lane, self.generation);
        let Some(conn) = self.conn.as_ref().filter(|_| n > 0) else {
            return false;
        };
        let frame = Header::vm_done(n).encode();
        let flags = libc::MSG_NOSIGNAL | if blocking { 0 } else { libc::MSG_DONTWAIT };
        // SAFETY: `conn` is an open socket and `frame` a live 24-byte buffer.
        let r = unsafe { libc::send(conn.as_raw_fd(), frame.as_ptr().cast(), frame.len(), flags) };
        match r {
            r if r as usize == frame.len() => true,
            r if r > 0 => {
                // A partial frame must be completed before anything else goes on the stream.
                let rest = &frame[r as usize..];
                send_all(conn.as_raw_fd(), &mut [IoSlice::new(rest)]).is_ok()
            }
            _ if !blocking
                && std::io::Error::last_os_error().kind() == std::io::ErrorKind::WouldBlock =>
            {
                // Nothing was written: still owed (the next send or flush carries it).
                sh.reowe(lane, self.generation, n);
                false
            }
            // The connection is broken: its session ends and the leases expire by themselves.
            _ => false,
        }
    }

    /// Like [`LaneTx::send`], but returns the slices whose replies the caller must read (in
    /// order, with [`inline::receive`], while still holding this lane's sending half).
    pub(super) fn send_collect(
        &mut self,
        sh: &Shared,
        lane: usize,
        batch: &mut Vec<Slice>,
        inline_rx: bool,
    ) -> Vec<(Slice, VmSent)> {
        // Acquire pairs with the Release in `Peer::drop`.
        if sh.shutdown.load(Ordering::Acquire) {
            batch
                .drain(..)
                .for_each(|s| s.done.finish(Err(ErrorKind::Shutdown)));
            return Vec::new();
        }
        // Slices past their deadline are never sent.
        let now = Instant::now();
        if batch.iter().any(|s| now >= s.deadline) {
            let (late, keep): (Vec<Slice>, Vec<Slice>) =
                batch.drain(..).partition(|s| now >= s.deadline);
            late.into_iter()
                .for_each(|s| s.done.finish(Err(ErrorKind::Timeout)));
            *batch = keep;
            if batch.is_empty() {
                return Vec::new();
            }
        }
        // Acquire pairs with the receiver's Release when it marks a connection broken.
        let stale = self.conn.as_ref().is_some_and(|c| {
            sh.broken[lane].load(Ordering::Acquire) == self.generation
                || (now.duration_since(self.last_send) >= IDLE_CHECK_AFTER && peer_closed(c))
        });
        if stale {
            if let Some(old) = self.conn.take() {
                let _ = old.shutdown(Shutdown::Both);
            }
        }
        self.last_send = now;
        if self.conn.is_none() {
            self.generation += 1;
            self.conn = open_lane(sh, lane, self.generation, &self.expect);
            if self.conn.is_none() {
                batch
                    .drain(..)
                    .for_each(|s| s.done.finish(Err(ErrorKind::Socket)));
                return Vec::new();
            }
        }
        let stream = self.conn.as_ref().expect("connected").clone();
        // Acquire pairs with the receiver's Release: every reply it was given has been read.
        let inline = inline_rx && sh.expected[lane].load(Ordering::Acquire) == 0;
        let mut mine = Vec::new();
        let to = if inline {
            ReplyTo::Caller(&mut mine)
        } else {
            ReplyTo::Receiver(&self.expect)
        };
        let done = sh.take_owed(lane, self.generation);
        let sent = send_batch(sh, lane, &stream, batch, &mut self.headers, to, done);
        if let Err(e) = sent {
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
        mine
    }
}

/// Where the replies of a send are read: by the lane's receiver thread, or by the caller.
pub(super) enum ReplyTo<'a> {
    Receiver(&'a Sender<Expect>),
    Caller(&'a mut Vec<(Slice, VmSent)>),
}

pub(super) fn open_lane(
    sh: &Shared,
    lane: usize,
    generation: u64,
    expect: &Sender<Expect>,
) -> Option<Arc<TcpStream>> {
    let mut cd = sh.cooldown_until.lock_clean();
    if cd.is_some_and(|t| Instant::now() < t) {
        return None;
    }
    match connect(sh) {
        Ok(s) => {
            *cd = None;
            drop(cd);
            // Relaxed: only this lane's own sends depend on it, in this thread.
            if sh.vm_on.load(Ordering::Relaxed)
                && !crate::transport::tcp::peer_identity::peer_socket_owned_by(&s, sh.addr.vm_pid)
            {
                tw_log!(
                    Level::Warn,
                    "tcp: {}:{} is not served by pid {}, which its descriptor claims; the \
                     same-host path is off for this peer",
                    sh.addr.host,
                    sh.addr.port,
                    sh.addr.vm_pid
                );
                sh.vm_on.store(false, Ordering::Relaxed);
            }
            let s = Arc::new(s);
            sh.streams.lock_clean()[lane] = Some(s.clone());
            // The receiver switches to the new stream before any reply on it is expected.
            sh.post(lane, expect, Expect::Conn(s.clone(), generation))
                .ok()?;
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
/// reply are handed to the receiver first; v1 WRITEs complete once their bytes are sent. With
/// `done > 0`, a "copy done" frame for that many same-host approvals goes first.
pub(super) fn send_batch(
    sh: &Shared,
    lane: usize,
    stream: &TcpStream,
    batch: &mut Vec<Slice>,
    headers: &mut Vec<[u8; HEADER_LEN]>,
    mut to: ReplyTo<'_>,
    done: u64,
) -> std::io::Result<()> {
    let v2 = sh.addr.v2;
    // Taken before anything is sent: an approval is never used longer than its window after
    // this (see `memory::pins::VM_APPROVAL_WINDOW`).
    let sent_at = Instant::now();
    // Relaxed: a stale value only means one more batch on the path that was just turned off,
    // which fails over by itself.
    let vm_on = sh.vm_on.load(Ordering::Relaxed);
    // Small requests are cheaper inline on the socket than as a validation round trip plus a
    // separate copy. GPU memory never takes the same-host kernel copy: it is staged over the
    // socket.
    let vm = |s: &Slice| vm_on && s.len >= VM_MIN_BYTES && s.gpu.is_none() && !s.no_vm;
    headers.clear();
    headers.extend(batch.iter().map(|s| {
        Header {
            size: s.len,
            addr: s.remote,
            write: s.op == Opcode::Write,
            v2,
            vm: vm(s),
            done: false,
        }
        .encode()
    }));
    let done_frame = Header::vm_done(done).encode();
    let mut iov: Vec<IoSlice<'_>> = Vec::with_capacity(batch.len() * 2 + 1);
    if done > 0 {
        iov.push(IoSlice::new(&done_frame));
    }
    // WRITE payloads in GPU memory: (position in `iov`, device, address, length).
    let mut staged: Vec<(usize, u32, u64, usize)> = Vec::new();
    // Consecutive headers with no payload between them go out as one iovec (a READ batch is
    // one): the kernel's per-segment cost dominated 24-byte iovecs.
    let flat = headers.as_flattened();
    let mut unsent = 0;
    for (i, s) in batch.iter().enumerate() {
        if s.op == Opcode::Write && !vm(s) {
            iov.push(IoSlice::new(
                &flat[unsent * HEADER_LEN..(i + 1) * HEADER_LEN],
            ));
            unsent = i + 1;
            match s.gpu {
                Some(dev) => staged.push((iov.len(), dev, s.local, s.len as usize)),
                // SAFETY: the local range was checked against the registry at submit time.
                None => iov.push(IoSlice::new(unsafe { raw::bytes(s.local, s.len as usize) })),
            }
        }
    }
    if unsent < batch.len() {
        iov.push(IoSlice::new(&flat[unsent * HEADER_LEN..]));
    }
    let mut v1_writes = Vec::new();
    for s in batch.drain(..) {
        if !v2 && s.op == Opcode::Write {
            v1_writes.push(s);
        } else {
            let via_vm = vm(&s).then_some(sent_at);
            sh.credit[lane].take(s.len);
            match &mut to {
                ReplyTo::Caller(mine) => mine.push((s, via_vm)),
                ReplyTo::Receiver(expect) => {
                    if let Err(Expect::Reply(s, _)) =
                        sh.post(lane, expect, Expect::Reply(s, via_vm))
                    {
                        s.done.finish(Err(ErrorKind::Shutdown));
                    }
                }
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
pub(super) fn send_staged(
    fd: i32,
    iov: &mut [IoSlice<'_>],
    staged: &[(usize, u32, u64, usize)],
) -> std::io::Result<()> {
    let mut start = 0;
    for &(pos, dev, addr, len) in staged {
        send_all(fd, &mut iov[start..pos])?;
        crate::transport::tcp::stage::send_from_device(fd, &[], dev, addr, len)?;
        start = pos;
    }
    send_all(fd, &mut iov[start..])
}
