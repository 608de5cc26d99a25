//! Registered memory: a sorted interval index of regions with the overlap rules of Mooncake
//! (partial overlap is an error) plus idempotent, reference-counted re-registration of the exact
//! same range. Every transport checks address ranges here before touching a byte.
//!
//! A re-registration of the same range must keep its `remote_accessible` flag: changing it is
//! refused (otherwise removing one registration would silently re-open or close the range).
//! `unregister` is final for peers: when it returns, no remote request is inside the range any
//! more and none can enter it (see [`pins`]: TCP requests, same-host approvals), and no
//! in-process copy is running on it (those run under the registry's read lock).

pub mod pins;
pub(crate) mod raw;
pub mod shared_buffers;

use crate::error::{ErrorKind, Result, fail};
use crate::sync::RwLockClean;
use std::collections::BTreeMap;
use std::sync::RwLock;
use std::sync::atomic::{AtomicU64, Ordering};

/// One registered region, as published in the segment descriptor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Region {
    /// First byte.
    pub base: u64,
    /// Length in bytes (never 0).
    pub len: u64,
    /// `"cpu:N"` or `"cuda:N"`: as given at registration, or detected for `"*"`.
    pub location: String,
    /// CUDA device holding the range (`None` = host memory), decided once at registration so
    /// transfers never ask the driver.
    pub device: Option<u32>,
    /// Whether peers may read and write it.
    pub remote_accessible: bool,
    refs: u32,
}

impl Region {
    /// One past the last byte.
    pub fn end(&self) -> u64 {
        self.base + self.len
    }
}

/// Who is asking to touch a range: this process, or a peer over the network.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// The local engine (any registered region).
    Local,
    /// A remote peer (remote-accessible regions only).
    Remote,
}

/// Outcome of [`Registry::check_pinned`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pinned {
    /// The range is allowed; the slot names its region (`base`). `device`: the GPU it lives
    /// on, as [`Registry::check_place`] says.
    In {
        /// Base address of the region.
        base: u64,
        /// GPU ordinal, `None` for host memory.
        device: Option<u32>,
    },
    /// The range lies in another region than the one to hold; nothing was marked.
    Elsewhere,
}

/// The registry. Thread-safe; lookups take a shared lock.
#[derive(Debug, Default)]
pub struct Registry {
    regions: RwLock<BTreeMap<u64, Region>>,
    generation: AtomicU64,
    pins: pins::Pins,
    shared: shared_buffers::SharedBuffers,
}

fn range_end(base: u64, len: u64) -> Result<u64> {
    if base == 0 {
        return fail(ErrorKind::InvalidArgument, "address is NULL");
    }
    if len == 0 {
        return fail(ErrorKind::InvalidArgument, "length is zero");
    }
    base.checked_add(len).ok_or_else(|| {
        crate::error::Error::new(
            ErrorKind::InvalidArgument,
            format!("range {base:#x}+{len} overflows the address space"),
        )
    })
}

impl Registry {
    /// An empty registry.
    pub fn new() -> Registry {
        Registry::default()
    }

    /// An empty registry whose shared buffers carry the engine's same-host `token` in their names.
    pub fn with_token(token: u64) -> Registry {
        Registry {
            shared: shared_buffers::SharedBuffers::new(token),
            ..Registry::default()
        }
    }

    /// Shared (memfd-backed) buffers of this engine; `unregister` closes them to peers.
    pub fn shared(&self) -> &shared_buffers::SharedBuffers {
        &self.shared
    }

    /// Bumped on every change; lets callers cache derived views (descriptors).
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// Registers `[base, base+len)`. Returns `true` when the region is new, `false` when the exact
    /// same range was already registered (its reference count goes up).
    pub fn register(
        &self,
        base: u64,
        len: u64,
        location: &str,
        remote_accessible: bool,
    ) -> Result<bool> {
        self.register_all(&[(base, len)], location, remote_accessible)
            .map(|fresh| fresh[0])
    }

