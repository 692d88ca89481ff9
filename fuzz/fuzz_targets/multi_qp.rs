//! Several QPs of two engines sharing one device's resources, over a
//! network the input drives packet by packet.
//!
//! # Set-up
//!
//! Two sans-IO engines, A (10.0.0.1) and B (10.0.0.2), each with a small
//! device budget (`max_in_flight`, 1 to 32 packets) and send window, one
//! or two CQs (small enough to overflow, or large) shared by all of its
//! QPs, and one SRQ. Between them 2 to 8 QP pairs (pair `k` is QP `k` of A
//! connected to QP `k` of B), each RC, UC or UD, with its own path MTU,
//! first PSNs, ACK timeout, retry and RNR retry counts, RNR timer and
//! READ/atomic depth, all from the input; some pairs receive through the
//! SRQ. Every (side, pair) has its own regions: `L` (gather sources and
//! READ/atomic results), `R` (the target of the peer's WRITEs, READs),
//! `W` (the atomic word the peer's atomics hit), `V` (receive buffers),
//! each followed in the address space by a guard region nobody names, and
//! a shared receive region per side for the SRQ. `L` and `R` end with an
//! "edge" area so that SGEs and remote ranges can sit across their ends.
//!
//! # Input
//!
//! The QP set-up, a list of work requests (pair, posting side, SEND, SEND
//! with immediate, WRITE, WRITE with immediate, READ, fetch-and-add,
//! compare-and-swap; lengths around the MTU; local and remote addresses in
//! their own slot, across a region's end or with a bad key), and steps:
//! post the next work requests, post receives (to the QP or the SRQ),
//! deliver the next packets, drop, duplicate, reorder or corrupt one,
//! let time pass or fire the next timer, and stop or resume polling the
//! CQs (so that they overflow). Then a last phase with a perfect network:
//! everything left is posted, receives are topped up, packets delivered,
//! timers fired, and finally every QP is moved to ERR.
//!
//! Work request `i` of a pair uses slot `i` of the requester's `L` and of
//! the responder's `R`, so each one's bytes can be told apart; payloads
//! are a function of (side, pair, work request).
//!
//! # Oracle
//!
//! * no panic; every packet sent comes from its engine's address, goes to
//!   the other's, has a correct ICRC and parses;
//! * per QP, send completions in posting order and receive completions in
//!   posting order (RQ), each work request at most once, on the CQ its QP
//!   names, with the QP's number; at the end (all QPs in ERR) every send
//!   and RQ receive completed exactly once, except as many as the
//!   `CqError` events of its CQ say were dropped (SRQ receives may be
//!   among those dropped, and no more);
//! * RC: a successful WRITE left exactly its payload in its slot; a
//!   successful SEND or WRITE with immediate was received (in order, byte
//!   for byte, with its immediate); a successful READ holds the
//!   responder's bytes; atomics return the values of a sequential model of
//!   the peer's word, and the word ends at a value the model allows; work
//!   requests with a bad key or a range across a region's end never
//!   succeed;
//! * UC/UD: a message received whole is byte-exact, with its length and
//!   immediate; a WRITE that did not complete at the receiver left in its
//!   slot only bytes of its payload;
//! * no byte outside the ranges named changes: the rest of each slot,
//!   the edge areas, the receive buffers past their SGE, and the guard
//!   regions;
//! * the device budget: a packet not sent before leaves only while the
//!   requester QPs of its engine have fewer than `max_in_flight` packets
//!   unacknowledged (counted from the wire: a lower bound of the engine's
//!   own count);
//! * liveness: when no CQ overflowed, the last phase (no faults) ends with
//!   every send work request completed within a bounded number of timer
//!   firings.
#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use rxe_core::engine::{
    AsyncEvent, CqId, Engine, EngineConfig, IcrcStatus, QpInit, RecvMeta, RegionMemory, SrqId,
    Transmit, VecMemory,
};
use rxe_core::psn::Psn;
use rxe_core::types::*;
use rxe_core::wire::{icrc, Operation, Packet, PacketRepr, ICRC_LEN};
use rxe_fuzz::{at, pattern, QKEY};
use std::collections::{HashMap, VecDeque};
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;

const MAX_PAIRS: usize = 8;
const MAX_OPS: usize = 40;
const MAX_OPS_PER_PAIR: usize = 10;
const MAX_STEPS: usize = 240;
/// Receive slots per (side, pair) and per SRQ.
const RECV_SLOTS: usize = 24;
const SRQ_SLOTS: usize = 48;
/// Bytes per slot; messages are at most `MAX_LEN` (plus a GRH for UD).
const SLOT: usize = 3152;
const MAX_LEN: usize = 3104;
/// The edge area at the end of `L` and `R`.
const EDGE: usize = 512;
const GUARD: usize = 64;
/// Bytes of the atomic word's region.
const WORD: usize = 16;
/// Packets the network holds at most.
const MAX_QUEUE: usize = 4096;
/// Timer firings the last phase may take.
const LIVENESS_FIRINGS: u32 = 300;
const LIVENESS_DELIVERIES: u32 = 60_000;
const GRH: usize = 40;

const ADDR: [IpAddr; 2] = [
    IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)),
    IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)),
];

// ---------------------------------------------------------------- input --

#[derive(Arbitrary, Debug, Clone, Copy)]
struct QpSpec {
    /// 0..=3 RC, 4..=5 UC, 6..=7 UD.
    kind: u8,
    mtu: u8,
    psn: [u32; 2],
    timeout: u8,
    retry: u8,
    rnr_retry: u8,
    min_rnr: u8,
    rd_atomic: u8,
    srq: bool,
    /// Receives posted (of the largest size) before anything is sent, on
    /// each side: `prepost % 4`.
    prepost: u8,
}

#[derive(Arbitrary, Debug, Clone, Copy)]
enum LenSel {
    Zero,
    /// MTU + d (d in -8..=8).
    AroundMtu(i8),
    /// k MTUs + d.
    Mtus(u8, i8),
    Any(u16),
}

#[derive(Arbitrary, Debug, Clone, Copy)]
enum OpKind {
    Send,
    SendImm,
    Write,
    WriteImm,
    Read,
    FetchAdd(u64),
    /// Compare with what the model expects (`true`) or with `u64`.
    CmpSwap(bool, u64, u64),
}

#[derive(Arbitrary, Debug, Clone, Copy)]
struct OpSpec {
    pair: u8,
    from_b: bool,
    kind: OpKind,
    len: LenSel,
    /// 0..=229 own slot, 230..=244 the edge area, 245..=255 a bad key.
    local: u8,
    /// As `local`; `edge` is how far before the region's end.
    remote: u8,
    off: u16,
    edge: u16,
    inline: bool,
    fence: bool,
}

#[derive(Arbitrary, Debug, Clone, Copy)]
enum Step {
    Deliver(u8),
    Drop,
    Duplicate,
    Reorder(u8),
    Corrupt(u16),
    Advance(u32),
    NextTimer,
    Post(u8),
    Recv {
        pair: u8,
        side: bool,
        len: LenSel,
        bad: u8,
    },
    SrqRecv {
        side: bool,
        len: LenSel,
        bad: u8,
    },
    Hold(bool),
}

#[derive(Arbitrary, Debug)]
struct Input {
    budget: [u8; 2],
    window: u8,
    cq_size: [u8; 2],
    two_cqs: bool,
    qps: Vec<QpSpec>,
    ops: Vec<OpSpec>,
    steps: Vec<Step>,
}

// ---------------------------------------------------------------- model --

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Place {
    Slot,
    Edge,
    Bad,
}

fn place(sel: u8) -> Place {
    match sel {
        0..=229 => Place::Slot,
        230..=244 => Place::Edge,
        _ => Place::Bad,
    }
}

#[derive(Debug, Clone, Copy)]
enum AtomicOp {
    Add(u64),
    Cas(u64, u64),
}

