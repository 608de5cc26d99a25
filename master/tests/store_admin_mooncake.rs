//! The admin routes against Mooncake's own master: every exchange recorded from
//! `mooncake_master` 0.3.13.post1 (`fixtures/mooncake_admin/`, see its README) is replayed
//! against a tidewire master in the same state (one segment, keys `k1` and `k2`; an HA
//! leader; an HA standby), and the status, content type and JSON keys must be Mooncake's
//! (error bodies exactly), except the differences listed in [`differs`], each for a reason
//! given there. Also: every Mooncake metric family tidewire has a meaning for is exported under
//! Mooncake's name, and the rest are the ones docs/master.md lists.

mod common;
use common::http_client::{Resp, request_with};

use serde_json::Value;
use std::collections::BTreeSet;
use std::net::{SocketAddr, TcpListener};
use std::sync::Arc;
use tidewire::store::proto::{KeyVersion, PutItem, Reply, Request, WriteConfig};
use tidewire_master::admin::{Admin, AdminOptions, HaStatus, RuntimeState};
use tidewire_master::http::HttpServer;
use tidewire_master::{Master, MasterConfig};

const FIXTURE: &str = include_str!("fixtures/mooncake_admin/mooncake_admin.json");
/// The recorded client's segment name stands for `{segment}`.
const SEG: &str = "127.0.0.1:13800";
const LEADER: &str = "127.0.0.1:50051";
const METRIC_NAMES: &str = include_str!("fixtures/mooncake_admin/mooncake_metric_names.txt");
const DOCS: &str = include_str!("../../docs/master.md");

fn put(m: &Master, key: &str, size: u64) {
    let r = m.handle(Request::PutStart {
        client_id: 1,
        upsert: false,
        items: vec![PutItem {
            key: key.into(),
            size,
        }],
        config: WriteConfig {
            replica_num: 1,
            ..WriteConfig::default()
        },
    });
    let Some(Reply::Started { results }) = r else {
        panic!("{r:?}")
    };
    assert_eq!(results[0].code, 0);
    let r = m.handle(Request::PutEnd {
        client_id: 1,
        items: vec![KeyVersion {
            key: key.into(),
            version: results[0].version,
        }],
    });
    assert_eq!(r, Some(Reply::Codes { codes: vec![0] }));
}

/// A master as the recording's: one 512 MiB segment, `k1` (100 B) and `k2` (5000 B).
fn master() -> Arc<Master> {
    let m = Arc::new(Master::new(MasterConfig::default()));
    assert_eq!(
        m.handle(Request::Mount {
            client_id: 1,
            name: SEG.into(),
            base: 0x7f00_0000_0000,
            size: 512 << 20,
        }),
        Some(Reply::Ok)
    );
    put(&m, "k1", 100);
    put(&m, "k2", 5000);
    m
}

fn serve(m: &Arc<Master>, ha: Arc<HaStatus>) -> (HttpServer, SocketAddr) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let s = Admin::new(m.clone(), ha, AdminOptions::default())
        .serve(l)
        .unwrap();
    let a = s.local_addr();
    (s, a)
}

/// A JSON value's shape: objects by key, arrays by their first item, leaves by kind.
fn shape(v: &Value) -> Value {
    match v {
        Value::Object(o) => Value::Object(o.iter().map(|(k, v)| (k.clone(), shape(v))).collect()),
        Value::Array(a) => Value::Array(a.first().map(shape).into_iter().collect()),
        Value::Null => "null".into(),
        Value::Bool(_) => "bool".into(),
        Value::Number(_) => "number".into(),
        Value::String(_) => "string".into(),
    }
}

