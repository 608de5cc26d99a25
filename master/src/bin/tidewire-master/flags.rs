//! mooncake_master's command line: `-flag=value` and `--flag=value` (and `--flag value`; a bare
//! boolean flag means true). Unknown flags are an error.

use std::time::Duration;
use tidewire_master::MasterConfig;
use tidewire_master::segments::Strategy;

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

pub const USAGE: &str = "\
tidewire-master: the tidewire Store master (accepts mooncake_master's flags, -f=v or --f=v)

  --rpc_address=A                    address to bind (default 0.0.0.0)
  --rpc_port=P                       RPC port (default 50051)
  --max_connections=N                most client connections open at once (default 16384;
                                     idle ones cost no thread)
  --rpc_thread_num=N                 accepted for mooncake_master's command lines; threads
                                     follow the CPU count here, not this number
  --client_ttl=S                     seconds without a heartbeat before a client's segments
                                     take no new placements (10)
  --client_grace_sec=S               further silent seconds before they are dropped with their
                                     objects; a client that pings within them keeps all (10)
  --max_read_hold_sec=S              longest a read hold lasts past its lease while the reader's
                                     heartbeats arrive (120)
  --default_kv_lease_ttl=D           read lease, ms or 10s/5m/1h style (10000)
  --default_kv_soft_pin_ttl=D        soft-pin TTL, same format (1800000)
  --allow_evict_soft_pinned_objects=B  (true)
  --eviction_high_watermark_ratio=F  usage that starts eviction (0.90)
  --eviction_ratio=F                 fraction of capacity freed per pass (0.05)
  --put_start_discard_timeout_sec=S  unfinished writes discarded after (30)
  --put_start_release_timeout_sec=S  a discarded or pre-empted write's space is reused after
                                     (600), or at once when its writer reports
  --allocation_strategy=S            random | free_ratio_first | local_first (random)
  --enable_http_metadata_server=B    serve HTTP metadata (false)
  --http_metadata_server_host=H      (default 0.0.0.0)
  --http_metadata_server_port=P      (default 8080)
  --metrics_host=H                   (default: the rpc address)
  --metrics_port=P                   admin HTTP: /metrics, /health, /get_all_segments, ... (9003)
  --enable_metric_reporting=B        serve the admin HTTP routes (true)
  --memory_allocator=offset          accepted (offset is the only allocator)
  --enable_ha=B                      elect one serving master through etcd (false)
  --etcd_endpoints=H:P;H:P           etcd for HA (or --ha_backend_connstring)
  --ha_backend_type=etcd             the only backend
  --ha_lease_ttl=S                   leader lease, seconds (5)
  --enable_oplog=B                   HA: keep objects in etcd across failover (false: lost)
  --help                             this text

environment:
  TW_AUTH_KEY                        pre-shared key every Store client must prove (off if empty)
