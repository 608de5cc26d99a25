//! [`REFUSED`]: mooncake_master's flags tidewire does not honour, the second part of the master's
//! one table of command-line flags: each is refused by name at start, with why.

use super::{Flag, Kind, Parsed, Refusal};

/// Every refused flag, in `--help` order after the honoured ones.
pub const REFUSED: &[Flag] = &[
    // Each is refused at start
    // (exit status 2) with `--name: <why>`; `off`, where given, is the one value that passes:
    // the value that means the feature is off, which is what tidewire does.
    refuse(
        "config_path",
        VALUE,
        Some(""),
        "tidewire-master reads no config file; give the settings as flags",
    ),
    refuse("enable_cxl", BOOL, Some("false"), CXL),
    refuse("cxl_path", VALUE, None, CXL),
    refuse("cxl_size", VALUE, None, CXL),
    refuse(
        "dynamic_replication_mode",
        VALUE,
        Some("off"),
        DYNAMIC_REPLICATION,
    ),
    refuse(
        "dynamic_replication_admission_qps_threshold",
        VALUE,
        None,
        DYNAMIC_REPLICATION,
    ),
    refuse(
        "dynamic_replication_heat_window_seconds",
        VALUE,
        None,
        DYNAMIC_REPLICATION,
    ),
    refuse(
        "dynamic_replication_max_memory_replicas",
        VALUE,
        None,
        DYNAMIC_REPLICATION,
    ),
    refuse("root_fs_dir", VALUE, Some(""), FILE_BACKEND),
    refuse("global_file_segment_size", VALUE, None, FILE_BACKEND),
    refuse("quota_bytes", VALUE, None, FILE_BACKEND),
    // Mooncake's default (true) asks for disk eviction; false is what tidewire does.
    refuse("enable_disk_eviction", BOOL, Some("false"), FILE_BACKEND),
    refuse("nof_eviction_high_watermark_ratio", VALUE, None, NOF),
    refuse("nof_eviction_ratio", VALUE, None, NOF),
    refuse("nof_heartbeat_failures_threshold", VALUE, None, NOF),
    refuse("nof_heartbeat_interval_sec", VALUE, None, NOF),
    refuse("nof_heartbeat_probe_timeout_ms", VALUE, None, NOF),
    refuse("enable_snapshot", BOOL, Some("false"), SNAPSHOT),
    refuse("enable_snapshot_restore", BOOL, Some("false"), SNAPSHOT),
    // Empty: no local backup ("if empty, local backup is disabled").
    refuse("snapshot_backup_dir", VALUE, Some(""), SNAPSHOT),
    // Empty: no catalog store (the connection string is optional).
    refuse(
        "snapshot_catalog_store_connstring",
        VALUE,
        Some(""),
        SNAPSHOT,
    ),
    refuse(
        "snapshot_catalog_backend_connstring",
        VALUE,
        Some(""),
        SNAPSHOT,
    ),
    // Empty picks the embedded catalog, a choice rather than "off".
    refuse("snapshot_catalog_store_type", VALUE, None, SNAPSHOT),
    refuse("snapshot_catalog_backend_type", VALUE, None, SNAPSHOT),
    refuse("snapshot_object_store_type", VALUE, None, SNAPSHOT),
    refuse("snapshot_payload_store_type", VALUE, None, SNAPSHOT),
    refuse("snapshot_payload_backend_type", VALUE, None, SNAPSHOT),
    refuse("snapshot_interval_seconds", VALUE, None, SNAPSHOT),
    refuse("snapshot_child_timeout_seconds", VALUE, None, SNAPSHOT),
    refuse("snapshot_retention_count", VALUE, None, SNAPSHOT),
    refuse("batch_oplog_retry_timeout_sec", VALUE, None, OPLOG),
    refuse("oplog_batch_max_entries", VALUE, None, OPLOG),
    refuse("oplog_poll_interval_ms", VALUE, None, OPLOG),
    refuse("pod_name", VALUE, None, K8S),
    refuse("pod_namespace", VALUE, None, K8S),
    refuse("enable_multi_tenants", BOOL, Some("false"), TENANTS),
    refuse("tenant_quota_connector_type", VALUE, None, TENANTS),
    // Empty: no quota connector.
    refuse("tenant_quota_connector_uri", VALUE, Some(""), TENANTS),
    refuse("max_retry_attempts", VALUE, None, TASKS),
    refuse("max_total_finished_tasks", VALUE, None, TASKS),
    refuse("max_total_pending_tasks", VALUE, None, TASKS),
    refuse("max_total_processing_tasks", VALUE, None, TASKS),
    refuse("pending_task_timeout_sec", VALUE, None, TASKS),
    refuse("processing_task_timeout_sec", VALUE, None, TASKS),
    refuse(
        "max_kv_soft_pin_ttl",
        VALUE,
        None,
        "tidewire's requests carry no soft-pin TTL of their own to bound; every soft pin lasts \
         --default_kv_soft_pin_ttl",
    ),
    refuse(
        "enable_metadata_cleanup_on_timeout",
        BOOL,
        Some("false"),
        "tidewire-master does not delete a silent client's HTTP metadata keys \
         (mooncake/ram/*, mooncake/rpc_meta/*)",
    ),
    // ---- Not yet supported. To switch one on, replace its row with an honoured one above.
    not_yet(
        "offload_cap_ratio",
        VALUE,
        None,
        "the write queue is bounded by --offloading_queue_limit alone",
    ),
];

