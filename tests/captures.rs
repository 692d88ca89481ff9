//! The bundled captures of real Linux rdma_rxe traffic (tests/data/pcaps),
//! read with `rxe_net::capture` and taken apart with `rxe_core::wire`:
//!
//! * every RoCE v2 frame parses, carries a valid ICRC, and re-emitting the
//!   parsed form (`FrameRepr::emit`) gives back the same bytes;
//! * the number of RoCE frames per file and the packet kinds (as tshark's
//!   InfiniBand dissector names them) match SUMMARY.txt;
//! * a few files checked field by field (NAKs, atomics, READ responses);
//! * the same frames re-written as pcap with Linux cooked (SLL, SLL2) and
//!   raw-IP link types, and as pcapng (both byte orders, two interfaces with
//!   different link types and timestamp resolutions), read back the same.

use rxe_core::wire::{
    AethSyndrome, LinkType, NakCode, Opcode, Operation, PacketRepr, Position, RoceFrame, Transport,
};
use rxe_net::capture::{pcap_link_type, CaptureReader, CaptureWriter, Record};
use rxe_tests::pcap_dir;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

fn captures() -> Vec<PathBuf> {
    let mut v: Vec<_> = std::fs::read_dir(pcap_dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "pcap"))
        .collect();
    v.sort();
    assert_eq!(v.len(), 27, "bundled captures");
    v
}

fn name(p: &std::path::Path) -> String {
    p.file_name().unwrap().to_string_lossy().into_owned()
}

fn read(p: &std::path::Path) -> Vec<Record> {
    CaptureReader::open(p)
        .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
        .collect::<Result<_, _>>()
        .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// One file's section of SUMMARY.txt.
#[derive(Debug, Default)]
struct Summary {
    frames: usize,
    icrc_ok: usize,
    icrc_bad: usize,
    kinds: BTreeMap<String, usize>,
}

/// Parses the "== NAME.pcap: N RoCEv2 frames, ICRC ok X, bad Y" sections
/// and the "  count  kind" lines under them.
fn summary() -> BTreeMap<String, Summary> {
    let text = std::fs::read_to_string(pcap_dir().join("SUMMARY.txt")).unwrap();
    let mut out = BTreeMap::new();
    let mut cur: Option<String> = None;
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("== ") {
            cur = None;
            let Some((file, counts)) = rest
                .split_once(": ")
                .filter(|(_, c)| c.contains(" RoCEv2 frames"))
            else {
                continue; // "== all files: packet kinds seen"
            };
            let num = |pre: &str| -> usize {
                let at = counts.find(pre).unwrap() + pre.len();
                let digits: String = counts[at..]
                    .chars()
                    .take_while(|c| c.is_ascii_digit())
                    .collect();
                digits.parse().unwrap()
            };
            let s = Summary {
                frames: num(""),
                icrc_ok: num("ICRC ok "),
                icrc_bad: num("bad "),
                kinds: BTreeMap::new(),
            };
            out.insert(file.to_owned(), s);
            cur = Some(file.to_owned());
        } else if let Some(file) = &cur {
            let t = line.trim_start();
            if let Some((n, kind)) = t.split_once("  ") {
                if let Ok(n) = n.parse::<usize>() {
                    out.get_mut(file)
                        .unwrap()
                        .kinds
                        .insert(kind.trim().to_owned(), n);
                }
            }
        }
    }
    out
}

