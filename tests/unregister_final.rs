//! "Unregister is final" on every path, and per-frame deadlines on
//! the data server:
//!
//! - A peer keeps writing into a buffer over TCP, the in-process memcpy path and the same-host
//!   `process_vm_*` path (a real second process) while the owner unregisters it: `unregister`
//!   returns promptly, the writer's tasks all end COMPLETED or FAILED, and once `unregister` has
//!   returned no further byte lands in the buffer (it stays mapped, so a late write would show).
//! - The same-host protocol, by a raw client: an approval holds `unregister` until the
//!   initiator's "copy done" frame, or for at most the lease time without one.
//! - A raw client trickling a header or a payload a byte at a time (each byte well within the
//!   read timeout) is cut off within the frame's deadline.

mod common;
use common::*;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};
use tidewire::engine::TaskState;
use tidewire::{Engine, Opcode, Request};

const LEN: usize = 256 << 10;
const ROLE_VAR: &str = "TW_FENCE_WRITER";

/// v2 | validate-only | WRITE.
const VM_WRITE: u8 = 0xC1;
/// v2 | validate-only | copy done.
const VM_DONE: u8 = 0xE0;
const STATUS_OK: [u8; 8] = [0, 0, 0, 0, 0x56, 0x54, 0x43, 0x4d];

/// Tallies of a writer's tasks: (completed, failed, anything else).
#[derive(Debug, Default, Clone, Copy)]
struct Tally(u64, u64, u64);

/// Writes `LEN` bytes of a changing non-zero value to `remote` on `seg` until `stop` (or 30 s),
/// one task per batch; signals `started` after the first completed write.
fn write_loop(
    e: &Engine,
    seg: i32,
    remote: u64,
    stop: &AtomicBool,
    started: impl FnOnce(),
) -> Tally {
    let local = Buf::new(LEN, 1);
    e.register_memory(local.addr(), local.len(), "cpu:0", true)
        .unwrap();
    let mut t = Tally::default();
    let mut started = Some(started);
    let t0 = Instant::now();
    let mut seq = 1u8;
    // Relaxed: a stop flag; one more round is harmless.
    while !stop.load(Ordering::Relaxed) && t0.elapsed() < Duration::from_secs(30) {
        seq = seq.wrapping_add(1).max(1);
        // SAFETY: the buffer is ours, LEN bytes long, and not in flight between tasks.
        unsafe { std::ptr::write_bytes(local.addr() as *mut u8, seq, LEN) };
        let b = e.alloc_batch(1).unwrap();
        e.submit(
            b,
            &[Request {
                op: Opcode::Write,
                local: local.addr(),
                segment: seg,
                remote,
                len: LEN as u64,
            }],
        )
        .unwrap();
        let _ = e.wait_batch(b, Some(Duration::from_secs(10)));
        match e.task_status(b, 0).unwrap().state {
            TaskState::Completed => {
                t.0 += 1;
                if let Some(f) = started.take() {
                    f();
                }
            }
            TaskState::Failed => {
                t.1 += 1;
                // Rejected from now on: no need to spin (and flood the log).
                std::thread::sleep(Duration::from_millis(20));
            }
            _ => t.2 += 1,
        }
        let _ = e.free_batch(b);
    }
    t
}

/// Reads the buffer at `addr` without letting the compiler assume nobody else writes it.
fn snapshot(addr: u64, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| {
            // SAFETY: the buffer is alive and `len` bytes long; other writers race us on
            // purpose, and bytes are plain data.
            unsafe { std::ptr::read_volatile((addr as *const u8).add(i)) }
        })
        .collect()
}

