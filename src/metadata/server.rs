//! The RPC/handshake listener: one accept thread and a bounded number of request threads (one
//! request and reply per connection, as Mooncake). Every request must arrive whole within
//! `io_timeout` of its connection (a client trickling bytes cannot hold a thread longer);
//! connections beyond `max_concurrent` are closed at once with a warning. Shutdown wakes `accept`
//! by shutting the listening socket down and ends every open request connection, so it returns
//! promptly whatever clients do. With an `auth_key`, the peer must prove the key (`crate::auth`)
//! before its request is read, within the same deadline.

use super::rpc::{self, MsgType};
use crate::auth::{AuthKey, Purpose};
use crate::error::{Error, ErrorKind, Result};
use crate::log::Level;
use crate::transport::slots::Slots;
use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Answers one request: (type, body) → reply body. `None` closes without a reply.
pub type Handler = dyn Fn(MsgType, &[u8]) -> Option<Vec<u8>> + Send + Sync;

/// Open request connections (a clone of each, to end them at shutdown) and their threads.
#[derive(Default)]
struct Active {
    conns: HashMap<u64, TcpStream>,
    threads: Vec<JoinHandle<()>>,
}

/// A running RPC server.
pub struct RpcServer {
    port: u16,
    stop: Arc<AtomicBool>,
    fd: i32,
    thread: Option<JoinHandle<()>>,
    active: Arc<Mutex<Active>>,
}

/// Limits of an [`RpcServer`].
#[derive(Debug, Clone, Copy)]
pub struct RpcLimits {
    /// Time for a whole request to arrive (and for the reply to be written).
    pub io_timeout: Duration,
    /// Largest frame accepted.
    pub max_len: u64,
    /// Requests served at once.
    pub max_concurrent: usize,
}

impl RpcServer {
    /// Starts serving on `listener`; with `key` on, only to peers that prove it.
    pub fn start(
        listener: TcpListener,
        handler: Arc<Handler>,
        limits: RpcLimits,
        key: AuthKey,
    ) -> std::io::Result<RpcServer> {
        let port = listener.local_addr()?.port();
        let stop = Arc::new(AtomicBool::new(false));
        let fd = listener.as_raw_fd();
        let active: Arc<Mutex<Active>> = Arc::default();
        let (stop2, active2) = (stop.clone(), active.clone());
        let slots = Slots::new(limits.max_concurrent.max(1));
        let thread = std::thread::Builder::new()
            .name("tw-rpc".into())
            .spawn(move || {
                let mut next_id = 0u64;
                let mut last_warn: Option<Instant> = None;
                for conn in listener.incoming() {
                    // Acquire pairs with the Release in `drop`: after the wake-up we see the flag.
                    if stop2.load(Ordering::Acquire) {
                        break;
                    }
                    let s = match conn {
                        Ok(s) => s,
                        Err(e) => {
                            accept_failed(&e, &mut last_warn);
                            if stop2.load(Ordering::Acquire) {
                                break;
                            }
                            continue;
                        }
                    };
                    let Some(permit) = slots.try_take() else {
                        if last_warn.is_none_or(|t| t.elapsed() >= Duration::from_secs(1)) {
                            last_warn = Some(Instant::now());
                            tw_log!(
                                Level::Warn,
                                "rpc: {} requests in progress; refusing {:?}",
                                slots.cap(),
                                s.peer_addr().ok()
                            );
                        }
                        continue;
                    };
                    let Ok(keep) = s.try_clone() else { continue };
                    let id = next_id;
                    next_id += 1;
                    let (handler, active3, key) = (handler.clone(), active2.clone(), key.clone());
                    let mut a = active2.lock().unwrap_or_else(|e| e.into_inner());
                    a.threads.retain(|t| !t.is_finished());
                    a.conns.insert(id, keep);
                    let spawned = std::thread::Builder::new()
                        .name(format!("tw-rpc-{}", id % 1000))
                        .spawn(move || {
                            crate::guard::guarded("rpc request", || {
                                serve_one(s, &*handler, limits, &key)
                            });
                            active3
                                .lock()
                                .unwrap_or_else(|e| e.into_inner())
                                .conns
                                .remove(&id);
                            drop(permit);
                        });
                    match spawned {
                        Ok(t) => a.threads.push(t),
                        Err(e) => {
                            a.conns.remove(&id);
                            tw_log!(Level::Error, "rpc: cannot start a request thread: {e}");
                        }
                    }
                }
            })?;
        Ok(RpcServer {
            port,
            stop,
            fd,
            thread: Some(thread),
            active,
        })
    }

