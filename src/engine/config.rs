//! Engine configuration: typed fields, a string key/value setter (used by the C builder and
//! Python) and the Mooncake `MC_*` environment variables that apply to this engine.

use crate::error::{Error, ErrorKind, Result};
use std::time::Duration;

pub use crate::transport::rdma::RdmaMode;

pub use crate::metadata::P2PHANDSHAKE;

/// Engine configuration. Start from [`Config::default`] (which applies the environment) and
/// override with [`Config::set`].
#[derive(Debug, Clone)]
pub struct Config {
    /// `"P2PHANDSHAKE"`, an `http://` metadata URL, or etcd endpoints (`etcd://h:p[;h:p...]`
    /// or a bare `h:p[,h:p...]`).
    pub metadata: String,
    /// `host[:port]`; in P2P mode the host is advertised and the port ignored.
    pub local_server_name: String,
    /// Address the listeners bind; empty means the advertised host.
    pub bind_address: String,
    /// RPC/handshake port; 0 lets the kernel pick.
    pub rpc_port: u16,
    /// TCP data port; 0 lets the kernel pick.
    pub data_port: u16,
    /// Connections per peer.
    pub tcp_lanes: usize,
    /// Highest TCP framing version to use (1 or 2).
    pub tcp_proto: u32,
    /// Whether a batch the submitting thread sends itself (up to 2 MiB) is cut over every idle
    /// lane. `None` (auto): on hosts with 4 or more CPUs. On smaller ones the peer's server
    /// threads and ours outnumber the CPUs when the peer is on the same host, and one lane with
    /// its replies gathered is faster (see BENCHMARKS.md).
    pub tcp_spread: Option<bool>,
    /// Congestion control of TCP data connections (both directions): `auto` (Reno between
    /// two ends on one host, the system's default otherwise), `system`, or an algorithm name.
    pub tcp_congestion: crate::transport::tcp::sockopt::Congestion,
    /// Requests larger than this are cut into several wire requests spread over the lanes.
    pub slice_size: u64,
    /// Connect deadline for RPC and data connections.
    pub connect_timeout: Duration,
    /// Socket read/write deadline while a reply is due.
    pub io_timeout: Duration,
    /// Every task ends (COMPLETED or FAILED) within this time of its submission.
    pub transfer_timeout: Duration,
    /// Most concurrent connections the data server serves (one thread each).
    pub max_data_connections: usize,
    /// The data server closes a connection idle (between requests) this long.
    pub data_idle_timeout: Duration,
    /// Most handshake/RPC requests served at once.
    pub rpc_max_concurrent: usize,
    /// Most received notifications held until taken.
    pub notify_max_count: usize,
    /// Most bytes (names + messages) of received notifications held until taken.
    pub notify_max_bytes: usize,
    /// Most passive RDMA endpoints (one per sender and device); the oldest is evicted.
    pub rdma_max_passive_endpoints: usize,
    /// Largest accepted handshake frame.
    pub handshake_max_len: u64,
    /// Same-host shortcuts between tidewire engines (in-process memcpy, cross-process
    /// `process_vm_*`); off = every byte through TCP.
    pub same_host: bool,
    /// RDMA: `Auto` (use it when a device is usable), `Off`, or `On` (engine creation fails
    /// without it).
    pub rdma: RdmaMode,
    /// RDMA device names to use (`MC_TE_FILTERS`); empty = every active device.
    pub rdma_devices: Vec<String>,
    /// Bytes per RDMA work request.
    pub rdma_slice_size: u64,
    /// Queue pairs per (local device, peer device) pair.
    pub rdma_qp_per_ep: usize,
    /// Send queue depth per queue pair.
    pub rdma_max_wr: u32,
    /// Retries of a failed RDMA slice on another path.
    pub rdma_retries: u8,
    /// Pre-shared key that peers must prove on every handshake and data connection (`auth_key`,
    /// `TW_AUTH_KEY`); empty (the default) = off, as Mooncake.
    pub auth_key: crate::auth::AuthKey,
}

impl Default for Config {
    fn default() -> Self {
        let mut c = Config {
            metadata: P2PHANDSHAKE.to_string(),
            local_server_name: "127.0.0.1".to_string(),
            bind_address: String::new(),
            rpc_port: 0,
            data_port: 0,
            tcp_lanes: 2,
            tcp_proto: 2,
            tcp_spread: None,
            tcp_congestion: crate::transport::tcp::sockopt::Congestion::Auto,
            slice_size: 1 << 20,
            connect_timeout: Duration::from_secs(5),
            io_timeout: Duration::from_secs(30),
            transfer_timeout: Duration::from_secs(30),
            max_data_connections: 512,
            data_idle_timeout: Duration::from_secs(120),
            rpc_max_concurrent: 32,
            notify_max_count: crate::engine::notify_queue::DEFAULT_MAX_COUNT,
            notify_max_bytes: crate::engine::notify_queue::DEFAULT_MAX_BYTES,
            rdma_max_passive_endpoints: 256,
            handshake_max_len: crate::metadata::rpc::DEFAULT_MAX_FRAME,
            same_host: true,
            rdma: RdmaMode::Auto,
            rdma_devices: Vec::new(),
            rdma_slice_size: 64 << 10,
            rdma_qp_per_ep: 2,
            rdma_max_wr: 256,
            rdma_retries: 8,
            auth_key: crate::auth::AuthKey::default(),
        };
        c.apply_env();
        c
    }
}

