//! The CUDA driver API (`libcuda.so.1`), loaded at run time: one table of function pointers,
//! resolved once per process. The library path can be overridden with `TW_CUDA_LIB` (tests point
//! it at a fake driver; a path that does not exist disables CUDA). Versioned entry points are
//! loaded by their real names (`cuMemAlloc_v2`, ...), as the `cuda.h` macros would pick them.
//!
//! The runtime library (libcudart) is not used: everything tidewire needs (pointer attributes,
//! primary contexts, streams, events, async copies, host functions, stream wait-values) is in the
//! driver API, which is also what any libcudart forwards to.

use crate::error::{Error, ErrorKind, Result};
use std::ffi::{CStr, c_char, c_int, c_uint, c_void};
use std::sync::OnceLock;

/// `CUresult`.
pub type CuResult = c_int;
/// `CUdeviceptr`.
pub type CuDevicePtr = u64;
/// `CUcontext`.
pub type CuContext = *mut c_void;
/// `CUstream`.
pub type CuStream = *mut c_void;
/// `CUevent`.
pub type CuEvent = *mut c_void;
/// `CUhostFn`.
pub type CuHostFn = unsafe extern "C" fn(user_data: *mut c_void);

/// `CUDA_SUCCESS`.
pub const CUDA_SUCCESS: CuResult = 0;
/// `CUDA_ERROR_NOT_SUPPORTED`.
pub const CUDA_ERROR_NOT_SUPPORTED: CuResult = 801;
/// `CU_POINTER_ATTRIBUTE_MEMORY_TYPE`.
pub const CU_POINTER_ATTRIBUTE_MEMORY_TYPE: c_int = 2;
/// `CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL`.
pub const CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL: c_int = 9;
/// `CU_MEMORYTYPE_DEVICE`.
pub const CU_MEMORYTYPE_DEVICE: c_uint = 2;
/// `CU_MEMORYTYPE_UNIFIED`.
pub const CU_MEMORYTYPE_UNIFIED: c_uint = 4;
/// `CU_STREAM_NON_BLOCKING`: no implicit synchronisation with the legacy default stream, so our
/// copies never wait behind an application stream that is itself waiting for us.
pub const CU_STREAM_NON_BLOCKING: c_uint = 1;
/// `CU_EVENT_DISABLE_TIMING`.
pub const CU_EVENT_DISABLE_TIMING: c_uint = 2;
/// `CU_MEMHOSTALLOC_PORTABLE`.
pub const CU_MEMHOSTALLOC_PORTABLE: c_uint = 1;
/// `CU_MEMHOSTALLOC_DEVICEMAP`.
pub const CU_MEMHOSTALLOC_DEVICEMAP: c_uint = 2;
/// `CU_STREAM_WAIT_VALUE_GEQ`.
pub const CU_STREAM_WAIT_VALUE_GEQ: c_uint = 0;