// Why refused flags are refused, one text per missing feature.
const CXL: &str = "tidewire has no CXL memory tier; segments are the clients' registered memory";
const DYNAMIC_REPLICATION: &str = "tidewire has no dynamic MEMORY replication; a put's replica \
    count is its client's replica_num";
const FILE_BACKEND: &str = "tidewire has no shared file-system storage backend (DFS/3FS) and \
    no disk eviction; objects live in the clients' memory segments";
const NOF: &str = "tidewire has no NVMe-oF SSD segments";
const SNAPSHOT: &str = "tidewire-master takes and restores no snapshots; with --enable_ha \
    --enable_oplog its objects outlive a master in etcd instead";
const OPLOG: &str = "tidewire's HA journal is its own (etcd batches the leader writes at once, \
    read by a standby only when it takes over); there is no batch-record OpLog to size, poll or \
    retry";
const K8S: &str = "tidewire's HA elects through etcd only (--ha_backend_type=etcd); there is no \
    K8s backend";
const TENANTS: &str = "tidewire has no tenants (namespaces, quotas); all clients share one key \
    space";
const TASKS: &str = "tidewire-master's copy and move tasks keep Mooncake's defaults (10 tries, \
    10,000 pending and 10,000 finished tasks, 300 s timeouts), which are not configurable yet";

/// The kinds of refused rows, so that `--name value` takes its value as Mooncake's would.
const BOOL: &Kind = &Kind::Bool;
const VALUE: &Kind = &Kind::Value("V");

/// A flag refused at start: `--name: why`; `off` passes silently.
const fn refuse(
    name: &'static str,
    kind: &'static Kind,
    off: Option<&'static str>,
    why: &'static str,
) -> Flag {
    refused(name, kind, off, why, false)
}

/// A flag being built, refused at start: `--name: not yet supported: why`.
const fn not_yet(
    name: &'static str,
    kind: &'static Kind,
    off: Option<&'static str>,
    why: &'static str,
) -> Flag {
    refused(name, kind, off, why, true)
}

const fn refused(
    name: &'static str,
    kind: &'static Kind,
    off: Option<&'static str>,
    why: &'static str,
    not_yet: bool,
) -> Flag {
    Flag {
        name,
        aliases: &[],
        kind: Kind::Hidden(kind),
        default: None,
        help: why,
        set: never,
        refused: Some(Refusal { why, off, not_yet }),
    }
}

/// A refused row's `set`, never called.
fn never(_: &mut Parsed, _: &str, _: &str) -> Result<(), String> {
    Ok(())
}
