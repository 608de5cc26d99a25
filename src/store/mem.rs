//! Memory the store client owns: anonymous mappings for the global segment and the local
//! staging buffer, and staged allocations carved out of the latter.

use super::alloc::OffsetAllocator;
use crate::sync::LockClean;
use std::sync::{Arc, Mutex};

/// A mapping (anonymous and private, or of a file and shared), unmapped on drop.
#[derive(Debug)]
pub struct Mapped {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the mapping is plain memory owned by this value; concurrent access to its bytes is
// coordinated by the store (allocators hand out disjoint ranges).
unsafe impl Send for Mapped {}
// SAFETY: as above; `&Mapped` only exposes the address and length.
unsafe impl Sync for Mapped {}

impl Mapped {
    /// Maps `len` (> 0) bytes, lazily backed by zero pages.
    pub fn new(len: usize) -> std::io::Result<Mapped> {
        if len == 0 {
            return Err(std::io::Error::other("zero-length mapping"));
        }
        // SAFETY: a fresh anonymous mapping; no existing memory is affected.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        Ok(Mapped { ptr: p.cast(), len })
    }

    /// Maps `len` (> 0) bytes of the file at `path` from `offset` (page aligned), shared (what
    /// is written lands in the file, as Mooncake's `mount_segment` maps it).
    pub fn file(path: &str, offset: u64, len: usize) -> std::io::Result<Mapped> {
        use std::os::unix::io::AsRawFd;
        if len == 0 {
            return Err(std::io::Error::other("zero-length mapping"));
        }
        if offset % 4096 != 0 {
            return Err(std::io::Error::other(format!(
                "offset {offset} is not page aligned"
            )));
        }
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)?;
        let size = f.metadata()?.len();
        if offset > size || len as u64 > size - offset {
            return Err(std::io::Error::other(format!(
                "[{offset}, {offset}+{len}) exceeds the file's {size} bytes"
            )));
        }
        let off = libc::off_t::try_from(offset).map_err(std::io::Error::other)?;
        // SAFETY: a fresh shared mapping of a file we opened; no existing memory is affected
        // (the descriptor may close after mmap: the mapping keeps the file).
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                f.as_raw_fd(),
                off,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        Ok(Mapped { ptr: p.cast(), len })
    }

    /// Base address.
    pub fn addr(&self) -> u64 {
        self.ptr as u64
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always false (mappings are never empty).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether `[addr, addr+len)` lies inside the mapping.
    pub fn contains(&self, addr: u64, len: u64) -> bool {
        addr >= self.addr()
            && addr
                .checked_add(len)
                .is_some_and(|e| e <= self.addr() + self.len as u64)
    }
}

impl Drop for Mapped {
    fn drop(&mut self) {
        // SAFETY: `ptr`/`len` are exactly the mapping created in `new`, unmapped once.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

/// Segments this client mounted at run time (besides the one of `setup`), by id: each a
/// registered mapping the master knows as `<engine name>#<id>`.
#[derive(Debug, Default)]
pub struct ExtraSegments {
    mounted: Mutex<std::collections::HashMap<String, ExtraSegment>>,
}

/// One segment mounted at run time.
#[derive(Debug)]
pub struct ExtraSegment {
    /// Its name on the master.
    pub name: String,
    /// Its memory.
    pub mem: Arc<Mapped>,
    /// Allocated by the client (`allocate_and_mount_segment`), not a file mapped.
    pub allocated: bool,
}

impl ExtraSegments {
    /// Adds a mounted segment.
    pub fn insert(&self, id: String, seg: ExtraSegment) {
        self.mounted.lock_clean().insert(id, seg);
    }

    /// Takes the segment `id` out, if it is one of the `allocated` kind asked for.
    pub fn take(&self, id: &str, allocated: bool) -> Option<ExtraSegment> {
        let mut m = self.mounted.lock_clean();
        match m.get(id) {
            Some(s) if s.allocated == allocated => m.remove(id),
            _ => None,
        }
    }

    /// The mapping holding `[addr, addr+len)`, if one of these does.
    pub fn holding(&self, addr: u64, len: u64) -> Option<Arc<Mapped>> {
        let m = self.mounted.lock_clean();
        m.values()
            .find(|s| s.mem.contains(addr, len))
            .map(|s| s.mem.clone())
    }

    /// `(name, base, size)` of each, for mounting them again.
    pub fn listed(&self) -> Vec<(String, u64, u64)> {
        let m = self.mounted.lock_clean();
        m.values()
            .map(|s| (s.name.clone(), s.mem.addr(), s.mem.len() as u64))
            .collect()
    }
}

/// The local staging buffer: a registered mapping with an offset allocator.
#[derive(Debug)]
pub struct LocalBuffer {
    mem: Mapped,
    alloc: Mutex<OffsetAllocator>,
}

impl LocalBuffer {
    /// A buffer over `mem`.
    pub fn new(mem: Mapped) -> Arc<LocalBuffer> {
        let n = mem.len() as u64;
        Arc::new(LocalBuffer {
            mem,
            alloc: Mutex::new(OffsetAllocator::new(n)),
        })
    }

    /// The mapping.
    pub fn mem(&self) -> &Mapped {
        &self.mem
    }

    /// Carves `len` bytes; `None` when the buffer is full.
    pub fn take(self: &Arc<Self>, len: u64) -> Option<Staged> {
        let off = self.alloc.lock_clean().alloc(len)?;
        Some(Staged {
            buf: self.clone(),
            addr: self.mem.addr() + off,
            len,
        })
    }
}

/// A range of the local buffer, returned to it on drop.
#[derive(Debug)]
pub struct Staged {
    buf: Arc<LocalBuffer>,
    addr: u64,
    len: u64,
}

impl Staged {
    /// Address.
    pub fn addr(&self) -> u64 {
        self.addr
    }

    /// Length.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether the range is empty (never: allocations are > 0).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The bytes.
    pub fn bytes(&self) -> &[u8] {
        // SAFETY: the range lies in the live mapping (kept alive by `buf`) and is owned by this
        // value alone until drop.
        unsafe { std::slice::from_raw_parts(self.addr as *const u8, self.len as usize) }
    }

    /// The bytes, writable.
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `bytes`, and `&mut self` makes the access exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.addr as *mut u8, self.len as usize) }
    }
}

