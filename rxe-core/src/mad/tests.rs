//! Golden bytes from a real capture, the reserved-bit layout of every CM
//! message, typed errors, and property tests (round trips, arbitrary bytes).

use super::cm::*;
use super::*;
use crate::psn::Psn;
use proptest::prelude::*;
use std::net::Ipv6Addr;

fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

/// A MAD from its hex, zero-filled to 256 bytes.
fn mad(s: &str) -> [u8; MAD_LEN] {
    let mut m = [0u8; MAD_LEN];
    let b = hex(s);
    m[..b.len()].copy_from_slice(&b);
    m
}

/// The REQ of tests/data/pcaps/rping.pcap (frame 1, Linux 6.1 rdma_cm,
/// 10.99.0.12 -> 10.99.0.11:7174), up to its last non-zero byte.
const RPING_REQ: &str = "01070203000000000000000241eafb71001000000000000071fbea4100000000\
    0000000001061c06505400fffe99001200000000000000000000210100000001\
    000000a0e0b806a7ffff37f0ffffffff00000000000000000000ffff0a63000c\
    00000000000000000000ffff0a63000b15d29000004000980000000000000000\
    0000000000000000000000000000000000000000000000000000000000000000\
    0000000000408e7d0000000000000000000000000a63000c0000000000000000\
    000000000a63000b";

/// The REP answering it (frame 2).
const RPING_REP: &str = "01070203000000000000000241eafb71001300000000000006f59e2f71fbea41\
    00000000000021000000000082a09600010178e0505400fffe990011";

#[test]
fn rping_req_golden() {
    let bytes = mad(RPING_REQ);
    let m = CmMad::parse(&bytes).unwrap();
    assert_eq!(m.transaction_id, 0x0000_0002_41ea_fb71);
    let CmMessage::Req(r) = m.message else {
        panic!("{m}")
    };
    let v4 = |s: &str| s.parse::<std::net::Ipv4Addr>().unwrap().to_ipv6_mapped();
    let want = Req {
        local_comm_id: 0x71fb_ea41,
        vendor_id: 0,
        service_id: 0x0000_0000_0106_1c06,
        local_ca_guid: 0x5054_00ff_fe99_0012,
        local_qkey: 0,
        local_qpn: 0x21,
        responder_resources: 1,
        local_eecn: 0,
        initiator_depth: 1,
        remote_eecn: 0,
        remote_cm_response_timeout: 20,
        transport_service_type: TransportServiceType::Rc,
        end_to_end_flow_control: false,
        starting_psn: 0xe0b806,
        local_cm_response_timeout: 20,
        retry_count: 7,
        pkey: 0xffff,
        path_mtu: 3,
        rdc_exists: false,
        rnr_retry_count: 7,
        max_cm_retries: 15,
        srq: false,
        extended_transport_type: 0,
        primary_path: CmPath {
            local_lid: 0xffff,
            remote_lid: 0xffff,
            local_gid: v4("10.99.0.12"),
            remote_gid: v4("10.99.0.11"),
            flow_label: 0x15d29,
            packet_rate: 0,
            traffic_class: 0,
            hop_limit: 64,
            sl: 0,
            subnet_local: false,
            local_ack_timeout: 19,
        },
        alternate_path: CmPath::default(),
        sap_supported: false,
        private_data: FixedBytes::from_prefix(&hex(
            "00408e7d0000000000000000000000000a63000c0000000000000000000000000a63000b",
        ))
        .unwrap(),
    };
    assert_eq!(r, want);
    assert_eq!(r.mtu(), Some(crate::types::Mtu::Mtu1024));
    assert_eq!(timeout(r.remote_cm_response_timeout).as_millis(), 4294);
    assert_eq!(m.to_bytes(), bytes, "re-emitted byte for byte");
    assert_eq!(
        m.describe(),
        "CM REQ local_comm_id=0x71fbea41 service_id=0x0000000001061c06 qpn=0x000021 psn=0xe0b806"
    );
    let shown = m.to_string();
    for s in [
        "CM REQ tid=0x0000000241eafb71",
        "local_ca_guid=0x505400fffe990012",
        "path_mtu=3",
        "primary=[local_lid=0xffff remote_lid=0xffff local_gid=10.99.0.12 remote_gid=10.99.0.11 flow_label=0x15d29",
        "private_data=00408e7d",
        "(+56 zero bytes)",
    ] {
        assert!(shown.contains(s), "{s:?} not in {shown}");
    }
    assert!(!shown.contains("alternate="), "{shown}");
    let cma = CmaHeader::parse(m.message.private_data()).unwrap();
    assert_eq!(cma.to_string(), "rdma_cm 10.99.0.12:36477 -> 10.99.0.11");
    assert_eq!(
        PortSpace::from_service_id(r.service_id),
        Some((PortSpace::TCP, 7174))
    );
}

