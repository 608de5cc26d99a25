//! The names and Mooncake numbers of result codes, across the code tables: the native codes
//! (`ffi/status.rs`), the Store's (`ffi/store/codes.rs`) and Mooncake's (`ffi/mooncake/codes.rs`).
//! These two functions are the only ones that look into every table, so they sit here, above
//! the tables, and the tables stay leaves.

use crate::error::ErrorKind;
use crate::ffi::status::{TW_ERR_PANIC, TW_OK, error_code_name, tw_result};
use std::ffi::c_char;

/// Static name of a result code (`"TW_OK"`, `"TW_ERR_TIMEOUT"`, ...), or of a Store code
/// (`"TW_STORE_OBJECT_NOT_FOUND"`: one code space; `TW_STORE_INTERNAL_ERROR` and
/// `TW_STORE_BUFFER_OVERFLOW` are named as the `TW_ERR_*` codes they equal); `"TW_ERR_UNKNOWN"`
/// for numbers this version does not define. Never NULL; the string lives forever.
#[unsafe(no_mangle)]
pub extern "C" fn tw_result_str(code: tw_result) -> *const c_char {
    let s: &'static str = match code {
        TW_OK => "TW_OK\0",
        TW_ERR_PANIC => "TW_ERR_PANIC\0",
        c => error_code_name(c)
            .or_else(|| crate::ffi::store::codes::store_code_name(c))
            .unwrap_or("TW_ERR_UNKNOWN\0"),
    };
    s.as_ptr().cast()
}

/// Mooncake's `error.h` number for a result code (`0` for `TW_OK`): the code Mooncake's C API
/// and Python package report for the same failure, from the one table both tidewire's Mooncake
/// C API and its Python package use (`TW_ERR_TIMEOUT` and `TW_ERR_SOCKET` are -102,
/// `TW_ERR_REJECTED` -3, ...). `-1` (`ERR_INVALID_ARGUMENT`) for numbers this version does not
/// define; `-202` (`ERR_CONTEXT`) for `TW_ERR_PANIC`. Thread-safe, no side effects.
#[unsafe(no_mangle)]
pub extern "C" fn tw_result_mooncake_code(code: tw_result) -> i32 {
    match code {
        TW_OK => 0,
        TW_ERR_PANIC => crate::ffi::mooncake::codes::codes(ErrorKind::Internal).1,
        c if c < 0 && c > -256 => ErrorKind::from_u8((-c) as u8)
            .map(|k| crate::ffi::mooncake::codes::codes(k).1)
            .unwrap_or(-1),
        _ => -1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ffi::status::code_of;
    use std::ffi::CStr;

    #[test]
    fn every_kind_has_a_distinct_named_code() {
        let mut seen = std::collections::HashSet::new();
        for k in ErrorKind::ALL {
            let c = code_of(k);
            assert!(c < 0 && seen.insert(c));
            // SAFETY: tw_result_str returns a static NUL-terminated string.
            let name = unsafe { CStr::from_ptr(tw_result_str(c)) }
                .to_str()
                .unwrap();
            assert!(
                name.starts_with("TW_ERR_") && name != "TW_ERR_UNKNOWN",
                "{k:?}"
            );
        }
    }
}
