//! Native devices next to the soft ones (`RXE_PROVIDER=auto|native`).
//!
//! The system's libibverbs is loaded with `dlmopen(LM_ID_NEWLM, PATH)`: in a
//! link-map namespace of its own, so that the provider libraries it loads
//! (`libmlx5.so.1`, ...) bind `libibverbs.so.1` to it and not to this
//! library, which has the same soname in the program's namespace. It is
//! loaded by path, never by soname (`LD_LIBRARY_PATH` names this library):
//! `RXE_LIBIBVERBS=PATH`, else the first of [`SYSTEM_PATHS`] that exists and
//! is not this very file.
//!
//! Its devices follow the soft ones in `ibv_get_device_list`. Every exported
//! verb whose object argument (device, context, or an object whose first
//! field is its context: PD, MR, CQ, QP, SRQ, AH, channel, ...) belongs to
//! it is forwarded to the same symbol and version of the system library
//! (`exports.rs` marks each verb with the argument to look at). An object
//! is native when its device is one the system library listed: a context's
//! first field is its device, every other object's first field is its
//! context. The inline verbs of `verbs.h` (post, poll, the extended verbs)
//! go through the object's own `context->ops`, which is the provider's.
//!
//! The namespace has its own copy of the C library, and so its own `errno`:
//! a forwarded call copies the program's `errno` in before and the
//! namespace's back after ([`rxe_errno_in`], [`rxe_errno_out`]).
//!
//! `RXE_PROVIDER` unset (or `soft`) loads nothing and costs nothing: the
//! stubs find no forwarding address and jump straight to this library's
//! functions.

use crate::ffi::{note, set_errno};
use crate::sys::*;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::ffi::{c_int, c_void, CStr, CString};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;

/// What `RXE_PROVIDER` asks of the drop-in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// The soft devices of `RXE_DEVICES` only; nothing is loaded (also
    /// what an unset `RXE_PROVIDER` means here).
    Soft,
    /// The soft devices, then the system library's native ones.
    Auto,
    /// The system library's devices only.
    Native,
}

/// Says `line` on standard error (always: these are the one-line messages
/// about native devices that a user who asked for them must see).
fn say(line: &str) {
    eprintln!("rxe-ibverbs: {line}");
}

/// `RXE_PROVIDER`, read once. Unset or empty is `soft`: a program run over
/// the drop-in asked for the soft devices of `RXE_DEVICES`, and loading the
/// system library (and every provider it loads) is what `auto` is for.
pub fn mode() -> Mode {
    static MODE: OnceLock<Mode> = OnceLock::new();
    *MODE.get_or_init(|| {
        let v = std::env::var("RXE_PROVIDER").unwrap_or_default();
        if v.trim().is_empty() {
            return Mode::Soft;
        }
        match v.parse::<rxe_verbs::Provider>() {
            Ok(rxe_verbs::Provider::Soft) => Mode::Soft,
            Ok(rxe_verbs::Provider::Auto) => Mode::Auto,
            Ok(rxe_verbs::Provider::Native) => Mode::Native,
            Err(_) => {
                say(&format!(
                    "RXE_PROVIDER={v:?} is not soft, auto or native; using the soft devices only"
                ));
                Mode::Soft
            }
        }
    })
}

/// The Debian multiarch directory name of this target.
#[cfg(target_arch = "x86_64")]
macro_rules! multiarch {
    () => {
        "x86_64-linux-gnu"
    };
}
#[cfg(target_arch = "aarch64")]
macro_rules! multiarch {
    () => {
        "aarch64-linux-gnu"
    };
}

/// Where the system's libibverbs is looked for when `RXE_LIBIBVERBS` does
/// not say: the multiarch directories (Debian, Ubuntu), then lib64 (Fedora,
/// SUSE), then the plain ones.
pub const SYSTEM_PATHS: &[&str] = &[
    concat!("/usr/lib/", multiarch!(), "/libibverbs.so.1"),
    concat!("/lib/", multiarch!(), "/libibverbs.so.1"),
    "/usr/lib64/libibverbs.so.1",
    "/lib64/libibverbs.so.1",
    "/usr/lib/libibverbs.so.1",
    "/usr/local/lib/libibverbs.so.1",
];

type GetList = unsafe extern "C" fn(*mut c_int) -> *mut *mut ibv_device;
type FreeList = unsafe extern "C" fn(*mut *mut ibv_device);