#[test]
fn rping_rep_golden() {
    let bytes = mad(RPING_REP);
    let m = CmMad::parse(&bytes).unwrap();
    let CmMessage::Rep(r) = m.message else {
        panic!("{m}")
    };
    assert_eq!(
        r,
        Rep {
            local_comm_id: 0x06f5_9e2f,
            remote_comm_id: 0x71fb_ea41,
            local_qkey: 0,
            local_qpn: 0x21,
            vendor_id: 0,
            local_eecn: 0,
            starting_psn: 0x82a096,
            responder_resources: 1,
            initiator_depth: 1,
            target_ack_delay: 15,
            failover_accepted: 0,
            end_to_end_flow_control: false,
            rnr_retry_count: 7,
            srq: false,
            local_ca_guid: 0x5054_00ff_fe99_0011,
            private_data: FixedBytes::zeroed(),
        }
    );
    assert_eq!(m.to_bytes(), bytes);
    assert_eq!(m.message.remote_comm_id(), Some(0x71fb_ea41));
    assert!(m.to_string().contains("private_data=(196 zero bytes)"));
}

/// Every data byte's mask of the bits a message uses (the rest are
/// reserved): what emitting the parse of all-ones data keeps.
fn used_bits(attr: AttributeId) -> [u8; MAD_DATA_LEN] {
    let m = CmMessage::parse(attr, &[0xff; MAD_DATA_LEN]).unwrap();
    let mut out = [0u8; MAD_DATA_LEN];
    m.emit(&mut out);
    out
}

#[test]
fn reserved_bits_of_every_message() {
    // (attribute, [(byte, mask of used bits)] for the bytes not fully used),
    // from IBTA tables 106-120 and Linux's ibta_vol1_c12.h.
    let partial: [(AttributeId, &[(usize, u8)]); 11] = [
        (
            AttributeId::REQ,
            &[
                (4, 0),
                (24, 0),
                (25, 0),
                (26, 0),
                (27, 0),
                (90, 0xf0),
                (91, 0x3f),
                (94, 0xf8),
                (95, 0xf8),
                (134, 0xf0),
                (135, 0x3f),
                (138, 0xf8),
                (139, 0xfc),
            ],
        ),
        (AttributeId::MRA, &[(8, 0xc0), (9, 0xf8)]),
        (AttributeId::REJ, &[(8, 0xc0), (9, 0xfe)]),
        (AttributeId::REP, &[(27, 0xf0)]),
        (AttributeId::RTU, &[]),
        (AttributeId::DREQ, &[(11, 0)]),
        (AttributeId::DREP, &[]),
        (AttributeId::SIDR_REQ, &[(6, 0), (7, 0)]),
        (AttributeId::SIDR_REP, &[]),
        (
            AttributeId::LAP,
            &[
                (8, 0),
                (9, 0),
                (10, 0),
                (11, 0),
                (15, 0xf8),
                (16, 0),
                (17, 0),
                (18, 0),
                (19, 0),
                (58, 0xf0),
                (61, 0x3f),
                (62, 0xf8),
                (63, 0xf8),
            ],
        ),
        (AttributeId::APR, &[(10, 0), (11, 0)]),
    ];
    for (attr, bytes) in partial {
        let mut want = [0xffu8; MAD_DATA_LEN];
        for &(at, mask) in bytes {
            want[at] = mask;
        }
        let got = used_bits(attr);
        let diff: Vec<_> = (0..MAD_DATA_LEN)
            .filter(|&i| got[i] != want[i])
            .map(|i| (i, got[i], want[i]))
            .collect();
        assert!(diff.is_empty(), "{attr}: (byte, got, want) {diff:x?}");
    }
}

