//! Scatter operations over real loopback TCP (and the same-engine path): data correctness for
//! up to 32,768 fragments, exactly-once callbacks, repeated zero-timeout waits, per-fragment
//! failures (including the split of a coalesced group the peer rejects) and id lifecycle.

mod common;
use common::*;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tidewire::engine::scatter::{FragmentCallback, FragmentResult};
use tidewire::engine::{LOCAL_SEGMENT, ScatterRange};
use tidewire::{Engine, ErrorKind, Opcode};

const FRAG: usize = 128;
const WAIT: Option<Duration> = Some(Duration::from_secs(20));

/// Per-fragment callback bookkeeping: how many times each index fired and the last result.
struct Seen {
    calls: Arc<Vec<AtomicU32>>,
    results: Arc<Mutex<Vec<Option<FragmentResult>>>>,
}

impl Seen {
    fn new(n: usize) -> (Seen, FragmentCallback) {
        let calls: Arc<Vec<AtomicU32>> = Arc::new((0..n).map(|_| AtomicU32::new(0)).collect());
        let results = Arc::new(Mutex::new(vec![None; n]));
        let (c, r) = (calls.clone(), results.clone());
        let cb: FragmentCallback = Box::new(move |i, res| {
            c[i].fetch_add(1, Ordering::Relaxed);
            r.lock().unwrap()[i] = Some(res);
        });
        (Seen { calls, results }, cb)
    }

    /// Every fragment fired exactly once.
    fn assert_exactly_once(&self) {
        for (i, c) in self.calls.iter().enumerate() {
            assert_eq!(
                c.load(Ordering::Relaxed),
                1,
                "callback count of fragment {i}"
            );
        }
    }

    fn results(&self) -> Vec<Option<FragmentResult>> {
        self.results.lock().unwrap().clone()
    }
}

/// Collects what `scatter_wait`'s report closure sees (each index at most once per call).
fn wait_report(
    e: &Engine,
    id: u64,
    n: usize,
    timeout: Option<Duration>,
) -> (tidewire::Result<()>, Vec<Option<FragmentResult>>) {
    let mut seen: Vec<Option<FragmentResult>> = vec![None; n];
    let mut dup = 0usize;
    let r = e.scatter_wait(
        id,
        timeout,
        Some(&mut |i: usize, res: FragmentResult| {
            if seen[i].replace(res).is_some() {
                dup += 1;
            }
        }),
    );
    assert_eq!(dup, 0, "report saw a fragment twice in one call");
    (r, seen)
}

/// Offsets for `n` fragments: remote contiguous, local spaced two fragments apart.
fn gapped(n: usize) -> (Vec<usize>, Vec<usize>, Vec<usize>) {
    (
        (0..n).map(|i| i * 2 * FRAG).collect(),
        (0..n).map(|i| i * FRAG).collect(),
        vec![FRAG; n],
    )
}

struct Pair {
    a: Engine,
    b: Engine,
    seg: i32,
}

fn pair() -> Pair {
    let a = engine();
    let b = engine();
    let seg = a.open_segment(b.name()).unwrap();
    Pair { a, b, seg }
}

#[allow(clippy::too_many_arguments)]
fn range<'a>(
    op: Opcode,
    segment: i32,
    remote: &Buf,
    remote_size: u64,
    local: &Buf,
    lo: &'a [usize],
    ro: &'a [usize],
    len: &'a [usize],
) -> ScatterRange<'a> {
    ScatterRange {
        op,
        segment,
        remote_base: remote.addr(),
        remote_size,
        local_base: local.addr(),
        local_capacity: local.len(),
        local_offsets: lo,
        remote_offsets: ro,
        lengths: len,
    }
}

/// A contiguous remote pattern registered with `remote_owner` and a zeroed (`fill`) local
/// buffer twice as large registered with `local_owner`: the layout of every gapped scatter here.
fn gapped_buffers(
    local_owner: &Engine,
    remote_owner: &Engine,
    n: usize,
    seed: u8,
    fill: u8,
) -> (Buf, Buf) {
    let remote = Buf::pattern(n * FRAG, seed);
    remote_owner
        .register_memory(remote.addr(), remote.len(), "cpu:0", true)
        .unwrap();
    let local = Buf::new(n * 2 * FRAG, fill);
    local_owner
        .register_memory(local.addr(), local.len(), "cpu:0", true)
        .unwrap();
    (remote, local)
}

