//! Socket helpers: vectored sends without SIGPIPE, and a receive buffer that batches small
//! frames into few syscalls while large payloads go straight into their destination.

use std::io::{self, IoSlice, Read};
use std::os::fd::RawFd;

/// Sends every byte of `bufs` with `sendmsg(MSG_NOSIGNAL)` (a vanished peer gives `EPIPE`, never
/// a signal that would kill the host process).
pub fn send_all(fd: RawFd, mut bufs: &mut [IoSlice<'_>]) -> io::Result<()> {
    IoSlice::advance_slices(&mut bufs, 0);
    while !bufs.is_empty() {
        let n = bufs.len().min(libc::UIO_MAXIOV as usize);
        // SAFETY: msghdr is plain data; all-zero is valid.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        // IoSlice is ABI-compatible with iovec on Unix (documented by std).
        msg.msg_iov = bufs.as_ptr() as *mut libc::iovec;
        msg.msg_iovlen = n as _;
        // SAFETY: msg points at `n` live iovecs borrowed from `bufs` for the duration of the call.
        let r = unsafe { libc::sendmsg(fd, &msg, libc::MSG_NOSIGNAL) };
        if r < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if r == 0 {
            return Err(io::Error::new(
                io::ErrorKind::WriteZero,
                "sendmsg wrote nothing",
            ));
        }
        IoSlice::advance_slices(&mut bufs, r as usize);
    }
    Ok(())
}

pub use crate::net::{SPIN_WAIT, spin_readable, wait_readable};

/// A socket reader that, when no byte is there yet, polls for [`SPIN_WAIT`] before it blocks
/// (bounded by the socket's read timeout as usual). For replies and payloads already on their
/// way, where the next segment is microseconds off.
pub struct SpinRead<'a>(pub &'a std::net::TcpStream);

impl Read for SpinRead<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        use std::os::fd::AsRawFd;
        let fd = self.0.as_raw_fd();
        for attempt in 0..2 {
            // SAFETY: `buf` is a live, writable slice of `buf.len()` bytes.
            let r =
                unsafe { libc::recv(fd, buf.as_mut_ptr().cast(), buf.len(), libc::MSG_DONTWAIT) };
            if r >= 0 {
                return Ok(r as usize);
            }
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::WouldBlock {
                return Err(e);
            }
            let mut pfd = [libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            }];
            if attempt == 1 || !spin_readable(&mut pfd, SPIN_WAIT) {
                break;
            }
        }
        (&mut &*self.0).read(buf)
    }
}

/// A reader over a socket with a deadline for one whole frame (not per `read` call, so a peer
/// trickling a byte at a time cannot keep a frame open forever). The deadline starts at
/// construction ([`FrameReader::started`]) or with the first byte read ([`FrameReader::lazy`]).
/// It is checked around every `read`, and each `read` is bounded by the socket's own timeout, so
/// a frame fails at most one socket timeout after its deadline.
pub struct FrameReader<'a> {
    stream: &'a std::net::TcpStream,
    budget: std::time::Duration,
    until: Option<std::time::Instant>,
}

impl<'a> FrameReader<'a> {
    /// A frame that must arrive within `budget` from now.
    pub fn started(stream: &'a std::net::TcpStream, budget: std::time::Duration) -> Self {
        FrameReader {
            stream,
            budget,
            until: Some(std::time::Instant::now() + budget),
        }
    }

    /// A frame that must arrive within `budget` of its first byte (waiting for that first byte
    /// is not limited here).
    pub fn lazy(stream: &'a std::net::TcpStream, budget: std::time::Duration) -> Self {
        FrameReader {
            stream,
            budget,
            until: None,
        }
    }

    fn late(&self) -> io::Result<()> {
        match self.until {
            Some(u) if std::time::Instant::now() >= u => Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("frame not complete within {:?}", self.budget),
            )),
            _ => Ok(()),
        }
    }
}

impl Read for FrameReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.late()?;
        // Polls before sleeping, for a frame's first byte too: in a request/reply loop the
        // peer's next request is usually closer than a sleeping thread's wake-up.
        let n = SpinRead(self.stream).read(buf)?;
        if n > 0 && self.until.is_none() {
            self.until = Some(std::time::Instant::now() + self.budget);
        } else if n > 0 && n < buf.len() {
            // A short read with the deadline passed: the peer is trickling.
            self.late()?;
        }
        Ok(n)
    }
}

/// A receive buffer.
pub struct RecvBuf {
    buf: Box<[u8]>,
    start: usize,
    end: usize,
}

impl RecvBuf {
    /// A buffer of `cap` bytes.
    pub fn new(cap: usize) -> RecvBuf {
        RecvBuf {
            buf: vec![0u8; cap].into_boxed_slice(),
            start: 0,
            end: 0,
        }
    }

    /// Drops whatever is buffered.
    pub fn clear(&mut self) {
        self.start = 0;
        self.end = 0;
    }