/// Keys accepted by [`Config::set`], with a one-line description each.
pub const KEYS: &[(&str, &str)] = &[
    (
        "metadata",
        "P2PHANDSHAKE (default), http://host:port/path, or etcd: etcd://host:port[;host:port...] or host:port",
    ),
    (
        "local_server_name",
        "host[:port] this engine advertises (default 127.0.0.1)",
    ),
    (
        "bind_address",
        "address the listeners bind (default: the advertised host)",
    ),
    ("rpc_port", "handshake port, 0 = any free port"),
    ("data_port", "TCP data port, 0 = any free port"),
    ("tcp_lanes", "connections per peer, 1..=16 (default 2)"),
    (
        "tcp_congestion",
        "auto (default: reno between two ends on one host, else the system's), system, or an algorithm name",
    ),
    (
        "tcp_spread",
        "auto (default: with 4 or more CPUs), on or off: cut a batch the caller sends itself over the idle lanes",
    ),
    (
        "tcp_proto",
        "highest TCP framing version, 1 or 2 (default 2)",
    ),
    (
        "slice_size",
        "bytes per wire request for large transfers (default 1048576)",
    ),
    ("connect_timeout_ms", "connect deadline (default 5000)"),
    ("io_timeout_ms", "reply deadline (default 30000)"),
    (
        "transfer_timeout_ms",
        "every task ends within this time of its submission (default 30000; MC_TRANSFER_TIMEOUT s)",
    ),
    (
        "max_data_connections",
        "most connections the data server serves at once (default 512)",
    ),
    (
        "data_idle_timeout_ms",
        "the data server closes connections idle this long (default 120000)",
    ),
    (
        "rpc_max_concurrent",
        "most handshake/RPC requests served at once (default 32)",
    ),
    (
        "notify_max_count",
        "most received notifications held until taken (default 65536)",
    ),
    (
        "notify_max_bytes",
        "most bytes of received notifications held until taken (default 64 MiB)",
    ),
    (
        "rdma_max_passive_endpoints",
        "most passive RDMA endpoints; the oldest is evicted (default 256)",
    ),
    (
        "handshake_max_len",
        "largest handshake frame, 1 MiB..128 MiB",
    ),
    (
        "same_host",
        "1 (default) = same-host shortcuts between tidewire engines, 0 = TCP only",
    ),
    (
        "rdma",
        "auto (default: RDMA when a device is usable) | off | on (fail without RDMA)",
    ),
    (
        "rdma_devices",
        "comma-separated RDMA device names to use (default: all active)",
    ),
    (
        "rdma_slice_size",
        "bytes per RDMA work request (default 65536)",
    ),
    (
        "rdma_qp_per_ep",
        "queue pairs per device pair, 1..=16 (default 2)",
    ),
    (
        "rdma_max_wr",
        "send queue depth per queue pair, 1..=8192 (default 256)",
    ),
    (
        "rdma_retries",
        "retries of a failed RDMA slice on another path, 0..=64 (default 8)",
    ),
    (
        "auth_key",
        "pre-shared key tidewire peers must prove on every connection; empty (default) = off \
         (TW_AUTH_KEY)",
    ),
];

fn num<T: std::str::FromStr>(key: &str, v: &str) -> Result<T> {
    v.trim().parse::<T>().map_err(|_| {
        Error::new(
            ErrorKind::InvalidArgument,
            format!("{key}: {v:?} is not a valid number"),
        )
    })
}

fn ranged(key: &str, v: &str, lo: u64, hi: u64) -> Result<u64> {
    let n: u64 = num(key, v)?;
    if n < lo || n > hi {
        return Err(Error::new(
            ErrorKind::InvalidArgument,
            format!("{key}: {n} is outside {lo}..={hi}"),
        ));
    }
    Ok(n)
}

