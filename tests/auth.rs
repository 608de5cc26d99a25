//! Optional peer authentication (`auth_key` / `TW_AUTH_KEY`) between real processes: a keyed
//! target engine in a child process (this test binary re-run with a role variable, its key from
//! the environment) and initiators with the same key, another key, or none, over the P2P
//! handshake, over a metadata server (data connections only), and as raw sockets speaking plain
//! Mooncake frames. Refusals must be quick, logged by the target, and leave its memory untouched.

mod common;
use common::http_meta::MetadataServer;
use common::*;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};
use tidewire::{Engine, Opcode, Request};

const ROLE_VAR: &str = "TW_AUTH_CHILD";
const KEY: &str = "correct horse battery staple";
const CHILD_LEN: usize = 4 << 20;
const CHILD_SEED: u8 = 9;

/// Child entry point: a keyed target (key from `TW_AUTH_KEY`, read by `Config::default`).
#[test]
#[ignore = "child process role, started by the other tests"]
fn child_keyed_target_main() {
    if std::env::var(ROLE_VAR).as_deref() != Ok("target") {
        return;
    }
    let mut cfg = tidewire::Config::default();
    assert!(
        cfg.auth_key.is_on(),
        "TW_AUTH_KEY reaches the configuration"
    );
    cfg.set("rdma", "off").unwrap();
    if let Ok(url) = std::env::var("TW_AUTH_CHILD_METADATA") {
        cfg.set("metadata", &url).unwrap();
        cfg.set("local_server_name", "keyed-target").unwrap();
        cfg.set("bind_address", "127.0.0.1").unwrap();
    }
    let e = Engine::new(cfg).unwrap();
    let buf = Buf::pattern(CHILD_LEN, CHILD_SEED);
    e.register_memory(buf.addr(), buf.len(), "cpu:0", true)
        .unwrap();
    println!(
        "READY {} {} {} {} {}",
        e.name(),
        buf.addr(),
        buf.len(),
        e.rpc_port(),
        e.data_port()
    );
    let mut sink = String::new();
    let mut stdin = std::io::stdin().lock();
    while stdin.read_line(&mut sink).is_ok_and(|n| n > 0) {
        sink.clear();
    }
    drop(e);
    drop(buf);
}

/// A keyed child target; its stderr lines are kept for the tests to search.
struct Target {
    child: Child,
    stdin: Option<ChildStdin>,
    name: String,
    addr: u64,
    rpc_port: u16,
    data_port: u16,
    log: Arc<Mutex<Vec<String>>>,
}

