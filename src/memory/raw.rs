//! The only place in the core that turns registered addresses into byte slices. Callers must have
//! checked the range against the [`Registry`](super::Registry) first; registration is the
//! caller's promise that the memory stays valid until it is unregistered.

/// A shared view of registered memory.
///
/// # Safety
/// `[addr, addr+len)` must be a registered (hence live, readable) range for the returned lifetime.
pub(crate) unsafe fn bytes<'a>(addr: u64, len: usize) -> &'a [u8] {
    // SAFETY: guaranteed by the caller (range checked against the registry).
    unsafe { std::slice::from_raw_parts(addr as usize as *const u8, len) }
}

/// A mutable view of registered memory. The engine never creates two of these for one range at a
/// time; the bytes may still be read concurrently by the application, which is its business
/// (as with DMA).
///
/// # Safety
/// `[addr, addr+len)` must be a registered (hence live, writable) range for the returned lifetime.
pub(crate) unsafe fn bytes_mut<'a>(addr: u64, len: usize) -> &'a mut [u8] {
    // SAFETY: guaranteed by the caller (range checked against the registry).
    unsafe { std::slice::from_raw_parts_mut(addr as usize as *mut u8, len) }
}

/// memmove between two registered ranges.
///
/// # Safety
/// Both ranges must be registered, live, and the destination writable.
pub(crate) unsafe fn copy(src: u64, dst: u64, len: usize) {
    // SAFETY: guaranteed by the caller; `copy` tolerates overlap.
    unsafe { std::ptr::copy(src as usize as *const u8, dst as usize as *mut u8, len) }
}
