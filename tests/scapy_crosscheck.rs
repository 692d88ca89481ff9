//! Cross-check of rxe-core's framing and ICRC against scapy's independent
//! RoCE v2 implementation (`scapy.contrib.roce`), through
//! `tests/scapy/roce_check.py` (see `tests/scapy/README.md`).
//!
//! * [`scapy_frames_agree_with_rxe_core`]: every frame `roce_check.py gen`
//!   builds (good ones, one-bit flips, masked-field changes) gets the same
//!   ICRC verdict from rxe-core as scapy expects, and the same opcode, dest QP
//!   and PSN as scapy dissects; the good ones re-emit byte for byte.
//! * [`rxe_core_frames_pass_scapy`]: frames rxe-core builds (every opcode,
//!   IPv4 and IPv6, no/one/two VLAN tags, payload lengths 0..=9 and 1024) get
//!   `icrc_ok` from scapy, and copies with a flipped covered bit or a changed
//!   masked field get the same verdict from both.
//!
//! Needs Python 3 with scapy, which `bash tests/setup.sh` installs (the
//! README's test command, `bash tests/run.sh`, runs it first). `RXE_PYTHON`
//! names the interpreter (default `python3` from `PATH`). Without scapy the
//! tests fail with instructions, unless `RXE_SKIP_SCAPY=1` is set: then they
//! print a note and pass.

use rxe_core::psn::Psn;
use rxe_core::wire::{
    opcode, AethRepr, AethSyndrome, AtomicAckEthRepr, AtomicEthRepr, Bth, BthRepr, DethRepr,
    EthRepr, ExtHeaders, FethRepr, FrameRepr, IpRepr, LinkType, NakCode, Opcode, PacketRepr,
    RdethRepr, RethRepr, RoceFrame, UdpChecksum, VlanTag,
};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::io::Write;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::OnceLock;

// ---------------------------------------------------------------------------
// Running roce_check.py
// ---------------------------------------------------------------------------

fn script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("scapy")
        .join("roce_check.py")
}

