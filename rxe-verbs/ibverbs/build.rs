//! Links the library as libibverbs.so.1 with rdma-core's symbol versions.
//!
//! The version nodes (IBVERBS_1.0 ... IBVERBS_1.14, IBVERBS_PRIVATE_34) come
//! from `abi/libibverbs1-44.0.symbols`, the export list of Debian's
//! libibverbs1 44.0. Which function stands behind which `name@VERSION` is
//! said in the code (`src/exports.rs`, with `.symver`): rustc writes a
//! version script of its own for a cdylib, so ours only declares the nodes.

use std::collections::BTreeSet;
use std::fmt::Write;

fn main() {
    let dir = std::env::var("CARGO_MANIFEST_DIR").unwrap();
    let list = format!("{dir}/abi/libibverbs1-44.0.symbols");
    println!("cargo:rerun-if-changed={list}");
    let text = std::fs::read_to_string(&list).expect("abi/libibverbs1-44.0.symbols");
    let mut public: Vec<String> = text
        .lines()
        .filter_map(|l| l.split_whitespace().nth(1).map(str::to_string))
        .filter(|v| v.starts_with("IBVERBS_1."))
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    public.sort_by_key(|v| v["IBVERBS_1.".len()..].parse::<u32>().unwrap_or(0));
    let mut script = String::new();
    let mut prev: Option<&str> = None;
    for v in &public {
        match prev {
            None => writeln!(script, "{v} {{ }};").unwrap(),
            Some(p) => writeln!(script, "{v} {{ }} {p};").unwrap(),
        }
        prev = Some(v);
    }
    script.push_str("IBVERBS_PRIVATE_34 { };\n");
    let out = std::env::var("OUT_DIR").unwrap();
    let path = format!("{out}/libibverbs.map");
    std::fs::write(&path, script).unwrap();
    println!("cargo:rustc-cdylib-link-arg=-Wl,--version-script={path}");
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libibverbs.so.1");
}
