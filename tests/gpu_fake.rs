//! GPU code paths against the fake CUDA driver built from `tests/fake_cuda/fake_cuda.c`: run-time
//! loading, location detection, staging over loopback TCP (GPU↔GPU, GPU↔host, both as initiator
//! and as target), local GPU copies, stream-ordered transfers and failure injection. The fake's
//! device pointers are inaccessible to the host, so any path that touched device memory without
//! CUDA would crash these tests.

mod common;
#[path = "fake_cuda/mod.rs"]
mod fake;

use common::*;
use fake::Fake;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, MutexGuard, Once};
use std::time::Duration;
use tidewire::engine::TaskState;
use tidewire::{Engine, ErrorKind, Opcode, Request};

const T: Option<Duration> = Some(Duration::from_secs(20));

/// The fake's failure injection and counters are process-wide: one test at a time.
fn setup() -> (MutexGuard<'static, ()>, Fake) {
    static LOCK: Mutex<()> = Mutex::new(());
    static ONCE: Once = Once::new();
    let g = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    ONCE.call_once(|| fake::set_cuda_lib(fake::lib_path().to_str().unwrap()));
    assert!(tidewire::gpu::is_available(), "fake driver loads");
    let f = Fake::open();
    f.reset();
    (g, f)
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    Buf::pattern(len, seed).0
}

fn reg(e: &Engine, addr: u64, len: usize) {
    e.register_memory(addr, len as u64, "*", true).unwrap();
}

fn xfer(
    e: &Engine,
    op: Opcode,
    local: u64,
    seg: i32,
    remote: u64,
    len: usize,
) -> tidewire::Result<()> {
    let b = e.alloc_batch(1).unwrap();
    e.submit(
        b,
        &[Request {
            op,
            local,
            segment: seg,
            remote,
            len: len as u64,
        }],
    )?;
    let r = e.wait_batch(b, T);
    e.free_batch(b).unwrap();
    r
}

#[test]
fn load_and_location_detection() {
    let (_g, f) = setup();
    assert_eq!(tidewire::gpu::device_count().unwrap(), 2);
    let e = engine();
    let d0 = f.alloc(0, &[1; 4096]);
    let d1 = f.alloc(1, &[2; 4096]);
    let host = Buf::new(1 << 16, 7);
    reg(&e, d0.ptr, d0.len);
    reg(&e, d1.ptr, d1.len);
    reg(&e, host.addr(), host.0.len());
    assert_eq!(e.memory_location(d0.ptr).unwrap(), "cuda:0");
    assert_eq!(e.memory_location(d1.ptr + 100).unwrap(), "cuda:1");
    let loc = e.memory_location(host.addr()).unwrap();
    assert!(loc.starts_with("cpu:"), "{loc}");
    assert_eq!(tidewire::gpu::probe(host.addr()), None);
    assert_eq!(tidewire::gpu::probe(d1.ptr), Some(1));
    assert_eq!(
        e.memory_location(0x10).unwrap_err().kind(),
        ErrorKind::AddressNotRegistered
    );
    // A "cuda:" label on host memory keeps the label but is moved as host memory.
    let lying = Buf::pattern(8192, 4);
    let out = Buf::new(8192, 0);
    e.register_memory(lying.addr(), 8192, "cuda:0", true)
        .unwrap();
    reg(&e, out.addr(), 8192);
    assert_eq!(e.memory_location(lying.addr()).unwrap(), "cuda:0");
    xfer(&e, Opcode::Write, lying.addr(), 0, out.addr(), 8192).unwrap();
    assert_eq!(out.0, lying.0);
    // Explicit cpu locations never ask the driver.
    let before = f.calls("cuPointerGetAttribute");
    let plain = Buf::new(4096, 0);
    e.register_memory(plain.addr(), 4096, "cpu:0", true)
        .unwrap();
    assert_eq!(f.calls("cuPointerGetAttribute"), before);
    // The descriptor still publishes Mooncake's buffer name (the segment name).
    let desc = e.local_descriptor();
    assert!(desc.buffers.iter().all(|b| b.name == e.name()));
    drop(e);
    f.free(d0);
    f.free(d1);
}

