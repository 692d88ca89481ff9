//! `rxe dump --explain` on the bundled captures: every packet gets a
//! sentence; every field it prints is where it says (checked by flipping
//! the bits it names in the real frame and re-parsing with rxe-core) and
//! has rxe-core's value; duplicates, NAK codes, RNR timers, message
//! positions and `--frames` as the capture says.

use rxe_core::mad::cm::CmMessage;
use rxe_core::mad::{GsiMad, Mad};
use rxe_core::wire::{
    AethSyndrome, Bth, IpRepr, NakCode, Opcode, Packet, PacketRepr, Position, RoceFrame,
};
use rxe_net::capture::{CaptureReader, CaptureWriter, Record};
use rxe_tests::{pcap_dir, rxe_bin};
use serde_json::{json, Value};
use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::process::Command;

fn pcap(name: &str) -> PathBuf {
    pcap_dir().join(name)
}

fn records(p: &Path) -> Vec<Record> {
    CaptureReader::open(p)
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

fn run(args: &[&str]) -> (String, String, bool) {
    let o = Command::new(rxe_bin())
        .args(args)
        .output()
        .expect("run rxe");
    (
        String::from_utf8(o.stdout).unwrap(),
        String::from_utf8(o.stderr).unwrap(),
        o.status.success(),
    )
}

/// `rxe dump --explain --json FILE [more]`, one object per packet.
fn explain(path: &Path, more: &[&str]) -> Vec<Value> {
    let mut args = vec!["dump", "--explain", "--json", path.to_str().unwrap()];
    args.extend_from_slice(more);
    let (out, err, ok) = run(&args);
    assert!(ok, "{err}");
    out.lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn by_frame(v: &[Value]) -> HashMap<u64, &Value> {
    v.iter()
        .map(|p| (p["frame"].as_u64().unwrap(), p))
        .collect()
}

fn parsed(rec: &Record) -> Option<(RoceFrame<'_>, PacketRepr<'_>)> {
    let f = RoceFrame::parse(rec.link_type, &rec.data).ok()?;
    let r = PacketRepr::parse(&f.packet().ok()?).ok()?;
    Some((f, r))
}

fn field<'a>(p: &'a Value, header: &str, name: &str) -> &'a Value {
    p["fields"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["header"] == header && f["name"] == name)
        .unwrap_or_else(|| panic!("frame {} has no {header}.{name}", p["frame"]))
}

fn all_captures() -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(pcap_dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "pcap" || e == "pcapng"))
        .collect();
    v.sort();
    v
}

#[test]
fn every_packet_of_every_capture_gets_a_sentence_and_rxe_cores_values() {
    for path in all_captures() {
        let recs = records(&path);
        let out = explain(&path, &[]);
        let want: Vec<u64> = recs
            .iter()
            .filter(|r| parsed(r).is_some())
            .map(|r| r.number)
            .collect();
        let got: Vec<u64> = out.iter().map(|p| p["frame"].as_u64().unwrap()).collect();
        assert_eq!(got, want, "{}", path.display());
        let out = by_frame(&out);
        for rec in &recs {
            let Some((f, r)) = parsed(rec) else { continue };
            let p = out[&rec.number];
            let s = p["sentence"].as_str().unwrap();
            assert!(
                s.len() > 20,
                "{} frame {}: {s:?}",
                path.display(),
                rec.number
            );
            assert_eq!(p["src"], json!(f.ip.src().to_string()));
            assert_eq!(field(p, "BTH", "OpCode")["value"], json!(r.bth.opcode.0));
            assert_eq!(field(p, "BTH", "PSN")["value"], json!(r.bth.psn.value()));
            assert_eq!(field(p, "BTH", "DestQP")["value"], json!(r.bth.dest_qp));
            assert_eq!(
                field(p, "BTH", "AckReq")["value"],
                json!(u8::from(r.bth.ack_req))
            );
            if let Some(a) = r.aeth {
                assert_eq!(
                    field(p, "AETH", "Syndrome")["value"],
                    json!(a.syndrome.to_u8())
                );
                assert_eq!(field(p, "AETH", "MSN")["value"], json!(a.msn));
            }
            if let Some(h) = r.reth {
                assert_eq!(field(p, "RETH", "DMALen")["value"], json!(h.dma_len));
                assert_eq!(field(p, "RETH", "R_Key")["value"], json!(h.rkey));
            }
            if let Some(d) = r.deth {
                assert_eq!(field(p, "DETH", "SrcQP")["value"], json!(d.src_qp));
            }
            let icrc = field(p, "ICRC", "ICRC");
            assert_eq!(icrc["value"], json!(f.packet().unwrap().icrc()));
            assert!(icrc["meaning"].as_str().unwrap().starts_with("correct"));
        }
    }
}

