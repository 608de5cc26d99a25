//! HTTP metadata mode against a real HTTP metadata server (the test server under
//! tests/interop, run with python3): keys published on start and register, segments opened by
//! name, transfers and notifications, keys removed on shutdown.

mod common;
use common::http_meta::MetadataServer as Server;
use common::*;
use std::io::{Read, Write};
use std::time::Duration;
use tidewire::{ErrorKind, Opcode, Request};

fn node(server: &Server, name: &str) -> tidewire::Engine {
    engine_with(&[
        ("metadata", &server.url()),
        ("local_server_name", name),
        ("bind_address", "127.0.0.1"),
    ])
}

#[test]
fn publish_open_transfer_notify_and_remove() {
    let server = Server::start();
    let a = node(&server, "node-a");
    let b = node(&server, "node-b");
    assert_eq!(
        a.name(),
        "node-a",
        "in metadata mode the name is the key, verbatim"
    );
    let keys = server.keys();
    for k in [
        "mooncake/ram/node-a",
        "mooncake/rpc_meta/node-a",
        "mooncake/ram/node-b",
        "mooncake/rpc_meta/node-b",
    ] {
        assert!(keys.iter().any(|x| x == k), "{k} missing from {keys:?}");
    }
    // Registering republishes; the peer sees the buffer after opening by name.
    let remote = Buf::pattern(1 << 20, 5);
    b.register_memory(remote.addr(), remote.len(), "cpu:0", true)
        .unwrap();
    let local = Buf::new(1 << 20, 0);
    a.register_memory(local.addr(), local.len(), "cpu:0", true)
        .unwrap();
    let seg = a.open_segment("node-b").unwrap();
    assert_eq!(a.segment_descriptor(seg).unwrap().buffers.len(), 1);
    let batch = a.alloc_batch(1).unwrap();
    a.submit(
        batch,
        &[Request {
            op: Opcode::Read,
            local: local.addr(),
            segment: seg,
            remote: remote.addr(),
            len: remote.len(),
        }],
    )
    .unwrap();
    a.wait_batch(batch, Some(Duration::from_secs(10))).unwrap();
    assert_eq!(local.0, remote.0);
    a.send_notify(seg, "layer", "7").unwrap();
    assert_eq!(b.take_notifications()[0].msg, "7");
    assert_eq!(
        a.open_segment("node-missing").unwrap_err().kind(),
        ErrorKind::UnknownSegment
    );
    drop(b);
    let keys = server.keys();
    assert!(
        !keys.iter().any(|k| k.ends_with("/node-b")),
        "node-b's keys removed: {keys:?}"
    );
    assert!(keys.iter().any(|k| k == "mooncake/ram/node-a"));
}

#[test]
fn metadata_server_down_is_a_clear_error() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut cfg = tidewire::Config::default();
    cfg.set("metadata", &format!("http://127.0.0.1:{port}/metadata"))
        .unwrap();
    cfg.set("local_server_name", "lonely").unwrap();
    cfg.set("bind_address", "127.0.0.1").unwrap();
    let e = tidewire::Engine::new(cfg)
        .err()
        .expect("no metadata server, no engine");
    assert_eq!(e.kind(), ErrorKind::Metadata, "{e}");
}

#[test]
fn advertised_address_without_bind_address_is_not_loopback() {
    if let Some(ip) = tidewire::metadata::first_lan_ipv4() {
        let ip: std::net::Ipv4Addr = ip.parse().unwrap();
        assert!(!ip.is_loopback());
    }
}

/// A server that answers every request with 200 and a body that never ends: `slow` sends a
/// byte every 100 ms, otherwise 64 KiB chunks as fast as they go. Each connection is served
/// for at most 20 s or 64 MiB.
fn endless_server(slow: bool) -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        let Ok((mut s, _)) = l.accept() else { return };
        let mut head = [0u8; 4096];
        let _ = s.read(&mut head);
        let _ = s.write_all(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n");
        let t0 = std::time::Instant::now();
        let chunk = vec![b'x'; 64 << 10];
        let mut sent = 0usize;
        while t0.elapsed() < Duration::from_secs(20) && sent < 64 << 20 {
            let ok = if slow {
                std::thread::sleep(Duration::from_millis(100));
                s.write_all(b"1\r\nx\r\n").is_ok()
            } else {
                s.write_all(format!("{:x}\r\n", chunk.len()).as_bytes())
                    .is_ok()
                    && s.write_all(&chunk).is_ok()
                    && s.write_all(b"\r\n").is_ok()
            };
            if !ok {
                return;
            }
            sent += chunk.len();
        }
    });
    port
}

#[test]
fn endless_response_bodies_fail_fast() {
    use tidewire::metadata::service::http::HttpStore;
    let fast = endless_server(false);
    let store = HttpStore::new(
        &format!("http://127.0.0.1:{fast}/metadata"),
        Duration::from_secs(3),
    )
    .unwrap();
    let t0 = std::time::Instant::now();
    let e = store.get("mooncake/ram/x").unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Metadata);
    assert!(e.message().contains("larger than"), "{e}");
    assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());

    let slow = endless_server(true);
    let store = HttpStore::new(
        &format!("http://127.0.0.1:{slow}/metadata"),
        Duration::from_secs(1),
    )
    .unwrap();
    let t0 = std::time::Instant::now();
    let e = store.get("mooncake/ram/x").unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Metadata);
    assert!(e.message().contains("deadline"), "{e}");
    assert!(t0.elapsed() < Duration::from_secs(3), "{:?}", t0.elapsed());
}
