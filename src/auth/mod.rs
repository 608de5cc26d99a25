//! Optional peer authentication between tidewire engines (beyond Mooncake): with a pre-shared
//! key (`auth_key` option or `TW_AUTH_KEY`), every freshly connected handshake/RPC and data
//! connection starts with a mutual HMAC-SHA256 challenge-response before any request is read.
//! The key never crosses the wire. Off by default (empty key): nothing is sent and the wire is
//! exactly Mooncake's.
//!
//! The exchange, client first (so a server that does not expect it fails at once instead of both
//! sides waiting):
//!
//! ```text
//! client -> HELLO   "TW-AUTH\xa5" | version u8 | purpose u8 | 14 zero bytes | client nonce (32)
//! server -> PROOF   "TW-AUTS\xa5" | server nonce (32) | HMAC(key, "tidewire-auth-v1 server" | purpose | cn | sn)
//! client -> PROOF   "TW-AUTC\xa5" | HMAC(key, "tidewire-auth-v1 client" | purpose | cn | sn)
//! ```
//!
//! - The client checks the server's proof before it sends anything else, so a server with
//!   another key is refused by the client (and the server sees the client leave); the server
//!   checks the client's proof before it reads a request. Both nonces come from `getrandom(2)`,
//!   so no transcript can be replayed; the purpose byte (data, RPC or Store master) keeps a
//!   proof made for one kind of connection from serving the other. MACs are compared in
//!   constant time.
//! - The first 8 bytes of HELLO can never start a valid Mooncake request: read as the `u64`
//!   length of a handshake frame or the size of a data request they are above 2^63, and its
//!   first 24 bytes read as a data header are a plain v1 READ (no flag bits), so an unkeyed
//!   server (Mooncake or tidewire) refuses the range and closes the connection at once; a keyed
//!   server tells a keyless peer's first bytes apart after 8 bytes.
//! - Every read runs under one deadline for the whole exchange; a frame of the wrong size or
//!   magic ends the connection. The client's proof and its first request travel together, so an
//!   authenticated connection costs one extra round trip when it is opened and nothing after.
//!
//! What it protects: a peer without the key can neither open a segment (handshake), nor read or
//! write registered memory (data connections, and the same-host shortcuts, which are negotiated
//! over those connections), nor deliver notifications or RDMA handshakes, nor talk to a keyed
//! `tidewire-master` (Store clients prove the key there too). What it does not: the
//! payload is not encrypted or integrity-protected against an on-path attacker, and descriptors
//! on a metadata server stay readable by anyone who can reach that server.

use crate::sync::LockClean;
use hmac::{Hmac, Mac};
use sha2::Sha256;
use std::fmt;
use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Length of each side's nonce.
pub const NONCE_LEN: usize = 32;
/// Length of an HMAC-SHA256 tag.
pub const MAC_LEN: usize = 32;
/// First bytes of the client's hello.
pub const HELLO_MAGIC: [u8; 8] = *b"TW-AUTH\xa5";
/// First bytes of the server's proof.
pub const SERVER_MAGIC: [u8; 8] = *b"TW-AUTS\xa5";
/// First bytes of the client's proof.
pub const CLIENT_MAGIC: [u8; 8] = *b"TW-AUTC\xa5";
/// Protocol version carried in the hello.
pub const VERSION: u8 = 1;
/// Bytes of the hello.
pub const HELLO_LEN: usize = 8 + 1 + 1 + 14 + NONCE_LEN;
/// Bytes of the server's proof.
pub const SERVER_PROOF_LEN: usize = 8 + NONCE_LEN + MAC_LEN;
/// Bytes of the client's proof.
pub const CLIENT_PROOF_LEN: usize = 8 + MAC_LEN;

/// Which kind of connection a proof is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Purpose {
    /// A TCP data connection.
    Data = 1,
    /// A handshake/RPC connection.
    Rpc = 2,
    /// A Store client's connection to `tidewire-master`.
    Store = 3,
}

