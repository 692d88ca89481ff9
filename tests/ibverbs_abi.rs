//! The drop-in libibverbs (`rxe-verbs/ibverbs`, package rxe-ibverbs) against
//! Debian bookworm's libibverbs1 44.0, at the binary level.
//!
//! Symbols ([`objdump -T`](objdump_dynsyms)):
//! * [`exports_match_the_debian_symbol_list`]: the defined dynamic symbols
//!   of our `libibverbs.so`, as (name, version, default or compat), are
//!   exactly `rxe-verbs/ibverbs/abi/libibverbs1-44.0.symbols`;
//! * [`soname_is_libibverbs_so_1`];
//! * [`symbol_list_is_what_debian_ships`]: the list is what objdump says of
//!   Debian's own `/usr/lib/x86_64-linux-gnu/libibverbs.so.1` (when
//!   installed), so it cannot go stale;
//! * [`debian_providers_find_their_imports`]: every `IBVERBS_*` symbol that
//!   Debian's provider libraries (`libibverbs/*.so`, `libmlx5.so.1`) import
//!   is exported by ours with that version;
//! * [`debian_programs_link_against_ours`]: `ldd -r` of `ibv_devinfo` (and
//!   `ib_write_bw`, when installed) with ours first on `LD_LIBRARY_PATH`
//!   finds ours and no undefined symbol.
//!
//! Layouts ([`layouts_match_the_c_headers`]): `rxe-verbs/sys/src/sys.rs`
//! (crate rxe-ibverbs-sys, the drop-in's `sys`) is bindgen output
//! whose compile-time assertions (`["Size of ibv_qp"][size_of::<ibv_qp>() -
//! 160usize]`, alignment, field offsets) state the Rust layout, since it
//! compiles. Every such number of an rdma-core type (`ibv_*`, `verbs_*`,
//! `_ibv_*`, `_compat_ibv_*`, `ib_uverbs_*`, `ib_user_*`, and librdmacm's
//! `rdma_*`: `rdma_cm_id`, `rdma_cm_event`, `rdma_addr`, ...) is compared
//! with `sizeof`, `_Alignof` and `offsetof` from a C program compiled against
//! `abi/headers.h` (Debian's `<infiniband/verbs.h>`, `<rdma/rdma_cma.h>` and
//! friends). Bindgen's
//! anonymous types (`X__bindgen_ty_N`) cannot be named in C, so they are
//! reached from their named root instead: a field of an anonymous member
//! (`__bindgen_anon_N`, like `ibv_wc`'s `imm_data`) is checked as
//! `offsetof(struct X, field)` against the summed Rust offsets, and an
//! anonymous type behind a named member (`ibv_send_wr::wr`) gets its size and
//! alignment checked through `__typeof__(((struct ibv_send_wr *)0)->wr)`.
//! Bindgen asserts no offset for an anonymous member itself, so the test
//! works it out with the `repr(C)` rule, which it first confirms on every
//! asserted offset and size of the type. glibc types bindgen pulled in
//! (`timespec`, `pthread_*`) are not checked; every other assertion is, and
//! the test fails if one is left over.
//!
//! Needs `objdump` and `ldd` (binutils, libc-bin), `cc` (gcc) and Debian's
//! libibverbs-dev and librdmacm-dev headers, which `bash tests/setup.sh` installs. Without
//! them the tests fail with instructions, unless `RXE_SKIP_IBVERBS_TESTS=1`
//! is set: then they print why and pass.

use rxe_tests::tests_dir;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};

const DEBIAN_LIBDIR: &str = "/usr/lib/x86_64-linux-gnu";

// ---------------------------------------------------------------------------
// Prerequisites, the library under test, scratch directories
// ---------------------------------------------------------------------------

/// `true` if the tools and files these tests need are all there; `false`
/// (after saying why) if some are missing and `RXE_SKIP_IBVERBS_TESTS=1`
/// asks to skip. Panics with instructions otherwise.
fn have(tools: &[&str], files: &[&str]) -> bool {
    let mut missing = Vec::new();
    for tool in tools {
        let ok = Command::new(tool)
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            missing.push(format!("the `{tool}` command"));
        }
    }
    for file in files {
        if !Path::new(file).exists() {
            missing.push((*file).to_string());
        }
    }
    if missing.is_empty() {
        return true;
    }
    let problem = format!("missing: {}", missing.join(", "));
    if std::env::var("RXE_SKIP_IBVERBS_TESTS").as_deref() == Ok("1") {
        eprintln!("note: RXE_SKIP_IBVERBS_TESTS=1, skipping this libibverbs ABI test: {problem}");
        return false;
    }
    panic!(
        "{problem}\n\n\
         The libibverbs ABI tests need objdump and ldd (binutils, libc-bin), cc (gcc)\n\
         and Debian's libibverbs-dev, ibverbs-utils and perftest:\n\
         \x20   bash tests/setup.sh\n\
         `bash tests/run.sh`, the README's test command, runs it before the tests.\n\
         Set RXE_SKIP_IBVERBS_TESTS=1 to skip these tests."
    );
}

