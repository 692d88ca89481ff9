//! rdma_cm's UD services (`rxe_verbs::cm`, `PortSpace::UDP`) over real UDP
//! on loopback: SIDR_REQ and SIDR_REP on QP 1 resolve a listener's UD QP,
//! then UD SENDs go both ways with what the events gave.
//!
//! Address plan: 127.0.7.100-150, each test its own pair (noted at its
//! top); ports are rdma_cm's, per device.

use rxe_verbs::cm::{
    CmId, ConnParam, Event, EventChannel, EventKind, PortSpace, RDMA_UDP_QKEY, SIDR_REP_DATA_MAX,
    SIDR_REQ_DATA_MAX,
};
use rxe_verbs::*;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

const T: Duration = Duration::from_secs(10);

fn addr(n: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, 0, 7, n))
}

/// A device with a PD, a CQ, a region and a UD QP (in RESET).
struct Side {
    qp: QueuePair,
    mr: MemoryRegion,
    cq: CompletionQueue,
    pd: ProtectionDomain,
    ctx: Context,
}

fn side(n: u8, qp_type: QpType) -> Side {
    let ctx = Device::soft(addr(n)).open().unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(64, None).unwrap();
    let mr = pd.alloc_mr(1 << 16, Access::LOCAL_WRITE).unwrap();
    let qp = ctx
        .create_qp(&pd, &QpInitAttr::new(qp_type, &cq, &cq))
        .unwrap();
    Side {
        qp,
        mr,
        cq,
        pd,
        ctx,
    }
}

fn event(ch: &EventChannel, want: EventKind) -> Event {
    let e = ch
        .get_event(T)
        .unwrap_or_else(|| panic!("no event, waiting for {want:?}"));
    assert_eq!(e.kind, want, "{e:?}");
    e
}

fn done(cq: &CompletionQueue) -> Completion {
    let wc = cq.wait(1, T).expect("a completion").remove(0);
    assert_eq!(wc.status, WcStatus::Success, "{wc:?}");
    wc
}

fn recv(id: u64, sge: Sge) -> RecvWr {
    RecvWr {
        wr_id: id,
        sg_list: vec![sge],
    }
}

fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(7).wrapping_add(seed))
        .collect()
}

/// A UDP listener on `port` of `srv`'s device.
fn listen(srv: &Side, port: u16) -> (EventChannel, CmId) {
    let ch = EventChannel::new();
    let l = CmId::new(&ch, PortSpace::UDP).unwrap();
    assert_eq!(l.bind(&srv.ctx, port).unwrap(), port);
    l.listen().unwrap();
    (ch, l)
}

/// A client's UDP id asking `dst` for its service with `data`.
fn resolve(cli: &Side, dst: SocketAddr, data: &[u8]) -> (EventChannel, CmId) {
    let ch = EventChannel::new();
    let id = CmId::new(&ch, PortSpace::UDP).unwrap();
    let param = ConnParam {
        private_data: data.to_vec(),
        ..ConnParam::new()
    };
    id.connect(&cli.ctx, dst, &cli.qp, &param).unwrap();
    (ch, id)
}

