//! Configuration handles (`tw_config_*`) and the library version.

use super::*;

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
        // SAFETY: `cfg_out` is NULL or valid for one write (API contract).
        let slot = check!(unsafe { out(cfg_out, "cfg_out") });
        *slot = Box::into_raw(Box::new(tw_config {
            cfg: Config::default(),
        }));
        TW_OK
    })
}

/// Sets one option by name. Keys: `metadata`, `local_server_name`, `bind_address`, `rpc_port`,
/// `data_port`, `tcp_lanes`, `tcp_spread`, `tcp_congestion`, `tcp_proto`, `slice_size`, `same_host`, `connect_timeout_ms`,
/// `io_timeout_ms`, `transfer_timeout_ms`, `max_data_connections`, `data_idle_timeout_ms`,
/// `rpc_max_concurrent`, `notify_max_count`, `notify_max_bytes`, `handshake_max_len`, `rdma`,
/// `rdma_devices`, `rdma_slice_size`, `rdma_qp_per_ep`, `rdma_max_wr`, `rdma_retries`,
/// `rdma_max_passive_endpoints`, `auth_key` (README, "Configuration"). `auth_key` is a
/// pre-shared key (default empty = off; also `TW_AUTH_KEY`): when set, tidewire peers must
/// prove the same key (HMAC challenge-response, the key never crosses the wire) on every
/// handshake and data connection, and peers without it, Mooncake included, are refused. The
/// value is copied and never logged. Unknown keys and bad values give `TW_ERR_INVALID_ARGUMENT` (or `TW_ERR_UNSUPPORTED` for an unsupported metadata
/// scheme). Not thread-safe for one `cfg`.
#[unsafe(no_mangle)]
pub extern "C" fn tw_config_set(
    cfg: *mut tw_config,
    key: *const c_char,
    value: *const c_char,
) -> tw_result {
    ffi_boundary!(TW_ERR_PANIC, {
        // SAFETY: `cfg` is NULL or valid for one write (API contract).
        let c = check!(unsafe { out(cfg, "cfg") });
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
