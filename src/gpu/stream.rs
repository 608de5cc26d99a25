//! Stream-ordered work: run a job when a CUDA stream reaches a point, and make later work on that
//! stream wait until the job opens a gate.
//!
//! ```text
//! app stream:  ... ─► host func (start) ─► wait value32(flag >= ticket) ─► later work ...
//!                        │ channel send only                ▲
//!                        ▼                                  │ store ticket (host-mapped flag)
//!               tw-gpu-stream thread: job (submit) ─► transfer completes ─► Gate::open
//! ```
//!
//! - The host function only hands the job to the `tw-gpu-stream` thread: it makes no CUDA call
//!   (forbidden there) and never blocks the driver's callback thread.
//! - The gate is a 32-bit slot in pinned, device-mapped host memory. Slots are pooled and reused;
//!   each use waits for a higher ticket (`CU_STREAM_WAIT_VALUE_GEQ`), so a slot never has to be
//!   reset and an old waiter can never see it go backwards.
//! - Without stream memory operations (`cuStreamWaitValue32` missing or refused) a second host
//!   function blocks on the gate instead: correct, but it holds the driver's callback thread for
//!   the transfer's duration.

use super::CtxGuard;
use super::sys::{self, CuContext, CuDevicePtr, CuStream, Driver};
use crate::error::{Error, ErrorKind, Result};
use crate::sync::{LockClean, Recover};
use crossbeam_channel::{Sender, unbounded};
use std::ffi::c_void;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::Instant;

/// Slots per pinned page of gates.
const SLOTS_PER_CHUNK: usize = 1024;

/// Free gate slots (addresses of `AtomicU32`s in pinned host memory, never freed).
static SLOTS: Mutex<Vec<usize>> = Mutex::new(Vec::new());

/// A job for the `tw-gpu-stream` thread.
pub type Job = Box<dyn FnOnce() + Send>;

/// Completion gate of one stream-ordered job.
pub struct Gate {
    slot: usize,
    ticket: u32,
    open: Mutex<bool>,
    cv: Condvar,
}

impl Gate {
    fn flag(&self) -> &AtomicU32 {
        // SAFETY: `slot` is a 4-byte aligned slot of a pinned allocation that is never freed;
        // it is only accessed atomically (here and by the GPU's wait).
        unsafe { &*(self.slot as *const AtomicU32) }
    }

    /// Opens the gate (idempotent): later work on the stream may run.
    pub fn open(&self) {
        let mut g = self.open.lock_clean();
        if !*g {
            // Release: the transfer's effects happen before the stream sees the ticket.
            self.flag().store(self.ticket, Ordering::Release);
            *g = true;
            self.cv.notify_all();
        }
    }

    /// Whether the gate is open.
    pub fn is_open(&self) -> bool {
        *self.open.lock_clean()
    }

    /// Waits until open or `deadline`; returns whether open.
    pub fn wait(&self, deadline: Option<Instant>) -> bool {
        let mut g = self.open.lock_clean();
        while !*g {
            match deadline {
                None => g = self.cv.wait(g).recover(),
                Some(d) => {
                    let now = Instant::now();
                    if now >= d {
                        return false;
                    }
                    g = self.cv.wait_timeout(g, d - now).recover().0;
                }
            }
        }
        true
    }
}

impl Drop for Gate {
    fn drop(&mut self) {
        // A gate is never dropped closed while a stream could wait on it; open it anyway so a
        // reused slot stays monotonic, then return the slot.
        self.open();
        SLOTS.lock_clean().push(self.slot);
    }
}

/// The context of `stream` (the current one for the legacy stream 0).
fn stream_ctx(d: &Driver, stream: CuStream) -> Result<CuContext> {
    let mut ctx: CuContext = std::ptr::null_mut();
    d.check(
        // SAFETY: valid out pointer; `stream` is the application's stream handle (or 0).
        unsafe { (d.cu_stream_get_ctx)(stream, &mut ctx) },
        "cuStreamGetCtx",
    )?;
    if ctx.is_null() {
        return Err(Error::new(
            ErrorKind::InvalidArgument,
            "the stream has no CUDA context (none current for stream 0)",
        ));
    }
    Ok(ctx)
}

fn new_slot(d: &Driver) -> Result<usize> {
    let mut free = SLOTS.lock_clean();
    if free.is_empty() {
        let mut p: *mut c_void = std::ptr::null_mut();
        d.check(
            // SAFETY: valid out pointer; a context is current (caller's guard).
            unsafe {
                (d.cu_mem_host_alloc)(
                    &mut p,
                    SLOTS_PER_CHUNK * 4,
                    sys::CU_MEMHOSTALLOC_PORTABLE | sys::CU_MEMHOSTALLOC_DEVICEMAP,
                )
            },
            "cuMemHostAlloc (stream gates)",
        )?;
        free.extend((0..SLOTS_PER_CHUNK).rev().map(|i| p as usize + i * 4));
    }
    Ok(free.pop().expect("refilled above"))
}

