//! Hostile networks, with test hosts in network namespaces (see `common/netns.rs`): a peer frozen
//! with SIGSTOP, killed with SIGKILL, its link set down mid-transfer or its address black-holed;
//! a link with netem delay and loss. Every case must end within the configured transfer deadline
//! with the right per-task states, the batch must be freeable, and transfers to a healthy peer
//! must be unaffected. Needs root (as in CI); without it each test says so and does nothing.

mod common;
use common::netns::{self, Link, Netns, Peer};
use common::*;
use std::time::{Duration, Instant};
use tidewire::engine::TaskState;
use tidewire::{Engine, Opcode};

/// The transfer deadline the tests configure.
const DEADLINE_MS: u64 = 3000;
/// Slack on top of the deadline for scheduling on a loaded machine.
const GRACE: Duration = Duration::from_secs(4);

/// Whether the environment variable `name` asks for a case to run (set and not `0`).
fn required(name: &str) -> bool {
    std::env::var_os(name).is_some_and(|v| v != "0")
}

/// Why the namespace tests cannot run here, or `None`. With `TIDEWIRE_REQUIRE_NETNS=1` (or the
/// older `TW_REQUIRE_NETNS`), as in CI, a machine without them fails the test instead.
fn skip_reason() -> Option<String> {
    match netns::available() {
        Ok(()) => None,
        Err(e) if required("TIDEWIRE_REQUIRE_NETNS") || required("TW_REQUIRE_NETNS") => {
            panic!("TIDEWIRE_REQUIRE_NETNS is set but namespaces are unavailable: {e}")
        }
        Err(e) => Some(e),
    }
}

/// The connect and transfer deadlines of the initiator, in milliseconds.
#[derive(Clone, Copy)]
struct Deadlines {
    connect_ms: u64,
    transfer_ms: u64,
}

impl Deadlines {
    /// How long a test waits for a batch: the transfer deadline plus scheduling slack.
    fn limit(self) -> Duration {
        Duration::from_millis(self.transfer_ms) + GRACE
    }
}

/// For the fault cases: short, so that every task must fail within a few seconds.
const FAULT: Deadlines = Deadlines {
    connect_ms: 2000,
    transfer_ms: DEADLINE_MS,
};

/// For the lossy-link cases, where every task must complete. Linux resends a lost SYN after 1,
/// 3 and 7 s; with 5 % loss each way a connection attempt fails about one time in ten, so a
/// 2 s connect deadline (two SYNs) fails a lane about once in a hundred connects (seen in CI).
/// 10 s allows four SYNs; the transfer deadline leaves room for data retransmissions as well.
const LOSSY: Deadlines = Deadlines {
    connect_ms: 10_000,
    transfer_ms: 20_000,
};

/// An initiator engine living in `ns` (this test's thread moves there), advertising `host`.
fn initiator(ns: &Netns, host: &str, d: Deadlines) -> Engine {
    ns.enter_this_thread()
        .expect("entering the initiator namespace");
    engine_with(&[
        ("local_server_name", host),
        ("transfer_timeout_ms", &d.transfer_ms.to_string()),
        ("connect_timeout_ms", &d.connect_ms.to_string()),
    ])
}

/// Submits `n` requests of `len` bytes each against segment `seg`.
fn submit(e: &Engine, op: Opcode, local: &Buf, seg: i32, remote: u64, n: usize, len: u64) -> u64 {
    // Registering again is idempotent (reference-counted).
    e.register_memory(local.addr(), local.len(), "cpu:0", true)
        .unwrap();
    let b = e.alloc_batch(n).unwrap();
    e.submit(b, &strided_requests(op, local, seg, remote, n as u64, len))
        .unwrap();
    b
}

/// Waits for the batch; returns (completed, failed, waiting) task counts and the time it took.
fn settle(e: &Engine, b: u64, limit: Duration) -> ((usize, usize, usize), Duration) {
    let t0 = Instant::now();
    let _ = e.wait_batch(b, Some(limit));
    let took = t0.elapsed();
    let mut counts = (0, 0, 0);
    for i in 0..e.batch_len(b).unwrap() {
        match e.task_status(b, i).unwrap().state {
            TaskState::Completed => counts.0 += 1,
            TaskState::Failed => counts.1 += 1,
            TaskState::Waiting => counts.2 += 1,
        }
    }
    (counts, took)
}

/// Everything a case needs: namespaces A (initiator) and B, C (peers), links A-B and A-C.
struct World {
    b: Peer,
    c: Peer,
    ab: Link,
    e: Engine,
    seg_b: i32,
    seg_c: i32,
    // Declared last: namespaces go after the processes and the engine that use them.
    _ns: Vec<Netns>,
}