/// Our `libibverbs.so`, built on first use.
fn our_lib() -> &'static Path {
    rxe_tests::dropin_library()
}

fn abi_dir() -> PathBuf {
    tests_dir()
        .parent()
        .unwrap()
        .join("rxe-verbs")
        .join("ibverbs")
        .join("abi")
}

/// A fresh directory under the system's temporary directory, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> TempDir {
        static N: AtomicU32 = AtomicU32::new(0);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let dir = std::env::temp_dir().join(format!(
            "rxe-ibverbs-abi-{tag}-{}-{}-{nanos}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("mkdir {}: {e}", dir.display()));
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Runs a command to completion; panics unless it succeeds. Returns stdout.
fn run(cmd: &mut Command) -> String {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?}: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

// ---------------------------------------------------------------------------
// Dynamic symbols
// ---------------------------------------------------------------------------

/// One line of `objdump -T`.
#[derive(Debug, Clone)]
struct DynSym {
    name: String,
    /// `None` for an unversioned symbol (`Base` or no version column).
    version: Option<String>,
    /// A non-default version: objdump puts it in parentheses.
    compat: bool,
    section: String,
}

impl DynSym {
    fn defined(&self) -> bool {
        self.section != "*UND*"
    }
}

/// `objdump -T FILE`, parsed. A line is `ADDR FLAGS SECTION\tSIZE VERSION
/// [VISIBILITY] NAME`, the version `(V)` when it is not the default one.
fn objdump_dynsyms(file: &Path) -> Vec<DynSym> {
    let text = run(Command::new("objdump").arg("-T").arg(file));
    let mut syms = Vec::new();
    let mut in_table = false;
    for line in text.lines() {
        if line.starts_with("DYNAMIC SYMBOL TABLE") {
            in_table = true;
            continue;
        }
        if !in_table || line.trim().is_empty() {
            continue;
        }
        let (left, right) = line
            .split_once('\t')
            .unwrap_or_else(|| panic!("objdump -T {}: unexpected line {line:?}", file.display()));
        let section = left.split_whitespace().last().unwrap().to_string();
        let words: Vec<&str> = right.split_whitespace().collect();
        assert!(
            words.len() >= 2,
            "objdump -T {}: unexpected line {line:?}",
            file.display()
        );
        let name = words[words.len() - 1].to_string();
        let (version, compat) = if words.len() == 2 {
            (None, false)
        } else {
            let v = words[1];
            match v.strip_prefix('(').and_then(|v| v.strip_suffix(')')) {
                Some(inner) => (Some(inner.to_string()), true),
                None if v == "Base" => (None, false),
                None => (Some(v.to_string()), false),
            }
        };
        syms.push(DynSym {
            name,
            version,
            compat,
            section,
        });
    }
    assert!(
        !syms.is_empty(),
        "objdump -T {} listed no symbols:\n{text}",
        file.display()
    );
    syms
}

type Export = (String, String, &'static str);

/// The defined, versioned exports of a library as (name, version,
/// `default`/`compat`), the version-node entries (`IBVERBS_1.1` at
/// version `IBVERBS_1.1`, `*ABS*`) included: tools that list a library's
/// versioned symbols count them.
fn exports(file: &Path) -> BTreeSet<Export> {
    objdump_dynsyms(file)
        .into_iter()
        .filter(|s| s.defined())
        .map(|s| {
            let version = s.version.unwrap_or_else(|| "Base".to_string());
            (s.name, version, if s.compat { "compat" } else { "default" })
        })
        .collect()
}

/// `abi/libibverbs1-44.0.symbols`: `NAME VERSION default|compat` lines.
fn symbol_list() -> BTreeSet<Export> {
    let path = abi_dir().join("libibverbs1-44.0.symbols");
    let text =
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    let mut set = BTreeSet::new();
    for (n, line) in text.lines().enumerate() {
        if line.trim().is_empty() || line.starts_with('#') {
            continue;
        }
        let w: Vec<&str> = line.split_whitespace().collect();
        let kind = match w.as_slice() {
            [_, _, "default"] => "default",
            [_, _, "compat"] => "compat",
            _ => panic!(
                "{}:{}: not `NAME VERSION default|compat`: {line:?}",
                path.display(),
                n + 1
            ),
        };
        assert!(
            set.insert((w[0].to_string(), w[1].to_string(), kind)),
            "{}:{}: listed twice: {line:?}",
            path.display(),
            n + 1
        );
    }
    set
}

/// Panics listing what `want` has that `got` lacks and the other way round.
fn assert_same_exports(want: &BTreeSet<Export>, got: &BTreeSet<Export>, what: &str) {
    let missing: Vec<_> = want.difference(got).collect();
    let extra: Vec<_> = got.difference(want).collect();
    if missing.is_empty() && extra.is_empty() {
        return;
    }
    let mut msg = format!(
        "{what}: {} missing, {} extra (of {} expected)\n",
        missing.len(),
        extra.len(),
        want.len()
    );
    for (n, v, k) in &missing {
        writeln!(msg, "  missing: {n} {v} {k}").unwrap();
    }
    for (n, v, k) in &extra {
        writeln!(msg, "  extra:   {n} {v} {k}").unwrap();
    }
    panic!("{msg}");
}

#[test]
fn exports_match_the_debian_symbol_list() {
    if !have(&["objdump"], &[]) {
        return;
    }
    let want = symbol_list();
    assert!(want.len() > 150, "only {} symbols listed", want.len());
    // The same object is the drop-in librdmacm: its RDMACM_* exports are
    // checked by tests/rdmacm_abi.rs.
    let got: BTreeSet<Export> = exports(our_lib())
        .into_iter()
        .filter(|(_, v, _)| !v.starts_with("RDMACM_"))
        .collect();
    assert_same_exports(
        &want,
        &got,
        &format!(
            "exports of {} vs abi/libibverbs1-44.0.symbols",
            our_lib().display()
        ),
    );
    eprintln!("{} exported symbols match the list", got.len());
}

/// The `SONAME` of a shared library, from `objdump -p`.
fn soname(file: &Path) -> Option<String> {
    run(Command::new("objdump").arg("-p").arg(file))
        .lines()
        .find_map(|l| match l.split_whitespace().collect::<Vec<_>>()[..] {
            ["SONAME", name] => Some(name.to_string()),
            _ => None,
        })
}

#[test]
fn soname_is_libibverbs_so_1() {
    if !have(&["objdump"], &[]) {
        return;
    }
    assert_eq!(soname(our_lib()).as_deref(), Some("libibverbs.so.1"));
}

#[test]
fn symbol_list_is_what_debian_ships() {
    if !have(&["objdump"], &[]) {
        return;
    }
    let debian = Path::new(DEBIAN_LIBDIR).join("libibverbs.so.1");
    if !debian.exists() {
        eprintln!(
            "note: {} is not installed; the symbol list is not compared with it",
            debian.display()
        );
        return;
    }
    let real = std::fs::canonicalize(&debian).unwrap();
    assert_ne!(
        real,
        std::fs::canonicalize(our_lib()).unwrap(),
        "{} is our own library, not Debian's",
        debian.display()
    );
    assert_same_exports(
        &symbol_list(),
        &exports(&debian),
        &format!(
            "abi/libibverbs1-44.0.symbols vs Debian's {} (= {})",
            debian.display(),
            real.display()
        ),
    );
}

#[test]
fn debian_providers_find_their_imports() {
    if !have(&["objdump"], &[]) {
        return;
    }
    let mut providers: Vec<PathBuf> =
        std::fs::read_dir(Path::new(DEBIAN_LIBDIR).join("libibverbs"))
            .map(|d| {
                d.filter_map(|e| e.ok().map(|e| e.path()))
                    .filter(|p| p.extension().is_some_and(|x| x == "so"))
                    .collect()
            })
            .unwrap_or_default();
    providers.sort();
    let mlx5 = Path::new(DEBIAN_LIBDIR).join("libmlx5.so.1");
    if mlx5.exists() {
        providers.push(mlx5);
    }
    if providers.is_empty() {
        eprintln!("note: no Debian provider libraries installed (ibverbs-providers)");
        return;
    }
    let ours: BTreeSet<(String, String)> = exports(our_lib())
        .into_iter()
        .map(|(n, v, _)| (n, v))
        .collect();
    let mut missing = BTreeMap::<(String, String), Vec<String>>::new();
    let mut imports = 0;
    for p in &providers {
        for s in objdump_dynsyms(p) {
            if s.defined() {
                continue;
            }
            let Some(v) = s.version.filter(|v| v.starts_with("IBVERBS_")) else {
                continue;
            };
            imports += 1;
            if !ours.contains(&(s.name.clone(), v.clone())) {
                let file = p.file_name().unwrap().to_string_lossy().into_owned();
                missing.entry((s.name, v)).or_default().push(file);
            }
        }
    }
    let mut msg = String::new();
    for ((n, v), who) in &missing {
        writeln!(msg, "  {n}@{v} (imported by {})", who.join(", ")).unwrap();
    }
    assert!(
        missing.is_empty(),
        "{} symbols Debian's providers import are not exported by ours:\n{msg}",
        missing.len()
    );
    assert!(imports > 0, "the providers import nothing from libibverbs?");
    eprintln!(
        "{imports} IBVERBS_* imports of {} provider libraries all resolve",
        providers.len()
    );
}

#[test]
fn debian_programs_link_against_ours() {
    if !have(&["objdump", "ldd"], &["/usr/bin/ibv_devinfo"]) {
        return;
    }
    let dir = TempDir::new("ldd");
    let link = dir.0.join("libibverbs.so.1");
    std::os::unix::fs::symlink(our_lib(), &link).unwrap();
    let mut programs = vec![PathBuf::from("/usr/bin/ibv_devinfo")];
    if Path::new("/usr/bin/ib_write_bw").exists() {
        programs.push("/usr/bin/ib_write_bw".into());
    } else {
        eprintln!("note: /usr/bin/ib_write_bw (perftest) is not installed; not checked");
    }
    for prog in &programs {
        let out = Command::new("ldd")
            .arg("-r")
            .arg(prog)
            .env("LD_LIBRARY_PATH", &dir.0)
            .output()
            .unwrap_or_else(|e| panic!("cannot run ldd: {e}"));
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            out.status.success(),
            "ldd -r {}: {}\n{text}",
            prog.display(),
            out.status
        );
        for bad in ["undefined symbol", "not defined in file", "not found"] {
            assert!(
                !text.contains(bad),
                "ldd -r {} over ours: {bad:?}\n{text}",
                prog.display()
            );
        }
        let resolved = text
            .lines()
            .find_map(|l| {
                let (name, rest) = l.trim().split_once(" => ")?;
                (name == "libibverbs.so.1").then(|| rest.split(" (").next().unwrap().to_string())
            })
            .unwrap_or_else(|| panic!("ldd -r {}: no libibverbs.so.1\n{text}", prog.display()));
        assert_eq!(
            Path::new(&resolved),
            link,
            "ldd -r {}: libibverbs.so.1 is not ours\n{text}",
            prog.display()
        );
    }
}

// ---------------------------------------------------------------------------
// Layouts: rxe-verbs/sys/src/sys.rs's assertions against the C headers
// ---------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum What {
    Size,
    Align,
    Offset,
}

/// One of bindgen's layout assertions in sys.rs.
#[derive(Debug)]
struct Assertion {
    what: What,
    ty: String,
    field: Option<String>,
    value: u64,
}

/// Every `["Size of T"][size_of::<T>() - Nusize]`, `["Alignment of T"]...`
/// and `["Offset of field: T::f"][offset_of!(T, f) - Nusize]` in `text`,
/// whatever the line wrapping. Panics unless each `size_of::<`,
/// `align_of::<` and `offset_of!(` of the file was understood.
fn parse_assertions(text: &str) -> Vec<Assertion> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find("[\"") {
        rest = &rest[at + 2..];
        let Some(end) = rest.find("\"]") else { break };
        let label = &rest[..end];
        let (what, ty, field) = if let Some(t) = label.strip_prefix("Size of ") {
            (What::Size, t, None)
        } else if let Some(t) = label.strip_prefix("Alignment of ") {
            (What::Align, t, None)
        } else if let Some(tf) = label.strip_prefix("Offset of field: ") {
            let (t, f) = tf.split_once("::").expect("Offset of field: T::f");
            (What::Offset, t, Some(f.to_string()))
        } else {
            continue;
        };
        rest = rest[end + 2..].trim_start();
        let expr_end = rest.find(']').expect("]");
        assert!(
            rest.starts_with('['),
            "after {label:?}: {:?}",
            &rest[..expr_end]
        );
        let expr: String = rest[1..expr_end].split_whitespace().collect();
        rest = &rest[expr_end + 1..];
        let want_head = match (what, &field) {
            (What::Size, _) => format!("::core::mem::size_of::<{ty}>()-"),
            (What::Align, _) => format!("::core::mem::align_of::<{ty}>()-"),
            (What::Offset, Some(f)) => format!("::core::mem::offset_of!({ty},{f})-"),
            (What::Offset, None) => unreachable!(),
        };
        let value = expr
            .strip_prefix(&want_head)
            .and_then(|n| n.strip_suffix("usize"))
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("{label:?}: cannot read {expr:?}"));
        out.push(Assertion {
            what,
            ty: ty.to_string(),
            field,
            value,
        });
    }
    let uses = ["size_of::<", "align_of::<", "offset_of!("]
        .iter()
        .map(|p| text.matches(p).count())
        .sum::<usize>();
    assert_eq!(
        out.len(),
        uses,
        "sys.rs: parsed {} of {uses} layout assertions",
        out.len()
    );
    out
}

