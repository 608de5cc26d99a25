//! The master's admin HTTP routes (Mooncake's, on the metrics address): every route's status,
//! content type and JSON shape; bad input (unknown route, wrong method, missing, empty, too long
//! or non-UTF-8 parameters); keys with a NUL and a space through percent-encoding; listings cut
//! at their caps with the truncation shown; a reader that never reads its reply does not hold
//! the master. (The `tidewire-master` binary serving them, alone and as HA masters on a real
//! etcd: `store_admin_http_processes.rs`.)

mod common;
use common::http_client::{Resp, enc, get, parse, request};

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tidewire::store::proto::{KeyVersion, PutItem, Reply, Request, WriteConfig, code};
use tidewire_master::admin::{
    Admin, AdminOptions, HaStatus, MAX_BATCH_QUERY_KEYS, MAX_LIST_ITEMS, MAX_QUERY, RuntimeState,
};
use tidewire_master::http::HttpServer;
use tidewire_master::{Master, MasterConfig};

const SEG: u64 = 1 << 30;

/// A master with segments `a:1` (client 1) and `b:1` (client 2), 1 GiB each.
fn master() -> Arc<Master> {
    let m = Arc::new(Master::new(MasterConfig::default()));
    for (id, name, base) in [(1, "a:1", 0x10_0000_0000u64), (2, "b:1", 0x20_0000_0000)] {
        assert_eq!(
            m.handle(Request::Mount {
                client_id: id,
                name: name.into(),
                base,
                size: SEG,
            }),
            Some(Reply::Ok)
        );
    }
    m
}

/// Starts writes of `items` (key, size) on `seg`; returns their versions.
fn start(m: &Master, items: &[(String, u64)], seg: &str) -> Vec<u64> {
    let r = m.handle(Request::PutStart {
        client_id: 1,
        upsert: false,
        items: items
            .iter()
            .map(|(k, s)| PutItem {
                key: k.clone(),
                size: *s,
            })
            .collect(),
        config: WriteConfig {
            replica_num: 1,
            preferred_segments: vec![seg.into()],
            ..WriteConfig::default()
        },
    });
    match r {
        Some(Reply::Started { results }) => results
            .iter()
            .map(|r| {
                assert_eq!(r.code, 0);
                r.version
            })
            .collect(),
        other => panic!("{other:?}"),
    }
}

/// Puts `items` (key, size) on `seg`, complete.
fn put(m: &Master, items: &[(String, u64)], seg: &str) {
    for chunk in items.chunks(4096) {
        let versions = start(m, chunk, seg);
        let r = m.handle(Request::PutEnd {
            client_id: 1,
            items: chunk
                .iter()
                .zip(versions)
                .map(|((k, _), version)| KeyVersion {
                    key: k.clone(),
                    version,
                })
                .collect(),
        });
        match r {
            Some(Reply::Codes { codes }) => assert!(codes.iter().all(|c| *c == 0), "{codes:?}"),
            other => panic!("{other:?}"),
        }
    }
}

fn serve(m: &Arc<Master>, ha: Arc<HaStatus>, opts: AdminOptions) -> (HttpServer, SocketAddr) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let s = Admin::new(m.clone(), ha, opts).serve(l).unwrap();
    let a = s.local_addr();
    (s, a)
}

fn serve_default(m: &Arc<Master>) -> (HttpServer, SocketAddr) {
    serve(m, Arc::new(HaStatus::standalone()), AdminOptions::default())
}

fn sorted_lines(r: &Resp) -> Vec<String> {
    let t = r.text();
    assert!(t.is_empty() || t.ends_with('\n'), "{t:?}");
    let mut v: Vec<String> = t.lines().map(str::to_string).collect();
    v.sort();
    v
}

fn list_headers(r: &Resp) -> (usize, usize, bool) {
    (
        r.header("X-Tidewire-Total").parse().unwrap(),
        r.header("X-Tidewire-Listed").parse().unwrap(),
        r.header("X-Tidewire-Truncated").parse().unwrap(),
    )
}

