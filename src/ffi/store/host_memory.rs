//! `tw_store_host_alloc`/`tw_store_host_free`: host memory for callers of the Store, with the
//! C signatures of the pair whose addresses Mooncake's `mooncake.store` hands out
//! (`get_alloc_func_addr()` / `get_free_func_addr()`: `void *hugepage_memory_alloc(size_t)`
//! and `void hugepage_memory_free(void *)`), and `tw_store_host_alloc_aligned` for a chosen
//! alignment (the Python buffer pools' regions).
//!
//! Mooncake's pair allocates SPDK DMA memory (4 KiB aligned) in a build with NVMe-oF and
//! returns NULL in one without (its published wheels); these allocate ordinary host memory,
//! page aligned, with a transparent-huge-page hint from 2 MiB up. The memory is not zeroed
//! and not registered with any engine: register it (`tw_store_register_buffer`) to transfer
//! from or into it.
//!
//! Ownership: each non-NULL pointer returned belongs to the caller until it passes it to
//! `tw_store_host_free`, exactly once. Thread safety: every function may be called from any
//! thread at any time (the C library's allocator serialises what it must).

use crate::ffi::ffi_boundary;
use crate::ffi::status::set_last_error;
use std::ffi::c_void;

/// Alignment of `tw_store_host_alloc`'s memory (Mooncake's SPDK allocation alignment).
pub const TW_STORE_HOST_ALLOC_ALIGNMENT: usize = 4096;

/// From this size up an allocation is advised to use transparent huge pages.
const HUGE_HINT_FROM: usize = 2 << 20;

/// `size` bytes aligned to `alignment` (a power of two, at least a pointer), or NULL with the
/// reason in the last error.
fn alloc(size: usize, alignment: usize) -> *mut c_void {
    if size == 0 {
        set_last_error("host allocation of 0 bytes".into());
        return std::ptr::null_mut();
    }
    if !alignment.is_power_of_two() || alignment < std::mem::size_of::<*mut c_void>() {
        set_last_error(format!(
            "alignment {alignment} is not a power of two of at least a pointer's size"
        ));
        return std::ptr::null_mut();
    }
    // No allocator can give more than isize::MAX bytes; refused here rather than asked of
    // posix_memalign (a sanitizer's allocator aborts on such a request instead of failing).
    if std::alloc::Layout::from_size_align(size, alignment).is_err() {
        set_last_error(format!(
            "host allocation of {size} bytes is larger than memory can be"
        ));
        return std::ptr::null_mut();
    }
    let mut p: *mut c_void = std::ptr::null_mut();
    // SAFETY: `p` is a valid out pointer; the alignment is a power of two multiple of
    // sizeof(void *), as posix_memalign requires.
    let rc = unsafe { libc::posix_memalign(&mut p, alignment, size) };
    if rc != 0 || p.is_null() {
        set_last_error(format!("cannot allocate {size} bytes of host memory"));
        return std::ptr::null_mut();
    }
    if size >= HUGE_HINT_FROM && alignment >= TW_STORE_HOST_ALLOC_ALIGNMENT {
        // SAFETY: [p, p+size) is memory just allocated, and p is page aligned. The advice is
        // a hint: its failure (no THP support) changes nothing.
        unsafe { libc::madvise(p, size, libc::MADV_HUGEPAGE) };
    }
    p
}

/// Allocates `size` bytes of host memory aligned to `TW_STORE_HOST_ALLOC_ALIGNMENT` (the C
/// signature of Mooncake's `hugepage_memory_alloc`, whose address `get_alloc_func_addr()`
/// gives). Returns NULL when `size` is 0 or the memory cannot be had
/// (`tw_last_error_message()` says why). The caller owns the memory and frees it with
/// `tw_store_host_free`. Thread-safe.
#[unsafe(no_mangle)]
pub extern "C" fn tw_store_host_alloc(size: usize) -> *mut c_void {
    ffi_boundary!(std::ptr::null_mut(), {
        alloc(size, TW_STORE_HOST_ALLOC_ALIGNMENT)
    })
}

/// Allocates `size` bytes of host memory aligned to `alignment` (a power of two, at least
/// `sizeof(void *)`). Returns NULL when `size` is 0, the alignment is not such a number or
/// the memory cannot be had (`tw_last_error_message()` says why). The caller owns the memory
/// and frees it with `tw_store_host_free`. Thread-safe.
#[unsafe(no_mangle)]
pub extern "C" fn tw_store_host_alloc_aligned(size: usize, alignment: usize) -> *mut c_void {
    ffi_boundary!(std::ptr::null_mut(), { alloc(size, alignment) })
}

/// Frees memory from `tw_store_host_alloc` or `tw_store_host_alloc_aligned` (the C signature
/// of Mooncake's `hugepage_memory_free`, whose address `get_free_func_addr()` gives). NULL is
/// accepted and does nothing. Thread-safe.
///
/// # Safety
/// `ptr` is NULL or a pointer those functions returned that has not been freed; the memory is
/// not used afterwards (unregister it first if it was registered).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn tw_store_host_free(ptr: *mut c_void) {
    ffi_boundary!((), {
        if !ptr.is_null() {
            // SAFETY: from posix_memalign (the contract above), freed once.
            unsafe { libc::free(ptr) };
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alloc_aligns_and_frees() {
        for size in [1usize, 4095, 4096, 3 << 20] {
            let p = tw_store_host_alloc(size);
            assert!(!p.is_null());
            assert_eq!(p as usize % TW_STORE_HOST_ALLOC_ALIGNMENT, 0);
            // SAFETY: `size` bytes just allocated.
            unsafe {
                std::ptr::write_bytes(p.cast::<u8>(), 0xab, size);
                tw_store_host_free(p);
            }
        }
        let p = tw_store_host_alloc_aligned(100, 1 << 20);
        assert!(!p.is_null() && p as usize % (1 << 20) == 0);
        // SAFETY: from tw_store_host_alloc_aligned, freed once.
        unsafe { tw_store_host_free(p) };
    }

    #[test]
    fn refusals_are_null() {
        assert!(tw_store_host_alloc(0).is_null());
        assert!(tw_store_host_alloc_aligned(10, 3).is_null());
        assert!(tw_store_host_alloc_aligned(10, 2).is_null());
        assert!(tw_store_host_alloc(usize::MAX).is_null());
        // SAFETY: NULL is accepted.
        unsafe { tw_store_host_free(std::ptr::null_mut()) };
    }
}
