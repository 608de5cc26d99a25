//! [`OPTIONS`]: the one table of engine options.

use super::{Env, Opt, RdmaMode, ms, on_off, ranged};
use crate::auth::AuthKey;
use crate::error::{Error, ErrorKind};
use crate::transport::tcp::sockopt::Congestion;
use std::time::Duration;

/// Every option, one row each: the key list, the setter, the environment and the help are all
/// generated from this table.
pub const OPTIONS: &[Opt] = &[
    Opt {
        key: "metadata",
        env: &[],
        help: "P2PHANDSHAKE, http://host:port/path, or etcd: etcd://host:port[;host:port...] or host:port",
        get: |c| c.metadata.clone(),
        set: |c, _, v| {
            let v = v.trim();
            crate::metadata::service::parse_kind(v)?;
            c.metadata = v.to_string();
            Ok(())
        },
    },
    Opt {
        key: "local_server_name",
        env: &[],
        help: "host[:port] this engine advertises",
        get: |c| c.local_server_name.clone(),
        set: |c, _, v| {
            crate::metadata::parse_host_port(v, 0)?;
            c.local_server_name = v.trim().to_string();
            Ok(())
        },
    },
    Opt {
        key: "bind_address",
        env: &[Env::Value("MC_TCP_BIND_ADDRESS")],
        help: "address the listeners bind (empty: the advertised host)",
        get: |c| c.bind_address.clone(),
        set: |c, _, v| {
            c.bind_address = v.trim().to_string();
            Ok(())
        },
    },
    Opt {
        key: "rpc_port",
        env: &[],
        help: "handshake port, 0 = any free port",
        get: |c| c.rpc_port.to_string(),
        set: |c, k, v| ranged(k, v, 0, 65535).map(|n| c.rpc_port = n as u16),
    },
    Opt {
        key: "data_port",
        env: &[],
        help: "TCP data port, 0 = any free port",
        get: |c| c.data_port.to_string(),
        set: |c, k, v| ranged(k, v, 0, 65535).map(|n| c.data_port = n as u16),
    },
    Opt {
        key: "tcp_lanes",
        env: &[
            Env::Value("MC_TCP_LANES_PER_PEER"),
            Env::Value("MC_TCP_MAX_CONNECTIONS_PER_PEER"),
            Env::Value("TW_TCP_LANES"),
        ],
        help: "connections per peer, 1..=16",
        get: |c| c.tcp_lanes.to_string(),
        set: |c, k, v| ranged(k, v, 1, 16).map(|n| c.tcp_lanes = n as usize),
    },
    Opt {
        key: "tcp_congestion",
        env: &[Env::Value("TW_TCP_CONGESTION")],
        help: "auto (reno between two ends on one host, else the system's), system, or an algorithm name",
        get: |c| match c.tcp_congestion {
            Congestion::Auto => "auto".into(),
            Congestion::System => "system".into(),
            Congestion::Named(n) => n.as_str().into(),
        },
        set: |c, _, v| {
            c.tcp_congestion = Congestion::parse(v).ok_or_else(|| {
                Error::new(
                    ErrorKind::InvalidArgument,
                    format!("tcp_congestion: {v:?} is not auto, system or a name"),
                )
            })?;
            Ok(())
        },
    },
    Opt {
        key: "tcp_spread",
        env: &[Env::Value("TW_TCP_SPREAD")],
        help: "auto (on with 4 or more CPUs), on or off: cut a batch the caller sends itself over the idle lanes",
        get: |c| match c.tcp_spread {
            None => "auto".into(),
            Some(true) => "on".into(),
            Some(false) => "off".into(),
        },
        set: |c, k, v| {
            let v = v.trim();
            c.tcp_spread = match v {
                "" => None,
                _ if v.eq_ignore_ascii_case("auto") => None,
                _ => Some(on_off(v, k, "auto/on/off")?),
            };
            Ok(())
        },
    },
    Opt {
        key: "tcp_proto",
        env: &[Env::Value("MC_TCP_PROTO")],
        help: "highest TCP framing version, 1 or 2",
        get: |c| c.tcp_proto.to_string(),
        set: |c, k, v| ranged(k, v, 1, 2).map(|n| c.tcp_proto = n as u32),
    },
    Opt {
        key: "slice_size",
        env: &[Env::Value("TW_SLICE_SIZE")],
        help: "bytes per wire request for large transfers",
        get: |c| c.slice_size.to_string(),
        set: |c, k, v| ranged(k, v, 4096, 1 << 30).map(|n| c.slice_size = n),
    },
    Opt {
        key: "connect_timeout_ms",
        env: &[Env::Seconds("MC_HANDSHAKE_CONNECT_TIMEOUT", |c, d| {
            c.connect_timeout = d
        })],
        help: "connect deadline",
        get: |c| ms(c.connect_timeout),
        set: |c, k, v| {
            ranged(k, v, 1, 3_600_000).map(|n| c.connect_timeout = Duration::from_millis(n))
        },
    },
    Opt {
        key: "io_timeout_ms",
        env: &[Env::Seconds("MC_TCP_STATUS_TIMEOUT_SEC", |c, d| {
            c.io_timeout = d
        })],
        help: "reply deadline",
        get: |c| ms(c.io_timeout),
        set: |c, k, v| ranged(k, v, 1, 86_400_000).map(|n| c.io_timeout = Duration::from_millis(n)),
    },
    Opt {
        key: "transfer_timeout_ms",
        env: &[Env::Seconds("MC_TRANSFER_TIMEOUT", |c, d| {
            c.transfer_timeout = d
        })],
        help: "every task ends within this time of its submission",
        get: |c| ms(c.transfer_timeout),
        set: |c, k, v| {
            ranged(k, v, 100, 86_400_000).map(|n| c.transfer_timeout = Duration::from_millis(n))
        },
    },
    Opt {
        key: "max_data_connections",
        env: &[],
        help: "most connections the data server keeps open (idle ones cost no thread)",
        get: |c| c.max_data_connections.to_string(),
        set: |c, k, v| ranged(k, v, 1, 65_536).map(|n| c.max_data_connections = n as usize),
    },
    Opt {
        key: "data_idle_timeout_ms",
        env: &[],
        help: "the data server closes connections idle this long",
        get: |c| ms(c.data_idle_timeout),
        set: |c, k, v| {
            ranged(k, v, 100, 86_400_000).map(|n| c.data_idle_timeout = Duration::from_millis(n))
        },
    },
    Opt {
        key: "rpc_max_concurrent",
        env: &[],
        help: "most handshake/RPC request connections open at once",
        get: |c| c.rpc_max_concurrent.to_string(),
        set: |c, k, v| ranged(k, v, 1, 65_536).map(|n| c.rpc_max_concurrent = n as usize),
    },
    Opt {
        key: "notify_max_count",
        env: &[],
        help: "most received notifications held until taken",
        get: |c| c.notify_max_count.to_string(),
        set: |c, k, v| ranged(k, v, 1, 1 << 24).map(|n| c.notify_max_count = n as usize),
    },
    Opt {
        key: "notify_max_bytes",
        env: &[],
        help: "most bytes of received notifications held until taken",
        get: |c| c.notify_max_bytes.to_string(),
        set: |c, k, v| ranged(k, v, 1 << 10, 1 << 40).map(|n| c.notify_max_bytes = n as usize),
    },
    Opt {
        key: "rdma_max_passive_endpoints",
        env: &[],
        help: "most passive RDMA endpoints; the oldest is evicted",
        get: |c| c.rdma_max_passive_endpoints.to_string(),
        set: |c, k, v| ranged(k, v, 1, 65_536).map(|n| c.rdma_max_passive_endpoints = n as usize),
    },
    Opt {
        key: "handshake_max_len",
        env: &[Env::Value("MC_HANDSHAKE_MAX_LENGTH")],
        help: "largest handshake frame, 1 MiB..128 MiB",
        get: |c| c.handshake_max_len.to_string(),
        set: |c, k, v| ranged(k, v, 1 << 20, 128 << 20).map(|n| c.handshake_max_len = n),
    },
    Opt {
        key: "same_host",
        env: &[Env::Value("TW_SAME_HOST")],
        help: "1 = same-host shortcuts between tidewire engines, 0 = TCP only",
        get: |c| if c.same_host { "1" } else { "0" }.into(),
        set: |c, k, v| {
            c.same_host = match v.trim() {
                "1" | "true" | "on" | "yes" => true,
                "0" | "false" | "off" | "no" => false,
                v => {
                    return Err(Error::new(
                        ErrorKind::InvalidArgument,
                        format!("{k}: {v:?} is not 0/1"),
                    ));
                }
            };
            Ok(())
        },
    },
    Opt {
        key: "rdma",
        env: &[Env::Value("TW_RDMA"), Env::Force("MC_FORCE_TCP", "off")],
        help: "auto (RDMA when a device is usable) | off | on (fail without RDMA)",
        get: |c| match c.rdma {
            RdmaMode::Auto => "auto".into(),
            RdmaMode::Off => "off".into(),
            RdmaMode::On => "on".into(),
        },
        set: |c, k, v| {
            let v = v.trim();
            c.rdma = if v.is_empty() || v.eq_ignore_ascii_case("auto") {
                RdmaMode::Auto
            } else if on_off(v, k, "auto/off/on")? {
                RdmaMode::On
            } else {
                RdmaMode::Off
            };
            Ok(())
        },
    },
    Opt {
        key: "rdma_devices",
        env: &[Env::Value("MC_TE_FILTERS")],
        help: "comma-separated RDMA device names to use (empty: all active)",
        get: |c| c.rdma_devices.join(","),
        set: |c, _, v| {
            c.rdma_devices = v
                .split(',')
                .map(str::trim)
                .filter(|d| !d.is_empty())
                .map(String::from)
                .collect();
            Ok(())
        },
    },
    Opt {
        key: "rdma_slice_size",
        env: &[Env::Value("MC_SLICE_SIZE")],
        help: "bytes per RDMA work request",
        get: |c| c.rdma_slice_size.to_string(),
        set: |c, k, v| ranged(k, v, 4096, 1 << 30).map(|n| c.rdma_slice_size = n),
    },
    Opt {
        key: "rdma_qp_per_ep",
        env: &[Env::Value("MC_NUM_QP_PER_EP")],
        help: "queue pairs per device pair, 1..=16",
        get: |c| c.rdma_qp_per_ep.to_string(),
        set: |c, k, v| ranged(k, v, 1, 16).map(|n| c.rdma_qp_per_ep = n as usize),
    },
    Opt {
        key: "rdma_max_wr",
        env: &[Env::Value("MC_MAX_WR")],
        help: "send queue depth per queue pair, 1..=8192",
        get: |c| c.rdma_max_wr.to_string(),
        set: |c, k, v| ranged(k, v, 1, 8192).map(|n| c.rdma_max_wr = n as u32),
    },
    Opt {
        key: "rdma_retries",
        env: &[Env::Value("MC_RETRY_CNT")],
        help: "retries of a failed RDMA slice on another path, 0..=64",
        get: |c| c.rdma_retries.to_string(),
        set: |c, k, v| ranged(k, v, 0, 64).map(|n| c.rdma_retries = n as u8),
    },
    Opt {
        key: "auth_key",
        env: &[Env::Secret("TW_AUTH_KEY")],
        help: "pre-shared key tidewire peers must prove on every connection; empty = off",
        get: |c| if c.auth_key.is_on() { "(set)" } else { "" }.into(),
        set: |c, _, v| {
            c.auth_key = AuthKey::new(v);
            Ok(())
        },
    },
];
