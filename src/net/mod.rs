//! The connection core every tidewire server runs on: the TCP data server, the handshake/RPC
//! server, the Store master's RPC server and its HTTP server.
//!
//! One reactor thread per process watches every listening socket and every connection that is
//! waiting for its next request (epoll; a connection is one-shot, re-armed only while the
//! reactor waits on it, so one that a worker is serving never wakes the reactor); a small pool of
//! worker threads serves the connections that have one. So an idle connection costs a table
//! entry and its socket, not a thread, and the thread count is set by the CPU count, not by the
//! peers.
//!
//! - **Heads on the reactor.** A connection goes to a worker only once the head of its next
//!   request is here: the reactor reads it without blocking into a buffer of the connection's
//!   own, asking the connection's [`Session::want`] how many bytes it needs (24 for a data
//!   header, the whole frame for a small RPC). A peer trickling bytes, or one that connects and
//!   says nothing, never holds a worker.
//! - **Streams on the worker.** A worker serves request after request while they keep coming
//!   ([`Worker::more_soon`]: the next one within [`LINGER`], and no other connection waiting for
//!   a worker), in blocking I/O with the session's own deadlines, exactly as a thread per
//!   connection would. Then it hands the connection back ([`Next::Park`]).
//! - **The rules written once.** The descriptors: the soft open-file limit raised to the hard one
//!   when the first server starts, and a process-wide budget of server connections (the limit
//!   less a reserve, see `descriptors`): over it, or when `accept` finds no descriptor left
//!   (`EMFILE`/`ENFILE`), the quietest idle connection of a listener that evicts is closed to
//!   take the new one, and only when there is none does accept back off. The connection cap of
//!   each listener (evict the quietest idle connection, or refuse with the service's own reply); the deadlines
//!   of a parked connection, checked on every reactor turn: `first_request` from accept to its
//!   first whole head, `head_timeout` from a head's first byte to its last, `idle_timeout`
//!   between requests.
//! - **The pool.** `max(2, cores)` workers stay; more start while more jobs are queued than
//!   workers wait for them (requests that block: a handler waiting on a peer, a slow reader), up
//!   to `max(16, 4 x cores)`; those leave after [`SPARE_WORKER_IDLE`] without work.
//!
//! Only the reactor thread closes a connection's socket (a worker hands it back to be closed),
//! so the descriptor a server shuts down to wake a busy worker is never a reused one.

mod core;
mod descriptors;
mod pool;
mod reactor;
mod sys;

use std::net::{TcpListener, TcpStream};
use std::os::fd::RawFd;
use std::sync::Arc;
use std::time::Duration;

pub use core::{Listening, core_threads};
pub use pool::Worker;
pub use sys::{SPIN_WAIT, spin_readable, wait_readable};

/// How long a worker waits for a connection's next request before it hands the connection back
/// to the reactor (when no other connection is waiting for a worker). Long enough for a peer's
/// next request in a stream (microseconds), short enough that a quiet connection frees its
/// worker at once.
pub const LINGER: Duration = Duration::from_millis(1);

/// How long a worker beyond the permanent ones waits for work before it exits.
pub const SPARE_WORKER_IDLE: Duration = Duration::from_secs(5);

/// What a parked connection needs before a worker can take it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Want {
    /// Read on: the head is not complete. The value is the most bytes the head buffer may hold
    /// after the next read (the reactor never reads past it), and must exceed what it holds.
    More(usize),
    /// The head is complete: hand the connection and its head to a worker.
    Ready,
    /// Close the connection (a malformed head, say; the session logs why).
    Close,
}

/// What a worker does with a connection when [`Session::serve`] returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// Hand it back to the reactor to wait for its next request.
    Park,
    /// Close it.
    Close,
}

/// What to do with a connection accepted at the cap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AtCap {
    /// Close the connection idle the longest (at least 100 ms), then take the new one; refuse
    /// the new one if every connection is busy. Peers reconnect transparently.
    EvictQuietest,
    /// Refuse the new connection ([`Service::refuse`] writes the reply).
    Refuse,
}

