//! Native devices next to soft ones in the drop-in libibverbs
//! (`rxe-verbs/ibverbs`, `RXE_PROVIDER`): with `auto` it loads the system's
//! libibverbs in a link-map namespace of its own, lists its devices after
//! the soft ones and forwards every call on them to it.
//!
//! There is no RDMA hardware here, so the system library is the tests' fake
//! libibverbs (`rxe-verbs/src/native/fake_ibverbs.c`, one device `fake0`),
//! named by `RXE_LIBIBVERBS`. With `FAKE_IBVERBS_TRACE=FILE` the fake writes
//! `init` when it is loaded and the name of every function called in it,
//! which tells which calls reached it, and that it was loaded at all.
//!
//! The program is `tests/c/native_passthrough.c`, compiled against Debian's
//! `<infiniband/verbs.h>` and linked with `-libverbs`; `LD_LIBRARY_PATH`
//! names a scratch directory whose `libibverbs.so.1` is the drop-in (as
//! `tests/ibverbs_c_walk.rs` does). It lists the devices, walks the native
//! device (open, queries, PD, MR, channel, CQ, RC QPs, SEND and WRITE
//! through the provider's ops, events, SRQ, AH, errno, destroy), moves
//! data between two soft devices (127.0.4.2xx), and checks that a soft PD
//! refuses a native CQ.
//!
//! Checked here: the order of the list for `auto` and `native`; that every
//! native call reached the fake and no soft one did; that `RXE_PROVIDER`
//! unset or `soft` never loads it; that a missing or bad `RXE_LIBIBVERBS`
//! leaves the soft devices and says so in one line; and that Debian's own
//! libibverbs loads apart, when it is installed.
//!
//! A missing C compiler or `libibverbs-dev` fails the test unless
//! `RXE_SKIP_IBVERBS_TESTS=1` says to skip.

use rxe_tests::tests_dir;
use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// How long the program may run before it counts as hung.
const LIMIT: Duration = Duration::from_secs(60);

/// Debian's libibverbs, where the drop-in looks for it first.
const SYSTEM_LIB: &str = "/usr/lib/x86_64-linux-gnu/libibverbs.so.1";

/// What every test shares, built once.
struct Setup {
    dir: PathBuf,
    exe: PathBuf,
    libdir: PathBuf,
    fake: PathBuf,
}

/// The setup, or `None` when the tools are missing and skipping is allowed.
fn setup() -> Option<&'static Setup> {
    static S: OnceLock<Option<Setup>> = OnceLock::new();
    S.get_or_init(|| {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("ibverbs_native");
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create the scratch directory");
        if let Err(why) = toolchain() {
            if std::env::var("RXE_SKIP_IBVERBS_TESTS").is_ok_and(|v| v == "1") {
                eprintln!("skipped: {why} (RXE_SKIP_IBVERBS_TESTS=1)");
                return None;
            }
            panic!(
                "{why}: install a C compiler and libibverbs-dev (`bash tests/setup.sh`), \
                 or set RXE_SKIP_IBVERBS_TESTS=1 to skip"
            );
        }
        let fake = dir.join("libfakeverbs.so.1");
        cc(&[
            "-shared",
            "-fPIC",
            "-O1",
            "-Wall",
            "-Werror",
            "-o",
            fake.to_str().unwrap(),
            tests_dir()
                .join("../rxe-verbs/src/native/fake_ibverbs.c")
                .to_str()
                .unwrap(),
            "-lpthread",
        ]);
        let exe = dir.join("native_passthrough");
        cc(&[
            "-Wall",
            "-Werror",
            "-O1",
            "-g",
            "-o",
            exe.to_str().unwrap(),
            tests_dir().join("c/native_passthrough.c").to_str().unwrap(),
            "-libverbs",
        ]);
        let lib = std::fs::canonicalize(rxe_tests::dropin_library()).unwrap();
        let libdir = dir.join("lib");
        std::fs::create_dir_all(&libdir).unwrap();
        std::os::unix::fs::symlink(&lib, libdir.join("libibverbs.so.1")).unwrap();
        Some(Setup {
            dir,
            exe,
            libdir,
            fake,
        })
    })
    .as_ref()
}

fn toolchain() -> Result<(), String> {
    if !Path::new("/usr/include/infiniband/verbs.h").exists() {
        return Err("no /usr/include/infiniband/verbs.h".into());
    }
    match Command::new("cc").arg("--version").output() {
        Ok(o) if o.status.success() => Ok(()),
        _ => Err("no C compiler (cc)".into()),
    }
}

