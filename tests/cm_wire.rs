//! The CM MADs of the bundled rdma_cm captures (tests/data/pcaps: rping,
//! ucmatose, udaddy and perftest over Linux 6.1 rdma_rxe, see SUMMARY.txt),
//! taken apart with `rxe_core::mad`:
//!
//! * every UD packet to QP 1 holds a 256-byte CM MAD that parses, and
//!   building it again from its parsed form gives the captured MAD byte for
//!   byte, and the captured frame (Ethernet to ICRC) byte for byte;
//! * the message sequences (REQ, REP, RTU, ..., DREQ, DREP; SIDR_REQ,
//!   SIDR_REP) and their fields agree with each other, with the IP and UDP
//!   headers around them (rdma_cm's private-data header, GIDs, service IDs
//!   from the port) and with the data traffic that follows (QPNs, starting
//!   PSNs, the UD Q_Key);
//! * the values tshark 4.0 shows for these frames, where tshark decodes the
//!   field correctly (see `tshark_misreads_the_flow_label`).

use rxe_core::mad::cm::{
    CmMessage, CmPath, Drep, Dreq, Rep, Req, Rtu, SidrRep, SidrReq, SidrStatus,
    TransportServiceType,
};
use rxe_core::mad::{CmMad, CmaHeader, GsiMad, PortSpace, GSI_QKEY, GSI_QPN, MAD_LEN};
use rxe_core::wire::{FrameRepr, Opcode, PacketRepr, RoceFrame};
use rxe_net::capture::CaptureReader;
use rxe_tests::pcap_dir;
use std::net::{IpAddr, Ipv4Addr};

/// The captures that carry CM MADs.
const CM_CAPTURES: [&str; 4] = [
    "rping.pcap",
    "ucmatose.pcap",
    "udaddy.pcap",
    "perftest_rdma_cm.pcap",
];

/// Guest A (servers) and guest B (clients) in every capture.
const A: Ipv4Addr = Ipv4Addr::new(10, 99, 0, 11);
const B: Ipv4Addr = Ipv4Addr::new(10, 99, 0, 12);

/// One RoCE packet of a capture.
#[derive(Debug, Clone)]
struct Seen {
    frame: u64,
    src: IpAddr,
    dst: IpAddr,
    opcode: Opcode,
    dest_qp: u32,
    psn: u32,
    qkey: Option<u32>,
    udp_src_port: u16,
    /// The CM MAD, if the packet went to QP 1.
    cm: Option<CmMad>,
}

impl Seen {
    fn from(&self, ip: Ipv4Addr) -> bool {
        self.src == IpAddr::V4(ip)
    }
}

/// Every RoCE packet of a capture; each MAD is parsed, re-built and
/// compared with the capture (MAD and whole frame).
fn packets(file: &str) -> Vec<Seen> {
    let path = pcap_dir().join(file);
    let mut out = vec![];
    for rec in CaptureReader::open(&path).unwrap() {
        let rec = rec.unwrap();
        let at = format!("{file} frame {}", rec.number);
        let f = match RoceFrame::parse(rec.link_type, &rec.data) {
            Ok(f) => f,
            Err(e) if e.is_not_roce() => continue,
            Err(e) => panic!("{at}: {e}"),
        };
        let p = f.packet().unwrap();
        let repr = PacketRepr::parse(&p).unwrap();
        let mut seen = Seen {
            frame: rec.number,
            src: f.ip.src(),
            dst: f.ip.dst(),
            opcode: repr.bth.opcode,
            dest_qp: repr.bth.dest_qp,
            psn: repr.bth.psn.value(),
            qkey: repr.deth.map(|d| d.qkey),
            udp_src_port: f.udp_src_port,
            cm: None,
        };
        if repr.bth.dest_qp == GSI_QPN {
            let g = GsiMad::from_packet(&repr).unwrap_or_else(|e| panic!("{at}: {e}"));
            assert_eq!(g.src_qp, GSI_QPN, "{at}: sent by the GSI QP");
            assert_eq!(g.pkey, 0xffff, "{at}");
            let m = g.cm().unwrap_or_else(|e| panic!("{at}: {e}"));
            // The MAD again from its parsed form: byte for byte.
            let mad = m.to_bytes();
            assert_eq!(&mad, g.mad, "{at}: re-emitted MAD");
            // And the whole frame, ICRC included, around it.
            let again = GsiMad { mad: &mad, ..g }.to_packet(repr.bth.dest_qp);
            let frame: FrameRepr = f.repr();
            let mut buf = vec![0u8; frame.buffer_len(again.buffer_len())];
            let n = frame.emit(&again, &mut buf).unwrap();
            assert_eq!(buf[..n], rec.data[..n], "{at}: re-built frame");
            assert_eq!(n, 14 + 20 + 8 + 12 + 8 + MAD_LEN + 4, "{at}");
            seen.cm = Some(m);
        }
        out.push(seen);
    }
    out
}

