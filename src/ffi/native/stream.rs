//! GPU availability and stream-ordered transfers (CUDA driver loaded at run time).

use super::*;
use crate::engine::AsRequest;

/// Whether CUDA memory can be used: `TW_OK` with the device count in `*devices_out` (may be
/// NULL), or `TW_ERR_UNSUPPORTED` when no CUDA driver or device is found (the detail says which;
/// CPU transfers are unaffected). Loads the driver on first call: `libcuda.so.1`, or the path in
/// the environment variable `TW_CUDA_LIB`.
#[unsafe(no_mangle)]
pub extern "C" fn tw_gpu_available(devices_out: *mut i32) -> tw_result {
    ffi_boundary!(TW_ERR_PANIC, {
        let n = check!(crate::gpu::device_count());
        // SAFETY: NULL or a valid, writable int32_t per the API contract.
        if let Some(slot) = unsafe { devices_out.as_mut() } {
            *slot = n;
        }
        TW_OK
    })
}

/// Stream-ordered transfer: enqueues `count` requests on the CUDA stream `stream` (a
/// `CUstream`/`cudaStream_t`; NULL = the legacy default stream). The batch is submitted when the
/// stream reaches this point, and work enqueued on the stream afterwards waits until every
/// request has finished (via `cuStreamWaitValue32`; a blocking host function where stream memory
/// operations are unavailable). A failure never stops the process and never blocks the stream
/// forever: the stream goes on and the failure is reported by `tw_stream_op_status`/`_wait`.
///
/// Segments and local ranges are validated now (errors returned here, nothing enqueued); later
/// failures (peer rejection, socket, GPU copy) go to the operation's status. With `op_out`
/// non-NULL, an operation id is written there: query it with `tw_stream_op_status`, wait with
/// `tw_stream_op_wait`, release it with `tw_stream_op_free`. With `op_out` NULL the operation
/// frees itself and failures are only logged. `TW_ERR_UNSUPPORTED` without a CUDA driver.
#[unsafe(no_mangle)]
pub extern "C" fn tw_transfer_on_stream(
    engine: *const tw_engine,
    requests: *const tw_transfer_request,
    count: usize,
    stream: *mut c_void,
    op_out: *mut u64,
) -> tw_result {
    ffi_boundary!(TW_ERR_PANIC, {
        let e = check!(engine_ref(engine));
        // SAFETY: `count` elements per the API contract.
        let reqs = check!(unsafe { slice_arg(requests, count, "requests") });
        let v: Vec<Request> = check!(
            reqs.iter()
                .enumerate()
                .map(|(i, r)| r.to_request(i))
                .collect()
        );
        let id = check!(e.transfer_on_stream(&v, stream as usize, !op_out.is_null()));
        // SAFETY: NULL or a valid, writable uint64_t per the API contract.
        if let Some(slot) = unsafe { op_out.as_mut() } {
            *slot = id;
        }
        TW_OK
    })
}

/// Writes the status of a stream-ordered operation to `*status_out`: `TW_TASK_WAITING` until
/// the stream reached it and it finished, then `TW_TASK_COMPLETED` or `TW_TASK_FAILED` with the
/// reason in `result`. Cheap.
#[unsafe(no_mangle)]
pub extern "C" fn tw_stream_op_status(
    engine: *const tw_engine,
    op: u64,
    status_out: *mut tw_transfer_status,
) -> tw_result {
    ffi_boundary!(TW_ERR_PANIC, {
        let e = check!(engine_ref(engine));
        // SAFETY: `status_out` is NULL or valid for one write (API contract).
        let slot = check!(unsafe { out(status_out, "status_out") });
        let s = check!(e.stream_op_status(op));
        *slot = tw_transfer_status {
            state: s.state as i32,
            result: s
                .error
                .as_ref()
                .map_or(TW_OK, |e| status::code_of(e.kind())),
            transferred_bytes: s.transferred,
        };
        TW_OK
    })
}

/// Blocks (polling with yields for about 50 µs, then sleeping) until the stream-ordered operation finished, or `timeout_ms`
/// passes (negative = no limit): `TW_OK`, the transfer's error (detail in
/// `tw_last_error_message`), or `TW_ERR_TIMEOUT` (nothing is cancelled).
#[unsafe(no_mangle)]
pub extern "C" fn tw_stream_op_wait(
    engine: *const tw_engine,
    op: u64,
    timeout_ms: i64,
) -> tw_result {
    ffi_boundary!(TW_ERR_PANIC, {
        check!(check!(engine_ref(engine)).stream_op_wait(op, timeout(timeout_ms)));
        TW_OK
    })
}

/// Frees a finished stream-ordered operation. `TW_ERR_BUSY` while it has not finished (it
/// stays valid); `TW_ERR_INVALID_ID` for an unknown or freed id.
#[unsafe(no_mangle)]
pub extern "C" fn tw_stream_op_free(engine: *const tw_engine, op: u64) -> tw_result {
    ffi_boundary!(TW_ERR_PANIC, {
        check!(check!(engine_ref(engine)).stream_op_free(op));
        TW_OK
    })
}
