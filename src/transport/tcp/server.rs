//! Data server: one accept thread and one named thread per connection, at most
//! `max_connections` of them (connections beyond the cap are closed at once, with a warning).
//! Every request's range is checked against the remote-accessible registered regions before a
//! byte is touched, and the session stays pinned inside that region until the copy is done, so
//! `unregister` can fence it (see `memory::pins`). A connection that sends nothing for
//! `idle_timeout` is closed, and so is one whose request does not arrive in time: a header must
//! be complete within `io_timeout` of its first byte, a payload of `size` bytes within
//! `io_timeout + size / MIN_PAYLOAD_RATE` of its header (per frame, not per `read`, so trickling
//! a byte at a time does not keep a session alive; the check runs around each read, so the end
//! comes at most one socket timeout after the deadline). Small replies are gathered and sent
//! with one syscall once no complete request is left buffered. Same-host approvals stay leased
//! until the initiator's "copy done" frame (see `memory::pins`).
//! With an `auth_key`, a connection is served only after the peer proved the key
//! (`crate::auth`); others are refused with a warning before any request is read.

use super::client::DIRECT_PAYLOAD;
use super::net::{FrameReader, RecvBuf};
use super::replies::Replies;
use super::wire::{
    HEADER_LEN, Header, STATUS_ADDR_REJECTED, STATUS_NOT_SAME_HOST, STATUS_OK, status_frame,
};
use crate::auth::{AuthKey, Purpose};
use crate::log::Level;
use crate::memory::pins::PinSlot;
use crate::memory::{Pinned, Registry, raw};
use crate::transport::slots::{Permit, Slots};
use std::collections::HashMap;
use std::io;
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

const RECV_BUF: usize = 256 << 10;
/// READ payloads up to this size are copied into the reply buffer and sent together.
const INLINE_REPLY: u64 = 32 << 10;
const FLUSH_AT: usize = 512 << 10;
/// After a rejection that ends a connection, input is read and discarded for at most this long
/// and this many bytes while the replies already written drain to the peer.
const LINGER_TIME: Duration = Duration::from_secs(2);
const LINGER_BYTES: usize = 64 << 20;

/// Ends a connection without losing the replies written so far (READ payloads, the rejection
/// frame). Closing a socket with unread input (the rejected WRITE's payload, pipelined requests)
/// makes the kernel reset the connection and drop whatever it had not sent yet, so the peer
/// would see earlier replies and the rejection vanish. Half-close instead, then read and discard
/// until the peer closes its side, `LINGER_TIME` passes or `LINGER_BYTES` arrived.
fn lingering_close(stream: &TcpStream) {
    use std::io::Read;
    let _ = stream.shutdown(Shutdown::Write);
    let deadline = Instant::now() + LINGER_TIME;
    let mut sink = vec![0u8; 64 << 10];
    let mut total = 0usize;
    let mut reader = stream;
    while total < LINGER_BYTES {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() || stream.set_read_timeout(Some(left)).is_err() {
            break;
        }
        match reader.read(&mut sink) {
            Ok(0) => break,
            Ok(n) => total += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => break,
        }
    }
}

/// Open sessions by id: the socket (to end it at shutdown or eviction), when it last started a
/// request (ms since the server started) and the thread. A session removes its socket here,
/// under the lock, before closing it, so every fd listed is open.
#[derive(Default)]
struct SessionList {
    streams: HashMap<u64, (i32, Arc<AtomicU64>)>,
    threads: Vec<JoinHandle<()>>,
}

type Sessions = Arc<Mutex<SessionList>>;

/// Limits of a [`TcpServer`].
#[derive(Debug, Clone, Copy)]
pub struct DataLimits {
    /// Reply writes, and reads in the middle of a request.
    pub io_timeout: Duration,
    /// A connection silent this long between requests is closed.
    pub idle_timeout: Duration,
    /// Connections served at once.
    pub max_connections: usize,
    /// Congestion control of accepted connections (the sending side of READ replies).
    pub congestion: super::sockopt::Congestion,
}

/// A running data server.
pub struct TcpServer {
    port: u16,
    stop: Arc<AtomicBool>,
    fd: i32,
    accept: Option<JoinHandle<()>>,
    sessions: Sessions,
}