impl Drop for Staged {
    fn drop(&mut self) {
        let off = self.addr - self.buf.mem.addr();
        self.buf.alloc.lock_clean().free(off, self.len);
    }
}

/// One memory copy.
#[derive(Debug, Clone, Copy)]
pub struct Copy {
    /// Source address.
    pub src: u64,
    /// Destination address.
    pub dst: u64,
    /// Bytes.
    pub len: u64,
}

/// Performs every copy, those with a side in GPU memory (`device(addr)` is `Some`) through the
/// CUDA driver and the rest as [`copy_all`] does; per copy whether it succeeded (only a GPU copy
/// can fail). With no CUDA driver loaded no memory can be on a GPU, and nothing is looked up.
///
/// # Safety
/// As for [`copy_all`]; GPU ranges are registered device memory.
pub unsafe fn copy_placed(copies: &[Copy], device: impl Fn(u64) -> Option<u32>) -> Vec<bool> {
    let mut ok = vec![true; copies.len()];
    if crate::gpu::sys::loaded().is_none() {
        // SAFETY: per this function's contract.
        unsafe { copy_all(copies) };
        return ok;
    }
    let mut host: Vec<Copy> = Vec::with_capacity(copies.len());
    for (i, c) in copies.iter().enumerate() {
        match device(c.dst).or_else(|| device(c.src)) {
            Some(dev) => {
                ok[i] = crate::gpu::copy(dev, c.dst, c.src, c.len as usize).is_ok();
            }
            None => host.push(*c),
        }
    }
    // SAFETY: per this function's contract (a subset of the copies, all on the host).
    unsafe { copy_all(&host) };
    ok
}

/// Below this many bytes in total, copies run on the calling thread.
const PARALLEL_MIN: u64 = 8 << 20;
/// Pieces handed to copy threads are at most this large (keeps them balanced).
const PIECE: u64 = 2 << 20;

/// Performs every copy; large totals are split over a few scoped threads (memory bandwidth of
/// one core is the limit of a single-process store otherwise) and written with streaming
/// stores (see `memory::raw::STREAM_MIN_TOTAL`).
///
/// # Safety
/// Each source is readable and each destination writable for `len` bytes for the duration of
/// the call, and no destination overlaps another copy's source or destination.
pub unsafe fn copy_all(copies: &[Copy]) {
    let total: u64 = copies.iter().map(|c| c.len).sum();
    let threads = crate::cpus::available().min(4);
    let stream = total >= crate::memory::raw::STREAM_MIN_TOTAL;
    if total < PARALLEL_MIN || threads < 2 {
        for c in copies {
            // SAFETY: per this function's contract.
            unsafe { crate::memory::raw::copy(c.src, c.dst, c.len as usize, stream) };
        }
        return;
    }
    let mut pieces: Vec<Copy> = Vec::new();
    for c in copies {
        let mut off = 0;
        while off < c.len {
            let n = (c.len - off).min(PIECE);
            pieces.push(Copy {
                src: c.src + off,
                dst: c.dst + off,
                len: n,
            });
            off += n;
        }
    }
    let next = std::sync::atomic::AtomicUsize::new(0);
    let work = || {
        loop {
            let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let Some(c) = pieces.get(i) else { break };
            // SAFETY: a piece of a copy allowed by this function's contract; pieces are disjoint.
            unsafe { crate::memory::raw::copy(c.src, c.dst, c.len as usize, stream) };
        }
    };
    std::thread::scope(|s| {
        for _ in 1..threads {
            s.spawn(work);
        }
        work();
    });
}

