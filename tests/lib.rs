//! Shared helpers for the integration tests.

use std::path::PathBuf;

/// The directory holding this crate (`tests/` in the workspace).
pub fn tests_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The bundled captures of real Linux rdma_rxe traffic.
pub fn pcap_dir() -> PathBuf {
    tests_dir().join("data").join("pcaps")
}

pub mod netns;
pub mod sim;

/// Builds workspace targets with the `cargo` that runs the tests
/// (`args`: what follows `cargo build`, such as `["-p", "rxe-ibverbs"]`)
/// and returns the files Cargo reports for them (`compiler-artifact`
/// messages: executables and library files).
pub fn cargo_build(args: &[&str]) -> Vec<PathBuf> {
    use std::process::{Command, Stdio};
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| env!("CARGO").into());
    let out = Command::new(cargo)
        .arg("build")
        .args(args)
        .arg("--message-format=json-render-diagnostics")
        .current_dir(tests_dir().parent().unwrap())
        .stderr(Stdio::inherit())
        .output()
        .expect("run cargo build");
    assert!(out.status.success(), "cargo build {args:?} failed");
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|m| m["reason"] == "compiler-artifact")
        .flat_map(|m| {
            let mut files: Vec<PathBuf> = m["filenames"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|f| f.as_str().map(PathBuf::from))
                .collect();
            files.extend(m["executable"].as_str().map(PathBuf::from));
            files
        })
        .collect()
}

/// The `rxe` executable (unoptimised, as `cargo test` builds), built on
/// first use: Cargo builds no binaries of other packages for integration
/// tests. `RXE_BIN` names another one. It has the `test-fault` feature,
/// so that the fuzz tests can break a peer on purpose (`RXE_TEST_FAULT`);
/// with the variable unset it behaves as the default build.
pub fn rxe_bin() -> &'static std::path::Path {
    static BIN: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BIN.get_or_init(|| {
        if let Some(p) = std::env::var_os("RXE_BIN") {
            return PathBuf::from(p);
        }
        cargo_build(&["-p", "rxe-tool", "--features", "rxe-tool/test-fault"])
            .into_iter()
            .find(|f| f.file_name().is_some_and(|n| n == "rxe"))
            .expect("cargo reported no rxe executable")
    })
}

/// The drop-in `libibverbs.so` (rxe-verbs/ibverbs), built on first use,
/// optimised as users build it (`cargo build --release`): an unoptimised
/// engine under perftest's 8 MiB READs, with the other tests beside it,
/// overran its socket until the READ ran out of retries.
pub fn dropin_library() -> &'static std::path::Path {
    static LIB: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    LIB.get_or_init(|| {
        // (with the device view's shim, which `rxe exec` preloads from
        // beside the library)
        build_dropin(&[])
    })
}

/// `cargo build --release` of the drop-in and the device view's shim, with
/// `extra` arguments; the library's path.
fn build_dropin(extra: &[&str]) -> PathBuf {
    let mut args = vec!["--release", "-p", "rxe-ibverbs", "-p", "rxe-devview"];
    args.extend_from_slice(extra);
    cargo_build(&args)
        .into_iter()
        .find(|f| f.file_name().is_some_and(|n| n == "libibverbs.so"))
        .expect("cargo reported no libibverbs.so")
}

/// The drop-in library with the `test-fault` feature (it honours
/// `RXE_TEST_FAULT`, for the fuzz tests that break a drop-in peer on
/// purpose), with the device view's shim beside it: optimised like
/// [`dropin_library`], and built in a target directory of its own
/// (`target/test-fault`), so that the release library the other tests use,
/// at the same file name, stays the one users build.
pub fn dropin_library_with_test_faults() -> &'static std::path::Path {
    static LIB: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    LIB.get_or_init(|| {
        let root = tests_dir().parent().unwrap().to_path_buf();
        let target = std::env::var_os("CARGO_TARGET_DIR")
            .map_or_else(|| root.join("target"), PathBuf::from)
            .join("test-fault");
        build_dropin(&[
            "--features",
            "rxe-ibverbs/test-fault",
            "--target-dir",
            target.to_str().expect("a UTF-8 target directory"),
        ])
    })
}