    /// Registers every range or none. Ranges must not overlap each other or existing regions,
    /// except for exact re-registrations.
    pub fn register_all(
        &self,
        ranges: &[(u64, u64)],
        location: &str,
        remote_accessible: bool,
    ) -> Result<Vec<bool>> {
        for &(b, l) in ranges {
            range_end(b, l)?;
        }
        let mut sorted: Vec<(u64, u64)> = ranges.to_vec();
        sorted.sort_unstable();
        for w in sorted.windows(2) {
            if w[0].0 + w[0].1 > w[1].0 && w[0] != w[1] {
                return fail(
                    ErrorKind::AddressOverlapped,
                    format!(
                        "ranges at {:#x} and {:#x} overlap each other",
                        w[0].0, w[1].0
                    ),
                );
            }
        }
        // Resolved before taking the lock (may ask the CUDA driver or the kernel).
        let places: Vec<(String, Option<u32>)> = ranges
            .iter()
            .map(|&(b, _)| crate::gpu::placement(b, location))
            .collect();
        let mut map = self.regions.write_clean();
        let mut fresh = Vec::with_capacity(ranges.len());
        for &(base, len) in ranges {
            let end = base + len;
            match Self::find_overlap(&map, base, end) {
                Some(r) if r.base == base && r.len == len => {
                    if r.remote_accessible != remote_accessible {
                        return fail(
                            ErrorKind::InvalidArgument,
                            format!(
                                "range {base:#x}+{len} is registered with remote_accessible={}; \
                                 a re-registration cannot change it (unregister first)",
                                r.remote_accessible
                            ),
                        );
                    }
                    fresh.push(false)
                }
                Some(r) => {
                    return fail(
                        ErrorKind::AddressOverlapped,
                        format!(
                            "range {base:#x}+{len} overlaps registered region {:#x}+{}",
                            r.base, r.len
                        ),
                    );
                }
                None => fresh.push(true),
            }
        }
        for ((&(base, len), &is_new), (loc, device)) in ranges.iter().zip(&fresh).zip(places) {
            if is_new && !map.contains_key(&base) {
                map.insert(
                    base,
                    Region {
                        base,
                        len,
                        location: loc,
                        device,
                        remote_accessible,
                        refs: 1,
                    },
                );
            } else if let Some(r) = map.get_mut(&base) {
                r.refs += 1;
            }
        }
        self.generation.fetch_add(1, Ordering::AcqRel);
        Ok(fresh)
    }

    fn find_overlap(map: &BTreeMap<u64, Region>, base: u64, end: u64) -> Option<&Region> {
        // The candidate is the last region starting before `end`.
        map.range(..end)
            .next_back()
            .map(|(_, r)| r)
            .filter(|r| r.end() > base)
    }

    /// Drops one reference to the region starting at `base`. Returns `true` when the region is gone.
    pub fn unregister(&self, base: u64) -> Result<bool> {
        self.drop_refs(base, false)
    }

    /// Drops every registration of the region starting at `base`: it is gone when this returns.
    pub fn unregister_all(&self, base: u64) -> Result<()> {
        self.drop_refs(base, true).map(|_| ())
    }

    fn drop_refs(&self, base: u64, all: bool) -> Result<bool> {
        let mut map = self.regions.write_clean();
        let Some(r) = map.get_mut(&base) else {
            return fail(
                ErrorKind::AddressNotRegistered,
                format!("{base:#x} is not the base of a registered region"),
            );
        };
        r.refs = if all { 0 } else { r.refs - 1 };
        let gone = r.refs == 0;
        if gone {
            map.remove(&base);
        }
        self.generation.fetch_add(1, Ordering::AcqRel);
        drop(map);
        if gone && !self.pins.fence(base) {
            tw_log!(
                crate::log::Level::Error,
                "unregister {base:#x}: a peer request was still inside after {:?}",
                pins::FENCE_WAIT
            );
        }
        if gone {
            self.shared.revoke(base);
        }
        Ok(gone)
    }

    /// Checks that `[addr, addr+len)` lies inside one region that `access` may touch.
    pub fn check(&self, addr: u64, len: u64, access: Access) -> Result<()> {
        self.check_place(addr, len, access).map(|_| ())
    }

