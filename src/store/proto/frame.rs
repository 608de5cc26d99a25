//! The frame around every master message (the header described in the [module](super) doc)
//! and the body encoding (postcard), apart from the messages themselves.

use serde::{Deserialize, Serialize};
use std::io::{Read, Write};

/// Frame magic.
pub const MAGIC: [u8; 4] = *b"TWMS";
/// Protocol version spoken by this build (1: JSON bodies; 2: postcard bodies). A peer of another
/// version is refused with a message naming both.
pub const VERSION: u8 = 2;
/// Header flag: the sender expects no reply.
pub const FLAG_ONE_WAY: u8 = 1;
/// Header length in bytes.
pub const HEADER_LEN: usize = 12;
/// Largest accepted frame body.
pub const MAX_FRAME: u32 = 32 << 20;

/// A frame header, parsed and checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// Flags ([`FLAG_ONE_WAY`]).
    pub flags: u8,
    /// Body length.
    pub len: u32,
}

/// Why a frame could not be read.
#[derive(Debug)]
pub enum FrameError {
    /// The stream ended cleanly before a header started.
    Closed,
    /// Socket error or deadline.
    Io(std::io::Error),
    /// Bad magic, version or length.
    Bad(String),
}

impl std::fmt::Display for FrameError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FrameError::Closed => write!(f, "connection closed"),
            FrameError::Io(e) => write!(f, "{e}"),
            FrameError::Bad(m) => write!(f, "{m}"),
        }
    }
}

/// Parses a header.
pub fn parse_header(h: &[u8; HEADER_LEN]) -> Result<Header, FrameError> {
    if h[..4] != MAGIC {
        return Err(FrameError::Bad("bad frame magic".into()));
    }
    if h[4] != VERSION {
        return Err(FrameError::Bad(format!(
            "protocol version {} is not supported (this side speaks {VERSION})",
            h[4]
        )));
    }
    let len = u32::from_le_bytes([h[8], h[9], h[10], h[11]]);
    if len > MAX_FRAME {
        return Err(FrameError::Bad(format!(
            "frame of {len} bytes exceeds {MAX_FRAME}"
        )));
    }
    Ok(Header { flags: h[5], len })
}

/// Reads one frame. The stream's read timeout is the deadline for each read call.
pub fn read_frame(r: &mut impl Read) -> Result<(Header, Vec<u8>), FrameError> {
    let mut h = [0u8; HEADER_LEN];
    let mut got = 0;
    while got < HEADER_LEN {
        match r.read(&mut h[got..]) {
            Ok(0) if got == 0 => return Err(FrameError::Closed),
            Ok(0) => return Err(FrameError::Bad("truncated frame header".into())),
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(FrameError::Io(e)),
        }
    }
    let header = parse_header(&h)?;
    let mut body = vec![0u8; header.len as usize];
    r.read_exact(&mut body).map_err(FrameError::Io)?;
    Ok((header, body))
}

/// Writes one frame (header and body in one write).
pub fn write_frame(w: &mut impl Write, flags: u8, body: &[u8]) -> std::io::Result<()> {
    let len = u32::try_from(body.len())
        .ok()
        .filter(|l| *l <= MAX_FRAME)
        .ok_or_else(|| std::io::Error::other("frame too large"))?;
    let mut buf = Vec::with_capacity(HEADER_LEN + body.len());
    buf.extend_from_slice(&MAGIC);
    buf.push(VERSION);
    buf.push(flags);
    buf.extend_from_slice(&[0, 0]);
    buf.extend_from_slice(&len.to_le_bytes());
    buf.extend_from_slice(body);
    w.write_all(&buf)?;
    w.flush()
}

/// Encodes a message body.
pub fn encode<T: Serialize>(m: &T) -> Vec<u8> {
    // Serialising these plain structs into a growing Vec cannot fail.
    postcard::to_allocvec(m).unwrap_or_default()
}

/// Decodes a message body: exactly one message, so trailing bytes are an error too.
pub fn decode<T: for<'de> Deserialize<'de>>(b: &[u8]) -> Result<T, String> {
    match postcard::take_from_bytes(b) {
        Ok((m, [])) => Ok(m),
        Ok((_, rest)) => Err(format!(
            "malformed message: {} bytes after its end",
            rest.len()
        )),
        Err(e) => Err(format!("malformed message: {e}")),
    }
}