#[test]
fn gpu_to_gpu_over_tcp_both_directions() {
    let (_g, f) = setup();
    let (a, b) = (engine(), engine());
    let len = (3 << 20) + 12345; // several staging chunks, a partial last one
    let data = pattern(len, 9);
    let src = f.alloc(0, &data);
    let back = f.alloc(0, &vec![0; len]);
    let dst = f.alloc(1, &vec![0; len]);
    reg(&a, src.ptr, len);
    reg(&a, back.ptr, len);
    reg(&b, dst.ptr, len);
    let seg = a.open_segment(b.name()).unwrap();
    let d2h = f.calls("cuMemcpyDtoHAsync_v2");
    let h2d = f.calls("cuMemcpyHtoDAsync_v2");
    xfer(&a, Opcode::Write, src.ptr, seg, dst.ptr, len).unwrap();
    assert!(f.read(&dst) == data, "GPU→GPU WRITE bytes");
    xfer(&a, Opcode::Read, back.ptr, seg, dst.ptr, len).unwrap();
    assert!(f.read(&back) == data, "GPU←GPU READ bytes");
    // Pipelined staging: one async copy per chunk on each side, both ways.
    let chunks = len.div_ceil(tidewire::gpu::CHUNK) as i64;
    assert!(f.calls("cuMemcpyDtoHAsync_v2") - d2h >= 2 * chunks);
    assert!(f.calls("cuMemcpyHtoDAsync_v2") - h2d >= 2 * chunks);
    assert_eq!(f.violations(), 0);
    drop((a, b));
    for d in [src, back, dst] {
        f.free(d);
    }
}

#[test]
fn gpu_and_host_over_tcp_mixed_batches() {
    let (_g, f) = setup();
    let (a, b) = (engine(), engine());
    let big = (2 << 20) + 3;
    let small = 1000; // inline replies on the server
    let data = pattern(big, 5);
    let a_dev = f.alloc(0, &data);
    let a_dev_in = f.alloc(1, &vec![0; big]);
    let a_host = Buf::pattern(big, 6);
    let mut a_host_in = Buf::new(big, 0);
    let b_host = Buf::new(big, 0);
    let b_dev = f.alloc(1, &vec![0; big]);
    reg(&a, a_dev.ptr, big);
    reg(&a, a_dev_in.ptr, big);
    reg(&a, a_host.addr(), big);
    reg(&a, a_host_in.addr(), big);
    reg(&b, b_host.addr(), big);
    reg(&b, b_dev.ptr, big);
    let seg = a.open_segment(b.name()).unwrap();
    // GPU → remote host, host → remote GPU, in one batch (host and staged payloads interleave).
    let batch = a.alloc_batch(4).unwrap();
    let half = big / 2;
    a.submit(
        batch,
        &[
            Request {
                op: Opcode::Write,
                local: a_dev.ptr,
                segment: seg,
                remote: b_host.addr(),
                len: half as u64,
            },
            Request {
                op: Opcode::Write,
                local: a_host.addr(),
                segment: seg,
                remote: b_dev.ptr,
                len: big as u64,
            },
            Request {
                op: Opcode::Write,
                local: a_dev.ptr + half as u64,
                segment: seg,
                remote: b_host.addr() + half as u64,
                len: (big - half) as u64,
            },
        ],
    )
    .unwrap();
    a.wait_batch(batch, T).unwrap();
    a.free_batch(batch).unwrap();
    assert!(b_host.0 == data, "GPU → host");
    assert!(f.read(&b_dev) == a_host.0, "host → GPU");
    // Remote GPU → local host (large and small, the small one inline), remote host → local GPU.
    xfer(&a, Opcode::Read, a_host_in.addr(), seg, b_dev.ptr, big).unwrap();
    assert!(a_host_in.0 == a_host.0, "GPU → host READ");
    a_host_in.0.fill(0);
    xfer(
        &a,
        Opcode::Read,
        a_host_in.addr(),
        seg,
        b_dev.ptr + 7,
        small,
    )
    .unwrap();
    assert_eq!(&a_host_in.0[..small], &a_host.0[7..7 + small]);
    xfer(&a, Opcode::Read, a_dev_in.ptr, seg, b_host.addr(), big).unwrap();
    assert!(f.read(&a_dev_in) == data, "host → GPU READ");
    assert_eq!(f.violations(), 0);
    drop((a, b));
    for d in [a_dev, a_dev_in, b_dev] {
        f.free(d);
    }
}