/// The pre-shared key. Empty means authentication is off. Its `Debug` never shows the key.
#[derive(Clone, Default)]
pub struct AuthKey(Option<Arc<[u8]>>);

impl fmt::Debug for AuthKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.is_on() {
            "AuthKey(set)"
        } else {
            "AuthKey(off)"
        })
    }
}

impl PartialEq for AuthKey {
    /// Constant-time in the key bytes (the lengths may leak).
    fn eq(&self, other: &AuthKey) -> bool {
        match (&self.0, &other.0) {
            (None, None) => true,
            (Some(a), Some(b)) => ct_eq(a, b),
            _ => false,
        }
    }
}

impl AuthKey {
    /// A key from its text; empty (after trimming line ends) means off.
    pub fn new(text: &str) -> AuthKey {
        let t = text.trim_end_matches(['\r', '\n']);
        if t.is_empty() {
            AuthKey(None)
        } else {
            AuthKey(Some(t.as_bytes().into()))
        }
    }

    /// True when a key is set.
    pub fn is_on(&self) -> bool {
        self.0.is_some()
    }

    fn tag(&self, role: &[u8], purpose: Purpose, cn: &[u8], sn: &[u8]) -> [u8; MAC_LEN] {
        let key = self.0.as_deref().unwrap_or_default();
        let mut m = <Hmac<Sha256> as Mac>::new_from_slice(key).expect("HMAC takes any key length");
        m.update(b"tidewire-auth-v1 ");
        m.update(role);
        m.update(&[purpose as u8]);
        m.update(cn);
        m.update(sn);
        m.finalize().into_bytes().into()
    }
}

/// Compares two byte strings without an early exit on the first difference.
fn ct_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let diff = a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y));
    // black_box keeps the compiler from turning the fold back into an early-exit comparison.
    std::hint::black_box(diff) == 0
}

/// Why an exchange failed.
#[derive(Debug)]
pub enum AuthError {
    /// (Server) the peer's first bytes are not a hello: an unkeyed tidewire or a Mooncake peer.
    NotAuthenticated,
    /// (Client) the server closed or answered something other than a proof: it has no key.
    Refused,
    /// The peer's proof does not match this side's key.
    WrongKey,
    /// A frame with the right magic but wrong contents (version, purpose).
    Malformed(String),
    /// The socket failed or the deadline passed.
    Io(io::Error),
}

impl fmt::Display for AuthError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AuthError::NotAuthenticated => {
                f.write_str("peer did not authenticate (auth_key is set)")
            }
            AuthError::Refused => {
                f.write_str("peer refused authentication: is auth_key set on both sides?")
            }
            AuthError::WrongKey => {
                f.write_str("authentication failed: the peer has another auth_key")
            }
            AuthError::Malformed(m) => write!(f, "bad authentication frame: {m}"),
            AuthError::Io(e) => write!(f, "authentication did not complete: {e}"),
        }
    }
}

/// The stream an exchange runs on: a socket whose read timeout can be shortened to the time
/// left (a test or fuzz harness may ignore it).
pub trait AuthStream: Read + Write {
    /// Sets the read timeout for the next read (never zero).
    fn set_read_deadline_in(&mut self, left: Duration) -> io::Result<()>;
}

impl AuthStream for &TcpStream {
    fn set_read_deadline_in(&mut self, left: Duration) -> io::Result<()> {
        self.set_read_timeout(Some(left))
    }
}

impl AuthStream for crate::net::Prefixed<'_> {
    fn set_read_deadline_in(&mut self, left: Duration) -> io::Result<()> {
        self.set_read_timeout(Some(left))
    }
}

/// What a keyed server's connection core needs before a worker runs [`server`]: the client's
/// whole hello (a peer that stops short of it never holds a worker), or its first 8 bytes when
/// they are not the hello's magic (a keyless peer, refused at once).
pub fn want_hello(head: &[u8]) -> crate::net::Want {
    let keyless = head.len() >= 8 && head[..8] != HELLO_MAGIC;
    if head.len() < HELLO_LEN && !keyless {
        crate::net::Want::More(HELLO_LEN)
    } else {
        crate::net::Want::Ready
    }
}

