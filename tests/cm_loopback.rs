//! rdma_cm (`rxe_verbs::cm`) over real UDP on loopback: connections made
//! with the CM protocol's MADs on QP 1, then traffic on the QPs they set up.
//!
//! Address plan: 127.0.7.N, each test its own pair (noted at its top).

use rxe_tests::rxe_bin;
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

// ---- rxe rping, as separate processes -------------------------------------

/// A running `rxe rping`, its output going to files (a pipe nobody reads
/// while it runs would fill and stop it).
struct Rping {
    child: std::process::Child,
    out: std::path::PathBuf,
    err: std::path::PathBuf,
}

fn rping(args: &[&str]) -> Rping {
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let base = std::env::temp_dir().join(format!("rxe-cm-loopback-{}-{n}", std::process::id()));
    let (out, err) = (base.with_extension("out"), base.with_extension("err"));
    let child = std::process::Command::new(rxe_bin())
        .arg("rping")
        .args(args)
        .args(["--timeout", "20"])
        .stdout(std::fs::File::create(&out).unwrap())
        .stderr(std::fs::File::create(&err).unwrap())
        .spawn()
        .expect("start rxe rping");
    Rping { child, out, err }
}

/// Waits for an rping (killing it after 60 s, or at once if `kill`):
/// whether it succeeded, its stdout and its stderr.
fn finish(mut r: Rping, kill: bool) -> (bool, String, String) {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    if kill {
        let _ = r.child.kill();
    }
    while r.child.try_wait().unwrap().is_none() {
        if std::time::Instant::now() > deadline {
            let _ = r.child.kill();
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let ok = r.child.wait().unwrap().success();
    let out = std::fs::read_to_string(&r.out).unwrap_or_default();
    let err = std::fs::read_to_string(&r.err).unwrap_or_default();
    let _ = std::fs::remove_file(&r.out);
    let _ = std::fs::remove_file(&r.err);
    (ok, out, err)
}

/// The client's pings as rping prints them: `ping data: rdma-ping-N: ...`,
/// N from 0, with rping's rolling letters.
fn check_pings(out: &str, prefix: &str, count: usize) {
    let lines: Vec<&str> = out.lines().filter(|l| l.starts_with(prefix)).collect();
    assert_eq!(
        lines.len(),
        count,
        "pings in: {}",
        &out[..out.len().min(300)]
    );
    for (i, l) in lines.iter().enumerate() {
        let want = format!("{prefix}rdma-ping-{i}: {}", (b'A' + i as u8) as char);
        assert!(l.starts_with(&want), "line {i}: {l}");
    }
}

// 127.0.7.20-21
#[test]
fn rxe_rping_client_and_server_processes() {
    let srv = rping(&["-s", "-a", "127.0.7.20", "-p", "7174", "-S", "4000", "-v"]);
    std::thread::sleep(Duration::from_millis(300));
    let cli = rping(&[
        "-c",
        "-a",
        "127.0.7.20",
        "-I",
        "127.0.7.21",
        "-p",
        "7174",
        "-C",
        "20",
        "-S",
        "4000",
        "-v",
        "-V",
    ]);
    let (ok, out, err) = finish(cli, false);
    assert!(ok, "client: {err}");
    check_pings(&out, "ping data: ", 20);
    let (ok, out, err) = finish(srv, false);
    assert!(ok, "server: {err}");
    check_pings(&out, "server ping data: ", 20);
}

// 127.0.7.22-23
#[test]
fn rping_processes_sharing_addresses_find_their_peers() {
    // Two servers on one address (two processes, ports 7174 and 7175), and
    // three clients: two on a second address, one on the servers' own
    // address. Each REQ must reach the process listening on its port, and
    // each REP, RTU, DREQ and DREP the process whose connection it names,
    // whichever of the processes sharing an address the kernel hands it to.
    let a = "127.0.7.22";
    let s1 = rping(&["-s", "-a", a, "-p", "7174", "-v", "-P"]);
    let s2 = rping(&["-s", "-a", a, "-p", "7175", "-v", "-P"]);
    std::thread::sleep(Duration::from_millis(300));
    // Port 7174 has a listener already, in another process: refused.
    let (ok, _, err) = finish(rping(&["-s", "-a", a, "-p", "7174"]), false);
    assert!(!ok && err.contains("listener"), "{err}");
    let clients: Vec<_> = [("127.0.7.23", "7174"), ("127.0.7.23", "7175"), (a, "7174")]
        .into_iter()
        .map(|(src, port)| rping(&["-c", "-a", a, "-I", src, "-p", port, "-C", "5", "-v", "-V"]))
        .collect();
    for c in clients {
        let (ok, out, err) = finish(c, false);
        assert!(ok, "client: {err}");
        check_pings(&out, "ping data: ", 5);
    }
    // The servers heard their clients: 10 pings on 7174, 5 on 7175.
    for (s, n) in [(s1, 10), (s2, 5)] {
        let (_, out, _) = finish(s, true);
        let pings = out
            .lines()
            .filter(|l| l.starts_with("server ping data:"))
            .count();
        assert_eq!(pings, n, "{out}");
    }
}

// 127.0.7.24 (and .25, where nobody is)
#[test]
fn a_server_that_never_answers_is_unreachable_after_the_retries() {
    let cctx = Device::soft(addr(24)).open().unwrap();
    let cli = side(&cctx);
    let ch = EventChannel::new();
    let id = CmId::new(&ch, PortSpace::TCP).unwrap();
    // 4.096 µs × 2^14 = 67 ms per answer (plus the path's 2 × 4.096 µs ×
    // 2^16 = 0.54 s), the REQ sent 3 times: gone after about 1.8 s.
    assert!(id.set_cm_timeout(32, 3).is_err(), "a 5-bit field");
    assert!(id.set_cm_timeout(14, 16).is_err(), "a 4-bit field");
    id.set_cm_timeout(14, 2).unwrap();
    let t0 = std::time::Instant::now();
    id.connect(
        &cctx,
        SocketAddr::new(addr(25), 7174),
        &cli.qp,
        &ConnParam::new(),
    )
    .unwrap();
    let e = event(&ch, EventKind::Unreachable);
    let took = t0.elapsed();
    assert_eq!(e.status, -110, "-ETIMEDOUT");
    assert!(
        took >= Duration::from_millis(1500) && took < Duration::from_secs(15),
        "{took:?}"
    );
    let sent = cctx.cm_counters().unwrap();
    assert_eq!(sent.retries, 2, "{sent:?}");
}