/// The packet kind as tshark 4.0's InfiniBand dissector shows it in the
/// Info column (plus the AETH syndrome, as SUMMARY.txt adds it), e.g.
/// "RC RDMA Read Response First [AETH ACK]" or "CM: ConnectRequest".
fn tshark_kind(r: &PacketRepr) -> String {
    if r.bth.dest_qp == 1 && r.deth.is_some() && r.payload.len() >= 24 && r.payload[1] == 7 {
        let attr = u16::from_be_bytes([r.payload[16], r.payload[17]]);
        let cm = match attr {
            0x10 => "ConnectRequest",
            0x13 => "ConnectReply",
            0x14 => "ReadyToUse",
            0x15 => "DisconnectRequest",
            0x16 => "DisconnectReply",
            0x17 => "ServiceIDResReq",
            0x18 => "ServiceIDResReqResp",
            _ => "other",
        };
        return format!("CM: {cm}");
    }
    let name = r.bth.opcode.name().unwrap();
    let (transport, rest) = name.split_once('_').unwrap();
    let words: Vec<String> = rest
        .split('_')
        .filter(|w| *w != "WITH")
        .map(|w| match w {
            "RDMA" => w.to_owned(),
            w => w[..1].to_owned() + &w[1..].to_lowercase(),
        })
        .collect();
    let mut kind = format!("{transport} {}", words.join(" "));
    if let Some(a) = r.aeth {
        kind += &match a.syndrome {
            AethSyndrome::Ack { .. } => " [AETH ACK]".to_owned(),
            AethSyndrome::RnrNak { timer } => format!(" [AETH RNR NAK (timer {timer})]"),
            AethSyndrome::Nak(c) => format!(" [AETH NAK: {c}]"),
            AethSyndrome::Reserved(x) => format!(" [AETH reserved {x:#x}]"),
        };
    }
    kind
}

/// True if an IPv4 packet's UDP checksum is the partial one a sender with
/// checksum offload leaves for the NIC to finish (the one's-complement sum
/// of the pseudo-header only), as frames captured on the sending host have.
fn offloaded_udp_checksum(ip: &[u8]) -> bool {
    if ip[0] >> 4 != 4 {
        return false;
    }
    let hlen = usize::from(ip[0] & 0x0f) * 4;
    let udp_len = u16::from_be_bytes([ip[hlen + 4], ip[hlen + 5]]);
    let mut sum: u32 = [12, 14, 16, 18]
        .iter()
        .map(|&i| u32::from(u16::from_be_bytes([ip[i], ip[i + 1]])))
        .sum::<u32>()
        + 17
        + u32::from(udp_len);
    while sum >> 16 != 0 {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    u16::from_be_bytes([ip[hlen + 6], ip[hlen + 7]]) == sum as u16
}

/// What we learn from one RoCE frame, owned.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Roce {
    number: u64,
    timestamp: Duration,
    /// IP header to ICRC.
    ip_packet: Vec<u8>,
    icrc_ok: bool,
    /// `PacketRepr`'s Display: every field of every header.
    fields: String,
    kind: String,
    p: PacketReprOwned,
}

/// Finds, checks and re-emits every RoCE frame of a file's records.
/// Problems go into `errors` (so one run reports them all).
fn roce_frames(file: &str, records: &[Record], errors: &mut Vec<String>) -> Vec<Roce> {
    let mut out = vec![];
    for rec in records {
        let at = format!("{file} frame {}", rec.number);
        let f = match RoceFrame::parse(rec.link_type, &rec.data) {
            Ok(f) => f,
            Err(e) if e.is_not_roce() => continue,
            Err(e) => {
                errors.push(format!("{at}: {e}"));
                continue;
            }
        };
        let p = match f.packet() {
            Ok(p) => p,
            Err(e) => {
                errors.push(format!("{at}: packet: {e}"));
                continue;
            }
        };
        let repr = match PacketRepr::parse(&p) {
            Ok(r) => r,
            Err(e) => {
                errors.push(format!("{at}: repr: {e}"));
                continue;
            }
        };
        if !f.icrc_ok() {
            errors.push(format!("{at}: ICRC"));
        }
        // Re-emit: the bytes up to the end of the IP packet come back
        // (from the Ethernet header on, or from the IP header for the other
        // link types); what follows (Ethernet padding) is not part of the
        // parsed form.
        let ip_off = f.ip_packet.as_ptr() as usize - rec.data.as_ptr() as usize;
        let start = if f.eth.is_some() { 0 } else { ip_off };
        let want = &rec.data[start..ip_off + f.ip_packet.len()];
        let mut buf = vec![0u8; want.len()];
        match f.repr().emit(&repr, &mut buf) {
            Ok(n) if n == want.len() && buf == want => {}
            Ok(n) => {
                let first = buf.iter().zip(want).position(|(a, b)| a != b);
                errors.push(format!(
                    "{at}: re-emitted {n} bytes (want {}), first difference at {first:?}",
                    want.len()
                ));
            }
            Err(e) => errors.push(format!("{at}: emit: {e}")),
        }
        out.push(Roce {
            number: rec.number,
            timestamp: rec.timestamp,
            ip_packet: f.ip_packet.to_vec(),
            icrc_ok: f.icrc_ok(),
            fields: repr.to_string(),
            kind: tshark_kind(&repr),
            p: PacketReprOwned::from(&repr),
        });
    }
    out
}

