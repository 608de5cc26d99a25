//! `tw_store_replica_clear` and the replica tasks (`tw_store_create_copy_task`,
//! `tw_store_create_move_task`, `tw_store_query_task`): Mooncake's `batch_replica_clear`,
//! `create_copy_task`, `create_move_task` and `query_task`.

use super::args::{arr, arr_mut, bad, key, store, store_keys};
use super::codes::{TW_STORE_INTERNAL_ERROR, TW_STORE_OK, to_c};
use super::tw_store;
use crate::ffi::ffi_boundary;
use crate::ffi::status::set_last_error;
use crate::store::StoreError;
use crate::store::proto::{TaskId, TaskInfo};
use std::ffi::c_char;

/// Bytes of [`tw_store_task_info::message`], its NUL included (a longer message is cut).
pub const TW_STORE_MAX_TASK_MESSAGE_LEN: usize = 1024;

/// A replica task's state (Mooncake's `QueryTaskResponse`), filled by `tw_store_query_task`.
#[repr(C)]
pub struct tw_store_task_info {
    /// The task's id (the two halves of Mooncake's UUID).
    pub id: [u64; 2],
    /// 0 copy, 1 move (Mooncake's `TaskType`).
    pub kind: i32,
    /// 0 pending, 1 processing, 2 failed, 3 success (Mooncake's `TaskStatus`).
    pub status: i32,
    /// Created, in milliseconds since the Unix epoch.
    pub created_ms: u64,
    /// Last changed, in milliseconds since the Unix epoch.
    pub updated_ms: u64,
    /// The client that runs it (its store client id, in the second half).
    pub assigned_client: [u64; 2],
    /// What happened (why it failed), NUL-terminated.
    pub message: [c_char; TW_STORE_MAX_TASK_MESSAGE_LEN],
}

/// The code of a failed call, its message kept for `tw_last_error_message`.
fn failed(e: StoreError) -> i32 {
    let c = to_c(e.code);
    set_last_error(e.message);
    c
}

/// A segment name argument: NULL is the empty name.
///
/// # Safety
/// `p` is NULL or a C string.
unsafe fn name<'a>(p: *const c_char, what: &str) -> Result<&'a str, i32> {
    if p.is_null() {
        return Ok("");
    }
    // SAFETY: non-NULL C string per the contract above.
    unsafe { crate::ffi::str_arg(p, what) }.map_err(|e| bad(e.to_string()))
}

/// Writes a task id.
///
/// # Safety
/// `out` is NULL or writable for two elements.
unsafe fn write_id(out: *mut u64, id: TaskId) -> i32 {
    // SAFETY: per the contract above.
    match unsafe { arr_mut(out, 2, "id_out") } {
        Ok(o) => {
            o.copy_from_slice(&[id.0, id.1]);
            TW_STORE_OK
        }
        Err(c) => c,
    }
}

/// Mooncake's `batch_replica_clear`: each of the `n` keys whose read lease has expired loses
/// its replicas on the segment `segment` (an object left with none is removed), or, with
/// `segment` NULL or empty, is removed whole when no write of it is in flight. `cleared[i]` is
/// set to 1 for each key cleared, 0 for the others (absent, leased, being written, nothing on
/// the segment, or an unusable key). Unlike Mooncake, keys written by any client are cleared:
/// the master does not record a complete object's writer.
///
/// Returns `TW_STORE_OK`, or a negative code (unusable arguments, the master unreachable)
/// without writing `cleared`. Thread-safe; no pointer is kept after the call.
///
/// # Safety
/// `s` is a live handle; `keys_in` and `key_lens` hold `n` keys as `TW_STORE_MAX_KEY_LEN`
/// describes; `segment` is NULL or a C string; `cleared` is writable for `n` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn tw_store_replica_clear(
    s: *const tw_store,
    keys_in: *const *const c_char,
    key_lens: *const usize,
    n: usize,
    segment: *const c_char,
    cleared: *mut u8,
) -> i32 {
    ffi_boundary!(TW_STORE_INTERNAL_ERROR, {
        // SAFETY: pointers as documented in this function's contract.
        let (c, ks) = tri!(unsafe { store_keys(s, keys_in, key_lens, n) });
        // SAFETY: as documented above.
        let seg = tri!(unsafe { name(segment, "segment") });
        // SAFETY: as documented above.
        let out = tri!(unsafe { arr_mut(cleared, n, "cleared") });
        let done = match c.replica_clear(&ks, seg) {
            Ok(d) => d,
            Err(e) => return failed(e),
        };
        // The master answers the keys it cleared in the order they were asked.
        let mut next = done.iter().peekable();
        for (o, k) in out.iter_mut().zip(&ks) {
            *o = u8::from(next.next_if(|d| d.as_str() == *k).is_some());
        }
        TW_STORE_OK
    })
}

