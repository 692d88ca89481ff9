//! Loading libibverbs at run time: `dlopen("libibverbs.so.1")` and `dlsym`
//! of the exported functions this backend calls. There is no link-time
//! dependency, so building rxe-verbs needs neither rdma-core nor its headers.
//!
//! `libc::dlopen` rather than the `libloading` crate: `libc` is already a
//! dependency of the workspace (rxe-net's socket layer), the handful of calls
//! needed is small, and the library is never unloaded (providers may keep
//! threads and the symbols must stay valid for the life of the process),
//! which is exactly a leaked `dlopen` handle.
//!
//! `RXE_LIBIBVERBS` names another file to load instead (a path or a soname),
//! for tests and for unusual installations. The library is loaded once per
//! process, on first use ([`verbs`]), and every object of the backend calls
//! through that one table.
//!
//! The function pointer types below are the prototypes of the exported
//! functions in verbs.h, written here: the generated bindings
//! (rxe-ibverbs-sys) have the structs and constants, not the functions.

use super::ffi::*;
use std::ffi::{c_char, c_int, c_uint, c_void, CStr, CString};
use std::sync::OnceLock;

/// The library name loaded by default.
pub const DEFAULT_LIBRARY: &str = "libibverbs.so.1";

/// The exported libibverbs functions, resolved once.
#[allow(clippy::type_complexity)]
pub struct Verbs {
    /// What was loaded (for messages).
    pub path: String,
    pub get_device_list: unsafe extern "C" fn(*mut c_int) -> *mut *mut ibv_device,
    pub free_device_list: unsafe extern "C" fn(*mut *mut ibv_device),
    pub get_device_name: unsafe extern "C" fn(*mut ibv_device) -> *const c_char,
    pub get_device_guid: unsafe extern "C" fn(*mut ibv_device) -> u64,
    pub open_device: unsafe extern "C" fn(*mut ibv_device) -> *mut ibv_context,
    pub close_device: unsafe extern "C" fn(*mut ibv_context) -> c_int,
    pub query_device: unsafe extern "C" fn(*mut ibv_context, *mut ibv_device_attr) -> c_int,
    /// The exported `ibv_query_port` (takes a `_compat_ibv_port_attr`, the
    /// prefix of `ibv_port_attr`); the inline `___ibv_query_port` calls it
    /// only when the context has no extended `query_port`.
    pub query_port_compat: unsafe extern "C" fn(*mut ibv_context, u8, *mut ibv_port_attr) -> c_int,
    pub query_gid: unsafe extern "C" fn(*mut ibv_context, u8, c_int, *mut ibv_gid) -> c_int,
    /// `_ibv_query_gid_ex` (rdma-core 32+), for the GID type.
    pub query_gid_ex: Option<
        unsafe extern "C" fn(*mut ibv_context, u32, u32, *mut ibv_gid_entry, u32, usize) -> c_int,
    >,
    /// `_ibv_query_gid_table` (rdma-core 32+): the whole table in one call.
    pub query_gid_table: Option<
        unsafe extern "C" fn(*mut ibv_context, *mut ibv_gid_entry, usize, u32, usize) -> isize,
    >,
    pub alloc_pd: unsafe extern "C" fn(*mut ibv_context) -> *mut ibv_pd,
    pub dealloc_pd: unsafe extern "C" fn(*mut ibv_pd) -> c_int,
    /// The exported `ibv_reg_mr`: what the `ibv_reg_mr` macro calls for
    /// access flags with nothing in `IBV_ACCESS_OPTIONAL_RANGE`, which is
    /// all this crate ever passes.
    pub reg_mr: unsafe extern "C" fn(*mut ibv_pd, *mut c_void, usize, c_int) -> *mut ibv_mr,
    /// `ibv_reg_mr_iova2` (rdma-core 29+), for zero-based regions.
    pub reg_mr_iova2:
        Option<unsafe extern "C" fn(*mut ibv_pd, *mut c_void, usize, u64, c_uint) -> *mut ibv_mr>,
    pub dereg_mr: unsafe extern "C" fn(*mut ibv_mr) -> c_int,
    pub create_comp_channel: unsafe extern "C" fn(*mut ibv_context) -> *mut ibv_comp_channel,
    pub destroy_comp_channel: unsafe extern "C" fn(*mut ibv_comp_channel) -> c_int,
    pub create_cq: unsafe extern "C" fn(
        *mut ibv_context,
        c_int,
        *mut c_void,
        *mut ibv_comp_channel,
        c_int,
    ) -> *mut ibv_cq,
    pub destroy_cq: unsafe extern "C" fn(*mut ibv_cq) -> c_int,
    pub resize_cq: Option<unsafe extern "C" fn(*mut ibv_cq, c_int) -> c_int>,
    pub get_cq_event:
        unsafe extern "C" fn(*mut ibv_comp_channel, *mut *mut ibv_cq, *mut *mut c_void) -> c_int,
    pub ack_cq_events: unsafe extern "C" fn(*mut ibv_cq, c_uint),
    pub create_qp: unsafe extern "C" fn(*mut ibv_pd, *mut ibv_qp_init_attr) -> *mut ibv_qp,
    pub modify_qp: unsafe extern "C" fn(*mut ibv_qp, *mut ibv_qp_attr, c_int) -> c_int,
    pub attach_mcast: Option<unsafe extern "C" fn(*mut ibv_qp, *const ibv_gid, u16) -> c_int>,
    pub detach_mcast: Option<unsafe extern "C" fn(*mut ibv_qp, *const ibv_gid, u16) -> c_int>,
    pub query_qp:
        unsafe extern "C" fn(*mut ibv_qp, *mut ibv_qp_attr, c_int, *mut ibv_qp_init_attr) -> c_int,
    pub destroy_qp: unsafe extern "C" fn(*mut ibv_qp) -> c_int,
    pub create_srq: unsafe extern "C" fn(*mut ibv_pd, *mut ibv_srq_init_attr) -> *mut ibv_srq,
    pub modify_srq: unsafe extern "C" fn(*mut ibv_srq, *mut ibv_srq_attr, c_int) -> c_int,
    pub query_srq: Option<unsafe extern "C" fn(*mut ibv_srq, *mut ibv_srq_attr) -> c_int>,
    pub destroy_srq: unsafe extern "C" fn(*mut ibv_srq) -> c_int,
    pub create_ah: unsafe extern "C" fn(*mut ibv_pd, *mut ibv_ah_attr) -> *mut ibv_ah,
    pub destroy_ah: unsafe extern "C" fn(*mut ibv_ah) -> c_int,
    pub get_async_event: unsafe extern "C" fn(*mut ibv_context, *mut ibv_async_event) -> c_int,
    pub ack_async_event: unsafe extern "C" fn(*mut ibv_async_event),
}