";

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
    let mut f = Flags {
        rpc_address: "0.0.0.0".into(),
        rpc_port: 50051,
        max_connections: tidewire_master::server::DEFAULT_MAX_CONNECTIONS,
        metrics_host: None,
        metrics_port: 9003,
        enable_metric_reporting: true,
        enable_http_metadata_server: false,
        http_metadata_server_host: "0.0.0.0".into(),
        http_metadata_server_port: 8080,
        master: MasterConfig::default(),
        ha: None,
    };
    let mut enable_ha = false;
    let mut ha = HaFlags {
        endpoints: String::new(),
        lease_ttl: 5,
        oplog: false,
    };
    let mut i = 0;
    while i < args.len() {
        let a = &args[i];
        i += 1;
        let body = a
            .strip_prefix("--")
            .or_else(|| a.strip_prefix('-'))
            .ok_or_else(|| format!("unexpected argument {a:?} (flags look like --name=value)"))?;
        let (name, value) = match body.split_once('=') {
            Some((n, v)) => (n.to_string(), Some(v.to_string())),
            None => (body.to_string(), None),
        };
        if name == "help" || name == "h" {
            return Ok(None);
        }
        const BOOLS: [&str; 6] = [
            "enable_ha",
            "enable_oplog",
            "allow_evict_soft_pinned_objects",
            "enable_http_metadata_server",
            "enable_metric_reporting",
            "rpc_enable_tcp_no_delay",
        ];
        let value = match value {
            Some(v) => v,
            None if BOOLS.contains(&name.as_str()) => "true".into(),
            None => {
                let v = args
                    .get(i)
                    .ok_or_else(|| format!("--{name} needs a value"))?;
                i += 1;
                v.clone()
            }
        };
        let v = value.as_str();
        let m = &mut f.master;
        match name.as_str() {
            "rpc_address" => f.rpc_address = v.to_string(),
            "rpc_port" | "port" => f.rpc_port = number(&name, v)?,
            "max_connections" => {
                let n: usize = number(&name, v)?;
                if n > 0 {
                    f.max_connections = n;
                }
            }
            "rpc_thread_num" | "max_threads" => {
                let _: usize = number(&name, v)?;
            }
            "client_ttl" => m.client_ttl = Duration::from_secs(number(&name, v)?),
            "client_grace_sec" => m.client_grace = Duration::from_secs(number(&name, v)?),
            "max_read_hold_sec" => m.read_hold_max = Duration::from_secs(number(&name, v)?),
            "default_kv_lease_ttl" => m.lease_ttl = duration(&name, v)?,
            "default_kv_soft_pin_ttl" => m.soft_pin_ttl = duration(&name, v)?,
            "allow_evict_soft_pinned_objects" => m.allow_evict_soft_pinned = boolean(&name, v)?,
            "eviction_high_watermark_ratio" => m.eviction_high_watermark = ratio(&name, v)?,
            "eviction_ratio" => m.eviction_ratio = ratio(&name, v)?,
            "put_start_discard_timeout_sec" => {
                m.put_start_discard_timeout = Duration::from_secs(number(&name, v)?)
            }
            "put_start_release_timeout_sec" => {
                m.put_start_release_timeout = Duration::from_secs(number(&name, v)?)
            }
            "allocation_strategy" => m.strategy = Strategy::parse(v)?,
            "memory_allocator" => {
                if v != "offset" {
                    return Err(format!("--memory_allocator={v}: only offset is supported"));
                }
            }
            "enable_http_metadata_server" => f.enable_http_metadata_server = boolean(&name, v)?,
            "http_metadata_server_host" => f.http_metadata_server_host = v.to_string(),
            "http_metadata_server_port" => f.http_metadata_server_port = number(&name, v)?,
            "metrics_host" => f.metrics_host = Some(v.to_string()),
            "metrics_port" => f.metrics_port = number(&name, v)?,
            "enable_metric_reporting" => f.enable_metric_reporting = boolean(&name, v)?,
            "rpc_enable_tcp_no_delay" => {
                boolean(&name, v)?;
            }
            "enable_ha" => enable_ha = boolean(&name, v)?,
            "enable_oplog" => ha.oplog = boolean(&name, v)?,
            "etcd_endpoints" => {
                if ha.endpoints.is_empty() {
                    ha.endpoints = v.to_string();
                }
            }
            "ha_backend_connstring" => ha.endpoints = v.to_string(),
            "ha_backend_type" => {
                if v != "etcd" {
                    return Err(format!("--ha_backend_type={v}: only etcd is supported"));
                }
            }
            "ha_lease_ttl" => {
                ha.lease_ttl = number(&name, v)?;
                if !(1..=600).contains(&ha.lease_ttl) {
                    return Err(format!("--ha_lease_ttl={v}: 1..=600 seconds"));
                }
            }
            other => return Err(format!("unknown flag --{other} (see --help)")),
        }
    }
    if enable_ha {
        if ha.endpoints.trim().is_empty() {
            return Err("--enable_ha needs --etcd_endpoints or --ha_backend_connstring".into());
        }
        f.ha = Some(ha);
    }
    Ok(Some(f))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn parses_transfer_queues_command_line() {
        let f = parse(&args(&[
            "-client_ttl=30",
            "-default_kv_lease_ttl=999999",
            "-default_kv_soft_pin_ttl=999999",
            "--allow_evict_soft_pinned_objects=false",
            "--rpc_address=127.0.0.1",
            "--rpc_port=5555",
            "--eviction_high_watermark_ratio=1.0",
            "--eviction_ratio=0.0",
            "--enable_http_metadata_server=true",
            "--http_metadata_server_host=127.0.0.1",
            "--http_metadata_server_port=5556",
        ]))
        .unwrap()
        .unwrap();
        assert_eq!(f.rpc_address, "127.0.0.1");
        assert_eq!(f.rpc_port, 5555);
        assert_eq!(f.master.client_ttl, Duration::from_secs(30));
        assert_eq!(f.master.lease_ttl, Duration::from_millis(999_999));
        assert!(!f.master.allow_evict_soft_pinned);
        assert!(f.enable_http_metadata_server);
        assert_eq!(f.http_metadata_server_port, 5556);
        assert_eq!(f.master.eviction_ratio, 0.0);
    }

    #[test]
    fn ha_flags_as_mooncake_spells_them() {
        let f = parse(&args(&["--enable_ha=true", "--etcd_endpoints=a:1;b:2"]))
            .unwrap()
            .unwrap();
        let ha = f.ha.unwrap();
        assert_eq!(
            (ha.endpoints.as_str(), ha.lease_ttl, ha.oplog),
            ("a:1;b:2", 5, false)
        );
        let f = parse(&args(&[
            "--enable_ha",
            "--ha_backend_connstring=c:3",
            "--etcd_endpoints=a:1",
            "--ha_lease_ttl=2",
            "--enable_oplog",
        ]))
        .unwrap()
        .unwrap();
        let ha = f.ha.unwrap();
        assert_eq!(
            (ha.endpoints.as_str(), ha.lease_ttl, ha.oplog),
            ("c:3", 2, true)
        );
        assert!(
            parse(&args(&["--etcd_endpoints=a:1"]))
                .unwrap()
                .unwrap()
                .ha
                .is_none()
        );
        assert!(
            parse(&args(&["--enable_ha=true"])).is_err(),
            "needs endpoints"
        );
        assert!(parse(&args(&["--ha_backend_type=redis"])).is_err());
        assert!(parse(&args(&["--ha_lease_ttl=0"])).is_err());
    }

    #[test]
    fn rejects_unknown_and_bad_values() {
        assert!(
            parse(&args(&["--nope=1"]))
                .unwrap_err()
                .contains("unknown flag")
        );
        assert!(parse(&args(&["--rpc_port=x"])).is_err());
        assert!(parse(&args(&["--eviction_ratio=2"])).is_err());
        assert!(parse(&args(&["rpc_port=1"])).is_err());
        assert!(parse(&args(&["--allocation_strategy=cxl"])).is_err());
        assert_eq!(duration("x", "5s").unwrap(), Duration::from_secs(5));
        assert_eq!(duration("x", "2m").unwrap(), Duration::from_secs(120));
        assert!(parse(&args(&["--help"])).unwrap().is_none());
    }
}
