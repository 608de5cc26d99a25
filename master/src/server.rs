//! The master's RPC listener, on the connection core (`tidewire::net`: no thread per connection, no
//! async runtime), and a background tick thread. A connection waits at most `idle_timeout` for
//! its next request (parked on the reactor, costing no thread) and `io_timeout` for the rest of
//! a frame once it started; at the cap a new connection gets an error reply and is closed.

use super::Master;
use std::io::Write;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use tidewire::auth::{AuthKey, Purpose};
use tidewire::log::Level;
use tidewire::net::{self, AtCap, Limits, Listening, Next, Prefixed, Session, Want, Worker};
use tidewire::store::proto::{self, FLAG_ONE_WAY, FrameError, HEADER_LEN, Reply, Request, code};
use tidewire::tw_log;

/// Limits of the RPC server.
#[derive(Debug, Clone)]
pub struct ServerOptions {
    /// Most connections open at once; more are answered with an error and closed.
    pub max_connections: usize,
    /// How long an idle connection is kept.
    pub idle_timeout: Duration,
    /// Deadline for the rest of a frame and for writing a reply.
    pub io_timeout: Duration,
    /// Pre-shared key clients must prove when they connect (`TW_AUTH_KEY`); off = none.
    pub auth_key: AuthKey,
}

/// The default connection cap: a cluster's worth of clients (each holds one connection).
pub const DEFAULT_MAX_CONNECTIONS: usize = 16_384;

impl Default for ServerOptions {
    fn default() -> Self {
        ServerOptions {
            max_connections: DEFAULT_MAX_CONNECTIONS,
            idle_timeout: Duration::from_secs(300),
            io_timeout: Duration::from_secs(10),
            auth_key: AuthKey::default(),
        }
    }
}

/// A running master RPC server; dropping it stops accepting and ticking.
pub struct MasterServer {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    listening: Option<Listening>,
    ticker: Option<JoinHandle<()>>,
}

impl MasterServer {
    /// Serves `master` on `listener`.
    pub fn start(
        master: Arc<Master>,
        listener: TcpListener,
        opts: ServerOptions,
    ) -> std::io::Result<MasterServer> {
        let addr = listener.local_addr()?;
        let stop = Arc::new(AtomicBool::new(false));
        let limits = Limits {
            max_connections: opts.max_connections.max(1),
            idle_timeout: opts.idle_timeout,
            first_request: opts.io_timeout.min(opts.idle_timeout),
            head_timeout: opts.io_timeout,
            at_cap: AtCap::Refuse,
        };
        let service = Arc::new(MasterService {
            master: master.clone(),
            opts,
        });
        let listening = net::serve(listener, service, limits)?;
        let st = stop.clone();
        let ticker = std::thread::Builder::new()
            .name("tw-master-tick".into())
            .spawn(move || {
                // Acquire pairs with the Release in drop.
                while !st.load(Ordering::Acquire) {
                    master.tick();
                    std::thread::sleep(Duration::from_millis(100));
                }
            })?;
        Ok(MasterServer {
            addr,
            stop,
            listening: Some(listening),
            ticker: Some(ticker),
        })
    }

    /// The bound address.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }
}

struct MasterService {
    master: Arc<Master>,
    opts: ServerOptions,
}

impl net::Service for MasterService {
    fn name(&self) -> &'static str {
        "master"
    }

    fn open(&self, stream: &TcpStream) -> Box<dyn Session> {
        let _ = stream.set_nodelay(true);
        let _ = stream.set_write_timeout(Some(self.opts.io_timeout));
        let _ = stream.set_read_timeout(Some(self.opts.io_timeout));
        Box::new(MasterSession {
            master: self.master.clone(),
            key: self.opts.auth_key.clone(),
            io_timeout: self.opts.io_timeout,
            proven: !self.opts.auth_key.is_on(),
        })
    }

    fn refuse(&self, fd: RawFd) {
        let reply = Reply::Error {
            code: code::RPC_FAIL,
            message: "master: too many connections".into(),
        };
        let mut frame = Vec::new();
        if proto::write_frame(&mut frame, 0, &proto::encode(&reply)).is_ok() {
            net::write_now(fd, &frame);
        }
    }
}

struct MasterSession {
    master: Arc<Master>,
    key: AuthKey,
    io_timeout: Duration,
    /// The peer proved the key (or none is needed).
    proven: bool,
}

impl Session for MasterSession {
    fn want(&mut self, head: &[u8]) -> Want {
        if !self.proven {
            return tidewire::auth::want_hello(head);
        }
        net::want_frame(head, HEADER_LEN, |h| {
            let h: &[u8; HEADER_LEN] = h.try_into().ok()?;
            proto::parse_header(h)
                .ok()
                .map(|h| HEADER_LEN + h.len as usize)
        })
    }

    fn serve(&mut self, stream: &TcpStream, head: Vec<u8>, worker: &Worker) -> Next {
        let mut r = Prefixed::new(&head, stream);
        if !self.proven {
            let deadline = Instant::now() + self.io_timeout;
            if let Err(e) = tidewire::auth::server(&mut r, &self.key, Purpose::Store, deadline) {
                tidewire::auth::log_refusal("master", stream.peer_addr().ok(), &e);
                return Next::Close;
            }
            self.proven = true;
            let _ = stream.set_read_timeout(Some(self.io_timeout));
            if !r.has_head() && !worker.more_soon(stream.as_raw_fd()) {
                return Next::Park;
            }
        }
        loop {
            if !self.serve_one(&mut r) {
                return Next::Close;
            }
            if !r.has_head() && !worker.more_soon(stream.as_raw_fd()) {
                return Next::Park;
            }
        }
    }
}

impl MasterSession {
    /// Reads, answers and replies to one request. False: the connection ends.
    fn serve_one(&self, r: &mut Prefixed<'_>) -> bool {
        let (header, body) = match proto::read_frame(r) {
            Ok(f) => f,
            Err(FrameError::Bad(m)) => {
                tw_log!(Level::Warn, "master: bad frame: {m}");
                let _ = send(
                    r,
                    &Reply::Error {
                        code: code::INVALID_PARAMS,
                        message: m,
                    },
                );
                return false;
            }
            Err(_) => return false,
        };
        let bad = |message| Reply::Error {
            code: code::INVALID_PARAMS,
            message,
        };
        // Existence queries, the most frequent call, keep their keys in the body.
        let reply = match proto::decode_exist(&body) {
            Some(Ok(keys)) => Some(self.master.exist(&keys)),
            Some(Err(m)) => Some(bad(m)),
            None => match proto::decode::<Request>(&body) {
                Ok(req) => self.master.handle(req),
                Err(m) => Some(bad(m)),
            },
        };
        if header.flags & FLAG_ONE_WAY != 0 {
            return true;
        }
        send(r, &reply.unwrap_or(Reply::Ok)).is_ok()
    }
}

fn send(s: &mut impl Write, r: &Reply) -> std::io::Result<()> {
    proto::write_frame(s, 0, &proto::encode(r))
}

impl Drop for MasterServer {
    fn drop(&mut self) {
        // Release pairs with the Acquire in the ticker.
        self.stop.store(true, Ordering::Release);
        self.listening.take();
        if let Some(t) = self.ticker.take() {
            let _ = t.join();
        }
    }
}