/// A `pub struct` or `pub union` of sys.rs: its keyword, its `#[repr]` and
/// its fields (name, Rust type) in declaration order.
#[derive(Debug)]
struct RustType {
    union: bool,
    repr: String,
    fields: Vec<(String, String)>,
}

/// The structs and unions of sys.rs, and its `pub type A = B;` aliases.
fn parse_types(text: &str) -> (HashMap<String, RustType>, HashMap<String, String>) {
    let mut types = HashMap::new();
    let mut aliases = HashMap::new();
    let mut repr = String::new();
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        if line.starts_with("#[repr(") {
            repr = line.to_string();
            continue;
        }
        if let Some(alias) = line.strip_prefix("pub type ") {
            if let Some((a, b)) = alias.strip_suffix(';').and_then(|s| s.split_once(" = ")) {
                aliases.insert(a.to_string(), b.to_string());
            }
            continue;
        }
        let (union, rest) = if let Some(r) = line.strip_prefix("pub struct ") {
            (false, r)
        } else if let Some(r) = line.strip_prefix("pub union ") {
            (true, r)
        } else {
            continue;
        };
        let Some(name) = rest.strip_suffix(" {") else {
            continue; // `pub struct X;` or a tuple struct: no named fields
        };
        let mut body = String::new();
        for l in lines.by_ref() {
            if l == "}" {
                break;
            }
            body.push(' ');
            body.push_str(l.trim());
        }
        let fields = body
            .split(" pub ")
            .filter_map(|f| {
                let (n, t) = f.split_once(':')?;
                Some((
                    n.trim().to_string(),
                    t.trim().trim_end_matches(',').to_string(),
                ))
            })
            .collect();
        let repr = std::mem::take(&mut repr);
        types.insert(
            name.to_string(),
            RustType {
                union,
                repr,
                fields,
            },
        );
    }
    (types, aliases)
}