/// The CM MADs of a capture, in order.
fn mads(v: &[Seen]) -> Vec<(&Seen, &CmMad)> {
    v.iter()
        .filter_map(|s| s.cm.as_ref().map(|m| (s, m)))
        .collect()
}

fn v4_gid(ip: Ipv4Addr) -> std::net::Ipv6Addr {
    ip.to_ipv6_mapped()
}

/// The transaction ID Linux's CM gives the messages of an exchange it
/// starts: its MAD agent's high TID (here 2) over the local communication
/// ID as the little-endian host holds it (`cm_form_tid`).
fn linux_tid(local_comm_id: u32) -> u64 {
    (2 << 32) | u64::from(local_comm_id.swap_bytes())
}

/// The flow label rdma_cm gives a RoCE v2 connection
/// (`cma_get_roce_udp_flow_label`): a hash of the two ports.
fn roce_flow_label(src_port: u16, dst_port: u16) -> u32 {
    (u32::from(src_port) * 31 + u32::from(dst_port)) & 0xf_ffff
}

/// The UDP source port Linux gives a RoCE v2 QP with this flow label
/// (`rdma_flow_label_to_udp_sport`): the label folded into 14 bits, in the
/// range 0xC000..=0xFFFF.
fn udp_sport(flow_label: u32) -> u16 {
    let low = flow_label & 0x3fff;
    let high = (flow_label & 0xf_c000) >> 14;
    ((low ^ high) | 0xc000) as u16
}

/// Both ends of an RC connection send its data from the UDP source port
/// derived from the REQ's flow label.
fn check_udp_port(v: &[Seen], req: &Req, qpns: [u32; 2]) {
    let want = udp_sport(req.primary_path.flow_label);
    let data: Vec<_> = v
        .iter()
        .filter(|s| s.cm.is_none() && qpns.contains(&s.dest_qp))
        .collect();
    assert!(!data.is_empty());
    for s in data {
        assert_eq!(s.udp_src_port, want, "frame {}", s.frame);
    }
}

fn req_of(m: &CmMad) -> &Req {
    match &m.message {
        CmMessage::Req(r) => r,
        other => panic!("not a REQ: {other}"),
    }
}
fn rep_of(m: &CmMad) -> &Rep {
    match &m.message {
        CmMessage::Rep(r) => r,
        other => panic!("not a REP: {other}"),
    }
}
fn rtu_of(m: &CmMad) -> &Rtu {
    match &m.message {
        CmMessage::Rtu(r) => r,
        other => panic!("not an RTU: {other}"),
    }
}
fn dreq_of(m: &CmMad) -> &Dreq {
    match &m.message {
        CmMessage::Dreq(r) => r,
        other => panic!("not a DREQ: {other}"),
    }
}
fn drep_of(m: &CmMad) -> &Drep {
    match &m.message {
        CmMessage::Drep(r) => r,
        other => panic!("not a DREP: {other}"),
    }
}

