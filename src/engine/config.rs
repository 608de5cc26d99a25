//! Engine configuration: typed fields, and [`OPTIONS`], the one table of the options by key:
//! for each, the environment variables that set it (Mooncake's `MC_*` that apply to this
//! engine, and ours), its help, and how its value is read and written. The key/value setter
//! (used by the C builder and Python), the environment, the key list and the help with its
//! default are all generated from that table, and the defaults live once, in [`Config::base`].

use crate::auth::AuthKey;
use crate::error::{Error, ErrorKind, Result};
use crate::transport::tcp::sockopt::Congestion;
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
    /// [`Config::base`] with the environment applied.
    fn default() -> Self {
        let mut c = Config::base();
        c.apply_env();
        c
    }
}

/// How an environment variable sets an option.
#[derive(Clone, Copy)]
pub enum Env {
    /// The variable's value, as [`Config::set`] takes it; a bad value is logged and ignored.
    Value(&'static str),
    /// The value in whole seconds (at least 1), as Mooncake reads it; a bad value is ignored.
    Seconds(&'static str, fn(&mut Config, Duration)),
    /// Like `Value`, and never logged: the value is a secret.
    Secret(&'static str),
    /// Any value but `""`, `0`, `false`, `off` or `no` sets the option to the value given here.
    Force(&'static str, &'static str),
}

impl Env {
    /// The variable's name.
    pub fn var(&self) -> &'static str {
        match *self {
            Env::Value(v) | Env::Seconds(v, _) | Env::Secret(v) | Env::Force(v, _) => v,
        }
    }
}

/// One option: its key, the environment variables that set it (applied in order, the later
/// winning), its help, and how its value is written ([`Config::set`]) and read back.
pub struct Opt {
    /// The key [`Config::set`] takes.
    pub key: &'static str,
    /// Environment variables that set it.
    pub env: &'static [Env],
    /// What it means (the default is appended from [`Config::base`]).
    pub help: &'static str,
    get: fn(&Config) -> String,
    set: fn(&mut Config, &str, &str) -> Result<()>,
}

impl Opt {
    /// Its value in `c`, as [`Config::set`] takes it (a set `auth_key` reads `"(set)"`).
    pub fn get(&self, c: &Config) -> String {
        (self.get)(c)
    }

    /// The help line: what it means, its default, and the variables that set it.
    pub fn help_line(&self) -> String {
        let d = self.get(&Config::base());
        let mut line = format!(
            "{} (default {})",
            self.help,
            if d.is_empty() { "empty" } else { &d }
        );
        if !self.env.is_empty() {
            let vars: Vec<&str> = self.env.iter().map(Env::var).collect();
            line.push_str(&format!("; env {}", vars.join(", ")));
        }
        line
    }
}

fn ms(d: Duration) -> String {
    d.as_millis().to_string()
}

fn on_off(v: &str, key: &str, what: &str) -> Result<bool> {
    match v.trim().to_ascii_lowercase().as_str() {
        "1" | "true" | "on" | "yes" => Ok(true),
        "0" | "false" | "off" | "no" => Ok(false),
        v => Err(Error::new(
            ErrorKind::InvalidArgument,
            format!("{key}: {v:?} is not {what}"),
        )),
    }
}

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
        help: "most connections the data server serves at once",
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
        help: "most handshake/RPC requests served at once",
        get: |c| c.rpc_max_concurrent.to_string(),
        set: |c, k, v| ranged(k, v, 1, 1024).map(|n| c.rpc_max_concurrent = n as usize),
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
    /// The defaults, without the environment (the one place they are written).
    pub fn base() -> Config {
        Config {
            metadata: P2PHANDSHAKE.to_string(),
            local_server_name: "127.0.0.1".to_string(),
            bind_address: String::new(),
            rpc_port: 0,
            data_port: 0,
            tcp_lanes: 2,
            tcp_proto: 2,
            tcp_spread: None,
            tcp_congestion: Congestion::Auto,
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
            auth_key: AuthKey::default(),
        }
    }

    /// The option `key`, if there is one.
    pub fn option(key: &str) -> Option<&'static Opt> {
        OPTIONS.iter().find(|o| o.key == key)
    }

    /// Every key with its help line (default and variables included), in table order.
    pub fn help() -> Vec<(&'static str, String)> {
        OPTIONS.iter().map(|o| (o.key, o.help_line())).collect()
    }

    /// Sets one option by name; unknown keys and bad values are errors.
    pub fn set(&mut self, key: &str, value: &str) -> Result<()> {
        match Config::option(key) {
            Some(o) => (o.set)(self, key, value),
            None => {
                let known: Vec<&str> = OPTIONS.iter().map(|o| o.key).collect();
                Err(Error::new(
                    ErrorKind::InvalidArgument,
                    format!("unknown option {key:?}; known: {}", known.join(", ")),
                ))
            }
        }
    }

