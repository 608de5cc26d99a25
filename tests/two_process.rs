//! A target engine in a child process (this test binary re-run with a role variable): transfers
//! of every size, a 1,000-request batch and a scatter across a real process boundary, then the
//! child is killed mid-transfer and the initiator must fail the work promptly and keep serving
//! other peers.

mod common;
use common::*;
use std::io::{BufRead, BufReader};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};
use tidewire::engine::{ScatterRange, TaskState};
use tidewire::{Engine, ErrorKind, Opcode, Request};

const ROLE_VAR: &str = "TW_CHILD_ROLE";
/// Bytes the child registers.
const CHILD_LEN: usize = 64 << 20;
/// Seed of the pattern the child fills its buffer with.
const CHILD_SEED: u8 = 42;

/// Child entry point: does nothing unless started by [`Target::spawn`].
#[test]
#[ignore = "child process role, started by the other tests"]
fn child_target_main() {
    if std::env::var(ROLE_VAR).as_deref() != Ok("target") {
        return;
    }
    let e = engine();
    let buf = Buf::pattern(CHILD_LEN, CHILD_SEED);
    e.register_memory(buf.addr(), buf.len(), "cpu:0", true)
        .unwrap();
    println!("READY {} {} {}", e.name(), buf.addr(), buf.len());
    // Serve until the parent closes our stdin, or at most 60 s.
    let (tx, rx) = mpsc::channel::<()>();
    std::thread::spawn(move || {
        let mut sink = String::new();
        let mut stdin = std::io::stdin().lock();
        while stdin.read_line(&mut sink).is_ok_and(|n| n > 0) {
            sink.clear();
        }
        let _ = tx.send(());
    });
    let _ = rx.recv_timeout(Duration::from_secs(60));
    drop(e);
    drop(buf);
}

/// A running child target; killed and reaped on drop, even when the test panics.
struct Target {
    child: Child,
    stdin: Option<ChildStdin>,
    name: String,
    addr: u64,
    len: u64,
}

impl Target {
    fn spawn() -> Target {
        let exe = std::env::current_exe().unwrap();
        let mut child = Command::new(exe)
            .args(["--exact", "child_target_main", "--nocapture", "--ignored"])
            .env(ROLE_VAR, "target")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawning the child target");
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().unwrap();
        let mut t = Target {
            child,
            stdin,
            name: String::new(),
            addr: 0,
            len: 0,
        };
        let (tx, rx) = mpsc::channel::<String>();
        // Reads the READY line, then keeps draining so the child never blocks on stdout.
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if line.starts_with("READY ") {
                    let _ = tx.send(line);
                }
            }
        });
        let line = rx
            .recv_timeout(Duration::from_secs(30))
            .expect("child printed READY within 30 s");
        let parts: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(parts.len(), 4, "{line:?}");
        t.name = parts[1].to_string();
        t.addr = parts[2].parse().unwrap();
        t.len = parts[3].parse().unwrap();
        assert_eq!(t.len, CHILD_LEN as u64);
        t
    }

    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Target {
    fn drop(&mut self) {
        // Closing stdin asks the child to exit; give it a moment, then kill it.
        drop(self.stdin.take());
        let deadline = Instant::now() + Duration::from_secs(3);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        self.kill();
    }
}

fn run(e: &Engine, reqs: &[Request]) -> tidewire::Result<()> {
    let b = e.alloc_batch(reqs.len()).unwrap();
    e.submit(b, reqs).unwrap();
    let r = e.wait_batch(b, Some(Duration::from_secs(30)));
    assert_ne!(r.as_ref().err().map(|e| e.kind()), Some(ErrorKind::Timeout));
    e.free_batch(b).unwrap();
    r
}

fn req(op: Opcode, local: u64, segment: i32, remote: u64, len: u64) -> Request {
    Request {
        op,
        local,
        segment,
        remote,
        len,
    }
}

