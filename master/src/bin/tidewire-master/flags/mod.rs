//! mooncake_master's command line: `-flag=value` and `--flag=value` (and `--flag value`; a bare
//! boolean flag means true). Unknown flags are an error. The flags themselves are one table,
//! [`table::FLAGS`]: names, aliases, kinds, defaults and help.

mod table;

use std::time::Duration;
use table::FLAGS;
use tidewire_master::MasterConfig;

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
}

/// One flag: one row of [`FLAGS`].
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

/// The `--help` text, made from [`FLAGS`].
pub fn usage() -> String {
    let mut out = String::from(
        "tidewire-master: the tidewire Store master (accepts mooncake_master's flags, -f=v or --f=v)\n\n",
    );
    for f in FLAGS {
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
    out.push_str(ENVIRONMENT);
    out
}

/// The row of `name` (or of one of its aliases).
pub fn find(name: &str) -> Option<&'static Flag> {
    FLAGS
        .iter()
        .find(|f| f.name == name || f.aliases.contains(&name))
}

fn boolean(name: &str, v: &str) -> Result<bool, String> {
    match v.to_ascii_lowercase().as_str() {
        "" | "1" | "true" | "yes" => Ok(true),
        "0" | "false" | "no" => Ok(false),
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
        },
        enable_ha: false,
        ha: HaFlags {
            endpoints: String::new(),
            lease_ttl: 0,
            oplog: false,
        },
    };
    // Every default comes from the table.
    for f in FLAGS {
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
        let flag = find(name);
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
        (flag.set)(&mut p, name, value)?;
    }
    if p.enable_ha {
        if p.ha.endpoints.trim().is_empty() {
            return Err("--enable_ha needs --etcd_endpoints or --ha_backend_connstring".into());
        }
        p.flags.ha = Some(p.ha);
    }
    Ok(Some(p.flags))
}

#[cfg(test)]
mod tests;