    /// Appends `bytes` (at most what fits after the buffered ones) as if read from the socket.
    pub fn push(&mut self, bytes: &[u8]) {
        if self.end + bytes.len() > self.buf.len() {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        let k = bytes.len().min(self.buf.len() - self.end);
        self.buf[self.end..self.end + k].copy_from_slice(&bytes[..k]);
        self.end += k;
    }

    /// Bytes buffered and not consumed.
    pub fn available(&self) -> usize {
        self.end - self.start
    }

    /// Makes at least `n` (≤ capacity) bytes available, reading as much as the socket has
    /// (several small frames per system call). `Ok(false)` on a clean end of stream with nothing
    /// buffered; an end of stream mid-frame is `UnexpectedEof`.
    pub fn fill(&mut self, r: &mut impl Read, n: usize) -> io::Result<bool> {
        self.fill_to(r, n, true)
    }

    /// Like [`RecvBuf::fill`], but never reads past the `n`th byte: used before a large payload
    /// that should go straight into its destination instead of through this buffer.
    pub fn fill_exact(&mut self, r: &mut impl Read, n: usize) -> io::Result<bool> {
        self.fill_to(r, n, false)
    }

    fn fill_to(&mut self, r: &mut impl Read, n: usize, greedy: bool) -> io::Result<bool> {
        debug_assert!(n <= self.buf.len());
        if self.available() >= n {
            return Ok(true);
        }
        if self.start + n > self.buf.len() {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        while self.available() < n {
            let stop = if greedy {
                self.buf.len()
            } else {
                self.start + n
            };
            match r.read(&mut self.buf[self.end..stop]) {
                Ok(0) if self.available() == 0 => return Ok(false),
                Ok(0) => {
                    return Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "peer closed mid-frame",
                    ));
                }
                Ok(k) => self.end += k,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(true)
    }

    /// Consumes `n` buffered bytes (after a successful `fill(n)`).
    pub fn take(&mut self, n: usize) -> &[u8] {
        let s = self.start;
        self.start += n;
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
            return &self.buf[s..s + n];
        }
        &self.buf[s..s + n]
    }

    /// Reads exactly `dst.len()` bytes into `dst`: buffered bytes first, then large remainders
    /// straight from the socket, small ones through the buffer.
    pub fn read_into(&mut self, r: &mut impl Read, dst: &mut [u8]) -> io::Result<()> {
        let mut done = 0;
        while done < dst.len() {
            let have = self.available();
            if have > 0 {
                let k = have.min(dst.len() - done);
                dst[done..done + k].copy_from_slice(&self.buf[self.start..self.start + k]);
                self.take(k);
                done += k;
                continue;
            }
            let left = dst.len() - done;
            if left >= self.buf.len() / 4 {
                match r.read(&mut dst[done..]) {
                    Ok(0) => {
                        return Err(io::Error::new(
                            io::ErrorKind::UnexpectedEof,
                            "peer closed mid-payload",
                        ));
                    }
                    Ok(k) => done += k,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(e),
                }
            } else if !self.fill(r, 1)? {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "peer closed mid-payload",
                ));
            }
        }
        Ok(())
    }

    /// Discards exactly `n` bytes.
    pub fn skip(&mut self, r: &mut impl Read, mut n: u64) -> io::Result<()> {
        while n > 0 {
            if self.available() == 0 && !self.fill(r, 1)? {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "peer closed mid-payload",
                ));
            }
            let k = (self.available() as u64).min(n) as usize;
            self.take(k);
            n -= k as u64;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reader that returns at most `chunk` bytes per call.
    struct Trickle<'a>(&'a [u8], usize);
    impl Read for Trickle<'_> {
        fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
            let k = self.0.len().min(out.len()).min(self.1);
            out[..k].copy_from_slice(&self.0[..k]);
            self.0 = &self.0[k..];
            Ok(k)
        }
    }

    #[test]
    fn recvbuf_mixes_small_and_direct_reads() {
        let data: Vec<u8> = (0..10_000u32).map(|i| (i * 7) as u8).collect();
        for chunk in [1, 3, 64, 5000] {
            let mut src = Trickle(&data, chunk);
            let mut rb = RecvBuf::new(256);
            assert!(rb.fill(&mut src, 24).unwrap());
            assert_eq!(rb.take(24), &data[..24]);
            let mut big = vec![0u8; 5000];
            rb.read_into(&mut src, &mut big).unwrap();
            assert_eq!(&big[..], &data[24..5024]);
            rb.skip(&mut src, 10).unwrap();
            let mut small = vec![0u8; 100];
            rb.read_into(&mut src, &mut small).unwrap();
            assert_eq!(&small[..], &data[5034..5134]);
            let mut rest = vec![0u8; 10_000 - 5134];
            rb.read_into(&mut src, &mut rest).unwrap();
            assert!(!rb.fill(&mut src, 1).unwrap(), "clean EOF");
            let mut more = [0u8; 1];
            assert_eq!(
                rb.read_into(&mut src, &mut more).unwrap_err().kind(),
                io::ErrorKind::UnexpectedEof
            );
        }
    }
}