/// The RoCE frames of a bundled capture, all checked.
fn all_roce(file: &str) -> Vec<Roce> {
    let mut errors = vec![];
    let v = roce_frames(file, &read(&pcap_dir().join(file)), &mut errors);
    assert!(errors.is_empty(), "{errors:?}");
    v
}

/// The parts of a `PacketRepr` the field checks look at, without the borrow.
#[derive(Debug, Clone, PartialEq, Eq)]
struct PacketReprOwned {
    opcode: Opcode,
    psn: u32,
    dest_qp: u32,
    aeth: Option<AethSyndrome>,
    reth_len: Option<u32>,
    atomic: Option<(u64, u64)>,
    atomic_ack: Option<u64>,
    payload_len: usize,
}

impl From<&PacketRepr<'_>> for PacketReprOwned {
    fn from(r: &PacketRepr<'_>) -> Self {
        PacketReprOwned {
            opcode: r.bth.opcode,
            psn: r.bth.psn.value(),
            dest_qp: r.bth.dest_qp,
            aeth: r.aeth.map(|a| a.syndrome),
            reth_len: r.reth.map(|h| h.dma_len),
            atomic: r.atomic_eth.map(|h| (h.swap_add, h.compare)),
            atomic_ack: r.atomic_ack_eth.map(|h| h.orig),
            payload_len: r.payload.len(),
        }
    }
}

#[test]
fn every_roce_frame_parses_verifies_and_reemits() {
    let summary = summary();
    assert_eq!(summary.len(), 27, "SUMMARY.txt sections");
    let mut errors = vec![];
    let mut total = 0;
    let mut offloaded = vec![];
    for path in captures() {
        let file = name(&path);
        let recs = read(&path);
        for (i, r) in recs.iter().enumerate() {
            assert_eq!(r.number, i as u64 + 1);
            assert_eq!(r.link_type, LinkType::Ethernet, "{file}");
        }
        let roce = roce_frames(&file, &recs, &mut errors);
        let want = summary
            .get(&file)
            .unwrap_or_else(|| panic!("{file} not in SUMMARY.txt"));
        assert_eq!(roce.len(), want.frames, "{file}: RoCE frames");
        let ok = roce.iter().filter(|r| r.icrc_ok).count();
        assert_eq!(
            (ok, roce.len() - ok),
            (want.icrc_ok, want.icrc_bad),
            "{file}"
        );
        total += roce.len();
        offloaded.extend(
            roce.iter()
                .filter(|r| offloaded_udp_checksum(&r.ip_packet))
                .map(|r| (file.clone(), r.ip_packet[12..16].to_vec())),
        );
    }
    assert!(
        errors.is_empty(),
        "{} problems:\n{}",
        errors.len(),
        errors.join("\n")
    );
    assert_eq!(total, summary.values().map(|s| s.frames).sum::<usize>());
    // Frames host-peer.py sent from the capturing host (10.99.0.1) carry the
    // unfinished checksum of checksum offload; they re-emit byte for byte
    // all the same, since the parsed form keeps the checksum as carried.
    assert_eq!(offloaded.len(), 15);
    assert!(offloaded
        .iter()
        .all(|(f, src)| f.starts_with("host_peer_") && src == &[10, 99, 0, 1]));
}

