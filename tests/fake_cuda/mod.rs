//! Builds the fake CUDA driver (`fake_cuda.c`) with the system C compiler into the cargo target
//! directory, and calls into it (allocations, streams, failure injection) for tests.
#![allow(dead_code)]

use std::ffi::{CString, c_int, c_long, c_uint, c_void};
use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

/// Path of the built fake `libcuda.so.1` (compiled once per test binary).
pub fn lib_path() -> PathBuf {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| {
        let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fake_cuda/fake_cuda.c");
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("fake_cuda_{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let out = dir.join("libcuda.so.1");
        let cc = std::env::var("CC").unwrap_or_else(|_| "gcc".into());
        let st = Command::new(&cc)
            .args([
                "-std=c11", "-O1", "-Wall", "-Wextra", "-Werror", "-shared", "-fPIC",
            ])
            .args(["-pthread", "-o"])
            .arg(&out)
            .arg(&src)
            .status()
            .unwrap_or_else(|e| panic!("running {cc}: {e}"));
        assert!(st.success(), "compiling the fake CUDA driver failed");
        out
    })
    .clone()
}

/// Points `TW_CUDA_LIB` at `path`. Call before anything loads CUDA, from a `Once`.
pub fn set_cuda_lib(path: &str) {
    // SAFETY: called once, from a `std::sync::Once`, before any test thread reads the environment
    // through tidewire (the first CUDA load happens after this returns).
    unsafe { std::env::set_var("TW_CUDA_LIB", path) };
}

type R = c_int;

/// Direct handles into the fake driver (the same loaded copy tidewire uses).
pub struct Fake {
    _lib: libloading::Library,
    ctx_retain: unsafe extern "C" fn(*mut *mut c_void, c_int) -> R,
    ctx_set: unsafe extern "C" fn(*mut c_void) -> R,
    mem_alloc: unsafe extern "C" fn(*mut u64, usize) -> R,
    mem_free: unsafe extern "C" fn(u64) -> R,
    htod: unsafe extern "C" fn(u64, *const c_void, usize) -> R,
    dtoh: unsafe extern "C" fn(*mut c_void, u64, usize) -> R,
    stream_create: unsafe extern "C" fn(*mut *mut c_void, c_uint) -> R,
    stream_sync: unsafe extern "C" fn(*mut c_void) -> R,
    stream_destroy: unsafe extern "C" fn(*mut c_void) -> R,
    wait_value: unsafe extern "C" fn(*mut c_void, u64, u32, c_uint) -> R,
    memcpy_async: unsafe extern "C" fn(u64, u64, usize, *mut c_void) -> R,
    fail: unsafe extern "C" fn(*const i8, c_long, c_long),
    calls: unsafe extern "C" fn(*const i8) -> c_long,
    violations: unsafe extern "C" fn() -> c_long,
    reset: unsafe extern "C" fn(),
    set_wait_value: unsafe extern "C" fn(c_int),
}

macro_rules! get {
    ($lib:expr, $name:literal) => {
        // SAFETY: the fake exports this symbol with the prototype of the field it fills.
        *unsafe { $lib.get(concat!($name, "\0").as_bytes()) }.expect($name)
    };
}

/// A device allocation of the fake driver.
pub struct DevBuf {
    pub ptr: u64,
    pub len: usize,
}

impl Fake {
    pub fn open() -> Fake {
        // SAFETY: the fake driver's initialiser only reads the environment.
        let lib = unsafe { libloading::Library::new(lib_path()) }.unwrap();
        Fake {
            ctx_retain: get!(lib, "cuDevicePrimaryCtxRetain"),
            ctx_set: get!(lib, "cuCtxSetCurrent"),
            mem_alloc: get!(lib, "cuMemAlloc_v2"),
            mem_free: get!(lib, "cuMemFree_v2"),
            htod: get!(lib, "cuMemcpyHtoD_v2"),
            dtoh: get!(lib, "cuMemcpyDtoH_v2"),
            stream_create: get!(lib, "cuStreamCreate"),
            stream_sync: get!(lib, "cuStreamSynchronize"),
            stream_destroy: get!(lib, "cuStreamDestroy_v2"),
            wait_value: get!(lib, "cuStreamWaitValue32_v2"),
            memcpy_async: get!(lib, "cuMemcpyAsync"),
            fail: get!(lib, "fake_cuda_fail"),
            calls: get!(lib, "fake_cuda_calls"),
            violations: get!(lib, "fake_cuda_violations"),
            reset: get!(lib, "fake_cuda_reset"),
            set_wait_value: get!(lib, "fake_cuda_set_wait_value"),
            _lib: lib,
        }
    }

