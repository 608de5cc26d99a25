//! The Store's codes in the C API: one code space with `tw_result`.
//!
//! The store core speaks Mooncake Store's numbers (`store::proto::code`). Two of them are also
//! `tw_result` numbers with another meaning (Mooncake's `INTERNAL_ERROR` -1 is
//! `TW_ERR_INVALID_ARGUMENT`, `BUFFER_OVERFLOW` -10 is `TW_ERR_REJECTED`), so the C API gives
//! those two the number of the `tw_result` code that means the same thing (`TW_ERR_INTERNAL`,
//! `TW_ERR_BUFFER_TOO_SMALL`); every other store code keeps Mooncake's number, which no
//! `tw_result` uses (they are all below -100). So a negative number from any `tw_*` function
//! means one thing. Every code from the store core that a `tw_store_*` function returns or
//! writes goes through [`to_c`] (codes the C layer makes itself are `TW_STORE_*` already). The
//! Python package turns the two back into Mooncake's numbers, which its callers expect.

use crate::ffi::status::{TW_ERR_BUFFER_TOO_SMALL, TW_ERR_INTERNAL};
use crate::store::proto::code;

// The literals are for cbindgen; the assertions below check them against `proto` and the
// native codes when the crate compiles.

/// Success.
pub const TW_STORE_OK: i32 = 0;
/// Internal error: the same number and meaning as `TW_ERR_INTERNAL` (Mooncake's -1).
pub const TW_STORE_INTERNAL_ERROR: i32 = -17;
/// A value or name does not fit the caller's buffer: the same number and meaning as
/// `TW_ERR_BUFFER_TOO_SMALL` (Mooncake's `BUFFER_OVERFLOW`, -10).
pub const TW_STORE_BUFFER_OVERFLOW: i32 = -15;
/// Segment not found.
pub const TW_STORE_SEGMENT_NOT_FOUND: i32 = -101;
/// No space left in any segment.
pub const TW_STORE_NO_AVAILABLE_HANDLE: i32 = -200;
/// Invalid parameters (bad key, pointer or size; destination too small).
pub const TW_STORE_INVALID_PARAMS: i32 = -600;
/// The object is being written.
pub const TW_STORE_REPLICA_IS_NOT_READY: i32 = -703;
/// No such object.
pub const TW_STORE_OBJECT_NOT_FOUND: i32 = -704;
/// Remove refused: a read lease is active.
pub const TW_STORE_OBJECT_HAS_LEASE: i32 = -706;
/// The lease ran out before the read finished.
pub const TW_STORE_LEASE_EXPIRED: i32 = -707;
/// A data transfer failed.
pub const TW_STORE_TRANSFER_FAIL: i32 = -800;
/// The master is unreachable.
pub const TW_STORE_RPC_FAIL: i32 = -900;
/// The master did not answer in time.
pub const TW_STORE_RPC_TIMEOUT: i32 = -901;
/// The operation needs a mode this deployment is not in (a disk tier on a master without one).
pub const TW_STORE_UNAVAILABLE_IN_CURRENT_MODE: i32 = -1300;

/// Every `TW_STORE_*` code with its name and Mooncake's number for it.
const TABLE: [(i32, &str, i32); 14] = [
    (TW_STORE_OK, "TW_STORE_OK\0", code::OK),
    (
        TW_STORE_INTERNAL_ERROR,
        "TW_STORE_INTERNAL_ERROR\0",
        code::INTERNAL_ERROR,
    ),
    (
        TW_STORE_BUFFER_OVERFLOW,
        "TW_STORE_BUFFER_OVERFLOW\0",
        code::BUFFER_OVERFLOW,
    ),
    (
        TW_STORE_SEGMENT_NOT_FOUND,
        "TW_STORE_SEGMENT_NOT_FOUND\0",
        code::SEGMENT_NOT_FOUND,
    ),
    (
        TW_STORE_NO_AVAILABLE_HANDLE,
        "TW_STORE_NO_AVAILABLE_HANDLE\0",
        code::NO_AVAILABLE_HANDLE,
    ),
    (
        TW_STORE_INVALID_PARAMS,
        "TW_STORE_INVALID_PARAMS\0",
        code::INVALID_PARAMS,
    ),
    (
        TW_STORE_REPLICA_IS_NOT_READY,
        "TW_STORE_REPLICA_IS_NOT_READY\0",
        code::REPLICA_IS_NOT_READY,
    ),
    (
        TW_STORE_OBJECT_NOT_FOUND,
        "TW_STORE_OBJECT_NOT_FOUND\0",
        code::OBJECT_NOT_FOUND,
    ),
    (
        TW_STORE_OBJECT_HAS_LEASE,
        "TW_STORE_OBJECT_HAS_LEASE\0",
        code::OBJECT_HAS_LEASE,
    ),
    (
        TW_STORE_LEASE_EXPIRED,
        "TW_STORE_LEASE_EXPIRED\0",
        code::LEASE_EXPIRED,
    ),
    (
        TW_STORE_TRANSFER_FAIL,
        "TW_STORE_TRANSFER_FAIL\0",
        code::TRANSFER_FAIL,
    ),
    (TW_STORE_RPC_FAIL, "TW_STORE_RPC_FAIL\0", code::RPC_FAIL),
    (
        TW_STORE_RPC_TIMEOUT,
        "TW_STORE_RPC_TIMEOUT\0",
        code::RPC_TIMEOUT,
    ),
    (
        TW_STORE_UNAVAILABLE_IN_CURRENT_MODE,
        "TW_STORE_UNAVAILABLE_IN_CURRENT_MODE\0",
        code::UNAVAILABLE_IN_CURRENT_MODE,
    ),
];