impl TcpServer {
    /// Serves `listener` against `registry`; with `key` on, only to peers that prove it.
    pub fn start(
        listener: TcpListener,
        registry: Arc<Registry>,
        limits: DataLimits,
        key: AuthKey,
    ) -> io::Result<TcpServer> {
        let slots = Slots::new(limits.max_connections.max(1));
        let port = listener.local_addr()?.port();
        let stop = Arc::new(AtomicBool::new(false));
        let sessions: Sessions = Arc::default();
        let fd = listener.as_raw_fd();
        let (stop2, sessions2) = (stop.clone(), sessions.clone());
        let accept = std::thread::Builder::new()
            .name("tw-tcp-accept".into())
            .spawn(move || {
                let counter = AtomicUsize::new(0);
                let mut last_warn: Option<Instant> = None;
                let epoch = Instant::now();
                for conn in listener.incoming() {
                    // Acquire pairs with the Release in `drop`.
                    if stop2.load(Ordering::Acquire) {
                        break;
                    }
                    let stream = match conn {
                        Ok(s) => s,
                        Err(e) => {
                            crate::metadata::server::accept_failed(&e, &mut last_warn);
                            continue;
                        }
                    };
                    let Some(permit) = slots
                        .try_take()
                        .or_else(|| make_room(&sessions2, &slots, epoch))
                    else {
                        if last_warn.is_none_or(|t| t.elapsed() >= Duration::from_secs(1)) {
                            last_warn = Some(Instant::now());
                            tw_log!(
                                Level::Warn,
                                "tcp: {} connections open; refusing {:?}",
                                slots.cap(),
                                stream.peer_addr().ok()
                            );
                        }
                        continue;
                    };
                    let _ = stream.set_nodelay(true);
                    let _ = stream.set_write_timeout(Some(limits.io_timeout));
                    let _ =
                        stream.set_read_timeout(Some(limits.io_timeout.min(limits.idle_timeout)));
                    let _ = super::sockopt::harden(
                        &stream,
                        limits.idle_timeout.min(Duration::from_secs(60)),
                        limits.io_timeout,
                    );
                    if let Err(e) = limits.congestion.apply(&stream) {
                        tw_log!(Level::Debug, "tcp: congestion control not set: {e}");
                    }
                    let active = Arc::new(AtomicU64::new(since(epoch)));
                    let keep = (stream.as_raw_fd(), active.clone());
                    let reg = registry.clone();
                    let key = key.clone();
                    let n = counter.fetch_add(1, Ordering::Relaxed);
                    let id = n as u64;
                    let sessions3 = sessions2.clone();
                    // Registered before the session starts, so its own removal always finds it.
                    let mut list = sessions2.lock().unwrap_or_else(|e| e.into_inner());
                    list.threads.retain(|h| !h.is_finished());
                    list.streams.insert(id, keep);
                    let spawned = std::thread::Builder::new()
                        .name(format!("tw-tcp-srv-{n}"))
                        .spawn(move || {
                            let peer = stream.peer_addr().ok();
                            let slot = reg.pin_slot(stream.as_raw_fd());
                            crate::guard::guarded("tcp session", || {
                                if !authenticate(&stream, &key, limits) {
                                    return;
                                }
                                let session = Session {
                                    slot: &slot,
                                    limits,
                                    active: &active,
                                    epoch,
                                };
                                if let Err(e) = serve(&stream, &reg, session) {
                                    tw_log!(Level::Debug, "tcp session {peer:?} ended: {e}");
                                }
                            });
                            // From here on `unregister` leaves this socket alone.
                            slot.detach();
                            // End the connection itself so the peer sees it close now, and
                            // release the clone kept for shutdown.
                            let _ = stream.shutdown(Shutdown::Both);
                            sessions3
                                .lock()
                                .unwrap_or_else(|e| e.into_inner())
                                .streams
                                .remove(&id);
                            drop(slot);
                            drop(permit);
                        });
                    match spawned {
                        Ok(h) => list.threads.push(h),
                        Err(e) => {
                            list.streams.remove(&id);
                            tw_log!(Level::Error, "cannot spawn tcp session thread: {e}");
                        }
                    }
                }
            })?;
        Ok(TcpServer {
            port,
            stop,
            fd,
            accept: Some(accept),
            sessions,
        })
    }