/// The Python interpreter to use, or `None` if scapy is missing and
/// `RXE_SKIP_SCAPY=1` asks to skip. Panics with instructions otherwise.
fn python() -> Option<&'static str> {
    static PYTHON: OnceLock<Result<String, String>> = OnceLock::new();
    let found = PYTHON.get_or_init(|| {
        let py = std::env::var("RXE_PYTHON").unwrap_or_else(|_| "python3".to_string());
        // Not from tests/: its `scapy/` directory would shadow the package.
        let probe = Command::new(&py)
            .current_dir(std::env::temp_dir())
            .args([
                "-c",
                "import scapy, scapy.contrib.roce; print(scapy.VERSION)",
            ])
            .output();
        match probe {
            Err(e) => Err(format!("cannot run the Python interpreter `{py}`: {e}")),
            Ok(out) if !out.status.success() => Err(format!(
                "`{py}` cannot import scapy.contrib.roce ({}):\n{}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            )),
            Ok(out) => {
                eprintln!(
                    "scapy cross-check: {py}, scapy {}",
                    String::from_utf8_lossy(&out.stdout).trim()
                );
                Ok(py)
            }
        }
    });
    match found {
        Ok(py) => Some(py.as_str()),
        Err(problem) if std::env::var("RXE_SKIP_SCAPY").as_deref() == Ok("1") => {
            eprintln!("note: RXE_SKIP_SCAPY=1, skipping the scapy cross-check: {problem}");
            None
        }
        Err(problem) => panic!(
            "{problem}\n\n\
             The scapy cross-check needs Python 3 with scapy installed:\n\
             \x20   bash tests/setup.sh      (or: python3 -m pip install scapy)\n\
             `bash tests/run.sh`, the README's test command, runs it before the tests.\n\
             Set RXE_PYTHON=/path/to/python3 to use another interpreter, or\n\
             RXE_SKIP_SCAPY=1 to skip these tests."
        ),
    }
}

/// Runs `roce_check.py ARGS` with `stdin` as its input and returns stdout.
fn run_script(py: &str, args: &[&str], stdin: &str) -> String {
    let mut child = Command::new(py)
        .arg(script())
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {py} {}: {e}", script().display()));
    let mut pipe = child.stdin.take().expect("stdin is piped");
    let input = stdin.to_owned();
    // Write from another thread so a full stdout pipe cannot deadlock us.
    let writer = std::thread::spawn(move || pipe.write_all(input.as_bytes()));
    let out = child.wait_with_output().expect("roce_check.py runs");
    writer
        .join()
        .expect("writer thread")
        .expect("roce_check.py reads its stdin");
    assert!(
        out.status.success(),
        "roce_check.py {args:?} failed ({}):\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("roce_check.py prints UTF-8")
}

/// scapy's verdict on one frame, from `roce_check.py verify`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Verdict {
    icrc_ok: bool,
    /// (opcode, dest QP, PSN), or `None` if scapy says it is not RoCE v2.
    bth: Option<(u8, u32, u32)>,
    error: Option<String>,
}

/// Runs `verify` on `(name, frame)` pairs and returns scapy's verdicts by name.
fn scapy_verify(py: &str, frames: &[(String, Vec<u8>)]) -> HashMap<String, Verdict> {
    let mut input = String::new();
    for (name, frame) in frames {
        input.push_str(&json!({"name": name, "frame_hex": to_hex(frame)}).to_string());
        input.push('\n');
    }
    let out = run_script(py, &["verify"], &input);
    let mut verdicts = HashMap::new();
    for line in out.lines().filter(|l| !l.trim().is_empty()) {
        let v: Value = serde_json::from_str(line).expect("verify prints JSON lines");
        let num = |k: &str| v[k].as_u64();
        let bth = match (num("opcode"), num("dest_qp"), num("psn")) {
            (Some(o), Some(q), Some(p)) => Some((o as u8, q as u32, p as u32)),
            _ => None,
        };
        let name = v["name"].as_str().expect("name").to_string();
        let verdict = Verdict {
            icrc_ok: v["icrc_ok"].as_bool().expect("icrc_ok is a bool"),
            bth,
            error: v["error"].as_str().map(str::to_string),
        };
        assert!(
            verdicts.insert(name.clone(), verdict).is_none(),
            "duplicate {name}"
        );
    }
    assert_eq!(
        verdicts.len(),
        frames.len(),
        "verify answers every frame once"
    );
    verdicts
}

fn to_hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn from_hex(s: &str) -> Vec<u8> {
    assert!(s.len() & 1 == 0, "odd hex length");
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex digit"))
        .collect()
}

/// Our reading of a frame: (opcode, dest QP, PSN) from the BTH, and the ICRC
/// verdict. The BTH is read without the opcode-table checks of
/// `Packet::new_checked`, since a flipped bit may make the opcode unknown
/// while the ICRC check still makes sense.
fn ours(frame: &[u8]) -> Result<((u8, u32, u32), bool), String> {
    let rf = RoceFrame::parse(LinkType::Ethernet, frame).map_err(|e| e.to_string())?;
    let bth = Bth::new_checked(rf.transport).map_err(|e| e.to_string())?;
    Ok((
        (bth.opcode().0, bth.dest_qp(), bth.psn().value()),
        rf.icrc_ok(),
    ))
}

// ---------------------------------------------------------------------------
// (a) scapy's frames through rxe-core
// ---------------------------------------------------------------------------

#[test]
fn scapy_frames_agree_with_rxe_core() {
    let Some(py) = python() else { return };
    let out = run_script(py, &["gen"], "");
    let mut frames = Vec::new();
    let mut expect = HashMap::new();
    for line in out.lines().filter(|l| !l.trim().is_empty()) {
        let v: Value = serde_json::from_str(line).expect("gen prints JSON lines");
        let name = v["name"].as_str().expect("name").to_string();
        let frame = from_hex(v["frame_hex"].as_str().expect("frame_hex"));
        expect.insert(
            name.clone(),
            v["expect_icrc_ok"].as_bool().expect("expect_icrc_ok"),
        );
        frames.push((name, frame));
    }
    let n_bad = expect.values().filter(|ok| !**ok).count();
    eprintln!(
        "gen: {} frames, {} expect ICRC ok, {n_bad} expect bad",
        frames.len(),
        frames.len() - n_bad
    );
    assert!(
        frames.len() >= 1000,
        "gen made only {} frames",
        frames.len()
    );
    assert!(n_bad >= 100 && frames.len() - n_bad >= 100);
    assert_eq!(expect.len(), frames.len(), "gen names are unique");

    // scapy's own dissection of the same frames, for opcode / QP / PSN.
    let scapy = scapy_verify(py, &frames);

    let mut failures = Vec::new();
    let mut re_emitted = 0;
    for (name, frame) in &frames {
        let want_ok = expect[name];
        let s = &scapy[name];
        if s.icrc_ok != want_ok {
            failures.push(format!(
                "{name}: scapy's verify says icrc_ok={} but gen expects {want_ok}",
                s.icrc_ok
            ));
        }
        let rf = match RoceFrame::parse(LinkType::Ethernet, frame) {
            Ok(rf) => rf,
            Err(e) => {
                failures.push(format!("{name}: rxe-core cannot parse the frame: {e}"));
                continue;
            }
        };
        let packet = match rf.packet() {
            Ok(p) => p,
            Err(e) => {
                failures.push(format!("{name}: rxe-core rejects the packet: {e}"));
                continue;
            }
        };
        let bth = packet.bth();
        let mine = (bth.opcode().0, bth.dest_qp(), bth.psn().value());
        if s.bth != Some(mine) {
            failures.push(format!(
                "{name}: (opcode, dest QP, PSN) rxe-core {mine:?}, scapy {:?}",
                s.bth
            ));
        }
        if rf.icrc_ok() != want_ok {
            failures.push(format!(
                "{name}: rxe-core says icrc_ok={}, scapy expects {want_ok} \
                 (computed {:08x?}, carried {:08x})",
                rf.icrc_ok(),
                rf.computed_icrc(),
                packet.icrc()
            ));
        }
        let repr = match PacketRepr::parse(&packet) {
            Ok(r) => r,
            Err(e) => {
                failures.push(format!("{name}: PacketRepr::parse: {e}"));
                continue;
            }
        };
        // The unmodified frames: emitting what we parsed rebuilds scapy's
        // bytes exactly (same header layout, checksums and ICRC).
        if !name.contains('~') {
            let fr = rf.repr();
            let mut buf = vec![0u8; fr.buffer_len(repr.buffer_len())];
            match fr.emit(&repr, &mut buf) {
                Ok(_) if buf == *frame => re_emitted += 1,
                Ok(_) => failures.push(format!(
                    "{name}: re-emitted frame differs from scapy's\n  scapy {}\n  ours  {}",
                    to_hex(frame),
                    to_hex(&buf)
                )),
                Err(e) => failures.push(format!("{name}: re-emit failed: {e}")),
            }
        }
    }
    eprintln!("{re_emitted} good frames re-emitted byte for byte");
    assert!(re_emitted >= 100);
    assert!(
        failures.is_empty(),
        "{} disagreements with scapy:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

// ---------------------------------------------------------------------------
// (b) rxe-core's frames through scapy
// ---------------------------------------------------------------------------

/// A small deterministic generator (splitmix64).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn u32(&mut self) -> u32 {
        self.next() as u32
    }
    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}

/// A packet of the given opcode with every header it needs, filled with
/// varied values.
fn packet_for<'a>(op: Opcode, payload: &'a [u8], rng: &mut Rng) -> PacketRepr<'a> {
    let info = op.info().expect("known opcode");
    let mut p = PacketRepr::new(BthRepr {
        opcode: op,
        solicited: rng.below(2) == 1,
        mig_req: rng.below(2) == 1,
        pad_count: 0,
        pkey: [0xffff, 0x8001, 0x7fff][rng.below(3)],
        // FECN/BECN sit in the masked byte 4: vary them too.
        fecn: rng.below(4) == 0,
        becn: rng.below(4) == 0,
        dest_qp: rng.u32() & 0xff_ffff,
        ack_req: rng.below(2) == 1,
        psn: Psn::new(rng.u32()),
    });
    let h = info.headers;
    if h.contains(ExtHeaders::RDETH) {
        p.rdeth = Some(RdethRepr {
            ee_context: rng.u32() & 0xff_ffff,
        });
    }
    if h.contains(ExtHeaders::DETH) {
        p.deth = Some(DethRepr {
            qkey: [0x1111_1111, 0x8001_0000, rng.u32()][rng.below(3)],
            src_qp: rng.u32() & 0xff_ffff,
        });
    }
    if h.contains(ExtHeaders::FETH) {
        p.feth = Some(FethRepr {
            selectivity: rng.below(4) as u8,
            placement: rng.below(16) as u8,
        });
    }
    if h.contains(ExtHeaders::RETH) {
        p.reth = Some(RethRepr {
            va: rng.next(),
            rkey: rng.u32(),
            dma_len: if payload.is_empty() {
                rng.u32() >> 12
            } else {
                payload.len() as u32
            },
        });
    }
    if h.contains(ExtHeaders::ATOMIC_ETH) {
        p.atomic_eth = Some(AtomicEthRepr {
            va: rng.next() & !7,
            rkey: rng.u32(),
            swap_add: rng.next(),
            compare: rng.next(),
        });
    }
    if h.contains(ExtHeaders::AETH) {
        let syndrome = match rng.below(4) {
            0 => AethSyndrome::Ack { credits: 0x1f },
            1 => AethSyndrome::Ack {
                credits: rng.below(31) as u8,
            },
            2 => AethSyndrome::RnrNak {
                timer: rng.below(32) as u8,
            },
            _ => AethSyndrome::Nak(NakCode::from_code(rng.below(5) as u8)),
        };
        p.aeth = Some(AethRepr {
            syndrome,
            msn: rng.u32() & 0xff_ffff,
        });
    }
    if h.contains(ExtHeaders::ATOMIC_ACK_ETH) {
        p.atomic_ack_eth = Some(AtomicAckEthRepr { orig: rng.next() });
    }
    if h.contains(ExtHeaders::IMMDT) {
        p.immdt = Some(rng.u32());
    }
    if h.contains(ExtHeaders::IETH) {
        p.ieth = Some(rng.u32());
    }
    p.payload = payload;
    p
}