/// The C name of a field bindgen renamed because it is a Rust keyword.
fn c_field(rust: &str) -> &str {
    const KEYWORDS: &[&str] = &[
        "abstract", "as", "async", "await", "become", "box", "break", "const", "continue", "crate",
        "do", "dyn", "else", "enum", "extern", "false", "final", "fn", "for", "gen", "if", "impl",
        "in", "let", "loop", "macro", "match", "mod", "move", "mut", "override", "priv", "pub",
        "ref", "return", "self", "static", "struct", "super", "trait", "true", "try", "type",
        "typeof", "unsafe", "unsized", "use", "virtual", "where", "while", "yield",
    ];
    match rust.strip_suffix('_') {
        Some(k) if KEYWORDS.contains(&k) => k,
        _ => rust,
    }
}

/// The rdma-core types whose layout is checked (libibverbs' and, `rdma_*`,
/// librdmacm's `<rdma/rdma_cma.h>`); the rest of sys.rs is glibc
/// (`timespec`, `pthread_mutex_t`, `sockaddr_in6`, ...), pulled in by bindgen.
fn rdma_core_type(name: &str) -> bool {
    [
        "ibv_",
        "verbs_",
        "_ibv_",
        "_compat_ibv_",
        "ib_uverbs_",
        "ib_user_",
        "rdma_",
    ]
    .iter()
    .any(|p| name.starts_with(p))
}

