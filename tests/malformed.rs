//! Arbitrary and mutated bytes through every parser of rxe-core's wire
//! layer: nothing may panic, and everything that is not a well-formed RoCE v2
//! frame must come back as a typed [`Error`].
//!
//! * arbitrary bytes into `RoceFrame::parse` (every link type),
//!   `Packet::new_checked` + `PacketRepr::parse`, every header view and
//!   repr, and the ICRC functions;
//! * random transport bytes inside well-formed outer headers, so the packet
//!   checks see more than Ethernet/IP rejects, and valid frames with random
//!   bytes written over their outer headers, so every check of the
//!   Ethernet/VLAN/IP/UDP parsers is reached (both count what they reach);
//! * structured mutations of valid frames (built by `FrameRepr::emit` for
//!   every opcode, and real frames from `tests/data/pcaps`): truncation at
//!   every length, every pad count, every opcode byte, random bit flips;
//! * round trip: a random valid `PacketRepr` in a random `FrameRepr` emits,
//!   parses back to the same reprs, and carries a valid ICRC.
//!
//! Case counts are sized for well under a second in the test profile;
//! `PROPTEST_CASES=N` overrides them all for a longer run.

use proptest::collection::vec;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use rxe_core::psn::Psn;
use rxe_core::wire::{
    icrc, opcode, Aeth, AethRepr, AethSyndrome, AtomicAckEth, AtomicAckEthRepr, AtomicEth,
    AtomicEthRepr, Bth, BthRepr, Deth, DethRepr, Error, EthRepr, ExtHeaders, Feth, FethRepr,
    FrameRepr, Header, Ieth, ImmDt, IpRepr, LinkType, Opcode, Packet, PacketRepr, Rdeth, RdethRepr,
    Reth, RethRepr, RoceFrame, UdpChecksum, VlanTag, ICRC_LEN,
};
use std::collections::BTreeSet;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};

const LINKS: [LinkType; 4] = [
    LinkType::Ethernet,
    LinkType::LinuxSll,
    LinkType::LinuxSll2,
    LinkType::RawIp,
];

/// `cases` cases, unless `PROPTEST_CASES` asks for another number (for a
/// longer run: `PROPTEST_CASES=1000000 cargo test --test malformed`).
fn config(cases: u32) -> Config {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(cases);
    Config {
        cases,
        // No proptest-regressions/ files in the tree; a failure prints the
        // minimal input instead.
        failure_persistence: None,
        ..Config::default()
    }
}

// ---------------------------------------------------------------------------
// What every parser result must satisfy
// ---------------------------------------------------------------------------

/// An error from a parser: printable, and one of the parse-side kinds.
fn check_error(e: &Error) {
    assert!(!e.to_string().is_empty());
    match *e {
        Error::Truncated { need, have, .. } => {
            assert!(have < need, "Truncated with have {have} >= need {need}")
        }
        Error::BufferTooSmall { .. } | Error::HeadersDisagree { .. } => {
            panic!("emit-side error from a parser: {e:?}")
        }
        _ => {}
    }
}

/// Everything a checked packet offers, with its invariants; then its repr
/// must emit and check again to the same repr.
fn check_packet(p: &Packet<&[u8]>) {
    let b = p.as_bytes();
    let info = p.info();
    assert_eq!(Some(info), p.bth().opcode().info());
    assert_eq!(p.payload_offset(), info.header_len());
    assert_eq!(usize::from(p.bth().pad_count()), p.pad().len());
    assert_eq!(
        p.payload_offset() + p.payload().len() + p.pad().len() + ICRC_LEN,
        b.len()
    );
    assert_eq!((p.payload().len() + p.pad().len()) % 4, 0);
    assert!(info.payload || p.payload().is_empty());
    assert_eq!(p.icrc(), icrc::carried(b).expect("4 bytes at least"));
    let h = info.headers;
    assert_eq!(p.rdeth().is_some(), h.contains(ExtHeaders::RDETH));
    assert_eq!(p.deth().is_some(), h.contains(ExtHeaders::DETH));
    assert_eq!(p.feth().is_some(), h.contains(ExtHeaders::FETH));
    assert_eq!(p.reth().is_some(), h.contains(ExtHeaders::RETH));
    assert_eq!(p.atomic_eth().is_some(), h.contains(ExtHeaders::ATOMIC_ETH));
    assert_eq!(p.aeth().is_some(), h.contains(ExtHeaders::AETH));
    assert_eq!(
        p.atomic_ack_eth().is_some(),
        h.contains(ExtHeaders::ATOMIC_ACK_ETH)
    );
    assert_eq!(p.immdt().is_some(), h.contains(ExtHeaders::IMMDT));
    assert_eq!(p.ieth().is_some(), h.contains(ExtHeaders::IETH));

    let repr = PacketRepr::parse(p).expect("a checked packet parses");
    assert!(!repr.to_string().is_empty());
    assert_eq!(repr.check().map(|i| i.code), Ok(info.code));
    assert_eq!(repr.payload, p.payload());
    assert_eq!(repr.pad_count(), p.bth().pad_count());
    assert_eq!(repr.buffer_len(), b.len());
    let mut buf = vec![0u8; b.len()];
    assert_eq!(repr.emit(&mut buf), Ok(b.len()));
    let again = Packet::new_checked(&buf[..]).expect("an emitted packet checks");
    let repr2 = PacketRepr::parse(&again).expect("and parses");
    assert_eq!(repr2, repr);
}