/// What every REQ from Linux's rdma_cm over rdma_rxe in these captures
/// has in common, checked against the packet around it.
fn check_req(s: &Seen, m: &CmMad, port: u16) -> CmaHeader {
    let r = req_of(m);
    assert_eq!(m.transaction_id, linux_tid(r.local_comm_id), "{}", s.frame);
    assert_eq!(
        PortSpace::from_service_id(r.service_id),
        Some((PortSpace::TCP, port))
    );
    assert_eq!(r.transport_service_type, TransportServiceType::Rc);
    assert_eq!(r.local_qkey, 0);
    assert_eq!((r.local_eecn, r.remote_eecn), (0, 0));
    assert_eq!(r.pkey, 0xffff);
    assert_eq!(
        r.mtu(),
        Some(rxe_core::types::Mtu::Mtu1024),
        "path MTU 1024"
    );
    assert_eq!(
        (r.remote_cm_response_timeout, r.local_cm_response_timeout),
        (20, 20)
    );
    assert_eq!(r.max_cm_retries, 15);
    assert!(!r.srq && !r.rdc_exists && !r.end_to_end_flow_control);
    // The private data begins with rdma_cm's header, whose addresses are
    // the IP header's; the destination port is the service ID's.
    let cma = CmaHeader::parse(&r.private_data[..]).unwrap();
    assert_eq!((cma.src, cma.dst), (s.src, s.dst), "frame {}", s.frame);
    assert!(
        r.private_data[36..].iter().all(|&b| b == 0),
        "no user private data"
    );
    // The primary path: IPv4-mapped GIDs of the two ends, the permissive
    // LID, hop limit 64, the port-hash flow label; no alternate path.
    let IpAddr::V4(src) = s.src else { panic!() };
    let IpAddr::V4(dst) = s.dst else { panic!() };
    assert_eq!(
        r.primary_path,
        CmPath {
            local_lid: 0xffff,
            remote_lid: 0xffff,
            local_gid: v4_gid(src),
            remote_gid: v4_gid(dst),
            flow_label: roce_flow_label(cma.src_port, port),
            packet_rate: 0,
            traffic_class: 0,
            hop_limit: 64,
            sl: 0,
            subnet_local: false,
            local_ack_timeout: 19,
        },
        "frame {}",
        s.frame
    );
    assert!(r.alternate_path.is_empty());
    cma
}

/// REQ, REP, RTU of one connection, checked against each other; returns
/// (active QPN, first PSN the active side sends, passive QPN, first PSN the
/// passive side sends). Note the crossing: each side sends from the
/// starting PSN of the message it *received* (the passive side from the
/// REQ's, the active side from the REP's), as Linux's CM sets `sq_psn`.
fn check_establishment(
    (s1, req): (&Seen, &CmMad),
    (s2, rep): (&Seen, &CmMad),
    (s3, rtu): (&Seen, &CmMad),
) -> (u32, u32, u32, u32) {
    let (q, p, t) = (req_of(req), rep_of(rep), rtu_of(rtu));
    // B asks, A answers, B confirms; one transaction ID for all three.
    assert!(s1.from(B) && s2.from(A) && s3.from(B));
    assert_eq!(rep.transaction_id, req.transaction_id);
    assert_eq!(rtu.transaction_id, req.transaction_id);
    assert_eq!(p.remote_comm_id, q.local_comm_id);
    assert_eq!(
        (t.local_comm_id, t.remote_comm_id),
        (q.local_comm_id, p.local_comm_id)
    );
    assert!(t.private_data.is_zero());
    assert_eq!(p.local_qkey, 0);
    assert_eq!(p.failover_accepted, 0);
    assert_eq!(p.target_ack_delay, 15);
    assert_eq!(p.rnr_retry_count, 7);
    assert!(!p.srq);
    // Each side's CA GUID is its MAC address as an EUI-64 (52:54:00:99:00:xx).
    assert_eq!(q.local_ca_guid, 0x5054_00ff_fe99_0012);
    assert_eq!(p.local_ca_guid, 0x5054_00ff_fe99_0011);
    (q.local_qpn, p.starting_psn, p.local_qpn, q.starting_psn)
}