/// Types whose layout assertions cannot be expressed in C, with the reason.
/// Empty today: every rdma-core type of sys.rs is a `struct`/`union` tag of
/// the headers. A type listed here must really be unnameable (for example a
/// typedef of an anonymous struct), never a mismatch.
const UNNAMEABLE: &[(&str, &str)] = &[];

/// One number to compare: a C constant expression and what Rust says.
#[derive(Debug)]
struct Check {
    c_expr: String,
    rust: u64,
    /// Which sys.rs assertion(s) it stands for, for the failure message.
    label: String,
}

/// The walk from named root types down through bindgen's anonymous types.
struct Layouts<'a> {
    asserts: &'a [Assertion],
    types: &'a HashMap<String, RustType>,
    aliases: &'a HashMap<String, String>,
    /// Assertion index per (type, what, field).
    index: HashMap<(&'a str, What, Option<&'a str>), usize>,
    used: Vec<bool>,
    checks: Vec<Check>,
    skipped: BTreeMap<&'static str, usize>,
}

impl<'a> Layouts<'a> {
    fn new(
        asserts: &'a [Assertion],
        types: &'a HashMap<String, RustType>,
        aliases: &'a HashMap<String, String>,
    ) -> Self {
        let mut index = HashMap::new();
        for (i, a) in asserts.iter().enumerate() {
            let old = index.insert((a.ty.as_str(), a.what, a.field.as_deref()), i);
            assert!(old.is_none(), "sys.rs asserts twice: {a:?}");
        }
        Layouts {
            asserts,
            types,
            aliases,
            index,
            used: vec![false; asserts.len()],
            checks: Vec::new(),
            skipped: BTreeMap::new(),
        }
    }