impl Config {
    /// Sets one option by name; unknown keys and bad values are errors.
    pub fn set(&mut self, key: &str, value: &str) -> Result<()> {
        match key {
            "metadata" => {
                let v = value.trim();
                crate::metadata::service::parse_kind(v)?;
                self.metadata = v.to_string();
            }
            "local_server_name" => {
                crate::metadata::parse_host_port(value, 0)?;
                self.local_server_name = value.trim().to_string();
            }
            "bind_address" => self.bind_address = value.trim().to_string(),
            "rpc_port" => self.rpc_port = ranged(key, value, 0, 65535)? as u16,
            "data_port" => self.data_port = ranged(key, value, 0, 65535)? as u16,
            "tcp_lanes" => self.tcp_lanes = ranged(key, value, 1, 16)? as usize,
            "tcp_proto" => self.tcp_proto = ranged(key, value, 1, 2)? as u32,
            "slice_size" => self.slice_size = ranged(key, value, 4096, 1 << 30)?,
            "connect_timeout_ms" => {
                self.connect_timeout = Duration::from_millis(ranged(key, value, 1, 3_600_000)?)
            }
            "io_timeout_ms" => {
                self.io_timeout = Duration::from_millis(ranged(key, value, 1, 86_400_000)?)
            }
            "transfer_timeout_ms" => {
                self.transfer_timeout = Duration::from_millis(ranged(key, value, 100, 86_400_000)?)
            }
            "max_data_connections" => {
                self.max_data_connections = ranged(key, value, 1, 65_536)? as usize
            }
            "data_idle_timeout_ms" => {
                self.data_idle_timeout = Duration::from_millis(ranged(key, value, 100, 86_400_000)?)
            }
            "rpc_max_concurrent" => self.rpc_max_concurrent = ranged(key, value, 1, 1024)? as usize,
            "notify_max_count" => self.notify_max_count = ranged(key, value, 1, 1 << 24)? as usize,
            "notify_max_bytes" => {
                self.notify_max_bytes = ranged(key, value, 1 << 10, 1 << 40)? as usize
            }
            "rdma_max_passive_endpoints" => {
                self.rdma_max_passive_endpoints = ranged(key, value, 1, 65_536)? as usize
            }
            "handshake_max_len" => self.handshake_max_len = ranged(key, value, 1 << 20, 128 << 20)?,
            "tcp_congestion" => {
                self.tcp_congestion = crate::transport::tcp::sockopt::Congestion::parse(value)
                    .ok_or_else(|| {
                        Error::new(
                            ErrorKind::InvalidArgument,
                            format!("tcp_congestion: {value:?} is not auto, system or a name"),
                        )
                    })?
            }
            "tcp_spread" => {
                self.tcp_spread = match value.trim().to_ascii_lowercase().as_str() {
                    "auto" | "" => None,
                    "on" | "1" | "true" | "yes" => Some(true),
                    "off" | "0" | "false" | "no" => Some(false),
                    v => {
                        return Err(Error::new(
                            ErrorKind::InvalidArgument,
                            format!("tcp_spread: {v:?} is not auto/on/off"),
                        ));
                    }
                }
            }
            "same_host" => {
                self.same_host = match value.trim() {
                    "1" | "true" | "on" | "yes" => true,
                    "0" | "false" | "off" | "no" => false,
                    v => {
                        return Err(Error::new(
                            ErrorKind::InvalidArgument,
                            format!("same_host: {v:?} is not 0/1"),
                        ));
                    }
                }
            }
            "rdma" => {
                self.rdma = match value.trim().to_ascii_lowercase().as_str() {
                    "auto" | "" => RdmaMode::Auto,
                    "off" | "0" | "false" | "no" => RdmaMode::Off,
                    "on" | "1" | "true" | "yes" => RdmaMode::On,
                    v => {
                        return Err(Error::new(
                            ErrorKind::InvalidArgument,
                            format!("rdma: {v:?} is not auto/off/on"),
                        ));
                    }
                }
            }
            "rdma_devices" => {
                self.rdma_devices = value
                    .split(',')
                    .map(str::trim)
                    .filter(|d| !d.is_empty())
                    .map(String::from)
                    .collect()
            }
            "rdma_slice_size" => self.rdma_slice_size = ranged(key, value, 4096, 1 << 30)?,
            "rdma_qp_per_ep" => self.rdma_qp_per_ep = ranged(key, value, 1, 16)? as usize,
            "rdma_max_wr" => self.rdma_max_wr = ranged(key, value, 1, 8192)? as u32,
            "rdma_retries" => self.rdma_retries = ranged(key, value, 0, 64)? as u8,
            "auth_key" => self.auth_key = crate::auth::AuthKey::new(value),
            _ => {
                let known: Vec<&str> = KEYS.iter().map(|k| k.0).collect();
                return Err(Error::new(
                    ErrorKind::InvalidArgument,
                    format!("unknown option {key:?}; known: {}", known.join(", ")),
                ));
            }
        }
        Ok(())
    }

