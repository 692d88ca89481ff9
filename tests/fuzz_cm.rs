//! `rxe fuzz --rdma-cm` against our own stack's rdma_cm: `rxe rping -s`
//! (librdmacm's `rping` server over rxe-rs's CM, restarted in a loop as
//! its users run it) as the peer, the fuzzer as rping's client on another
//! loopback address. The fuzzer has no QP of its own: it speaks the CM's
//! MADs (REQ, REP, RTU, DREQ/DREP) from its socket, then plays rping's
//! client by hand (the server READs our start buffer, WRITEs it back into
//! our rdma buffer, SENDs between).
//!
//! Checks: a seeded campaign over many rdma_cm connections ends with every
//! oracle ok (liveness: fresh connections through rdma_cm; data: what the
//! server read from us it wrote back unchanged), the server never
//! panicked, and `--replay` of the saved campaign resends every packet on
//! new rdma_cm connections (our PSNs shifted to the ones the new REPs
//! give); a target with no rdma_cm listener is refused (exit status 2);
//! a server broken on purpose (`RXE_TEST_FAULT=garble-after-opcode=0x0c`:
//! once its QP receives an RDMA READ request it cuts every packet it
//! sends to 14 bytes) is caught by the peer-wire oracle, and the finding
//! replays over rdma_cm against a freshly started broken server and not
//! against a healthy one.
//!
//! (`wedge-after-opcode`, which the pingpong tests catch with the liveness
//! oracle, is not caught over rdma_cm, rightly: the fuzzer ends a
//! connection that stopped answering with a DREQ, the CM is not wedged,
//! the rping server takes its DISCONNECTED event and the next run of it
//! serves the fresh connection. docs/fuzz-peers.md says more.)
//!
//! And Debian's unmodified `rping -s` over rxe-rs's drop-in librdmacm
//! (`rxe exec`), the program the fuzzer's users run: a campaign with every
//! oracle ok (skipped only with `RXE_SKIP_IBVERBS_TESTS=1` when rping is
//! not installed; `bash tests/setup.sh` installs rdmacm-utils).
//!
//! And Debian's `ib_read_bw -R` over the drop-in (perftest's exchange as
//! SENDs on an rdma_cm communication connection, the test QP on a second):
//! a campaign with the canary, data and every other oracle ok; with
//! `RXE_TEST_FAULT=ignore-write-access` the canary oracle fires, and the
//! finding replays over rdma_cm against the broken server and not against
//! the healthy one.
//!
//! Address plan: 127.0.5.200-.209, ports 19790-19794; perftest servers at
//! 127.0.5.230 (healthy, 19785) and .232 (broken, 19786), their fuzzers at
//! .231 and .233 (no other test uses them). The `rxe` binary is found as in `perf_cli.rs` (`RXE_BIN`
//! overrides).

#[path = "common/server_loop.rs"]
mod server_loop;

use server_loop::ServerLoop;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use rxe_tests::rxe_bin;

/// `rxe rping -s` on `addr:port` with 64-byte buffers, each run giving up
/// after `timeout` seconds without word from its client (how a wedged
/// server comes back), broken with `fault` or healthy.
fn rping_server(addr: &str, port: u16, fault: Option<&str>, timeout: u32) -> ServerLoop {
    let port = port.to_string();
    let timeout = timeout.to_string();
    ServerLoop::start(
        rxe_bin().to_path_buf(),
        &[
            "rping",
            "-s",
            "-a",
            addr,
            "-p",
            &port,
            "-S",
            "64",
            "--timeout",
            &timeout,
        ],
        fault,
    )
}

struct Run {
    code: Option<i32>,
    out: String,
}

/// `rxe fuzz ARGS` (killed after `limit`).
fn fuzz(args: &[&str], limit: Duration) -> Run {
    let mut child = Command::new(rxe_bin())
        .arg("fuzz")
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn rxe fuzz");
    let deadline = Instant::now() + limit;
    while child.try_wait().unwrap().is_none() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let o = child.wait_with_output().unwrap();
    Run {
        code: o.status.code(),
        out: format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        ),
    }
}

/// The first number after `prefix` on a line that starts with it.
fn number_after(out: &str, prefix: &str) -> Option<u64> {
    out.lines()
        .find_map(|l| l.strip_prefix(prefix))
        .and_then(|r| r.split_whitespace().next())
        .and_then(|n| n.parse().ok())
}

/// The connections a run's summary line counts (`... over N connections`).
fn connections(out: &str) -> u64 {
    out.lines()
        .find_map(|l| {
            let (_, r) = l.split_once(" over ")?;
            r.split_whitespace().next()?.parse().ok()
        })
        .unwrap_or(0)
}

