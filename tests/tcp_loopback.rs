//! Real loopback TCP between two engines in one process.

mod common;
use common::*;
use std::time::Duration;
use tidewire::engine::TaskState;
use tidewire::{ErrorKind, Opcode, Request};

fn pair() -> (tidewire::Engine, tidewire::Engine) {
    (engine(), engine())
}

#[test]
fn write_then_read_back_various_sizes() {
    let (a, b) = pair();
    let remote = Buf::new(8 << 20, 0);
    b.register_memory(remote.addr(), remote.len(), "cpu:0", true)
        .unwrap();
    let src = Buf::pattern(8 << 20, 3);
    let mut dst = Buf::new(8 << 20, 0);
    a.register_memory(src.addr(), src.len(), "cpu:0", true)
        .unwrap();
    a.register_memory(dst.addr(), dst.len(), "cpu:0", true)
        .unwrap();
    let seg = a.open_segment(b.name()).unwrap();
    assert!(seg >= 1);
    assert_eq!(a.open_segment(b.name()).unwrap(), seg, "cached");
    for &size in &[1u64, 128, 4096, 65536, 1 << 20, 3 << 20, 8 << 20] {
        let batch = a.alloc_batch(2).unwrap();
        a.submit(
            batch,
            &[Request {
                op: Opcode::Write,
                local: src.addr(),
                segment: seg,
                remote: remote.addr(),
                len: size,
            }],
        )
        .unwrap();
        a.wait_batch(batch, Some(Duration::from_secs(20))).unwrap();
        a.submit(
            batch,
            &[Request {
                op: Opcode::Read,
                local: dst.addr(),
                segment: seg,
                remote: remote.addr(),
                len: size,
            }],
        )
        .unwrap();
        a.wait_batch(batch, Some(Duration::from_secs(20))).unwrap();
        let st = a.task_status(batch, 1).unwrap();
        assert_eq!((st.state, st.transferred), (TaskState::Completed, size));
        assert_eq!(
            &dst.0[..size as usize],
            &src.0[..size as usize],
            "size {size}"
        );
        a.free_batch(batch).unwrap();
        dst.0.fill(0);
    }
}

#[test]
fn big_batches_complete_in_order() {
    let (a, b) = pair();
    let n = 10_000usize;
    let remote = Buf::pattern(n * 64, 9);
    b.register_memory(remote.addr(), remote.len(), "cpu:0", true)
        .unwrap();
    let local = Buf::new(n * 128, 0);
    a.register_memory(local.addr(), local.len(), "cpu:0", true)
        .unwrap();
    let seg = a.open_segment(b.name()).unwrap();
    for count in [1usize, 10, 1000, 10_000] {
        let batch = a.alloc_batch(count).unwrap();
        let reqs: Vec<Request> = (0..count)
            .map(|i| Request {
                op: Opcode::Read,
                local: local.addr() + (i * 128) as u64,
                segment: seg,
                remote: remote.addr() + (i * 64) as u64,
                len: 64,
            })
            .collect();
        a.submit(batch, &reqs).unwrap();
        a.wait_batch(batch, Some(Duration::from_secs(30))).unwrap();
        for i in 0..count {
            assert_eq!(
                &local.0[i * 128..i * 128 + 64],
                &remote.0[i * 64..i * 64 + 64],
                "request {i} of {count}"
            );
        }
        assert_eq!(a.batch_len(batch).unwrap(), count);
        assert_eq!(
            a.submit(batch, &reqs[..1]).unwrap_err().kind(),
            ErrorKind::TooManyRequests
        );
        a.free_batch(batch).unwrap();
    }
}

