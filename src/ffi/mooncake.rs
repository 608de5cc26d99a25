//! Mooncake's C ABI: the 27 functions of `transfer_engine_c.h` (declared in
//! `include/transfer_engine_c.h`), built on [`Engine`].
//!
//! Mooncake mixes two return-code domains and this module keeps both: `submitTransfer`,
//! `submitTransferWithNotify`, `getTransferStatus` and `freeBatchID` return positive `Status`
//! codes; every other `int` function returns 0 or a negative `error.h` code. `codes::codes` is the one
//! place where an [`ErrorKind`] becomes either.
//!
//! The contract is Mooncake's; misuse behaves better: NULL arguments return an error instead of
//! crashing, batch ids are validated table ids, unsupported metadata schemes make
//! `createTransferEngine` return NULL instead of aborting, and `freeBatchID` is refused only while
//! work is really in flight. Every function taking an engine is thread-safe, except
//! `destroyTransferEngine`, which must not race with other calls on the same handle.

use super::{ffi_boundary, slice_arg, str_arg};
use crate::engine::{Config, Engine, LOCAL_SEGMENT, Request, SegmentId, TaskState};
use crate::error::{Error, ErrorKind, Result};
use crate::log::Level;
use crate::transport::Opcode;
use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_void};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

mod codes;
mod types;

use codes::*;
pub use types::{
    buffer_entry, nic_load_stat, notify_msg, segment_desc, segment_desc_nvmeof, segment_desc_rdma,
    segment_desc_union, transfer_request, transfer_status,
};

/// What a `transfer_engine_t` points at.
struct MooncakeEngine {
    engine: Engine,
    /// Set once the TCP transport is installed; its address is the `transport_t` handed out.
    tcp: AtomicBool,
    /// Remote segments opened through this handle, by name (for `openSegmentNoCache` and
    /// `removeLocalSegment`).
    opened: Mutex<HashMap<String, SegmentId>>,
}

impl MooncakeEngine {
    fn tcp_installed(&self) -> bool {
        // Acquire pairs with the Release store in `installTransport`.
        self.tcp.load(Ordering::Acquire)
    }

    fn opened(&self) -> std::sync::MutexGuard<'_, HashMap<String, SegmentId>> {
        self.opened.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn no_transport(&self) -> Error {
        err(
            ErrorKind::Unsupported,
            "no transport installed: call installTransport(engine, \"tcp\", NULL) first",
        )
    }
}

/// Borrows the engine behind a handle.
fn handle<'a>(p: *mut c_void) -> Result<&'a MooncakeEngine> {
    // SAFETY: non-NULL handles come from `createTransferEngine` (a leaked Box<MooncakeEngine>)
    // and stay valid until `destroyTransferEngine`, which must not race with other calls.
    unsafe { p.cast::<MooncakeEngine>().as_ref() }
        .ok_or_else(|| err(ErrorKind::NullArgument, "engine is NULL"))
}

/// Borrows an output argument.
fn out<'a, T>(p: *mut T, what: &str) -> Result<&'a mut T> {
    // SAFETY: the C contract: NULL (refused here) or a valid, aligned, writable `T` that no one
    // else touches during the call.
    unsafe { p.as_mut() }.ok_or_else(|| err(ErrorKind::NullArgument, format!("{what} is NULL")))
}

/// Borrows a C string argument.
fn string<'a>(p: *const c_char, what: &str) -> Result<&'a str> {
    // SAFETY: the C contract: NULL (refused by `str_arg`) or a NUL-terminated string that stays
    // valid for the duration of the call.
    unsafe { str_arg(p, what) }
}

/// Copies as much of `s` as fits into `buf[..len]`, always NUL-terminated (`len > 0`).
fn write_truncated(s: &str, buf: *mut c_char, len: usize) {
    if buf.is_null() || len == 0 {
        return;
    }
    let n = s.len().min(len - 1);
    // SAFETY: the caller guarantees `buf` is writable for `len` bytes and n + 1 <= len.
    unsafe {
        std::ptr::copy_nonoverlapping(s.as_ptr(), buf.cast::<u8>(), n);
        *buf.add(n) = 0;
    }
}