/// Parses a frame all the way, checking every invariant on the way.
/// Returns the first error.
fn check_frame(link: LinkType, data: &[u8]) -> Result<(), Error> {
    let rf = RoceFrame::parse(link, data).inspect_err(check_error)?;
    assert_eq!(rf.udp_dst_port, 4791);
    assert!(rf.ip_packet.len() >= rf.transport.len() + 8);
    assert!(rf.ip_packet.ends_with(rf.transport));
    assert!(data.len() >= rf.ip_packet.len());
    let computed = rf.computed_icrc();
    if let Err(e) = &computed {
        check_error(e);
    }
    assert_eq!(
        rf.icrc_ok(),
        computed.ok().is_some() && computed.ok() == icrc::carried(rf.ip_packet)
    );
    let fr = rf.repr();
    assert_eq!(fr.eth.is_some(), link == LinkType::Ethernet);
    let p = rf.packet().inspect_err(check_error)?;
    assert_eq!(p.as_bytes(), rf.transport);
    check_packet(&p);
    let repr = PacketRepr::parse(&p).expect("a checked packet parses");

    // Re-emit: the same reprs come back, with a valid ICRC.
    let mut buf = vec![0u8; fr.buffer_len(repr.buffer_len())];
    assert_eq!(fr.emit(&repr, &mut buf), Ok(buf.len()));
    let link2 = if fr.eth.is_some() {
        LinkType::Ethernet
    } else {
        LinkType::RawIp
    };
    let rf2 = RoceFrame::parse(link2, &buf).expect("an emitted frame parses");
    assert!(rf2.icrc_ok());
    assert_eq!(rf2.repr(), fr);
    assert_eq!(
        PacketRepr::parse(&rf2.packet().expect("checks")).expect("parses"),
        repr
    );
    Ok(())
}

macro_rules! check_view {
    ($d:expr, $view:ident, $repr:ident, $header:expr) => {{
        let d: &[u8] = $d;
        let len = $view::<&[u8]>::LEN;
        match $view::new_checked(d) {
            Ok(v) => {
                assert!(d.len() >= len);
                if let Ok(r) = $repr::parse(&v) {
                    let mut out = vec![0u8; r.buffer_len()];
                    r.emit(&mut $view::new_unchecked(&mut out[..]));
                    assert_eq!($repr::parse(&$view::new_checked(&out[..]).unwrap()), Ok(r));
                }
            }
            Err(e) => {
                assert!(d.len() < len);
                assert_eq!(
                    e,
                    Error::Truncated {
                        header: $header,
                        need: len,
                        have: d.len()
                    }
                );
                // The repr checks the length itself, even behind an unchecked view.
                assert_eq!($repr::parse(&$view::new_unchecked(d)), Err(e));
            }
        }
    }};
}

fn check_headers(d: &[u8]) {
    check_view!(d, Bth, BthRepr, Header::Bth);
    check_view!(d, Rdeth, RdethRepr, Header::Rdeth);
    check_view!(d, Deth, DethRepr, Header::Deth);
    check_view!(d, Feth, FethRepr, Header::Feth);
    check_view!(d, Reth, RethRepr, Header::Reth);
    check_view!(d, AtomicEth, AtomicEthRepr, Header::AtomicEth);
    check_view!(d, Aeth, AethRepr, Header::Aeth);
    check_view!(d, AtomicAckEth, AtomicAckEthRepr, Header::AtomicAckEth);
    match ImmDt::new_checked(d) {
        Ok(v) => assert_eq!(v.value().to_be_bytes(), d[..4]),
        Err(e) => check_error(&e),
    }
    match Ieth::new_checked(d) {
        Ok(v) => assert_eq!(v.rkey().to_be_bytes(), d[..4]),
        Err(e) => check_error(&e),
    }
}

fn check_icrc(d: &[u8], split_a: usize, split_b: usize) {
    let computed = icrc::compute(d);
    let verified = icrc::verify(d);
    match (computed, verified) {
        (Ok(c), Ok(v)) => assert_eq!(v, Some(c) == icrc::carried(d)),
        (Err(e1), Err(e2)) => {
            assert_eq!(e1, e2);
            check_error(&e1);
        }
        other => panic!("compute and verify disagree: {other:?}"),
    }
    let mut m = d.to_vec();
    match icrc::fill(&mut m) {
        Ok(c) => {
            assert_eq!(Ok(c), computed);
            assert_eq!(icrc::verify(&m), Ok(true));
            assert_eq!(m[..d.len() - 4], d[..d.len() - 4]);
        }
        Err(e) => assert_eq!(Err(e), computed),
    }
    // compute_parts on an arbitrary split. (Its Truncated errors may have
    // have > need when a part is too long, so only printability is checked.)
    let a = split_a % (d.len() + 1);
    let b = a + split_b % (d.len() - a + 1);
    if let Err(e) = icrc::compute_parts(&d[..a], &d[a..b], &d[b..]) {
        assert!(!e.to_string().is_empty());
    }
}

// ---------------------------------------------------------------------------
// Valid frames: built by rxe-core, and real ones from the captures
// ---------------------------------------------------------------------------

/// A valid frame to mutate.
#[derive(Debug, Clone)]
struct Sample {
    name: String,
    link: LinkType,
    bytes: Vec<u8>,
}

impl Sample {
    /// (offset of the IP header, its length in the frame, offset of the BTH).
    fn layout(&self) -> (usize, usize, usize) {
        let rf = RoceFrame::parse(self.link, &self.bytes).expect("sample parses");
        let ip = rf.ip_packet.as_ptr() as usize - self.bytes.as_ptr() as usize;
        let bth = rf.transport.as_ptr() as usize - self.bytes.as_ptr() as usize;
        (ip, rf.ip_packet.len(), bth)
    }
}

fn pcap_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("data")
        .join("pcaps")
}