#[test]
fn packet_kinds_match_tshark() {
    let summary = summary();
    for path in captures() {
        let file = name(&path);
        let mut errors = vec![];
        let mut kinds = BTreeMap::new();
        for r in roce_frames(&file, &read(&path), &mut errors) {
            *kinds.entry(r.kind).or_insert(0usize) += 1;
        }
        // SUMMARY.txt also lists the non-RoCE frames of l2_peer_ud (ARP,
        // IPv6 neighbour discovery): keep the RoCE kinds only.
        let want: BTreeMap<_, _> = summary[&file]
            .kinds
            .iter()
            .filter(|(k, _)| {
                ["RC ", "UC ", "UD ", "RD ", "CM: "]
                    .iter()
                    .any(|p| k.starts_with(p))
            })
            .map(|(k, n)| (k.clone(), *n))
            .collect();
        assert_eq!(kinds, want, "{file}");
    }
}

fn count(v: &[Roce], f: impl Fn(&PacketReprOwned) -> bool) -> usize {
    v.iter().filter(|r| f(&r.p)).count()
}

#[test]
fn extra_imm_naks_fields() {
    let v = all_roce("extra_imm_naks.pcap");
    assert_eq!(v.len(), 30);
    let aeth = |s: AethSyndrome| count(&v, |p| p.aeth == Some(s));
    assert_eq!(aeth(AethSyndrome::RnrNak { timer: 31 }), 4);
    assert_eq!(aeth(AethSyndrome::Nak(NakCode::RemoteOperationalError)), 1);
    assert_eq!(aeth(AethSyndrome::Nak(NakCode::RemoteAccessError)), 1);
    assert_eq!(aeth(AethSyndrome::Ack { credits: 31 }), 5);
    let op = |o: Opcode| count(&v, |p| p.opcode == o);
    assert_eq!(op(Opcode::RC_SEND_ONLY_WITH_IMMEDIATE), 1);
    assert_eq!(op(Opcode::RC_SEND_LAST_WITH_IMMEDIATE), 1);
    assert_eq!(op(Opcode::RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE), 1);
    assert_eq!(op(Opcode::RC_RDMA_WRITE_LAST_WITH_IMMEDIATE), 1);
    // Every RNR NAK answers the same SEND, which is retried until it gets
    // through: the PSN does not move.
    let rnr: Vec<_> = v
        .iter()
        .filter(|r| matches!(r.p.aeth, Some(AethSyndrome::RnrNak { .. })))
        .map(|r| r.p.psn)
        .collect();
    assert!(rnr.windows(2).all(|w| w[0] == w[1]), "{rnr:?}");
    // The WRITE with a bad rkey is NAKed with its own PSN.
    let (i, _) = v
        .iter()
        .enumerate()
        .find(|(_, r)| r.p.aeth == Some(AethSyndrome::Nak(NakCode::RemoteAccessError)))
        .unwrap();
    assert_eq!(v[i - 1].p.opcode, Opcode::RC_RDMA_WRITE_ONLY);
    assert_eq!(v[i - 1].p.psn, v[i].p.psn);
}

#[test]
fn atomic_fields() {
    for (file, op, operation) in [
        (
            "atomic_cswap.pcap",
            Opcode::RC_COMPARE_SWAP,
            Operation::CompareSwap,
        ),
        (
            "atomic_fadd.pcap",
            Opcode::RC_FETCH_ADD,
            Operation::FetchAdd,
        ),
    ] {
        let v = all_roce(file);
        assert_eq!(v.len(), 20, "{file}");
        assert_eq!(count(&v, |p| p.opcode == op && p.atomic.is_some()), 10);
        assert_eq!(op.info().unwrap().operation, operation);
        // Each request is answered by one atomic acknowledge with its PSN
        // (ib_atomic_bw keeps several in flight, so not always right after).
        let (reqs, acks): (Vec<_>, Vec<_>) = v.iter().map(|r| &r.p).partition(|p| p.opcode == op);
        assert_eq!(reqs.len(), 10, "{file}");
        for req in &reqs {
            assert_eq!(req.payload_len, 0);
            let answers: Vec<_> = acks.iter().filter(|a| a.psn == req.psn).collect();
            assert_eq!(answers.len(), 1, "{file}: PSN {}", req.psn);
            let ack = answers[0];
            assert_eq!(ack.opcode, Opcode::RC_ATOMIC_ACKNOWLEDGE, "{file}");
            assert!(matches!(ack.aeth, Some(AethSyndrome::Ack { .. })));
            assert!(ack.atomic_ack.is_some());
            assert_eq!(ack.payload_len, 0);
        }
        if op == Opcode::RC_FETCH_ADD {
            // ib_atomic_bw adds 1.
            assert!(v
                .iter()
                .all(|r| r.p.atomic.into_iter().all(|(add, _)| add == 1)));
        }
    }
}