fn world(tag: &str, d: Deadlines) -> World {
    let (na, nb, nc) = (
        Netns::new(&format!("{tag}a")).unwrap(),
        Netns::new(&format!("{tag}b")).unwrap(),
        Netns::new(&format!("{tag}c")).unwrap(),
    );
    let ab = Link::new(&na, &nb).unwrap();
    let ac = Link::new(&na, &nc).unwrap();
    let b = Peer::start(&nb, &ab.addr_b, 32 << 20, 120).unwrap();
    let c = Peer::start(&nc, &ac.addr_b, 32 << 20, 120).unwrap();
    let e = initiator(&na, &ab.addr_a, d);
    let seg_b = e.open_segment(&b.segment).unwrap();
    let seg_c = e.open_segment(&c.segment).unwrap();
    World {
        b,
        c,
        ab,
        e,
        seg_b,
        seg_c,
        _ns: vec![na, nb, nc],
    }
}

/// A warm-up transfer proves both links carry traffic before the fault.
fn warm_up(w: &World, local: &Buf) {
    for (seg, addr) in [(w.seg_b, w.b.addr), (w.seg_c, w.c.addr)] {
        let b = submit(&w.e, Opcode::Read, local, seg, addr, 4, 64 << 10);
        let ((ok, _, _), _) = settle(&w.e, b, Duration::from_secs(10));
        assert_eq!(ok, 4, "warm-up transfers complete");
        w.e.free_batch(b).unwrap();
    }
}

/// The healthy peer C keeps serving while B misbehaves.
fn healthy_peer_unaffected(w: &World, local: &Buf) {
    let b = submit(&w.e, Opcode::Read, local, w.seg_c, w.c.addr, 64, 64 << 10);
    let ((ok, _, _), took) = settle(&w.e, b, Duration::from_secs(10));
    assert_eq!(ok, 64, "transfers to the healthy peer complete");
    assert!(
        took < Duration::from_secs(3),
        "healthy peer served in {took:?}"
    );
    w.e.free_batch(b).unwrap();
}

/// Asserts every task of `b` FAILED within the deadline and that the batch can be freed.
fn all_failed_in_time(w: &World, b: u64, n: usize, what: &str) {
    let limit = FAULT.limit();
    let ((ok, failed, waiting), took) = settle(&w.e, b, limit + Duration::from_secs(2));
    assert_eq!(
        waiting, 0,
        "{what}: {waiting} tasks still WAITING after {took:?}"
    );
    assert_eq!(ok + failed, n);
    assert!(failed > 0, "{what}: some tasks fail");
    assert!(
        took <= limit,
        "{what}: tasks ended after {took:?}, deadline {DEADLINE_MS} ms"
    );
    w.e.free_batch(b)
        .expect("the batch can be freed once every task ended");
}

/// A frozen peer (SIGSTOP) during a 512-task batch.
#[test]
fn frozen_peer_fails_every_task_within_deadline() {
    if let Some(why) = skip_reason() {
        eprintln!("SKIPPED (no network namespaces): {why}");
        return;
    }
    let w = world("frz", FAULT);
    let local = Buf::new(512 * (64 << 10), 0);
    warm_up(&w, &local);
    w.b.signal(libc::SIGSTOP);
    let b = submit(&w.e, Opcode::Read, &local, w.seg_b, w.b.addr, 512, 64 << 10);
    healthy_peer_unaffected(&w, &local);
    all_failed_in_time(&w, b, 512, "frozen peer");
    w.b.signal(libc::SIGCONT);
}

/// A black-holed address (frames vanish: no reset, no ICMP).
#[test]
fn blackholed_peer_fails_every_task_within_deadline() {
    if let Some(why) = skip_reason() {
        eprintln!("SKIPPED (no network namespaces): {why}");
        return;
    }
    let w = world("bh", FAULT);
    let local = Buf::new(128 * (64 << 10), 0);
    warm_up(&w, &local);
    w.ab.blackhole_from_a(&w.ab.addr_b).unwrap();
    let b = submit(
        &w.e,
        Opcode::Write,
        &local,
        w.seg_b,
        w.b.addr,
        128,
        64 << 10,
    );
    healthy_peer_unaffected(&w, &local);
    all_failed_in_time(&w, b, 128, "black-holed peer");
}

/// A peer killed (SIGKILL) while its link carries a batch.
#[test]
fn killed_peer_fails_every_task_within_deadline() {
    if let Some(why) = skip_reason() {
        eprintln!("SKIPPED (no network namespaces): {why}");
        return;
    }
    let w = world("kil", FAULT);
    let local = Buf::new(256 * (64 << 10), 0);
    warm_up(&w, &local);
    let b = submit(&w.e, Opcode::Read, &local, w.seg_b, w.b.addr, 256, 64 << 10);
    w.b.signal(libc::SIGKILL);
    healthy_peer_unaffected(&w, &local);
    let limit = FAULT.limit();
    let ((ok, failed, waiting), took) = settle(&w.e, b, limit);
    assert_eq!(
        (waiting, ok + failed),
        (0, 256),
        "every task ended ({took:?})"
    );
    w.e.free_batch(b).unwrap();
}