#[test]
fn every_route_answers_in_mooncake_shape() {
    let m = master();
    put(&m, &[("k1".into(), 100), ("k2".into(), 5000)], "a:1");
    put(&m, &[("k3".into(), 64)], "b:1");
    // A write in flight: not listed, not readable.
    start(&m, &[("pending".into(), 10)], "a:1");
    let (_s, addr) = serve_default(&m);

    let r = get(addr, "/metrics");
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-type"), "text/plain; version=0.0.4");
    assert!(
        r.text().contains("tidewire_master_objects 4"),
        "{}",
        r.text()
    );

    let r = get(addr, "/metrics/summary");
    assert_eq!(r.status, 200);
    let t = r.text();
    assert!(
        t.starts_with("role=leader, state=serving, service_ready=true, master={"),
        "{t}"
    );
    assert!(
        t.contains("segments=2") && t.contains("ha={enabled=false}"),
        "{t}"
    );

    let r = get(addr, "/health");
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-type"), "application/json; charset=utf-8");
    assert_eq!(
        r.json(),
        serde_json::json!({"status": "ok", "role": "leader", "ha_state": "serving",
                           "service_ready": true, "leader_address": null,
                           "view_version": null})
    );
    let r = get(addr, "/role");
    assert_eq!((r.status, r.text().as_str()), (200, "leader"));
    assert_eq!(r.header("content-type"), "text/plain; charset=utf-8");
    let r = get(addr, "/ha_status");
    assert_eq!((r.status, r.text().as_str()), (200, "serving"));
    let r = get(addr, "/leader");
    assert_eq!(r.status, 200);
    assert_eq!(
        r.json(),
        serde_json::json!({"present": false, "leader_address": null, "view_version": null})
    );

    let r = get(addr, "/get_all_keys");
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-type"), "text/plain; version=0.0.4");
    assert_eq!(sorted_lines(&r), ["k1", "k2", "k3"]);
    assert_eq!(r.header("transfer-encoding"), "chunked");

    let r = get(addr, "/get_all_segments");
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-type"), "text/plain; version=0.0.4");
    assert_eq!(r.text(), "a:1\nb:1\n");
    assert_eq!(list_headers(&r), (2, 2, false));

    let r = get(addr, "/get_segments_detail");
    assert_eq!(r.status, 200);
    let j = r.json();
    assert_eq!(j["total_segments"], 2);
    assert_eq!(j["truncated"], false);
    let segs = j["segments"].as_array().unwrap();
    assert_eq!(segs.len(), 2);
    let a = &segs[0];
    assert_eq!(a["segment_name"], "a:1");
    assert_eq!(a["te_endpoint"], "a:1");
    assert_eq!(a["base_address"], "0x1000000000");
    assert_eq!(a["size_bytes"], SEG);
    assert_eq!(a["size_human"], "1 GiB");
    assert_eq!(a["status"], "OK");
    assert_eq!(a["allocator_capacity_bytes"], SEG);
    // k1, k2 and the pending write, each rounded up to the allocator's granularity.
    let used = a["allocator_used_bytes"].as_u64().unwrap();
    assert!((5110..=5110 + 3 * 64).contains(&used), "{used}");
    let pct = a["allocator_usage_percent"].as_f64().unwrap();
    assert!((pct - used as f64 / SEG as f64 * 100.0).abs() < 1e-9);
    for f in ["segment_id", "client_id", "protocol"] {
        assert!(a[f].is_string(), "{f}: {a}");
    }

    let r = get(addr, "/query_key?key=k2");
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-type"), "application/json; charset=utf-8");
    let j = r.json();
    assert_eq!(j["success"], true);
    let d = j["data"].as_array().unwrap();
    assert_eq!(d.len(), 1);
    assert_eq!(d[0]["size_"], 5000);
    assert_eq!(d[0]["transport_endpoint_"], "a:1");
    assert!(d[0]["protocol_"].is_string());
    let addr_k2 = d[0]["buffer_address_"].as_u64().unwrap();
    assert!((0x10_0000_0000..0x10_0000_0000 + SEG).contains(&addr_k2));
    assert_eq!(j["size"], 5000);
    assert_eq!(j["lease_remaining_ms"], 0);

    let r = get(addr, "/query_key?key=nope");
    assert_eq!(r.status, 404);
    assert_eq!(
        r.json(),
        serde_json::json!({"success": false, "error_code": -704,
                           "error_message": "OBJECT_NOT_FOUND"})
    );
    let r = get(addr, "/query_key?key=pending");
    assert_eq!(r.status, 404);
    assert_eq!(r.json()["error_code"], code::REPLICA_IS_NOT_READY);

    let r = get(addr, "/batch_query_keys?keys=k1,nope,k3");
    assert_eq!(r.status, 200);
    let j = r.json();
    assert_eq!(j["success"], true);
    assert_eq!(j["data"]["k1"]["ok"], true);
    assert_eq!(j["data"]["k1"]["values"][0]["size_"], 100);
    assert_eq!(j["data"]["k3"]["values"][0]["transport_endpoint_"], "b:1");
    assert_eq!(
        j["data"]["nope"],
        serde_json::json!({"ok": false, "error": "OBJECT_NOT_FOUND", "values": null,
                           "disk_values": null, "local_disk_values": null,
                           "nof_values": null})
    );
    assert_eq!(j["data"]["k1"]["error"], serde_json::Value::Null);
    assert_eq!(
        j["data"]["k1"]["local_disk_values"],
        serde_json::Value::Null
    );

    let r = get(addr, "/query_segment?segment=a%3A1");
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-type"), "text/plain; version=0.0.4");
    assert_eq!(
        r.text(),
        format!("a:1\nUsed(bytes): {used}\nCapacity(bytes) : {SEG}\n")
    );

    // The queries granted no lease: a plain (unforced) remove succeeds at once.
    assert_eq!(
        m.handle(Request::Remove {
            keys: vec!["k1".into(), "k2".into(), "k3".into()],
            force: false,
        }),
        Some(Reply::Codes {
            codes: vec![0, 0, 0]
        })
    );
    assert_eq!(get(addr, "/get_all_keys").text(), "");
}

