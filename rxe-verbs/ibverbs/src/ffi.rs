//! What every entry point shares: no panic crosses into C, errors become
//! errno values, and `RXE_DEBUG=1` says why a call failed.
//!
//! Every function the program can call (each export, and each function
//! put in an ops table: `context->ops`, `verbs_context`, `ibv_cq_ex`,
//! `ibv_qp_ex`) is written inside [`entry!`], which runs its body under
//! [`guard`] or [`guard_data`] with the verb's name and the failure value
//! of its return type ([`OnPanic`]). `exports.rs` refuses to bind a
//! function written without it, and a test of this file finds any
//! `extern "C" fn` of the library outside it.

use rxe_core::engine::EngineError;
use rxe_verbs::Error;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::OnceLock;

/// Sets the calling thread's `errno`.
pub fn set_errno(e: i32) {
    // SAFETY: __errno_location returns the calling thread's errno slot.
    unsafe { *libc::__errno_location() = e };
}

/// What an entry point returns when its body panics, unless [`entry!`]
/// is given `on_panic`: the failure value of the return type.
pub trait OnPanic {
    fn on_panic() -> Self;
}

/// NULL (with errno EIO).
impl<T> OnPanic for *mut T {
    fn on_panic() -> Self {
        std::ptr::null_mut()
    }
}

/// NULL (with errno EIO).
impl<T> OnPanic for *const T {
    fn on_panic() -> Self {
        std::ptr::null()
    }
}

impl OnPanic for () {
    fn on_panic() -> Self {}
}

/// EIO, for the verbs that return an errno value; those that return -1
/// with errno (`ibv_poll_cq`, `ibv_get_cq_event`, the `rdma_*` calls)
/// say `on_panic = -1`.
impl OnPanic for std::ffi::c_int {
    fn on_panic() -> Self {
        libc::EIO
    }
}

/// 0: no value (a GUID, a port, a completion's field, an enum's first).
macro_rules! zero_on_panic {
    ($($t:ty),*) => {
        $(impl OnPanic for $t {
            fn on_panic() -> Self {
                0
            }
        })*
    };
}
zero_on_panic!(u8, u16, u32, u64);