/// Values at least this large get their fresh pages populated before the copy (below it, the
/// syscall costs more than the faults it saves).
const PREFAULT_MIN: u64 = 256 << 10;

/// Populates the whole pages inside `[addr, addr+len)` for writing in one `madvise`
/// (`MADV_POPULATE_WRITE`, Linux 5.14+) instead of one page fault per 4 KiB during the copy.
/// Meant for memory just allocated to receive a value (fresh pages the kernel must zero): in a
/// VM each fault costs about 2 us, and populating them in one call saves 20-30 % of a 1 MiB
/// read into a new `bytes`. A no-op on older kernels or small ranges; never fails the caller.
pub fn prefault_write(addr: u64, len: u64) {
    const MADV_POPULATE_WRITE: libc::c_int = 23;
    if len < PREFAULT_MIN {
        return;
    }
    let page = 4096u64;
    let start = addr.saturating_add(page - 1) & !(page - 1);
    let end = addr.saturating_add(len) & !(page - 1);
    if end <= start {
        return;
    }
    // SAFETY: the range lies inside memory the caller owns and is about to overwrite; populating
    // writable pages changes no byte a program can observe (fresh pages read as zero either way,
    // present ones are left as they are), and a refusal only returns an error we ignore.
    unsafe {
        libc::madvise(
            start as *mut libc::c_void,
            (end - start) as usize,
            MADV_POPULATE_WRITE,
        )
    };
}

/// Fresh destinations totalling at least this much are populated on a helper thread while the
/// transfer runs; smaller ones in line (a thread costs more than the faults it would overlap).
const POPULATE_BEHIND_MIN: u64 = 8 << 20;

/// Step of the helper's walk: small enough to stop soon after the transfer ends.
const POPULATE_STEP: u64 = 1 << 20;

/// Runs `transfer` (which writes into the fresh memory `ranges`, front to back) while a helper
/// thread populates the same ranges back to front, so the kernel's page zeroing runs on a second
/// CPU instead of inside the receive copy: the two meet in the middle, and the helper stops when
/// `transfer` returns. Below [`POPULATE_BEHIND_MIN`] in all, or on a single CPU, each range is
/// populated first, in line. Populating never changes a byte (see [`prefault_write`]), so the
/// race with the writer is harmless.
pub fn populate_behind<R>(ranges: &[(u64, u64)], transfer: impl FnOnce() -> R) -> R {
    let total: u64 = ranges.iter().map(|r| r.1).sum();
    let cpus = crate::cpus::available();
    if total < POPULATE_BEHIND_MIN || cpus < 2 {
        for &(addr, len) in ranges {
            prefault_write(addr, len);
        }
        return transfer();
    }
    let done = std::sync::atomic::AtomicBool::new(false);
    let helper = || {
        for &(addr, len) in ranges.iter().rev() {
            let mut end = len;
            while end > 0 {
                if done.load(std::sync::atomic::Ordering::Relaxed) {
                    return;
                }
                let start = end.saturating_sub(POPULATE_STEP);
                prefault_write(addr + start, end - start);
                end = start;
            }
        }
    };
    std::thread::scope(|s| {
        s.spawn(helper);
        let r = transfer();
        done.store(true, std::sync::atomic::Ordering::Relaxed);
        r
    })
}

/// Whether `[addr, addr+len)` looks like memory just allocated and never touched (as
/// `torch.empty` or a fresh `mmap` gives it): at least [`PREFAULT_MIN`] long, and its middle
/// page not yet resident. One `mincore` of one page; a guess that only decides whether the
/// pages are populated alongside a transfer into them (harmless either way).
pub fn likely_fresh(addr: u64, len: u64) -> bool {
    if len < PREFAULT_MIN {
        return false;
    }
    let page = (addr + len / 2) & !4095;
    let mut v = [0u8; 1];
    // SAFETY: mincore only reads the page tables for one page and writes one byte into `v`.
    let r = unsafe { libc::mincore(page as *mut libc::c_void, 4096, v.as_mut_ptr()) };
    r == 0 && v[0] & 1 == 0
}