impl AtomicOp {
    fn apply(self, v: u64) -> u64 {
        match self {
            AtomicOp::Add(a) => v.wrapping_add(a),
            AtomicOp::Cas(c, s) => {
                if v == c {
                    s
                } else {
                    v
                }
            }
        }
    }
}

/// A region with the guard right after it in the address space.
struct Region {
    mem: Arc<VecMemory>,
    iova: u64,
    lkey: u32,
    rkey: u32,
    guard: Arc<VecMemory>,
    /// What the region held when it was registered (edge areas, words).
    init: Vec<u8>,
}

#[derive(Debug)]
struct Op {
    side: usize,
    opcode: SendOpcode,
    len: usize,
    /// What a SEND or WRITE carries; what a READ must bring back.
    data: Vec<u8>,
    local: Place,
    remote: Place,
    /// Offset of the local SGE in `L`.
    loff: usize,
    /// Offset in the responder's slot (or, for an edge target, in `R`).
    roff: usize,
    /// Sent inline (a SEND or WRITE from its own slot, at most 256 bytes).
    inline: bool,
    fence: bool,
    /// The local SGE lies across the end of `L`.
    local_crosses: bool,
    /// The remote range lies across the end of `R` (or `W`).
    remote_crosses: bool,
    imm: u32,
    atomic: Option<AtomicOp>,
    /// Atomic target: aligned word of `W` (0), misaligned (4), across the
    /// end (12).
    word_off: usize,
    posted: bool,
    done: Option<Completion>,
    /// Received whole (SEND, WRITE with immediate) at least once.
    received: bool,
}

impl Op {
    fn consumes_receive(&self) -> bool {
        matches!(
            self.opcode,
            SendOpcode::Send | SendOpcode::SendWithImm | SendOpcode::RdmaWriteWithImm
        )
    }

    /// A work request that cannot succeed whatever the network does.
    fn must_fail(&self, t: QpType) -> bool {
        // A zero-length SGE or RDMA range names no memory: no key is
        // checked (as in verbs).
        let local = self.len > 0 && (self.local == Place::Bad || self.local_crosses);
        let remote_named = matches!(
            self.opcode,
            SendOpcode::RdmaWrite
                | SendOpcode::RdmaWriteWithImm
                | SendOpcode::RdmaRead
                | SendOpcode::AtomicCmpSwap
                | SendOpcode::AtomicFetchAdd
        );
        let remote = remote_named
            && self.len > 0
            && (self.remote == Place::Bad
                || self.remote_crosses
                || (self.atomic.is_some() && self.word_off != 0));
        local || (t == QpType::Rc && remote)
    }
}

#[derive(Debug)]
struct Recv {
    side: usize,
    /// `Some(pair)` for a receive posted to the QP, `None` for the SRQ.
    pair: Option<usize>,
    slot: usize,
    len: usize,
    bad: bool,
    done: Option<Completion>,
}

struct SideQp {
    qpn: u32,
    l: Region,
    r: Region,
    w: Region,
    v: Region,
    /// Send work requests this side posted, in posting order (op indices).
    sends: Vec<usize>,
    last_send: Option<usize>,
    /// RQ receives (indices into `Harness::recvs`), in posting order.
    recvs: Vec<usize>,
    last_recv: Option<usize>,
    /// The peer's receive-consuming work requests received so far (RC).
    consumed: usize,
    // The device budget, seen from the wire.
    sent_high: Psn,
    acked_ub: Psn,
    // The model of the peer's atomic word, hit by this side's atomics.
    word: u64,
    /// Atomics posted after the last successful one.
    pending_atomics: Vec<usize>,
    /// The next atomic's compare value if every earlier one succeeds.
    word_if_all: u64,
    /// A WRITE of this side's peer targeted this side's `R` edge area.
    r_edge_dirty: bool,
}

struct Pair {
    t: QpType,
    mtu: usize,
    srq: bool,
    side: [SideQp; 2],
    ops: Vec<Op>,
}

struct Dev {
    e: Engine,
    send_cq: CqId,
    recv_cq: CqId,
    srq: SrqId,
    s: Region,
    srq_recvs: usize,
    /// CqError events per CQ.
    cq_errors: HashMap<CqId, u64>,
    max_in_flight: u32,
}

struct Harness {
    dev: [Dev; 2],
    pairs: Vec<Pair>,
    /// Posting order of the work requests: (pair, op index).
    order: Vec<(usize, usize)>,
    next_post: usize,
    recvs: Vec<Recv>,
    by_qpn: [HashMap<u32, usize>; 2],
    net: VecDeque<(usize, Transmit)>,
    now: u64,
    hold: bool,
}

fn wr_id(kind: u64, side: usize, pair: usize, idx: usize) -> u64 {
    kind << 56 | (side as u64) << 48 | (pair as u64) << 40 | idx as u64
}

fn seed(side: usize, pair: usize, idx: usize, what: u64) -> u64 {
    what << 40 | (side as u64) << 32 | (pair as u64) << 16 | idx as u64
}

fn length(l: LenSel, mtu: usize) -> usize {
    let v = match l {
        LenSel::Zero => 0,
        LenSel::AroundMtu(d) => mtu as i64 + i64::from(d % 9),
        LenSel::Mtus(k, d) => (mtu * usize::from(k % 4)) as i64 + i64::from(d % 9),
        LenSel::Any(n) => i64::from(n),
    };
    (v.max(0) as usize).min(MAX_LEN)
}

fn mtu_of(sel: u8) -> Mtu {
    match sel % 8 {
        0..=2 => Mtu::Mtu256,
        3..=4 => Mtu::Mtu512,
        5..=6 => Mtu::Mtu1024,
        _ => Mtu::Mtu4096,
    }
}

fn region(
    e: &mut Engine,
    pd: rxe_core::engine::mem::PdId,
    len: usize,
    iova: u64,
    access: Access,
    init: Vec<u8>,
) -> Region {
    let mem = Arc::new(VecMemory::new(len));
    mem.write(0, &init);
    let k = e.reg_mr(pd, mem.clone(), iova, access).expect("reg_mr");
    let guard = Arc::new(VecMemory::new(GUARD));
    e.reg_mr(pd, guard.clone(), iova + len as u64, Access::empty())
        .expect("reg_mr guard");
    Region {
        mem,
        iova,
        lkey: k.lkey,
        rkey: k.rkey,
        guard,
        init,
    }
}

fn iova(side: usize, pair: usize, r: u64) -> u64 {
    (1 + side as u64 * 16 + pair as u64) << 32 | r << 24
}

fn read(m: &VecMemory, off: usize, len: usize) -> Vec<u8> {
    let mut b = vec![0u8; len];
    assert!(m.read(off, &mut b), "read {off}+{len} of a region");
    b
}

/// The envelope of a packet an engine sends: from `src` to `dst`, a
/// correct ICRC, headers that parse.
fn check_sent(t: &Transmit, src: IpAddr, dst: IpAddr) {
    assert_eq!(t.src, src, "sent from a foreign address: {t:?}");
    assert_eq!(t.dst, dst, "sent to a stranger: {t:?}");
    let n = t.payload.len();
    assert!(n >= ICRC_LEN, "a packet shorter than its ICRC");
    let crc = icrc::compute_udp(t.src, t.dst, t.src_port, &t.payload[..n - ICRC_LEN])
        .expect("ICRC of an emitted packet");
    assert_eq!(
        crc.to_le_bytes(),
        t.payload[n - ICRC_LEN..],
        "an emitted packet with a wrong ICRC"
    );
    let p = Packet::new_checked(&t.payload[..]).expect("an emitted packet parses");
    PacketRepr::parse(&p).expect("an emitted packet's headers parse");
}

fn icrc_ok(t: &Transmit) -> bool {
    let n = t.payload.len();
    n >= ICRC_LEN
        && icrc::compute_udp(t.src, t.dst, t.src_port, &t.payload[..n - ICRC_LEN])
            .is_ok_and(|c| c.to_le_bytes() == t.payload[n - ICRC_LEN..])
}

