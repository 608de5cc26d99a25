//! Page-aligned buffers and a seeded byte pattern that depends on the absolute offset, so a byte
//! that lands at the wrong place, or a stale byte from an earlier pattern, never compares equal.

use std::alloc::{Layout, alloc_zeroed, dealloc};

/// One 8-byte word of the pattern: a mix of the seed and the word index.
fn word(seed: u64, idx: u64) -> u64 {
    let mut z = idx
        .wrapping_add(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15))
        .wrapping_mul(0xBF58_4476_D1CE_4E5B);
    z ^= z >> 29;
    z.wrapping_mul(0x94D0_49BB_1331_11EB) | 0x0101_0101_0101_0101
}

/// The pattern byte at absolute offset `off` (never zero, so a zeroed buffer never matches).
pub fn byte(seed: u64, off: u64) -> u8 {
    word(seed, off >> 3).to_le_bytes()[(off & 7) as usize]
}

/// Writes the pattern for offsets `off..off+buf.len()` into `buf`.
pub fn fill(buf: &mut [u8], off: u64, seed: u64) {
    let total = buf.len();
    let head = (((8 - (off & 7)) & 7) as usize).min(total);
    let (h, rest) = buf.split_at_mut(head);
    for (i, b) in h.iter_mut().enumerate() {
        *b = byte(seed, off + i as u64);
    }
    let base = (off + head as u64) >> 3;
    let mut chunks = rest.chunks_exact_mut(8);
    for (k, c) in (&mut chunks).enumerate() {
        c.copy_from_slice(&word(seed, base + k as u64).to_le_bytes());
    }
    let tail = chunks.into_remainder();
    let tail_off = off + (total - tail.len()) as u64;
    for (i, b) in tail.iter_mut().enumerate() {
        *b = byte(seed, tail_off + i as u64);
    }
}

/// Index of the first byte of `buf` that differs from the pattern at `off..`, if any.
pub fn first_mismatch(buf: &[u8], off: u64, seed: u64) -> Option<usize> {
    let head = (((8 - (off & 7)) & 7) as usize).min(buf.len());
    for (i, &b) in buf[..head].iter().enumerate() {
        if b != byte(seed, off + i as u64) {
            return Some(i);
        }
    }
    let base = (off + head as u64) >> 3;
    let rest = &buf[head..];
    let mut chunks = rest.chunks_exact(8);
    for (k, c) in (&mut chunks).enumerate() {
        let got = u64::from_le_bytes(c.try_into().expect("8 bytes"));
        let want = word(seed, base + k as u64);
        if got != want {
            let lane = (got ^ want).trailing_zeros() as usize / 8;
            return Some(head + k * 8 + lane);
        }
    }
    let tail = chunks.remainder();
    let tail_start = buf.len() - tail.len();
    for (i, &b) in tail.iter().enumerate() {
        if b != byte(seed, off + (tail_start + i) as u64) {
            return Some(tail_start + i);
        }
    }
    None
}

/// Number of bytes of `buf` that differ from the pattern (for failure reports).
pub fn count_mismatches(buf: &[u8], off: u64, seed: u64) -> usize {
    buf.iter()
        .enumerate()
        .filter(|&(i, &b)| b != byte(seed, off + i as u64))
        .count()
}

/// A zeroed, page-aligned heap buffer whose address never changes.
pub struct AlignedBuf {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the buffer is plain owned memory; sharing its address with engine threads is the point,
// and every access from this program goes through `&self`/`&mut self`.
unsafe impl Send for AlignedBuf {}
// SAFETY: as above; `&AlignedBuf` only hands out shared views or the address.
unsafe impl Sync for AlignedBuf {}

impl AlignedBuf {
    /// Allocates `len` zeroed bytes (at least one page).
    pub fn new(len: usize) -> Result<AlignedBuf, String> {
        let layout = Layout::from_size_align(len.max(4096), 4096)
            .map_err(|e| format!("buffer of {len} bytes: {e}"))?;
        // SAFETY: the layout has a non-zero size.
        let ptr = unsafe { alloc_zeroed(layout) };
        if ptr.is_null() {
            return Err(format!("cannot allocate {len} bytes"));
        }
        Ok(AlignedBuf { ptr, len })
    }

