//! Batches (`tw_batch_*`).

use super::*;

/// Allocates a batch holding up to `capacity` requests over all its submits; writes its id to
/// `*batch_out`. Ids are validated on every use; a freed id gives `TW_ERR_INVALID_ID`.
#[unsafe(no_mangle)]
pub extern "C" fn tw_batch_alloc(
    engine: *const tw_engine,
    capacity: usize,
    batch_out: *mut u64,
) -> tw_result {
    ffi_boundary!(TW_ERR_PANIC, {
        let e = check!(engine_ref(engine));
        // SAFETY: `batch_out` is NULL or valid for one write (API contract).
        let slot = check!(unsafe { out(batch_out, "batch_out") });
        *slot = check!(e.alloc_batch(capacity));
        TW_OK
    })
}

/// Submits `count` requests to a batch; they become tasks numbered in submission order. All are
/// validated first (capacity, opcode, open segment, registered local range); on error none is
/// started. Returns without waiting for the transfers.
#[unsafe(no_mangle)]
pub extern "C" fn tw_batch_submit(
    engine: *const tw_engine,
    batch: u64,
    requests: *const tw_transfer_request,
    count: usize,
) -> tw_result {
    ffi_boundary!(TW_ERR_PANIC, {
        let e = check!(engine_ref(engine));
        // SAFETY: `count` elements per the API contract.
        let reqs = check!(unsafe { slice_arg(requests, count, "requests") });
        check!(e.submit(batch, reqs));
        TW_OK
    })
}

/// `tw_batch_submit` then `tw_batch_wait(timeout_ms)`, in one call from the waiting thread.
/// Returns the submit's error (nothing started) or the wait's result. Knowing the caller
/// waits, the TCP path may move READ batches of any size on this thread (no hand-off to its
/// lane threads); that part runs before the wait's `timeout_ms` starts and is bounded, like
/// every task, by `transfer_timeout_ms`. Thread-safe as the two calls it replaces.
#[unsafe(no_mangle)]
pub extern "C" fn tw_batch_submit_and_wait(
    engine: *const tw_engine,
    batch: u64,
    requests: *const tw_transfer_request,
    count: usize,
    timeout_ms: i64,
) -> tw_result {
    ffi_boundary!(TW_ERR_PANIC, {
        let e = check!(engine_ref(engine));
        // SAFETY: `count` elements per the API contract.
        let reqs = check!(unsafe { slice_arg(requests, count, "requests") });
        check!(e.submit_and_wait(batch, reqs, timeout(timeout_ms)));
        TW_OK
    })
}

/// Writes the status of task `task` of a batch to `*status_out`. Lock-free (an id-table lookup
/// and atomic loads): cheap enough to poll from any thread, while other threads submit or free.
#[unsafe(no_mangle)]
pub extern "C" fn tw_batch_status(
    engine: *const tw_engine,
    batch: u64,
    task: usize,
    status_out: *mut tw_transfer_status,
) -> tw_result {
    ffi_boundary!(TW_ERR_PANIC, {
        let e = check!(engine_ref(engine));
        // SAFETY: `status_out` is NULL or valid for one write (API contract).
        let slot = check!(unsafe { out(status_out, "status_out") });
        let s = check!(e.task_status(batch, task));
        *slot = tw_transfer_status {
            state: s.state as i32,
            result: s.error.map_or(TW_OK, status::code_of),
            transferred_bytes: s.transferred,
        };
        TW_OK
    })
}

/// Blocks (polling with yields for about 50 µs, then sleeping) until every task of the batch has finished, or `timeout_ms` passes
/// (negative = no limit). `TW_OK` when all completed; the first failed task's error otherwise;
/// `TW_ERR_TIMEOUT` if time ran out (nothing is cancelled).
#[unsafe(no_mangle)]
pub extern "C" fn tw_batch_wait(
    engine: *const tw_engine,
    batch: u64,
    timeout_ms: i64,
) -> tw_result {
    ffi_boundary!(TW_ERR_PANIC, {
        check!(check!(engine_ref(engine)).wait_batch(batch, timeout(timeout_ms)));
        TW_OK
    })
}

/// Frees a batch. `TW_ERR_BUSY` while one of its tasks is still in flight (the batch stays
/// valid), never once a status query has seen every task done; `TW_ERR_INVALID_ID` for an
/// unknown or already freed id. A notification not sent yet is sent here. Thread-safe.
#[unsafe(no_mangle)]
pub extern "C" fn tw_batch_free(engine: *const tw_engine, batch: u64) -> tw_result {
    ffi_boundary!(TW_ERR_PANIC, {
        check!(check!(engine_ref(engine)).free_batch(batch));
        TW_OK
    })
}

/// Like `tw_batch_submit`, and sends the notification (`name`, `msg`) to the first request's
/// segment exactly once, when every task is done: by the status query, wait or free that first
/// finds them all completed (Mooncake's `submitTransferWithNotify`). A batch that fails never
/// sends it.
#[unsafe(no_mangle)]
pub extern "C" fn tw_batch_submit_with_notify(
    engine: *const tw_engine,
    batch: u64,
    requests: *const tw_transfer_request,
    count: usize,
    name: *const c_char,
    msg: *const c_char,
) -> tw_result {
    ffi_boundary!(TW_ERR_PANIC, {
        let e = check!(engine_ref(engine));
        // SAFETY: C strings per the API contract.
        let (n, m) = check!(unsafe { notify_args(name, msg) });
        // SAFETY: `count` elements per the API contract.
        let reqs = check!(unsafe { slice_arg(requests, count, "requests") });
        check!(e.submit_with_notify(batch, reqs, n, m));
        TW_OK
    })
}