#[test]
fn read_bw_4096_fields() {
    let v = all_roce("read_bw_4096.pcap");
    assert_eq!(v.len(), 50);
    let reqs: Vec<_> = v
        .iter()
        .filter(|r| r.p.opcode == Opcode::RC_RDMA_READ_REQUEST)
        .map(|r| r.p.clone())
        .collect();
    assert_eq!(reqs.len(), 10);
    assert!(reqs.iter().all(|r| r.reth_len == Some(4096)));
    // Path MTU 1024: each READ is answered by first, middle, middle, last,
    // with PSNs from the request's on, 4096 bytes in all.
    for req in &reqs {
        let resp: Vec<_> = v
            .iter()
            .map(|r| &r.p)
            .filter(|p| {
                p.opcode.info().unwrap().operation == Operation::ReadResponse
                    && p.psn.wrapping_sub(req.psn) & 0xff_ffff < 4
            })
            .collect();
        let pos: Vec<_> = resp
            .iter()
            .map(|p| p.opcode.info().unwrap().position)
            .collect();
        assert_eq!(
            pos,
            [
                Position::First,
                Position::Middle,
                Position::Middle,
                Position::Last
            ],
            "READ at PSN {}",
            req.psn
        );
        assert!(resp
            .iter()
            .all(|p| p.payload_len == 1024 && p.dest_qp == req.dest_qp));
        assert!(resp
            .iter()
            .all(|p| p.opcode.info().unwrap().transport == Transport::Rc));
    }
}

// ---- the same frames under other link types and in pcapng ----

/// The ethertype and what follows, past any VLAN tags.
fn l3(eth: &[u8]) -> (u16, &[u8]) {
    let mut et = u16::from_be_bytes([eth[12], eth[13]]);
    let mut rest = &eth[14..];
    while et == 0x8100 || et == 0x88a8 {
        et = u16::from_be_bytes([rest[2], rest[3]]);
        rest = &rest[4..];
    }
    (et, rest)
}

/// Linux cooked capture v1 header (16 bytes) for an Ethernet frame.
fn to_sll(eth: &[u8]) -> Vec<u8> {
    let (et, rest) = l3(eth);
    let mut v = vec![0, 0, 0, 1, 0, 6]; // to us, ARPHRD_ETHER, 6-byte address
    v.extend_from_slice(&eth[6..12]);
    v.extend_from_slice(&[0, 0]);
    v.extend_from_slice(&et.to_be_bytes());
    v.extend_from_slice(rest);
    v
}

/// Linux cooked capture v2 header (20 bytes).
fn to_sll2(eth: &[u8]) -> Vec<u8> {
    let (et, rest) = l3(eth);
    let mut v = et.to_be_bytes().to_vec();
    v.extend_from_slice(&[0, 0, 0, 0, 0, 3, 0, 1, 4, 6]); // ifindex 3, outgoing
    v.extend_from_slice(&eth[6..12]);
    v.extend_from_slice(&[0, 0]);
    v.extend_from_slice(rest);
    v
}

fn convert(recs: &[Record], link: LinkType) -> Vec<u8> {
    let mut w = CaptureWriter::new(Vec::new(), link).unwrap();
    for r in recs {
        let frame = match link {
            LinkType::Ethernet => r.data.clone(),
            LinkType::LinuxSll => to_sll(&r.data),
            LinkType::LinuxSll2 => to_sll2(&r.data),
            LinkType::RawIp => match l3(&r.data) {
                (0x0800 | 0x86dd, ip) => ip.to_vec(),
                _ => continue, // ARP has no raw-IP form
            },
        };
        w.write(r.timestamp, &frame).unwrap();
    }
    w.finish().unwrap()
}