#[test]
fn transfers_across_processes() {
    let t = Target::spawn();
    let e = engine();
    let seg = e.open_segment(&t.name).unwrap();
    let expected = Buf::pattern(CHILD_LEN, CHILD_SEED);
    let mut local = Buf::new(CHILD_LEN, 0);
    e.register_memory(local.addr(), local.len(), "cpu:0", true)
        .unwrap();
    let desc = e.segment_descriptor(seg).unwrap();
    assert_eq!(desc.tw_pid, t.child.id(), "the peer really is the child");

    // READ the child's pattern in full: it crossed a process boundary intact.
    let t0 = Instant::now();
    run(&e, &[req(Opcode::Read, local.addr(), seg, t.addr, t.len)]).unwrap();
    let dt = t0.elapsed();
    assert!(local.0 == expected.0, "64 MiB pattern read intact");
    // Again, with the lanes connected and the destination pages faulted in.
    let t0 = Instant::now();
    run(&e, &[req(Opcode::Read, local.addr(), seg, t.addr, t.len)]).unwrap();
    let warm = t0.elapsed();
    let gbs = |d: Duration| CHILD_LEN as f64 / d.as_secs_f64() / 1e9;
    eprintln!(
        "two-process READ 64 MiB: cold {dt:?} ({:.2} GB/s), warm {warm:?} ({:.2} GB/s)",
        gbs(dt),
        gbs(warm)
    );

    // WRITE + READ back, 128 B .. 32 MiB, at an unaligned remote offset.
    let src = Buf::pattern(32 << 20, 77);
    e.register_memory(src.addr(), src.len(), "cpu:0", true)
        .unwrap();
    let mut size = 128u64;
    while size <= 32 << 20 {
        let remote = t.addr + 4099;
        local.0[..size as usize].fill(0);
        let t0 = Instant::now();
        run(&e, &[req(Opcode::Write, src.addr(), seg, remote, size)]).unwrap();
        let w = t0.elapsed();
        let t0 = Instant::now();
        run(&e, &[req(Opcode::Read, local.addr(), seg, remote, size)]).unwrap();
        let r = t0.elapsed();
        assert!(
            local.0[..size as usize] == src.0[..size as usize],
            "size {size}"
        );
        if size >= 1 << 20 {
            eprintln!("two-process {size} B: WRITE {w:?}, READ {r:?}");
        }
        size *= 8;
    }
    let big = 32u64 << 20;
    run(&e, &[req(Opcode::Write, src.addr(), seg, t.addr, big)]).unwrap();
    run(&e, &[req(Opcode::Read, local.addr(), seg, t.addr, big)]).unwrap();
    assert!(
        local.0[..big as usize] == src.0[..big as usize],
        "32 MiB round trip"
    );

    // 1,000-request batches, 4 KiB each, gapped locally.
    let n = 1000usize;
    let writes: Vec<Request> = (0..n)
        .map(|i| {
            let l = src.addr() + (i * 8192) as u64;
            req(Opcode::Write, l, seg, t.addr + (i * 4096) as u64, 4096)
        })
        .collect();
    run(&e, &writes).unwrap();
    local.0.fill(0);
    let reads: Vec<Request> = (0..n)
        .map(|i| {
            let l = local.addr() + (i * 8192) as u64;
            req(Opcode::Read, l, seg, t.addr + (i * 4096) as u64, 4096)
        })
        .collect();
    let t0 = Instant::now();
    run(&e, &reads).unwrap();
    eprintln!("two-process 1000 x 4 KiB READ batch: {:?}", t0.elapsed());
    for i in 0..n {
        assert_eq!(
            &local.0[i * 8192..i * 8192 + 4096],
            &src.0[i * 8192..i * 8192 + 4096],
            "request {i}"
        );
        assert!(
            local.0[i * 8192 + 4096..(i + 1) * 8192]
                .iter()
                .all(|&b| b == 0)
        );
    }

    // Scatter of 4,096 fragments of 128 B: the child's buffer now starts with what the batch
    // wrote (src at 8 KiB strides), so compare against that.
    let frags = 4096usize;
    local.0.fill(0);
    let lo: Vec<usize> = (0..frags).map(|i| i * 256).collect();
    let ro: Vec<usize> = (0..frags).map(|i| i * 128).collect();
    let len = vec![128usize; frags];
    let t0 = Instant::now();
    let op = e
        .submit_scatter(
            &[ScatterRange {
                op: Opcode::Read,
                segment: seg,
                remote_base: t.addr,
                remote_size: t.len,
                local_base: local.addr(),
                local_capacity: local.len(),
                local_offsets: &lo,
                remote_offsets: &ro,
                lengths: &len,
            }],
            None,
        )
        .unwrap();
    e.scatter_wait(op, Some(Duration::from_secs(20)), None)
        .unwrap();
    eprintln!("two-process scatter of 4096 x 128 B: {:?}", t0.elapsed());
    e.scatter_free(op).unwrap();
    for i in 0..frags {
        let r = i * 128;
        let (blk, off) = (r / 4096, r % 4096);
        let want = &src.0[blk * 8192 + off..blk * 8192 + off + 128];
        assert_eq!(&local.0[i * 256..i * 256 + 128], want, "fragment {i}");
    }
}