    /// The asserted number for (type, what, field), marked as used.
    fn take(&mut self, ty: &str, what: What, field: Option<&str>) -> Option<u64> {
        let i = *self.index.get(&(ty, what, field))?;
        self.used[i] = true;
        Some(self.asserts[i].value)
    }

    fn peek(&self, ty: &str, what: What) -> Option<u64> {
        self.index
            .get(&(ty, what, None))
            .map(|&i| self.asserts[i].value)
    }

    fn skip(&mut self, why: &'static str, ty: &str, what: What, field: Option<&str>) {
        if let Some(&i) = self.index.get(&(ty, what, field)) {
            self.skip_index(why, i);
        }
    }

    fn skip_index(&mut self, why: &'static str, i: usize) {
        self.used[i] = true;
        *self.skipped.entry(why).or_default() += 1;
    }

    /// Size and alignment of a Rust field type of sys.rs (x86_64), for the
    /// offsets bindgen does not assert: those of anonymous members.
    fn size_align(&self, ty: &str) -> (u64, u64) {
        let ty = ty.trim();
        if let Some(inner) = ty.strip_prefix('[').and_then(|t| t.strip_suffix(']')) {
            let (elem, n) = inner.rsplit_once(';').expect("[T; N]");
            let n: u64 = n
                .trim()
                .trim_end_matches("usize")
                .parse()
                .expect("array length");
            let (s, a) = self.size_align(elem);
            return (s * n, a);
        }
        let option = ty.trim_start_matches("::core::option::");
        if ty.starts_with('*') || option.starts_with("Option<") && option.contains("fn(") {
            return (8, 8);
        }
        if let Some(inner) = ty
            .strip_prefix("__BindgenBitfieldUnit<")
            .and_then(|t| t.strip_suffix('>'))
        {
            return (self.size_align(inner).0, 1);
        }
        if let Some(inner) = ty
            .strip_prefix("__IncompleteArrayField<")
            .and_then(|t| t.strip_suffix('>'))
        {
            return (0, self.size_align(inner).1);
        }
        let prim = match ty.trim_start_matches("core::ffi::") {
            "u8" | "i8" | "c_char" | "c_schar" | "c_uchar" | "bool" => Some(1),
            "u16" | "i16" | "c_short" | "c_ushort" => Some(2),
            "u32" | "i32" | "f32" | "c_int" | "c_uint" | "c_float" => Some(4),
            "u64" | "i64" | "f64" | "usize" | "isize" | "c_long" | "c_ulong" | "c_longlong"
            | "c_ulonglong" | "c_double" => Some(8),
            _ => None,
        };
        if let Some(n) = prim {
            return (n, n);
        }
        if let Some(target) = self.aliases.get(ty) {
            return self.size_align(target);
        }
        match (self.peek(ty, What::Size), self.peek(ty, What::Align)) {
            (Some(s), Some(a)) => (s, a),
            _ => panic!("sys.rs: cannot tell the size of field type {ty:?}"),
        }
    }

