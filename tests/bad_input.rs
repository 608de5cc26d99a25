//! Bad input from every side: raw bytes on the data port and the RPC port, and misuse of the
//! engine API. Every case gets a clear error, corrupts nothing, and leaves the engine serving.

mod common;
use common::*;
use std::io::{ErrorKind as IoKind, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::time::{Duration, Instant};
use tidewire::engine::transfer::MAX_BATCH_CAPACITY;
use tidewire::{Engine, ErrorKind, Opcode, Request};

const REJECT: [u8; 8] = [0x01, 0, 0, 0, 0x56, 0x54, 0x43, 0x4d];
const OK: [u8; 8] = [0, 0, 0, 0, 0x56, 0x54, 0x43, 0x4d];

const READ_V2: u8 = 0x80;
const WRITE_V2: u8 = 0x81;
const READ_V1: u8 = 0;

fn connect(port: u16) -> TcpStream {
    let s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.set_write_timeout(Some(Duration::from_secs(5))).unwrap();
    s
}

fn read_n(s: &mut TcpStream, n: usize) -> Vec<u8> {
    let mut b = vec![0u8; n];
    s.read_exact(&mut b).unwrap();
    b
}

/// Asserts the server closed the connection (EOF or reset) without sending more bytes.
fn assert_closed(s: &mut TcpStream) {
    let mut b = [0u8; 64];
    match s.read(&mut b) {
        Ok(0) => {}
        Ok(n) => panic!("expected close, got {n} bytes: {:02x?}", &b[..n]),
        Err(e) if e.kind() == IoKind::ConnectionReset => {}
        Err(e) => panic!("expected close, got {e}"),
    }
}

/// A fresh connection can still READ `len` bytes at `addr` and gets `want`.
fn assert_serving(port: u16, addr: u64, want: &[u8]) {
    let mut s = connect(port);
    s.write_all(&header(want.len() as u64, addr, READ_V2))
        .unwrap();
    assert_eq!(read_n(&mut s, 8), OK);
    assert_eq!(read_n(&mut s, want.len()), want);
}

struct Target {
    e: Engine,
    buf: Buf,
    port: u16,
}

fn target() -> Target {
    let e = engine();
    let buf = Buf::pattern(1 << 20, 17);
    e.register_memory(buf.addr(), buf.len(), "cpu:0", true)
        .unwrap();
    let port = e.data_port();
    Target { e, buf, port }
}

#[test]
fn data_port_valid_v2_read_and_write() {
    let t = target();
    let mut s = connect(t.port);
    // READ: status OK, then exactly the payload.
    s.write_all(&header(4096, t.buf.addr() + 100, READ_V2))
        .unwrap();
    assert_eq!(read_n(&mut s, 8), OK);
    assert_eq!(read_n(&mut s, 4096), &t.buf.0[100..4196]);
    // WRITE: payload, then an OK ack; the bytes landed.
    let payload: Vec<u8> = (0..5000u32).map(|i| (i * 13 + 1) as u8).collect();
    let mut msg = header(payload.len() as u64, t.buf.addr() + 8192, WRITE_V2).to_vec();
    msg.extend_from_slice(&payload);
    s.write_all(&msg).unwrap();
    assert_eq!(read_n(&mut s, 8), OK);
    assert_eq!(&t.buf.0[8192..8192 + payload.len()], &payload[..]);
    // v1 READ: no status frame, payload only; same connection.
    s.write_all(&header(64, t.buf.addr(), READ_V1)).unwrap();
    assert_eq!(read_n(&mut s, 64), &t.buf.0[..64]);
    // Several pipelined requests in one write are answered in order.
    let mut msg = Vec::new();
    for k in 0..10u64 {
        msg.extend_from_slice(&header(16, t.buf.addr() + k * 16, READ_V2));
    }
    s.write_all(&msg).unwrap();
    for k in 0..10usize {
        assert_eq!(read_n(&mut s, 8), OK);
        assert_eq!(read_n(&mut s, 16), &t.buf.0[k * 16..k * 16 + 16]);
    }
}

#[test]
fn data_port_rejects_bad_ranges() {
    let t = target();
    let before = t.buf.0.clone();
    let unregistered = t.buf.addr() + t.buf.len() + (1 << 30);

    // v2 READ of an unregistered address: reject frame, connection stays usable.
    let mut s = connect(t.port);
    s.write_all(&header(64, unregistered, READ_V2)).unwrap();
    assert_eq!(read_n(&mut s, 8), REJECT);
    // A range that starts inside and ends outside the region is rejected the same way.
    s.write_all(&header(64, t.buf.addr() + t.buf.len() - 32, READ_V2))
        .unwrap();
    assert_eq!(read_n(&mut s, 8), REJECT);
    // Zero size.
    s.write_all(&header(0, t.buf.addr(), READ_V2)).unwrap();
    assert_eq!(read_n(&mut s, 8), REJECT);
    // addr + size overflows u64.
    s.write_all(&header(u64::MAX - 10, t.buf.addr(), READ_V2))
        .unwrap();
    assert_eq!(read_n(&mut s, 8), REJECT);
    // NULL address.
    s.write_all(&header(16, 0, READ_V2)).unwrap();
    assert_eq!(read_n(&mut s, 8), REJECT);
    // Still in sync: a valid READ on the same connection works.
    s.write_all(&header(32, t.buf.addr() + 7, READ_V2)).unwrap();
    assert_eq!(read_n(&mut s, 8), OK);
    assert_eq!(read_n(&mut s, 32), &t.buf.0[7..39]);

    // v2 WRITE to an unregistered address: reject frame, then the connection closes (the
    // payload cannot be skipped safely). Only the header is sent, so the close is clean.
    let mut s = connect(t.port);
    s.write_all(&header(64, unregistered, WRITE_V2)).unwrap();
    assert_eq!(read_n(&mut s, 8), REJECT);
    assert_closed(&mut s);
    // A zero-size or overflowing WRITE is refused the same way.
    for (size, addr) in [(0, t.buf.addr()), (u64::MAX, t.buf.addr())] {
        let mut s = connect(t.port);
        s.write_all(&header(size, addr, WRITE_V2)).unwrap();
        assert_eq!(read_n(&mut s, 8), REJECT);
        assert_closed(&mut s);
    }

    // v1 header for an unregistered address: closed without a byte.
    for op in [READ_V1, 1] {
        let mut s = connect(t.port);
        s.write_all(&header(64, unregistered, op)).unwrap();
        assert_closed(&mut s);
    }
    assert!(t.buf.0 == before, "no rejected request touched memory");
    assert_serving(t.port, t.buf.addr(), &t.buf.0[..256]);
}

#[test]
fn data_port_survives_truncation_and_garbage() {
    let t = target();
    let before = t.buf.0.clone();
    // Truncated header, then close.
    {
        let mut s = connect(t.port);
        s.write_all(&header(64, t.buf.addr(), READ_V2)[..10])
            .unwrap();
        s.shutdown(Shutdown::Write).unwrap();
        assert_closed(&mut s);
    }
    // Truncated header, then the client just vanishes.
    {
        let mut s = connect(t.port);
        s.write_all(&[1, 2, 3]).unwrap();
    }
    // A valid WRITE header whose payload never fully arrives: the bytes that did arrive may
    // land (payloads go straight to memory), nothing past them does, and no ack is sent.
    {
        let mut s = connect(t.port);
        s.write_all(&header(4096, t.buf.addr(), WRITE_V2)).unwrap();
        s.write_all(&[0xAB; 100]).unwrap();
        s.shutdown(Shutdown::Write).unwrap();
        assert_closed(&mut s);
    }
    assert!(
        t.buf.0[100..] == before[100..],
        "nothing past the received bytes"
    );
    let before = t.buf.0.clone();
    assert_serving(t.port, t.buf.addr() + 4096, &t.buf.0[4096..8192]);

    // Garbage: 100 bytes of 0xAA decode as four v2 READ headers of absurd ranges (each
    // rejected) and a truncated tail. Nothing but reject frames may come back.
    {
        let mut s = connect(t.port);
        s.write_all(&[0xAA; 100]).unwrap();
        s.shutdown(Shutdown::Write).unwrap();
        let mut got = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            assert!(Instant::now() < deadline);
            let mut b = [0u8; 256];
            match s.read(&mut b) {
                Ok(0) => break,
                Ok(n) => got.extend_from_slice(&b[..n]),
                Err(e) if e.kind() == IoKind::ConnectionReset => break,
                Err(e) => panic!("{e}"),
            }
        }
        assert_eq!(got.len(), 4 * 8, "{got:02x?}");
        assert!(got.chunks(8).all(|c| c == REJECT));
    }
    // Random-looking garbage, several connections at once.
    let mut conns: Vec<TcpStream> = (0..8u64)
        .map(|k| {
            let mut s = connect(t.port);
            let junk: Vec<u8> = (0..200u64)
                .map(|i| (i.wrapping_mul(0x9E37_79B9).wrapping_add(k * 77) >> 7) as u8)
                .collect();
            let _ = s.write_all(&junk);
            s
        })
        .collect();
    for s in &mut conns {
        let _ = s.shutdown(Shutdown::Write);
        let mut sink = Vec::new();
        let _ = s.read_to_end(&mut sink);
    }
    assert!(t.buf.0 == before, "garbage touched no memory");
    assert_serving(t.port, t.buf.addr(), &t.buf.0[..1024]);
    // And the engine API still transfers through its own data port.
    let peer = engine();
    let local = Buf::new(4096, 0);
    peer.register_memory(local.addr(), local.len(), "cpu:0", true)
        .unwrap();
    let seg = peer.open_segment(t.e.name()).unwrap();
    let b = peer.alloc_batch(1).unwrap();
    peer.submit(
        b,
        &[Request {
            op: Opcode::Read,
            local: local.addr(),
            segment: seg,
            remote: t.buf.addr(),
            len: 4096,
        }],
    )
    .unwrap();
    peer.wait_batch(b, Some(Duration::from_secs(10))).unwrap();
    assert_eq!(&local.0[..], &t.buf.0[..4096]);
}

