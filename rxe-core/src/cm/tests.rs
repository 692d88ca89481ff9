//! Unit tests of the CM agent: commands' argument checks, the messages it
//! builds, and the basic exchanges between two agents by hand.

use super::*;
use crate::mad::cm::CmMessage;
use std::net::Ipv4Addr;

const A: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1));
const B: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2));
const SID: u64 = 0x0106_1c06;

fn agent(addr: IpAddr, seed: u64) -> CmAgent {
    CmAgent::new(CmConfig::new(addr, 0x1000 + seed, seed))
}

fn sent(a: &mut CmAgent) -> Vec<(IpAddr, CmMad)> {
    std::iter::from_fn(|| a.poll_transmit())
        .map(|t| (t.dst, CmMad::parse(&t.mad).expect("our MADs parse")))
        .collect()
}

fn events(a: &mut CmAgent) -> Vec<CmEvent> {
    std::iter::from_fn(|| a.poll_event()).collect()
}

/// Delivers everything `from` has to send to `to`.
fn pump(now: Instant, from: &mut CmAgent, to: &mut CmAgent) -> usize {
    let src = from.config().local_addr;
    let mut n = 0;
    while let Some(t) = from.poll_transmit() {
        to.handle_mad(now, src, &t.mad);
        n += 1;
    }
    n
}

#[test]
fn bad_arguments_are_named() {
    let now = Instant::now();
    let mut a = agent(A, 1);
    let mut p = ConnectParams::new(SID, B, 0x12, 0x100);
    p.private_data = vec![0; 93];
    assert_eq!(
        a.connect(now, &p),
        Err(CmError::PrivateDataTooLong {
            arg: "private_data",
            len: 93,
            max: 92
        })
    );
    let mut p = ConnectParams::new(SID, B, 1, 0);
    assert!(matches!(
        a.connect(now, &p),
        Err(CmError::OutOfRange {
            arg: "local_qpn",
            ..
        })
    ));
    p.local_qpn = 0x12;
    p.starting_psn = 1 << 24;
    assert!(matches!(
        a.connect(now, &p),
        Err(CmError::OutOfRange {
            arg: "starting_psn",
            ..
        })
    ));
    p.starting_psn = 0;
    p.max_cm_retries = 16;
    assert!(matches!(
        a.connect(now, &p),
        Err(CmError::OutOfRange {
            arg: "max_cm_retries",
            ..
        })
    ));
    assert_eq!(a.connection_count(), 0, "nothing happened");
    assert!(a.poll_transmit().is_none());
    assert_eq!(
        a.accept(now, ConnId(5), &AcceptParams::new(0x20, 0)),
        Err(CmError::UnknownConnection(ConnId(5)))
    );
    a.listen(SID).unwrap();
    assert_eq!(a.listen(SID), Err(CmError::ServiceInUse(SID)));
    assert_eq!(a.unlisten(now, 7), Err(CmError::NotListening(7)));
    let e = a
        .connect(now, &ConnectParams::new(SID, B, 0x12, 0))
        .unwrap();
    assert_eq!(
        a.disconnect(now, e, &[]),
        Err(CmError::InvalidState {
            conn: e,
            state: CmState::ReqSent,
            op: "disconnect"
        })
    );
    assert!(CmError::PrivateDataTooLong {
        arg: "private_data",
        len: 93,
        max: 92
    }
    .to_string()
    .contains("private_data"));
}

#[test]
fn comm_ids_carry_the_prefix_and_tids_follow_linux() {
    let now = Instant::now();
    let mut cfg = CmConfig::new(A, 1, 9);
    cfg.comm_id_prefix = Some(0xab);
    cfg.tid_high = 2;
    let mut a = CmAgent::new(cfg);
    for qpn in 2..50 {
        let c = a.connect(now, &ConnectParams::new(SID, B, qpn, 0)).unwrap();
        assert_eq!(c.0 >> 24, 0xab);
        let (_, m) = sent(&mut a).pop().unwrap();
        assert_eq!(m.message.local_comm_id(), c.0);
        assert_eq!(m.transaction_id, (2 << 32) | u64::from(c.0.swap_bytes()));
    }
    // rping.pcap: comm ID 0x71fbea41 gives TID 0x0000000241eafb71.
    assert_eq!(a.tid_for(0x71fb_ea41), 0x0000_0002_41ea_fb71);
}