/// Submits a READ of `n` fragments: remote fragment i lands at local offset 2·i·FRAG.
fn submit_gapped_read(a: &Engine, seg: i32, remote: &Buf, local: &Buf, n: usize) -> (Seen, u64) {
    let (lo, ro, len) = gapped(n);
    let (seen, cb) = Seen::new(n);
    let id = a
        .submit_scatter(
            &[range(
                Opcode::Read,
                seg,
                remote,
                remote.len(),
                local,
                &lo,
                &ro,
                &len,
            )],
            Some(cb),
        )
        .unwrap();
    (seen, id)
}

/// Checks that every fragment of a gapped READ landed in place.
fn assert_gapped_copy(local: &Buf, remote: &Buf, n: usize) {
    for i in 0..n {
        assert_eq!(
            &local.0[i * 2 * FRAG..(i * 2 + 1) * FRAG],
            &remote.0[i * FRAG..(i + 1) * FRAG],
            "fragment {i}"
        );
    }
}

/// READ then WRITE of `n` 128-byte fragments; returns the elapsed time of the READ.
fn read_write_round(p: &Pair, n: usize) -> Duration {
    let (remote, local) = gapped_buffers(&p.a, &p.b, n, 7, 0xEE);

    // READ: remote contiguous → local gapped.
    let t0 = Instant::now();
    let (seen, id) = submit_gapped_read(&p.a, p.seg, &remote, &local, n);
    let (lo, ro, len) = gapped(n);
    let (r, reported) = wait_report(&p.a, id, n, WAIT);
    let read_time = t0.elapsed();
    r.unwrap();
    assert!(
        reported.iter().all(|r| *r == Some(Ok(()))),
        "report covers all"
    );
    seen.assert_exactly_once();
    assert_eq!(p.a.scatter_len(id).unwrap(), n);
    for i in 0..n {
        let l = &local.0[i * 2 * FRAG..(i * 2 + 1) * FRAG];
        assert_eq!(
            l,
            &remote.0[i * FRAG..(i + 1) * FRAG],
            "READ fragment {i} of {n}"
        );
        let gap = &local.0[(i * 2 + 1) * FRAG..(i * 2 + 2) * FRAG];
        assert!(
            gap.iter().all(|&b| b == 0xEE),
            "gap after fragment {i} untouched"
        );
    }
    p.a.scatter_free(id).unwrap();
    assert_eq!(
        p.a.scatter_wait(id, WAIT, None).unwrap_err().kind(),
        ErrorKind::InvalidId
    );

    // WRITE: local gapped (fresh pattern) → a zeroed contiguous remote.
    let src = Buf::pattern(n * 2 * FRAG, 21);
    p.a.register_memory(src.addr(), src.len(), "cpu:0", true)
        .unwrap();
    let dst = Buf::new(n * FRAG, 0);
    p.b.register_memory(dst.addr(), dst.len(), "cpu:0", true)
        .unwrap();
    let (seen, cb) = Seen::new(n);
    let id =
        p.a.submit_scatter(
            &[range(
                Opcode::Write,
                p.seg,
                &dst,
                dst.len(),
                &src,
                &lo,
                &ro,
                &len,
            )],
            Some(cb),
        )
        .unwrap();
    let (r, reported) = wait_report(&p.a, id, n, WAIT);
    r.unwrap();
    assert!(reported.iter().all(|r| *r == Some(Ok(()))));
    seen.assert_exactly_once();
    for i in 0..n {
        assert_eq!(
            &dst.0[i * FRAG..(i + 1) * FRAG],
            &src.0[i * 2 * FRAG..(i * 2 + 1) * FRAG],
            "WRITE fragment {i} of {n}"
        );
    }
    p.a.scatter_free(id).unwrap();
    for (e, b) in [(&p.a, &local), (&p.a, &src), (&p.b, &remote), (&p.b, &dst)] {
        e.unregister_memory(b.addr()).unwrap();
    }
    read_time
}