impl Harness {
    fn new(input: &Input) -> Harness {
        let budgets = [1u32, 2, 3, 4, 6, 8, 16, 32];
        let windows = [4u32, 8, 16, 128];
        let mut specs: Vec<QpSpec> = input.qps.iter().take(MAX_PAIRS).copied().collect();
        while specs.len() < 2 {
            specs.push(QpSpec {
                kind: 0,
                mtu: 0,
                psn: [0, 0],
                timeout: 0,
                retry: 7,
                rnr_retry: 7,
                min_rnr: 1,
                rd_atomic: 3,
                srq: specs.len() == 1,
                prepost: 1,
            });
        }
        // How many work requests each pair gets (slots to allocate).
        let mut per_pair = vec![0usize; specs.len()];
        let mut order = Vec::new();
        for o in input.ops.iter().take(MAX_OPS) {
            let k = usize::from(o.pair) % specs.len();
            if per_pair[k] < MAX_OPS_PER_PAIR {
                order.push((k, per_pair[k]));
                per_pair[k] += 1;
            }
        }
        let mut devs = Vec::new();
        for s in 0..2 {
            let mut c = EngineConfig::new(ADDR[s], 0x5eed + s as u64);
            c.max_in_flight = budgets[usize::from(input.budget[s] % 8)];
            c.max_unacked_psns = windows[usize::from(input.window % 4)];
            let mut e = Engine::new(c);
            let pd = e.alloc_pd();
            let size = |b: u8| {
                if b >= 200 {
                    4096
                } else {
                    2 + u32::from(b % 30)
                }
            };
            let send_cq = e.create_cq(size(input.cq_size[0])).expect("cq");
            let recv_cq = if input.two_cqs {
                e.create_cq(size(input.cq_size[1])).expect("cq")
            } else {
                send_cq
            };
            let srq = e.create_srq(pd, 256, 4, 0).expect("srq");
            let sr = region(
                &mut e,
                pd,
                SRQ_SLOTS * SLOT,
                iova(s, 15, 7),
                Access::LOCAL_WRITE,
                Vec::new(),
            );
            devs.push((
                Dev {
                    e,
                    send_cq,
                    recv_cq,
                    srq,
                    s: sr,
                    srq_recvs: 0,
                    cq_errors: HashMap::new(),
                    max_in_flight: budgets[usize::from(input.budget[s] % 8)],
                },
                pd,
            ));
        }
        let mut pairs = Vec::new();
        let mut by_qpn = [HashMap::new(), HashMap::new()];
        for (k, q) in specs.iter().enumerate() {
            let t = match q.kind % 8 {
                0..=3 => QpType::Rc,
                4..=5 => QpType::Uc,
                _ => QpType::Ud,
            };
            let n = per_pair[k];
            let mut sides = Vec::new();
            for (s, (d, pd)) in devs.iter_mut().enumerate() {
                let e = &mut d.e;
                let pd = *pd;
                let mut l_init = vec![0u8; n * SLOT];
                l_init.extend(pattern(seed(s, k, 0, 1), EDGE));
                let mut r_init = vec![0u8; n * SLOT];
                r_init.extend(pattern(seed(s, k, 0, 2), EDGE));
                let w_init = pattern(seed(s, k, 0, 3), WORD);
                let all = Access::LOCAL_WRITE
                    | Access::REMOTE_WRITE
                    | Access::REMOTE_READ
                    | Access::REMOTE_ATOMIC;
                let l = region(
                    e,
                    pd,
                    n * SLOT + EDGE,
                    iova(s, k, 0),
                    Access::LOCAL_WRITE,
                    l_init,
                );
                let r = region(e, pd, n * SLOT + EDGE, iova(s, k, 1), all, r_init);
                let w = region(e, pd, WORD, iova(s, k, 2), all, w_init);
                let v = region(
                    e,
                    pd,
                    RECV_SLOTS * SLOT,
                    iova(s, k, 3),
                    Access::LOCAL_WRITE,
                    Vec::new(),
                );
                let qpn = e
                    .create_qp(QpInit {
                        qp_type: t,
                        pd,
                        send_cq: d.send_cq,
                        recv_cq: d.recv_cq,
                        srq: q.srq.then_some(d.srq),
                        cap: QpCap::default(),
                        sq_sig_all: true,
                    })
                    .expect("create_qp");
                by_qpn[s].insert(qpn, k);
                sides.push(SideQp {
                    qpn,
                    l,
                    r,
                    w,
                    v,
                    sends: Vec::new(),
                    last_send: None,
                    recvs: Vec::new(),
                    last_recv: None,
                    consumed: 0,
                    sent_high: Psn::new(q.psn[s]),
                    acked_ub: Psn::new(q.psn[s]),
                    word: 0,
                    pending_atomics: Vec::new(),
                    word_if_all: 0,
                    r_edge_dirty: false,
                });
            }
            let [a, b]: [SideQp; 2] = sides.try_into().ok().expect("two sides");
            let mtu = mtu_of(q.mtu);
            let mut p = Pair {
                t,
                mtu: if t == QpType::Ud { 4096 } else { mtu.bytes() },
                srq: q.srq,
                side: [a, b],
                ops: Vec::new(),
            };
            // The model of each side's target word: the peer's W.
            for s in 0..2 {
                let v = u64::from_ne_bytes(p.side[1 - s].w.init[..8].try_into().expect("8"));
                p.side[s].word = v;
                p.side[s].word_if_all = v;
            }
            for s in 0..2 {
                let peer_qpn = p.side[1 - s].qpn;
                let e = &mut devs[s].0.e;
                connect(e, p.side[s].qpn, t, q, s, mtu, ADDR[1 - s], peer_qpn);
            }
            pairs.push(p);
        }
        // The work requests themselves.
        let mut it = input.ops.iter().take(MAX_OPS);
        let mut count = vec![0usize; pairs.len()];
        for o in &mut it {
            let k = usize::from(o.pair) % pairs.len();
            if count[k] >= MAX_OPS_PER_PAIR {
                continue;
            }
            count[k] += 1;
            let side = usize::from(o.from_b);
            let p = &mut pairs[k];
            let i = p.ops.len();
            let op = make_op(p, k, i, side, o);
            p.ops.push(op);
        }
        let dev: [Dev; 2] = devs
            .into_iter()
            .map(|(d, _)| d)
            .collect::<Vec<_>>()
            .try_into()
            .ok()
            .expect("two devices");
        let mut h = Harness {
            dev,
            pairs,
            order,
            next_post: 0,
            recvs: Vec::new(),
            by_qpn,
            net: VecDeque::new(),
            now: 0,
            hold: false,
        };
        for (k, q) in specs.iter().enumerate() {
            for s in 0..2 {
                for _ in 0..q.prepost % 4 {
                    h.post_recv(s, Some(k), SLOT, false);
                }
            }
        }
        h
    }
}

