//! Links the library as libibverbs.so.1 with rdma-core's symbol versions.
//!
//! The same file is also the drop-in librdmacm.so.1 (`rxe exec` links it
//! under both names; see `src/rdmacm/mod.rs`), so it declares the version
//! nodes of both libraries: IBVERBS_1.0 ... IBVERBS_1.14 and
//! IBVERBS_PRIVATE_34 from `abi/libibverbs1-44.0.symbols`, RDMACM_1.0 ...
//! RDMACM_1.3 from `abi/librdmacm1-44.0.symbols` (the export lists of
//! Debian's libibverbs1 and librdmacm1 44.0). Which function stands behind
//! which `name@VERSION` is said in the code (`src/exports.rs`, with
//! `.symver`): rustc writes a version script of its own for a cdylib, so
//! ours only declares the nodes.

use std::collections::BTreeSet;
use std::fmt::Write;

/// The versions `prefix`N.M of a symbol list, in order.
fn versions(dir: &str, file: &str, prefix: &str) -> Vec<String> {
    let list = format!("{dir}/abi/{file}");
    println!("cargo:rerun-if-changed={list}");
    let text = std::fs::read_to_string(&list).unwrap_or_else(|e| panic!("abi/{file}: {e}"));
    let mut v: Vec<String> = text
        .lines()
        .filter_map(|l| l.split_whitespace().nth(1).map(str::to_string))
        .filter(|v| v.starts_with(prefix))
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    v.sort_by_key(|v| v[prefix.len()..].parse::<u32>().unwrap_or(0));
    v
}

/// Each node of `chain` inherits from the one before it.
fn declare(script: &mut String, chain: &[String]) {
    let mut prev: Option<&str> = None;
    for v in chain {
        match prev {
            None => writeln!(script, "{v} {{ }};").unwrap(),
            Some(p) => writeln!(script, "{v} {{ }} {p};").unwrap(),
        }
        prev = Some(v);
    }
}

fn main() {
    let dir = std::env::var("CARGO_MANIFEST_DIR").unwrap();
    let mut script = String::new();
    declare(
        &mut script,
        &versions(&dir, "libibverbs1-44.0.symbols", "IBVERBS_1."),
    );
    script.push_str("IBVERBS_PRIVATE_34 { };\n");
    declare(
        &mut script,
        &versions(&dir, "librdmacm1-44.0.symbols", "RDMACM_1."),
    );
    let out = std::env::var("OUT_DIR").unwrap();
    let path = format!("{out}/libibverbs.map");
    std::fs::write(&path, script).unwrap();
    println!("cargo:rustc-cdylib-link-arg=-Wl,--version-script={path}");
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libibverbs.so.1");
}