// ---- RPC port ----

fn rpc_frame(ty: u8, body: &[u8]) -> Vec<u8> {
    let mut f = ((body.len() + 1) as u64).to_ne_bytes().to_vec();
    f.push(ty);
    f.extend_from_slice(body);
    f
}

/// Reads one reply frame: (type byte, body), or None when the server closed instead.
fn rpc_reply(s: &mut TcpStream) -> Option<(u8, Vec<u8>)> {
    let mut len = [0u8; 8];
    match s.read_exact(&mut len) {
        Ok(()) => {}
        Err(e) if matches!(e.kind(), IoKind::UnexpectedEof | IoKind::ConnectionReset) => {
            return None;
        }
        Err(e) => panic!("reading reply length: {e}"),
    }
    let len = u64::from_ne_bytes(len) as usize;
    assert!((1..=1 << 20).contains(&len), "reply length {len}");
    let body = read_n(s, len);
    Some((body[0], body[1..].to_vec()))
}

fn rpc_call(port: u16, raw: &[u8]) -> Option<(u8, Vec<u8>)> {
    let mut s = connect(port);
    s.write_all(raw).unwrap();
    rpc_reply(&mut s)
}

fn json(b: &[u8]) -> serde_json::Value {
    serde_json::from_slice(b).unwrap_or_else(|e| panic!("{e}: {:?}", String::from_utf8_lossy(b)))
}