#[allow(clippy::too_many_arguments)]
fn connect(
    e: &mut Engine,
    qpn: u32,
    t: QpType,
    q: &QpSpec,
    s: usize,
    mtu: Mtu,
    peer: IpAddr,
    peer_qpn: u32,
) {
    use QpAttrMask as M;
    let ud = t == QpType::Ud;
    let rd = 1 + q.rd_atomic % 8;
    let a = QpAttr {
        state: QpState::Init,
        port: 1,
        pkey_index: 0,
        qkey: QKEY,
        access: Access::LOCAL_WRITE
            | Access::REMOTE_WRITE
            | Access::REMOTE_READ
            | Access::REMOTE_ATOMIC,
        ..QpAttr::default()
    };
    let m = M::STATE | M::PKEY_INDEX | M::PORT | if ud { M::QKEY } else { M::ACCESS_FLAGS };
    e.modify_qp(qpn, &a, m).expect("INIT");
    let mut a = QpAttr {
        state: QpState::Rtr,
        ..QpAttr::default()
    };
    let mut m = M::STATE;
    if !ud {
        a.av = Some(AddressVector::to(peer));
        a.path_mtu = mtu;
        a.dest_qpn = peer_qpn;
        a.rq_psn = Psn::new(q.psn[1 - s]);
        m |= M::AV | M::PATH_MTU | M::DEST_QPN | M::RQ_PSN;
        if t == QpType::Rc {
            a.max_dest_rd_atomic = rd;
            a.min_rnr_timer = q.min_rnr % 32;
            m |= M::MAX_DEST_RD_ATOMIC | M::MIN_RNR_TIMER;
        }
    }
    e.modify_qp(qpn, &a, m).expect("RTR");
    let mut a = QpAttr {
        state: QpState::Rts,
        sq_psn: Psn::new(q.psn[s]),
        ..QpAttr::default()
    };
    let mut m = M::STATE | M::SQ_PSN;
    if t == QpType::Rc {
        a.timeout = 8 + q.timeout % 10;
        a.retry_cnt = q.retry % 8;
        a.rnr_retry = q.rnr_retry % 8;
        a.max_rd_atomic = rd;
        m |= M::TIMEOUT | M::RETRY_CNT | M::RNR_RETRY | M::MAX_QP_RD_ATOMIC;
    }
    e.modify_qp(qpn, &a, m).expect("RTS");
}

fn make_op(p: &mut Pair, k: usize, i: usize, side: usize, o: &OpSpec) -> Op {
    let t = p.t;
    let opcode = match (o.kind, t) {
        (OpKind::Send, _) => SendOpcode::Send,
        (OpKind::SendImm, _) => SendOpcode::SendWithImm,
        (OpKind::Write | OpKind::Read | OpKind::FetchAdd(_) | OpKind::CmpSwap(..), QpType::Ud) => {
            SendOpcode::Send
        }
        (OpKind::WriteImm, QpType::Ud) => SendOpcode::SendWithImm,
        (OpKind::Write, _) => SendOpcode::RdmaWrite,
        (OpKind::WriteImm, _) => SendOpcode::RdmaWriteWithImm,
        (OpKind::Read | OpKind::FetchAdd(_) | OpKind::CmpSwap(..), QpType::Uc) => {
            SendOpcode::RdmaWrite
        }
        (OpKind::Read, _) => SendOpcode::RdmaRead,
        (OpKind::FetchAdd(_), _) => SendOpcode::AtomicFetchAdd,
        (OpKind::CmpSwap(..), _) => SendOpcode::AtomicCmpSwap,
    };
    let is_atomic = matches!(
        opcode,
        SendOpcode::AtomicCmpSwap | SendOpcode::AtomicFetchAdd
    );
    let len = if is_atomic { 8 } else { length(o.len, p.mtu) };
    let local = if opcode == SendOpcode::RdmaRead || is_atomic {
        // Results go to the own slot (or a bad key).
        if place(o.local) == Place::Bad {
            Place::Bad
        } else {
            Place::Slot
        }
    } else {
        place(o.local)
    };
    let remote = place(o.remote);
    let edge_d = usize::from(o.edge) % (EDGE + 1);
    let local_crosses = local == Place::Edge && len > edge_d;
    let sq = &p.side[side];
    let peer = &p.side[1 - side];
    let loff = match local {
        Place::Edge => sq.l.init.len() - edge_d,
        _ => i * SLOT,
    };
    let data = match opcode {
        SendOpcode::RdmaRead => {
            if remote == Place::Edge {
                let start = peer.r.init.len() - edge_d;
                let end = (start + len).min(peer.r.init.len());
                peer.r.init[start..end].to_vec()
            } else {
                pattern(seed(1 - side, k, i, 4), len)
            }
        }
        _ if is_atomic => Vec::new(),
        _ => match local {
            Place::Edge => sq.l.init[loff..(loff + len).min(sq.l.init.len())].to_vec(),
            _ => pattern(seed(side, k, i, 5), len),
        },
    };
    let roff = match remote {
        Place::Edge => peer.r.init.len() - edge_d,
        _ => usize::from(o.off) % (SLOT - len + 1),
    };
    let remote_crosses = remote == Place::Edge && len > edge_d;
    let atomic = match o.kind {
        OpKind::FetchAdd(a) if is_atomic => Some(AtomicOp::Add(a)),
        OpKind::CmpSwap(hint, c, s) if is_atomic => Some(AtomicOp::Cas(
            if hint { p.side[side].word_if_all } else { c },
            s,
        )),
        _ => None,
    };
    let word_off = match remote {
        Place::Slot => 0,
        Place::Edge if o.edge % 2 == 0 => 4,
        Place::Edge => 12,
        Place::Bad => 0,
    };
    if let (Some(a), 0, Place::Slot) = (atomic, word_off, remote) {
        let sq = &mut p.side[side];
        sq.word_if_all = a.apply(sq.word_if_all);
    }
    if opcode == SendOpcode::RdmaWrite || opcode == SendOpcode::RdmaWriteWithImm {
        if remote == Place::Edge {
            p.side[1 - side].r_edge_dirty = true;
        }
    }
    let inline = o.inline
        && local == Place::Slot
        && len <= 256
        && matches!(
            opcode,
            SendOpcode::Send
                | SendOpcode::SendWithImm
                | SendOpcode::RdmaWrite
                | SendOpcode::RdmaWriteWithImm
        );
    Op {
        side,
        opcode,
        len,
        data,
        local,
        remote,
        loff,
        roff,
        inline,
        fence: o.fence,
        local_crosses,
        remote_crosses,
        imm: 0xa000_0000 | (side as u32) << 24 | (k as u32) << 16 | i as u32,
        atomic,
        word_off,
        posted: false,
        done: None,
        received: false,
    }
}

impl Harness {
    /// Posts the next work request in the input's order.
    fn post_next(&mut self) {
        let Some(&(k, i)) = self.order.get(self.next_post) else {
            return;
        };
        self.next_post += 1;
        let p = &mut self.pairs[k];
        let t = p.t;
        let op = &p.ops[i];
        let s = op.side;
        let peer_qpn = p.side[1 - s].qpn;
        let (sq, peer) = {
            let [a, b] = &mut p.side;
            if s == 0 {
                (a, b)
            } else {
                (b, a)
            }
        };
        let mut wr = SendWr::new(wr_id(1, s, k, i), op.opcode);
        // The source bytes, the READ's expected bytes at the responder.
        let is_atomic = op.atomic.is_some();
        if op.local == Place::Slot && !is_atomic && op.opcode != SendOpcode::RdmaRead {
            sq.l.mem.write(op.loff, &op.data);
        }
        let sge = Sge {
            addr: sq.l.iova + op.loff as u64,
            length: op.len as u32,
            lkey: if op.local == Place::Bad {
                sq.l.lkey ^ 0x100
            } else {
                sq.l.lkey
            },
        };
        if op.opcode == SendOpcode::RdmaRead && op.remote == Place::Slot {
            peer.r.mem.write(i * SLOT + op.roff, &op.data);
        }
        wr.sg_list = vec![sge];
        if op.inline {
            wr.inline_data = Some(op.data.clone());
            wr.flags |= SendFlags::INLINE;
        }
        if op.fence {
            wr.flags |= SendFlags::FENCE;
        }
        match op.remote {
            Place::Slot | Place::Bad => {
                wr.remote_addr = peer.r.iova + (i * SLOT + op.roff) as u64;
                wr.rkey = peer.r.rkey;
            }
            Place::Edge => {
                wr.remote_addr = peer.r.iova + op.roff as u64;
                wr.rkey = peer.r.rkey;
            }
        }
        if let Some(a) = op.atomic {
            wr.remote_addr = peer.w.iova + op.word_off as u64;
            wr.rkey = peer.w.rkey;
            match a {
                AtomicOp::Add(x) => wr.compare_add = x,
                AtomicOp::Cas(c, x) => {
                    wr.compare_add = c;
                    wr.swap = x;
                }
            }
        }
        if op.remote == Place::Bad {
            wr.rkey ^= 0x100;
        }
        if matches!(
            op.opcode,
            SendOpcode::SendWithImm | SendOpcode::RdmaWriteWithImm
        ) {
            wr.imm_data = op.imm;
        }
        if t == QpType::Ud {
            wr.ud = Some(UdDest {
                av: AddressVector::to(ADDR[1 - s]),
                remote_qpn: peer_qpn,
                remote_qkey: QKEY,
            });
        }
        let qpn = sq.qpn;
        if self.dev[s].e.post_send(qpn, wr).is_ok() {
            let p = &mut self.pairs[k];
            p.ops[i].posted = true;
            p.side[s].sends.push(i);
            if p.ops[i].atomic.is_some() {
                p.side[s].pending_atomics.push(i);
            }
        }
        self.settle();
    }
}