    /// The bound port.
    pub fn port(&self) -> u16 {
        self.port
    }
}

impl Drop for TcpServer {
    fn drop(&mut self) {
        // Release pairs with the Acquire in the accept loop.
        self.stop.store(true, Ordering::Release);
        // SAFETY: `fd` is the listener owned by the accept thread and still open; shutdown(2)
        // wakes its blocked accept.
        unsafe { libc::shutdown(self.fd, libc::SHUT_RDWR) };
        if let Some(t) = self.accept.take() {
            let _ = t.join();
        }
        let threads = {
            let mut list = self.sessions.lock().unwrap_or_else(|e| e.into_inner());
            for &(fd, _) in list.streams.values() {
                // SAFETY: sessions remove their fd from the list (under this lock, held here)
                // before closing it, so `fd` is an open socket; shutdown(2) wakes its I/O.
                unsafe { libc::shutdown(fd, libc::SHUT_RDWR) };
            }
            std::mem::take(&mut list.threads)
        };
        for h in threads {
            let _ = h.join();
        }
    }
}

/// Longest time a new connection has to prove the key.
const AUTH_TIMEOUT: Duration = Duration::from_secs(10);

/// With `key` on, runs the server side of the key exchange on a new connection (logging a
/// refusal with the peer's address) and restores the session's read timeout. True = serve it.
fn authenticate(stream: &TcpStream, key: &AuthKey, limits: DataLimits) -> bool {
    if !key.is_on() {
        return true;
    }
    let step = limits.io_timeout.min(limits.idle_timeout);
    let deadline = Instant::now() + step.min(AUTH_TIMEOUT);
    if let Err(e) = crate::auth::server(&mut &*stream, key, Purpose::Data, deadline) {
        crate::auth::log_refusal("tcp", stream.peer_addr().ok(), &e);
        return false;
    }
    stream.set_read_timeout(Some(step)).is_ok()
}

/// Milliseconds since `epoch`.
fn since(epoch: Instant) -> u64 {
    epoch.elapsed().as_millis() as u64
}