#[test]
fn private_data_sizes() {
    let sizes = [
        (AttributeId::REQ, 92),
        (AttributeId::MRA, 222),
        (AttributeId::REJ, 148),
        (AttributeId::REP, 196),
        (AttributeId::RTU, 224),
        (AttributeId::DREQ, 220),
        (AttributeId::DREP, 224),
        (AttributeId::SIDR_REQ, 216),
        (AttributeId::SIDR_REP, 136),
        (AttributeId::LAP, 168),
        (AttributeId::APR, 148),
    ];
    for (attr, n) in sizes {
        let m = CmMessage::parse(attr, &[0; MAD_DATA_LEN]).unwrap();
        assert_eq!(m.private_data().len(), n, "{attr}");
        assert_eq!(m.attribute_id(), attr);
        // The private data is the last field: it ends the MAD.
        let mut d = [0u8; MAD_DATA_LEN];
        d[MAD_DATA_LEN - n] = 0xab;
        d[MAD_DATA_LEN - 1] = 0xcd;
        let m = CmMessage::parse(attr, &d).unwrap();
        assert_eq!(m.private_data()[0], 0xab, "{attr}");
        assert_eq!(m.private_data()[n - 1], 0xcd, "{attr}");
    }
}

#[test]
fn single_fields_land_where_the_spec_says() {
    let data = |m: CmMessage| {
        let mut d = [0u8; MAD_DATA_LEN];
        m.emit(&mut d);
        d
    };
    let zero = |attr| CmMessage::parse(attr, &[0; MAD_DATA_LEN]).unwrap();
    let CmMessage::Req(mut req) = zero(AttributeId::REQ) else {
        unreachable!()
    };
    req.transport_service_type = TransportServiceType::Uc;
    req.srq = true;
    req.sap_supported = true;
    req.primary_path.subnet_local = true;
    req.vendor_id = 0x123456;
    let d = data(req.into());
    assert_eq!(d[43], 0x02);
    assert_eq!(d[51], 0x08);
    assert_eq!(d[139], 0x04);
    assert_eq!(d[94], 0x08);
    assert_eq!(d[4..8], [0, 0x12, 0x34, 0x56]);

    let CmMessage::Rep(mut rep) = zero(AttributeId::REP) else {
        unreachable!()
    };
    rep.vendor_id = 0xabcdef;
    rep.local_qpn = 0xffff_ffff; // masked to 24 bits
    rep.srq = true;
    rep.failover_accepted = 2;
    let d = data(rep.into());
    assert_eq!((d[15], d[19], d[23]), (0xab, 0xcd, 0xef));
    assert_eq!(d[12..15], [0xff; 3]);
    assert_eq!(d[27], 0x10);
    assert_eq!(d[26], 0x04);
    let CmMessage::Rep(back) = CmMessage::parse(AttributeId::REP, &d).unwrap() else {
        unreachable!()
    };
    assert_eq!((back.vendor_id, back.local_qpn), (0xabcdef, 0xff_ffff));

    let CmMessage::SidrRep(mut s) = zero(AttributeId::SIDR_REP) else {
        unreachable!()
    };
    s.vendor_id = 0x010203;
    s.qpn = 0x000023;
    s.status = SidrStatus::NO_QP;
    let d = data(s.into());
    assert_eq!(d[4..12], [3, 0, 1, 2, 0, 0, 0x23, 3]);

    let CmMessage::Rej(mut rej) = zero(AttributeId::REJ) else {
        unreachable!()
    };
    rej.message_rejected = RejectedMessage::Other;
    rej.reject_info_length = 100;
    rej.reason = RejReason::INVALID_SERVICE_ID;
    let d = data(rej.into());
    assert_eq!(d[8..12], [0x80, 100 << 1, 0, 8]);
    assert_eq!(rej.ari().len(), 72);
    assert_eq!(rej.reason.to_string(), "8 (invalid service ID)");
    assert_eq!(RejReason(34).to_string(), "34");

    let CmMessage::Mra(mut mra) = zero(AttributeId::MRA) else {
        unreachable!()
    };
    mra.message_mraed = MraedMessage::Lap;
    mra.service_timeout = 31;
    assert_eq!(data(mra.into())[8..10], [0x80, 0xf8]);
}

