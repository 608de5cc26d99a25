//! The RPC/handshake listener, on the connection core (`crate::net`; one request and reply per
//! connection, as Mooncake). Every request must arrive whole within `io_timeout` of its
//! connection: a small request is read whole by the reactor before a worker takes it, so a
//! client trickling bytes holds no thread; connections beyond `max_concurrent` are closed at
//! once with a warning. Dropping the server stops accepting and ends every open request
//! connection, so it returns promptly whatever clients do. With an `auth_key`, the peer must prove the key (`crate::auth`)
//! before its request is read, within the same deadline.

use super::rpc::{self, MsgType};
use crate::auth::{AuthKey, Purpose};
use crate::error::{Error, ErrorKind, Result};
use crate::log::Level;
use crate::net::{self, AtCap, Limits, Listening, Next, Prefixed, Session, Want, Worker};
use std::io::Read;
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Answers one request: (type, body) → reply body. `None` closes without a reply.
pub type Handler = dyn Fn(MsgType, &[u8]) -> Option<Vec<u8>> + Send + Sync;

/// A running RPC server (on the connection core, `crate::net`).
pub struct RpcServer {
    port: u16,
    _listening: Listening,
}

/// Limits of an [`RpcServer`].
#[derive(Debug, Clone, Copy)]
pub struct RpcLimits {
    /// Time for a whole request to arrive (and for the reply to be written).
    pub io_timeout: Duration,
    /// Largest frame accepted.
    pub max_len: u64,
    /// Request connections open at once.
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
        let core_limits = Limits {
            max_connections: limits.max_concurrent.max(1),
            idle_timeout: limits.io_timeout,
            first_request: limits.io_timeout,
            head_timeout: limits.io_timeout,
            at_cap: AtCap::Refuse,
        };
        let service = Arc::new(RpcService {
            handler,
            limits,
            key,
        });
        let listening = net::serve(listener, service, core_limits)?;
        Ok(RpcServer {
            port,
            _listening: listening,
        })
    }

    /// The bound port.
    pub fn port(&self) -> u16 {
        self.port
    }
}

struct RpcService {
    handler: Arc<Handler>,
    limits: RpcLimits,
    key: AuthKey,
}

impl net::Service for RpcService {
    fn name(&self) -> &'static str {
        "rpc"
    }

    fn open(&self, stream: &TcpStream) -> Box<dyn Session> {
        let _ = stream.set_write_timeout(Some(self.limits.io_timeout));
        Box::new(RpcSession {
            handler: self.handler.clone(),
            limits: self.limits,
            key: self.key.clone(),
            started: Instant::now(),
        })
    }
}

/// One request and its reply per connection.
struct RpcSession {
    handler: Arc<Handler>,
    limits: RpcLimits,
    key: AuthKey,
    started: Instant,
}

impl Session for RpcSession {
    fn want(&mut self, head: &[u8]) -> Want {
        if self.key.is_on() {
            return crate::auth::want_hello(head);
        }
        net::want_frame(head, 8, |h| {
            let len = u64::from_ne_bytes(h.try_into().ok()?);
            (1..=self.limits.max_len)
                .contains(&len)
                .then(|| 8 + len as usize)
        })
    }

    fn serve(&mut self, stream: &TcpStream, head: Vec<u8>, _worker: &Worker) -> Next {
        let mut r = Prefixed::new(&head, stream);
        serve_one(
            &mut r,
            stream,
            &*self.handler,
            self.limits,
            &self.key,
            self.started,
        );
        Next::Close
    }
}

/// Reads exactly `buf.len()` bytes before `deadline`.
fn read_exact_by(s: &mut Prefixed<'_>, buf: &mut [u8], deadline: Instant) -> std::io::Result<()> {
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
fn read_frame_by(s: &mut Prefixed<'_>, max_len: u64, deadline: Instant) -> Result<(u8, Vec<u8>)> {
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

fn serve_one(
    r: &mut Prefixed<'_>,
    stream: &TcpStream,
    handler: &Handler,
    limits: RpcLimits,
    key: &AuthKey,
    started: Instant,
) {
    let deadline = started + limits.io_timeout;
    if let Err(e) = crate::auth::server(r, key, Purpose::Rpc, deadline) {
        crate::auth::log_refusal("rpc", stream.peer_addr().ok(), &e);
        return;
    }
    let (ty, body) = match read_frame_by(r, limits.max_len, deadline) {
        Ok(f) => f,
        Err(e) => {
            tw_log!(
                Level::Warn,
                "rpc: dropping request from {:?}: {e}",
                stream.peer_addr().ok()
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
        if rpc::write_frame(r, reply_type, &reply).is_ok() {
            let _ = stream.shutdown(Shutdown::Write);
        }
    }
}