/// The loaded driver. Lives for the whole process (never unloaded).
pub struct Driver {
    _lib: libloading::Library,
    /// Where it was loaded from.
    pub path: String,
    /// Number of devices (> 0).
    pub devices: i32,
    pub(crate) cu_get_error_string: unsafe extern "C" fn(CuResult, *mut *const c_char) -> CuResult,
    pub(crate) cu_device_get: unsafe extern "C" fn(*mut c_int, c_int) -> CuResult,
    pub(crate) cu_device_primary_ctx_retain:
        unsafe extern "C" fn(*mut CuContext, c_int) -> CuResult,
    pub(crate) cu_ctx_push_current: unsafe extern "C" fn(CuContext) -> CuResult,
    pub(crate) cu_ctx_pop_current: unsafe extern "C" fn(*mut CuContext) -> CuResult,
    pub(crate) cu_stream_get_ctx: unsafe extern "C" fn(CuStream, *mut CuContext) -> CuResult,
    pub(crate) cu_pointer_get_attribute:
        unsafe extern "C" fn(*mut c_void, c_int, CuDevicePtr) -> CuResult,
    pub(crate) cu_memcpy_async:
        unsafe extern "C" fn(CuDevicePtr, CuDevicePtr, usize, CuStream) -> CuResult,
    pub(crate) cu_memcpy_htod_async:
        unsafe extern "C" fn(CuDevicePtr, *const c_void, usize, CuStream) -> CuResult,
    pub(crate) cu_memcpy_dtoh_async:
        unsafe extern "C" fn(*mut c_void, CuDevicePtr, usize, CuStream) -> CuResult,
    pub(crate) cu_mem_host_alloc: unsafe extern "C" fn(*mut *mut c_void, usize, c_uint) -> CuResult,
    pub(crate) cu_mem_free_host: unsafe extern "C" fn(*mut c_void) -> CuResult,
    pub(crate) cu_mem_host_get_device_pointer:
        unsafe extern "C" fn(*mut CuDevicePtr, *mut c_void, c_uint) -> CuResult,
    pub(crate) cu_stream_create: unsafe extern "C" fn(*mut CuStream, c_uint) -> CuResult,
    pub(crate) cu_stream_destroy: unsafe extern "C" fn(CuStream) -> CuResult,
    pub(crate) cu_stream_synchronize: unsafe extern "C" fn(CuStream) -> CuResult,
    pub(crate) cu_launch_host_func:
        unsafe extern "C" fn(CuStream, CuHostFn, *mut c_void) -> CuResult,
    pub(crate) cu_event_create: unsafe extern "C" fn(*mut CuEvent, c_uint) -> CuResult,
    pub(crate) cu_event_record: unsafe extern "C" fn(CuEvent, CuStream) -> CuResult,
    pub(crate) cu_event_synchronize: unsafe extern "C" fn(CuEvent) -> CuResult,
    pub(crate) cu_event_destroy: unsafe extern "C" fn(CuEvent) -> CuResult,
    /// `cuStreamWaitValue32_v2` (CUDA ≥ 11.7), else the original; absent on very old drivers.
    pub(crate) cu_stream_wait_value32:
        Option<unsafe extern "C" fn(CuStream, CuDevicePtr, u32, c_uint) -> CuResult>,
}

// SAFETY: the table holds plain function pointers into a library that is never unloaded; the
// driver API is thread-safe.
unsafe impl Send for Driver {}
// SAFETY: as above; nothing in the table is mutated after loading.
unsafe impl Sync for Driver {}

static DRIVER: OnceLock<std::result::Result<Driver, String>> = OnceLock::new();

/// Library path: `TW_CUDA_LIB`, else `libcuda.so.1`.
fn lib_path() -> String {
    match std::env::var("TW_CUDA_LIB") {
        Ok(p) if !p.is_empty() => p,
        _ => "libcuda.so.1".to_string(),
    }
}

/// The driver, loaded and initialised on first use; `Unsupported` when the library, one of its
/// entry points or a device is missing. Never panics.
pub fn driver() -> Result<&'static Driver> {
    DRIVER
        .get_or_init(load)
        .as_ref()
        .map_err(|m| Error::new(ErrorKind::Unsupported, m.clone()))
}

/// The driver if it is already loaded (no load attempt): for hot paths that only need to know.
pub fn loaded() -> Option<&'static Driver> {
    DRIVER.get().and_then(|r| r.as_ref().ok())
}

macro_rules! sym {
    ($lib:expr, $path:expr, $name:literal) => {{
        // SAFETY: the symbol is the CUDA driver entry point of that name; the type written at the
        // use site is its prototype from cuda.h.
        match unsafe { $lib.get(concat!($name, "\0").as_bytes()) } {
            Ok(s) => *s,
            Err(e) => {
                return Err(format!(
                    "{}: missing CUDA entry point {}: {e}",
                    $path, $name
                ));
            }
        }
    }};
}