// 127.0.7.100-101
#[test]
fn resolve_then_ud_sends_both_ways() {
    let srv = side(100, QpType::Ud);
    let cli = side(101, QpType::Ud);
    let (sch, _l) = listen(&srv, 7300);
    // The server's QP is moved to INIT by hand (to post its receives
    // before it answers); accept takes it on to RTS with its Q_Key.
    let init = QpAttr {
        state: QpState::Init,
        pkey_index: 0,
        port: 1,
        qkey: RDMA_UDP_QKEY,
        ..QpAttr::default()
    };
    let m = QpAttrMask::STATE | QpAttrMask::PKEY_INDEX | QpAttrMask::PORT | QpAttrMask::QKEY;
    srv.qp.modify(&init, m).unwrap();
    srv.qp
        .post_recv(&[recv(1, srv.mr.sge(0..40 + 2000))])
        .unwrap();

    let (cch, cid) = resolve(&cli, SocketAddr::new(addr(100), 7300), b"hello, service");
    let req = event(&sch, EventKind::ConnectRequest);
    // The kernel hands over the SIDR_REQ's private data after rdma_cm's
    // header: 180 bytes.
    assert_eq!(req.param.private_data.len(), SIDR_REQ_DATA_MAX);
    assert!(req.param.private_data.starts_with(b"hello, service"));
    assert!(req.ud.is_none());
    let child = req.id.clone();
    assert_eq!(child.port_space(), PortSpace::UDP);
    assert_eq!(child.peer_addr(), cid.local_addr());
    assert_eq!(child.local_addr(), Some(SocketAddr::new(addr(100), 7300)));
    let acc = ConnParam {
        private_data: b"welcome".to_vec(),
        ..ConnParam::new()
    };
    child.accept(Some(&srv.qp), &acc).unwrap();
    assert_eq!(srv.qp.query().unwrap().0.state, QpState::Rts);
    // Answered: a second answer is refused.
    assert!(child.accept(Some(&srv.qp), &acc).is_err());
    assert!(child.reject(&[]).is_err());

    let est = event(&cch, EventKind::Established);
    assert_eq!(est.status, 0);
    assert_eq!(est.param.private_data.len(), SIDR_REP_DATA_MAX);
    assert!(est.param.private_data.starts_with(b"welcome"));
    let ud = est.ud.expect("the UD parameters");
    assert_eq!(ud.qp_num, srv.qp.qp_num());
    assert_eq!(ud.qkey, RDMA_UDP_QKEY);
    assert_eq!(ud.ah.dest, addr(100));
    assert_eq!(ud.ah.hop_limit, 64);
    let cport = u32::from(cid.local_addr().unwrap().port());
    assert_eq!(ud.ah.flow_label, (cport * 31 + 7300) & 0xf_ffff);
    // connect made the client's QP ready, with rdma_cm's Q_Key.
    let (a, _) = cli.qp.query().unwrap();
    assert_eq!((a.state, a.qkey), (QpState::Rts, RDMA_UDP_QKEY));

    // Client -> server, with what the event said.
    cli.qp
        .post_recv(&[recv(2, cli.mr.sge(4096..4096 + 40 + 2000))])
        .unwrap();
    let data = pattern(2000, 3);
    cli.mr.write(0, &data).unwrap();
    let ah = cli.pd.create_ah(ud.ah).unwrap();
    cli.qp
        .post_send(&[ah.send(1, &[cli.mr.sge(0..2000)], ud.qp_num, ud.qkey)])
        .unwrap();
    done(&cli.cq);
    let r = done(&srv.cq);
    assert_eq!(
        (r.wr_id, r.opcode, r.byte_len, r.src_qp, r.grh),
        (1, WcOpcode::Recv, 40 + 2000, cli.qp.qp_num(), true)
    );
    assert_eq!(srv.mr.with_bytes(|b| b[40..2040].to_vec()), data);

    // Server -> client, back to where the request came from (as udaddy
    // answers: the source QP of the completion, its own Q_Key).
    let back = srv
        .pd
        .create_ah(AddressVector::to(child.peer_addr().unwrap().ip()))
        .unwrap();
    let reply = pattern(1500, 9);
    srv.mr.write(8192, &reply).unwrap();
    srv.qp
        .post_send(&[back.send(2, &[srv.mr.sge(8192..8192 + 1500)], r.src_qp, RDMA_UDP_QKEY)])
        .unwrap();
    done(&srv.cq);
    let r = done(&cli.cq);
    assert_eq!(
        (r.wr_id, r.byte_len, r.src_qp),
        (2, 40 + 1500, srv.qp.qp_num())
    );
    assert_eq!(cli.mr.with_bytes(|b| b[4136..4136 + 1500].to_vec()), reply);

    // Resolving is one exchange: the id is done with it.
    assert!(cid
        .connect(&cli.ctx, SocketAddr::new(addr(100), 7300), &cli.qp, &acc)
        .is_err());
    let c = cli.ctx.cm_counters().unwrap();
    assert_eq!(c.retries, 0, "{c:?}");
}

// 127.0.7.102-103
#[test]
fn a_port_nobody_listens_on_is_unreachable_with_status_1() {
    let srv = side(102, QpType::Ud);
    let cli = side(103, QpType::Ud);
    // The server's device is there (its CM answers), but nobody listens
    // on 7301; another port is listened on.
    let (_sch, _l) = listen(&srv, 7302);
    let (cch, _cid) = resolve(&cli, SocketAddr::new(addr(102), 7301), b"anyone?");
    let e = event(&cch, EventKind::Unreachable);
    // The kernel's rdma_cm: UNREACHABLE with the SIDR status,
    // 1 (IB_SIDR_UNSUPPORTED).
    assert_eq!(e.status, 1, "{e:?}");
    assert!(e.ud.is_none());
    drop(srv);
}