/// A pcapng file written by hand (independently of the code under test):
/// even frames on interface 0 (Ethernet, default microsecond timestamps),
/// odd frames on interface 1 (Linux SLL2, nanoseconds, `if_tsresol` = 9),
/// with a name-resolution block and an interface-statistics block mixed in.
fn to_pcapng(recs: &[Record], big: bool) -> Vec<u8> {
    let u16b = |x: u16| {
        if big {
            x.to_be_bytes()
        } else {
            x.to_le_bytes()
        }
    };
    let u32b = |x: u32| {
        if big {
            x.to_be_bytes()
        } else {
            x.to_le_bytes()
        }
    };
    let mut out = vec![];
    let mut block = |ty: u32, body: &[u8]| {
        let mut body = body.to_vec();
        body.resize(body.len().div_ceil(4) * 4, 0);
        let len = body.len() as u32 + 12;
        out.extend_from_slice(&u32b(ty));
        out.extend_from_slice(&u32b(len));
        out.extend_from_slice(&body);
        out.extend_from_slice(&u32b(len));
    };
    // Section header: byte-order magic, version 1.0, unknown section length.
    let mut shb = u32b(0x1a2b_3c4d).to_vec();
    shb.extend_from_slice(&u16b(1));
    shb.extend_from_slice(&u16b(0));
    shb.extend_from_slice(&[0xff; 8]);
    block(0x0a0d_0d0a, &shb);
    // Interface 0: Ethernet, snaplen 0 (none), no options.
    let mut idb = u16b(1).to_vec();
    idb.extend_from_slice(&[0, 0]);
    idb.extend_from_slice(&u32b(0));
    block(1, &idb);
    // Interface 1: SLL2, if_name "rxe0", if_tsresol 9, end of options.
    let mut idb = u16b(276).to_vec();
    idb.extend_from_slice(&[0, 0]);
    idb.extend_from_slice(&u32b(262_144));
    idb.extend_from_slice(&u16b(2));
    idb.extend_from_slice(&u16b(4));
    idb.extend_from_slice(b"rxe0");
    idb.extend_from_slice(&u16b(9));
    idb.extend_from_slice(&u16b(1));
    idb.extend_from_slice(&[9, 0, 0, 0]);
    idb.extend_from_slice(&[0; 4]);
    block(1, &idb);
    // Name resolution block with only the end marker.
    block(4, &[0; 4]);
    for (i, r) in recs.iter().enumerate() {
        let (iface, units, data) = if i % 2 == 0 {
            (0, r.timestamp.as_micros() as u64, r.data.clone())
        } else {
            (1, r.timestamp.as_nanos() as u64, to_sll2(&r.data))
        };
        let mut epb = u32b(iface).to_vec();
        epb.extend_from_slice(&u32b((units >> 32) as u32));
        epb.extend_from_slice(&u32b(units as u32));
        epb.extend_from_slice(&u32b(data.len() as u32));
        epb.extend_from_slice(&u32b(data.len() as u32));
        epb.extend_from_slice(&data);
        block(6, &epb);
        if i == 2 {
            // Interface statistics for interface 0 (skipped by the reader).
            let mut isb = u32b(0).to_vec();
            isb.extend_from_slice(&[0; 8]);
            block(5, &isb);
        }
    }
    out
}

