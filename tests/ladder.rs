//! `rxe dump --ladder` as a user runs it: on the bundled captures, and on a
//! simulated capture with thousands of packets.
//!
//! Each diagram is parsed as XML and checked: every RoCE frame of the
//! capture is on it exactly once (each arrow carries `data-frames`), no two
//! texts overlap and none is cut at the edge (boxes from each text's
//! position, font size and a fixed-width estimate of its length), losses,
//! retransmissions and NAKs are marked, CM MADs have their colour, and the
//! output is the same on every run. The docs' example diagrams must be
//! what the command makes today.
//!
//! The `rxe` binary is built by [`rxe_tests::cargo_build`] (see
//! `dump_cli.rs` for why); `RXE_BIN` tests a binary built elsewhere.

#[path = "common/ladder_svg.rs"]
mod ladder_svg;

use ladder_svg::{arrow_of, arrow_text, arrows, check_svg, classes, parse};
use roxmltree::Node;
use rxe_core::types::{Mtu, SendOpcode, SendWr};
use rxe_core::wire::{FrameRepr, IpRepr, LinkType, UdpChecksum};
use rxe_net::capture::CaptureWriter;
use rxe_net::sim::Faults;
use rxe_tests::sim::{self, ConnParams};
use rxe_tests::{pcap_dir, tests_dir};
use serde_json::Value;
use std::collections::BTreeSet;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rxe_tests::rxe_bin;

fn scratch(name: &str) -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("ladder-{name}"))
}

/// Runs `rxe dump -q --ladder OUT capture` and returns OUT's text.
fn ladder(capture: &Path, out_name: &str) -> String {
    let out = scratch(out_name);
    let o = Command::new(rxe_bin())
        .args(["dump", "-q", "--ladder"])
        .arg(&out)
        .arg(capture)
        .output()
        .expect("run rxe");
    assert!(
        o.status.success(),
        "rxe dump --ladder {}: {}",
        capture.display(),
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(o.stdout.is_empty(), "--ladder prints nothing on stdout");
    std::fs::read_to_string(&out).unwrap()
}

/// The frame numbers `rxe dump --json` shows (every RoCE frame, and
/// frames to port 4791 that do not parse).
fn roce_frames(capture: &Path) -> BTreeSet<u64> {
    let o = Command::new(rxe_bin())
        .args(["dump", "--json"])
        .arg(capture)
        .output()
        .unwrap();
    assert!(o.status.success());
    String::from_utf8(o.stdout)
        .unwrap()
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["frame"]
                .as_u64()
                .unwrap()
        })
        .collect()
}

fn check_capture(name: &str) -> (String, String) {
    let pcap = pcap_dir().join(format!("{name}.pcap"));
    let frames = roce_frames(&pcap);
    assert!(!frames.is_empty());
    let svg = ladder(&pcap, &format!("{name}.svg"));
    check_svg(parse(&svg).root_element(), &frames);
    let html = ladder(&pcap, &format!("{name}.html"));
    check_html(&html, &frames);
    (svg, html)
}

/// The HTML page: well-formed, self-contained, holding the same diagram.
fn check_html(html: &str, frames: &BTreeSet<u64>) {
    assert!(html.starts_with("<!DOCTYPE html>"));
    let doc = parse(html);
    let root = doc.root_element();
    assert!(root.has_tag_name("html"));
    let svg = root
        .descendants()
        .find(|n| n.has_tag_name("svg"))
        .expect("the page holds the SVG");
    check_svg(svg, frames);
    let scripts: Vec<Node> = root
        .descendants()
        .filter(|n| n.has_tag_name("script"))
        .collect();
    assert_eq!(scripts.len(), 1);
    assert!(scripts[0].attribute("src").is_none(), "no external script");
    let code = scripts[0].text().unwrap();
    for needed in ["setZoom", "mousemove", "data-tip"] {
        assert!(code.contains(needed), "the script has {needed}");
    }
    check_js_syntax(code);
    for n in root.descendants().filter(|n| n.is_element()) {
        for a in ["src", "href"] {
            assert!(n.attribute(a).is_none(), "nothing loaded from elsewhere");
        }
    }
    // Every packet's tooltip is there (the script moves <title> into it).
    for (_, _, g) in arrows(svg) {
        let title = g.children().find(|n| n.has_tag_name("title")).unwrap();
        assert!(title.text().unwrap().contains("ICRC"));
    }
}

