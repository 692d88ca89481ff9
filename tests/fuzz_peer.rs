//! `rxe fuzz` against our own stack: `rxe pingpong` as the peer's server
//! (restarted in a loop, as the fuzzer's users run `ibv_rc_pingpong`: every
//! NAK that ends its QP ends the program), the fuzzer as its client on
//! another loopback address.
//!
//! Checks: a seeded campaign of 2000 packets ends with every oracle ok and
//! an answer histogram of several kinds; the server never panicked; the
//! same seed sends the same packets (the hash the tool prints), another
//! seed others; `--replay` of the saved campaign resends as many packets.
//!
//! Each oracle fires on a peer broken on purpose (`RXE_TEST_FAULT`, for
//! testing fuzzers only; see docs/fuzz-peers.md): a server whose QP stops
//! answering anything once it receives an RDMA READ request (liveness) and
//! one whose QP cuts every packet it sends short after one (peer-wire).
//! The finding replays against a freshly started broken server and not
//! against a healthy one, and the minimiser shrinks it to the READ.
//!
//! Against perftest's `ib_read_bw` server (`rxe perf read_bw`, looped the
//! same way), whose buffer is registered for remote READ and not WRITE:
//! a seeded campaign keeps the canary and data oracles ok on a healthy
//! server; on one that executes WRITEs without the permission
//! (`RXE_TEST_FAULT=ignore-write-access`) the canary oracle fires, and the
//! finding replays against a fresh broken server and not a healthy one. On
//! one that answers READs starting unaligned with a byte wrong
//! (`corrupt-unaligned-read`) the data oracle fires, and the canary stays
//! quiet. On one that honours a neighbour of the key it granted (the
//! variant bits wrong: `accept-neighbour-rkey`) the rkey oracle fires.
//! A canary finding is minimised to the READ and the WRITE that matter,
//! the WRITE renumbered into sequence, and the minimised finding replays.
//!
//! Address plan: 127.0.5.10/11 (port 19700) for the campaign and its
//! replay, 127.0.5.20/21 (port 19701) for the seeds; broken peers at
//! 127.0.5.40 (19710), .50 (19712), .60 (19714), their fuzzers at .41, .51,
//! .61, healthy peers at .42 (19711), .52 (19713), .62 (19715); perftest
//! servers at 127.0.5.70 (healthy, 19720), .72 (broken, 19721), .74
//! (healthy, 19722), their fuzzers at .71 and .73; 127.0.15.1 (broken,
//! 19740), its fuzzer at .2, .3 (healthy, 19741); 127.0.15.5 (broken,
//! 19742), its fuzzer at .6, .7 (healthy, 19743); 127.0.15.13 (broken,
//! 19745), its fuzzer at .14, .15 (healthy, 19746). The `rxe` binary is
//! found as in `perf_cli.rs` (`RXE_BIN` overrides).

use std::io::Read;
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rxe_tests::rxe_bin;

