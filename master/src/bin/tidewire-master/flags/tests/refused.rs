//! The refused flags: every one of mooncake_master's flags is honoured or refused by name, with
//! why, and the docs carry the same table.

use super::*;

/// mooncake_master's flag names, from the fixture made from its `--help`.
fn mooncake_flags() -> Vec<&'static str> {
    include_str!("../mooncake_flags.txt")
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect()
}

#[test]
fn every_mooncake_flag_is_honoured_or_refused() {
    let names = mooncake_flags();
    assert_eq!(
        names.len(),
        97,
        "the fixture lists mooncake_master's 97 flags"
    );
    let (mut honoured, mut refused, mut missing) = (0, 0, Vec::new());
    for n in &names {
        match find(n) {
            Some(Flag { refused: None, .. }) => honoured += 1,
            Some(Flag {
                refused: Some(_), ..
            }) => refused += 1,
            None => missing.push(*n),
        }
    }
    assert!(
        missing.is_empty(),
        "neither honoured nor refused: {missing:?}"
    );
    assert_eq!(honoured + refused, 97);
    // Refusals are only for Mooncake's flags: tidewire's own are honoured or absent.
    for f in all_flags().filter(|f| f.refused.is_some()) {
        assert!(
            names.contains(&f.name),
            "--{} is refused but not Mooncake's",
            f.name
        );
        assert!(f.aliases.is_empty() && f.default.is_none(), "--{}", f.name);
    }
}

#[test]
fn the_not_yet_group_is_the_offload_tier() {
    let not_yet: Vec<&str> = all_flags()
        .filter(|f| f.refused.as_ref().is_some_and(|r| r.not_yet))
        .map(|f| f.name)
        .collect();
    assert_eq!(not_yet, ["offload_cap_ratio"], "{not_yet:?}");
    assert!(
        parse(&args(&["--offload_cap_ratio=0.5"]))
            .unwrap_err()
            .starts_with("--offload_cap_ratio: not yet supported: ")
    );
    assert!(
        parse(&args(&[
            "--promotion_on_hit",
            "--promotion_admission_threshold=3"
        ]))
        .is_ok()
    );
    assert!(parse(&args(&["--enable_offload", "--offload_on_evict=true"])).is_ok());
}

#[test]
fn refused_flags_name_the_flag_and_why() {
    for (a, says) in [
        (
            "--enable_cxl=true",
            "--enable_cxl: tidewire has no CXL memory tier",
        ),
        ("--cxl_path=/dev/dax0.0", "--cxl_path: tidewire has no CXL"),
        (
            "--root_fs_dir=/mnt/3fs",
            "--root_fs_dir: tidewire has no shared file-system",
        ),
        (
            "--enable_snapshot",
            "--enable_snapshot: tidewire-master takes and restores no snapshots",
        ),
        (
            "--config_path=master.json",
            "--config_path: tidewire-master reads no config file",
        ),
        (
            "--oplog_poll_interval_ms=1000",
            "--oplog_poll_interval_ms: tidewire's HA journal",
        ),
        (
            "--pod_name=p",
            "--pod_name: tidewire's HA elects through etcd only",
        ),
        (
            "--enable_multi_tenants=1",
            "--enable_multi_tenants: tidewire has no tenants",
        ),
        (
            "--max_total_pending_tasks=10000",
            "--max_total_pending_tasks: tidewire-master's copy and move tasks keep Mooncake's defaults",
        ),
        (
            "--nof_eviction_ratio=0.05",
            "--nof_eviction_ratio: tidewire has no NVMe-oF",
        ),
        (
            "--max_kv_soft_pin_ttl=86400000",
            "--max_kv_soft_pin_ttl: tidewire's requests carry no soft-pin TTL",
        ),
        (
            "--dynamic_replication_mode=enforce",
            "--dynamic_replication_mode: tidewire has no dynamic MEMORY replication",
        ),
        (
            "--enable_kv_events=true",
            "--enable_kv_events needs --kv_events_backend_id",
        ),
        (
            "--offload_cap_ratio=0.3",
            "--offload_cap_ratio: not yet supported",
        ),
        // Mooncake's default asks for disk eviction: refused.
        (
            "--enable_disk_eviction=true",
            "--enable_disk_eviction: tidewire has no shared",
        ),
        (
            "--rpc_enable_tcp_no_delay=false",
            "--rpc_enable_tcp_no_delay=false: tidewire's connections are always TCP_NODELAY",
        ),
        (
            "--allocation_strategy=cxl",
            "--allocation_strategy=cxl: tidewire has no CXL memory tier",
        ),
        (
            "--allocation_strategy=ssd_free_ratio_first",
            "--allocation_strategy=ssd_free_ratio_first: tidewire has no SSD segments",
        ),
        (
            "--allocation_strategy=lru",
            "--allocation_strategy: allocation_strategy \"lru\" is not supported",
        ),
    ] {
        let e = parse(&args(&[a])).unwrap_err();
        assert!(e.starts_with(says), "{a}: {e}");
    }
    assert_eq!(
        parse(&args(&["--config_path=x"])).unwrap_err(),
        "--config_path: tidewire-master reads no config file; give the settings as flags \
         (only an empty --config_path= is accepted)"
    );
    // Every refused flag is named at once, one a line; a value after a refused value flag is
    // its value, not a stray argument.
    assert_eq!(
        parse(&args(&[
            "--cxl_size",
            "5",
            "--rpc_port=7",
            "-enable_snapshot=true"
        ]))
        .unwrap_err()
        .lines()
        .map(|l| l.split(':').next().unwrap())
        .collect::<Vec<_>>(),
        ["--cxl_size", "--enable_snapshot"]
    );
    // A bad value of an honoured flag still stops at once.
    assert!(
        parse(&args(&["--enable_cxl", "--rpc_port=x"]))
            .unwrap_err()
            .starts_with("--rpc_port")
    );
}