/// DREQ and DREP of one connection: the DREQ names the peer's QP.
fn check_release(
    (s1, dreq): (&Seen, &CmMad),
    (s2, drep): (&Seen, &CmMad),
    ids: (u32, u32),
    peer_qpn: u32,
) {
    let (d, r) = (dreq_of(dreq), drep_of(drep));
    assert_eq!((s1.src, s1.dst), (s2.dst, s2.src));
    assert_eq!((d.local_comm_id, d.remote_comm_id), ids);
    assert_eq!((r.local_comm_id, r.remote_comm_id), (ids.1, ids.0));
    assert_eq!(d.remote_qpn_eecn, peer_qpn);
    assert_eq!(drep.transaction_id, dreq.transaction_id);
    assert!(d.private_data.is_zero() && r.private_data.is_zero());
}

/// Request packets (not ACKs or READ responses) on a connection.
fn requests(v: &[Seen], from: Ipv4Addr, qpn: u32) -> Vec<&Seen> {
    v.iter()
        .filter(|s| s.cm.is_none() && s.from(from) && s.dest_qp == qpn)
        .filter(|s| {
            let n = s.opcode.name().unwrap_or("");
            !n.contains("ACKNOWLEDGE") && !n.contains("READ_RESPONSE")
        })
        .collect()
}

#[test]
fn every_mad_parses_and_rebuilds_byte_for_byte() {
    let mut total = 0;
    for file in CM_CAPTURES {
        let v = packets(file);
        let m = mads(&v);
        assert!(!m.is_empty(), "{file}");
        // Each GSI QP numbers its sends one after the other (from where the
        // previous program's left off: the captures ran one after another).
        for from in [A, B] {
            let psns: Vec<u32> = m
                .iter()
                .filter(|(s, _)| s.from(from))
                .map(|(s, _)| s.psn)
                .collect();
            let first = psns[0];
            let want: Vec<u32> = (first..first + psns.len() as u32).collect();
            assert_eq!(psns, want, "{file}");
        }
        assert!(m.iter().all(|(s, _)| s.qkey == Some(GSI_QKEY)));
        total += m.len();
    }
    // 5 (rping) + 5 (ucmatose) + 2 (udaddy) + 10 (perftest): SUMMARY.txt's CM lines.
    assert_eq!(total, 22);
}

#[test]
fn rping_connects_moves_data_and_disconnects() {
    let v = packets("rping.pcap");
    let m = mads(&v);
    let kinds: Vec<String> = m
        .iter()
        .map(|(s, m)| format!("{} {}", s.frame, m.message.attribute_id()))
        .collect();
    assert_eq!(kinds, ["1 REQ", "2 REP", "3 RTU", "46 DREQ", "47 DREP"]);
    let cma = check_req(m[0].0, m[0].1, 7174);
    assert_eq!(cma.src_port, 0x8e7d);
    let r = req_of(m[0].1);
    // rping's connection parameters: one outstanding READ each way, retry
    // and RNR retry 7.
    assert_eq!((r.responder_resources, r.initiator_depth), (1, 1));
    assert_eq!((r.retry_count, r.rnr_retry_count), (7, 7));
    let p = rep_of(m[1].1);
    assert_eq!((p.responder_resources, p.initiator_depth), (1, 1));
    let (b_qpn, b_psn, a_qpn, a_psn) = check_establishment(m[0], m[1], m[2]);
    assert_eq!((b_qpn, a_qpn), (0x21, 0x21));
    // The REQ said 0xe0b806, the REP 0x82a096: A sends from the first, B
    // from the second.
    assert_eq!((b_psn, a_psn), (0x82a096, 0xe0b806));
    // tshark's values for the REQ and REP.
    assert_eq!(r.local_comm_id, 0x71fb_ea41);
    assert_eq!(r.service_id, 0x0000_0000_0106_1c06);
    assert_eq!(p.local_comm_id, 0x06f5_9e2f);
    assert_eq!(m[0].1.transaction_id, 0x0000_0002_41ea_fb71);
    // The client (B) disconnects; the DREQ names the server's QP.
    check_release(m[3], m[4], (r.local_comm_id, p.local_comm_id), a_qpn);
    assert!(m[3].0.from(B));

    // The data traffic between RTU and DREQ uses the QPNs and starting
    // PSNs the REQ and REP announced: B's requests go to A's QP and start
    // at the REP's PSN, A's (RDMA READ and WRITE of rping's server) to B's
    // QP from the REQ's.
    let data: Vec<_> = v.iter().filter(|s| s.cm.is_none()).collect();
    assert_eq!(data.len(), 42);
    assert!(data.iter().all(|s| s.frame > 3 && s.frame < 46));
    assert!(data
        .iter()
        .all(|s| s.dest_qp == if s.from(B) { a_qpn } else { b_qpn }));
    let from_b = requests(&v, B, a_qpn);
    let from_a = requests(&v, A, b_qpn);
    assert_eq!(from_b[0].psn, b_psn);
    assert_eq!(from_a[0].psn, a_psn);
    assert_eq!(from_b[0].opcode, Opcode::RC_SEND_ONLY);
    assert_eq!(from_a[0].opcode, Opcode::RC_RDMA_READ_REQUEST);
    // Both QPs send from UDP port 56620 (0xdd2c), the flow label folded.
    check_udp_port(&v, r, [a_qpn, b_qpn]);
    assert_eq!(udp_sport(r.primary_path.flow_label), 56620);
    // The GSI QPs send from a port of their own.
    assert!(m.iter().all(|(s, _)| s.udp_src_port == 55410));
}

