//! `tw_store_*` of the disk tier: dropping a client's tier (Mooncake's
//! `unmount_local_disk_segment`) and the count of objects read from disk tiers. A client gets its
//! tier at setup (`tw_store_setup_disk`).

use super::args::bad;
use super::codes::{self, TW_STORE_INTERNAL_ERROR, TW_STORE_OK};
use super::tw_store;
use crate::ffi::ffi_boundary;
use crate::ffi::status::set_last_error;

/// Mooncake's `unmount_local_disk_segment`: after `grace_period_seconds`, drops this client's
/// disk tier (the master forgets its replicas, the record files are deleted). 0, or
/// `TW_STORE_SEGMENT_NOT_FOUND` when the client has no tier (`tw_last_error` says why).
///
/// # Safety
/// `s` is NULL (`TW_STORE_INVALID_PARAMS`) or a live handle. Thread-safe.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn tw_store_unmount_local_disk(
    s: *const tw_store,
    grace_period_seconds: u32,
) -> i32 {
    ffi_boundary!(TW_STORE_INTERNAL_ERROR, {
        let c = match crate::ffi::try_ref(s) {
            Ok(c) => c,
            Err(_) => return bad("store handle is NULL"),
        };
        match c.unmount_disk(std::time::Duration::from_secs(u64::from(
            grace_period_seconds,
        ))) {
            Ok(()) => TW_STORE_OK,
            Err(e) => {
                set_last_error(e.message.clone());
                codes::to_c(e.code)
            }
        }
    })
}

/// Objects this client has read from disk tiers (Mooncake's `get_offload_rpc_read_count`); 0
/// for NULL.
///
/// # Safety
/// `s` is NULL or a live handle. Thread-safe.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn tw_store_disk_read_count(s: *const tw_store) -> u64 {
    ffi_boundary!(0, {
        match crate::ffi::try_ref(s) {
            Ok(c) => c.disk_read_count(),
            Err(_) => 0,
        }
    })
}
