//! The flag table and its parser: Mooncake's spellings, defaults, errors, the golden `--help`
//! text and the flags the docs name.

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

#[test]
fn help_is_the_golden_text() {
    // The exact `--help` text, checked in: a change to the table shows here as a diff.
    assert_eq!(usage(), include_str!("help.golden.txt"));
}

#[test]
fn every_name_is_unique_and_shown_defaults_exist() {
    let mut seen = std::collections::HashSet::new();
    for f in all_flags() {
        for n in std::iter::once(&f.name).chain(f.aliases) {
            assert!(seen.insert(*n), "--{n} is in the table twice");
            assert!(
                n.chars().all(|c| c.is_ascii_lowercase() || c == '_'),
                "--{n}"
            );
        }
        assert!(
            !f.help.contains("{}") || f.default.is_some(),
            "--{}: a help text shows a default only where there is one",
            f.name
        );
    }
}

#[test]
fn defaults_are_the_librarys_and_mooncakes() {
    let f = parse(&[]).unwrap().unwrap();
    let lib = MasterConfig::default();
    let m = &f.master;
    assert_eq!(m.lease_ttl, lib.lease_ttl);
    assert_eq!(m.soft_pin_ttl, lib.soft_pin_ttl);
    assert_eq!(m.allow_evict_soft_pinned, lib.allow_evict_soft_pinned);
    assert_eq!(m.eviction_high_watermark, lib.eviction_high_watermark);
    assert_eq!(m.eviction_ratio, lib.eviction_ratio);
    assert_eq!(m.client_ttl, lib.client_ttl);
    assert_eq!(m.client_grace, lib.client_grace);
    assert_eq!(m.read_hold_max, lib.read_hold_max);
    assert_eq!(m.put_start_discard_timeout, lib.put_start_discard_timeout);
    assert_eq!(m.put_start_release_timeout, lib.put_start_release_timeout);
    assert_eq!(format!("{:?}", m.strategy), format!("{:?}", lib.strategy));
    assert_eq!(
        f.max_connections,
        tidewire_master::server::DEFAULT_MAX_CONNECTIONS
    );
    assert_eq!(
        (
            f.rpc_address.as_str(),
            f.rpc_port,
            f.metrics_host,
            f.metrics_port
        ),
        ("0.0.0.0", 50051, None, 9003)
    );
    assert!(f.enable_metric_reporting && !f.enable_http_metadata_server);
    assert_eq!(
        (
            f.http_metadata_server_host.as_str(),
            f.http_metadata_server_port
        ),
        ("0.0.0.0", 8080)
    );
    assert!(f.ha.is_none());
    let ha = parse(&args(&["--enable_ha", "--etcd_endpoints=e:1"]))
        .unwrap()
        .unwrap()
        .ha
        .unwrap();
    assert_eq!((ha.lease_ttl, ha.oplog), (5, false));
}

#[test]
fn both_value_forms_aliases_and_bare_booleans() {
    let eq = parse(&args(&["--port=7", "-max_threads=3", "--metrics_host=h"]))
        .unwrap()
        .unwrap();
    let space = parse(&args(&[
        "--port",
        "7",
        "-max_threads",
        "3",
        "--metrics_host",
        "h",
    ]))
    .unwrap()
    .unwrap();
    assert_eq!((eq.rpc_port, space.rpc_port), (7, 7));
    assert_eq!(eq.metrics_host.as_deref(), Some("h"));
    assert_eq!(space.metrics_host.as_deref(), Some("h"));
    let f = parse(&args(&[
        "--enable_http_metadata_server",
        "-enable_metric_reporting=no",
        "--rpc_enable_tcp_no_delay",
        "--max_connections=0",
    ]))
    .unwrap()
    .unwrap();
    assert!(f.enable_http_metadata_server && !f.enable_metric_reporting);
    assert_eq!(
        f.max_connections,
        tidewire_master::server::DEFAULT_MAX_CONNECTIONS,
        "0 keeps the cap"
    );
    // A bare boolean takes no value from the next argument.
    assert!(parse(&args(&["--enable_ha", "false"])).is_err());
    assert_eq!(
        parse(&args(&["--rpc_port"])).unwrap_err(),
        "--rpc_port needs a value"
    );
    assert_eq!(
        parse(&args(&["--port=x"])).unwrap_err(),
        "--port: \"x\" is not a valid number"
    );
    assert!(parse(&args(&["-h"])).unwrap().is_none());
    assert!(parse(&args(&["--memory_allocator=offset"])).is_ok());
    assert!(parse(&args(&["--memory_allocator=cachelib"])).is_err());
    assert!(parse(&args(&["--rpc_enable_tcp_no_delay=maybe"])).is_err());
}

