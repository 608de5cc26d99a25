//! GPU memory through the CUDA driver API, loaded at run time (`sys.rs`): where a pointer lives
//! (`cuda:N` or `cpu:N`), primary contexts, per-thread staging streams with pinned buffers
//! (used by the TCP transport's `tcp/stage.rs`), and stream-ordered transfers (`stream.rs`). See
//! `README.md` here for what is tested without a GPU and what needs one.
//!
//! Nothing here is called for host memory on the transfer path: whether a range needs staging is
//! decided once, when it is registered, and kept in the registry.

pub mod stream;
pub mod sys;

use crate::error::{Error, ErrorKind, Result};
use crate::sync::LockClean;
use std::cell::RefCell;
use std::ffi::{c_int, c_uint, c_void};
use std::sync::Mutex;
use sys::{CuContext, CuEvent, CuStream, Driver};

/// Whether a CUDA driver with at least one device could be loaded (loads it on first call).
pub fn is_available() -> bool {
    sys::driver().is_ok()
}

/// Why CUDA is unavailable, or `Ok` with the device count.
pub fn device_count() -> Result<i32> {
    sys::driver().map(|d| d.devices)
}

/// The CUDA device owning `addr`, or `None` for host memory (and when CUDA is unavailable).
pub fn probe(addr: u64) -> Option<u32> {
    let d = sys::driver().ok()?;
    let mut ty: c_uint = 0;
    // SAFETY: `ty` is a valid out pointer of the attribute's type (unsigned int).
    let r = unsafe {
        (d.cu_pointer_get_attribute)(
            (&mut ty as *mut c_uint).cast(),
            sys::CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
            addr,
        )
    };
    // An error means memory CUDA does not know: ordinary host memory.
    if r != sys::CUDA_SUCCESS
        || (ty != sys::CU_MEMORYTYPE_DEVICE && ty != sys::CU_MEMORYTYPE_UNIFIED)
    {
        return None;
    }
    let mut dev: c_int = -1;
    // SAFETY: `dev` is a valid out pointer of the attribute's type (int).
    let r = unsafe {
        (d.cu_pointer_get_attribute)(
            (&mut dev as *mut c_int).cast(),
            sys::CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
            addr,
        )
    };
    (r == sys::CUDA_SUCCESS && dev >= 0).then_some(dev as u32)
}

/// NUMA node of the page holding `addr` (`move_pages` query), `None` when unknown (page not
/// faulted in yet, no NUMA support).
pub fn numa_node(addr: u64) -> Option<u32> {
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(4096) as u64;
    let mut pages = [(addr & !(page - 1)) as usize as *mut c_void];
    let mut status: [c_int; 1] = [-1];
    // SAFETY: move_pages with `nodes == NULL` only queries; the arrays hold one element each.
    let r = unsafe {
        libc::syscall(
            libc::SYS_move_pages,
            0,
            1usize,
            pages.as_mut_ptr(),
            std::ptr::null::<c_int>(),
            status.as_mut_ptr(),
            0,
        )
    };
    (r == 0 && status[0] >= 0).then_some(status[0] as u32)
}

/// Resolves a registration's location: `"*"` (or empty) is detected (`cuda:N` for device memory,
/// `cpu:N` for host memory, `cpu:0` when the node is unknown); a given `cuda:*` location is
/// checked against the driver. Returns the location to keep and the device when the range is
/// GPU memory. `cpu:*` and other explicit locations never touch CUDA.
pub fn placement(addr: u64, location: &str) -> (String, Option<u32>) {
    let loc = location.trim();
    if loc.is_empty() || loc == "*" {
        return match probe(addr) {
            Some(d) => (format!("cuda:{d}"), Some(d)),
            None => (format!("cpu:{}", numa_node(addr).unwrap_or(0)), None),
        };
    }
    if loc.starts_with("cuda") {
        let dev = probe(addr);
        if dev.is_none() {
            tw_log!(
                crate::log::Level::Info,
                "{addr:#x} registered as {loc} is not CUDA device memory here; treated as host"
            );
        }
        return (loc.to_string(), dev);
    }
    (loc.to_string(), None)
}

/// Primary contexts, retained once per device and kept for the life of the process.
static CONTEXTS: Mutex<Vec<usize>> = Mutex::new(Vec::new());