/// The system library, loaded.
pub struct Lib {
    pub path: String,
    handle: *mut c_void,
    get_device_list: GetList,
    free_device_list: FreeList,
    /// The verbs written by hand that ask the system library first
    /// (`device.rs`, `import.rs`, `context.rs`), if it has them.
    pub fork_init: Option<unsafe extern "C" fn() -> c_int>,
    pub is_fork_initialized: Option<unsafe extern "C" fn() -> ibv_fork_status>,
    pub import_device: Option<unsafe extern "C" fn(c_int) -> *mut ibv_context>,
    pub ack_async_event: Option<unsafe extern "C" fn(*mut ibv_async_event)>,
}

// SAFETY: the handle is never closed and only used with dlsym/dlvsym,
// which are thread-safe; the rest are function pointers.
unsafe impl Send for Lib {}
// SAFETY: as above.
unsafe impl Sync for Lib {}

impl Lib {
    /// The address of `name` at `version` in the namespace, else of
    /// `name` (a library built without versions, such as the tests' fake);
    /// 0 if it has neither.
    pub fn sym(&self, name: &str, version: &str) -> usize {
        sym(self.handle, name, version)
    }
}

/// [`Lib::sym`] on the handle of `dlmopen`.
fn sym(handle: *mut c_void, name: &str, version: &str) -> usize {
    let (Ok(n), Ok(v)) = (CString::new(name), CString::new(version)) else {
        return 0;
    };
    // SAFETY: a live handle from dlmopen; valid C strings.
    let p = unsafe { libc::dlvsym(handle, n.as_ptr(), v.as_ptr()) };
    if !p.is_null() {
        return p as usize;
    }
    // SAFETY: as above.
    unsafe { libc::dlsym(handle, n.as_ptr()) as usize }
}

/// The namespace's `__errno_location`, once loaded (0 before).
static NS_ERRNO: AtomicUsize = AtomicUsize::new(0);

/// Copies the calling thread's `errno` into the namespace's, before a
/// forwarded call (so a verb that leaves `errno` alone leaves it alone).
/// Called from the forwarding stub: no unwinding, no allocation.
pub extern "C" fn rxe_errno_in() {
    let f = NS_ERRNO.load(Ordering::Relaxed);
    if f != 0 {
        // SAFETY: f is the namespace's __errno_location (set once, never
        // unloaded); both return this thread's errno slot.
        unsafe {
            let ns: unsafe extern "C" fn() -> *mut c_int = std::mem::transmute(f);
            *ns() = *libc::__errno_location();
        }
    }
}

/// Copies the namespace's `errno` back into the program's after a
/// forwarded call.
pub extern "C" fn rxe_errno_out() {
    let f = NS_ERRNO.load(Ordering::Relaxed);
    if f != 0 {
        // SAFETY: as in rxe_errno_in.
        unsafe {
            let ns: unsafe extern "C" fn() -> *mut c_int = std::mem::transmute(f);
            *libc::__errno_location() = *ns();
        }
    }
}

/// `f()` with the program's `errno` bridged in and out.
pub fn bridged<R>(f: impl FnOnce() -> R) -> R {
    rxe_errno_in();
    let r = f();
    rxe_errno_out();
    r
}

// ------------------------------------------------------------ devices --

/// The native devices seen so far (the system library keeps a device's
/// `ibv_device` while a list or a context holds it, and gives the same
/// pointer again). Append-only, read without a lock by the stubs' check.
const MAX_NATIVE: usize = 256;
static NATIVE_DEVS: [AtomicUsize; MAX_NATIVE] = [const { AtomicUsize::new(0) }; MAX_NATIVE];
static NATIVE_N: AtomicUsize = AtomicUsize::new(0);
static NATIVE_ADD: Mutex<()> = Mutex::new(());

fn remember_device(p: usize) {
    let _g = NATIVE_ADD.lock();
    let n = NATIVE_N.load(Ordering::Relaxed);
    if n >= MAX_NATIVE || is_native_device(p) {
        return;
    }
    NATIVE_DEVS[n].store(p, Ordering::Relaxed);
    NATIVE_N.store(n + 1, Ordering::Release);
}

fn is_native_device(p: usize) -> bool {
    let n = NATIVE_N.load(Ordering::Acquire);
    p != 0
        && NATIVE_DEVS[..n]
            .iter()
            .any(|d| d.load(Ordering::Relaxed) == p)
}

/// Below this an address is NULL or a small integer, never an object.
const MIN_ADDR: usize = 4096;