#[test]
fn bad_input_is_refused_with_the_right_status() {
    let m = master();
    put(&m, &[("k".into(), 10)], "a:1");
    let (_s, addr) = serve_default(&m);
    for path in [
        "/",
        "/nope",
        "/metrics/",
        "/get_all_keys/x",
        "/metadata?key=k",
    ] {
        assert_eq!(get(addr, path).status, 404, "{path}");
    }
    let r = request(addr, "POST", "/health");
    assert_eq!(r.status, 405);
    assert_eq!(request(addr, "DELETE", "/get_all_keys").status, 405);

    for target in ["/query_key", "/query_key?key=", "/query_key?other=k"] {
        let r = get(addr, target);
        assert_eq!(r.status, 400, "{target}");
        let j = r.json();
        assert_eq!(j["success"], false);
        assert_eq!(j["error_code"], code::INVALID_PARAMS);
    }
    // Not UTF-8: no stored key can match.
    assert_eq!(get(addr, "/query_key?key=%ff%fe").status, 400);
    for target in ["/batch_query_keys", "/batch_query_keys?keys="] {
        let r = get(addr, target);
        assert_eq!(r.status, 400, "{target}");
        let j = r.json();
        assert_eq!(j["success"], false);
        assert!(j["error"].as_str().unwrap().contains("No keys"), "{j}");
    }
    let many = vec!["k"; MAX_BATCH_QUERY_KEYS + 1].join(",");
    let r = get(addr, &format!("/batch_query_keys?keys={many}"));
    assert_eq!(r.status, 400);
    assert_eq!(r.json()["success"], false);
    let most = vec!["k"; MAX_BATCH_QUERY_KEYS].join(",");
    assert_eq!(
        get(addr, &format!("/batch_query_keys?keys={most}")).status,
        200
    );
    // Empty and non-UTF-8 keys inside a batch fail on their own.
    let j = get(addr, "/batch_query_keys?keys=k,,%ff").json();
    assert_eq!(j["data"]["k"]["ok"], true);
    assert_eq!(j["data"][""]["error"], "OBJECT_NOT_FOUND", "as Mooncake");
    assert_eq!(j["data"]["\u{fffd}"]["error"], "INVALID_PARAMS");

    for target in ["/query_segment", "/query_segment?segment="] {
        assert_eq!(get(addr, target).status, 400, "{target}");
    }
    let r = get(addr, "/query_segment?segment=nope%3A1");
    assert_eq!(
        (r.status, r.text().as_str()),
        (500, "Failed to query segment")
    );

    // A query string over the limit: 400 before any lookup.
    let long = "k".repeat(MAX_QUERY);
    let r = get(addr, &format!("/query_key?key={long}"));
    assert_eq!(r.status, 400);
    assert!(
        r.json()["error_message"]
            .as_str()
            .unwrap()
            .contains("exceeds")
    );
    // Just under it: an ordinary miss.
    let fits = "k".repeat(MAX_QUERY - "key=".len());
    assert_eq!(get(addr, &format!("/query_key?key={fits}")).status, 404);
    // A request head far beyond it is cut off: 400 or a reset, never served.
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s.set_write_timeout(Some(Duration::from_secs(20))).unwrap();
    let huge = format!(
        "GET /query_key?key={} HTTP/1.1\r\nHost: x\r\n\r\n",
        "k".repeat(4 << 20)
    );
    let _ = s.write_all(huge.as_bytes());
    let mut raw = Vec::new();
    match s.read_to_end(&mut raw) {
        Ok(_) if !raw.is_empty() => assert_eq!(parse(&raw).status, 400),
        _ => {}
    }
    // The server still answers.
    assert_eq!(get(addr, "/health").status, 200);
}

