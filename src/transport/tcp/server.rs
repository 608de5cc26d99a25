//! Data server, on the connection core (`crate::net`): a connection waiting for its next
//! request is parked on the reactor (no thread); once a whole 24-byte header is there a worker
//! serves it, and keeps serving while requests keep coming, at most `max_connections` open
//! (at the cap the connection quiet the longest is closed, so a flood of idle connections cannot
//! lock out a new peer). Every request's range is checked against the remote-accessible
//! registered regions before a byte is touched, and the session stays pinned inside that region
//! until the copy is done, so `unregister` can fence it (see `memory::pins`). A connection that
//! sends nothing for `idle_timeout` is closed (10 s for one that never sent a whole request),
//! and so is one whose request does not arrive in time: a header must be complete within
//! `io_timeout` of its first byte, a payload of `size` bytes within
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
use crate::net::{self, AtCap, Limits, Listening, Next, Prefixed, Session, Want, Worker};
use std::cell::RefCell;
use std::io;
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::time::{Duration, Instant};

const RECV_BUF: usize = 256 << 10;
/// READ payloads up to this size are copied into the reply buffer and sent together.
const INLINE_REPLY: u64 = 32 << 10;
const FLUSH_AT: usize = 512 << 10;
/// After a rejection that ends a connection, input is read and discarded for at most this long
/// and this many bytes while the replies already written drain to the peer.
const LINGER_TIME: Duration = Duration::from_secs(2);
const LINGER_BYTES: usize = 64 << 20;
/// A connection that has not sent a whole request this long after it was accepted is closed.
pub const FIRST_REQUEST: Duration = Duration::from_secs(10);
/// The default cap on open data connections: thousands of peers, each with its lanes.
pub const DEFAULT_MAX_CONNECTIONS: usize = 16_384;

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

/// Limits of a [`TcpServer`].
#[derive(Debug, Clone, Copy)]
pub struct DataLimits {
    /// Reply writes, and reads in the middle of a request.
    pub io_timeout: Duration,
    /// A connection silent this long between requests is closed.
    pub idle_timeout: Duration,
    /// Connections open at once.
    pub max_connections: usize,
    /// Congestion control of accepted connections (the sending side of READ replies).
    pub congestion: super::sockopt::Congestion,
}

/// A running data server.
pub struct TcpServer {
    port: u16,
    _listening: Listening,
}

impl TcpServer {
    /// Serves `listener` against `registry`; with `key` on, only to peers that prove it.
    pub fn start(
        listener: TcpListener,
        registry: Arc<Registry>,
        limits: DataLimits,
        key: AuthKey,
    ) -> io::Result<TcpServer> {
        let port = listener.local_addr()?.port();
        let core_limits = Limits {
            max_connections: limits.max_connections.max(1),
            idle_timeout: limits.idle_timeout,
            first_request: FIRST_REQUEST,
            head_timeout: limits.io_timeout,
            at_cap: AtCap::EvictQuietest,
        };
        let service = Arc::new(DataService {
            registry,
            limits,
            key,
        });
        let listening = net::serve(listener, service, core_limits)?;
        Ok(TcpServer {
            port,
            _listening: listening,
        })
    }

    /// The bound port.
    pub fn port(&self) -> u16 {
        self.port
    }
}

struct DataService {
    registry: Arc<Registry>,
    limits: DataLimits,
    key: AuthKey,
}

impl net::Service for DataService {
    fn name(&self) -> &'static str {
        "tcp"
    }

    fn open(&self, stream: &TcpStream) -> Box<dyn Session> {
        let limits = self.limits;
        let _ = stream.set_nodelay(true);
        let _ = stream.set_write_timeout(Some(limits.io_timeout));
        let _ = stream.set_read_timeout(Some(limits.io_timeout.min(limits.idle_timeout)));
        let _ = super::sockopt::harden(
            stream,
            limits.idle_timeout.min(Duration::from_secs(60)),
            limits.io_timeout,
        );
        if let Err(e) = limits.congestion.apply(stream) {
            tw_log!(Level::Debug, "tcp: congestion control not set: {e}");
        }
        Box::new(DataSession {
            registry: self.registry.clone(),
            slot: self.registry.pin_slot(stream.as_raw_fd()),
            limits,
            key: self.key.clone(),
            proven: !self.key.is_on(),
            last_large_write: false,
        })
    }
}

/// One data connection's state between requests.
struct DataSession {
    registry: Arc<Registry>,
    slot: Arc<PinSlot>,
    limits: DataLimits,
    key: AuthKey,
    /// The peer proved the key (or none is needed).
    proven: bool,
    /// The last request was a large WRITE (the next one likely is too).
    last_large_write: bool,
}

impl Drop for DataSession {
    fn drop(&mut self) {
        // The socket closes right after: from here on `unregister` leaves it alone.
        self.slot.detach();
    }
}

