//! Registered memory.

use super::*;

/// Registers `[addr, addr+length)`; `location` is recorded, and peers may touch the range only
/// when `remote_accessible != 0`. Returns 0; -1 for zero length or a NULL engine/addr/location;
/// -7 when the range overlaps a registration (an exact repeat is reference-counted). Thread-safe.
#[unsafe(no_mangle)]
pub extern "C" fn registerLocalMemory(
    engine: *mut c_void,
    addr: *mut c_void,
    length: usize,
    location: *const c_char,
    remote_accessible: c_int,
) -> c_int {
    ffi_boundary!(ERR_CONTEXT, {
        let r = handle(engine).and_then(|h| {
            // SAFETY: `location` is NULL or a NUL-terminated string (API contract).
            let loc = unsafe { string(location, "location") }?;
            h.engine
                .register_memory(addr as u64, length as u64, loc, remote_accessible != 0)
        });
        errno_of("registerLocalMemory", r)
    })
}

/// Unregisters the region starting at `addr`: 0, or -3 when `addr` is not a region base (-1 for
/// a NULL engine). Thread-safe.
#[unsafe(no_mangle)]
pub extern "C" fn unregisterLocalMemory(engine: *mut c_void, addr: *mut c_void) -> c_int {
    ffi_boundary!(ERR_CONTEXT, {
        let r = handle(engine).and_then(|h| h.engine.unregister_memory(addr as u64));
        errno_of("unregisterLocalMemory", r)
    })
}

/// Registers `buffer_len` remote-accessible ranges, all or none: 0; -1 for a zero length or a
/// NULL argument; -7 when ranges overlap. `buffer_len == 0` is a no-op. Thread-safe.
#[unsafe(no_mangle)]
pub extern "C" fn registerLocalMemoryBatch(
    engine: *mut c_void,
    buffer_list: *mut buffer_entry,
    buffer_len: usize,
    location: *const c_char,
) -> c_int {
    ffi_boundary!(ERR_CONTEXT, {
        let r = handle(engine).and_then(|h| {
            // SAFETY: `location` is NULL or a NUL-terminated string (API contract).
            let loc = unsafe { string(location, "location") }?;
            // SAFETY: NULL (refused unless buffer_len == 0) or `buffer_len` entries per the C API.
            let list = unsafe { slice_arg(buffer_list.cast_const(), buffer_len, "buffer_list") }?;
            if list.is_empty() {
                return Ok(());
            }
            let ranges: Vec<(u64, u64)> = list
                .iter()
                .map(|b| (b.addr as u64, b.length as u64))
                .collect();
            h.engine.register_memory_batch(&ranges, loc)
        });
        errno_of("registerLocalMemoryBatch", r)
    })
}

/// Unregisters every address in `addr_list[..addr_len]`, then returns the first error (0 when
/// none; -1 for NULL arguments). Thread-safe.
#[unsafe(no_mangle)]
pub extern "C" fn unregisterLocalMemoryBatch(
    engine: *mut c_void,
    addr_list: *mut *mut c_void,
    addr_len: usize,
) -> c_int {
    ffi_boundary!(ERR_CONTEXT, {
        let r = handle(engine).and_then(|h| {
            // SAFETY: NULL (refused unless addr_len == 0) or `addr_len` pointers per the C API.
            let list = unsafe { slice_arg(addr_list.cast_const(), addr_len, "addr_list") }?;
            let addrs: Vec<u64> = list.iter().map(|&p| p as u64).collect();
            h.engine.unregister_memory_batch(&addrs)
        });
        errno_of("unregisterLocalMemoryBatch", r)
    })
}
