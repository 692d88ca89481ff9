//! The drop-in librdmacm against Debian bookworm's librdmacm1 44.0, at the
//! binary level. The drop-in is the same object as the drop-in libibverbs
//! (`rxe-verbs/ibverbs`, `libibverbs.so`): `rxe exec` links it as both
//! `libibverbs.so.1` and `librdmacm.so.1`.
//!
//! * [`exports_match_the_debian_symbol_list`]: the `RDMACM_*` exports of our
//!   `libibverbs.so` (`objdump -T`), as (name, version, default or compat),
//!   the version-node entries (`RDMACM_1.0@@RDMACM_1.0` ...) included, are
//!   exactly `rxe-verbs/ibverbs/abi/librdmacm1-44.0.symbols`;
//! * [`symbol_list_is_what_debian_ships`]: that list is what objdump says
//!   of Debian's own `librdmacm.so.1`, so it cannot go stale;
//! * [`debian_programs_find_their_rdmacm_imports`]: every `RDMACM_*` and
//!   `IBVERBS_*` symbol that Debian's librdmacm programs (rdmacm-utils,
//!   perftest) import is exported by ours with that version;
//! * [`debian_programs_link_against_ours_under_both_names`]: `ldd -r` of
//!   `rping` (and `ib_write_bw`) with a directory holding both names first
//!   on `LD_LIBRARY_PATH` resolves `librdmacm.so.1` and `libibverbs.so.1`
//!   there, with no undefined symbol.
//!
//! The layouts of `<rdma/rdma_cma.h>` are checked with libibverbs' in
//! `tests/ibverbs_abi.rs` (`layouts_match_the_c_headers`, the `rdma_*`
//! types), and the calls themselves by `tests/rdmacm_walk.rs`.
//!
//! Needs `objdump` and `ldd`; without them the tests fail with
//! instructions, unless `RXE_SKIP_IBVERBS_TESTS=1` is set.

use rxe_tests::tests_dir;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

const DEBIAN_LIBDIR: &str = "/usr/lib/x86_64-linux-gnu";

/// (name, version, `default`/`compat`).
type Export = (String, String, &'static str);

fn have(tools: &[&str]) -> bool {
    let missing: Vec<&str> = tools
        .iter()
        .copied()
        .filter(|t| {
            !Command::new(t)
                .arg("--version")
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        })
        .collect();
    if missing.is_empty() {
        return true;
    }
    if std::env::var("RXE_SKIP_IBVERBS_TESTS").as_deref() == Ok("1") {
        eprintln!("note: RXE_SKIP_IBVERBS_TESTS=1, skipping: missing {missing:?}");
        return false;
    }
    panic!(
        "missing the commands {missing:?} (binutils, libc-bin): run `bash tests/setup.sh`, \
         or set RXE_SKIP_IBVERBS_TESTS=1 to skip these tests"
    );
}

fn our_lib() -> &'static Path {
    rxe_tests::dropin_library()
}

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

/// `objdump -T FILE`: (name, version or None, compat, defined).
fn dynsyms(file: &Path) -> Vec<(String, Option<String>, bool, bool)> {
    let text = run(Command::new("objdump").arg("-T").arg(file));
    let mut out = Vec::new();
    let mut in_table = false;
    for line in text.lines() {
        if line.starts_with("DYNAMIC SYMBOL TABLE") {
            in_table = true;
            continue;
        }
        if !in_table || line.trim().is_empty() {
            continue;
        }
        let Some((left, right)) = line.split_once('\t') else {
            panic!("objdump -T {}: unexpected line {line:?}", file.display());
        };
        let defined = !left.ends_with("*UND*");
        let words: Vec<&str> = right.split_whitespace().collect();
        let name = words[words.len() - 1].to_string();
        let (version, compat) = if words.len() == 2 {
            (None, false)
        } else {
            match words[1].strip_prefix('(').and_then(|v| v.strip_suffix(')')) {
                Some(v) => (Some(v.to_string()), true),
                None if words[1] == "Base" => (None, false),
                None => (Some(words[1].to_string()), false),
            }
        };
        out.push((name, version, compat, defined));
    }
    out
}

