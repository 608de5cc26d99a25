//! tidewire's native C API (`tw_*`), exported from the library and declared in
//! `include/tidewire.h` (generated from this file by cbindgen).
//!
//! Conventions: every fallible function returns a `tw_result` (0 = OK, negative = error) and
//! writes its outputs only on success; `tw_last_error_message` gives the detail of the calling
//! thread's last failure. Every engine function takes `const tw_engine *` and may be called from
//! any thread at the same time. Strings passed in are copied; none is retained after the call.

#![allow(
    clippy::not_unsafe_ptr_arg_deref,
    reason = "C entry points: each documents its pointer contract and checks NULL; callers are C"
)]

use super::status::{
    self, TW_ERR_BUFFER_TOO_SMALL, TW_ERR_NULL_ARGUMENT, TW_ERR_PANIC, TW_OK, tw_result,
};
use super::{ffi_boundary, slice_arg, str_arg, write_c_string};
use crate::engine::{Config, Engine, Request, ScatterRange};
use crate::error::{Error, ErrorKind};
use crate::transport::Opcode;
use std::ffi::{CString, c_char, c_void};
use std::time::Duration;

/// Task is still in flight.
pub const TW_TASK_WAITING: i32 = 0;
/// Task finished and every byte moved.
pub const TW_TASK_COMPLETED: i32 = 4;
/// Task failed; `tw_transfer_status.result` says why.
pub const TW_TASK_FAILED: i32 = 6;
/// Opcode: remote → local.
pub const TW_OPCODE_READ: i32 = 0;
/// Opcode: local → remote.
pub const TW_OPCODE_WRITE: i32 = 1;
/// Segment id of the engine itself.
pub const TW_LOCAL_SEGMENT: i32 = 0;

/// Engine configuration under construction (opaque). Functions: `tw_config_new`,
/// `tw_config_set`, `tw_config_free`; `tw_engine_new` reads it (the caller still frees it).
pub struct tw_config {
    cfg: Config,
}

/// A transfer engine (opaque). Functions: `tw_engine_new`, `tw_engine_free`,
/// `tw_engine_segment_name`, `tw_engine_rpc_port`, `tw_memory_*`, `tw_segment_*`, `tw_batch_*`,
/// `tw_scatter_*`, `tw_notify_*`.
pub struct tw_engine {
    engine: Engine,
}

/// One READ or WRITE request (32 bytes).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct tw_transfer_request {
    /// `TW_OPCODE_READ` or `TW_OPCODE_WRITE`.
    pub opcode: i32,
    /// Target segment id (from `tw_segment_open`, or `TW_LOCAL_SEGMENT`).
    pub segment: i32,
    /// Local address inside registered memory.
    pub local_addr: *mut c_void,
    /// Absolute address in the target's registered memory.
    pub remote_addr: u64,
    /// Bytes to move; 0 completes at once.
    pub length: u64,
}

/// Status of one task (16 bytes).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct tw_transfer_status {
    /// `TW_TASK_WAITING`, `TW_TASK_COMPLETED` or `TW_TASK_FAILED`.
    pub state: i32,
    /// `TW_OK`, or why the task failed.
    pub result: tw_result,
    /// Bytes moved so far by finished slices.
    pub transferred_bytes: u64,
}

/// A memory range.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct tw_buffer {
    /// First byte.
    pub addr: *mut c_void,
    /// Length in bytes.
    pub length: usize,
}

/// One range of a scatter operation: `fragment_count` fragments, fragment i moving
/// `lengths[i]` bytes between `local_base + local_offsets[i]` and
/// `remote_base + remote_offsets[i]` of segment `segment`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct tw_scatter_range {
    /// `TW_OPCODE_READ` or `TW_OPCODE_WRITE`.
    pub opcode: i32,
    /// Remote segment id.
    pub segment: i32,
    /// Absolute remote address the remote offsets start from.
    pub remote_base: u64,
    /// Bytes addressable from `remote_base`.
    pub remote_size: u64,
    /// Local address the local offsets start from.
    pub local_base: *mut c_void,
    /// Bytes addressable from `local_base`.
    pub local_capacity: usize,
    /// `fragment_count` local offsets.
    pub local_offsets: *const usize,
    /// `fragment_count` remote offsets.
    pub remote_offsets: *const usize,
    /// `fragment_count` lengths.
    pub lengths: *const usize,
    /// Number of fragments.
    pub fragment_count: usize,
}