/// The frames of a classic little-endian pcap file with Ethernet link type.
fn read_pcap(path: &std::path::Path) -> Vec<Vec<u8>> {
    let d = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let u32_at = |at: usize| u32::from_le_bytes(d[at..at + 4].try_into().unwrap()) as usize;
    assert!(d.len() >= 24, "{}: short pcap", path.display());
    assert!(
        matches!(u32_at(0), 0xa1b2_c3d4 | 0xa1b2_3c4d),
        "{}: not a little-endian pcap file",
        path.display()
    );
    assert_eq!(
        u32_at(20),
        1,
        "{}: link type is not Ethernet",
        path.display()
    );
    let mut frames = Vec::new();
    let mut off = 24;
    while off + 16 <= d.len() {
        let incl = u32_at(off + 8);
        let end = off + 16 + incl;
        assert!(end <= d.len(), "{}: truncated record", path.display());
        frames.push(d[off + 16..end].to_vec());
        off = end;
    }
    frames
}

/// From every capture, its first RoCE frame of each opcode.
fn capture_samples() -> Vec<Sample> {
    let mut paths: Vec<_> = std::fs::read_dir(pcap_dir())
        .expect("tests/data/pcaps")
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "pcap"))
        .collect();
    paths.sort();
    assert!(!paths.is_empty(), "no captures in {}", pcap_dir().display());
    let mut out = Vec::new();
    for path in paths {
        let file = path.file_name().unwrap().to_string_lossy().into_owned();
        let mut seen = std::collections::HashSet::new();
        for (i, frame) in read_pcap(&path).into_iter().enumerate() {
            let Ok(rf) = RoceFrame::parse(LinkType::Ethernet, &frame) else {
                continue;
            };
            let Ok(p) = rf.packet() else { continue };
            if seen.insert(p.bth().opcode()) {
                out.push(Sample {
                    name: format!("{file}#{}", i + 1),
                    link: LinkType::Ethernet,
                    bytes: frame.clone(),
                });
            }
        }
    }
    out
}

fn bth(op: Opcode, n: u32) -> BthRepr {
    BthRepr {
        opcode: op,
        solicited: n % 2 == 1,
        mig_req: n % 3 == 1,
        pad_count: 0,
        pkey: 0xffff,
        fecn: n % 5 == 1,
        becn: n % 7 == 1,
        dest_qp: 0x12_3400 + n,
        ack_req: n % 2 == 1,
        psn: Psn::new(0xff_fff0 + n),
    }
}

/// A packet of `op` with every header it needs.
fn full_packet(op: Opcode, payload: &[u8], n: u32) -> PacketRepr<'_> {
    let h = op.info().expect("known").headers;
    let mut p = PacketRepr::new(bth(op, n));
    let some = |x: ExtHeaders| h.contains(x);
    p.rdeth = some(ExtHeaders::RDETH).then_some(RdethRepr { ee_context: 0xabc });
    p.deth = some(ExtHeaders::DETH).then_some(DethRepr {
        qkey: 0x1111_1111,
        src_qp: 0x22 + n,
    });
    p.feth = some(ExtHeaders::FETH).then_some(FethRepr {
        selectivity: 1,
        placement: 3,
    });
    p.reth = some(ExtHeaders::RETH).then_some(RethRepr {
        va: 0x7f00_dead_b000,
        rkey: 0x1234_abcd,
        dma_len: payload.len() as u32,
    });
    p.atomic_eth = some(ExtHeaders::ATOMIC_ETH).then_some(AtomicEthRepr {
        va: 0x7f00_dead_d008,
        rkey: 0x0bad_f00d,
        swap_add: 0x1111_2222_3333_4444,
        compare: 0x5555_6666_7777_8888,
    });
    p.aeth = some(ExtHeaders::AETH).then_some(AethRepr {
        syndrome: AethSyndrome::from_u8([0x1f, 0x2e, 0x60, 0x63][n as usize % 4]),
        msn: 0x345 + n,
    });
    p.atomic_ack_eth = some(ExtHeaders::ATOMIC_ACK_ETH).then_some(AtomicAckEthRepr {
        orig: 0x5555_6666_7777_8888,
    });
    p.immdt = some(ExtHeaders::IMMDT).then_some(0xc0ff_ee00 + n);
    p.ieth = some(ExtHeaders::IETH).then_some(0x00ab_cd12);
    p.payload = payload;
    p
}

fn outer(v6: bool, vlans: usize, eth: bool) -> FrameRepr {
    let tag = |tpid, vid| VlanTag {
        tpid,
        pcp: 3,
        dei: false,
        vid,
    };
    FrameRepr {
        eth: eth.then_some(EthRepr {
            dst: [0x52, 0x54, 0, 0x99, 0, 0x11],
            src: [0x52, 0x54, 0, 0x99, 0, 0x12],
            vlans: match vlans {
                0 => [None, None],
                1 => [Some(tag(0x8100, 100)), None],
                _ => [Some(tag(0x88a8, 7)), Some(tag(0x8100, 100))],
            },
        }),
        ip: if v6 {
            IpRepr::V6 {
                src: Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 2),
                dst: Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 3),
                traffic_class: 0x6a,
                flow_label: 0x5a5a5,
                hop_limit: 64,
            }
        } else {
            IpRepr::V4 {
                src: Ipv4Addr::new(10, 99, 0, 12),
                dst: Ipv4Addr::new(10, 99, 0, 11),
                tos: 0x6a,
                id: 0x1d2c,
                dont_fragment: true,
                ttl: 64,
            }
        },
        udp_src_port: 0xc123,
        udp_checksum: if vlans == 1 {
            UdpChecksum::Compute
        } else {
            UdpChecksum::Zero
        },
    }
}

