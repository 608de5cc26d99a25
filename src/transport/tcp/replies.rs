//! A server session's replies not sent yet: small frames (status frames, acks, small READ
//! payloads) copied into one buffer, large READ payloads kept by reference into registered
//! memory. Everything goes out in order with one `sendmsg` per flush, so a batch of mid-size
//! READs costs one system call and one push instead of one per request.
//!
//! Payloads kept by reference must stay readable until the flush: they all lie in one registered
//! region, which the session's pin slot names until then (see `memory::pins`). The session flushes
//! before it reads anything else into memory (a WRITE payload, which could overwrite bytes a
//! pending READ still has to send), before it touches another region, and before it waits for
//! input.

use super::net::send_all;
use crate::memory::raw;
use std::io::{self, IoSlice};
use std::os::fd::RawFd;

/// Most bytes of READ payloads kept back for one send.
pub const GATHER_MAX: usize = 2 << 20;

/// Replies in order; see the module docs.
pub struct Replies {
    frames: Vec<u8>,
    /// Large READ payloads: (length of `frames` when the payload was queued, address, length).
    payloads: Vec<(usize, u64, usize)>,
    payload_bytes: usize,
    /// The registered region (its base) every payload in `payloads` lies in.
    region: u64,
}

impl Replies {
    /// No reply pending.
    pub fn new() -> Replies {
        Replies {
            frames: Vec::with_capacity(64 << 10),
            payloads: Vec::new(),
            payload_bytes: 0,
            region: 0,
        }
    }

    /// The small-frame buffer, to append to. Replies appended here go out after every payload
    /// queued before.
    pub fn frames(&mut self) -> &mut Vec<u8> {
        &mut self.frames
    }

    /// The region the pending payloads lie in, when there are any.
    pub fn held_region(&self) -> Option<u64> {
        (!self.payloads.is_empty()).then_some(self.region)
    }

    /// Bytes waiting to go out.
    pub fn len(&self) -> usize {
        self.frames.len() + self.payload_bytes
    }

    /// Whether the pending payloads reached [`GATHER_MAX`].
    pub fn payloads_full(&self) -> bool {
        self.payload_bytes >= GATHER_MAX
    }

    /// Queues `len` bytes at `addr` as the next reply bytes.
    ///
    /// # Safety
    /// `[addr, addr + len)` must lie in the registered region `region`, which the caller's pin
    /// slot names, and stay so until the next [`Replies::flush`] (the caller neither leaves the
    /// slot nor enters another region while payloads are pending).
    pub unsafe fn push_payload(&mut self, region: u64, addr: u64, len: usize) {
        debug_assert!(self.payloads.is_empty() || self.region == region);
        self.region = region;
        self.payloads.push((self.frames.len(), addr, len));
        self.payload_bytes += len;
    }

    /// Drops everything pending (the connection it was for has ended).
    pub fn discard(&mut self) {
        self.frames.clear();
        self.payloads.clear();
        self.payload_bytes = 0;
    }

    /// Sends everything pending on `fd`, in order.
    pub fn flush(&mut self, fd: RawFd) -> io::Result<()> {
        if self.payloads.is_empty() {
            if !self.frames.is_empty() {
                send_all(fd, &mut [IoSlice::new(&self.frames)])?;
                self.frames.clear();
            }
            return Ok(());
        }
        let mut iov: Vec<IoSlice<'_>> = Vec::with_capacity(self.payloads.len() * 2 + 1);
        let mut at = 0;
        for &(before, addr, len) in &self.payloads {
            if before > at {
                iov.push(IoSlice::new(&self.frames[at..before]));
                at = before;
            }
            // SAFETY: `push_payload`'s contract: the range is registered memory that its region's
            // pin keeps from being unregistered until this flush returns.
            iov.push(IoSlice::new(unsafe { raw::bytes(addr, len) }));
        }
        if self.frames.len() > at {
            iov.push(IoSlice::new(&self.frames[at..]));
        }
        let sent = send_all(fd, &mut iov);
        drop(iov);
        self.frames.clear();
        self.payloads.clear();
        self.payload_bytes = 0;
        sent
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::os::fd::AsRawFd;
    use std::os::unix::net::UnixStream;

    #[test]
    fn frames_and_payloads_go_out_in_order() {
        let (a, mut b) = UnixStream::pair().unwrap();
        let p1 = vec![1u8; 100_000];
        let p2 = vec![2u8; 70_000];
        let mut r = Replies::new();
        r.frames().extend_from_slice(b"AAAA");
        // SAFETY: the vectors outlive the flush below (the test's stand-in for a pinned region).
        unsafe { r.push_payload(7, p1.as_ptr() as u64, p1.len()) };
        r.frames().extend_from_slice(b"BB");
        // SAFETY: as above.
        unsafe { r.push_payload(7, p2.as_ptr() as u64, p2.len()) };
        r.frames().extend_from_slice(b"C");
        assert_eq!(r.held_region(), Some(7));
        assert_eq!(r.len(), 4 + 100_000 + 2 + 70_000 + 1);
        let reader = std::thread::spawn(move || {
            let mut got = Vec::new();
            b.read_to_end(&mut got).unwrap();
            got
        });
        r.flush(a.as_raw_fd()).unwrap();
        assert_eq!(r.held_region(), None);
        assert_eq!(r.len(), 0);
        drop(a);
        let got = reader.join().unwrap();
        let mut want = b"AAAA".to_vec();
        want.extend_from_slice(&p1);
        want.extend_from_slice(b"BB");
        want.extend_from_slice(&p2);
        want.push(b'C');
        assert!(got == want, "bytes out of order");
    }
}