#[test]
fn rejected_and_bad_requests() {
    let (a, b) = pair();
    let remote = Buf::new(4096, 1);
    let hidden = Buf::new(4096, 2);
    b.register_memory(remote.addr(), remote.len(), "cpu:0", true)
        .unwrap();
    b.register_memory(hidden.addr(), hidden.len(), "cpu:0", false)
        .unwrap();
    let local = Buf::new(8192, 0);
    a.register_memory(local.addr(), local.len(), "cpu:0", true)
        .unwrap();
    let seg = a.open_segment(b.name()).unwrap();
    let batch = a.alloc_batch(8).unwrap();
    let r = |op, remote: u64, len| Request {
        op,
        local: local.addr(),
        segment: seg,
        remote,
        len,
    };
    // Not registered locally: whole submit refused, nothing queued.
    let bad_local = Request {
        local: 0x10,
        ..r(Opcode::Read, remote.addr(), 16)
    };
    assert_eq!(
        a.submit(batch, &[r(Opcode::Read, remote.addr(), 16), bad_local])
            .unwrap_err()
            .kind(),
        ErrorKind::AddressNotRegistered
    );
    assert_eq!(a.batch_len(batch).unwrap(), 0);
    assert_eq!(
        a.submit(
            batch,
            &[Request {
                segment: 77,
                ..r(Opcode::Read, remote.addr(), 16)
            }]
        )
        .unwrap_err()
        .kind(),
        ErrorKind::UnknownSegment
    );
    // Remote outside / not remote-accessible / straddling: FAILED with Rejected, good ones fine.
    a.submit(
        batch,
        &[
            r(Opcode::Read, remote.addr() + 4000, 200),
            r(Opcode::Write, hidden.addr(), 16),
            r(Opcode::Read, hidden.addr(), 16),
            r(Opcode::Read, remote.addr(), 4096),
            r(Opcode::Write, remote.addr(), 0),
        ],
    )
    .unwrap();
    assert_eq!(
        a.wait_batch(batch, Some(Duration::from_secs(20)))
            .unwrap_err()
            .kind(),
        ErrorKind::Rejected
    );
    let states: Vec<_> = (0..5).map(|i| a.task_status(batch, i).unwrap()).collect();
    assert_eq!(states[0].error, Some(ErrorKind::Rejected));
    assert_eq!(states[1].error, Some(ErrorKind::Rejected));
    assert_eq!(states[2].error, Some(ErrorKind::Rejected));
    assert_eq!(states[3].state, TaskState::Completed);
    assert_eq!(states[4].state, TaskState::Completed);
    assert!(
        hidden.0.iter().all(|&x| x == 2),
        "not-remote-accessible memory untouched"
    );
    assert!(local.0[..4096].iter().all(|&x| x == 1));
    assert_eq!(
        a.task_status(batch, 5).unwrap_err().kind(),
        ErrorKind::InvalidArgument
    );
    a.free_batch(batch).unwrap();
    assert_eq!(
        a.free_batch(batch).unwrap_err().kind(),
        ErrorKind::InvalidId
    );
    assert_eq!(
        a.task_status(batch, 0).unwrap_err().kind(),
        ErrorKind::InvalidId
    );
}

#[test]
fn local_segment_is_a_checked_memcpy() {
    let a = engine();
    let x = Buf::pattern(4096, 5);
    let y = Buf::new(4096, 0);
    a.register_memory(x.addr(), 4096, "cpu:0", true).unwrap();
    a.register_memory(y.addr(), 4096, "cpu:0", false).unwrap();
    assert_eq!(a.open_segment(a.name()).unwrap(), 0);
    let batch = a.alloc_batch(2).unwrap();
    a.submit(
        batch,
        &[Request {
            op: Opcode::Write,
            local: x.addr(),
            segment: 0,
            remote: y.addr(),
            len: 4096,
        }],
    )
    .unwrap();
    a.wait_batch(batch, Some(Duration::from_secs(5))).unwrap();
    assert_eq!(x.0, y.0);
    a.submit(
        batch,
        &[Request {
            op: Opcode::Write,
            local: x.addr(),
            segment: 0,
            remote: y.addr() + 1,
            len: 4096,
        }],
    )
    .unwrap();
    assert_eq!(
        a.wait_batch(batch, Some(Duration::from_secs(5)))
            .unwrap_err()
            .kind(),
        ErrorKind::AddressNotRegistered
    );
}

#[test]
fn unknown_peer_fails_fast() {
    let a = engine_with(&[("connect_timeout_ms", "500")]);
    let t = std::time::Instant::now();
    // A port nobody listens on (bind then drop).
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    assert_eq!(
        a.open_segment(&format!("127.0.0.1:{port}"))
            .unwrap_err()
            .kind(),
        ErrorKind::UnknownSegment
    );
    assert_eq!(
        a.open_segment("").unwrap_err().kind(),
        ErrorKind::InvalidArgument
    );
    assert_eq!(
        a.open_segment("no-such-host.invalid:1").unwrap_err().kind(),
        ErrorKind::UnknownSegment
    );
    assert!(t.elapsed() < Duration::from_secs(5));
}

