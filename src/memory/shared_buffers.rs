//! Shared buffers: host memory backed by a `memfd` that verified same-host peers map into their
//! own address space and copy to and from with plain `memcpy` (no socket, no syscall per
//! transfer). The engine allocates them (`allocate_managed_buffer`, `tw_memory_alloc_shared`),
//! registers them remote-accessible and publishes, per buffer, the fd number, a control slot and
//! a generation; a peer takes the fds with `pidfd_getfd` (the kernel allows that exactly where it
//! allows `process_vm_*`: same user, ptrace access).
//!
//! **Revocation fence.** Each buffer has a slot in a small shared control block:
//! `word = generation << 1 | OPEN` and `users`, the number of peer copies inside the buffer now.
//! A peer copies only as `users += 1; if word == published { memcpy }; users -= 1` (all SeqCst).
//! `unregister` closes the slot (`word` changes, so stale peers never match again, even after the
//! slot is reused) and waits until `users == 0`: with sequentially consistent operations on both
//! sides, either the peer saw the slot closed and copies nothing, or the owner sees it inside and
//! waits. Past [`FENCE_WAIT`](super::pins::FENCE_WAIT) (a peer stopped in the middle of a copy,
//! or one that does not follow the protocol) the owner *detaches* the buffer: its bytes are
//! copied into private memory mapped over the same addresses, so the peer's late writes land in a
//! file nobody else sees. Either way, when `unregister` returns no peer byte reaches the owner's
//! memory any more.
//!
//! Threat model: a process that can `pidfd_getfd` our fds can equally `process_vm_writev` into any
//! of our memory, so the fence protects against honest peers racing `unregister` (and against
//! stopped ones), not against a hostile process of the same user.

use super::pins::FENCE_WAIT;
use crate::error::{Error, ErrorKind, Result, fail};
use crate::sync::LockClean;
use std::collections::HashMap;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Slots in the control block (slot 0 holds the header), so at most `SLOTS - 1` shared buffers
/// live at once per engine.
pub const SLOTS: usize = 4096;
/// Bytes of the control block.
pub const CONTROL_LEN: usize = SLOTS * std::mem::size_of::<Slot>();
/// First word of the control block: lets a peer check it mapped the right file.
pub const CONTROL_MAGIC: u64 = 0x7469_6465_7368_6d31; // "tideshm1"
/// `word` bit meaning "peers may copy".
pub const OPEN: u64 = 1;

/// One buffer's entry in the control block (in memory shared with peers).
#[repr(C)]
#[derive(Debug)]
pub struct Slot {
    /// `generation << 1 | OPEN` while peers may copy; anything else means closed.
    pub word: AtomicU64,
    /// Peer copies inside the buffer now.
    pub users: AtomicU64,
}

/// What a peer needs to map one shared buffer (published in the descriptor).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SharedDesc {
    /// Address of the buffer in the owner.
    pub addr: u64,
    /// Length.
    pub len: u64,
    /// The owner's fd of the buffer's memfd.
    pub fd: i32,
    /// Control slot.
    pub slot: u32,
    /// Generation: the slot's `word` is `gen << 1 | OPEN` while the buffer is open to peers.
    pub gen_: u64,
}

/// Name of a shared buffer's memfd (peers check it after taking the fd).
pub fn buffer_name(token: u64, gen_: u64) -> String {
    format!("tidewire-shm-{token:x}-{gen_}")
}

/// Name of the control block's memfd.
pub fn control_name(token: u64) -> String {
    format!("tidewire-ctl-{token:x}")
}

struct Buffer {
    fd: OwnedFd,
    len: u64,
    slot: u32,
    gen_: u64,
    open: bool,
    /// Detached after a fence timeout: a peer may still count itself inside the slot, so the
    /// slot is never reused.
    detached: bool,
}

struct State {
    control: Option<Control>,
    buffers: HashMap<u64, Buffer>,
    free_slots: Vec<u32>,
    next_gen: u64,
}

/// The control block mapping (owner side).
struct Control {
    fd: OwnedFd,
    base: *mut Slot,
}

// SAFETY: the mapping is process-wide memory accessed only through atomics.
unsafe impl Send for Control {}

