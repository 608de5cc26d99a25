//! Same-host shortcuts: in-process memcpy and cross-process `process_vm_*`, both validated by
//! the owner, with TCP as the fallback.

mod common;
use common::*;
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::Duration;
use tidewire::{ErrorKind, Opcode, Request};

fn on() -> tidewire::Engine {
    engine_with(&[("same_host", "1")])
}

#[test]
fn in_process_peer_uses_memcpy_with_owner_checks() {
    let (a, b) = (on(), on());
    let remote = Buf::pattern(1 << 20, 4);
    let hidden = Buf::new(4096, 9);
    b.register_memory(remote.addr(), remote.len(), "cpu:0", true)
        .unwrap();
    b.register_memory(hidden.addr(), hidden.len(), "cpu:0", false)
        .unwrap();
    let local = Buf::new(1 << 20, 0);
    a.register_memory(local.addr(), local.len(), "cpu:0", true)
        .unwrap();
    let seg = a.open_segment(b.name()).unwrap();
    assert_eq!(a.segment_path(seg).unwrap(), "in-process");
    let batch = a.alloc_batch(4).unwrap();
    let r = |op, remote: u64, len| Request {
        op,
        local: local.addr(),
        segment: seg,
        remote,
        len,
    };
    a.submit(batch, &[r(Opcode::Read, remote.addr(), 1 << 20)])
        .unwrap();
    a.wait_batch(batch, Some(Duration::from_secs(5))).unwrap();
    assert_eq!(local.0, remote.0);
    a.submit(
        batch,
        &[
            r(Opcode::Write, hidden.addr(), 16),
            r(Opcode::Read, remote.addr() + 1, 1 << 20),
        ],
    )
    .unwrap();
    assert_eq!(
        a.wait_batch(batch, Some(Duration::from_secs(5)))
            .unwrap_err()
            .kind(),
        ErrorKind::Rejected
    );
    assert_eq!(
        a.task_status(batch, 1).unwrap().error,
        Some(ErrorKind::Rejected)
    );
    assert_eq!(
        a.task_status(batch, 2).unwrap().error,
        Some(ErrorKind::Rejected)
    );
    assert!(
        hidden.0.iter().all(|&x| x == 9),
        "owner's not-remote-accessible memory untouched"
    );
    // The owner goes away: transfers fail, nothing dangles.
    drop(b);
    a.submit(batch, &[r(Opcode::Read, remote.addr(), 16)])
        .unwrap();
    assert!(a.wait_batch(batch, Some(Duration::from_secs(5))).is_err());
}

#[test]
fn in_process_batches_over_the_streaming_threshold_copy_every_byte() {
    // 24 MiB in all (streaming stores), at offsets that are not 64-byte aligned.
    let (a, b) = (on(), on());
    const PART: usize = (6 << 20) + 13;
    let remote = Buf::pattern(4 * PART + 64, 5);
    b.register_memory(remote.addr(), remote.len(), "cpu:0", true)
        .unwrap();
    let local = Buf::new(4 * PART + 64, 0);
    a.register_memory(local.addr(), local.len(), "cpu:0", true)
        .unwrap();
    let seg = a.open_segment(b.name()).unwrap();
    assert_eq!(a.segment_path(seg).unwrap(), "in-process");
    let reqs: Vec<Request> = (0..4)
        .map(|i| Request {
            op: Opcode::Read,
            local: local.addr() + 3 + (i * PART) as u64,
            segment: seg,
            remote: remote.addr() + 7 + (i * PART) as u64,
            len: PART as u64,
        })
        .collect();
    let batch = a.alloc_batch(4).unwrap();
    a.submit(batch, &reqs).unwrap();
    a.wait_batch(batch, Some(Duration::from_secs(20))).unwrap();
    assert_eq!(
        local.0[..3],
        [0, 0, 0],
        "nothing before the first destination"
    );
    assert!(local.0[3..3 + 4 * PART] == remote.0[7..7 + 4 * PART]);
    assert!(
        local.0[3 + 4 * PART..].iter().all(|&x| x == 0),
        "nothing after"
    );
    a.free_batch(batch).unwrap();
}