/// Every opcode, with payload lengths 0, 1, 5 and 64 where allowed, each in
/// one of six outer-header setups (IPv4/IPv6, raw IP / Ethernet / VLAN /
/// QinQ), rotating.
fn built_samples() -> Vec<Sample> {
    let payload: Vec<u8> = (0..64u8).map(|i| i.wrapping_mul(37) ^ 0x5a).collect();
    let mut out = Vec::new();
    let mut n = 0u32;
    for info in opcode::ALL {
        let lens: &[usize] = if info.payload { &[0, 1, 5, 64] } else { &[0] };
        for &len in lens {
            n += 1;
            let (v6, vlans, eth) = SETUPS[n as usize % SETUPS.len()];
            let fr = outer(v6, vlans, eth);
            let pkt = full_packet(Opcode(info.code), &payload[..len], n);
            let mut bytes = vec![0u8; fr.buffer_len(pkt.buffer_len())];
            fr.emit(&pkt, &mut bytes).expect("emits");
            out.push(Sample {
                name: format!("{}/len{len}/v{}", info.name, if v6 { 6 } else { 4 }),
                link: if eth {
                    LinkType::Ethernet
                } else {
                    LinkType::RawIp
                },
                bytes,
            });
        }
    }
    out
}

fn samples() -> &'static [Sample] {
    static SAMPLES: OnceLock<Vec<Sample>> = OnceLock::new();
    SAMPLES.get_or_init(|| {
        let mut s = built_samples();
        let from_captures = capture_samples();
        assert!(
            from_captures.len() >= 20,
            "only {} capture samples",
            from_captures.len()
        );
        eprintln!(
            "{} frames built by rxe-core, {} from the captures",
            s.len(),
            from_captures.len()
        );
        s.extend(from_captures);
        for x in &s {
            check_frame(x.link, &x.bytes).unwrap_or_else(|e| panic!("{}: {e}", x.name));
            assert!(
                RoceFrame::parse(x.link, &x.bytes).unwrap().icrc_ok(),
                "{}",
                x.name
            );
        }
        s
    })
}

// ---------------------------------------------------------------------------
// Structured mutations of valid frames
// ---------------------------------------------------------------------------

#[test]
fn samples_cover_every_opcode() {
    let mut ops: Vec<u8> = samples()
        .iter()
        .map(|s| {
            let rf = RoceFrame::parse(s.link, &s.bytes).unwrap();
            rf.packet().unwrap().bth().opcode().0
        })
        .collect();
    ops.sort_unstable();
    ops.dedup();
    assert_eq!(ops.len(), opcode::ALL.len());
}

#[test]
fn truncation_at_every_length_is_an_error() {
    let mut cuts = 0;
    for s in samples() {
        let (ip, ip_len, _) = s.layout();
        let end = ip + ip_len;
        for cut in 0..s.bytes.len() {
            let r = check_frame(s.link, &s.bytes[..cut]);
            if cut < end {
                assert!(r.is_err(), "{} cut at {cut} of {end} parses", s.name);
            } else {
                // Only link-layer padding was cut.
                assert_eq!(r, Ok(()), "{} cut at {cut}", s.name);
            }
            cuts += 1;
        }
    }
    assert!(cuts > 10_000);
}

#[test]
fn truncated_transport_packets() {
    for s in samples() {
        let rf = RoceFrame::parse(s.link, &s.bytes).unwrap();
        let t = rf.transport;
        let p = rf.packet().unwrap();
        let info = p.info();
        let pad = usize::from(p.bth().pad_count());
        let hdr = info.header_len();
        for cut in 0..t.len() {
            let r = Packet::new_checked(&t[..cut]);
            // Header lengths are multiples of 4, so only a cut by a multiple
            // of 4 keeps payload + pad aligned; then the pad must still fit.
            let ok = cut >= hdr + ICRC_LEN
                && (t.len() - cut) & 3 == 0
                && info.payload
                && pad <= cut - hdr - ICRC_LEN;
            match r {
                Ok(p) => {
                    assert!(ok, "{} transport cut at {cut} checks", s.name);
                    check_packet(&p);
                }
                Err(e) => {
                    assert!(!ok, "{} transport cut at {cut}: {e}", s.name);
                    check_error(&e);
                }
            }
        }
    }
}

#[test]
fn every_pad_count() {
    for s in samples() {
        let (_, _, bth_at) = s.layout();
        let p0 = {
            let rf = RoceFrame::parse(s.link, &s.bytes).unwrap();
            let p = rf.packet().unwrap();
            (p.bth().pad_count(), p.payload().len() + p.pad().len())
        };
        let (old_pad, available) = p0;
        for pad in 0..4u8 {
            let mut b = s.bytes.clone();
            b[bth_at + 1] = (b[bth_at + 1] & !0x30) | (pad << 4);
            let rf = RoceFrame::parse(s.link, &b).expect("outer headers untouched");
            // The pad count is covered by the ICRC.
            assert_eq!(rf.icrc_ok(), pad == old_pad, "{} pad {pad}", s.name);
            match rf.packet() {
                Ok(p) => {
                    assert!(usize::from(pad) <= available, "{} pad {pad}", s.name);
                    assert_eq!(p.payload().len(), available - usize::from(pad));
                    check_packet(&p);
                }
                Err(e) => {
                    assert!(usize::from(pad) > available, "{} pad {pad}: {e}", s.name);
                    assert_eq!(e, Error::PadTooLarge { pad, available });
                }
            }
            check_frame(s.link, &b).ok();
        }
    }
}

