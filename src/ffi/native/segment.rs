//! Segments (`tw_segment_*`): open, close, refresh, descriptor.

use super::*;

/// Opens the segment `name` (a peer's segment name; the engine's own name gives
/// `TW_LOCAL_SEGMENT`), fetching its descriptor within the connect timeout, and writes its id
/// (≥ 1 for peers) to `*segment_out`. Opening a name again returns the cached id.
#[unsafe(no_mangle)]
pub extern "C" fn tw_segment_open(
    engine: *const tw_engine,
    name: *const c_char,
    segment_out: *mut i32,
) -> tw_result {
    ffi_boundary!(TW_ERR_PANIC, {
        let e = check!(engine_ref(engine));
        // SAFETY: C string per the API contract.
        let n = check!(unsafe { str_arg(name, "name") });
        // SAFETY: `segment_out` is NULL or valid for one write (API contract).
        let slot = check!(unsafe { out(segment_out, "segment_out") });
        *slot = check!(e.open_segment(n));
        TW_OK
    })
}

/// Forgets a segment id (`TW_ERR_UNKNOWN_SEGMENT` if it is not open).
#[unsafe(no_mangle)]
pub extern "C" fn tw_segment_close(engine: *const tw_engine, segment: i32) -> tw_result {
    ffi_boundary!(TW_ERR_PANIC, {
        check!(check!(engine_ref(engine)).close_segment(segment));
        TW_OK
    })
}

/// Re-fetches a segment's descriptor (after the peer registered more memory).
#[unsafe(no_mangle)]
pub extern "C" fn tw_segment_refresh(engine: *const tw_engine, segment: i32) -> tw_result {
    ffi_boundary!(TW_ERR_PANIC, {
        check!(check!(engine_ref(engine)).refresh_segment(segment));
        TW_OK
    })
}

/// Copies the cached descriptor of an open segment (`TW_LOCAL_SEGMENT` = this engine) as
/// Mooncake-compatible JSON into `buf[..len]`, NUL-terminated, and writes the size needed
/// (including the NUL) to `*needed_out` (may be NULL). `TW_ERR_BUFFER_TOO_SMALL` writes only
/// `*needed_out`, so a caller can retry with a larger buffer.
#[unsafe(no_mangle)]
pub extern "C" fn tw_segment_descriptor(
    engine: *const tw_engine,
    segment: i32,
    buf: *mut c_char,
    len: usize,
    needed_out: *mut usize,
) -> tw_result {
    ffi_boundary!(TW_ERR_PANIC, {
        let e = check!(engine_ref(engine));
        let json = check!(e.segment_descriptor(segment)).encode();
        // SAFETY: NULL or a writable size_t per the API contract.
        if let Some(n) = unsafe { needed_out.as_mut() } {
            *n = json.len() + 1;
        }
        if buf.is_null() {
            status::set_last_error(format!("descriptor needs {} bytes", json.len() + 1));
            return TW_ERR_BUFFER_TOO_SMALL;
        }
        // SAFETY: `buf` is NULL or writable for `len` bytes (API contract).
        unsafe { string_out("descriptor", &json, buf, len) }
    })
}