    fn c_type(&self, ty: &str) -> String {
        let t = self
            .types
            .get(ty)
            .unwrap_or_else(|| panic!("sys.rs: no pub struct/union {ty}"));
        format!("{} {ty}", if t.union { "union" } else { "struct" })
    }

    fn root(&mut self, root: &str) {
        let c_root = self.c_type(root);
        for (what, c) in [(What::Size, "sizeof"), (What::Align, "_Alignof")] {
            if let Some(v) = self.take(root, what, None) {
                self.checks.push(Check {
                    c_expr: format!("{c}({c_root})"),
                    rust: v,
                    label: format!("{what:?} of {root}"),
                });
            }
        }
        self.fields(root, &c_root, root, "", 0);
    }

    /// The fields of `ty`, which sits at `base` in the root type `c_root`,
    /// reached by the C member path `path` (empty or ending in '.').
    ///
    /// Bindgen asserts no offset for an anonymous member (`__bindgen_anon_N`);
    /// it is computed here with C's (= `#[repr(C)]`'s) rule, after the
    /// previous field, aligned up. The same rule must give every asserted
    /// offset of the type, or the test stops: the model is checked where it
    /// is used.
    fn fields(&mut self, root: &str, c_root: &str, ty: &str, path: &str, base: u64) {
        let t = &self.types[ty];
        assert_eq!(
            t.repr, "#[repr(C)]",
            "{ty}: layout rule for {} not modelled",
            t.repr
        );
        let union = t.union;
        let mut end: u64 = 0; // where the previous field ends, in `ty`
        for (field, fty) in t.fields.clone() {
            let (size, align) = self.size_align(&fty);
            let model = if union {
                0
            } else {
                end.next_multiple_of(align)
            };
            end = end.max(model + size);
            let asserted = self.take(ty, What::Offset, Some(&field));
            if let Some(off) = asserted {
                assert_eq!(off, model, "{ty}::{field}: the repr(C) model is off");
            }
            let abs = base + model;
            if field.starts_with("_bindgen") {
                if asserted.is_some() {
                    self.skip(
                        "bitfield storage units (_bitfield_N)",
                        ty,
                        What::Offset,
                        Some(&field),
                    );
                }
                continue;
            }
            let anon_ty = fty.contains("__bindgen_ty_");
            assert!(
                !anon_ty || !fty.contains(['[', '<', '*']),
                "{ty}::{field}: anonymous type inside {fty:?} is not handled by this test"
            );
            if field.starts_with("__bindgen_anon_") {
                assert!(anon_ty && asserted.is_none(), "{ty}::{field}: {fty}");
                // Its size and alignment have no C name; its fields do.
                for what in [What::Size, What::Align] {
                    self.skip(
                        "anonymous types of anonymous members (fields checked)",
                        &fty,
                        what,
                        None,
                    );
                }
                self.fields(root, c_root, &fty, path, abs);
                continue;
            }
            assert!(
                asserted.is_some(),
                "sys.rs asserts no offset for {ty}::{field}"
            );
            let member = format!("{path}{}", c_field(&field));
            self.checks.push(Check {
                c_expr: format!("offsetof({c_root}, {member})"),
                rust: abs,
                label: format!("offset of {root}.{member} (sys.rs: {ty}::{field} + {base})"),
            });
            if anon_ty {
                let of = format!("__typeof__((({c_root} *)0)->{member})");
                for (what, c) in [(What::Size, "sizeof"), (What::Align, "_Alignof")] {
                    if let Some(v) = self.take(&fty, what, None) {
                        self.checks.push(Check {
                            c_expr: format!("{c}({of})"),
                            rust: v,
                            label: format!("{what:?} of {root}.{member} (sys.rs: {fty})"),
                        });
                    }
                }
                self.fields(root, c_root, &fty, &format!("{member}."), abs);
            }
        }
        if let Some(size) = self.peek(ty, What::Size) {
            let align = self.peek(ty, What::Align).unwrap_or(1);
            assert_eq!(
                size,
                end.next_multiple_of(align),
                "{ty}: the repr(C) model's size is off"
            );
        }
    }
}