#[test]
fn other_link_types_and_pcapng_give_the_same_packets() {
    for path in captures() {
        let file = name(&path);
        let recs = read(&path);
        let mut errors = vec![];
        let want = roce_frames(&file, &recs, &mut errors);
        assert!(errors.is_empty(), "{errors:?}");

        for link in [
            LinkType::Ethernet,
            LinkType::LinuxSll,
            LinkType::LinuxSll2,
            LinkType::RawIp,
        ] {
            let bytes = convert(&recs, link);
            let reader = CaptureReader::new(&bytes[..]).unwrap();
            assert_eq!(reader.link_type(), Some(link));
            assert_eq!(
                u32::from_le_bytes(bytes[20..24].try_into().unwrap()),
                pcap_link_type(link)
            );
            let back: Vec<Record> = reader.collect::<Result<_, _>>().unwrap();
            assert!(back.iter().all(|r| r.link_type == link));
            let at = format!("{file} as {link:?}");
            let got = roce_frames(&at, &back, &mut errors);
            assert!(errors.is_empty(), "{errors:?}");
            if link == LinkType::RawIp {
                // Frames that are not IP are gone, so numbers move.
                let strip = |v: &[Roce]| -> Vec<Roce> {
                    v.iter().cloned().map(|r| Roce { number: 0, ..r }).collect()
                };
                assert_eq!(strip(&got), strip(&want), "{at}");
            } else {
                assert_eq!(back.len(), recs.len(), "{at}");
                assert_eq!(got, want, "{at}");
            }
        }

        for big in [false, true] {
            let bytes = to_pcapng(&recs, big);
            let back: Vec<Record> = CaptureReader::new(&bytes[..])
                .unwrap()
                .collect::<Result<_, _>>()
                .unwrap();
            assert_eq!(back.len(), recs.len());
            for (i, r) in back.iter().enumerate() {
                let link = [LinkType::Ethernet, LinkType::LinuxSll2][i % 2];
                assert_eq!((r.number, r.link_type), (i as u64 + 1, link));
            }
            let at = format!("{file} as pcapng (big endian: {big})");
            let got = roce_frames(&at, &back, &mut errors);
            assert!(errors.is_empty(), "{errors:?}");
            assert_eq!(got, want, "{at}");
        }
    }
}

/// What a plain UDP receiver sees of a kernel packet (the UDP payload, the
/// addresses and the source port, not the IP header) is enough to tell a
/// good ICRC from a damaged one: for every IPv4 RoCE packet of every bundled
/// capture, `Ipv4IdSolver` finds the very identification and DF bit the
/// kernel wrote, and a flipped payload bit is explained by none.
#[test]
fn plain_receivers_solve_the_kernels_ipv4_ids() {
    use rxe_core::wire::icrc::Ipv4IdSolver;
    use std::net::Ipv4Addr;
    let mut solver = Ipv4IdSolver::new();
    let (mut checked, mut nonzero, mut damaged_caught) = (0, 0, 0);
    for path in captures() {
        let file = name(&path);
        for r in all_roce(&file) {
            let ip = &r.ip_packet;
            if ip[0] != 0x45 {
                continue; // IPv6 (no ID) or IPv4 with options
            }
            let src = Ipv4Addr::new(ip[12], ip[13], ip[14], ip[15]);
            let dst = Ipv4Addr::new(ip[16], ip[17], ip[18], ip[19]);
            let src_port = u16::from_be_bytes([ip[20], ip[21]]);
            let udp_payload = &ip[28..];
            let (body, tail) = udp_payload.split_at(udp_payload.len() - 4);
            let carried = u32::from_le_bytes(tail.try_into().unwrap());
            let id = u16::from_be_bytes([ip[4], ip[5]]);
            let df = ip[6] & 0x40 != 0;
            assert_eq!(
                solver.solve(src, dst, src_port, body, carried),
                Some((id, df)),
                "{file} frame {}",
                r.number
            );
            checked += 1;
            nonzero += usize::from(id != 0);
            let mut bad = body.to_vec();
            let mut bit = (r.number as usize * 131) % (bad.len() * 8);
            if bit / 8 == 4 {
                bit += 8; // BTH byte 4 (FECN, BECN) is masked out of the ICRC
            }
            bad[bit / 8] ^= 1 << (bit % 8);
            if solver.solve(src, dst, src_port, &bad, carried).is_none() {
                damaged_caught += 1;
            }
        }
    }
    assert!(checked > 900 && nonzero > 900, "{checked} {nonzero}");
    // Odds of 2^-15 per packet of being explained anyway.
    assert!(
        damaged_caught + 2 >= checked,
        "{damaged_caught} of {checked}"
    );
}
