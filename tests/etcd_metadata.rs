//! Transfer-engine metadata on a real etcd (started by the tests on 127.0.0.1): the client's
//! operations, engines finding each other through etcd, keys on a lease that vanish after a
//! SIGKILL, keys restored after etcd comes back empty, failover across an endpoint list and a
//! three-member cluster losing a member.

mod common;
use common::etcd::{Etcd, dead_port};
use common::*;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use tidewire::etcd::watch::EventKind;
use tidewire::etcd::{EtcdClient, prefix_end};
use tidewire::{Engine, ErrorKind, Opcode, Request};

const ROLE_VAR: &str = "TW_ETCD_CHILD";

fn client(spec: &str) -> EtcdClient {
    EtcdClient::new(spec, Duration::from_secs(2)).unwrap()
}

fn node(metadata: &str, name: &str) -> Engine {
    engine_with(&[
        ("metadata", metadata),
        ("local_server_name", name),
        ("bind_address", "127.0.0.1"),
    ])
}

/// Engines `node-a` and `node-b` on `metadata`, and a 1 MiB patterned buffer registered on `b`.
fn nodes_a_b(metadata: &str) -> (Engine, Engine, Buf) {
    let a = node(metadata, "node-a");
    let b = node(metadata, "node-b");
    let remote = Buf::pattern(1 << 20, 4);
    b.register_memory(remote.addr(), remote.len(), "cpu:0", true)
        .unwrap();
    (a, b, remote)
}

fn keys(c: &EtcdClient) -> Vec<String> {
    c.get_prefix(b"mooncake/")
        .unwrap()
        .kvs
        .into_iter()
        .map(|kv| String::from_utf8(kv.key).unwrap())
        .collect()
}

fn run(
    e: &Engine,
    op: Opcode,
    local: u64,
    segment: i32,
    remote: u64,
    len: u64,
) -> tidewire::Result<()> {
    let b = e.alloc_batch(1).unwrap();
    e.submit(
        b,
        &[Request {
            op,
            local,
            segment,
            remote,
            len,
        }],
    )
    .unwrap();
    let r = e.wait_batch(b, Some(Duration::from_secs(20)));
    e.free_batch(b).unwrap();
    r
}

/// WRITE then READ between `a` and the segment `peer` (whose buffer is `remote`), byte-checked.
fn write_read(a: &Engine, peer: &str, remote: &Buf) {
    let seg = a.open_segment(peer).unwrap();
    let src = Buf::pattern(remote.0.len(), 77);
    let back = Buf::new(remote.0.len(), 0);
    a.register_memory(src.addr(), src.len(), "cpu:0", true)
        .unwrap();
    a.register_memory(back.addr(), back.len(), "cpu:0", true)
        .unwrap();
    run(
        a,
        Opcode::Write,
        src.addr(),
        seg,
        remote.addr(),
        remote.len(),
    )
    .unwrap();
    assert_eq!(remote.0, src.0, "WRITE landed byte for byte");
    run(
        a,
        Opcode::Read,
        back.addr(),
        seg,
        remote.addr(),
        remote.len(),
    )
    .unwrap();
    assert_eq!(back.0, src.0, "READ returned byte for byte");
    a.unregister_memory(src.addr()).unwrap();
    a.unregister_memory(back.addr()).unwrap();
}