#[test]
fn notifications_both_ways() {
    let (a, b) = pair();
    let sb = a.open_segment(b.name()).unwrap();
    a.send_notify(sb, "kv-ready", "layer 3").unwrap();
    let got = b.take_notifications();
    assert_eq!(got.len(), 1);
    assert_eq!(
        (got[0].name.as_str(), got[0].msg.as_str()),
        ("kv-ready", "layer 3")
    );
    assert!(b.take_notifications().is_empty());
    let sa = b.open_segment(a.name()).unwrap();
    b.send_notify(sa, "back", "").unwrap();
    assert_eq!(a.take_notifications()[0].name, "back");
    a.probe(b.name()).unwrap();
}

/// One submit whose requests alternate between three routes (this engine, two peers) and two
/// local regions, with a zero-length request among them: every byte lands where it should and
/// every task completes. Then a submit whose last request is unregistered is refused whole
/// (nothing moves, the batch keeps its length) and the batch still takes the next submit.
#[test]
fn one_submit_over_several_routes_and_regions() {
    let (a, b, c) = (engine(), engine(), engine());
    let (rb, rc) = (Buf::new(1 << 20, 0), Buf::new(1 << 20, 0));
    b.register_memory(rb.addr(), rb.len(), "cpu:0", true)
        .unwrap();
    c.register_memory(rc.addr(), rc.len(), "cpu:0", true)
        .unwrap();
    let (s1, s2) = (Buf::pattern(1 << 20, 5), Buf::pattern(1 << 20, 9));
    let own = Buf::new(1 << 20, 0);
    for buf in [&s1, &s2, &own] {
        a.register_memory(buf.addr(), buf.len(), "cpu:0", true)
            .unwrap();
    }
    let (sb, sc) = (
        a.open_segment(b.name()).unwrap(),
        a.open_segment(c.name()).unwrap(),
    );
    let w = |local: &Buf, loff: u64, segment, remote: &Buf, roff: u64, len| Request {
        op: Opcode::Write,
        local: local.addr() + loff,
        segment,
        remote: remote.addr() + roff,
        len,
    };
    let reqs = [
        w(&s1, 0, sb, &rb, 0, 4096),
        w(&s2, 0, sb, &rb, 4096, 200_000), // spans several slices
        w(&s1, 8192, 0, &own, 0, 4096),    // this engine
        w(&s2, 4096, sc, &rc, 0, 4096),
        w(&s1, 0, sb, &rb, 300_000, 0), // zero length
        w(&s1, 65536, sb, &rb, 400_000, 70_000),
        w(&s2, 0, sc, &rc, 8192, 1000),
    ];
    let batch = a.alloc_batch(reqs.len() + 1).unwrap();
    a.submit(batch, &reqs).unwrap();
    a.wait_batch(batch, Some(Duration::from_secs(20))).unwrap();
    for (i, r) in reqs.iter().enumerate() {
        let st = a.task_status(batch, i).unwrap();
        assert_eq!(
            (st.state, st.transferred),
            (TaskState::Completed, r.len),
            "task {i}"
        );
        let (src, dst) = (r.local as *const u8, r.remote as *const u8);
        // SAFETY: both ranges lie inside buffers this test owns and keeps alive.
        let same = unsafe {
            std::slice::from_raw_parts(src, r.len as usize)
                == std::slice::from_raw_parts(dst, r.len as usize)
        };
        assert!(same, "task {i}: bytes differ");
    }
    let unreg = Buf::pattern(4096, 1);
    let bad = [
        w(&s1, 0, sc, &rc, 100_000, 4096),
        w(&unreg, 0, sb, &rb, 500_000, 4096),
    ];
    let e = a.submit(batch, &bad).unwrap_err();
    assert_eq!(
        e.kind(),
        ErrorKind::TooManyRequests,
        "capacity is checked first"
    );
    let batch2 = a.alloc_batch(4).unwrap();
    let e = a.submit(batch2, &bad).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::AddressNotRegistered);
    assert!(e.message().starts_with("request 1: local"), "{e}");
    assert_eq!(a.batch_len(batch2).unwrap(), 0, "nothing was submitted");
    assert!(
        rc.0[100_000..104_096].iter().all(|&x| x == 0),
        "nothing moved"
    );
    a.submit(batch2, &bad[..1]).unwrap();
    a.wait_batch(batch2, Some(Duration::from_secs(20))).unwrap();
    assert_eq!(&rc.0[100_000..104_096], &s1.0[..4096]);
    assert_eq!(a.task_status(batch2, 0).unwrap().transferred, 4096);
    a.free_batch(batch).unwrap();
    a.free_batch(batch2).unwrap();
}