    /// Makes device `dev`'s context current on this thread.
    pub fn use_device(&self, dev: i32) {
        let mut ctx = std::ptr::null_mut();
        // SAFETY: valid out pointer; fake driver calls.
        unsafe {
            assert_eq!((self.ctx_retain)(&mut ctx, dev), 0);
            assert_eq!((self.ctx_set)(ctx), 0);
        }
    }

    /// Allocates device memory on `dev` filled with `bytes`.
    pub fn alloc(&self, dev: i32, bytes: &[u8]) -> DevBuf {
        self.use_device(dev);
        let mut p = 0u64;
        // SAFETY: valid out pointer and source slice.
        unsafe {
            assert_eq!((self.mem_alloc)(&mut p, bytes.len()), 0);
            assert_eq!((self.htod)(p, bytes.as_ptr().cast(), bytes.len()), 0);
        }
        DevBuf {
            ptr: p,
            len: bytes.len(),
        }
    }

    /// Reads a device allocation back.
    pub fn read(&self, b: &DevBuf) -> Vec<u8> {
        let mut v = vec![0u8; b.len];
        // SAFETY: `v` holds `b.len` bytes.
        let r = unsafe { (self.dtoh)(v.as_mut_ptr().cast(), b.ptr, b.len) };
        assert_eq!(r, 0);
        v
    }

    pub fn free(&self, b: DevBuf) {
        // SAFETY: allocated by `alloc`.
        assert_eq!(unsafe { (self.mem_free)(b.ptr) }, 0);
    }

    pub fn stream(&self, dev: i32) -> *mut c_void {
        self.use_device(dev);
        let mut s = std::ptr::null_mut();
        // SAFETY: valid out pointer.
        assert_eq!(unsafe { (self.stream_create)(&mut s, 0) }, 0);
        s
    }

    pub fn sync(&self, s: *mut c_void) {
        // SAFETY: a stream from `stream`.
        assert_eq!(unsafe { (self.stream_sync)(s) }, 0);
    }

    pub fn destroy(&self, s: *mut c_void) {
        // SAFETY: a stream from `stream`.
        assert_eq!(unsafe { (self.stream_destroy)(s) }, 0);
    }

    /// Enqueues "wait until `*flag >= v`" on `s` (`flag` is host memory).
    pub fn wait_geq(&self, s: *mut c_void, flag: *const u32, v: u32) {
        // SAFETY: `flag` outlives the stream's use of it (caller).
        assert_eq!(unsafe { (self.wait_value)(s, flag as u64, v, 0) }, 0);
    }

    /// Enqueues an async copy on `s`.
    pub fn copy_async(&self, s: *mut c_void, dst: u64, src: u64, n: usize) {
        // SAFETY: ranges valid for the stream's lifetime (caller).
        assert_eq!(unsafe { (self.memcpy_async)(dst, src, n, s) }, 0);
    }

    pub fn fail(&self, name: &str, skip: i64, count: i64) {
        let c = CString::new(name).unwrap();
        // SAFETY: NUL-terminated name.
        unsafe { (self.fail)(c.as_ptr(), skip as c_long, count as c_long) };
    }

    pub fn calls(&self, name: &str) -> i64 {
        let c = CString::new(name).unwrap();
        // SAFETY: NUL-terminated name.
        unsafe { (self.calls)(c.as_ptr()) }
    }

    pub fn violations(&self) -> i64 {
        // SAFETY: no arguments.
        unsafe { (self.violations)() }
    }

    pub fn reset(&self) {
        // SAFETY: no arguments.
        unsafe { (self.reset)() };
        // SAFETY: plain setter.
        unsafe { (self.set_wait_value)(1) };
    }

    pub fn set_wait_value(&self, supported: bool) {
        // SAFETY: plain setter.
        unsafe { (self.set_wait_value)(supported as c_int) };
    }
}
