//! Middleware over rxe-rs, unmodified (issue 32): the device view that
//! `rxe exec` gives programs (`rxe-verbs/devview`: `/dev/infiniband` and
//! `/sys/class/infiniband`), and Debian's UCX 1.13 on it: `ucx_info` finds
//! the soft device, and `ucx_perftest` pairs (a server and a client process
//! on 127.0.6.x) run UCT's rc_verbs and ud_verbs and UCP over them with
//! UCX's defaults, the device chosen with `UCX_NET_DEVICES` only; and MPI
//! over UCX: `tests/c/mpi_check.c` (ping-pong at three sizes with every
//! byte checked, an allreduce checked on every rank, a bandwidth loop)
//! under Open MPI's `mpirun` and MPICH's `mpiexec`, 2 ranks on one soft
//! device address and 4 over two.
//!
//! `ucx-utils`, `openmpi-bin`, `libopenmpi-dev`, `mpich` and `libmpich-dev`
//! come from `bash tests/setup.sh`; a missing program fails the test unless
//! `RXE_SKIP_MIDDLEWARE_TESTS=1` says to skip.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The `rxe` executable with the drop-in and the device view's shim beside it.
fn rxe_bin() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        rxe_tests::cargo_build(&[
            "--release",
            "-p",
            "rxe-tool",
            "-p",
            "rxe-ibverbs",
            "-p",
            "rxe-devview",
        ])
        .into_iter()
        .find(|f| f.file_name().is_some_and(|n| n == "rxe"))
        .expect("cargo reported no rxe executable")
    })
}

/// False (after saying why) when the tests are to be skipped; panics when
/// `program` is missing and they are not.
fn have(program: &str) -> bool {
    let found = std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(program).is_file()));
    if found {
        return true;
    }
    if std::env::var("RXE_SKIP_MIDDLEWARE_TESTS").is_ok_and(|v| v == "1") {
        eprintln!("skipped: {program} is not installed (RXE_SKIP_MIDDLEWARE_TESTS=1)");
        return false;
    }
    panic!(
        "{program} is not installed: run `bash tests/setup.sh` (or set \
         RXE_SKIP_MIDDLEWARE_TESTS=1)"
    );
}

/// `rxe exec -d ADDR -- ARGS` with `env` added, started.
fn exec(addr: &str, env: &[(&str, &str)], args: &[&str]) -> Child {
    Command::new(rxe_bin())
        .args(["exec", "-d", addr, "--"])
        .args(args)
        .env_remove("RXE_DEVICES")
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("start {args:?}: {e}"))
}