#[test]
fn every_opcode_byte() {
    for s in samples() {
        let (_, _, bth_at) = s.layout();
        let old = s.bytes[bth_at];
        for code in 0..=255u8 {
            let mut b = s.bytes.clone();
            b[bth_at] = code;
            let rf = RoceFrame::parse(s.link, &b).expect("outer headers untouched");
            assert_eq!(rf.icrc_ok(), code == old, "{} opcode {code:#04x}", s.name);
            let t = rf.transport;
            let r = rf.packet();
            let Some(info) = Opcode(code).info() else {
                assert_eq!(r.unwrap_err(), Error::UnknownOpcode(code));
                continue;
            };
            // The same rules Packet::new_checked applies, from the table.
            let hdr = info.header_len();
            let pad = usize::from(b[bth_at + 1] >> 4 & 3);
            let ok = t.len() >= hdr + ICRC_LEN && {
                let available = t.len() - hdr - ICRC_LEN;
                pad <= available && available & 3 == 0 && (info.payload || available == 0)
            };
            match r {
                Ok(p) => {
                    assert!(ok, "{} as {}: checks", s.name, info.name);
                    check_packet(&p);
                }
                Err(e) => {
                    assert!(!ok, "{} as {}: {e}", s.name, info.name);
                    check_error(&e);
                }
            }
            check_frame(s.link, &b).ok();
        }
    }
}

/// Bytes of the IP packet the ICRC masks (offsets from the IP header),
/// as (offset, bits).
fn masked(ip_packet: &[u8]) -> Vec<(usize, u8)> {
    if ip_packet[0] >> 4 == 6 {
        let bth = 48;
        vec![
            (0, 0x0f),
            (1, 0xff),
            (2, 0xff),
            (3, 0xff),
            (7, 0xff),
            (46, 0xff),
            (47, 0xff),
            (bth + 4, 0xff),
        ]
    } else {
        let udp = usize::from(ip_packet[0] & 0xf) * 4;
        vec![
            (1, 0xff),
            (8, 0xff),
            (10, 0xff),
            (11, 0xff),
            (udp + 6, 0xff),
            (udp + 7, 0xff),
            (udp + 8 + 4, 0xff),
        ]
    }
}

proptest! {
    #![proptest_config(config(50_000))]

    /// One flipped bit: no panic; inside the IP packet, outside the masked
    /// fields, the frame is rejected or its ICRC fails; in a masked field or
    /// a MAC address, nothing changes.
    #[test]
    fn one_bit_flip(which in any::<prop::sample::Index>(), at in any::<prop::sample::Index>(), bit in 0..8u8) {
        let s = which.get(samples());
        let (ip, ip_len, _) = s.layout();
        let at = at.index(s.bytes.len());
        let mut b = s.bytes.clone();
        b[at] ^= 1 << bit;
        let r = check_frame(s.link, &b);
        let parsed = RoceFrame::parse(s.link, &b);
        if (ip..ip + ip_len).contains(&at) {
            let off = at - ip;
            let is_masked = masked(&s.bytes[ip..ip + ip_len])
                .iter()
                .any(|&(o, bits)| o == off && bits & (1 << bit) != 0);
            if is_masked {
                prop_assert_eq!(r, Ok(()));
                prop_assert!(parsed.unwrap().icrc_ok());
            } else {
                prop_assert!(!parsed.is_ok_and(|rf| rf.icrc_ok()), "{} byte {} bit {}", s.name, at, bit);
            }
        } else if s.link == LinkType::Ethernet && at < 12 {
            prop_assert_eq!(r, Ok(()));
            prop_assert!(parsed.unwrap().icrc_ok());
        }
    }
}

proptest! {
    #![proptest_config(config(20_000))]

    /// Several random bits flipped or bytes overwritten anywhere: no panic,
    /// and typed errors.
    #[test]
    fn random_damage(
        which in any::<prop::sample::Index>(),
        hits in vec((any::<prop::sample::Index>(), any::<u8>(), any::<bool>()), 1..12),
    ) {
        let s = which.get(samples());
        let mut b = s.bytes.clone();
        for (at, x, overwrite) in hits {
            let at = at.index(b.len());
            if overwrite { b[at] = x } else { b[at] ^= x | 1 }
        }
        for link in LINKS {
            let _ = check_frame(link, &b);
        }
    }
}

// ---------------------------------------------------------------------------
// Arbitrary bytes
// ---------------------------------------------------------------------------

proptest! {
    #![proptest_config(config(50_000))]

    #[test]
    fn arbitrary_bytes(data in vec(any::<u8>(), 0..160), a in any::<usize>(), b in any::<usize>()) {
        for link in LINKS {
            let _ = check_frame(link, &data);
        }
        match Packet::new_checked(&data[..]) {
            Ok(p) => check_packet(&p),
            Err(e) => check_error(&e),
        }
        check_headers(&data);
        check_icrc(&data, a, b);
    }
}

/// The six outer-header setups of the built samples: (IPv6, VLAN tags, Ethernet).
const SETUPS: [(bool, usize, bool); 6] = [
    (false, 0, false),
    (true, 0, true),
    (false, 1, true),
    (true, 2, true),
    (true, 0, false),
    (false, 2, true),
];