/// rxe-core's reading of the field a JSON row names, from a whole frame.
/// `None`: the test has no accessor for it.
fn read(header: &str, name: &str, rec: &Record, data: &[u8]) -> Option<Result<Value, ()>> {
    let Ok(f) = RoceFrame::parse(rec.link_type, data) else {
        return Some(Err(()));
    };
    let t = f.transport;
    let v = |x: u64| Some(Ok(json!(x)));
    let bth = Bth::new_checked(t).unwrap();
    let pkt = Packet::new_checked(t);
    match (header, name) {
        ("IPv4", _) | ("IPv6", _) => {
            return match (f.ip, name) {
                (IpRepr::V4 { ttl, .. }, "TTL") => v(ttl.into()),
                (IpRepr::V4 { id, .. }, "Identification") => v(id.into()),
                (IpRepr::V4 { tos, .. }, "DSCP") => v((tos >> 2).into()),
                (IpRepr::V4 { tos, .. }, "ECN")
                | (
                    IpRepr::V6 {
                        traffic_class: tos, ..
                    },
                    "ECN",
                ) => v((tos & 3).into()),
                (IpRepr::V4 { dont_fragment, .. }, "DF") => v(dont_fragment.into()),
                (IpRepr::V6 { hop_limit, .. }, "Hop Limit") => v(hop_limit.into()),
                (IpRepr::V6 { flow_label, .. }, "Flow Label") => v(flow_label.into()),
                (_, "Source") => Some(Ok(json!(f.ip.src().to_string()))),
                (_, "Destination") => Some(Ok(json!(f.ip.dst().to_string()))),
                _ => None,
            }
        }
        ("UDP", "Source Port") => return v(f.udp_src_port.into()),
        ("UDP", "Checksum") => return v(f.udp_checksum.into()),
        ("BTH", n) => {
            return match n {
                "OpCode" => v(bth.opcode().0.into()),
                "SE" => v(bth.solicited().into()),
                "M" => v(bth.mig_req().into()),
                "PadCnt" => v(bth.pad_count().into()),
                "TVer" => v(bth.tver().into()),
                "P_Key" => v(bth.pkey().into()),
                "FECN" => v(bth.fecn().into()),
                "BECN" => v(bth.becn().into()),
                "Resv6" => v(bth.resv6().into()),
                "DestQP" => v(bth.dest_qp().into()),
                "AckReq" => v(bth.ack_req().into()),
                "Resv7" => v(bth.resv7().into()),
                "PSN" => v(bth.psn().value().into()),
                _ => panic!("BTH.{n} is not a BTH field"),
            }
        }
        ("ICRC", "ICRC") => return v(pkt.ok()?.icrc().into()),
        _ => {}
    }
    let p = pkt.ok()?;
    let r = PacketRepr::parse(&p).ok()?;
    let syn = r.aeth.map(|a| a.syndrome);
    let gsi = GsiMad::from_packet(&r).ok();
    let mad = gsi.as_ref().map(|g| Mad::new_checked(&g.mad[..]).unwrap());
    let cm = gsi.as_ref().and_then(|g| g.cm().ok());
    Some(Ok(match (header, name) {
        ("RETH", "VA") => json!(r.reth?.va),
        ("RETH", "R_Key") => json!(r.reth?.rkey),
        ("RETH", "DMALen") => json!(r.reth?.dma_len),
        ("DETH", "Q_Key") => json!(r.deth?.qkey),
        ("DETH", "SrcQP") => json!(r.deth?.src_qp),
        ("AtomicETH", "VA") => json!(r.atomic_eth?.va),
        ("AtomicETH", "R_Key") => json!(r.atomic_eth?.rkey),
        ("AtomicETH", "SwapDt/AddDt") => json!(r.atomic_eth?.swap_add),
        ("AtomicETH", "CmpDt") => json!(r.atomic_eth?.compare),
        ("AtomicAckETH", "OrigRemDt") => json!(r.atomic_ack_eth?.orig),
        ("ImmDt", "ImmDt") => json!(r.immdt?),
        ("IETH", "R_Key") => json!(r.ieth?),
        ("AETH", "MSN") => json!(r.aeth?.msn),
        ("AETH", "Syndrome") => json!(syn?.to_u8()),
        ("AETH", "Syndrome.Reserved") => json!(syn?.to_u8() >> 7),
        ("AETH", "Syndrome.Type") => json!(match syn? {
            AethSyndrome::Ack { .. } => 0,
            AethSyndrome::RnrNak { .. } => 1,
            AethSyndrome::Nak(_) => 3,
            AethSyndrome::Reserved(b) => (b >> 5) & 3,
        }),
        ("AETH", "Syndrome.Value") => json!(match syn? {
            AethSyndrome::Ack { credits } => credits,
            AethSyndrome::RnrNak { timer } => timer,
            AethSyndrome::Nak(c) => c.code(),
            AethSyndrome::Reserved(b) => b & 0x1f,
        }),
        ("MAD", "BaseVersion") => json!(mad?.base_version()),
        ("MAD", "MgmtClass") => json!(mad?.mgmt_class().0),
        ("MAD", "ClassVersion") => json!(mad?.class_version()),
        ("MAD", "Method") => json!(mad?.method().0),
        ("MAD", "R") => json!(u8::from(mad?.method().is_response())),
        ("MAD", "Status") => json!(mad?.status()),
        ("MAD", "ClassSpecific") => json!(mad?.class_specific()),
        ("MAD", "TransactionID") => json!(mad?.transaction_id()),
        ("MAD", "AttributeID") => json!(mad?.attribute_id()),
        ("MAD", "Reserved") => json!(mad?.reserved()),
        ("MAD", "AttributeModifier") => json!(mad?.attribute_modifier()),
        (h, n) if h.starts_with("CM ") => {
            let Some(m) = cm else { return Some(Err(())) };
            match (&m.message, n) {
                (CmMessage::Req(x), "LocalCommID") => json!(x.local_comm_id),
                (CmMessage::Req(x), "ServiceID") => json!(x.service_id),
                (CmMessage::Req(x), "LocalQPN") => json!(x.local_qpn),
                (CmMessage::Req(x), "StartingPSN") => json!(x.starting_psn),
                (CmMessage::Rep(x), "LocalCommID") => json!(x.local_comm_id),
                (CmMessage::Rep(x), "RemoteCommID") => json!(x.remote_comm_id),
                (CmMessage::Rep(x), "LocalQPN") => json!(x.local_qpn),
                (CmMessage::Rep(x), "StartingPSN") => json!(x.starting_psn),
                (CmMessage::Rtu(x), "LocalCommID") => json!(x.local_comm_id),
                (CmMessage::Rtu(x), "RemoteCommID") => json!(x.remote_comm_id),
                (CmMessage::Dreq(x), "LocalCommID") => json!(x.local_comm_id),
                (CmMessage::Dreq(x), "RemoteCommID") => json!(x.remote_comm_id),
                (CmMessage::Dreq(x), "RemoteQPN/EECN") => json!(x.remote_qpn_eecn),
                (CmMessage::Drep(x), "LocalCommID") => json!(x.local_comm_id),
                (CmMessage::Drep(x), "RemoteCommID") => json!(x.remote_comm_id),
                (CmMessage::SidrReq(x), "RequestID") => json!(x.request_id),
                (CmMessage::SidrReq(x), "ServiceID") => json!(x.service_id),
                (CmMessage::SidrRep(x), "RequestID") => json!(x.request_id),
                (CmMessage::SidrRep(x), "QPN") => json!(x.qpn),
                (CmMessage::SidrRep(x), "ServiceID") => json!(x.service_id),
                (CmMessage::SidrRep(x), "Q_Key") => json!(x.qkey),
                _ => return None,
            }
        }
        _ => return None,
    }))
}

