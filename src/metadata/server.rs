//! The RPC/handshake listener: one named thread, serial like Mooncake's daemon, with a read
//! deadline per connection so a silent client cannot hold it. Shutdown wakes `accept` by shutting
//! the listening socket down, so the thread sleeps in the kernel while idle.

use super::rpc::{self, MsgType};
use crate::log::Level;
use std::io::Write;
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

/// Answers one request: (type, body) → reply body. `None` closes without a reply.
pub type Handler = dyn Fn(MsgType, &[u8]) -> Option<Vec<u8>> + Send + Sync;

/// A running RPC server.
pub struct RpcServer {
    port: u16,
    stop: Arc<AtomicBool>,
    fd: i32,
    thread: Option<JoinHandle<()>>,
}

impl RpcServer {
    /// Starts serving on `listener`.
    pub fn start(
        listener: TcpListener,
        handler: Arc<Handler>,
        io_timeout: Duration,
        max_len: u64,
    ) -> std::io::Result<RpcServer> {
        let port = listener.local_addr()?.port();
        let stop = Arc::new(AtomicBool::new(false));
        let fd = listener.as_raw_fd();
        let stop2 = stop.clone();
        let thread = std::thread::Builder::new()
            .name("tw-rpc".into())
            .spawn(move || {
                for conn in listener.incoming() {
                    // Acquire pairs with the Release in `drop`: after the wake-up we see the flag.
                    if stop2.load(Ordering::Acquire) {
                        break;
                    }
                    match conn {
                        Ok(s) => serve_one(s, &*handler, io_timeout, max_len),
                        Err(e) => {
                            tw_log!(Level::Debug, "rpc accept: {e}");
                            if stop2.load(Ordering::Acquire) {
                                break;
                            }
                            std::thread::sleep(Duration::from_millis(10));
                        }
                    }
                }
            })?;
        Ok(RpcServer {
            port,
            stop,
            fd,
            thread: Some(thread),
        })
    }

    /// The bound port.
    pub fn port(&self) -> u16 {
        self.port
    }
}

fn serve_one(mut s: TcpStream, handler: &Handler, io_timeout: Duration, max_len: u64) {
    let _ = s.set_read_timeout(Some(io_timeout));
    let _ = s.set_write_timeout(Some(io_timeout));
    let (ty, body) = match rpc::read_frame(&mut s, max_len) {
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
    }
}
