//! Registered memory (`tw_memory_*`).

use super::*;

/// Registers `[addr, addr+length)` for transfers. `location` is `"cpu:N"`, `"cuda:N"` or `"*"`
/// (NULL = `"*"`). Peers can never read or write a region registered with
/// `remote_accessible == false`. Re-registering the exact same range is counted (unregister it
/// as many times); a partial overlap is `TW_ERR_ADDRESS_OVERLAPPED`. The memory must stay valid
/// until unregistered.
#[unsafe(no_mangle)]
pub extern "C" fn tw_memory_register(
    engine: *const tw_engine,
    addr: *mut c_void,
    length: usize,
    location: *const c_char,
    remote_accessible: bool,
) -> tw_result {
    ffi_boundary!(TW_ERR_PANIC, {
        let e = check!(engine_ref(engine));
        if addr.is_null() {
            return status::fail(&null("addr"));
        }
        let loc = if location.is_null() {
            "*"
        } else {
            // SAFETY: a NUL-terminated C string per the API contract.
            check!(unsafe { str_arg(location, "location") })
        };
        check!(e.register_memory(addr as u64, length as u64, loc, remote_accessible));
        TW_OK
    })
}

/// Drops one registration of the region starting exactly at `addr`. When the last one goes,
/// the call returns only once no peer request touches the region any more (TCP requests in
/// flight are cut off, same-host and in-process copies are waited for, about 2 s at most) and
/// none can start: the memory may then be freed.
#[unsafe(no_mangle)]
pub extern "C" fn tw_memory_unregister(engine: *const tw_engine, addr: *mut c_void) -> tw_result {
    ffi_boundary!(TW_ERR_PANIC, {
        let e = check!(engine_ref(engine));
        if addr.is_null() {
            return status::fail(&null("addr"));
        }
        check!(e.unregister_memory(addr as u64));
        TW_OK
    })
}

/// Registers `count` buffers, all or none, remote-accessible, at `location` (NULL = `"*"`).
#[unsafe(no_mangle)]
pub extern "C" fn tw_memory_register_batch(
    engine: *const tw_engine,
    buffers: *const tw_buffer,
    count: usize,
    location: *const c_char,
) -> tw_result {
    ffi_boundary!(TW_ERR_PANIC, {
        let e = check!(engine_ref(engine));
        // SAFETY: `count` elements per the API contract.
        let bufs = check!(unsafe { slice_arg(buffers, count, "buffers") });
        let loc = if location.is_null() {
            "*"
        } else {
            // SAFETY: a NUL-terminated C string per the API contract.
            check!(unsafe { str_arg(location, "location") })
        };
        let ranges: Vec<(u64, u64)> = bufs
            .iter()
            .map(|b| (b.addr as u64, b.length as u64))
            .collect();
        check!(e.register_memory_batch(&ranges, loc));
        TW_OK
    })
}

/// Unregisters `count` base addresses; tries all and returns the first error.
#[unsafe(no_mangle)]
pub extern "C" fn tw_memory_unregister_batch(
    engine: *const tw_engine,
    addrs: *const *mut c_void,
    count: usize,
) -> tw_result {
    ffi_boundary!(TW_ERR_PANIC, {
        let e = check!(engine_ref(engine));
        // SAFETY: `count` elements per the API contract.
        let list = check!(unsafe { slice_arg(addrs, count, "addrs") });
        let v: Vec<u64> = list.iter().map(|a| *a as u64).collect();
        check!(e.unregister_memory_batch(&v));
        TW_OK
    })
}

/// Copies the location of the registered region containing `addr` (`"cuda:N"` or `"cpu:N"`;
/// `"*"` registrations are resolved at registration) into `buf` (`len` bytes, NUL included).
/// `TW_ERR_ADDRESS_NOT_REGISTERED` when no region contains it; `TW_ERR_BUFFER_TOO_SMALL` when
/// it does not fit (nothing written).
#[unsafe(no_mangle)]
pub extern "C" fn tw_memory_location(
    engine: *const tw_engine,
    addr: *const c_void,
    buf: *mut c_char,
    len: usize,
) -> tw_result {
    ffi_boundary!(TW_ERR_PANIC, {
        let e = check!(engine_ref(engine));
        if buf.is_null() {
            return status::fail(&null("buf"));
        }
        let loc = check!(e.memory_location(addr as u64));
        // SAFETY: `buf` is writable for `len` bytes (API contract).
        unsafe { string_out(&format!("location {loc:?}"), &loc, buf, len) }
    })
}

/// Allocates `length` zeroed bytes of host memory shared with same-host peers (memfd-backed),
/// registered remote-accessible as `"cpu:0"` and published; the address goes to `*addr_out`.
/// Verified tidewire peers on this host map it and copy with `memcpy` (no socket); other peers
/// reach it like any registered memory. Release it with [`tw_memory_free_shared`] (not
/// `tw_memory_unregister` alone, which closes it to peers but keeps the memory); the engine
/// releases what is left when destroyed. `length == 0` is `TW_ERR_INVALID_ARGUMENT`; NULL
/// `engine`/`addr_out` is `TW_ERR_NULL_ARGUMENT`. `*addr_out` is written only on `TW_OK`.
/// Thread-safe.
#[unsafe(no_mangle)]
pub extern "C" fn tw_memory_alloc_shared(
    engine: *const tw_engine,
    length: usize,
    addr_out: *mut *mut c_void,
) -> tw_result {
    ffi_boundary!(TW_ERR_PANIC, {
        let e = check!(engine_ref(engine));
        // SAFETY: NULL or writable per the API contract.
        let out = check!(unsafe { out(addr_out, "addr_out") });
        let addr = check!(e.alloc_shared(length as u64));
        *out = addr as *mut c_void;
        TW_OK
    })
}

/// Releases a buffer from [`tw_memory_alloc_shared`]: every registration of it is dropped (when
/// this returns no peer byte lands in it; a same-host peer stopped in the middle of a copy is
/// waited for at most 2 s, after which its copy can no longer reach this memory) and the memory
/// is unmapped. An address that is not a live shared buffer of this engine (double free
/// included) is `TW_ERR_INVALID_ARGUMENT`. Thread-safe; the caller must not touch the memory
/// afterwards.
#[unsafe(no_mangle)]
pub extern "C" fn tw_memory_free_shared(engine: *const tw_engine, addr: *mut c_void) -> tw_result {
    ffi_boundary!(TW_ERR_PANIC, {
        let e = check!(engine_ref(engine));
        if addr.is_null() {
            return status::fail(&null("addr"));
        }
        check!(e.free_shared(addr as u64));
        TW_OK
    })
}