// 127.0.7.104-105
#[test]
fn reject_is_unreachable_with_status_2_and_the_private_data() {
    let srv = side(104, QpType::Ud);
    let cli = side(105, QpType::Ud);
    let (sch, _l) = listen(&srv, 7303);
    let (cch, _cid) = resolve(&cli, SocketAddr::new(addr(104), 7303), b"let me in");
    let req = event(&sch, EventKind::ConnectRequest);
    assert!(req.id.reject(&[0u8; SIDR_REP_DATA_MAX + 1]).is_err());
    req.id.reject(b"no room").unwrap();
    // Answered: no accept after a reject.
    assert!(req.id.accept(Some(&srv.qp), &ConnParam::new()).is_err());
    let e = event(&cch, EventKind::Unreachable);
    assert_eq!(e.status, 2, "{e:?}");
    assert!(e.param.private_data.starts_with(b"no room"));
    assert!(e.ud.is_none());
}

// 127.0.7.106-107
#[test]
fn a_request_whose_id_is_dropped_unanswered_is_rejected() {
    let srv = side(106, QpType::Ud);
    let cli = side(107, QpType::Ud);
    let (sch, _l) = listen(&srv, 7304);
    let (cch, _cid) = resolve(&cli, SocketAddr::new(addr(106), 7304), b"");
    let req = event(&sch, EventKind::ConnectRequest);
    drop(req);
    let e = event(&cch, EventKind::Unreachable);
    assert_eq!(e.status, 2, "{e:?}");
}

// 127.0.7.108-109
#[test]
fn accept_without_a_qp_names_param_qp_num() {
    let srv = side(108, QpType::Ud);
    let cli = side(109, QpType::Ud);
    let (sch, _l) = listen(&srv, 7305);
    let ch = EventChannel::new();
    let cid = CmId::new(&ch, PortSpace::UDP).unwrap();
    // Without a QP: nothing is moved, the SIDR_REQ goes all the same.
    cid.connect_without_qp(
        &cli.ctx,
        SocketAddr::new(addr(108), 7305),
        &ConnParam::new(),
    )
    .unwrap();
    assert_eq!(cli.qp.query().unwrap().0.state, QpState::Reset);
    let req = event(&sch, EventKind::ConnectRequest);
    assert!(req.id.accept(None, &ConnParam::new()).is_err(), "qp_num 0");
    let p = ConnParam {
        qp_num: 0x12_3456,
        ..ConnParam::new()
    };
    req.id.accept(None, &p).unwrap();
    let ud = event(&ch, EventKind::Established).ud.unwrap();
    assert_eq!((ud.qp_num, ud.qkey), (0x12_3456, RDMA_UDP_QKEY));
}

// 127.0.7.110-111
#[test]
fn argument_errors() {
    let ud = side(110, QpType::Ud);
    let rc = side(111, QpType::Rc);
    let dst = SocketAddr::new(addr(111), 7306);
    let ch = EventChannel::new();
    assert!(CmId::new(&ch, PortSpace::IPOIB).is_err());
    // A UDP id takes a UD QP, a TCP id an RC or UC one.
    let u = CmId::new(&ch, PortSpace::UDP).unwrap();
    assert!(u.connect(&rc.ctx, dst, &rc.qp, &ConnParam::new()).is_err());
    let t = CmId::new(&ch, PortSpace::TCP).unwrap();
    assert!(t.connect(&ud.ctx, dst, &ud.qp, &ConnParam::new()).is_err());
    // 180 bytes of private data at most.
    let long = ConnParam {
        private_data: vec![0; SIDR_REQ_DATA_MAX + 1],
        ..ConnParam::new()
    };
    let u = CmId::new(&ch, PortSpace::UDP).unwrap();
    assert!(u.connect(&ud.ctx, dst, &ud.qp, &long).is_err());
    // Nothing to accept or reject on an id without a request.
    assert!(u.accept(Some(&ud.qp), &ConnParam::new()).is_err());
    assert!(u.reject(&[]).is_err());
    assert!(ch.get_event(Duration::from_millis(100)).is_none());
}