/// At the connection cap: ends the session that has been quiet the longest (it is most likely
/// idle; a live peer reconnects transparently) and waits briefly for its slot, so that a flood of
/// idle connections cannot lock out a new peer. `None` when no slot came free.
fn make_room(sessions: &Sessions, slots: &Arc<Slots>, epoch: Instant) -> Option<Permit> {
    {
        let list = sessions.lock().unwrap_or_else(|e| e.into_inner());
        // Relaxed: an approximate age is enough to pick a victim.
        let quietest = list
            .streams
            .values()
            .min_by_key(|(_, a)| a.load(Ordering::Relaxed))?;
        if since(epoch).saturating_sub(quietest.1.load(Ordering::Relaxed)) < 100 {
            return None; // every session is busy
        }
        // SAFETY: listed fds are open while the lock is held (sessions remove theirs under it
        // before closing); shutdown(2) only ends that connection.
        unsafe { libc::shutdown(quietest.0, libc::SHUT_RDWR) };
    }
    let until = Instant::now() + Duration::from_millis(200);
    loop {
        if let Some(p) = slots.try_take() {
            return Some(p);
        }
        if Instant::now() >= until {
            return None;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// What a session needs besides its socket and the registry.
struct Session<'a> {
    slot: &'a PinSlot,
    limits: DataLimits,
    /// When the session last started a request (ms since `epoch`).
    active: &'a AtomicU64,
    epoch: Instant,
}

/// Slowest average rate at which a request's payload must arrive: a frame of `size` bytes gets
/// `io_timeout + size / MIN_PAYLOAD_RATE` from the end of its header.
pub const MIN_PAYLOAD_RATE: u64 = 256 << 10;

/// The deadline budget of a payload of `size` bytes (see [`MIN_PAYLOAD_RATE`]).
fn payload_budget(io_timeout: Duration, size: u64) -> Duration {
    io_timeout.saturating_add(Duration::from_millis(
        size.saturating_mul(1000) / MIN_PAYLOAD_RATE,
    ))
}

/// True for the error a read timeout gives.
fn timed_out(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
    )
}

fn serve(stream: &TcpStream, registry: &Registry, session: Session<'_>) -> io::Result<()> {
    let Session {
        slot,
        limits,
        active,
        epoch,
    } = session;
    // The socket's read timeout is min(io_timeout, idle_timeout): a stall in the middle of a
    // request ends the connection at once; between requests, silent periods add up until
    // `idle_timeout` (no per-request system call to switch timeouts).
    let step = limits.io_timeout.min(limits.idle_timeout);
    let mut idle = Duration::ZERO;
    let fd = stream.as_raw_fd();
    let mut rb = RecvBuf::new(RECV_BUF);
    let mut replies = Replies::new();
    let mut last_large_write = false;
    loop {
        // Replies go out before waiting for input, and once enough READ payloads are held back.
        if rb.available() < HEADER_LEN || replies.payloads_full() {
            replies.flush(fd)?;
        }
        // The previous request is done with registered memory, unless its payload is still
        // to be sent.
        if replies.held_region().is_none() {
            slot.leave();
        }
        // After a large WRITE the next request is likely one too: read just its header so
        // that its payload goes straight into registered memory (one copy, not two).
        // A header must be complete within `io_timeout` of its first byte.
        let mut head = if rb.available() > 0 {
            FrameReader::started(stream, limits.io_timeout)
        } else {
            FrameReader::lazy(stream, limits.io_timeout)
        };
        let got = if last_large_write {
            rb.fill_exact(&mut head, HEADER_LEN)
        } else {
            rb.fill(&mut head, HEADER_LEN)
        };
        let filled = match got {
            Err(e) if timed_out(&e) && rb.available() == 0 => {
                idle += step;
                if idle >= limits.idle_timeout {
                    tw_log!(Level::Debug, "tcp: closing a connection idle for {idle:?}");
                    return Ok(());
                }
                continue;
            }
            r => r?,
        };
        idle = Duration::ZERO;
        // Relaxed: read only to pick an eviction victim.
        active.store(since(epoch), Ordering::Relaxed);
        if !filled {
            return Ok(());
        }
        let h = Header::decode(rb.take(HEADER_LEN).try_into().expect("24 bytes"));
        if h.done {
            // The initiator finished its same-host copies of the `size` oldest approvals.
            if !slot.release(h.size) {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "copy-done frame for more approvals than were given",
                ));
            }
            continue;
        }
        // The payload (if any) must follow at a minimum average rate.
        let mut reader = FrameReader::started(stream, payload_budget(limits.io_timeout, h.size));
        // Held-back READ payloads go out before a WRITE or GPU request touches memory (a WRITE
        // could overwrite bytes a pending READ has yet to send) and before another region is
        // entered (the pin slot names one region).
        // (A GPU region is never the held host region.)
        if h.write && replies.held_region().is_some() {
            replies.flush(fd)?;
            slot.leave();
        }
        let mut checked = registry.check_pinned(h.addr, h.size, slot, replies.held_region());
        if checked == Ok(Pinned::Elsewhere) {
            replies.flush(fd)?;
            slot.leave();
            checked = registry.check_pinned(h.addr, h.size, slot, None);
        }
        let (region, checked) = match checked {
            Ok(Pinned::In { base, device }) => (base, Ok(device)),
            Ok(Pinned::Elsewhere) => unreachable!("nothing is held"),
            Err(e) => (0, Err(e)),
        };
        let out = replies.frames();
        if h.vm {
            // Same-host path: validate only; the initiator copies. Needs acknowledged framing.
            if !h.v2 {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "validate-only request without v2 framing",
                ));
            }
            // GPU memory never takes the kernel copy (process_vm_* cannot reach it): the
            // initiator re-sends such a request over the socket.
            // An approval is a lease on the region until the initiator's "copy done" frame
            // (or its expiry): `unregister` waits for it (see `memory::pins`).
            let code = match checked {
                Ok(None) if slot.lease() => STATUS_OK,
                Ok(None) => STATUS_NOT_SAME_HOST,
                Ok(Some(_)) => STATUS_NOT_SAME_HOST,
                Err(_) => STATUS_ADDR_REJECTED,
            };
            out.extend_from_slice(&status_frame(code));
            continue;
        }
        if let Err(e) = checked {
            tw_log!(
                Level::Warn,
                "tcp: rejecting {} from {:?}: {e}",
                if h.write { "WRITE" } else { "READ" },
                stream.peer_addr().ok()
            );
            if h.v2 {
                out.extend_from_slice(&status_frame(STATUS_ADDR_REJECTED));
            }
            replies.flush(fd)?;
            // A rejected v2 READ leaves the stream in sync (no payload follows either way);
            // anything else cannot be resynchronised, so the connection ends as in Mooncake.
            if h.write || !h.v2 {
                lingering_close(stream);
                return Ok(());
            }
            continue;
        }
        let size = h.size as usize;
        if let Ok(Some(dev)) = checked {
            if !serve_gpu(fd, &mut reader, &mut rb, out, h, dev)? {
                replies.flush(fd)?;
                return Ok(());
            }
            if replies.len() >= FLUSH_AT {
                replies.flush(fd)?;
            }
            continue;
        }
        last_large_write = h.write && h.size >= DIRECT_PAYLOAD;
        if h.write {
            // SAFETY: the range was checked against remote-accessible registered regions.
            let dst = unsafe { raw::bytes_mut(h.addr, size) };
            rb.read_into(&mut reader, dst)?;
            if h.v2 {
                out.extend_from_slice(&status_frame(STATUS_OK));
            }
        } else {
            if h.v2 {
                out.extend_from_slice(&status_frame(STATUS_OK));
            }
            if h.size <= INLINE_REPLY {
                // SAFETY: the range was checked against remote-accessible registered regions.
                out.extend_from_slice(unsafe { raw::bytes(h.addr, size) });
            } else {
                // SAFETY: the range was checked and lies in `region`, which the slot keeps
                // naming until the payload is sent (`held_region` above).
                unsafe { replies.push_payload(region, h.addr, size) };
            }
        }
        if replies.frames().len() >= FLUSH_AT {
            replies.flush(fd)?;
        }
    }
}

