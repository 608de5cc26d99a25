//! The shared-memory route to a verified same-host peer: its shared buffers (see
//! `memory::shared_buffers`) are mapped into this process and transfers into them are a `memcpy` under
//! the buffer's revocation fence; everything else (other buffers, GPU memory, a buffer the owner
//! closed) goes to the route behind it (TCP lanes with their `process_vm_*` shortcut).
//!
//! Attaching takes each fd with `pidfd_getfd` and checks before mapping that it is what the
//! descriptor says: the control block's magic and the owner's token, each buffer's memfd name
//! (token and generation), its size, and seals that forbid shrinking it (so a copy can never
//! fault on a truncated file).

use super::{Slice, Transport};
use crate::memory::shared_buffers::{
    CONTROL_LEN, CONTROL_MAGIC, OPEN, Slot, buffer_name, control_name,
};
use crate::metadata::descriptor::SharedBufDesc;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::Ordering::SeqCst;

/// The route the slices outside the shared buffers take (the TCP route this one is layered
/// over), behind one virtual call per submit: a shared route is a layer, not a variant of it.
pub type Fallback = std::sync::Arc<dyn Transport + Send + Sync>;

/// A mapping of a peer's file, unmapped on drop.
struct Mapping {
    addr: u64,
    len: usize,
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: our own mapping; nothing refers to it once its owner is dropped.
        unsafe { libc::munmap(self.addr as *mut libc::c_void, self.len) };
    }
}

/// One mapped shared buffer of the peer.
struct Buffer {
    remote: u64,
    len: u64,
    slot: u32,
    open_word: u64,
    map: Mapping,
}

/// The mapped shared buffers of one peer and the route for everything else.
pub struct SharedRoute {
    control: Mapping,
    buffers: Vec<Buffer>,
    fallback: Fallback,
}

fn take_fd(pidfd: &OwnedFd, fd: i32) -> io::Result<OwnedFd> {
    // SAFETY: plain syscall; the result is checked and owned below.
    let r = unsafe { libc::syscall(libc::SYS_pidfd_getfd, pidfd.as_raw_fd(), fd, 0) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a new fd of this process, owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(r as i32) })
}

/// Checks that `fd` is a memfd called `name` of exactly `len` bytes that can no longer shrink.
fn check_memfd(fd: &OwnedFd, name: &str, len: u64, sealed: bool) -> io::Result<()> {
    let link = std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd()))?;
    let want = format!("/memfd:{name} (deleted)");
    if link.as_os_str() != want.as_str() {
        return Err(io::Error::other(format!("fd is {link:?}, not {want}")));
    }
    // SAFETY: fstat on our own fd into a zeroed struct.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 {
        return Err(io::Error::last_os_error());
    }
    if st.st_size as u64 != len {
        return Err(io::Error::other(format!(
            "{name} has {} bytes, not {len}",
            st.st_size
        )));
    }
    if sealed {
        // SAFETY: fcntl query on our own fd.
        let seals = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GET_SEALS) };
        if seals < 0 || seals & libc::F_SEAL_SHRINK == 0 {
            return Err(io::Error::other(format!(
                "{name} is not sealed against shrinking"
            )));
        }
    }
    Ok(())
}

/// Buffers up to this size are mapped with their page tables filled at segment open. Filling
/// allocates every page of the owner's file (shared memory has no zero page), so a larger and
/// possibly sparse buffer is left to fault page by page instead.
const POPULATE_MAX: usize = 256 << 20;

/// Maps a peer's file; small enough ones with their page tables filled now (one pass at segment
/// open instead of a page fault per 4 KiB on the first transfers).
fn map(fd: &OwnedFd, len: usize) -> io::Result<Mapping> {
    let populate = len <= POPULATE_MAX;
    crate::memory::shared_buffers::map_shared(fd.as_raw_fd(), len, populate)
        .map(|addr| Mapping { addr, len })
}

impl SharedRoute {
    /// Maps the shared buffers that process `pid` (already verified as the engine with
    /// `token`) publishes; `None` when there are none or the kernel refuses (then `fallback`
    /// alone serves the peer, and the reason is logged once).
    pub fn attach(
        pid: u32,
        token: u64,
        control_fd: i32,
        list: &[SharedBufDesc],
        fallback: Fallback,
    ) -> Option<SharedRoute> {
        if control_fd <= 0 || list.is_empty() {
            return None;
        }
        match Self::try_attach(pid, token, control_fd, list, fallback) {
            Ok(r) => Some(r),
            Err(e) => {
                tw_log!(
                    crate::log::Level::Info,
                    "shared buffers of pid {pid} not mapped ({e}); using the socket path"
                );
                None
            }
        }
    }