/// `node --check` on the page's script, where node is installed (it runs
/// in a real browser, zoom and hover included, in `ladder_browser.rs`).
fn check_js_syntax(code: &str) {
    // One file per test thread: tests run in parallel.
    let js = scratch(&format!("script-{:?}.js", std::thread::current().id()));
    std::fs::write(&js, code).unwrap();
    match Command::new("node").arg("--check").arg(&js).output() {
        Ok(o) => assert!(
            o.status.success(),
            "the page's script: {}",
            String::from_utf8_lossy(&o.stderr)
        ),
        Err(e) => eprintln!("node not run ({e}): the script's syntax is not checked"),
    }
}

#[test]
fn rc_pingpong_small_every_packet_and_no_overlap() {
    let (svg, _) = check_capture("rc_pingpong_small");
    let doc = parse(&svg);
    let root = doc.root_element();
    // Two lanes: one QP at each address (the ACKs pair them).
    let lanes = root
        .descendants()
        .filter(|n| classes(n).contains(&"lane"))
        .count();
    assert_eq!(lanes, 2);
    let (_, c, g) = arrow_of(root, 2);
    assert!(c.contains(&"ack"), "{c:?}");
    assert_eq!(
        arrow_text(g),
        "RC_ACKNOWLEDGE PSN=9376765 ACK msn=1 | 0.005565"
    );
}

#[test]
fn loss_capture_marks_gaps_naks_and_retransmissions() {
    let (svg, _) = check_capture("loss_write_bw_4096");
    let doc = parse(&svg);
    let root = doc.root_element();
    // Frame 7 is PSN 9587667 right after 9587665: 9587666 was dropped.
    let (_, c, g) = arrow_of(root, 7);
    assert!(c.contains(&"has-m-gap"), "{c:?}");
    assert!(arrow_text(g).contains("gap: PSN 9587666 not seen"));
    // Frame 39: the NAK asking for it, linked to its resending (frame 40).
    let (_, c, g) = arrow_of(root, 39);
    assert!(c.contains(&"nak"), "{c:?}");
    assert!(arrow_text(g).contains("asks for PSN 9587666: resent in frame 40"));
    let link = root
        .descendants()
        .find(|n| classes(n).contains(&"link") && n.attribute("data-from") == Some("39"))
        .expect("a link from the NAK");
    assert_eq!(link.attribute("data-to"), Some("40"));
    // Go-back-N: frames 40.. are dashed retransmissions; 40 and 41 (two
    // MIDDLE packets) are one arrow, 41 resending 7; 42 resends 8.
    for f in [40, 41, 42, 43] {
        let (_, c, _) = arrow_of(root, f);
        assert!(
            c.contains(&"dashed") && c.contains(&"has-m-retx"),
            "{f}: {c:?}"
        );
    }
    let (f, _, g) = arrow_of(root, 41);
    assert_eq!(f, [40, 41]);
    assert!(
        arrow_text(g).contains("↻ 2 retransmissions (of frame 7)"),
        "{}",
        arrow_text(g)
    );
    let (_, _, g) = arrow_of(root, 42);
    assert!(arrow_text(g).contains("↻ retransmission of frame 8"));
    // Frames 2 and 3 (two MIDDLE packets of the first WRITE) are one arrow.
    let (f, c, g) = arrow_of(root, 2);
    assert_eq!(f, [2, 3]);
    assert!(c.contains(&"thick"));
    assert!(arrow_text(g).starts_with("×2 RC_RDMA_WRITE_MIDDLE PSN=9587662..9587663"));
}