    /// Like [`Registry::check`], and tells where the range lives: `Some(device)` for CUDA device
    /// memory (transports stage it through host buffers), `None` for host memory.
    pub fn check_place(&self, addr: u64, len: u64, access: Access) -> Result<Option<u32>> {
        let map = self.regions.read_clean();
        Self::check_in(&map, addr, len, access)
    }

    fn check_in(
        map: &BTreeMap<u64, Region>,
        addr: u64,
        len: u64,
        access: Access,
    ) -> Result<Option<u32>> {
        let end = match addr.checked_add(len) {
            Some(e) if len > 0 && addr != 0 => e,
            _ => {
                return fail(
                    ErrorKind::InvalidArgument,
                    format!("bad range {addr:#x}+{len} (zero, NULL or overflowing)"),
                );
            }
        };
        match map.range(..=addr).next_back() {
            Some((_, r)) if r.end() >= end => {
                if access == Access::Remote && !r.remote_accessible {
                    fail(
                        ErrorKind::AddressNotRegistered,
                        format!("{addr:#x}+{len} is registered as not remote-accessible"),
                    )
                } else {
                    Ok(r.device)
                }
            }
            _ => fail(
                ErrorKind::AddressNotRegistered,
                format!("{addr:#x}+{len} is not inside one registered region"),
            ),
        }
    }

    /// Like [`Registry::check_place`] for a peer's request, and marks `slot` inside the region
    /// (while the registry is locked) until the caller's [`pins::PinSlot::leave`], so that an
    /// `unregister` of the region waits for (and cuts short) the request. Remote access only.
    ///
    /// `hold`: a region (its base) the slot must keep naming, because the caller still has
    /// bytes of it to send. A range in another region then gives [`Pinned::Elsewhere`] and the
    /// slot is left as it was.
    pub fn check_pinned(
        &self,
        addr: u64,
        len: u64,
        slot: &pins::PinSlot,
        hold: Option<u64>,
    ) -> Result<Pinned> {
        let map = self.regions.read_clean();
        let device = Self::check_in(&map, addr, len, Access::Remote)?;
        let base = map.range(..=addr).next_back().map_or(0, |(_, r)| r.base);
        if hold.is_some_and(|h| h != base) {
            return Ok(Pinned::Elsewhere);
        }
        slot.enter(base);
        Ok(Pinned::In { base, device })
    }

    /// Checks `[addr, addr+len)` like [`Registry::check_place`] and runs `f` with its place
    /// while the registry stays read-locked, so that an `unregister` of the region waits until
    /// `f` returns (in-process copies: the owner's memory cannot be unregistered under them).
    /// `f` must not call back into this registry's writers (`register`/`unregister`).
    pub fn with_checked<T>(
        &self,
        addr: u64,
        len: u64,
        access: Access,
        f: impl FnOnce(Option<u32>) -> Result<T>,
    ) -> Result<T> {
        let map = self.regions.read_clean();
        let place = Self::check_in(&map, addr, len, access)?;
        let out = f(place);
        drop(map);
        out
    }

    /// A pin slot for a data-server session reading from socket `fd` (see [`pins`]).
    pub fn pin_slot(&self, fd: std::os::fd::RawFd) -> std::sync::Arc<pins::PinSlot> {
        self.pins.slot(fd)
    }

    /// The region containing `addr`, if any.
    pub fn region_of(&self, addr: u64) -> Option<Region> {
        let map = self.regions.read_clean();
        map.range(..=addr)
            .next_back()
            .map(|(_, r)| r)
            .filter(|r| r.end() > addr)
            .cloned()
    }

    /// A copy of every region, in address order.
    pub fn snapshot(&self) -> Vec<Region> {
        let map = self.regions.read_clean();
        map.values().cloned().collect()
    }

    /// Number of regions.
    pub fn len(&self) -> usize {
        self.regions.read_clean().len()
    }

