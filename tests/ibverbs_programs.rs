//! Debian's unmodified RDMA programs over the drop-in libibverbs
//! (`rxe-verbs/ibverbs`), run by `rxe exec`: ibverbs-utils (`ibv_devices`,
//! `ibv_devinfo`, the four pingpong programs) and perftest
//! (`ib_{write,read,send,atomic}_{bw,lat}`), each a server and a client
//! process on loopback (127.0.4.x), talking RoCE v2 through rxe-rs.
//!
//! The programs come from Debian's `ibverbs-utils` and `perftest` packages
//! (`bash tests/setup.sh` installs them). A missing program fails the test
//! unless `RXE_SKIP_IBVERBS_TESTS=1` says to skip.

use rxe_tests::tests_dir;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// How long one program may run before it counts as hung.
const LIMIT: Duration = Duration::from_secs(90);

/// The `rxe` executable, with the drop-in `libibverbs.so` built beside it.
fn rxe_bin() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        let files =
            // Optimised, as users build them (see rxe_tests::dropin_library).
            rxe_tests::cargo_build(&[
                "--release", "-p", "rxe-tool", "-p", "rxe-ibverbs", "-p", "rxe-devview",
            ]);
        let bin = files
            .into_iter()
            .find(|f| f.file_name().is_some_and(|n| n == "rxe"))
            .expect("cargo reported no rxe executable");
        assert!(
            bin.with_file_name("libibverbs.so").exists(),
            "no libibverbs.so beside {}",
            bin.display()
        );
        bin
    })
}

/// False (after saying why) when the tests are to be skipped; panics when
/// `program` is missing and they are not.
fn have(program: &str) -> bool {
    let found = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).any(|d| d.join(program).is_file()))
        .unwrap_or(false);
    if found {
        return true;
    }
    if std::env::var("RXE_SKIP_IBVERBS_TESTS").is_ok_and(|v| v == "1") {
        eprintln!("skipped: {program} is not installed (RXE_SKIP_IBVERBS_TESTS=1)");
        return false;
    }
    panic!(
        "{program} is not installed: run `bash tests/setup.sh` (or set RXE_SKIP_IBVERBS_TESTS=1)"
    );
}

/// `rxe exec -d ADDR... -- ARGS`, started.
fn exec(devices: &[&str], args: &[&str]) -> Child {
    let mut c = Command::new(rxe_bin());
    c.arg("exec");
    for d in devices {
        c.args(["-d", d]);
    }
    c.arg("--")
        .args(args)
        .env_remove("RXE_DEVICES")
        .env("RXE_DEBUG", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("start {args:?}: {e}"))
}

/// What a finished program said.
#[derive(Debug)]
struct Ran {
    ok: bool,
    out: String,
}