fn cc(args: &[&str]) {
    let out = Command::new("cc").args(args).output().expect("run cc");
    assert!(
        out.status.success(),
        "cc {args:?} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Reads a pipe to its end on a thread of its own.
fn drain<R: Read + Send + 'static>(mut r: R) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut b = Vec::new();
        let _ = r.read_to_end(&mut b);
        String::from_utf8_lossy(&b).into_owned()
    })
}

/// What one run of the program showed.
#[derive(Debug)]
struct Run {
    exited_ok: bool,
    out: String,
    err: String,
    /// The fake's trace, if it was loaded at all.
    trace: Option<Vec<String>>,
}

impl Run {
    /// The device names, in the order of the list.
    fn devices(&self) -> Vec<&str> {
        self.out
            .lines()
            .filter_map(|l| l.strip_prefix("dev "))
            .filter_map(|l| l.split_once(' ').map(|(_, n)| n))
            .collect()
    }
    fn oks(&self, prefix: &str) -> usize {
        self.out
            .lines()
            .filter(|l| l.starts_with(&format!("ok {prefix}")))
            .count()
    }
    fn fails(&self) -> Vec<&str> {
        self.out.lines().filter(|l| l.starts_with("FAIL")).collect()
    }
    fn maps(&self) -> Vec<&str> {
        self.out
            .lines()
            .filter_map(|l| l.strip_prefix("map "))
            .collect()
    }
    /// The drop-in's own lines on standard error.
    fn messages(&self) -> Vec<&str> {
        self.err
            .lines()
            .filter(|l| l.starts_with("rxe-ibverbs:"))
            .collect()
    }
    /// How many times the fake saw `name` called.
    fn calls(&self) -> BTreeMap<&str, usize> {
        let mut m = BTreeMap::new();
        for l in self.trace.iter().flatten() {
            *m.entry(l.as_str()).or_insert(0) += 1;
        }
        m
    }
    fn whole(&self) -> String {
        format!(
            "---- stdout ----\n{}\n---- stderr ----\n{}\n---- trace ----\n{:?}",
            self.out, self.err, self.trace
        )
    }
    /// Exited 0 with no failed check and the summary line.
    fn assert_clean(&self) {
        let w = self.whole();
        assert!(self.exited_ok, "the program did not exit 0\n{w}");
        assert!(self.fails().is_empty(), "failed checks\n{w}");
        assert!(self.out.contains(" passed, 0 failed"), "no summary\n{w}");
    }
}

/// Runs the program with `env` (`tag` names its trace file; `soft` the
/// two soft devices' addresses, or none).
fn run(s: &Setup, tag: &str, soft: Option<(u8, u8)>, env: &[(&str, &str)]) -> Run {
    let trace = s.dir.join(format!("trace-{tag}"));
    let _ = std::fs::remove_file(&trace);
    let mut c = Command::new(&s.exe);
    for k in [
        "RXE_PROVIDER",
        "RXE_LIBIBVERBS",
        "RXE_DEVICES",
        "RXE_DEBUG",
        "RXE_PCAP",
        "LD_PRELOAD",
        "FAKE_IBVERBS_NO_DEVICES",
    ] {
        c.env_remove(k);
    }
    c.env("LD_LIBRARY_PATH", &s.libdir)
        .env("FAKE_IBVERBS_TRACE", &trace);
    if let Some((a, b)) = soft {
        c.env("RXE_DEVICES", format!("rxe0=127.0.4.{a},rxe1=127.0.4.{b}"));
    }
    c.envs(env.iter().copied());
    let mut child = c
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start native_passthrough");
    let out = drain(child.stdout.take().unwrap());
    let err = drain(child.stderr.take().unwrap());
    let start = Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break Some(st);
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
        None => err.push_str(&format!("\nnative_passthrough: killed after {LIMIT:?}\n")),
        Some(st) if !st.success() => err.push_str(&format!("\nnative_passthrough: {st}\n")),
        Some(_) => {}
    }
    let trace = std::fs::read_to_string(&trace)
        .ok()
        .map(|t| t.lines().map(str::to_string).collect());
    Run {
        exited_ok: status.is_some_and(|st| st.success()),
        out,
        err,
        trace,
    }
}

fn fake(s: &Setup) -> &str {
    s.fake.to_str().unwrap()
}