#[test]
fn typed_errors() {
    let good = mad(RPING_REQ);
    assert_eq!(CmMad::parse(&good[..255]), Err(Error::WrongLength(255)));
    assert_eq!(CmMad::parse(&[0; 257]), Err(Error::WrongLength(257)));
    assert_eq!(CmMad::parse(&[]), Err(Error::WrongLength(0)));
    let with = |at: usize, v: u8| {
        let mut b = good;
        b[at] = v;
        CmMad::parse(&b)
    };
    assert_eq!(with(0, 2), Err(Error::BadBaseVersion(2)));
    assert_eq!(with(1, 3), Err(Error::NotCm(3)));
    assert_eq!(with(2, 1), Err(Error::BadClassVersion(1)));
    assert_eq!(with(3, 0x81), Err(Error::UnexpectedMethod(0x81)));
    assert_eq!(with(17, 0x01), Err(Error::UnknownAttribute(0x0001)));
    assert_eq!(with(17, 0x1b), Err(Error::UnknownAttribute(0x001b)));
    assert_eq!(
        Error::UnknownAttribute(0x1b).to_string(),
        "CM attribute 0x001b is not a CM message"
    );
    // Reserved bits are ignored on parse and written as zero.
    let mut b = good;
    b[18] = 0xff; // MAD header reserved
    b[24 + 4] = 0xff; // REQ reserved byte
    let m = CmMad::parse(&b).unwrap();
    assert_eq!(m.to_bytes(), good);
    // The header alone parses whatever the class.
    let mut other = good;
    other[1] = MgmtClass::SUBN_ADM.0;
    other[3] = Method::GET_RESP.0;
    let h = MadHeader::parse(&Mad::new_checked(&other[..]).unwrap()).unwrap();
    assert_eq!(
        h.to_string(),
        "MAD v1 SubnAdm v2 GetResp tid=0x0000000241eafb71 attr=0x0010"
    );
    assert!(h.method.is_response());
}

/// The one GSI test: a UD SEND ONLY to QP 1, and nothing else.
#[test]
fn is_gsi_packet_takes_ud_send_only_to_qp_1() {
    let mut buf = [0u8; 300];
    let n = GsiMad::new(&mad(RPING_REQ), Psn::new(0))
        .to_packet(GSI_QPN)
        .emit(&mut buf)
        .unwrap();
    assert!(is_gsi_packet(&buf[..n]));
    assert!(is_gsi_packet(&buf[..9]), "the BTH and one byte are enough");
    assert!(!is_gsi_packet(&buf[..8]));
    let mut rc = buf;
    rc[0] = 0x04; // RC SEND ONLY
    assert!(!is_gsi_packet(&rc[..n]));
    let mut qp2 = buf;
    qp2[7] = 2;
    assert!(!is_gsi_packet(&qp2[..n]));
    let mut high = buf;
    high[5] = 1; // QP 0x010001
    assert!(!is_gsi_packet(&high[..n]));
}

#[test]
fn gsi_packet_round_trip() {
    let bytes = mad(RPING_REQ);
    let g = GsiMad::new(&bytes, Psn::new(0));
    let p = g.to_packet(GSI_QPN);
    let mut buf = [0u8; 300];
    let n = p.emit(&mut buf).unwrap();
    assert_eq!(n, 12 + 8 + 256 + 4, "280 bytes of UDP payload");
    // BTH: UD SEND ONLY, P_Key 0xFFFF, QP 1, AckReq, PSN 0; DETH: GSI Q_Key, QP 1.
    assert_eq!(
        buf[..20],
        hex("6400ffff00000001800000008001000000000001")[..]
    );
    let back = GsiMad::parse(&buf[..n]).unwrap();
    assert_eq!(back, g);
    assert_eq!(back.cm().unwrap(), CmMad::parse(&bytes).unwrap());
    assert_eq!(back.to_string(), CmMad::parse(&bytes).unwrap().describe());

    // Not for the GSI: wrong QP, wrong Q_Key, wrong opcode, wrong length.
    let mut q = p;
    q.bth.dest_qp = 2;
    let n = q.emit(&mut buf).unwrap();
    assert_eq!(GsiMad::parse(&buf[..n]), Err(Error::NotGsi(2)));
    let mut q = p;
    q.deth = Some(crate::wire::DethRepr {
        qkey: 0x1111_1111,
        src_qp: 1,
    });
    let n = q.emit(&mut buf).unwrap();
    assert_eq!(GsiMad::parse(&buf[..n]), Err(Error::WrongQkey(0x1111_1111)));
    let mut q = p;
    q.payload = &bytes[..255];
    let n = q.emit(&mut buf).unwrap();
    assert_eq!(GsiMad::parse(&buf[..n]), Err(Error::WrongLength(255)));
    let mut q = p;
    q.bth.opcode = crate::wire::Opcode::UD_SEND_ONLY_WITH_IMMEDIATE;
    q.immdt = Some(1);
    let n = q.emit(&mut buf).unwrap();
    assert_eq!(
        GsiMad::parse(&buf[..n]),
        Err(Error::NotUdSend(
            crate::wire::Opcode::UD_SEND_ONLY_WITH_IMMEDIATE
        ))
    );
    assert!(matches!(GsiMad::parse(&buf[..5]), Err(Error::Wire(_))));
    // A MAD that is not CM still shows its header.
    let mut sa = bytes;
    sa[1] = 3;
    let g = GsiMad::new(&sa, Psn::new(0));
    assert!(g.to_string().starts_with("MAD v1 SubnAdm"), "{g}");
}