/// Well-formed outer headers of `setup` around arbitrary transport bytes,
/// with a valid ICRC in their last four bytes if `fill_icrc` (and there is
/// room for one). Returns the frame and its link type.
fn wrap(setup: usize, transport: &[u8], fill_icrc: bool) -> (Vec<u8>, LinkType) {
    let (v6, vlans, eth) = SETUPS[setup % SETUPS.len()];
    let fr = outer(v6, vlans, eth);
    let pkt = full_packet(Opcode::RC_SEND_ONLY, &[], 1);
    let mut frame = vec![0u8; fr.buffer_len(pkt.buffer_len())];
    fr.emit(&pkt, &mut frame).expect("emits");
    frame.truncate(frame.len() - pkt.buffer_len());
    let udp_at = frame.len() - 8;
    let ip_at = udp_at - if v6 { 40 } else { 20 };
    frame.extend_from_slice(transport);
    let udp_len = (8 + transport.len()) as u16;
    frame[udp_at + 4..udp_at + 6].copy_from_slice(&udp_len.to_be_bytes());
    if v6 {
        frame[ip_at + 4..ip_at + 6].copy_from_slice(&udp_len.to_be_bytes());
    } else {
        // (The IPv4 header checksum goes stale; nothing checks it.)
        frame[ip_at + 2..ip_at + 4].copy_from_slice(&(udp_len + 20).to_be_bytes());
    }
    if fill_icrc && transport.len() >= 16 {
        icrc::fill(&mut frame[ip_at..]).expect("room for BTH and ICRC");
    }
    let link = if eth {
        LinkType::Ethernet
    } else {
        LinkType::RawIp
    };
    (frame, link)
}

/// Steers random transport bytes towards known opcodes and transport
/// version 0, so the packet checks get past their first two gates.
fn steer(transport: &mut [u8], known: Option<u8>, tver0: bool) {
    if let (Some(code), Some(b)) = (known, transport.first_mut()) {
        *b = code;
    }
    if let (true, Some(b)) = (tver0, transport.get_mut(1)) {
        *b &= 0xf0;
    }
}

type Kinds = Mutex<BTreeSet<String>>;

/// Records the kind of an error (its variant name) in `kinds`.
fn note(kinds: &Kinds, r: &Result<(), Error>) {
    if let Err(e) = r {
        let name = format!("{e:?}");
        let kind = name.split([' ', '(', '{']).next().unwrap_or("").to_string();
        kinds.lock().unwrap().insert(kind);
    }
}

fn opt_known() -> impl Strategy<Value = Option<u8>> {
    prop::option::of(any::<prop::sample::Index>().prop_map(|i| i.get(opcode::ALL).code))
}

/// Random transport bytes inside well-formed outer headers: everything the
/// packet checks can say, and a few thousand packets that pass.
#[test]
fn random_transport_in_valid_frame() {
    let strategy = (
        0..SETUPS.len(),
        vec(any::<u8>(), 0..200),
        opt_known(),
        any::<bool>(),
        any::<bool>(),
    );
    let checked = AtomicUsize::new(0);
    let kinds = Kinds::default();
    let cases = config(50_000).cases;
    TestRunner::new(config(50_000))
        .run(&strategy, |(setup, mut transport, known, tver0, fill)| {
            steer(&mut transport, known, tver0);
            let (frame, link) = wrap(setup, &transport, fill);
            let rf = RoceFrame::parse(link, &frame)
                .map_err(|e| TestCaseError::fail(format!("outer headers are valid: {e}")))?;
            let filled = fill && transport.len() >= 16;
            let keep = transport.len() - if filled { 4 } else { 0 };
            prop_assert_eq!(rf.transport.len(), transport.len());
            prop_assert_eq!(&rf.transport[..keep], &transport[..keep]);
            if filled {
                prop_assert!(rf.icrc_ok());
            }
            let r = check_frame(link, &frame);
            note(&kinds, &r);
            if r.is_ok() {
                checked.fetch_add(1, Ordering::Relaxed);
            }
            Ok(())
        })
        .unwrap_or_else(|e| panic!("{e}"));
    let checked = checked.into_inner();
    let kinds = kinds.into_inner().unwrap();
    eprintln!("random transport: {checked} of {cases} packets check; errors seen: {kinds:?}");
    if cases < 10_000 {
        return;
    }
    for k in [
        "Truncated",
        "UnknownOpcode",
        "BadTransportVersion",
        "PadTooLarge",
        "Misaligned",
        "UnexpectedPayload",
    ] {
        assert!(kinds.contains(k), "no {k} error in {cases} cases");
    }
    assert!(
        checked * 50 >= cases as usize,
        "only {checked} packets check"
    );
}

/// A random byte, half the time one that means something in an outer
/// header (ethertype and TPID bytes, IP version/IHL, UDP, port 4791).
fn interesting_byte() -> impl Strategy<Value = u8> {
    prop_oneof![
        any::<u8>(),
        prop::sample::select(vec![
            0x00, 0x08, 0x81, 0x88, 0xa8, 0x86, 0xdd, 0x41, 0x44, 0x45, 0x46, 0x4f, 0x60, 0x11,
            0x12, 0xb7, 0xff,
        ]),
    ]
}