    /// Applies the Mooncake variables that mean something here. Bad values are logged and ignored.
    fn apply_env(&mut self) {
        let pairs = [
            ("MC_TCP_BIND_ADDRESS", "bind_address"),
            ("MC_TCP_LANES_PER_PEER", "tcp_lanes"),
            ("MC_TCP_MAX_CONNECTIONS_PER_PEER", "tcp_lanes"),
            ("MC_TCP_PROTO", "tcp_proto"),
            ("MC_HANDSHAKE_MAX_LENGTH", "handshake_max_len"),
            ("TW_SLICE_SIZE", "slice_size"),
            ("TW_TCP_LANES", "tcp_lanes"),
            ("TW_TCP_SPREAD", "tcp_spread"),
            ("TW_TCP_CONGESTION", "tcp_congestion"),
            ("TW_SAME_HOST", "same_host"),
            ("TW_RDMA", "rdma"),
            ("MC_TE_FILTERS", "rdma_devices"),
            ("MC_SLICE_SIZE", "rdma_slice_size"),
            ("MC_NUM_QP_PER_EP", "rdma_qp_per_ep"),
            ("MC_MAX_WR", "rdma_max_wr"),
            ("MC_RETRY_CNT", "rdma_retries"),
        ];
        for (var, key) in pairs {
            if let Ok(v) = std::env::var(var) {
                if let Err(e) = self.set(key, &v) {
                    tw_log!(crate::log::Level::Warn, "ignoring {var}={v:?}: {e}");
                }
            }
        }
        // Never logged: the value is a secret.
        if let Ok(v) = std::env::var("TW_AUTH_KEY") {
            self.auth_key = crate::auth::AuthKey::new(&v);
        }
        if std::env::var("MC_FORCE_TCP").is_ok_and(|v| {
            !matches!(
                v.trim().to_ascii_lowercase().as_str(),
                "" | "0" | "false" | "off" | "no"
            )
        }) {
            self.rdma = RdmaMode::Off;
        }
        if let Some(secs) = std::env::var("MC_HANDSHAKE_CONNECT_TIMEOUT")
            .ok()
            .and_then(|v| v.parse::<u64>().ok())
        {
            self.connect_timeout = Duration::from_secs(secs.max(1));
        }
        if let Some(secs) = std::env::var("MC_TRANSFER_TIMEOUT")
            .ok()
            .and_then(|v| v.trim().parse::<u64>().ok())
        {
            self.transfer_timeout = Duration::from_secs(secs.max(1));
        }
        if let Some(secs) = std::env::var("MC_TCP_STATUS_TIMEOUT_SEC")
            .ok()
            .and_then(|v| v.parse::<u64>().ok())
        {
            self.io_timeout = Duration::from_secs(secs.max(1));
        }
    }

    /// True in peer-to-peer metadata mode.
    pub fn is_p2p(&self) -> bool {
        self.metadata == P2PHANDSHAKE
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn setter_validates() {
        let mut c = Config::default();
        c.set("tcp_lanes", "4").unwrap();
        assert_eq!(c.tcp_lanes, 4);
        assert_eq!(
            c.set("tcp_lanes", "0").unwrap_err().kind(),
            ErrorKind::InvalidArgument
        );
        assert_eq!(
            c.set("tcp_lanes", "x").unwrap_err().kind(),
            ErrorKind::InvalidArgument
        );
        c.set("tcp_spread", "off").unwrap();
        assert_eq!(c.tcp_spread, Some(false));
        c.set("tcp_spread", "auto").unwrap();
        assert_eq!(c.tcp_spread, None);
        c.set("tcp_congestion", "system").unwrap();
        assert_eq!(
            c.tcp_congestion,
            crate::transport::tcp::sockopt::Congestion::System
        );
        for (key, bad) in [("tcp_spread", "maybe"), ("tcp_congestion", "no such")] {
            assert_eq!(
                c.set(key, bad).unwrap_err().kind(),
                ErrorKind::InvalidArgument,
                "{key}={bad}"
            );
        }
        assert_eq!(
            c.set("nope", "1").unwrap_err().kind(),
            ErrorKind::InvalidArgument
        );
        assert_eq!(
            c.set("metadata", "redis://x:6379").unwrap_err().kind(),
            ErrorKind::Unsupported
        );
        c.set("metadata", "etcd://127.0.0.1:2379;127.0.0.1:2380")
            .unwrap();
        c.set("metadata", "127.0.0.1:2379").unwrap();
        c.set("metadata", "http://127.0.0.1:1/metadata").unwrap();
        assert!(!c.is_p2p());
        assert_eq!(
            c.set("local_server_name", "").unwrap_err().kind(),
            ErrorKind::InvalidArgument
        );
    }
}
