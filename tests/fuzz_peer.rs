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
//! Address plan: 127.0.5.10/11 (port 19700) for the campaign and its
//! replay, 127.0.5.20/21 (port 19701) for the seeds. The `rxe` binary is
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
        let stop = Arc::new(AtomicBool::new(false));
        let stderr = Arc::new(Mutex::new(String::new()));
        let runs = Arc::new(Mutex::new(0));
        let (st, se, ru) = (stop.clone(), stderr.clone(), runs.clone());
        let addr = addr.to_string();
        let thread = std::thread::spawn(move || {
            while !st.load(Ordering::Relaxed) {
                let mut child = Command::new(rxe_bin())
                    .args(["pingpong", "-d", &addr, "-p", &port.to_string()])
                    .args(["-n", "100000000", "--timeout", "20"])
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
    let child = Command::new(rxe_bin())
        .arg("fuzz")
        .args(args)
        .args(["--window-ms", "50", "--grace-ms", "10"])
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
    for o in ["liveness", "sanity", "peer-wire"] {
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
}