/// `--name` flags in `text`: lowercase names with underscores, not followed by a `-` (an
/// etcd flag such as `--auto-compaction-retention` is not the master's), of two letters or more
/// (`--f=v` stands for any flag).
fn flags_named_in(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let b = text.as_bytes();
    let mut i = 0;
    while let Some(at) = text[i..].find("--") {
        let start = i + at + 2;
        let mut end = start;
        while end < b.len()
            && (b[end].is_ascii_lowercase() || b[end] == b'_' || b[end].is_ascii_digit())
        {
            end += 1;
        }
        let before_ok = i + at == 0 || !b[i + at - 1].is_ascii_alphanumeric();
        if end > start + 1 && before_ok && b.get(end) != Some(&b'-') {
            out.push(text[start..end].to_string());
        }
        i = end.max(start);
    }
    out
}

#[test]
fn every_flag_the_docs_name_is_in_the_table() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
    // docs/master.md is the master's page; before it existed the flags were in README.md's
    // master section.
    let text = std::fs::read_to_string(format!("{root}/docs/master.md"))
        .or_else(|_| std::fs::read_to_string(format!("{root}/README.md")))
        .expect("docs/master.md or README.md");
    let named = flags_named_in(&text);
    assert!(named.len() >= 20, "too few flags found: {named:?}");
    let missing: Vec<&String> = named.iter().filter(|n| find(n).is_none()).collect();
    assert!(
        missing.is_empty(),
        "flags in the docs but not in the table: {missing:?}"
    );
    assert_eq!(
        flags_named_in("--a_b=1 `--cd` x--de --auto-compaction-retention -ef --f=v"),
        ["a_b", "cd"]
    );
}

#[test]
fn gflags_boolean_spellings() {
    let on = |a: &[&str]| {
        parse(&args(a))
            .unwrap()
            .unwrap()
            .enable_http_metadata_server
    };
    for a in [
        "--enable_http_metadata_server",
        "-enable_http_metadata_server",
    ] {
        assert!(on(&[a]));
    }
    for v in ["true", "TRUE", "1", "t", "y", "yes"] {
        assert!(on(&[&format!("--enable_http_metadata_server={v}")]), "{v}");
    }
    for v in ["false", "0", "f", "n", "no"] {
        assert!(!on(&[&format!("--enable_http_metadata_server={v}")]), "{v}");
    }
    assert!(!on(&[
        "--enable_http_metadata_server",
        "--noenable_http_metadata_server"
    ]));
    assert!(
        !parse(&args(&["-noenable_metric_reporting"]))
            .unwrap()
            .unwrap()
            .enable_metric_reporting
    );
    // `--no` only before a boolean flag, and takes no value.
    assert!(
        parse(&args(&["--norpc_port=1"]))
            .unwrap_err()
            .contains("unknown flag --norpc_port")
    );
    assert!(
        parse(&args(&["--noenable_ha=true"]))
            .unwrap_err()
            .contains("unknown flag --noenable_ha")
    );
    assert!(parse(&args(&["--enable_ha=maybe"])).is_err());
}

#[test]
fn cluster_id_names_the_ha_cluster() {
    let ha = |a: &[&str]| {
        let mut v = vec!["--enable_ha", "--etcd_endpoints=e:1"];
        v.extend_from_slice(a);
        parse(&args(&v)).unwrap().unwrap().ha.unwrap()
    };
    assert_eq!(ha(&[]).cluster_id, "");
    let h = ha(&["--cluster_id=prod_a/"]);
    assert_eq!(h.cluster_id, "prod_a");
    assert_eq!(
        crate::ha::cluster(&h),
        "prod_a",
        "the flag wins over the environment"
    );
    let h = ha(&["--cluster_id", "b"]);
    assert_eq!(crate::ha::cluster(&h), "b");
    if std::env::var_os("MC_STORE_CLUSTER_ID").is_none() {
        assert_eq!(crate::ha::cluster(&ha(&[])), "mooncake_cluster");
        assert_eq!(
            crate::ha::cluster(&ha(&["--cluster_id="])),
            "mooncake_cluster"
        );
    }
}