#[test]
fn ucmatose_server_disconnects() {
    let v = packets("ucmatose.pcap");
    let m = mads(&v);
    let kinds: Vec<_> = m
        .iter()
        .map(|(_, m)| m.message.attribute_id().to_string())
        .collect();
    assert_eq!(kinds, ["REQ", "REP", "RTU", "DREQ", "DREP"]);
    // ucmatose's default port 7471.
    check_req(m[0].0, m[0].1, 7471);
    let (b_qpn, b_psn, a_qpn, a_psn) = check_establishment(m[0], m[1], m[2]);
    let (q, p) = (req_of(m[0].1), rep_of(m[1].1));
    // Here the server (A) sends the DREQ, with a transaction of its own.
    assert!(m[3].0.from(A));
    check_release(m[3], m[4], (p.local_comm_id, q.local_comm_id), b_qpn);
    assert_eq!(m[3].1.transaction_id, linux_tid(p.local_comm_id));
    assert_ne!(m[3].1.transaction_id, m[0].1.transaction_id);
    let from_b = requests(&v, B, a_qpn);
    let from_a = requests(&v, A, b_qpn);
    assert_eq!(
        (from_b.len(), from_a.len()),
        (3, 3),
        "ucmatose -C 3 both ways"
    );
    assert_eq!(from_b[0].psn, b_psn);
    assert_eq!(from_a[0].psn, a_psn);
}

#[test]
fn udaddy_resolves_a_ud_service() {
    let v = packets("udaddy.pcap");
    let m = mads(&v);
    assert_eq!(m.len(), 2);
    let (s1, req) = m[0];
    let (s2, rep) = m[1];
    let (CmMessage::SidrReq(q), CmMessage::SidrRep(r)) = (&req.message, &rep.message) else {
        panic!("{req} / {rep}")
    };
    let (q, r): (&SidrReq, &SidrRep) = (q, r);
    assert!(s1.from(B) && s2.from(A));
    assert_eq!(req.transaction_id, linux_tid(q.request_id));
    assert_eq!(rep.transaction_id, req.transaction_id);
    // The UDP port space, rdma_cm's header with the IP header's addresses.
    assert_eq!(q.service_id, PortSpace::UDP.service_id(7174));
    assert_eq!(q.service_id, 0x0000_0000_0111_1c06);
    assert_eq!(q.pkey, 0xffff);
    let cma = CmaHeader::parse(&q.private_data[..]).unwrap();
    assert_eq!((cma.src, cma.dst), (s1.src, s1.dst));
    assert!(q.private_data[36..].iter().all(|&b| b == 0));
    // The answer: success, the server's UD QP and rdma_cm's UDP Q_Key.
    assert_eq!(r.request_id, q.request_id);
    assert_eq!(r.status, SidrStatus::SUCCESS);
    assert_eq!(r.service_id, q.service_id);
    assert_eq!(r.qpn, 0x23);
    assert_eq!(r.qkey, 0x0123_4567, "RDMA_UDP_QKEY");
    assert_eq!((r.additional_info_length, r.vendor_id), (0, 0));
    assert!(r.private_data.is_zero() && r.additional_info.is_zero());
    // ... which is where B's datagrams go, with that Q_Key.
    let to_a: Vec<_> = v.iter().filter(|s| s.cm.is_none() && s.from(B)).collect();
    assert_eq!(to_a.len(), 3);
    for s in to_a {
        assert_eq!(s.opcode, Opcode::UD_SEND_ONLY_WITH_IMMEDIATE);
        assert_eq!((s.dest_qp, s.qkey), (r.qpn, Some(r.qkey)));
    }
    assert_eq!(
        m[0].1.describe(),
        "CM SIDR_REQ request_id=0x73fbea41 service_id=0x0000000001111c06"
    );
    assert_eq!(
        m[1].1.describe(),
        "CM SIDR_REP request_id=0x73fbea41 status=0 (success) qpn=0x000023 qkey=0x01234567"
    );
}

