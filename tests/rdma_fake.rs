//! The whole RDMA path — discovery, registration, the queue pair state machine, the handshake,
//! posting, polling, completion, retries — against a fake verbs provider built from
//! `tests/fake_verbs/fake_ibverbs.c` (loaded through `TW_IBVERBS_LIB` exactly as a real
//! `libibverbs.so.1` would be). Bytes really move: memcpy in one process, process_vm_* across
//! two. Scenarios that need their own environment (injected failures, an absent library) run in
//! a child process of this test binary.

mod common;
use common::Buf;
use common::fake_verbs::build_fake_verbs;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};
use tidewire::engine::TaskState;
use tidewire::{Config, Engine, ErrorKind, Opcode, Request};

const SCENARIO_VAR: &str = "TW_RDMA_SCENARIO";

/// Builds the fake provider once per test process (gcc, into the target directory).
fn fake_lib() -> PathBuf {
    static LIB: OnceLock<PathBuf> = OnceLock::new();
    LIB.get_or_init(|| build_fake_verbs("fake_verbs")).clone()
}

/// Points the engine at the fake provider. Every test in this process sets the same value.
fn use_fake() {
    let lib = fake_lib();
    if std::env::var_os("TW_IBVERBS_LIB").as_deref() != Some(lib.as_os_str()) {
        // SAFETY: every test of this binary sets the same value before creating engines; the
        // variable is read by engine creation only.
        unsafe { std::env::set_var("TW_IBVERBS_LIB", &lib) };
    }
}

fn rdma_engine(opts: &[(&str, &str)]) -> Engine {
    let mut cfg = Config::default();
    cfg.set("rdma", "on").unwrap();
    for (k, v) in opts {
        cfg.set(k, v).unwrap();
    }
    Engine::new(cfg).expect("engine with RDMA starts")
}

/// Submits one request and waits; returns the task state and error.
fn transfer(
    e: &Engine,
    seg: i32,
    op: Opcode,
    local: u64,
    remote: u64,
    len: u64,
) -> (TaskState, Option<ErrorKind>) {
    let b = e.alloc_batch(1).unwrap();
    e.submit(
        b,
        &[Request {
            op,
            segment: seg,
            local,
            remote,
            len,
        }],
    )
    .unwrap();
    let _ = e.wait_batch(b, Some(Duration::from_secs(20)));
    let st = e.task_status(b, 0).unwrap();
    assert_ne!(
        st.state,
        TaskState::Waiting,
        "transfer did not finish in 20 s"
    );
    e.free_batch(b).unwrap();
    (st.state, st.error)
}

/// Fake provider counters: (completed ok, completed in error, refused for a full queue).
fn fake_stats() -> [u64; 3] {
    // SAFETY: the fake is loaded by now (an engine was created); the symbol has this signature.
    unsafe {
        let lib = libloading::os::unix::Library::open(
            Some(fake_lib()),
            libloading::os::unix::RTLD_NOW | libc::RTLD_NOLOAD,
        )
        .expect("fake provider is loaded");
        let f: libloading::os::unix::Symbol<unsafe extern "C" fn(*mut u64)> =
            lib.get(b"fake_verbs_stats").unwrap();
        let mut out = [0u64; 3];
        f(out.as_mut_ptr());
        out
    }
}

/// Writes a pattern to the target, reads it back into a second buffer, and compares.
fn round_trip(e: &Engine, seg: i32, remote: u64, len: usize, seed: u8) {
    let src = Buf::pattern(len, seed);
    let back = Buf::new(len, 0);
    e.register_memory(src.addr(), src.len(), "cpu:0", true)
        .unwrap();
    e.register_memory(back.addr(), back.len(), "cpu:0", true)
        .unwrap();
    let w = transfer(e, seg, Opcode::Write, src.addr(), remote, len as u64);
    assert_eq!(w, (TaskState::Completed, None), "write of {len}");
    let r = transfer(e, seg, Opcode::Read, back.addr(), remote, len as u64);
    assert_eq!(r, (TaskState::Completed, None), "read of {len}");
    assert!(back.0 == src.0, "bytes read back differ ({len} bytes)");
    e.unregister_memory(src.addr()).unwrap();
    e.unregister_memory(back.addr()).unwrap();
}

