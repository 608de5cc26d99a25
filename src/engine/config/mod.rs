//! Engine configuration: typed fields, and [`OPTIONS`], the one table of the options by key:
//! for each, the environment variables that set it (Mooncake's `MC_*` that apply to this
//! engine, and ours), its help, and how its value is read and written. The key/value setter
//! (used by the C builder and Python), the environment, the key list and the help with its
//! default are all generated from that table, and the defaults live once, in [`Config::base`].

use crate::auth::AuthKey;
use crate::error::{Error, ErrorKind, Result};
use crate::transport::tcp::sockopt::Congestion;
use std::time::Duration;

mod options;

pub use options::OPTIONS;

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
    /// Most connections the data server keeps open (idle ones cost no thread).
    pub max_data_connections: usize,
    /// The data server closes a connection idle (between requests) this long.
    pub data_idle_timeout: Duration,
    /// Most handshake/RPC request connections open at once.
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
            max_data_connections: crate::transport::tcp::server::DEFAULT_MAX_CONNECTIONS,
            data_idle_timeout: Duration::from_secs(60),
            rpc_max_concurrent: 1024,
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
mod tests;