/// The peer's link goes down in the middle of a large transfer.
#[test]
fn link_down_mid_transfer_fails_every_task_within_deadline() {
    if let Some(why) = skip_reason() {
        eprintln!("SKIPPED (no network namespaces): {why}");
        return;
    }
    let w = world("dwn", FAULT);
    let local = Buf::new(32 << 20, 0);
    warm_up(&w, &local);
    let b = submit(&w.e, Opcode::Write, &local, w.seg_b, w.b.addr, 32, 1 << 20);
    std::thread::sleep(Duration::from_millis(5));
    w.ab.down_b().unwrap();
    healthy_peer_unaffected(&w, &local);
    let limit = FAULT.limit();
    let ((ok, failed, waiting), took) = settle(&w.e, b, limit);
    assert_eq!(
        (waiting, ok + failed),
        (0, 32),
        "every task ended ({took:?})"
    );
    assert!(took <= limit, "ended after {took:?}");
    w.e.free_batch(b).unwrap();
}

/// netem delay and 5 % loss on the peer's link: transfers still complete, bytes intact.
#[test]
fn netem_delay_and_loss_still_complete() {
    if let Some(why) = skip_reason() {
        eprintln!("SKIPPED (no network namespaces): {why}");
        return;
    }
    if !netns::netem_available() {
        assert!(
            !required("TIDEWIRE_REQUIRE_NETEM"),
            "TIDEWIRE_REQUIRE_NETEM is set but this kernel has no netem qdisc (sch_netem)"
        );
        eprintln!(
            "SKIPPED: this kernel has no netem qdisc (sch_netem); \
             degraded_link_loss_and_shaping_still_complete covers loss without it"
        );
        return;
    }
    let w = world("nem", LOSSY);
    w.ab.netem_b(&["delay", "20ms", "loss", "5%"]).unwrap();
    lossy_link_transfers(&w);
}

/// The same over a link degraded without netem (kernels without sch_netem): 5 % of B's packets
/// dropped at random in both directions (nftables), both ends shaped to 40 Mbit/s with up to
/// 20 ms of queueing (tbf). Asserts that the degradation really happened: packets were dropped
/// and the transfers took at least the shaped time.
#[test]
fn degraded_link_loss_and_shaping_still_complete() {
    if let Some(why) = skip_reason() {
        eprintln!("SKIPPED (no network namespaces): {why}");
        return;
    }
    if let Err(why) = netns::degrade_available() {
        // The namespace tests are required in CI, which installs nftables: then this must run.
        assert!(
            !(required("TIDEWIRE_REQUIRE_NETNS") || required("TW_REQUIRE_NETNS")),
            "TIDEWIRE_REQUIRE_NETNS is set but the link cannot be degraded: {why}"
        );
        eprintln!("SKIPPED (cannot degrade a link here): {why}");
        return;
    }
    let w = world("dgr", LOSSY);
    w.ab.degrade(5, "40mbit", "20ms").unwrap();
    let t0 = Instant::now();
    lossy_link_transfers(&w);
    let took = t0.elapsed();
    let dropped = w.ab.dropped().unwrap();
    eprintln!("degraded link: {dropped} packets dropped, 8 MiB moved in {took:?}");
    assert!(dropped > 0, "the loss rules dropped packets");
    // 8 MiB through a 40 Mbit/s link takes at least 1.6 s.
    assert!(
        took >= Duration::from_millis(1500),
        "the shaping held the transfers back ({took:?})"
    );
}

/// 4 MiB written and read back (64 KiB requests) over B's impaired link: every request
/// completes, the bytes are intact, and the healthy peer C is unaffected.
fn lossy_link_transfers(w: &World) {
    let src = Buf::pattern(4 << 20, 9);
    let b = submit(&w.e, Opcode::Write, &src, w.seg_b, w.b.addr, 64, 64 << 10);
    let limit = LOSSY.limit();
    let ((ok, _, _), took) = settle(&w.e, b, limit);
    assert_eq!(
        ok, 64,
        "every WRITE completes over the lossy link ({took:?})"
    );
    w.e.free_batch(b).unwrap();
    let back = Buf::new(4 << 20, 0);
    let b = submit(&w.e, Opcode::Read, &back, w.seg_b, w.b.addr, 64, 64 << 10);
    let ((ok, _, _), took) = settle(&w.e, b, limit);
    assert_eq!(
        ok, 64,
        "every READ completes over the lossy link ({took:?})"
    );
    assert!(back.0 == src.0, "bytes intact over the lossy link");
    healthy_peer_unaffected(w, &back);
}