/// Valid frames with one to three random bytes written over the link, IP
/// and UDP headers or the start of the BTH, through every link type: every
/// check of the outer-header parsers is reached.
#[test]
fn damaged_outer_headers() {
    let strategy = (
        0..SETUPS.len(),
        vec(any::<u8>(), 0..80),
        opt_known(),
        vec((any::<prop::sample::Index>(), interesting_byte()), 1..4),
        (any::<usize>(), any::<usize>()),
    );
    let parsed = AtomicUsize::new(0);
    let kinds = Kinds::default();
    let cases = config(50_000).cases;
    TestRunner::new(config(50_000))
        .run(&strategy, |(setup, mut transport, known, hits, (a, b))| {
            steer(&mut transport, known, true);
            let (mut frame, link) = wrap(setup, &transport, true);
            let head = frame.len() - transport.len() + transport.len().min(4);
            for (at, x) in hits {
                frame[at.index(head)] = x;
            }
            for l in LINKS {
                let r = check_frame(l, &frame);
                if l == link {
                    note(&kinds, &r);
                    if RoceFrame::parse(l, &frame).is_ok() {
                        parsed.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
            let ip_at = frame.len() - transport.len() - 8 - if SETUPS[setup].0 { 40 } else { 20 };
            check_icrc(&frame[ip_at..], a, b);
            Ok(())
        })
        .unwrap_or_else(|e| panic!("{e}"));
    let parsed = parsed.into_inner();
    let kinds = kinds.into_inner().unwrap();
    eprintln!("damaged outer headers: {parsed} of {cases} frames parse; errors seen: {kinds:?}");
    if cases < 10_000 {
        return;
    }
    for k in [
        "Truncated",
        "BadIpVersion",
        "BadIpv4HeaderLength",
        "LengthMismatch",
        "NotRoce",
        "TooManyVlanTags",
    ] {
        assert!(kinds.contains(k), "no {k} error in {cases} cases");
    }
    assert!(parsed * 10 >= cases as usize, "only {parsed} frames parse");
}

// ---------------------------------------------------------------------------
// Round trip of random valid packets
// ---------------------------------------------------------------------------

/// The headers and payload a random packet may carry; `repr` keeps only the
/// ones its opcode calls for.
#[derive(Debug, Clone)]
struct Spec {
    bth: BthRepr,
    rdeth: RdethRepr,
    deth: DethRepr,
    feth: FethRepr,
    reth: RethRepr,
    atomic_eth: AtomicEthRepr,
    aeth: AethRepr,
    atomic_ack_eth: AtomicAckEthRepr,
    immdt: u32,
    ieth: u32,
    payload: Vec<u8>,
}

impl Spec {
    fn repr(&self) -> PacketRepr<'_> {
        let info = self.bth.opcode.info().expect("known");
        let h = info.headers;
        let mut p = PacketRepr::new(self.bth);
        p.rdeth = h.contains(ExtHeaders::RDETH).then_some(self.rdeth);
        p.deth = h.contains(ExtHeaders::DETH).then_some(self.deth);
        p.feth = h.contains(ExtHeaders::FETH).then_some(self.feth);
        p.reth = h.contains(ExtHeaders::RETH).then_some(self.reth);
        p.atomic_eth = h
            .contains(ExtHeaders::ATOMIC_ETH)
            .then_some(self.atomic_eth);
        p.aeth = h.contains(ExtHeaders::AETH).then_some(self.aeth);
        p.atomic_ack_eth = h
            .contains(ExtHeaders::ATOMIC_ACK_ETH)
            .then_some(self.atomic_ack_eth);
        p.immdt = h.contains(ExtHeaders::IMMDT).then_some(self.immdt);
        p.ieth = h.contains(ExtHeaders::IETH).then_some(self.ieth);
        if info.payload {
            p.payload = &self.payload;
        }
        // What parsing gives back: the pad count the payload calls for.
        p.bth.pad_count = p.pad_count();
        p
    }
}

fn arb_bth() -> impl Strategy<Value = BthRepr> {
    (
        any::<prop::sample::Index>(),
        any::<[bool; 5]>(),
        any::<u16>(),
        0..1u32 << 24,
        any::<u32>(),
    )
        .prop_map(|(op, f, pkey, dest_qp, psn)| BthRepr {
            opcode: Opcode(op.get(opcode::ALL).code),
            solicited: f[0],
            mig_req: f[1],
            pad_count: 0,
            pkey,
            fecn: f[2],
            becn: f[3],
            dest_qp,
            ack_req: f[4],
            psn: Psn::new(psn),
        })
}

fn arb_spec() -> impl Strategy<Value = Spec> {
    let headers = (
        (0..1u32 << 24).prop_map(|ee_context| RdethRepr { ee_context }),
        (any::<u32>(), 0..1u32 << 24).prop_map(|(qkey, src_qp)| DethRepr { qkey, src_qp }),
        (0..4u8, 0..16u8).prop_map(|(selectivity, placement)| FethRepr {
            selectivity,
            placement,
        }),
        (any::<u64>(), any::<u32>(), any::<u32>()).prop_map(|(va, rkey, dma_len)| RethRepr {
            va,
            rkey,
            dma_len,
        }),
        (any::<[u64; 3]>(), any::<u32>()).prop_map(|(x, rkey)| AtomicEthRepr {
            va: x[0],
            rkey,
            swap_add: x[1],
            compare: x[2],
        }),
        (any::<u8>(), 0..1u32 << 24).prop_map(|(s, msn)| AethRepr {
            syndrome: AethSyndrome::from_u8(s),
            msn,
        }),
        any::<u64>().prop_map(|orig| AtomicAckEthRepr { orig }),
        any::<[u32; 2]>(),
    );
    let payload = prop_oneof![
        4 => vec(any::<u8>(), 0..16),
        2 => vec(any::<u8>(), 0..300),
        1 => vec(any::<u8>(), 1000..4200),
    ];
    (arb_bth(), headers, payload).prop_map(
        |(bth, (rdeth, deth, feth, reth, atomic_eth, aeth, atomic_ack_eth, imm), payload)| Spec {
            bth,
            rdeth,
            deth,
            feth,
            reth,
            atomic_eth,
            aeth,
            atomic_ack_eth,
            immdt: imm[0],
            ieth: imm[1],
            payload,
        },
    )
}

fn arb_vlan() -> impl Strategy<Value = VlanTag> {
    (
        prop_oneof![Just(0x8100u16), Just(0x88a8)],
        0..8u8,
        any::<bool>(),
        0..4096u16,
    )
        .prop_map(|(tpid, pcp, dei, vid)| VlanTag {
            tpid,
            pcp,
            dei,
            vid,
        })
}

fn arb_frame() -> impl Strategy<Value = FrameRepr> {
    let eth = prop::option::of(
        (
            any::<[u8; 6]>(),
            any::<[u8; 6]>(),
            0..3usize,
            arb_vlan(),
            arb_vlan(),
        )
            .prop_map(|(dst, src, n, a, b)| EthRepr {
                dst,
                src,
                vlans: [(n > 0).then_some(a), (n > 1).then_some(b)],
            }),
    );
    let ip = prop_oneof![
        (
            any::<[u8; 4]>(),
            any::<[u8; 4]>(),
            any::<u8>(),
            any::<u16>(),
            any::<bool>(),
            any::<u8>()
        )
            .prop_map(|(s, d, tos, id, dont_fragment, ttl)| IpRepr::V4 {
                src: s.into(),
                dst: d.into(),
                tos,
                id,
                dont_fragment,
                ttl,
            }),
        (
            any::<[u8; 16]>(),
            any::<[u8; 16]>(),
            any::<u8>(),
            0..1u32 << 20,
            any::<u8>()
        )
            .prop_map(|(s, d, traffic_class, flow_label, hop_limit)| IpRepr::V6 {
                src: s.into(),
                dst: d.into(),
                traffic_class,
                flow_label,
                hop_limit,
            }),
    ];
    let csum = prop_oneof![Just(UdpChecksum::Zero), Just(UdpChecksum::Compute)];
    (eth, ip, any::<u16>(), csum).prop_map(|(eth, ip, udp_src_port, udp_checksum)| FrameRepr {
        eth,
        ip,
        udp_src_port,
        udp_checksum,
    })
}

proptest! {
    #![proptest_config(config(20_000))]

    #[test]
    fn random_valid_packet_round_trips(spec in arb_spec(), fr in arb_frame()) {
        let repr = spec.repr();
        prop_assert!(repr.check().is_ok());
        let mut frame = vec![0u8; fr.buffer_len(repr.buffer_len())];
        prop_assert_eq!(fr.emit(&repr, &mut frame), Ok(frame.len()));
        let link = if fr.eth.is_some() { LinkType::Ethernet } else { LinkType::RawIp };

        let rf = RoceFrame::parse(link, &frame).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let back = rf.repr();
        prop_assert_eq!((back.eth, back.ip, back.udp_src_port), (fr.eth, fr.ip, fr.udp_src_port));
        match fr.udp_checksum {
            UdpChecksum::Compute => prop_assert!(matches!(back.udp_checksum, UdpChecksum::Carried(c) if c != 0)),
            other => prop_assert_eq!(back.udp_checksum, other),
        }
        prop_assert!(rf.icrc_ok());
        let p = rf.packet().map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(PacketRepr::parse(&p), Ok(repr));
        prop_assert_eq!(rf.computed_icrc(), Ok(p.icrc()));
        // The ICRC from its three parts, as a UDP-socket sender computes it.
        let ip = rf.ip_packet;
        let hlen = ip.len() - rf.transport.len() - 8;
        prop_assert_eq!(
            icrc::compute_parts(&ip[..hlen], &ip[hlen..hlen + 8], &rf.transport[..rf.transport.len() - 4]),
            Ok(p.icrc())
        );
        check_frame(link, &frame).map_err(|e| TestCaseError::fail(e.to_string()))?;

        // Emitting the parsed reprs gives the same bytes.
        let mut again = vec![0u8; frame.len()];
        rf.repr().emit(&PacketRepr::parse(&p).unwrap(), &mut again).unwrap();
        prop_assert_eq!(&again, &frame);

        // The IP packet behind Linux cooked headers parses to the same.
        let ip_packet = rf.ip_packet.to_vec();
        let et: u16 = if matches!(fr.ip, IpRepr::V4 { .. }) { 0x0800 } else { 0x86dd };
        let mut sll = vec![0, 0, 0, 1, 0, 6, 2, 0, 0, 0, 0, 1, 0, 0];
        sll.extend_from_slice(&et.to_be_bytes());
        let mut sll2 = et.to_be_bytes().to_vec();
        sll2.extend_from_slice(&[0, 0, 0, 0, 0, 2, 0, 1, 0, 6, 2, 0, 0, 0, 0, 1, 0, 0]);
        for (link, mut head) in [(LinkType::LinuxSll, sll), (LinkType::LinuxSll2, sll2)] {
            head.extend_from_slice(&ip_packet);
            let rf2 = RoceFrame::parse(link, &head).map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert_eq!(rf2.ip, fr.ip);
            prop_assert!(rf2.eth.is_none());
            prop_assert!(rf2.icrc_ok());
            prop_assert_eq!(rf2.transport, rf.transport);
        }
    }
}

// ---------------------------------------------------------------------------
// Oversized datagrams
// ---------------------------------------------------------------------------

/// Whatever `FrameRepr::emit` accepts must parse back; a datagram past the
/// 16-bit IP/UDP length fields is refused with `Error::TooLong` instead of
/// wrapping the length fields.
#[test]
fn oversized_datagram_is_refused_or_round_trips() {
    for len in [65_480usize, 65_500, 65_536, 70_000] {
        let payload = vec![0u8; len];
        let pkt = full_packet(Opcode::RC_SEND_ONLY, &payload, 1);
        for setup in [0, 1] {
            let (v6, vlans, eth) = SETUPS[setup];
            let fr = outer(v6, vlans, eth);
            let mut buf = vec![0u8; fr.buffer_len(pkt.buffer_len())];
            let link = if eth {
                LinkType::Ethernet
            } else {
                LinkType::RawIp
            };
            if fr.emit(&pkt, &mut buf).is_ok() {
                let rf = RoceFrame::parse(link, &buf);
                assert_eq!(
                    rf.map(|rf| (rf.transport.len(), rf.icrc_ok())),
                    Ok((pkt.buffer_len(), true)),
                    "payload {len}, IPv{}",
                    if v6 { 6 } else { 4 }
                );
            }
        }
    }
}
