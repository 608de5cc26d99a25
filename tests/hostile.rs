//! Hostile peers on one host, in this process: raw sockets on the data and handshake ports, a
//! notification flood, an endless HTTP metadata body, and registration games. One test per row of
//! the hardening table; each names its row. Tests that count threads or time run one at a time.

mod common;
use common::*;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tidewire::engine::TaskState;
use tidewire::{Engine, Opcode, Request};

const WRITE_V2: u8 = 0x81;

fn threads_now() -> usize {
    std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("Threads:"))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

fn fds_now() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

/// One transfer of `len` bytes; returns the task state.
fn one(e: &Engine, op: Opcode, local: u64, seg: i32, remote: u64, len: u64) -> TaskState {
    let b = e.alloc_batch(1).unwrap();
    e.submit(
        b,
        &[Request {
            op,
            local,
            segment: seg,
            remote,
            len,
        }],
    )
    .unwrap();
    let _ = e.wait_batch(b, Some(Duration::from_secs(10)));
    let st = e.task_status(b, 0).unwrap().state;
    let _ = e.free_batch(b);
    st
}

/// Row 2: a WRITE header arrives, `unregister` runs on the target, then the payload follows. When
/// `unregister` has returned, no byte may land in the range (and it must return promptly).
#[test]

fn payload_after_unregister_never_lands() {
    let _s = serial();
    let t = engine();
    let buf = Buf::new(256 << 10, 0);
    t.register_memory(buf.addr(), buf.len(), "cpu:0", true)
        .unwrap();
    let mut s = TcpStream::connect(("127.0.0.1", t.data_port())).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(&header(128 << 10, buf.addr(), WRITE_V2))
        .unwrap();
    // A few payload bytes, so the server is certainly inside the request.
    s.write_all(&[0xAB; 16]).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let t0 = Instant::now();
    t.unregister_memory(buf.addr()).unwrap();
    let took = t0.elapsed();
    assert!(took < Duration::from_secs(3), "unregister took {took:?}");
    // The rest of the payload, after unregister returned.
    let _ = s.write_all(&[0xAB; (128 << 10) - 16]);
    let mut reply = [0u8; 8];
    let _ = s.read(&mut reply);
    std::thread::sleep(Duration::from_millis(100));
    let landed = buf.0[16..].iter().filter(|&&b| b != 0).count();
    assert_eq!(landed, 0, "{landed} bytes landed after unregister returned");
}

/// Row 4: a client trickles a byte every 300 ms into the handshake port. Legitimate handshakes
/// still answer promptly and the engine shuts down within 1 s.
#[test]

fn slow_loris_on_handshake_port() {
    let _s = serial();
    let t = engine();
    let stop = Arc::new(AtomicBool::new(false));
    let mut lorises = Vec::new();
    for _ in 0..4 {
        let mut c = TcpStream::connect(("127.0.0.1", t.rpc_port())).unwrap();
        let stop = stop.clone();
        lorises.push(std::thread::spawn(move || {
            // A frame that claims 1 MiB, then one byte at a time (bounded: at most 20 s).
            let _ = c.write_all(&((1u64 << 20).to_ne_bytes()));
            let t0 = Instant::now();
            while !stop.load(Ordering::Relaxed) && t0.elapsed() < Duration::from_secs(20) {
                if c.write_all(&[1]).is_err() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(300));
            }
        }));
    }
    std::thread::sleep(Duration::from_millis(500));
    let i = engine();
    for _ in 0..2 {
        let t0 = Instant::now();
        let seg = i.open_segment(t.name());
        let took = t0.elapsed();
        assert!(seg.is_ok(), "open_segment failed after {took:?}: {seg:?}");
        assert!(took < Duration::from_secs(2), "open_segment took {took:?}");
        i.close_segment(seg.unwrap()).unwrap();
    }
    let t0 = Instant::now();
    drop(t);
    let took = t0.elapsed();
    stop.store(true, Ordering::Relaxed);
    for l in lorises {
        l.join().unwrap();
    }
    assert!(took <= Duration::from_secs(1), "shutdown took {took:?}");
}