/// An entry point of the library: a whole `unsafe extern "C" fn` whose
/// body runs inside [`guard`] (or [`guard_data`]), so that no panic
/// unwinds into C.
///
/// ```ignore
/// entry! {
///     [data;]                      // guard_data: the data path
///     [verb = "ibv_poll_cq";]      // the name, when it is not the fn's
///     [on_panic = -1;]             // else the return type's OnPanic
///     /// docs
///     pub unsafe extern "C" fn ibv_foo(args) -> R { body }
/// }
/// ```
///
/// The body sees `VERB`, the verb's name (the function's, unless `verb`
/// says), for its results and notes. `data;` leaves the packets a poll
/// deferred queued, as the data path does (polls, posts, CQ arming), and
/// so do the calls that only translate or refuse and reach no engine.
///
/// Next to the function, a hidden module of the same name (modules and
/// functions are in different namespaces) holds `GUARDED`, which
/// `exports.rs` names for each export: an export written without
/// `entry!` does not compile.
macro_rules! entry {
    (data; $($rest:tt)*) => {
        $crate::ffi::entry!(@verb [guard_data] $($rest)*);
    };
    (@verb [$g:ident] verb = $verb:literal; $($rest:tt)*) => {
        $crate::ffi::entry!(@panic [$g] [$verb] $($rest)*);
    };
    (@verb [$g:ident] $($rest:tt)*) => {
        $crate::ffi::entry!(@panic [$g] [] $($rest)*);
    };
    (@panic [$g:ident] [$($verb:literal)?] on_panic = $v:expr; $($rest:tt)*) => {
        $crate::ffi::entry!(@fn [$g] [$($verb)?] [$v] $($rest)*);
    };
    (@panic [$g:ident] [$($verb:literal)?] $($rest:tt)*) => {
        $crate::ffi::entry!(@fn [$g] [$($verb)?] [] $($rest)*);
    };
    (@fn [$g:ident] [$($verb:literal)?] [$($v:expr)?]
        $(#[$m:meta])*
        $vis:vis unsafe extern "C" fn $name:ident ($($args:tt)*) $(-> $ret:ty)? $body:block
    ) => {
        $(#[$m])*
        $vis unsafe extern "C" fn $name($($args)*) $(-> $ret)? {
            #[allow(dead_code)]
            const VERB: &str = $crate::ffi::entry!(@name [$($verb)?] $name);
            $crate::ffi::$g(VERB, $crate::ffi::entry!(@value [$($v)?] $($ret)?), || $body)
        }

        #[doc(hidden)]
        #[allow(clippy::module_inception)]
        $vis mod $name {
            /// The function of this name was written inside `entry!`.
            #[allow(dead_code)]
            pub const GUARDED: () = ();
        }
    };
    (@fn $($rest:tt)*) => {
        compile_error!(
            "entry!: [data;] [verb = \"name\";] [on_panic = value;] then one `unsafe extern \"C\" fn`"
        );
    };
    (@name [$verb:literal] $name:ident) => {
        $verb
    };
    (@name [] $name:ident) => {
        stringify!($name)
    };
    (@value [$v:expr] $($ret:ty)?) => {
        $v
    };
    (@value [] $ret:ty) => {
        <$ret as $crate::ffi::OnPanic>::on_panic()
    };
    (@value []) => {
        ()
    };
    ($($rest:tt)*) => {
        $crate::ffi::entry!(@verb [guard] $($rest)*);
    };
}
pub(crate) use entry;

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

#[cfg(test)]
mod tests {
    //! No function the program can call is written outside [`entry!`]:
    //! the exports are checked as they are bound (`exports.rs`), and this
    //! reads the sources for every `extern "C" fn` (ops tables too).

    use std::path::{Path, PathBuf};

    /// The `extern "C"` functions that are no entry point: the forwarding
    /// stubs' own code (`exports.rs`: naked, no Rust frame to guard) and
    /// what those stubs call between the program's call and the verb
    /// (`native.rs`: they must leave `errno` and the registers as they
    /// are, and cannot fail).
    const NOT_ENTRIES: &[(&str, &str)] = &[
        ("exports.rs", "forward_check"),
        ("exports.rs", "forward_call"),
        ("native.rs", "rxe_is_native"),
        ("native.rs", "rxe_errno_in"),
        ("native.rs", "rxe_errno_out"),
    ];

    fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                sources(&p, out);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push(p);
            }
        }
    }

    /// `text` with comments blanked and string literals emptied (except
    /// `"C"`, the ABI's name), so that brackets and words inside them do
    /// not count. Offsets are kept.
    fn code_of(text: &str) -> Vec<u8> {
        let b = text.as_bytes();
        let mut out = b.to_vec();
        let mut i = 0;
        let blank = |out: &mut Vec<u8>, from: usize, to: usize| {
            for c in &mut out[from..to] {
                if *c != b'\n' {
                    *c = b' ';
                }
            }
        };
        while i < b.len() {
            if b[i..].starts_with(b"//") {
                let end = b[i..]
                    .iter()
                    .position(|&c| c == b'\n')
                    .map_or(b.len(), |n| i + n);
                blank(&mut out, i, end);
                i = end;
            } else if b[i..].starts_with(b"/*") {
                let end = text[i..].find("*/").map_or(b.len(), |n| i + n + 2);
                blank(&mut out, i, end);
                i = end;
            } else if b[i] == b'"'
                || (b[i] == b'r'
                    && b.get(i + 1).is_some_and(|&c| c == b'"' || c == b'#')
                    && (i == 0 || !(b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_')))
            {
                let start = i;
                let mut hashes = 0;
                if b[i] == b'r' {
                    i += 1;
                    while b[i] == b'#' {
                        hashes += 1;
                        i += 1;
                    }
                }
                i += 1;
                let raw = b[start] == b'r';
                loop {
                    if !raw && b[i] == b'\\' {
                        i += 2;
                        continue;
                    }
                    if b[i] == b'"'
                        && b[i + 1..]
                            .iter()
                            .take(hashes)
                            .filter(|&&c| c == b'#')
                            .count()
                            == hashes
                    {
                        i += 1 + hashes;
                        break;
                    }
                    i += 1;
                }
                if &text[start..i] != "\"C\"" {
                    blank(&mut out, start + 1, i - 1);
                }
            } else if b[i] == b'\'' {
                // a char literal ('x', '\n', '\''), not a lifetime
                let close = if b.get(i + 1) == Some(&b'\\') {
                    b[i + 2..]
                        .iter()
                        .position(|&c| c == b'\'')
                        .map(|n| i + 2 + n)
                } else if b.get(i + 2) == Some(&b'\'') {
                    Some(i + 2)
                } else {
                    None
                };
                match close {
                    Some(c) => {
                        blank(&mut out, i + 1, c);
                        i = c + 1;
                    }
                    None => i += 1,
                }
            } else {
                i += 1;
            }
        }
        out
    }

    /// The byte ranges of the `entry!` invocations (and of the macro's own
    /// definition) in `code`.
    fn entry_spans(code: &str) -> Vec<(usize, usize)> {
        let mut spans = Vec::new();
        for pat in ["entry!", "macro_rules! entry"] {
            let mut from = 0;
            while let Some(n) = code[from..].find(pat) {
                let at = from + n;
                from = at + pat.len();
                let before = code[..at].bytes().last();
                if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == b'_') {
                    // another macro whose name ends in `entry`
                    continue;
                }
                let Some(open) = code[from..]
                    .find(|c: char| !c.is_whitespace())
                    .map(|k| from + k)
                else {
                    continue;
                };
                let (o, c) = match code.as_bytes()[open] {
                    b'{' => (b'{', b'}'),
                    b'(' => (b'(', b')'),
                    b'[' => (b'[', b']'),
                    _ => continue,
                };
                let mut depth = 0;
                for (k, &ch) in code.as_bytes()[open..].iter().enumerate() {
                    if ch == o {
                        depth += 1;
                    } else if ch == c {
                        depth -= 1;
                        if depth == 0 {
                            spans.push((open, open + k));
                            break;
                        }
                    }
                }
            }
        }
        spans
    }

    /// Every `extern "C" fn NAME` (or `extern fn NAME`) in `code`: its
    /// offset and name (`$name` inside a macro).
    fn extern_fns(code: &str) -> Vec<(usize, String)> {
        let mut out = Vec::new();
        let mut from = 0;
        while let Some(n) = code[from..].find("extern") {
            let at = from + n;
            from = at + 6;
            let word_start = at == 0 || {
                let c = code.as_bytes()[at - 1];
                !(c.is_ascii_alphanumeric() || c == b'_')
            };
            let mut rest = code[from..].trim_start();
            if !word_start {
                continue;
            }
            if let Some(r) = rest.strip_prefix("\"C\"") {
                rest = r.trim_start();
            }
            let Some(r) = rest.strip_prefix("fn") else {
                continue;
            };
            if !r.starts_with(char::is_whitespace) {
                continue; // `extern "C" fn(...)`: a type
            }
            let name: String = r
                .trim_start()
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == '$')
                .collect();
            if !name.is_empty() {
                out.push((at, name));
            }
        }
        out
    }

    fn unguarded(root: &Path) -> (usize, Vec<String>) {
        let mut files = Vec::new();
        sources(root, &mut files);
        let mut seen = 0;
        let mut bad = Vec::new();
        for f in files {
            let text = std::fs::read_to_string(&f).unwrap();
            let code = String::from_utf8(code_of(&text)).unwrap();
            let spans = entry_spans(&code);
            let file = f.file_name().unwrap().to_string_lossy().into_owned();
            for (at, name) in extern_fns(&code) {
                seen += 1;
                if spans.iter().any(|&(a, b)| a < at && at < b)
                    || NOT_ENTRIES.contains(&(file.as_str(), name.as_str()))
                {
                    continue;
                }
                let line = text[..at].matches('\n').count() + 1;
                bad.push(format!("{}:{line}: {name}", f.display()));
            }
        }
        (seen, bad)
    }

    #[test]
    fn every_extern_fn_is_inside_entry() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let (seen, bad) = unguarded(&root);
        // About 190 definitions (a macro's counts once): the scan found them.
        assert!(seen > 150, "only {seen} extern \"C\" functions found");
        assert!(
            bad.is_empty(),
            "extern \"C\" functions outside entry! (a panic in them unwinds into C):\n{}",
            bad.join("\n")
        );
    }

    #[test]
    fn the_scan_sees_an_unguarded_function() {
        let dir = std::env::temp_dir().join(format!("rxe-entry-scan-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("x.rs"),
            "// extern \"C\" fn in_a_comment() {}\n\
             const S: &str = \"extern \\\"C\\\" fn in_a_string() {\";\n\
             type T = unsafe extern \"C\" fn(i32);\n\
             entry! {\n    pub unsafe extern \"C\" fn guarded() -> i32 { let c = '}'; 0 }\n}\n\
             pub unsafe extern \"C\" fn bare(x: i32) -> i32 { x }\n",
        )
        .unwrap();
        let (seen, bad) = unguarded(&dir);
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(seen, 2, "{bad:?}");
        assert_eq!(bad.len(), 1, "{bad:?}");
        assert!(bad[0].ends_with(":7: bare"), "{bad:?}");
    }
}