impl Control {
    fn slot(&self, i: u32) -> &Slot {
        debug_assert!((i as usize) < SLOTS);
        // SAFETY: `base` maps CONTROL_LEN bytes (SLOTS slots) for as long as `self` lives.
        unsafe { &*self.base.add(i as usize) }
    }
}

impl Drop for Control {
    fn drop(&mut self) {
        // SAFETY: unmapping our own mapping of CONTROL_LEN bytes; no reference outlives `self`.
        unsafe { libc::munmap(self.base.cast(), CONTROL_LEN) };
    }
}

/// This engine's shared buffers.
pub struct SharedBuffers {
    token: u64,
    state: Mutex<State>,
}

impl std::fmt::Debug for SharedBuffers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedBuffers").finish_non_exhaustive()
    }
}

impl Default for SharedBuffers {
    fn default() -> SharedBuffers {
        SharedBuffers::new(0)
    }
}

fn os_err(what: &str) -> Error {
    Error::new(
        ErrorKind::Internal,
        format!("{what}: {}", std::io::Error::last_os_error()),
    )
}

/// A memfd of `len` bytes; `seal`: its size is then fixed for good (peers map it and must never
/// fault on a shrunk file).
fn memfd(name: &str, len: u64, seal: bool) -> Result<OwnedFd> {
    let cname = std::ffi::CString::new(name).map_err(|_| os_err("memfd name"))?;
    let flags = libc::MFD_CLOEXEC | if seal { libc::MFD_ALLOW_SEALING } else { 0 };
    // SAFETY: a NUL-terminated name; the returned fd is checked and owned below.
    let fd = unsafe { libc::memfd_create(cname.as_ptr(), flags) };
    if fd < 0 {
        return Err(os_err("memfd_create"));
    }
    // SAFETY: `fd` was just created and is owned by nobody else.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: plain syscall on our own fd.
    if unsafe { libc::ftruncate(fd.as_raw_fd(), len as libc::off_t) } != 0 {
        return Err(os_err("sizing a shared buffer"));
    }
    let seals = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL;
    // SAFETY: fcntl on our own fd.
    if seal && unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, seals) } != 0 {
        return Err(os_err("sealing a shared buffer"));
    }
    Ok(fd)
}

/// Maps `len` bytes of `fd` shared and writable; `populate` fills the page tables now
/// (`MAP_POPULATE`: one pass instead of a page fault per 4 KiB on first use).
pub fn map_shared(fd: RawFd, len: usize, populate: bool) -> std::io::Result<u64> {
    let flags = libc::MAP_SHARED | if populate { libc::MAP_POPULATE } else { 0 };
    // SAFETY: a new mapping of a file we hold, placed by the kernel.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            flags,
            fd,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(std::io::Error::last_os_error());
    }
    Ok(p as u64)
}