#[test]
fn perftest_makes_two_connections() {
    let v = packets("perftest_rdma_cm.pcap");
    let m = mads(&v);
    let kinds: Vec<_> = m
        .iter()
        .map(|(_, m)| m.message.attribute_id().to_string())
        .collect();
    assert_eq!(
        kinds,
        ["REQ", "REP", "RTU", "REQ", "REP", "RTU", "DREQ", "DREP", "DREQ", "DREP"]
    );
    // perftest's default port 18515, both times.
    check_req(m[0].0, m[0].1, 18515);
    check_req(m[3].0, m[3].1, 18515);
    let first = check_establishment(m[0], m[1], m[2]);
    let second = check_establishment(m[3], m[4], m[5]);
    let ids = |i: usize| {
        (
            req_of(m[i].1).local_comm_id,
            rep_of(m[i + 1].1).local_comm_id,
        )
    };
    // The client tears down the second connection first.
    check_release(m[6], m[7], ids(3), second.2);
    check_release(m[8], m[9], ids(0), first.2);
    // The first connection carries perftest's exchange of parameters (SEND
    // ping-pong, 11 each way), the second the ib_send_bw data (-n 10 SENDs
    // from the client, ACKs only back); each from the starting PSNs.
    let (b1, a1) = (requests(&v, B, first.2), requests(&v, A, first.0));
    assert_eq!((b1.len(), a1.len()), (11, 11));
    assert_eq!((b1[0].psn, a1[0].psn), (first.1, first.3));
    let (b2, a2) = (requests(&v, B, second.2), requests(&v, A, second.0));
    assert_eq!((b2.len(), a2.len()), (10, 0));
    assert_eq!(b2[0].psn, second.1);
    assert!(b2.iter().all(|s| s.opcode == Opcode::RC_SEND_ONLY));
    check_udp_port(&v, req_of(m[0].1), [first.0, first.2]);
    check_udp_port(&v, req_of(m[3].1), [second.0, second.2]);
}

#[test]
fn tshark_misreads_the_flow_label() {
    // tshark 4.0 shows rping's REQ with "Primary Flow Label: 0x0015d" and
    // "Primary Packet Rate: 0x15": its dissector reads the flow label as a
    // 16-bit item under a 32-bit mask. The field is 20 bits at byte 88 of
    // the data (IBTA table 106; Linux's CM_REQ_PRIMARY_FLOW_LABEL), the
    // packet rate the low 6 bits of byte 91; the kernel put the hash of the
    // ports there (0x8e7d * 31 + 7174), and left the rate 0.
    let v = packets("rping.pcap");
    let r = req_of(mads(&v)[0].1);
    assert_eq!(r.primary_path.flow_label, 0x15d29);
    assert_eq!(r.primary_path.flow_label, roce_flow_label(0x8e7d, 7174));
    assert_eq!(r.primary_path.packet_rate, 0);
}