/// The defined `RDMACM_*` exports of a library.
fn rdmacm_exports(file: &Path) -> BTreeSet<Export> {
    dynsyms(file)
        .into_iter()
        .filter(|(_, v, _, d)| *d && v.as_deref().is_some_and(|v| v.starts_with("RDMACM_")))
        .map(|(n, v, c, _)| (n, v.unwrap(), if c { "compat" } else { "default" }))
        .collect()
}

fn symbol_list() -> BTreeSet<Export> {
    let path = tests_dir()
        .parent()
        .unwrap()
        .join("rxe-verbs/ibverbs/abi/librdmacm1-44.0.symbols");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    text.lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            let kind = match w.as_slice() {
                [_, _, "default"] => "default",
                [_, _, "compat"] => "compat",
                _ => panic!(
                    "{}: not `NAME VERSION default|compat`: {l:?}",
                    path.display()
                ),
            };
            (w[0].to_string(), w[1].to_string(), kind)
        })
        .collect()
}

fn assert_same(want: &BTreeSet<Export>, got: &BTreeSet<Export>, what: &str) {
    let missing: Vec<_> = want.difference(got).collect();
    let extra: Vec<_> = got.difference(want).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "{what}: missing {missing:#?}\nextra {extra:#?}"
    );
}

#[test]
fn exports_match_the_debian_symbol_list() {
    if !have(&["objdump"]) {
        return;
    }
    let want = symbol_list();
    assert_eq!(want.len(), 72, "68 functions and 4 version nodes");
    for v in ["RDMACM_1.0", "RDMACM_1.1", "RDMACM_1.2", "RDMACM_1.3"] {
        assert!(
            want.contains(&(v.to_string(), v.to_string(), "default")),
            "the version node {v}@@{v} is listed"
        );
    }
    let got = rdmacm_exports(our_lib());
    assert_same(
        &want,
        &got,
        &format!(
            "RDMACM exports of {} vs abi/librdmacm1-44.0.symbols",
            our_lib().display()
        ),
    );
}

#[test]
fn symbol_list_is_what_debian_ships() {
    if !have(&["objdump"]) {
        return;
    }
    let debian = Path::new(DEBIAN_LIBDIR).join("librdmacm.so.1");
    if !debian.exists() {
        eprintln!(
            "note: {} is not installed (librdmacm1); not compared",
            debian.display()
        );
        return;
    }
    let real = std::fs::canonicalize(&debian).unwrap();
    assert_ne!(
        real,
        std::fs::canonicalize(our_lib()).unwrap(),
        "{} is our own library",
        debian.display()
    );
    let theirs = rdmacm_exports(&debian);
    // Debian's has nothing else: no unversioned or foreign exports.
    let other: Vec<_> = dynsyms(&debian)
        .into_iter()
        .filter(|(_, v, _, d)| *d && !v.as_deref().is_some_and(|v| v.starts_with("RDMACM_")))
        .collect();
    assert!(
        other.is_empty(),
        "Debian's librdmacm exports more: {other:?}"
    );
    assert_same(
        &symbol_list(),
        &theirs,
        "the list vs Debian's librdmacm.so.1",
    );
}

/// Debian's programs that link librdmacm.so.1.
fn rdmacm_programs() -> Vec<PathBuf> {
    [
        "rping",
        "ucmatose",
        "udaddy",
        "mckey",
        "rdma_server",
        "rdma_client",
        "rstream",
        "riostream",
        "rcopy",
        "cmtime",
        "udpong",
        "rdma_xserver",
        "rdma_xclient",
        "ib_write_bw",
        "ib_send_lat",
        "ib_read_bw",
    ]
    .iter()
    .map(|p| Path::new("/usr/bin").join(p))
    .filter(|p| p.exists())
    .collect()
}