/// Data connections the row-5 test allows.
const MAX_DATA_CONNECTIONS: usize = 256;

/// Row 5: 3000 idle connections to the data port. Threads and fds stay bounded, a legitimate
/// READ still works, and idle connections are closed by the server.
#[test]

fn idle_connection_flood_on_data_port() {
    let _s = serial();
    let t = engine_with(&[
        ("data_idle_timeout_ms", "2000"),
        ("max_data_connections", &MAX_DATA_CONNECTIONS.to_string()),
    ]);
    let buf = Buf::pattern(1 << 20, 3);
    t.register_memory(buf.addr(), buf.len(), "cpu:0", true)
        .unwrap();
    let i = engine();
    let seg = i.open_segment(t.name()).unwrap();
    let local = Buf::new(1 << 20, 0);
    i.register_memory(local.addr(), local.len(), "cpu:0", true)
        .unwrap();
    assert_eq!(
        one(&i, Opcode::Read, local.addr(), seg, buf.addr(), 4096),
        TaskState::Completed
    );
    let (threads0, fds0) = (threads_now(), fds_now());
    let mut idle = Vec::new();
    for _ in 0..3000 {
        match TcpStream::connect(("127.0.0.1", t.data_port())) {
            Ok(c) => idle.push(c),
            Err(e) => panic!("connect {}: {e}", idle.len()),
        }
    }
    std::thread::sleep(Duration::from_millis(500));
    let (threads, fds) = (threads_now(), fds_now());
    // Our own 3000 client ends are fds too; the server side must stay under its cap.
    let server_fds = fds.saturating_sub(fds0 + 3000);
    let max_conns = MAX_DATA_CONNECTIONS;
    assert!(
        threads <= threads0 + max_conns + 8,
        "threads {threads0} -> {threads}"
    );
    assert!(server_fds <= max_conns + 8, "server fds +{server_fds}");
    let t0 = Instant::now();
    let st = one(&i, Opcode::Read, local.addr(), seg, buf.addr() + 4096, 8192);
    assert_eq!(st, TaskState::Completed, "legitimate READ during the flood");
    assert!(
        t0.elapsed() < Duration::from_secs(3),
        "READ took {:?}",
        t0.elapsed()
    );
    assert_eq!(&local.0[..8192], &buf.0[4096..4096 + 8192]);
    // Idle connections the server accepted are closed after its idle timeout.
    std::thread::sleep(Duration::from_millis(3500));
    let mut open = 0;
    for c in &mut idle {
        c.set_nonblocking(true).unwrap();
        let mut b = [0u8; 1];
        if let Err(e) = c.read(&mut b) {
            if e.kind() == std::io::ErrorKind::WouldBlock {
                open += 1;
            }
        }
    }
    drop(idle);
    assert!(
        open <= max_conns,
        "{open} idle connections still open after the idle timeout"
    );
    std::thread::sleep(Duration::from_millis(500));
    assert!(threads_now() <= threads0 + 8, "threads released");
}

/// Row 6: 400 notifications of ~1 MiB. The queue holds at most its configured bytes and count;
/// refused notifications fail on the sender's side; taking the queue makes room again.
#[test]

fn notification_flood_is_bounded() {
    let _s = serial();
    let max_bytes: usize = 16 << 20;
    let t = engine_with(&[
        ("notify_max_bytes", &max_bytes.to_string()),
        ("notify_max_count", "1000"),
    ]);
    let i = engine();
    let seg = i.open_segment(t.name()).unwrap();
    let msg = "x".repeat((1 << 20) - 4096);
    let mut refused = 0;
    for n in 0..400 {
        if i.send_notify(seg, &format!("n{n}"), &msg).is_err() {
            refused += 1;
        }
    }
    let held = t.take_notifications();
    let bytes: usize = held.iter().map(|n| n.name.len() + n.msg.len()).sum();
    assert!(
        bytes <= max_bytes,
        "queue holds {bytes} bytes, bound {max_bytes}"
    );
    assert_eq!(
        held.len() + refused,
        400,
        "every notification is held or refused"
    );
    assert!(refused > 0);
    // Oldest first, and room again once taken.
    assert_eq!(held[0].name, "n0");
    i.send_notify(seg, "after", "ok").unwrap();
    assert_eq!(t.take_notifications()[0].name, "after");
    // The count bound too.
    let t2 = engine_with(&[("notify_max_count", "10")]);
    let seg2 = i.open_segment(t2.name()).unwrap();
    let sent = (0..20)
        .filter(|n| i.send_notify(seg2, &n.to_string(), "m").is_ok())
        .count();
    assert_eq!((sent, t2.take_notifications().len()), (10, 10));
}

