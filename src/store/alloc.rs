//! Offset allocator over one contiguous range: a free list of `(offset, len)` kept in a B-tree,
//! first fit, with coalescing of neighbours on free. Used for each mounted segment on the master
//! and for the client's local staging buffer.

use std::collections::BTreeMap;

/// Allocation granularity (keeps buffers cache-line aligned).
pub const ALIGN: u64 = 64;

/// A free-list allocator for `[0, size)`.
#[derive(Debug)]
pub struct OffsetAllocator {
    size: u64,
    used: u64,
    /// offset -> length of each free run; runs never touch (they are coalesced).
    free: BTreeMap<u64, u64>,
}

fn round_up(len: u64) -> Option<u64> {
    len.checked_add(ALIGN - 1).map(|l| l & !(ALIGN - 1))
}

impl OffsetAllocator {
    /// An allocator with all of `[0, size)` free (the size is rounded down to [`ALIGN`]).
    pub fn new(size: u64) -> OffsetAllocator {
        let size = size & !(ALIGN - 1);
        let mut free = BTreeMap::new();
        if size > 0 {
            free.insert(0, size);
        }
        OffsetAllocator {
            size,
            used: 0,
            free,
        }
    }

    /// Managed bytes.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Allocated bytes (rounded sizes).
    pub fn used(&self) -> u64 {
        self.used
    }

    /// Allocates `len` bytes (> 0); returns the offset, or `None` when no free run fits.
    pub fn alloc(&mut self, len: u64) -> Option<u64> {
        if len == 0 {
            return None;
        }
        let need = round_up(len)?;
        let (&off, &run) = self.free.iter().find(|(_, run)| **run >= need)?;
        self.free.remove(&off);
        if run > need {
            self.free.insert(off + need, run - need);
        }
        self.used += need;
        Some(off)
    }

    /// Frees what [`alloc`](Self::alloc) returned for `len`. A range that is outside the
    /// allocator or overlaps free space is refused (`false`) and nothing changes.
    pub fn free(&mut self, off: u64, len: u64) -> bool {
        let Some(len) = round_up(len) else {
            return false;
        };
        if len == 0 || off % ALIGN != 0 || off.checked_add(len).is_none_or(|e| e > self.size) {
            return false;
        }
        let end = off + len;
        let prev = self.free.range(..=off).next_back().map(|(o, l)| (*o, *l));
        if let Some((po, pl)) = prev {
            if po + pl > off {
                return false;
            }
        }
        let next = self.free.range(off..).next().map(|(o, l)| (*o, *l));
        if let Some((no, _)) = next {
            if no < end {
                return false;
            }
        }
        let mut start = off;
        let mut run = len;
        if let Some((po, pl)) = prev {
            if po + pl == off {
                self.free.remove(&po);
                start = po;
                run += pl;
            }
        }
        if let Some((no, nl)) = next {
            if no == end {
                self.free.remove(&no);
                run += nl;
            }
        }
        self.free.insert(start, run);
        self.used -= len;
        true
    }

    /// Number of free runs (1 when nothing is allocated).
    pub fn free_runs(&self) -> usize {
        self.free.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allocates_frees_and_coalesces() {
        let mut a = OffsetAllocator::new(1 << 20);
        let x = a.alloc(100).unwrap();
        let y = a.alloc(1000).unwrap();
        let z = a.alloc(64).unwrap();
        assert_eq!((x, y), (0, 128));
        assert_eq!(a.used(), 128 + 1024 + 64);
        assert!(a.free(y, 1000));
        assert!(!a.free(y, 1000), "double free refused");
        assert!(a.free(x, 100));
        assert!(a.free(z, 64));
        assert_eq!(a.free_runs(), 1);
        assert_eq!(a.used(), 0);
        assert_eq!(a.alloc(1 << 20), Some(0));
        assert_eq!(a.alloc(1), None);
        assert!(!a.free(1 << 20, 64), "out of range");
        assert!(!a.free(3, 64), "misaligned");
        assert_eq!(a.alloc(0), None);
    }

    #[test]
    fn first_fit_reuses_holes() {
        let mut a = OffsetAllocator::new(4096);
        let offs: Vec<u64> = (0..8).map(|_| a.alloc(512).unwrap()).collect();
        assert_eq!(a.alloc(1), None);
        assert!(a.free(offs[2], 512));
        assert!(a.free(offs[3], 512));
        assert_eq!(a.alloc(1024), Some(offs[2]));
    }
}
