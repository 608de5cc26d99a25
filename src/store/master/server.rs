//! The master's RPC listener: one accept thread, one thread per connection up to a cap (no async
//! runtime), a background tick thread. Every connection waits at most `idle_timeout` for the
//! next request and `io_timeout` for the rest of a frame once it started.

use super::Master;
use crate::log::Level;
use crate::store::proto::{self, FLAG_ONE_WAY, FrameError, Reply, Request, code};
use std::io::Write;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

/// Limits of the RPC server.
#[derive(Debug, Clone)]
pub struct ServerOptions {
    /// Most connections served at once; more are answered with an error and closed.
    pub max_connections: usize,
    /// How long an idle connection is kept.
    pub idle_timeout: Duration,
    /// Deadline for the rest of a frame and for writing a reply.
    pub io_timeout: Duration,
    /// Pre-shared key clients must prove when they connect (`TW_AUTH_KEY`); off = none.
    pub auth_key: crate::auth::AuthKey,
}

impl Default for ServerOptions {
    fn default() -> Self {
        ServerOptions {
            max_connections: 512,
            idle_timeout: Duration::from_secs(300),
            io_timeout: Duration::from_secs(10),
            auth_key: crate::auth::AuthKey::default(),
        }
    }
}

/// A running master RPC server; dropping it stops accepting and ticking.
pub struct MasterServer {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    fd: i32,
    threads: Vec<JoinHandle<()>>,
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
        let fd = listener.as_raw_fd();
        let active = Arc::new(AtomicUsize::new(0));
        let (m, st) = (master.clone(), stop.clone());
        let accept = std::thread::Builder::new()
            .name("tw-master-accept".into())
            .spawn(move || {
                for conn in listener.incoming() {
                    // Acquire pairs with the Release in drop.
                    if st.load(Ordering::Acquire) {
                        break;
                    }
                    match conn {
                        Ok(s) => admit(s, &m, &active, &opts),
                        Err(e) => {
                            tw_log!(Level::Debug, "master accept: {e}");
                            std::thread::sleep(Duration::from_millis(10));
                        }
                    }
                }
            })?;
        let (m, st) = (master, stop.clone());
        let ticker = std::thread::Builder::new()
            .name("tw-master-tick".into())
            .spawn(move || {
                while !st.load(Ordering::Acquire) {
                    m.tick();
                    std::thread::sleep(Duration::from_millis(100));
                }
            })?;
        Ok(MasterServer {
            addr,
            stop,
            fd,
            threads: vec![accept, ticker],
        })
    }

    /// The bound address.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }
}

fn admit(s: TcpStream, master: &Arc<Master>, active: &Arc<AtomicUsize>, opts: &ServerOptions) {
    let _ = s.set_nodelay(true);
    if active.fetch_add(1, Ordering::AcqRel) >= opts.max_connections {
        active.fetch_sub(1, Ordering::AcqRel);
        let mut s = s;
        let _ = s.set_write_timeout(Some(Duration::from_secs(1)));
        let _ = send(
            &mut s,
            &Reply::Error {
                code: code::RPC_FAIL,
                message: "master: too many connections".into(),
            },
        );
        return;
    }
    let (m, a, o) = (master.clone(), active.clone(), opts.clone());
    let spawned = std::thread::Builder::new()
        .name("tw-master-conn".into())
        .spawn(move || {
            serve(s, &m, &o);
            a.fetch_sub(1, Ordering::AcqRel);
        });
    if let Err(e) = spawned {
        active.fetch_sub(1, Ordering::AcqRel);
        tw_log!(
            Level::Error,
            "master: cannot start a connection thread: {e}"
        );
    }
}

fn send(s: &mut TcpStream, r: &Reply) -> std::io::Result<()> {
    proto::write_frame(s, 0, &proto::encode(r))
}

fn serve(mut s: TcpStream, master: &Master, opts: &ServerOptions) {
    let _ = s.set_write_timeout(Some(opts.io_timeout));
    let deadline = std::time::Instant::now() + opts.io_timeout;
    let purpose = crate::auth::Purpose::Store;
    if let Err(e) = crate::auth::server(&mut &s, &opts.auth_key, purpose, deadline) {
        crate::auth::log_refusal("master", s.peer_addr().ok(), &e);
        return;
    }
    loop {
        // Idle wait: until a byte arrives, the peer closes, or the idle deadline passes.
        let _ = s.set_read_timeout(Some(opts.idle_timeout));
        match s.peek(&mut [0u8; 1]) {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        let _ = s.set_read_timeout(Some(opts.io_timeout));
        let (header, body) = match proto::read_frame(&mut s) {
            Ok(f) => f,
            Err(FrameError::Bad(m)) => {
                tw_log!(
                    Level::Warn,
                    "master: bad frame from {:?}: {m}",
                    s.peer_addr().ok()
                );
                let _ = send(
                    &mut s,
                    &Reply::Error {
                        code: code::INVALID_PARAMS,
                        message: m,
                    },
                );
                return;
            }
            Err(_) => return,
        };
        let reply = match proto::decode::<Request>(&body) {
            Ok(req) => master.handle(req),
            Err(m) => Some(Reply::Error {
                code: code::INVALID_PARAMS,
                message: m,
            }),
        };
        if header.flags & FLAG_ONE_WAY != 0 {
            continue;
        }
        let reply = reply.unwrap_or(Reply::Ok);
        if send(&mut s, &reply).is_err() {
            return;
        }
        let _ = s.flush();
    }
}

impl Drop for MasterServer {
    fn drop(&mut self) {
        // Release pairs with the Acquire in the threads.
        self.stop.store(true, Ordering::Release);
        // SAFETY: `fd` is the listener owned by the accept thread, open until that thread exits;
        // shutdown(2) on a listening socket makes a blocked accept return on Linux.
        unsafe { libc::shutdown(self.fd, libc::SHUT_RDWR) };
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}