#[test]
fn read_and_write_1_4096_32768_fragments() {
    let p = pair();
    for n in [1usize, 4096, 32_768] {
        let t = read_write_round(&p, n);
        eprintln!("scatter READ of {n} x {FRAG} B fragments: {t:?}");
    }
    // Once more with warm lanes: the figure to compare with the target.
    let t = read_write_round(&p, 32_768);
    eprintln!("scatter READ of 32768 x {FRAG} B fragments (warm): {t:?}");
}

#[test]
fn zero_timeout_wait_returns_timeout_or_ok_and_repeats() {
    let p = pair();
    let n = 32_768;
    let (remote, local) = gapped_buffers(&p.a, &p.b, n, 3, 0);
    let (seen, id) = submit_gapped_read(&p.a, p.seg, &remote, &local, n);
    let deadline = Instant::now() + Duration::from_secs(20);
    let (mut timeouts, mut polls) = (0u32, 0u32);
    loop {
        assert!(Instant::now() < deadline, "scatter never finished");
        polls += 1;
        let (r, reported) = wait_report(&p.a, id, n, Some(Duration::ZERO));
        match r {
            Ok(()) => {
                assert!(reported.iter().all(|r| *r == Some(Ok(()))));
                break;
            }
            Err(e) => {
                assert_eq!(e.kind(), ErrorKind::Timeout, "{e}");
                // Whatever was reported so far succeeded.
                assert!(reported.iter().flatten().all(|r| r.is_ok()));
                timeouts += 1;
                std::thread::sleep(Duration::from_micros(200));
            }
        }
    }
    eprintln!("zero-timeout polls: {polls} ({timeouts} timed out)");
    seen.assert_exactly_once();
    // Waiting again after completion is fine and fires nothing new.
    p.a.scatter_wait(id, Some(Duration::ZERO), None).unwrap();
    p.a.scatter_wait(id, None, None).unwrap();
    seen.assert_exactly_once();
    assert_gapped_copy(&local, &remote, n);
    p.a.scatter_free(id).unwrap();
}

