//! The few system calls the connection core needs that std does not wrap: an epoll instance,
//! an eventfd to wake it, non-blocking receive and send, and `shutdown(2)` by descriptor.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

/// Readable, the peer's end of stream, errors: what the core waits for on a connection.
/// One-shot: after an event the connection is disarmed until the reactor waits on it again
/// ([`Epoll::rearm`]), so a connection a worker is serving costs the reactor no wake-up per
/// request; re-arming reports bytes already there, so none is missed.
pub const CONN_EVENTS: u32 =
    (libc::EPOLLIN | libc::EPOLLRDHUP | libc::EPOLLET | libc::EPOLLONESHOT) as u32;
/// A listening socket or the wake-up eventfd: level-triggered readable.
pub const LEVEL_IN: u32 = libc::EPOLLIN as u32;

/// An epoll instance.
pub struct Epoll(OwnedFd);

impl Epoll {
    /// A new epoll instance (close-on-exec).
    pub fn new() -> io::Result<Epoll> {
        // SAFETY: plain system call without pointers.
        let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` was just returned by epoll_create1 and is owned by nobody else.
        Ok(Epoll(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    fn ctl(&self, op: i32, fd: RawFd, events: u32, token: u64) -> io::Result<()> {
        let mut ev = libc::epoll_event { events, u64: token };
        // SAFETY: `ev` is a live epoll_event for the duration of the call; the kernel copies it.
        let r = unsafe { libc::epoll_ctl(self.0.as_raw_fd(), op, fd, &mut ev) };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Watches `fd` for `events`, reporting `token`.
    pub fn add(&self, fd: RawFd, events: u32, token: u64) -> io::Result<()> {
        self.ctl(libc::EPOLL_CTL_ADD, fd, events, token)
    }

    /// Arms a one-shot `fd` again (an event is reported at once if it is ready now).
    pub fn rearm(&self, fd: RawFd, events: u32, token: u64) -> io::Result<()> {
        self.ctl(libc::EPOLL_CTL_MOD, fd, events, token)
    }

    /// Stops watching `fd` (closing it does the same).
    pub fn delete(&self, fd: RawFd) -> io::Result<()> {
        self.ctl(libc::EPOLL_CTL_DEL, fd, 0, 0)
    }

    /// Waits at most `timeout` for events, filling `out`; returns how many arrived.
    pub fn wait(&self, out: &mut [libc::epoll_event], timeout: Duration) -> io::Result<usize> {
        let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
        // SAFETY: `out` is a live, writable slice of `out.len()` epoll_event.
        let r = unsafe {
            libc::epoll_wait(
                self.0.as_raw_fd(),
                out.as_mut_ptr(),
                out.len().min(i32::MAX as usize) as i32,
                ms,
            )
        };
        if r < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                return Ok(0);
            }
            return Err(e);
        }
        Ok(r as usize)
    }
}

/// An eventfd: any thread may `wake` it; the reactor `drain`s it.
pub struct Wake(OwnedFd);

impl Wake {
    /// A new non-blocking eventfd.
    pub fn new() -> io::Result<Wake> {
        // SAFETY: plain system call without pointers.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` was just returned by eventfd and is owned by nobody else.
        Ok(Wake(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    /// The descriptor to watch.
    pub fn fd(&self) -> RawFd {
        self.0.as_raw_fd()
    }

    /// Makes the eventfd readable.
    pub fn wake(&self) {
        let one = 1u64;
        // SAFETY: writes the 8 bytes of `one`, a live u64; a full counter (EAGAIN) is harmless,
        // the eventfd is readable then anyway.
        unsafe { libc::write(self.fd(), (&one as *const u64).cast(), 8) };
    }

    /// Resets the eventfd.
    pub fn drain(&self) {
        let mut v = 0u64;
        // SAFETY: reads at most 8 bytes into `v`, a live u64.
        unsafe { libc::read(self.fd(), (&mut v as *mut u64).cast(), 8) };
    }
}

/// Receives into `buf` without blocking: `Ok(0)` is the end of the stream,
/// `WouldBlock` means nothing is there yet.
pub fn recv_now(fd: RawFd, buf: &mut [u8]) -> io::Result<usize> {
    loop {
        // SAFETY: `buf` is a live, writable slice of `buf.len()` bytes.
        let r = unsafe { libc::recv(fd, buf.as_mut_ptr().cast(), buf.len(), libc::MSG_DONTWAIT) };
        if r >= 0 {
            return Ok(r as usize);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// Sends what fits of `buf` without blocking (for short refusals written by the reactor).
pub fn send_now(fd: RawFd, buf: &[u8]) {
    // SAFETY: `buf` is a live slice of `buf.len()` bytes; errors are ignored on purpose.
    unsafe {
        libc::send(
            fd,
            buf.as_ptr().cast(),
            buf.len(),
            libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
        )
    };
}

/// How long a reader waiting for bytes that are on their way polls (yielding the CPU between
/// polls) before it sleeps in the kernel. On virtual machines a thread whose CPU went idle takes
/// tens of microseconds to wake, far longer than the gap between two segments of a payload in
/// flight; a polling thread keeps its CPU awake and gives it to runnable threads meanwhile.
pub const SPIN_WAIT: std::time::Duration = std::time::Duration::from_micros(50);

/// Polls `fds` for up to `spin`, yielding between polls. Returns whether one became readable
/// (or hung up); `revents` says which.
pub fn spin_readable(fds: &mut [libc::pollfd], spin: std::time::Duration) -> bool {
    let until = std::time::Instant::now() + spin;
    loop {
        if wait_readable(fds, std::time::Duration::ZERO) {
            return true;
        }
        if std::time::Instant::now() >= until {
            return false;
        }
        std::thread::yield_now();
    }
}

/// Waits up to `wait` for any of `fds` to become readable (or hung up). Returns whether one did.
pub fn wait_readable(fds: &mut [libc::pollfd], wait: std::time::Duration) -> bool {
    let ts = libc::timespec {
        tv_sec: wait.as_secs().min(i32::MAX as u64) as libc::time_t,
        tv_nsec: wait.subsec_nanos() as libc::c_long,
    };
    // SAFETY: `fds` is a live slice of pollfd and `ts` a timespec, both valid for the call.
    let r = unsafe { libc::ppoll(fds.as_mut_ptr(), fds.len() as _, &ts, std::ptr::null()) };
    r > 0
}

/// Ends both directions of `fd` so that a thread blocked on it wakes up.
///
/// The caller guarantees `fd` is an open socket that is not closed concurrently.
pub fn shutdown_fd(fd: RawFd) {
    // SAFETY: per the caller's guarantee `fd` is open; shutdown(2) only changes its state.
    unsafe { libc::shutdown(fd, libc::SHUT_RDWR) };
}

/// Asks for a longer accept queue on a listening socket (calling listen(2) again only changes
/// the backlog; the kernel caps it at `net.core.somaxconn`): a cluster's peers connecting at
/// once should wait in the queue, not have their SYNs dropped and retried a second later.
pub fn raise_backlog(fd: RawFd, backlog: i32) {
    // SAFETY: plain system call on a descriptor the caller owns; failure leaves the old backlog.
    unsafe { libc::listen(fd, backlog) };
}