/// Where tidewire answers differently from the recording, and why: `(status, body)` tidewire
/// gives instead, `None` for the recorded answer.
fn differs(method: &str, target: &str, body: Option<&str>) -> Option<(u16, Option<Value>)> {
    let err = |c: i32, m: &str| {
        Some(serde_json::json!({"success": false, "error_code": c, "error_message": m}))
    };
    match (method, target) {
        // A missing parameter is a bad request (Mooncake looks the empty name up).
        ("GET", "/query_key") => Some((400, err(-600, "Missing key query parameter"))),
        ("GET", "/query_segment") => Some((400, None)),
        // tidewire runs no drain jobs: a valid request gets Mooncake's "not in this mode",
        // and so no job id ever exists.
        ("POST", "/api/v1/drain_jobs") if body.is_some_and(|b| b.contains("{segment}")) => {
            Some((409, err(-1011, "UNAVAILABLE_IN_CURRENT_MODE")))
        }
        (_, t) if t.contains("job_id={job}") => Some((404, err(-1402, "JOB_NOT_FOUND"))),
        // A known path with another method: 405 with `Allow` (Mooncake's server: 404).
        ("GET", "/api/v1/remove_all") | ("POST", "/health") => Some((405, None)),
        _ => None,
    }
}

fn check(addr: SocketAddr, e: &Value, step: &mut usize) {
    let method = e["method"].as_str().unwrap();
    let target = e["target"]
        .as_str()
        .unwrap()
        .replace("{segment}", SEG)
        .replace("{job}", "4129512655197963751-1883861866679587212");
    let req_body = e["request_body"].as_str();
    let want_status = e["status"].as_u64().unwrap() as u16;
    let want_body = e["body"].as_str().unwrap().replace("{segment}", SEG);
    let what = format!("{} {method} {target}", e["role"]);
    let r: Resp = request_with(
        addr,
        method,
        &target,
        req_body
            .map(|b| b.replace("{segment}", SEG))
            .as_deref()
            .map(str::as_bytes),
    );
    *step += 1;
    if let Some((status, body)) = differs(method, e["target"].as_str().unwrap(), req_body) {
        assert_eq!(r.status, status, "{what}: {}", r.text());
        if let Some(b) = body {
            assert_eq!(r.json(), b, "{what}");
        }
        return;
    }
    assert_eq!(r.status, want_status, "{what}: {}", r.text());
    if let Some(ct) = e["content_type"].as_str() {
        assert_eq!(r.header("content-type"), ct, "{what}");
    }
    if e["content_type"]
        .as_str()
        .is_some_and(|c| c.contains("json"))
    {
        let want: Value = serde_json::from_str(&want_body).unwrap();
        let mut got = r.json();
        if target.starts_with("/query_key?") && want_status == 200 {
            // tidewire's additions beside Mooncake's `data` (documented).
            for k in ["size", "lease_remaining_ms", "hard_pinned", "soft_pinned"] {
                assert!(got.as_object_mut().unwrap().remove(k).is_some(), "{what}");
            }
        }
        if target == "/get_segments_detail" && want_status == 200 {
            // tidewire's addition: whether the list was cut at its cap.
            assert_eq!(
                got.as_object_mut().unwrap().remove("truncated"),
                Some(Value::Bool(false))
            );
        }
        assert_eq!(shape(&got), shape(&want), "{what}: {got}");
        if want["success"] == false || target == "/health" || target == "/leader" {
            // Error bodies and the HA views exactly (a JSON parser's own message aside).
            match want["error_message"].as_str() {
                Some(m) if m.starts_with("Invalid JSON body: ") => assert!(
                    got["error_message"]
                        .as_str()
                        .unwrap()
                        .starts_with("Invalid JSON body: "),
                    "{what}: {got}"
                ),
                _ => assert_eq!(got, want, "{what}"),
            }
        }
        if let Some(n) = want.get("removed_count") {
            assert_eq!(&got["removed_count"], n, "{what}");
        }
    } else if target == "/metrics/summary" {
        let head = |t: &str| t.split("master={").next().unwrap().to_string();
        assert_eq!(head(&r.text()), head(&want_body), "{what}");
    } else if target == "/get_all_keys" {
        let mut got: Vec<String> = r.text().lines().map(str::to_string).collect();
        got.sort();
        let mut want: Vec<String> = want_body.lines().map(str::to_string).collect();
        want.sort();
        assert_eq!(got, want, "{what}");
    } else if target.starts_with("/query_segment?segment=") && want_status == 200 {
        // Usage is the allocator's own (granularity differs); the layout is Mooncake's.
        let lines: Vec<String> = r.text().lines().map(str::to_string).collect();
        assert_eq!(lines.len(), 3, "{what}");
        assert_eq!(lines[0], SEG);
        assert!(lines[1].starts_with("Used(bytes): "), "{what}");
        assert_eq!(lines[2], "Capacity(bytes) : 536870912");
    } else {
        assert_eq!(r.text(), want_body, "{what}");
    }
}