#[test]
fn fixed_bytes() {
    let f = FixedBytes::<4>::from_prefix(&[1, 2]).unwrap();
    assert_eq!(f.0, [1, 2, 0, 0]);
    assert_eq!(f.trimmed(), &[1, 2]);
    assert_eq!(f.to_string(), "0102 (+2 zero bytes)");
    assert_eq!(format!("{f:?}"), "FixedBytes<4>(0102 (+2 zero bytes))");
    assert!(FixedBytes::<4>::from_prefix(&[0; 5]).is_none());
    assert!(FixedBytes::<3>::zeroed().is_zero());
    assert_eq!(FixedBytes::<3>::zeroed().to_string(), "(3 zero bytes)");
    assert_eq!(FixedBytes([9u8; 2]).to_string(), "0909");
}

// ---- property tests ----

fn fixed<const N: usize>() -> impl Strategy<Value = FixedBytes<N>> {
    prop::collection::vec(any::<u8>(), N).prop_map(|v| FixedBytes(v.try_into().unwrap()))
}

fn gid() -> impl Strategy<Value = Ipv6Addr> {
    any::<u128>().prop_map(Ipv6Addr::from)
}

fn u24() -> impl Strategy<Value = u32> {
    0u32..1 << 24
}

fn bits(n: u32) -> impl Strategy<Value = u8> {
    0u8..=((1u16 << n) - 1) as u8
}

fn path() -> impl Strategy<Value = CmPath> {
    (
        (
            any::<u16>(),
            any::<u16>(),
            gid(),
            gid(),
            0u32..1 << 20,
            bits(6),
        ),
        (any::<u8>(), any::<u8>(), bits(4), any::<bool>(), bits(5)),
    )
        .prop_map(
            |((ll, rl, lg, rg, fl, rate), (tc, hl, sl, sn, to))| CmPath {
                local_lid: ll,
                remote_lid: rl,
                local_gid: lg,
                remote_gid: rg,
                flow_label: fl,
                packet_rate: rate,
                traffic_class: tc,
                hop_limit: hl,
                sl,
                subnet_local: sn,
                local_ack_timeout: to,
            },
        )
}

fn req() -> impl Strategy<Value = Req> {
    (
        (
            any::<u32>(),
            u24(),
            any::<u64>(),
            any::<u64>(),
            any::<u32>(),
            u24(),
        ),
        (any::<u8>(), u24(), any::<u8>(), u24(), bits(5), bits(2)),
        (
            any::<bool>(),
            u24(),
            bits(5),
            bits(3),
            any::<u16>(),
            bits(4),
        ),
        (any::<bool>(), bits(3), bits(4), any::<bool>(), bits(3)),
        (path(), path(), any::<bool>(), fixed::<92>()),
    )
        .prop_map(
            |(
                (lcid, vendor, sid, guid, qkey, qpn),
                (rr, leecn, id, reecn, rto, tst),
                (e2e, psn, lto, retry, pkey, mtu),
                (rdc, rnr, maxr, srq, ext),
                (pp, ap, sap, pd),
            )| Req {
                local_comm_id: lcid,
                vendor_id: vendor,
                service_id: sid,
                local_ca_guid: guid,
                local_qkey: qkey,
                local_qpn: qpn,
                responder_resources: rr,
                local_eecn: leecn,
                initiator_depth: id,
                remote_eecn: reecn,
                remote_cm_response_timeout: rto,
                transport_service_type: TransportServiceType::from_bits(tst),
                end_to_end_flow_control: e2e,
                starting_psn: psn,
                local_cm_response_timeout: lto,
                retry_count: retry,
                pkey,
                path_mtu: mtu,
                rdc_exists: rdc,
                rnr_retry_count: rnr,
                max_cm_retries: maxr,
                srq,
                extended_transport_type: ext,
                primary_path: pp,
                alternate_path: ap,
                sap_supported: sap,
                private_data: pd,
            },
        )
}