#[test]
fn read_responses_are_coloured_and_collapsed() {
    let (svg, _) = check_capture("read_bw_4096");
    let doc = parse(&svg);
    let root = doc.root_element();
    let (_, c, _) = arrow_of(root, 1);
    assert!(c.contains(&"req"), "{c:?}");
    let (f, c, g) = arrow_of(root, 12);
    assert_eq!(f, [12, 13]);
    assert!(c.contains(&"resp"), "{c:?}");
    assert!(arrow_text(g).starts_with("×2 RC_RDMA_READ_RESPONSE_MIDDLE"));
}

#[test]
fn cm_mads_have_their_colour() {
    let (svg, _) = check_capture("rping");
    let doc = parse(&svg);
    let root = doc.root_element();
    for (f, name) in [
        (1, "ConnectRequest"),
        (2, "ConnectReply"),
        (3, "ReadyToUse"),
    ] {
        let (_, c, g) = arrow_of(root, f);
        assert!(c.contains(&"mad"), "{f}: {c:?}");
        assert!(arrow_text(g).starts_with(&format!("MAD CM {name}")));
    }
    let style = root
        .descendants()
        .find(|n| n.has_tag_name("style"))
        .and_then(|n| n.text())
        .unwrap();
    assert!(style.contains(".mad line,.mad path{stroke:#7a4a12}"));
    // QP 1 and the data QP at each address.
    let lanes = root
        .descendants()
        .filter(|n| classes(n).contains(&"lane"))
        .count();
    assert_eq!(lanes, 4);
}

#[test]
fn srq_pingpong_and_the_other_captures() {
    check_capture("srq_pingpong");
    for name in [
        "extra_imm_naks",
        "loss_read_bw_4096",
        "loss_rc_pingpong_10000",
        "uc_pingpong_10000",
        "udaddy",
        "atomic_fadd",
        "l2_peer_ud",
    ] {
        let pcap = pcap_dir().join(format!("{name}.pcap"));
        let svg = ladder(&pcap, &format!("{name}.svg"));
        check_svg(parse(&svg).root_element(), &roce_frames(&pcap));
    }
}

#[test]
fn rnr_naks_are_linked_to_the_retry() {
    let pcap = pcap_dir().join("extra_imm_naks.pcap");
    let svg = ladder(&pcap, "rnr.svg");
    let doc = parse(&svg);
    let root = doc.root_element();
    // Frame 18 is an RNR NAK for PSN 16315874 (frame 17).
    let (_, c, g) = arrow_of(root, 18);
    assert!(c.contains(&"rnr"), "{c:?}");
    assert!(arrow_text(g).contains("RNR NAK timer=31 msn=4"));
    assert!(arrow_text(g).contains("→ retried in frame"));
}

#[test]
fn same_capture_same_bytes() {
    let pcap = pcap_dir().join("loss_read_bw_4096.pcap");
    assert_eq!(ladder(&pcap, "a.html"), ladder(&pcap, "b.html"));
}

#[test]
fn bad_extension_is_refused() {
    let o = Command::new(rxe_bin())
        .args(["dump", "--ladder"])
        .arg(scratch("out.png"))
        .arg(pcap_dir().join("rc_pingpong_small.pcap"))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains(".svg or .html"));
}

/// The docs' examples are what `rxe dump --ladder` makes of the bundled
/// captures today: `RXE_BLESS=1` rewrites them.
#[test]
fn docs_examples_are_current() {
    let docs = tests_dir().parent().unwrap().join("docs").join("ladder");
    for name in ["loss_write_bw_4096", "rping"] {
        let made = ladder(
            &pcap_dir().join(format!("{name}.pcap")),
            &format!("doc-{name}.svg"),
        );
        let path = docs.join(format!("{name}.svg"));
        if std::env::var_os("RXE_BLESS").is_some() {
            std::fs::create_dir_all(&docs).unwrap();
            std::fs::write(&path, &made).unwrap();
        }
        let kept = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            kept == made,
            "{} is not what `rxe dump --ladder` makes now; regenerate it with \
             RXE_BLESS=1 cargo test -p rxe-tests --test ladder docs_examples",
            path.display()
        );
    }
}