/// A path for a finding named on an `oracle NAME: FINDING PATH` line.
fn finding(out: &str, oracle: &str) -> Option<PathBuf> {
    let p = format!("oracle {oracle}: FINDING ");
    out.lines()
        .find_map(|l| l.strip_prefix(p.as_str()))
        .map(|s| PathBuf::from(s.trim()))
}

fn out_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("rxe-fuzz-cm-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn campaign_against_rxe_rping_over_rdma_cm_and_replay() {
    let server = rping_server("127.0.5.200", 19790, None, 5);
    let dir = out_dir("campaign");
    let out = dir.to_str().unwrap();
    let r = fuzz(
        &[
            "-d",
            "127.0.5.201",
            "--rdma-cm",
            "127.0.5.200:19790",
            "--seed",
            "5",
            "--packets",
            "600",
            "--window-ms",
            "40",
            "--grace-ms",
            "5",
            "--out",
            out,
            "--save",
        ],
        Duration::from_secs(300),
    );
    let srv = server.stderr();
    assert!(
        !srv.contains("panicked"),
        "the peer (rxe rping) panicked:\n{srv}\n--- fuzz:\n{}",
        r.out
    );
    assert_eq!(r.code, Some(0), "{}\n--- server:\n{srv}", r.out);
    for o in ["liveness", "data", "sanity", "peer-wire"] {
        assert!(
            r.out.contains(&format!("oracle {o}: ok")),
            "oracle {o}:\n{}",
            r.out
        );
    }
    assert!(!r.out.contains("oracle canary"), "{}", r.out);
    // The first round came back whole, every connection was an rdma_cm
    // one (REQ, RTU, DREQ from us at least), and the fuzzing ended many of
    // them (a server's QP ends on most refused packets).
    assert!(
        r.out.contains("an rping round of 64 bytes came back whole"),
        "{}",
        r.out
    );
    let conns = connections(&r.out);
    assert!(conns >= 5, "{conns} connections:\n{}", r.out);
    let mads = r
        .out
        .lines()
        .filter(|l| l.ends_with(" received") && l.contains(" MADs sent, "))
        .find_map(|l| {
            l.strip_prefix("rdma_cm: ")?
                .split(' ')
                .next()?
                .parse::<u64>()
                .ok()
        })
        .unwrap_or(0);
    assert!(
        mads >= 2 * conns,
        "{mads} MADs for {conns} connections:\n{}",
        r.out
    );
    assert!(server.runs() >= conns, "{} server runs", server.runs());
    // The peer answered in several ways, its requester's READs and
    // WRITEs included (rping rounds came back whole on every connection
    // checked).
    for k in ["ACK", "NAK"] {
        assert!(r.out.contains(&format!("\n  {k}")), "no {k}:\n{}", r.out);
    }
    let sent = number_after(&r.out, "sent ").expect("a summary line");
    assert!(sent >= 600, "{}", r.out);
    // The replay resends every packet on new rdma_cm connections.
    let saved = dir.join("sent.pcap");
    assert!(saved.exists(), "{}", r.out);
    let rr = fuzz(
        &[
            "-d",
            "127.0.5.201",
            "--replay",
            saved.to_str().unwrap(),
            "--to",
            "127.0.5.200:19790",
            "--window-ms",
            "40",
            "--grace-ms",
            "5",
            "--out",
            out,
        ],
        Duration::from_secs(300),
    );
    assert!(
        rr.out.contains("(rping over rdma_cm exchange)"),
        "the recording names its peer:\n{}",
        rr.out
    );
    let replayed = number_after(&rr.out, "replayed ").expect("a replay summary");
    assert_eq!(replayed, sent, "{}", rr.out);
    assert!(rr.out.contains("oracle liveness: ok"), "{}", rr.out);
    assert!(connections(&rr.out) >= conns, "{}", rr.out);
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_target_without_an_rdma_cm_listener_is_refused() {
    // Nothing at all at .203 (no process is bound there): the REQs go
    // unanswered, and the fuzzer gives up after --liveness-timeout.
    let dir = out_dir("refused");
    // (Built first: the clock is for the fuzzer alone.)
    let _ = rxe_bin();
    let t = Instant::now();
    let r = fuzz(
        &[
            "-d",
            "127.0.5.204",
            "--rdma-cm",
            "127.0.5.203:19791",
            "--packets",
            "100",
            "--liveness-timeout",
            "2",
            "--out",
            dir.to_str().unwrap(),
        ],
        Duration::from_secs(60),
    );
    assert_eq!(r.code, Some(2), "{}", r.out);
    assert!(
        r.out.contains("no rdma_cm connection to 127.0.5.203:19791"),
        "{}",
        r.out
    );
    assert!(t.elapsed() < Duration::from_secs(20), "{:?}", t.elapsed());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_garbling_rping_server_is_caught_and_the_finding_replays_over_rdma_cm() {
    let fault = "garble-after-opcode=0x0c";
    let dir = out_dir("garble");
    let out = dir.to_str().unwrap();
    let r = {
        let broken = rping_server("127.0.5.205", 19792, Some(fault), 5);
        let r = fuzz(
            &[
                "-d",
                "127.0.5.206",
                "--rdma-cm",
                "127.0.5.205:19792",
                "--seed",
                "2",
                "--packets",
                "400",
                "--window-ms",
                "30",
                "--grace-ms",
                "5",
                "--liveness-timeout",
                "1",
                "--minimise-budget",
                "0",
                "--out",
                out,
            ],
            Duration::from_secs(300),
        );
        assert!(
            broken.stderr().contains("RXE_TEST_FAULT"),
            "the server did not say it was broken:\n{}",
            broken.stderr()
        );
        r
    };
    assert_eq!(r.code, Some(1), "{}", r.out);
    let f =
        finding(&r.out, "peer-wire").unwrap_or_else(|| panic!("no peer-wire finding:\n{}", r.out));
    assert!(r.out.contains("truncated AETH"), "{}", r.out);
    for o in ["liveness", "data", "sanity"] {
        assert!(
            r.out.contains(&format!("oracle {o}: ok")),
            "oracle {o}:\n{}",
            r.out
        );
    }
    let meta = std::fs::read_to_string(f.with_extension("pcap.meta")).unwrap();
    assert!(meta.contains("oracle peer-wire"), "{meta}");
    assert!(meta.contains("peer rping size=64"), "{meta}");
    // Against a freshly started broken server the finding fires again;
    // against a healthy one it does not.
    let replay = |fault: Option<&str>, port: u16| {
        let srv = rping_server("127.0.5.207", port, fault, 5);
        let r = fuzz(
            &[
                "-d",
                "127.0.5.206",
                "--replay",
                f.to_str().unwrap(),
                "--to",
                &format!("127.0.5.207:{port}"),
                "--window-ms",
                "30",
                "--liveness-timeout",
                "1",
                "--out",
                out,
            ],
            Duration::from_secs(120),
        );
        drop(srv);
        r
    };
    let again = replay(Some(fault), 19793);
    assert_eq!(again.code, Some(1), "{}", again.out);
    assert!(
        again
            .out
            .contains("the recording is a finding of oracle peer-wire: it fired again"),
        "{}",
        again.out
    );
    let healthy = replay(None, 19793);
    assert_eq!(healthy.code, Some(0), "{}", healthy.out);
    assert!(
        healthy.out.contains("it did not fire this time"),
        "{}",
        healthy.out
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Whether `/usr/bin/PROG` is there (else the test is skipped, if
/// `RXE_SKIP_IBVERBS_TESTS=1` allows it, or fails).
fn have(prog: &str, package: &str) -> bool {
    if std::path::Path::new("/usr/bin").join(prog).exists() {
        return true;
    }
    if std::env::var("RXE_SKIP_IBVERBS_TESTS").is_ok_and(|v| v == "1") {
        eprintln!("skipped: {prog} is not installed (RXE_SKIP_IBVERBS_TESTS=1)");
        return false;
    }
    panic!(
        "{prog} is not installed: install {package} (`bash tests/setup.sh`), \
         or set RXE_SKIP_IBVERBS_TESTS=1 to skip"
    );
}

#[test]
fn campaign_against_debians_rping_over_the_drop_in() {
    if !have("rping", "rdmacm-utils") {
        return;
    }
    let lib = rxe_tests::dropin_library().to_str().unwrap().to_string();
    let server = ServerLoop::start(
        rxe_bin().to_path_buf(),
        &[
            "exec",
            "-d",
            "127.0.5.208",
            "--lib",
            &lib,
            "--",
            "rping",
            "-s",
            "-a",
            "127.0.5.208",
            "-p",
            "19794",
            "-S",
            "64",
        ],
        None,
    );
    let dir = out_dir("debian");
    let r = fuzz(
        &[
            "-d",
            "127.0.5.209",
            "--rdma-cm",
            "127.0.5.208:19794",
            "--seed",
            "1",
            "--packets",
            "300",
            "--window-ms",
            "40",
            "--grace-ms",
            "5",
            "--out",
            dir.to_str().unwrap(),
        ],
        Duration::from_secs(300),
    );
    let srv = server.stderr();
    drop(server);
    assert_eq!(r.code, Some(0), "{}\n--- rping:\n{srv}", r.out);
    for o in ["liveness", "data", "sanity", "peer-wire"] {
        assert!(
            r.out.contains(&format!("oracle {o}: ok")),
            "oracle {o}:\n{}",
            r.out
        );
    }
    assert!(
        r.out.contains("an rping round of 64 bytes came back whole"),
        "{}",
        r.out
    );
    let conns = connections(&r.out);
    assert!(conns >= 5, "{conns} connections:\n{}", r.out);
    // rping itself saw its connections end under it, as the fuzzer means
    // them to (its own words, not a crash).
    assert!(
        !srv.contains("Segmentation") && !srv.contains("panicked"),
        "{srv}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Debian's `ib_read_bw -R -s 4096` over the drop-in on `addr:port`,
/// looped, broken with `fault` or healthy.
fn read_bw_r(addr: &str, port: u16, fault: Option<&str>) -> ServerLoop {
    // (a drop-in built with the test faults, which honours RXE_TEST_FAULT)
    let lib = rxe_tests::dropin_library_with_test_faults()
        .to_str()
        .unwrap()
        .to_string();
    let port = port.to_string();
    ServerLoop::start(
        rxe_bin().to_path_buf(),
        &[
            "exec",
            "-d",
            addr,
            "--lib",
            &lib,
            "--",
            "ib_read_bw",
            "-R",
            "-d",
            "rxe0",
            "-x",
            "0",
            "-s",
            "4096",
            "-p",
            &port,
        ],
        fault,
    )
}

#[test]
fn ib_read_bw_r_keeps_its_canary_and_a_broken_one_is_caught_over_rdma_cm() {
    if !have("ib_read_bw", "perftest") {
        return;
    }
    let healthy = read_bw_r("127.0.5.230", 19785, None);
    let dir = out_dir("read_bw_r");
    let out = dir.to_str().unwrap();
    let campaign = |to: &str, from: &str| {
        fuzz(
            &[
                "-d",
                from,
                "--perftest",
                to,
                "--cm",
                "--size",
                "4096",
                "--seed",
                "3",
                "--packets",
                "400",
                "--window-ms",
                "40",
                "--grace-ms",
                "5",
                "--minimise-budget",
                "0",
                "--out",
                out,
            ],
            Duration::from_secs(300),
        )
    };
    let r = campaign("127.0.5.230:19785", "127.0.5.231");
    assert_eq!(
        r.code,
        Some(0),
        "{}\n--- server:\n{}",
        r.out,
        healthy.stderr()
    );
    for o in ["liveness", "canary", "data", "sanity", "peer-wire"] {
        assert!(
            r.out.contains(&format!("oracle {o}: ok")),
            "oracle {o}:\n{}",
            r.out
        );
    }
    // The buffer came through perftest's exchange over rdma_cm, and the
    // campaign READ it and aimed at it over many connections.
    assert!(r.out.contains("bytes at 0x"), "{}", r.out);
    assert!(r.out.contains("\n  READ data"), "{}", r.out);
    assert!(connections(&r.out) >= 5, "{}", r.out);
    assert!(
        healthy.runs() >= connections(&r.out),
        "{} server runs",
        healthy.runs()
    );
    // A server that executes WRITEs without the permission.
    let fault = Some("ignore-write-access");
    let f = {
        let broken = read_bw_r("127.0.5.232", 19786, fault);
        let r = campaign("127.0.5.232:19786", "127.0.5.233");
        assert_eq!(
            r.code,
            Some(1),
            "{}\n--- server:\n{}",
            r.out,
            broken.stderr()
        );
        finding(&r.out, "canary").unwrap_or_else(|| panic!("no canary finding:\n{}", r.out))
    };
    let meta = std::fs::read_to_string(f.with_extension("pcap.meta")).unwrap();
    assert!(meta.contains("peer perftest-read-cm size=4096"), "{meta}");
    let replay = |to: &str, from: &str| {
        fuzz(
            &[
                "-d",
                from,
                "--replay",
                f.to_str().unwrap(),
                "--to",
                to,
                "--window-ms",
                "40",
                "--out",
                out,
            ],
            Duration::from_secs(120),
        )
    };
    let again = {
        let _broken = read_bw_r("127.0.5.232", 19786, fault);
        replay("127.0.5.232:19786", "127.0.5.233")
    };
    assert!(
        again
            .out
            .contains("the recording is a finding of oracle canary: it fired again"),
        "{}",
        again.out
    );
    let not = replay("127.0.5.230:19785", "127.0.5.231");
    assert_eq!(not.code, Some(0), "{}", not.out);
    assert!(not.out.contains("it did not fire this time"), "{}", not.out);
    drop(healthy);
    let _ = std::fs::remove_dir_all(&dir);
}