/// `rxe pingpong` as a server on `addr:port`, started again whenever it
/// ends, until dropped. Keeps what every run printed on stderr.
struct ServerLoop {
    stop: Arc<AtomicBool>,
    stderr: Arc<Mutex<String>>,
    runs: Arc<Mutex<u64>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl ServerLoop {
    fn start(addr: &str, port: u16) -> ServerLoop {
        ServerLoop::start_with(addr, port, None, 20)
    }

    /// A server broken on purpose with `RXE_TEST_FAULT=fault` (a healthy
    /// one for `None`), each run giving up after `timeout` seconds without
    /// a completion: how a wedged server comes back.
    fn start_with(addr: &str, port: u16, fault: Option<&str>, timeout: u32) -> ServerLoop {
        let args = [
            "pingpong",
            "-d",
            addr,
            "-p",
            &port.to_string(),
            "-n",
            "100000000",
            "--timeout",
            &timeout.to_string(),
        ]
        .map(str::to_string);
        ServerLoop::run(args.to_vec(), fault)
    }

    /// `rxe perf read_bw` (perftest's `ib_read_bw`) as a server on
    /// `addr:port` with a 4096-byte buffer, broken on purpose with
    /// `RXE_TEST_FAULT=fault`, or healthy.
    fn perftest(addr: &str, port: u16, fault: Option<&str>) -> ServerLoop {
        let args = [
            "perf",
            "read_bw",
            "-d",
            addr,
            "-p",
            &port.to_string(),
            "-s",
            "4096",
            "--timeout",
            "5",
        ]
        .map(str::to_string);
        ServerLoop::run(args.to_vec(), fault)
    }

    /// `rxe ARGS`, again whenever it ends.
    fn run(args: Vec<String>, fault: Option<&str>) -> ServerLoop {
        let fault = fault.map(str::to_string);
        let stop = Arc::new(AtomicBool::new(false));
        let stderr = Arc::new(Mutex::new(String::new()));
        let runs = Arc::new(Mutex::new(0));
        let (st, se, ru) = (stop.clone(), stderr.clone(), runs.clone());
        let thread = std::thread::spawn(move || {
            while !st.load(Ordering::Relaxed) {
                let mut cmd = Command::new(rxe_bin());
                match &fault {
                    Some(f) => cmd.env("RXE_TEST_FAULT", f),
                    None => cmd.env_remove("RXE_TEST_FAULT"),
                };
                let mut child = cmd
                    .args(&args)
                    .stdout(Stdio::null())
                    .stderr(Stdio::piped())
                    .spawn()
                    .expect("spawn rxe pingpong");
                *ru.lock().unwrap() += 1;
                while child.try_wait().unwrap().is_none() {
                    if st.load(Ordering::Relaxed) {
                        let _ = child.kill();
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(5));
                }
                let _ = child.wait();
                let mut err = String::new();
                if let Some(mut e) = child.stderr.take() {
                    let _ = e.read_to_string(&mut err);
                }
                se.lock().unwrap().push_str(&err);
            }
        });
        ServerLoop {
            stop,
            stderr,
            runs,
            thread: Some(thread),
        }
    }

    fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }
}

