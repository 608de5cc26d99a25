//! The `tidewire-master` binary's admin HTTP routes: served on exactly the metrics address it
//! is given, and, for HA masters on a real etcd, reporting leader and standby (the standby
//! refusing the data routes).

mod common;
use common::http_client::get;
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

#[test]
fn the_binary_serves_them_on_exactly_the_metrics_address() {
    let (mut child, ready) = common::master::spawn_master([
        "--rpc_address=127.0.0.1",
        "--rpc_port=0",
        "--metrics_host=127.0.0.1",
        "--metrics_port=0",
    ]);
    let port = ready["metrics_port"].as_u64().unwrap() as u16;
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    // No segment yet: SGLang's check_server keeps waiting on an empty body.
    let r = get(addr, "/get_all_segments");
    assert_eq!((r.status, r.text().as_str()), (200, ""));
    assert_eq!(get(addr, "/health").json()["status"], "ok");
    assert_eq!(get(addr, "/role").text(), "leader");
    assert_eq!(get(addr, "/ha_status").text(), "serving");
    assert_eq!(get(addr, "/get_all_keys").text(), "");
    assert_eq!(get(addr, "/nope").status, 404);
    // Bound to 127.0.0.1 only: another loopback address is refused.
    let other: SocketAddr = format!("127.0.0.2:{port}").parse().unwrap();
    assert!(TcpStream::connect_timeout(&other, Duration::from_secs(2)).is_err());
    let _ = child.kill();
    let _ = child.wait();
}

#[test]
fn ha_masters_report_their_role_and_the_leader() {
    let etcd = common::etcd::Etcd::single();
    let endpoints = format!("--etcd_endpoints={}", etcd.endpoints());
    let start = || {
        let (child, v) = common::master::spawn_master([
            "--rpc_address=127.0.0.1",
            "--rpc_port=0",
            "--metrics_host=127.0.0.1",
            "--metrics_port=0",
            "--enable_ha=true",
            "--ha_lease_ttl=2",
            &endpoints,
        ]);
        let rpc = format!("127.0.0.1:{}", v["rpc_port"]);
        let http: SocketAddr = format!("127.0.0.1:{}", v["metrics_port"]).parse().unwrap();
        (child, rpc, http)
    };
    let wait = |what: &str, f: &dyn Fn() -> bool| {
        let t0 = Instant::now();
        while !f() {
            assert!(t0.elapsed() < Duration::from_secs(30), "{what}");
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    let (mut a, a_rpc, a_http) = start();
    wait("a leads", &|| get(a_http, "/role").text() == "leader");
    assert_eq!(get(a_http, "/ha_status").text(), "serving");
    let l = get(a_http, "/leader").json();
    assert_eq!(l["present"], true);
    assert_eq!(l["leader_address"], a_rpc.as_str());
    assert!(l["view_version"].is_u64(), "{l}");
    let h = get(a_http, "/health").json();
    assert_eq!(
        (h["role"].as_str(), h["service_ready"].as_bool()),
        (Some("leader"), Some(true))
    );
    assert_eq!(get(a_http, "/get_all_segments").status, 200);

    let (mut b, _b_rpc, b_http) = start();
    wait("b follows a", &|| {
        get(b_http, "/leader").json()["leader_address"] == a_rpc.as_str()
    });
    assert_eq!(get(b_http, "/role").text(), "standby");
    assert_eq!(get(b_http, "/ha_status").text(), "standby");
    assert_eq!(get(b_http, "/health").json()["service_ready"], false);
    let r = get(b_http, "/get_all_segments");
    assert_eq!(
        (r.status, r.json()["error_code"].as_i64()),
        (503, Some(-1011))
    );
    for c in [&mut a, &mut b] {
        let _ = c.kill();
        let _ = c.wait();
    }
}