/// Waits for `c` at most `limit` (then kills it); its success and output.
fn finish(mut c: Child, limit: Duration) -> (bool, String) {
    let start = Instant::now();
    let ok = loop {
        if let Some(s) = c.try_wait().unwrap() {
            break s.success();
        }
        if start.elapsed() > limit {
            let _ = c.kill();
            let _ = c.wait();
            break false;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut out = String::new();
    c.stdout.take().unwrap().read_to_string(&mut out).unwrap();
    c.stderr.take().unwrap().read_to_string(&mut out).unwrap();
    (ok, out)
}

/// One program under `rxe exec`, to its end.
fn run(addr: &str, args: &[&str]) -> (bool, String) {
    finish(exec(addr, &[], args), Duration::from_secs(30))
}

#[test]
fn the_device_view_shows_a_device_node_and_sysfs_files_and_nothing_else_changes() {
    let a = "127.0.6.2";
    // a character device the program may read and write, also to calls
    // that do not follow links
    let (ok, out) = run(a, &["stat", "-c", "%F %a", "/dev/infiniband/uverbs0"]);
    assert!(ok, "{out}");
    assert_eq!(out.trim(), "character special file 666");
    let (ok, out) = run(
        a,
        &[
            "test",
            "-r",
            "/dev/infiniband/uverbs0",
            "-a",
            "-w",
            "/dev/infiniband/uverbs0",
        ],
    );
    assert!(ok, "{out}");
    // what UCX, Open MPI and hwloc read, through fopen, open and readlink
    let ib = "/sys/class/infiniband/rxe0";
    let (ok, out) = run(
        a,
        &[
            "cat",
            &format!("{ib}/ports/1/gid_attrs/types/0"),
            &format!("{ib}/ports/1/gids/0"),
            &format!("{ib}/ports/1/state"),
            &format!("{ib}/ports/1/link_layer"),
            &format!("{ib}/node_type"),
            "/sys/class/infiniband_verbs/uverbs0/ibdev",
        ],
    );
    assert!(ok, "{out}");
    assert_eq!(
        out,
        "RoCE v2\n0000:0000:0000:0000:0000:ffff:7f00:0602\n4: ACTIVE\nEthernet\n1: CA\nrxe0\n"
    );
    let (ok, out) = run(a, &["readlink", &format!("{ib}/device/driver")]);
    assert!(ok && out.trim().ends_with("/rxe_rs"), "{out}");
    // realpath answers in the program's terms
    let (ok, out) = run(a, &["realpath", &format!("{ib}/ports/1/../1/state")]);
    assert!(ok, "{out}");
    assert_eq!(out.trim(), format!("{ib}/ports/1/state"));
    // the node GUID is the one the drop-in reports
    let (ok, guid) = run(a, &["cat", &format!("{ib}/node_guid")]);
    assert!(ok, "{guid}");
    let (ok, info) = run(a, &["ibv_devinfo", "-d", "rxe0"]);
    assert!(
        ok && info.contains(&format!("node_guid:\t\t\t{}", guid.trim())),
        "{info}"
    );
    // a path the view does not hold is ENOENT, as from sysfs
    let (ok, out) = run(a, &["cat", &format!("{ib}/ports/2/state")]);
    assert!(!ok && out.contains("No such file or directory"), "{out}");
    // programs the program starts see it too
    let (ok, out) = run(
        a,
        &["sh", "-c", &format!("cat {ib}/ports/1/gid_attrs/types/0")],
    );
    assert!(ok && out == "RoCE v2\n", "{out}");
    // every other path is what it is without the view
    let outside = [
        "/etc/hostname",
        "/proc/self/status",
        "/sys/class/net/lo/mtu",
    ];
    for p in outside {
        let (ok, with) = run(a, &["stat", "-L", "-c", "%d %i %s %F", p]);
        let without = Command::new("stat")
            .args(["-L", "-c", "%d %i %s %F", p])
            .output()
            .unwrap();
        let without = String::from_utf8_lossy(&without.stdout);
        if p.starts_with("/proc/self") {
            assert!(ok, "{with}");
            continue;
        }
        assert!(ok && with == without, "{p}: {with} against {without}");
    }
    // and --no-device-view leaves the system's directories alone
    let out = Command::new(rxe_bin())
        .args([
            "exec",
            "-d",
            a,
            "--no-device-view",
            "--",
            "stat",
            "/dev/infiniband/uverbs0",
        ])
        .output()
        .unwrap();
    let real = Path::new("/dev/infiniband/uverbs0").exists();
    assert_eq!(out.status.success(), real, "{out:?}");
}

#[test]
fn ucx_info_lists_rc_verbs_and_ud_verbs_on_the_soft_device() {
    if !have("ucx_info") {
        return;
    }
    let (ok, out) = run("127.0.6.4", &["ucx_info", "-d"]);
    assert!(ok, "{out}");
    for tl in ["rc_verbs", "ud_verbs"] {
        let at = out
            .find(&format!("Transport: {tl}"))
            .unwrap_or_else(|| panic!("no {tl} in ucx_info -d:\n{out}"));
        assert!(
            out[at..]
                .lines()
                .nth(1)
                .is_some_and(|l| l.contains("Device: rxe0:1")),
            "{tl} is not on rxe0:1:\n{out}"
        );
    }
}

/// A ucx_perftest pair: the server on 127.0.6.N, the client on N+1; both
/// must end with UCX's final report line and exit 0.
fn perftest_pair(n: u8, port: u16, args: &[&str], env: &[(&str, &str)]) -> String {
    let (srv, cli) = (format!("127.0.6.{n}"), format!("127.0.6.{}", n + 1));
    perftest_between(&srv, &cli, port, args, env)
}

/// [`perftest_pair`] with the server's and the client's device on the
/// addresses given (one address for both is two processes sharing it).
fn perftest_between(
    srv: &str,
    cli: &str,
    port: u16,
    args: &[&str],
    env: &[(&str, &str)],
) -> String {
    if !have("ucx_perftest") {
        return String::new();
    }
    let p = port.to_string();
    let mut common = vec!["ucx_perftest", "-p", &p, "-n", "500"];
    common.extend_from_slice(args);
    let server = exec(srv, env, &common);
    // The server listens on its TCP port before the client starts: a
    // socket in state LISTEN (0A) on that port, IPv4 or IPv6. (A socket
    // only bound to it, which the server has for a moment before its
    // listen(2), let the client in too early: "connect() failed:
    // Connection refused".)
    let listening = || {
        ["/proc/net/tcp", "/proc/net/tcp6"].iter().any(|f| {
            std::fs::read_to_string(f)
                .unwrap_or_default()
                .lines()
                .any(|l| {
                    let mut w = l.split_whitespace();
                    let local = w.nth(1);
                    let state = w.nth(1);
                    local.is_some_and(|a| a.ends_with(&format!(":{port:04X}")))
                        && state == Some("0A")
                })
        })
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline && !listening() {
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut client_args = vec!["ucx_perftest", srv];
    client_args.extend_from_slice(&common[1..]);
    let client = exec(cli, env, &client_args);
    let (cok, cout) = finish(client, Duration::from_secs(60));
    let (sok, sout) = finish(server, Duration::from_secs(20));
    assert!(
        cok && sok && cout.lines().any(|l| l.starts_with("Final:")),
        "ucx_perftest {args:?}\nclient:\n{cout}\nserver:\n{sout}"
    );
    cout
}

const UCT: [(&str, &str); 0] = [];

#[test]
fn ucx_rc_verbs_am_lat() {
    perftest_pair(
        10,
        13410,
        &["-d", "rxe0:1", "-x", "rc_verbs", "-t", "am_lat"],
        &UCT,
    );
}

#[test]
fn ucx_rc_verbs_put_bw() {
    perftest_pair(
        12,
        13412,
        &["-d", "rxe0:1", "-x", "rc_verbs", "-t", "put_bw"],
        &UCT,
    );
}

#[test]
fn ucx_rc_verbs_get_bw() {
    perftest_pair(
        14,
        13414,
        &[
            "-d", "rxe0:1", "-x", "rc_verbs", "-t", "get", "-D", "zcopy", "-s", "4096",
        ],
        &UCT,
    );
}

#[test]
fn ucx_rc_verbs_add_lat() {
    perftest_pair(
        16,
        13416,
        &["-d", "rxe0:1", "-x", "rc_verbs", "-t", "add_lat"],
        &UCT,
    );
}

/// Two processes on one address (each its own soft device there, the
/// address's datagrams passed between them by QPN): rc_verbs between them,
/// and ud_verbs, whose address handles name that one address.
#[test]
fn ucx_between_two_processes_on_one_address() {
    for (port, tl) in [(13430, "rc_verbs"), (13431, "ud_verbs")] {
        perftest_between(
            "127.0.6.30",
            "127.0.6.30",
            port,
            &["-d", "rxe0:1", "-x", tl, "-t", "am_lat"],
            &UCT,
        );
    }
}

/// UD receives carry the RoCE v2 L3 type in `wc.sl`, which UCX's ud_verbs
/// reads to find the IPv4 header in the GRH area (with 0 it dropped every
/// datagram).
#[test]
fn ucx_ud_verbs_am_lat() {
    perftest_pair(
        18,
        13418,
        &["-d", "rxe0:1", "-x", "ud_verbs", "-t", "am_lat"],
        &UCT,
    );
}

/// UCP with UCX's own transport selection, limited to the soft device: its
/// network device, and no shared memory or TCP, which two processes of one
/// host would otherwise take (UCP wires RC up over UD).
#[test]
fn ucp_tag_lat_and_tag_bw() {
    let env = [
        ("UCX_NET_DEVICES", "rxe0:1"),
        ("UCX_TLS", "^sm,tcp"),
        // (UCP then names the transport each endpoint's lanes took)
        ("UCX_LOG_LEVEL", "info"),
    ];
    for (n, port, test) in [(20, 13420, "tag_lat"), (22, 13422, "tag_bw")] {
        let out = perftest_pair(n, port, &["-t", test], &env);
        assert!(
            out.is_empty() || out.contains("tag(rc_verbs/rxe0:1)"),
            "{test}: UCP did not take rc_verbs on rxe0:1:\n{out}"
        );
    }
}

/// `tests/c/mpi_check.c` built with `mpicc` (`mpicc.openmpi` or
/// `mpicc.mpich`), once per MPI.
fn mpi_program(mpicc: &str) -> Option<PathBuf> {
    if !have(mpicc) {
        return None;
    }
    // Built once per compiler for all the tests of this process: the tests
    // run in parallel, and one rebuilding the file under another's running
    // job made that job fail to start ("could not access or execute an
    // executable") or, once, hang in mpirun.
    static BUILT: std::sync::Mutex<Vec<(String, PathBuf)>> = std::sync::Mutex::new(Vec::new());
    let mut built = BUILT.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, exe)) = built.iter().find(|(c, _)| c == mpicc) {
        return Some(exe.clone());
    }
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let exe = dir.join(format!("mpi_check-{mpicc}-{}", std::process::id()));
    let src = rxe_tests::tests_dir().join("c/mpi_check.c");
    let out = Command::new(mpicc)
        .args(["-O2", "-Wall", "-Werror", "-o"])
        .arg(&exe)
        .arg(&src)
        .output()
        .unwrap();
    assert!(out.status.success(), "{mpicc}: {out:?}");
    built.push((mpicc.to_string(), exe.clone()));
    Some(exe)
}

/// Runs an MPI job's command `c` with the environment every MPI job here
/// gets, and returns what it printed (standard output, then error) after
/// checking that it exited 0.
fn run_mpi(c: Command, what: &str) -> String {
    // A launcher can hang before any rank starts (seen once with Open MPI
    // across two namespaces: one host's orted died, mpirun waited for it
    // without end). Such a run says nothing about the RDMA path: it is
    // bounded, and tried once more; a hang after a rank started fails.
    let (mut timed_out, mut text) = run_mpi_once(&c, what);
    let started = text.contains("mpi_check: rank") || text.contains("rank on rxe");
    if timed_out && !started {
        eprintln!("{what}: the launcher hung before any rank started; once more:\n{text}");
        (timed_out, text) = run_mpi_once(&c, what);
    }
    assert!(!timed_out, "{what}: no end after {MPI_LIMIT_S} s:\n{text}");
    text
}

/// How long one MPI job may take (they end in seconds).
const MPI_LIMIT_S: u32 = 60;

/// Runs `c` under `timeout`; whether it timed out, and its output.
fn run_mpi_once(c: &Command, what: &str) -> (bool, String) {
    let mut t = Command::new("timeout");
    t.args(["-k", "10", &MPI_LIMIT_S.to_string()])
        .arg(c.get_program())
        .args(c.get_args());
    for (k, v) in c.get_envs() {
        match v {
            Some(v) => t.env(k, v),
            None => t.env_remove(k),
        };
    }
    if let Some(d) = c.get_current_dir() {
        t.current_dir(d);
    }
    let out = t
        .env_remove("RXE_DEVICES")
        // Debian's Open MPI turns pml ucx off; a device whose driver is not
        // mlx* is "transports only" to it without pml_ucx_devices
        .env("OMPI_MCA_pml", "ucx")
        .env("OMPI_MCA_pml_ucx_devices", "any")
        // the soft devices, not shared memory or TCP between two processes
        .env("UCX_TLS", "^sm,tcp")
        // (UCP then names the transport each endpoint's lanes took)
        .env("UCX_LOG_LEVEL", "info")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    // (timeout exits 124 when it stopped the job, 137 when it killed it)
    let timed_out = matches!(out.status.code(), Some(124 | 137));
    assert!(timed_out || out.status.success(), "{what}:\n{text}");
    (timed_out, text)
}

/// An MPI job under `rxe exec` over `addrs` (rxe0, rxe1, ...): every rank
/// must report ok, the job must exit 0, and UCP must have taken rc_verbs
/// on a soft device.
fn mpi_job(addrs: &[&str], launcher: &[&str], ranks: usize) {
    let mut c = Command::new(rxe_bin());
    c.arg("exec");
    for a in addrs {
        c.args(["-d", a]);
    }
    c.arg("--").args(launcher);
    let text = run_mpi(c, &format!("{launcher:?}"));
    for r in 0..ranks {
        assert!(
            text.contains(&format!("mpi_check: rank {r} of {ranks} ok")),
            "rank {r}:\n{text}"
        );
    }
    assert!(
        text.contains("rc_verbs/rxe"),
        "UCP did not take rc_verbs:\n{text}"
    );
}

#[test]
fn open_mpi_over_ucx_two_ranks_on_one_address_and_four_over_two() {
    let Some(exe) = mpi_program("mpicc.openmpi") else {
        return;
    };
    let exe = exe.to_str().unwrap();
    let base = ["mpirun", "--allow-run-as-root", "--oversubscribe"];
    let x = ["-x", "UCX_TLS", "-x", "UCX_LOG_LEVEL"];
    let mut two: Vec<&str> = base.to_vec();
    two.extend(["-np", "2"]);
    two.extend(x);
    two.extend(["-x", "UCX_NET_DEVICES=rxe0:1", exe]);
    mpi_job(&["127.0.6.40"], &two, 2);
    // two app contexts, one per address (-x applies per context)
    let mut four: Vec<&str> = base.to_vec();
    for dev in ["UCX_NET_DEVICES=rxe0:1", "UCX_NET_DEVICES=rxe1:1"] {
        if four.len() > base.len() {
            four.push(":");
        }
        four.extend(["-np", "2"]);
        four.extend(x);
        four.extend(["-x", dev, exe]);
    }
    mpi_job(&["127.0.6.41", "127.0.6.42"], &four, 4);
}

#[test]
fn mpich_over_ucx_two_ranks_on_one_address_and_four_over_two() {
    let Some(exe) = mpi_program("mpicc.mpich") else {
        return;
    };
    let exe = exe.to_str().unwrap();
    // one hydra context per device (hydra passes its whole environment on)
    let context = |dev: &'static str| ["-n", "2", "-env", "UCX_NET_DEVICES", dev, exe];
    let mut two = vec!["mpiexec.mpich"];
    two.extend(context("rxe0:1"));
    mpi_job(&["127.0.6.44"], &two, 2);
    let mut four = two.clone();
    four.push(":");
    four.extend(context("rxe1:1"));
    mpi_job(&["127.0.6.45", "127.0.6.46"], &four, 4);
}

/// Two "hosts" for an MPI job: two network namespaces of the test's own
/// joined by a veth pair (10.81.0.1 in the first, 10.81.0.2 in the
/// second), a launcher agent that runs its command in host h1's or h2's
/// namespace with that host's soft device (as ssh would run it on the
/// host), and a program that says where it runs. The first interface's
/// name is for launchers that want one.
struct TwoHosts {
    n1: rxe_tests::netns::Netns,
    n2: rxe_tests::netns::Netns,
    veth1: String,
    agent: PathBuf,
    where_sh: PathBuf,
}

impl TwoHosts {
    fn new(what: &str) -> Option<TwoHosts> {
        use rxe_tests::netns::Netns;
        use std::os::unix::fs::PermissionsExt;
        let (Some(n1), Some(n2)) = (
            Netns::new(&format!("{what}1"), &[]),
            Netns::new(&format!("{what}2"), &[]),
        ) else {
            eprintln!("skipped: cannot create network namespaces (not root?)");
            return None;
        };
        let tag = std::process::id() % 100_000;
        let (v1, v2) = (format!("rx{what}{tag}a"), format!("rx{what}{tag}b"));
        let ip = |args: &[&str]| {
            let st = Command::new("ip").args(args).status().unwrap();
            assert!(st.success(), "ip {args:?}");
        };
        ip(&["link", "add", &v1, "type", "veth", "peer", "name", &v2]);
        ip(&["link", "set", &v1, "netns", n1.name()]);
        ip(&["link", "set", &v2, "netns", n2.name()]);
        n1.ip(&["addr", "add", "10.81.0.1/24", "dev", &v1]);
        n2.ip(&["addr", "add", "10.81.0.2/24", "dev", &v2]);
        n1.ip(&["link", "set", &v1, "up"]);
        n2.ip(&["link", "set", &v2, "up"]);
        // Open MPI quotes every -mca value it passes on and its URI holds
        // ';': the agent hands the command line to a shell, as ssh would
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
        let agent = dir.join(format!("{what}-agent-{tag}.sh"));
        std::fs::write(
            &agent,
            format!(
                "#!/bin/sh\nhost=$1; shift\ncase $host in\n\
                 h1) ns={}; ip=10.81.0.1;;\nh2) ns={}; ip=10.81.0.2;;\n\
                 *) echo \"agent: no host $host\" >&2; exit 1;;\nesac\n\
                 exec ip netns exec \"$ns\" env RXE_DEVICES=rxe0=$ip /bin/sh -c \"$*\"\n",
                n1.name(),
                n2.name()
            ),
        )
        .unwrap();
        std::fs::set_permissions(&agent, std::fs::Permissions::from_mode(0o755)).unwrap();
        let where_sh = dir.join(format!("{what}-where-{tag}.sh"));
        std::fs::write(
            &where_sh,
            "#!/bin/sh\necho \"rank on $RXE_DEVICES in $(ip -o -4 addr show | grep -o '10\\.81\\.0\\.[0-9]')\"\n",
        )
        .unwrap();
        std::fs::set_permissions(&where_sh, std::fs::Permissions::from_mode(0o755)).unwrap();
        Some(TwoHosts {
            n1,
            n2,
            veth1: v1,
            agent,
            where_sh,
        })
    }

    /// `rxe exec -d 10.81.0.N -- ARGS` in namespace N (1 or 2), started,
    /// with `env` added.
    fn exec_in(&self, n: u8, env: &[(&str, &str)], args: &[&str]) -> Child {
        self.exec_at(n, &format!("10.81.0.{n}"), env, args)
    }

    /// [`TwoHosts::exec_in`] with the soft device on `addr`.
    fn exec_at(&self, n: u8, addr: &str, env: &[(&str, &str)], args: &[&str]) -> Child {
        let ns = if n == 1 { &self.n1 } else { &self.n2 };
        Command::new("ip")
            .args(["netns", "exec", ns.name()])
            .arg(rxe_bin())
            .args(["exec", "-d", addr, "--", "env"])
            .args(env.iter().map(|(k, v)| format!("{k}={v}")))
            .args(args)
            .env_remove("RXE_DEVICES")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("start {args:?}: {e}"))
    }

    /// Waits until something in namespace 1 listens on TCP `port`.
    fn wait_listen(&self, port: u16) {
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(20) {
            let out = Command::new("ip")
                .args(["netns", "exec", self.n1.name(), "ss", "-Hltn"])
                .output()
                .unwrap();
            if String::from_utf8_lossy(&out.stdout).contains(&format!(":{port} ")) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("nothing listens on TCP port {port} in {}", self.n1.name());
    }

    /// `rxe exec -d 10.81.0.1 -- LAUNCHER...` in the first namespace.
    fn launch(&self, launcher: &[&str]) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", self.n1.name()])
            .arg(rxe_bin())
            .args(["exec", "-d", "10.81.0.1", "--"])
            .args(launcher);
        c
    }

    /// Checks a job of `where_sh` ran one rank in each namespace, on its
    /// own device, and a job of mpi_check passed over rc_verbs.
    fn check(&self, job: impl Fn(&Path) -> String, exe: &Path) {
        let text = job(&self.where_sh);
        for a in ["10.81.0.1", "10.81.0.2"] {
            assert!(text.contains(&format!("rank on rxe0={a} in {a}")), "{text}");
        }
        let text = job(exe);
        for r in 0..2 {
            assert!(
                text.contains(&format!("mpi_check: rank {r} of 2 ok")),
                "{text}"
            );
        }
        assert!(text.contains("rc_verbs/rxe0:1"), "{text}");
        // (What the job measured, for whoever reads the test's output.)
        for l in text
            .lines()
            .filter(|l| l.contains("pingpong") || l.contains("bandwidth"))
        {
            eprintln!("{l}");
        }
    }
}

/// Open MPI across two "hosts" ([`TwoHosts`]): mpirun in the first
/// reaches both through the launcher agent (`plm_rsh_agent`), which runs
/// orted in each host's namespace with that host's soft device. Each rank
/// must run in its own namespace on its own device, and the job must pass
/// over rc_verbs.
#[test]
fn open_mpi_ranks_in_two_network_namespaces() {
    let Some(exe) = mpi_program("mpicc.openmpi") else {
        return;
    };
    let Some(h) = TwoHosts::new("ompi") else {
        return;
    };
    let agent = h.agent.to_str().unwrap().to_string();
    let job = |prog: &Path| {
        let mut c = h.launch(&[
            "mpirun",
            "--allow-run-as-root",
            "--oversubscribe",
            "--mca",
            "plm_rsh_agent",
            &agent,
            "--mca",
            "plm_rsh_no_tree_spawn",
            "1",
            "--mca",
            "oob_tcp_if_include",
            "10.81.0.0/24",
            // Each orted would bind its rank to core 0: both ranks on one
            // core of this one machine, busy-polling in turns.
            "--bind-to",
            "none",
            "-H",
            "h1,h2",
            "-np",
            "2",
            "-x",
            "UCX_TLS",
            "-x",
            "UCX_NET_DEVICES",
            "-x",
            "UCX_LOG_LEVEL",
        ]);
        c.arg(prog).env("UCX_NET_DEVICES", "rxe0:1");
        run_mpi(c, "mpirun over two namespaces")
    };
    h.check(job, &exe);
}

/// MPICH across the same two "hosts": hydra's rsh launcher is the agent,
/// its proxies reach mpiexec over the veth (`-iface`), and only UCX's
/// variables are passed on (`-genvlist`), so that each rank keeps the soft
/// device of its host that the agent gave its proxy.
#[test]
fn mpich_ranks_in_two_network_namespaces() {
    let Some(exe) = mpi_program("mpicc.mpich") else {
        return;
    };
    let Some(h) = TwoHosts::new("mpich") else {
        return;
    };
    let agent = h.agent.to_str().unwrap().to_string();
    let job = |prog: &Path| {
        let mut c = h.launch(&[
            "mpiexec.mpich",
            "-launcher",
            "rsh",
            "-launcher-exec",
            &agent,
            "-iface",
            &h.veth1,
            "-hosts",
            "h1,h2",
            "-genvlist",
            "UCX_TLS,UCX_NET_DEVICES,UCX_LOG_LEVEL",
            "-n",
            "2",
        ]);
        c.arg(prog).env("UCX_NET_DEVICES", "rxe0:1");
        run_mpi(c, "mpiexec.mpich over two namespaces")
    };
    h.check(job, &exe);
}

/// libfabric's verbs provider between two "hosts" ([`TwoHosts`]): a
/// device on a veth address has the RC (`FI_EP_MSG`) domain in `fi_info`
/// (libfabric leaves loopback interfaces out of it), and `fi_pingpong`
/// runs over MSG and over RDM (`verbs;ofi_rxm`) with its data checks (-c),
/// every size from 64 bytes to 1 MiB, between the two hosts and between
/// two processes of one host (on two addresses and on one). RDM needs `FI_UNIVERSE_SIZE`: rxm
/// sizes its CQ as (rx + tx queue) * universe size, 262144 by default,
/// above the 32767 CQEs kernel rxe and rxe-rs allow (docs/drop-in.md).
#[test]
fn libfabric_verbs_msg_and_rdm_across_namespaces_and_within_one() {
    if !have("fi_pingpong") || !have("fi_info") {
        return;
    }
    let Some(h) = TwoHosts::new("fab") else {
        return;
    };
    let (ok, text) = finish(
        h.exec_in(1, &[], &["fi_info", "-p", "verbs"]),
        Duration::from_secs(30),
    );
    assert!(ok, "{text}");
    assert!(
        text.contains("domain: rxe0\n") && text.contains("type: FI_EP_MSG"),
        "no RC domain for rxe0: {text}"
    );
    // The client in the other namespace; beside the server in the same
    // one, on a second address of its interface (the kernel's one rxe
    // device would hold both; here the device on .3 reaches the server's
    // on .1); and on the server's own address (two processes sharing it).
    h.n1.ip(&["addr", "add", "10.81.0.3/24", "dev", &h.veth1]);
    for (ns, addr) in [(2, "10.81.0.2"), (1, "10.81.0.3"), (1, "10.81.0.1")] {
        for (ep, env) in [("msg", &[][..]), ("rdm", &[("FI_UNIVERSE_SIZE", "16")][..])] {
            let args = ["fi_pingpong", "-p", "verbs", "-e", ep, "-c", "-I", "20"];
            let server = h.exec_in(1, env, &args);
            h.wait_listen(47592);
            let mut cargs = args.to_vec();
            cargs.push("10.81.0.1");
            let client = h.exec_at(ns, addr, env, &cargs);
            let (cok, ctext) = finish(client, Duration::from_secs(60));
            let (sok, stext) = finish(server, Duration::from_secs(20));
            let what = format!("fi_pingpong -e {ep}, client on {addr}");
            assert!(cok && sok, "{what}: client: {ctext}\nserver: {stext}");
            for size in ["64 ", "4k ", "1m "] {
                let row = ctext
                    .lines()
                    .find(|l| l.starts_with(size))
                    .unwrap_or_else(|| panic!("{what}: no {size}row: {ctext}"));
                assert!(row.contains(" =20 "), "{what}: {row}");
            }
        }
    }
}

/// A rank killed mid-run (SIGKILL, while ranks 0 and 1 ping-pong over
/// rc_verbs: `mpi_check --loop`) leaves the job an error, not a hang:
/// Open MPI's mpirun and MPICH's mpiexec must end nonzero within 60 s,
/// name the killed process, and leave no rank of the job running.
#[test]
fn a_rank_killed_mid_run_ends_the_job_with_an_error() {
    // mpicc, the launcher's command line for a program, the address, and
    // what the launcher says of the killed rank
    type Job = (
        &'static str,
        fn(&str) -> Vec<String>,
        &'static str,
        &'static str,
    );
    let jobs: [Job; 2] = [
        (
            "mpicc.openmpi",
            |exe| {
                [
                    "mpirun",
                    "--allow-run-as-root",
                    "--oversubscribe",
                    "-np",
                    "2",
                    "-x",
                    "UCX_TLS",
                    "-x",
                    "UCX_NET_DEVICES=rxe0:1",
                    exe,
                    "--loop",
                ]
                .map(String::from)
                .to_vec()
            },
            "127.0.6.47",
            "exited on signal 9",
        ),
        (
            "mpicc.mpich",
            |exe| {
                [
                    "mpiexec.mpich",
                    "-n",
                    "2",
                    "-env",
                    "UCX_NET_DEVICES",
                    "rxe0:1",
                    exe,
                    "--loop",
                ]
                .map(String::from)
                .to_vec()
            },
            "127.0.6.48",
            "BAD TERMINATION",
        ),
    ];
    for (mpicc, args, addr, says) in jobs {
        let Some(exe) = mpi_program(mpicc) else {
            return;
        };
        let exe = exe.to_str().unwrap();
        let mut child = Command::new(rxe_bin())
            .args(["exec", "-d", addr, "--"])
            .args(args(exe))
            .env_remove("RXE_DEVICES")
            .env("OMPI_MCA_pml", "ucx")
            .env("OMPI_MCA_pml_ucx_devices", "any")
            .env("UCX_TLS", "^sm,tcp")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // rank 1 names its pid once the job runs
        let mut out = child.stdout.take().unwrap();
        let mut seen = String::new();
        let mut byte = [0u8; 1];
        let pid = loop {
            assert_eq!(
                out.read(&mut byte).unwrap(),
                1,
                "{mpicc}: ended early: {seen}"
            );
            seen.push(byte[0] as char);
            if let Some(rest) = seen.strip_prefix("mpi_check: rank 1 pid ") {
                if let Some(p) = rest.strip_suffix('\n') {
                    break p.trim().parse::<u32>().unwrap();
                }
            } else if seen.ends_with('\n') {
                seen.clear();
            }
        };
        // let the ping-pong run, then kill rank 1
        std::thread::sleep(Duration::from_millis(500));
        let st = Command::new("kill")
            .args(["-KILL", &pid.to_string()])
            .status()
            .unwrap();
        assert!(st.success(), "{mpicc}: kill {pid}");
        let killed = Instant::now();
        child.stdout = Some(out);
        let (ok, text) = finish(child, Duration::from_secs(60));
        assert!(
            killed.elapsed() < Duration::from_secs(59),
            "{mpicc}: the job hung after its rank was killed: {text}"
        );
        assert!(!ok, "{mpicc}: the job did not fail: {text}");
        assert!(text.contains(says), "{mpicc}: {text}");
        assert!(
            !text.contains("looped to its end"),
            "{mpicc}: a rank ran out its time instead: {text}"
        );
        let left = Command::new("pgrep")
            .args(["-f", &format!("{exe} --loop")])
            .output()
            .unwrap();
        assert!(
            left.stdout.is_empty(),
            "{mpicc}: ranks left running: {}",
            String::from_utf8_lossy(&left.stdout)
        );
    }
}