fn primary_context(d: &Driver, dev: u32) -> Result<CuContext> {
    if dev as i64 >= d.devices as i64 {
        return Err(Error::new(
            ErrorKind::InvalidArgument,
            format!("CUDA device {dev} does not exist ({} present)", d.devices),
        ));
    }
    let mut list = CONTEXTS.lock_clean();
    if list.len() < d.devices as usize {
        list.resize(d.devices as usize, 0);
    }
    if list[dev as usize] == 0 {
        let mut cudev: c_int = 0;
        d.check(
            // SAFETY: valid out pointer; ordinal checked above.
            unsafe { (d.cu_device_get)(&mut cudev, dev as c_int) },
            "cuDeviceGet",
        )?;
        let mut ctx: CuContext = std::ptr::null_mut();
        d.check(
            // SAFETY: valid out pointer and device handle.
            unsafe { (d.cu_device_primary_ctx_retain)(&mut ctx, cudev) },
            "cuDevicePrimaryCtxRetain",
        )?;
        list[dev as usize] = ctx as usize;
    }
    Ok(list[dev as usize] as CuContext)
}

/// Makes a context current on this thread for its lifetime (push/pop, so an application thread
/// gets its own context back).
pub(crate) struct CtxGuard {
    d: &'static Driver,
}

impl CtxGuard {
    pub(crate) fn push(d: &'static Driver, ctx: CuContext) -> Result<CtxGuard> {
        // SAFETY: `ctx` is a live context (primary, or an application stream's).
        d.check(unsafe { (d.cu_ctx_push_current)(ctx) }, "cuCtxPushCurrent")?;
        Ok(CtxGuard { d })
    }
}

impl Drop for CtxGuard {
    fn drop(&mut self) {
        let mut old: CuContext = std::ptr::null_mut();
        // SAFETY: pops the context pushed in `push` on this same thread.
        unsafe { (self.d.cu_ctx_pop_current)(&mut old) };
    }
}

/// Bytes per staging chunk; two chunks per stager let one copy run while the other is on the
/// socket.
pub const CHUNK: usize = 1 << 20;

/// A thread's staging state for one device: a non-blocking stream, one event per buffer, and two
/// pinned host buffers (allocated on first staged transfer).
pub(crate) struct Stager {
    d: &'static Driver,
    dev: u32,
    ctx: CuContext,
    stream: CuStream,
    events: [CuEvent; 2],
    bufs: [*mut u8; 2],
}

impl Stager {
    fn new(d: &'static Driver, dev: u32, ctx: CuContext) -> Result<Stager> {
        let mut st = Stager {
            d,
            dev,
            ctx,
            stream: std::ptr::null_mut(),
            events: [std::ptr::null_mut(); 2],
            bufs: [std::ptr::null_mut(); 2],
        };
        d.check(
            // SAFETY: valid out pointer; the device's context is current (caller's guard).
            unsafe { (d.cu_stream_create)(&mut st.stream, sys::CU_STREAM_NON_BLOCKING) },
            "cuStreamCreate",
        )?;
        for e in &mut st.events {
            d.check(
                // SAFETY: valid out pointer; context current.
                unsafe { (d.cu_event_create)(e, sys::CU_EVENT_DISABLE_TIMING) },
                "cuEventCreate",
            )?;
        }
        Ok(st)
    }

    /// Allocates the pinned buffers if needed.
    pub(crate) fn ensure_bufs(&mut self) -> Result<()> {
        for b in &mut self.bufs {
            if b.is_null() {
                let mut p: *mut c_void = std::ptr::null_mut();
                self.d.check(
                    // SAFETY: valid out pointer; context current.
                    unsafe {
                        (self.d.cu_mem_host_alloc)(&mut p, CHUNK, sys::CU_MEMHOSTALLOC_PORTABLE)
                    },
                    "cuMemHostAlloc",
                )?;
                *b = p.cast();
            }
        }
        Ok(())
    }

    /// Pinned buffer `i` (after `ensure_bufs`). No copy into it may be in flight.
    pub(crate) fn buf(&mut self, i: usize) -> &mut [u8] {
        // SAFETY: `bufs[i]` is a live CHUNK-byte pinned allocation owned by this stager, and the
        // exclusive borrow of `self` keeps other users out.
        unsafe { std::slice::from_raw_parts_mut(self.bufs[i], CHUNK) }
    }

    /// Queues device → pinned buffer `i`, then records event `i`.
    pub(crate) fn dtoh(&mut self, i: usize, src: u64, n: usize) -> Result<()> {
        let d = self.d;
        d.check(
            // SAFETY: `bufs[i]` holds CHUNK ≥ n bytes; `src` is registered device memory.
            unsafe { (d.cu_memcpy_dtoh_async)(self.bufs[i].cast(), src, n, self.stream) },
            "cuMemcpyDtoHAsync",
        )?;
        self.record(i)
    }