/// Duplicates `s` into a `malloc`ed NUL-terminated string (NULL when out of memory). A NUL inside
/// `s` ends the C string early.
fn malloc_str(s: &str) -> *mut c_char {
    // SAFETY: plain allocation; checked for NULL below.
    let p = unsafe { libc::malloc(s.len() + 1) }.cast::<c_char>();
    if !p.is_null() {
        // SAFETY: `p` holds s.len() + 1 bytes.
        unsafe {
            std::ptr::copy_nonoverlapping(s.as_ptr(), p.cast::<u8>(), s.len());
            *p.add(s.len()) = 0;
        }
    }
    p
}

fn truthy_env(var: &str) -> bool {
    std::env::var(var).is_ok_and(|v| {
        !matches!(
            v.trim().to_ascii_lowercase().as_str(),
            "" | "0" | "false" | "off" | "no"
        )
    })
}

fn create(
    metadata: *const c_char,
    server_name: *const c_char,
    ip: *const c_char,
    auto_discover: c_int,
) -> Result<Box<MooncakeEngine>> {
    let metadata = string(metadata, "metadata_conn_string")?;
    let server_name = string(server_name, "local_server_name")?;
    // Unused, as in Mooncake's classic engine; still refused when NULL.
    string(ip, "ip_or_host_name")?;
    let mut cfg = Config::default();
    cfg.set("metadata", metadata)?;
    cfg.set("local_server_name", server_name)?;
    // Auto-discovery installs RDMA when a device is usable (TCP otherwise, as Mooncake does
    // without HCAs); without it RDMA waits for installTransport("rdma"). MC_FORCE_TCP wins.
    let force_tcp = truthy_env("MC_FORCE_TCP");
    if auto_discover == 0 || force_tcp {
        cfg.rdma = crate::engine::RdmaMode::Off;
    }
    let engine = Engine::new(cfg)?;
    let tcp = auto_discover != 0 || force_tcp;
    Ok(Box::new(MooncakeEngine {
        engine,
        tcp: AtomicBool::new(tcp),
        opened: Mutex::default(),
    }))
}

/// Creates an engine. Returns an owned handle to release with `destroyTransferEngine`, or NULL on
/// failure (reason logged and kept as the thread's last error).
///
/// `metadata_conn_string` is `"P2PHANDSHAKE"`, an `http://` URL or etcd endpoints (`etcd://h:p`,
/// a bare `h:p`, lists split by `;` or `,`); `redis://`, `https://` and an unreachable etcd return
/// NULL (Mooncake aborts the process). `local_server_name` is
/// `host[:port]`; in P2P mode the segment name becomes `host:rpc_port`. `ip_or_host_name` and
/// `rpc_port` are unused, as in Mooncake; `MC_TCP_BIND_ADDRESS` picks the listen address. TCP is
/// installed now when `auto_discover != 0` or `MC_FORCE_TCP` is set, otherwise by
/// `installTransport`. Any NULL string returns NULL. Thread-safe.
#[unsafe(no_mangle)]
pub extern "C" fn createTransferEngine(
    metadata_conn_string: *const c_char,
    local_server_name: *const c_char,
    ip_or_host_name: *const c_char,
    rpc_port: u64,
    auto_discover: c_int,
) -> *mut c_void {
    ffi_boundary!(std::ptr::null_mut(), {
        let _ = rpc_port;
        match create(
            metadata_conn_string,
            local_server_name,
            ip_or_host_name,
            auto_discover,
        ) {
            Ok(h) => Box::into_raw(h).cast(),
            Err(e) => {
                record("createTransferEngine", &e);
                std::ptr::null_mut()
            }
        }
    })
}