/// Headers whose every field must have an accessor above.
const STRICT: &[&str] = &[
    "BTH",
    "RETH",
    "DETH",
    "AtomicETH",
    "AtomicAckETH",
    "ImmDt",
    "IETH",
    "AETH",
    "MAD",
];

/// Every field the tool prints for the packets of these captures, where
/// the test can read it with rxe-core: the value printed is rxe-core's,
/// flipping any bit of the range the tool names changes it, and flipping
/// the bit just before or after the range does not.
/// Reserved ETH bytes rxe-core ignores: flipping them changes nothing it
/// parses.
#[test]
fn offsets_and_bits_are_where_rxe_core_reads_the_fields() {
    let mut checked: BTreeSet<(String, String)> = BTreeSet::new();
    for name in [
        "loss_write_bw_4096.pcap",
        "extra_imm_naks.pcap",
        "atomic_fadd.pcap",
        "atomic_cswap.pcap",
        "read_bw_512.pcap",
        "ud_pingpong.pcap",
        "rping.pcap",
        "udaddy.pcap",
        "l2_peer_ud.pcap",
    ] {
        let path = pcap(name);
        let recs = records(&path);
        let out = explain(&path, &[]);
        let out = by_frame(&out);
        for rec in &recs {
            let Some(p) = out.get(&rec.number) else {
                continue;
            };
            let base = parsed(rec).map(|(_, r)| format!("{r:?}"));
            for f in p["fields"].as_array().unwrap() {
                let (h, n) = (f["header"].as_str().unwrap(), f["name"].as_str().unwrap());
                let off = f["offset"].as_u64().unwrap() as usize;
                let first = f["bits"]["first"].as_u64().unwrap() as usize;
                let width = f["bits"]["width"].as_u64().unwrap() as usize;
                let range = off * 8 + first..off * 8 + first + width;
                let flipped = |pos: usize| {
                    let mut data = rec.data.clone();
                    data[pos / 8] ^= 0x80 >> (pos % 8);
                    data
                };
                if n == "Reserved" && ["RDETH", "DETH", "FETH"].contains(&h) {
                    for pos in range {
                        let data = flipped(pos);
                        let after = parsed(&Record {
                            data,
                            ..rec.clone()
                        })
                        .map(|(_, r)| format!("{r:?}"));
                        assert_eq!(after, base, "{name} frame {}: {h}.{n} is read", rec.number);
                    }
                    checked.insert((h.into(), n.into()));
                    continue;
                }
                let Some(before) = read(h, n, rec, &rec.data) else {
                    assert!(!STRICT.contains(&h), "no accessor for {h}.{n}");
                    continue;
                };
                let before = before.unwrap();
                assert_eq!(f["value"], before, "{name} frame {}: {h}.{n}", rec.number);
                // Every bit of the range is part of the field...
                for pos in range.clone() {
                    let after = read(h, n, rec, &flipped(pos)).unwrap();
                    assert!(
                        matches!(&after, Ok(v) if *v != before),
                        "{name} frame {}: flipping bit {pos} gave {h}.{n} = {after:?}, was {before}",
                        rec.number
                    );
                }
                // ... and the bits on either side are not.
                for pos in [range.start.checked_sub(1), Some(range.end)]
                    .into_iter()
                    .flatten()
                {
                    if pos / 8 >= rec.data.len() {
                        continue;
                    }
                    if let Some(Ok(after)) = read(h, n, rec, &flipped(pos)) {
                        assert_eq!(
                            after, before,
                            "{name} frame {}: bit {pos} next to {h}.{n} changed it",
                            rec.number
                        );
                    }
                }
                checked.insert((h.into(), n.into()));
            }
        }
    }
    // What the captures exercised: each transport header and the CM key fields.
    for (h, n) in [
        ("BTH", "PSN"),
        ("BTH", "Resv7"),
        ("RETH", "DMALen"),
        ("AETH", "Syndrome.Value"),
        ("AtomicETH", "CmpDt"),
        ("AtomicAckETH", "OrigRemDt"),
        ("DETH", "SrcQP"),
        ("DETH", "Reserved"),
        ("ImmDt", "ImmDt"),
        ("MAD", "TransactionID"),
        ("CM REQ (ConnectRequest)", "StartingPSN"),
        ("CM REQ (ConnectRequest)", "ServiceID"),
        ("CM REP (ConnectReply)", "LocalQPN"),
        ("CM DREQ (DisconnectRequest)", "RemoteQPN/EECN"),
        ("CM SIDR_REP (ServiceIDResReqResp)", "QPN"),
        ("IPv4", "TTL"),
        ("UDP", "Source Port"),
    ] {
        assert!(
            checked.contains(&(h.into(), n.into())),
            "{h}.{n} never checked"
        );
    }
}