/// The outer headers for packet number `k`: IPv4 or IPv6 as asked, the VLAN
/// setup (none, 802.1Q, QinQ) and the UDP checksum (zero or real) rotating
/// with `k` through all six combinations. Masked fields (TOS, TTL, traffic
/// class, flow label, hop limit) are all nonzero.
fn frame_for(v6: bool, k: usize, rng: &mut Rng) -> (FrameRepr, String) {
    let tag = VlanTag {
        tpid: 0x8100,
        pcp: rng.below(8) as u8,
        dei: rng.below(2) == 1,
        vid: (rng.below(4094) + 1) as u16,
    };
    let outer = VlanTag {
        tpid: 0x88a8,
        pcp: rng.below(8) as u8,
        dei: false,
        vid: (rng.below(4094) + 1) as u16,
    };
    let (vlans, l2) = match k % 3 {
        0 => ([None, None], ""),
        1 => ([Some(tag), None], "-vlan"),
        _ => ([Some(outer), Some(tag)], "-qinq"),
    };
    let ip = if v6 {
        IpRepr::V6 {
            src: Ipv6Addr::new(0xfd00, 0x99, 0, 0, 0, 0, 0, 0x0c),
            dst: Ipv6Addr::new(0xfd00, 0x99, 0, 0, 0x1234, 0, 0xabcd, 0x0b),
            traffic_class: (rng.below(255) + 1) as u8,
            flow_label: (rng.u32() & 0xf_ffff) | 1,
            hop_limit: (rng.below(255) + 1) as u8,
        }
    } else {
        IpRepr::V4 {
            src: Ipv4Addr::new(10, 99, 0, 12),
            dst: Ipv4Addr::new(192, 168, (rng.below(256)) as u8, 11),
            tos: (rng.below(255) + 1) as u8,
            id: rng.u32() as u16,
            dont_fragment: rng.below(4) != 0,
            ttl: (rng.below(255) + 1) as u8,
        }
    };
    let udp_checksum = if (k / 3) % 2 == 1 {
        UdpChecksum::Compute
    } else {
        UdpChecksum::Zero
    };
    let fr = FrameRepr {
        eth: Some(EthRepr {
            dst: [0x52, 0x54, 0x00, 0x99, 0x00, 0x11],
            src: [0x52, 0x54, 0x00, 0x99, 0x00, 0x12],
            vlans,
        }),
        ip,
        udp_src_port: 0xc000 | (rng.u32() as u16 & 0x3fff),
        udp_checksum,
    };
    let l3 = match (v6, udp_checksum) {
        (false, UdpChecksum::Zero) => "v4",
        (false, _) => "v4-csum",
        (true, UdpChecksum::Zero) => "v6",
        (true, _) => "v6-csum",
    };
    let name = format!("{l3}{l2}");
    (fr, name)
}

