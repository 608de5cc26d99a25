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

/// Which TCP congestion control the data connections use.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Congestion {
    /// Reno for connections whose two ends are on this host (loopback or the same address),
    /// the system's default for the rest. BBR, a common default, paces its sends from a
    /// bandwidth estimate that request/reply traffic keeps low; over loopback, where no queue
    /// can build, that pacing only throttles (READ 1 MiB x32 1.9-4.7 GB/s with BBR, 5.1-5.4 with
    /// Reno or CUBIC on 2 CPUs). Reno is the one algorithm every process may choose.
    #[default]
    Auto,
    /// Whatever the system sets.
    System,
    /// This algorithm (as `TCP_CONGESTION` names it) on every data connection.
    Named(AlgorithmName),
}

/// A congestion-control algorithm's name: 1-15 ASCII letters, digits, `_` or `-` (the
/// kernel's limit), kept inline so that configurations stay `Copy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AlgorithmName {
    bytes: [u8; 15],
    len: u8,
}

impl AlgorithmName {
    /// `None` unless `name` is a valid algorithm name.
    pub fn new(name: &str) -> Option<AlgorithmName> {
        let ok = (1..16).contains(&name.len())
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
        if !ok {
            return None;
        }
        let mut bytes = [0u8; 15];
        bytes[..name.len()].copy_from_slice(name.as_bytes());
        Some(AlgorithmName {
            bytes,
            len: name.len() as u8,
        })
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        std::str::from_utf8(&self.bytes[..self.len as usize]).unwrap_or("")
    }
}

impl Congestion {
    /// Parses `auto`, `system` or an algorithm name (1-15 ASCII letters, digits, `_` or `-`).
    pub fn parse(v: &str) -> Option<Congestion> {
        match v.trim() {
            "" | "auto" => Some(Congestion::Auto),
            "system" => Some(Congestion::System),
            n => AlgorithmName::new(n).map(Congestion::Named),
        }
    }

    /// Applies the choice to a connected socket. `Ok(None)`: left as the system set it.
    pub fn apply(&self, sock: &std::net::TcpStream) -> std::io::Result<Option<&str>> {
        let name = match self {
            Congestion::System => return Ok(None),
            Congestion::Named(n) => n.as_str(),
            Congestion::Auto => {
                let same_host = match (sock.local_addr(), sock.peer_addr()) {
                    (Ok(l), Ok(p)) => p.ip().is_loopback() || l.ip() == p.ip(),
                    _ => false,
                };
                if !same_host {
                    return Ok(None);
                }
                "reno"
            }
        };
        // SAFETY: `sock` is an open socket; the option value is `name.len()` readable bytes.
        let rc = unsafe {
            libc::setsockopt(
                sock.as_raw_fd(),
                libc::IPPROTO_TCP,
                libc::TCP_CONGESTION,
                name.as_ptr().cast(),
                name.len() as libc::socklen_t,
            )
        };
        if rc == 0 {
            Ok(Some(name))
        } else {
            Err(std::io::Error::last_os_error())
        }
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

    fn congestion(fd: i32) -> String {
        let mut buf = [0u8; 16];
        let mut len = buf.len() as libc::socklen_t;
        // SAFETY: valid out pointers of the right size.
        let rc = unsafe {
            libc::getsockopt(
                fd,
                libc::IPPROTO_TCP,
                libc::TCP_CONGESTION,
                buf.as_mut_ptr().cast(),
                &mut len,
            )
        };
        assert_eq!(rc, 0);
        let end = buf[..len as usize]
            .iter()
            .position(|&b| b == 0)
            .unwrap_or(len as usize);
        String::from_utf8_lossy(&buf[..end]).into_owned()
    }

    #[test]
    fn congestion_choice() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let s = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let fd = s.as_raw_fd();
        let before = congestion(fd);
        assert_eq!(Congestion::System.apply(&s).unwrap(), None);
        assert_eq!(congestion(fd), before, "system: left alone");
        assert_eq!(Congestion::Auto.apply(&s).unwrap(), Some("reno"));
        assert_eq!(congestion(fd), "reno", "auto on loopback: reno");
        let bogus = Congestion::parse("no-such-cc").unwrap();
        assert!(bogus.apply(&s).is_err());
        assert_eq!(congestion(fd), "reno", "a refused name changes nothing");
        assert_eq!(Congestion::parse("auto"), Some(Congestion::Auto));
        assert_eq!(Congestion::parse(" system "), Some(Congestion::System));
        assert_eq!(
            Congestion::parse("cubic"),
            Some(Congestion::Named(AlgorithmName::new("cubic").unwrap()))
        );
        for bad in ["a b", "x".repeat(16).as_str(), "reno\0", "é"] {
            assert_eq!(Congestion::parse(bad), None, "{bad:?}");
        }
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
