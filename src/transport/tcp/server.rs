//! Data server: one accept thread and one named thread per connection. Every request's range is
//! checked against the remote-accessible registered regions before a byte is touched. Small
//! replies are gathered and sent with one syscall once no complete request is left buffered.

use super::client::DIRECT_PAYLOAD;
use super::net::{RecvBuf, send_all};
use super::wire::{HEADER_LEN, Header, STATUS_ADDR_REJECTED, STATUS_OK, status_frame};
use crate::log::Level;
use crate::memory::{Access, Registry, raw};
use std::io::{self, IoSlice};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

const RECV_BUF: usize = 256 << 10;
/// READ payloads up to this size are copied into the reply buffer and sent together.
const INLINE_REPLY: u64 = 32 << 10;
const FLUSH_AT: usize = 512 << 10;

type Sessions = Arc<Mutex<Vec<(TcpStream, JoinHandle<()>)>>>;

/// A running data server.
pub struct TcpServer {
    port: u16,
    stop: Arc<AtomicBool>,
    fd: i32,
    accept: Option<JoinHandle<()>>,
    sessions: Sessions,
}

impl TcpServer {
    /// Serves `listener` against `registry`.
    pub fn start(
        listener: TcpListener,
        registry: Arc<Registry>,
        io_timeout: Duration,
    ) -> io::Result<TcpServer> {
        let port = listener.local_addr()?.port();
        let stop = Arc::new(AtomicBool::new(false));
        let sessions: Sessions = Arc::default();
        let fd = listener.as_raw_fd();
        let (stop2, sessions2) = (stop.clone(), sessions.clone());
        let accept = std::thread::Builder::new()
            .name("tw-tcp-accept".into())
            .spawn(move || {
                let counter = AtomicUsize::new(0);
                for conn in listener.incoming() {
                    // Acquire pairs with the Release in `drop`.
                    if stop2.load(Ordering::Acquire) {
                        break;
                    }
                    let stream = match conn {
                        Ok(s) => s,
                        Err(e) => {
                            tw_log!(Level::Debug, "tcp accept: {e}");
                            std::thread::sleep(Duration::from_millis(10));
                            continue;
                        }
                    };
                    let _ = stream.set_nodelay(true);
                    let _ = stream.set_write_timeout(Some(io_timeout));
                    let Ok(keep) = stream.try_clone() else {
                        continue;
                    };
                    let reg = registry.clone();
                    let n = counter.fetch_add(1, Ordering::Relaxed);
                    let spawned = std::thread::Builder::new()
                        .name(format!("tw-tcp-srv-{n}"))
                        .spawn(move || {
                            let peer = stream.peer_addr().ok();
                            if let Err(e) = serve(&stream, &reg) {
                                tw_log!(Level::Debug, "tcp session {peer:?} ended: {e}");
                            }
                            // The accept thread keeps a clone of the fd for shutdown; end the
                            // connection itself so the peer sees it close now.
                            let _ = stream.shutdown(Shutdown::Both);
                        });
                    let mut list = sessions2.lock().unwrap_or_else(|e| e.into_inner());
                    list.retain(|(_, h)| !h.is_finished());
                    match spawned {
                        Ok(h) => list.push((keep, h)),
                        Err(e) => tw_log!(Level::Error, "cannot spawn tcp session thread: {e}"),
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
        let list = std::mem::take(&mut *self.sessions.lock().unwrap_or_else(|e| e.into_inner()));
        for (s, _) in &list {
            let _ = s.shutdown(Shutdown::Both);
        }
        for (_, h) in list {
            let _ = h.join();
        }
    }
}

fn serve(stream: &TcpStream, registry: &Registry) -> io::Result<()> {
    let fd = stream.as_raw_fd();
    let mut reader = stream;
    let mut rb = RecvBuf::new(RECV_BUF);
    let mut out: Vec<u8> = Vec::with_capacity(64 << 10);
    let flush = |out: &mut Vec<u8>| -> io::Result<()> {
        if !out.is_empty() {
            send_all(fd, &mut [IoSlice::new(out)])?;
            out.clear();
        }
        Ok(())
    };
    let mut last_large_write = false;
    loop {
        if rb.available() < HEADER_LEN {
            flush(&mut out)?;
        }
        // After a large WRITE the next request is likely one too: read just its header so
        // that its payload goes straight into registered memory (one copy, not two).
        let filled = if last_large_write {
            rb.fill_exact(&mut reader, HEADER_LEN)?
        } else {
            rb.fill(&mut reader, HEADER_LEN)?
        };
        if !filled {
            return Ok(());
        }
        let h = Header::decode(rb.take(HEADER_LEN).try_into().expect("24 bytes"));
        let checked = registry.check_place(h.addr, h.size, Access::Remote);
        if h.vm {
            // Same-host path: validate only; the initiator copies. Needs acknowledged framing.
            if !h.v2 {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "validate-only request without v2 framing",
                ));
            }
            let code = if checked.is_ok() {
                STATUS_OK
            } else {
                STATUS_ADDR_REJECTED
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
            flush(&mut out)?;
            // A rejected v2 READ leaves the stream in sync (no payload follows either way);
            // anything else cannot be resynchronised, so the connection ends as in Mooncake.
            if h.write || !h.v2 {
                return Ok(());
            }
            continue;
        }
        let size = h.size as usize;
        if let Ok(Some(dev)) = checked {
            if !serve_gpu(fd, &mut reader, &mut rb, &mut out, h, dev)? {
                flush(&mut out)?;
                return Ok(());
            }
            if out.len() >= FLUSH_AT {
                flush(&mut out)?;
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
            // SAFETY: the range was checked against remote-accessible registered regions.
            let src = unsafe { raw::bytes(h.addr, size) };
            if h.size <= INLINE_REPLY {
                out.extend_from_slice(src);
            } else {
                send_all(fd, &mut [IoSlice::new(&out), IoSlice::new(src)])?;
                out.clear();
            }
        }
        if out.len() >= FLUSH_AT {
            flush(&mut out)?;
        }
    }
}

/// Serves one checked request on GPU memory of device `dev`, staged through pinned buffers.
/// `Ok(false)`: the GPU copy failed and the connection must end after `out` is flushed (a v2
/// peer gets a rejection frame; a rejected v2 READ keeps the connection).
fn serve_gpu(
    fd: i32,
    reader: &mut &TcpStream,
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