/// Where the parts of an emitted frame start.
struct Layout {
    /// Offset of the IP header.
    ip: usize,
    v6: bool,
    /// Offset of the UDP header.
    udp: usize,
    /// Offset of the BTH.
    bth: usize,
}

impl Layout {
    fn of(frame: &[u8]) -> Layout {
        let rf = RoceFrame::parse(LinkType::Ethernet, frame).expect("our frame parses");
        let ip = frame.len() - rf.ip_packet.len();
        let v6 = matches!(rf.ip, IpRepr::V6 { .. });
        let udp = ip + if v6 { 40 } else { 20 };
        Layout {
            ip,
            v6,
            udp,
            bth: udp + 8,
        }
    }

    /// Bytes the ICRC covers and does not mask, whose change leaves a frame
    /// both parsers still take as RoCE v2: IP addresses, IPv4 ID, UDP source
    /// port, the BTH except byte 4, and the rest of the transport packet up
    /// to the ICRC. (Lengths, versions and protocol numbers are covered too,
    /// but changing them makes the frame unreadable rather than wrong.)
    fn covered(&self, len: usize) -> (Vec<usize>, Vec<usize>) {
        let mut head = Vec::new();
        if self.v6 {
            head.extend(self.ip + 8..self.ip + 40);
        } else {
            head.extend([self.ip + 4, self.ip + 5]);
            head.extend(self.ip + 12..self.ip + 20);
        }
        head.extend([self.udp, self.udp + 1]);
        head.extend((self.bth..self.bth + 12).filter(|&i| i != self.bth + 4));
        let body = (self.bth + 12..len - 4).collect();
        (head, body)
    }

