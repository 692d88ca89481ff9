//! The device view: what the kernel would show of a real RDMA device under
//! `/sys/class/infiniband`, `/sys/class/infiniband_verbs` and
//! `/dev/infiniband`, for programs that look there before they use verbs.
//!
//! UCX keeps a device only if `/dev/infiniband/<dev_name>` is a character
//! device it may read and write, and takes the RoCE version of each GID from
//! `ports/N/gid_attrs/types/N`; Open MPI reads the device's driver link;
//! hwloc walks the class. A soft device has no kernel object, so `rxe exec`
//! writes a tree of plain files for its devices (`rxe exec` documents what
//! is in it) and preloads this library, which sends every file call on a
//! path under those three directories to the same path under the tree's
//! root (`RXE_DEVVIEW`). Every other path goes to libc untouched: the only
//! cost for them is a comparison of the path's first bytes.
//!
//! The calls covered are the ones libc exports that take a path and that
//! libc does not route through another exported one (`fopen` does not call
//! an interposed `open`, nor `realpath` an interposed `readlink`): the
//! `open` family with its fortified and 64-bit names, `fopen`, `stat`,
//! `lstat`, `fstatat`, `statx` and the `__xstat` names of binaries built
//! before glibc 2.33, `access`, `faccessat`, `opendir`, `scandir`,
//! `readlink(at)`, `realpath` and `__realpath_chk`, `glob`, and the
//! extended-attribute reads (`ls -l` asks for them). A name that
//! `realpath`, `glob` or `readlink` hands back comes back in the program's
//! terms (the tree's root taken off). Relative paths through a directory
//! descriptor (`openat(fd, "rel")`) pass through: the view's directories
//! opened with `opendir` already are the tree's.
//!
//! Statically linked programs call the kernel directly and see the real
//! directories; so do programs started without `LD_PRELOAD` (a setuid
//! program drops it).

#![allow(clippy::missing_safety_doc)]

use libc::{c_char, c_int, c_uint, c_void, size_t, ssize_t, FILE};
use std::ffi::{CStr, CString};
use std::sync::OnceLock;

/// The directories the view stands in for.
const PREFIXES: [&[u8]; 2] = [b"/sys/class/infiniband", b"/dev/infiniband"];

/// The next definition of `name` after this library (libc's), looked up once.
macro_rules! real {
    ($name:literal, $ty:ty) => {{
        static F: OnceLock<usize> = OnceLock::new();
        let f = *F.get_or_init(|| {
            // SAFETY: a NUL-terminated name.
            unsafe { libc::dlsym(libc::RTLD_NEXT, concat!($name, "\0").as_ptr().cast()) as usize }
        });
        if f == 0 {
            None
        } else {
            // SAFETY: the symbol of that name has this C signature.
            Some(unsafe { std::mem::transmute::<usize, $ty>(f) })
        }
    }};
}

/// The tree's root (`RXE_DEVVIEW`), without a trailing slash; `None` when
/// unset: the library then passes everything through.
fn root() -> Option<&'static [u8]> {
    static ROOT: OnceLock<Option<Vec<u8>>> = OnceLock::new();
    ROOT.get_or_init(|| {
        // (getenv: std::env would allocate a String on every first call
        // path alike; this runs once)
        // SAFETY: a NUL-terminated name; the result is NUL-terminated or NULL.
        let v = unsafe { libc::getenv(c"RXE_DEVVIEW".as_ptr()) };
        if v.is_null() {
            return None;
        }
        // SAFETY: getenv's result is a C string.
        let b = unsafe { CStr::from_ptr(v) }.to_bytes();
        let b = b.strip_suffix(b"/").unwrap_or(b);
        (!b.is_empty()).then(|| b.to_vec())
    })
    .as_deref()
}

/// Whether `p` names something in the view: one of [`PREFIXES`] itself or
/// below it (`/sys/class/infiniband_verbs` is below the first by its bytes,
/// which is what is wanted).
fn in_view(p: &[u8]) -> bool {
    PREFIXES
        .iter()
        .any(|pre| p.starts_with(pre) && matches!(p.get(pre.len()), None | Some(b'/') | Some(b'_')))
}