/// Fills `buf` before `deadline`. An end of stream before the first byte is `UnexpectedEof`.
fn read_by(s: &mut impl AuthStream, buf: &mut [u8], deadline: Instant) -> io::Result<()> {
    let mut got = 0;
    while got < buf.len() {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::ErrorKind::TimedOut.into());
        }
        s.set_read_deadline_in(left)?;
        match s.read(&mut buf[got..]) {
            Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                return Err(io::ErrorKind::TimedOut.into());
            }
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// A fresh nonce from the kernel's random source (`getrandom(2)`, which needs no file and
/// blocks only until the kernel's pool is first seeded at boot).
fn nonce() -> io::Result<[u8; NONCE_LEN]> {
    let mut n = [0u8; NONCE_LEN];
    let mut got = 0;
    while got < NONCE_LEN {
        // SAFETY: the pointer and length describe the unfilled tail of `n`, a live local array.
        let r = unsafe { libc::getrandom(n[got..].as_mut_ptr().cast(), NONCE_LEN - got, 0) };
        if r < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        got += r as usize;
    }
    Ok(n)
}

/// What a socket error during the client's side means: a server that closed or reset the
/// connection after our hello has no key (or is not tidewire).
fn client_io(e: io::Error) -> AuthError {
    match e.kind() {
        io::ErrorKind::UnexpectedEof
        | io::ErrorKind::ConnectionReset
        | io::ErrorKind::ConnectionAborted
        | io::ErrorKind::BrokenPipe => AuthError::Refused,
        _ => AuthError::Io(e),
    }
}

/// Encodes a hello.
pub fn encode_hello(purpose: Purpose, cn: &[u8; NONCE_LEN]) -> [u8; HELLO_LEN] {
    let mut b = [0u8; HELLO_LEN];
    b[..8].copy_from_slice(&HELLO_MAGIC);
    b[8] = VERSION;
    b[9] = purpose as u8;
    b[24..].copy_from_slice(cn);
    b
}

/// Decodes the 48 bytes of a hello after its magic: the client nonce, if the version is ours,
/// the purpose is `want` and the reserved bytes are zero.
pub fn decode_hello_rest(
    rest: &[u8; HELLO_LEN - 8],
    want: Purpose,
) -> Result<[u8; NONCE_LEN], AuthError> {
    if rest[0] != VERSION {
        return Err(AuthError::Malformed(format!(
            "version {} (expected {VERSION})",
            rest[0]
        )));
    }
    if rest[1] != want as u8 {
        return Err(AuthError::Malformed(format!(
            "purpose {} on a {want:?} connection",
            rest[1]
        )));
    }
    if rest[2..16].iter().any(|&b| b != 0) {
        return Err(AuthError::Malformed("reserved bytes are not zero".into()));
    }
    Ok(rest[16..].try_into().expect("32 bytes"))
}

/// Decodes a server proof into (server nonce, tag); `Refused` when the magic is not there.
pub fn decode_server_proof(
    b: &[u8; SERVER_PROOF_LEN],
) -> Result<([u8; NONCE_LEN], [u8; MAC_LEN]), AuthError> {
    if b[..8] != SERVER_MAGIC {
        return Err(AuthError::Refused);
    }
    Ok((
        b[8..8 + NONCE_LEN].try_into().expect("32 bytes"),
        b[8 + NONCE_LEN..].try_into().expect("32 bytes"),
    ))
}

/// Decodes a client proof into its tag.
pub fn decode_client_proof(b: &[u8; CLIENT_PROOF_LEN]) -> Result<[u8; MAC_LEN], AuthError> {
    if b[..8] != CLIENT_MAGIC {
        return Err(AuthError::Malformed(
            "client proof has the wrong magic".into(),
        ));
    }
    Ok(b[8..].try_into().expect("32 bytes"))
}