/// What a forwarded verb's first argument is (the `via` of `exports.rs`).
pub const ARG_DEVICE: u32 = 1;
pub const ARG_CONTEXT: u32 = 2;
pub const ARG_OBJECT: u32 = 3;

/// Whether `p`, a verb's argument of the given kind, belongs to the system
/// library. Called from the forwarding stubs (only once it is loaded):
/// reads at most two words, takes no lock, cannot unwind.
///
/// A context's first field is its `ibv_device`; every other object's
/// (`ibv_pd`, `ibv_mr`, `ibv_cq`, `ibv_qp`, `ibv_srq`, `ibv_ah`,
/// `ibv_comp_channel`, `ibv_wq`, `ibv_dm`) is its `ibv_context`. Ours point
/// at our contexts and soft devices, so they stay here. Like libibverbs,
/// this follows the pointer a program passes: NULL (and anything below
/// 4096) stays here, where it gets EINVAL; another bad pointer may fault,
/// as it would in libibverbs.
pub extern "C" fn rxe_is_native(p: usize, kind: u32) -> u32 {
    let device_of_context = |c: usize| {
        if c < MIN_ADDR {
            0
        } else {
            // SAFETY: c is a context pointer the program passed (see above).
            unsafe { std::ptr::read(c as *const usize) }
        }
    };
    let dev = match kind {
        ARG_DEVICE => p,
        ARG_CONTEXT => device_of_context(p),
        ARG_OBJECT if p >= MIN_ADDR => {
            // SAFETY: p is an object pointer the program passed.
            device_of_context(unsafe { std::ptr::read(p as *const usize) })
        }
        _ => 0,
    };
    u32::from(is_native_device(dev))
}

/// Whether an object (anything whose first field is its context) is native.
pub fn is_native_object(p: *const c_void) -> bool {
    rxe_is_native(p as usize, ARG_OBJECT) != 0
}

// ------------------------------------------------------------ loading --

static LIB: OnceLock<Option<Lib>> = OnceLock::new();

/// What fills the exports' forwarding table from the library just loaded
/// (`exports::resolve_forwards`), handed over by `lib.rs` when the loader
/// maps this library; never set under `cargo test`, which has no exports.
static FORWARDS: OnceLock<fn(&Lib)> = OnceLock::new();

/// Takes the function that fills the forwarding table (once, before any
/// verb can load the system library).
pub fn set_forwarder(f: fn(&Lib)) {
    let _ = FORWARDS.set(f);
}

/// The system library if it is loaded (never loads it).
pub fn loaded() -> Option<&'static Lib> {
    LIB.get().and_then(Option::as_ref)
}

/// The system library, loaded on first use when `RXE_PROVIDER` asks for
/// native devices; `None` (after one line on standard error) when it
/// cannot be, and always `None` for `soft`.
pub fn lib() -> Option<&'static Lib> {
    if mode() == Mode::Soft {
        return None;
    }
    LIB.get_or_init(|| match load() {
        Ok(l) => Some(l),
        Err(why) => {
            say(&match mode() {
                Mode::Native => format!(
                    "RXE_PROVIDER=native: no native devices: {why}; ibv_get_device_list fails (ENOSYS)"
                ),
                _ => format!(
                    "RXE_PROVIDER=auto: no native devices: {why}; listing the soft devices only"
                ),
            });
            None
        }
    })
    .as_ref()
}

/// (st_dev, st_ino) of `path`, following links.
fn file_id(path: &CStr) -> Option<(u64, u64)> {
    // SAFETY: stat into a zeroed buffer with a valid C string.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { libc::stat(path.as_ptr(), &mut st) } != 0 {
        return None;
    }
    Some((st.st_dev, st.st_ino))
}

/// This library's own file, as the loader mapped it.
fn own_file_id() -> Option<(u64, u64)> {
    // SAFETY: dladdr on an address inside this library.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: as above; dli_fname is the loader's string.
    if unsafe { libc::dladdr(own_file_id as *const c_void, &mut info) } == 0
        || info.dli_fname.is_null()
    {
        return None;
    }
    // SAFETY: a NUL-terminated name owned by the loader.
    file_id(unsafe { CStr::from_ptr(info.dli_fname) })
}

fn dlerror_string() -> String {
    // SAFETY: dlerror returns a thread-local message or NULL.
    let e = unsafe { libc::dlerror() };
    if e.is_null() {
        "unknown error".into()
    } else {
        // SAFETY: NUL-terminated, valid until the next dl* call.
        unsafe { CStr::from_ptr(e) }.to_string_lossy().into_owned()
    }
}