/// The path under the tree for a path in the view, or `None` (pass it on).
///
/// # Safety
/// `path` is NULL or a C string.
unsafe fn rewrite(path: *const c_char) -> Option<CString> {
    if path.is_null() {
        return None;
    }
    // SAFETY: the caller's contract.
    let p = unsafe { CStr::from_ptr(path) }.to_bytes();
    // the cheap test first: every path a program opens comes through here
    if p.len() < 15 || !(p.starts_with(b"/sys/class/inf") || p.starts_with(b"/dev/infinib")) {
        return None;
    }
    if !in_view(p) {
        return None;
    }
    let root = root()?;
    let mut v = Vec::with_capacity(root.len() + p.len() + 1);
    v.extend_from_slice(root);
    v.extend_from_slice(p);
    let tree = CString::new(v).ok()?;
    // A device node of the view is a link in the tree to the node that
    // stands for it (/dev/null); naming that node itself makes lstat and
    // statx without following links see a character device too.
    if p.starts_with(b"/dev/infiniband/") {
        if let Some(node) = device_node(&tree) {
            return Some(node);
        }
    }
    Some(tree)
}

/// The target of the link at `tree` (a device node of the view).
fn device_node(tree: &CStr) -> Option<CString> {
    let f = real!(
        "readlink",
        unsafe extern "C" fn(*const c_char, *mut c_char, size_t) -> ssize_t
    )?;
    let mut buf = [0u8; 256];
    // SAFETY: libc's readlink into a buffer of that size.
    let n = unsafe { f(tree.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    if n <= 0 || n as usize >= buf.len() || buf[0] != b'/' {
        return None;
    }
    CString::new(&buf[..n as usize]).ok()
}

/// `s` (a C string the program owns) with the tree's root taken off its
/// front, in place, when it starts with it.
///
/// # Safety
/// `s` is NULL or a writable C string.
unsafe fn strip_root(s: *mut c_char) {
    let Some(root) = root() else { return };
    if s.is_null() {
        return;
    }
    // SAFETY: the caller's contract.
    let b = unsafe { CStr::from_ptr(s) }.to_bytes();
    if b.starts_with(root) && b.get(root.len()) == Some(&b'/') {
        let n = b.len() - root.len();
        // SAFETY: moving the tail (and its NUL) to the front of the same string.
        unsafe { std::ptr::copy(s.add(root.len()), s, n + 1) };
    }
}

/// The path to hand on: the tree's, or the program's own.
macro_rules! pick {
    ($path:ident, $tmp:ident) => {
        // SAFETY: the program's path argument.
        let $tmp = unsafe { rewrite($path) };
        let $path = $tmp.as_ref().map_or($path, |c| c.as_ptr());
    };
}

/// A function whose first argument (or the one named) is a path, passed on
/// with the path rewritten. A missing libc function reads as ENOSYS.
macro_rules! path_fn {
    ($name:ident, $sym:literal, ($($a:ident: $t:ty),*), $path:ident, $ret:ty, $fail:expr) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name($($a: $t),*) -> $ret {
            pick!($path, tmp);
            match real!($sym, unsafe extern "C" fn($($t),*) -> $ret) {
                // SAFETY: libc's function with the program's arguments.
                Some(f) => unsafe { f($($a),*) },
                None => {
                    // SAFETY: errno is thread-local.
                    unsafe { *libc::__errno_location() = libc::ENOSYS };
                    $fail
                }
            }
        }
    };
}

// `open` is variadic in C; the mode is read as a third argument, which is
// where the x86-64 and AArch64 calling conventions put it either way.
path_fn!(open, "open", (path: *const c_char, flags: c_int, mode: c_uint), path, c_int, -1);
path_fn!(open64, "open64", (path: *const c_char, flags: c_int, mode: c_uint), path, c_int, -1);
path_fn!(__open_2, "__open_2", (path: *const c_char, flags: c_int), path, c_int, -1);
path_fn!(__open64_2, "__open64_2", (path: *const c_char, flags: c_int), path, c_int, -1);
path_fn!(openat, "openat", (dirfd: c_int, path: *const c_char, flags: c_int, mode: c_uint), path, c_int, -1);
path_fn!(openat64, "openat64", (dirfd: c_int, path: *const c_char, flags: c_int, mode: c_uint), path, c_int, -1);
path_fn!(__openat_2, "__openat_2", (dirfd: c_int, path: *const c_char, flags: c_int), path, c_int, -1);
path_fn!(__openat64_2, "__openat64_2", (dirfd: c_int, path: *const c_char, flags: c_int), path, c_int, -1);
path_fn!(fopen, "fopen", (path: *const c_char, mode: *const c_char), path, *mut FILE, std::ptr::null_mut());
path_fn!(fopen64, "fopen64", (path: *const c_char, mode: *const c_char), path, *mut FILE, std::ptr::null_mut());
path_fn!(stat, "stat", (path: *const c_char, buf: *mut c_void), path, c_int, -1);
path_fn!(stat64, "stat64", (path: *const c_char, buf: *mut c_void), path, c_int, -1);
path_fn!(lstat, "lstat", (path: *const c_char, buf: *mut c_void), path, c_int, -1);
path_fn!(lstat64, "lstat64", (path: *const c_char, buf: *mut c_void), path, c_int, -1);
path_fn!(fstatat, "fstatat", (dirfd: c_int, path: *const c_char, buf: *mut c_void, flags: c_int), path, c_int, -1);
path_fn!(fstatat64, "fstatat64", (dirfd: c_int, path: *const c_char, buf: *mut c_void, flags: c_int), path, c_int, -1);
path_fn!(__xstat, "__xstat", (ver: c_int, path: *const c_char, buf: *mut c_void), path, c_int, -1);
path_fn!(__xstat64, "__xstat64", (ver: c_int, path: *const c_char, buf: *mut c_void), path, c_int, -1);
path_fn!(__lxstat, "__lxstat", (ver: c_int, path: *const c_char, buf: *mut c_void), path, c_int, -1);
path_fn!(__lxstat64, "__lxstat64", (ver: c_int, path: *const c_char, buf: *mut c_void), path, c_int, -1);
path_fn!(__fxstatat, "__fxstatat", (ver: c_int, dirfd: c_int, path: *const c_char, buf: *mut c_void, flags: c_int), path, c_int, -1);
path_fn!(__fxstatat64, "__fxstatat64", (ver: c_int, dirfd: c_int, path: *const c_char, buf: *mut c_void, flags: c_int), path, c_int, -1);
path_fn!(statx, "statx", (dirfd: c_int, path: *const c_char, flags: c_int, mask: c_uint, buf: *mut c_void), path, c_int, -1);
path_fn!(access, "access", (path: *const c_char, mode: c_int), path, c_int, -1);
path_fn!(euidaccess, "euidaccess", (path: *const c_char, mode: c_int), path, c_int, -1);
path_fn!(eaccess, "eaccess", (path: *const c_char, mode: c_int), path, c_int, -1);
path_fn!(faccessat, "faccessat", (dirfd: c_int, path: *const c_char, mode: c_int, flags: c_int), path, c_int, -1);
path_fn!(opendir, "opendir", (path: *const c_char), path, *mut libc::DIR, std::ptr::null_mut());
path_fn!(scandir, "scandir", (path: *const c_char, list: *mut c_void, filter: *mut c_void, compar: *mut c_void), path, c_int, -1);
path_fn!(scandir64, "scandir64", (path: *const c_char, list: *mut c_void, filter: *mut c_void, compar: *mut c_void), path, c_int, -1);
path_fn!(getxattr, "getxattr", (path: *const c_char, name: *const c_char, value: *mut c_void, size: size_t), path, ssize_t, -1);
path_fn!(lgetxattr, "lgetxattr", (path: *const c_char, name: *const c_char, value: *mut c_void, size: size_t), path, ssize_t, -1);
path_fn!(listxattr, "listxattr", (path: *const c_char, list: *mut c_char, size: size_t), path, ssize_t, -1);
path_fn!(llistxattr, "llistxattr", (path: *const c_char, list: *mut c_char, size: size_t), path, ssize_t, -1);
path_fn!(readlink, "readlink", (path: *const c_char, buf: *mut c_char, size: size_t), path, ssize_t, -1);
path_fn!(readlinkat, "readlinkat", (dirfd: c_int, path: *const c_char, buf: *mut c_char, size: size_t), path, ssize_t, -1);

/// `realpath`, answering in the program's terms.
#[no_mangle]
pub unsafe extern "C" fn realpath(path: *const c_char, resolved: *mut c_char) -> *mut c_char {
    pick!(path, tmp);
    let Some(f) = real!(
        "realpath",
        unsafe extern "C" fn(*const c_char, *mut c_char) -> *mut c_char
    ) else {
        return std::ptr::null_mut();
    };
    // SAFETY: libc's function with the program's arguments.
    let r = unsafe { f(path, resolved) };
    if tmp.is_some() {
        // SAFETY: libc's result: the program's buffer or one it allocated.
        unsafe { strip_root(r) };
    }
    r
}

/// The fortified `realpath` (`-D_FORTIFY_SOURCE` builds, UCX's among them).
#[no_mangle]
pub unsafe extern "C" fn __realpath_chk(
    path: *const c_char,
    resolved: *mut c_char,
    resolvedlen: size_t,
) -> *mut c_char {
    pick!(path, tmp);
    let Some(f) = real!(
        "__realpath_chk",
        unsafe extern "C" fn(*const c_char, *mut c_char, size_t) -> *mut c_char
    ) else {
        return std::ptr::null_mut();
    };
    // SAFETY: libc's function with the program's arguments.
    let r = unsafe { f(path, resolved, resolvedlen) };
    if tmp.is_some() {
        // SAFETY: as in realpath.
        unsafe { strip_root(r) };
    }
    r
}

/// `glob` over a pattern in the view: the tree's matches, named as the
/// program asked.
#[no_mangle]
pub unsafe extern "C" fn glob(
    pattern: *const c_char,
    flags: c_int,
    errfunc: *mut c_void,
    pglob: *mut libc::glob_t,
) -> c_int {
    pick!(pattern, tmp);
    let Some(f) = real!(
        "glob",
        unsafe extern "C" fn(*const c_char, c_int, *mut c_void, *mut libc::glob_t) -> c_int
    ) else {
        return libc::GLOB_NOSPACE;
    };
    // SAFETY: libc's function with the program's arguments.
    let r = unsafe { f(pattern, flags, errfunc, pglob) };
    if tmp.is_some() && !pglob.is_null() {
        // SAFETY: glob filled gl_pathv with gl_offs NULLs, then gl_pathc names.
        unsafe {
            let g = &*pglob;
            for i in 0..g.gl_pathc {
                strip_root(*g.gl_pathv.add(g.gl_offs + i));
            }
        }
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_three_directories_are_in_the_view() {
        for p in [
            "/sys/class/infiniband",
            "/sys/class/infiniband/rxe0/ports/1/gid_attrs/types/0",
            "/sys/class/infiniband_verbs/uverbs0/ibdev",
            "/dev/infiniband",
            "/dev/infiniband/uverbs0",
        ] {
            assert!(in_view(p.as_bytes()), "{p}");
        }
        for p in [
            "/sys/class/net/lo/mtu",
            "/sys/class/infinibandX",
            "/dev/infinibandx/y",
            "/dev/null",
            "sys/class/infiniband",
            "/etc/passwd",
        ] {
            assert!(!in_view(p.as_bytes()), "{p}");
        }
    }
}