/// The `tw-gpu-stream` thread's queue (started on first use, lives for the process).
fn worker() -> Result<&'static Sender<Job>> {
    static WORKER: OnceLock<std::result::Result<Sender<Job>, String>> = OnceLock::new();
    WORKER
        .get_or_init(|| {
            let (tx, rx) = unbounded::<Job>();
            std::thread::Builder::new()
                .name("tw-gpu-stream".into())
                .spawn(move || {
                    while let Ok(job) = rx.recv() {
                        if std::panic::catch_unwind(std::panic::AssertUnwindSafe(job)).is_err() {
                            tw_log!(crate::log::Level::Error, "stream job panicked");
                        }
                    }
                })
                .map(|_| tx)
                .map_err(|e| format!("cannot start the tw-gpu-stream thread: {e}"))
        })
        .as_ref()
        .map_err(|m| Error::new(ErrorKind::Internal, m.clone()))
}

unsafe extern "C" fn start_cb(p: *mut c_void) {
    // SAFETY: `p` is the `Box<Job>` leaked by `enqueue` for exactly this one call.
    let job: Box<Job> = unsafe { Box::from_raw(p.cast()) };
    // Only a channel send here: host functions must not call CUDA or block.
    if let Ok(w) = worker() {
        let _ = w.send(*job);
    }
}

unsafe extern "C" fn wait_cb(p: *mut c_void) {
    // SAFETY: `p` is the `Arc<Gate>` leaked by `enqueue` for exactly this one call.
    let gate: Arc<Gate> = unsafe { Arc::from_raw(p.cast()) };
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| gate.wait(None)));
}

/// Creates a gate usable by `stream` (whose context is used for the pinned slot).
pub fn gate(stream: usize) -> Result<Arc<Gate>> {
    let d = sys::driver()?;
    let s = stream as CuStream;
    let _g = CtxGuard::push(d, stream_ctx(d, s)?)?;
    let slot = new_slot(d)?;
    // SAFETY: as in `Gate::flag`.
    let cur = unsafe { &*(slot as *const AtomicU32) }.load(Ordering::Acquire);
    Ok(Arc::new(Gate {
        slot,
        ticket: cur.wrapping_add(1),
        open: Mutex::new(false),
        cv: Condvar::new(),
    }))
}

/// How later work on the stream is held back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hold {
    /// `cuStreamWaitValue32` on the gate's flag (the driver thread is never blocked).
    WaitValue,
    /// A blocking host function (no stream memory operations on this driver/device).
    HostFunc,
}

/// Enqueues on `stream`: `job` runs on the `tw-gpu-stream` thread once the stream reaches this
/// point, and the stream's later work waits for `gate` to open. The job must open the gate on
/// every path. On error nothing was enqueued.
pub fn enqueue(stream: usize, gate: &Arc<Gate>, job: Job) -> Result<Hold> {
    let d = sys::driver()?;
    worker()?;
    let s = stream as CuStream;
    let _g = CtxGuard::push(d, stream_ctx(d, s)?)?;
    let mut dptr: CuDevicePtr = 0;
    // SAFETY: the slot lies in memory from cuMemHostAlloc(DEVICEMAP); valid out pointer.
    let mapped =
        unsafe { (d.cu_mem_host_get_device_pointer)(&mut dptr, gate.slot as *mut c_void, 0) }
            == sys::CUDA_SUCCESS;
    let p = Box::into_raw(Box::new(job));
    // SAFETY: `start_cb` takes back exactly this box, once.
    let r = unsafe { (d.cu_launch_host_func)(s, start_cb, p.cast()) };
    if r != sys::CUDA_SUCCESS {
        // SAFETY: not enqueued, so still ours.
        drop(unsafe { Box::from_raw(p) });
        return Err(Error::new(
            ErrorKind::Internal,
            format!("cuLaunchHostFunc: {}", d.describe(r)),
        ));
    }
    if let (Some(wait), true) = (d.cu_stream_wait_value32, mapped) {
        // SAFETY: `dptr` maps the gate's slot, which outlives any wait on it (never freed).
        let r = unsafe { wait(s, dptr, gate.ticket, sys::CU_STREAM_WAIT_VALUE_GEQ) };
        if r == sys::CUDA_SUCCESS {
            return Ok(Hold::WaitValue);
        }
        tw_log!(
            crate::log::Level::Info,
            "cuStreamWaitValue32 refused ({}); ordering with a blocking host function",
            d.describe(r)
        );
    }
    let g = Arc::into_raw(gate.clone());
    // SAFETY: `wait_cb` takes back exactly this reference, once.
    let r = unsafe { (d.cu_launch_host_func)(s, wait_cb, g as *mut c_void) };
    if r != sys::CUDA_SUCCESS {
        // SAFETY: not enqueued, so still ours.
        drop(unsafe { Arc::from_raw(g) });
        return Err(Error::new(
            ErrorKind::Internal,
            format!(
                "the transfer is queued but later stream work cannot be ordered after it: \
                 cuLaunchHostFunc: {}",
                d.describe(r)
            ),
        ));
    }
    Ok(Hold::HostFunc)
}