fn micros_of(t: std::time::Instant) -> u64 {
    let d = t.saturating_duration_since(rxe_fuzz::t0());
    d.as_nanos().div_ceil(1000) as u64
}

fn decode_imm(imm: u32) -> Option<(usize, usize, usize)> {
    (imm >> 28 == 0xa).then_some((
        (imm >> 24 & 0xf) as usize,
        (imm >> 16 & 0xff) as usize,
        (imm & 0xffff) as usize,
    ))
}

impl Harness {
    /// Drains what both engines send into the network, the events, and
    /// (unless held) the CQs.
    fn settle(&mut self) {
        for s in 0..2 {
            while let Some(t) = self.dev[s].e.poll_transmit(at(self.now)) {
                check_sent(&t, ADDR[s], ADDR[1 - s]);
                self.budget_check(s, &t);
                if self.net.len() < MAX_QUEUE {
                    self.net.push_back((1 - s, t));
                }
            }
        }
        self.poll_events();
        if !self.hold {
            self.poll_cqs();
        }
    }

    fn poll_events(&mut self) {
        for d in &mut self.dev {
            while let Some(ev) = d.e.poll_event() {
                if let AsyncEvent::CqError(c) = ev {
                    *d.cq_errors.entry(c).or_default() += 1;
                }
            }
        }
    }

    fn overflowed(&self, s: usize, cq: CqId) -> bool {
        self.dev[s].cq_errors.get(&cq).is_some_and(|&n| n > 0)
    }

    /// Packets the RC requesters of engine `s` have unacknowledged, as far
    /// as the wire shows: at most what the engine counts.
    fn in_flight_lb(&self, s: usize) -> u32 {
        self.pairs
            .iter()
            .filter(|p| p.t == QpType::Rc)
            .map(|p| {
                let q = &p.side[s];
                let state = self.dev[s].e.query_qp(q.qpn).expect("qp").0.state;
                if matches!(state, QpState::Rts | QpState::Sqd) {
                    q.acked_ub.distance_to(q.sent_high)
                } else {
                    0
                }
            })
            .sum()
    }

    fn budget_check(&mut self, s: usize, t: &Transmit) {
        let p = Packet::new_checked(&t.payload[..]).expect("parsed before");
        let info = p.info();
        if !info.operation.is_request() {
            return;
        }
        let Some(&k) = self.by_qpn[1 - s].get(&p.bth().dest_qp()) else {
            // UD: the peer's QP number is in the work request; every UD
            // QP of ours sends to its pair's.
            return;
        };
        if self.pairs[k].t != QpType::Rc {
            return;
        }
        let psn = p.bth().psn();
        let sent_high = self.pairs[k].side[s].sent_high;
        if !psn.is_before(sent_high) {
            let lb = self.in_flight_lb(s);
            assert!(
                lb < self.dev[s].max_in_flight,
                "engine {s} sent a new packet (pair {k}, PSN {psn:?}) with {lb} packets \
                 unacknowledged, max_in_flight {}",
                self.dev[s].max_in_flight
            );
        }
        let last = if info.operation == Operation::ReadRequest {
            let len = p.reth().expect("RETH").dma_len() as usize;
            psn.add((len.div_ceil(self.pairs[k].mtu).max(1) - 1) as u32)
        } else {
            psn
        };
        let q = &mut self.pairs[k].side[s];
        if !last.is_before(q.sent_high) {
            q.sent_high = last.add(1);
        }
    }

    /// A response reaching engine `to`: the acknowledged PSN can be no
    /// later than it.
    fn note_response(&mut self, to: usize, t: &Transmit) {
        let Ok(p) = Packet::new_checked(&t.payload[..]) else {
            return;
        };
        if p.info().operation.is_request() {
            return;
        }
        let Some(&k) = self.by_qpn[to].get(&p.bth().dest_qp()) else {
            return;
        };
        let q = &mut self.pairs[k].side[to];
        let psn = p.bth().psn();
        if !psn.is_before(q.acked_ub) {
            q.acked_ub = if psn.is_before(q.sent_high) {
                psn.add(1)
            } else {
                q.sent_high
            };
        }
    }

    fn deliver(&mut self, to: usize, mut t: Transmit, corrupt: Option<u16>) {
        if let Some(b) = corrupt {
            let n = t.payload.len();
            if n > 0 {
                let b = usize::from(b) % (n * 8);
                t.payload[b / 8] ^= 1 << (b % 8);
            }
        }
        let ok = icrc_ok(&t);
        if ok {
            self.note_response(to, &t);
        }
        let meta = RecvMeta {
            src: t.src,
            dst: t.dst,
            src_port: t.src_port,
            icrc: if ok { IcrcStatus::Ok } else { IcrcStatus::Bad },
        };
        self.dev[to]
            .e
            .handle_datagram(at(self.now), meta, &t.payload);
    }

    fn fire_next_timer(&mut self) -> bool {
        let Some(t) = [self.dev[0].e.next_timeout(), self.dev[1].e.next_timeout()]
            .into_iter()
            .flatten()
            .min()
        else {
            return false;
        };
        self.now = self.now.max(micros_of(t));
        for d in &mut self.dev {
            d.e.handle_timeout(at(self.now));
        }
        true
    }

    fn post_recv(&mut self, s: usize, pair: Option<usize>, len: usize, bad: bool) {
        let pair = pair.filter(|&k| !self.pairs[k].srq);
        let len = len.min(SLOT);
        let (slot, region, id) = match pair {
            Some(k) => {
                let q = &self.pairs[k].side[s];
                let slot = q.recvs.len();
                if slot >= RECV_SLOTS {
                    return;
                }
                (slot, &q.v, wr_id(2, s, k, slot))
            }
            None => {
                let slot = self.dev[s].srq_recvs;
                if slot >= SRQ_SLOTS {
                    return;
                }
                (slot, &self.dev[s].s, wr_id(3, s, 0, slot))
            }
        };
        let wr = RecvWr {
            wr_id: id,
            sg_list: vec![Sge {
                addr: region.iova + (slot * SLOT) as u64,
                length: len as u32,
                lkey: if bad {
                    region.lkey ^ 0x100
                } else {
                    region.lkey
                },
            }],
        };
        let r = match pair {
            Some(k) => self.dev[s].e.post_recv(self.pairs[k].side[s].qpn, wr),
            None => self.dev[s].e.post_srq_recv(self.dev[s].srq, wr),
        };
        if r.is_ok() {
            let idx = self.recvs.len();
            self.recvs.push(Recv {
                side: s,
                pair,
                slot,
                len,
                bad,
                done: None,
            });
            match pair {
                Some(k) => self.pairs[k].side[s].recvs.push(idx),
                None => self.dev[s].srq_recvs += 1,
            }
        }
        self.settle();
    }

    fn recv_index(&self, s: usize, pair: Option<usize>, slot: usize) -> usize {
        match pair {
            Some(k) => self.pairs[k].side[s].recvs[slot],
            None => self
                .recvs
                .iter()
                .position(|r| r.side == s && r.pair.is_none() && r.slot == slot)
                .expect("an SRQ receive"),
        }
    }