#[test]
fn keys_with_nul_and_space_are_found_by_their_exact_bytes() {
    let m = master();
    let with_space = "a\0b c".to_string();
    let shorter = "a\0b".to_string();
    let plus = "a+b".to_string();
    put(
        &m,
        &[
            (with_space.clone(), 11),
            (shorter.clone(), 22),
            (plus.clone(), 33),
        ],
        "a:1",
    );
    let (_s, addr) = serve_default(&m);
    let size = |target: &str| {
        let r = get(addr, target);
        match r.status {
            200 => r.json()["data"][0]["size_"].as_u64().unwrap(),
            s => s as u64 * 1_000_000,
        }
    };
    assert_eq!(size("/query_key?key=a%00b%20c"), 11);
    assert_eq!(size("/query_key?key=a%00b+c"), 11, "+ is a space");
    assert_eq!(
        size(&format!("/query_key?key={}", enc(with_space.as_bytes()))),
        11
    );
    assert_eq!(size("/query_key?key=a%00b"), 22);
    assert_eq!(size("/query_key?key=a%2Bb"), 33);
    assert_eq!(size("/query_key?key=a"), 404_000_000);
    assert_eq!(size("/query_key?key=a%00"), 404_000_000);
    assert_eq!(size("/query_key?key=a%00b%20"), 404_000_000);

    let j = get(addr, "/batch_query_keys?keys=a%00b%20c,a%00b,a%00").json();
    assert_eq!(j["data"]["a\u{0}b c"]["values"][0]["size_"], 11);
    assert_eq!(j["data"]["a\u{0}b"]["values"][0]["size_"], 22);
    assert_eq!(j["data"]["a\u{0}"]["ok"], false);

    let r = get(addr, "/get_all_keys");
    let mut keys: Vec<&[u8]> = r.body.split(|b| *b == b'\n').collect();
    assert_eq!(keys.pop(), Some(&b""[..]));
    keys.sort();
    assert_eq!(keys, [&b"a\0b"[..], &b"a\0b c"[..], &b"a+b"[..]]);
}