/// The file to load: `RXE_LIBIBVERBS` (a path, or a file name looked up
/// in [`SYSTEM_PATHS`]' directories), else the first system path that
/// exists and is not this library.
fn choose_path(own: Option<(u64, u64)>) -> Result<String, String> {
    let is_own = |p: &str| {
        let c = CString::new(p).ok();
        own.is_some() && c.and_then(|c| file_id(&c)) == own
    };
    let exists = |p: &str| CString::new(p).ok().and_then(|c| file_id(&c)).is_some();
    if let Some(v) = std::env::var("RXE_LIBIBVERBS")
        .ok()
        .filter(|v| !v.is_empty())
    {
        let path = if v.contains('/') {
            v.clone()
        } else {
            SYSTEM_PATHS
                .iter()
                .map(|p| format!("{}/{v}", &p[..p.rfind('/').unwrap_or(0)]))
                .find(|p| exists(p) && !is_own(p))
                .ok_or_else(|| {
                    format!("RXE_LIBIBVERBS={v}: no such file in the system library directories")
                })?
        };
        if !exists(&path) {
            return Err(format!("RXE_LIBIBVERBS={v}: no such file"));
        }
        if is_own(&path) {
            return Err(format!(
                "RXE_LIBIBVERBS={v} is this library (rxe-rs's drop-in), not the system's libibverbs"
            ));
        }
        return Ok(path);
    }
    SYSTEM_PATHS
        .iter()
        .find(|p| exists(p) && !is_own(p))
        .map(|p| p.to_string())
        .ok_or_else(|| {
            format!(
                "no system libibverbs.so.1 (looked in {}; set RXE_LIBIBVERBS=PATH)",
                SYSTEM_PATHS.join(", ")
            )
        })
}

fn load() -> Result<Lib, String> {
    let path = choose_path(own_file_id())?;
    let c = CString::new(path.clone()).map_err(|_| format!("{path:?}: not a file name"))?;
    // SAFETY: a valid C string; a new namespace so that the providers the
    // library loads bind to it. The handle is never closed.
    let handle = unsafe { libc::dlmopen(libc::LM_ID_NEWLM, c.as_ptr(), libc::RTLD_NOW) };
    if handle.is_null() {
        return Err(format!("cannot load {path}: {}", dlerror_string()));
    }
    let get = sym(handle, "ibv_get_device_list", "IBVERBS_1.1");
    let free = sym(handle, "ibv_free_device_list", "IBVERBS_1.1");
    if get == 0 || free == 0 {
        return Err(format!(
            "{path} is not libibverbs (no ibv_get_device_list/ibv_free_device_list)"
        ));
    }
    // SAFETY (all transmutes below): each address is the exported function
    // of that name and version, whose C prototype in verbs.h is the type
    // of the field it goes to.
    let lib = unsafe {
        Lib {
            path: path.clone(),
            handle,
            get_device_list: std::mem::transmute::<usize, GetList>(get),
            free_device_list: std::mem::transmute::<usize, FreeList>(free),
            fork_init: opt(sym(handle, "ibv_fork_init", "IBVERBS_1.1")),
            is_fork_initialized: opt(sym(handle, "ibv_is_fork_initialized", "IBVERBS_1.13")),
            import_device: opt(sym(handle, "ibv_import_device", "IBVERBS_1.10")),
            ack_async_event: opt(sym(handle, "ibv_ack_async_event", "IBVERBS_1.1")),
        }
    };
    // SAFETY: dlsym with a live handle and a valid C string.
    let errno_fn = unsafe { libc::dlsym(handle, c"__errno_location".as_ptr()) };
    NS_ERRNO.store(errno_fn as usize, Ordering::Relaxed);
    if let Some(fill) = FORWARDS.get() {
        fill(&lib);
    }
    Ok(lib)
}

/// `Some(f)` for a non-zero address.
///
/// # Safety
/// `addr` must be 0 or a function of type `F`.
unsafe fn opt<F: Copy>(addr: usize) -> Option<F> {
    assert_eq!(std::mem::size_of::<F>(), std::mem::size_of::<usize>());
    // SAFETY: the caller's contract; F is a function pointer type.
    (addr != 0).then(|| unsafe { std::mem::transmute_copy::<usize, F>(&addr) })
}

// ------------------------------------------------------- device lists --