#[test]
fn a_refused_flag_passes_only_as_feature_off() {
    let ok = parse(&args(&[
        "--enable_cxl=false",
        "--noenable_snapshot",
        "-enable_snapshot_restore=0",
        "--enable_offload=f",
        "--enable_kv_events=FALSE",
        "--enable_multi_tenants=no",
        "--enable_metadata_cleanup_on_timeout=false",
        "--enable_disk_eviction=false",
        "--config_path=",
        "--root_fs_dir",
        "",
        "--snapshot_backup_dir=",
        "--tenant_quota_connector_uri=",
        "--dynamic_replication_mode=off",
        "--rpc_enable_tcp_no_delay=true",
    ]));
    assert!(ok.is_ok(), "{ok:?}");
    // A default that is not "off" is refused even when it is Mooncake's default.
    for a in [
        "--cxl_size=8589934592",
        "--snapshot_interval_seconds=600",
        "--offload_cap_ratio=0.5",
        "--snapshot_catalog_store_type=",
        "--root_fs_dir=/x",
    ] {
        assert!(parse(&args(&[a])).is_err(), "{a}");
    }
    // Every refusal's "off" value passes and its help is the reason.
    for f in all_flags() {
        let Some(r) = &f.refused else { continue };
        assert_eq!(f.help, r.why);
        if let Some(off) = r.off {
            assert!(
                parse(&args(&[&format!("--{}={off}", f.name)])).is_ok(),
                "--{}={off}",
                f.name
            );
            assert!(
                matches!(off, "false" | "" | "off"),
                "--{}: an 'off' value is false, empty or off",
                f.name
            );
        }
    }
}

/// The docs' table of refused flags, as made from [`all_flags`].
fn refused_table() -> String {
    let mut out = String::from("| flag | accepted only as | why refused |\n|---|---|---|\n");
    for f in all_flags() {
        let Some(r) = &f.refused else { continue };
        let off = match r.off {
            None => "-".to_string(),
            Some("") => "empty".to_string(),
            Some(v) => format!("`{v}`"),
        };
        let pre = if r.not_yet { "not yet supported: " } else { "" };
        out.push_str(&format!("| `--{}` | {off} | {pre}{} |\n", f.name, r.why));
    }
    out
}

#[test]
fn the_docs_list_every_refused_flag_and_why() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
    let text = std::fs::read_to_string(format!("{root}/docs/master.md")).unwrap();
    let table = refused_table();
    assert!(
        text.contains(&table),
        "docs/master.md should carry this table, as made from the flag table:\n{table}"
    );
}
