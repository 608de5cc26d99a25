//! Scatter operations (`tw_scatter_*`).

use super::*;

struct CallbackCtx {
    cb: extern "C" fn(*mut c_void, usize, tw_result),
    user_data: *mut c_void,
}
impl CallbackCtx {
    fn call(&self, i: usize, r: tw_result) {
        (self.cb)(self.user_data, i, r);
    }
}

// SAFETY: the callback and its user data are only invoked from the thread that waits on or frees
// the operation; the caller promises that this is acceptable for `user_data`.
unsafe impl Send for CallbackCtx {}

/// Submits a scatter operation over `count` ranges and writes its id to `*op_out`. Per-fragment
/// problems (out of bounds, overflow, unregistered local memory, unknown segment) fail only
/// those fragments. `callback` (may be NULL) is called exactly once per fragment, from the thread
/// in `tw_scatter_wait`/`tw_scatter_free`. Fragments adjacent on both sides travel as one wire
/// request. The offset arrays are read during this call only; the local memory must stay valid
/// until the operation is freed.
#[unsafe(no_mangle)]
pub extern "C" fn tw_scatter_submit(
    engine: *const tw_engine,
    ranges: *const tw_scatter_range,
    count: usize,
    callback: tw_fragment_callback,
    user_data: *mut c_void,
    op_out: *mut u64,
) -> tw_result {
    ffi_boundary!(TW_ERR_PANIC, {
        let e = check!(engine_ref(engine));
        // SAFETY: `op_out` is NULL or valid for one write (API contract).
        let slot = check!(unsafe { out(op_out, "op_out") });
        // SAFETY: `count` elements per the API contract.
        let rs = check!(unsafe { slice_arg(ranges, count, "ranges") });
        let mut v = Vec::with_capacity(rs.len());
        for (i, r) in rs.iter().enumerate() {
            let n = r.fragment_count;
            // SAFETY: each array holds `fragment_count` elements per the API contract.
            let arrays = unsafe {
                (
                    slice_arg(r.local_offsets, n, "local_offsets"),
                    slice_arg(r.remote_offsets, n, "remote_offsets"),
                    slice_arg(r.lengths, n, "lengths"),
                )
            };
            let (lo, ro, len) = match arrays {
                (Ok(a), Ok(b), Ok(c)) => (a, b, c),
                (Err(e), _, _) | (_, Err(e), _) | (_, _, Err(e)) => {
                    return status::fail(&Error::new(
                        e.kind(),
                        format!("range {i}: {}", e.message()),
                    ));
                }
            };
            v.push(ScatterRange {
                op: check!(opcode(r.opcode)),
                segment: r.segment,
                remote_base: r.remote_base,
                remote_size: r.remote_size,
                local_base: r.local_base as u64,
                local_capacity: r.local_capacity as u64,
                local_offsets: lo,
                remote_offsets: ro,
                lengths: len,
            });
        }
        let cb = callback.map(|cb| {
            let ctx = CallbackCtx { cb, user_data };
            Box::new(move |i: usize, r: crate::engine::FragmentResult| {
                ctx.call(i, r.map_or_else(status::code_of, |_| TW_OK));
            }) as crate::engine::scatter::FragmentCallback
        });
        *slot = check!(e.submit_scatter(&v, cb));
        TW_OK
    })
}

/// Waits up to `timeout_ms` (negative = no limit) for a scatter operation, firing callbacks for
/// fragments that finished. If `results` is not NULL it must hold `results_len` ≥ the fragment
/// count entries; each finished fragment's result is written there (entries of unfinished
/// fragments are left alone). Returns `TW_OK` when every fragment succeeded, the
/// lowest-indexed failed fragment's error, or `TW_ERR_TIMEOUT` (the operation continues; wait
/// again). One thread at a time may wait on an operation; never from inside its callback.
#[unsafe(no_mangle)]
pub extern "C" fn tw_scatter_wait(
    engine: *const tw_engine,
    op: u64,
    timeout_ms: i64,
    results: *mut tw_result,
    results_len: usize,
) -> tw_result {
    ffi_boundary!(TW_ERR_PANIC, {
        let e = check!(engine_ref(engine));
        let total = check!(e.scatter_len(op));
        if !results.is_null() && results_len < total {
            status::set_last_error(format!(
                "results holds {results_len} entries, the operation has {total} fragments"
            ));
            return TW_ERR_BUFFER_TOO_SMALL;
        }
        let mut write = |i: usize, r: crate::engine::FragmentResult| {
            // SAFETY: `results` holds at least `total` > i entries (checked above).
            unsafe { *results.add(i) = r.map_or_else(status::code_of, |_| TW_OK) };
        };
        let report: Option<&mut dyn FnMut(usize, crate::engine::FragmentResult)> =
            if results.is_null() {
                None
            } else {
                Some(&mut write)
            };
        check!(e.scatter_wait(op, timeout(timeout_ms), report));
        TW_OK
    })
}

/// Waits for physical completion of a scatter operation (firing remaining callbacks), then frees
/// it. `TW_ERR_INVALID_ID` for an unknown or freed id.
#[unsafe(no_mangle)]
pub extern "C" fn tw_scatter_free(engine: *const tw_engine, op: u64) -> tw_result {
    ffi_boundary!(TW_ERR_PANIC, {
        check!(check!(engine_ref(engine)).scatter_free(op));
        TW_OK
    })
}