#[test]
fn local_and_in_process_gpu_copies() {
    let (_g, f) = setup();
    let a = engine_with(&[("same_host", "1")]);
    let b = engine_with(&[("same_host", "1")]);
    let len = 300_000;
    let data = pattern(len, 1);
    let d0 = f.alloc(0, &data);
    let d1 = f.alloc(1, &vec![0; len]);
    let h = Buf::new(len, 0);
    reg(&a, d0.ptr, len);
    reg(&a, d1.ptr, len);
    reg(&a, h.addr(), len);
    // Same engine: device → device, device → host.
    xfer(&a, Opcode::Write, d0.ptr, 0, d1.ptr, len).unwrap();
    assert!(f.read(&d1) == data);
    xfer(&a, Opcode::Read, h.addr(), 0, d1.ptr, len).unwrap();
    assert!(h.0 == data);
    // Peer engine in this process (no sockets): device → its device.
    let d2 = f.alloc(1, &vec![0; len]);
    reg(&b, d2.ptr, len);
    let seg = a.open_segment(b.name()).unwrap();
    assert_eq!(a.segment_path(seg).unwrap(), "in-process");
    xfer(&a, Opcode::Write, d0.ptr, seg, d2.ptr, len).unwrap();
    assert!(f.read(&d2) == data);
    drop((a, b));
    for d in [d0, d1, d2] {
        f.free(d);
    }
}