/// Stops the engine and frees the handle. NULL is ignored. Work in flight fails. Must be called
/// exactly once per handle and must not race with any other call on it.
#[unsafe(no_mangle)]
pub extern "C" fn destroyTransferEngine(engine: *mut c_void) {
    ffi_boundary!((), {
        if !engine.is_null() {
            // SAFETY: non-NULL handles come from `createTransferEngine` (Box::into_raw) and are
            // destroyed exactly once per the contract.
            drop(unsafe { Box::from_raw(engine.cast::<MooncakeEngine>()) });
        }
    })
}

fn install(h: &MooncakeEngine, proto: &str, args: *mut *mut c_void) -> Result<*mut c_void> {
    match proto {
        "tcp" => {
            if !args.is_null() {
                // SAFETY: a non-NULL `args` points at least at one `void *` (Mooncake reads only
                // args[0]).
                let first = unsafe { *args };
                let matrix = string(first.cast::<c_char>().cast_const(), "args[0]");
                match matrix {
                    Ok(m) if !m.trim().is_empty() => {
                        let v: serde_json::Value = serde_json::from_str(m).map_err(|e| {
                            err(
                                ErrorKind::InvalidArgument,
                                format!("NIC priority matrix is not JSON: {e}"),
                            )
                        })?;
                        if !v.is_object() {
                            return Err(err(
                                ErrorKind::InvalidArgument,
                                "NIC priority matrix must be a JSON object",
                            ));
                        }
                    }
                    Ok(_) => {}
                    Err(e) if e.kind() == ErrorKind::NullArgument => {}
                    Err(e) => return Err(e),
                }
            }
            // Release pairs with the Acquire loads in `tcp_installed`.
            if h.tcp.swap(true, Ordering::AcqRel) {
                crate::tw_log!(Level::Warn, "installTransport: tcp is already installed");
            }
            Ok(std::ptr::from_ref(&h.tcp).cast_mut().cast())
        }
        "rdma" => {
            if truthy_env("MC_FORCE_TCP") {
                return Err(err(ErrorKind::Unsupported, "rdma: MC_FORCE_TCP is set"));
            }
            h.engine.install_rdma()?;
            // Release pairs with the Acquire loads in `tcp_installed`: a transport is installed.
            h.tcp.store(true, Ordering::Release);
            Ok(std::ptr::from_ref(&h.engine).cast_mut().cast())
        }
        other => Err(err(
            ErrorKind::Unsupported,
            format!("Unsupported transport {other:?} (only \"tcp\" is available)"),
        )),
    }
}

/// Installs a transport. Returns a non-NULL opaque handle owned by the engine (the same one when
/// called again), or NULL: `"rdma"` when no RDMA device is usable (or `MC_FORCE_TCP` is set),
/// an unknown name, a NULL
/// engine/proto, or a non-empty `args[0]` that is not a JSON object. `args` may be NULL; only
/// `args[0]` (a NIC priority matrix, unused by TCP) is read. Thread-safe.
#[unsafe(no_mangle)]
pub extern "C" fn installTransport(
    engine: *mut c_void,
    proto: *const c_char,
    args: *mut *mut c_void,
) -> *mut c_void {
    ffi_boundary!(std::ptr::null_mut(), {
        let r = handle(engine)
            .and_then(|h| Ok((h, string(proto, "proto")?)))
            .and_then(|(h, p)| install(h, p, args));
        r.unwrap_or_else(|e| {
            record("installTransport", &e);
            std::ptr::null_mut()
        })
    })
}

/// No-op, as in Mooncake: returns 0, or -1 for a NULL engine or proto. Thread-safe.
#[unsafe(no_mangle)]
pub extern "C" fn uninstallTransport(engine: *mut c_void, proto: *const c_char) -> c_int {
    ffi_boundary!(ERR_CONTEXT, {
        errno_of(
            "uninstallTransport",
            handle(engine).and_then(|_| string(proto, "proto").map(|_| ())),
        )
    })
}