/// KV-block batches (a few 64-256 KiB requests) are sent and their replies read by the
/// submitting thread, spread over the idle lanes. A rejection in the middle of such a batch
/// (which ends that lane's stream) fails only its own request; the rest complete, byte for byte,
/// and so do later batches. Several threads submit at once, so inline callers, lane threads and
/// re-sends all meet.
#[test]
fn kv_block_batches_inline_with_rejections_and_threads() {
    // Spread over the idle lanes (the default on 4+ CPUs) and on one lane with the server
    // gathering replies (the default on smaller hosts).
    for spread in ["on", "off"] {
        kv_block_batches(spread);
    }
}

fn kv_block_batches(spread: &str) {
    let (a, b) = (
        engine_with(&[("tcp_spread", spread)]),
        engine_with(&[("tcp_spread", spread)]),
    );
    const BLK: usize = 256 << 10;
    let remote = Buf::pattern(16 * BLK, 7);
    let hidden = Buf::new(BLK, 2);
    b.register_memory(remote.addr(), remote.len(), "cpu:0", true)
        .unwrap();
    b.register_memory(hidden.addr(), hidden.len(), "cpu:0", false)
        .unwrap();
    let local = Buf::new(16 * BLK, 0);
    a.register_memory(local.addr(), local.len(), "cpu:0", true)
        .unwrap();
    let seg = a.open_segment(b.name()).unwrap();
    let req = |op, i: usize, remote: u64| Request {
        op,
        local: local.addr() + (i * BLK) as u64,
        segment: seg,
        remote,
        len: BLK as u64,
    };
    // 8 READs with a rejected WRITE (stream-ending) and a rejected READ among them.
    let mut reqs: Vec<Request> = (0..8)
        .map(|i| req(Opcode::Read, i, remote.addr() + (i * BLK) as u64))
        .collect();
    reqs[3] = req(Opcode::Write, 3, hidden.addr());
    reqs[6] = req(Opcode::Read, 6, hidden.addr());
    let batch = a.alloc_batch(8).unwrap();
    a.submit(batch, &reqs).unwrap();
    assert_eq!(
        a.wait_batch(batch, Some(Duration::from_secs(20)))
            .unwrap_err()
            .kind(),
        ErrorKind::Rejected
    );
    for i in 0..8 {
        let st = a.task_status(batch, i).unwrap();
        if i == 3 || i == 6 {
            assert_eq!(st.error, Some(ErrorKind::Rejected), "request {i}");
        } else {
            assert_eq!(st.state, TaskState::Completed, "request {i}");
            assert_eq!(
                &local.0[i * BLK..(i + 1) * BLK],
                &remote.0[i * BLK..(i + 1) * BLK],
                "request {i}"
            );
        }
    }
    assert!(hidden.0.iter().all(|&x| x == 2), "hidden memory untouched");
    a.free_batch(batch).unwrap();
    // Later batches from several threads at once: every byte arrives.
    let (la, ra) = (local.addr(), remote.addr());
    std::thread::scope(|s| {
        for t in 0..4usize {
            let a = &a;
            s.spawn(move || {
                for round in 0..50usize {
                    let n = 1 + (round + t) % 4;
                    let reqs: Vec<Request> = (0..n)
                        .map(|k| {
                            let i = (t * 4 + k) % 16;
                            Request {
                                op: Opcode::Read,
                                local: la + (i * BLK) as u64,
                                segment: seg,
                                remote: ra + (i * BLK) as u64,
                                len: (64 << 10) * (1 + (round % 4) as u64),
                            }
                        })
                        .collect();
                    let batch = a.alloc_batch(n).unwrap();
                    a.submit(batch, &reqs).unwrap();
                    a.wait_batch(batch, Some(Duration::from_secs(20))).unwrap();
                    a.free_batch(batch).unwrap();
                    for r in &reqs {
                        let (l, o, n) = (r.local - la, r.remote - ra, r.len);
                        // SAFETY: both ranges lie in live buffers; this thread alone writes
                        // its local blocks (threads use disjoint ones).
                        let (got, want) = unsafe {
                            (
                                std::slice::from_raw_parts((la + l) as *const u8, n as usize),
                                std::slice::from_raw_parts((ra + o) as *const u8, n as usize),
                            )
                        };
                        assert!(got == want, "thread {t} round {round}: block at {l:#x}");
                    }
                }
            });
        }
    });
}

