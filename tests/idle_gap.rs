//! "Idle gaps are harmless": a connection the peer closed while idle (its idle timeout, a
//! restart) is re-opened transparently. The first transfer after the gap succeeds with its bytes
//! in place, in both framings (v1 WRITEs complete when sent, so a stale connection must be noticed
//! before sending, not after), with no spurious FAILED and no more than one reconnect of delay.

mod common;
use common::*;
use std::time::{Duration, Instant};
use tidewire::engine::TaskState;
use tidewire::{Engine, Opcode};

/// Runs `n` requests of `len` bytes; returns every task's state and the time taken.
fn batch(
    e: &Engine,
    op: Opcode,
    local: &Buf,
    seg: i32,
    remote: u64,
    n: u64,
    len: u64,
) -> (Vec<TaskState>, Duration) {
    let t0 = Instant::now();
    let b = e.alloc_batch(n as usize).unwrap();
    e.submit(b, &strided_requests(op, local, seg, remote, n, len))
        .unwrap();
    let _ = e.wait_batch(b, Some(Duration::from_secs(20)));
    let took = t0.elapsed();
    let states = (0..n as usize)
        .map(|i| e.task_status(b, i).unwrap().state)
        .collect();
    e.free_batch(b).unwrap();
    (states, took)
}

fn all_completed(states: &[TaskState]) -> bool {
    states.iter().all(|s| *s == TaskState::Completed)
}

/// The target restarts on the same ports while the initiator's lanes sit idle.
fn restart_case(proto: &str) {
    let (rpc, data) = (restartable_port(), restartable_port());
    let opts = [
        ("rpc_port", rpc.to_string()),
        ("data_port", data.to_string()),
        ("tcp_proto", proto.to_string()),
    ];
    let opts: Vec<(&str, &str)> = opts.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let remote = Buf::new(1 << 20, 0);
    let t1 = engine_with(&opts);
    t1.register_memory(remote.addr(), remote.len(), "cpu:0", true)
        .unwrap();
    let i = engine_with(&[("tcp_proto", proto)]);
    let src = Buf::pattern(1 << 20, 21);
    i.register_memory(src.addr(), src.len(), "cpu:0", true)
        .unwrap();
    let seg = i.open_segment(t1.name()).unwrap();
    let (st, _) = batch(&i, Opcode::Write, &src, seg, remote.addr(), 16, 4096);
    assert!(all_completed(&st));
    drop(t1);
    let t2 = engine_with(&opts);
    t2.register_memory(remote.addr(), remote.len(), "cpu:0", true)
        .unwrap();
    std::thread::sleep(Duration::from_millis(200));
    // Clear what the first round wrote, through the new target, then write again.
    remote_fill(&remote, 0);
    let (st, took) = batch(&i, Opcode::Write, &src, seg, remote.addr(), 16, 4096);
    assert!(
        all_completed(&st),
        "v{proto}: first WRITE after the restart: {st:?}"
    );
    assert!(took < Duration::from_secs(2), "v{proto}: took {took:?}");
    // v1 WRITEs complete when sent (Mooncake semantics): give the target a moment to copy.
    let t0 = Instant::now();
    let mut landed = false;
    while !landed && t0.elapsed() < Duration::from_secs(2) {
        landed = remote.0[..16 * 4096] == src.0[..16 * 4096];
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(
        landed,
        "v{proto}: the WRITEs reported COMPLETED but their bytes did not land"
    );
    drop(t2);
}

fn remote_fill(b: &Buf, v: u8) {
    // SAFETY: the buffer is ours and lives for the whole test; only this thread writes it now.
    unsafe { std::ptr::write_bytes(b.addr() as *mut u8, v, b.0.len()) };
}

#[test]
fn first_transfer_after_peer_restart_v2() {
    restart_case("2");
}

#[test]
fn first_transfer_after_peer_restart_v1() {
    restart_case("1");
}

/// The target closes idle data connections after 300 ms; transfers separated by gaps around
/// that timeout (and the client's own timeouts) all succeed.
#[test]
fn transfers_across_idle_gaps_around_every_timeout() {
    let t = engine_with(&[("data_idle_timeout_ms", "300")]);
    let remote = Buf::pattern(1 << 20, 4);
    t.register_memory(remote.addr(), remote.len(), "cpu:0", true)
        .unwrap();
    for proto in ["1", "2"] {
        let i = engine_with(&[("tcp_proto", proto)]);
        let local = Buf::new(1 << 20, 0);
        i.register_memory(local.addr(), local.len(), "cpu:0", true)
            .unwrap();
        let seg = i.open_segment(t.name()).unwrap();
        for gap_ms in [0u64, 250, 299, 300, 301, 350, 700, 1200] {
            std::thread::sleep(Duration::from_millis(gap_ms));
            let (st, took) = batch(&i, Opcode::Write, &local, seg, remote.addr(), 8, 4096);
            assert!(
                all_completed(&st),
                "v{proto} WRITE after {gap_ms} ms idle: {st:?}"
            );
            std::thread::sleep(Duration::from_millis(gap_ms));
            let (st, took2) = batch(&i, Opcode::Read, &local, seg, remote.addr(), 8, 4096);
            assert!(
                all_completed(&st),
                "v{proto} READ after {gap_ms} ms idle: {st:?}"
            );
            assert!(
                took.max(took2) < Duration::from_secs(1),
                "v{proto}: {took:?}/{took2:?} after {gap_ms} ms idle"
            );
        }
    }
}