fn stream_ordering(f: &Fake, wait_value: bool) {
    let (a, b) = (engine(), engine());
    // The switch only covers tidewire's enqueue: the test's own gate uses a wait-value.
    let enq = |reqs: &[Request], s: usize, keep: bool| {
        f.set_wait_value(wait_value);
        let r = a.transfer_on_stream(reqs, s, keep);
        f.set_wait_value(true);
        r
    };
    let len = (1 << 20) + 77;
    let data = pattern(len, 3);
    let src = f.alloc(0, &data);
    let remote = Buf::new(len, 0);
    let snapshot = Buf::new(len, 0);
    reg(&a, src.ptr, len);
    reg(&b, remote.addr(), len);
    let seg = a.open_segment(b.name()).unwrap();
    let s = f.stream(0);
    let gate = Box::new(AtomicU32::new(0));
    // Stream: [wait for the test's gate] [transfer] [copy the transfer's destination].
    f.wait_geq(s, gate.as_ptr(), 1);
    let req = Request {
        op: Opcode::Write,
        local: src.ptr,
        segment: seg,
        remote: remote.addr(),
        len: len as u64,
    };
    let op = enq(&[req], s as usize, true).unwrap();
    f.copy_async(s, snapshot.addr(), remote.addr(), len);
    std::thread::sleep(Duration::from_millis(150));
    let st = a.stream_op_status(op).unwrap();
    assert_eq!(
        st.state,
        TaskState::Waiting,
        "not started before the stream reaches it"
    );
    assert!(remote.0.iter().all(|&x| x == 0), "nothing moved yet");
    assert_eq!(a.stream_op_free(op).unwrap_err().kind(), ErrorKind::Busy);
    assert_eq!(
        a.stream_op_wait(op, Some(Duration::from_millis(10)))
            .unwrap_err()
            .kind(),
        ErrorKind::Timeout
    );
    gate.store(1, Ordering::Release);
    f.sync(s);
    assert!(
        snapshot.0 == data,
        "later stream work ran after the transfer finished"
    );
    a.stream_op_wait(op, T).unwrap();
    let st = a.stream_op_status(op).unwrap();
    assert_eq!(
        (st.state, st.transferred),
        (TaskState::Completed, len as u64)
    );
    a.stream_op_free(op).unwrap();
    assert_eq!(
        a.stream_op_free(op).unwrap_err().kind(),
        ErrorKind::InvalidId
    );
    // A failure (remote range not registered) is reported, and the stream goes on.
    let bad = Request {
        remote: remote.addr() + len as u64 + 4096,
        ..req
    };
    let op = enq(&[bad], s as usize, true).unwrap();
    let op2 = enq(&[req], s as usize, false).unwrap();
    assert_eq!(op2, 0, "detached operations have no id");
    f.sync(s);
    let st = a.stream_op_status(op).unwrap();
    assert_eq!(
        (st.state, st.error.map(|e| e.kind())),
        (TaskState::Failed, Some(ErrorKind::Rejected))
    );
    assert_eq!(
        a.stream_op_wait(op, T).unwrap_err().kind(),
        ErrorKind::Rejected
    );
    a.stream_op_free(op).unwrap();
    // Other engines cannot see this engine's operations.
    let op = enq(&[req], s as usize, true).unwrap();
    f.sync(s);
    assert_eq!(
        b.stream_op_status(op).unwrap_err().kind(),
        ErrorKind::InvalidId
    );
    a.stream_op_free(op).unwrap();
    // Validation happens at enqueue time.
    let unreg = Request { local: 0x10, ..req };
    assert_eq!(
        enq(&[unreg], s as usize, true).unwrap_err().kind(),
        ErrorKind::AddressNotRegistered
    );
    assert_eq!(
        enq(&[Request { segment: 99, ..req }], s as usize, true)
            .unwrap_err()
            .kind(),
        ErrorKind::UnknownSegment
    );
    f.destroy(s);
    assert_eq!(f.violations(), 0, "no CUDA call from a host function");
    drop((a, b));
    f.free(src);
}

#[test]
fn stream_ordered_with_wait_value() {
    let (_g, f) = setup();
    let before = f.calls("cuStreamWaitValue32_v2");
    stream_ordering(&f, true);
    assert!(f.calls("cuStreamWaitValue32_v2") - before >= 5);
}

#[test]
fn stream_ordered_without_wait_value() {
    let (_g, f) = setup();
    let before = f.calls("cuLaunchHostFunc");
    stream_ordering(&f, false);
    // Each operation: the start function plus the blocking fallback.
    assert!(f.calls("cuLaunchHostFunc") - before >= 8);
}

#[test]
fn stream_op_on_a_freed_engine_fails_without_blocking_the_stream() {
    let (_g, f) = setup();
    let a = engine();
    let len = 4096;
    let src = f.alloc(0, &vec![1; len]);
    let dst = Buf::new(len, 0);
    reg(&a, src.ptr, len);
    reg(&a, dst.addr(), len);
    let s = f.stream(0);
    let gate = Box::new(AtomicU32::new(0));
    f.wait_geq(s, gate.as_ptr(), 1);
    let req = Request {
        op: Opcode::Write,
        local: src.ptr,
        segment: 0,
        remote: dst.addr(),
        len: len as u64,
    };
    a.transfer_on_stream(&[req], s as usize, false).unwrap();
    drop(a);
    gate.store(1, Ordering::Release);
    f.sync(s); // returns: the gate opened with the failure
    assert!(dst.0.iter().all(|&x| x == 0));
    f.destroy(s);
    f.free(src);
}