    /// The value of option `key` as [`set`](Self::set) takes it (a set `auth_key` reads
    /// `"(set)"`); `None` for an unknown key.
    pub fn get(&self, key: &str) -> Option<String> {
        Config::option(key).map(|o| o.get(self))
    }

    /// Applies the environment variables of every option, in table order.
    fn apply_env(&mut self) {
        for o in OPTIONS {
            for env in o.env {
                let Ok(v) = std::env::var(env.var()) else {
                    continue;
                };
                match *env {
                    Env::Value(var) => {
                        if let Err(e) = (o.set)(self, o.key, &v) {
                            tw_log!(crate::log::Level::Warn, "ignoring {var}={v:?}: {e}");
                        }
                    }
                    Env::Secret(_) => {
                        let _ = (o.set)(self, o.key, &v);
                    }
                    Env::Force(_, value) => {
                        let off = matches!(
                            v.trim().to_ascii_lowercase().as_str(),
                            "" | "0" | "false" | "off" | "no"
                        );
                        if !off {
                            let _ = (o.set)(self, o.key, value);
                        }
                    }
                    Env::Seconds(_, put) => {
                        if let Ok(secs) = v.trim().parse::<u64>() {
                            put(self, Duration::from_secs(secs.max(1)));
                        }
                    }
                }
            }
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

    /// The table is the one home of every option: each key once, each variable once, every
    /// default read back through its own setter unchanged, no default written into a help, and
    /// every field of `Config` reachable through a key.
    #[test]
    fn one_row_per_option_and_nothing_drifts() {
        let mut keys = std::collections::HashSet::new();
        let mut vars = std::collections::HashSet::new();
        let base = Config::base();
        for o in OPTIONS {
            assert!(keys.insert(o.key), "{} twice", o.key);
            for e in o.env {
                assert!(vars.insert(e.var()), "{} twice", e.var());
            }
            assert!(
                !o.help.contains("default"),
                "{}: the default is generated",
                o.key
            );
            let mut c = Config::base();
            c.set(o.key, &o.get(&base)).unwrap();
            assert_eq!(o.get(&c), o.get(&base), "{} does not read back", o.key);
            assert!(o.help_line().starts_with(o.help));
        }
        // Each field's value moves when, and only when, its own key is set: a field without a
        // key (or a key writing the wrong field) shows up in the Debug text.
        let fields = format!("{:?}", base).matches(": ").count();
        assert_eq!(OPTIONS.len(), fields, "one key per Config field");
        for (o, other) in [
            ("tcp_lanes", "7"),
            ("slice_size", "8192"),
            ("connect_timeout_ms", "1234"),
            ("rdma", "off"),
            ("tcp_spread", "on"),
            ("auth_key", "k"),
        ] {
            let mut c = Config::base();
            c.set(o, other).unwrap();
            for p in OPTIONS.iter().filter(|p| p.key != o) {
                assert_eq!(p.get(&c), p.get(&base), "setting {o} moved {}", p.key);
            }
            assert_ne!(c.get(o), base.get(o), "{o}");
        }
    }

    #[test]
    fn help_names_the_default_and_the_variables() {
        let help: std::collections::HashMap<_, _> = Config::help().into_iter().collect();
        assert_eq!(
            help["tcp_lanes"],
            "connections per peer, 1..=16 (default 2); env MC_TCP_LANES_PER_PEER, \
             MC_TCP_MAX_CONNECTIONS_PER_PEER, TW_TCP_LANES"
        );
        assert_eq!(
            help["rpc_port"],
            "handshake port, 0 = any free port (default 0)"
        );
        assert!(help["auth_key"].contains("(default empty); env TW_AUTH_KEY"));
    }

    /// A `CONFIG_KEYS = (...)` tuple in the Python package (a copy kept by hand) must name
    /// exactly the keys of [`OPTIONS`].
    #[test]
    fn python_config_keys_match_the_table() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/python/tidewire");
        let mut copies = 0;
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_none_or(|e| e != "py") {
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap();
            let Some(start) = text.find("\nCONFIG_KEYS = (") else {
                continue;
            };
            let body = &text[start..];
            let body = &body[..body.find(')').unwrap()];
            let mut python: Vec<&str> = body.split('"').skip(1).step_by(2).collect();
            let mut rust: Vec<&str> = OPTIONS.iter().map(|o| o.key).collect();
            python.sort_unstable();
            rust.sort_unstable();
            assert_eq!(python, rust, "{}: CONFIG_KEYS", path.display());
            copies += 1;
        }
        assert!(copies <= 1, "CONFIG_KEYS is written {copies} times");
    }
}