/// The server holds back READ payloads to send several in one go. A WRITE behind a READ of the
/// same bytes (one connection, so the server sees them in order) must not change what the READ
/// returns, and READs alternating between two registered regions each get their own bytes.
#[test]
fn held_back_read_replies_keep_request_order() {
    let opts = [("tcp_lanes", "1"), ("tcp_spread", "off")];
    let (a, b) = (engine_with(&opts), engine_with(&opts));
    const BLK: usize = 256 << 10;
    let x = Buf::pattern(BLK, 11);
    let y = Buf::pattern(BLK, 12);
    b.register_memory(x.addr(), x.len(), "cpu:0", true).unwrap();
    b.register_memory(y.addr(), y.len(), "cpu:0", true).unwrap();
    let fresh = Buf::pattern(BLK, 13);
    let local = Buf::new(4 * BLK, 0);
    a.register_memory(fresh.addr(), fresh.len(), "cpu:0", true)
        .unwrap();
    a.register_memory(local.addr(), local.len(), "cpu:0", true)
        .unwrap();
    let seg = a.open_segment(b.name()).unwrap();
    let req = |op, local: u64, remote: u64| Request {
        op,
        local,
        segment: seg,
        remote,
        len: BLK as u64,
    };
    let at = |i: usize| local.addr() + (i * BLK) as u64;
    let (x0, y0) = (x.0.clone(), y.0.clone());
    let reqs = [
        req(Opcode::Read, at(0), x.addr()),
        req(Opcode::Write, fresh.addr(), x.addr()),
        req(Opcode::Read, at(1), x.addr()),
        req(Opcode::Read, at(2), y.addr()),
        req(Opcode::Read, at(3), x.addr()),
    ];
    let batch = a.alloc_batch(reqs.len()).unwrap();
    a.submit(batch, &reqs).unwrap();
    a.wait_batch(batch, Some(Duration::from_secs(20))).unwrap();
    assert!(
        local.0[..BLK] == x0[..],
        "READ before the WRITE saw the old bytes"
    );
    assert!(
        local.0[BLK..2 * BLK] == fresh.0[..],
        "READ after the WRITE saw the new bytes"
    );
    assert!(
        local.0[2 * BLK..3 * BLK] == y0[..],
        "READ of the other region"
    );
    assert!(
        local.0[3 * BLK..] == fresh.0[..],
        "READ back in the first region"
    );
    a.free_batch(batch).unwrap();
}