impl std::fmt::Debug for Verbs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Verbs").field("path", &self.path).finish()
    }
}

fn dlerror_string() -> String {
    // SAFETY: dlerror returns a thread-local, NUL-terminated message or null.
    let e = unsafe { libc::dlerror() };
    if e.is_null() {
        "unknown dlopen error".into()
    } else {
        // SAFETY: non-null, NUL-terminated, valid until the next dl* call.
        unsafe { CStr::from_ptr(e) }.to_string_lossy().into_owned()
    }
}

struct Handle(*mut c_void);

impl Handle {
    /// The address of `name`, or null.
    fn sym(&self, name: &str) -> *mut c_void {
        let c = CString::new(name).expect("symbol names have no NUL");
        // SAFETY: the handle came from a successful dlopen and is never
        // closed; `c` is a valid C string.
        unsafe { libc::dlsym(self.0, c.as_ptr()) }
    }
}

macro_rules! required {
    ($h:expr, $name:literal) => {{
        let p = $h.sym($name);
        if p.is_null() {
            return Err(format!("no symbol {} (not libibverbs, or too old)", $name));
        }
        // SAFETY: `p` is the address of the exported function `$name`, whose
        // C prototype in verbs.h is the type of the field being assigned
        // (checked by hand, field by field, against the header).
        unsafe { std::mem::transmute::<*mut c_void, _>(p) }
    }};
}