/// Child role: an engine with a pattern buffer; prints `READY name addr len`, serves until
/// stdin closes.
#[test]
#[ignore]
fn same_host_child() {
    if std::env::var_os("TW_SAME_HOST_CHILD").is_none() {
        return;
    }
    let e = on();
    let buf = Buf::pattern(8 << 20, 7);
    e.register_memory(buf.addr(), buf.len(), "cpu:0", true)
        .unwrap();
    println!("READY {} {} {}", e.name(), buf.addr(), buf.len());
    std::io::stdout().flush().unwrap();
    let mut line = String::new();
    let _ = std::io::stdin().read_line(&mut line);
    // The parent wrote into our buffer: echo its checksum so it can verify.
    let sum: u64 = buf.0.iter().map(|&x| x as u64).sum();
    println!("SUM {sum}");
}

#[test]
fn cross_process_peer_uses_process_vm_with_owner_checks() {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "same_host_child", "--nocapture", "--ignored"])
        .env("TW_SAME_HOST_CHILD", "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    while !line.starts_with("READY") {
        line.clear();
        assert!(out.read_line(&mut line).unwrap() > 0, "child exited early");
    }
    let f: Vec<&str> = line.split_whitespace().collect();
    let (name, raddr, rlen) = (
        f[1].to_string(),
        f[2].parse::<u64>().unwrap(),
        f[3].parse::<u64>().unwrap(),
    );
    let a = on();
    let mut local = Buf::new(rlen as usize, 0);
    a.register_memory(local.addr(), local.len(), "cpu:0", true)
        .unwrap();
    let seg = a.open_segment(&name).unwrap();
    assert_eq!(a.segment_path(seg).unwrap(), "same-host");
    let batch = a.alloc_batch(4).unwrap();
    a.submit(
        batch,
        &[Request {
            op: Opcode::Read,
            local: local.addr(),
            segment: seg,
            remote: raddr,
            len: rlen,
        }],
    )
    .unwrap();
    a.wait_batch(batch, Some(Duration::from_secs(20))).unwrap();
    assert_eq!(
        local.0,
        Buf::pattern(rlen as usize, 7).0,
        "bytes read from the other process"
    );
    // A waited READ of more requests than one run of headers (1024), each large enough for the
    // same-host copy: two runs of approvals are outstanding at a time, and every byte arrives.
    const PIECE: u64 = 64 << 10;
    let pieces = rlen / PIECE;
    local.0.fill(0);
    let many: Vec<Request> = (0..2100)
        .map(|i| Request {
            op: Opcode::Read,
            local: local.addr() + (i % pieces) * PIECE,
            segment: seg,
            remote: raddr + (i % pieces) * PIECE,
            len: PIECE,
        })
        .collect();
    let big = a.alloc_batch(many.len()).unwrap();
    a.submit_and_wait(big, &many, Some(Duration::from_secs(20)))
        .unwrap();
    assert_eq!(
        local.0,
        Buf::pattern(rlen as usize, 7).0,
        "2100 same-host READs"
    );
    a.free_batch(big).unwrap();
    // Owner-side validation still applies.
    a.submit(
        batch,
        &[Request {
            op: Opcode::Write,
            local: local.addr(),
            segment: seg,
            remote: raddr + rlen - 8,
            len: 16,
        }],
    )
    .unwrap();
    assert_eq!(
        a.wait_batch(batch, Some(Duration::from_secs(20)))
            .unwrap_err()
            .kind(),
        ErrorKind::Rejected
    );
    // A write lands in the other process: fill with 1s and let the child sum its buffer.
    let ones = Buf::new(rlen as usize, 1);
    a.register_memory(ones.addr(), ones.len(), "cpu:0", true)
        .unwrap();
    let b2 = a.alloc_batch(1).unwrap();
    a.submit(
        b2,
        &[Request {
            op: Opcode::Write,
            local: ones.addr(),
            segment: seg,
            remote: raddr,
            len: rlen,
        }],
    )
    .unwrap();
    a.wait_batch(b2, Some(Duration::from_secs(20))).unwrap();
    child.stdin.take().unwrap().write_all(b"done\n").unwrap();
    line.clear();
    while !line.starts_with("SUM") {
        line.clear();
        assert!(out.read_line(&mut line).unwrap() > 0, "child exited early");
    }
    assert_eq!(line.trim(), format!("SUM {rlen}"));
    assert_eq!(
        a.segment_path(seg).unwrap(),
        "same-host",
        "no fallback happened"
    );
    child.wait().unwrap();
}

#[test]
fn shortcut_off_means_tcp() {
    let (a, b) = (engine(), engine());
    let seg = a.open_segment(b.name()).unwrap();
    assert_eq!(a.segment_path(seg).unwrap(), "tcp");
    assert_eq!(a.segment_path(0).unwrap(), "local");
}