/// `submit_and_wait`: a READ batch far above the inline limit is moved by the waiting thread
/// itself (one lane, replies gathered by the server); a refused READ in the middle fails alone,
/// and a WRITE batch after it lands byte for byte.
#[test]
fn submit_and_wait_moves_large_batches_on_the_caller() {
    let opts = [("tcp_spread", "off")];
    let (a, b) = (engine_with(&opts), engine_with(&opts));
    const BLK: usize = 1 << 20;
    const N: usize = 16;
    let remote = Buf::pattern(N * BLK, 21);
    let hidden = Buf::new(BLK, 3);
    b.register_memory(remote.addr(), remote.len(), "cpu:0", true)
        .unwrap();
    b.register_memory(hidden.addr(), hidden.len(), "cpu:0", false)
        .unwrap();
    let local = Buf::new(N * BLK, 0);
    let src = Buf::pattern(4 * BLK, 22);
    share(&a, &[&local, &src]);
    let seg = a.open_segment(b.name()).unwrap();
    let mut reqs = strided_requests(
        Opcode::Read,
        &local,
        seg,
        remote.addr(),
        N as u64,
        BLK as u64,
    );
    reqs[7].remote = hidden.addr();
    let batch = a.alloc_batch(N).unwrap();
    let err = a
        .submit_and_wait(batch, &reqs, Some(Duration::from_secs(20)))
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Rejected);
    for i in 0..N {
        let st = a.task_status(batch, i).unwrap();
        if i == 7 {
            assert_eq!(st.error, Some(ErrorKind::Rejected));
            assert!(local.0[i * BLK..(i + 1) * BLK].iter().all(|&x| x == 0));
        } else {
            assert_eq!(st.state, TaskState::Completed, "request {i}");
            assert!(
                local.0[i * BLK..(i + 1) * BLK] == remote.0[i * BLK..(i + 1) * BLK],
                "request {i}"
            );
        }
    }
    a.free_batch(batch).unwrap();
    let writes = strided_requests(Opcode::Write, &src, seg, remote.addr(), 4, BLK as u64);
    let batch = a.alloc_batch(4).unwrap();
    a.submit_and_wait(batch, &writes, Some(Duration::from_secs(20)))
        .unwrap();
    assert!(
        remote.0[..4 * BLK] == src.0[..],
        "every written byte landed"
    );
    a.free_batch(batch).unwrap();

    // Many slices: a waited READ sends its headers in runs of 1024 and reads a run's replies
    // only after sending the next, so the peer blocks on replies while headers keep arriving.
    // One run, a run and a half, and five runs of 16 KiB slices complete with every byte.
    for n in [1024usize, 1500, 5000] {
        const SMALL: usize = 16 << 10;
        let remote = Buf::pattern(n * SMALL, 23);
        let mut local = Buf::new(n * SMALL, 0);
        share(&b, &[&remote]);
        share(&a, &[&local]);
        let mut reqs = strided_requests(
            Opcode::Read,
            &local,
            seg,
            remote.addr(),
            n as u64,
            SMALL as u64,
        );
        // In the third run of the largest batch, one request the peer refuses.
        let refused = (n == 5000).then_some(2500);
        if let Some(i) = refused {
            reqs[i].remote = hidden.addr();
        }
        let batch = a.alloc_batch(n).unwrap();
        let r = a.submit_and_wait(batch, &reqs, Some(Duration::from_secs(20)));
        match refused {
            None => r.unwrap(),
            Some(i) => {
                assert_eq!(r.unwrap_err().kind(), ErrorKind::Rejected);
                assert_eq!(
                    a.task_status(batch, i).unwrap().error,
                    Some(ErrorKind::Rejected)
                );
                assert!(local.0[i * SMALL..(i + 1) * SMALL].iter().all(|&x| x == 0));
                local.0[i * SMALL..(i + 1) * SMALL]
                    .copy_from_slice(&remote.0[i * SMALL..(i + 1) * SMALL]);
            }
        }
        assert!(local.0 == remote.0, "{n} slices: every other byte read");
        a.free_batch(batch).unwrap();
        a.unregister_memory(local.addr()).unwrap();
        b.unregister_memory(remote.addr()).unwrap();
    }
}

#[test]
fn interleaved_reads_and_writes_in_one_batch_land_where_they_should() {
    // READ headers travel together between WRITE payloads; every byte is checked, through the
    // lane threads (`submit`) and on the caller (`submit_and_wait`).
    let (a, b) = (engine_with(&[("tcp_spread", "off")]), engine());
    const BLK: usize = 64 << 10;
    let ops = "RRWRWWRRRWRW";
    let n = ops.len();
    let seg = a.open_segment(b.name()).unwrap();
    for waited in [false, true] {
        let remote = Buf::pattern(n * BLK, 31);
        let before = remote.0.clone();
        let src = Buf::pattern(n * BLK, 32);
        let dst = Buf::new(n * BLK, 0);
        share(&b, &[&remote]);
        share(&a, &[&src, &dst]);
        let reqs: Vec<Request> = ops
            .chars()
            .enumerate()
            .map(|(i, c)| Request {
                op: if c == 'R' {
                    Opcode::Read
                } else {
                    Opcode::Write
                },
                local: if c == 'R' { dst.addr() } else { src.addr() } + (i * BLK) as u64,
                segment: seg,
                remote: remote.addr() + (i * BLK) as u64,
                len: BLK as u64,
            })
            .collect();
        let batch = a.alloc_batch(n).unwrap();
        if waited {
            a.submit_and_wait(batch, &reqs, Some(Duration::from_secs(20)))
                .unwrap();
        } else {
            a.submit(batch, &reqs).unwrap();
            a.wait_batch(batch, Some(Duration::from_secs(20))).unwrap();
        }
        for (i, c) in ops.chars().enumerate() {
            let at = i * BLK..(i + 1) * BLK;
            if c == 'R' {
                assert!(dst.0[at.clone()] == before[at], "waited={waited}: READ {i}");
            } else {
                assert!(
                    remote.0[at.clone()] == src.0[at],
                    "waited={waited}: WRITE {i}"
                );
            }
        }
        a.free_batch(batch).unwrap();
        for addr in [src.addr(), dst.addr()] {
            a.unregister_memory(addr).unwrap();
        }
        b.unregister_memory(remote.addr()).unwrap();
    }
}
