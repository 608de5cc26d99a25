//! The handshake/RPC socket framing shared with Mooncake: `u64 length` (host order, counts the
//! type byte), `u8 type`, then `length - 1` bytes of JSON. One request and one reply per connection.

use crate::auth::{AuthKey, Purpose};
use crate::error::{Error, ErrorKind, Result};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

/// Message types.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum MsgType {
    /// RDMA queue-pair handshake.
    Connection = 0,
    /// Segment descriptor exchange.
    Metadata = 1,
    /// Notification delivery.
    Notify = 2,
    /// Liveness probe.
    Probe = 3,
}

impl MsgType {
    /// Decodes a type byte; values above 3 mean the old protocol (whole payload is a
    /// Connection JSON), which the caller handles.
    pub fn from_u8(v: u8) -> Option<MsgType> {
        Some(match v {
            0 => MsgType::Connection,
            1 => MsgType::Metadata,
            2 => MsgType::Notify,
            3 => MsgType::Probe,
            _ => return None,
        })
    }
}

/// Default and bounds of `MC_HANDSHAKE_MAX_LENGTH`.
pub const DEFAULT_MAX_FRAME: u64 = 1 << 20;

/// Writes one frame.
pub fn write_frame(stream: &mut impl Write, ty: u8, body: &[u8]) -> std::io::Result<()> {
    let mut buf = Vec::with_capacity(9 + body.len());
    buf.extend_from_slice(&((body.len() as u64) + 1).to_ne_bytes());
    buf.push(ty);
    buf.extend_from_slice(body);
    stream.write_all(&buf)?;
    stream.flush()
}

/// Reads one frame, refusing lengths of 0 or above `max_len`. Returns (type byte, body).
pub fn read_frame(stream: &mut impl Read, max_len: u64) -> Result<(u8, Vec<u8>)> {
    let mut len = [0u8; 8];
    stream
        .read_exact(&mut len)
        .map_err(|e| Error::new(ErrorKind::Socket, format!("reading frame length: {e}")))?;
    let len = u64::from_ne_bytes(len);
    if len == 0 || len > max_len {
        return Err(Error::new(
            ErrorKind::Protocol,
            format!("frame length {len} outside 1..={max_len}"),
        ));
    }
    let mut body = vec![0u8; len as usize];
    stream
        .read_exact(&mut body)
        .map_err(|e| Error::new(ErrorKind::Socket, format!("reading frame body: {e}")))?;
    let ty = body.remove(0);
    Ok((ty, body))
}

/// Connects to `host:port` trying every resolved address, each within `timeout`.
pub fn connect(host: &str, port: u16, timeout: Duration) -> Result<TcpStream> {
    let mut last = None;
    for addr in super::resolve(host, port)? {
        match TcpStream::connect_timeout(&addr, timeout) {
            Ok(s) => return Ok(s),
            Err(e) => last = Some(e),
        }
    }
    Err(Error::new(
        ErrorKind::Socket,
        format!(
            "cannot connect to {}: {}",
            super::join_host_port(host, port),
            last.map(|e| e.to_string()).unwrap_or_default()
        ),
    ))
}

/// Where and how to reach a peer's RPC port: its address, the deadline of the whole exchange,
/// the largest reply accepted and the key to prove (off = Mooncake's plain exchange).
#[derive(Debug, Clone, Copy)]
pub struct Peer<'a> {
    /// Host name or address.
    pub host: &'a str,
    /// RPC port.
    pub port: u16,
    /// Connect deadline, and deadline of each read and write.
    pub timeout: Duration,
    /// Largest reply frame accepted.
    pub max_len: u64,
    /// Pre-shared key to prove before the request.
    pub key: &'a AuthKey,
}

/// How long [`call`] polls for a reply before it sleeps in the read.
const REPLY_SPIN: Duration = Duration::from_micros(200);

/// One request/reply exchange with a peer's RPC port. The reply must carry the same type.
pub fn call(peer: Peer<'_>, ty: MsgType, body: &[u8]) -> Result<Vec<u8>> {
    let Peer {
        host,
        port,
        timeout,
        max_len,
        key,
    } = peer;
    let mut s = connect(host, port, timeout)?;
    let _ = s.set_read_timeout(Some(timeout));
    let _ = s.set_write_timeout(Some(timeout));
    let _ = s.set_nodelay(true);
    crate::auth::client(&mut &s, key, Purpose::Rpc, Instant::now() + timeout).map_err(|e| {
        let msg = format!("{}: {e}", super::join_host_port(host, port));
        // Logged here too: some callers (Mooncake's Python API) only return -1.
        tw_log!(crate::log::Level::Warn, "rpc: {msg}");
        Error::new(ErrorKind::Socket, msg)
    })?;
    let _ = s.set_read_timeout(Some(timeout));
    write_frame(&mut s, ty as u8, body)
        .map_err(|e| Error::new(ErrorKind::Socket, format!("sending request: {e}")))?;
    // A small request's reply comes back within a loopback round trip or a few: poll for it
    // (yielding the CPU) before sleeping in the read, so that no wake-up of this thread stands
    // between the reply and the caller (a notification, a descriptor fetch). The blocking read
    // below keeps the deadline either way.
    let mut pfd = [libc::pollfd {
        fd: s.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    }];
    crate::net::spin_readable(&mut pfd, REPLY_SPIN);
    let (rty, reply) = read_frame(&mut s, max_len)?;
    if rty != ty as u8 {
        return Err(Error::new(
            ErrorKind::Socket,
            format!("reply type {rty} does not match request type {}", ty as u8),
        ));
    }
    Ok(reply)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frame_round_trip_and_limits() {
        let mut buf = Vec::new();
        write_frame(&mut buf, 1, b"{}").unwrap();
        assert_eq!(buf.len(), 8 + 1 + 2);
        assert_eq!(u64::from_ne_bytes(buf[..8].try_into().unwrap()), 3);
        let (ty, body) = read_frame(&mut &buf[..], 100).unwrap();
        assert_eq!((ty, body.as_slice()), (1, &b"{}"[..]));
        assert_eq!(
            read_frame(&mut &buf[..], 2).unwrap_err().kind(),
            ErrorKind::Protocol
        );
        let zero = 0u64.to_ne_bytes();
        assert_eq!(
            read_frame(&mut &zero[..], 100).unwrap_err().kind(),
            ErrorKind::Protocol
        );
        assert_eq!(
            read_frame(&mut &buf[..5], 100).unwrap_err().kind(),
            ErrorKind::Socket
        );
    }
}