#[test]
fn every_recorded_answer_of_mooncakes_master_is_matched() {
    let fixture: Vec<Value> = serde_json::from_str(FIXTURE).unwrap();
    let mut step = 0;

    // One master, no HA, a client's segment and two keys (the recording's order: the
    // removals near its end change the state the later queries see).
    let m = master();
    let (_s, addr) = serve(&m, Arc::new(HaStatus::standalone()));
    for e in fixture.iter().filter(|e| e["run"] == "single") {
        check(addr, e, &mut step);
    }

    // An HA leader, and a standby that follows it.
    let leader = Arc::new(Master::new(MasterConfig::default()));
    let ha = Arc::new(HaStatus::ha());
    ha.set(RuntimeState::Serving, Some(LEADER.into()), Some(2));
    let (_l, leader_addr) = serve(&leader, ha);
    let standby = Arc::new(Master::new(MasterConfig::default()));
    standby.set_standby(Some("standby".into()));
    let ha = Arc::new(HaStatus::ha());
    ha.set(RuntimeState::Standby, Some(LEADER.into()), Some(2));
    let (_b, standby_addr) = serve(&standby, ha);
    for e in fixture.iter().filter(|e| e["run"] == "ha") {
        let addr = match e["role"].as_str() {
            Some("standby") => standby_addr,
            _ => leader_addr,
        };
        check(addr, e, &mut step);
    }
    assert_eq!(step, fixture.len());
}
/// Mooncake's metric families tidewire does not export: each is listed in docs/master.md.
fn not_exported() -> Vec<&'static str> {
    let section = DOCS
        .split("<!-- mooncake-metrics-without-meaning -->")
        .nth(1)
        .expect("the docs' list of Mooncake metrics without a meaning");
    section
        .lines()
        .take_while(|l| !l.starts_with("<!-- end -->"))
        .filter_map(|l| l.strip_prefix("| `"))
        .map(|l| l.split('`').next().unwrap())
        .collect()
}

#[test]
fn mooncake_metric_families_are_exported_or_listed_as_without_meaning() {
    let m = master();
    // Some traffic, so the labelled and histogram families have samples.
    let _ = m.handle(Request::Get {
        client_id: 1,
        keys: vec!["k1".into(), "nope".into()],
    });
    let (_s, addr) = serve(&m, Arc::new(HaStatus::standalone()));
    let text = request_with(addr, "GET", "/metrics", None).text();
    let exported: BTreeSet<(String, String)> = text
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .map(|l| {
            let mut p = l.split(' ');
            (p.next().unwrap().to_string(), p.next().unwrap().to_string())
        })
        .collect();
    let names: BTreeSet<&str> = exported.iter().map(|(n, _)| n.as_str()).collect();
    let missing = not_exported();
    let mut mooncake = 0;
    for l in METRIC_NAMES.lines() {
        let (name, kind) = l.split_once(' ').unwrap();
        mooncake += 1;
        if missing.contains(&name) {
            assert!(
                !names.contains(name),
                "{name} is exported and listed as without meaning"
            );
        } else {
            assert!(
                exported.contains(&(name.to_string(), kind.to_string())),
                "Mooncake's {name} ({kind}) is neither exported nor listed in docs/master.md"
            );
            // Each family has a sample line.
            assert!(
                text.lines()
                    .any(|s| !s.starts_with('#') && s.starts_with(name)),
                "{name} has no sample"
            );
        }
    }
    assert_eq!(mooncake, 136);
    for n in &missing {
        assert!(
            METRIC_NAMES.lines().any(|l| l.split(' ').next() == Some(n)),
            "docs list {n}, which Mooncake does not export"
        );
    }
    // tidewire's own families stay.
    assert!(names.contains("tidewire_master_objects"), "{text}");
}
