//! mooncake_master's command line, as gflags reads it: `-flag=value` and `--flag=value` (and
//! `--flag value`; a bare boolean flag means true, `--noflag` false). Unknown flags are an error.
//! The flags themselves are one table, [`all_flags`]: names, aliases, kinds, defaults, help,
//! and for each of mooncake_master's flags tidewire does not honour, why it refuses it.

mod table;

use std::time::Duration;
mod refused;

/// Every flag, in `--help` order: the honoured ones ([`table::HONOURED`]), then the refused
/// ones ([`refused::REFUSED`]).
fn all_flags() -> impl Iterator<Item = &'static Flag> {
    table::HONOURED.iter().chain(refused::REFUSED)
}
use tidewire_master::MasterConfig;
use tidewire_master::kv_events::KvConfig;

/// Every setting the binary uses.
#[derive(Debug, Clone)]
pub struct Flags {
    pub rpc_address: String,
    pub rpc_port: u16,
    pub max_connections: usize,
    pub metrics_host: Option<String>,
    pub metrics_port: u16,
    pub enable_metric_reporting: bool,
    pub enable_http_metadata_server: bool,
    pub http_metadata_server_host: String,
    pub http_metadata_server_port: u16,
    pub master: MasterConfig,
    pub ha: Option<HaFlags>,
    /// KV events (`--enable_kv_events` and `--kv_events_*`); `None`: off.
    pub kv_events: Option<KvConfig>,
    /// How long an idle RPC connection is kept (`--rpc_conn_timeout_seconds`); `None`: the
    /// server's default.
    pub idle_timeout: Option<Duration>,
    /// Flags given that have no effect here, each a line naming the flag and why, said on stderr
    /// at start.
    pub notes: Vec<String>,
}

/// High availability through etcd (`--enable_ha`).
#[derive(Debug, Clone)]
pub struct HaFlags {
    /// etcd endpoints (`h1:p;h2:p`).
    pub endpoints: String,
    /// Leader lease, seconds.
    pub lease_ttl: i64,
    /// Journal objects in etcd so that a new leader keeps them (`--enable_oplog`).
    pub oplog: bool,
    /// The cluster's name in etcd's keys (`--cluster_id`); empty: `MC_STORE_CLUSTER_ID`, else
    /// Mooncake's `mooncake_cluster`.
    pub cluster_id: String,
}

/// How a flag takes its value.
pub enum Kind {
    /// `--f`, `--f=B` or `-f=B`: a bare flag means true.
    Bool,
    /// `--f=V` or `--f V`; the text is the value's name in `--help`.
    Value(&'static str),
    /// Accepted, but not listed in `--help` (compatibility spellings).
    Hidden(&'static Kind),
    /// `--help`: print the usage and exit.
    Help,
}

/// What the flags set while they are parsed.
pub struct Parsed {
    /// The binary's settings.
    pub flags: Flags,
    /// `--enable_ha`: `ha` becomes `flags.ha` once every flag is read.
    pub enable_ha: bool,
    /// The HA settings, kept whether or not HA is on.
    pub ha: HaFlags,
    /// `--rpc_interface`: its IPv4 address replaces `--rpc_address` once every flag is read.
    pub rpc_interface: Option<String>,
    /// `--enable_kv_events`: `kv` becomes `flags.kv_events` once every flag is read.
    pub enable_kv_events: bool,
    /// The KV-event settings, kept whether or not they are on.
    pub kv: KvConfig,
}

/// One flag: one row of [`all_flags`].
pub struct Flag {
    /// Its name, as mooncake_master spells it.
    pub name: &'static str,
    /// Other names it answers to.
    pub aliases: &'static [&'static str],
    /// How it takes its value.
    pub kind: Kind,
    /// Its default, set before the command line is read and shown for `{}` in `help`; `None`
    /// for a flag with no value of its own until given.
    pub default: Option<&'static str>,
    /// Its `--help` text.
    pub help: &'static str,
    /// Sets it: (settings, the name as given, the value).
    pub set: fn(&mut Parsed, &str, &str) -> Result<(), String>,
    /// `Some`: one of mooncake_master's flags that tidewire does not honour; it is refused at
    /// start, naming the flag and why (`set` is never called).
    pub refused: Option<Refusal>,
}

/// Why a flag is refused, and the one value that may pass.
pub struct Refusal {
    /// Why, said after `--name: `.
    pub why: &'static str,
    /// The value that means the feature is off (where Mooncake's default means that), accepted
    /// silently as tidewire already behaves so; `None`: every value is refused.
    pub off: Option<&'static str>,
    /// Being built (the SSD offload tier, KV events): the message says "not yet supported".
    pub not_yet: bool,
}

impl Refusal {
    /// Whether `value` is the "feature off" value.
    fn is_off(&self, flag: &Flag, value: &str) -> bool {
        let Some(off) = self.off else { return false };
        if flag.is_bool() {
            return matches!((boolean("", value), boolean("", off)), (Ok(a), Ok(b)) if a == b);
        }
        let v = value.trim();
        v == off || matches!((v.parse::<f64>(), off.parse::<f64>()), (Ok(a), Ok(b)) if a == b)
    }