macro_rules! optional {
    ($h:expr, $name:literal) => {{
        let p = $h.sym($name);
        if p.is_null() {
            None
        } else {
            // SAFETY: as for `required!`.
            Some(unsafe { std::mem::transmute::<*mut c_void, _>(p) })
        }
    }};
}

/// Loads `path` (a soname or a file) and resolves every function.
// Each transmute's target type is the field it is assigned to (a function
// pointer type transcribed from verbs.h), which the macros cannot name.
#[allow(clippy::missing_transmute_annotations)]
pub fn load(path: &str) -> Result<Verbs, String> {
    let c = CString::new(path).map_err(|_| format!("{path:?}: not a file name"))?;
    // SAFETY: dlopen with a valid C string; RTLD_NOW so a missing symbol
    // fails here rather than later. The handle is never closed.
    let h = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    if h.is_null() {
        return Err(dlerror_string());
    }
    let h = Handle(h);
    Ok(Verbs {
        path: path.to_string(),
        get_device_list: required!(h, "ibv_get_device_list"),
        free_device_list: required!(h, "ibv_free_device_list"),
        get_device_name: required!(h, "ibv_get_device_name"),
        get_device_guid: required!(h, "ibv_get_device_guid"),
        open_device: required!(h, "ibv_open_device"),
        close_device: required!(h, "ibv_close_device"),
        query_device: required!(h, "ibv_query_device"),
        query_port_compat: required!(h, "ibv_query_port"),
        query_gid: required!(h, "ibv_query_gid"),
        query_gid_ex: optional!(h, "_ibv_query_gid_ex"),
        query_gid_table: optional!(h, "_ibv_query_gid_table"),
        alloc_pd: required!(h, "ibv_alloc_pd"),
        dealloc_pd: required!(h, "ibv_dealloc_pd"),
        reg_mr: required!(h, "ibv_reg_mr"),
        reg_mr_iova2: optional!(h, "ibv_reg_mr_iova2"),
        dereg_mr: required!(h, "ibv_dereg_mr"),
        create_comp_channel: required!(h, "ibv_create_comp_channel"),
        destroy_comp_channel: required!(h, "ibv_destroy_comp_channel"),
        create_cq: required!(h, "ibv_create_cq"),
        destroy_cq: required!(h, "ibv_destroy_cq"),
        resize_cq: optional!(h, "ibv_resize_cq"),
        get_cq_event: required!(h, "ibv_get_cq_event"),
        ack_cq_events: required!(h, "ibv_ack_cq_events"),
        create_qp: required!(h, "ibv_create_qp"),
        modify_qp: required!(h, "ibv_modify_qp"),
        attach_mcast: optional!(h, "ibv_attach_mcast"),
        detach_mcast: optional!(h, "ibv_detach_mcast"),
        query_qp: required!(h, "ibv_query_qp"),
        destroy_qp: required!(h, "ibv_destroy_qp"),
        create_srq: required!(h, "ibv_create_srq"),
        modify_srq: required!(h, "ibv_modify_srq"),
        query_srq: optional!(h, "ibv_query_srq"),
        destroy_srq: required!(h, "ibv_destroy_srq"),
        create_ah: required!(h, "ibv_create_ah"),
        destroy_ah: required!(h, "ibv_destroy_ah"),
        get_async_event: required!(h, "ibv_get_async_event"),
        ack_async_event: required!(h, "ibv_ack_async_event"),
    })
}

static VERBS: OnceLock<Result<Verbs, String>> = OnceLock::new();

/// The library to load: `RXE_LIBIBVERBS` if set, else `libibverbs.so.1`.
pub(crate) fn library_name() -> String {
    crate::config::libibverbs().unwrap_or_else(|| DEFAULT_LIBRARY.to_string())
}

/// libibverbs, loaded on first use (once per process).
pub(super) fn verbs() -> Result<&'static Verbs, String> {
    VERBS
        .get_or_init(|| {
            let name = library_name();
            load(&name).map_err(|e| format!("cannot load {name}: {e}"))
        })
        .as_ref()
        .map_err(Clone::clone)
}

/// Whether libibverbs could be loaded (loading it if not yet done).
pub(crate) fn available() -> Result<String, String> {
    verbs().map(|v| v.path.clone())
}