fn wait_until(limit: Duration, mut f: impl FnMut() -> bool) -> Option<Duration> {
    let t0 = Instant::now();
    while t0.elapsed() < limit {
        if f() {
            return Some(t0.elapsed());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    None
}

#[test]
fn client_operations() {
    let etcd = Etcd::single();
    let c = client(&etcd.url());
    // put / get / range / delete
    let r1 = c.put(b"tq/a", b"1", 0).unwrap();
    c.put(b"tq/b", b"\x00\xffbinary", 0).unwrap();
    c.put(b"tr/c", b"3", 0).unwrap();
    let (kv, rev) = c.get(b"tq/a").unwrap();
    let kv = kv.unwrap();
    assert_eq!(
        (kv.value.as_slice(), kv.mod_revision, kv.version),
        (&b"1"[..], r1, 1)
    );
    assert!(rev >= r1);
    assert!(c.get(b"tq/none").unwrap().0.is_none());
    let r = c.get_prefix(b"tq/").unwrap();
    assert_eq!(r.count, 2);
    assert_eq!(r.kvs[1].value, b"\x00\xffbinary");
    assert_eq!(
        c.range(b"tq/", &prefix_end(b"tq/"), 1).unwrap().kvs.len(),
        1
    );
    assert!(c.delete(b"tq/a").unwrap());
    assert!(!c.delete(b"tq/a").unwrap());
    assert_eq!(c.delete_range(b"t", &prefix_end(b"t")).unwrap(), 2);

    // leases: grant, keepalive, put with lease, time-to-live, revoke removes the keys
    let lease = c.lease_grant(30).unwrap();
    assert_eq!(lease.ttl, 30);
    c.put(b"tq/leased", b"x", lease.id).unwrap();
    assert_eq!(c.get(b"tq/leased").unwrap().0.unwrap().lease, lease.id);
    assert_eq!(c.lease_keepalive(lease.id).unwrap(), Some(30));
    let (ttl, ks) = c.lease_time_to_live(lease.id).unwrap();
    assert!(ttl.unwrap() > 25);
    assert_eq!(ks, vec![b"tq/leased".to_vec()]);
    c.lease_revoke(lease.id).unwrap();
    assert!(c.get(b"tq/leased").unwrap().0.is_none());
    assert_eq!(c.lease_keepalive(lease.id).unwrap(), None);
    c.lease_revoke(lease.id).unwrap();
    let e = c.put(b"tq/x", b"y", lease.id).unwrap_err();
    assert!(tidewire::etcd::is_lease_not_found(&e), "{e}");

    // a short lease expires by itself
    let short = c.lease_grant(2).unwrap();
    c.put(b"tq/short", b"x", short.id).unwrap();
    let gone = wait_until(Duration::from_secs(6), || {
        c.get(b"tq/short").unwrap().0.is_none()
    });
    assert!(gone.is_some(), "key on a 2 s lease gone within 6 s");

    // create-if-absent transaction
    let won = c.put_if_absent(b"tq/leader", b"me", 0).unwrap();
    assert!(won.succeeded && won.existing.is_none());
    let lost = c.put_if_absent(b"tq/leader", b"you", 0).unwrap();
    assert!(!lost.succeeded);
    assert_eq!(lost.existing.unwrap().value, b"me");
    assert_eq!(c.get(b"tq/leader").unwrap().0.unwrap().value, b"me");

    // watch: created, then a put and a delete, in order
    let start = c.put(b"tq/w/0", b"before", 0).unwrap();
    let mut w = c
        .watch(
            b"tq/w/",
            &prefix_end(b"tq/w/"),
            start + 1,
            Duration::from_secs(5),
        )
        .unwrap();
    let created = w.next_message().unwrap().unwrap();
    assert!(created.created);
    c.put(b"tq/w/1", b"v1", 0).unwrap();
    c.put(b"tq/other", b"not watched", 0).unwrap();
    c.delete(b"tq/w/1").unwrap();
    let mut events = Vec::new();
    while events.len() < 2 {
        let m = w
            .next_message()
            .unwrap()
            .expect("events before the window ends");
        events.extend(m.events);
    }
    assert_eq!(events[0].kind, EventKind::Put);
    assert_eq!(
        (events[0].kv.key.as_slice(), events[0].kv.value.as_slice()),
        (&b"tq/w/1"[..], &b"v1"[..])
    );
    assert_eq!(events[1].kind, EventKind::Delete);
    // a watch from an old revision replays history
    let mut replay = c
        .watch(b"tq/w/0", b"", start, Duration::from_secs(2))
        .unwrap();
    let mut seen = Vec::new();
    while let Some(m) = replay.next_message().unwrap() {
        seen.extend(m.events);
        if !seen.is_empty() {
            break;
        }
    }
    assert_eq!(seen[0].kv.value, b"before");
    // the window ends the stream: a deadline, not a hang
    let t0 = Instant::now();
    let mut idle = c
        .watch(b"tq/idle", b"", 0, Duration::from_millis(500))
        .unwrap();
    while idle.next_message().unwrap().is_some() {}
    assert!(t0.elapsed() < Duration::from_secs(3));
}

#[test]
fn unreachable_etcd_is_a_clear_error() {
    let port = dead_port();
    let c = client(&format!("127.0.0.1:{port}"));
    let e = c.put(b"k", b"v", 0).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Metadata);
    assert!(e.message().contains(&format!("127.0.0.1:{port}")), "{e}");
    let mut cfg = tidewire::Config::default();
    cfg.set("metadata", &format!("etcd://127.0.0.1:{port}"))
        .unwrap();
    cfg.set("local_server_name", "lonely").unwrap();
    cfg.set("bind_address", "127.0.0.1").unwrap();
    let t0 = Instant::now();
    let e = Engine::new(cfg).err().expect("no etcd, no engine");
    assert_eq!(e.kind(), ErrorKind::Metadata);
    assert!(
        e.message().contains(&format!("http://127.0.0.1:{port}")),
        "{e}"
    );
    assert!(t0.elapsed() < Duration::from_secs(5));
}

#[test]
fn engines_transfer_through_etcd_and_clean_up() {
    let etcd = Etcd::single();
    let c = client(&etcd.endpoints());
    // Both spellings Mooncake accepts: etcd://h:p and a bare h:p.
    let a = node(&etcd.url(), "node-a");
    let b = node(&etcd.endpoints(), "node-b");
    let mut ks = keys(&c);
    ks.sort();
    assert_eq!(
        ks,
        [
            "mooncake/ram/node-a",
            "mooncake/ram/node-b",
            "mooncake/rpc_meta/node-a",
            "mooncake/rpc_meta/node-b"
        ]
    );
    // Values as Mooncake writes them, on a lease.
    let (meta, _) = c.get(b"mooncake/rpc_meta/node-b").unwrap();
    let meta = meta.unwrap();
    assert_ne!(meta.lease, 0, "keys hang on a lease");
    let v: serde_json::Value = serde_json::from_slice(&meta.value).unwrap();
    assert_eq!(v["ip_or_host_name"], "127.0.0.1");
    assert_eq!(v["rpc_port"].as_u64().unwrap(), b.rpc_port() as u64);
    let remote = Buf::pattern(4 << 20, 3);
    b.register_memory(remote.addr(), remote.len(), "cpu:0", true)
        .unwrap();
    let (ram, _) = c.get(b"mooncake/ram/node-b").unwrap();
    let d: serde_json::Value = serde_json::from_slice(&ram.unwrap().value).unwrap();
    assert_eq!(d["name"], "node-b");
    assert_eq!(d["protocol"], "tcp");
    assert_eq!(d["buffers"][0]["addr"].as_u64().unwrap(), remote.addr());
    write_read(&a, "node-b", &remote);
    let seg = a.open_segment("node-b").unwrap();
    a.send_notify(seg, "n", "hello").unwrap();
    assert_eq!(b.take_notifications()[0].msg, "hello");
    assert_eq!(
        a.open_segment("nobody").unwrap_err().kind(),
        ErrorKind::UnknownSegment
    );

    // The watch keeps the cached descriptor true: b registers more memory and a sees it on
    // its next open, without an explicit refresh.
    let more = Buf::pattern(1 << 20, 9);
    b.register_memory(more.addr(), more.len(), "cpu:0", true)
        .unwrap();
    let seen = wait_until(Duration::from_secs(5), || {
        a.open_segment("node-b").unwrap();
        a.segment_descriptor(seg).unwrap().buffers.len() == 2
    });
    assert!(
        seen.is_some(),
        "cached descriptor refreshed after the watch saw the change"
    );
    write_read(&a, "node-b", &more);

    // Closing deletes the keys at once, and a's cached segment reports the peer gone.
    drop(b);
    let ks = keys(&c);
    assert!(!ks.iter().any(|k| k.ends_with("node-b")), "{ks:?}");
    let gone = wait_until(Duration::from_secs(5), || a.open_segment("node-b").is_err());
    assert!(
        gone.is_some(),
        "a no longer opens node-b once its keys are gone"
    );
    drop(a);
    assert!(keys(&c).is_empty());
}

/// Child entry point: an engine on etcd that serves until killed.
#[test]
#[ignore = "child process role, started by the other tests"]
fn child_engine_main() {
    let Ok(url) = std::env::var(ROLE_VAR) else {
        return;
    };
    let e = node(&url, "crashy");
    let buf = Buf::pattern(1 << 20, 1);
    e.register_memory(buf.addr(), buf.len(), "cpu:0", true)
        .unwrap();
    println!("READY");
    std::thread::sleep(Duration::from_secs(60));
}

#[test]
fn sigkilled_engine_keys_vanish_within_the_lease() {
    let etcd = Etcd::single();
    let c = client(&etcd.endpoints());
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child_engine_main", "--nocapture", "--ignored"])
        .env(ROLE_VAR, etcd.url())
        .env("MC_METADATA_CLUSTER_ID", "blue")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    while !line.starts_with("READY") {
        line.clear();
        assert!(out.read_line(&mut line).unwrap() > 0, "child exited early");
    }
    assert_eq!(
        keys(&c),
        ["mooncake/blue/ram/crashy", "mooncake/blue/rpc_meta/crashy"],
        "keys under MC_METADATA_CLUSTER_ID"
    );
    // Past one keep-alive period, so the lease really is being renewed.
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(keys(&c).len(), 2, "keys live while the engine lives");
    child.kill().unwrap();
    child.wait().unwrap();
    let t = wait_until(Duration::from_secs(12), || keys(&c).is_empty());
    let t = t.expect("keys of a SIGKILLed engine vanish");
    eprintln!("keys vanished {:.1} s after SIGKILL", t.as_secs_f64());
    assert!(t <= Duration::from_secs(10), "{t:?}");
}

#[test]
fn etcd_lost_and_back_empty_restores_keys() {
    let mut etcd = Etcd::single();
    let (a, b, remote) = nodes_a_b(&etcd.url());
    let c = node(&etcd.url(), "node-c");
    write_read(&a, "node-b", &remote);

    etcd.kill(0);
    // Transfers to an open segment go on; a new open fails clearly.
    write_read(&a, "node-b", &remote);
    let e = a.open_segment("node-c").unwrap_err();
    assert!(e.message().contains("etcd"), "{e}");
    // Meanwhile b registers more memory: kept for when etcd returns.
    let more = Buf::pattern(1 << 20, 8);
    b.register_memory(more.addr(), more.len(), "cpu:0", true)
        .unwrap();

    // etcd comes back with no data at all: every engine writes its keys again.
    etcd.restart(0, true);
    let cl = client(&etcd.endpoints());
    let t = wait_until(Duration::from_secs(10), || keys(&cl).len() == 6)
        .unwrap_or_else(|| panic!("keys restored; have {:?}", keys(&cl)));
    eprintln!(
        "keys restored {:.1} s after etcd came back",
        t.as_secs_f64()
    );
    let (ram, _) = cl.get(b"mooncake/ram/node-b").unwrap();
    let ram = ram.unwrap();
    assert_ne!(ram.lease, 0);
    let d: serde_json::Value = serde_json::from_slice(&ram.value).unwrap();
    assert_eq!(
        d["buffers"].as_array().unwrap().len(),
        2,
        "the latest descriptor"
    );
    // New opens work again, and the cached one sees the new buffer.
    let ok = wait_until(Duration::from_secs(5), || a.open_segment("node-c").is_ok());
    assert!(ok.is_some());
    let seg = a.open_segment("node-b").unwrap();
    let fresh = wait_until(Duration::from_secs(5), || {
        a.open_segment("node-b").is_ok() && a.segment_descriptor(seg).unwrap().buffers.len() == 2
    });
    assert!(fresh.is_some());
    write_read(&a, "node-b", &more);
    drop((a, b, c));
    assert!(keys(&cl).is_empty());
}

#[test]
fn endpoint_list_with_first_endpoint_dead() {
    let etcd = Etcd::single();
    let list = format!(
        "etcd://127.0.0.1:{},http://{}",
        dead_port(),
        etcd.endpoints()
    );
    let c = client(&list);
    c.put(b"k", b"v", 0).unwrap();
    assert_eq!(c.get(b"k").unwrap().0.unwrap().value, b"v");
    let a = node(&list, "node-a");
    let b = node(
        &format!("127.0.0.1:{};{}", dead_port(), etcd.endpoints()),
        "node-b",
    );
    let remote = Buf::pattern(1 << 20, 6);
    b.register_memory(remote.addr(), remote.len(), "cpu:0", true)
        .unwrap();
    write_read(&a, "node-b", &remote);
}

#[test]
fn three_member_cluster_survives_losing_its_leader() {
    let mut etcd = Etcd::cluster(3);
    let leader = etcd.leader(0);
    // Every client talks to the leader first.
    let url = etcd.url_starting_with(leader);
    let a = node(&url, "node-a");
    let b = node(&url, "node-b");
    let remote = Buf::pattern(1 << 20, 2);
    b.register_memory(remote.addr(), remote.len(), "cpu:0", true)
        .unwrap();
    write_read(&a, "node-b", &remote);
    etcd.kill(leader);
    // A new engine starts (its first endpoint is dead), registers, and everyone transfers.
    let c = node(&url, "node-c");
    let more = Buf::pattern(1 << 20, 12);
    c.register_memory(more.addr(), more.len(), "cpu:0", true)
        .unwrap();
    write_read(&a, "node-c", &more);
    write_read(&c, "node-b", &remote);
    // Leases are renewed on the remaining members across several periods.
    std::thread::sleep(Duration::from_secs(7));
    let cl = client(&etcd.url());
    assert_eq!(keys(&cl).len(), 6);
    let survivor = (0..3).find(|&i| i != leader).unwrap();
    assert_ne!(etcd.leader(survivor), leader, "a new leader");
    drop((a, b, c));
    assert!(keys(&cl).is_empty());
}

/// Cost of opening a segment through etcd: `cargo test --release --test etcd_metadata --
/// --ignored --nocapture measure_segment_open`.
#[test]
#[ignore = "measurement; run by hand"]
fn measure_segment_open() {
    let etcd = Etcd::single();
    let c = client(&etcd.endpoints());
    let n = 200;
    let t0 = Instant::now();
    for i in 0..n {
        c.put(format!("bench/{i}").as_bytes(), b"{}", 0).unwrap();
    }
    let put = t0.elapsed() / n;
    let t0 = Instant::now();
    for i in 0..n {
        c.get(format!("bench/{i}").as_bytes()).unwrap();
    }
    let get = t0.elapsed() / n;
    let peers: Vec<Engine> = (0..16)
        .map(|i| node(&etcd.url(), &format!("peer-{i}")))
        .collect();
    let bufs: Vec<Buf> = peers
        .iter()
        .map(|p| {
            let b = Buf::new(1 << 20, 0);
            p.register_memory(b.addr(), b.len(), "cpu:0", true).unwrap();
            b
        })
        .collect();
    let a = node(&etcd.url(), "opener");
    let mut cold = Vec::new();
    for i in 0..peers.len() {
        let t = Instant::now();
        a.open_segment(&format!("peer-{i}")).unwrap();
        cold.push(t.elapsed());
    }
    let rounds = 1000;
    let t = Instant::now();
    for _ in 0..rounds {
        for i in 0..peers.len() {
            a.open_segment(&format!("peer-{i}")).unwrap();
        }
    }
    let cached = t.elapsed() / (rounds * peers.len() as u32);
    // Closed and opened again: descriptors come from the watched cache, not from etcd.
    let mut reopen = Vec::new();
    for i in 0..peers.len() {
        let name = format!("peer-{i}");
        let id = a.open_segment(&name).unwrap();
        a.close_segment(id).unwrap();
        let t = Instant::now();
        a.open_segment(&name).unwrap();
        reopen.push(t.elapsed());
    }
    // A peer changes its descriptor: the next open re-reads it.
    let mut changed = Vec::new();
    for (i, p) in peers.iter().enumerate() {
        let extra = Buf::new(4096, 0);
        p.register_memory(extra.addr(), extra.len(), "cpu:0", true)
            .unwrap();
        let name = format!("peer-{i}");
        let id = a.open_segment(&name).unwrap();
        let t0 = Instant::now();
        let mut waited = Duration::ZERO;
        while a.segment_descriptor(id).unwrap().buffers.len() < 2 && waited < Duration::from_secs(5)
        {
            let t = Instant::now();
            a.open_segment(&name).unwrap();
            waited = t0.elapsed();
            if a.segment_descriptor(id).unwrap().buffers.len() >= 2 {
                changed.push(t.elapsed());
            }
        }
        p.unregister_memory(extra.addr()).unwrap();
    }
    let med = |v: &mut Vec<Duration>| {
        v.sort();
        v[v.len() / 2]
    };
    eprintln!(
        "etcd put {put:?}, get {get:?}; segment open: cold median {:?} (max {:?}), cached {cached:?}, \
         reopen after close (watched cache) median {:?}, open after the peer changed median {:?}",
        med(&mut cold),
        cold.last().unwrap(),
        med(&mut reopen),
        med(&mut changed)
    );
    drop(bufs);
}

#[test]
fn etcd_restarted_with_its_data_gets_the_latest_descriptor() {
    let mut etcd = Etcd::single();
    let (a, b, remote) = nodes_a_b(&etcd.url());
    write_read(&a, "node-b", &remote);
    etcd.kill(0);
    // A write while etcd is away fails (logged), and is made good once it returns.
    let more = Buf::pattern(1 << 20, 8);
    b.register_memory(more.addr(), more.len(), "cpu:0", true)
        .unwrap();
    write_read(&a, "node-b", &remote);
    std::thread::sleep(Duration::from_secs(1));
    etcd.restart(0, false);
    let cl = client(&etcd.endpoints());
    let latest = wait_until(Duration::from_secs(10), || {
        cl.get(b"mooncake/ram/node-b")
            .ok()
            .and_then(|(kv, _)| kv)
            .and_then(|kv| serde_json::from_slice::<serde_json::Value>(&kv.value).ok())
            .is_some_and(|d| d["buffers"].as_array().is_some_and(|b| b.len() == 2))
    });
    assert!(
        latest.is_some(),
        "b's latest descriptor written after etcd returned"
    );
    let seg = a.open_segment("node-b").unwrap();
    let fresh = wait_until(Duration::from_secs(5), || {
        a.open_segment("node-b").is_ok() && a.segment_descriptor(seg).unwrap().buffers.len() == 2
    });
    assert!(fresh.is_some(), "a's cached descriptor follows");
    write_read(&a, "node-b", &more);
    drop((a, b));
    assert!(keys(&cl).is_empty());
}