const _: () = {
    assert!(TW_STORE_INTERNAL_ERROR == TW_ERR_INTERNAL);
    assert!(TW_STORE_BUFFER_OVERFLOW == TW_ERR_BUFFER_TOO_SMALL);
    let mut i = 0;
    while i < TABLE.len() {
        let (c, _, mooncake) = TABLE[i];
        assert!(
            to_c(mooncake) == c,
            "a TW_STORE_* literal differs from proto::code"
        );
        i += 1;
    }
};

/// The C API's number for a store code (Mooncake's number, see the module documentation).
pub(crate) const fn to_c(mooncake: i32) -> i32 {
    match mooncake {
        code::INTERNAL_ERROR => TW_STORE_INTERNAL_ERROR,
        code::BUFFER_OVERFLOW => TW_STORE_BUFFER_OVERFLOW,
        c => c,
    }
}

/// A per-key result (a code, or a size or count when not negative) in the C API's numbers.
pub(super) trait CResult: Copy {
    /// `self` with its code, if it is one, in the C API's numbers.
    fn to_c(self) -> Self;
}

impl CResult for i32 {
    fn to_c(self) -> i32 {
        to_c(self)
    }
}

impl CResult for i64 {
    fn to_c(self) -> i64 {
        match i32::try_from(self) {
            Ok(c) => i64::from(to_c(c)),
            Err(_) => self,
        }
    }
}

/// Copies per-key results from the store core into a caller's array, codes in the C API's
/// numbers.
pub(super) fn write_results<T: CResult>(out: &mut [T], results: &[T]) {
    for (o, r) in out.iter_mut().zip(results) {
        *o = r.to_c();
    }
}

/// NUL-terminated name of a store code that is not a `tw_result` code (`"TW_STORE_OBJECT_NOT_FOUND\0"`),
/// for `tw_result_str`; `None` for any other number.
pub(crate) fn store_code_name(c: i32) -> Option<&'static str> {
    TABLE
        .iter()
        .find(|(v, _, _)| *v == c && c < -100)
        .map(|(_, name, _)| *name)
}

/// Mooncake's number for a code of the C API: the inverse of [`to_c`] (tests).
#[cfg(test)]
pub(crate) fn mooncake_code(c: i32) -> i32 {
    match c {
        TW_STORE_INTERNAL_ERROR => code::INTERNAL_ERROR,
        TW_STORE_BUFFER_OVERFLOW => code::BUFFER_OVERFLOW,
        c => c,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorKind;
    use crate::ffi::status::code_of;

    /// Mooncake's numbers in `store::proto::code`, read from its source, so a code added there
    /// is checked too.
    fn proto_codes() -> Vec<(String, i32)> {
        let found: Vec<(String, i32)> = include_str!("../../store/proto/code.rs")
            .lines()
            .filter_map(|l| {
                let l = l.trim().strip_prefix("pub const ")?;
                let (name, rest) = l.split_once(": i32 = ")?;
                Some((name.to_string(), rest.trim_end_matches(';').parse().ok()?))
            })
            .collect();
        assert!(found.len() >= TABLE.len(), "{found:?}");
        found
    }

    #[test]
    fn one_code_space() {
        let native: Vec<i32> = ErrorKind::ALL.iter().map(|k| code_of(*k)).collect();
        for (name, mooncake) in proto_codes() {
            let c = to_c(mooncake);
            assert_eq!(mooncake_code(c), mooncake, "{name}");
            if c == 0 {
                continue;
            }
            // Either a tw_result code of the same meaning, or a number no tw_result uses.
            let same_meaning = [TW_ERR_INTERNAL, TW_ERR_BUFFER_TOO_SMALL].contains(&c);
            assert!(
                same_meaning || (!native.contains(&c) && c < -100),
                "{name} ({mooncake}) reaches C as {c}, a number tw_result uses for another meaning"
            );
        }
    }

    #[test]
    fn results_keep_sizes_and_map_codes() {
        let mut out = [0i64; 4];
        write_results(&mut out, &[5000, -1, -704, i64::MAX]);
        assert_eq!(
            out,
            [5000, i64::from(TW_STORE_INTERNAL_ERROR), -704, i64::MAX]
        );
        let mut out = [0i32; 3];
        write_results(&mut out, &[1, -10, 0]);
        assert_eq!(out, [1, TW_STORE_BUFFER_OVERFLOW, 0]);
        assert_eq!(store_code_name(-704), Some("TW_STORE_OBJECT_NOT_FOUND\0"));
        assert_eq!(store_code_name(TW_STORE_INTERNAL_ERROR), None);
    }
}