#[test]
fn every_key_is_listed_past_the_list_cap() {
    let m = master();
    let n = MAX_LIST_ITEMS + 50;
    let items: Vec<(String, u64)> = (0..n).map(|i| (format!("key-{i:07}"), 1)).collect();
    put(&m, &items, "a:1");
    let (_s, addr) = serve_default(&m);

    // Every key once, one per line, as Mooncake lists them (no cap), streamed.
    let r = get(addr, "/get_all_keys");
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-type"), "text/plain; version=0.0.4");
    assert_eq!(r.header("transfer-encoding"), "chunked");
    let mut lines = sorted_lines(&r);
    assert_eq!(lines.len(), n);
    lines.dedup();
    assert_eq!(lines.len(), n, "each key once");
    let want: Vec<String> = items.iter().map(|(k, _)| k.clone()).collect();
    assert_eq!(lines, want);

    // A reader that never reads its (large) replies holds nothing: the master keeps serving.
    let stalled: Vec<TcpStream> = (0..8)
        .map(|_| {
            let mut s = TcpStream::connect(addr).unwrap();
            s.write_all(b"GET /get_all_keys HTTP/1.1\r\nHost: x\r\n\r\n")
                .unwrap();
            s
        })
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    let t0 = Instant::now();
    put(&m, &[("after".into(), 1)], "b:1");
    assert!(m.query_key("after").is_ok());
    assert_eq!(get(addr, "/query_key?key=after").status, 200);
    assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
    drop(stalled);

    // The caps still bound the segment listings.
    let (_s3, tiny) = serve(
        &m,
        Arc::new(HaStatus::standalone()),
        AdminOptions {
            max_list_items: 1,
            max_list_bytes: 40,
        },
    );
    assert_eq!(sorted_lines(&get(tiny, "/get_all_keys")).len(), n + 1);
    let r = get(tiny, "/get_all_segments");
    assert_eq!(
        (r.text().as_str(), list_headers(&r)),
        ("a:1\n", (2, 1, true))
    );
    let r = get(tiny, "/get_segments_detail");
    assert_eq!(list_headers(&r), (2, 0, true), "one item is over 40 bytes");
    let j = r.json();
    assert_eq!(
        (j["total_segments"].as_u64(), j["truncated"].as_bool()),
        (Some(2), Some(true))
    );
    assert_eq!(j["segments"].as_array().unwrap().len(), 0);
}

#[test]
fn a_standby_answers_health_but_not_data_routes() {
    let m = master();
    let ha = Arc::new(HaStatus::ha());
    let (_s, addr) = serve(&m, ha.clone(), AdminOptions::default());
    m.set_standby(Some("standby".into()));
    assert_eq!(get(addr, "/ha_status").text(), "starting");
    assert_eq!(get(addr, "/role").text(), "standby");
    ha.set(
        RuntimeState::Standby,
        Some("10.0.0.1:50051".into()),
        Some(5),
    );
    let j = get(addr, "/health").json();
    assert_eq!(j["role"], "standby");
    assert_eq!(j["ha_state"], "standby");
    assert_eq!(j["service_ready"], false);
    assert_eq!(j["leader_address"], "10.0.0.1:50051");
    assert_eq!(j["view_version"], 5, "the leader's view version");
    assert_eq!(
        get(addr, "/leader").json(),
        serde_json::json!({"present": true, "leader_address": "10.0.0.1:50051",
                           "view_version": 5})
    );
    assert!(
        get(addr, "/metrics/summary")
            .text()
            .contains("ha={enabled=true}, leader=10.0.0.1:50051")
    );
    assert_eq!(get(addr, "/metrics").status, 200);
    for target in [
        "/get_all_keys",
        "/get_all_segments",
        "/get_segments_detail",
        "/query_key?key=k",
        "/batch_query_keys?keys=k",
        "/query_segment?segment=a:1",
        "/api/v1/segments/status?segment=a:1",
        "/api/v1/drain_jobs/query?job_id=1-2",
        "/api/v1/tenant_quotas",
    ] {
        let r = get(addr, target);
        assert_eq!(r.status, 503, "{target}");
        assert_eq!(
            r.json(),
            serde_json::json!({"success": false, "error_code": -1011,
                               "error_message": "service plane is not active"}),
            "{target}"
        );
    }
    ha.set(
        RuntimeState::Serving,
        Some("10.0.0.2:50051".into()),
        Some(7),
    );
    m.set_standby(None);
    assert_eq!(get(addr, "/role").text(), "leader");
    assert_eq!(
        get(addr, "/leader").json(),
        serde_json::json!({"present": true, "leader_address": "10.0.0.2:50051",
                           "view_version": 7})
    );
    assert_eq!(get(addr, "/get_all_segments").text(), "a:1\nb:1\n");
}
