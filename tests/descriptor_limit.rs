//! A server at its descriptor limit does not lock a new peer out. The server runs in a child
//! process whose open-file limit is 1,024 (soft and hard, so the library cannot raise it); this
//! process floods its data port with 3,000 idle connections from 127.0.0.1 and holds them, adds
//! more before each round, and in each round a new engine (a new peer) opens the server's segment
//! (a handshake on its RPC port) and READs 4 KiB, which must be served, byte for byte, within a
//! second. Before the connection core kept a reserve and evicted the quietest idle connection
//! at `EMFILE`, that open failed until the idle reaper ran (30 s).

mod common;
use common::*;
use std::io::{BufRead, BufReader, Read};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use tidewire::{Opcode, Request};

const ROLE_VAR: &str = "TW_FD_LIMIT_ROLE";
const LIMIT: u64 = 1024;
const FLOOD: usize = 3000;
const MORE_PER_ROUND: usize = 300;
const ROUNDS: usize = 5;
const BUF_LEN: usize = 1 << 20;

/// The server: limits itself to 1,024 descriptors, starts an engine with a registered buffer,
/// prints `READY <segment> <buffer address> <data port>` and serves until its stdin closes.
#[test]
#[ignore = "child process role, started by the other test"]
fn child_server_main() {
    if std::env::var(ROLE_VAR).is_err() {
        return;
    }
    let lim = libc::rlimit {
        rlim_cur: LIMIT,
        rlim_max: LIMIT,
    };
    // SAFETY: setrlimit reads one initialised rlimit through a valid reference.
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) }, 0);
    let e = engine();
    let buf = Buf::pattern(BUF_LEN, 9);
    share(&e, &[&buf]);
    println!("READY {} {} {}", e.name(), buf.addr(), e.data_port());
    let mut sink = Vec::new();
    let _ = std::io::stdin().read_to_end(&mut sink);
    drop(e);
}

fn flood(port: u16, n: usize, held: &mut Vec<TcpStream>) {
    for i in 0..n {
        match TcpStream::connect(("127.0.0.1", port)) {
            Ok(s) => held.push(s),
            Err(err) => panic!("flood connection {i}: {err}"),
        }
    }
}

#[test]
fn a_server_at_its_descriptor_limit_still_serves_a_new_peer() {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child_server_main", "--nocapture", "--ignored"])
        .env(ROLE_VAR, "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let ready = lines
        .by_ref()
        .map(|l| l.unwrap())
        .find(|l| l.starts_with("READY"))
        .expect("the server reports READY");
    let mut f = ready.split_whitespace().skip(1);
    let (name, remote, port) = (
        f.next().unwrap().to_string(),
        f.next().unwrap().parse::<u64>().unwrap(),
        f.next().unwrap().parse::<u16>().unwrap(),
    );

    let mut held = Vec::with_capacity(FLOOD + ROUNDS * MORE_PER_ROUND);
    flood(port, FLOOD, &mut held);
    // Let the server accept what it can: it runs out of descriptors long before 3,000.
    std::thread::sleep(Duration::from_millis(500));
    let expect = Buf::pattern(BUF_LEN, 9);
    let mut times = Vec::new();
    for round in 0..ROUNDS {
        flood(port, MORE_PER_ROUND, &mut held);
        std::thread::sleep(Duration::from_millis(200));
        let peer = engine();
        let local = Buf::new(4096, 0);
        share(&peer, &[&local]);
        let off = (round as u64 * 4096 * 17) % (BUF_LEN as u64 - 4096);
        let t0 = Instant::now();
        let seg = peer
            .open_segment(&name)
            .unwrap_or_else(|e| panic!("round {round}: openSegment at the limit: {e}"));
        let batch = peer.alloc_batch(1).unwrap();
        let req = Request {
            op: Opcode::Read,
            local: local.addr(),
            segment: seg,
            remote: remote + off,
            len: 4096,
        };
        peer.submit_and_wait(batch, &[req], Some(Duration::from_secs(5)))
            .unwrap_or_else(|e| panic!("round {round}: READ at the limit: {e}"));
        let took = t0.elapsed();
        peer.free_batch(batch).unwrap();
        assert_eq!(
            &local.0[..],
            &expect.0[off as usize..off as usize + 4096],
            "round {round}: the READ's bytes"
        );
        assert!(
            took < Duration::from_secs(1),
            "round {round}: open + READ took {took:?} with {} connections held",
            held.len()
        );
        times.push(took);
    }
    println!(
        "descriptor limit {LIMIT}: {} idle connections held; open + 4 KiB READ per round {times:?}",
        held.len()
    );
    drop(held);
    drop(child.stdin.take());
    let status = child.wait().unwrap();
    assert!(status.success(), "the server exited with {status}");
}
