//! Batches: allocate, submit (with or without a notification), status, free.

use super::*;

/// Allocates a batch holding `batch_size` requests over all its submits. Returns a validated id
/// (free it with `freeBatchID`), or `INVALID_BATCH` for a NULL engine or a size over 2^24.
/// Thread-safe.
#[unsafe(no_mangle)]
pub extern "C" fn allocateBatchID(engine: *mut c_void, batch_size: usize) -> u64 {
    ffi_boundary!(INVALID_BATCH, {
        handle(engine)
            .and_then(|h| h.engine.alloc_batch(batch_size))
            .unwrap_or_else(|e| {
                record("allocateBatchID", &e);
                INVALID_BATCH
            })
    })
}

impl AsRequest for transfer_request {
    #[inline]
    fn to_request(&self, index: usize) -> Result<Request> {
        let op = Opcode::from_i32(self.opcode).ok_or_else(|| {
            err(
                ErrorKind::InvalidArgument,
                format!(
                    "request {index}: opcode {} is not OPCODE_READ/WRITE",
                    self.opcode
                ),
            )
        })?;
        Ok(Request {
            op,
            local: self.source as u64,
            segment: self.target_id,
            remote: self.target_offset,
            len: self.length,
        })
    }
}

/// The C requests, read in place by the submit; checks that a transport is installed (after
/// the batch id, so a bad id is reported first).
fn requests<'a>(
    h: &MooncakeEngine,
    batch_id: u64,
    entries: *mut transfer_request,
    count: usize,
) -> Result<&'a [transfer_request]> {
    // SAFETY: NULL (refused unless count == 0) or `count` requests per the C API; only read
    // during this call.
    let entries = unsafe { slice_arg(entries.cast_const(), count, "entries") }?;
    if !h.tcp_installed() {
        h.engine.batch_len(batch_id)?;
        return Err(h.no_transport());
    }
    Ok(entries)
}

/// Submits `count` requests to a batch; all are validated before any starts. Returns a `Status`
/// code: 0; 1 for a bad or freed batch id, NULL entries, a bad opcode or an unknown `target_id`;
/// 2 when the batch would exceed its size; 3 for an unregistered local range; 8 when TCP is not
/// installed or the target speaks another transport. A remote range the peer refuses fails later
/// (`STATUS_FAILED`). `entries` is only read during the call. Thread-safe.
#[unsafe(no_mangle)]
pub extern "C" fn submitTransfer(
    engine: *mut c_void,
    batch_id: u64,
    entries: *mut transfer_request,
    count: usize,
) -> c_int {
    ffi_boundary!(K_CONTEXT, {
        let r = handle(engine).and_then(|h| {
            let reqs = requests(h, batch_id, entries, count)?;
            h.engine.submit(batch_id, reqs)
        });
        status_of("submitTransfer", r)
    })
}

/// Like `submitTransfer` (`count` must be at least 1), then sends `notify_msg` to the segment of
/// `entries[0]` exactly once, when every task is done: by the status query, wait or
/// `freeBatchID` that first finds them all COMPLETED; a failed batch never sends it. Both strings must be non-NULL and are copied. Returns a `Status` code. Thread-safe.
#[unsafe(no_mangle)]
pub extern "C" fn submitTransferWithNotify(
    engine: *mut c_void,
    batch_id: u64,
    entries: *mut transfer_request,
    count: usize,
    notify_msg: notify_msg,
) -> c_int {
    ffi_boundary!(K_CONTEXT, {
        let r = handle(engine).and_then(|h| {
            // SAFETY: `notify_msg.name` is NULL or a NUL-terminated string (API contract).
            let name = unsafe { string(notify_msg.name, "notify_msg.name") }?;
            // SAFETY: `notify_msg.msg` is NULL or a NUL-terminated string (API contract).
            let msg = unsafe { string(notify_msg.msg, "notify_msg.msg") }?;
            if count == 0 {
                return Err(err(ErrorKind::InvalidArgument, "no requests"));
            }
            let reqs = requests(h, batch_id, entries, count)?;
            h.engine.submit_with_notify(batch_id, reqs, name, msg)
        });
        status_of("submitTransferWithNotify", r)
    })
}

/// Writes task `task_id`'s status (`STATUS_WAITING`, `STATUS_COMPLETED` or `STATUS_FAILED`, plus
/// bytes moved) to `*status` and returns 0. Returns 1, writing nothing, for a bad batch id, a task
/// not yet submitted or a NULL `status`. Lock-free: an id-table lookup and atomic loads; a
/// `STATUS_WAITING` answer yields the CPU once, so tight polling loops leave the threads that
/// finish the task room to run. Thread-safe.
#[unsafe(no_mangle)]
pub extern "C" fn getTransferStatus(
    engine: *mut c_void,
    batch_id: u64,
    task_id: usize,
    status: *mut transfer_status,
) -> c_int {
    ffi_boundary!(K_CONTEXT, {
        let r = handle(engine).and_then(|h| {
            let out = status;
            if out.is_null() {
                return Err(err(ErrorKind::NullArgument, "status is NULL"));
            }
            let st = h.engine.task_status(batch_id, task_id)?;
            let state = match st.state {
                TaskState::Waiting => 0,
                TaskState::Completed => 4,
                TaskState::Failed => 6,
            };
            // SAFETY: non-NULL and points at a writable `struct transfer_status` per the C API.
            unsafe {
                out.write(transfer_status {
                    status: state,
                    transferred_bytes: st.transferred,
                })
            };
            Ok(())
        });
        status_of("getTransferStatus", r)
    })
}

/// Frees a batch. Returns a `Status` code: 0; 4 while one of its tasks is still in flight (the
/// batch stays valid: call again later), never once a status query has seen every task
/// COMPLETED or FAILED; 1 for an unknown, stale or already freed id. A notification not sent yet
/// is sent here. Thread-safe.
#[unsafe(no_mangle)]
pub extern "C" fn freeBatchID(engine: *mut c_void, batch_id: u64) -> c_int {
    ffi_boundary!(K_CONTEXT, {
        let r = handle(engine).and_then(|h| h.engine.free_batch(batch_id));
        status_of("freeBatchID", r)
    })
}