#[test]
fn injected_cuda_failures_fail_transfers_not_the_process() {
    let (_g, f) = setup();
    let (a, b) = (engine(), engine());
    let len = (1 << 20) + 5;
    let data = pattern(len, 8);
    let a_dev = f.alloc(0, &data);
    let a_host = Buf::pattern(len, 2);
    let b_dev = f.alloc(1, &vec![0; len]);
    reg(&a, a_dev.ptr, len);
    reg(&a, a_host.addr(), len);
    reg(&b, b_dev.ptr, len);
    let seg = a.open_segment(b.name()).unwrap();
    // Target side: uploads into its GPU fail → the peer rejects the WRITE.
    f.fail("cuMemcpyHtoDAsync_v2", 0, -1);
    let e = xfer(&a, Opcode::Write, a_host.addr(), seg, b_dev.ptr, len).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Rejected, "{e}");
    // Initiator side: a READ into local GPU memory fails locally; the connection stays usable.
    let e = xfer(&a, Opcode::Read, a_dev.ptr, seg, b_dev.ptr, len).unwrap_err();
    assert!(
        matches!(e.kind(), ErrorKind::Internal | ErrorKind::Rejected),
        "{e}"
    );
    f.reset();
    xfer(&a, Opcode::Write, a_host.addr(), seg, b_dev.ptr, len).unwrap();
    assert!(f.read(&b_dev) == a_host.0);
    // Downloads from the initiator's GPU fail for good → the WRITE fails (socket, after a retry).
    f.fail("cuMemcpyDtoHAsync_v2", 0, -1);
    assert!(xfer(&a, Opcode::Write, a_dev.ptr, seg, b_dev.ptr, len).is_err());
    // One transient failure: the resend succeeds.
    f.reset();
    f.fail("cuMemcpyDtoHAsync_v2", 0, 1);
    xfer(&a, Opcode::Write, a_dev.ptr, seg, b_dev.ptr, len).unwrap();
    assert!(f.read(&b_dev) == data);
    // Local GPU copy failure.
    f.fail("cuMemcpyAsync", 0, -1);
    let h = Buf::new(len, 0);
    reg(&a, h.addr(), len);
    let e = xfer(&a, Opcode::Read, h.addr(), 0, a_dev.ptr, len).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Internal);
    f.reset();
    xfer(&a, Opcode::Read, h.addr(), 0, a_dev.ptr, len).unwrap();
    assert!(h.0 == data);
    // Stream-ordered: the host function cannot be enqueued → error now, nothing queued.
    f.fail("cuLaunchHostFunc", 0, -1);
    let s = f.stream(0);
    let req = Request {
        op: Opcode::Write,
        local: a_dev.ptr,
        segment: seg,
        remote: b_dev.ptr,
        len: len as u64,
    };
    let e = a.transfer_on_stream(&[req], s as usize, true).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Internal);
    assert!(e.message().contains("cuLaunchHostFunc"), "{e}");
    f.reset();
    f.sync(s);
    f.destroy(s);
    drop((a, b));
    for d in [a_dev, b_dev] {
        f.free(d);
    }
}

#[test]
fn host_transfers_make_no_cuda_calls() {
    let (_g, f) = setup();
    let (a, b) = (engine(), engine());
    let src = Buf::pattern(1 << 20, 1);
    let dst = Buf::new(1 << 20, 0);
    reg(&a, src.addr(), 1 << 20);
    reg(&b, dst.addr(), 1 << 20);
    let seg = a.open_segment(b.name()).unwrap();
    let names = [
        "cuPointerGetAttribute",
        "cuMemcpyAsync",
        "cuMemcpyDtoHAsync_v2",
        "cuMemcpyHtoDAsync_v2",
        "cuCtxPushCurrent_v2",
    ];
    let before: Vec<i64> = names.iter().map(|n| f.calls(n)).collect();
    xfer(&a, Opcode::Write, src.addr(), seg, dst.addr(), 1 << 20).unwrap();
    xfer(&a, Opcode::Read, src.addr(), seg, dst.addr(), 4096).unwrap();
    let after: Vec<i64> = names.iter().map(|n| f.calls(n)).collect();
    assert_eq!(before, after, "{names:?}");
    assert!(dst.0 == src.0);
}