    fn try_attach(
        pid: u32,
        token: u64,
        control_fd: i32,
        list: &[SharedBufDesc],
        fallback: Fallback,
    ) -> io::Result<SharedRoute> {
        // SAFETY: plain syscall; the result is checked and owned below.
        let r = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a new fd of this process, owned by nobody else.
        let pidfd = unsafe { OwnedFd::from_raw_fd(r as i32) };
        let cfd = take_fd(&pidfd, control_fd)?;
        check_memfd(&cfd, &control_name(token), CONTROL_LEN as u64, false)?;
        let control = map(&cfd, CONTROL_LEN)?;
        // SAFETY: slot 0 of the live control mapping.
        let head = unsafe { &*(control.addr as *const Slot) };
        if head.word.load(SeqCst) != CONTROL_MAGIC || head.users.load(SeqCst) != token {
            return Err(io::Error::other("control block belongs to another engine"));
        }
        let mut buffers = Vec::with_capacity(list.len());
        for d in list {
            if d.slot == 0 || d.slot as usize >= crate::memory::shared_buffers::SLOTS || d.len == 0
            {
                return Err(io::Error::other(format!("bad shared buffer entry {d:?}")));
            }
            let fd = take_fd(&pidfd, d.fd)?;
            check_memfd(&fd, &buffer_name(token, d.generation), d.len, true)?;
            buffers.push(Buffer {
                remote: d.addr,
                len: d.len,
                slot: d.slot,
                open_word: d.generation << 1 | OPEN,
                map: map(&fd, d.len as usize)?,
            });
        }
        buffers.sort_by_key(|b| b.remote);
        Ok(SharedRoute {
            control,
            buffers,
            fallback,
        })
    }

    fn slot(&self, i: u32) -> &Slot {
        // SAFETY: `i < SLOTS` (checked at attach) inside the live control mapping.
        unsafe { &*(self.control.addr as *const Slot).add(i as usize) }
    }

    /// Copies `s` through the mapping when it lies in one open shared buffer; `false` leaves it
    /// to the fallback route.
    fn try_copy(&self, s: &Slice, stream: bool) -> bool {
        if s.gpu.is_some() {
            return false;
        }
        let i = self.buffers.partition_point(|b| b.remote <= s.remote);
        let Some(b) = i.checked_sub(1).map(|i| &self.buffers[i]) else {
            return false;
        };
        let off = s.remote - b.remote;
        if off.checked_add(s.len).is_none_or(|end| end > b.len) {
            return false;
        }
        let slot = self.slot(b.slot);
        slot.users.fetch_add(1, SeqCst);
        if slot.word.load(SeqCst) != b.open_word {
            slot.users.fetch_sub(1, SeqCst);
            return false;
        }
        let theirs = b.map.addr + off;
        let (src, dst) = match s.op {
            super::Opcode::Read => (theirs, s.local),
            super::Opcode::Write => (s.local, theirs),
        };
        // SAFETY: `theirs` lies inside our mapping of a buffer the owner keeps open (the fence
        // above: it cannot close it without waiting for us to leave), sealed against shrinking;
        // `s.local` was checked against our registry at submit and stays registered until the
        // slice completes.
        unsafe { crate::memory::raw::copy(src, dst, s.len as usize, stream) };
        slot.users.fetch_sub(1, SeqCst);
        true
    }
}

impl Transport for SharedRoute {
    fn path_name(&self) -> &'static str {
        "shared-memory"
    }

    fn submit_all(&self, slices: Vec<Slice>) {
        let mut rest = Vec::new();
        let stream =
            slices.iter().map(|s| s.len).sum::<u64>() >= crate::memory::raw::STREAM_MIN_TOTAL;
        for s in slices {
            if self.try_copy(&s, stream) {
                let len = s.len;
                s.done.finish(Ok(len));
            } else {
                rest.push(s);
            }
        }
        if !rest.is_empty() {
            self.fallback.submit_all(rest);
        }
    }
}
