//! rdma_cm (`rxe_verbs::cm`) over real UDP on loopback: connections made
//! with the CM protocol's MADs on QP 1, then traffic on the QPs they set up.
//!
//! Address plan: 127.0.7.N, each test its own pair (noted at its top).

use rxe_verbs::cm::{CmId, ConnParam, Event, EventChannel, EventKind, PortSpace};
use rxe_verbs::*;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

const T: Duration = Duration::from_secs(10);

fn addr(n: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, 0, 7, n))
}

/// A device with a PD, a CQ, a 64 KiB region and an RC QP.
struct Side {
    qp: QueuePair,
    mr: MemoryRegion,
    cq: CompletionQueue,
    _pd: ProtectionDomain,
    ctx: Context,
}

fn side(ctx: &Context) -> Side {
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(64, None).unwrap();
    let all = Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ;
    let mr = pd.alloc_mr(1 << 16, all).unwrap();
    let qp = ctx
        .create_qp(&pd, &QpInitAttr::new(QpType::Rc, &cq, &cq))
        .unwrap();
    Side {
        qp,
        mr,
        cq,
        _pd: pd,
        ctx: ctx.clone(),
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

/// A listener on `port` of the device at `a`, and a client on `b`:
/// connect, accept, both established; returns everything.
struct Conn {
    srv_ch: EventChannel,
    cli_ch: EventChannel,
    listener: CmId,
    srv_id: CmId,
    cli_id: CmId,
    srv: Side,
    cli: Side,
}

fn connect(a: u8, b: u8, port: u16, req_data: &[u8], rep_data: &[u8]) -> Conn {
    let sctx = Device::soft(addr(a)).open().unwrap();
    let cctx = Device::soft(addr(b)).open().unwrap();
    let srv_ch = EventChannel::new();
    let listener = CmId::new(&srv_ch, PortSpace::TCP).unwrap();
    assert_eq!(listener.bind(&sctx, port).unwrap(), port);
    listener.listen().unwrap();

    let cli = side(&cctx);
    let cli_ch = EventChannel::new();
    let cli_id = CmId::new(&cli_ch, PortSpace::TCP).unwrap();
    let param = ConnParam {
        private_data: req_data.to_vec(),
        ..ConnParam::new()
    };
    cli_id
        .connect(&cctx, SocketAddr::new(addr(a), port), &cli.qp, &param)
        .unwrap();

    let req = event(&srv_ch, EventKind::ConnectRequest);
    assert_eq!(req.listen_id.as_ref(), Some(&listener));
    // As with librdmacm: the REQ's whole private-data field, rdma_cm's
    // 36-byte header off (92 - 36 = 56 bytes), the application's first.
    assert_eq!(req.param.private_data.len(), 56);
    assert_eq!(
        &req.param.private_data[..req_data.len()],
        req_data,
        "the REQ's private data, header off"
    );
    assert_eq!(req.param.qp_num, cli.qp.qp_num());
    let srv_id = req.id.clone();
    assert_eq!(
        srv_id.peer_addr(),
        cli_id.local_addr(),
        "rdma_cm's header names the client"
    );
    assert_eq!(srv_id.local_addr(), Some(SocketAddr::new(addr(a), port)));
    let srv = side(&sctx);
    let accept = ConnParam {
        private_data: rep_data.to_vec(),
        ..ConnParam::new()
    };
    srv_id.accept(Some(&srv.qp), &accept).unwrap();

    let est = event(&cli_ch, EventKind::Established);
    assert_eq!(est.id, cli_id);
    assert_eq!(&est.param.private_data[..rep_data.len()], rep_data);
    assert_eq!(est.param.qp_num, srv.qp.qp_num());
    let est = event(&srv_ch, EventKind::Established);
    assert_eq!(est.id, srv_id);
    Conn {
        srv_ch,
        cli_ch,
        listener,
        srv_id,
        cli_id,
        srv,
        cli,
    }
}

// 127.0.7.1-2
#[test]
fn connect_send_both_ways_and_disconnect() {
    let c = connect(1, 2, 7471, b"hello from the client", b"welcome");
    // The QPs are connected to each other: SEND both ways, READ and WRITE.
    let data: Vec<u8> = (0..3000u32).map(|i| (i * 7) as u8).collect();
    c.cli.mr.write(0, &data).unwrap();
    c.srv
        .qp
        .post_recv(&[RecvWr {
            wr_id: 1,
            sg_list: vec![c.srv.mr.sge(0..4096)],
        }])
        .unwrap();
    c.cli
        .qp
        .post_send(&[SendWr::send(2, &[c.cli.mr.sge(0..3000)])])
        .unwrap();
    done(&c.cli.cq);
    assert_eq!(done(&c.srv.cq).byte_len, 3000);
    c.srv.mr.with_bytes(|b| assert_eq!(&b[..3000], &data[..]));
    c.srv.mr.write(8192, b"the server's bytes").unwrap();
    let remote = c.srv.mr.remote();
    c.cli
        .qp
        .post_send(&[SendWr::read(
            3,
            &[c.cli.mr.sge(100..118)],
            remote.slice(8192..8210),
        )])
        .unwrap();
    done(&c.cli.cq);
    c.cli
        .mr
        .with_bytes(|b| assert_eq!(&b[100..118], b"the server's bytes"));

    // The client disconnects: the server hears of it and answers.
    c.cli_id.disconnect().unwrap();
    let d = event(&c.srv_ch, EventKind::Disconnected);
    assert_eq!(d.id, c.srv_id);
    c.srv_id.disconnect().unwrap();
    event(&c.cli_ch, EventKind::Disconnected);
    // The client's QP went to ERR at once: a SEND now flushes.
    c.cli
        .qp
        .post_send(&[SendWr::send(4, &[c.cli.mr.sge(0..10)])])
        .unwrap();
    let wc = c.cli.cq.wait(1, T).unwrap().remove(0);
    assert_eq!(wc.status, WcStatus::WrFlushErr);
    assert_eq!(c.listener.port_space(), PortSpace::TCP);
}

// 127.0.7.3-4
#[test]
fn nobody_listening_is_a_reject_with_reason_8() {
    let _srv = Device::soft(addr(3)).open().unwrap();
    let cctx = Device::soft(addr(4)).open().unwrap();
    let cli = side(&cctx);
    let ch = EventChannel::new();
    let id = CmId::new(&ch, PortSpace::TCP).unwrap();
    id.connect(
        &cctx,
        SocketAddr::new(addr(3), 9999),
        &cli.qp,
        &ConnParam::new(),
    )
    .unwrap();
    let e = event(&ch, EventKind::Rejected);
    assert_eq!(e.status, 8, "invalid service ID");
    assert_eq!(e.id, id);
}

// 127.0.7.5-6
#[test]
fn the_server_rejects_with_private_data() {
    let sctx = Device::soft(addr(5)).open().unwrap();
    let cctx = Device::soft(addr(6)).open().unwrap();
    let sch = EventChannel::new();
    let l = CmId::new(&sch, PortSpace::TCP).unwrap();
    l.bind(&sctx, 5000).unwrap();
    l.listen().unwrap();
    // A second listener on the port, in this process: refused.
    let l2 = CmId::new(&sch, PortSpace::TCP).unwrap();
    assert!(l2.bind(&sctx, 5000).is_err());
    let cli = side(&cctx);
    let ch = EventChannel::new();
    let id = CmId::new(&ch, PortSpace::TCP).unwrap();
    id.connect(
        &cctx,
        SocketAddr::new(addr(5), 5000),
        &cli.qp,
        &ConnParam::new(),
    )
    .unwrap();
    let req = event(&sch, EventKind::ConnectRequest);
    req.id.reject(b"go away").unwrap();
    let e = event(&ch, EventKind::Rejected);
    assert_eq!(e.status, 28, "consumer defined");
    assert_eq!(&e.param.private_data[..7], b"go away");
}

// 127.0.7.7-8
#[test]
fn a_dropped_connection_request_is_rejected() {
    let sctx = Device::soft(addr(7)).open().unwrap();
    let cctx = Device::soft(addr(8)).open().unwrap();
    let sch = EventChannel::new();
    let l = CmId::new(&sch, PortSpace::TCP).unwrap();
    l.bind(&sctx, 5001).unwrap();
    l.listen().unwrap();
    let cli = side(&cctx);
    let ch = EventChannel::new();
    let id = CmId::new(&ch, PortSpace::TCP).unwrap();
    id.connect(
        &cctx,
        SocketAddr::new(addr(7), 5001),
        &cli.qp,
        &ConnParam::new(),
    )
    .unwrap();
    let req = event(&sch, EventKind::ConnectRequest);
    // The application lets the new id go without answering.
    drop(req);
    let e = event(&ch, EventKind::Rejected);
    assert_ne!(e.status, 0);
    let _ = cli.ctx;
}

// 127.0.7.9-10
#[test]
fn many_connections_to_one_listener() {
    let sctx = Device::soft(addr(9)).open().unwrap();
    let cctx = Device::soft(addr(10)).open().unwrap();
    let sch = EventChannel::new();
    let l = CmId::new(&sch, PortSpace::TCP).unwrap();
    l.bind(&sctx, 5002).unwrap();
    l.listen().unwrap();
    let cch = EventChannel::new();
    let n = 8;
    let clients: Vec<(Side, CmId)> = (0..n)
        .map(|_| {
            let s = side(&cctx);
            let id = CmId::new(&cch, PortSpace::TCP).unwrap();
            id.connect(
                &cctx,
                SocketAddr::new(addr(9), 5002),
                &s.qp,
                &ConnParam::new(),
            )
            .unwrap();
            (s, id)
        })
        .collect();
    let mut servers = Vec::new();
    for _ in 0..n {
        let req = event(&sch, EventKind::ConnectRequest);
        let s = side(&sctx);
        req.id.accept(Some(&s.qp), &ConnParam::new()).unwrap();
        servers.push((s, req.id));
    }
    let mut established = 0;
    while established < 2 * n {
        let ch = if established < n { &cch } else { &sch };
        event(ch, EventKind::Established);
        established += 1;
    }
    // Every client's QP reaches its own server QP.
    for (i, (c, cid)) in clients.iter().enumerate() {
        let peer = servers
            .iter()
            .find(|(_, id)| id.peer_addr() == cid.local_addr())
            .expect("a server id for each client");
        peer.0
            .qp
            .post_recv(&[RecvWr {
                wr_id: i as u64,
                sg_list: vec![peer.0.mr.sge(0..64)],
            }])
            .unwrap();
        c.mr.write(0, &[i as u8; 64]).unwrap();
        c.qp.post_send(&[SendWr::send(1, &[c.mr.sge(0..64)])])
            .unwrap();
        done(&c.cq);
        done(&peer.0.cq);
        peer.0.mr.with_bytes(|b| assert_eq!(b[..64], [i as u8; 64]));
    }
}