fn rep() -> impl Strategy<Value = Rep> {
    (
        (
            any::<u32>(),
            any::<u32>(),
            any::<u32>(),
            u24(),
            u24(),
            u24(),
        ),
        (
            u24(),
            any::<u8>(),
            any::<u8>(),
            bits(5),
            bits(2),
            any::<bool>(),
        ),
        (bits(3), any::<bool>(), any::<u64>(), fixed::<196>()),
    )
        .prop_map(
            |(
                (l, r, qkey, qpn, vendor, eecn),
                (psn, rr, id, tad, fo, e2e),
                (rnr, srq, guid, pd),
            )| {
                Rep {
                    local_comm_id: l,
                    remote_comm_id: r,
                    local_qkey: qkey,
                    local_qpn: qpn,
                    vendor_id: vendor,
                    local_eecn: eecn,
                    starting_psn: psn,
                    responder_resources: rr,
                    initiator_depth: id,
                    target_ack_delay: tad,
                    failover_accepted: fo,
                    end_to_end_flow_control: e2e,
                    rnr_retry_count: rnr,
                    srq,
                    local_ca_guid: guid,
                    private_data: pd,
                }
            },
        )
}

fn message() -> impl Strategy<Value = CmMessage> {
    let ids = || (any::<u32>(), any::<u32>());
    prop_oneof![
        req().prop_map(CmMessage::Req),
        (ids(), bits(2), bits(5), fixed::<222>()).prop_map(|((l, r), m, t, pd)| {
            CmMessage::Mra(Mra {
                local_comm_id: l,
                remote_comm_id: r,
                message_mraed: MraedMessage::from_bits(m),
                service_timeout: t,
                private_data: pd,
            })
        }),
        (
            ids(),
            bits(2),
            bits(7),
            any::<u16>(),
            fixed::<72>(),
            fixed::<148>()
        )
            .prop_map(|((l, r), m, len, reason, ari, pd)| CmMessage::Rej(Rej {
                local_comm_id: l,
                remote_comm_id: r,
                message_rejected: RejectedMessage::from_bits(m),
                reject_info_length: len,
                reason: RejReason(reason),
                ari,
                private_data: pd,
            })),
        rep().prop_map(CmMessage::Rep),
        (ids(), fixed::<224>()).prop_map(|((l, r), pd)| CmMessage::Rtu(Rtu {
            local_comm_id: l,
            remote_comm_id: r,
            private_data: pd,
        })),
        (ids(), u24(), fixed::<220>()).prop_map(|((l, r), q, pd)| CmMessage::Dreq(Dreq {
            local_comm_id: l,
            remote_comm_id: r,
            remote_qpn_eecn: q,
            private_data: pd,
        })),
        (ids(), fixed::<224>()).prop_map(|((l, r), pd)| CmMessage::Drep(Drep {
            local_comm_id: l,
            remote_comm_id: r,
            private_data: pd,
        })),
        (any::<u32>(), any::<u16>(), any::<u64>(), fixed::<216>()).prop_map(
            |(id, pkey, sid, pd)| CmMessage::SidrReq(SidrReq {
                request_id: id,
                pkey,
                service_id: sid,
                private_data: pd,
            })
        ),
        (
            (any::<u32>(), any::<u8>(), any::<u8>(), u24(), u24()),
            (any::<u64>(), any::<u32>(), fixed::<72>(), fixed::<136>())
        )
            .prop_map(|((id, st, len, vendor, qpn), (sid, qkey, ai, pd))| {
                CmMessage::SidrRep(SidrRep {
                    request_id: id,
                    status: SidrStatus(st),
                    additional_info_length: len,
                    vendor_id: vendor,
                    qpn,
                    service_id: sid,
                    qkey,
                    additional_info: ai,
                    private_data: pd,
                })
            }),
        (ids(), u24(), bits(5), path(), fixed::<168>()).prop_map(|((l, r), q, t, p, pd)| {
            CmMessage::Lap(Lap {
                local_comm_id: l,
                remote_comm_id: r,
                remote_qpn_eecn: q,
                remote_cm_response_timeout: t,
                alternate_path: p,
                private_data: pd,
            })
        }),
        (
            ids(),
            any::<u8>(),
            any::<u8>(),
            fixed::<72>(),
            fixed::<148>()
        )
            .prop_map(|((l, r), len, st, ai, pd)| CmMessage::Apr(Apr {
                local_comm_id: l,
                remote_comm_id: r,
                additional_info_length: len,
                ap_status: AprStatus(st),
                additional_info: ai,
                private_data: pd,
            })),
    ]
}