/// Nothing to discover without RDMA: returns 0, or -1 for a NULL engine. Thread-safe.
#[unsafe(no_mangle)]
pub extern "C" fn discoverTopology(engine: *mut c_void) -> c_int {
    ffi_boundary!(ERR_CONTEXT, {
        errno_of("discoverTopology", handle(engine).map(|_| ()))
    })
}

/// Writes `"host:port"` into `buf_out[..buf_len]` (truncated like `snprintf`, NUL-terminated when
/// `buf_len > 0`). In P2P mode this is the segment name peers open; with a metadata server it is
/// the advertised RPC address. Returns 0; -1 for a NULL engine, or NULL `buf_out` with
/// `buf_len > 0`. Thread-safe.
#[unsafe(no_mangle)]
pub extern "C" fn getLocalIpAndPort(
    engine: *mut c_void,
    buf_out: *mut c_char,
    buf_len: usize,
) -> c_int {
    ffi_boundary!(ERR_CONTEXT, {
        let h = match handle(engine) {
            Ok(h) => h,
            Err(e) => return fail_errno("getLocalIpAndPort", &e),
        };
        if buf_out.is_null() && buf_len > 0 {
            return fail_errno(
                "getLocalIpAndPort",
                &err(ErrorKind::NullArgument, "buf_out is NULL"),
            );
        }
        let e = &h.engine;
        let s = if e.config().is_p2p() {
            e.name().to_string()
        } else {
            crate::metadata::join_host_port(e.rpc_host(), e.rpc_port())
        };
        write_truncated(&s, buf_out, buf_len);
        0
    })
}

fn open(h: &MooncakeEngine, name: *const c_char) -> Result<SegmentId> {
    let name = string(name, "segment_name")?.trim_start_matches('/');
    if !name.is_empty() && name != h.engine.name() && !h.tcp_installed() {
        return Err(h.no_transport());
    }
    let id = h.engine.open_segment(name)?;
    if id != LOCAL_SEGMENT {
        h.opened().insert(name.to_string(), id);
    }
    Ok(id)
}

/// Opens segment `segment_name` (leading `/` ignored) and returns its id: 0 for this engine's
/// own name, remote ids from 1, cached after the first open. Returns -1 on any failure (NULL or
/// empty name, NULL engine, unreachable peer, TCP not installed). Thread-safe.
#[unsafe(no_mangle)]
pub extern "C" fn openSegment(engine: *mut c_void, segment_name: *const c_char) -> i32 {
    ffi_boundary!(-1, {
        handle(engine)
            .and_then(|h| open(h, segment_name))
            .unwrap_or_else(|e| {
                record("openSegment", &e);
                -1
            })
    })
}

/// Like `openSegment`, but re-fetches the descriptor when the name is already cached. Returns the
/// id, or -1 on failure (including a failed re-fetch). Thread-safe.
#[unsafe(no_mangle)]
pub extern "C" fn openSegmentNoCache(engine: *mut c_void, segment_name: *const c_char) -> i32 {
    ffi_boundary!(-1, {
        let r = handle(engine).and_then(|h| {
            let name = string(segment_name, "segment_name")?.trim_start_matches('/');
            let cached = h.opened().get(name).copied();
            match cached {
                Some(id) => h.engine.refresh_segment(id).map(|_| id),
                None => open(h, segment_name),
            }
        });
        r.unwrap_or_else(|e| {
            record("openSegmentNoCache", &e);
            -1
        })
    })
}

/// No-op, as in Mooncake (the cached descriptor stays): 0, or -1 for a NULL engine. Thread-safe.
#[unsafe(no_mangle)]
pub extern "C" fn closeSegment(engine: *mut c_void, segment_id: i32) -> c_int {
    ffi_boundary!(ERR_CONTEXT, {
        let _ = segment_id;
        errno_of("closeSegment", handle(engine).map(|_| ()))
    })
}

