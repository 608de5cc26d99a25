//! The verbs function table, loaded at run time from `libibverbs.so.1` (or `TW_IBVERBS_LIB`).
//! Every symbol is looked up at its pinned version with `dlvsym` (`IBVERBS_1.1`, or `IBVERBS_1.0`
//! for the completion-channel calls, which never got a 1.1), so an old compatibility symbol is
//! never picked up. Nothing RDMA is linked at build time.

use super::sys::*;
use crate::sync::LockClean;
use std::ffi::{CStr, CString, c_char, c_int, c_void};

/// Environment variable naming the verbs library to load instead of `libibverbs.so.1`.
pub const LIB_ENV: &str = "TW_IBVERBS_LIB";
/// Default library name.
pub const DEFAULT_LIB: &str = "libibverbs.so.1";

macro_rules! verbs_table {
    ($( $field:ident = $sym:literal @ $ver:literal : fn($($arg:ty),*) -> $ret:ty; )*) => {
        /// Loaded verbs entry points.
        #[allow(missing_docs)]
        pub struct Verbs {
            /// Path the table was loaded from.
            pub path: String,
            $( pub $field: unsafe extern "C" fn($($arg),*) -> $ret, )*
        }

        impl Verbs {
            fn resolve(handle: *mut c_void, path: String) -> Result<Verbs, String> {
                Ok(Verbs {
                    $( $field: {
                        let p = versioned(handle, $sym, $ver)?;
                        // SAFETY: the symbol is the verbs function of that name and version,
                        // whose C signature the field type mirrors.
                        unsafe { std::mem::transmute::<*mut c_void, unsafe extern "C" fn($($arg),*) -> $ret>(p) }
                    }, )*
                    path,
                })
            }
        }
    };
}

verbs_table! {
    get_device_list = "ibv_get_device_list" @ "IBVERBS_1.1": fn(*mut c_int) -> *mut *mut ibv_device;
    free_device_list = "ibv_free_device_list" @ "IBVERBS_1.1": fn(*mut *mut ibv_device) -> ();
    get_device_name = "ibv_get_device_name" @ "IBVERBS_1.1": fn(*mut ibv_device) -> *const c_char;
    open_device = "ibv_open_device" @ "IBVERBS_1.1": fn(*mut ibv_device) -> *mut ibv_context;
    close_device = "ibv_close_device" @ "IBVERBS_1.1": fn(*mut ibv_context) -> c_int;
    query_port = "ibv_query_port" @ "IBVERBS_1.1": fn(*mut ibv_context, u8, *mut ibv_port_attr) -> c_int;
    query_gid = "ibv_query_gid" @ "IBVERBS_1.1": fn(*mut ibv_context, u8, c_int, *mut ibv_gid) -> c_int;
    alloc_pd = "ibv_alloc_pd" @ "IBVERBS_1.1": fn(*mut ibv_context) -> *mut ibv_pd;
    dealloc_pd = "ibv_dealloc_pd" @ "IBVERBS_1.1": fn(*mut ibv_pd) -> c_int;
    reg_mr = "ibv_reg_mr" @ "IBVERBS_1.1": fn(*mut ibv_pd, *mut c_void, usize, c_int) -> *mut ibv_mr;
    dereg_mr = "ibv_dereg_mr" @ "IBVERBS_1.1": fn(*mut ibv_mr) -> c_int;
    create_comp_channel = "ibv_create_comp_channel" @ "IBVERBS_1.0": fn(*mut ibv_context) -> *mut ibv_comp_channel;
    destroy_comp_channel = "ibv_destroy_comp_channel" @ "IBVERBS_1.0": fn(*mut ibv_comp_channel) -> c_int;
    create_cq = "ibv_create_cq" @ "IBVERBS_1.1": fn(*mut ibv_context, c_int, *mut c_void, *mut ibv_comp_channel, c_int) -> *mut ibv_cq;
    destroy_cq = "ibv_destroy_cq" @ "IBVERBS_1.1": fn(*mut ibv_cq) -> c_int;
    get_cq_event = "ibv_get_cq_event" @ "IBVERBS_1.1": fn(*mut ibv_comp_channel, *mut *mut ibv_cq, *mut *mut c_void) -> c_int;
    ack_cq_events = "ibv_ack_cq_events" @ "IBVERBS_1.1": fn(*mut ibv_cq, u32) -> ();
    create_qp = "ibv_create_qp" @ "IBVERBS_1.1": fn(*mut ibv_pd, *mut ibv_qp_init_attr) -> *mut ibv_qp;
    modify_qp = "ibv_modify_qp" @ "IBVERBS_1.1": fn(*mut ibv_qp, *mut ibv_qp_attr, c_int) -> c_int;
    destroy_qp = "ibv_destroy_qp" @ "IBVERBS_1.1": fn(*mut ibv_qp) -> c_int;
    wc_status_str = "ibv_wc_status_str" @ "IBVERBS_1.1": fn(c_int) -> *const c_char;
}

fn versioned(handle: *mut c_void, name: &str, version: &str) -> Result<*mut c_void, String> {
    let n = CString::new(name).map_err(|e| e.to_string())?;
    let v = CString::new(version).map_err(|e| e.to_string())?;
    // SAFETY: `handle` is a live dlopen handle; both strings are NUL-terminated.
    let p = unsafe { libc::dlvsym(handle, n.as_ptr(), v.as_ptr()) };
    if p.is_null() {
        return Err(format!("symbol {name}@{version} not found"));
    }
    Ok(p)
}

// SAFETY: the table holds plain function pointers into a library that is never unloaded.
unsafe impl Send for Verbs {}
// SAFETY: as above; the functions themselves are thread-safe per the verbs contract.
unsafe impl Sync for Verbs {}

impl Verbs {
    /// Loads the verbs library named by `TW_IBVERBS_LIB`, else `libibverbs.so.1`. The library
    /// stays loaded for the life of the process (providers do not support unloading); each path
    /// is loaded once.
    pub fn load() -> Result<std::sync::Arc<Verbs>, String> {
        let path = std::env::var(LIB_ENV)
            .ok()
            .filter(|p| !p.is_empty())
            .unwrap_or_else(|| DEFAULT_LIB.to_string());
        static LOADED: std::sync::Mutex<Vec<std::sync::Arc<Verbs>>> =
            std::sync::Mutex::new(Vec::new());
        let mut loaded = LOADED.lock_clean();
        if let Some(v) = loaded.iter().find(|v| v.path == path) {
            return Ok(v.clone());
        }
        // SAFETY: loading a shared library runs its constructors; verbs libraries are designed
        // to be dlopened (rdma-core's own providers are).
        let lib = unsafe {
            libloading::os::unix::Library::open(
                Some(&path),
                libloading::os::unix::RTLD_NOW | libloading::os::unix::RTLD_LOCAL,
            )
        }
        .map_err(|e| format!("cannot load {path}: {e}"))?;
        let v = std::sync::Arc::new(Verbs::resolve(lib.into_raw(), path)?);
        loaded.push(v.clone());
        Ok(v)
    }

    /// `ibv_wc_status_str`.
    pub fn status_str(&self, status: c_int) -> String {
        // SAFETY: returns a pointer to a static string (never NULL in rdma-core).
        let p = unsafe { (self.wc_status_str)(status) };
        if p.is_null() {
            return format!("status {status}");
        }
        // SAFETY: NUL-terminated static string.
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }
}