/// Called exactly once per scatter fragment, on the thread in `tw_scatter_wait` or
/// `tw_scatter_free`, with the fragment's index (ranges flattened in order) and its result.
pub type tw_fragment_callback =
    Option<extern "C" fn(user_data: *mut c_void, fragment: usize, result: tw_result)>;

/// A received notification; strings are owned by the array from `tw_notify_take`.
#[repr(C)]
#[derive(Debug)]
pub struct tw_notification {
    /// Sender-chosen name.
    pub name: *mut c_char,
    /// Message.
    pub msg: *mut c_char,
}

const _: () = assert!(std::mem::size_of::<tw_transfer_request>() == 32);
const _: () = assert!(std::mem::size_of::<tw_transfer_status>() == 16);
const _: () = assert!(std::mem::size_of::<tw_scatter_range>() == 72);

macro_rules! check {
    ($e:expr) => {
        match $e {
            Ok(v) => v,
            Err(e) => return status::fail(&e),
        }
    };
}

fn null(what: &str) -> Error {
    Error::new(ErrorKind::NullArgument, format!("{what} is NULL"))
}

/// Borrows the engine behind a handle.
fn engine<'a>(p: *const tw_engine) -> crate::Result<&'a Engine> {
    // SAFETY: non-NULL handles come from `tw_engine_new` and stay valid until `tw_engine_free`,
    // which the caller must not race with other calls on the same handle.
    unsafe { p.as_ref() }
        .map(|h| &h.engine)
        .ok_or_else(|| null("engine"))
}

fn out<'a, T>(p: *mut T, what: &str) -> crate::Result<&'a mut T> {
    // SAFETY: the caller passes NULL or a valid, writable, aligned pointer to T.
    unsafe { p.as_mut() }.ok_or_else(|| null(what))
}

fn opcode(v: i32) -> crate::Result<Opcode> {
    Opcode::from_i32(v).ok_or_else(|| {
        Error::new(
            ErrorKind::InvalidArgument,
            format!("opcode {v} is neither READ (0) nor WRITE (1)"),
        )
    })
}

fn requests_from_c(reqs: &[tw_transfer_request]) -> crate::Result<Vec<Request>> {
    reqs.iter()
        .map(|r| {
            Ok(Request {
                op: opcode(r.opcode)?,
                local: r.local_addr as u64,
                segment: r.segment,
                remote: r.remote_addr,
                len: r.length,
            })
        })
        .collect()
}

fn timeout(ms: i64) -> Option<Duration> {
    (ms >= 0).then(|| Duration::from_millis(ms as u64))
}

/// The library version, e.g. `"0.1.0"`. Static; never NULL.
#[unsafe(no_mangle)]
pub extern "C" fn tw_version() -> *const c_char {
    concat!(env!("CARGO_PKG_VERSION"), "\0").as_ptr().cast()
}

/// Creates a configuration with defaults (P2P handshake metadata, advertised host 127.0.0.1,
/// ports chosen by the kernel) and the `MC_*` environment applied. Writes the handle to
/// `*cfg_out`; free it with `tw_config_free`.
#[unsafe(no_mangle)]
pub extern "C" fn tw_config_new(cfg_out: *mut *mut tw_config) -> tw_result {
    ffi_boundary!(TW_ERR_PANIC, {
        let slot = check!(out(cfg_out, "cfg_out"));
        *slot = Box::into_raw(Box::new(tw_config {
            cfg: Config::default(),
        }));
        TW_OK
    })
}