/// Waits for `c` (killing it after [`LIMIT`]) and collects its output.
fn finish(mut c: Child, what: &str) -> Ran {
    let start = Instant::now();
    let status = loop {
        if let Some(s) = c.try_wait().unwrap() {
            break Some(s);
        }
        if start.elapsed() > LIMIT {
            let _ = c.kill();
            let _ = c.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut out = String::new();
    c.stdout.take().unwrap().read_to_string(&mut out).unwrap();
    let mut err = String::new();
    c.stderr.take().unwrap().read_to_string(&mut err).unwrap();
    let out = format!("{out}{err}");
    match status {
        None => Ran {
            ok: false,
            out: format!("{what}: killed after {LIMIT:?}\n{out}"),
        },
        Some(s) => Ran {
            ok: s.success(),
            out: format!("{what}: {s}\n{out}"),
        },
    }
}

/// Whether a TCP socket listens on `port` (the server's out-of-band
/// exchange is ready): from /proc, without connecting (a connection would
/// be taken for the client's).
fn listening(port: u16) -> bool {
    ["/proc/net/tcp", "/proc/net/tcp6"].iter().any(|f| {
        std::fs::read_to_string(f)
            .unwrap_or_default()
            .lines()
            .skip(1)
            .any(|l| {
                let cols: Vec<&str> = l.split_whitespace().collect();
                cols.len() > 3
                    && cols[3] == "0A"
                    && cols[1]
                        .rsplit(':')
                        .next()
                        .and_then(|p| u16::from_str_radix(p, 16).ok())
                        == Some(port)
            })
    })
}

/// A server on 127.0.4.`n` and a client on 127.0.4.`n+1`, both running
/// `args` (plus the TCP port `port` as `port_flag`), the client pointed at
/// the server. Both must succeed; returns their outputs.
fn pair(n: u8, port: u16, port_flag: &str, args: &[&str]) -> (String, String) {
    let (s_addr, c_addr) = (format!("127.0.4.{n}"), format!("127.0.4.{}", n + 1));
    let port_s = port.to_string();
    let mut sargs: Vec<&str> = args.to_vec();
    sargs.extend([port_flag, &port_s]);
    let server = exec(&[&s_addr], &sargs);
    let start = Instant::now();
    while !listening(port) {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "{args:?}: the server never listened on TCP {port}:\n{}",
            finish(server, "server").out
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut cargs = sargs.clone();
    cargs.push(&s_addr);
    let client = exec(&[&c_addr], &cargs);
    let c = finish(client, "client");
    let s = finish(server, "server");
    assert!(
        c.ok && s.ok,
        "{args:?} failed\n--- {}\n--- {}",
        s.out,
        c.out
    );
    (s.out, c.out)
}

/// The pingpong programs' closing line: `N iters in T seconds`.
fn assert_iters(out: &str, n: u32) {
    assert!(
        out.contains(&format!("{n} iters in")),
        "no '{n} iters in' line:\n{out}"
    );
}

#[test]
fn ibv_devices_lists_the_soft_devices() {
    if !have("ibv_devices") {
        return;
    }
    let r = finish(
        exec(&["127.0.4.2", "127.0.4.3"], &["ibv_devices"]),
        "ibv_devices",
    );
    assert!(r.ok, "{}", r.out);
    for (name, addr) in [("rxe0", "127.0.4.2"), ("rxe1", "127.0.4.3")] {
        // The node GUID rxe-verbs gives a soft device on that address.
        let guid = format!(
            "{:016x}",
            rxe_verbs::Device::soft(addr.parse().unwrap()).node_guid()
        );
        assert!(
            r.out.lines().any(|l| l.contains(name) && l.contains(&guid)),
            "{name} {guid} missing:\n{}",
            r.out
        );
    }
}

#[test]
fn ibv_devinfo_verbose_describes_a_roce_port() {
    if !have("ibv_devinfo") {
        return;
    }
    let r = finish(exec(&["127.0.4.4"], &["ibv_devinfo", "-v"]), "ibv_devinfo");
    assert!(r.ok, "{}", r.out);
    for want in [
        "hca_id:\trxe0",
        "PORT_ACTIVE (4)",
        "link_layer:\t\tEthernet",
        "GID[  0]:\t\t::ffff:127.0.4.4, RoCE v2",
        "active_mtu:\t\t4096 (5)",
        "atomic_cap:\t\t\tATOMIC_HCA (1)",
    ] {
        assert!(r.out.contains(want), "{want:?} missing:\n{}", r.out);
    }
    // Asking for a soft device prints nothing about native ones.
    assert!(!r.out.contains("no native RDMA device"), "{}", r.out);
}

/// `ibv_{rc,uc,ud,srq}_pingpong` with `extra` flags, 200 round trips.
fn pingpong(program: &str, n: u8, port: u16, extra: &[&str]) {
    if !have(program) {
        return;
    }
    let mut args = vec![program, "-d", "rxe0", "-g", "0", "-n", "200"];
    args.extend(extra);
    let (s, c) = pair(n, port, "-p", &args);
    assert_iters(&s, 200);
    assert_iters(&c, 200);
}

#[test]
fn ibv_rc_pingpong() {
    pingpong("ibv_rc_pingpong", 10, 19110, &[]);
}

#[test]
fn ibv_rc_pingpong_with_completion_events() {
    pingpong("ibv_rc_pingpong", 12, 19112, &["-e"]);
}

#[test]
fn ibv_rc_pingpong_checks_the_data() {
    pingpong("ibv_rc_pingpong", 14, 19114, &["-c", "-s", "8192"]);
}

#[test]
fn ibv_uc_pingpong() {
    pingpong("ibv_uc_pingpong", 16, 19116, &[]);
}

#[test]
fn ibv_ud_pingpong() {
    pingpong("ibv_ud_pingpong", 18, 19118, &[]);
}

#[test]
fn ibv_srq_pingpong() {
    pingpong("ibv_srq_pingpong", 20, 19120, &[]);
}

#[test]
fn ibv_srq_pingpong_with_completion_events() {
    pingpong("ibv_srq_pingpong", 22, 19122, &["-e"]);
}

/// A perftest program with `extra` flags; returns the client's result rows
/// (the lines after the `#bytes` header), at least `rows` of them.
fn perftest(program: &str, n: u8, port: u16, extra: &[&str], rows: usize) -> Vec<String> {
    if !have(program) {
        return Vec::new();
    }
    let mut args = vec![program, "-d", "rxe0", "-x", "0", "-n", "100"];
    args.extend(extra);
    let (_, c) = pair(n, port, "-p", &args);
    let table: Vec<String> = c
        .lines()
        .skip_while(|l| !l.contains("#bytes"))
        .skip(1)
        .take_while(|l| !l.starts_with("---"))
        .map(str::to_string)
        .collect();
    assert!(
        table.len() >= rows,
        "{program} {extra:?}: {} result rows, wanted {rows}:\n{c}",
        table.len()
    );
    for row in &table {
        // Every row measured something: a size, an iteration count and a
        // positive figure. (Any of them: 20 WRITEs of 2 bytes on a busy
        // machine print "0.00" MB/s at two decimals, peak and average,
        // while the message rate, at six, still shows.)
        let nums: Vec<f64> = row
            .split_whitespace()
            .filter_map(|w| w.parse().ok())
            .collect();
        assert!(nums.len() >= 3, "odd row {row:?}:\n{c}");
        assert!(
            nums[2..].iter().any(|&x| x > 0.0),
            "no figure in {row:?}:\n{c}"
        );
    }
    table
}

#[test]
fn perftest_write_bw() {
    perftest("ib_write_bw", 30, 19130, &[], 1);
}

#[test]
fn perftest_write_bw_all_sizes() {
    // -a: every size from 2 bytes to 8 MiB.
    perftest("ib_write_bw", 32, 19132, &["-a", "-n", "20"], 23);
}

#[test]
fn perftest_write_bw_several_qps() {
    perftest("ib_write_bw", 34, 19134, &["-q", "4"], 1);
}

#[test]
fn perftest_read_bw() {
    perftest("ib_read_bw", 36, 19136, &[], 1);
}

#[test]
fn perftest_send_bw() {
    perftest("ib_send_bw", 38, 19138, &[], 1);
}

#[test]
fn perftest_send_bw_ud() {
    perftest("ib_send_bw", 40, 19140, &["-c", "UD"], 1);
}

#[test]
fn perftest_atomic_bw() {
    perftest("ib_atomic_bw", 42, 19142, &[], 1);
}

#[test]
fn perftest_write_lat() {
    perftest("ib_write_lat", 44, 19144, &[], 1);
}

#[test]
fn perftest_read_lat_all_sizes() {
    perftest("ib_read_lat", 46, 19146, &["-a", "-n", "20"], 23);
}

#[test]
fn perftest_send_lat() {
    perftest("ib_send_lat", 48, 19148, &[], 1);
}

#[test]
fn perftest_send_lat_ud() {
    perftest("ib_send_lat", 50, 19150, &["-c", "UD"], 1);
}

#[test]
fn perftest_atomic_lat() {
    perftest("ib_atomic_lat", 52, 19152, &[], 1);
}

/// Several processes on one soft device's address, as on a kernel device:
/// two `ibv_rc_pingpong` pairs at once, both servers on 127.0.4.60 and both
/// clients on 127.0.4.61, checking every byte (`-c`). Each process's QP
/// numbers carry its own prefix, and a datagram the kernel hands to the
/// wrong process is passed on to its owner (`rxe_net::share`).
#[test]
fn two_processes_share_one_address() {
    if !have("ibv_rc_pingpong") {
        return;
    }
    let args = |port: &'static str| {
        vec![
            "ibv_rc_pingpong",
            "-d",
            "rxe0",
            "-g",
            "0",
            "-e",
            "-c",
            "-n",
            "300",
            "-p",
            port,
        ]
    };
    let servers = [
        exec(&["127.0.4.60"], &args("19160")),
        exec(&["127.0.4.60"], &args("19161")),
    ];
    let start = Instant::now();
    while !(listening(19160) && listening(19161)) {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the servers never listened"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let clients = [
        exec(
            &["127.0.4.61"],
            &[args("19160"), vec!["127.0.4.60"]].concat(),
        ),
        exec(
            &["127.0.4.61"],
            &[args("19161"), vec!["127.0.4.60"]].concat(),
        ),
    ];
    let mut outs = Vec::new();
    for (i, c) in clients.into_iter().enumerate() {
        outs.push(finish(c, &format!("client {i}")));
    }
    for (i, s) in servers.into_iter().enumerate() {
        outs.push(finish(s, &format!("server {i}")));
    }
    let all: String = outs
        .iter()
        .map(|r| r.out.as_str())
        .collect::<Vec<_>>()
        .join("\n---\n");
    for r in &outs {
        assert!(r.ok, "{all}");
        assert_iters(&r.out, 300);
    }
}

/// Debian's python3-pyverbs imports over the drop-in and a short pyverbs
/// program (`tests/python/pyverbs_rc.py`) moves data over RC between two
/// soft devices in one process, checking every byte.
#[test]
fn pyverbs_moves_data_over_rc() {
    let python = "/usr/bin/python3";
    let importable = Command::new(python)
        .args(["-c", "import pyverbs.device"])
        .status()
        .is_ok_and(|s| s.success());
    if !importable {
        if std::env::var("RXE_SKIP_IBVERBS_TESTS").is_ok_and(|v| v == "1") {
            eprintln!("skipped: Debian's python3-pyverbs is not installed");
            return;
        }
        panic!("{python} cannot import pyverbs: run `bash tests/setup.sh` (python3-pyverbs)");
    }
    let script = tests_dir().join("python").join("pyverbs_rc.py");
    let r = finish(
        exec(
            &["127.0.4.80", "127.0.4.81"],
            &[python, script.to_str().unwrap()],
        ),
        "pyverbs",
    );
    assert!(r.ok, "{}", r.out);
    assert!(
        r.out
            .contains("pyverbs: SEND 30 bytes and RDMA WRITE 2048 bytes checked"),
        "{}",
        r.out
    );
}

/// `rxe exec --print-env` prints the two variables a user sets to do the
/// same without the wrapper (its directory holds `libibverbs.so.1` and
/// `librdmacm.so.1`, both the drop-in), and they work: `ibv_devices` run
/// with just them lists the devices.
#[test]
fn rxe_exec_print_env_is_enough_without_the_wrapper() {
    if !have("ibv_devices") {
        return;
    }
    let out = Command::new(rxe_bin())
        .args(["exec", "-d", "127.0.4.90", "-d", "::1", "--print-env"])
        .env_remove("LD_LIBRARY_PATH")
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    let var = |name: &str| -> String {
        let line = text
            .lines()
            .find(|l| l.starts_with(&format!("export {name}='")))
            .unwrap_or_else(|| panic!("no {name} in:\n{text}"));
        line.split('\'').nth(1).unwrap().to_string()
    };
    assert_eq!(var("RXE_DEVICES"), "rxe0=127.0.4.90,rxe1=::1");
    let dir = PathBuf::from(var("LD_LIBRARY_PATH"));
    // One file under both sonames: the drop-in is libibverbs and librdmacm.
    for name in ["libibverbs.so.1", "librdmacm.so.1"] {
        assert_eq!(
            std::fs::canonicalize(dir.join(name)).unwrap(),
            std::fs::canonicalize(rxe_bin().with_file_name("libibverbs.so")).unwrap(),
            "{name}"
        );
    }
    let listed = Command::new("ibv_devices")
        .env("LD_LIBRARY_PATH", &dir)
        .env("RXE_DEVICES", var("RXE_DEVICES"))
        .output()
        .unwrap();
    let listed = String::from_utf8(listed.stdout).unwrap();
    assert!(
        listed.contains("rxe0") && listed.contains("rxe1"),
        "{listed}"
    );
}

/// A program that cannot be started, and a library that is not there, are
/// said plainly, with the exit statuses a shell uses.
#[test]
fn rxe_exec_reports_what_it_cannot_do() {
    let out = Command::new(rxe_bin())
        .args(["exec", "-d", "127.0.4.91", "--", "/nonexistent/program"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(127), "{out:?}");
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("cannot run /nonexistent/program"), "{err}");
    let out = Command::new(rxe_bin())
        .args([
            "exec",
            "-d",
            "127.0.4.91",
            "--lib",
            "/nonexistent/libibverbs.so",
            "--",
            "true",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("/nonexistent/libibverbs.so"), "{err}");
}

/// The names of the test faults (rxe_core::engine::test_fault) and the
/// line a device broken with one prints: none of them may be in a release
/// artefact.
const TEST_FAULT_STRINGS: [&str; 6] = [
    "ignore-write-access",
    "accept-neighbour-rkey",
    "corrupt-unaligned-read",
    "wedge-after-opcode",
    "garble-after-opcode",
    "broken on purpose",
];

fn contains(hay: &[u8], needle: &str) -> bool {
    hay.windows(needle.len()).any(|w| w == needle.as_bytes())
}

/// The release `rxe` and drop-in library, built as users build them, hold
/// no test-fault code (the test build of `rxe`, with the `test-fault`
/// feature, does: the check can fail), and ignore `RXE_TEST_FAULT` with a
/// line that says why.
#[test]
fn release_artefacts_have_no_test_faults() {
    let bin = rxe_bin();
    let lib = bin.with_file_name("libibverbs.so");
    for f in [bin, lib.as_path()] {
        let bytes = std::fs::read(f).unwrap();
        for s in TEST_FAULT_STRINGS {
            assert!(!contains(&bytes, s), "{} contains {s:?}", f.display());
        }
    }
    let test_build = std::fs::read(rxe_tests::rxe_bin()).unwrap();
    for s in TEST_FAULT_STRINGS {
        assert!(
            contains(&test_build, s),
            "the test build of rxe lacks {s:?}"
        );
    }
    let why = "ignoring RXE_TEST_FAULT: this build has no test faults";
    // The tool: a pingpong server that gives up after a second.
    let out = Command::new(bin)
        .args([
            "pingpong",
            "-d",
            "127.0.4.240",
            "-p",
            "19198",
            "--timeout",
            "1",
        ])
        .env("RXE_TEST_FAULT", "ignore-write-access")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(why), "rxe pingpong said:\n{err}");
    // The drop-in: ibv_devinfo opens the device.
    if have("ibv_devinfo") {
        let out = Command::new(bin)
            .args(["exec", "-d", "127.0.4.241", "--", "ibv_devinfo"])
            .env("RXE_TEST_FAULT", "ignore-write-access")
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "ibv_devinfo failed:\n{err}");
        assert!(
            err.contains(why),
            "ibv_devinfo over the drop-in said:\n{err}"
        );
    }
}
