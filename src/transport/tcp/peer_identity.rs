//! Same-host identity: proof that a process holds the server end of one of our TCP connections.
//!
//! A descriptor's `tw_pid` is only a claim, and a token read from that pid's memory proves only
//! that the pid runs a tidewire engine, not that this engine answers on the data port we
//! connected to (a third process can republish a victim's pid and token and validate ranges
//! itself). Before the `process_vm_*` shortcut is used on a connection, the initiator finds the
//! connection's server-side socket in the kernel's table (`/proc/thread-self/net/tcp{,6}`: local
//! address = the peer address we connected to, remote = our local address) and checks that the
//! claimed pid has that very socket open (`/proc/<pid>/fd`). The kernel is the witness; nothing
//! the peer says is trusted. Any doubt (other network namespace, no permission, not found)
//! answers `false`: plain TCP.

use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

/// Formats an address as the kernel prints it in `/proc/net/tcp{,6}` (`ADDR:PORT` in hex).
fn proc_form(a: &SocketAddr) -> String {
    match a {
        SocketAddr::V4(v4) => format!(
            "{:08X}:{:04X}",
            u32::from_ne_bytes(v4.ip().octets()),
            v4.port()
        ),
        SocketAddr::V6(v6) => {
            let o = v6.ip().octets();
            let words: String = o
                .chunks(4)
                .map(|c| format!("{:08X}", u32::from_ne_bytes([c[0], c[1], c[2], c[3]])))
                .collect();
            format!("{words}:{:04X}", v6.port())
        }
    }
}

/// The inode of the socket whose local address is `local` and remote address is `remote`.
fn socket_inode(local: &SocketAddr, remote: &SocketAddr) -> Option<u64> {
    let table = if local.is_ipv4() { "tcp" } else { "tcp6" };
    let text = std::fs::read_to_string(format!("/proc/thread-self/net/{table}")).ok()?;
    let (l, r) = (proc_form(local), proc_form(remote));
    text.lines().skip(1).find_map(|line| {
        let f: Vec<&str> = line.split_whitespace().collect();
        (f.len() > 9 && f[1] == l && f[2] == r)
            .then(|| f[9].parse().ok())
            .flatten()
    })
}

/// How long [`peer_socket_owned_by`] waits for the server to accept the connection (until then
/// the server end is in the listen queue and belongs to no process).
const ACCEPT_WAIT: Duration = Duration::from_millis(1000);

/// Whether process `pid` holds the server end of `stream` (our client connection). Waits (at most
/// [`ACCEPT_WAIT`]) for the peer to accept the connection.
pub fn peer_socket_owned_by(stream: &TcpStream, pid: u32) -> bool {
    let until = Instant::now() + ACCEPT_WAIT;
    loop {
        if owned_now(stream, pid) {
            return true;
        }
        if Instant::now() >= until {
            return false;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

fn owned_now(stream: &TcpStream, pid: u32) -> bool {
    let (Ok(ours), Ok(theirs)) = (stream.local_addr(), stream.peer_addr()) else {
        return false;
    };
    let Some(inode) = socket_inode(&theirs, &ours).filter(|&i| i != 0) else {
        return false;
    };
    let want = format!("socket:[{inode}]");
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return false;
    };
    dir.flatten()
        .any(|e| std::fs::read_link(e.path()).is_ok_and(|t| t.as_os_str() == want.as_str()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    #[test]
    fn finds_our_own_server_socket_and_rejects_other_pids() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (_server_end, _) = l.accept().unwrap();
        assert!(peer_socket_owned_by(&c, std::process::id()));
        // pid 1 (init) does not hold our server end.
        assert!(!owned_now(&c, 1));
        // Once the server end is closed, nobody holds it.
        drop(_server_end);
        assert!(!owned_now(&c, std::process::id()));
    }

    #[test]
    fn waits_for_the_accept() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        // Not accepted yet: the server end belongs to nobody.
        assert!(!owned_now(&c, std::process::id()));
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            l.accept().unwrap()
        });
        assert!(peer_socket_owned_by(&c, std::process::id()));
        drop(t.join().unwrap());
    }

    #[test]
    fn ipv6_loopback() {
        let Ok(l) = TcpListener::bind("[::1]:0") else {
            return; // no IPv6 here
        };
        let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (_s, _) = l.accept().unwrap();
        assert!(peer_socket_owned_by(&c, std::process::id()));
    }
}