/// One op mixing every per-fragment failure with successes. The peer registers `S` bytes but
/// the range claims `2 * S`, so fragments past `S` pass local validation and are refused by
/// the peer.
fn partial_failure(op: Opcode) {
    let p = pair();
    const S: usize = 64 * FRAG;
    let remote = Buf::pattern(2 * S, 5); // only the first S bytes get registered
    p.b.register_memory(remote.addr(), S as u64, "cpu:0", true)
        .unwrap();
    let local = Buf::pattern(64 << 10, 9);
    let local_orig = local.0.clone();
    p.a.register_memory(local.addr(), local.len(), "cpu:0", true)
        .unwrap();
    let remote_orig = remote.0.clone();
    let cap = local.len() as usize;

    use ErrorKind::*;
    let ok: Option<FragmentResult> = Some(Ok(()));
    let err = |k| Some(Err(k));
    // (local offset, remote offset, length, expected)
    let mut frags: Vec<(usize, usize, usize, Option<FragmentResult>)> = Vec::new();
    for i in 0..4 {
        frags.push((i * 2 * FRAG, i * FRAG, FRAG, ok)); // 0..4 plain
    }
    frags.push((cap - 64, 8 * FRAG, FRAG, err(InvalidArgument))); // 4: local out of bounds
    frags.push((10 * 2 * FRAG, 2 * S - 64, FRAG, err(InvalidArgument))); // 5: past remote_size
    frags.push((12 * 2 * FRAG, 12 * FRAG, 0, ok)); // 6: zero length
    // 7..15: adjacent on both sides, straddling the end of the peer's region: coalesced into
    // one wire request that the peer rejects; the first four must still succeed.
    for k in 0..8 {
        let exp = if k < 4 { ok } else { err(Rejected) };
        frags.push(((16 << 10) + k * FRAG, S - 4 * FRAG + k * FRAG, FRAG, exp));
    }
    frags.push((20 * 2 * FRAG, usize::MAX - 10, FRAG, err(InvalidArgument))); // 15: overflow
    frags.push((22 * 2 * FRAG, S + 8 * FRAG, FRAG, err(Rejected))); // 16: alone, past S
    frags.push((24 * 2 * FRAG, 24 * FRAG, FRAG, ok)); // 17: plain, after the failures
    let lo: Vec<usize> = frags.iter().map(|f| f.0).collect();
    let ro: Vec<usize> = frags.iter().map(|f| f.1).collect();
    let len: Vec<usize> = frags.iter().map(|f| f.2).collect();
    let mut expected: Vec<Option<FragmentResult>> = frags.iter().map(|f| f.3).collect();

    // A second range to a segment that was never opened: all of its fragments fail.
    let unk = [0usize, FRAG, 2 * FRAG];
    expected.extend([err(UnknownSegment); 3]);
    // A third range with mismatched array lengths.
    let short = [0usize];
    let three = [FRAG; 3];
    expected.extend([err(InvalidArgument); 3]);
    // A fourth, healthy range after all that.
    let tail_lo = [40 << 10];
    let tail_ro = [32 * FRAG];
    let tail_len = [FRAG];
    expected.push(ok);
    let n = expected.len();

    let ranges = [
        range(op, p.seg, &remote, 2 * S as u64, &local, &lo, &ro, &len),
        range(op, 4242, &remote, S as u64, &local, &unk, &unk, &three),
        range(op, p.seg, &remote, S as u64, &local, &short, &unk, &three),
        range(
            op, p.seg, &remote, S as u64, &local, &tail_lo, &tail_ro, &tail_len,
        ),
    ];
    let (seen, cb) = Seen::new(n);
    let id = p.a.submit_scatter(&ranges, Some(cb)).unwrap();
    let (r, reported) = wait_report(&p.a, id, n, WAIT);
    // The aggregate is the lowest-indexed failure: fragment 4.
    assert_eq!(r.unwrap_err().kind(), InvalidArgument);
    assert_eq!(reported, expected, "{op:?} report");
    seen.assert_exactly_once();
    assert_eq!(seen.results(), expected, "{op:?} callbacks");

    // Successful fragments moved their bytes; failed ones left both sides untouched.
    let all: Vec<(usize, usize, usize)> = frags
        .iter()
        .map(|f| (f.0, f.1, f.2))
        .chain(std::iter::once((tail_lo[0], tail_ro[0], tail_len[0])))
        .collect();
    let results: Vec<_> = expected[..frags.len()]
        .iter()
        .chain(std::iter::once(&expected[n - 1]))
        .collect();
    for (i, ((l, r, n), res)) in all.iter().zip(results).enumerate() {
        if *n == 0 || *res != ok {
            continue;
        }
        let (got, want) = match op {
            Opcode::Read => (&local.0[*l..l + n], &remote_orig[*r..r + n]),
            Opcode::Write => (&remote.0[*r..r + n], &local_orig[*l..l + n]),
        };
        assert_eq!(got, want, "{op:?} fragment {i}");
    }
    match op {
        // Nothing was written past the peer's region.
        Opcode::Write => assert!(remote.0[S..] == remote_orig[S..]),
        // The rejected fragments' local destinations kept their old bytes.
        Opcode::Read => {
            for (l, _, n, res) in &frags {
                if *res != ok && *l + n <= cap {
                    assert_eq!(&local.0[*l..l + n], &local_orig[*l..l + n]);
                }
            }
        }
    }
    p.a.scatter_free(id).unwrap();

    // The peer is still healthy for a follow-up scatter on the same lanes.
    let (seen, cb) = Seen::new(1);
    let one = [0usize];
    let id =
        p.a.submit_scatter(
            &[range(
                op,
                p.seg,
                &remote,
                S as u64,
                &local,
                &one,
                &one,
                &[FRAG],
            )],
            Some(cb),
        )
        .unwrap();
    p.a.scatter_wait(id, WAIT, None).unwrap();
    seen.assert_exactly_once();
    p.a.scatter_free(id).unwrap();
    drop(p.b);
}

#[test]
fn partial_failure_read() {
    partial_failure(Opcode::Read);
}