/// Unregisters `buf` from `target` while a writer runs, then watches the still-mapped buffer for
/// 500 ms: it must not change. Returns how long `unregister` took.
fn unregister_and_watch(target: &Engine, buf: &Buf) -> Duration {
    let t0 = Instant::now();
    target.unregister_memory(buf.addr()).unwrap();
    let took = t0.elapsed();
    let after = snapshot(buf.addr(), LEN);
    assert!(after.iter().any(|&b| b != 0), "the writer never wrote");
    let until = Instant::now() + Duration::from_millis(500);
    while Instant::now() < until {
        let now = snapshot(buf.addr(), LEN);
        let changed = now.iter().zip(&after).filter(|(a, b)| a != b).count();
        assert_eq!(
            changed, 0,
            "{changed} bytes landed after unregister returned"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    took
}

/// A writer engine of this process (`same_host` = `flag`) against a target engine of this
/// process: the path is "in-process" (memcpy) or "tcp".
fn in_process_writer_race(same_host: &str, path: &str) {
    let _s = serial();
    let target = engine_with(&[("same_host", same_host)]);
    let buf = Buf::new(LEN, 0);
    target
        .register_memory(buf.addr(), buf.len(), "cpu:0", true)
        .unwrap();
    let writer = Arc::new(engine_with(&[("same_host", same_host)]));
    let seg = writer.open_segment(target.name()).unwrap();
    assert_eq!(writer.segment_path(seg).unwrap(), path);
    let stop = Arc::new(AtomicBool::new(false));
    let (tx, rx) = mpsc::channel();
    let (w, st, remote) = (writer.clone(), stop.clone(), buf.addr());
    let h = std::thread::spawn(move || {
        write_loop(&w, seg, remote, &st, move || {
            let _ = tx.send(());
        })
    });
    rx.recv_timeout(Duration::from_secs(20))
        .expect("first write completed");
    std::thread::sleep(Duration::from_millis(100));
    let took = unregister_and_watch(&target, &buf);
    stop.store(true, Ordering::Relaxed);
    let t = h.join().unwrap();
    assert!(took < Duration::from_secs(3), "unregister took {took:?}");
    assert_eq!(t.2, 0, "tasks neither completed nor failed: {t:?}");
    assert!(t.0 > 0 && t.1 > 0, "{t:?}");
}

#[test]
fn in_process_memcpy_writer_stops_at_unregister() {
    in_process_writer_race("1", "in-process");
}

#[test]
fn tcp_writer_stops_at_unregister() {
    in_process_writer_race("0", "tcp");
}

/// Child role: opens the segment named in the role variable and writes into it until stdin
/// closes; prints `READY <path>` after its first completed write and `DONE c f other` at the end.
#[test]
#[ignore = "child process role, started by the other tests"]
fn child_writer_main() {
    let Ok(spec) = std::env::var(ROLE_VAR) else {
        return;
    };
    let f: Vec<&str> = spec.split_whitespace().collect();
    let (name, remote) = (f[0], f[1].parse::<u64>().unwrap());
    let e = engine_with(&[("same_host", "1")]);
    let seg = e.open_segment(name).unwrap();
    let path = e.segment_path(seg).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let st = stop.clone();
    std::thread::spawn(move || {
        let mut sink = [0u8; 16];
        let mut stdin = std::io::stdin().lock();
        while matches!(stdin.read(&mut sink), Ok(n) if n > 0) {}
        st.store(true, Ordering::Relaxed);
    });
    if f.get(2) == Some(&"once") {
        // One write, then idle (until stdin closes): its "copy done" report must reach the
        // target by itself.
        let once = Arc::new(AtomicBool::new(false));
        let o = once.clone();
        let t = write_loop(&e, seg, remote, &once, move || {
            o.store(true, Ordering::Relaxed);
        });
        println!("READY {path} {}", t.0);
        let _ = std::io::stdout().flush();
        let t0 = Instant::now();
        while !stop.load(Ordering::Relaxed) && t0.elapsed() < Duration::from_secs(30) {
            std::thread::sleep(Duration::from_millis(10));
        }
        println!("DONE 1 0 0");
        let _ = std::io::stdout().flush();
        return;
    }
    let t = write_loop(&e, seg, remote, &stop, || {
        println!("READY {path}");
        let _ = std::io::stdout().flush();
    });
    println!("DONE {} {} {}", t.0, t.1, t.2);
    let _ = std::io::stdout().flush();
}

/// Starts the writer child with `role` (`"<segment> <addr>[ once]"`); its READY and DONE lines
/// arrive on the returned channel.
fn spawn_writer(role: &str) -> Writer {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child_writer_main", "--nocapture", "--ignored"])
        .env(ROLE_VAR, role)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let stdin = child.stdin.take();
    let out = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel::<String>();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            if line.starts_with("READY ") || line.starts_with("DONE ") {
                let _ = tx.send(line);
            }
        }
    });
    (child, stdin, rx)
}