    /// Start address, for registration and requests.
    pub fn addr(&self) -> u64 {
        self.ptr as u64
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// The bytes. The engine may be writing some of them while a transfer is in flight; callers
    /// only look at ranges whose transfers have completed.
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: `ptr` is a live allocation of `len` bytes owned by self.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }

    /// The bytes, mutably (no transfer may be in flight on the range the caller touches).
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: `ptr` is a live allocation of `len` bytes owned by self.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }

    /// Zeroes `[off, off+len)` through a shared reference, for worker threads that each own a
    /// disjoint part of the buffer.
    ///
    /// # Safety
    /// No other thread may be accessing `[off, off+len)` (and no transfer may be in flight on it).
    pub unsafe fn zero_range(&self, off: usize, len: usize) {
        assert!(
            off.checked_add(len).is_some_and(|e| e <= self.len),
            "range out of bounds"
        );
        // SAFETY: in bounds (checked above); exclusivity is the caller's promise.
        unsafe { std::ptr::write_bytes(self.ptr.add(off), 0, len) };
    }
}

impl AlignedBuf {
    /// Writes the pattern for offsets `pat_off..` into `[off, off+len)` through a shared
    /// reference, for worker threads that each own a disjoint part of the buffer.
    ///
    /// # Safety
    /// No other thread may be accessing `[off, off+len)` (and no transfer may be in flight on it).
    pub unsafe fn fill_range(&self, off: usize, len: usize, pat_off: u64, seed: u64) {
        assert!(
            off.checked_add(len).is_some_and(|e| e <= self.len),
            "range out of bounds"
        );
        // SAFETY: in bounds (checked above); exclusivity is the caller's promise.
        let part = unsafe { std::slice::from_raw_parts_mut(self.ptr.add(off), len) };
        fill(part, pat_off, seed);
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        let layout = Layout::from_size_align(self.len.max(4096), 4096).expect("valid layout");
        // SAFETY: allocated in `new` with this layout.
        unsafe { dealloc(self.ptr, layout) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fill_and_check_agree_at_any_alignment() {
        for off in [0u64, 1, 7, 8, 13, 4096] {
            for len in [0usize, 1, 5, 8, 9, 100] {
                let mut v = vec![0u8; len];
                fill(&mut v, off, 42);
                assert_eq!(first_mismatch(&v, off, 42), None, "off {off} len {len}");
                for (i, &b) in v.iter().enumerate() {
                    assert_eq!(b, byte(42, off + i as u64));
                    assert_ne!(b, 0);
                }
                if len > 3 {
                    v[3] ^= 0x40;
                    assert_eq!(first_mismatch(&v, off, 42), Some(3));
                    assert_eq!(count_mismatches(&v, off, 42), 1);
                    assert!(first_mismatch(&v, off, 43).is_some());
                }
            }
        }
    }

    #[test]
    fn pattern_depends_on_offset_and_seed() {
        let mut a = vec![0u8; 64];
        fill(&mut a, 0, 1);
        assert!(first_mismatch(&a, 8, 1).is_some(), "shifted by one word");
        assert!(first_mismatch(&a, 0, 2).is_some(), "other seed");
        let z = vec![0u8; 64];
        assert_eq!(first_mismatch(&z, 0, 1), Some(0));
    }

    #[test]
    fn aligned_buffer() {
        let mut b = AlignedBuf::new(10_000).unwrap();
        assert_eq!(b.addr() % 4096, 0);
        assert!(b.as_slice().iter().all(|&x| x == 0));
        b.as_mut_slice()[9_999] = 7;
        assert_eq!(b.as_slice()[9_999], 7);
    }
}
