//! tidewire's native C API (`tw_*`), exported from the library and declared in
//! `include/tidewire.h` (generated from this module by cbindgen).
//!
//! Conventions: every fallible function returns a `tw_result` (0 = OK, negative = error) and
//! writes its outputs only on success; `tw_last_error_message` gives the detail of the calling
//! thread's last failure. Every engine function takes `const tw_engine *` and may be called from
//! any thread at the same time. Strings passed in are copied; none is retained after the call.
//!
//! One file per C object: `config.rs`, `engine.rs`, `memory.rs`, `segment.rs`, `batch.rs`,
//! `scatter.rs`, `notify.rs`, `stream.rs`; result-code names in `results.rs`; the C structs in
//! `types.rs`; argument helpers here.

#![allow(
    clippy::not_unsafe_ptr_arg_deref,
    reason = "C entry points: each documents its pointer contract and checks NULL; callers are C"
)]

use super::status::{
    self, TW_ERR_BUFFER_TOO_SMALL, TW_ERR_NULL_ARGUMENT, TW_ERR_PANIC, TW_OK, tw_result,
};
use super::{ffi_boundary, notify_args, slice_arg, str_arg, write_c_string};
use crate::engine::{Config, Engine, Request, ScatterRange};
use crate::error::{Error, ErrorKind};
use crate::transport::Opcode;
use std::ffi::{CString, c_char, c_void};
use std::time::Duration;

/// Task is still in flight.
pub const TW_TASK_WAITING: i32 = 0;
/// Task finished and every byte moved.
pub const TW_TASK_COMPLETED: i32 = 4;
/// Task failed; `tw_transfer_status.result` says why.
pub const TW_TASK_FAILED: i32 = 6;
/// Opcode: remote → local.
pub const TW_OPCODE_READ: i32 = 0;
/// Opcode: local → remote.
pub const TW_OPCODE_WRITE: i32 = 1;
/// Segment id of the engine itself.
pub const TW_LOCAL_SEGMENT: i32 = 0;

// The constants above are declared for the header; they must match the Rust values.
const _: () = {
    assert!(TW_TASK_WAITING == crate::engine::TaskState::Waiting as i32);
    assert!(TW_TASK_COMPLETED == crate::engine::TaskState::Completed as i32);
    assert!(TW_TASK_FAILED == crate::engine::TaskState::Failed as i32);
    assert!(TW_OPCODE_READ == Opcode::Read as i32);
    assert!(TW_OPCODE_WRITE == Opcode::Write as i32);
    assert!(TW_LOCAL_SEGMENT == crate::engine::LOCAL_SEGMENT);
};

/// Engine configuration under construction (opaque). Functions: `tw_config_new`,
/// `tw_config_set`, `tw_config_free`; `tw_engine_new` reads it (the caller still frees it).
pub struct tw_config {
    cfg: Config,
}

/// A transfer engine (opaque). Functions: `tw_engine_new`, `tw_engine_free`,
/// `tw_engine_segment_name`, `tw_engine_rpc_port`, `tw_memory_*`, `tw_segment_*`, `tw_batch_*`,
/// `tw_scatter_*`, `tw_notify_*`.
pub struct tw_engine {
    engine: Engine,
}

macro_rules! check {
    ($e:expr) => {
        match $e {
            Ok(v) => v,
            Err(e) => return status::fail(&e),
        }
    };
}

mod batch;
mod config;
mod engine;
mod memory;
mod notify;
mod results;
mod scatter;
mod segment;
mod stream;
mod types;

use types::*;

fn null(what: &str) -> Error {
    Error::new(ErrorKind::NullArgument, format!("{what} is NULL"))
}

impl super::Castable for tw_config {
    type Target = Config;
    const WHAT: &'static str = "cfg";
    fn target(&self) -> &Config {
        &self.cfg
    }
}

impl super::Castable for tw_engine {
    type Target = Engine;
    const WHAT: &'static str = "engine";
    fn target(&self) -> &Engine {
        &self.engine
    }
}

/// Borrows the engine behind a handle argument (from `tw_engine_new`, not yet passed to
/// `tw_engine_free`): NULL → `NullArgument`. See [`super::try_ref`].
fn engine_ref<'a>(p: *const tw_engine) -> crate::Result<&'a Engine> {
    super::try_ref(p)
}

/// Borrows an output argument: NULL → `NullArgument`.
///
/// # Safety
/// `p` is NULL or valid, aligned and writable for one `T`, with no other reference to it for the
/// returned borrow.
unsafe fn out<'a, T>(p: *mut T, what: &str) -> crate::Result<&'a mut T> {
    // SAFETY: NULL or a valid, writable, aligned pointer to T per this function's contract.
    unsafe { p.as_mut() }.ok_or_else(|| null(what))
}

fn opcode(v: i32) -> crate::Result<Opcode> {
    Opcode::from_i32(v).ok_or_else(|| {
        Error::new(
            ErrorKind::InvalidArgument,
            format!("opcode {v} is neither READ (0) nor WRITE (1)"),
        )
    })
}

impl crate::engine::AsRequest for tw_transfer_request {
    #[inline]
    fn to_request(&self, _index: usize) -> crate::Result<Request> {
        Ok(Request {
            op: opcode(self.opcode)?,
            local: self.local_addr as u64,
            segment: self.segment,
            remote: self.remote_addr,
            len: self.length,
        })
    }
}

fn timeout(ms: i64) -> Option<Duration> {
    (ms >= 0).then(|| Duration::from_millis(ms as u64))
}

/// The one string-out pattern of the native API: copies `s` and a NUL into `buf[..len]`, or
/// writes nothing and fails with `TW_ERR_BUFFER_TOO_SMALL`, the last error naming `what` and the
/// size needed.
///
/// # Safety
/// `buf` is NULL (refused) or writable for `len` bytes.
unsafe fn string_out(what: &str, s: &str, buf: *mut c_char, len: usize) -> tw_result {
    if buf.is_null() {
        return status::fail(&null("buf"));
    }
    // SAFETY: `buf` is writable for `len` bytes per this function's contract.
    if unsafe { write_c_string(s, buf, len) } {
        TW_OK
    } else {
        status::set_last_error(format!("{what} needs {} bytes", s.len() + 1));
        TW_ERR_BUFFER_TOO_SMALL
    }
}
