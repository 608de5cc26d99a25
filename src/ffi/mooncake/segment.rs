//! Segments: open, close, remove, refresh.

use super::*;

fn open(h: &MooncakeEngine, name: *const c_char) -> Result<SegmentId> {
    // SAFETY: `name` is NULL or a NUL-terminated string (API contract).
    let name = unsafe { string(name, "segment_name") }?.trim_start_matches('/');
    if !name.is_empty() && name != h.engine.name() && !h.tcp_installed() {
        return Err(h.no_transport());
    }
    let id = h.engine.open_segment(name)?;
    if id != LOCAL_SEGMENT {
        h.opened().insert(name.to_string(), id);
    }
    Ok(id)
}

/// Opens segment `segment_name` (leading `/` ignored) and returns its id: 0 for this engine's
/// own name, remote ids from 1, cached after the first open. Returns -1 on any failure (NULL or
/// empty name, NULL engine, unreachable peer, TCP not installed). Thread-safe.
#[unsafe(no_mangle)]
pub extern "C" fn openSegment(engine: *mut c_void, segment_name: *const c_char) -> i32 {
    ffi_boundary!(-1, {
        handle(engine)
            .and_then(|h| open(h, segment_name))
            .unwrap_or_else(|e| {
                record("openSegment", &e);
                -1
            })
    })
}

/// Like `openSegment`, but re-fetches the descriptor when the name is already cached. Returns the
/// id, or -1 on failure (including a failed re-fetch). Thread-safe.
#[unsafe(no_mangle)]
pub extern "C" fn openSegmentNoCache(engine: *mut c_void, segment_name: *const c_char) -> i32 {
    ffi_boundary!(-1, {
        let r = handle(engine).and_then(|h| {
            // SAFETY: `segment_name` is NULL or a NUL-terminated string (API contract).
            let name = unsafe { string(segment_name, "segment_name") }?.trim_start_matches('/');
            let cached = h.opened().get(name).copied();
            match cached {
                Some(id) => h.engine.refresh_segment(id).map(|_| id),
                None => open(h, segment_name),
            }
        });
        r.unwrap_or_else(|e| {
            record("openSegmentNoCache", &e);
            -1
        })
    })
}

/// No-op, as in Mooncake (the cached descriptor stays): 0, or -1 for a NULL engine. Thread-safe.
#[unsafe(no_mangle)]
pub extern "C" fn closeSegment(engine: *mut c_void, segment_id: i32) -> c_int {
    ffi_boundary!(ERR_CONTEXT, {
        let _ = segment_id;
        errno_of("closeSegment", handle(engine).map(|_| ()))
    })
}

/// No EFA transport in this build: 0, or -1 for a NULL engine or name. Thread-safe.
#[unsafe(no_mangle)]
pub extern "C" fn warmupEfaSegment(engine: *mut c_void, segment_name: *const c_char) -> c_int {
    ffi_boundary!(ERR_CONTEXT, {
        errno_of(
            "warmupEfaSegment",
            handle(engine).and_then(|_| {
                // SAFETY: `segment_name` is NULL or a NUL-terminated string (API contract).
                unsafe { string(segment_name, "segment_name") }.map(|_| ())
            }),
        )
    })
}

/// Forgets the cached descriptor of `segment_name` (leading `/` ignored); the next `openSegment`
/// fetches it again under a new id. Transfers already submitted finish normally. Returns 0 (also
/// for a name that is not cached), -1 for a NULL engine or a NULL/empty name. Thread-safe.
#[unsafe(no_mangle)]
pub extern "C" fn removeLocalSegment(engine: *mut c_void, segment_name: *const c_char) -> c_int {
    ffi_boundary!(ERR_CONTEXT, {
        let r = handle(engine).and_then(|h| {
            // SAFETY: `segment_name` is NULL or a NUL-terminated string (API contract).
            let name = unsafe { string(segment_name, "segment_name") }?.trim_start_matches('/');
            if name.is_empty() {
                return Err(err(ErrorKind::InvalidArgument, "empty segment name"));
            }
            let id = h.opened().remove(name);
            if let Some(id) = id {
                // Already gone from the engine's table is fine: the goal is "not cached".
                if let Err(e) = h.engine.close_segment(id) {
                    tw_log!(Level::Debug, "removeLocalSegment({name}): {e}");
                }
            }
            Ok(())
        });
        errno_of("removeLocalSegment", r)
    })
}

/// Re-fetches every cached remote descriptor. Failures are logged; returns 0, or -1 for a NULL
/// engine. Thread-safe.
#[unsafe(no_mangle)]
pub extern "C" fn syncSegmentCache(engine: *mut c_void) -> c_int {
    ffi_boundary!(ERR_CONTEXT, {
        match handle(engine) {
            Ok(h) => {
                if let Err(e) = h.engine.refresh_all_segments() {
                    record("syncSegmentCache", &e);
                }
                0
            }
            Err(e) => fail_errno("syncSegmentCache", &e),
        }
    })
}