/// The system library's lists behind ours, by our list's address: freed
/// with ours.
fn kept_lists() -> &'static Mutex<HashMap<usize, usize>> {
    static K: OnceLock<Mutex<HashMap<usize, usize>>> = OnceLock::new();
    K.get_or_init(|| Mutex::new(HashMap::new()))
}

/// The system library's current device list: (its array, its devices).
/// `Err(errno)` if it is not loaded or its `ibv_get_device_list` failed.
pub fn device_list() -> Result<(usize, Vec<*mut ibv_device>), c_int> {
    let Some(l) = lib() else {
        return Err(libc::ENOSYS);
    };
    let mut n: c_int = 0;
    // SAFETY: the system library's ibv_get_device_list with a place for
    // the count; errno bridged.
    let list = bridged(|| unsafe { (l.get_device_list)(&mut n) });
    if list.is_null() {
        // SAFETY: this thread's errno.
        let e = unsafe { *libc::__errno_location() };
        note(
            "ibv_get_device_list",
            format!(
                "{}: ibv_get_device_list failed: {}",
                l.path,
                std::io::Error::from_raw_os_error(e)
            ),
        );
        return Err(e);
    }
    let mut devs = Vec::new();
    for i in 0..usize::try_from(n).unwrap_or(0) {
        // SAFETY: the list holds n devices and a NULL.
        let d = unsafe { *list.add(i) };
        if d.is_null() {
            break;
        }
        remember_device(d as usize);
        devs.push(d);
    }
    Ok((list as usize, devs))
}

/// Keeps the system library's `list` until the program frees ours.
pub fn keep_list(ours: *mut *mut ibv_device, list: usize) {
    kept_lists().lock().insert(ours as usize, list);
}

/// Frees the system library's list behind ours (if there is one).
pub fn free_list(ours: *mut *mut ibv_device) {
    let Some(list) = kept_lists().lock().remove(&(ours as usize)) else {
        return;
    };
    if let Some(l) = loaded() {
        // SAFETY: the list its ibv_get_device_list returned, freed once.
        bridged(|| unsafe { (l.free_device_list)(list as *mut *mut ibv_device) });
    }
}

/// `ibv_get_device_list` under `RXE_PROVIDER=native` when the system
/// library is missing: what libibverbs says without kernel support.
pub fn no_native_devices() -> *mut *mut ibv_device {
    set_errno(libc::ENOSYS);
    std::ptr::null_mut()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A device, a context pointing at it and an object pointing at the
    /// context, laid out as libibverbs' structs begin.
    #[test]
    fn objects_are_told_apart_by_their_device() {
        let native_dev = Box::new(0u64);
        let soft_dev = Box::new(0u64);
        let dev_addr = std::ptr::from_ref(&*native_dev) as usize;
        let soft_addr = std::ptr::from_ref(&*soft_dev) as usize;
        remember_device(dev_addr);
        remember_device(dev_addr);
        assert_eq!(NATIVE_N.load(Ordering::Relaxed), 1);
        let ctx = Box::new(dev_addr);
        let soft_ctx = Box::new(soft_addr);
        let obj = Box::new(std::ptr::from_ref(&*ctx) as usize);
        let soft_obj = Box::new(std::ptr::from_ref(&*soft_ctx) as usize);
        let addr = |b: &usize| std::ptr::from_ref(b) as usize;

        assert_eq!(rxe_is_native(dev_addr, ARG_DEVICE), 1);
        assert_eq!(rxe_is_native(soft_addr, ARG_DEVICE), 0);
        assert_eq!(rxe_is_native(addr(&ctx), ARG_CONTEXT), 1);
        assert_eq!(rxe_is_native(addr(&soft_ctx), ARG_CONTEXT), 0);
        assert_eq!(rxe_is_native(addr(&obj), ARG_OBJECT), 1);
        assert_eq!(rxe_is_native(addr(&soft_obj), ARG_OBJECT), 0);
        assert!(is_native_object(addr(&obj) as *const c_void));
        // NULL and small values are never followed.
        for kind in [ARG_DEVICE, ARG_CONTEXT, ARG_OBJECT] {
            assert_eq!(rxe_is_native(0, kind), 0);
            assert_eq!(rxe_is_native(8, kind), 0);
        }
        // An object whose context field is NULL.
        let orphan = Box::new(0usize);
        assert_eq!(rxe_is_native(addr(&orphan), ARG_OBJECT), 0);
    }
}
