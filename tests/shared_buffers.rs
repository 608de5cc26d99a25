//! Shared buffers (`alloc_shared`, Python's `allocate_managed_buffer`): a verified same-host peer
//! maps them and copies with memcpy; the owner's checks and `unregister`'s finality still hold.

mod common;
use common::*;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tidewire::{Engine, ErrorKind, Opcode, Request};

const LEN: usize = 4 << 20;

fn on() -> Engine {
    engine_with(&[("same_host", "1")])
}

fn sum(addr: u64, len: usize) -> u64 {
    // SAFETY: the test's own live buffer of `len` bytes.
    let s = unsafe { std::slice::from_raw_parts(addr as *const u8, len) };
    s.iter().map(|&x| x as u64).sum()
}

/// Child role: an engine with a shared buffer (pattern 7) and a plain registered one; prints
/// `READY name shared plain`, then obeys one command per stdin line.
#[test]
#[ignore]
fn shared_memory_child() {
    if std::env::var_os("TW_SHM_CHILD").is_none() {
        return;
    }
    let key = std::env::var("TW_SHM_CHILD_KEY").unwrap_or_default();
    let e = engine_with(&[("same_host", "1"), ("auth_key", &key)]);
    let shared = e.alloc_shared(LEN as u64).unwrap();
    let pat = Buf::pattern(LEN, 7);
    // SAFETY: `shared` is our fresh buffer of LEN bytes.
    unsafe { std::ptr::copy_nonoverlapping(pat.0.as_ptr(), shared as *mut u8, LEN) };
    let plain = Buf::pattern(LEN, 3);
    e.register_memory(plain.addr(), plain.len(), "cpu:0", true)
        .unwrap();
    println!("READY {} {shared} {}", e.name(), plain.addr());
    std::io::stdout().flush().unwrap();
    for line in std::io::stdin().lines() {
        match line.unwrap().trim() {
            "sum" => println!("SUM {}", sum(shared, LEN)),
            "unregister" => {
                // While the parent keeps writing: once unregister returns, nothing lands.
                e.unregister_memory(shared).unwrap();
                let before = sum(shared, LEN);
                std::thread::sleep(Duration::from_millis(500));
                println!("STABLE {}", (sum(shared, LEN) == before) as u8);
            }
            "free" => {
                e.free_shared(shared).unwrap();
                let again = e.free_shared(shared).unwrap_err().kind();
                println!("FREED {:?}", again);
            }
            _ => break,
        }
        std::io::stdout().flush().unwrap();
    }
}

struct Peer {
    child: Child,
    stdin: ChildStdin,
    out: BufReader<std::process::ChildStdout>,
    name: String,
    shared: u64,
    plain: u64,
}

impl Peer {
    fn start() -> Peer {
        Self::start_keyed("")
    }

    fn start_keyed(key: &str) -> Peer {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "shared_memory_child", "--nocapture", "--ignored"])
            .env("TW_SHM_CHILD", "1")
            .env("TW_SHM_CHILD_KEY", key)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let f = Self::expect(&mut out, "READY");
        Peer {
            child,
            stdin,
            out,
            name: f[1].clone(),
            shared: f[2].parse().unwrap(),
            plain: f[3].parse().unwrap(),
        }
    }

    fn expect(out: &mut BufReader<std::process::ChildStdout>, tag: &str) -> Vec<String> {
        let mut line = String::new();
        loop {
            line.clear();
            assert!(out.read_line(&mut line).unwrap() > 0, "child exited early");
            if line.starts_with(tag) {
                return line.split_whitespace().map(String::from).collect();
            }
        }
    }

    fn ask(&mut self, cmd: &str, tag: &str) -> Vec<String> {
        writeln!(self.stdin, "{cmd}").unwrap();
        Self::expect(&mut self.out, tag)
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        let _ = writeln!(self.stdin, "quit");
        let _ = self.child.wait();
    }
}

fn run(e: &Engine, reqs: &[Request]) -> Result<(), ErrorKind> {
    let b = e.alloc_batch(reqs.len()).unwrap();
    e.submit(b, reqs).unwrap();
    let r = e
        .wait_batch(b, Some(Duration::from_secs(20)))
        .map_err(|e| e.kind());
    e.free_batch(b).unwrap();
    r
}

#[test]
fn same_host_peer_maps_shared_buffers_and_owner_checks_still_apply() {
    let mut p = Peer::start();
    let a = on();
    let local = Buf::new(LEN, 0);
    a.register_memory(local.addr(), local.len(), "cpu:0", true)
        .unwrap();
    let seg = a.open_segment(&p.name).unwrap();
    assert_eq!(a.segment_path(seg).unwrap(), "shared-memory");
    let req = |op, local: u64, remote: u64, len: u64| Request {
        op,
        local,
        segment: seg,
        remote,
        len,
    };
    run(&a, &[req(Opcode::Read, local.addr(), p.shared, LEN as u64)]).unwrap();
    assert_eq!(
        local.0,
        Buf::pattern(LEN, 7).0,
        "bytes of the shared buffer"
    );
    // A plain registered buffer of the same peer goes through the socket route behind it.
    run(&a, &[req(Opcode::Read, local.addr(), p.plain, 4096)]).unwrap();
    assert_eq!(local.0[..4096], Buf::pattern(LEN, 3).0[..4096]);
    // Past the end of the shared buffer: not copied through the mapping, refused by the owner.
    assert_eq!(
        run(
            &a,
            &[req(
                Opcode::Write,
                local.addr(),
                p.shared + LEN as u64 - 8,
                16
            )]
        ),
        Err(ErrorKind::Rejected)
    );
    // A write through the mapping lands in the owner's memory.
    let ones = Buf::new(LEN, 1);
    a.register_memory(ones.addr(), ones.len(), "cpu:0", true)
        .unwrap();
    run(&a, &[req(Opcode::Write, ones.addr(), p.shared, LEN as u64)]).unwrap();
    assert_eq!(p.ask("sum", "SUM")[1], LEN.to_string());
}

