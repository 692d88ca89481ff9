//! `rxe perf` as a user runs it: a server and a client process on loopback
//! addresses of 127.0.2.0/24 for each perftest test, with tiny iteration
//! counts, checking perftest's header, address lines and result columns,
//! that the figures parse and are positive, `--out_json`, UD, and the UDP
//! baseline. (The out-of-band protocol itself is unit-tested against
//! perftest's bytes in `rxe-verbs/tool/src/perf/oob.rs`.)
//!
//! Address plan (127.0.2.N): each test takes the pair noted at its top.
//! The `rxe` binary is found as in `dump_cli.rs` (`RXE_BIN` overrides).

use serde_json::Value;
use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use rxe_tests::rxe_bin;

/// A TCP port nobody listens on right now.
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
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
    server: String,
    client: String,
    report: String,
}

/// Runs `rxe perf <args>` as a server on 127.0.2.`host` and as a client on
/// 127.0.2.`host + 1`; both must exit 0.
fn perf(host: u8, args: &[&str]) -> Run {
    perf_with(host, args, &[])
}

/// [`perf`] with arguments for the client only.
fn perf_with(host: u8, args: &[&str], client_only: &[&str]) -> Run {
    perf_sides(host, args, &[], client_only)
}

/// [`perf`] with arguments for the server only and the client only.
fn perf_sides(host: u8, args: &[&str], server_only: &[&str], client_only: &[&str]) -> Run {
    let port = free_port().to_string();
    let srv = format!("127.0.2.{host}");
    let cli = format!("127.0.2.{}", host + 1);
    let spawn = |extra: &[&str], only: &[&str]| {
        Command::new(rxe_bin())
            .arg("perf")
            .args(args)
            .args(["-p", &port, "--timeout", "30"])
            .args(extra)
            .args(only)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start rxe perf")
    };
    let server = spawn(&["-d", &srv], server_only);
    let client = spawn(&["-d", &cli, &srv], client_only);
    let c = finish(client, Duration::from_secs(90));
    let s = finish(server, Duration::from_secs(20));
    let text = |o: &Output| {
        (
            String::from_utf8_lossy(&o.stdout).into_owned(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        )
    };
    let ((so, se), (co, ce)) = (text(&s), text(&c));
    let report = format!(
        "rxe perf {args:?}\nserver {}:\n{so}{se}\nclient {}:\n{co}{ce}",
        s.status, c.status
    );
    assert!(s.status.success() && c.status.success(), "{report}");
    Run {
        server: so,
        client: co,
        report,
    }
}

/// perftest's header block and both address lines, on one side's output.
fn check_header(out: &str, title: &str, conn: &str, me: &str, peer: &str, report: &str) {
    for want in [
        "---------------------------------------------------------------------------------------",
        title,
        " Dual-port       : OFF\t\tDevice         : ",
        " Number of qps   : 1\t\tTransport type : IB",
        &format!(" Connection type : {conn}\t\tUsing SRQ      : OFF"),
        " Mtu             : 4096[B]",
        " Link type       : Ethernet",
        " GID index       : 0",
        " rdma_cm QPs\t : OFF",
        " Data ex. method : Ethernet",
        " local address: LID 0000 QPN 0x",
        " remote address: LID 0000 QPN 0x",
    ] {
        assert!(out.contains(want), "{want:?} missing\n{report}");
    }
    let gid = |a: &str| {
        let o: Vec<String> = a
            .split('.')
            .map(|b| format!("{:02}", b.parse::<u8>().unwrap()))
            .collect();
        format!(
            " GID: 00:00:00:00:00:00:00:00:00:00:255:255:{}\n",
            o.join(":")
        )
    };
    assert!(out.contains(&gid(me)), "local GID missing\n{report}");
    assert!(out.contains(&gid(peer)), "remote GID missing\n{report}");
}

/// The figures of the line under `header`, checked to parse.
fn results(out: &str, header: &str, report: &str) -> Vec<Vec<f64>> {
    let mut lines = out.lines().skip_while(|l| !l.starts_with(header));
    assert!(lines.next().is_some(), "{header:?} missing\n{report}");
    // The table's rows: lines of numbers (a note may follow them).
    let rows: Vec<Vec<f64>> = lines
        .take_while(|l| {
            l.split_whitespace()
                .next()
                .is_some_and(|f| f.parse::<u64>().is_ok())
        })
        .map(|l| {
            l.split_whitespace()
                .map(|f| {
                    f.parse::<f64>()
                        .unwrap_or_else(|_| panic!("{f:?} in {l:?}\n{report}"))
                })
                .collect()
        })
        .collect();
    assert!(!rows.is_empty(), "no results under {header:?}\n{report}");
    rows
}

const BW_HEADER: &str =
    " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]";
const LAT_HEADER: &str = " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec]";

fn check_bw(out: &str, size: f64, iters: f64, report: &str) {
    let rows = results(out, BW_HEADER, report);
    let r = &rows[0];
    assert_eq!(r.len(), 5, "{report}");
    assert_eq!((r[0], r[1]), (size, iters), "{report}");
    assert!(r[2] >= 0.0 && r[3] > 0.0 && r[4] > 0.0, "{report}");
}

fn check_lat(out: &str, size: f64, iters: f64, report: &str) {
    let rows = results(out, LAT_HEADER, report);
    let r = &rows[0];
    assert_eq!(r.len(), 9, "{report}");
    assert_eq!((r[0], r[1]), (size, iters), "{report}");
    assert!(r[2..].iter().all(|v| *v > 0.0), "{report}");
    // t_min <= t_typical <= t_max.
    assert!(r[2] <= r[4] && r[4] <= r[3], "{report}");
}

fn bw_test(host: u8, test: &str, title: &str, extra: &[&str], size: f64) {
    let mut args = vec![test, "-n", "50"];
    args.extend_from_slice(extra);
    let run = perf(host, &args);
    let (srv, cli) = (format!("127.0.2.{host}"), format!("127.0.2.{}", host + 1));
    check_header(&run.client, title, "RC", &cli, &srv, &run.report);
    check_header(&run.server, title, "RC", &srv, &cli, &run.report);
    check_bw(&run.client, size, 50.0, &run.report);
    // The server prints the client's report (send_bw: its own, no peak).
    check_bw(&run.server, size, 50.0, &run.report);
}

// 127.0.2.2-3
#[test]
fn write_bw() {
    bw_test(2, "write_bw", "RDMA_Write BW Test", &["-s", "4096"], 4096.0);
}

// 127.0.2.4-5
#[test]
fn read_bw() {
    bw_test(4, "read_bw", "RDMA_Read BW Test", &["-s", "4096"], 4096.0);
}

// 127.0.2.6-7
#[test]
fn send_bw() {
    bw_test(6, "send_bw", "Send BW Test", &["-s", "4096"], 4096.0);
}

// 127.0.2.8-9
#[test]
fn atomic_bw() {
    bw_test(8, "atomic_bw", "Atomic FETCH_AND_ADD BW Test", &[], 8.0);
    let run = perf(8, &["atomic_bw", "-n", "50", "-A", "CMP_AND_SWAP"]);
    assert!(
        run.client.contains("Atomic CMP_AND_SWAP BW Test"),
        "{}",
        run.report
    );
    check_bw(&run.client, 8.0, 50.0, &run.report);
}

// 127.0.2.10-11
#[test]
fn write_lat() {
    let run = perf(10, &["write_lat", "-n", "100"]);
    check_header(
        &run.client,
        "RDMA_Write Latency Test",
        "RC",
        "127.0.2.11",
        "127.0.2.10",
        &run.report,
    );
    check_lat(&run.client, 2.0, 100.0, &run.report);
    check_lat(&run.server, 2.0, 100.0, &run.report);
}

// 127.0.2.12-13
#[test]
fn read_lat() {
    let run = perf(12, &["read_lat", "-n", "100", "-s", "64"]);
    check_header(
        &run.client,
        "RDMA_Read Latency Test",
        "RC",
        "127.0.2.13",
        "127.0.2.12",
        &run.report,
    );
    check_header(
        &run.server,
        "RDMA_Read Latency Test",
        "RC",
        "127.0.2.12",
        "127.0.2.13",
        &run.report,
    );
    check_lat(&run.client, 64.0, 100.0, &run.report);
}

// 127.0.2.14-15
#[test]
fn send_lat() {
    let run = perf(14, &["send_lat", "-n", "100", "-s", "64"]);
    check_header(
        &run.client,
        "Send Latency Test",
        "RC",
        "127.0.2.15",
        "127.0.2.14",
        &run.report,
    );
    check_lat(&run.client, 64.0, 100.0, &run.report);
    check_lat(&run.server, 64.0, 100.0, &run.report);
}

// 127.0.2.16-17
#[test]
fn send_bw_ud() {
    let run = perf(16, &["send_bw", "-c", "UD", "-n", "50", "-s", "1024"]);
    for (out, me, peer) in [
        (&run.client, "127.0.2.17", "127.0.2.16"),
        (&run.server, "127.0.2.16", "127.0.2.17"),
    ] {
        check_header(out, "Send BW Test", "UD", me, peer, &run.report);
    }
    check_bw(&run.client, 1024.0, 50.0, &run.report);
    // UD may lose datagrams: the server reports what arrived.
    let rows = results(&run.server, BW_HEADER, &run.report);
    assert!(rows[0][1] > 0.0 && rows[0][1] <= 50.0, "{}", run.report);
}

// 127.0.2.18-19
#[test]
fn out_json_and_report_gbits() {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"));
    let file = dir.join("perf_cli-write_bw.json");
    let _ = std::fs::remove_file(&file);
    let f = file.to_str().unwrap();
    let run = perf_with(
        18,
        &["write_bw", "-n", "50", "-s", "4096", "--report_gbits"],
        &["--out_json", "--out_json_file", f],
    );
    assert!(
        run.client.contains(
            " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]"
        ),
        "{}",
        run.report
    );
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    assert_eq!(v["test"], "write_bw");
    assert_eq!(v["Connection_type"], "RC");
    assert_eq!(v["units"], "Gb/sec");
    let r = &v["results"][0];
    assert_eq!(r["MsgSize"], 4096);
    assert_eq!(r["n_iterations"], 50);
    assert!(r["BW_average"].as_f64().unwrap() > 0.0);
    assert!(r["MsgRate"].as_f64().unwrap() > 0.0);
}

// 127.0.2.20-21
#[test]
fn all_sizes_and_qps() {
    // -a over UD runs 2 .. MTU (the RC sizes go to 8 MiB: too long here),
    // with send_bw's two handshakes per size.
    let run = perf(20, &["send_bw", "-a", "-c", "UD", "-n", "5"]);
    let rows = results(&run.client, BW_HEADER, &run.report);
    let sizes: Vec<f64> = rows.iter().map(|r| r[0]).collect();
    let want: Vec<f64> = (1..13).map(|i| (1u64 << i) as f64).collect();
    assert_eq!(sizes, want, "{}", run.report);
    assert!(
        rows.iter().all(|r| r[1] == 5.0 && r[3] > 0.0),
        "{}",
        run.report
    );
    let served = results(&run.server, BW_HEADER, &run.report);
    assert_eq!(served.len(), 12, "{}", run.report);

    // Two QPs: iterations count over all of them.
    let run = perf(20, &["write_bw", "-q", "2", "-n", "50", "-s", "65536"]);
    assert!(
        run.client.contains(" Number of qps   : 2"),
        "{}",
        run.report
    );
    assert_eq!(
        run.client.matches(" local address: ").count(),
        2,
        "{}",
        run.report
    );
    let r = &results(&run.client, BW_HEADER, &run.report)[0];
    assert_eq!((r[0], r[1]), (65536.0, 100.0), "{}", run.report);
}

// 127.0.2.22-23
#[test]
fn baseline_ratio() {
    let run = perf(22, &["write_bw", "-n", "50", "-s", "4096", "--baseline"]);
    assert!(
        run.client
            .contains(" UDP baseline: blast of 4112-byte datagrams"),
        "{}",
        run.report
    );
    let ratio = run
        .client
        .lines()
        .find_map(|l| l.strip_prefix(" RoCE/UDP bandwidth ratio: "))
        .unwrap_or_else(|| panic!("no ratio\n{}", run.report));
    assert!(ratio.parse::<f64>().unwrap() > 0.0, "{}", run.report);

    let run = perf(22, &["send_lat", "-n", "100", "-s", "64", "--baseline"]);
    assert!(
        run.client
            .contains(" UDP baseline: ping-pong of 80-byte datagrams"),
        "{}",
        run.report
    );
    assert!(
        run.client.contains(" RoCE/UDP latency ratio: "),
        "{}",
        run.report
    );
}

// 127.0.2.24-25
#[test]
fn udp_alone() {
    let run = perf(24, &["udp_bw", "-n", "2000", "-s", "4096"]);
    let r = &results(&run.client, BW_HEADER, &run.report)[0];
    assert!(r[1] > 0.0 && r[3] > 0.0, "{}", run.report);
    let run = perf(24, &["udp_lat", "-n", "200", "-s", "64"]);
    check_lat(&run.client, 64.0, 200.0, &run.report);
    // RoCE's datagram pattern: an ACK-sized datagram before every ping and
    // echo, which the other side must not take for the answer; sleeping
    // at once and polling first.
    for spin in ["0", "50"] {
        let run = perf(
            24,
            &[
                "udp_lat",
                "-n",
                "200",
                "-s",
                "64",
                "--udp-acks",
                "--spin_us",
                spin,
            ],
        );
        assert!(
            run.client
                .contains("each with a 20-byte datagram before it in one sendmmsg"),
            "{}",
            run.report
        );
        check_lat(&run.client, 64.0, 200.0, &run.report);
    }
}

/// The `RXE_PERF_BUFFER` line's fields.
fn buffer_line(out: &str, report: &str) -> std::collections::HashMap<String, String> {
    let line = out
        .lines()
        .find(|l| l.starts_with("RXE_PERF_BUFFER "))
        .unwrap_or_else(|| panic!("no RXE_PERF_BUFFER line\n{report}"));
    line.split_whitespace()
        .skip(1)
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn hex(v: &str) -> u64 {
    u64::from_str_radix(v.trim_start_matches("0x"), 16).unwrap()
}

fn u64_at(bytes: &[u8], off: u64) -> u64 {
    let o = off as usize;
    u64::from_le_bytes(bytes[o..o + 8].try_into().unwrap())
}

// 127.0.2.40-41
/// atomic_lat (ib_atomic_lat) and --dump-buffer: 20 fetch-and-adds of 1;
/// the server's target goes from its random start x to x + 20, and the
/// client's result buffer holds x + 19, the last value fetched.
#[test]
fn atomic_lat_and_dump_buffer() {
    let dir = std::env::temp_dir().join(format!("rxe-perf-dump-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (sp, cp) = (dir.join("server.buf"), dir.join("client.buf"));
    let run = perf_sides(
        40,
        &["atomic_lat", "-n", "20"],
        &["--dump-buffer", sp.to_str().unwrap()],
        &["--dump-buffer", cp.to_str().unwrap()],
    );
    check_header(
        &run.client,
        "Atomic FETCH_AND_ADD Latency Test",
        "RC",
        "127.0.2.41",
        "127.0.2.40",
        &run.report,
    );
    check_lat(&run.client, 8.0, 20.0, &run.report);
    let (s, c) = (
        buffer_line(&run.server, &run.report),
        buffer_line(&run.client, &run.report),
    );
    let read = |p: &std::path::Path| std::fs::read(p).unwrap();
    let (s_init, s_end) = (read(&dir.join("server.buf.init")), read(&sp));
    let (c_init, c_end) = (read(&dir.join("client.buf.init")), read(&cp));
    assert_eq!(s_end.len().to_string(), s["len"], "{}", run.report);
    assert_eq!(s_init.len(), s_end.len());
    assert_eq!(c_init.len(), c_end.len());
    // The buffers were filled with random bytes, not left zero.
    assert!(s_init.iter().filter(|&&b| b != 0).count() > s_init.len() / 2);
    // The client targets what the server announced.
    assert_eq!(c["remote"], s["target"], "{}", run.report);
    let target = hex(&s["target"]) - hex(&s["va"]);
    let x = u64_at(&s_init, target);
    assert_eq!(u64_at(&s_end, target), x.wrapping_add(20), "{}", run.report);
    let local = hex(&c["local"]) - hex(&c["va"]);
    assert_eq!(u64_at(&c_end, local), x.wrapping_add(19), "{}", run.report);
    // Nothing else of the server's buffer changed.
    let t = target as usize;
    assert_eq!(s_init[..t], s_end[..t]);
    assert_eq!(s_init[t + 8..], s_end[t + 8..]);
    std::fs::remove_dir_all(&dir).ok();
}

// 127.0.2.42-43
/// `--one-buffer`: four QPs WRITE from and into QP 0's part of the buffer.
/// The buffer is one QP's size (two halves of a page), the client targets
/// what the server announced, and the server's target half ends up as the
/// client's source half while the rest of it is untouched.
#[test]
fn one_buffer_puts_every_qp_in_qp_0s_part() {
    let dir = std::env::temp_dir().join(format!("rxe-perf-one-buffer-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (sp, cp) = (dir.join("server.buf"), dir.join("client.buf"));
    let args = [
        "write_bw",
        "-q",
        "4",
        "-n",
        "40",
        "-s",
        "4096",
        "--one-buffer",
    ];
    let run = perf_sides(
        42,
        &args,
        &["--dump-buffer", sp.to_str().unwrap()],
        &["--dump-buffer", cp.to_str().unwrap()],
    );
    check_bw(&run.client, 4096.0, 160.0, &run.report);
    let (s, c) = (
        buffer_line(&run.server, &run.report),
        buffer_line(&run.client, &run.report),
    );
    assert_eq!(s["len"], "8192", "{}", run.report);
    assert_eq!(c["len"], "8192", "{}", run.report);
    assert_eq!(c["remote"], s["target"], "{}", run.report);
    assert_eq!(hex(&s["target"]) - hex(&s["va"]), 4096, "{}", run.report);
    let read = |p: &std::path::Path| std::fs::read(p).unwrap();
    let (s_init, s_end) = (read(&dir.join("server.buf.init")), read(&sp));
    let c_init = read(&dir.join("client.buf.init"));
    assert_ne!(
        s_init[4096..],
        c_init[..4096],
        "the halves start out different"
    );
    assert_eq!(s_end[4096..], c_init[..4096], "{}", run.report);
    assert_eq!(s_end[..4096], s_init[..4096], "{}", run.report);
    std::fs::remove_dir_all(&dir).ok();
}

/// A soft device follows its link, as the kernel's rxe follows its net
/// device (issue 37): in a namespace of this test's own whose loopback
/// carries 1500 bytes, `rxe devinfo` reports active_mtu 1024, `rxe perf`
/// takes it by default and moves data; asked for 4096-byte packets the
/// link cannot carry, the refused datagrams are counted by reason and the
/// first is reported once on standard error, instead of vanishing into a
/// bare retry-exceeded error.
#[test]
fn a_device_follows_its_links_mtu_and_reports_datagrams_the_link_refuses() {
    let Some(ns) = rxe_tests::netns::Netns::new("mtu", &["10.78.0.1", "10.78.0.2"]) else {
        eprintln!("skipped: cannot create a network namespace (not root?)");
        return;
    };
    ns.ip(&["link", "set", "lo", "mtu", "1500"]);
    let info = ns
        .rxe(&["devinfo", "-d", "10.78.0.1", "-v"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&info.stdout);
    assert!(info.status.success(), "{text}");
    assert!(text.contains("max_mtu:\t\t4096 (5)"), "{text}");
    assert!(text.contains("active_mtu:\t\t1024 (3)"), "{text}");

    // (both sides: perftest's exchange takes the smaller of their MTUs)
    let pair = |both: &[&str]| {
        let port = free_port().to_string();
        let common = [
            "write_bw",
            "-s",
            "65536",
            "-n",
            "5",
            "-p",
            &port,
            "--timeout",
            "20",
        ];
        let server = ns
            .rxe(&["perf"])
            .args(common)
            .args(["-d", "10.78.0.1"])
            .args(both)
            .stdin(Stdio::null())
            .spawn()
            .unwrap();
        let client = ns
            .rxe(&["perf"])
            .args(common)
            .args(["-d", "10.78.0.2", "10.78.0.1", "--counters"])
            .args(both)
            .stdin(Stdio::null())
            .spawn()
            .unwrap();
        let c = finish(client, Duration::from_secs(60));
        let s = finish(server, Duration::from_secs(20));
        (c, s)
    };
    // the default: the port's active MTU
    let (c, s) = pair(&[]);
    let out = String::from_utf8_lossy(&c.stdout);
    let err = String::from_utf8_lossy(&c.stderr);
    assert!(c.status.success() && s.status.success(), "{out}{err}");
    assert!(out.contains(" Mtu             : 1024[B]"), "{out}");

    // 4096 on purpose: every full-sized packet is refused (EMSGSIZE)
    let (c, _) = pair(&["-m", "4096"]);
    let out = String::from_utf8_lossy(&c.stdout);
    let err = String::from_utf8_lossy(&c.stderr);
    assert!(!c.status.success(), "{out}{err}");
    assert_eq!(
        err.matches("the host refused").count(),
        1,
        "reported once: {err}"
    );
    assert!(err.contains("TooLong"), "{err}");
    assert!(err.contains("the link's MTU is 1500 bytes"), "{err}");
    // and counted: "refused by the host {TooLong: N}", N > 1
    let n: u64 = out
        .split("refused by the host {TooLong: ")
        .nth(1)
        .and_then(|r| r.split('}').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no TooLong count in {out}"));
    assert!(n > 1, "{out}");

    // and the port is down while its interface is
    ns.ip(&["link", "set", "lo", "down"]);
    let info = ns.rxe(&["devinfo", "-d", "10.78.0.1"]).output().unwrap();
    let text = String::from_utf8_lossy(&info.stdout);
    assert!(text.contains("PORT_DOWN"), "{text}");
}