/// The soft devices first, then the native one; every native call reaches
/// the fake, no soft one does, and both kinds of device work side by side.
#[test]
fn auto_lists_soft_then_native_and_forwards_native_calls() {
    let Some(s) = setup() else { return };
    let r = run(
        s,
        "auto",
        Some((201, 202)),
        &[("RXE_PROVIDER", "auto"), ("RXE_LIBIBVERBS", fake(s))],
    );
    let w = r.whole();
    r.assert_clean();
    assert_eq!(r.devices(), ["rxe0", "rxe1", "fake0"], "{w}");
    assert!(r.messages().is_empty(), "{w}");
    // The native walk and the soft exchange both ran in full.
    assert!(r.oks("native_") >= 35, "{w}");
    assert!(r.oks("soft_") >= 7, "{w}");
    assert!(r.out.contains("ok native_errno_returned"), "{w}");
    assert!(r.out.contains("ok soft_rdma_write"), "{w}");
    assert!(r.out.contains("ok mix_soft_pd_native_cq_refused"), "{w}");
    // The fake was mapped into the process (in its own namespace).
    assert!(
        r.maps().iter().any(|m| m.ends_with("libfakeverbs.so.1")),
        "{w}"
    );
    // Exactly the native objects' calls reached it: the soft walk opened
    // two devices, two PDs, two MRs, two CQs and two QPs of its own. (The
    // native walk and the mixing check open fake0 once each; the native
    // walk makes two CQs, one refused, and the mixing check one.)
    let calls = r.calls();
    let want: &[(&str, usize)] = &[
        ("init", 1),
        ("ibv_get_device_list", 1),
        ("ibv_free_device_list", 1),
        // The program asks every device's name, and fake0's GUID (twice).
        ("ibv_get_device_name", 2),
        ("ibv_get_device_guid", 2),
        ("ibv_open_device", 2),
        ("ibv_close_device", 2),
        ("ibv_query_device", 1),
        ("ibv_query_gid", 1),
        ("_ibv_query_gid_ex", 1),
        ("ibv_alloc_pd", 1),
        ("ibv_dealloc_pd", 1),
        ("ibv_reg_mr", 2),
        ("ibv_dereg_mr", 2),
        ("ibv_create_comp_channel", 1),
        ("ibv_destroy_comp_channel", 1),
        ("ibv_create_cq", 3),
        ("ibv_destroy_cq", 2),
        ("ibv_create_qp", 2),
        ("ibv_modify_qp", 6),
        ("ibv_query_qp", 1),
        ("ibv_destroy_qp", 2),
        ("ibv_get_cq_event", 1),
        ("ibv_ack_cq_events", 1),
        ("ibv_get_async_event", 1),
        ("ibv_ack_async_event", 1),
        ("ibv_create_srq", 1),
        ("ibv_modify_srq", 1),
        ("ibv_destroy_srq", 1),
        ("ibv_create_ah", 1),
        ("ibv_destroy_ah", 1),
    ];
    for (name, n) in want {
        assert_eq!(calls.get(name), Some(n), "calls of {name}: {calls:?}\n{w}");
    }
    assert_eq!(
        r.trace.as_ref().unwrap().first().map(String::as_str),
        Some("init")
    );
    // Nothing else: a call the test did not expect fails here.
    let expected: usize = want.iter().map(|(_, n)| n).sum();
    assert_eq!(
        r.trace.as_ref().unwrap().len(),
        expected,
        "unexpected calls: {calls:?}"
    );
}

/// `RXE_PROVIDER` unset or `soft`: the soft devices only, nothing loaded,
/// nothing said, even with `RXE_LIBIBVERBS` set.
#[test]
fn unset_or_soft_never_loads_the_system_library() {
    let Some(s) = setup() else { return };
    for (tag, env, soft) in [
        ("unset", &[("RXE_LIBIBVERBS", fake(s))][..], (203, 204)),
        (
            "soft",
            &[("RXE_PROVIDER", "soft"), ("RXE_LIBIBVERBS", fake(s))][..],
            (205, 206),
        ),
    ] {
        let r = run(s, tag, Some(soft), env);
        let w = r.whole();
        r.assert_clean();
        assert_eq!(r.devices(), ["rxe0", "rxe1"], "{tag}: {w}");
        assert!(r.trace.is_none(), "{tag}: the fake was loaded\n{w}");
        assert!(
            !r.maps().iter().any(|m| m.contains("fakeverbs")),
            "{tag}: {w}"
        );
        assert!(r.err.trim().is_empty(), "{tag}: said something\n{w}");
        assert!(r.out.contains("ok soft_send"), "{tag}: {w}");
    }
}

