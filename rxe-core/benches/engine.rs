//! Hot paths of the engine, per core: requester segmentation (a 1 MiB RDMA
//! WRITE cut into path-MTU packets) and responder placement (those packets
//! written into the peer's region, ACKs back), in packets per second.
//!
//! Two engines are joined directly in one thread, no network in between,
//! so the figure is the protocol's own cost.
//!
//! `cargo bench -p rxe-core --bench engine`

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use rxe_core::engine::{Engine, EngineConfig, IcrcStatus, QpInit, RecvMeta, VecMemory};
use rxe_core::psn::Psn;
use rxe_core::types::*;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Instant;

const LEN: usize = 1 << 20;

struct Pair {
    a: Engine,
    b: Engine,
    qa: u32,
    cq_a: rxe_core::engine::CqId,
    lkey: u32,
    rkey: u32,
    a_addr: IpAddr,
    b_addr: IpAddr,
}

fn engine(
    addr: IpAddr,
) -> (
    Engine,
    rxe_core::engine::PdId,
    rxe_core::engine::CqId,
    u32,
    u32,
) {
    let mut e = Engine::new(EngineConfig::new(addr, 1));
    let pd = e.alloc_pd();
    let cq = e.create_cq(4096).unwrap();
    let mem = Arc::new(VecMemory::new(LEN));
    let keys = e
        .reg_mr(
            pd,
            mem,
            0x1000_0000,
            Access::LOCAL_WRITE | Access::REMOTE_WRITE,
        )
        .unwrap();
    let qpn = e
        .create_qp(QpInit {
            qp_type: QpType::Rc,
            pd,
            send_cq: cq,
            recv_cq: cq,
            srq: None,
            cap: QpCap::default(),
            sq_sig_all: true,
        })
        .unwrap();
    (e, pd, cq, qpn, keys.lkey)
}

fn up(e: &mut Engine, qpn: u32, remote: IpAddr, rqpn: u32, mtu: Mtu) {
    let m =
        QpAttrMask::STATE | QpAttrMask::PKEY_INDEX | QpAttrMask::PORT | QpAttrMask::ACCESS_FLAGS;
    let a = QpAttr {
        state: QpState::Init,
        access: Access::LOCAL_WRITE | Access::REMOTE_WRITE,
        ..QpAttr::default()
    };
    e.modify_qp(qpn, &a, m).unwrap();
    let a = QpAttr {
        state: QpState::Rtr,
        av: Some(AddressVector::to(remote)),
        path_mtu: mtu,
        dest_qpn: rqpn,
        rq_psn: Psn::new(0),
        max_dest_rd_atomic: 1,
        min_rnr_timer: 1,
        ..QpAttr::default()
    };
    let m = QpAttrMask::STATE
        | QpAttrMask::AV
        | QpAttrMask::PATH_MTU
        | QpAttrMask::DEST_QPN
        | QpAttrMask::RQ_PSN
        | QpAttrMask::MAX_DEST_RD_ATOMIC
        | QpAttrMask::MIN_RNR_TIMER;
    e.modify_qp(qpn, &a, m).unwrap();
    let a = QpAttr {
        state: QpState::Rts,
        sq_psn: Psn::new(0),
        timeout: 14,
        retry_cnt: 7,
        rnr_retry: 7,
        max_rd_atomic: 1,
        ..QpAttr::default()
    };
    let m = QpAttrMask::STATE
        | QpAttrMask::SQ_PSN
        | QpAttrMask::TIMEOUT
        | QpAttrMask::RETRY_CNT
        | QpAttrMask::RNR_RETRY
        | QpAttrMask::MAX_QP_RD_ATOMIC;
    e.modify_qp(qpn, &a, m).unwrap();
}

fn pair(mtu: Mtu) -> Pair {
    let a_addr: IpAddr = "127.0.0.2".parse().unwrap();
    let b_addr: IpAddr = "127.0.0.3".parse().unwrap();
    let (mut a, _, cq_a, qa, lkey) = engine(a_addr);
    let (mut b, _, _, qb, rkey) = engine(b_addr);
    up(&mut a, qa, b_addr, qb, mtu);
    up(&mut b, qb, a_addr, qa, mtu);
    Pair {
        a,
        b,
        qa,
        cq_a,
        lkey,
        rkey,
        a_addr,
        b_addr,
    }
}

/// One 1 MiB WRITE from A to B, driven to completion. Returns packets moved.
fn write_once(p: &mut Pair, now: Instant) -> u64 {
    let mut wr = SendWr::new(1, SendOpcode::RdmaWrite);
    wr.sg_list = vec![Sge {
        addr: 0x1000_0000,
        length: LEN as u32,
        lkey: p.lkey,
    }];
    wr.remote_addr = 0x1000_0000;
    wr.rkey = p.rkey;
    p.a.post_send(p.qa, wr).unwrap();
    let meta_ab = RecvMeta {
        src: p.a_addr,
        dst: p.b_addr,
        src_port: 4791,
        icrc: IcrcStatus::Ok,
    };
    let meta_ba = RecvMeta {
        src: p.b_addr,
        dst: p.a_addr,
        src_port: 4791,
        icrc: IcrcStatus::Ok,
    };
    let mut moved = 0;
    let mut done = Vec::new();
    loop {
        let mut any = false;
        while let Some(t) = p.a.poll_transmit(now) {
            p.b.handle_datagram(now, meta_ab, &t.payload);
            moved += 1;
            any = true;
        }
        while let Some(t) = p.b.poll_transmit(now) {
            p.a.handle_datagram(now, meta_ba, &t.payload);
            any = true;
        }
        done.clear();
        p.a.poll_cq(p.cq_a, 16, &mut done).unwrap();
        if !done.is_empty() {
            assert_eq!(done[0].status, WcStatus::Success);
            return moved;
        }
        assert!(any, "stalled");
    }
}

fn bench_write(c: &mut Criterion) {
    let mut g = c.benchmark_group("engine_rc_write_1MiB");
    for mtu in [Mtu::Mtu1024, Mtu::Mtu4096] {
        let mut p = pair(mtu);
        let now = Instant::now();
        let pkts = write_once(&mut p, now);
        g.throughput(Throughput::Elements(pkts));
        g.bench_function(format!("mtu{}", mtu.bytes()), |b| {
            b.iter(|| write_once(&mut p, now))
        });
    }
    g.finish();
}

criterion_group!(benches, bench_write);
criterion_main!(benches);