/// The packets of loss_write_bw_4096.pcap called duplicates are exactly
/// the requests whose (QP, PSN) was captured before, and name that frame.
#[test]
fn retransmissions_in_loss_write_bw_are_called_duplicates() {
    let path = pcap("loss_write_bw_4096.pcap");
    let out = explain(&path, &[]);
    let out = by_frame(&out);
    let mut first: HashMap<(u32, u32), u64> = HashMap::new();
    let mut dups = 0;
    let mut resent_unseen = 0;
    let mut highest: Option<rxe_core::psn::Psn> = None;
    for rec in records(&path) {
        let Some((_, r)) = parsed(&rec) else { continue };
        let info = r.bth.opcode.info().unwrap();
        if !info.operation.is_request() {
            continue;
        }
        let p = out[&rec.number];
        let s = p["sentence"].as_str().unwrap();
        let key = (r.bth.dest_qp, r.bth.psn.value());
        match first.get(&key) {
            Some(&f) => {
                dups += 1;
                assert_eq!(p["duplicate_of"], json!(f), "frame {}: {s}", rec.number);
                assert_eq!(p["retransmission"], json!(true));
                assert!(s.contains(&format!("duplicate of frame {f}")), "{s}");
            }
            None => {
                assert!(p.get("duplicate_of").is_none(), "frame {}: {s}", rec.number);
                first.insert(key, rec.number);
                // A PSN behind the highest sent, never captured: resent
                // after being lost before the capture point.
                if highest.is_some_and(|h| r.bth.psn.is_before(h)) {
                    resent_unseen += 1;
                    assert!(s.contains("first copy is not in the capture"), "{s}");
                }
            }
        }
        if highest.is_none_or(|h| r.bth.psn.is_after(h)) {
            highest = Some(r.bth.psn);
        }
    }
    assert!(dups >= 10, "{dups} duplicates");
    assert!(resent_unseen >= 1);
}