#[test]
fn peer_killed_mid_transfer_fails_promptly() {
    let mut doomed = Target::spawn();
    let e = engine();
    let seg = e.open_segment(&doomed.name).unwrap();
    let local = Buf::new(64 << 20, 0);
    e.register_memory(local.addr(), local.len(), "cpu:0", true)
        .unwrap();
    // 256 x 4 MiB = 1 GiB of READs: far longer than the time to kill the child. Local
    // destinations repeat (nothing is verified here).
    let count = 256usize;
    let chunk = 4u64 << 20;
    let reqs: Vec<Request> = (0..count)
        .map(|i| {
            let l = local.addr() + (i as u64 % 16) * chunk;
            req(
                Opcode::Read,
                l,
                seg,
                doomed.addr + (i as u64 % 8) * chunk,
                chunk,
            )
        })
        .collect();
    let b = e.alloc_batch(count).unwrap();
    e.submit(b, &reqs).unwrap();
    std::thread::sleep(Duration::from_millis(5));
    let waiting = (0..count)
        .filter(|&i| e.task_status(b, i).unwrap().state == TaskState::Waiting)
        .count();
    assert!(
        waiting > 0,
        "the transfer must still be in flight when the peer dies"
    );
    doomed.kill();
    let t0 = Instant::now();
    let r = e.wait_batch(b, Some(Duration::from_secs(20)));
    let dt = t0.elapsed();
    let err = r.expect_err("the batch cannot succeed once the peer is dead");
    assert_ne!(err.kind(), ErrorKind::Timeout, "the batch hung: {err}");
    assert!(
        matches!(
            err.kind(),
            ErrorKind::Socket | ErrorKind::Rejected | ErrorKind::Shutdown | ErrorKind::Protocol
        ),
        "{err}"
    );
    eprintln!("peer killed: batch failed after {dt:?} with {err}");
    let failed = (0..count)
        .filter(|&i| e.task_status(b, i).unwrap().error.is_some())
        .count();
    assert!(failed > 0);
    eprintln!("{waiting} of {count} tasks in flight at the kill, {failed} failed");
    e.free_batch(b).unwrap();

    // New work to the dead segment fails too (within the same bound), never hangs.
    let b = e.alloc_batch(1).unwrap();
    e.submit(
        b,
        &[req(Opcode::Read, local.addr(), seg, doomed.addr, 4096)],
    )
    .unwrap();
    let r = e.wait_batch(b, Some(Duration::from_secs(20)));
    assert!(
        r.as_ref().is_err_and(|e| e.kind() != ErrorKind::Timeout),
        "{r:?}"
    );
    e.free_batch(b).unwrap();

    // The same engine still works with a healthy peer: a second child process...
    let healthy = Target::spawn();
    let seg2 = e.open_segment(&healthy.name).unwrap();
    assert_ne!(seg2, seg);
    let expected = Buf::pattern(CHILD_LEN, CHILD_SEED);
    let sz = 8usize << 20;
    run(
        &e,
        &[req(
            Opcode::Read,
            local.addr(),
            seg2,
            healthy.addr,
            sz as u64,
        )],
    )
    .unwrap();
    assert!(local.0[..sz] == expected.0[..sz]);
    // ...and an engine in this process.
    let other = engine();
    let remote = Buf::pattern(1 << 20, 5);
    other
        .register_memory(remote.addr(), remote.len(), "cpu:0", true)
        .unwrap();
    let seg3 = e.open_segment(other.name()).unwrap();
    run(
        &e,
        &[req(
            Opcode::Read,
            local.addr(),
            seg3,
            remote.addr(),
            remote.len(),
        )],
    )
    .unwrap();
    assert!(local.0[..1 << 20] == remote.0[..]);
}