/// Row 7: an HTTP metadata server answers 200 and streams an endless body. Engine creation fails
/// within a few seconds and reads a bounded number of bytes.
#[test]
fn endless_http_metadata_body_is_bounded() {
    let _s = serial();
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let sent = Arc::new(AtomicU64::new(0));
    let sent2 = sent.clone();
    let server = std::thread::spawn(move || {
        l.set_nonblocking(false).unwrap();
        let t0 = Instant::now();
        // Serve connections for at most 30 s; each gets an endless 200 body.
        let (mut c, _) = l.accept().unwrap();
        let mut req = [0u8; 4096];
        let _ = c.read(&mut req);
        let _ = c.write_all(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n");
        let chunk = vec![b'7'; 64 << 10];
        while t0.elapsed() < Duration::from_secs(30) {
            if c.write_all(&chunk).is_err() {
                break;
            }
            sent2.fetch_add(chunk.len() as u64, Ordering::Relaxed);
        }
    });
    let mut cfg = tidewire::Config::default();
    cfg.set("metadata", &format!("http://127.0.0.1:{port}/metadata"))
        .unwrap();
    cfg.set("local_server_name", "hostile-http-test").unwrap();
    cfg.set("rdma", "off").unwrap();
    let t0 = Instant::now();
    let r = Engine::new(cfg);
    let took = t0.elapsed();
    assert!(
        r.is_err(),
        "engine creation must fail against an endless body"
    );
    assert!(took < Duration::from_secs(10), "failed only after {took:?}");
    server.join().unwrap();
    let bytes = sent.load(Ordering::Relaxed);
    assert!(
        bytes < 128 << 20,
        "the client read {bytes} bytes of an endless body"
    );
}

/// Row 8: a range registered remote-accessible, then registered again with
/// `remote_accessible = false`. The choice (documented in `Engine::register_memory`): a
/// re-registration that changes the flag is refused. Either way, after the first registration is
/// removed, peers cannot READ the range.
#[test]

fn reregistration_cannot_change_remote_accessible() {
    let t = engine();
    let buf = Buf::pattern(64 << 10, 8);
    t.register_memory(buf.addr(), buf.len(), "cpu:0", true)
        .unwrap();
    let again = t.register_memory(buf.addr(), buf.len(), "cpu:0", false);
    let err = again.expect_err("a re-registration that changes remote_accessible is refused");
    assert!(err.message().contains("remote_accessible"), "{err}");
    // The other direction too.
    let priv_buf = Buf::pattern(64 << 10, 9);
    t.register_memory(priv_buf.addr(), priv_buf.len(), "cpu:0", false)
        .unwrap();
    assert!(
        t.register_memory(priv_buf.addr(), priv_buf.len(), "cpu:0", true)
            .is_err()
    );
    t.unregister_memory(buf.addr()).unwrap();
    let i = engine();
    let seg = i.open_segment(t.name()).unwrap();
    let local = Buf::new(64 << 10, 0);
    i.register_memory(local.addr(), local.len(), "cpu:0", true)
        .unwrap();
    for addr in [buf.addr(), priv_buf.addr()] {
        assert_eq!(
            one(&i, Opcode::Read, local.addr(), seg, addr, 4096),
            TaskState::Failed,
            "peers cannot READ {addr:#x}"
        );
    }
    assert!(local.0.iter().all(|&b| b == 0));
}

/// A rejected WRITE ends its connection (as in Mooncake), but the replies written before the
/// rejection must still arrive: a large READ reply queued in the server's socket is not lost to
/// a connection reset when the server closes with the rejected payload unread.
#[test]
fn rejection_close_delivers_earlier_replies() {
    const READ_V1: u8 = 0;
    const WRITE_V1: u8 = 1;
    let _s = serial();
    let t = engine();
    let len = 8usize << 20;
    let buf = Buf::pattern(len, 3);
    // Larger than the server's receive buffer: most of it is still unread in the kernel.
    let hidden = Buf::new(2 << 20, 0);
    t.register_memory(buf.addr(), buf.len(), "cpu:0", true)
        .unwrap();
    t.register_memory(hidden.addr(), hidden.len(), "cpu:0", false)
        .unwrap();
    let mut s = TcpStream::connect(("127.0.0.1", t.data_port())).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut reqs = header(len as u64, buf.addr(), READ_V1).to_vec();
    reqs.extend_from_slice(&header(hidden.0.len() as u64, hidden.addr(), WRITE_V1));
    reqs.resize(reqs.len() + hidden.0.len(), 0xEE);
    // The server stops reading after the rejection, so the payload is written from a thread.
    let mut w = s.try_clone().unwrap();
    let writer = std::thread::spawn(move || {
        let _ = w.write_all(&reqs);
    });
    // Read slowly, so most of the READ reply still sits in the server's socket when it rejects
    // the WRITE behind it.
    let mut got = Vec::with_capacity(len);
    let mut chunk = vec![0u8; 64 << 10];
    let end = loop {
        match s.read(&mut chunk) {
            Ok(0) => break None,
            Ok(n) => got.extend_from_slice(&chunk[..n]),
            Err(e) => break Some(e),
        }
        std::thread::sleep(Duration::from_millis(1));
    };
    let _ = writer.join();
    assert_eq!(end.map(|e| e.kind()), None, "after {} bytes", got.len());
    assert_eq!(got.len(), len, "the whole READ reply, then EOF");
    assert!(got == buf.0, "READ reply bytes differ");
    assert!(hidden.0.iter().all(|&b| b == 0), "rejected WRITE landed");
    // The engine (and its server threads) goes before the memory it served.
    drop(s);
    drop(t);
}

/// Peers that come and go (a target restarted on a new port, its segment closed and a new one
/// opened) must not leave their lane threads and sockets behind in the initiator: a peer nothing
/// refers to any more is stopped once its last work is past the transfer deadline. Found by the
/// soak (`tidewire-bench soak`): +4 threads and +2 fds per restart, for ever.
#[test]
fn restarted_peers_leave_no_lanes_behind() {
    let _s = serial();
    let a = engine_with(&[("transfer_timeout_ms", "300")]);
    let local = Buf::pattern(64 << 10, 5);
    a.register_memory(local.addr(), local.len(), "cpu:0", true)
        .unwrap();
    let mut first = None;
    for round in 0..5 {
        let b = engine();
        let remote = Buf::new(64 << 10, 0);
        b.register_memory(remote.addr(), remote.len(), "cpu:0", true)
            .unwrap();
        let seg = a.open_segment(b.name()).unwrap();
        let st = one(
            &a,
            Opcode::Write,
            local.addr(),
            seg,
            remote.addr(),
            64 << 10,
        );
        assert_eq!(st, TaskState::Completed, "round {round}");
        drop(b);
        a.close_segment(seg).unwrap();
        // Past the transfer deadline plus the eviction slack.
        std::thread::sleep(Duration::from_millis(1500));
        let now = (threads_now(), fds_now());
        let base = *first.get_or_insert(now);
        assert!(
            now.0 <= base.0 + 2 && now.1 <= base.1 + 2,
            "round {round}: threads/fds {base:?} -> {now:?}"
        );
    }
    // The engine goes before the memory registered with it.
    drop(a);
}