impl SharedBuffers {
    /// Shared buffers of the engine whose same-host identity token is `token`.
    pub fn new(token: u64) -> SharedBuffers {
        SharedBuffers {
            token,
            state: Mutex::new(State {
                control: None,
                buffers: HashMap::new(),
                free_slots: Vec::new(),
                next_gen: 1,
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock_clean()
    }

    /// Allocates `len` bytes of zeroed shared memory (closed to peers until [`open`](Self::open)).
    /// Returns its address.
    pub fn alloc(&self, len: u64) -> Result<u64> {
        if len == 0 || len > isize::MAX as u64 {
            return fail(ErrorKind::InvalidArgument, format!("bad length {len}"));
        }
        let mut st = self.lock();
        if st.control.is_none() {
            let fd = memfd(&control_name(self.token), CONTROL_LEN as u64, false)?;
            let base = map_shared(fd.as_raw_fd(), CONTROL_LEN, false)
                .map_err(|e| Error::new(ErrorKind::Internal, format!("control block: {e}")))?;
            let c = Control {
                fd,
                base: base as *mut Slot,
            };
            c.slot(0).word.store(CONTROL_MAGIC, Ordering::SeqCst);
            c.slot(0).users.store(self.token, Ordering::SeqCst);
            st.free_slots = (1..SLOTS as u32).rev().collect();
            st.control = Some(c);
        }
        let Some(slot) = st.free_slots.pop() else {
            return fail(
                ErrorKind::Internal,
                format!("{} shared buffers are in use already", SLOTS - 1),
            );
        };
        let gen_ = st.next_gen;
        st.next_gen += 1;
        let made = memfd(&buffer_name(self.token, gen_), len, true).and_then(|fd| {
            let addr = map_shared(fd.as_raw_fd(), len as usize, false)
                .map_err(|e| Error::new(ErrorKind::Internal, format!("mapping {len} B: {e}")))?;
            Ok((fd, addr))
        });
        let (fd, addr) = match made {
            Ok(v) => v,
            Err(e) => {
                st.free_slots.push(slot);
                return Err(e);
            }
        };
        st.buffers.insert(
            addr,
            Buffer {
                fd,
                len,
                slot,
                gen_,
                open: false,
                detached: false,
            },
        );
        Ok(addr)
    }

    /// Whether `addr` is the base of a shared buffer of this engine.
    pub fn contains(&self, addr: u64) -> bool {
        self.lock().buffers.contains_key(&addr)
    }

    /// Opens the buffer at `addr` to peers (after it was registered remote-accessible).
    pub fn open(&self, addr: u64) {
        let mut st = self.lock();
        let st = &mut *st;
        if let (Some(b), Some(c)) = (st.buffers.get_mut(&addr), &st.control) {
            c.slot(b.slot)
                .word
                .store(b.gen_ << 1 | OPEN, Ordering::SeqCst);
            b.open = true;
        }
    }

    /// Closes the buffer at `addr` to peers and waits for copies inside it to end (see the
    /// module docs); a buffer that is not shared, or already closed, returns at once.
    pub fn revoke(&self, addr: u64) {
        let mut st = self.lock();
        let st = &mut *st;
        let (Some(b), Some(c)) = (st.buffers.get_mut(&addr), &st.control) else {
            return;
        };
        if !b.open {
            return;
        }
        b.open = false;
        let slot = c.slot(b.slot);
        // Any value other than `gen << 1 | OPEN` closes it; this one is never published.
        slot.word.store(b.gen_ << 1, Ordering::SeqCst);
        let until = Instant::now() + FENCE_WAIT;
        let mut spins = 0u32;
        while slot.users.load(Ordering::SeqCst) != 0 {
            if Instant::now() >= until {
                tw_log!(
                    crate::log::Level::Error,
                    "unregister {addr:#x}: a same-host peer was still copying after {FENCE_WAIT:?}; \
                     the buffer is detached from its shared memory"
                );
                detach(addr, b.len as usize);
                b.detached = true;
                return;
            }
            spins += 1;
            if spins < 64 {
                std::hint::spin_loop();
            } else {
                std::thread::sleep(Duration::from_micros(50));
            }
        }
    }

    /// Releases the buffer at `addr` (revoked first if still open): its memory is unmapped and
    /// its slot reused under a new generation. Errors when `addr` is not a shared buffer.
    pub fn free(&self, addr: u64) -> Result<()> {
        self.revoke(addr);
        let mut st = self.lock();
        let Some(b) = st.buffers.remove(&addr) else {
            return fail(
                ErrorKind::InvalidArgument,
                format!("{addr:#x} is not a shared buffer of this engine"),
            );
        };
        // SAFETY: our own mapping of `len` bytes at `addr`, made by `alloc` (or replaced by
        // `detach` at the same addresses); the caller gives up all use of it.
        unsafe { libc::munmap(addr as *mut libc::c_void, b.len as usize) };
        if !b.detached {
            st.free_slots.push(b.slot);
        }
        Ok(())
    }

    /// The open buffers and the control block's fd, for the descriptor (`None`: nothing shared).
    pub fn published(&self) -> Option<(i32, Vec<SharedDesc>)> {
        let st = self.lock();
        let c = st.control.as_ref()?;
        let list: Vec<SharedDesc> = st
            .buffers
            .iter()
            .filter(|(_, b)| b.open)
            .map(|(&addr, b)| SharedDesc {
                addr,
                len: b.len,
                fd: b.fd.as_raw_fd(),
                slot: b.slot,
                gen_: b.gen_,
            })
            .collect();
        if list.is_empty() {
            return None;
        }
        Some((c.fd.as_raw_fd(), list))
    }
}

impl Drop for SharedBuffers {
    fn drop(&mut self) {
        let addrs: Vec<u64> = self.lock().buffers.keys().copied().collect();
        for a in addrs {
            let _ = self.free(a);
        }
    }
}

/// Replaces the shared mapping at `[addr, addr+len)` by private memory holding the same bytes.
fn detach(addr: u64, len: usize) {
    let mut copy = vec![0u8; len];
    // SAFETY: `[addr, addr+len)` is our live mapping; `copy` is a fresh buffer of `len` bytes.
    unsafe { std::ptr::copy_nonoverlapping(addr as *const u8, copy.as_mut_ptr(), len) };
    // SAFETY: replaces our own mapping at the same addresses (MAP_FIXED) with anonymous memory.
    let p = unsafe {
        libc::mmap(
            addr as *mut libc::c_void,
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        tw_log!(
            crate::log::Level::Error,
            "detaching shared buffer {addr:#x}: {}",
            std::io::Error::last_os_error()
        );
        return;
    }
    // SAFETY: the new private mapping covers `len` bytes at `addr`.
    unsafe { std::ptr::copy_nonoverlapping(copy.as_ptr(), addr as *mut u8, len) };
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering::SeqCst;

    /// A second mapping of the same files, as a peer would have.
    fn peer_view(sb: &SharedBuffers, addr: u64) -> (u64, u64) {
        let (ctl, list) = sb.published().unwrap();
        let d = list.iter().find(|d| d.addr == addr).unwrap();
        let c = map_shared(ctl, CONTROL_LEN, false).unwrap();
        let b = map_shared(d.fd, d.len as usize, true).unwrap();
        (c, b)
    }

    #[test]
    fn peer_mapping_sees_and_writes_the_same_bytes_until_revoked() {
        let sb = SharedBuffers::new(7);
        let a = sb.alloc(8192).unwrap();
        assert!(sb.published().is_none(), "closed buffers are not published");
        sb.open(a);
        let (ctl, view) = peer_view(&sb, a);
        // SAFETY: both mappings are live and 8192 bytes long.
        unsafe {
            *(view as *mut u8).add(100) = 42;
            assert_eq!(*(a as *const u8).add(100), 42);
        }
        // SAFETY: slot 0 of the control mapping.
        let hdr = unsafe { &*(ctl as *const Slot) };
        assert_eq!(hdr.word.load(SeqCst), CONTROL_MAGIC);
        assert_eq!(hdr.users.load(SeqCst), 7);
        sb.revoke(a);
        assert!(sb.published().is_none());
        sb.free(a).unwrap();
        assert!(sb.free(a).is_err(), "double free is an error");
    }

    #[test]
    fn revoke_waits_for_a_copy_in_progress_then_detaches() {
        let sb = SharedBuffers::new(9);
        let a = sb.alloc(4096).unwrap();
        sb.open(a);
        let (ctl, view) = peer_view(&sb, a);
        let d = sb.published().unwrap().1[0];
        // SAFETY: slot `d.slot` of the live control mapping.
        let slot = unsafe { &*(ctl as *const Slot).add(d.slot as usize) };
        slot.users.fetch_add(1, SeqCst); // a peer stuck inside a copy
        let t = Instant::now();
        sb.revoke(a);
        let waited = t.elapsed();
        assert!(waited >= FENCE_WAIT, "returned after {waited:?}");
        // The stuck peer's late write no longer reaches the owner's memory.
        // SAFETY: both mappings are live for 4096 bytes.
        unsafe {
            *(view as *mut u8) = 9;
            assert_eq!(*(a as *const u8), 0);
        }
        sb.free(a).unwrap();
    }

    #[test]
    fn a_reused_slot_gets_a_new_generation() {
        let sb = SharedBuffers::new(1);
        let a = sb.alloc(4096).unwrap();
        sb.open(a);
        let first = sb.published().unwrap().1[0];
        sb.free(a).unwrap();
        let b = sb.alloc(4096).unwrap();
        sb.open(b);
        let second = sb.published().unwrap().1[0];
        assert_eq!(first.slot, second.slot);
        assert_ne!(first.gen_, second.gen_);
        sb.free(b).unwrap();
    }
}