thread_local! {
    /// A worker's receive buffer and reply queue, lent to the connection it serves (both are
    /// empty whenever a connection is handed back).
    static BUFFERS: RefCell<Option<Box<(RecvBuf, Replies)>>> = const { RefCell::new(None) };
}

impl Session for DataSession {
    fn want(&mut self, head: &[u8]) -> Want {
        if !self.proven {
            return crate::auth::want_hello(head);
        }
        if head.len() < HEADER_LEN {
            Want::More(HEADER_LEN)
        } else {
            Want::Ready
        }
    }

    fn serve(&mut self, stream: &TcpStream, head: Vec<u8>, worker: &Worker) -> Next {
        let mut head = head;
        if !self.proven {
            if !authenticate(stream, &head, &self.key, self.limits) {
                return Next::Close;
            }
            self.proven = true;
            head.clear();
            if !worker.more_soon(stream.as_raw_fd()) {
                return Next::Park;
            }
        }
        let mut bufs = BUFFERS
            .with(|b| b.borrow_mut().take())
            .unwrap_or_else(|| Box::new((RecvBuf::new(RECV_BUF), Replies::new())));
        let (rb, replies) = &mut *bufs;
        rb.push(&head);
        let next = match serve(stream, self, rb, replies, worker) {
            Ok(next) => next,
            Err(e) => {
                tw_log!(
                    Level::Debug,
                    "tcp session {:?} ended: {e}",
                    stream.peer_addr().ok()
                );
                Next::Close
            }
        };
        if next == Next::Close {
            rb.clear();
            replies.discard();
            self.slot.leave();
        }
        BUFFERS.with(|b| *b.borrow_mut() = Some(bufs));
        next
    }
}

/// Longest time a new connection has to prove the key.
const AUTH_TIMEOUT: Duration = Duration::from_secs(10);

/// Runs the server side of the key exchange, the client's hello being `hello` (logging a
/// refusal with the peer's address), and restores the session's read timeout. True = serve it.
fn authenticate(stream: &TcpStream, hello: &[u8], key: &AuthKey, limits: DataLimits) -> bool {
    let step = limits.io_timeout.min(limits.idle_timeout);
    let deadline = Instant::now() + step.min(AUTH_TIMEOUT);
    let mut r = Prefixed::new(hello, stream);
    if let Err(e) = crate::auth::server(&mut r, key, Purpose::Data, deadline) {
        crate::auth::log_refusal("tcp", stream.peer_addr().ok(), &e);
        return false;
    }
    stream.set_read_timeout(Some(step)).is_ok()
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

/// Serves requests from what `rb` holds and the socket, while they keep coming.
fn serve(
    stream: &TcpStream,
    session: &mut DataSession,
    rb: &mut RecvBuf,
    replies: &mut Replies,
    worker: &Worker,
) -> io::Result<Next> {
    let limits = session.limits;
    let registry = &*session.registry;
    let slot = &*session.slot;
    let fd = stream.as_raw_fd();
    loop {
        // Out of the region before a reply can reach the peer, when no reply payload is read
        // from it: a peer that sees its answer and unregisters at once (after a same-host
        // approval, say) must find this session outside, not be cut off.
        if replies.held_region().is_none() {
            slot.leave();
        }
        // Replies go out before waiting for input, and once enough READ payloads are held back.
        if rb.available() < HEADER_LEN || replies.payloads_full() {
            replies.flush(fd)?;
        }
        // The previous request is done with registered memory, unless its payload is still
        // to be sent.
        if replies.held_region().is_none() {
            slot.leave();
        }
        // Nothing buffered and every reply sent: hand the connection back to the reactor
        // unless its next request is about to arrive.
        if rb.available() == 0 && !worker.more_soon(fd) {
            return Ok(Next::Park);
        }
        // After a large WRITE the next request is likely one too: read just its header so
        // that its payload goes straight into registered memory (one copy, not two).
        // A header must be complete within `io_timeout` of its first byte.
        let mut head = if rb.available() > 0 {
            FrameReader::started(stream, limits.io_timeout)
        } else {
            FrameReader::lazy(stream, limits.io_timeout)
        };
        let got = if session.last_large_write {
            rb.fill_exact(&mut head, HEADER_LEN)
        } else {
            rb.fill(&mut head, HEADER_LEN)
        };
        let filled = match got {
            Err(e) if timed_out(&e) && rb.available() == 0 => return Ok(Next::Park),
            r => r?,
        };
        if !filled {
            return Ok(Next::Close);
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
                return Ok(Next::Close);
            }
            continue;
        }
        let size = h.size as usize;
        if let Ok(Some(dev)) = checked {
            if !serve_gpu(fd, &mut reader, rb, out, h, dev)? {
                replies.flush(fd)?;
                return Ok(Next::Close);
            }
            if replies.len() >= FLUSH_AT {
                replies.flush(fd)?;
            }
            continue;
        }
        session.last_large_write = h.write && h.size >= DIRECT_PAYLOAD;
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
