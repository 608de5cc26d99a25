//! Engine handles and transports: create, destroy, install, the local address.

use super::*;

fn create(
    metadata: *const c_char,
    server_name: *const c_char,
    ip: *const c_char,
    auto_discover: c_int,
) -> Result<Box<MooncakeEngine>> {
    // SAFETY: `metadata` is NULL or a NUL-terminated string (API contract).
    let metadata = unsafe { string(metadata, "metadata_conn_string") }?;
    // SAFETY: `server_name` is NULL or a NUL-terminated string (API contract).
    let server_name = unsafe { string(server_name, "local_server_name") }?;
    // Unused, as in Mooncake's classic engine; still refused when NULL.
    // SAFETY: `ip` is NULL or a NUL-terminated string (API contract).
    unsafe { string(ip, "ip_or_host_name") }?;
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
/// NULL (Mooncake aborts the process). `local_server_name` is `host[:port]`; in P2P mode the segment name becomes `host:rpc_port`. `ip_or_host_name` and
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
                // SAFETY: `args[0]` is NULL or a NUL-terminated string (Mooncake's contract).
                let matrix = unsafe { string(first.cast::<c_char>().cast_const(), "args[0]") };
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
                tw_log!(Level::Warn, "installTransport: tcp is already installed");
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
            format!("Unsupported transport {other:?} (\"tcp\" and \"rdma\" are available)"),
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
            // SAFETY: `proto` is NULL or a NUL-terminated string (API contract).
            .and_then(|h| Ok((h, unsafe { string(proto, "proto") }?)))
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
            handle(engine).and_then(|_| {
                // SAFETY: `proto` is NULL or a NUL-terminated string (API contract).
                unsafe { string(proto, "proto") }.map(|_| ())
            }),
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
        // SAFETY: `buf_out` is NULL or writable for `buf_len` bytes (API contract).
        unsafe { write_c_string_truncated(&s, buf_out, buf_len) };
        0
    })
}