    /// The refusal of `--name`, as printed at start.
    pub fn message(&self, name: &str) -> String {
        let mut m = format!("--{name}: ");
        if self.not_yet {
            m.push_str("not yet supported: ");
        }
        m.push_str(self.why);
        match self.off {
            Some("") => m.push_str(&format!(" (only an empty --{name}= is accepted)")),
            Some(off) => m.push_str(&format!(" (only --{name}={off} is accepted)")),
            None => {}
        }
        m
    }
}

impl Flag {
    fn is_bool(&self) -> bool {
        matches!(self.kind, Kind::Bool | Kind::Hidden(Kind::Bool))
    }
}

/// Where the help text starts, after the flag and its value name.
const HELP_COLUMN: usize = 37;

/// The text after the flags in `--help`.
const ENVIRONMENT: &str = "
environment:
  TW_AUTH_KEY                        pre-shared key every Store client must prove (off if empty)
";

/// The `--help` text, made from [`all_flags`].
pub fn usage() -> String {
    let mut out = String::from(
        "tidewire-master: the tidewire Store master (accepts mooncake_master's flags, -f=v or --f=v)\n\n",
    );
    for f in all_flags().filter(|f| f.refused.is_none()) {
        let left = match f.kind {
            Kind::Hidden(_) => continue,
            Kind::Bool => format!("  --{}=B", f.name),
            Kind::Value(v) => format!("  --{}={v}", f.name),
            Kind::Help => format!("  --{}", f.name),
        };
        let help = f.help.replace("{}", f.default.unwrap_or("-"));
        let pad = HELP_COLUMN.max(left.len() + 2) - left.len();
        out.push_str(&left);
        for (i, line) in help.lines().enumerate() {
            let indent = if i == 0 { pad } else { HELP_COLUMN };
            out.push_str(&format!("{:indent$}{line}\n", ""));
        }
    }
    for (title, not_yet) in [
        (
            "refused (mooncake_master's flags tidewire does not honour; each says why,\n\
             and docs/master.md lists the reasons)",
            false,
        ),
        ("not yet supported (being built)", true),
    ] {
        out.push_str(&format!("\n{title}:\n"));
        let names = all_flags()
            .filter(|f| f.refused.as_ref().is_some_and(|r| r.not_yet == not_yet))
            .map(|f| format!("--{}", f.name));
        out.push_str(&wrap(names, 2, 96));
    }
    out.push_str(ENVIRONMENT);
    out
}

/// `words` separated by spaces in lines of at most `width` columns, each indented by `indent`.
fn wrap(words: impl Iterator<Item = String>, indent: usize, width: usize) -> String {
    let mut out = String::new();
    let mut line = String::new();
    for w in words {
        if !line.is_empty() && indent + line.len() + 1 + w.len() > width {
            out.push_str(&format!("{:indent$}{line}\n", ""));
            line.clear();
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(&w);
    }
    if !line.is_empty() {
        out.push_str(&format!("{:indent$}{line}\n", ""));
    }
    out
}

/// The row of `name` (or of one of its aliases).
pub fn find(name: &str) -> Option<&'static Flag> {
    all_flags().find(|f| f.name == name || f.aliases.contains(&name))
}

/// A boolean as gflags reads it (and an empty value, a bare flag's, is true).
fn boolean(name: &str, v: &str) -> Result<bool, String> {
    match v.to_ascii_lowercase().as_str() {
        "" | "1" | "t" | "true" | "y" | "yes" => Ok(true),
        "0" | "f" | "false" | "n" | "no" => Ok(false),
        _ => Err(format!("--{name}: {v:?} is not a boolean")),
    }
}

fn number<T: std::str::FromStr>(name: &str, v: &str) -> Result<T, String> {
    v.trim()
        .parse()
        .map_err(|_| format!("--{name}: {v:?} is not a valid number"))
}

fn ratio(name: &str, v: &str) -> Result<f64, String> {
    let f: f64 = number(name, v)?;
    if !(0.0..=1.0).contains(&f) {
        return Err(format!("--{name}: {f} is outside 0..=1"));
    }
    Ok(f)
}

/// Milliseconds, or a number with an ms/s/m/h suffix.
pub fn duration(name: &str, v: &str) -> Result<Duration, String> {
    let v = v.trim();
    let (num, scale) = if let Some(n) = v.strip_suffix("ms") {
        (n, 1)
    } else if let Some(n) = v.strip_suffix('s') {
        (n, 1000)
    } else if let Some(n) = v.strip_suffix('m') {
        (n, 60_000)
    } else if let Some(n) = v.strip_suffix('h') {
        (n, 3_600_000)
    } else {
        (v, 1)
    };
    let n: u64 = number(name, num)?;
    n.checked_mul(scale)
        .map(Duration::from_millis)
        .ok_or_else(|| format!("--{name}: {v:?} is too large"))
}

/// Parses the arguments (without the program name). `Ok(None)` for `--help`.
pub fn parse(args: &[String]) -> Result<Option<Flags>, String> {
    let mut p = Parsed {
        flags: Flags {
            rpc_address: String::new(),
            rpc_port: 0,
            max_connections: tidewire_master::server::DEFAULT_MAX_CONNECTIONS,
            metrics_host: None,
            metrics_port: 0,
            enable_metric_reporting: false,
            enable_http_metadata_server: false,
            http_metadata_server_host: String::new(),
            http_metadata_server_port: 0,
            master: MasterConfig::default(),
            ha: None,
            kv_events: None,
            idle_timeout: None,
            notes: Vec::new(),
        },
        enable_ha: false,
        ha: HaFlags {
            endpoints: String::new(),
            lease_ttl: 0,
            oplog: false,
            cluster_id: String::new(),
        },
        rpc_interface: None,
        enable_kv_events: false,
        kv: KvConfig::default(),
    };
    // Every refused flag given, reported together.
    let mut refusals = Vec::new();
    // Every default comes from the table.
    for f in all_flags() {
        if let Some(d) = f.default {
            (f.set)(&mut p, f.name, d).map_err(|e| format!("default of --{}: {e}", f.name))?;
        }
    }
    let mut i = 0;
    while i < args.len() {
        let a = &args[i];
        i += 1;
        let body = a
            .strip_prefix("--")
            .or_else(|| a.strip_prefix('-'))
            .ok_or_else(|| format!("unexpected argument {a:?} (flags look like --name=value)"))?;
        let (name, value) = match body.split_once('=') {
            Some((n, v)) => (n, Some(v)),
            None => (body, None),
        };
        // gflags' `--noflag`: a boolean flag set to false.
        let (name, value, flag) = match (find(name), name.strip_prefix("no").and_then(find)) {
            (None, Some(f)) if f.is_bool() && value.is_none() => (f.name, Some("false"), Some(f)),
            (f, _) => (name, value, f),
        };
        if let Some(Flag {
            kind: Kind::Help, ..
        }) = flag
        {
            return Ok(None);
        }
        let is_bool = flag.is_some_and(Flag::is_bool);
        let value = match value {
            Some(v) => v,
            None if is_bool => "true",
            None => {
                let v = args
                    .get(i)
                    .ok_or_else(|| format!("--{name} needs a value"))?;
                i += 1;
                v
            }
        };
        let flag = flag.ok_or_else(|| format!("unknown flag --{name} (see --help)"))?;
        match &flag.refused {
            Some(r) if !r.is_off(flag, value) => refusals.push(r.message(flag.name)),
            Some(_) => {}
            None => (flag.set)(&mut p, name, value)?,
        }
    }
    if !refusals.is_empty() {
        return Err(refusals.join("\n"));
    }
    if let Some(i) = p.rpc_interface.take() {
        p.flags.rpc_address = interface_ipv4(&i).ok_or_else(|| {
            format!("--rpc_interface={i}: no such interface with an IPv4 address")
        })?;
    }
    if p.enable_ha {
        if p.ha.endpoints.trim().is_empty() {
            return Err("--enable_ha needs --etcd_endpoints or --ha_backend_connstring".into());
        }
        p.flags.ha = Some(p.ha);
    }
    if p.enable_kv_events {
        if p.kv.bind_endpoint.trim().is_empty() {
            return Err("--enable_kv_events needs --kv_events_bind_endpoint".into());
        }
        if p.kv.backend_id.trim().is_empty() {
            return Err(
                "--enable_kv_events needs --kv_events_backend_id (every event names it)".into(),
            );
        }
        if p.kv.tenant_id.is_empty() {
            p.kv.tenant_id = "default".into();
        }
        p.flags.kv_events = Some(p.kv);
    }
    Ok(Some(p.flags))
}

/// The first IPv4 address of the network interface `name` (Mooncake's `--rpc_interface`).
pub fn interface_ipv4(name: &str) -> Option<String> {
    let mut list: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills `list` with a linked list freed below.
    if unsafe { libc::getifaddrs(&mut list) } != 0 {
        return None;
    }
    let mut found = None;
    let mut cur = list;
    while !cur.is_null() && found.is_none() {
        // SAFETY: `cur` is a node of the list getifaddrs returned, alive until freeifaddrs.
        let ifa = unsafe { &*cur };
        // SAFETY: ifa_name is a NUL-terminated string of the node.
        let this = unsafe { std::ffi::CStr::from_ptr(ifa.ifa_name) };
        // SAFETY: a non-NULL ifa_addr points at a sockaddr whose family says its real type.
        let family = (!ifa.ifa_addr.is_null()).then(|| unsafe { (*ifa.ifa_addr).sa_family });
        if this.to_bytes() == name.as_bytes() && family.map(i32::from) == Some(libc::AF_INET) {
            // SAFETY: the family is AF_INET, so this is a sockaddr_in.
            let sin = unsafe { &*(ifa.ifa_addr as *const libc::sockaddr_in) };
            found = Some(std::net::Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr)).to_string());
        }
        cur = ifa.ifa_next;
    }
    // SAFETY: `list` came from getifaddrs and is freed once.
    unsafe { libc::freeifaddrs(list) };
    found
}

#[cfg(test)]
mod tests;