#[test]
fn layouts_match_the_c_headers() {
    let headers = [
        "/usr/include/infiniband/verbs.h",
        "/usr/include/infiniband/sa.h",
        "/usr/include/rdma/ib_user_verbs.h",
        "/usr/include/rdma/ib_user_sa.h",
        "/usr/include/rdma/rdma_cma.h",
        "/usr/include/rdma/rdma_verbs.h",
    ];
    if !have(&["cc"], &headers) {
        return;
    }
    let sys = tests_dir()
        .parent()
        .unwrap()
        .join("rxe-verbs/sys/src/sys.rs");
    let text = std::fs::read_to_string(&sys).unwrap_or_else(|e| panic!("{}: {e}", sys.display()));
    let asserts = parse_assertions(&text);
    let (types, aliases) = parse_types(&text);
    let mut l = Layouts::new(&asserts, &types, &aliases);

    let mut roots: Vec<&str> = asserts
        .iter()
        .filter(|a| a.what == What::Size && !a.ty.contains("__bindgen_ty_"))
        .map(|a| a.ty.as_str())
        .collect();
    roots.dedup();
    for root in roots {
        if !rdma_core_type(root) {
            continue;
        }
        if let Some((_, why)) = UNNAMEABLE.iter().find(|(t, _)| *t == root) {
            eprintln!("not checked: {root}: {why}");
            continue;
        }
        l.root(root);
    }
    // Whatever the walk did not reach must be glibc's (or listed above).
    for (i, a) in asserts.iter().enumerate() {
        if l.used[i] {
            continue;
        }
        let owner = a.ty.split("__bindgen_ty_").next().unwrap();
        if UNNAMEABLE.iter().any(|(t, _)| *t == owner) {
            l.skip_index("UNNAMEABLE list", i);
        } else {
            assert!(
                !rdma_core_type(owner),
                "sys.rs assertion not reached from a named rdma-core type: {a:?}"
            );
            l.skip_index(
                "glibc types bindgen pulled in (timespec, pthread_*, sockaddr_*)",
                i,
            );
        }
    }

    // The C program: a table of the C numbers, printed one a line.
    let mut c = String::new();
    writeln!(c, "#include <stddef.h>\n#include <stdio.h>").unwrap();
    writeln!(c, "#include \"{}\"", abi_dir().join("headers.h").display()).unwrap();
    writeln!(c, "static const unsigned long long v[] = {{").unwrap();
    for (i, ch) in l.checks.iter().enumerate() {
        writeln!(
            c,
            "    {}, /* {i}: {} */",
            ch.c_expr,
            ch.label.replace("*/", "* /")
        )
        .unwrap();
    }
    writeln!(
        c,
        "}};\nint main(void) {{\n    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++)\n        \
         printf(\"%llu\\n\", v[i]);\n    return 0;\n}}"
    )
    .unwrap();
    let dir = TempDir::new("layout");
    let src = dir.0.join("layout.c");
    let exe = dir.0.join("layout");
    std::fs::write(&src, &c).unwrap();
    let cc = Command::new("cc")
        .args(["-std=gnu11", "-o"])
        .arg(&exe)
        .arg(&src)
        .output()
        .expect("run cc");
    assert!(
        cc.status.success(),
        "cc could not compile the layout program (a type or field sys.rs has that the \
         headers lack?):\n{}",
        String::from_utf8_lossy(&cc.stderr)
    );
    let out = run(&mut Command::new(&exe));
    let got: Vec<u64> = out.lines().map(|l| l.parse().unwrap()).collect();
    assert_eq!(got.len(), l.checks.len());

    let mut mismatches = String::new();
    let mut bad = 0;
    for (ch, c_value) in l.checks.iter().zip(&got) {
        if ch.rust != *c_value {
            bad += 1;
            writeln!(
                mismatches,
                "  {}: Rust {} C {} ({})",
                ch.label, ch.rust, c_value, ch.c_expr
            )
            .unwrap();
        }
    }
    assert!(
        bad == 0,
        "{bad} of {} layout numbers differ:\n{mismatches}",
        l.checks.len()
    );
    let skipped: Vec<String> = l.skipped.iter().map(|(w, n)| format!("{n} {w}")).collect();
    eprintln!(
        "{} layout numbers match C ({} sys.rs assertions; not checked: {})",
        l.checks.len(),
        asserts.len(),
        skipped.join(", ")
    );
    assert!(
        l.checks.len() >= 800,
        "only {} layout numbers checked",
        l.checks.len()
    );
}