/// Every NAK's sentence names its code; a PSN sequence error names the
/// PSN the responder expects (the NAK's PSN); an RNR NAK its delay.
#[test]
fn naks_name_their_code() {
    let mut seen = BTreeSet::new();
    for name in [
        "extra_imm_naks.pcap",
        "loss_write_bw_4096.pcap",
        "loss_read_bw_4096.pcap",
        "loss_rc_pingpong_10000.pcap",
    ] {
        let path = pcap(name);
        let out = explain(&path, &[]);
        let out = by_frame(&out);
        for rec in records(&path) {
            let Some((_, r)) = parsed(&rec) else { continue };
            let Some(a) = r.aeth else { continue };
            let p = out[&rec.number];
            let s = p["sentence"].as_str().unwrap();
            let psn = r.bth.psn.value();
            match a.syndrome {
                AethSyndrome::Nak(NakCode::PsnSequenceError) => {
                    assert!(
                        s.starts_with(&format!(
                            "NAK: PSN sequence error, the responder expects PSN {psn:#x}"
                        )),
                        "{s}"
                    );
                    assert_eq!(p["expected_psn"], json!(psn));
                    seen.insert("seq");
                }
                AethSyndrome::Nak(c) => {
                    assert!(
                        s.starts_with(&format!("NAK: {c} (code {})", c.code())),
                        "{s}"
                    );
                    seen.insert(if c == NakCode::RemoteAccessError {
                        "access"
                    } else {
                        "other"
                    });
                }
                AethSyndrome::RnrNak { timer } => {
                    assert_eq!(timer, 31);
                    assert!(s.starts_with("RNR NAK: "), "{s}");
                    assert!(s.contains("retry after 491.52 ms (timer code 31)"), "{s}");
                    seen.insert("rnr");
                }
                AethSyndrome::Ack { .. } if r.bth.opcode == Opcode::RC_ACKNOWLEDGE => {
                    assert!(
                        s.starts_with(&format!(
                            "ACK of everything through PSN {psn:#x} (MSN {})",
                            a.msn
                        )),
                        "{s}"
                    );
                    seen.insert("ack");
                }
                _ => {}
            }
        }
    }
    assert_eq!(
        seen.into_iter().collect::<Vec<_>>(),
        ["access", "ack", "other", "rnr", "seq"]
    );
}

/// WRITE messages of write_bw_4096.pcap: 4 packets of 1024 bytes; each
/// packet's position counts from the message's FIRST packet.
#[test]
fn message_positions_come_from_the_whole_capture() {
    let path = pcap("write_bw_4096.pcap");
    let out = explain(&path, &[]);
    let out = by_frame(&out);
    let mut start = None;
    let mut n = 0;
    for rec in records(&path) {
        let Some((_, r)) = parsed(&rec) else { continue };
        let info = r.bth.opcode.info().unwrap();
        if info.operation != rxe_core::wire::Operation::RdmaWrite {
            continue;
        }
        if info.position == Position::First {
            start = Some(r.bth.psn);
        }
        let s0 = start.unwrap();
        let k = s0.distance_to(r.bth.psn) + 1;
        let p = out[&rec.number];
        assert_eq!(p["packet"], json!(k));
        assert_eq!(p["packets"], json!(4));
        assert_eq!(p["message_psn"], json!(s0.value()));
        assert_eq!(p["expected_psn"], json!(r.bth.psn.next().value()));
        let pos = ["first", "middle", "middle", "last"][k as usize - 1];
        let s = p["sentence"].as_str().unwrap();
        assert!(
            s.starts_with(&format!(
                "RC RDMA WRITE {pos} packet {k} of 4 of the message starting at PSN {:#x}",
                s0.value()
            )),
            "{s}"
        );
        assert_eq!(s.contains("; ACK requested"), r.bth.ack_req, "{s}");
        n += 1;
    }
    assert!(n >= 40);
}

