//! What every entry point shares: no panic crosses into C, errors become
//! errno values, and `RXE_DEBUG=1` says why a call failed.

use rxe_core::engine::EngineError;
use rxe_verbs::Error;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::OnceLock;

/// Sets the calling thread's `errno`.
pub fn set_errno(e: i32) {
    // SAFETY: __errno_location returns the calling thread's errno slot.
    unsafe { *libc::__errno_location() = e };
}

/// Runs `f`; a panic becomes `on_panic` with `errno` EIO (and a line on
/// standard error: it is a bug of ours). First sends what a poll of the
/// program's deferred for its answer (`rxe_verbs::send_deferred`): a call
/// that is not the data path means the program turned to something else.
pub fn guard<R>(verb: &str, on_panic: R, f: impl FnOnce() -> R) -> R {
    rxe_verbs::send_deferred();
    guard_data(verb, on_panic, f)
}

/// [`guard`] for the data path (polls, posts, CQ arming), which leaves
/// deferred packets queued: a post sends them with its own, a poll after
/// its look.
pub fn guard_data<R>(verb: &str, on_panic: R, f: impl FnOnce() -> R) -> R {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(_) => {
            eprintln!("rxe-ibverbs: internal error in {verb}; please report it");
            set_errno(libc::EIO);
            on_panic
        }
    }
}

fn debug() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| std::env::var("RXE_DEBUG").is_ok_and(|v| !v.is_empty() && v != "0"))
}

/// Says on standard error, with `RXE_DEBUG=1`, why `verb` failed.
pub fn note(verb: &str, why: impl std::fmt::Display) {
    if debug() {
        eprintln!("rxe-ibverbs: {verb}: {why}");
    }
}

/// A failure: the errno value and why.
#[derive(Debug)]
pub struct Fail {
    pub errno: i32,
    pub why: String,
}

impl Fail {
    pub fn new(errno: i32, why: impl Into<String>) -> Fail {
        Fail {
            errno,
            why: why.into(),
        }
    }
    /// EINVAL naming the argument.
    pub fn inval(arg: &str, why: impl std::fmt::Display) -> Fail {
        Fail::new(libc::EINVAL, format!("{arg}: {why}"))
    }
    /// EOPNOTSUPP for what the stack does not do.
    pub fn unsupported(what: impl std::fmt::Display) -> Fail {
        Fail::new(libc::EOPNOTSUPP, format!("not supported: {what}"))
    }
}

impl From<Error> for Fail {
    fn from(e: Error) -> Fail {
        Fail::new(errno_of(&e), e.to_string())
    }
}

impl From<EngineError> for Fail {
    fn from(e: EngineError) -> Fail {
        Fail::new(engine_errno(&e), e.to_string())
    }
}

fn engine_errno(e: &EngineError) -> i32 {
    match e {
        EngineError::QueueFull { .. } | EngineError::TooMany { .. } => libc::ENOMEM,
        EngineError::Busy(_) => libc::EBUSY,
        // A region with bound windows: the kernel's rxe answers EBUSY too.
        EngineError::Mem(rxe_core::engine::MemError::InUse { .. }) => libc::EBUSY,
        _ => libc::EINVAL,
    }
}

/// The errno libibverbs would give for `e`.
pub fn errno_of(e: &Error) -> i32 {
    match e {
        Error::Engine(e) => engine_errno(e),
        Error::BadWorkRequest { source, .. } => engine_errno(source),
        Error::InvalidArgument { .. } | Error::WrongDevice(_) => libc::EINVAL,
        Error::Io { source, .. } => source.raw_os_error().unwrap_or(match source.kind() {
            std::io::ErrorKind::AddrInUse => libc::EADDRINUSE,
            std::io::ErrorKind::AddrNotAvailable => libc::EADDRNOTAVAIL,
            std::io::ErrorKind::PermissionDenied => libc::EACCES,
            std::io::ErrorKind::OutOfMemory => libc::ENOMEM,
            _ => libc::EIO,
        }),
        Error::Timeout(_) => libc::ETIMEDOUT,
        Error::Busy(_) => libc::EBUSY,
        Error::Unsupported { .. } => libc::EOPNOTSUPP,
        _ => libc::EINVAL,
    }
}

/// For verbs that return NULL and set errno.
pub fn ptr_result<T>(verb: &str, r: Result<*mut T, Fail>) -> *mut T {
    match r {
        Ok(p) => p,
        Err(f) => {
            note(verb, &f.why);
            set_errno(f.errno);
            std::ptr::null_mut()
        }
    }
}

/// For verbs that return 0 or an errno value (and set errno too, as
/// several providers do).
pub fn int_result(verb: &str, r: Result<(), Fail>) -> i32 {
    match r {
        Ok(()) => 0,
        Err(f) => {
            note(verb, &f.why);
            set_errno(f.errno);
            f.errno
        }
    }
}

/// For verbs that return 0, or -1 with errno.
pub fn minus_one_result(verb: &str, r: Result<(), Fail>) -> i32 {
    match r {
        Ok(()) => 0,
        Err(f) => {
            note(verb, &f.why);
            set_errno(f.errno);
            -1
        }
    }
}

/// `p` as a reference, or EINVAL naming `arg`.
///
/// # Safety
/// A non-null `p` must point to a valid `T` for the returned lifetime.
pub unsafe fn arg<'a, T>(p: *const T, name: &str) -> Result<&'a T, Fail> {
    // SAFETY: the caller's contract.
    unsafe { p.as_ref() }.ok_or_else(|| Fail::inval(name, "NULL"))
}

/// `p` as a mutable reference, or EINVAL naming `arg`.
///
/// # Safety
/// A non-null `p` must point to a valid `T`, not aliased, for the lifetime.
pub unsafe fn arg_mut<'a, T>(p: *mut T, name: &str) -> Result<&'a mut T, Fail> {
    // SAFETY: the caller's contract.
    unsafe { p.as_mut() }.ok_or_else(|| Fail::inval(name, "NULL"))
}