impl Target {
    fn spawn(same_host: bool, metadata: Option<&str>) -> Target {
        let exe = std::env::current_exe().unwrap();
        let mut cmd = Command::new(exe);
        cmd.args([
            "--exact",
            "child_keyed_target_main",
            "--nocapture",
            "--ignored",
        ])
        .env(ROLE_VAR, "target")
        .env("TW_AUTH_KEY", KEY)
        .env("TW_SAME_HOST", if same_host { "1" } else { "0" })
        .env("TW_LOG_LEVEL", "warn")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
        if let Some(url) = metadata {
            cmd.env("TW_AUTH_CHILD_METADATA", url);
        }
        let mut child = cmd.spawn().expect("spawning the child target");
        let stdin = child.stdin.take();
        let (stdout, stderr) = (child.stdout.take().unwrap(), child.stderr.take().unwrap());
        let log = Arc::new(Mutex::new(Vec::new()));
        let log2 = log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                eprintln!("child: {line}");
                log2.lock().unwrap().push(line);
            }
        });
        let (tx, rx) = mpsc::channel::<String>();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if line.starts_with("READY ") {
                    let _ = tx.send(line);
                }
            }
        });
        let line = rx
            .recv_timeout(Duration::from_secs(30))
            .expect("child printed READY within 30 s");
        let f: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(f.len(), 6, "{line:?}");
        Target {
            child,
            stdin,
            name: f[1].to_string(),
            addr: f[2].parse().unwrap(),
            rpc_port: f[4].parse().unwrap(),
            data_port: f[5].parse().unwrap(),
            log,
        }
    }

    /// Waits (at most 5 s) for a log line containing every one of `parts`.
    fn expect_log(&self, parts: &[&str]) {
        let until = Instant::now() + Duration::from_secs(5);
        loop {
            if self
                .log
                .lock()
                .unwrap()
                .iter()
                .any(|l| parts.iter().all(|p| l.contains(p)))
            {
                return;
            }
            assert!(
                Instant::now() < until,
                "no child log line with {parts:?}; got {:?}",
                self.log.lock().unwrap()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn forget_log(&self) {
        self.log.lock().unwrap().clear();
    }
}

impl Drop for Target {
    fn drop(&mut self) {
        drop(self.stdin.take());
        let until = Instant::now() + Duration::from_secs(3);
        while Instant::now() < until {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn run(e: &Engine, reqs: &[Request]) -> tidewire::Result<()> {
    let b = e.alloc_batch(reqs.len()).unwrap();
    e.submit(b, reqs).unwrap();
    let r = e.wait_batch(b, Some(Duration::from_secs(20)));
    e.free_batch(b).unwrap();
    r
}

fn req(op: Opcode, local: &Buf, segment: i32, remote: u64, len: usize) -> Request {
    Request {
        op,
        local: local.addr(),
        segment,
        remote,
        len: len as u64,
    }
}

/// READs the child's pattern, WRITEs a new one and READs it back, checking every byte.
fn read_write_round_trip(e: &Engine, seg: i32, t: &Target) {
    let len = 1 << 20;
    let got = Buf::new(len, 0);
    let src = Buf::pattern(len, 201);
    e.register_memory(got.addr(), got.len(), "cpu:0", true)
        .unwrap();
    e.register_memory(src.addr(), src.len(), "cpu:0", true)
        .unwrap();
    run(e, &[req(Opcode::Read, &got, seg, t.addr, len)]).unwrap();
    assert!(
        got.0 == Buf::pattern(CHILD_LEN, CHILD_SEED).0[..len],
        "READ"
    );
    let at = t.addr + (2 << 20) + 13;
    run(e, &[req(Opcode::Write, &src, seg, at, len)]).unwrap();
    let back = Buf::new(len, 0);
    e.register_memory(back.addr(), back.len(), "cpu:0", true)
        .unwrap();
    run(e, &[req(Opcode::Read, &back, seg, at, len)]).unwrap();
    assert!(back.0 == src.0, "WRITE then READ back");
    // Small ones too (the inline path on the calling thread).
    run(e, &[req(Opcode::Write, &src, seg, at, 128)]).unwrap();
    run(e, &[req(Opcode::Read, &back, seg, at, 128)]).unwrap();
    assert!(back.0[..128] == src.0[..128]);
}

#[test]
fn same_key_transfers_over_tcp_and_the_same_host_path() {
    let t = Target::spawn(false, None);
    let e = engine_with(&[("auth_key", KEY)]);
    let seg = e
        .open_segment(&t.name)
        .expect("same key: handshake accepted");
    assert_eq!(e.segment_path(seg).unwrap(), "tcp");
    read_write_round_trip(&e, seg, &t);
    e.probe(&t.name)
        .expect("probe over an authenticated RPC connection");

    // The same-host path negotiates over the authenticated data connection.
    let t = Target::spawn(true, None);
    let e = engine_with(&[("auth_key", KEY), ("same_host", "1")]);
    let seg = e.open_segment(&t.name).unwrap();
    read_write_round_trip(&e, seg, &t);
    let path = e.segment_path(seg).unwrap();
    assert!(path == "same-host" || path == "tcp", "{path}");
    eprintln!("same key, same host: {path}");
    assert!(
        !t.log.lock().unwrap().iter().any(|l| l.contains("refused")),
        "no refusal between peers with the same key"
    );
}

#[test]
fn wrong_key_is_refused_quickly_on_both_sides() {
    let t = Target::spawn(false, None);
    let e = engine_with(&[("auth_key", "another key")]);
    let t0 = Instant::now();
    let err = e.open_segment(&t.name).unwrap_err();
    assert!(t0.elapsed() < Duration::from_secs(3), "{:?}", t0.elapsed());
    let msg = err.message().to_string();
    assert!(msg.contains("another auth_key"), "{msg}");
    assert!(msg.contains(&t.name), "the error names the segment: {msg}");
    t.expect_log(&["rpc: refused 127.0.0.1:", "another auth_key"]);
}

#[test]
fn keyless_tidewire_peer_is_refused_at_the_handshake() {
    let t = Target::spawn(false, None);
    let e = engine_with(&[]);
    let t0 = Instant::now();
    assert!(e.open_segment(&t.name).is_err());
    assert!(t0.elapsed() < Duration::from_secs(3));
    t.expect_log(&[
        "rpc: refused 127.0.0.1:",
        "peer did not authenticate (auth_key is set)",
    ]);
    // A keyed engine against an unkeyed target: a clear error on the client side.
    let plain = engine_with(&[]);
    let keyed = engine_with(&[("auth_key", KEY)]);
    let t0 = Instant::now();
    let err = keyed.open_segment(plain.name()).unwrap_err();
    assert!(t0.elapsed() < Duration::from_secs(3));
    assert!(
        err.message()
            .contains("peer refused authentication: is auth_key set on both sides?"),
        "{}",
        err.message()
    );
}

#[test]
fn raw_mooncake_frames_are_refused_and_write_nothing() {
    let t = Target::spawn(false, None);
    // A plain v1 WRITE of 4 KiB of 0xEE into the child's registered buffer.
    let mut frame = Vec::new();
    frame.extend_from_slice(&4096u64.to_le_bytes());
    frame.extend_from_slice(&t.addr.to_le_bytes());
    frame.push(1);
    frame.extend_from_slice(&[0u8; 7]);
    frame.extend_from_slice(&[0xEE; 4096]);
    let mut s = TcpStream::connect(("127.0.0.1", t.data_port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let _ = s.write_all(&frame);
    let t0 = Instant::now();
    let mut b = [0u8; 16];
    let n = s.read(&mut b).unwrap_or(0);
    assert_eq!(n, 0, "the server answers nothing and closes");
    assert!(t0.elapsed() < Duration::from_secs(3));
    t.expect_log(&["tcp: refused 127.0.0.1:", "peer did not authenticate"]);
    // A plain Mooncake probe on the handshake port: closed without a reply.
    let mut s = TcpStream::connect(("127.0.0.1", t.rpc_port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut probe = 3u64.to_ne_bytes().to_vec();
    probe.push(3);
    probe.extend_from_slice(b"{}");
    let _ = s.write_all(&probe);
    assert_eq!(s.read(&mut b).unwrap_or(0), 0);
    // The child's memory is untouched: a keyed peer reads the original pattern.
    let e = engine_with(&[("auth_key", KEY)]);
    let seg = e.open_segment(&t.name).unwrap();
    let got = Buf::new(4096, 0);
    e.register_memory(got.addr(), got.len(), "cpu:0", true)
        .unwrap();
    run(&e, &[req(Opcode::Read, &got, seg, t.addr, 4096)]).unwrap();
    assert!(got.0 == Buf::pattern(CHILD_LEN, CHILD_SEED).0[..4096]);
}

#[test]
fn data_connections_need_the_key_even_when_the_descriptor_is_public() {
    let meta = MetadataServer::start();
    let url = meta.url();
    let t = Target::spawn(false, Some(&url));
    let node = |name: &str, key: &str| {
        engine_with(&[
            ("metadata", &url),
            ("local_server_name", name),
            ("bind_address", "127.0.0.1"),
            ("auth_key", key),
        ])
    };
    // Keyless: the descriptor is public, the bytes are not.
    let e = node("keyless", "");
    let seg = e.open_segment(&t.name).unwrap();
    let got = Buf::new(4096, 0);
    e.register_memory(got.addr(), got.len(), "cpu:0", true)
        .unwrap();
    let t0 = Instant::now();
    assert!(run(&e, &[req(Opcode::Read, &got, seg, t.addr, 4096)]).is_err());
    assert!(run(&e, &[req(Opcode::Write, &got, seg, t.addr, 4096)]).is_err());
    assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
    assert!(got.0.iter().all(|&b| b == 0));
    t.expect_log(&[
        "tcp: refused 127.0.0.1:",
        "peer did not authenticate (auth_key is set)",
    ]);
    // Another key.
    t.forget_log();
    let e = node("wrong-key", "not it");
    let seg = e.open_segment(&t.name).unwrap();
    e.register_memory(got.addr(), got.len(), "cpu:0", true)
        .unwrap();
    assert!(run(&e, &[req(Opcode::Read, &got, seg, t.addr, 4096)]).is_err());
    assert!(got.0.iter().all(|&b| b == 0));
    t.expect_log(&["tcp: refused 127.0.0.1:", "another auth_key"]);
    // The right key: data moves.
    let e = node("keyed", KEY);
    let seg = e.open_segment(&t.name).unwrap();
    read_write_round_trip(&e, seg, &t);
}

#[test]
fn in_process_shortcut_only_joins_engines_with_the_same_key() {
    let meta = MetadataServer::start();
    let url = meta.url();
    let node = |name: &str, key: &str| {
        engine_with(&[
            ("metadata", &url),
            ("local_server_name", name),
            ("bind_address", "127.0.0.1"),
            ("same_host", "1"),
            ("auth_key", key),
        ])
    };
    let target = node("in-proc-target", KEY);
    let buf = Buf::pattern(4096, 3);
    target
        .register_memory(buf.addr(), buf.len(), "cpu:0", true)
        .unwrap();
    let same = node("in-proc-same", KEY);
    let seg = same.open_segment(target.name()).unwrap();
    assert_eq!(same.segment_path(seg).unwrap(), "in-process");
    let other = node("in-proc-other", "different");
    let seg = other.open_segment(target.name()).unwrap();
    // Not the in-process memcpy: a socket path, where the data server asks for the key.
    assert_ne!(other.segment_path(seg).unwrap(), "in-process");
    let got = Buf::new(4096, 0);
    other
        .register_memory(got.addr(), got.len(), "cpu:0", true)
        .unwrap();
    assert!(run(&other, &[req(Opcode::Read, &got, seg, buf.addr(), 4096)]).is_err());
    assert!(got.0.iter().all(|&b| b == 0));
}