/// The IPv4 and UDP headers around a RoCE payload, as a Linux UDP socket
/// sends them (the ICRC the engine computed covers IP ID 0).
fn ip_packet(t: &rxe_core::engine::Transmit) -> Vec<u8> {
    let (IpAddr::V4(src), IpAddr::V4(dst)) = (t.src, t.dst) else {
        panic!("IPv4 only")
    };
    FrameRepr {
        eth: None,
        ip: IpRepr::V4 {
            src,
            dst,
            tos: t.traffic_class,
            id: 0,
            dont_fragment: true,
            ttl: t.hop_limit,
        },
        udp_src_port: t.src_port,
        udp_checksum: UdpChecksum::Zero,
    }
    .wrap_vec(&t.payload)
    .unwrap()
}

/// Frames seen by the simulated network's tap, with their times.
type Captured = Arc<Mutex<Vec<(Duration, Vec<u8>)>>>;

#[test]
fn thousands_of_packets_stay_small() {
    // 48 WRITEs of 64 KiB over a 1024-byte MTU (64 packets each) with a
    // little loss, on the simulated network; every packet sent is captured.
    let faults = Faults {
        loss: 0.002,
        ..Faults::none()
    };
    let (mut net, nodes) = sim::network(23, faults, 2, 1 << 17);
    let (a, b) = (&nodes[0], &nodes[1]);
    let p = ConnParams {
        mtu: Mtu::Mtu1024,
        ..ConnParams::default()
    };
    let (qa, _qb) = sim::connect(&mut net, a, b, &p);
    let captured: Captured = Arc::default();
    let c = captured.clone();
    net.set_tap(move |at, t| c.lock().unwrap().push((at, ip_packet(t))));
    for i in 0..48 {
        let mut wr = SendWr::new(i, SendOpcode::RdmaWrite);
        wr.sg_list = vec![sim::sge(a, 0, 1 << 16)];
        wr.remote_addr = sim::IOVA + (1 << 16);
        wr.rkey = b.mr.rkey;
        net.engines[a.idx].post_send(qa, wr).unwrap();
    }
    net.run(Duration::from_secs(10));
    let pcap = scratch("sim_writes.pcap");
    let mut w = CaptureWriter::create(&pcap, LinkType::RawIp).unwrap();
    let captured = captured.lock().unwrap();
    for (at, frame) in captured.iter() {
        w.write(*at, frame).unwrap();
    }
    w.finish().unwrap();
    let n = captured.len();
    assert!(n > 3000, "{n} packets");

    let frames = roce_frames(&pcap);
    assert_eq!(frames.len(), n);
    let svg = ladder(&pcap, "sim_writes.svg");
    let doc = parse(&svg);
    let root = doc.root_element();
    let arrows = check_svg(root, &frames);
    // 3607 packets make 222 arrows and 163 kB today.
    assert!(arrows * 10 < n, "{arrows} arrows for {n} packets");
    assert!(
        svg.len() < 200_000,
        "{} bytes for {n} packets ({arrows} arrows)",
        svg.len()
    );
    // The losses show up as retransmissions.
    let retx = arrows_with(root, "has-m-retx");
    assert!(retx > 0, "no retransmission marked");
    let html = ladder(&pcap, "sim_writes.html");
    check_html(&html, &frames);
}

fn arrows_with(svg: Node, class: &str) -> usize {
    arrows(svg)
        .iter()
        .filter(|(_, c, _)| c.contains(&class))
        .count()
}
