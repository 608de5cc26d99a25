//! Notifications: take, free, send.

use super::*;

/// Takes every notification received so far. Returns a `malloc`ed array of `*size` entries with
/// `malloc`ed strings, owned by the caller (release with `freeNotifsMsgBuf`), or NULL with
/// `*size = 0` when there is none, for a NULL engine, or when memory runs out. NULL `size` → NULL.
/// Thread-safe.
#[unsafe(no_mangle)]
pub extern "C" fn getNotifsFromEngine(engine: *mut c_void, size: *mut c_int) -> *mut notify_msg {
    ffi_boundary!(std::ptr::null_mut(), {
        // SAFETY: `size` is NULL or valid for one write (API contract).
        let size = match unsafe { out(size, "size") } {
            Ok(s) => s,
            Err(e) => {
                record("getNotifsFromEngine", &e);
                return std::ptr::null_mut();
            }
        };
        *size = 0;
        let h = match handle(engine) {
            Ok(h) => h,
            Err(e) => {
                record("getNotifsFromEngine", &e);
                return std::ptr::null_mut();
            }
        };
        let mut list = h.engine.take_notifications();
        list.truncate(c_int::MAX as usize);
        if list.is_empty() {
            return std::ptr::null_mut();
        }
        // SAFETY: plain allocation of `len` entries; checked for NULL below.
        let arr =
            unsafe { libc::malloc(list.len() * size_of::<notify_msg>()) }.cast::<notify_msg>();
        if arr.is_null() {
            record(
                "getNotifsFromEngine",
                &err(
                    ErrorKind::Internal,
                    format!("out of memory: {} notifications dropped", list.len()),
                ),
            );
            return std::ptr::null_mut();
        }
        for (i, n) in list.iter().enumerate() {
            let entry = notify_msg {
                name: malloc_str(&n.name),
                msg: malloc_str(&n.msg),
            };
            // SAFETY: `arr` holds `list.len()` entries and i < list.len().
            unsafe { arr.add(i).write(entry) };
            if entry.name.is_null() || entry.msg.is_null() {
                free_notifs(arr, i + 1);
                record(
                    "getNotifsFromEngine",
                    &err(
                        ErrorKind::Internal,
                        format!("out of memory: {} notifications dropped", list.len()),
                    ),
                );
                return std::ptr::null_mut();
            }
        }
        *size = list.len() as c_int;
        arr
    })
}

/// Frees `n` entries of an array from `getNotifsFromEngine`, then the array.
fn free_notifs(arr: *mut notify_msg, n: usize) {
    for i in 0..n {
        // SAFETY: `arr` came from `getNotifsFromEngine` with at least `n` initialised entries.
        let e = unsafe { arr.add(i).read() };
        // SAFETY: the strings were allocated with malloc (or are NULL, which free accepts).
        unsafe {
            libc::free(e.name.cast());
            libc::free(e.msg.cast());
        }
    }
    // SAFETY: the array was allocated with malloc.
    unsafe { libc::free(arr.cast()) };
}

/// Frees an array returned by `getNotifsFromEngine` together with its strings; `size` must be
/// the count it reported. NULL `msg` is fine. Returns 0, or -1 (freeing nothing) for a negative
/// `size`. Not for arrays from any other source.
#[unsafe(no_mangle)]
pub extern "C" fn freeNotifsMsgBuf(msg: *mut notify_msg, size: c_int) -> c_int {
    ffi_boundary!(ERR_CONTEXT, {
        if msg.is_null() {
            return 0;
        }
        let Ok(n) = usize::try_from(size) else {
            return fail_errno(
                "freeNotifsMsgBuf",
                &err(
                    ErrorKind::InvalidArgument,
                    format!("size {size} is negative"),
                ),
            );
        };
        free_notifs(msg, n);
        0
    })
}

/// Sends `notify_msg` to the owner of segment `target_id` now (0 = this engine's own queue).
/// Returns 0; -200 for an unknown id or a rejected reply; -102 and similar for socket errors; -1
/// for NULL arguments. Strings are copied. Thread-safe.
#[unsafe(no_mangle)]
pub extern "C" fn genNotifyInEngine(
    engine: *mut c_void,
    target_id: u64,
    notify_msg: notify_msg,
) -> c_int {
    ffi_boundary!(ERR_CONTEXT, {
        let r = handle(engine).and_then(|h| {
            // SAFETY: `notify_msg.name` is NULL or a NUL-terminated string (API contract).
            let name = unsafe { string(notify_msg.name, "notify_msg.name") }?;
            // SAFETY: `notify_msg.msg` is NULL or a NUL-terminated string (API contract).
            let msg = unsafe { string(notify_msg.msg, "notify_msg.msg") }?;
            let id = SegmentId::try_from(target_id).map_err(|_| {
                err(
                    ErrorKind::UnknownSegment,
                    format!("segment {target_id} is not open"),
                )
            })?;
            h.engine.send_notify(id, name, msg)
        });
        errno_of("genNotifyInEngine", r)
    })
}