/// Whether every page of `[addr, addr+len)` is mapped in this process (`mincore` fails with
/// `ENOMEM` on a hole). Used before touching caller memory the engine does not know, so a bad
/// address is an `INVALID_PARAMS` result instead of a crash. It cannot see protections: mapped
/// but read-only memory used as a destination still faults, as it would in any copy.
pub fn range_mapped(addr: u64, len: u64) -> bool {
    if addr == 0 || len == 0 {
        return false;
    }
    // SAFETY: sysconf has no memory effects.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(4096) as u64;
    let Some(end) = addr.checked_add(len) else {
        return false;
    };
    let start = addr & !(page - 1);
    let mut at = start;
    // Probe in windows so the residency vector stays small for large ranges.
    let mut vec = vec![0u8; 4096];
    while at < end {
        let span = (end - at).min(page * vec.len() as u64);
        // SAFETY: mincore only reads the page tables for the range and writes at most
        // ceil(span/page) <= vec.len() bytes into `vec`.
        let r = unsafe { libc::mincore(at as *mut libc::c_void, span as usize, vec.as_mut_ptr()) };
        if r != 0 {
            return false;
        }
        at += span.div_ceil(page) * page;
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mapped_ranges_are_told_apart_from_holes() {
        let m = Mapped::new(1 << 20).unwrap();
        assert!(range_mapped(m.addr(), 1 << 20));
        assert!(range_mapped(m.addr() + 100, 10));
        assert!(!range_mapped(0, 10));
        assert!(!range_mapped(8, 10));
        assert!(!range_mapped(u64::MAX - 5, 10));
        let addr = m.addr();
        drop(m);
        assert!(!range_mapped(addr, 4096));
    }

    #[test]
    fn fresh_memory_is_told_apart_from_touched_memory() {
        let m = Mapped::new(1 << 20).unwrap();
        assert!(likely_fresh(m.addr(), 1 << 20), "an untouched mapping");
        assert!(
            !likely_fresh(m.addr(), 4096),
            "too small to be worth populating"
        );
        // SAFETY: the mapping is ours and live; one byte in its middle page.
        unsafe { *((m.addr() + (1 << 19)) as *mut u8) = 1 };
        assert!(
            !likely_fresh(m.addr(), 1 << 20),
            "its middle page is now resident"
        );
    }

    /// Whether the page holding `addr` is resident.
    fn resident(addr: u64) -> bool {
        let mut v = [0u8; 1];
        // SAFETY: mincore reads page tables for one page and writes one byte into `v`.
        let r = unsafe { libc::mincore((addr & !4095) as *mut libc::c_void, 4096, v.as_mut_ptr()) };
        r == 0 && v[0] & 1 == 1
    }

    #[test]
    fn populating_behind_a_writer_keeps_every_byte() {
        let len = POPULATE_BEHIND_MIN as usize * 2;
        let m = Mapped::new(len).unwrap();
        let last = m.addr() + len as u64 - 1;
        assert!(!resident(last), "a fresh mapping starts unpopulated");
        let seen_tail = populate_behind(&[(m.addr(), len as u64)], || {
            // SAFETY: the mapping is ours, live and `len` bytes long; the helper only populates.
            let buf = unsafe { std::slice::from_raw_parts_mut(m.addr() as *mut u8, len) };
            buf[len - 4096..].fill(0xA5); // written before the helper can reach it
            let half = len / 2;
            for (i, b) in buf[..half].iter_mut().enumerate() {
                *b = i as u8;
            }
            // Front half written by us; the back half must get populated by someone else.
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
            while !resident(m.addr() + half as u64 + 4096) && std::time::Instant::now() < deadline {
                std::thread::yield_now();
            }
            resident(m.addr() + half as u64 + 4096)
        });
        assert!(seen_tail, "the pages behind the writer were populated");
        // SAFETY: as above; the helper has stopped (populate_behind returned).
        let buf = unsafe { std::slice::from_raw_parts(m.addr() as *const u8, len) };
        assert!(
            buf[len - 4096..].iter().all(|&b| b == 0xA5),
            "populating clobbered bytes"
        );
        assert!(
            buf[..len / 2]
                .iter()
                .enumerate()
                .all(|(i, &b)| b == i as u8)
        );
        assert!(buf[len / 2..len - 4096].iter().all(|&b| b == 0));
    }
}
