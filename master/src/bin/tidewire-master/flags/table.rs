//! [`FLAGS`]: the one table of the master's command-line flags. The `--help` text, the parser's
//! names, aliases and boolean forms, and every default come from it: a new flag is one row.

use super::{Flag, Kind, boolean, duration, number, ratio};
use std::time::Duration;
use tidewire_master::segments::Strategy;

/// Every flag, in `--help` order. `{}` in a help text stands for the row's default; a `\n`
/// continues the help on the next line, aligned under the first.
pub const FLAGS: &[Flag] = &[
    Flag {
        name: "rpc_address",
        aliases: &[],
        kind: Kind::Value("A"),
        default: Some("0.0.0.0"),
        help: "address to bind (default {})",
        set: |p, _, v| {
            p.flags.rpc_address = v.to_string();
            Ok(())
        },
    },
    Flag {
        name: "rpc_port",
        aliases: &["port"],
        kind: Kind::Value("P"),
        default: Some("50051"),
        help: "RPC port (default {})",
        set: |p, n, v| number(n, v).map(|x| p.flags.rpc_port = x),
    },
    Flag {
        name: "max_connections",
        aliases: &[],
        kind: Kind::Value("N"),
        default: Some("16384"),
        help: "most client connections open at once (default {};\nidle ones cost no thread)",
        // 0 keeps the current cap (the default's).
        set: |p, n, v| {
            let x: usize = number(n, v)?;
            if x > 0 {
                p.flags.max_connections = x;
            }
            Ok(())
        },
    },
    Flag {
        name: "rpc_thread_num",
        aliases: &["max_threads"],
        kind: Kind::Value("N"),
        default: None,
        help: "accepted for mooncake_master's command lines; threads\nfollow the CPU count here, not this number",
        set: |_, n, v| number::<usize>(n, v).map(drop),
    },
    Flag {
        name: "client_ttl",
        aliases: &[],
        kind: Kind::Value("S"),
        default: Some("10"),
        help: "seconds without a heartbeat before a client's segments\ntake no new placements ({})",
        set: |p, n, v| seconds(n, v).map(|d| p.flags.master.client_ttl = d),
    },
    Flag {
        name: "client_grace_sec",
        aliases: &[],
        kind: Kind::Value("S"),
        default: Some("10"),
        help: "further silent seconds before they are dropped with their\nobjects; a client that pings within them keeps all ({})",
        set: |p, n, v| seconds(n, v).map(|d| p.flags.master.client_grace = d),
    },
    Flag {
        name: "max_read_hold_sec",
        aliases: &[],
        kind: Kind::Value("S"),
        default: Some("120"),
        help: "longest a read hold lasts past its lease while the reader's\nheartbeats arrive ({})",
        set: |p, n, v| seconds(n, v).map(|d| p.flags.master.read_hold_max = d),
    },
    Flag {
        name: "default_kv_lease_ttl",
        aliases: &[],
        kind: Kind::Value("D"),
        default: Some("10000"),
        help: "read lease, ms or 10s/5m/1h style ({})",
        set: |p, n, v| duration(n, v).map(|d| p.flags.master.lease_ttl = d),
    },
    Flag {
        name: "default_kv_soft_pin_ttl",
        aliases: &[],
        kind: Kind::Value("D"),
        default: Some("1800000"),
        help: "soft-pin TTL, same format ({})",
        set: |p, n, v| duration(n, v).map(|d| p.flags.master.soft_pin_ttl = d),
    },
    Flag {
        name: "allow_evict_soft_pinned_objects",
        aliases: &[],
        kind: Kind::Bool,
        default: Some("true"),
        help: "({})",
        set: |p, n, v| boolean(n, v).map(|b| p.flags.master.allow_evict_soft_pinned = b),
    },
    Flag {
        name: "eviction_high_watermark_ratio",
        aliases: &[],
        kind: Kind::Value("F"),
        default: Some("0.90"),
        help: "usage that starts eviction ({})",
        set: |p, n, v| ratio(n, v).map(|f| p.flags.master.eviction_high_watermark = f),
    },
    Flag {
        name: "eviction_ratio",
        aliases: &[],
        kind: Kind::Value("F"),
        default: Some("0.05"),
        help: "fraction of capacity freed per pass ({})",
        set: |p, n, v| ratio(n, v).map(|f| p.flags.master.eviction_ratio = f),
    },
    Flag {
        name: "put_start_discard_timeout_sec",
        aliases: &[],
        kind: Kind::Value("S"),
        default: Some("30"),
        help: "unfinished writes discarded after ({})",
        set: |p, n, v| seconds(n, v).map(|d| p.flags.master.put_start_discard_timeout = d),
    },
    Flag {
        name: "put_start_release_timeout_sec",
        aliases: &[],
        kind: Kind::Value("S"),
        default: Some("600"),
        help: "a discarded or pre-empted write's space is reused after\n({}), or at once when its writer reports",
        set: |p, n, v| seconds(n, v).map(|d| p.flags.master.put_start_release_timeout = d),
    },
    Flag {
        name: "allocation_strategy",
        aliases: &[],
        kind: Kind::Value("S"),
        default: Some("random"),
        help: "random | free_ratio_first | local_first ({})",
        set: |p, _, v| Strategy::parse(v).map(|s| p.flags.master.strategy = s),
    },
    Flag {
        name: "enable_http_metadata_server",
        aliases: &[],
        kind: Kind::Bool,
        default: Some("false"),
        help: "serve HTTP metadata ({})",
        set: |p, n, v| boolean(n, v).map(|b| p.flags.enable_http_metadata_server = b),
    },
    Flag {
        name: "http_metadata_server_host",
        aliases: &[],
        kind: Kind::Value("H"),
        default: Some("0.0.0.0"),
        help: "(default {})",
        set: |p, _, v| {
            p.flags.http_metadata_server_host = v.to_string();
            Ok(())
        },
    },
    Flag {
        name: "http_metadata_server_port",
        aliases: &[],
        kind: Kind::Value("P"),
        default: Some("8080"),
        help: "(default {})",
        set: |p, n, v| number(n, v).map(|x| p.flags.http_metadata_server_port = x),
    },
    Flag {
        name: "metrics_host",
        aliases: &[],
        kind: Kind::Value("H"),
        default: None,
        help: "(default: the rpc address)",
        set: |p, _, v| {
            p.flags.metrics_host = Some(v.to_string());
            Ok(())
        },
    },
    Flag {
        name: "metrics_port",
        aliases: &[],
        kind: Kind::Value("P"),
        default: Some("9003"),
        help: "admin HTTP: /metrics, /health, /get_all_segments, ... ({})",
        set: |p, n, v| number(n, v).map(|x| p.flags.metrics_port = x),
    },
    Flag {
        name: "enable_metric_reporting",
        aliases: &[],
        kind: Kind::Bool,
        default: Some("true"),
        help: "serve the admin HTTP routes ({})",
        set: |p, n, v| boolean(n, v).map(|b| p.flags.enable_metric_reporting = b),
    },
    Flag {
        name: "memory_allocator",
        aliases: &[],
        kind: Kind::Value("offset"),
        default: Some("offset"),
        help: "accepted (offset is the only allocator)",
        set: |_, _, v| match v {
            "offset" => Ok(()),
            _ => Err(format!("--memory_allocator={v}: only offset is supported")),
        },
    },
    Flag {
        name: "rpc_enable_tcp_no_delay",
        aliases: &[],
        kind: Kind::Hidden(&Kind::Bool),
        default: None,
        help: "accepted for mooncake_master's command lines (connections are always no-delay)",
        set: |_, n, v| boolean(n, v).map(drop),
    },
    Flag {
        name: "enable_ha",
        aliases: &[],
        kind: Kind::Bool,
        default: Some("false"),
        help: "elect one serving master through etcd ({})",
        set: |p, n, v| boolean(n, v).map(|b| p.enable_ha = b),
    },
    Flag {
        name: "etcd_endpoints",
        aliases: &[],
        kind: Kind::Value("H:P;H:P"),
        default: None,
        help: "etcd for HA (or --ha_backend_connstring)",
        // --ha_backend_connstring wins, in whichever order the two come.
        set: |p, _, v| {
            if p.ha.endpoints.is_empty() {
                p.ha.endpoints = v.to_string();
            }
            Ok(())
        },
    },
    Flag {
        name: "ha_backend_connstring",
        aliases: &[],
        kind: Kind::Hidden(&Kind::Value("H:P;H:P")),
        default: None,
        help: "etcd for HA; overrides --etcd_endpoints",
        set: |p, _, v| {
            p.ha.endpoints = v.to_string();
            Ok(())
        },
    },
    Flag {
        name: "ha_backend_type",
        aliases: &[],
        kind: Kind::Value("etcd"),
        default: Some("etcd"),
        help: "the only backend",
        set: |_, _, v| match v {
            "etcd" => Ok(()),
            _ => Err(format!("--ha_backend_type={v}: only etcd is supported")),
        },
    },
    Flag {
        name: "ha_lease_ttl",
        aliases: &[],
        kind: Kind::Value("S"),
        default: Some("5"),
        help: "leader lease, seconds ({})",
        set: |p, n, v| {
            let s: i64 = number(n, v)?;
            if !(1..=600).contains(&s) {
                return Err(format!("--ha_lease_ttl={v}: 1..=600 seconds"));
            }
            p.ha.lease_ttl = s;
            Ok(())
        },
    },
    Flag {
        name: "enable_oplog",
        aliases: &[],
        kind: Kind::Bool,
        default: Some("false"),
        help: "HA: keep objects in etcd across failover ({}: lost)",
        set: |p, n, v| boolean(n, v).map(|b| p.ha.oplog = b),
    },
    Flag {
        name: "enable_offload",
        aliases: &[],
        kind: Kind::Bool,
        default: Some("false"),
        help: "let clients mount a disk tier (setup's enable_ssd_offload)\nand write objects to it ({})",
        set: |p, n, v| boolean(n, v).map(|b| p.flags.master.tier.enabled = b),
    },
    Flag {
        name: "offload_on_evict",
        aliases: &[],
        kind: Kind::Bool,
        default: Some("false"),
        help: "write an object to disk only when eviction picks it, not\nafter every put ({})",
        set: |p, n, v| boolean(n, v).map(|b| p.flags.master.tier.on_evict = b),
    },
    Flag {
        name: "offload_force_evict",
        aliases: &[],
        kind: Kind::Bool,
        default: Some("false"),
        help: "with offload_on_evict: drop an object eviction picks when\nthe write queue is full, instead of keeping it ({})",
        set: |p, n, v| boolean(n, v).map(|b| p.flags.master.tier.force_evict = b),
    },
    Flag {
        name: "offloading_queue_limit",
        aliases: &[],
        kind: Kind::Value("N"),
        default: Some("50000"),
        help: "most objects waiting to be written to disk ({}); past it\nthey stay in memory (counted in the metrics)",
        set: |p, n, v| number(n, v).map(|x: usize| p.flags.master.tier.queue_limit = x.max(1)),
    },
    Flag {
        name: "disk_dormant_sec",
        aliases: &[],
        kind: Kind::Value("S"),
        default: Some("3600"),
        help: "a disk tier whose owner went silent keeps its records\nknown this long for the owner's restart ({})",
        set: |p, n, v| seconds(n, v).map(|d| p.flags.master.tier.dormant_ttl = d),
    },
    Flag {
        name: "help",
        aliases: &["h"],
        kind: Kind::Help,
        default: None,
        help: "this text",
        set: |_, _, _| Ok(()),
    },
];

/// Whole seconds.
fn seconds(name: &str, v: &str) -> Result<Duration, String> {
    number(name, v).map(Duration::from_secs)
}
