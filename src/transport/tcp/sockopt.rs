//! Socket options that make a dead or frozen peer visible: TCP keepalive (an idle half-open
//! connection is noticed) and `TCP_USER_TIMEOUT` (data left unacknowledged that long ends the
//! connection with `ETIMEDOUT`, instead of the kernel's ~15 minutes of retransmissions).

use std::os::fd::AsRawFd;
use std::time::Duration;

fn set(fd: i32, level: i32, name: i32, value: i32) -> std::io::Result<()> {
    // SAFETY: `fd` is an open socket borrowed from the caller; the option value is a c_int that
    // lives for the duration of the call.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (&value as *const i32).cast(),
            std::mem::size_of::<i32>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Keepalive probes after `idle` without traffic, every `idle / 3` (at least 1 s), 3 probes;
/// unacknowledged data ends the connection after `user_timeout`.
pub fn harden(sock: &impl AsRawFd, idle: Duration, user_timeout: Duration) -> std::io::Result<()> {
    let fd = sock.as_raw_fd();
    let idle_s = idle.as_secs().clamp(1, 32_767) as i32;
    set(fd, libc::SOL_SOCKET, libc::SO_KEEPALIVE, 1)?;
    set(fd, libc::IPPROTO_TCP, libc::TCP_KEEPIDLE, idle_s)?;
    set(
        fd,
        libc::IPPROTO_TCP,
        libc::TCP_KEEPINTVL,
        (idle_s / 3).max(1),
    )?;
    set(fd, libc::IPPROTO_TCP, libc::TCP_KEEPCNT, 3)?;
    let ms = user_timeout.as_millis().clamp(1, i32::MAX as u128) as i32;
    set(fd, libc::IPPROTO_TCP, libc::TCP_USER_TIMEOUT, ms)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{TcpListener, TcpStream};

    fn get(fd: i32, level: i32, name: i32) -> i32 {
        let mut v = 0i32;
        let mut len = std::mem::size_of::<i32>() as libc::socklen_t;
        // SAFETY: valid out pointers of the right size.
        let rc =
            unsafe { libc::getsockopt(fd, level, name, (&mut v as *mut i32).cast(), &mut len) };
        assert_eq!(rc, 0);
        v
    }

    #[test]
    fn options_are_set() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let s = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        harden(&s, Duration::from_secs(9), Duration::from_millis(2500)).unwrap();
        let fd = s.as_raw_fd();
        assert_eq!(get(fd, libc::SOL_SOCKET, libc::SO_KEEPALIVE), 1);
        assert_eq!(get(fd, libc::IPPROTO_TCP, libc::TCP_KEEPIDLE), 9);
        assert_eq!(get(fd, libc::IPPROTO_TCP, libc::TCP_KEEPINTVL), 3);
        assert_eq!(get(fd, libc::IPPROTO_TCP, libc::TCP_USER_TIMEOUT), 2500);
    }
}