/// Sets one option by name. Keys: `metadata`, `local_server_name`, `bind_address`, `rpc_port`,
/// `data_port`, `tcp_lanes`, `tcp_proto`, `slice_size`, `same_host`, `connect_timeout_ms`,
/// `io_timeout_ms`, `handshake_max_len`, `rdma`, `rdma_devices`, `rdma_slice_size`,
/// `rdma_qp_per_ep`, `rdma_max_wr`, `rdma_retries` (README, "Configuration"). Unknown keys and
/// bad values give `TW_ERR_INVALID_ARGUMENT` (or `TW_ERR_UNSUPPORTED` for an unsupported metadata
/// scheme). Not thread-safe for one `cfg`.
#[unsafe(no_mangle)]
pub extern "C" fn tw_config_set(
    cfg: *mut tw_config,
    key: *const c_char,
    value: *const c_char,
) -> tw_result {
    ffi_boundary!(TW_ERR_PANIC, {
        let c = check!(out(cfg, "cfg"));
        // SAFETY: C strings per the API contract (NULL is checked).
        let (k, v) = check!(
            unsafe { str_arg(key, "key") }
                .and_then(|k| Ok((k, unsafe { str_arg(value, "value") }?)))
        );
        check!(c.cfg.set(k, v));
        TW_OK
    })
}

/// Frees a configuration. NULL is ignored.
#[unsafe(no_mangle)]
pub extern "C" fn tw_config_free(cfg: *mut tw_config) {
    ffi_boundary!((), {
        if !cfg.is_null() {
            // SAFETY: non-NULL values come from `tw_config_new` and are freed once.
            drop(unsafe { Box::from_raw(cfg) });
        }
    })
}

/// Starts an engine from `cfg` (NULL = defaults); `cfg` is not consumed. Binds the RPC and data
/// listeners and starts the engine's threads. Writes the handle to `*engine_out`.
#[unsafe(no_mangle)]
pub extern "C" fn tw_engine_new(
    cfg: *const tw_config,
    engine_out: *mut *mut tw_engine,
) -> tw_result {
    ffi_boundary!(TW_ERR_PANIC, {
        let slot = check!(out(engine_out, "engine_out"));
        // SAFETY: NULL or a live handle from `tw_config_new`.
        let cfg = unsafe { cfg.as_ref() }
            .map(|c| c.cfg.clone())
            .unwrap_or_default();
        let engine = check!(Engine::new(cfg));
        *slot = Box::into_raw(Box::new(tw_engine { engine }));
        TW_OK
    })
}

/// Stops and frees an engine. NULL is ignored. Work in flight fails with `TW_ERR_SHUTDOWN`;
/// threads are joined before this returns. No other call may use the handle concurrently or
/// afterwards.
#[unsafe(no_mangle)]
pub extern "C" fn tw_engine_free(engine: *mut tw_engine) {
    ffi_boundary!((), {
        if !engine.is_null() {
            // SAFETY: non-NULL values come from `tw_engine_new` and are freed once.
            drop(unsafe { Box::from_raw(engine) });
        }
    })
}

/// Copies the engine's segment name (`host:rpc_port` in P2P mode, what peers pass to
/// `tw_segment_open`) into `buf[..len]`, NUL-terminated. `TW_ERR_BUFFER_TOO_SMALL` writes nothing.
#[unsafe(no_mangle)]
pub extern "C" fn tw_engine_segment_name(
    engine: *const tw_engine,
    buf: *mut c_char,
    len: usize,
) -> tw_result {
    ffi_boundary!(TW_ERR_PANIC, {
        let e = check!(self::engine(engine));
        if buf.is_null() {
            return status::fail(&null("buf"));
        }
        // SAFETY: `buf` is writable for `len` bytes per the API contract.
        if unsafe { write_c_string(e.name(), buf, len) } {
            TW_OK
        } else {
            status::set_last_error(format!("segment name needs {} bytes", e.name().len() + 1));
            TW_ERR_BUFFER_TOO_SMALL
        }
    })
}

/// Writes the engine's RPC (handshake) port to `*port_out`.
#[unsafe(no_mangle)]
pub extern "C" fn tw_engine_rpc_port(engine: *const tw_engine, port_out: *mut u16) -> tw_result {
    ffi_boundary!(TW_ERR_PANIC, {
        let e = check!(self::engine(engine));
        *check!(out(port_out, "port_out")) = e.rpc_port();
        TW_OK
    })
}