    /// True when nothing is registered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reregistration_cannot_change_remote_accessible() {
        let r = Registry::new();
        assert!(r.register(0x1000, 0x1000, "cpu:0", true).unwrap());
        let e = r.register(0x1000, 0x1000, "cpu:0", false).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidArgument);
        assert!(r.register(0x3000, 0x1000, "cpu:0", false).unwrap());
        assert!(r.register(0x3000, 0x1000, "cpu:0", true).is_err());
        assert!(r.check(0x3000, 8, Access::Remote).is_err());
        assert!(r.unregister(0x1000).unwrap());
        assert!(r.check(0x1000, 8, Access::Remote).is_err());
    }

    #[test]
    fn overlap_rules() {
        let r = Registry::new();
        assert!(r.register(0x1000, 0x1000, "cpu:0", true).unwrap());
        assert!(
            !r.register(0x1000, 0x1000, "cpu:0", true).unwrap(),
            "exact re-register is idempotent"
        );
        for (b, l) in [
            (0x1800, 0x1000),
            (0x800, 0x1000),
            (0x1000, 0x800),
            (0x1100, 0x10),
            (0x0800, 0x2000),
        ] {
            let e = r.register(b, l, "cpu:0", true).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::AddressOverlapped, "{b:#x}+{l:#x}");
        }
        assert!(
            r.register(0x2000, 0x10, "cpu:0", true).unwrap(),
            "adjacent is fine"
        );
        assert_eq!(
            r.register(0x3000, 0, "cpu:0", true).unwrap_err().kind(),
            ErrorKind::InvalidArgument
        );
        assert_eq!(
            r.register(0, 10, "cpu:0", true).unwrap_err().kind(),
            ErrorKind::InvalidArgument
        );
        assert_eq!(
            r.register(u64::MAX - 4, 10, "cpu:0", true)
                .unwrap_err()
                .kind(),
            ErrorKind::InvalidArgument
        );
        // Reference counted: two unregisters needed.
        assert!(!r.unregister(0x1000).unwrap());
        assert!(r.unregister(0x1000).unwrap());
        assert_eq!(
            r.unregister(0x1000).unwrap_err().kind(),
            ErrorKind::AddressNotRegistered
        );
        assert_eq!(
            r.unregister(0x2001).unwrap_err().kind(),
            ErrorKind::AddressNotRegistered
        );
    }

    #[test]
    fn batch_is_all_or_nothing() {
        let r = Registry::new();
        r.register(0x5000, 0x100, "cpu:0", true).unwrap();
        let e = r
            .register_all(&[(0x1000, 0x100), (0x5080, 0x10)], "cpu:0", true)
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::AddressOverlapped);
        assert_eq!(r.len(), 1, "nothing from the failed batch stays");
        let e = r
            .register_all(&[(0x1000, 0x100), (0x1080, 0x100)], "cpu:0", true)
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::AddressOverlapped);
        r.register_all(&[(0x1000, 0x100), (0x2000, 0x100)], "*", true)
            .unwrap();
        assert_eq!(r.len(), 3);
    }

    #[test]
    fn range_checks() {
        let r = Registry::new();
        r.register(0x1000, 0x1000, "cpu:0", true).unwrap();
        r.register(0x4000, 0x1000, "cpu:0", false).unwrap();
        assert!(r.check(0x1000, 0x1000, Access::Remote).is_ok());
        assert!(r.check(0x1fff, 1, Access::Remote).is_ok());
        assert_eq!(
            r.check(0x1fff, 2, Access::Remote).unwrap_err().kind(),
            ErrorKind::AddressNotRegistered
        );
        assert_eq!(
            r.check(0xfff, 2, Access::Local).unwrap_err().kind(),
            ErrorKind::AddressNotRegistered
        );
        assert_eq!(
            r.check(0x1000, 0, Access::Local).unwrap_err().kind(),
            ErrorKind::InvalidArgument
        );
        assert_eq!(
            r.check(u64::MAX, 2, Access::Local).unwrap_err().kind(),
            ErrorKind::InvalidArgument
        );
        assert!(r.check(0x4000, 8, Access::Local).is_ok());
        assert_eq!(
            r.check(0x4000, 8, Access::Remote).unwrap_err().kind(),
            ErrorKind::AddressNotRegistered
        );
    }
}