/// Keeps writing 64 KiB pieces into the peer's shared buffer until `stop`; counts outcomes.
fn writer(
    a: Arc<Engine>,
    seg: i32,
    remote: u64,
    stop: Arc<AtomicBool>,
    ok: Arc<AtomicU64>,
    failed: Arc<AtomicU64>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let mut src = Buf::new(64 << 10, 0xAB);
        a.register_memory(src.addr(), src.len(), "cpu:0", true)
            .unwrap();
        let t0 = Instant::now();
        let mut off = 0u64;
        let mut round = 0u8;
        while !stop.load(Ordering::SeqCst) && t0.elapsed() < Duration::from_secs(15) {
            // A new value each time, so any write that lands changes the owner's bytes.
            round = round.wrapping_add(1);
            src.0.fill(round);
            let r = run(
                &a,
                &[Request {
                    op: Opcode::Write,
                    local: src.addr(),
                    segment: seg,
                    remote: remote + off,
                    len: src.len(),
                }],
            );
            off = (off + src.len()) % LEN as u64;
            match r {
                Ok(()) => ok.fetch_add(1, Ordering::SeqCst),
                Err(_) => failed.fetch_add(1, Ordering::SeqCst),
            };
        }
        let _ = a.unregister_memory(src.addr());
    })
}

fn race(cmd: &str, tag: &str) -> (Vec<String>, u64, u64) {
    let mut p = Peer::start();
    let a = Arc::new(on());
    let seg = a.open_segment(&p.name).unwrap();
    assert_eq!(a.segment_path(seg).unwrap(), "shared-memory");
    let (stop, ok, failed) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicU64::new(0)),
        Arc::new(AtomicU64::new(0)),
    );
    let w = writer(
        a.clone(),
        seg,
        p.shared,
        stop.clone(),
        ok.clone(),
        failed.clone(),
    );
    // Let the writer get going before the owner pulls the buffer.
    let t0 = Instant::now();
    while ok.load(Ordering::SeqCst) < 50 && t0.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(5));
    }
    let answer = p.ask(cmd, tag);
    // Writes keep failing (not hanging) after the owner pulled the buffer.
    let f0 = failed.load(Ordering::SeqCst);
    let t1 = Instant::now();
    while failed.load(Ordering::SeqCst) < f0 + 20 && t1.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(5));
    }
    stop.store(true, Ordering::SeqCst);
    w.join().unwrap();
    (
        answer,
        ok.load(Ordering::SeqCst),
        failed.load(Ordering::SeqCst),
    )
}

#[test]
fn unregister_while_a_same_host_peer_writes_is_final() {
    let (answer, ok, failed) = race("unregister", "STABLE");
    assert_eq!(answer[1], "1", "a byte landed after unregister returned");
    assert!(ok >= 50, "writes through the mapping ran ({ok})");
    assert!(failed >= 20, "writes after unregister fail ({failed})");
}

#[test]
fn free_while_a_same_host_peer_writes_is_safe() {
    let (answer, ok, failed) = race("free", "FREED");
    assert_eq!(answer[1], "InvalidArgument", "double free is refused");
    assert!(ok >= 50, "writes through the mapping ran ({ok})");
    assert!(failed >= 20, "writes after free fail ({failed})");
}

#[test]
fn with_an_auth_key_only_keyed_peers_map_shared_buffers() {
    let p = Peer::start_keyed("shm-secret");
    let keyed = engine_with(&[("same_host", "1"), ("auth_key", "shm-secret")]);
    let local = Buf::new(LEN, 0);
    keyed
        .register_memory(local.addr(), local.len(), "cpu:0", true)
        .unwrap();
    let seg = keyed.open_segment(&p.name).unwrap();
    assert_eq!(keyed.segment_path(seg).unwrap(), "shared-memory");
    let req = Request {
        op: Opcode::Read,
        local: local.addr(),
        segment: seg,
        remote: p.shared,
        len: LEN as u64,
    };
    run(&keyed, &[req]).unwrap();
    assert_eq!(local.0, Buf::pattern(LEN, 7).0);
    // Without the key the segment cannot even be opened, let alone mapped.
    let keyless = on();
    assert!(keyless.open_segment(&p.name).is_err());
    let wrong = engine_with(&[("same_host", "1"), ("auth_key", "other")]);
    assert!(wrong.open_segment(&p.name).is_err());
}