fn load() -> std::result::Result<Driver, String> {
    let path = lib_path();
    // SAFETY: loading the CUDA driver runs its initialisers, which have no preconditions.
    let lib = unsafe { libloading::Library::new(&path) }
        .map_err(|e| format!("CUDA driver not available ({path}): {e}"))?;
    let cu_init: unsafe extern "C" fn(c_uint) -> CuResult = sym!(lib, path, "cuInit");
    let cu_device_get_count: unsafe extern "C" fn(*mut c_int) -> CuResult =
        sym!(lib, path, "cuDeviceGetCount");
    let wait_v2: Option<unsafe extern "C" fn(CuStream, CuDevicePtr, u32, c_uint) -> CuResult> =
        // SAFETY: as in `sym!`; optional entry point.
        unsafe { lib.get(b"cuStreamWaitValue32_v2\0") }
            .or_else(|_| {
                // SAFETY: as above.
                unsafe { lib.get(b"cuStreamWaitValue32\0") }
            })
            .ok()
            .map(|s| *s);
    let mut d = Driver {
        path: path.clone(),
        devices: 0,
        cu_get_error_string: sym!(lib, path, "cuGetErrorString"),
        cu_device_get: sym!(lib, path, "cuDeviceGet"),
        cu_device_primary_ctx_retain: sym!(lib, path, "cuDevicePrimaryCtxRetain"),
        cu_ctx_push_current: sym!(lib, path, "cuCtxPushCurrent_v2"),
        cu_ctx_pop_current: sym!(lib, path, "cuCtxPopCurrent_v2"),
        cu_stream_get_ctx: sym!(lib, path, "cuStreamGetCtx"),
        cu_pointer_get_attribute: sym!(lib, path, "cuPointerGetAttribute"),
        cu_memcpy_async: sym!(lib, path, "cuMemcpyAsync"),
        cu_memcpy_htod_async: sym!(lib, path, "cuMemcpyHtoDAsync_v2"),
        cu_memcpy_dtoh_async: sym!(lib, path, "cuMemcpyDtoHAsync_v2"),
        cu_mem_host_alloc: sym!(lib, path, "cuMemHostAlloc"),
        cu_mem_free_host: sym!(lib, path, "cuMemFreeHost"),
        cu_mem_host_get_device_pointer: sym!(lib, path, "cuMemHostGetDevicePointer_v2"),
        cu_stream_create: sym!(lib, path, "cuStreamCreate"),
        cu_stream_destroy: sym!(lib, path, "cuStreamDestroy_v2"),
        cu_stream_synchronize: sym!(lib, path, "cuStreamSynchronize"),
        cu_launch_host_func: sym!(lib, path, "cuLaunchHostFunc"),
        cu_event_create: sym!(lib, path, "cuEventCreate"),
        cu_event_record: sym!(lib, path, "cuEventRecord"),
        cu_event_synchronize: sym!(lib, path, "cuEventSynchronize"),
        cu_event_destroy: sym!(lib, path, "cuEventDestroy_v2"),
        cu_stream_wait_value32: wait_v2,
        _lib: lib,
    };
    // SAFETY: prototype from cuda.h; flags must be 0.
    let r = unsafe { cu_init(0) };
    if r != CUDA_SUCCESS {
        return Err(format!("cuInit failed: {}", d.describe(r)));
    }
    let mut n: c_int = 0;
    // SAFETY: `n` is a valid out pointer.
    let r = unsafe { cu_device_get_count(&mut n) };
    if r != CUDA_SUCCESS {
        return Err(format!("cuDeviceGetCount failed: {}", d.describe(r)));
    }
    if n <= 0 {
        return Err(format!("{path}: no CUDA device"));
    }
    d.devices = n;
    tw_log!(
        crate::log::Level::Info,
        "CUDA driver loaded from {path}: {n} device(s)"
    );
    Ok(d)
}

impl Driver {
    /// `"<code> (<cuGetErrorString>)"`.
    pub fn describe(&self, r: CuResult) -> String {
        let mut s: *const c_char = std::ptr::null();
        // SAFETY: `s` is a valid out pointer; the driver returns a static string or fails.
        let ok = unsafe { (self.cu_get_error_string)(r, &mut s) } == CUDA_SUCCESS;
        if ok && !s.is_null() {
            // SAFETY: non-NULL static NUL-terminated string from the driver.
            let text = unsafe { CStr::from_ptr(s) }.to_string_lossy();
            format!("CUDA error {r} ({text})")
        } else {
            format!("CUDA error {r}")
        }
    }

    /// `Ok` for `CUDA_SUCCESS`, else an `Internal` error naming the call.
    pub fn check(&self, r: CuResult, what: &str) -> Result<()> {
        if r == CUDA_SUCCESS {
            Ok(())
        } else {
            Err(Error::new(
                ErrorKind::Internal,
                format!("{what}: {}", self.describe(r)),
            ))
        }
    }
}