/// Serves one checked request on GPU memory of device `dev`, staged through pinned buffers.
/// `Ok(false)`: the GPU copy failed and the connection must end after `out` is flushed (a v2
/// peer gets a rejection frame; a rejected v2 READ keeps the connection).
fn serve_gpu(
    fd: i32,
    reader: &mut FrameReader<'_>,
    rb: &mut RecvBuf,
    out: &mut Vec<u8>,
    h: Header,
    dev: u32,
) -> io::Result<bool> {
    use super::stage::{self, StageError};
    let size = h.size as usize;
    if h.write {
        return match stage::recv_to_device(rb, reader, dev, h.addr, size) {
            Ok(()) => {
                if h.v2 {
                    out.extend_from_slice(&status_frame(STATUS_OK));
                }
                Ok(true)
            }
            Err(StageError::Io(e)) => Err(e),
            Err(StageError::Cuda(e)) => {
                tw_log!(Level::Error, "tcp: WRITE into GPU memory failed: {e}");
                if h.v2 {
                    out.extend_from_slice(&status_frame(STATUS_ADDR_REJECTED));
                }
                Ok(false)
            }
        };
    }
    if h.size <= INLINE_REPLY {
        let start = out.len();
        if h.v2 {
            out.extend_from_slice(&status_frame(STATUS_OK));
        }
        let at = out.len();
        out.resize(at + size, 0);
        if let Err(e) = stage::read_small(dev, &mut out[at..], h.addr) {
            tw_log!(Level::Error, "tcp: READ from GPU memory failed: {e}");
            out.truncate(start);
            if h.v2 {
                out.extend_from_slice(&status_frame(STATUS_ADDR_REJECTED));
                return Ok(true);
            }
            return Ok(false);
        }
        return Ok(true);
    }
    if h.v2 {
        out.extend_from_slice(&status_frame(STATUS_OK));
    }
    let r = stage::send_from_device(fd, out, dev, h.addr, size);
    out.clear();
    r.map_err(io::Error::from).map(|()| true)
}
