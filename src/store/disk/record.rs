//! One record of a disk-tier file: a 40-byte header, the key, the value, zeros up to the next
//! [`ALIGN`] boundary. A record is self-describing and self-checking: the header carries its
//! own CRC32C (over the header and the key) and the value's, so a torn write (the process
//! killed mid-append: the file ends inside the record) or a flipped byte is found, and such a
//! record is dropped or read as a miss, never served.
//!
//! ```text
//! 0  magic "TWDR"       4  format (1)   5  kind (0 value, 1 tombstone)   6  reserved u16
//! 8  key length u32     12 value CRC32C u32
//! 16 value length u64   24 written at (Unix ms) u64
//! 32 header CRC32C u32 (bytes 0..32, then the key)                        36 reserved u32
//! 40 key, value, zeros to the next multiple of ALIGN
//! ```
//! All integers little endian. A tombstone's value is the 8-byte locator of the record it
//! ends (a removed or replaced key), so a restart with no master to ask does not bring it back.

/// Records start at multiples of this (so a locator counts blocks, and reads are aligned).
pub const ALIGN: u64 = 4096;
/// Header bytes.
pub const HEADER_LEN: usize = 40;
const MAGIC: [u8; 4] = *b"TWDR";
const FORMAT: u8 = 1;

/// What a record holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A key's value.
    Value,
    /// The end of an earlier record (its locator is the value).
    Tombstone,
}

/// A decoded header (the key follows it in the file).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// Value or tombstone.
    pub kind: Kind,
    /// Key bytes.
    pub key_len: u32,
    /// Value bytes.
    pub value_len: u64,
    /// CRC32C of the value.
    pub value_crc: u32,
}

impl Header {
    /// The whole record's length on disk, padding included.
    pub fn span(&self) -> u64 {
        span(self.key_len as usize, self.value_len)
    }
}

/// Length on disk of a record with a `key_len`-byte key and a `value_len`-byte value.
pub fn span(key_len: usize, value_len: u64) -> u64 {
    let raw = (HEADER_LEN as u64)
        .saturating_add(key_len as u64)
        .saturating_add(value_len);
    raw.div_ceil(ALIGN).saturating_mul(ALIGN)
}

/// The header and key of a record whose value is `value` (its CRC computed here), ready to be
/// written before the value.
pub fn encode_head(kind: Kind, key: &str, value: &[u8], written_ms: u64) -> Vec<u8> {
    let mut h = Vec::with_capacity(HEADER_LEN + key.len());
    h.extend_from_slice(&MAGIC);
    h.push(FORMAT);
    h.push(match kind {
        Kind::Value => 0,
        Kind::Tombstone => 1,
    });
    h.extend_from_slice(&[0, 0]);
    h.extend_from_slice(&(key.len() as u32).to_le_bytes());
    h.extend_from_slice(&crc32c::crc32c(value).to_le_bytes());
    h.extend_from_slice(&(value.len() as u64).to_le_bytes());
    h.extend_from_slice(&written_ms.to_le_bytes());
    let crc = crc32c::crc32c_append(crc32c::crc32c(&h), key.as_bytes());
    h.extend_from_slice(&crc.to_le_bytes());
    h.extend_from_slice(&[0; 4]);
    h.extend_from_slice(key.as_bytes());
    h
}

/// Decodes a header from its first [`HEADER_LEN`] bytes; the key's bytes are checked against
/// the header CRC by [`key_matches`]. `None` for anything that is not a well-formed header.
pub fn decode_head(b: &[u8]) -> Option<(Header, u32)> {
    let b = b.get(..HEADER_LEN)?;
    if b[..4] != MAGIC || b[4] != FORMAT || b[5] > 1 {
        return None;
    }
    let u32_at = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
    let u64_at = |i: usize| {
        let mut a = [0u8; 8];
        a.copy_from_slice(&b[i..i + 8]);
        u64::from_le_bytes(a)
    };
    let header = Header {
        kind: if b[5] == 0 {
            Kind::Value
        } else {
            Kind::Tombstone
        },
        key_len: u32_at(8),
        value_crc: u32_at(12),
        value_len: u64_at(16),
    };
    Some((header, u32_at(32)))
}

/// Whether `head` (the first [`HEADER_LEN`] bytes) and `key` carry the header CRC `crc`.
pub fn key_matches(head: &[u8], key: &[u8], crc: u32) -> bool {
    head.len() >= 32 && crc32c::crc32c_append(crc32c::crc32c(&head[..32]), key) == crc
}

/// Whether `value` has the checksum its header recorded.
pub fn value_ok(h: &Header, value: &[u8]) -> bool {
    value.len() as u64 == h.value_len && crc32c::crc32c(value) == h.value_crc
}

/// Where a record lies: its file's number in the high 32 bits, its offset in [`ALIGN`] blocks
/// in the low 32 (files up to 16 TiB). Unique for the life of a tier directory: file numbers
/// only grow and a file is never appended to after a restart.
pub fn locator(file: u32, offset: u64) -> u64 {
    ((file as u64) << 32) | (offset / ALIGN)
}

/// The file number and byte offset of a locator.
pub fn place(loc: u64) -> (u32, u64) {
    ((loc >> 32) as u32, (loc & 0xffff_ffff) * ALIGN)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_header_round_trips_and_catches_a_flipped_bit() {
        let head = encode_head(Kind::Value, "k1", b"hello", 7);
        let (h, crc) = decode_head(&head).unwrap();
        assert_eq!((h.kind, h.key_len, h.value_len), (Kind::Value, 2, 5));
        assert!(key_matches(&head, b"k1", crc));
        assert!(!key_matches(&head, b"k2", crc));
        assert!(value_ok(&h, b"hello"));
        assert!(!value_ok(&h, b"hellp"));
        let mut bad = head.clone();
        bad[17] ^= 1;
        let (_, crc2) = decode_head(&bad).unwrap();
        assert!(!key_matches(&bad, b"k1", crc2));
        assert!(decode_head(&head[..39]).is_none());
        assert_eq!(h.span(), ALIGN);
        assert_eq!(span(0, ALIGN), 2 * ALIGN);
    }

    #[test]
    fn locators_name_a_file_and_a_block() {
        let l = locator(7, 3 * ALIGN);
        assert_eq!(place(l), (7, 3 * ALIGN));
        assert_ne!(locator(7, 0), locator(8, 0));
    }
}