/// Client side, on a freshly connected stream, all of it before `deadline`. Does nothing when
/// `key` is off. The caller restores its own read timeout afterwards.
pub fn client(
    s: &mut impl AuthStream,
    key: &AuthKey,
    purpose: Purpose,
    deadline: Instant,
) -> Result<(), AuthError> {
    if !key.is_on() {
        return Ok(());
    }
    let cn = nonce().map_err(AuthError::Io)?;
    s.write_all(&encode_hello(purpose, &cn))
        .map_err(client_io)?;
    let mut proof = [0u8; SERVER_PROOF_LEN];
    // A server without a key closes (or resets) after reading our hello as a request.
    read_by(s, &mut proof, deadline).map_err(client_io)?;
    let (sn, tag) = decode_server_proof(&proof)?;
    if !ct_eq(&tag, &key.tag(b"server", purpose, &cn, &sn)) {
        return Err(AuthError::WrongKey);
    }
    let mut out = [0u8; CLIENT_PROOF_LEN];
    out[..8].copy_from_slice(&CLIENT_MAGIC);
    out[8..].copy_from_slice(&key.tag(b"client", purpose, &cn, &sn));
    s.write_all(&out).map_err(client_io)
}

/// Server side, on a freshly accepted stream, all of it before `deadline`. Does nothing when
/// `key` is off. The caller logs a failure (with the peer's address) and closes the stream.
pub fn server(
    s: &mut impl AuthStream,
    key: &AuthKey,
    purpose: Purpose,
    deadline: Instant,
) -> Result<(), AuthError> {
    if !key.is_on() {
        return Ok(());
    }
    let mut magic = [0u8; 8];
    read_by(s, &mut magic, deadline).map_err(|e| match e.kind() {
        io::ErrorKind::UnexpectedEof => AuthError::NotAuthenticated,
        _ => AuthError::Io(e),
    })?;
    if magic != HELLO_MAGIC {
        return Err(AuthError::NotAuthenticated);
    }
    let mut rest = [0u8; HELLO_LEN - 8];
    read_by(s, &mut rest, deadline).map_err(AuthError::Io)?;
    let cn = decode_hello_rest(&rest, purpose)?;
    let sn = nonce().map_err(AuthError::Io)?;
    let mut proof = [0u8; SERVER_PROOF_LEN];
    proof[..8].copy_from_slice(&SERVER_MAGIC);
    proof[8..8 + NONCE_LEN].copy_from_slice(&sn);
    proof[8 + NONCE_LEN..].copy_from_slice(&key.tag(b"server", purpose, &cn, &sn));
    s.write_all(&proof).map_err(AuthError::Io)?;
    let mut reply = [0u8; CLIENT_PROOF_LEN];
    read_by(s, &mut reply, deadline).map_err(|e| match e.kind() {
        // The client checked our proof first and left: it holds another key.
        io::ErrorKind::UnexpectedEof | io::ErrorKind::ConnectionReset => AuthError::WrongKey,
        _ => AuthError::Io(e),
    })?;
    let tag = decode_client_proof(&reply)?;
    if !ct_eq(&tag, &key.tag(b"client", purpose, &cn, &sn)) {
        return Err(AuthError::WrongKey);
    }
    Ok(())
}

/// Logs a refused connection at `Warn` (at most 20 lines a second in this process, so a flood of
/// keyless connections cannot flood the log): `what` is the server (`"tcp"`, `"rpc"`).
pub fn log_refusal(what: &str, peer: Option<std::net::SocketAddr>, e: &AuthError) {
    static WINDOW: std::sync::Mutex<Option<(Instant, u32)>> = std::sync::Mutex::new(None);
    let mut w = WINDOW.lock_clean();
    let now = Instant::now();
    let (start, n) = w.get_or_insert((now, 0));
    if now.duration_since(*start) >= Duration::from_secs(1) {
        (*start, *n) = (now, 0);
    }
    *n += 1;
    if *n <= 20 {
        let peer = peer.map_or_else(|| "unknown peer".to_string(), |a| a.to_string());
        tw_log!(crate::log::Level::Warn, "{what}: refused {peer}: {e}");
    }
}

#[cfg(test)]
mod tests;