    fn poll_cqs(&mut self) {
        let mut wc = Vec::new();
        for s in 0..2 {
            let cqs = [self.dev[s].send_cq, self.dev[s].recv_cq];
            for (j, &cq) in cqs.iter().enumerate() {
                if j == 1 && cqs[1] == cqs[0] {
                    continue;
                }
                wc.clear();
                self.dev[s]
                    .e
                    .poll_cq(cq, usize::MAX, &mut wc)
                    .expect("poll_cq");
                for c in &wc {
                    self.on_completion(s, cq, c);
                }
            }
        }
    }

    fn on_completion(&mut self, s: usize, cq: CqId, c: &Completion) {
        let kind = c.wr_id >> 56;
        let side = (c.wr_id >> 48 & 0xff) as usize;
        let k = (c.wr_id >> 40 & 0xff) as usize;
        let i = (c.wr_id & 0xff_ffff_ffff) as usize;
        assert_eq!(side, s, "a completion of the other engine's work: {c:?}");
        match kind {
            1 => {
                assert_eq!(cq, self.dev[s].send_cq, "a send completion on the wrong CQ");
                let overflow = self.overflowed(s, cq);
                let p = &mut self.pairs[k];
                let t = p.t;
                assert_eq!(c.qp_num, p.side[s].qpn, "a send completion of another QP");
                let pos = p.side[s]
                    .sends
                    .iter()
                    .position(|&x| x == i)
                    .unwrap_or_else(|| panic!("a completion of nothing posted: {c:?}"));
                let op = &mut p.ops[i];
                assert!(op.done.is_none(), "completed twice: {c:?}");
                assert!(
                    p.side[s].last_send.is_none_or(|l| pos > l),
                    "a send completion out of posting order: {c:?}"
                );
                p.side[s].last_send = Some(pos);
                op.done = Some(*c);
                if c.status != WcStatus::Success {
                    return;
                }
                assert!(
                    !op.must_fail(t),
                    "a work request that cannot succeed did: {op:?}"
                );
                let want = match op.opcode {
                    SendOpcode::Send | SendOpcode::SendWithImm => WcOpcode::Send,
                    SendOpcode::RdmaWrite | SendOpcode::RdmaWriteWithImm => WcOpcode::RdmaWrite,
                    SendOpcode::RdmaRead => WcOpcode::RdmaRead,
                    SendOpcode::AtomicCmpSwap => WcOpcode::CompSwap,
                    SendOpcode::AtomicFetchAdd => WcOpcode::FetchAdd,
                    _ => unreachable!(),
                };
                assert_eq!(c.opcode, want, "a completion with the wrong opcode");
                if let Some(a) = op.atomic {
                    let got = u64::from_ne_bytes(
                        read(&p.side[s].l.mem, op.loff, 8)
                            .try_into()
                            .expect("8 bytes"),
                    );
                    // Atomics before it whose completions are missing: the
                    // CQ dropped them (RC executes in order, so they took
                    // effect).
                    let at = p.side[s]
                        .pending_atomics
                        .iter()
                        .position(|&j| j == i)
                        .expect("a pending atomic");
                    assert!(
                        at == 0 || overflow,
                        "pair {k} side {s}: an atomic succeeded after an earlier one did not"
                    );
                    let before: Vec<usize> = p.side[s].pending_atomics.drain(..=at).collect();
                    for &j in &before[..at] {
                        let o = &p.ops[j];
                        if o.remote == Place::Slot && o.word_off == 0 {
                            let w = o.atomic.expect("an atomic").apply(p.side[s].word);
                            p.side[s].word = w;
                        }
                    }
                    let q = &mut p.side[s];
                    assert_eq!(
                        got, q.word,
                        "pair {k} side {s}: an atomic returned other than the model's value"
                    );
                    q.word = a.apply(q.word);
                }
            }
            2 | 3 => {
                assert_eq!(
                    cq, self.dev[s].recv_cq,
                    "a receive completion on the wrong CQ"
                );
                let srq = kind == 3;
                let r = self.recv_index(s, (!srq).then_some(k), i);
                assert!(self.recvs[r].done.is_none(), "received twice: {c:?}");
                self.recvs[r].done = Some(*c);
                let k = if srq {
                    let k = *self.by_qpn[s]
                        .get(&c.qp_num)
                        .unwrap_or_else(|| panic!("an SRQ completion of no QP: {c:?}"));
                    assert!(self.pairs[k].srq, "an SRQ completion on a QP without it");
                    k
                } else {
                    let q = &mut self.pairs[k].side[s];
                    assert_eq!(c.qp_num, q.qpn, "a receive completion of another QP");
                    assert!(
                        q.last_recv.is_none_or(|l| i > l),
                        "a receive completion out of posting order: {c:?}"
                    );
                    q.last_recv = Some(i);
                    k
                };
                if c.status == WcStatus::Success {
                    self.check_receive(s, k, r, cq, c);
                }
            }
            _ => panic!("a completion with an unknown wr_id: {c:?}"),
        }
    }

    /// A receive completed successfully on engine `s`, pair `k`.
    fn check_receive(&mut self, s: usize, k: usize, r: usize, cq: CqId, c: &Completion) {
        let rec = &self.recvs[r];
        // A WRITE with immediate consumes a receive without touching its
        // scatter list; an empty message writes nothing either.
        assert!(
            !rec.bad || c.opcode == WcOpcode::RecvRdmaWithImm || c.byte_len == 0,
            "a receive with a bad key succeeded: {c:?}"
        );
        let mem = match rec.pair {
            Some(_) => self.pairs[k].side[s].v.mem.clone(),
            None => self.dev[s].s.mem.clone(),
        };
        let sge_len = rec.len;
        let from_rq = rec.pair.is_some();
        let buf = read(&mem, rec.slot * SLOT, SLOT);
        let n = c.byte_len as usize;
        let overflowed = self.overflowed(s, cq);
        let p = &mut self.pairs[k];
        let t = p.t;
        assert!(
            n <= sge_len || c.opcode == WcOpcode::RecvRdmaWithImm,
            "byte_len past the receive buffer: {c:?}"
        );
        let off = if t == QpType::Ud { GRH } else { 0 };
        let peer = 1 - s;
        let consumers: Vec<usize> = p.side[peer]
            .sends
            .iter()
            .copied()
            .filter(|&j| p.ops[j].consumes_receive())
            .collect();
        let idx = match (c.opcode, c.imm_data) {
            (WcOpcode::RecvRdmaWithImm | WcOpcode::Recv, Some(imm)) => {
                let (side, kk, j) =
                    decode_imm(imm).unwrap_or_else(|| panic!("an immediate nobody sent: {c:?}"));
                assert!(
                    side == peer && kk == k && j < p.ops.len() && p.ops[j].side == peer,
                    "an immediate of another QP's work request: {c:?}"
                );
                let want = if c.opcode == WcOpcode::Recv {
                    SendOpcode::SendWithImm
                } else {
                    SendOpcode::RdmaWriteWithImm
                };
                assert_eq!(
                    p.ops[j].opcode, want,
                    "an immediate with another opcode: {c:?}"
                );
                j
            }
            (WcOpcode::Recv, None) => {
                let fits = |j: usize| {
                    let o = &p.ops[j];
                    o.opcode == SendOpcode::Send && o.len + off == n && buf[off..n] == o.data[..]
                };
                let from = if t == QpType::Rc {
                    p.side[s].consumed
                } else {
                    0
                };
                let cand: Vec<usize> = consumers
                    .iter()
                    .skip(from)
                    .copied()
                    .filter(|&j| fits(j))
                    .collect();
                assert!(
                    !cand.is_empty(),
                    "pair {k} ({t:?}): a SEND received that nobody sent: {c:?}"
                );
                cand[0]
            }
            _ => panic!("a receive completion with a send opcode: {c:?}"),
        };
        let o = &p.ops[idx];
        if c.opcode == WcOpcode::Recv {
            assert_eq!(
                n,
                o.len + off,
                "pair {k}: a SEND received with another length: {c:?}"
            );
            assert!(
                buf[off..n] == o.data[..],
                "pair {k}: a SEND received with other bytes"
            );
            // Past the message (but inside the SGE) verbs promises
            // nothing, and a UC message dropped half-way leaves bytes in a
            // WQE that goes back to its queue: to the same UC QP, or to the
            // SRQ, where any QP may take it. A QP's own RQ on RC or UD
            // never sees that.
            if t != QpType::Uc && from_rq {
                assert!(
                    buf[n..sge_len].iter().all(|&b| b == 0),
                    "pair {k}: bytes past a received SEND changed"
                );
            }
        } else {
            assert_eq!(
                n, o.len,
                "a WRITE with immediate received with another length"
            );
            let at = if o.remote == Place::Edge {
                o.roff
            } else {
                idx * SLOT + o.roff
            };
            let rr = read(&p.side[s].r.mem, at, o.data.len());
            assert!(
                rr == o.data,
                "pair {k}: a WRITE with immediate received without its bytes"
            );
            if t == QpType::Rc && from_rq {
                assert!(
                    buf[..sge_len].iter().all(|&b| b == 0),
                    "a WRITE with immediate wrote into the receive buffer"
                );
            }
        }
        if t == QpType::Rc {
            assert!(!o.received, "pair {k}: an RC message received twice");
            let pos = consumers
                .iter()
                .position(|&j| j == idx)
                .expect("a consumer");
            assert!(
                pos >= p.side[s].consumed,
                "pair {k}: an RC message received out of order"
            );
            assert!(
                overflowed || pos == p.side[s].consumed,
                "pair {k}: an RC message received with one before it missing"
            );
            p.side[s].consumed = pos + 1;
        }
        p.ops[idx].received = true;
    }