fn cm_mad() -> impl Strategy<Value = CmMad> {
    (
        any::<u64>(),
        any::<u32>(),
        any::<u16>(),
        any::<u16>(),
        message(),
    )
        .prop_map(|(tid, am, st, cs, message)| CmMad {
            transaction_id: tid,
            attribute_modifier: am,
            status: st,
            class_specific: cs,
            message,
        })
}

const ATTRS: [AttributeId; 11] = [
    AttributeId::REQ,
    AttributeId::MRA,
    AttributeId::REJ,
    AttributeId::REP,
    AttributeId::RTU,
    AttributeId::DREQ,
    AttributeId::DREP,
    AttributeId::SIDR_REQ,
    AttributeId::SIDR_REP,
    AttributeId::LAP,
    AttributeId::APR,
];

proptest! {
    /// Build -> parse gives back the same message, for every message type,
    /// and the bytes carry the header the class implies.
    #[test]
    fn every_message_round_trips(m in cm_mad()) {
        let bytes = m.to_bytes();
        prop_assert_eq!(CmMad::parse(&bytes), Ok(m));
        prop_assert_eq!(&bytes[..4], &[1, 7, 2, 3][..]);
        prop_assert_eq!(u16::from_be_bytes([bytes[16], bytes[17]]), m.message.attribute_id().0);
        let g = GsiMad::new(&bytes, Psn::new(5));
        let mut buf = [0u8; 280];
        g.to_packet(GSI_QPN).emit(&mut buf).unwrap();
        prop_assert_eq!(GsiMad::parse(&buf).unwrap().cm(), Ok(m));
        let _ = (m.to_string(), m.describe(), format!("{m:?}"));
    }

    /// Any data under any CM attribute parses; emitting it gives the input
    /// with exactly the reserved bits cleared.
    #[test]
    fn any_data_parses_and_reemits_masked(
        attr in prop::sample::select(&ATTRS[..]),
        data in prop::collection::vec(any::<u8>(), MAD_DATA_LEN),
    ) {
        let data: [u8; MAD_DATA_LEN] = data.try_into().unwrap();
        let m = CmMessage::parse(attr, &data).unwrap();
        let mut out = [0u8; MAD_DATA_LEN];
        m.emit(&mut out);
        let mask = used_bits(attr);
        let want: Vec<u8> = data.iter().zip(mask).map(|(d, k)| d & k).collect();
        prop_assert_eq!(&out[..], &want[..]);
        prop_assert_eq!(CmMessage::parse(attr, &out), Ok(m));
    }

    /// Arbitrary bytes through every parser: typed errors, never a panic;
    /// whatever parses re-emits to the same repr.
    #[test]
    fn arbitrary_bytes_never_panic(b in prop::collection::vec(any::<u8>(), 0..300)) {
        if let Ok(m) = CmMad::parse(&b) {
            prop_assert_eq!(CmMad::parse(&m.to_bytes()), Ok(m));
            let _ = (m.to_string(), m.describe());
        }
        if let Ok(v) = Mad::new_checked(&b[..]) {
            let _ = MadHeader::parse(&v).map(|h| h.to_string());
        }
        let _ = CmaHeader::parse(&b).map(|h| h.to_string());
        if let Ok(g) = GsiMad::parse(&b) {
            let _ = g.to_string();
        }
    }

    /// A 256-byte MAD with a CM header and arbitrary rest: parse and re-emit.
    #[test]
    fn cm_header_with_arbitrary_body(
        attr in prop::sample::select(&ATTRS[..]),
        rest in prop::collection::vec(any::<u8>(), MAD_LEN),
    ) {
        let mut b: [u8; MAD_LEN] = rest.try_into().unwrap();
        b[..4].copy_from_slice(&[1, 7, 2, 3]);
        b[16..18].copy_from_slice(&attr.0.to_be_bytes());
        let m = CmMad::parse(&b).unwrap();
        prop_assert_eq!(m.message.attribute_id(), attr);
        prop_assert_eq!(CmMad::parse(&m.to_bytes()), Ok(m));
    }
}