/// `--frames` prints only those frames, with the context of the whole
/// capture; the text view shows the sentence and every field.
#[test]
fn frames_filter_and_text_view() {
    let path = pcap("loss_write_bw_4096.pcap");
    let all = explain(&path, &[]);
    let some = explain(&path, &["--frames", "3,39-41"]);
    let frames: Vec<u64> = some.iter().map(|p| p["frame"].as_u64().unwrap()).collect();
    assert_eq!(frames, [3, 39, 40, 41]);
    let all = by_frame(&all);
    for p in &some {
        assert_eq!(*p, *all[&p["frame"].as_u64().unwrap()]);
    }
    let (text, err, ok) = run(&[
        "dump",
        "--explain",
        "--frames",
        "41",
        path.to_str().unwrap(),
    ]);
    assert!(ok, "{err}");
    assert!(text.starts_with("Frame 41 at "), "{text}");
    let p = all[&41];
    assert!(text.contains(p["sentence"].as_str().unwrap()));
    for f in p["fields"].as_array().unwrap() {
        let line = text
            .lines()
            .find(|l| {
                let w: Vec<&str> = l.split_whitespace().collect();
                w.first() == Some(&f["offset"].to_string().as_str())
                    && l.contains(&format!(" {} ", f["name"].as_str().unwrap()))
            })
            .unwrap_or_else(|| panic!("no line for {f}"));
        assert!(line.contains(f["meaning"].as_str().unwrap()), "{line}");
    }
    // --frames needs --explain.
    let (_, _, ok) = run(&["dump", "--frames", "3", path.to_str().unwrap()]);
    assert!(!ok);
}

/// A damaged packet is shown as far as it parses, with a note; a frame
/// cut short is still listed; nothing panics.
#[test]
fn damaged_packets_are_shown_as_far_as_they_parse() {
    let recs = records(&pcap("read_bw_512.pcap"));
    let good = &recs[0];
    // Cut the RoCE packet inside its RETH, fixing the IPv4 and UDP
    // lengths so the framing still parses.
    let bth_at = 14 + 20 + 8;
    let new_len = 12 + 8 + 4;
    let mut cut = good.data[..bth_at + new_len].to_vec();
    cut[16..18].copy_from_slice(&((20 + 8 + new_len) as u16).to_be_bytes());
    cut[38..40].copy_from_slice(&((8 + new_len) as u16).to_be_bytes());
    // And a frame cut short at 50 bytes (its IP length no longer fits).
    let short = good.data[..50].to_vec();
    let path = Path::new(env!("CARGO_TARGET_TMPDIR")).join("dump_explain-damaged.pcap");
    let mut w = CaptureWriter::create(&path, good.link_type).unwrap();
    for (i, d) in [&good.data, &cut, &short].into_iter().enumerate() {
        w.write(
            good.timestamp + std::time::Duration::from_millis(i as u64),
            d,
        )
        .unwrap();
    }
    w.finish().unwrap();
    let out = explain(&path, &[]);
    assert_eq!(out.len(), 3);
    let cut = &out[1];
    assert!(
        cut["note"].as_str().unwrap().contains("RETH cut short"),
        "{cut}"
    );
    assert!(cut["sentence"]
        .as_str()
        .unwrap()
        .contains("a receiver drops it"));
    assert_eq!(
        field(cut, "BTH", "PSN")["value"],
        field(&out[0], "BTH", "PSN")["value"]
    );
    let short = &out[2];
    assert!(
        short["note"].as_str().unwrap().contains("does not parse"),
        "{short}"
    );
    assert!(short["fields"].as_array().unwrap().is_empty());
    let (text, err, ok) = run(&["dump", "--explain", path.to_str().unwrap()]);
    assert!(ok);
    assert!(text.contains("NOTE: malformed RoCE packet"), "{text}");
    assert!(err.contains("2 malformed"), "{err}");
}
