//! GPU memory over a socket: device bytes move through the calling thread's two pinned chunks on
//! its own non-blocking stream, with the copy of chunk k+1 running while chunk k is on the
//! socket (send), or chunk k's upload running while chunk k+1 is read (receive). Used on both the
//! initiator (TCP lanes) and the target (server sessions).

use super::net::{RecvBuf, send_all};
use crate::error::Error;
use crate::gpu::{CHUNK, with_stager};
use std::io::{self, IoSlice, Read};
use std::os::fd::RawFd;

/// A staged transfer failed on the GPU side or on the socket.
#[derive(Debug)]
pub enum StageError {
    /// A CUDA call failed (or CUDA is unavailable). For receives, the payload was still consumed,
    /// so the stream stays in sync.
    Cuda(Error),
    /// The socket failed; the stream is unusable.
    Io(io::Error),
}

impl From<Error> for StageError {
    fn from(e: Error) -> Self {
        StageError::Cuda(e)
    }
}

impl From<StageError> for io::Error {
    fn from(e: StageError) -> io::Error {
        match e {
            StageError::Io(e) => e,
            StageError::Cuda(e) => io::Error::other(e.to_string()),
        }
    }
}

/// Sends `prefix` and then `len` bytes of device memory at `src` on `dev`.
pub fn send_from_device(
    fd: RawFd,
    prefix: &[u8],
    dev: u32,
    src: u64,
    len: usize,
) -> Result<(), StageError> {
    with_stager(dev, |st| {
        st.ensure_bufs()?;
        let chunks = len.div_ceil(CHUNK).max(1);
        let res = (|| -> Result<(), StageError> {
            st.dtoh(0, src, len.min(CHUNK))?;
            for k in 0..chunks {
                let off = k * CHUNK;
                let n = (len - off).min(CHUNK);
                if k + 1 < chunks {
                    let next = off + CHUNK;
                    st.dtoh((k + 1) % 2, src + next as u64, (len - next).min(CHUNK))?;
                }
                st.wait(k % 2)?;
                let b = &st.buf(k % 2)[..n];
                let r = if k == 0 && !prefix.is_empty() {
                    send_all(fd, &mut [IoSlice::new(prefix), IoSlice::new(b)])
                } else {
                    send_all(fd, &mut [IoSlice::new(b)])
                };
                r.map_err(StageError::Io)?;
            }
            Ok(())
        })();
        if res.is_err() {
            // No copy may still be writing into the buffers when they are used next.
            let _ = st.sync();
        }
        res
    })
}

/// Reads `len` payload bytes (through `rb`) into device memory at `dst` on `dev`. On a CUDA
/// failure the rest of the payload is still read and dropped, so the stream stays usable.
pub fn recv_to_device(
    rb: &mut RecvBuf,
    r: &mut impl Read,
    dev: u32,
    dst: u64,
    len: usize,
) -> Result<(), StageError> {
    let mut consumed = 0usize;
    let res = with_stager(dev, |st| {
        st.ensure_bufs()?;
        let chunks = len.div_ceil(CHUNK);
        let res = (|| -> Result<(), StageError> {
            for k in 0..chunks {
                let i = k % 2;
                let off = k * CHUNK;
                let n = (len - off).min(CHUNK);
                if k >= 2 {
                    // Buffer i's previous upload must be done before it is refilled.
                    st.wait(i)?;
                }
                rb.read_into(r, &mut st.buf(i)[..n])
                    .map_err(StageError::Io)?;
                consumed = off + n;
                st.htod(i, dst + off as u64, n)?;
            }
            st.sync()?;
            Ok(())
        })();
        if res.is_err() {
            let _ = st.sync();
        }
        res
    });
    match res {
        Err(StageError::Cuda(e)) => {
            rb.skip(r, (len - consumed) as u64)
                .map_err(StageError::Io)?;
            Err(StageError::Cuda(e))
        }
        other => other,
    }
}

/// Copies device memory into a small host buffer (inline replies).
pub fn read_small(dev: u32, dst: &mut [u8], src: u64) -> Result<(), Error> {
    with_stager(dev, |st| st.read_small(dst, src))
}
