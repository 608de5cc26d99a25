//! The data-connection wire format: a 24-byte header (`u64 size` LE, `u64 addr` LE, `u8 opcode`
//! with `0x80` = v2, 7 pad bytes) and, in v2, an 8-byte status frame (`"MCTV"` in the high half).

/// Header length.
pub const HEADER_LEN: usize = 24;
/// Status frame length.
pub const STATUS_LEN: usize = 8;
/// Opcode flag selecting acknowledged (v2) framing.
pub const V2_FLAG: u8 = 0x80;
/// tidewire extension (only sent to peers that publish `tw_version`): validate the range and
/// answer with a status frame only; the initiator moves the bytes itself (same-host path).
pub const VM_FLAG: u8 = 0x40;
/// tidewire extension (only sent to peers publishing `tw_version` >= 2), together with
/// [`VM_FLAG`] and [`V2_FLAG`]: "copy done". The initiator has finished (or given up) the
/// `process_vm_*` copies of the `size` oldest approvals it got on this connection; `addr` is 0
/// and no reply follows. Until then the server keeps those ranges fenced against `unregister`.
pub const VM_DONE_FLAG: u8 = 0x20;
/// Magic in the high 32 bits of a status frame.
pub const STATUS_MAGIC: u32 = 0x4D43_5456;
/// Status code: OK.
pub const STATUS_OK: u32 = 0;
/// Status code: address rejected.
pub const STATUS_ADDR_REJECTED: u32 = 1;
/// tidewire extension, answered only to validate-only requests: the range is valid but must not
/// be copied with `process_vm_*` (GPU memory); re-send it over the socket.
pub const STATUS_NOT_SAME_HOST: u32 = 2;

/// Wire opcode for WRITE (anything else is READ).
pub const OP_WRITE: u8 = 1;

/// A decoded request header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// Payload bytes.
    pub size: u64,
    /// Absolute address on the server.
    pub addr: u64,
    /// True for WRITE (client → server).
    pub write: bool,
    /// Acknowledged framing.
    pub v2: bool,
    /// Validate-only (same-host path).
    pub vm: bool,
    /// "Copy done" frame (with `vm`): `size` approvals are over.
    pub done: bool,
}

impl Header {
    /// Encodes into 24 bytes (padding zeroed).
    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut b = [0u8; HEADER_LEN];
        b[0..8].copy_from_slice(&self.size.to_le_bytes());
        b[8..16].copy_from_slice(&self.addr.to_le_bytes());
        b[16] = if self.write { OP_WRITE } else { 0 }
            | if self.v2 { V2_FLAG } else { 0 }
            | if self.vm { VM_FLAG } else { 0 }
            | if self.done { VM_DONE_FLAG } else { 0 };
        b
    }

    /// Decodes 24 bytes; padding is ignored, as Mooncake does.
    pub fn decode(b: &[u8; HEADER_LEN]) -> Header {
        let op = b[16];
        Header {
            size: u64::from_le_bytes(b[0..8].try_into().expect("8 bytes")),
            addr: u64::from_le_bytes(b[8..16].try_into().expect("8 bytes")),
            write: (op & !(V2_FLAG | VM_FLAG | VM_DONE_FLAG)) == OP_WRITE,
            v2: op & V2_FLAG != 0,
            vm: op & VM_FLAG != 0,
            done: op & VM_FLAG != 0 && op & VM_DONE_FLAG != 0,
        }
    }

    /// The "copy done" frame for the `count` oldest approvals on a connection.
    pub fn vm_done(count: u64) -> Header {
        Header {
            size: count,
            addr: 0,
            write: false,
            v2: true,
            vm: true,
            done: true,
        }
    }
}

/// Encodes a status frame.
pub fn status_frame(code: u32) -> [u8; STATUS_LEN] {
    (((STATUS_MAGIC as u64) << 32) | code as u64).to_le_bytes()
}

/// Decodes a status frame: `Some(code)` when the magic matches.
pub fn parse_status(b: &[u8; STATUS_LEN]) -> Option<u32> {
    let v = u64::from_le_bytes(*b);
    ((v >> 32) as u32 == STATUS_MAGIC).then_some(v as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_mooncake_bytes() {
        assert_eq!(
            status_frame(STATUS_OK),
            [0, 0, 0, 0, 0x56, 0x54, 0x43, 0x4d]
        );
        assert_eq!(parse_status(&status_frame(1)), Some(1));
        assert_eq!(parse_status(&[0, 0, 0, 0, 1, 2, 3, 4]), None);
        let h = Header {
            size: 0x1122,
            addr: 0xdead_beef_0000,
            write: true,
            v2: true,
            vm: false,
            done: false,
        };
        let b = h.encode();
        assert_eq!(b[16], 0x81);
        assert_eq!(&b[0..2], &[0x22, 0x11]);
        assert_eq!(Header::decode(&b), h);
        let mut junk = b;
        junk[17..].fill(0xAA); // uninitialised padding from a Mooncake sender
        junk[16] = 0x05; // unknown opcode → READ
        let d = Header::decode(&junk);
        assert!(!d.write && !d.v2);
        let done = Header::vm_done(3);
        assert_eq!(done.encode()[16], 0xE0);
        assert_eq!(Header::decode(&done.encode()), done);
    }

    #[test]
    fn auth_hello_reads_as_an_absurd_request() {
        use crate::auth::{NONCE_LEN, Purpose, encode_hello};
        let h = encode_hello(Purpose::Data, &[0xff; NONCE_LEN]);
        // Read by a server without a key: an absurd v1 READ, refused and the connection closed.
        let as_data = Header::decode(h[..24].try_into().expect("24 bytes"));
        assert!(as_data.size > 1 << 63 && !as_data.write && !as_data.v2 && !as_data.vm);
    }
}
