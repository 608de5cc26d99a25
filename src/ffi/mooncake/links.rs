//! Diagnostics and process hooks: NIC load, links, graceful shutdown.

use super::*;

/// Lists the RDMA NICs in use. `*count` is in/out, as in Mooncake: the capacity of `stats` in,
/// the number of NICs out; the first `min(capacity, NICs)` entries are written (name truncated
/// to 63 bytes; `inflight_bytes` and `ewma_bandwidth_bps` are 0: tidewire does not measure
/// per-NIC load). Without the RDMA transport there are no NICs: `*count = 0`, `stats`
/// untouched. Returns 0; -1 when any argument is NULL. Thread-safe.
#[unsafe(no_mangle)]
pub extern "C" fn getNicLoadStats(
    engine: *mut c_void,
    stats: *mut nic_load_stat,
    count: *mut usize,
) -> c_int {
    ffi_boundary!(ERR_CONTEXT, {
        let r = handle(engine).and_then(|h| {
            if stats.is_null() {
                return Err(err(ErrorKind::NullArgument, "stats is NULL"));
            }
            // SAFETY: `count` is NULL or valid for one read and write (API contract).
            let count = unsafe { out(count, "count") }?;
            let nics = h.engine.rdma_status().unwrap_or_default();
            for (i, name) in nics.iter().take(*count).enumerate() {
                let mut stat = nic_load_stat {
                    device_name: [0; 64],
                    inflight_bytes: 0,
                    ewma_bandwidth_bps: 0.0,
                };
                for (d, b) in stat.device_name.iter_mut().zip(name.bytes().take(63)) {
                    *d = b as c_char;
                }
                // SAFETY: `stats` holds `*count` (the capacity passed in) entries (API contract),
                // and `i < *count`.
                unsafe { stats.add(i).write(stat) };
            }
            *count = nics.len();
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
        tw_log!(
            Level::Info,
            "enableGracefulShutdown: no signal handlers installed; call destroyTransferEngine on shutdown"
        );
    })
}

/// Writes a short report of the RDMA links (JSON when `json != 0`, else text): the NICs in use
/// when the RDMA transport is installed, else why there are none. Truncated to fit and
/// NUL-terminated. Returns 0; -1 for a NULL engine or buffer, or `buf_len == 0`. Thread-safe.
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
            let text = match (h.engine.rdma_status(), json != 0) {
                (Ok(nics), true) => serde_json::json!({
                    "segment": h.engine.name(),
                    "transport": "rdma",
                    "links": nics,
                })
                .to_string(),
                (Ok(nics), false) => {
                    format!("RDMA links on {}: {}\n", h.engine.name(), nics.join(", "))
                }
                (Err(_), true) => serde_json::json!({
                    "segment": h.engine.name(),
                    "transport": if h.tcp_installed() { "tcp" } else { "none" },
                    "links": [],
                    "reason": NO_RDMA,
                })
                .to_string(),
                (Err(_), false) => format!("no RDMA links on {}: {NO_RDMA}\n", h.engine.name()),
            };
            // SAFETY: `buf_out` is NULL or writable for `buf_len` bytes (API contract).
            unsafe { write_c_string_truncated(&text, buf_out, buf_len) };
            Ok(())
        });
        errno_of("showLinks", r)
    })
}