#[test]
fn in_process_read_write_through_fake_verbs() {
    use_fake();
    let target = rdma_engine(&[]);
    let init = rdma_engine(&[]);
    assert_eq!(target.rdma_status().unwrap(), vec!["fake0", "fake1"]);
    let tbuf = Buf::new(3 << 20, 0);
    target
        .register_memory(tbuf.addr(), tbuf.len(), "cpu:0", true)
        .unwrap();
    let d = target.local_descriptor();
    assert_eq!(d.protocol, "rdma");
    assert_eq!(d.devices.len(), 2);
    assert_eq!(d.devices[0].gid.split(':').count(), 16);
    assert_eq!(d.buffers[0].name, "cpu:0");
    assert_eq!(d.buffers[0].rkey.len(), 2);
    assert_ne!(
        d.buffers[0].rkey[0], d.buffers[0].rkey[1],
        "one MR per device"
    );
    assert!(d.priority_matrix.is_some());
    // The descriptor survives Mooncake's decode rules.
    tidewire::metadata::SegmentDesc::decode(d.encode().as_bytes()).unwrap();

    let seg = init.open_segment(target.name()).unwrap();
    assert_eq!(init.segment_path(seg).unwrap(), "rdma");
    let before = fake_stats();
    for (len, off) in [
        (1usize, 0u64),
        (4096, 17),
        (65_536, 0),
        ((1 << 20) + 333, 4096),
        (3 << 20, 0),
    ] {
        round_trip(&init, seg, tbuf.addr() + off, len, len as u8);
    }
    let after = fake_stats();
    // 64 KiB slices: the 3 MiB round trip alone is 96 work requests.
    assert!(
        after[0] - before[0] >= 96 + 32,
        "work requests: {before:?} -> {after:?}"
    );

    // A range the target never registered is refused by the responder (remote access error),
    // retried on the other paths, then failed.
    let small = Buf::pattern(4096, 1);
    init.register_memory(small.addr(), small.len(), "cpu:0", true)
        .unwrap();
    let outside = transfer(
        &init,
        seg,
        Opcode::Write,
        small.addr(),
        tbuf.addr() + tbuf.len() - 100,
        4096,
    );
    assert_eq!(outside.0, TaskState::Failed);
    // A range the target unregistered after the descriptor was fetched: the stale rkey fails.
    let t2 = Buf::new(8192, 0);
    target
        .register_memory(t2.addr(), t2.len(), "cpu:0", true)
        .unwrap();
    init.refresh_segment(seg).unwrap();
    assert_eq!(
        transfer(&init, seg, Opcode::Write, small.addr(), t2.addr(), 4096),
        (TaskState::Completed, None)
    );
    assert_eq!(&t2.0[..4096], &small.0[..]);
    target.unregister_memory(t2.addr()).unwrap();
    let stale = transfer(&init, seg, Opcode::Write, small.addr(), t2.addr(), 4096);
    assert_eq!(stale, (TaskState::Failed, Some(ErrorKind::Rejected)));
    // And the path still works afterwards (endpoints were rebuilt).
    round_trip(&init, seg, tbuf.addr(), 100_000, 9);
}

#[test]
fn rdma_and_tcp_peers_fall_back_to_tcp() {
    use_fake();
    let target = rdma_engine(&[]);
    let mut cfg = Config::default();
    cfg.set("rdma", "off").unwrap();
    cfg.set("same_host", "0").unwrap();
    let tcp_only = Engine::new(cfg).unwrap();
    assert!(tcp_only.rdma_status().unwrap_err().contains("off"));
    let tbuf = Buf::new(1 << 20, 0);
    target
        .register_memory(tbuf.addr(), tbuf.len(), "cpu:0", true)
        .unwrap();
    // TCP-only initiator to an RDMA target: TCP serves (the target still publishes its port).
    let seg = tcp_only.open_segment(target.name()).unwrap();
    assert_eq!(tcp_only.segment_path(seg).unwrap(), "tcp");
    round_trip(&tcp_only, seg, tbuf.addr(), 300_000, 3);
    // RDMA initiator to a TCP-only target.
    let rbuf = Buf::new(1 << 20, 0);
    tcp_only
        .register_memory(rbuf.addr(), rbuf.len(), "cpu:0", true)
        .unwrap();
    let seg2 = target.open_segment(tcp_only.name()).unwrap();
    assert_ne!(target.segment_path(seg2).unwrap(), "rdma");
    round_trip(&target, seg2, rbuf.addr(), 300_000, 4);
}