/// Registers `[addr, addr+length)` for transfers. `location` is `"cpu:N"`, `"cuda:N"` or `"*"`
/// (NULL = `"*"`). Peers can never read or write a region registered with
/// `remote_accessible == false`. Re-registering the exact same range is counted (unregister it
/// as many times); a partial overlap is `TW_ERR_ADDRESS_OVERLAPPED`. The memory must stay valid
/// until unregistered.
#[unsafe(no_mangle)]
pub extern "C" fn tw_memory_register(
    engine: *const tw_engine,
    addr: *mut c_void,
    length: usize,
    location: *const c_char,
    remote_accessible: bool,
) -> tw_result {
    ffi_boundary!(TW_ERR_PANIC, {
        let e = check!(self::engine(engine));
        if addr.is_null() {
            return status::fail(&null("addr"));
        }
        let loc = if location.is_null() {
            "*"
        } else {
            // SAFETY: a NUL-terminated C string per the API contract.
            check!(unsafe { str_arg(location, "location") })
        };
        check!(e.register_memory(addr as u64, length as u64, loc, remote_accessible));
        TW_OK
    })
}

/// Drops one registration of the region starting exactly at `addr`.
#[unsafe(no_mangle)]
pub extern "C" fn tw_memory_unregister(engine: *const tw_engine, addr: *mut c_void) -> tw_result {
    ffi_boundary!(TW_ERR_PANIC, {
        let e = check!(self::engine(engine));
        if addr.is_null() {
            return status::fail(&null("addr"));
        }
        check!(e.unregister_memory(addr as u64));
        TW_OK
    })
}

/// Registers `count` buffers, all or none, remote-accessible, at `location` (NULL = `"*"`).
#[unsafe(no_mangle)]
pub extern "C" fn tw_memory_register_batch(
    engine: *const tw_engine,
    buffers: *const tw_buffer,
    count: usize,
    location: *const c_char,
) -> tw_result {
    ffi_boundary!(TW_ERR_PANIC, {
        let e = check!(self::engine(engine));
        // SAFETY: `count` elements per the API contract.
        let bufs = check!(unsafe { slice_arg(buffers, count, "buffers") });
        let loc = if location.is_null() {
            "*"
        } else {
            // SAFETY: a NUL-terminated C string per the API contract.
            check!(unsafe { str_arg(location, "location") })
        };
        let ranges: Vec<(u64, u64)> = bufs
            .iter()
            .map(|b| (b.addr as u64, b.length as u64))
            .collect();
        check!(e.register_memory_batch(&ranges, loc));
        TW_OK
    })
}

/// Unregisters `count` base addresses; tries all and returns the first error.
#[unsafe(no_mangle)]
pub extern "C" fn tw_memory_unregister_batch(
    engine: *const tw_engine,
    addrs: *const *mut c_void,
    count: usize,
) -> tw_result {
    ffi_boundary!(TW_ERR_PANIC, {
        let e = check!(self::engine(engine));
        // SAFETY: `count` elements per the API contract.
        let list = check!(unsafe { slice_arg(addrs, count, "addrs") });
        let v: Vec<u64> = list.iter().map(|a| *a as u64).collect();
        check!(e.unregister_memory_batch(&v));
        TW_OK
    })
}

/// Opens the segment `name` (a peer's segment name; the engine's own name gives
/// `TW_LOCAL_SEGMENT`), fetching its descriptor within the connect timeout, and writes its id
/// (≥ 1 for peers) to `*segment_out`. Opening a name again returns the cached id.
#[unsafe(no_mangle)]
pub extern "C" fn tw_segment_open(
    engine: *const tw_engine,
    name: *const c_char,
    segment_out: *mut i32,
) -> tw_result {
    ffi_boundary!(TW_ERR_PANIC, {
        let e = check!(self::engine(engine));
        // SAFETY: C string per the API contract.
        let n = check!(unsafe { str_arg(name, "name") });
        let slot = check!(out(segment_out, "segment_out"));
        *slot = check!(e.open_segment(n));
        TW_OK
    })
}

/// Forgets a segment id (`TW_ERR_UNKNOWN_SEGMENT` if it is not open).
#[unsafe(no_mangle)]
pub extern "C" fn tw_segment_close(engine: *const tw_engine, segment: i32) -> tw_result {
    ffi_boundary!(TW_ERR_PANIC, {
        check!(check!(self::engine(engine)).close_segment(segment));
        TW_OK
    })
}

/// Re-fetches a segment's descriptor (after the peer registered more memory).
#[unsafe(no_mangle)]
pub extern "C" fn tw_segment_refresh(engine: *const tw_engine, segment: i32) -> tw_result {
    ffi_boundary!(TW_ERR_PANIC, {
        check!(check!(self::engine(engine)).refresh_segment(segment));
        TW_OK
    })
}