/// A same-host target with a registered buffer, and a writer child (`mode`: `""` or `" once"`)
/// that has reported `ready` for it.
fn target_with_writer(mode: &str, ready: &str) -> (Engine, Buf, Writer) {
    let target = engine_with(&[("same_host", "1")]);
    let buf = Buf::new(LEN, 0);
    target
        .register_memory(buf.addr(), buf.len(), "cpu:0", true)
        .unwrap();
    let writer = spawn_writer(&format!("{} {}{mode}", target.name(), buf.addr()));
    let line = writer
        .2
        .recv_timeout(Duration::from_secs(30))
        .expect("READY");
    assert_eq!(line, ready);
    (target, buf, writer)
}

/// The writer child, its stdin (closing it ends the child) and its READY/DONE lines.
type Writer = (Child, Option<ChildStdin>, mpsc::Receiver<String>);

#[test]
fn same_host_process_vm_writer_stops_at_unregister() {
    let _s = serial();
    let (target, buf, (mut child, stdin, rx)) = target_with_writer("", "READY same-host");
    std::thread::sleep(Duration::from_millis(100));
    let took = unregister_and_watch(&target, &buf);
    drop(stdin);
    let done = rx.recv_timeout(Duration::from_secs(30)).expect("DONE");
    let n: Vec<u64> = done
        .split_whitespace()
        .skip(1)
        .map(|x| x.parse().unwrap())
        .collect();
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(10) {
        if let Ok(Some(_)) = child.try_wait() {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let status = child.wait().unwrap();
    assert!(status.success(), "writer exited with {status}");
    assert!(took < Duration::from_secs(3), "unregister took {took:?}");
    assert_eq!(n[2], 0, "tasks neither completed nor failed: {n:?}");
    assert!(n[0] > 0 && n[1] > 0, "{n:?}");
}

/// The same-host protocol seen by a raw initiator: after an approval, `unregister` waits for the
/// "copy done" frame; a "copy done" for approvals never given ends the connection.
#[test]
fn approval_holds_unregister_until_copy_done() {
    let _s = serial();
    let t = Arc::new(engine());
    let buf = Buf::new(LEN, 0);
    t.register_memory(buf.addr(), buf.len(), "cpu:0", true)
        .unwrap();
    let mut s = TcpStream::connect(("127.0.0.1", t.data_port())).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(&header(LEN as u64, buf.addr(), VM_WRITE))
        .unwrap();
    let mut st = [0u8; 8];
    s.read_exact(&mut st).unwrap();
    assert_eq!(st, STATUS_OK, "approved");
    let (tx, rx) = mpsc::channel();
    let (t2, addr) = (t.clone(), buf.addr());
    let t0 = Instant::now();
    std::thread::spawn(move || {
        t2.unregister_memory(addr).unwrap();
        let _ = tx.send(Instant::now());
    });
    // The initiator is still copying: unregister must not have returned.
    assert!(
        rx.recv_timeout(Duration::from_millis(400)).is_err(),
        "unregister returned while an approved copy was in flight"
    );
    // The copy ends, then the initiator says so.
    let copied = Instant::now();
    s.write_all(&header(1, 0, VM_DONE)).unwrap();
    let returned = rx
        .recv_timeout(Duration::from_secs(3))
        .expect("unregister returned after copy done");
    assert!(returned >= copied);
    assert!(
        returned - copied < Duration::from_millis(500),
        "unregister took {:?} after copy done",
        returned - copied
    );
    // Now rejected; and a "copy done" for approvals never given ends the connection.
    s.write_all(&header(LEN as u64, buf.addr(), VM_WRITE))
        .unwrap();
    s.read_exact(&mut st).unwrap();
    assert_ne!(st, STATUS_OK, "rejected after unregister");
    s.write_all(&header(5, 0, VM_DONE)).unwrap();
    let mut b = [0u8; 1];
    assert!(
        matches!(s.read(&mut b), Ok(0) | Err(_)),
        "connection closed after a bogus copy-done"
    );
    assert!(t0.elapsed() < Duration::from_secs(5));
}

/// An initiator that never reports its copy done (an old tidewire, or one that died) holds
/// `unregister` for at most the lease time, even after its connection closed.
#[test]
fn approval_without_copy_done_expires() {
    let _s = serial();
    let t = engine();
    let buf = Buf::new(LEN, 0);
    t.register_memory(buf.addr(), buf.len(), "cpu:0", true)
        .unwrap();
    let mut s = TcpStream::connect(("127.0.0.1", t.data_port())).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(&header(LEN as u64, buf.addr(), VM_WRITE))
        .unwrap();
    let mut st = [0u8; 8];
    s.read_exact(&mut st).unwrap();
    assert_eq!(st, STATUS_OK);
    drop(s);
    let t0 = Instant::now();
    t.unregister_memory(buf.addr()).unwrap();
    let took = t0.elapsed();
    assert!(
        took >= Duration::from_millis(1000) && took < Duration::from_secs(4),
        "unregister took {took:?}"
    );
}

/// Waits until the server ends the connection (a read sees EOF or an error); returns when.
fn wait_closed(s: &mut TcpStream, until: Instant) -> Option<Instant> {
    s.set_nonblocking(true).unwrap();
    let mut b = [0u8; 64];
    while Instant::now() < until {
        match s.read(&mut b) {
            Ok(0) => return Some(Instant::now()),
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(_) => return Some(Instant::now()),
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    None
}

/// Sends `bytes` one at a time, `gap` apart, until the server closes the connection or they run
/// out. Returns when the server closed it (`None`: it never did).
fn trickle(port: u16, bytes: &[u8], gap: Duration) -> Option<Duration> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let t0 = Instant::now();
    for b in bytes {
        if s.write_all(&[*b]).is_err() {
            return Some(t0.elapsed());
        }
        if let Some(at) = wait_closed(&mut s, Instant::now() + gap) {
            return Some(at - t0);
        }
        s.set_nonblocking(false).unwrap();
    }
    None
}

/// The read deadline mid-frame: a header or a payload trickled a byte every 150 ms
/// (each read well within the 400 ms read timeout) is cut off by the frame's deadline, not kept
/// alive forever.
#[test]
fn trickled_frames_hit_the_frame_deadline() {
    let _s = serial();
    let t = engine_with(&[("io_timeout_ms", "400"), ("data_idle_timeout_ms", "60000")]);
    let buf = Buf::new(LEN, 0);
    t.register_memory(buf.addr(), buf.len(), "cpu:0", true)
        .unwrap();
    let gap = Duration::from_millis(150);
    // A header, a byte at a time: 24 bytes would take 3.6 s.
    let h = header(64, buf.addr(), 0x81);
    let cut = trickle(t.data_port(), &h, gap).expect("a trickled header is cut off");
    assert!(
        cut < Duration::from_millis(1500),
        "header cut after {cut:?}"
    );
    // A 1 KiB payload (deadline 400 ms + 4 ms), a byte at a time after its header.
    let mut frame = header(1024, buf.addr(), 0x81).to_vec();
    frame.extend_from_slice(&[0xAB; 1024]);
    let mut s = TcpStream::connect(("127.0.0.1", t.data_port())).unwrap();
    s.write_all(&frame[..25]).unwrap();
    let t0 = Instant::now();
    let mut closed = None;
    for b in &frame[25..40] {
        if s.write_all(&[*b]).is_err() {
            closed = Some(t0.elapsed());
            break;
        }
        if let Some(at) = wait_closed(&mut s, Instant::now() + gap) {
            closed = Some(at - t0);
            break;
        }
        s.set_nonblocking(false).unwrap();
    }
    let cut = closed.expect("a trickled payload is cut off");
    assert!(
        cut < Duration::from_millis(1500),
        "payload cut after {cut:?}"
    );
    // An honest request on a fresh connection still works.
    let mut s = TcpStream::connect(("127.0.0.1", t.data_port())).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(&frame).unwrap();
    let mut st = [0u8; 8];
    s.read_exact(&mut st).unwrap();
    assert_eq!(st, [0, 0, 0, 0, 0x56, 0x54, 0x43, 0x4d]);
}

/// A same-host writer that wrote once and went idle: its "copy done" report reaches the target
/// by itself (no later request carries it), so `unregister` returns at once, not after the
/// lease time.
#[test]
fn idle_same_host_writer_does_not_hold_unregister() {
    let _s = serial();
    let (target, buf, (mut child, stdin, _rx)) = target_with_writer(" once", "READY same-host 1");
    std::thread::sleep(Duration::from_millis(100));
    let t0 = Instant::now();
    target.unregister_memory(buf.addr()).unwrap();
    let took = t0.elapsed();
    drop(stdin);
    let _ = child.wait();
    assert!(buf.0.iter().all(|&b| b != 0), "the write landed");
    assert!(
        took < Duration::from_millis(500),
        "unregister took {took:?}"
    );
}