fn assert_metadata_works(e: &Engine) {
    let (ty, body) = rpc_call(e.rpc_port(), &rpc_frame(1, b"{}")).expect("metadata reply");
    assert_eq!(ty, 1);
    let v = json(&body);
    assert_eq!(v["name"], e.name());
    assert_eq!(v["tcp_data_port"], e.data_port());
}

#[test]
fn rpc_port_bad_frames() {
    // A short per-connection deadline so the silent client below costs one second.
    let e = engine_with(&[("connect_timeout_ms", "1000")]);
    let buf = Buf::new(4096, 0);
    e.register_memory(buf.addr(), buf.len(), "cpu:0", true)
        .unwrap();
    let t = Target {
        port: e.data_port(),
        e,
        buf,
    };
    let port = t.e.rpc_port();
    assert_metadata_works(&t.e);

    // 2 GiB length: dropped at once, nothing allocated or awaited.
    let t0 = Instant::now();
    let mut raw = (2u64 << 30).to_ne_bytes().to_vec();
    raw.push(1);
    raw.extend_from_slice(b"{}");
    assert_eq!(rpc_call(port, &raw), None);
    assert!(t0.elapsed() < Duration::from_secs(2), "{:?}", t0.elapsed());
    assert_metadata_works(&t.e);
    // u64::MAX length.
    assert_eq!(rpc_call(port, &u64::MAX.to_ne_bytes()), None);
    // Zero length.
    assert_eq!(rpc_call(port, &0u64.to_ne_bytes()), None);
    assert_metadata_works(&t.e);
    // Length larger than what is sent, then the client half-closes: dropped.
    {
        let mut s = connect(port);
        s.write_all(&100u64.to_ne_bytes()).unwrap();
        s.write_all(b"\x01{}").unwrap();
        s.shutdown(Shutdown::Write).unwrap();
        assert_eq!(rpc_reply(&mut s), None);
    }
    // A client that connects and sends nothing holds the (serial) server only until its
    // deadline.
    let silent = connect(port);
    let t0 = Instant::now();
    assert_metadata_works(&t.e);
    assert!(t0.elapsed() < Duration::from_secs(4), "{:?}", t0.elapsed());
    drop(silent);

    // Probe.
    let (ty, body) = rpc_call(port, &rpc_frame(3, b"{}")).unwrap();
    assert_eq!(ty, 3);
    assert_eq!(json(&body), serde_json::json!({"status": "success"}));

    // Notify with malformed JSON, and with missing fields: empty notify_msg, nothing queued.
    for bad in [&b"{not json"[..], b"{\"name\":1}", b"[]", b""] {
        let (ty, body) = rpc_call(port, &rpc_frame(2, bad)).unwrap();
        assert_eq!(ty, 2);
        assert_eq!(
            json(&body)["notify_msg"],
            "",
            "{:?}",
            String::from_utf8_lossy(bad)
        );
    }
    assert!(t.e.take_notifications().is_empty());
    // A good one still goes through.
    let (_, body) = rpc_call(port, &rpc_frame(2, br#"{"name":"n","notify_msg":"m"}"#)).unwrap();
    assert_eq!(json(&body)["notify_msg"], "success");
    let got = t.e.take_notifications();
    assert_eq!(got.len(), 1);
    assert_eq!((got[0].name.as_str(), got[0].msg.as_str()), ("n", "m"));

    // Old protocol: no type byte, the payload is JSON (first byte '{' > 3), treated as a
    // connection request and answered with the same leading byte.
    let old = br#"{"local_nic_path":"x","peer_nic_path":"y","qp_num":[]}"#;
    let mut raw = (old.len() as u64).to_ne_bytes().to_vec();
    raw.extend_from_slice(old);
    let (ty, body) = rpc_call(port, &raw).expect("old-protocol reply");
    assert_eq!(ty, b'{');
    assert!(!body.is_empty());
    // Connection request (type 0) on a TCP-only engine: a JSON reply, not a hang.
    let (ty, body) = rpc_call(port, &rpc_frame(0, old)).unwrap();
    assert_eq!(ty, 0);
    assert!(json(&body).is_object());
    // Garbage that is not even a length.
    {
        let mut s = connect(port);
        s.write_all(&[0xFF; 3]).unwrap();
        s.shutdown(Shutdown::Write).unwrap();
        assert_eq!(rpc_reply(&mut s), None);
    }
    assert_metadata_works(&t.e);
    t.e.probe(t.e.name()).unwrap();
}

// ---- Engine API ----

fn req(local: u64, segment: i32, remote: u64, len: u64) -> Request {
    Request {
        op: Opcode::Read,
        local,
        segment,
        remote,
        len,
    }
}

#[test]
fn api_rejects_bad_registrations_segments_and_ids() {
    let e = engine();
    let kind = |r: tidewire::Result<()>| r.unwrap_err().kind();
    assert_eq!(
        kind(e.register_memory(0, 4096, "cpu:0", true)),
        ErrorKind::InvalidArgument
    );
    let buf = Buf::new(1 << 16, 0);
    assert_eq!(
        kind(e.register_memory(buf.addr(), 0, "cpu:0", true)),
        ErrorKind::InvalidArgument
    );
    assert_eq!(
        kind(e.register_memory(u64::MAX - 100, 4096, "cpu:0", true)),
        ErrorKind::InvalidArgument
    );
    assert_eq!(
        kind(e.register_memory_batch(&[(buf.addr(), 64), (0, 64)], "cpu:0")),
        ErrorKind::InvalidArgument
    );
    assert_eq!(
        kind(e.unregister_memory(buf.addr())),
        ErrorKind::AddressNotRegistered
    );
    assert!(
        e.local_descriptor().buffers.is_empty(),
        "nothing half-registered"
    );
    e.register_memory(buf.addr(), buf.len(), "cpu:0", true)
        .unwrap();
    assert_eq!(
        kind(e.register_memory(buf.addr() + 8, 64, "cpu:0", true)),
        ErrorKind::AddressOverlapped
    );

    // Segments.
    assert_eq!(
        kind(e.open_segment("").map(|_| ())),
        ErrorKind::InvalidArgument
    );
    assert_eq!(kind(e.close_segment(99)), ErrorKind::UnknownSegment);
    let t0 = Instant::now();
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead_port = dead.local_addr().unwrap().port();
    drop(dead);
    assert_eq!(
        kind(
            e.open_segment(&format!("127.0.0.1:{dead_port}"))
                .map(|_| ())
        ),
        ErrorKind::UnknownSegment
    );
    assert!(t0.elapsed() < Duration::from_secs(10));

    let b = e.alloc_batch(4).unwrap();
    assert_eq!(
        kind(e.submit(b, &[req(buf.addr(), 77, 0x1000, 16)])),
        ErrorKind::UnknownSegment
    );
    assert_eq!(
        kind(e.submit(b, &[req(buf.addr(), -1, 0x1000, 16)])),
        ErrorKind::UnknownSegment
    );
    // Unregistered local range (whole, straddling, NULL), with a valid request first: the
    // submit is all-or-nothing.
    let other = engine();
    let remote = Buf::pattern(4096, 1);
    other
        .register_memory(remote.addr(), remote.len(), "cpu:0", true)
        .unwrap();
    let seg = e.open_segment(other.name()).unwrap();
    let good = req(buf.addr(), seg, remote.addr(), 16);
    for bad_local in [buf.addr() + buf.len(), buf.addr() + buf.len() - 8, 0x10] {
        assert_eq!(
            kind(e.submit(b, &[good, req(bad_local, seg, remote.addr(), 16)])),
            ErrorKind::AddressNotRegistered
        );
    }
    // NULL / overflowing remote.
    assert_eq!(
        kind(e.submit(b, &[req(buf.addr(), seg, 0, 16)])),
        ErrorKind::InvalidArgument
    );
    assert_eq!(
        kind(e.submit(b, &[req(buf.addr(), seg, u64::MAX - 4, 16)])),
        ErrorKind::InvalidArgument
    );
    assert_eq!(e.batch_len(b).unwrap(), 0, "nothing was queued");
    // Too many requests.
    assert_eq!(kind(e.submit(b, &[good; 5])), ErrorKind::TooManyRequests);
    // Remote range the peer does not have: rejected by the peer, reported on the task.
    e.submit(b, &[req(buf.addr(), seg, remote.addr() + 4000, 200)])
        .unwrap();
    assert_eq!(
        e.wait_batch(b, Some(Duration::from_secs(10)))
            .unwrap_err()
            .kind(),
        ErrorKind::Rejected
    );
    assert_eq!(
        kind(e.task_status(b, 1).map(|_| ())),
        ErrorKind::InvalidArgument
    );

    // Stale, double-freed and forged batch ids.
    e.free_batch(b).unwrap();
    assert_eq!(kind(e.free_batch(b)), ErrorKind::InvalidId);
    assert_eq!(kind(e.submit(b, &[good])), ErrorKind::InvalidId);
    assert_eq!(kind(e.wait_batch(b, None)), ErrorKind::InvalidId);
    assert_eq!(kind(e.task_status(b, 0).map(|_| ())), ErrorKind::InvalidId);
    assert_eq!(kind(e.batch_len(b).map(|_| ())), ErrorKind::InvalidId);
    for forged in [0u64, 1, 0xdead_beef, u64::MAX] {
        assert_eq!(kind(e.free_batch(forged)), ErrorKind::InvalidId);
    }
    let b2 = e.alloc_batch(1).unwrap();
    assert_ne!(b2, b, "a freed id is not reused at once");
    assert_eq!(kind(e.free_batch(b)), ErrorKind::InvalidId);
    e.free_batch(b2).unwrap();

    // Over the capacity cap.
    assert_eq!(
        kind(e.alloc_batch(MAX_BATCH_CAPACITY + 1).map(|_| ())),
        ErrorKind::InvalidArgument
    );
    assert_eq!(
        kind(e.alloc_batch(usize::MAX).map(|_| ())),
        ErrorKind::InvalidArgument
    );
    // An empty batch waits and frees fine.
    let b3 = e.alloc_batch(0).unwrap();
    e.wait_batch(b3, Some(Duration::ZERO)).unwrap();
    e.free_batch(b3).unwrap();
}

#[test]
fn free_while_busy_and_wait_timeout_do_not_cancel() {
    let a = engine();
    let b = engine();
    let chunk = 8usize << 20;
    let remote = Buf::pattern(chunk, 33);
    b.register_memory(remote.addr(), remote.len(), "cpu:0", true)
        .unwrap();
    let local = Buf::new(8 * chunk, 0);
    a.register_memory(local.addr(), local.len(), "cpu:0", true)
        .unwrap();
    let seg = a.open_segment(b.name()).unwrap();
    // 32 x 8 MiB = 256 MiB of READs; each 8 MiB local slot is written by four requests.
    let count = 32;
    let reqs: Vec<Request> = (0..count)
        .map(|i| {
            req(
                local.addr() + ((i % 8) * chunk) as u64,
                seg,
                remote.addr(),
                chunk as u64,
            )
        })
        .collect();
    let id = a.alloc_batch(count).unwrap();
    a.submit(id, &reqs).unwrap();
    // In flight: freeing is refused, a 1 ms wait times out, and neither cancels anything.
    let busy = a.free_batch(id).unwrap_err();
    assert_eq!(busy.kind(), ErrorKind::Busy, "{busy}");
    let to = a
        .wait_batch(id, Some(Duration::from_millis(1)))
        .unwrap_err();
    assert_eq!(to.kind(), ErrorKind::Timeout, "{to}");
    assert_eq!(a.batch_len(id).unwrap(), count, "the batch is intact");
    let t0 = Instant::now();
    a.wait_batch(id, Some(Duration::from_secs(30))).unwrap();
    eprintln!(
        "256 MiB loopback READ finished {:?} after the timed-out wait",
        t0.elapsed()
    );
    for i in 0..count {
        let s = a.task_status(id, i).unwrap();
        assert_eq!(s.transferred, chunk as u64, "task {i}");
    }
    for slot in 0..8 {
        assert!(
            local.0[slot * chunk..(slot + 1) * chunk] == remote.0[..],
            "slot {slot}"
        );
    }
    a.free_batch(id).unwrap();
    assert_eq!(a.free_batch(id).unwrap_err().kind(), ErrorKind::InvalidId);
}