    fn step(&mut self, st: &Step) {
        match *st {
            Step::Deliver(n) => {
                for _ in 0..1 + n % 8 {
                    let Some((to, t)) = self.net.pop_front() else {
                        break;
                    };
                    self.deliver(to, t, None);
                    self.settle();
                }
            }
            Step::Drop => {
                self.net.pop_front();
            }
            Step::Duplicate => {
                if let Some((to, t)) = self.net.front().cloned() {
                    self.deliver(to, t, None);
                }
            }
            Step::Reorder(k) => {
                if self.net.len() >= 2 {
                    let x = self.net.pop_front().expect("a packet");
                    let at = 1 + usize::from(k) % (self.net.len());
                    self.net.insert(at.min(self.net.len()), x);
                }
            }
            Step::Corrupt(b) => {
                if let Some((to, t)) = self.net.pop_front() {
                    self.deliver(to, t, Some(b));
                }
            }
            Step::Advance(us) => {
                self.now += u64::from(us % 1_000_000);
                for d in &mut self.dev {
                    d.e.handle_timeout(at(self.now));
                }
            }
            Step::NextTimer => {
                self.fire_next_timer();
            }
            Step::Post(n) => {
                for _ in 0..1 + n % 4 {
                    self.post_next();
                }
            }
            Step::Recv {
                pair,
                side,
                len,
                bad,
            } => {
                let k = usize::from(pair) % self.pairs.len();
                let mtu = self.pairs[k].mtu;
                self.post_recv(
                    usize::from(side),
                    Some(k),
                    length(len, mtu) + GRH,
                    bad >= 240,
                );
            }
            Step::SrqRecv { side, len, bad } => {
                self.post_recv(usize::from(side), None, length(len, 1024) + GRH, bad >= 240);
            }
            Step::Hold(h) => self.hold = h,
        }
        self.settle();
    }

    fn all_sends_done(&self) -> bool {
        self.pairs
            .iter()
            .all(|p| p.ops.iter().all(|o| !o.posted || o.done.is_some()))
    }

    /// Enough receives for every receive-consuming RC work request still
    /// open.
    fn top_up(&mut self) {
        for s in 0..2 {
            let mut srq_need = 0;
            for k in 0..self.pairs.len() {
                let p = &self.pairs[k];
                if p.t != QpType::Rc {
                    continue;
                }
                let need = p
                    .ops
                    .iter()
                    .filter(|o| o.side != s && o.posted && o.done.is_none() && o.consumes_receive())
                    .count();
                if p.srq {
                    srq_need += need;
                    continue;
                }
                let open = p.side[s]
                    .recvs
                    .iter()
                    .filter(|&&r| self.recvs[r].done.is_none())
                    .count();
                for _ in open..need {
                    self.post_recv(s, Some(k), SLOT, false);
                }
            }
            // A UC QP holds the WQE of a message it has begun until the
            // next one begins (the rest may never come): one per UC QP on
            // the SRQ is not there for the others.
            let held = self
                .pairs
                .iter()
                .filter(|p| p.srq && p.t == QpType::Uc)
                .count();
            let open = self
                .recvs
                .iter()
                .filter(|r| r.side == s && r.pair.is_none() && r.done.is_none())
                .count()
                .saturating_sub(held);
            for _ in open..srq_need {
                self.post_recv(s, None, SLOT, false);
            }
        }
    }

    fn finish(mut self) {
        // The last phase: a perfect network.
        self.hold = false;
        while self.next_post < self.order.len() {
            self.post_next();
        }
        self.settle();
        let (mut firings, mut deliveries) = (0u32, 0u32);
        loop {
            if let Some((to, t)) = self.net.pop_front() {
                self.deliver(to, t, None);
                deliveries += 1;
                assert!(
                    deliveries < LIVENESS_DELIVERIES,
                    "liveness: packets go back and forth for ever"
                );
                self.settle();
                continue;
            }
            if self.all_sends_done() {
                break;
            }
            self.top_up();
            if !self.net.is_empty() {
                continue;
            }
            if firings >= LIVENESS_FIRINGS || !self.fire_next_timer() {
                break;
            }
            firings += 1;
            self.settle();
        }
        let overflow = self
            .dev
            .iter()
            .any(|d| d.cq_errors.values().any(|&n| n > 0));
        if !overflow && !self.all_sends_done() {
            let open: Vec<(usize, usize, &Op)> = self
                .pairs
                .iter()
                .enumerate()
                .flat_map(|(k, p)| {
                    p.ops
                        .iter()
                        .enumerate()
                        .filter(|(_, o)| o.posted && o.done.is_none())
                        .map(move |(i, o)| (k, i, o))
                })
                .collect();
            let states: Vec<_> = self
                .pairs
                .iter()
                .map(|p| [0, 1].map(|s| self.dev[s].e.query_qp(p.side[s].qpn).expect("qp").0.state))
                .collect();
            panic!(
                "liveness: after {firings} timer firings and {deliveries} packets of a perfect \
                 network, work requests still open: {open:?}; QP states {states:?}; \
                 next timeouts {:?} {:?}; receives {:?}; counters A {:?}, B {:?}",
                self.dev[0].e.next_timeout(),
                self.dev[1].e.next_timeout(),
                self.recvs,
                self.dev[0].e.counters(),
                self.dev[1].e.counters(),
            );
        }
        // Every QP to ERR: everything left is flushed.
        for k in 0..self.pairs.len() {
            for s in 0..2 {
                let a = QpAttr {
                    state: QpState::Err,
                    ..QpAttr::default()
                };
                let _ = self.dev[s]
                    .e
                    .modify_qp(self.pairs[k].side[s].qpn, &a, QpAttrMask::STATE);
                self.settle();
            }
        }
        self.settle();
        self.check_end();
    }