#[test]
fn connect_accept_rtu_crosses_the_psns() {
    let now = Instant::now();
    let (mut a, mut b) = (agent(A, 1), agent(B, 2));
    b.listen(SID).unwrap();
    let mut p = ConnectParams::new(SID, B, 0x11, 0xaaaaaa);
    p.private_data = b"hello".to_vec();
    let ca = a.connect(now, &p).unwrap();
    assert_eq!(pump(now, &mut a, &mut b), 1);
    let [CmEvent::ConnectRequest {
        conn: cb,
        from,
        req,
        ..
    }] = &events(&mut b)[..]
    else {
        panic!()
    };
    assert_eq!(*from, A);
    assert_eq!(req.local_qpn, 0x11);
    assert_eq!(req.starting_psn, 0xaaaaaa);
    assert_eq!(&req.private_data[..5], b"hello");
    let qb = b
        .accept(now, *cb, &AcceptParams::new(0x22, 0xbbbbbb))
        .unwrap();
    assert_eq!((qb.sq_psn, qb.rq_psn), (0xaaaaaa, 0xbbbbbb));
    assert_eq!((qb.local_qpn, qb.remote_qpn), (0x22, 0x11));
    pump(now, &mut b, &mut a);
    let [CmEvent::ConnectResponse { conn, qp, .. }] = &events(&mut a)[..] else {
        panic!()
    };
    assert_eq!(*conn, ca);
    assert_eq!((qp.sq_psn, qp.rq_psn), (0xbbbbbb, 0xaaaaaa));
    assert_eq!((qp.local_qpn, qp.remote_qpn), (0x11, 0x22));
    a.ready_to_use(now, ca, &[]).unwrap();
    assert!(matches!(events(&mut a)[..], [CmEvent::Established { .. }]));
    pump(now, &mut a, &mut b);
    assert!(matches!(events(&mut b)[..], [CmEvent::Established { .. }]));
    assert_eq!(a.state(ca), Some(CmState::Established));
    assert_eq!(b.state(*cb), Some(CmState::Established));
    assert_eq!(a.poll_timeout(), None, "nothing left to resend");
    assert_eq!(b.poll_timeout(), None);
}

#[test]
fn unknown_service_is_rejected_with_reason_8() {
    let now = Instant::now();
    let (mut a, mut b) = (agent(A, 1), agent(B, 2));
    let ca = a
        .connect(now, &ConnectParams::new(SID, B, 0x11, 0))
        .unwrap();
    pump(now, &mut a, &mut b);
    let out = sent(&mut b);
    let [(to, m)] = &out[..] else { panic!() };
    assert_eq!(*to, A);
    let CmMessage::Rej(r) = m.message else {
        panic!()
    };
    assert_eq!(r.reason, RejReason::INVALID_SERVICE_ID);
    assert_eq!((r.local_comm_id, r.remote_comm_id), (0, ca.0));
    assert_eq!(m.transaction_id, a.tid_for(ca.0), "the REQ's TID");
    a.handle_mad(now, B, &m.to_bytes());
    let [CmEvent::Rejected { conn, reason, .. }] = &events(&mut a)[..] else {
        panic!()
    };
    assert_eq!((*conn, *reason), (ca, RejReason::INVALID_SERVICE_ID));
    assert_eq!(a.connection_count(), 0);
}

#[test]
fn req_retries_then_unreachable() {
    let t0 = Instant::now();
    let mut a = agent(A, 1);
    let mut p = ConnectParams::new(SID, B, 0x11, 0);
    p.max_cm_retries = 3;
    p.remote_cm_response_timeout = 10;
    let c = a.connect(t0, &p).unwrap();
    let every = msg::timeout(16) * 2 + msg::timeout(10);
    let mut reqs = sent(&mut a).len();
    let mut now = t0;
    while let Some(t) = a.poll_timeout() {
        assert_eq!(t - now, every);
        now = t;
        a.handle_timeout(now);
        reqs += sent(&mut a).len();
    }
    assert_eq!(reqs, 4, "the REQ and 3 retries");
    assert_eq!(now - t0, every * 4);
    assert_eq!(
        events(&mut a),
        vec![CmEvent::Unreachable {
            conn: c,
            unanswered: AttributeId::REQ
        }]
    );
    assert_eq!(a.counters().retries, 3);
    assert_eq!(a.counters().timeouts, 1);
    assert_eq!(a.state(c), None);
}

#[test]
fn garbage_is_counted_not_fatal() {
    let now = Instant::now();
    let mut a = agent(A, 1);
    a.handle_mad(now, B, &[0u8; 10]);
    a.handle_mad(now, B, &[0u8; 256]);
    let mut m = [0u8; 256];
    m[0] = 1;
    m[1] = 3; // SA
    a.handle_mad(now, B, &m);
    a.handle_gsi_packet(now, B, &[1, 2, 3]);
    assert_eq!(a.counters().dropped(CmDropReason::Malformed), 3);
    assert_eq!(a.counters().dropped(CmDropReason::NotCm), 1);
    // A REP, RTU, DREP for nothing.
    let rtu = CmMad::new(
        1,
        crate::mad::cm::Rtu {
            local_comm_id: 5,
            remote_comm_id: 6,
            private_data: FixedBytes::zeroed(),
        },
    );
    a.handle_mad(now, B, &rtu.to_bytes());
    assert_eq!(a.counters().dropped(CmDropReason::UnknownCommId), 1);
    assert!(a.poll_event().is_none());
}
