//! [`HONOURED`]: the flags the master honours, the first part of its one table of command-line
//! flags (the rest: `refused.rs`). The `--help` text, the parser's
//! names, aliases and boolean forms, and every default come from it: a new flag is one row.

use super::{Flag, Kind, boolean, duration, number, ratio};
use std::time::Duration;
use tidewire_master::segments::Strategy;

/// Every flag tidewire honours, in `--help` order (the refused ones are in `refused.rs`). `{}` in a help text stands for the row's default; a `\n`
/// continues the help on the next line, aligned under the first.
pub const HONOURED: &[Flag] = &[
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
        refused: None,
    },
    Flag {
        name: "rpc_interface",
        aliases: &[],
        kind: Kind::Value("IF"),
        default: None,
        help: "a network interface whose IPv4 address replaces\n--rpc_address",
        // Empty: not set (Mooncake's default).
        set: |p, _, v| {
            p.rpc_interface = Some(v.trim().to_string()).filter(|i| !i.is_empty());
            Ok(())
        },
        refused: None,
    },
    Flag {
        name: "rpc_port",
        aliases: &["port"],
        kind: Kind::Value("P"),
        default: Some("50051"),
        help: "RPC port (default {})",
        set: |p, n, v| number(n, v).map(|x| p.flags.rpc_port = x),
        refused: None,
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
        refused: None,
    },
    Flag {
        name: "rpc_conn_timeout_seconds",
        aliases: &[],
        kind: Kind::Value("S"),
        default: None,
        help: "an RPC connection idle this long is closed; 0: never\n(not given: 300)",
        set: |p, n, v| {
            let s: u64 = number(n, v)?;
            p.flags.idle_timeout = Some(if s == 0 {
                NEVER
            } else {
                Duration::from_secs(s)
            });
            Ok(())
        },
        refused: None,
    },
    Flag {
        name: "rpc_thread_num",
        aliases: &["max_threads"],
        kind: Kind::Value("N"),
        default: None,
        help: "read, but no effect (said at start): the RPC server's\nthreads follow the requests in flight",
        set: |p, n, v| {
            let x: usize = number(n, v)?;
            p.flags.notes.push(format!(
                "--{n}={x} has no effect: the RPC server's threads follow the requests in flight \
                 (max(2, CPUs) stay, more start while requests wait)"
            ));
            Ok(())
        },
        refused: None,
    },
    Flag {
        name: "client_ttl",
        aliases: &[],
        kind: Kind::Value("S"),
        default: Some("10"),
        help: "seconds without a heartbeat before a client's segments\ntake no new placements ({})",
        set: |p, n, v| seconds(n, v).map(|d| p.flags.master.client_ttl = d),
        refused: None,
    },
    Flag {
        name: "client_grace_sec",
        aliases: &[],
        kind: Kind::Value("S"),
        default: Some("10"),
        help: "further silent seconds before they are dropped with their\nobjects; a client that pings within them keeps all ({})",
        set: |p, n, v| seconds(n, v).map(|d| p.flags.master.client_grace = d),
        refused: None,
    },
    Flag {
        name: "max_read_hold_sec",
        aliases: &[],
        kind: Kind::Value("S"),
        default: Some("120"),
        help: "longest a read hold lasts past its lease while the reader's\nheartbeats arrive ({})",
        set: |p, n, v| seconds(n, v).map(|d| p.flags.master.read_hold_max = d),
        refused: None,
    },
    Flag {
        name: "default_kv_lease_ttl",
        aliases: &[],
        kind: Kind::Value("D"),
        default: Some("10000"),
        help: "read lease, ms or 10s/5m/1h style ({})",
        set: |p, n, v| duration(n, v).map(|d| p.flags.master.lease_ttl = d),
        refused: None,
    },
    Flag {
        name: "default_kv_soft_pin_ttl",
        aliases: &[],
        kind: Kind::Value("D"),
        default: Some("1800000"),
        help: "soft-pin TTL, same format ({})",
        set: |p, n, v| duration(n, v).map(|d| p.flags.master.soft_pin_ttl = d),
        refused: None,
    },
    Flag {
        name: "allow_evict_soft_pinned_objects",
        aliases: &[],
        kind: Kind::Bool,
        default: Some("true"),
        help: "({})",
        set: |p, n, v| boolean(n, v).map(|b| p.flags.master.allow_evict_soft_pinned = b),
        refused: None,
    },
    Flag {
        name: "eviction_high_watermark_ratio",
        aliases: &[],
        kind: Kind::Value("F"),
        default: Some("0.90"),
        help: "usage that starts eviction ({})",
        set: |p, n, v| ratio(n, v).map(|f| p.flags.master.eviction_high_watermark = f),
        refused: None,
    },
    Flag {
        name: "eviction_ratio",
        aliases: &[],
        kind: Kind::Value("F"),
        default: Some("0.05"),
        help: "fraction of capacity freed per pass ({})",
        set: |p, n, v| ratio(n, v).map(|f| p.flags.master.eviction_ratio = f),
        refused: None,
    },
    Flag {
        name: "put_start_discard_timeout_sec",
        aliases: &[],
        kind: Kind::Value("S"),
        default: Some("30"),
        help: "unfinished writes discarded after ({})",
        set: |p, n, v| seconds(n, v).map(|d| p.flags.master.put_start_discard_timeout = d),
        refused: None,
    },
    Flag {
        name: "put_start_release_timeout_sec",
        aliases: &[],
        kind: Kind::Value("S"),
        default: Some("600"),
        help: "a discarded or pre-empted write's space is reused after\n({}), or at once when its writer reports",
        set: |p, n, v| seconds(n, v).map(|d| p.flags.master.put_start_release_timeout = d),
        refused: None,
    },
    Flag {
        name: "allocation_strategy",
        aliases: &[],
        kind: Kind::Value("S"),
        default: Some("random"),
        help: "random | free_ratio_first | local_first ({})",
        set: |p, n, v| match v {
            "cxl" => Err(format!(
                "--{n}=cxl: tidewire has no CXL memory tier (random | free_ratio_first | local_first)"
            )),
            "ssd_free_ratio_first" => Err(format!(
                "--{n}=ssd_free_ratio_first: tidewire has no SSD segments \
                 (random | free_ratio_first | local_first)"
            )),
            _ => Strategy::parse(v)
                .map(|s| p.flags.master.strategy = s)
                .map_err(|e| format!("--{n}: {e}")),
        },
        refused: None,
    },
    Flag {
        name: "enable_http_metadata_server",
        aliases: &[],
        kind: Kind::Bool,
        default: Some("false"),
        help: "serve HTTP metadata ({})",
        set: |p, n, v| boolean(n, v).map(|b| p.flags.enable_http_metadata_server = b),
        refused: None,
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
        refused: None,
    },
    Flag {
        name: "http_metadata_server_port",
        aliases: &[],
        kind: Kind::Value("P"),
        default: Some("8080"),
        help: "(default {})",
        set: |p, n, v| number(n, v).map(|x| p.flags.http_metadata_server_port = x),
        refused: None,
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
        refused: None,
    },
    Flag {
        name: "metrics_port",
        aliases: &[],
        kind: Kind::Value("P"),
        default: Some("9003"),
        help: "admin HTTP: /metrics, /health, /get_all_segments, ... ({})",
        set: |p, n, v| number(n, v).map(|x| p.flags.metrics_port = x),
        refused: None,
    },
    Flag {
        name: "enable_metric_reporting",
        aliases: &[],
        kind: Kind::Bool,
        default: Some("true"),
        help: "serve the admin HTTP routes ({})",
        set: |p, n, v| boolean(n, v).map(|b| p.flags.enable_metric_reporting = b),
        refused: None,
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
        refused: None,
    },
    Flag {
        name: "rpc_enable_tcp_no_delay",
        aliases: &[],
        kind: Kind::Hidden(&Kind::Bool),
        default: None,
        help: "connections are always no-delay: true is accepted, false refused",
        set: |_, n, v| match boolean(n, v)? {
            true => Ok(()),
            false => Err(format!(
                "--{n}=false: tidewire's connections are always TCP_NODELAY"
            )),
        },
        refused: None,
    },
    Flag {
        name: "enable_ha",
        aliases: &[],
        kind: Kind::Bool,
        default: Some("false"),
        help: "elect one serving master through etcd ({})",
        set: |p, n, v| boolean(n, v).map(|b| p.enable_ha = b),
        refused: None,
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
        refused: None,
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
        refused: None,
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
        refused: None,
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
        refused: None,
    },
    Flag {
        name: "enable_oplog",
        aliases: &[],
        kind: Kind::Bool,
        default: Some("false"),
        help: "HA: keep objects in etcd across failover ({}: lost)",
        set: |p, n, v| boolean(n, v).map(|b| p.ha.oplog = b),
        refused: None,
    },
    Flag {
        name: "cluster_id",
        aliases: &[],
        kind: Kind::Value("ID"),
        default: None,
        help: "HA: the cluster's name in etcd's keys (not given:\n$MC_STORE_CLUSTER_ID, else mooncake_cluster)",
        // A trailing `/` is dropped, as Mooncake drops it.
        set: |p, _, v| {
            let v = v.trim();
            p.ha.cluster_id = v.strip_suffix('/').unwrap_or(v).to_string();
            Ok(())
        },
        refused: None,
    },
    Flag {
        name: "enable_offload",
        aliases: &[],
        kind: Kind::Bool,
        default: Some("false"),
        help: "let clients mount a disk tier (setup's enable_ssd_offload)\nand write objects to it ({})",
        set: |p, n, v| boolean(n, v).map(|b| p.flags.master.tier.enabled = b),
        refused: None,
    },
    Flag {
        name: "offload_on_evict",
        aliases: &[],
        kind: Kind::Bool,
        default: Some("false"),
        help: "write an object to disk only when eviction picks it, not\nafter every put ({})",
        set: |p, n, v| boolean(n, v).map(|b| p.flags.master.tier.on_evict = b),
        refused: None,
    },
    Flag {
        name: "offload_force_evict",
        aliases: &[],
        kind: Kind::Bool,
        default: Some("false"),
        help: "with offload_on_evict: drop an object eviction picks when\nthe write queue is full, instead of keeping it ({})",
        set: |p, n, v| boolean(n, v).map(|b| p.flags.master.tier.force_evict = b),
        refused: None,
    },
    Flag {
        name: "enable_kv_events",
        aliases: &[],
        kind: Kind::Bool,
        default: Some("false"),
        help: "publish which keys are stored on a ZMQ PUB socket\n(Mooncake's KV events; {})",
        set: |p, n, v| boolean(n, v).map(|b| p.enable_kv_events = b),
        refused: None,
    },
    Flag {
        name: "kv_events_bind_endpoint",
        aliases: &[],
        kind: Kind::Value("EP"),
        default: Some("tcp://0.0.0.0:5557"),
        help: "ZMQ endpoint the KV-event PUB socket binds\n({})",
        set: |p, _, v| {
            p.kv.bind_endpoint = v.trim().to_string();
            Ok(())
        },
        refused: None,
    },
    Flag {
        name: "kv_events_backend_id",
        aliases: &[],
        kind: Kind::Value("ID"),
        default: None,
        help: "backend_id of every KV event (required with\n--enable_kv_events)",
        set: |p, _, v| {
            p.kv.backend_id = v.trim().to_string();
            Ok(())
        },
        refused: None,
    },
    Flag {
        name: "kv_events_queue_capacity",
        aliases: &[],
        kind: Kind::Value("N"),
        default: Some("65536"),
        help: "KV events waiting to be sent at most ({}; 0: no bound);\npast it the oldest is dropped and counted",
        set: |p, n, v| number(n, v).map(|x| p.kv.queue_capacity = x),
        refused: None,
    },
    Flag {
        name: "kv_events_replay_bytes",
        aliases: &[],
        kind: Kind::Value("B"),
        default: Some("67108864"),
        help: "bytes of recent KV-event messages kept for\nGET /kv_events/replay ({})",
        set: |p, n, v| number(n, v).map(|x| p.kv.replay_bytes = x),
        refused: None,
    },
    Flag {
        name: "kv_events_emit_legacy_compat",
        aliases: &[],
        kind: Kind::Bool,
        default: Some("true"),
        help: "add the legacy type, block_hashes, parent_block_hash\nfields to KV events ({})",
        set: |p, n, v| boolean(n, v).map(|b| p.kv.emit_legacy_compat = b),
        refused: None,
    },
    Flag {
        name: "kv_events_emit_object_key",
        aliases: &[],
        kind: Kind::Bool,
        default: Some("true"),
        help: "add object_key to KV events ({})",
        set: |p, n, v| boolean(n, v).map(|b| p.kv.emit_object_key = b),
        refused: None,
    },
    Flag {
        name: "kv_events_tenant_id",
        aliases: &[],
        kind: Kind::Value("T"),
        default: Some("default"),
        help: "tenant_id of every KV event ({})",
        set: |p, _, v| {
            p.kv.tenant_id = v.trim().to_string();
            Ok(())
        },
        refused: None,
    },
    Flag {
        name: "kv_events_model_name",
        aliases: &[],
        kind: Kind::Value("M"),
        default: None,
        help: "model_name of every KV event (not given: nil)",
        set: |p, _, v| {
            p.kv.model_name = v.to_string();
            Ok(())
        },
        refused: None,
    },
    Flag {
        name: "kv_events_block_size",
        aliases: &[],
        kind: Kind::Value("N"),
        default: Some("0"),
        help: "block_size of every KV event ({}; 0: nil)",
        set: |p, n, v| number(n, v).map(|x| p.kv.block_size = x),
        refused: None,
    },
    Flag {
        name: "kv_events_additional_salt",
        aliases: &[],
        kind: Kind::Value("S"),
        default: None,
        help: "additional_salt of every KV event (not given: nil)",
        set: |p, _, v| {
            p.kv.additional_salt = v.to_string();
            Ok(())
        },
        refused: None,
    },
    Flag {
        name: "kv_events_lora_name",
        aliases: &[],
        kind: Kind::Value("L"),
        default: None,
        help: "lora_name of every KV event (not given: nil)",
        set: |p, _, v| {
            p.kv.lora_name = v.to_string();
            Ok(())
        },
        refused: None,
    },
    Flag {
        name: "kv_events_dp_rank",
        aliases: &[],
        kind: Kind::Value("N"),
        default: Some("0"),
        help: "dp_rank of every KV event and message ({})",
        set: |p, n, v| number(n, v).map(|x| p.kv.dp_rank = x),
        refused: None,
    },
    Flag {
        name: "offloading_queue_limit",
        aliases: &[],
        kind: Kind::Value("N"),
        default: Some("50000"),
        help: "most objects waiting to be written to disk ({}); past it\nthey stay in memory (counted in the metrics)",
        set: |p, n, v| number(n, v).map(|x: usize| p.flags.master.tier.queue_limit = x.max(1)),
        refused: None,
    },
    Flag {
        name: "promotion_on_hit",
        aliases: &[],
        kind: Kind::Bool,
        default: Some("false"),
        help: "a disk-only object read often enough is read back into its\ntier owner's memory ({})",
        set: |p, n, v| boolean(n, v).map(|b| p.flags.master.tier.promotion_on_hit = b),
        refused: None,
    },
    Flag {
        name: "promotion_admission_threshold",
        aliases: &[],
        kind: Kind::Value("N"),
        default: Some("2"),
        help: "reads of a disk-only object that earn its promotion ({})",
        set: |p, n, v| {
            number(n, v).map(|x: u32| p.flags.master.tier.promotion_threshold = x.max(1))
        },
        refused: None,
    },
    Flag {
        name: "promotion_max_per_heartbeat",
        aliases: &[],
        kind: Kind::Value("N"),
        default: Some("16"),
        help: "promotions handed to a tier's owner per poll ({}; it polls\nevery 1-20 ms, Mooncake's clients every heartbeat)",
        set: |p, n, v| {
            number(n, v).map(|x: usize| p.flags.master.tier.promotion_per_poll = x.max(1))
        },
        refused: None,
    },
    Flag {
        name: "promotion_queue_limit",
        aliases: &[],
        kind: Kind::Value("N"),
        default: Some("50000"),
        help: "most promotions waiting or running ({})",
        set: |p, n, v| number(n, v).map(|x: usize| p.flags.master.tier.promotion_queue_limit = x),
        refused: None,
    },
    Flag {
        name: "disk_dormant_sec",
        aliases: &[],
        kind: Kind::Value("S"),
        default: Some("3600"),
        help: "a disk tier whose owner went silent keeps its records\nknown this long for the owner's restart ({})",
        set: |p, n, v| seconds(n, v).map(|d| p.flags.master.tier.dormant_ttl = d),
        refused: None,
    },
    Flag {
        name: "help",
        aliases: &["h"],
        kind: Kind::Help,
        default: None,
        help: "this text",
        set: |_, _, _| Ok(()),
        refused: None,
    },
];

/// `--rpc_conn_timeout_seconds=0`: a connection is never closed for being idle (ten years).
const NEVER: Duration = Duration::from_secs(10 * 365 * 24 * 3600);

/// Whole seconds.
fn seconds(name: &str, v: &str) -> Result<Duration, String> {
    number(name, v).map(Duration::from_secs)
}
