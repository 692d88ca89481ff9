//! The drop-in librdmacm (the same `libibverbs.so` as the drop-in
//! libibverbs, `rxe-verbs/ibverbs/src/rdmacm/`) driven from C.
//!
//! [`c_program_walks_rdmacm_over_the_drop_in_library`]: a C program of our
//! own (`tests/c/rdmacm_walk.c`), compiled against Debian's
//! `<rdma/rdma_cma.h>` and linked with `-lrdmacm -libverbs` as any
//! librdmacm program is, runs with `LD_LIBRARY_PATH` on a scratch directory
//! where both `librdmacm.so.1` and `libibverbs.so.1` are symlinks to the
//! drop-in (what `rxe exec` makes), and soft devices rxe0=127.0.6.1 and
//! rxe1=127.0.6.2. It checks that the loader mapped the one file for both
//! names, then walks every call and its errors: devices, event channels
//! (`poll`, `epoll`, `O_NONBLOCK`, a blocked `rdma_get_cm_event` woken by
//! another thread), ids and port spaces, address and route resolution with
//! their events (and ADDR_ERROR), synchronous ids, `rdma_migrate_id`,
//! options, QPs and SRQs in the states librdmacm leaves them,
//! `rdma_init_qp_attr`, `rdma_getaddrinfo`, `rdma_create_ep`, ECE, and
//! connections from rxe1 to rxe0 over the CM protocol: listen, connect,
//! CONNECT_REQUEST (its parameters, addresses, route), accept, ESTABLISHED
//! on both sides (the REP's parameters), a SEND, disconnect, TIMEWAIT_EXIT;
//! reject with private data (status 28), REJ 8 from a port nobody listens
//! on (also a synchronous `rdma_connect`: ECONNREFUSED), a client that
//! moves its own QP (`conn_param->qp_num`, CONNECT_RESPONSE,
//! `rdma_init_qp_attr` to INIT/RTR/RTS, `rdma_establish`), UD through SIDR
//! (a UDP listener's CONNECT_REQUEST with `param.ud`'s private data, a UD
//! `rdma_accept`, the client's ESTABLISHED with `param.ud`'s `ah_attr`,
//! QP number and Q_Key, a UD SEND through an AH made from it; UNREACHABLE
//! 1 from a port nobody listens on, UNREACHABLE 2 from `rdma_reject`), and
//! the CM calls' argument errors. It prints `ok NAME` or `FAIL NAME: ...` per
//! check and `N passed, M failed` last.
//!
//! Debian's rdmacm-utils and perftest over rdma_cm are in
//! `tests/rdmacm_programs.rs`.
//!
//! A missing C compiler or librdmacm-dev fails the test unless
//! `RXE_SKIP_IBVERBS_TESTS=1` says to skip (`bash tests/setup.sh` installs
//! them). Addresses 127.0.6.x, rdma_cm ports 19600-19649.

use rxe_tests::tests_dir;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How long the walk may run before it counts as hung.
const LIMIT: Duration = Duration::from_secs(60);

const DEVICES: &str = "rxe0=127.0.6.1,rxe1=127.0.6.2";

/// The fewest `ok` lines a complete run prints (it prints about 350).
const MIN_OK: usize = 300;

fn skip_allowed(why: &str) -> bool {
    if std::env::var("RXE_SKIP_IBVERBS_TESTS").is_ok_and(|v| v == "1") {
        eprintln!("skipped: {why} (RXE_SKIP_IBVERBS_TESTS=1)");
        return true;
    }
    panic!(
        "{why}: install a C compiler and librdmacm-dev (`bash tests/setup.sh`), \
         or set RXE_SKIP_IBVERBS_TESTS=1 to skip"
    );
}

fn scratch(name: &str) -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("create the scratch directory");
    d
}

/// Whether `cc` builds a librdmacm program (`Err` says why not).
fn toolchain(dir: &Path) -> Result<(), String> {
    let src = dir.join("probe.c");
    std::fs::write(
        &src,
        "#include <rdma/rdma_cma.h>\n\
         int main(void) { return rdma_create_event_channel() != 0; }\n",
    )
    .expect("write the probe");
    let out = Command::new("cc")
        .arg("-o")
        .arg(dir.join("probe"))
        .arg(&src)
        .args(["-lrdmacm", "-libverbs"])
        .output()
        .map_err(|e| format!("cannot run cc: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "cc cannot build against <rdma/rdma_cma.h> with -lrdmacm -libverbs:\n{}",
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

/// A directory with `libibverbs.so.1` and `librdmacm.so.1` -> the drop-in,
/// as `rxe exec` makes it; returns it and the library's real path.
fn libdir(dir: &Path) -> (PathBuf, PathBuf) {
    let real = std::fs::canonicalize(rxe_tests::dropin_library()).expect("canonicalize");
    let libdir = dir.join("lib");
    std::fs::create_dir_all(&libdir).unwrap();
    for name in ["libibverbs.so.1", "librdmacm.so.1"] {
        std::os::unix::fs::symlink(&real, libdir.join(name)).expect("symlink");
    }
    (libdir, real)
}

fn drain<R: Read + Send + 'static>(mut r: R) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut b = Vec::new();
        let _ = r.read_to_end(&mut b);
        String::from_utf8_lossy(&b).into_owned()
    })
}

/// Runs `cmd` (killed after `limit`): (exit status, stdout, stderr).
fn run(mut cmd: Command, limit: Duration) -> (Option<std::process::ExitStatus>, String, String) {
    let mut child = cmd
        .env_remove("LD_PRELOAD")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("start {cmd:?}: {e}"));
    let out = drain(child.stdout.take().unwrap());
    let err = drain(child.stderr.take().unwrap());
    let start = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break Some(s);
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    (status, out.join().unwrap(), err.join().unwrap())
}

#[test]
fn c_program_walks_rdmacm_over_the_drop_in_library() {
    let dir = scratch("rdmacm_walk");
    if let Err(why) = toolchain(&dir) {
        if skip_allowed(&why) {
            return;
        }
    }
    let (libdir, real) = libdir(&dir);
    let exe = dir.join("rdmacm_walk");
    let out = Command::new("cc")
        .args(["-Wall", "-Werror", "-O1", "-g", "-o"])
        .arg(&exe)
        .arg(tests_dir().join("c").join("rdmacm_walk.c"))
        .args(["-lrdmacm", "-libverbs", "-lpthread"])
        .output()
        .expect("run cc");
    assert!(
        out.status.success(),
        "cc -Wall -Werror tests/c/rdmacm_walk.c failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut cmd = Command::new(&exe);
    cmd.arg(&real)
        .env("LD_LIBRARY_PATH", &libdir)
        .env("RXE_DEVICES", DEVICES)
        .env("RXE_DEBUG", "1");
    let (status, out, err) = run(cmd, LIMIT);
    let whole = format!("---- stdout ----\n{out}\n---- stderr ----\n{err}");
    let oks = out.lines().filter(|l| l.starts_with("ok ")).count();
    let fails: Vec<&str> = out.lines().filter(|l| l.starts_with("FAIL")).collect();
    assert!(
        status.is_some_and(|s| s.success()),
        "rdmacm_walk did not exit 0 ({status:?})\n{whole}"
    );
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
    assert_eq!(last, format!("{oks} passed, 0 failed"), "{whole}");
}