/// No EFA transport in this build: 0, or -1 for a NULL engine or name. Thread-safe.
#[unsafe(no_mangle)]
pub extern "C" fn warmupEfaSegment(engine: *mut c_void, segment_name: *const c_char) -> c_int {
    ffi_boundary!(ERR_CONTEXT, {
        errno_of(
            "warmupEfaSegment",
            handle(engine).and_then(|_| string(segment_name, "segment_name").map(|_| ())),
        )
    })
}

/// Forgets the cached descriptor of `segment_name` (leading `/` ignored); the next `openSegment`
/// fetches it again under a new id. Transfers already submitted finish normally. Returns 0 (also
/// for a name that is not cached), -1 for a NULL engine or a NULL/empty name. Thread-safe.
#[unsafe(no_mangle)]
pub extern "C" fn removeLocalSegment(engine: *mut c_void, segment_name: *const c_char) -> c_int {
    ffi_boundary!(ERR_CONTEXT, {
        let r = handle(engine).and_then(|h| {
            let name = string(segment_name, "segment_name")?.trim_start_matches('/');
            if name.is_empty() {
                return Err(err(ErrorKind::InvalidArgument, "empty segment name"));
            }
            let id = h.opened().remove(name);
            if let Some(id) = id {
                // Already gone from the engine's table is fine: the goal is "not cached".
                if let Err(e) = h.engine.close_segment(id) {
                    crate::tw_log!(Level::Debug, "removeLocalSegment({name}): {e}");
                }
            }
            Ok(())
        });
        errno_of("removeLocalSegment", r)
    })
}

/// Re-fetches every cached remote descriptor. Failures are logged; returns 0, or -1 for a NULL
/// engine. Thread-safe.
#[unsafe(no_mangle)]
pub extern "C" fn syncSegmentCache(engine: *mut c_void) -> c_int {
    ffi_boundary!(ERR_CONTEXT, {
        match handle(engine) {
            Ok(h) => {
                if let Err(e) = h.engine.refresh_all_segments() {
                    record("syncSegmentCache", &e);
                }
                0
            }
            Err(e) => fail_errno("syncSegmentCache", &e),
        }
    })
}

/// Registers `[addr, addr+length)`; `location` is recorded, and peers may touch the range only
/// when `remote_accessible != 0`. Returns 0; -1 for zero length or a NULL engine/addr/location;
/// -7 when the range overlaps a registration (an exact repeat is reference-counted). Thread-safe.
#[unsafe(no_mangle)]
pub extern "C" fn registerLocalMemory(
    engine: *mut c_void,
    addr: *mut c_void,
    length: usize,
    location: *const c_char,
    remote_accessible: c_int,
) -> c_int {
    ffi_boundary!(ERR_CONTEXT, {
        let r = handle(engine).and_then(|h| {
            let loc = string(location, "location")?;
            h.engine
                .register_memory(addr as u64, length as u64, loc, remote_accessible != 0)
        });
        errno_of("registerLocalMemory", r)
    })
}

/// Unregisters the region starting at `addr`: 0, or -3 when `addr` is not a region base (-1 for
/// a NULL engine). Thread-safe.
#[unsafe(no_mangle)]
pub extern "C" fn unregisterLocalMemory(engine: *mut c_void, addr: *mut c_void) -> c_int {
    ffi_boundary!(ERR_CONTEXT, {
        let r = handle(engine).and_then(|h| h.engine.unregister_memory(addr as u64));
        errno_of("unregisterLocalMemory", r)
    })
}