impl Drop for ServerLoop {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Waits for `child` at most `limit`, killing it past that.
fn finish(mut child: Child, limit: Duration) -> Output {
    let deadline = Instant::now() + limit;
    while child.try_wait().unwrap().is_none() {
        if Instant::now() >= deadline {
            let _ = child.kill();
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

struct Run {
    code: Option<i32>,
    out: String,
}

fn fuzz(args: &[&str]) -> Run {
    fuzz_windows(args, "50", "10")
}

/// `rxe fuzz` with a step window and grace of its own (milliseconds).
fn fuzz_windows(args: &[&str], window: &str, grace: &str) -> Run {
    let child = Command::new(rxe_bin())
        .arg("fuzz")
        .args(args)
        .args(["--window-ms", window, "--grace-ms", grace])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn rxe fuzz");
    let o = finish(child, Duration::from_secs(600));
    let out = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    Run {
        code: o.status.code(),
        out,
    }
}

/// The number after `prefix` on the line that starts with it.
fn field(out: &str, prefix: &str) -> Option<String> {
    out.lines()
        .find_map(|l| l.strip_prefix(prefix))
        .and_then(|r| r.split_whitespace().next())
        .map(str::to_string)
}

/// The answer histogram: kind -> steps.
fn histogram(out: &str) -> Vec<(String, u64)> {
    let mut in_hist = false;
    let mut h = Vec::new();
    for l in out.lines() {
        if l.starts_with("answers (") {
            in_hist = true;
            continue;
        }
        if in_hist {
            let Some(rest) = l.strip_prefix("  ") else {
                break;
            };
            if rest.starts_with('(') {
                continue;
            }
            if let Some((k, n)) = rest.rsplit_once(' ') {
                if let Ok(n) = n.parse() {
                    h.push((k.trim().to_string(), n));
                }
            }
        }
    }
    h
}

fn temp_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("rxe-fuzz-peer-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn campaign_against_rxe_pingpong_and_replay() {
    let server = ServerLoop::start("127.0.5.10", 19700);
    let dir = temp_dir("campaign");
    let out = dir.to_str().unwrap();
    let r = fuzz(&[
        "-d",
        "127.0.5.11",
        "--pingpong",
        "127.0.5.10:19700",
        "--seed",
        "7",
        "--packets",
        "2000",
        "--out",
        out,
        "--save",
    ]);
    let srv = server.stderr();
    assert!(
        !srv.contains("panicked"),
        "the peer (rxe pingpong) panicked under the campaign:\n{srv}\n--- fuzz:\n{}",
        r.out
    );
    assert_eq!(
        r.code,
        Some(0),
        "rxe fuzz found something or failed:\n{}",
        r.out
    );
    for o in ["liveness", "rkey", "sanity", "peer-wire"] {
        assert!(
            r.out.contains(&format!("oracle {o}: ok")),
            "oracle {o}:\n{}",
            r.out
        );
    }
    let h = histogram(&r.out);
    let kinds: Vec<&str> = h.iter().map(|(k, _)| k.as_str()).collect();
    for k in [
        "ACK",
        "NAK PSN sequence error",
        "NAK invalid request",
        "NAK remote access error",
        "silence",
    ] {
        assert!(
            kinds.contains(&k),
            "no {k:?} in the histogram {h:?}:\n{}",
            r.out
        );
    }
    let sent: usize = field(&r.out, "sent ").unwrap().parse().unwrap();
    assert!(sent >= 2000, "{}", r.out);
    // The server grants no key: READs, WRITEs and atomics with any key
    // were judged by the rkey oracle, and refused.
    let judged: u64 = field(&r.out, "rkey: ").unwrap().parse().unwrap();
    assert!(judged >= 5, "{judged} judged:\n{}", r.out);
    let connections = *server.runs.lock().unwrap();
    assert!(connections > 10, "the server ran {connections} times");

    // The saved campaign, replayed on new connections.
    let pcap = dir.join("sent.pcap");
    assert!(pcap.exists() && dir.join("sent.pcap.meta").exists());
    let rp = fuzz(&[
        "-d",
        "127.0.5.11",
        "--to",
        "127.0.5.10:19700",
        "--replay",
        pcap.to_str().unwrap(),
        "--out",
        out,
    ]);
    assert_eq!(rp.code, Some(0), "replay:\n{}", rp.out);
    let replayed: usize = field(&rp.out, "replayed ").unwrap().parse().unwrap();
    assert_eq!(replayed, sent, "replay:\n{}", rp.out);
    assert!(rp.out.contains("oracle liveness: ok"), "{}", rp.out);
    assert!(!server.stderr().contains("panicked"), "{}", server.stderr());
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn same_seed_same_packets() {
    let _server = ServerLoop::start("127.0.5.20", 19701);
    let dir = temp_dir("seeds");
    let run = |seed: &str| {
        let r = fuzz(&[
            "-d",
            "127.0.5.21",
            "--pingpong",
            "127.0.5.20:19701",
            "--seed",
            seed,
            "--packets",
            "400",
            "--out",
            dir.to_str().unwrap(),
        ]);
        assert_eq!(r.code, Some(0), "seed {seed}:\n{}", r.out);
        field(&r.out, "sent hash ").unwrap_or_else(|| panic!("no hash:\n{}", r.out))
    };
    let a = run("11");
    let b = run("11");
    let c = run("12");
    assert_eq!(a, b, "seed 11 sent different packets twice");
    assert_ne!(a, c, "seeds 11 and 12 sent the same packets");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn usage_errors_exit_2() {
    // No budget; no peer; a peer nobody serves (setup error).
    let r = fuzz(&["-d", "127.0.5.30", "--pingpong", "127.0.5.31:19702"]);
    assert_eq!(r.code, Some(2), "{}", r.out);
    let r = fuzz(&["-d", "127.0.5.30", "--packets", "1"]);
    assert_eq!(r.code, Some(2), "{}", r.out);
    let r = fuzz(&[
        "-d",
        "127.0.5.30",
        "--pingpong",
        "127.0.5.31:19702",
        "--packets",
        "1",
        "--liveness-timeout",
        "1",
    ]);
    assert_eq!(r.code, Some(2), "{}", r.out);
    assert!(r.out.contains("setup"), "{}", r.out);
    // --size is the perftest server's -s; a perftest server nobody serves.
    let r = fuzz(&[
        "-d",
        "127.0.5.30",
        "--pingpong",
        "127.0.5.31:19702",
        "--size",
        "4096",
        "--packets",
        "1",
    ]);
    assert_eq!(r.code, Some(2), "{}", r.out);
    let r = fuzz(&[
        "-d",
        "127.0.5.30",
        "--perftest",
        "127.0.5.31:19702",
        "--size",
        "0",
        "--packets",
        "1",
    ]);
    assert_eq!(r.code, Some(2), "{}", r.out);
    let r = fuzz(&[
        "-d",
        "127.0.5.30",
        "--perftest",
        "127.0.5.31:19702",
        "--packets",
        "1",
        "--liveness-timeout",
        "1",
    ]);
    assert_eq!(r.code, Some(2), "{}", r.out);
    assert!(r.out.contains("setup: no perftest exchange"), "{}", r.out);
}

/// The fault every broken peer below has: tripped by an RDMA READ request
/// (opcode 0x0c), which the fuzzer's `reth` and `any-opcode` arms send and
/// its own probes and the WRITE that ends a connection (0x0a) never do.
const READ_REQUEST: &str = "0x0c";

/// Fast windows for loopback, and a liveness timeout well inside the time
/// a wedged server (run with `--timeout 5`) takes to give up and come back:
/// after its QP wedges, a fresh connection is refused for seconds.
fn fuzz_fast(args: &[&str]) -> Run {
    let mut a = args.to_vec();
    a.extend(["--liveness-timeout", "1"]);
    fuzz_windows(&a, "20", "5")
}

/// The path after `oracle NAME: FINDING `.
fn finding(out: &str, oracle: &str) -> Option<PathBuf> {
    field(out, &format!("oracle {oracle}: FINDING ")).map(PathBuf::from)
}

/// A campaign against a broken peer: the oracle fires, exit status 1.
fn campaign_finds(
    server: &str,
    local: &str,
    dir: &std::path::Path,
    oracle: &str,
    budget: &str,
) -> (Run, PathBuf) {
    let r = fuzz_fast(&[
        "-d",
        local,
        "--pingpong",
        server,
        "--seed",
        "3",
        "--packets",
        "400",
        "--out",
        dir.to_str().unwrap(),
        "--minimise-budget",
        budget,
    ]);
    assert_eq!(
        r.code,
        Some(1),
        "no finding against a broken peer:\n{}",
        r.out
    );
    let f = finding(&r.out, oracle)
        .unwrap_or_else(|| panic!("oracle {oracle} did not fire:\n{}", r.out));
    assert!(f.exists(), "{}", f.display());
    assert!(
        std::fs::read_to_string(format!("{}.meta", f.display()))
            .unwrap()
            .contains(&format!("oracle {oracle}\n")),
        "the sidecar names no oracle"
    );
    (r, f)
}

/// Replays `file` at `server` from `local`: whether `oracle` fired again.
fn replay_fires(file: &std::path::Path, server: &str, local: &str, oracle: &str) -> bool {
    let dir = file.parent().unwrap().join("replays");
    let r = fuzz_fast(&[
        "-d",
        local,
        "--to",
        server,
        "--replay",
        file.to_str().unwrap(),
        "--out",
        dir.to_str().unwrap(),
    ]);
    let fired = finding(&r.out, oracle).is_some();
    let verdict = format!("the recording is a finding of oracle {oracle}: ");
    if fired {
        assert_eq!(r.code, Some(1), "{}", r.out);
        assert!(
            r.out.contains(&format!("{verdict}it fired again")),
            "{}",
            r.out
        );
    } else {
        assert!(r.out.contains(&format!("oracle {oracle}: ok")), "{}", r.out);
        assert!(
            r.out
                .contains(&format!("{verdict}it did not fire this time")),
            "{}",
            r.out
        );
    }
    fired
}

/// `minimised NAME: N packets (...) -> M packets (...)`: (N, M).
fn minimised(out: &str) -> Option<(usize, usize)> {
    let l = out.lines().find(|l| l.starts_with("minimised "))?;
    let (from, to) = l.split_once(" -> ")?;
    let n = from
        .split(": ")
        .nth(1)?
        .split_whitespace()
        .next()?
        .parse()
        .ok()?;
    let m = to.split_whitespace().next()?.parse().ok()?;
    Some((n, m))
}

#[test]
fn liveness_fires_on_a_wedged_peer_and_the_finding_replays() {
    let fault = format!("wedge-after-opcode={READ_REQUEST}");
    let (server, local) = ("127.0.5.40:19710", "127.0.5.41");
    let dir = temp_dir("wedge");
    let broken = ServerLoop::start_with("127.0.5.40", 19710, Some(&fault), 5);
    let healthy = ServerLoop::start_with("127.0.5.42", 19711, None, 5);
    let (r, f) = campaign_finds(server, local, &dir, "liveness", "0");
    // A wedged QP sends nothing, so nothing garbled either.
    assert!(r.out.contains("oracle peer-wire: ok"), "{}", r.out);
    assert!(r.out.contains("oracle sanity: ok"), "{}", r.out);
    assert!(
        !r.out.contains("minimise"),
        "a budget of 0 minimises nothing"
    );
    assert!(
        broken.stderr().contains("broken on purpose"),
        "{}",
        broken.stderr()
    );
    // A freshly started broken server: the finding reproduces.
    drop(broken);
    let _broken = ServerLoop::start_with("127.0.5.40", 19710, Some(&fault), 5);
    assert!(replay_fires(&f, server, local, "liveness"));
    // A healthy server takes the same packets and stays up.
    assert!(!replay_fires(&f, "127.0.5.42:19711", local, "liveness"));
    assert!(
        !healthy.stderr().contains("panicked"),
        "{}",
        healthy.stderr()
    );
    assert!(!healthy.stderr().contains("broken on purpose"));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn peer_wire_fires_on_a_garbling_peer_replays_and_minimises_on_demand() {
    let fault = format!("garble-after-opcode={READ_REQUEST}");
    let (server, local) = ("127.0.5.50:19712", "127.0.5.51");
    let dir = temp_dir("garble");
    let broken = ServerLoop::start_with("127.0.5.50", 19712, Some(&fault), 5);
    let _healthy = ServerLoop::start_with("127.0.5.52", 19713, None, 5);
    let (r, f) = campaign_finds(server, local, &dir, "peer-wire", "0");
    assert!(r.out.contains("oracle sanity: ok"), "{}", r.out);
    // What the peer sent is kept beside what we sent: cut short (14 bytes).
    let theirs = dir.join("peer-wire-seed3.peer.pcap");
    assert!(theirs.exists(), "{}", r.out);
    assert!(r.out.contains("the first 14 bytes: truncated"), "{}", r.out);
    drop(broken);
    let _broken = ServerLoop::start_with("127.0.5.50", 19712, Some(&fault), 5);
    assert!(replay_fires(&f, server, local, "peer-wire"));
    assert!(!replay_fires(&f, "127.0.5.52:19713", local, "peer-wire"));

    // On demand: rxe fuzz --minimise FILE.
    let m = fuzz_fast(&[
        "-d",
        local,
        "--to",
        server,
        "--minimise",
        f.to_str().unwrap(),
        "--minimise-budget",
        "60",
    ]);
    assert_eq!(m.code, Some(1), "{}", m.out);
    let (n, k) = minimised(&m.out).unwrap_or_else(|| panic!("{}", m.out));
    let min = dir.join("peer-wire-seed3.min.pcap");
    assert!(min.exists(), "{}", m.out);
    assert!(k <= 2 && k * 4 <= n, "{n} -> {k} packets:\n{}", m.out);
    assert!(m.out.contains("RC_RDMA_READ_REQUEST"), "{}", m.out);
    assert!(replay_fires(&min, server, local, "peer-wire"));
    assert!(!replay_fires(&min, "127.0.5.52:19713", local, "peer-wire"));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_wedge_finding_is_minimised_to_the_read_that_wedges() {
    let fault = format!("wedge-after-opcode={READ_REQUEST}");
    let (server, local) = ("127.0.5.60:19714", "127.0.5.61");
    let dir = temp_dir("minimise");
    let broken = ServerLoop::start_with("127.0.5.60", 19714, Some(&fault), 5);
    let _healthy = ServerLoop::start_with("127.0.5.62", 19715, None, 5);
    // Minimised right after the campaign, once the peer is back.
    let (r, f) = campaign_finds(server, local, &dir, "liveness", "90");
    let (n, k) = minimised(&r.out).unwrap_or_else(|| panic!("not minimised:\n{}", r.out));
    assert!(k <= 2 && k * 4 <= n, "{n} -> {k} packets:\n{}", r.out);
    assert!(r.out.contains("RC_RDMA_READ_REQUEST"), "{}", r.out);
    let min = f.with_file_name(format!(
        "{}.min.pcap",
        f.file_stem().unwrap().to_str().unwrap()
    ));
    assert!(min.exists() && PathBuf::from(format!("{}.meta", min.display())).exists());
    drop(broken);
    let _broken = ServerLoop::start_with("127.0.5.60", 19714, Some(&fault), 5);
    assert!(replay_fires(&min, server, local, "liveness"));
    assert!(!replay_fires(&min, "127.0.5.62:19715", local, "liveness"));
    let _ = std::fs::remove_dir_all(&dir);
}

/// A seeded campaign against `rxe perf read_bw` on loopback (4096-byte
/// buffer, 400 packets).
fn perftest_campaign(server: &str, local: &str, dir: &std::path::Path, seed: &str) -> Run {
    fuzz_fast(&[
        "-d",
        local,
        "--perftest",
        server,
        "--size",
        "4096",
        "--seed",
        seed,
        "--packets",
        "400",
        "--out",
        dir.to_str().unwrap(),
        "--minimise-budget",
        "0",
    ])
}

#[test]
fn canary_and_data_stay_ok_against_a_healthy_perftest_server() {
    let server = ServerLoop::perftest("127.0.5.70", 19720, None);
    let dir = temp_dir("perftest-healthy");
    let r = perftest_campaign("127.0.5.70:19720", "127.0.5.71", &dir, "3");
    assert_eq!(r.code, Some(0), "a finding on a healthy server:\n{}", r.out);
    for o in ["liveness", "canary", "data", "rkey", "sanity", "peer-wire"] {
        assert!(
            r.out.contains(&format!("oracle {o}: ok")),
            "oracle {o}:\n{}",
            r.out
        );
    }
    // The exchange named the buffer, and the READs of it came back.
    assert!(r.out.contains("region: 4096 bytes at 0x"), "{}", r.out);
    let h = histogram(&r.out);
    let kinds: Vec<&str> = h.iter().map(|(k, _)| k.as_str()).collect();
    for k in ["READ data", "NAK remote access error", "RNR NAK"] {
        assert!(kinds.contains(&k), "no {k:?} in {h:?}:\n{}", r.out);
    }
    // WRITEs and atomics aimed at the buffer were sent (and refused).
    let region_steps: u64 = r
        .out
        .split_whitespace()
        .find_map(|w| w.strip_prefix("region="))
        .and_then(|v| v.split('/').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    assert!(region_steps >= 5, "{region_steps} region steps:\n{}", r.out);
    // And requests with keys it did not grant, judged by the rkey oracle.
    let judged: u64 = field(&r.out, "rkey: ").unwrap().parse().unwrap();
    assert!(judged >= 3, "{judged} judged:\n{}", r.out);
    let runs = *server.runs.lock().unwrap();
    assert!(runs > 3, "the server ran {runs} times");
    let srv = server.stderr();
    assert!(!srv.contains("panicked"), "{srv}");
    assert!(!srv.contains("broken on purpose"), "{srv}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn canary_fires_on_a_peer_that_writes_without_permission_and_replays() {
    let fault = "ignore-write-access";
    let (server, local) = ("127.0.5.72:19721", "127.0.5.73");
    let dir = temp_dir("perftest-broken");
    let broken = ServerLoop::perftest("127.0.5.72", 19721, Some(fault));
    let _healthy = ServerLoop::perftest("127.0.5.74", 19722, None);
    let r = perftest_campaign(server, local, &dir, "3");
    assert_eq!(
        r.code,
        Some(1),
        "no finding against a broken peer:\n{}",
        r.out
    );
    let f = finding(&r.out, "canary").unwrap_or_else(|| panic!("canary did not fire:\n{}", r.out));
    assert!(
        r.out
            .contains("the region the peer registered without remote write changed"),
        "{}",
        r.out
    );
    for o in ["liveness", "data", "rkey", "sanity", "peer-wire"] {
        assert!(
            r.out.contains(&format!("oracle {o}: ok")),
            "{o}:\n{}",
            r.out
        );
    }
    assert!(f.exists(), "{}", f.display());
    let meta = std::fs::read_to_string(format!("{}.meta", f.display())).unwrap();
    assert!(meta.contains("oracle canary\n"), "{meta}");
    assert!(meta.contains("peer perftest-read size=4096\n"), "{meta}");
    // From a READ that found the buffer unchanged to the one that did not,
    // with what wrote it in between, aimed at the buffer with its key.
    let arms: Vec<&str> = meta
        .lines()
        .filter_map(|l| l.strip_prefix("packet "))
        .map(|l| l.split_whitespace().nth(2).unwrap())
        .collect();
    assert_eq!(arms.first(), Some(&"canary"), "{meta}");
    assert_eq!(arms.last(), Some(&"canary"), "{meta}");
    assert!(meta.contains("/x0 ") || meta.contains("/x0\n"), "{meta}");
    assert!(
        broken.stderr().contains("broken on purpose"),
        "{}",
        broken.stderr()
    );
    // Against a freshly started broken server the buffer changes again; a
    // healthy server refuses the same packets.
    drop(broken);
    let _broken = ServerLoop::perftest("127.0.5.72", 19721, Some(fault));
    assert!(replay_fires(&f, server, local, "canary"));
    assert!(!replay_fires(&f, "127.0.5.74:19722", local, "canary"));
    let _ = std::fs::remove_dir_all(&dir);
}

/// A campaign against a perftest server broken on purpose finds `oracle`
/// (exit status 1, every other oracle ok), and the finding's sidecar says
/// what it is.
fn perftest_finds(
    server: &str,
    local: &str,
    dir: &std::path::Path,
    oracle: &str,
    others: &[&str],
) -> (Run, PathBuf, String) {
    let r = perftest_campaign(server, local, dir, "3");
    assert_eq!(
        r.code,
        Some(1),
        "no finding against a broken peer:\n{}",
        r.out
    );
    let f = finding(&r.out, oracle)
        .unwrap_or_else(|| panic!("oracle {oracle} did not fire:\n{}", r.out));
    for o in others {
        assert!(
            r.out.contains(&format!("oracle {o}: ok")),
            "{o}:\n{}",
            r.out
        );
    }
    let meta = std::fs::read_to_string(format!("{}.meta", f.display())).unwrap();
    assert!(meta.contains(&format!("oracle {oracle}\n")), "{meta}");
    assert!(meta.contains("peer perftest-read size=4096\n"), "{meta}");
    (r, f, meta)
}

/// The arm of every packet a sidecar lists.
fn arms(meta: &str) -> Vec<&str> {
    meta.lines()
        .filter_map(|l| l.strip_prefix("packet "))
        .map(|l| l.split_whitespace().nth(2).unwrap())
        .collect()
}

#[test]
fn data_fires_on_a_peer_that_returns_wrong_bytes_and_replays() {
    // The responder inverts a byte of every response to a READ that starts
    // unaligned: the whole-buffer READ (aligned) comes back right, a READ
    // of a random part of it does not.
    let fault = "corrupt-unaligned-read";
    let (server, local) = ("127.0.15.1:19740", "127.0.15.2");
    let dir = temp_dir("perftest-corrupt");
    let broken = ServerLoop::perftest("127.0.15.1", 19740, Some(fault));
    let _healthy = ServerLoop::perftest("127.0.15.3", 19741, None);
    let (r, f, meta) = perftest_finds(
        server,
        local,
        &dir,
        "data",
        &["liveness", "canary", "rkey", "sanity", "peer-wire"],
    );
    assert!(
        r.out
            .contains("returned other bytes than the whole-region READ before it"),
        "{}",
        r.out
    );
    // The whole-region READ that was right, then the part that was not.
    let a = arms(&meta);
    assert_eq!(a.first(), Some(&"canary"), "{meta}");
    assert_eq!(a.last(), Some(&"data"), "{meta}");
    assert!(
        broken.stderr().contains("broken on purpose"),
        "{}",
        broken.stderr()
    );
    drop(broken);
    let _broken = ServerLoop::perftest("127.0.15.1", 19740, Some(fault));
    assert!(replay_fires(&f, server, local, "data"));
    assert!(!replay_fires(&f, "127.0.15.3:19741", local, "data"));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn rkey_fires_on_a_peer_that_honours_a_neighbouring_key_and_replays() {
    // The responder takes a key whose variant (low 8 bits) is wrong as its
    // slot's own: the granted key with a bit of its variant flipped reads
    // the buffer.
    let fault = "accept-neighbour-rkey";
    let (server, local) = ("127.0.15.5:19742", "127.0.15.6");
    let dir = temp_dir("perftest-rkey");
    let broken = ServerLoop::perftest("127.0.15.5", 19742, Some(fault));
    let _healthy = ServerLoop::perftest("127.0.15.7", 19743, None);
    let (r, f, meta) = perftest_finds(
        server,
        local,
        &dir,
        "rkey",
        &["liveness", "canary", "data", "sanity", "peer-wire"],
    );
    assert!(
        r.out.contains("the peer executed an RDMA READ"),
        "{}",
        r.out
    );
    // What was executed is the last packet: an rkey step with a neighbour
    // of the granted key (XOR within the variant), aimed into the buffer.
    let last = meta
        .lines()
        .rfind(|l| l.starts_with("packet "))
        .unwrap_or_else(|| panic!("{meta}"));
    assert_eq!(last.split_whitespace().nth(3), Some("rkey"), "{meta}");
    let key = last
        .split_whitespace()
        .find_map(|w| w.strip_prefix("region="))
        .and_then(|r| r.split_once("/x"))
        .and_then(|(_, x)| u32::from_str_radix(x, 16).ok())
        .unwrap_or_else(|| panic!("{meta}"));
    assert!(key != 0 && key <= 0xff, "{meta}");
    assert!(
        broken.stderr().contains("broken on purpose"),
        "{}",
        broken.stderr()
    );
    drop(broken);
    let _broken = ServerLoop::perftest("127.0.15.5", 19742, Some(fault));
    assert!(replay_fires(&f, server, local, "rkey"));
    assert!(!replay_fires(&f, "127.0.15.7:19743", local, "rkey"));
    let _ = std::fs::remove_dir_all(&dir);
}

/// The `expect=` PSN of every packet a sidecar lists.
fn expects(meta: &str) -> Vec<u32> {
    meta.lines()
        .filter(|l| l.starts_with("packet "))
        .filter_map(|l| l.split_whitespace().find_map(|w| w.strip_prefix("expect=")))
        .map(|x| u32::from_str_radix(x, 16).unwrap())
        .collect()
}

#[test]
fn a_canary_finding_is_minimised_to_the_read_and_the_write_renumbered() {
    // The READ that takes the baseline and the WRITE that changes the
    // buffer; what came between them is taken away and the WRITE moved to
    // the PSN right after the READ, so that the peer executes it (the
    // replay's final check READs the buffer again).
    let fault = "ignore-write-access";
    let (server, local) = ("127.0.15.13:19745", "127.0.15.14");
    let dir = temp_dir("perftest-minimise");
    let broken = ServerLoop::perftest("127.0.15.13", 19745, Some(fault));
    let _healthy = ServerLoop::perftest("127.0.15.15", 19746, None);
    let r = fuzz_fast(&[
        "-d",
        local,
        "--perftest",
        server,
        "--size",
        "4096",
        "--seed",
        "3",
        "--packets",
        "400",
        "--out",
        dir.to_str().unwrap(),
        "--minimise-budget",
        "60",
    ]);
    assert_eq!(r.code, Some(1), "{}", r.out);
    let f = finding(&r.out, "canary").unwrap_or_else(|| panic!("{}", r.out));
    let (n, k) = minimised(&r.out).unwrap_or_else(|| panic!("not minimised:\n{}", r.out));
    assert!(k <= 3 && k < n, "{n} -> {k} packets:\n{}", r.out);
    let min = dir.join("canary-seed3.min.pcap");
    let meta = std::fs::read_to_string(format!("{}.meta", min.display())).unwrap();
    let a = arms(&meta);
    assert_eq!(a.first(), Some(&"canary"), "{meta}");
    assert!(r.out.contains("RC_RDMA_WRITE_ONLY"), "{}", r.out);
    // In sequence: the WRITE right after the 4 PSNs of the READ of 4096
    // bytes (path MTU 1024), which in the campaign it was not.
    let e = expects(&meta);
    let write = a.iter().position(|x| *x == "region").unwrap();
    assert_eq!(e[write], (e[0] + 4) & 0xff_ffff, "{meta}");
    let orig = std::fs::read_to_string(format!("{}.meta", f.display())).unwrap();
    assert!(expects(&orig).len() > e.len(), "{orig}");
    drop(broken);
    let _broken = ServerLoop::perftest("127.0.15.13", 19745, Some(fault));
    assert!(replay_fires(&min, server, local, "canary"));
    assert!(!replay_fires(&min, "127.0.15.15:19746", local, "canary"));
    let _ = std::fs::remove_dir_all(&dir);
}