#[test]
fn partial_failure_write() {
    partial_failure(Opcode::Write);
}

#[test]
fn same_engine_scatter_uses_segment_zero() {
    let a = engine();
    assert_eq!(a.open_segment(a.name()).unwrap(), LOCAL_SEGMENT);
    let n = 4096;
    let (remote, local) = gapped_buffers(&a, &a, n, 11, 0);
    let (seen, id) = submit_gapped_read(&a, LOCAL_SEGMENT, &remote, &local, n);
    let (lo, ro, len) = gapped(n);
    let (r, reported) = wait_report(&a, id, n, WAIT);
    r.unwrap();
    assert!(reported.iter().all(|r| *r == Some(Ok(()))));
    seen.assert_exactly_once();
    assert_gapped_copy(&local, &remote, n);
    a.scatter_free(id).unwrap();

    // WRITE back into a zeroed region, plus one fragment aimed past the registered range.
    let dst = Buf::new(n * FRAG + FRAG, 0);
    a.register_memory(dst.addr(), (n * FRAG) as u64, "cpu:0", true)
        .unwrap();
    let mut lo2 = lo.clone();
    let mut ro2 = ro.clone();
    let mut len2 = len.clone();
    lo2.push(0);
    ro2.push(n * FRAG);
    len2.push(FRAG);
    let (seen, cb) = Seen::new(n + 1);
    let id = a
        .submit_scatter(
            &[ScatterRange {
                remote_size: dst.len(),
                ..range(
                    Opcode::Write,
                    LOCAL_SEGMENT,
                    &dst,
                    0,
                    &local,
                    &lo2,
                    &ro2,
                    &len2,
                )
            }],
            Some(cb),
        )
        .unwrap();
    let (r, reported) = wait_report(&a, id, n + 1, WAIT);
    let e = r.unwrap_err();
    assert_eq!(
        reported[n],
        Some(Err(e.kind())),
        "only the last fragment fails: {e}"
    );
    assert!(reported[..n].iter().all(|r| *r == Some(Ok(()))));
    seen.assert_exactly_once();
    assert!(dst.0[..n * FRAG] == remote.0[..]);
    assert!(dst.0[n * FRAG..].iter().all(|&b| b == 0));
    a.scatter_free(id).unwrap();
}

#[test]
fn scatter_free_waits_frees_and_ids_go_stale() {
    let p = pair();
    let n = 32_768;
    let (remote, local) = gapped_buffers(&p.a, &p.b, n, 13, 0);
    let (seen, id) = submit_gapped_read(&p.a, p.seg, &remote, &local, n);
    let (lo, ro, len) = gapped(n);
    // No wait: free must block until every fragment physically finished, firing callbacks.
    p.a.scatter_free(id).unwrap();
    seen.assert_exactly_once();
    assert!(seen.results().iter().all(|r| *r == Some(Ok(()))));
    assert_gapped_copy(&local, &remote, n);
    for e in [
        p.a.scatter_wait(id, Some(Duration::ZERO), None),
        p.a.scatter_free(id),
        p.a.scatter_len(id).map(|_| ()),
        p.a.scatter_wait(0xdead_beef, None, None),
        p.a.scatter_free(0),
    ] {
        assert_eq!(e.unwrap_err().kind(), ErrorKind::InvalidId);
    }
    // A new op gets a fresh id; the old one stays stale.
    let id2 =
        p.a.submit_scatter(
            &[range(
                Opcode::Read,
                p.seg,
                &remote,
                remote.len(),
                &local,
                &lo[..1],
                &ro[..1],
                &len[..1],
            )],
            None,
        )
        .unwrap();
    assert_ne!(id2, id);
    assert_eq!(
        p.a.scatter_free(id).unwrap_err().kind(),
        ErrorKind::InvalidId
    );
    p.a.scatter_wait(id2, WAIT, None).unwrap();
    p.a.scatter_free(id2).unwrap();
    // Empty scatter: completes at once.
    let id3 = p.a.submit_scatter(&[], None).unwrap();
    p.a.scatter_wait(id3, Some(Duration::ZERO), None).unwrap();
    p.a.scatter_free(id3).unwrap();
}
