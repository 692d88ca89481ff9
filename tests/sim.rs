//! Building blocks for engine tests on the simulated network: two or more
//! engines, each with one protection domain, one CQ, and a memory region,
//! and connected QPs between them.

use rxe_core::engine::state::Connect;
use rxe_core::engine::{CqId, Engine, EngineConfig, MrKeys, PdId, QpInit, VecMemory};
use rxe_core::psn::Psn;
use rxe_core::types::*;
use rxe_net::sim::{Faults, SimNet};
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;

/// The virtual address our test regions start at.
pub const IOVA: u64 = 0x1000_0000;

/// One engine's resources in a test.
#[derive(Debug)]
pub struct Node {
    /// Index in the network.
    pub idx: usize,
    /// Its address (a label only: nothing leaves the process).
    pub addr: IpAddr,
    /// Protection domain.
    pub pd: PdId,
    /// One CQ for everything.
    pub cq: CqId,
    /// The test region's bytes.
    pub mem: Arc<VecMemory>,
    /// Its keys.
    pub mr: MrKeys,
}

/// Address of node `i` (127.0.0.x: loopback labels).
pub fn addr(i: usize) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, 0, 0, 10 + i as u8))
}

/// Adds an engine with a `region_len`-byte region open to everything.
pub fn add_node(net: &mut SimNet, seed: u64, region_len: usize) -> Node {
    let a = addr(net.engines.len());
    let mut e = Engine::new(EngineConfig::new(a, seed));
    let pd = e.alloc_pd();
    let cq = e.create_cq(DeviceCaps::default().max_cqe).unwrap();
    let mem = Arc::new(VecMemory::new(region_len));
    let access = Access::LOCAL_WRITE
        | Access::REMOTE_WRITE
        | Access::REMOTE_READ
        | Access::REMOTE_ATOMIC
        | Access::MW_BIND;
    let mr = e.reg_mr(pd, mem.clone(), IOVA, access).unwrap();
    let idx = net.add(e);
    Node {
        idx,
        addr: a,
        pd,
        cq,
        mem,
        mr,
    }
}

/// A network of `n` nodes.
pub fn network(seed: u64, faults: Faults, n: usize, region_len: usize) -> (SimNet, Vec<Node>) {
    let mut net = SimNet::new(seed, faults);
    let nodes = (0..n)
        .map(|i| {
            add_node(
                &mut net,
                seed.wrapping_mul(31).wrapping_add(i as u64),
                region_len,
            )
        })
        .collect();
    (net, nodes)
}

/// Connection parameters.
#[derive(Debug, Clone, Copy)]
pub struct ConnParams {
    /// Transport.
    pub qp_type: QpType,
    /// Path MTU.
    pub mtu: Mtu,
    /// First PSN of side A's requests (B's expected PSN).
    pub psn_a: Psn,
    /// First PSN of side B's requests.
    pub psn_b: Psn,
    /// ACK timeout code.
    pub timeout: u8,
    /// Retries.
    pub retry_cnt: u8,
    /// RNR retries.
    pub rnr_retry: u8,
    /// RNR timer code the responders ask for.
    pub min_rnr_timer: u8,
    /// READ/atomic depth.
    pub rd_atomic: u8,
    /// Queue depths.
    pub depth: u32,
}

impl Default for ConnParams {
    fn default() -> Self {
        ConnParams {
            qp_type: QpType::Rc,
            mtu: Mtu::Mtu1024,
            psn_a: Psn::new(100),
            psn_b: Psn::new(5000),
            timeout: 10,
            retry_cnt: 7,
            rnr_retry: 7,
            min_rnr_timer: 1,
            rd_atomic: 8,
            depth: 1024,
        }
    }
}

/// Creates a QP on a node (RESET).
pub fn create_qp(net: &mut SimNet, n: &Node, p: &ConnParams) -> u32 {
    let cap = QpCap {
        max_send_wr: p.depth,
        max_recv_wr: p.depth,
        ..QpCap::default()
    };
    net.engines[n.idx]
        .create_qp(QpInit {
            qp_type: p.qp_type,
            pd: n.pd,
            send_cq: n.cq,
            recv_cq: n.cq,
            srq: None,
            cap,
            sq_sig_all: false,
        })
        .unwrap()
}

/// Takes a QP to RTS, connected to `remote_qpn` at `remote` (RC/UC) or ready for UD.
#[allow(clippy::too_many_arguments)]
pub fn bring_up(
    net: &mut SimNet,
    n: &Node,
    qpn: u32,
    remote: IpAddr,
    remote_qpn: u32,
    rq_psn: Psn,
    sq_psn: Psn,
    p: &ConnParams,
) {
    let c = Connect {
        qp_type: p.qp_type,
        access: Access::LOCAL_WRITE
            | Access::REMOTE_WRITE
            | Access::REMOTE_READ
            | Access::REMOTE_ATOMIC,
        qkey: 0x1111_1111,
        remote,
        dest_qpn: remote_qpn,
        rq_psn,
        sq_psn,
        mtu: p.mtu,
        rd_atomic: p.rd_atomic,
        min_rnr_timer: p.min_rnr_timer,
        timeout: p.timeout,
        retry_cnt: p.retry_cnt,
        rnr_retry: p.rnr_retry,
        port: 1,
        sgid_index: 0,
    };
    let e = &mut net.engines[n.idx];
    for (a, m) in c.steps() {
        e.modify_qp(qpn, &a, m).unwrap();
    }
}

/// Creates and connects a QP pair between nodes `a` and `b`; returns (qp on a, qp on b).
pub fn connect(net: &mut SimNet, a: &Node, b: &Node, p: &ConnParams) -> (u32, u32) {
    let qa = create_qp(net, a, p);
    let qb = create_qp(net, b, p);
    bring_up(net, a, qa, b.addr, qb, p.psn_b, p.psn_a, p);
    bring_up(net, b, qb, a.addr, qa, p.psn_a, p.psn_b, p);
    (qa, qb)
}

/// An SGE over `len` bytes at `offset` of a node's region.
pub fn sge(n: &Node, offset: u64, len: u32) -> Sge {
    Sge {
        addr: IOVA + offset,
        length: len,
        lkey: n.mr.lkey,
    }
}

/// Drains a node's CQ.
pub fn completions(net: &mut SimNet, n: &Node) -> Vec<Completion> {
    let mut v = Vec::new();
    net.engines[n.idx]
        .poll_cq(n.cq, usize::MAX, &mut v)
        .unwrap();
    v
}
