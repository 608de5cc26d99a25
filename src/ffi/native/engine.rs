//! Engine handles: start, stop, name, ports, probing a peer.

use super::*;

/// Starts an engine from `cfg` (NULL = defaults); `cfg` is not consumed. Binds the RPC and data
/// listeners and starts the engine's threads. Writes the handle to `*engine_out`.
#[unsafe(no_mangle)]
pub extern "C" fn tw_engine_new(
    cfg: *const tw_config,
    engine_out: *mut *mut tw_engine,
) -> tw_result {
    ffi_boundary!(TW_ERR_PANIC, {
        // SAFETY: `engine_out` is NULL or valid for one write (API contract).
        let slot = check!(unsafe { out(engine_out, "engine_out") });
        // NULL means the defaults.
        let cfg = crate::ffi::try_ref(cfg).map_or_else(|_| Config::default(), Config::clone);
        let engine = check!(Engine::new(cfg));
        *slot = Box::into_raw(Box::new(tw_engine { engine }));
        TW_OK
    })
}

/// Stops and frees an engine. NULL is ignored. Work in flight fails with `TW_ERR_SHUTDOWN`;
/// threads are joined before this returns. No other call may use the handle concurrently or
/// afterwards: freeing an engine while another thread is inside a call on it (a wait, a
/// submit, a status query) is the caller's error and undefined behaviour (the handle is freed
/// memory). What the library guarantees once this returns: every engine thread is joined,
/// every task has ended (FAILED when unfinished), no callback of this engine runs any more,
/// and peers can no longer reach this process's registered memory through it. Bindings that
/// let any thread close an engine must count calls in and out and wait for them first (the
/// Python package does: `tidewire.Engine.close`).
#[unsafe(no_mangle)]
pub extern "C" fn tw_engine_free(engine: *mut tw_engine) {
    ffi_boundary!((), {
        if !engine.is_null() {
            // SAFETY: non-NULL values come from `tw_engine_new` and are freed once.
            drop(unsafe { Box::from_raw(engine) });
        }
    })
}

/// Copies the engine's segment name (`host:rpc_port` in P2P mode, what peers pass to
/// `tw_segment_open`) into `buf[..len]`, NUL-terminated. `TW_ERR_BUFFER_TOO_SMALL` writes nothing.
#[unsafe(no_mangle)]
pub extern "C" fn tw_engine_segment_name(
    engine: *const tw_engine,
    buf: *mut c_char,
    len: usize,
) -> tw_result {
    ffi_boundary!(TW_ERR_PANIC, {
        let e = check!(engine_ref(engine));
        // SAFETY: `buf` is NULL or writable for `len` bytes (API contract).
        unsafe { string_out("segment name", e.name(), buf, len) }
    })
}

/// Writes the engine's RPC (handshake) port to `*port_out`.
#[unsafe(no_mangle)]
pub extern "C" fn tw_engine_rpc_port(engine: *const tw_engine, port_out: *mut u16) -> tw_result {
    ffi_boundary!(TW_ERR_PANIC, {
        let e = check!(engine_ref(engine));
        // SAFETY: `port_out` is NULL or valid for one write (API contract).
        *check!(unsafe { out(port_out, "port_out") }) = e.rpc_port();
        TW_OK
    })
}

/// Probes a peer's RPC port (`name` is a segment name); `TW_OK` when it answers.
#[unsafe(no_mangle)]
pub extern "C" fn tw_engine_probe(engine: *const tw_engine, name: *const c_char) -> tw_result {
    ffi_boundary!(TW_ERR_PANIC, {
        let e = check!(engine_ref(engine));
        // SAFETY: C string per the API contract.
        let n = check!(unsafe { str_arg(name, "name") });
        check!(e.probe(n));
        TW_OK
    })
}