/// Allocates a batch holding up to `capacity` requests over all its submits; writes its id to
/// `*batch_out`. Ids are validated on every use; a freed id gives `TW_ERR_INVALID_ID`.
#[unsafe(no_mangle)]
pub extern "C" fn tw_batch_alloc(
    engine: *const tw_engine,
    capacity: usize,
    batch_out: *mut u64,
) -> tw_result {
    ffi_boundary!(TW_ERR_PANIC, {
        let e = check!(self::engine(engine));
        let slot = check!(out(batch_out, "batch_out"));
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
        let e = check!(self::engine(engine));
        // SAFETY: `count` elements per the API contract.
        let reqs = check!(unsafe { slice_arg(requests, count, "requests") });
        let v = check!(requests_from_c(reqs));
        check!(e.submit(batch, &v));
        TW_OK
    })
}

/// Writes the status of task `task` of a batch to `*status_out`. Cheap (atomics only).
#[unsafe(no_mangle)]
pub extern "C" fn tw_batch_status(
    engine: *const tw_engine,
    batch: u64,
    task: usize,
    status_out: *mut tw_transfer_status,
) -> tw_result {
    ffi_boundary!(TW_ERR_PANIC, {
        let e = check!(self::engine(engine));
        let slot = check!(out(status_out, "status_out"));
        let s = check!(e.task_status(batch, task));
        *slot = tw_transfer_status {
            state: s.state as i32,
            result: s.error.map_or(TW_OK, status::code_of),
            transferred_bytes: s.transferred,
        };
        TW_OK
    })
}

/// Blocks (without spinning) until every task of the batch has finished, or `timeout_ms` passes
/// (negative = no limit). `TW_OK` when all completed; the first failed task's error otherwise;
/// `TW_ERR_TIMEOUT` if time ran out (nothing is cancelled).
#[unsafe(no_mangle)]
pub extern "C" fn tw_batch_wait(
    engine: *const tw_engine,
    batch: u64,
    timeout_ms: i64,
) -> tw_result {
    ffi_boundary!(TW_ERR_PANIC, {
        check!(check!(self::engine(engine)).wait_batch(batch, timeout(timeout_ms)));
        TW_OK
    })
}

/// Frees a batch. `TW_ERR_BUSY` while any of its work is in flight (the batch stays valid);
/// `TW_ERR_INVALID_ID` for an unknown or already freed id.
#[unsafe(no_mangle)]
pub extern "C" fn tw_batch_free(engine: *const tw_engine, batch: u64) -> tw_result {
    ffi_boundary!(TW_ERR_PANIC, {
        check!(check!(self::engine(engine)).free_batch(batch));
        TW_OK
    })
}

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
        let e = check!(self::engine(engine));
        let slot = check!(out(op_out, "op_out"));
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
        let e = check!(self::engine(engine));
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
        check!(check!(self::engine(engine)).scatter_free(op));
        TW_OK
    })
}

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
        let e = check!(self::engine(engine));
        // SAFETY: C strings per the API contract.
        let (n, m) = check!(
            unsafe { str_arg(name, "name") }.and_then(|n| Ok((n, unsafe { str_arg(msg, "msg") }?)))
        );
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
        let e = check!(self::engine(engine));
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

/// Copies the cached descriptor of an open segment (`TW_LOCAL_SEGMENT` = this engine) as
/// Mooncake-compatible JSON into `buf[..len]`, NUL-terminated, and writes the size needed
/// (including the NUL) to `*needed_out` (may be NULL). `TW_ERR_BUFFER_TOO_SMALL` writes only
/// `*needed_out`, so a caller can retry with a larger buffer.
#[unsafe(no_mangle)]
pub extern "C" fn tw_segment_descriptor(
    engine: *const tw_engine,
    segment: i32,
    buf: *mut c_char,
    len: usize,
    needed_out: *mut usize,
) -> tw_result {
    ffi_boundary!(TW_ERR_PANIC, {
        let e = check!(self::engine(engine));
        let json = check!(e.segment_descriptor(segment)).encode();
        // SAFETY: NULL or a writable size_t per the API contract.
        if let Some(n) = unsafe { needed_out.as_mut() } {
            *n = json.len() + 1;
        }
        // SAFETY: `buf` is writable for `len` bytes per the API contract.
        if unsafe { write_c_string(&json, buf, len) } {
            TW_OK
        } else {
            status::set_last_error(format!("descriptor needs {} bytes", json.len() + 1));
            TW_ERR_BUFFER_TOO_SMALL
        }
    })
}