/// The rules of one listening socket.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Connections open at once.
    pub max_connections: usize,
    /// Parked with nothing received this long after its last request: closed.
    pub idle_timeout: Duration,
    /// From accept to the first whole head: longer and the connection is closed.
    pub first_request: Duration,
    /// From the first byte of a head to its last.
    pub head_timeout: Duration,
    /// At the cap.
    pub at_cap: AtCap,
}

/// A protocol served on a listening socket.
pub trait Service: Send + Sync + 'static {
    /// A short name for logs (`tcp`, `rpc`, `master`, `http`).
    fn name(&self) -> &'static str;
    /// Starts the session of a connection just accepted. Runs on the reactor thread: socket
    /// options and bookkeeping only, nothing that waits.
    fn open(&self, stream: &TcpStream) -> Box<dyn Session>;
    /// Answers a connection refused at the cap, on the reactor thread: write without blocking
    /// (see [`write_now`]) or not at all. The default writes nothing.
    fn refuse(&self, _fd: RawFd) {}
}

/// One connection's protocol state. Moves between the reactor (while parked) and a worker
/// (while served); dropped, before its socket is closed, when the connection ends.
pub trait Session: Send {
    /// On the reactor: given the bytes of the next request's head read so far (none at first),
    /// says whether the head is complete.
    fn want(&mut self, head: &[u8]) -> Want;
    /// On a worker: serves the request whose head is `head` (bytes already read from the socket;
    /// what follows them is still on the socket), and more while [`Worker::more_soon`] says so.
    fn serve(&mut self, stream: &TcpStream, head: Vec<u8>, worker: &Worker) -> Next;
}

/// Starts serving `service` on `listener` under `limits`, on this process's connection core
/// (started with the first server, stopped with the last). Dropping the returned handle stops
/// accepting, closes every connection of this listener and waits for its busy ones to end.
pub fn serve(
    listener: TcpListener,
    service: Arc<dyn Service>,
    limits: Limits,
) -> std::io::Result<Listening> {
    core::listen(listener, service, limits)
}

/// Frames up to this many bytes are read whole by the reactor before a worker takes them.
pub const SMALL_FRAME: usize = 64 << 10;

/// The head rule of a length-prefixed protocol: the fixed header of `header_len` bytes, then the
/// whole frame when it is at most [`SMALL_FRAME`] bytes (a larger one goes to a worker at its
/// header, which reads the rest under the session's deadlines). `frame_len` gives a header's
/// whole frame length; `None` (a malformed header) hands it to a worker to answer as the
/// protocol says.
pub fn want_frame(
    head: &[u8],
    header_len: usize,
    frame_len: impl FnOnce(&[u8]) -> Option<usize>,
) -> Want {
    if head.len() < header_len {
        return Want::More(header_len);
    }
    match frame_len(&head[..header_len]) {
        Some(total) if total <= SMALL_FRAME && head.len() < total => Want::More(total),
        _ => Want::Ready,
    }
}

/// Writes what fits of `bytes` to `fd` without blocking (for refusals from the reactor).
pub fn write_now(fd: RawFd, bytes: &[u8]) {
    sys::send_now(fd, bytes);
}

/// A reader that yields `head` (bytes the reactor already took off the socket) and then reads
/// the socket: the rest of a request, past its head.
pub struct Prefixed<'a> {
    head: &'a [u8],
    stream: &'a TcpStream,
}

impl<'a> Prefixed<'a> {
    /// Reads `head` first, then `stream`.
    pub fn new(head: &'a [u8], stream: &'a TcpStream) -> Self {
        Prefixed { head, stream }
    }
}

impl Prefixed<'_> {
    /// The socket's read timeout for the reads past the head.
    pub fn set_read_timeout(&self, t: Option<Duration>) -> std::io::Result<()> {
        self.stream.set_read_timeout(t)
    }

    /// True while bytes of the head are left to read.
    pub fn has_head(&self) -> bool {
        !self.head.is_empty()
    }
}

impl std::io::Read for Prefixed<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if !self.head.is_empty() {
            let k = self.head.len().min(buf.len());
            buf[..k].copy_from_slice(&self.head[..k]);
            self.head = &self.head[k..];
            return Ok(k);
        }
        (&mut &*self.stream).read(buf)
    }
}

impl std::io::Write for Prefixed<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        (&mut &*self.stream).write(buf)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
