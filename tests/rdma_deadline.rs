//! The per-slice transfer deadline (`transfer_timeout_ms`) on the RDMA path, against the fake
//! verbs provider (`tests/fake_verbs`) told to black-hole work requests (`fake_verbs_set_hold`): no
//! completion ever arrives by itself. Every task must still end FAILED soon after its deadline
//! (the queue pairs are moved to the error state, which flushes the work), and the peer must be
//! usable again afterwards.

mod common;
use common::Buf;
use common::fake_verbs::build_fake_verbs;
use std::time::{Duration, Instant};
use tidewire::engine::TaskState;
use tidewire::{Config, Engine, Opcode, Request};

fn rdma_engine(opts: &[(&str, &str)]) -> Engine {
    let mut cfg = Config::default();
    cfg.set("rdma", "on").unwrap();
    cfg.set("same_host", "0").unwrap();
    for (k, v) in opts {
        cfg.set(k, v).unwrap();
    }
    Engine::new(cfg).expect("engine with RDMA starts")
}

/// Writes `n` blocks of 64 KiB; returns the tasks' states and how long the batch took.
fn write_blocks(
    e: &Engine,
    seg: i32,
    local: u64,
    remote: u64,
    n: usize,
) -> (Vec<TaskState>, Duration) {
    let reqs: Vec<Request> = (0..n)
        .map(|k| Request {
            op: Opcode::Write,
            local: local + (k as u64) * 65536,
            segment: seg,
            remote: remote + (k as u64) * 65536,
            len: 65536,
        })
        .collect();
    let b = e.alloc_batch(n).unwrap();
    let t0 = Instant::now();
    e.submit(b, &reqs).unwrap();
    let _ = e.wait_batch(b, Some(Duration::from_secs(10)));
    let took = t0.elapsed();
    let states = (0..n).map(|k| e.task_status(b, k).unwrap().state).collect();
    let _ = e.free_batch(b);
    (states, took)
}

/// Switches the loaded provider's black hole on or off.
fn set_hold(lib: &std::path::Path, on: bool) {
    // SAFETY: the provider is loaded by the engines (NOLOAD only finds it); the symbol has this
    // signature.
    unsafe {
        let lib = libloading::os::unix::Library::open(
            Some(lib),
            libloading::os::unix::RTLD_NOW | libc::RTLD_NOLOAD,
        )
        .expect("fake provider is loaded");
        let f: libloading::os::unix::Symbol<unsafe extern "C" fn(i32)> =
            lib.get(b"fake_verbs_set_hold").unwrap();
        f(on as i32)
    }
}

#[test]
fn black_holed_rdma_work_fails_at_the_transfer_deadline() {
    let lib = build_fake_verbs("fake_verbs_deadline");
    // SAFETY: the only test of this binary; set before any engine or provider reads them.
    unsafe { std::env::set_var("TW_IBVERBS_LIB", &lib) };
    let t = rdma_engine(&[]);
    let i = rdma_engine(&[("transfer_timeout_ms", "500")]);
    let remote = Buf::new(1 << 20, 0);
    let local = Buf::pattern(1 << 20, 9);
    t.register_memory(remote.addr(), remote.len(), "cpu:0", true)
        .unwrap();
    i.register_memory(local.addr(), local.len(), "cpu:0", true)
        .unwrap();
    let seg = i.open_segment(t.name()).unwrap();
    assert_eq!(i.segment_path(seg).unwrap(), "rdma");
    let (st, _) = write_blocks(&i, seg, local.addr(), remote.addr(), 4);
    assert!(st.iter().all(|s| *s == TaskState::Completed), "{st:?}");

    set_hold(&lib, true);
    let (st, took) = write_blocks(&i, seg, local.addr(), remote.addr(), 8);
    set_hold(&lib, false);
    assert!(
        st.iter().all(|s| *s == TaskState::Failed),
        "{st:?} after {took:?}"
    );
    assert!(
        took >= Duration::from_millis(400) && took < Duration::from_secs(3),
        "black-holed batch ended after {took:?}"
    );

    // The queue pairs were reset: the peer works again.
    let (st, _) = write_blocks(&i, seg, local.addr(), remote.addr(), 4);
    assert!(st.iter().all(|s| *s == TaskState::Completed), "{st:?}");
    assert_eq!(&remote.0[..4 << 16], &local.0[..4 << 16]);
}
