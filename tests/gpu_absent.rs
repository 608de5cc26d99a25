//! Without a usable CUDA driver (library missing, entry points missing, cuInit failing, no
//! device) every GPU feature reports "unsupported" and CPU transfers work as before. The driver
//! is loaded once per process, so each case runs this test binary again in a child process.

mod common;
#[path = "fake_cuda/mod.rs"]
mod fake;

use c::{TW_ERR_UNSUPPORTED, TW_OK, tw_transfer_request};
use common::*;
use std::process::Command;
use std::time::Duration;
use tidewire::{ErrorKind, Opcode, Request};

fn run_case(name: &str, lib: &str, env: &[(&str, &str)], expect: &str) {
    let exe = std::env::current_exe().unwrap();
    let mut cmd = Command::new(exe);
    cmd.args(["--exact", "child", "--include-ignored", "--nocapture"])
        .env("TW_GPU_CASE", name)
        .env("TW_GPU_EXPECT", expect)
        .env("TW_CUDA_LIB", lib);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "case {name} failed:\n{text}");
    assert!(
        text.contains("1 passed"),
        "case {name} did not run:\n{text}"
    );
}

#[test]
fn cuda_unavailable_cases() {
    let fake = fake::lib_path();
    let fake = fake.to_str().unwrap();
    run_case(
        "missing",
        "/nonexistent/libcuda.so.1",
        &[],
        "CUDA driver not available",
    );
    run_case("no-symbols", "libc.so.6", &[], "missing CUDA entry point");
    run_case(
        "init-fails",
        fake,
        &[("FAKE_CUDA_INIT_FAIL", "1")],
        "cuInit failed",
    );
    run_case(
        "no-device",
        fake,
        &[("FAKE_CUDA_DEVICES", "0")],
        "no CUDA device",
    );
}

/// Runs only as a child of `cuda_unavailable_cases`.
#[test]
#[ignore = "run by cuda_unavailable_cases in a child process"]
fn child() {
    let Ok(case) = std::env::var("TW_GPU_CASE") else {
        return;
    };
    let expect = std::env::var("TW_GPU_EXPECT").unwrap();
    assert!(!tidewire::gpu::is_available(), "{case}");
    let e = tidewire::gpu::device_count().unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Unsupported);
    assert!(e.message().contains(&expect), "{case}: {e}");
    let mut n = -1;
    assert_eq!(c::tw_gpu_available(&mut n), TW_ERR_UNSUPPORTED);
    assert_eq!(n, -1, "output untouched on error");

    // CPU transfers over TCP are unaffected; "*" resolves to a NUMA node.
    let (a, b) = (engine(), engine());
    let src = Buf::pattern(1 << 20, 4);
    let dst = Buf::new(1 << 20, 0);
    a.register_memory(src.addr(), src.len(), "*", true).unwrap();
    b.register_memory(dst.addr(), dst.len(), "cuda:0", true)
        .unwrap();
    assert!(a.memory_location(src.addr()).unwrap().starts_with("cpu:"));
    let seg = a.open_segment(b.name()).unwrap();
    let req = Request {
        op: Opcode::Write,
        local: src.addr(),
        segment: seg,
        remote: dst.addr(),
        len: src.len(),
    };
    let batch = a.alloc_batch(1).unwrap();
    a.submit(batch, &[req]).unwrap();
    a.wait_batch(batch, Some(Duration::from_secs(20))).unwrap();
    assert!(dst.0 == src.0, "{case}");

    // Stream-ordered transfers: unsupported, from Rust and from C.
    assert_eq!(
        a.transfer_on_stream(&[req], 0, true).unwrap_err().kind(),
        ErrorKind::Unsupported
    );
    let mut eng = std::ptr::null_mut();
    let mut cfg = std::ptr::null_mut();
    assert_eq!(c::tw_config_new(&mut cfg), TW_OK);
    assert_eq!(c::tw_engine_new(cfg, &mut eng), TW_OK);
    c::tw_config_free(cfg);
    let creq = tw_transfer_request {
        opcode: 1,
        segment: 0,
        local_addr: src.addr() as *mut _,
        remote_addr: src.addr(),
        length: 8,
    };
    let mut op = 0u64;
    assert_eq!(
        c::tw_transfer_on_stream(eng, &creq, 1, std::ptr::null_mut(), &mut op),
        TW_ERR_UNSUPPORTED
    );
    assert_eq!(op, 0);
    c::tw_engine_free(eng);
}

/// The native C entry points this test calls, declared as `include/tidewire.h` declares them.
#[allow(non_camel_case_types)]
mod c {
    use std::ffi::c_void;

    pub const TW_OK: i32 = 0;
    pub const TW_ERR_UNSUPPORTED: i32 = -14;

    #[repr(C)]
    pub struct tw_transfer_request {
        pub opcode: i32,
        pub segment: i32,
        pub local_addr: *mut c_void,
        pub remote_addr: u64,
        pub length: u64,
    }

    // SAFETY: the signatures match the library's exports. Each function checks its pointers
    // (NULL is an error, never dereferenced), and this test passes only NULL, live handles or
    // pointers to live locals, so the calls are declared safe.
    unsafe extern "C" {
        pub safe fn tw_gpu_available(devices_out: *mut i32) -> i32;
        pub safe fn tw_config_new(cfg_out: *mut *mut c_void) -> i32;
        pub safe fn tw_config_free(cfg: *mut c_void);
        pub safe fn tw_engine_new(cfg: *const c_void, engine_out: *mut *mut c_void) -> i32;
        pub safe fn tw_engine_free(engine: *mut c_void);
        pub safe fn tw_transfer_on_stream(
            engine: *const c_void,
            requests: *const tw_transfer_request,
            count: usize,
            stream: *mut c_void,
            op_out: *mut u64,
        ) -> i32;
    }
}