    /// Queues pinned buffer `i` → device, then records event `i`.
    pub(crate) fn htod(&mut self, i: usize, dst: u64, n: usize) -> Result<()> {
        let d = self.d;
        d.check(
            // SAFETY: `bufs[i]` holds CHUNK ≥ n bytes; `dst` is registered device memory.
            unsafe { (d.cu_memcpy_htod_async)(dst, self.bufs[i].cast(), n, self.stream) },
            "cuMemcpyHtoDAsync",
        )?;
        self.record(i)
    }

    fn record(&mut self, i: usize) -> Result<()> {
        self.d.check(
            // SAFETY: live event and stream of this stager.
            unsafe { (self.d.cu_event_record)(self.events[i], self.stream) },
            "cuEventRecord",
        )
    }

    /// Waits until everything queued before the last record of event `i` is done.
    pub(crate) fn wait(&mut self, i: usize) -> Result<()> {
        self.d.check(
            // SAFETY: live event of this stager.
            unsafe { (self.d.cu_event_synchronize)(self.events[i]) },
            "cuEventSynchronize",
        )
    }

    /// Waits for everything queued on the stream.
    pub(crate) fn sync(&mut self) -> Result<()> {
        self.d.check(
            // SAFETY: live stream of this stager.
            unsafe { (self.d.cu_stream_synchronize)(self.stream) },
            "cuStreamSynchronize",
        )
    }

    /// Any-direction copy (unified addressing), completed before returning.
    pub(crate) fn copy(&mut self, dst: u64, src: u64, n: usize) -> Result<()> {
        self.d.check(
            // SAFETY: both ranges are registered memory (device or host) checked by the caller.
            unsafe { (self.d.cu_memcpy_async)(dst, src, n, self.stream) },
            "cuMemcpyAsync",
        )?;
        self.sync()
    }

    /// Device → pageable host bytes, completed before returning.
    pub(crate) fn read_small(&mut self, dst: &mut [u8], src: u64) -> Result<()> {
        self.d.check(
            // SAFETY: `dst` is a live host slice of the copied length; `src` registered device memory.
            unsafe {
                (self.d.cu_memcpy_dtoh_async)(dst.as_mut_ptr().cast(), src, dst.len(), self.stream)
            },
            "cuMemcpyDtoHAsync",
        )?;
        self.sync()
    }
}

impl Drop for Stager {
    fn drop(&mut self) {
        let d = self.d;
        let Ok(_g) = CtxGuard::push(d, self.ctx) else {
            return;
        };
        // SAFETY: handles owned by this stager; the stream is drained before anything is freed.
        unsafe {
            if !self.stream.is_null() {
                (d.cu_stream_synchronize)(self.stream);
            }
            for b in self.bufs {
                if !b.is_null() {
                    (d.cu_mem_free_host)(b.cast());
                }
            }
            for e in self.events {
                if !e.is_null() {
                    (d.cu_event_destroy)(e);
                }
            }
            if !self.stream.is_null() {
                (d.cu_stream_destroy)(self.stream);
            }
        }
    }
}

thread_local! {
    /// This thread's stagers, one per device used (TCP lanes and server sessions each get their
    /// own streams and buffers; freed when the thread exits).
    static STAGERS: RefCell<Vec<Stager>> = const { RefCell::new(Vec::new()) };
}

/// Runs `f` with this thread's stager for `dev`, its context current.
pub(crate) fn with_stager<R, E: From<Error>>(
    dev: u32,
    f: impl FnOnce(&mut Stager) -> std::result::Result<R, E>,
) -> std::result::Result<R, E> {
    let d = sys::driver()?;
    let ctx = primary_context(d, dev)?;
    let _g = CtxGuard::push(d, ctx)?;
    STAGERS.with(|cell| {
        let mut list = cell.borrow_mut();
        let i = match list.iter().position(|s| s.dev == dev) {
            Some(i) => i,
            None => {
                list.push(Stager::new(d, dev, ctx)?);
                list.len() - 1
            }
        };
        f(&mut list[i])
    })
}

/// Copies `len` bytes between two registered ranges when at least one is on a GPU (`dev` is the
/// device whose stream runs the copy).
pub fn copy(dev: u32, dst: u64, src: u64, len: usize) -> Result<()> {
    with_stager(dev, |st| st.copy(dst, src, len))
}