/// Like `tw_batch_submit`, and sends the notification (`name`, `msg`) to the first request's
/// segment once a status query or wait observes the whole batch completed (Mooncake's
/// `submitTransferWithNotify`). A batch that fails never sends it.
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
        let e = check!(self::engine(engine));
        // SAFETY: C strings per the API contract.
        let (n, m) = check!(
            unsafe { str_arg(name, "name") }.and_then(|n| Ok((n, unsafe { str_arg(msg, "msg") }?)))
        );
        // SAFETY: `count` elements per the API contract.
        let reqs = check!(unsafe { slice_arg(requests, count, "requests") });
        let v = check!(requests_from_c(reqs));
        check!(e.submit_with_notify(batch, &v, n, m));
        TW_OK
    })
}

/// Probes a peer's RPC port (`name` is a segment name); `TW_OK` when it answers.
#[unsafe(no_mangle)]
pub extern "C" fn tw_engine_probe(engine: *const tw_engine, name: *const c_char) -> tw_result {
    ffi_boundary!(TW_ERR_PANIC, {
        let e = check!(self::engine(engine));
        // SAFETY: C string per the API contract.
        let n = check!(unsafe { str_arg(name, "name") });
        check!(e.probe(n));
        TW_OK
    })
}

// ---- GPU memory (CUDA driver loaded at run time) ----

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

/// Copies the location of the registered region containing `addr` (`"cuda:N"` or `"cpu:N"`;
/// `"*"` registrations are resolved at registration) into `buf` (`len` bytes, NUL included).
/// `TW_ERR_ADDRESS_NOT_REGISTERED` when no region contains it; `TW_ERR_BUFFER_TOO_SMALL` when
/// it does not fit (nothing written).
#[unsafe(no_mangle)]
pub extern "C" fn tw_memory_location(
    engine: *const tw_engine,
    addr: *const c_void,
    buf: *mut c_char,
    len: usize,
) -> tw_result {
    ffi_boundary!(TW_ERR_PANIC, {
        let e = check!(self::engine(engine));
        if buf.is_null() {
            return status::fail(&null("buf"));
        }
        let loc = check!(e.memory_location(addr as u64));
        // SAFETY: `buf` holds `len` writable bytes per the API contract.
        if unsafe { write_c_string(&loc, buf, len) } {
            TW_OK
        } else {
            status::fail(&Error::new(
                ErrorKind::BufferTooSmall,
                format!("location {loc:?} needs {} bytes", loc.len() + 1),
            ))
        }
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
        let e = check!(self::engine(engine));
        // SAFETY: `count` elements per the API contract.
        let reqs = check!(unsafe { slice_arg(requests, count, "requests") });
        let v = check!(requests_from_c(reqs));
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
        let e = check!(self::engine(engine));
        let slot = check!(out(status_out, "status_out"));
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

/// Blocks (without spinning) until the stream-ordered operation finished, or `timeout_ms`
/// passes (negative = no limit): `TW_OK`, the transfer's error (detail in
/// `tw_last_error_message`), or `TW_ERR_TIMEOUT` (nothing is cancelled).
#[unsafe(no_mangle)]
pub extern "C" fn tw_stream_op_wait(
    engine: *const tw_engine,
    op: u64,
    timeout_ms: i64,
) -> tw_result {
    ffi_boundary!(TW_ERR_PANIC, {
        check!(check!(self::engine(engine)).stream_op_wait(op, timeout(timeout_ms)));
        TW_OK
    })
}

/// Frees a finished stream-ordered operation. `TW_ERR_BUSY` while it has not finished (it
/// stays valid); `TW_ERR_INVALID_ID` for an unknown or freed id.
#[unsafe(no_mangle)]
pub extern "C" fn tw_stream_op_free(engine: *const tw_engine, op: u64) -> tw_result {
    ffi_boundary!(TW_ERR_PANIC, {
        check!(check!(self::engine(engine)).stream_op_free(op));
        TW_OK
    })
}