/// Queues a task that copies the object `key_in` (`key_len` bytes; an empty or unusable key
/// is an absent one) to each of the `n_targets`
/// segments named in `targets` (C strings; a segment holding a replica already is skipped when
/// the task runs). The owner of one of its replicas runs it in the background; follow it with
/// `tw_store_query_task`. Writes the task's id to `id_out[0..2]` and returns `TW_STORE_OK`, or
/// a negative code: `TW_STORE_INVALID_PARAMS` (no target, a target not mounted, an unusable
/// argument), `TW_STORE_OBJECT_NOT_FOUND`, -1010 (a target takes no new replicas now), -1401
/// (too many tasks wait). Thread-safe; no pointer is kept after the call.
///
/// # Safety
/// `s` is a live handle; `key_in` is NULL or readable for `key_len` bytes; `targets` holds `n_targets`
/// C strings; `id_out` is writable for two elements.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn tw_store_create_copy_task(
    s: *const tw_store,
    key_in: *const c_char,
    key_len: usize,
    targets: *const *const c_char,
    n_targets: usize,
    id_out: *mut u64,
) -> i32 {
    ffi_boundary!(TW_STORE_INTERNAL_ERROR, {
        let c = tri!(store(s));
        // SAFETY: as documented above.
        let k = unsafe { key(key_in, Some(key_len)) }.unwrap_or("");
        // SAFETY: as documented above.
        let ptrs = tri!(unsafe { arr(targets, n_targets, "targets") });
        let mut names = Vec::with_capacity(ptrs.len());
        for &p in ptrs {
            // SAFETY: each a C string per the contract above.
            let t = unsafe { crate::ffi::str_arg(p, "target") }.map_err(|e| bad(e.to_string()));
            names.push(tri!(t));
        }
        match c.create_copy_task(k, &names) {
            // SAFETY: as documented above.
            Ok(id) => unsafe { write_id(id_out, id) },
            Err(e) => failed(e),
        }
    })
}

/// Queues a task that moves the object `key_in`'s (`key_len` bytes) replica on segment `source` to segment
/// `target`: the target replica is written and added before the source's leaves, so the
/// object always keeps a complete replica. The owner of `source` runs it in the background.
/// Writes the task's id to `id_out[0..2]` and returns `TW_STORE_OK`, or a negative code:
/// `TW_STORE_OBJECT_NOT_FOUND`, `TW_STORE_INVALID_PARAMS` (the same segment twice, a target not
/// mounted, no replica on `source`, an unusable argument), -1010, -1401. NULL names are empty.
/// Thread-safe; no pointer is kept after the call.
///
/// # Safety
/// `s` is a live handle; `key_in` is NULL or readable for `key_len` bytes; `source` and `target` are NULL
/// or C strings; `id_out` is writable for two elements.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn tw_store_create_move_task(
    s: *const tw_store,
    key_in: *const c_char,
    key_len: usize,
    source: *const c_char,
    target: *const c_char,
    id_out: *mut u64,
) -> i32 {
    ffi_boundary!(TW_STORE_INTERNAL_ERROR, {
        let c = tri!(store(s));
        // SAFETY: as documented above.
        let k = unsafe { key(key_in, Some(key_len)) }.unwrap_or("");
        // SAFETY: as documented above.
        let src = tri!(unsafe { name(source, "source") });
        // SAFETY: as documented above.
        let dst = tri!(unsafe { name(target, "target") });
        match c.create_move_task(k, src, dst) {
            // SAFETY: as documented above.
            Ok(id) => unsafe { write_id(id_out, id) },
            Err(e) => failed(e),
        }
    })
}

/// Fills `out` with the state of the task `id_hi`/`id_lo` (the two halves of its id) and
/// returns `TW_STORE_OK`, or returns a negative code without writing it: -1400 (no such task:
/// never created, or forgotten after 10,000 newer tasks finished), `TW_STORE_INVALID_PARAMS`
/// (`out` NULL). Thread-safe.
///
/// # Safety
/// `s` is a live handle; `out` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn tw_store_query_task(
    s: *const tw_store,
    id_hi: u64,
    id_lo: u64,
    out: *mut tw_store_task_info,
) -> i32 {
    ffi_boundary!(TW_STORE_INTERNAL_ERROR, {
        let c = tri!(store(s));
        // SAFETY: NULL or writable per the contract above.
        let Some(o) = (unsafe { out.as_mut() }) else {
            return bad("out is NULL");
        };
        match c.query_task((id_hi, id_lo)) {
            Ok(info) => {
                fill(o, &info);
                TW_STORE_OK
            }
            Err(e) => failed(e),
        }
    })
}

fn fill(o: &mut tw_store_task_info, info: &TaskInfo) {
    o.id = [info.id.0, info.id.1];
    o.kind = i32::from(info.kind);
    o.status = i32::from(info.status);
    o.created_ms = info.created_ms;
    o.updated_ms = info.updated_ms;
    o.assigned_client = [0, info.client];
    let mut msg = info.message.as_bytes();
    if msg.len() >= TW_STORE_MAX_TASK_MESSAGE_LEN {
        let mut cut = TW_STORE_MAX_TASK_MESSAGE_LEN - 1;
        while !info.message.is_char_boundary(cut) {
            cut -= 1;
        }
        msg = &msg[..cut];
    }
    for (d, b) in o.message.iter_mut().zip(msg) {
        *d = *b as c_char;
    }
    o.message[msg.len()] = 0;
}