// ---- child-process scenarios -------------------------------------------------------------

/// Runs this binary's `scenario_child` with `scenario` and extra environment; returns stdout.
fn run_child(scenario: &str, env: &[(&str, &str)], extra: &[&str]) -> String {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args([
        "scenario_child",
        "--exact",
        "--ignored",
        "--nocapture",
        "--test-threads=1",
    ])
    .env(SCENARIO_VAR, scenario)
    .env("TW_IBVERBS_LIB", fake_lib())
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    for a in extra {
        cmd.env("TW_RDMA_ARG", a);
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success() && stdout.contains("SCENARIO OK"),
        "scenario {scenario} failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

#[test]
#[ignore = "child process role, started by the other tests"]
fn scenario_child() {
    let Ok(s) = std::env::var(SCENARIO_VAR) else {
        return;
    };
    match s.as_str() {
        "retry_other_path" => scenario_retry_other_path(),
        "all_fail" => scenario_all_fail(),
        "queue_full" => scenario_queue_full(),
        "discovery" => scenario_discovery(),
        "absent" => scenario_absent(),
        "target" => scenario_target(),
        other => panic!("unknown scenario {other}"),
    }
    println!("SCENARIO OK");
}

fn pair() -> (Engine, Engine, Buf, i32) {
    let target = rdma_engine(&[]);
    let init = rdma_engine(&[]);
    let tbuf = Buf::new(1 << 20, 0);
    target
        .register_memory(tbuf.addr(), tbuf.len(), "cpu:0", true)
        .unwrap();
    let seg = init.open_segment(target.name()).unwrap();
    assert_eq!(init.segment_path(seg).unwrap(), "rdma");
    (target, init, tbuf, seg)
}

/// Every work request on local device fake0 completes in error: slices move to fake1.
fn scenario_retry_other_path() {
    let (_t, init, tbuf, seg) = pair();
    round_trip(&init, seg, tbuf.addr(), 1 << 20, 5);
    let s = fake_stats();
    assert!(s[1] > 0, "errors were injected: {s:?}");
}

/// Every work request fails: the task fails after the retries, with the verbs status logged.
fn scenario_all_fail() {
    let (_t, init, tbuf, seg) = pair();
    let src = Buf::pattern(200_000, 1);
    init.register_memory(src.addr(), src.len(), "cpu:0", true)
        .unwrap();
    let started = Instant::now();
    let r = transfer(
        &init,
        seg,
        Opcode::Write,
        src.addr(),
        tbuf.addr(),
        src.len(),
    );
    assert_eq!(r, (TaskState::Failed, Some(ErrorKind::Socket)));
    assert!(started.elapsed() < Duration::from_secs(10));
}

/// A send queue of 2 that the provider does not report: posts beyond it fail with ENOMEM and
/// wait for completions; everything still arrives.
fn scenario_queue_full() {
    let target = rdma_engine(&[]);
    let init = rdma_engine(&[("rdma_max_wr", "16"), ("rdma_qp_per_ep", "1")]);
    let tbuf = Buf::new(4 << 20, 0);
    target
        .register_memory(tbuf.addr(), tbuf.len(), "cpu:0", true)
        .unwrap();
    let seg = init.open_segment(target.name()).unwrap();
    round_trip(&init, seg, tbuf.addr(), 1 << 20, 6);
    let s = fake_stats();
    assert!(s[2] > 0, "no post hit the full queue: {s:?}");
    assert_eq!(s[1], 0, "{s:?}");
}

/// A down port is skipped; the device filter is honoured.
fn scenario_discovery() {
    let e = rdma_engine(&[]);
    assert_eq!(
        e.rdma_status().unwrap(),
        vec!["fake0"],
        "fake1's port is down"
    );
    drop(e);
    let mut cfg = Config::default();
    cfg.set("rdma", "on").unwrap();
    cfg.set("rdma_devices", "fake1").unwrap();
    let err = Engine::new(cfg)
        .err()
        .expect("only a down device passes the filter");
    assert_eq!(err.kind(), ErrorKind::Unsupported);
    let mut cfg = Config::default();
    cfg.set("rdma_devices", "fake1").unwrap();
    let e = Engine::new(cfg).unwrap();
    assert!(
        e.rdma_status().unwrap_err().contains("not active"),
        "{:?}",
        e.rdma_status()
    );
}

/// No verbs library: the engine loads, says why, and TCP moves the bytes.
fn scenario_absent() {
    let mut cfg = Config::default();
    cfg.set("rdma", "on").unwrap();
    let err = Engine::new(cfg)
        .err()
        .expect("rdma=on without a library fails");
    assert_eq!(err.kind(), ErrorKind::Unsupported);
    let mut cfg = Config::default();
    cfg.set("same_host", "0").unwrap();
    let target = Engine::new(cfg.clone()).unwrap();
    let init = Engine::new(cfg).unwrap();
    let why = init.rdma_status().unwrap_err();
    assert!(why.contains("cannot load"), "{why}");
    let tbuf = Buf::new(1 << 20, 0);
    target
        .register_memory(tbuf.addr(), tbuf.len(), "cpu:0", true)
        .unwrap();
    assert_eq!(target.local_descriptor().protocol, "tcp");
    let seg = init.open_segment(target.name()).unwrap();
    assert_eq!(init.segment_path(seg).unwrap(), "tcp");
    round_trip(&init, seg, tbuf.addr(), 1 << 20, 8);
}

/// A target in its own process: prints its name and buffer, serves until stdin closes.
fn scenario_target() {
    let e = rdma_engine(&[]);
    let buf = Buf::pattern(4 << 20, 42);
    e.register_memory(buf.addr(), buf.len(), "cpu:0", true)
        .unwrap();
    println!("READY {} {} {}", e.name(), buf.addr(), buf.len());
    let mut line = String::new();
    let _ = std::io::stdin().read_line(&mut line);
    drop(e);
}

#[test]
fn injected_completion_error_retries_on_another_path() {
    run_child("retry_other_path", &[("FAKE_VERBS_FAIL_DEV", "fake0")], &[]);
}

#[test]
fn failures_past_the_retries_fail_the_task() {
    run_child("all_fail", &[("FAKE_VERBS_FAIL_EVERY", "1")], &[]);
}

#[test]
fn full_send_queue_waits_for_completions() {
    run_child(
        "queue_full",
        &[
            ("FAKE_VERBS_MAX_WR", "2"),
            ("FAKE_VERBS_HIDE_CAP", "1"),
            ("FAKE_VERBS_SLOW_POLL_US", "200"),
        ],
        &[],
    );
}

#[test]
fn discovery_skips_down_ports_and_honours_the_filter() {
    run_child("discovery", &[("FAKE_VERBS_DOWN", "fake1")], &[]);
}

#[test]
fn absent_library_means_tcp() {
    run_child(
        "absent",
        &[("TW_IBVERBS_LIB", "/nonexistent/libibverbs.so.1")],
        &[],
    );
}

#[test]
fn two_processes_then_the_peer_disappears() {
    use_fake();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "scenario_child",
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(SCENARIO_VAR, "target")
        .env("TW_IBVERBS_LIB", fake_lib())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !line.contains("READY ") {
        line.clear();
        use std::io::BufRead;
        assert!(out.read_line(&mut line).unwrap() > 0, "child exited early");
        assert!(Instant::now() < deadline);
    }
    let f: Vec<&str> = line[line.find("READY ").unwrap()..]
        .split_whitespace()
        .collect();
    let (name, addr, len) = (
        f[1].to_string(),
        f[2].parse::<u64>().unwrap(),
        f[3].parse::<u64>().unwrap(),
    );
    let init = rdma_engine(&[]);
    let seg = init.open_segment(&name).unwrap();
    assert_eq!(init.segment_path(seg).unwrap(), "rdma");
    // Read the child's pattern across the process boundary, then write and read back.
    let got = Buf::new(len as usize, 0);
    init.register_memory(got.addr(), got.len(), "cpu:0", true)
        .unwrap();
    assert_eq!(
        transfer(&init, seg, Opcode::Read, got.addr(), addr, len),
        (TaskState::Completed, None)
    );
    assert!(
        got.0 == Buf::pattern(len as usize, 42).0,
        "child pattern differs"
    );
    round_trip(&init, seg, addr + 12_345, (1 << 20) + 7, 77);
    // The peer disappears: work fails promptly instead of hanging.
    child.kill().unwrap();
    child.wait().unwrap();
    let started = Instant::now();
    let r = transfer(&init, seg, Opcode::Read, got.addr(), addr, 256 << 10);
    assert_eq!(r.0, TaskState::Failed);
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "{:?}",
        started.elapsed()
    );
}

/// The Mooncake C API: `installTransport("rdma")` installs RDMA on the fake NICs, and a write
/// then a read through `submitTransfer` move and verify bytes.
#[test]
fn mooncake_api_installs_rdma() {
    use mooncake_c::*;
    use std::ffi::{CStr, c_char};
    use_fake();
    let p2p = c"P2PHANDSHAKE".as_ptr();
    let host = c"127.0.0.1".as_ptr();
    let t = createTransferEngine(p2p, host, host, 0, 0);
    let i = createTransferEngine(p2p, host, host, 0, 0);
    assert!(!t.is_null() && !i.is_null());
    for e in [t, i] {
        assert!(!installTransport(e, c"rdma".as_ptr(), std::ptr::null_mut()).is_null());
    }
    // showLinks and getNicLoadStats report the RDMA NICs now in use.
    let mut links = [0 as c_char; 512];
    assert_eq!(showLinks(t, links.as_mut_ptr(), links.len(), 1), 0);
    // SAFETY: NUL-terminated by showLinks.
    let links = unsafe { CStr::from_ptr(links.as_ptr()) }.to_str().unwrap();
    let v: serde_json::Value = serde_json::from_str(links).unwrap();
    assert_eq!(v["transport"], "rdma", "{links}");
    let nics: Vec<String> = serde_json::from_value(v["links"].clone()).unwrap();
    assert!(!nics.is_empty(), "{links}");
    let blank = nic_load_stat {
        device_name: [0; 64],
        inflight_bytes: 7,
        ewma_bandwidth_bps: 7.0,
    };
    let mut stats = [blank; 8];
    let mut count = stats.len();
    assert_eq!(getNicLoadStats(t, stats.as_mut_ptr(), &mut count), 0);
    assert_eq!(count, nics.len());
    // SAFETY: NUL-terminated by getNicLoadStats.
    let first = unsafe { CStr::from_ptr(stats[0].device_name.as_ptr()) };
    assert_eq!(first.to_str().unwrap(), nics[0]);
    assert_eq!(stats[0].inflight_bytes, 0);
    let mut zero = 0usize;
    assert_eq!(getNicLoadStats(t, stats.as_mut_ptr(), &mut zero), 0);
    assert_eq!(
        zero,
        nics.len(),
        "capacity 0 still reports how many NICs there are"
    );
    let tbuf = Buf::new(1 << 20, 0);
    let src = Buf::pattern(700_000, 21);
    let back = Buf::new(700_000, 0);
    let loc = c"cpu:0".as_ptr();
    assert_eq!(
        registerLocalMemory(t, tbuf.addr() as *mut _, tbuf.0.len(), loc, 1),
        0
    );
    assert_eq!(
        registerLocalMemory(i, src.addr() as *mut _, src.0.len(), loc, 1),
        0
    );
    assert_eq!(
        registerLocalMemory(i, back.addr() as *mut _, back.0.len(), loc, 1),
        0
    );
    let mut name = [0 as c_char; 128];
    assert_eq!(getLocalIpAndPort(t, name.as_mut_ptr(), name.len()), 0);
    // SAFETY: NUL-terminated by getLocalIpAndPort.
    let name_str = unsafe { CStr::from_ptr(name.as_ptr()) }.to_owned();
    let seg = openSegment(i, name_str.as_ptr());
    assert!(seg > 0, "openSegment {name_str:?}");
    let before = fake_stats();
    for (op, local) in [(1, src.addr()), (0, back.addr())] {
        let b = allocateBatchID(i, 1);
        let mut req = transfer_request {
            opcode: op,
            source: local as *mut _,
            target_id: seg,
            target_offset: tbuf.addr() + 100,
            length: src.len(),
        };
        assert_eq!(submitTransfer(i, b, &mut req, 1), 0);
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut st = transfer_status {
            status: 0,
            transferred_bytes: 0,
        };
        loop {
            assert_eq!(getTransferStatus(i, b, 0, &mut st), 0);
            if st.status != 0 && st.status != 1 && st.status != 2 && st.status != 3 {
                break;
            }
            assert!(Instant::now() < deadline, "transfer stuck");
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(
            (st.status, st.transferred_bytes),
            (4, src.len()),
            "opcode {op}"
        );
        assert_eq!(freeBatchID(i, b), 0);
    }
    assert!(back.0 == src.0);
    let after = fake_stats();
    assert!(
        after[0] - before[0] >= 22,
        "not over the fake NICs: {before:?} -> {after:?}"
    );
    destroyTransferEngine(i);
    destroyTransferEngine(t);
}

/// The Mooncake C entry points `mooncake_api_installs_rdma` calls, declared as
/// `include/transfer_engine_c.h` declares them.
#[allow(non_camel_case_types, non_snake_case)]
mod mooncake_c {
    use std::ffi::{c_char, c_int, c_void};

    #[repr(C)]
    pub struct transfer_request {
        pub opcode: c_int,
        pub source: *mut c_void,
        pub target_id: i32,
        pub target_offset: u64,
        pub length: u64,
    }

    #[repr(C)]
    pub struct transfer_status {
        pub status: c_int,
        pub transferred_bytes: u64,
    }

    #[repr(C)]
    #[derive(Clone, Copy)]
    pub struct nic_load_stat {
        pub device_name: [c_char; 64],
        pub inflight_bytes: u64,
        pub ewma_bandwidth_bps: f64,
    }

    // SAFETY: the signatures match the library's exports. Each function checks its pointers
    // (NULL is an error, never dereferenced), and the test passes only NULL, live handles, or
    // pointers to live locals and buffers of the stated lengths, so the calls are declared safe.
    unsafe extern "C" {
        pub safe fn createTransferEngine(
            metadata_conn_string: *const c_char,
            local_server_name: *const c_char,
            ip_or_host_name: *const c_char,
            rpc_port: u64,
            auto_discover: c_int,
        ) -> *mut c_void;
        pub safe fn destroyTransferEngine(engine: *mut c_void);
        pub safe fn installTransport(
            engine: *mut c_void,
            proto: *const c_char,
            args: *mut *mut c_void,
        ) -> *mut c_void;
        pub safe fn showLinks(
            engine: *mut c_void,
            buf_out: *mut c_char,
            buf_len: usize,
            json: c_int,
        ) -> c_int;
        pub safe fn getNicLoadStats(
            engine: *mut c_void,
            stats: *mut nic_load_stat,
            count: *mut usize,
        ) -> c_int;
        pub safe fn registerLocalMemory(
            engine: *mut c_void,
            addr: *mut c_void,
            length: usize,
            location: *const c_char,
            remote_accessible: c_int,
        ) -> c_int;
        pub safe fn getLocalIpAndPort(
            engine: *mut c_void,
            buf_out: *mut c_char,
            buf_len: usize,
        ) -> c_int;
        pub safe fn openSegment(engine: *mut c_void, segment_name: *const c_char) -> i32;
        pub safe fn allocateBatchID(engine: *mut c_void, batch_size: usize) -> u64;
        pub safe fn submitTransfer(
            engine: *mut c_void,
            batch_id: u64,
            entries: *mut transfer_request,
            count: usize,
        ) -> c_int;
        pub safe fn getTransferStatus(
            engine: *mut c_void,
            batch_id: u64,
            task_id: usize,
            status: *mut transfer_status,
        ) -> c_int;
        pub safe fn freeBatchID(engine: *mut c_void, batch_id: u64) -> c_int;
    }
}