/// Registers `buffer_len` remote-accessible ranges, all or none: 0; -1 for a zero length or a
/// NULL argument; -7 when ranges overlap. `buffer_len == 0` is a no-op. Thread-safe.
#[unsafe(no_mangle)]
pub extern "C" fn registerLocalMemoryBatch(
    engine: *mut c_void,
    buffer_list: *mut buffer_entry,
    buffer_len: usize,
    location: *const c_char,
) -> c_int {
    ffi_boundary!(ERR_CONTEXT, {
        let r = handle(engine).and_then(|h| {
            let loc = string(location, "location")?;
            // SAFETY: NULL (refused unless buffer_len == 0) or `buffer_len` entries per the C API.
            let list = unsafe { slice_arg(buffer_list.cast_const(), buffer_len, "buffer_list") }?;
            if list.is_empty() {
                return Ok(());
            }
            let ranges: Vec<(u64, u64)> = list
                .iter()
                .map(|b| (b.addr as u64, b.length as u64))
                .collect();
            h.engine.register_memory_batch(&ranges, loc)
        });
        errno_of("registerLocalMemoryBatch", r)
    })
}

/// Unregisters every address in `addr_list[..addr_len]`, then returns the first error (0 when
/// none; -1 for NULL arguments). Thread-safe.
#[unsafe(no_mangle)]
pub extern "C" fn unregisterLocalMemoryBatch(
    engine: *mut c_void,
    addr_list: *mut *mut c_void,
    addr_len: usize,
) -> c_int {
    ffi_boundary!(ERR_CONTEXT, {
        let r = handle(engine).and_then(|h| {
            // SAFETY: NULL (refused unless addr_len == 0) or `addr_len` pointers per the C API.
            let list = unsafe { slice_arg(addr_list.cast_const(), addr_len, "addr_list") }?;
            let addrs: Vec<u64> = list.iter().map(|&p| p as u64).collect();
            h.engine.unregister_memory_batch(&addrs)
        });
        errno_of("unregisterLocalMemoryBatch", r)
    })
}

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

/// Converts C requests; checks the batch id and that a transport is installed.
fn requests(
    h: &MooncakeEngine,
    batch_id: u64,
    entries: *mut transfer_request,
    count: usize,
) -> Result<Vec<Request>> {
    // SAFETY: NULL (refused unless count == 0) or `count` requests per the C API.
    let entries = unsafe { slice_arg(entries.cast_const(), count, "entries") }?;
    if !h.tcp_installed() {
        h.engine.batch_len(batch_id)?;
        return Err(h.no_transport());
    }
    entries
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let op = Opcode::from_i32(r.opcode).ok_or_else(|| {
                err(
                    ErrorKind::InvalidArgument,
                    format!("request {i}: opcode {} is not OPCODE_READ/WRITE", r.opcode),
                )
            })?;
            Ok(Request {
                op,
                local: r.source as u64,
                segment: r.target_id,
                remote: r.target_offset,
                len: r.length,
            })
        })
        .collect()
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
            h.engine.submit(batch_id, &reqs)
        });
        status_of("submitTransfer", r)
    })
}

/// Like `submitTransfer` (`count` must be at least 1), then sends `notify_msg` to the segment of
/// `entries[0]` once a status query observes the whole batch completed; a failed batch never
/// sends it. Both strings must be non-NULL and are copied. Returns a `Status` code. Thread-safe.
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
            let name = string(notify_msg.name, "notify_msg.name")?;
            let msg = string(notify_msg.msg, "notify_msg.msg")?;
            if count == 0 {
                return Err(err(ErrorKind::InvalidArgument, "no requests"));
            }
            let reqs = requests(h, batch_id, entries, count)?;
            h.engine.submit_with_notify(batch_id, &reqs, name, msg)
        });
        status_of("submitTransferWithNotify", r)
    })
}

/// Writes task `task_id`'s status (`STATUS_WAITING`, `STATUS_COMPLETED` or `STATUS_FAILED`, plus
/// bytes moved) to `*status` and returns 0. Returns 1, writing nothing, for a bad batch id, a task
/// not yet submitted or a NULL `status`. Reads atomics only. Thread-safe.
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