#[test]
fn rpc_conn_timeout_seconds_sets_the_idle_timeout() {
    let idle = |a: &[&str]| parse(&args(a)).unwrap().unwrap().idle_timeout;
    assert_eq!(idle(&[]), None, "not given: the server's own");
    assert_eq!(
        idle(&["--rpc_conn_timeout_seconds=7"]),
        Some(Duration::from_secs(7))
    );
    let never = idle(&["--rpc_conn_timeout_seconds", "0"]).unwrap();
    assert!(never >= Duration::from_secs(365 * 24 * 3600), "0: never");
    assert!(parse(&args(&["--rpc_conn_timeout_seconds=-1"])).is_err());
}

#[test]
fn rpc_interface_replaces_the_rpc_address() {
    let addr = |a: &[&str]| parse(&args(a)).map(|f| f.unwrap().rpc_address);
    // Whichever comes first, the interface wins (Mooncake's rule).
    if interface_ipv4("lo").is_some() {
        assert_eq!(
            addr(&["--rpc_interface=lo", "--rpc_address=10.9.9.9"]).unwrap(),
            "127.0.0.1"
        );
        assert_eq!(
            addr(&["--rpc_address=10.9.9.9", "--rpc_interface", "lo"]).unwrap(),
            "127.0.0.1"
        );
    }
    assert_eq!(
        addr(&["--rpc_address=10.9.9.9", "--rpc_interface="]).unwrap(),
        "10.9.9.9",
        "empty: not set"
    );
    assert_eq!(
        addr(&["--rpc_interface=tw_no_such0"]).unwrap_err(),
        "--rpc_interface=tw_no_such0: no such interface with an IPv4 address"
    );
}

#[test]
fn thread_counts_are_read_and_said_to_have_no_effect() {
    let f = parse(&args(&["--max_threads=64", "--rpc_thread_num", "8"]))
        .unwrap()
        .unwrap();
    assert_eq!(f.notes.len(), 2);
    assert!(
        f.notes[0].starts_with("--max_threads=64 has no effect: the RPC server's threads"),
        "{:?}",
        f.notes
    );
    assert!(f.notes[1].starts_with("--rpc_thread_num=8 has no effect"));
    assert!(parse(&[]).unwrap().unwrap().notes.is_empty());
    assert!(parse(&args(&["--rpc_thread_num=x"])).is_err());
}

#[test]
fn kv_events_flags_are_honoured() {
    let f = parse(&args(&["--kv_events_backend_id=pool-a"]))
        .unwrap()
        .unwrap();
    assert!(f.kv_events.is_none(), "off unless enabled");
    let f = parse(&args(&[
        "--enable_kv_events",
        "--kv_events_backend_id=pool-a",
        "--kv_events_bind_endpoint=tcp://127.0.0.1:6000",
        "--kv_events_queue_capacity=128",
        "--kv_events_replay_bytes=4096",
        "--kv_events_emit_legacy_compat=false",
        "--nokv_events_emit_object_key",
        "--kv_events_tenant_id=t",
        "--kv_events_model_name=Qwen/Qwen2.5-7B-Instruct",
        "--kv_events_block_size=16",
        "--kv_events_additional_salt=s",
        "--kv_events_lora_name=l",
        "--kv_events_dp_rank=2",
    ]))
    .unwrap()
    .unwrap();
    let kv = f.kv_events.expect("enabled");
    assert_eq!(kv.backend_id, "pool-a");
    assert_eq!(kv.bind_endpoint, "tcp://127.0.0.1:6000");
    assert_eq!(kv.queue_capacity, 128);
    assert_eq!(kv.replay_bytes, 4096);
    assert!(!kv.emit_legacy_compat && !kv.emit_object_key);
    assert_eq!(kv.tenant_id, "t");
    assert_eq!(kv.model_name, "Qwen/Qwen2.5-7B-Instruct");
    assert_eq!(kv.block_size, 16);
    assert_eq!(kv.additional_salt, "s");
    assert_eq!(kv.lora_name, "l");
    assert_eq!(kv.dp_rank, 2);
    let d = parse(&args(&["--enable_kv_events", "--kv_events_backend_id=b"]))
        .unwrap()
        .unwrap()
        .kv_events
        .unwrap();
    assert_eq!(d.bind_endpoint, "tcp://0.0.0.0:5557");
    assert_eq!(d.queue_capacity, 65_536);
    assert_eq!(d.tenant_id, "default");
    assert!(d.emit_legacy_compat && d.emit_object_key);
    assert!(
        parse(&args(&[
            "--enable_kv_events",
            "--kv_events_backend_id=b",
            "--kv_events_bind_endpoint="
        ]))
        .is_err()
    );
    assert!(
        parse(&args(&[
            "--enable_kv_events",
            "--kv_events_backend_id=b",
            "--kv_events_dp_rank=-1"
        ]))
        .is_err()
    );
}

mod refused;