/// `RXE_PROVIDER=native`: the system library's devices only.
#[test]
fn native_lists_only_the_system_librarys_devices() {
    let Some(s) = setup() else { return };
    let r = run(
        s,
        "native",
        Some((207, 208)),
        &[("RXE_PROVIDER", "native"), ("RXE_LIBIBVERBS", fake(s))],
    );
    let w = r.whole();
    r.assert_clean();
    assert_eq!(r.devices(), ["fake0"], "{w}");
    assert!(r.oks("native_") >= 35, "{w}");
    assert_eq!(r.oks("soft_"), 0, "{w}");
    assert!(r.messages().is_empty(), "{w}");
}

/// A missing, broken or wrong `RXE_LIBIBVERBS` under `auto`: the soft
/// devices, and one line that says what went wrong.
#[test]
fn bad_system_library_leaves_the_soft_devices_with_one_line() {
    let Some(s) = setup() else { return };
    let text = s.dir.join("not-a-library.so.1");
    std::fs::write(&text, "not an ELF file\n").unwrap();
    let own = s.libdir.join("libibverbs.so.1");
    let cases = [
        (
            "missing",
            "/nonexistent/libibverbs.so.1",
            "no such file",
            209,
        ),
        ("broken", text.to_str().unwrap(), "cannot load", 211),
        ("ours", own.to_str().unwrap(), "is this library", 213),
    ];
    for (tag, path, why, a) in cases {
        let r = run(
            s,
            tag,
            Some((a, a + 1)),
            &[("RXE_PROVIDER", "auto"), ("RXE_LIBIBVERBS", path)],
        );
        let w = r.whole();
        r.assert_clean();
        assert_eq!(r.devices(), ["rxe0", "rxe1"], "{tag}: {w}");
        assert!(r.out.contains("ok soft_send"), "{tag}: {w}");
        let m = r.messages();
        assert_eq!(m.len(), 1, "{tag}: want one line\n{w}");
        assert!(m[0].contains(path), "{tag}: {}", m[0]);
        assert!(m[0].contains(why), "{tag}: {}", m[0]);
        assert!(m[0].contains("soft devices only"), "{tag}: {}", m[0]);
        assert_eq!(r.err.lines().count(), 1, "{tag}: {w}");
    }
    // native with nothing to load: no list (ENOSYS, as libibverbs without
    // kernel support), and one line.
    let r = run(
        s,
        "native-missing",
        None,
        &[
            ("RXE_PROVIDER", "native"),
            ("RXE_LIBIBVERBS", "/nonexistent/libibverbs.so.1"),
        ],
    );
    let w = r.whole();
    r.assert_clean();
    assert!(
        r.out.contains(&format!("list NULL {}", 38 /* ENOSYS */)),
        "{w}"
    );
    assert_eq!(r.messages().len(), 1, "{w}");
    // An RXE_PROVIDER that means nothing: soft, and one line naming it.
    let r = run(
        s,
        "sideways",
        Some((215, 216)),
        &[("RXE_PROVIDER", "sideways")],
    );
    let w = r.whole();
    r.assert_clean();
    assert_eq!(r.devices(), ["rxe0", "rxe1"], "{w}");
    let m = r.messages();
    assert_eq!(m.len(), 1, "{w}");
    assert!(m[0].contains("sideways"), "{w}");
}

/// Debian's own libibverbs, found without `RXE_LIBIBVERBS`: it loads in a
/// namespace of its own (with its providers) beside the drop-in, and the
/// soft devices still work. No RDMA device here, so it adds none.
#[test]
fn auto_loads_debians_libibverbs_apart() {
    let Some(s) = setup() else { return };
    if !Path::new(SYSTEM_LIB).exists() {
        eprintln!("skipped: no {SYSTEM_LIB}");
        return;
    }
    let r = run(s, "debian", Some((217, 218)), &[("RXE_PROVIDER", "auto")]);
    let w = r.whole();
    r.assert_clean();
    assert_eq!(r.devices()[..2], ["rxe0", "rxe1"], "{w}");
    assert!(r.out.contains("ok soft_send"), "{w}");
    let real = std::fs::canonicalize(SYSTEM_LIB).unwrap();
    assert!(
        r.maps().iter().any(|m| Path::new(m) == real),
        "{} not mapped\n{w}",
        real.display()
    );
    assert!(r.messages().is_empty(), "{w}");
}