/// Frees a batch. Returns a `Status` code: 0; 4 while any of its work is in flight (the batch
/// stays valid: call again later); 1 for an unknown, stale or already freed id. Thread-safe.
#[unsafe(no_mangle)]
pub extern "C" fn freeBatchID(engine: *mut c_void, batch_id: u64) -> c_int {
    ffi_boundary!(K_CONTEXT, {
        let r = handle(engine).and_then(|h| h.engine.free_batch(batch_id));
        status_of("freeBatchID", r)
    })
}

/// Takes every notification received so far. Returns a `malloc`ed array of `*size` entries with
/// `malloc`ed strings, owned by the caller (release with `freeNotifsMsgBuf`), or NULL with
/// `*size = 0` when there is none, for a NULL engine, or when memory runs out. NULL `size` → NULL.
/// Thread-safe.
#[unsafe(no_mangle)]
pub extern "C" fn getNotifsFromEngine(engine: *mut c_void, size: *mut c_int) -> *mut notify_msg {
    ffi_boundary!(std::ptr::null_mut(), {
        let size = match out(size, "size") {
            Ok(s) => s,
            Err(e) => {
                record("getNotifsFromEngine", &e);
                return std::ptr::null_mut();
            }
        };
        *size = 0;
        let h = match handle(engine) {
            Ok(h) => h,
            Err(e) => {
                record("getNotifsFromEngine", &e);
                return std::ptr::null_mut();
            }
        };
        let mut list = h.engine.take_notifications();
        list.truncate(c_int::MAX as usize);
        if list.is_empty() {
            return std::ptr::null_mut();
        }
        // SAFETY: plain allocation of `len` entries; checked for NULL below.
        let arr =
            unsafe { libc::malloc(list.len() * size_of::<notify_msg>()) }.cast::<notify_msg>();
        if arr.is_null() {
            record(
                "getNotifsFromEngine",
                &err(
                    ErrorKind::Internal,
                    format!("out of memory: {} notifications dropped", list.len()),
                ),
            );
            return std::ptr::null_mut();
        }
        for (i, n) in list.iter().enumerate() {
            let entry = notify_msg {
                name: malloc_str(&n.name),
                msg: malloc_str(&n.msg),
            };
            // SAFETY: `arr` holds `list.len()` entries and i < list.len().
            unsafe { arr.add(i).write(entry) };
            if entry.name.is_null() || entry.msg.is_null() {
                free_notifs(arr, i + 1);
                record(
                    "getNotifsFromEngine",
                    &err(
                        ErrorKind::Internal,
                        format!("out of memory: {} notifications dropped", list.len()),
                    ),
                );
                return std::ptr::null_mut();
            }
        }
        *size = list.len() as c_int;
        arr
    })
}

/// Frees `n` entries of an array from `getNotifsFromEngine`, then the array.
fn free_notifs(arr: *mut notify_msg, n: usize) {
    for i in 0..n {
        // SAFETY: `arr` came from `getNotifsFromEngine` with at least `n` initialised entries.
        let e = unsafe { arr.add(i).read() };
        // SAFETY: the strings were allocated with malloc (or are NULL, which free accepts).
        unsafe {
            libc::free(e.name.cast());
            libc::free(e.msg.cast());
        }
    }
    // SAFETY: the array was allocated with malloc.
    unsafe { libc::free(arr.cast()) };
}

/// Frees an array returned by `getNotifsFromEngine` together with its strings; `size` must be
/// the count it reported. NULL `msg` is fine. Returns 0, or -1 (freeing nothing) for a negative
/// `size`. Not for arrays from any other source.
#[unsafe(no_mangle)]
pub extern "C" fn freeNotifsMsgBuf(msg: *mut notify_msg, size: c_int) -> c_int {
    ffi_boundary!(ERR_CONTEXT, {
        if msg.is_null() {
            return 0;
        }
        let Ok(n) = usize::try_from(size) else {
            return fail_errno(
                "freeNotifsMsgBuf",
                &err(
                    ErrorKind::InvalidArgument,
                    format!("size {size} is negative"),
                ),
            );
        };
        free_notifs(msg, n);
        0
    })
}

