//! A C program of our own (`tests/c/verbs_walk.c`), compiled against
//! Debian's `<infiniband/verbs.h>` and linked with `-libverbs` as any
//! libibverbs program is, then run over the drop-in library
//! (`rxe-verbs/ibverbs`): `LD_LIBRARY_PATH` names a scratch directory whose
//! `libibverbs.so.1` is a symlink to the `libibverbs.so` Cargo built, and
//! `RXE_DEVICES` gives it two soft devices on loopback (127.0.5.x).
//!
//! The program walks the verbs in one process, rxe0 talking to rxe1:
//! devices and their queries, PDs and MRs, completion channels with `poll`,
//! `epoll` and `O_NONBLOCK`, classic and extended CQs, RC QPs through every
//! state and operation, the extended `ibv_wr_*` posting, UD with address
//! handles and the GRH, SRQs and their limit event on `async_fd`, error
//! completions and async events, the destroy order (EBUSY), unsupported
//! verbs, the string and rate helpers, and `fork`. It checks that the
//! library it runs over is ours (the loader's link map and
//! `/proc/self/maps`), prints `ok NAME` or `FAIL NAME: details` per check
//! and `N passed, M failed` last, and exits nonzero on a failure.
//!
//! The program's `known_bug()` checks (deviations from rdma-core found by
//! the first walk, all fixed since) are failures here: the program is
//! compiled with `-DRXE_STRICT_KNOWN_BUGS`. `RXE_LENIENT_KNOWN_BUGS=1`
//! compiles it without, so that they print `KNOWN BUG: NAME: ...` instead
//! (for a new deviation being worked on).
//!
//! A missing C compiler or `libibverbs-dev` fails the test unless
//! `RXE_SKIP_IBVERBS_TESTS=1` says to skip (`bash tests/setup.sh` installs
//! them).

use rxe_tests::tests_dir;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How long the program may run before it counts as hung.
const LIMIT: Duration = Duration::from_secs(60);

/// The soft devices the program gets (and checks its GIDs against).
const DEVICES: &str = "rxe0=127.0.5.2,rxe1=127.0.5.3";

/// The fewest `ok` lines a complete run prints (it prints about 335).
const MIN_OK: usize = 300;

/// True when the test may be skipped (after saying why); panics otherwise.
fn skip_allowed(why: &str) -> bool {
    if std::env::var("RXE_SKIP_IBVERBS_TESTS").is_ok_and(|v| v == "1") {
        eprintln!("skipped: {why} (RXE_SKIP_IBVERBS_TESTS=1)");
        return true;
    }
    panic!(
        "{why}: install a C compiler and libibverbs-dev (`bash tests/setup.sh`), \
         or set RXE_SKIP_IBVERBS_TESTS=1 to skip"
    );
}

/// A scratch directory of its own under Cargo's per-target temporary one.
fn scratch() -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join("ibverbs_c_walk");
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("create the scratch directory");
    d
}

/// Whether `cc` compiles and links a program against Debian's libibverbs
/// (`Err` says why not).
fn toolchain(dir: &Path) -> Result<(), String> {
    let src = dir.join("probe.c");
    std::fs::write(
        &src,
        "#include <infiniband/verbs.h>\n\
         int main(void) { return ibv_get_device_list(0) != 0; }\n",
    )
    .expect("write the probe");
    let out = Command::new("cc")
        .arg("-o")
        .arg(dir.join("probe"))
        .arg(&src)
        .arg("-libverbs")
        .output()
        .map_err(|e| format!("cannot run cc: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "cc cannot build against <infiniband/verbs.h> and -libverbs:\n{}",
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

/// The drop-in `libibverbs.so`, built by the `cargo` that runs the tests.
fn build_library() -> PathBuf {
    rxe_tests::dropin_library().to_path_buf()
}

/// Compiles `tests/c/verbs_walk.c` into `dir`.
fn compile(dir: &Path) -> PathBuf {
    let exe = dir.join("verbs_walk");
    let mut cc = Command::new("cc");
    cc.args(["-Wall", "-Werror", "-O1", "-g"]);
    if !std::env::var("RXE_LENIENT_KNOWN_BUGS").is_ok_and(|v| v == "1") {
        cc.arg("-DRXE_STRICT_KNOWN_BUGS");
    }
    let out = cc
        .arg("-o")
        .arg(&exe)
        .arg(tests_dir().join("c").join("verbs_walk.c"))
        .arg("-libverbs")
        .output()
        .expect("run cc");
    assert!(
        out.status.success(),
        "cc -Wall -Werror tests/c/verbs_walk.c failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    exe
}

/// Reads a pipe to its end on a thread of its own.
fn drain<R: Read + Send + 'static>(mut r: R) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut b = Vec::new();
        let _ = r.read_to_end(&mut b);
        String::from_utf8_lossy(&b).into_owned()
    })
}

/// Runs the program (killed after [`LIMIT`]): (exited with 0, stdout, stderr).
fn run(exe: &Path, libdir: &Path, lib: &Path) -> (bool, String, String) {
    let mut child = Command::new(exe)
        .arg(libdir)
        .arg(lib)
        .env("LD_LIBRARY_PATH", libdir)
        .env("RXE_DEVICES", DEVICES)
        .env("RXE_DEBUG", "1")
        .env_remove("LD_PRELOAD")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start verbs_walk");
    let out = drain(child.stdout.take().unwrap());
    let err = drain(child.stderr.take().unwrap());
    let start = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break Some(s);
        }
        if start.elapsed() > LIMIT {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let (out, mut err) = (out.join().unwrap(), err.join().unwrap());
    match status {
        None => err.push_str(&format!("\nverbs_walk: killed after {LIMIT:?}\n")),
        Some(s) if !s.success() => err.push_str(&format!("\nverbs_walk: {s}\n")),
        Some(_) => {}
    }
    (status.is_some_and(|s| s.success()), out, err)
}

#[test]
fn c_program_walks_the_verbs_over_the_drop_in_library() {
    let dir = scratch();
    if let Err(why) = toolchain(&dir) {
        if skip_allowed(&why) {
            return;
        }
    }
    let lib = build_library();
    let real = std::fs::canonicalize(&lib).expect("canonicalize libibverbs.so");
    let libdir = dir.join("lib");
    std::fs::create_dir_all(&libdir).unwrap();
    std::os::unix::fs::symlink(&real, libdir.join("libibverbs.so.1"))
        .expect("symlink libibverbs.so.1");
    let exe = compile(&dir);

    let (exited_ok, out, err) = run(&exe, &libdir, &real);
    let whole = format!("---- stdout ----\n{out}\n---- stderr ----\n{err}");
    let oks = out.lines().filter(|l| l.starts_with("ok ")).count();
    let fails: Vec<&str> = out.lines().filter(|l| l.starts_with("FAIL")).collect();
    for l in out.lines().filter(|l| l.starts_with("KNOWN BUG")) {
        eprintln!("{l}");
    }
    assert!(exited_ok, "verbs_walk did not exit 0\n{whole}");
    assert!(
        fails.is_empty(),
        "{} checks failed: {fails:#?}\n{whole}",
        fails.len()
    );
    assert!(
        oks >= MIN_OK,
        "only {oks} checks passed (want at least {MIN_OK}): the walk stopped early?\n{whole}"
    );
    let last = out
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("");
    assert_eq!(
        last,
        format!("{oks} passed, 0 failed"),
        "the summary line does not match the ok lines\n{whole}"
    );
}