    /// Masked fields: (name, byte, bits that may change).
    fn masked(&self) -> Vec<(&'static str, usize, u8)> {
        let mut m = if self.v6 {
            vec![
                ("ipv6-tclass-hi", self.ip, 0x0f),
                ("ipv6-tclass-lo-flow", self.ip + 1, 0xff),
                ("ipv6-flow", self.ip + 2, 0xff),
                ("ipv6-flow-lo", self.ip + 3, 0xff),
                ("ipv6-hop-limit", self.ip + 7, 0xff),
            ]
        } else {
            vec![
                ("ipv4-tos", self.ip + 1, 0xff),
                ("ipv4-ttl", self.ip + 8, 0xff),
                ("ipv4-csum-hi", self.ip + 10, 0xff),
                ("ipv4-csum-lo", self.ip + 11, 0xff),
            ]
        };
        m.push(("udp-csum-hi", self.udp + 6, 0xff));
        m.push(("udp-csum-lo", self.udp + 7, 0xff));
        m.push(("bth-byte4", self.bth + 4, 0xff));
        m
    }
}

#[test]
fn rxe_core_frames_pass_scapy() {
    let Some(py) = python() else { return };
    let mut rng = Rng(0x5eed_5ca7);
    let lens: Vec<usize> = (0..=9).chain([1024]).collect();

    // (name, frame, expected ICRC verdict)
    let mut cases: Vec<(String, Vec<u8>, bool)> = Vec::new();
    let mut ours_failures = Vec::new();
    let mut k = 0usize;
    let mut n_base = 0;
    for info in opcode::ALL {
        let op = Opcode(info.code);
        let lens: &[usize] = if info.payload { &lens } else { &[0] };
        for &len in lens {
            let payload = rng.bytes(len);
            for v6 in [false, true] {
                k += 1;
                // The packet's number: its IPv4 and IPv6 frames rotate
                // through the same outer-header setups.
                let j = (k - 1) / 2;
                let pkt = packet_for(op, &payload, &mut rng);
                let (fr, l3name) = frame_for(v6, j, &mut rng);
                let mut frame = vec![0u8; fr.buffer_len(pkt.buffer_len())];
                fr.emit(&pkt, &mut frame)
                    .unwrap_or_else(|e| panic!("emit {op} len {len}: {e}"));
                let base = format!("{l3name}/{}/len{len}", info.name);

                // Our own view of what we built.
                let rf = RoceFrame::parse(LinkType::Ethernet, &frame).expect("parses");
                let back = rf
                    .packet()
                    .and_then(|p| PacketRepr::parse(&p).map(|r| r.payload.to_vec()));
                let outer = rf.repr();
                let same_outer =
                    (outer.eth, outer.ip, outer.udp_src_port) == (fr.eth, fr.ip, fr.udp_src_port);
                if !rf.icrc_ok() || !same_outer || back.as_deref() != Ok(&payload[..]) {
                    ours_failures.push(format!("{base}: our own frame does not read back"));
                }

                let layout = Layout::of(&frame);
                let (head, body) = layout.covered(frame.len());
                // One bit flipped in a covered header byte ...
                let at = head[rng.below(head.len())];
                let mut f = frame.clone();
                f[at] ^= 1 << rng.below(8);
                cases.push((format!("{base}~flip:hdr@{at}"), f, false));
                // ... and one in the rest of the packet (or the ICRC itself).
                let at = if body.is_empty() || k % 5 == 4 {
                    frame.len() - 1 - rng.below(4)
                } else {
                    body[rng.below(body.len())]
                };
                let mut f = frame.clone();
                f[at] ^= 1 << rng.below(8);
                cases.push((format!("{base}~flip:body@{at}"), f, false));
                // A masked field changed, old ICRC kept.
                let masked = layout.masked();
                let (what, at, bits) = masked[j % masked.len()];
                let mut f = frame.clone();
                let mut x = 0;
                while x == 0 {
                    x = rng.next() as u8 & bits;
                }
                f[at] ^= x;
                cases.push((format!("{base}~mask:{what}"), f, true));

                cases.push((base, frame, true));
                n_base += 1;
            }
        }
    }
    assert!(ours_failures.is_empty(), "{}", ours_failures.join("\n"));
    // Every outer-header setup and every masked field got used.
    let mut setups = std::collections::BTreeSet::new();
    let mut masks = std::collections::BTreeSet::new();
    for (name, _, _) in &cases {
        let (l3, rest) = name.split_once('/').expect("named setup/...");
        match rest.split_once("~mask:") {
            Some((_, what)) => masks.insert(format!("{}:{what}", &l3[..2])),
            None => setups.insert(l3.to_string()),
        };
    }
    assert_eq!(setups.len(), 12, "{setups:?}");
    assert_eq!(masks.len(), 7 + 8, "{masks:?}");
    eprintln!(
        "{n_base} frames built by rxe-core, {} with variants",
        cases.len()
    );

    let frames: Vec<(String, Vec<u8>)> = cases
        .iter()
        .map(|(n, f, _)| (n.clone(), f.clone()))
        .collect();
    let scapy = scapy_verify(py, &frames);

    let mut failures = Vec::new();
    for (name, frame, want_ok) in &cases {
        let s = &scapy[name];
        if let Some(e) = &s.error {
            failures.push(format!("{name}: scapy does not take it as RoCE v2: {e}"));
            continue;
        }
        match ours(frame) {
            Err(e) => failures.push(format!("{name}: rxe-core cannot parse it: {e}")),
            Ok((bth, ok)) => {
                if ok != *want_ok {
                    failures.push(format!("{name}: rxe-core says icrc_ok={ok}"));
                }
                if s.bth != Some(bth) {
                    failures.push(format!(
                        "{name}: (opcode, dest QP, PSN) rxe-core {bth:?}, scapy {:?}",
                        s.bth
                    ));
                }
            }
        }
        if s.icrc_ok != *want_ok {
            failures.push(format!(
                "{name}: scapy says icrc_ok={} (expected {want_ok})\n  frame {}",
                s.icrc_ok,
                to_hex(frame)
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} disagreements with scapy:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