#[test]
fn debian_programs_find_their_rdmacm_imports() {
    if !have(&["objdump"]) {
        return;
    }
    let programs = rdmacm_programs();
    if programs.is_empty() {
        eprintln!("note: no rdmacm-utils or perftest installed; nothing to check");
        return;
    }
    let ours: BTreeSet<(String, String)> = dynsyms(our_lib())
        .into_iter()
        .filter_map(|(n, v, _, d)| Some((n, v?)).filter(|_| d))
        .collect();
    let mut missing = BTreeMap::<(String, String), Vec<String>>::new();
    let mut imports = 0;
    for p in &programs {
        for (n, v, _, d) in dynsyms(p) {
            let Some(v) = v.filter(|v| v.starts_with("RDMACM_") || v.starts_with("IBVERBS_"))
            else {
                continue;
            };
            if d {
                continue;
            }
            imports += 1;
            if !ours.contains(&(n.clone(), v.clone())) {
                let who = p.file_name().unwrap().to_string_lossy().into_owned();
                missing.entry((n, v)).or_default().push(who);
            }
        }
    }
    let mut msg = String::new();
    for ((n, v), who) in &missing {
        writeln!(msg, "  {n}@{v} (imported by {})", who.join(", ")).unwrap();
    }
    assert!(missing.is_empty(), "not exported by ours:\n{msg}");
    assert!(imports > 0);
    eprintln!(
        "{imports} imports of {} programs all resolve",
        programs.len()
    );
}

#[test]
fn debian_programs_link_against_ours_under_both_names() {
    if !have(&["objdump", "ldd"]) {
        return;
    }
    let programs = rdmacm_programs();
    if programs.is_empty() {
        eprintln!("note: no rdmacm-utils or perftest installed; nothing to check");
        return;
    }
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("rdmacm_abi_ldd");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let real = std::fs::canonicalize(our_lib()).unwrap();
    for name in ["libibverbs.so.1", "librdmacm.so.1"] {
        std::os::unix::fs::symlink(&real, dir.join(name)).unwrap();
    }
    for prog in programs.iter().take(4) {
        let out = Command::new("ldd")
            .arg("-r")
            .arg(prog)
            .env("LD_LIBRARY_PATH", &dir)
            .output()
            .unwrap_or_else(|e| panic!("cannot run ldd: {e}"));
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.status.success(), "ldd -r {}: {text}", prog.display());
        for bad in ["undefined symbol", "not defined in file", "not found"] {
            assert!(
                !text.contains(bad),
                "ldd -r {}: {bad:?}\n{text}",
                prog.display()
            );
        }
        // librdmacm.so.1 is ours; libibverbs.so.1 is then the object already
        // loaded (matched by its soname, so ldd lists no line of its own) or,
        // listed, ours too. No other copy of either library is loaded.
        let resolved = |name: &str| {
            text.lines().find_map(|l| {
                let (n, rest) = l.trim().split_once(" => ")?;
                (n == name).then(|| rest.split(" (").next().unwrap().to_string())
            })
        };
        let rdmacm = resolved("librdmacm.so.1")
            .unwrap_or_else(|| panic!("ldd -r {}: no librdmacm.so.1\n{text}", prog.display()));
        for r in std::iter::once(rdmacm).chain(resolved("libibverbs.so.1")) {
            assert!(
                r.starts_with(dir.to_str().unwrap())
                    && std::fs::canonicalize(&r).is_ok_and(|r| r == real),
                "ldd -r {}: {r} is not ours\n{text}",
                prog.display()
            );
        }
        let others = text
            .lines()
            .filter(|l| {
                (l.contains("libibverbs") || l.contains("librdmacm"))
                    && !l.contains(dir.to_str().unwrap())
            })
            .count();
        assert_eq!(others, 0, "ldd -r {}: another copy\n{text}", prog.display());
    }
}