    /// The bound port.
    pub fn port(&self) -> u16 {
        self.port
    }
}

/// Logs a failed `accept` (rate-limited) and backs off: out of file descriptors (`EMFILE`,
/// `ENFILE`) or memory needs a real pause, anything else a short one.
pub(crate) fn accept_failed(e: &std::io::Error, last_warn: &mut Option<Instant>) {
    let starved = matches!(
        e.raw_os_error(),
        Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM)
    );
    if starved && last_warn.is_none_or(|t| t.elapsed() >= Duration::from_secs(1)) {
        *last_warn = Some(Instant::now());
        tw_log!(Level::Warn, "accept: {e}; backing off");
    } else {
        tw_log!(Level::Debug, "accept: {e}");
    }
    std::thread::sleep(Duration::from_millis(if starved { 100 } else { 10 }));
}

/// Reads exactly `buf.len()` bytes before `deadline`.
fn read_exact_by(s: &mut TcpStream, buf: &mut [u8], deadline: Instant) -> std::io::Result<()> {
    let mut got = 0;
    while got < buf.len() {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(std::io::ErrorKind::TimedOut.into());
        }
        s.set_read_timeout(Some(left))?;
        match s.read(&mut buf[got..]) {
            Ok(0) => return Err(std::io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// One frame (`u64` length, type, body), all of it before `deadline`. The body buffer grows as
/// bytes arrive, so a length claimed but never sent costs nothing.
fn read_frame_by(s: &mut TcpStream, max_len: u64, deadline: Instant) -> Result<(u8, Vec<u8>)> {
    let io = |what: &str, e: std::io::Error| {
        Error::new(ErrorKind::Socket, format!("reading frame {what}: {e}"))
    };
    let mut len = [0u8; 8];
    read_exact_by(s, &mut len, deadline).map_err(|e| io("length", e))?;
    let len = u64::from_ne_bytes(len);
    if len == 0 || len > max_len {
        return Err(Error::new(
            ErrorKind::Protocol,
            format!("frame length {len} outside 1..={max_len}"),
        ));
    }
    let mut body = Vec::new();
    let mut chunk = vec![0u8; (len as usize).min(64 << 10)];
    while (body.len() as u64) < len {
        let n = chunk.len().min((len - body.len() as u64) as usize);
        read_exact_by(s, &mut chunk[..n], deadline).map_err(|e| io("body", e))?;
        body.extend_from_slice(&chunk[..n]);
    }
    let ty = body.remove(0);
    Ok((ty, body))
}

fn serve_one(mut s: TcpStream, handler: &Handler, limits: RpcLimits, key: &AuthKey) {
    let deadline = Instant::now() + limits.io_timeout;
    let _ = s.set_write_timeout(Some(limits.io_timeout));
    if let Err(e) = crate::auth::server(&mut &s, key, Purpose::Rpc, deadline) {
        crate::auth::log_refusal("rpc", s.peer_addr().ok(), &e);
        return;
    }
    let (ty, body) = match read_frame_by(&mut s, limits.max_len, deadline) {
        Ok(f) => f,
        Err(e) => {
            tw_log!(
                Level::Warn,
                "rpc: dropping request from {:?}: {e}",
                s.peer_addr().ok()
            );
            return;
        }
    };
    // Old protocol: no type byte, the whole payload is a Connection JSON.
    let (msg_type, reply_type, body) = match MsgType::from_u8(ty) {
        Some(t) => (t, ty, body),
        None => {
            let mut full = vec![ty];
            full.extend_from_slice(&body);
            (MsgType::Connection, ty, full)
        }
    };
    if let Some(reply) = handler(msg_type, &body) {
        if rpc::write_frame(&mut s, reply_type, &reply).is_ok() {
            let _ = s.shutdown(Shutdown::Write);
            let _ = s.flush();
        }
    }
}

impl Drop for RpcServer {
    fn drop(&mut self) {
        // Release pairs with the Acquire in the accept loop.
        self.stop.store(true, Ordering::Release);
        // SAFETY: `fd` is the listener owned by the thread, still open until the thread exits;
        // shutdown(2) on a listening socket makes a blocked accept return on Linux.
        unsafe { libc::shutdown(self.fd, libc::SHUT_RDWR) };
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let threads = {
            let mut a = self.active.lock().unwrap_or_else(|e| e.into_inner());
            for c in a.conns.values() {
                let _ = c.shutdown(Shutdown::Both);
            }
            std::mem::take(&mut a.threads)
        };
        for t in threads {
            let _ = t.join();
        }
    }
}
