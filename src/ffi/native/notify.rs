//! Notifications (`tw_notify_*`).

use super::*;

/// Sends a notification (`name`, `msg`) to the owner of `segment` over its RPC port (Mooncake
/// compatible). Blocks for one round trip.
#[unsafe(no_mangle)]
pub extern "C" fn tw_notify_send(
    engine: *const tw_engine,
    segment: i32,
    name: *const c_char,
    msg: *const c_char,
) -> tw_result {
    ffi_boundary!(TW_ERR_PANIC, {
        let e = check!(engine_ref(engine));
        // SAFETY: C strings per the API contract.
        let (n, m) = check!(unsafe { notify_args(name, msg) });
        check!(e.send_notify(segment, n, m));
        TW_OK
    })
}

/// Takes every notification received so far. Writes a newly allocated array to `*list_out` and
/// its length to `*count_out` (NULL and 0 when there is none). Free the array with
/// `tw_notifications_free`.
#[unsafe(no_mangle)]
pub extern "C" fn tw_notify_take(
    engine: *const tw_engine,
    list_out: *mut *mut tw_notification,
    count_out: *mut usize,
) -> tw_result {
    ffi_boundary!(TW_ERR_PANIC, {
        let e = check!(engine_ref(engine));
        if list_out.is_null() || count_out.is_null() {
            status::set_last_error("list_out or count_out is NULL".into());
            return TW_ERR_NULL_ARGUMENT;
        }
        let list: Vec<tw_notification> = e
            .take_notifications()
            .into_iter()
            .map(|n| tw_notification {
                name: to_c(n.name),
                msg: to_c(n.msg),
            })
            .collect();
        let count = list.len();
        let ptr = if count == 0 {
            std::ptr::null_mut()
        } else {
            Box::into_raw(list.into_boxed_slice()).cast::<tw_notification>()
        };
        // SAFETY: both checked non-NULL above; the caller passes writable pointers.
        unsafe {
            *list_out = ptr;
            *count_out = count;
        }
        TW_OK
    })
}

fn to_c(s: String) -> *mut c_char {
    CString::new(s.replace('\0', ""))
        .expect("NULs removed")
        .into_raw()
}

/// Frees an array from `tw_notify_take`. NULL is ignored.
#[unsafe(no_mangle)]
pub extern "C" fn tw_notifications_free(list: *mut tw_notification, count: usize) {
    ffi_boundary!((), {
        if list.is_null() {
            return;
        }
        // SAFETY: `list`/`count` come from `tw_notify_take` (a boxed slice of that length).
        let items = unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(list, count)) };
        for n in items.iter() {
            // SAFETY: both strings come from CString::into_raw in `to_c`.
            unsafe {
                drop(CString::from_raw(n.name));
                drop(CString::from_raw(n.msg));
            }
        }
    })
}