    fn check_end(&self) {
        // Exactly once, but for what the CQs' overruns dropped.
        for s in 0..2 {
            let d = &self.dev[s];
            let mut lost: HashMap<CqId, u64> = HashMap::new();
            let mut srq_open = 0u64;
            for p in &self.pairs {
                for o in p.ops.iter().filter(|o| o.posted && o.side == s) {
                    if o.done.is_none() {
                        *lost.entry(d.send_cq).or_default() += 1;
                    }
                }
            }
            for r in self.recvs.iter().filter(|r| r.side == s) {
                if r.done.is_none() {
                    if r.pair.is_some() {
                        *lost.entry(d.recv_cq).or_default() += 1;
                    } else {
                        srq_open += 1;
                    }
                }
            }
            for cq in [d.send_cq, d.recv_cq] {
                let l = lost.get(&cq).copied().unwrap_or(0);
                let errors = d.cq_errors.get(&cq).copied().unwrap_or(0);
                let srq = if cq == d.recv_cq { srq_open } else { 0 };
                assert!(
                    l <= errors && errors <= l + srq,
                    "engine {s}: {l} work requests never completed and {srq} SRQ receives \
                     open, but {errors} CQ overruns reported on {cq:?}"
                );
            }
        }
        for (k, p) in self.pairs.iter().enumerate() {
            for s in 0..2 {
                self.check_memory(k, p, s);
            }
        }
        for s in 0..2 {
            let d = &self.dev[s];
            assert!(
                d.s.guard.snapshot().iter().all(|&b| b == 0),
                "the SRQ region's guard changed"
            );
        }
        for r in &self.recvs {
            let mem = match r.pair {
                Some(k) => &self.pairs[k].side[r.side].v.mem,
                None => &self.dev[r.side].s.mem,
            };
            let from = if r.bad { 0 } else { r.len };
            let b = read(mem, r.slot * SLOT + from, SLOT - from);
            assert!(
                b.iter().all(|&x| x == 0),
                "a receive buffer changed past its SGE (or with a bad key): {r:?}"
            );
        }
    }

    /// Side `s` of pair `k`: its `L` (as requester), its `R` and `W` (as
    /// responder), the guards.
    fn check_memory(&self, k: usize, p: &Pair, s: usize) {
        let q = &p.side[s];
        let peer = &p.side[1 - s];
        let t = p.t;
        let zero = |b: &[u8]| b.iter().all(|&x| x == 0);
        for (g, name) in [(&q.l, "L"), (&q.r, "R"), (&q.w, "W"), (&q.v, "V")] {
            assert!(
                zero(&g.guard.snapshot()),
                "pair {k} side {s}: the guard after {name} changed"
            );
        }
        let n = p.ops.len();
        // The edge areas.
        let le = read(&q.l.mem, n * SLOT, EDGE);
        assert!(
            le == q.l.init[n * SLOT..],
            "pair {k} side {s}: L's edge area changed"
        );
        if !q.r_edge_dirty {
            let re = read(&q.r.mem, n * SLOT, EDGE);
            assert!(
                re == q.r.init[n * SLOT..],
                "pair {k} side {s}: R's edge area changed"
            );
        }
        // The word the peer's atomics hit.
        let w = read(&q.w.mem, 0, WORD);
        assert!(
            w[8..] == q.w.init[8..],
            "pair {k} side {s}: bytes past the atomic word changed"
        );
        let got = u64::from_ne_bytes(w[..8].try_into().expect("8"));
        let mut v = peer.word;
        let mut ok = got == v;
        for &j in &peer.pending_atomics {
            let o = &p.ops[j];
            if o.remote == Place::Slot && o.word_off == 0 {
                v = o.atomic.expect("an atomic").apply(v);
            }
            ok |= got == v;
        }
        assert!(
            ok,
            "pair {k} side {s}: the atomic word {got:#x} is no value the model allows"
        );
        for (i, o) in p.ops.iter().enumerate() {
            let slot_l = read(&q.l.mem, i * SLOT, SLOT);
            let slot_r = read(&q.r.mem, i * SLOT, SLOT);
            let success = o.done.is_some_and(|c| c.status == WcStatus::Success);
            if o.side == s {
                // Our work request: our L slot.
                let is_write_src = !matches!(o.opcode, SendOpcode::RdmaRead)
                    && o.atomic.is_none()
                    && o.local == Place::Slot
                    && o.posted;
                if is_write_src {
                    assert!(slot_l[..o.len] == o.data[..], "pair {k}: a source changed");
                    assert!(
                        zero(&slot_l[o.len..]),
                        "pair {k}: bytes past a source changed"
                    );
                } else if o.opcode == SendOpcode::RdmaRead {
                    let b = &slot_l[..o.len];
                    let exact = o.remote == Place::Slot || !peer.r_edge_dirty;
                    if success && exact {
                        assert!(
                            b == &o.data[..],
                            "pair {k} side {s}: a successful READ ({i}) without the responder's bytes"
                        );
                    } else if exact && o.data.len() == o.len {
                        assert!(
                            b.iter().zip(&o.data).all(|(&x, &y)| x == 0 || x == y),
                            "pair {k} side {s}: a READ ({i}) wrote bytes the responder does not hold"
                        );
                    }
                    assert!(
                        zero(&slot_l[o.len..]),
                        "pair {k}: a READ wrote past its SGE"
                    );
                    if o.local == Place::Bad {
                        assert!(zero(&slot_l), "pair {k}: a READ with a bad lkey wrote");
                    }
                } else if o.atomic.is_some() {
                    assert!(
                        zero(&slot_l[8..]),
                        "pair {k}: an atomic wrote past its 8 bytes"
                    );
                    if o.local == Place::Bad {
                        assert!(zero(&slot_l), "pair {k}: an atomic with a bad lkey wrote");
                    }
                } else {
                    assert!(zero(&slot_l), "pair {k}: an unused L slot changed");
                }
                assert!(
                    zero(&slot_r),
                    "pair {k} side {s}: R slot {i} of the requester changed"
                );
            } else {
                // The peer's work request: our R slot.
                assert!(
                    zero(&slot_l),
                    "pair {k} side {s}: L slot {i} of the responder changed"
                );
                let writes = matches!(
                    o.opcode,
                    SendOpcode::RdmaWrite | SendOpcode::RdmaWriteWithImm
                );
                if o.posted && writes && o.remote == Place::Slot && o.local != Place::Bad {
                    let (a, b) = (o.roff, o.roff + o.len);
                    let whole = (t == QpType::Rc && success) || o.received;
                    if whole {
                        assert!(
                            slot_r[a..b] == o.data[..],
                            "pair {k} side {s}: a completed WRITE ({i}) did not land whole"
                        );
                    } else {
                        assert!(
                            slot_r[a..b]
                                .iter()
                                .zip(&o.data)
                                .all(|(&x, &y)| x == 0 || x == y),
                            "pair {k} side {s}: a WRITE ({i}) left bytes not its own"
                        );
                    }
                    assert!(
                        zero(&slot_r[..a]) && zero(&slot_r[b..]),
                        "pair {k} side {s}: a WRITE ({i}) landed outside its range"
                    );
                } else if o.posted && o.opcode == SendOpcode::RdmaRead && o.remote == Place::Slot {
                    let (a, b) = (o.roff, o.roff + o.len);
                    assert!(
                        slot_r[a..b] == o.data[..],
                        "pair {k}: READ source bytes changed"
                    );
                    assert!(
                        zero(&slot_r[..a]) && zero(&slot_r[b..]),
                        "pair {k}: R slot changed"
                    );
                } else {
                    assert!(zero(&slot_r), "pair {k} side {s}: R slot {i} changed");
                }
                if t == QpType::Rc && success && o.consumes_receive() {
                    assert!(
                        o.received || self.overflowed(s, self.dev[s].recv_cq),
                        "pair {k}: an RC work request ({i}, {:?}) completed at the requester \
                         but never at the responder",
                        o.opcode
                    );
                }
            }
        }
    }
}

fuzz_target!(|input: Input| {
    let mut h = Harness::new(&input);
    for st in input.steps.iter().take(MAX_STEPS) {
        h.step(st);
    }
    h.finish();
});