/// Sends `notify_msg` to the owner of segment `target_id` now (0 = this engine's own queue).
/// Returns 0; -200 for an unknown id or a rejected reply; -102 and similar for socket errors; -1
/// for NULL arguments. Strings are copied. Thread-safe.
#[unsafe(no_mangle)]
pub extern "C" fn genNotifyInEngine(
    engine: *mut c_void,
    target_id: u64,
    notify_msg: notify_msg,
) -> c_int {
    ffi_boundary!(ERR_CONTEXT, {
        let r = handle(engine).and_then(|h| {
            let name = string(notify_msg.name, "notify_msg.name")?;
            let msg = string(notify_msg.msg, "notify_msg.msg")?;
            let id = SegmentId::try_from(target_id).map_err(|_| {
                err(
                    ErrorKind::UnknownSegment,
                    format!("segment {target_id} is not open"),
                )
            })?;
            h.engine.send_notify(id, name, msg)
        });
        errno_of("genNotifyInEngine", r)
    })
}

/// No RDMA NICs to report: sets `*count = 0` and returns 0 (`stats` untouched); -1 when any
/// argument is NULL. Thread-safe.
#[unsafe(no_mangle)]
pub extern "C" fn getNicLoadStats(
    engine: *mut c_void,
    stats: *mut nic_load_stat,
    count: *mut usize,
) -> c_int {
    ffi_boundary!(ERR_CONTEXT, {
        let r = handle(engine).and_then(|_| {
            if stats.is_null() {
                return Err(err(ErrorKind::NullArgument, "stats is NULL"));
            }
            *out(count, "count")? = 0;
            Ok(())
        });
        errno_of("getNicLoadStats", r)
    })
}

/// Logs and does nothing. Mooncake installs SIGTERM/SIGINT handlers here; a library that takes
/// over signal handling fights its host program, so tidewire leaves signals to the program, which
/// should call `destroyTransferEngine` from its own shutdown path. NULL is ignored. Thread-safe.
#[unsafe(no_mangle)]
pub extern "C" fn enableGracefulShutdown(engine: *mut c_void) {
    ffi_boundary!((), {
        let _ = engine;
        crate::tw_log!(
            Level::Info,
            "enableGracefulShutdown: no signal handlers installed; call destroyTransferEngine on shutdown"
        );
    })
}

/// Writes a short report that there are no RDMA links (JSON when `json != 0`, else text),
/// truncated to fit and NUL-terminated. Returns 0; -1 for a NULL engine or buffer, or
/// `buf_len == 0`. Thread-safe.
#[unsafe(no_mangle)]
pub extern "C" fn showLinks(
    engine: *mut c_void,
    buf_out: *mut c_char,
    buf_len: usize,
    json: c_int,
) -> c_int {
    ffi_boundary!(ERR_CONTEXT, {
        let r = handle(engine).and_then(|h| {
            if buf_out.is_null() || buf_len == 0 {
                return Err(err(
                    ErrorKind::InvalidArgument,
                    "buf_out is NULL or buf_len is 0",
                ));
            }
            let text = if json != 0 {
                serde_json::json!({
                    "segment": h.engine.name(),
                    "transport": if h.tcp_installed() { "tcp" } else { "none" },
                    "links": [],
                    "reason": NO_RDMA,
                })
                .to_string()
            } else {
                format!("no RDMA links on {}: {NO_RDMA}\n", h.engine.name())
            };
            write_truncated(&text, buf_out, buf_len);
            Ok(())
        });
        errno_of("showLinks", r)
    })
}

#[cfg(test)]
mod tests;
