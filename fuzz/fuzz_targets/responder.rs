//! The responder against a hostile peer: arbitrary packet sequences into an
//! engine that has registered regions of every kind of access, with an
//! oracle for the one thing RDMA must never do — touch memory outside what
//! was granted.
//!
//! # Set-up (the same for every input)
//!
//! One engine (127.0.0.1) with these regions, each its own `VecMemory`
//! filled with a pattern:
//!
//! | # | bytes | access                       | address                  |
//! |---|-------|------------------------------|--------------------------|
//! | 0 | 4096  | all remote rights            | 0x1000_0000              |
//! | 1 | 3000  | REMOTE_READ only             | 0x2000_0003              |
//! | 2 | 1000  | LOCAL_WRITE + REMOTE_WRITE   | 0x3000_0000              |
//! | 3 | 64    | LOCAL_WRITE + REMOTE_ATOMIC  | 0x4000_0000              |
//! | 4 | 2048  | LOCAL_WRITE (receive buffers)| 0x5000_0000              |
//! | 5 | 512   | none                         | 0x6000_0000              |
//! | 6 | 1024  | all, but in another PD       | 0x7000_0000              |
//! | 7 | 4096  | LOCAL_WRITE + MW_BIND        | 0x8000_0000              |
//! | 8 | 256   | read/write, zero-based       | 0                        |
//! | 9 | 1024  | all, deregistered at once    | 0x9000_0000              |
//! |10 | 256   | read/write, right after #0   | 0x1000_1000              |
//!
//! and three windows on region 7: a type 1 window over [1024, 2048) with
//! READ/WRITE, a type 2 window bound through the RC QP over [3072, 3584)
//! with READ/WRITE/ATOMIC (zero-based if the input says so), and a type 1
//! window never bound. QPs, all connected to the fake peer 127.0.0.2: an RC
//! QP with every remote right (path MTU from the input), an RC QP with no
//! remote rights, a UC QP (remote write), and a UD QP. Receives are posted
//! in region 4 (and one across regions 2 and 4).
//!
//! # Input
//!
//! A sequence of actions (the `arbitrary` crate): structured packets
//! (opcode from the QP's transport, the table or any byte; PSN mostly the
//! expected one, else near it or anywhere; rkey among the real, stale and
//! random ones; address and length around the bounds of the key's range;
//! payload; every other header field; from the peer or a third party; ICRC
//! verdict good, bad or unverified; optionally cut short), whole
//! multi-packet WRITE and SEND messages, READ requests, atomics, raw bytes
//! (optionally patched to reach a QP), and the harness's own moves: replays
//! of recent packets, receive posts, deregistrations, QPs forced to ERR and
//! reconnected, and timer firings. The selectors are biased towards valid
//! values so that libFuzzer gets past the first checks. Every packet goes
//! through `handle_datagram`, and everything the engine wants to send is
//! drained after each one.
//!
//! # Oracle
//!
//! After every packet:
//!
//! * a byte of a region changed only if it lies in a range the peer named,
//!   on the QP the packet came in on, in a WRITE or atomic with a live key
//!   granting that right on that QP (region or window, with the QP's own
//!   rights), or in a receive buffer posted to that QP with a valid lkey of
//!   a region with LOCAL_WRITE; ranges go away when their key does
//!   (deregistration, window invalidation);
//! * every READ response packet's payload is byte for byte what lies at
//!   the position the peer named, in a region or window that grants
//!   REMOTE_READ on that QP through a live key, and has the length the
//!   READ's length and the MTU call for;
//! * an atomic acknowledge carries the value that was in memory, and the
//!   memory then holds the operation's result (or it is a replay of an
//!   earlier acknowledge);
//! * a packet with a bad ICRC, a packet from a third party to a connected
//!   QP, and a packet to a QP in ERR change nothing and make nothing be
//!   sent; every packet counts in `rcvd_pkts`, bad ICRCs in the drops;
//! * everything sent goes from 127.0.0.1 to the peer with a correct ICRC
//!   and parses, and is a response;
//! * at the end every posted receive has completed exactly once.
#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use rxe_core::engine::mem::MwType;
use rxe_core::engine::{
    CqId, DropReason, Engine, EngineConfig, IcrcStatus, QpInit, RegionMemory, VecMemory,
};
use rxe_core::psn::Psn;
use rxe_core::types::*;
use rxe_core::wire::opcode::ALL;
use rxe_core::wire::{
    AethRepr, AethSyndrome, AtomicAckEthRepr, AtomicEthRepr, BthRepr, DethRepr, FethRepr, Opcode,
    OpcodeInfo, Operation, Packet, PacketRepr, Position, RdethRepr, RethRepr, Transport,
};
use rxe_fuzz::*;
use std::collections::{HashSet, VecDeque};
use std::net::IpAddr;
use std::sync::Arc;

const MAX_ACTIONS: usize = 160;
const MAX_MSG: usize = 9000;

const ALL_REMOTE: Access = Access::LOCAL_WRITE
    .union(Access::REMOTE_WRITE)
    .union(Access::REMOTE_READ)
    .union(Access::REMOTE_ATOMIC);

struct RegionSpec {
    len: usize,
    access: Access,
    iova: u64,
    other_pd: bool,
}

const REGIONS: [RegionSpec; 11] = [
    RegionSpec {
        len: 4096,
        access: ALL_REMOTE,
        iova: 0x1000_0000,
        other_pd: false,
    },
    RegionSpec {
        len: 3000,
        access: Access::REMOTE_READ,
        iova: 0x2000_0003,
        other_pd: false,
    },
    RegionSpec {
        len: 1000,
        access: Access::LOCAL_WRITE.union(Access::REMOTE_WRITE),
        iova: 0x3000_0000,
        other_pd: false,
    },
    RegionSpec {
        len: 64,
        access: Access::LOCAL_WRITE.union(Access::REMOTE_ATOMIC),
        iova: 0x4000_0000,
        other_pd: false,
    },
    RegionSpec {
        len: 2048,
        access: Access::LOCAL_WRITE,
        iova: 0x5000_0000,
        other_pd: false,
    },
    RegionSpec {
        len: 512,
        access: Access::empty(),
        iova: 0x6000_0000,
        other_pd: false,
    },
    RegionSpec {
        len: 1024,
        access: ALL_REMOTE,
        iova: 0x7000_0000,
        other_pd: true,
    },
    RegionSpec {
        len: 4096,
        access: Access::LOCAL_WRITE.union(Access::MW_BIND),
        iova: 0x8000_0000,
        other_pd: false,
    },
    RegionSpec {
        len: 256,
        access: Access::LOCAL_WRITE
            .union(Access::REMOTE_WRITE)
            .union(Access::REMOTE_READ)
            .union(Access::ZERO_BASED),
        iova: 0xa000_0000,
        other_pd: false,
    },
    RegionSpec {
        len: 1024,
        access: ALL_REMOTE,
        iova: 0x9000_0000,
        other_pd: false,
    },
    RegionSpec {
        len: 256,
        access: Access::LOCAL_WRITE
            .union(Access::REMOTE_WRITE)
            .union(Access::REMOTE_READ),
        iova: 0x1000_1000,
        other_pd: false,
    },
];
const MW_REGION: usize = 7;
const DEREG_REGION: usize = 9;
const RECV_REGION: usize = 4;

// ---------------------------------------------------------------- input --

// The selectors are small numbers mapped so that most values mean
// something valid (the expected PSN, a real key, an address inside the
// key's range, a good ICRC from the peer) and the rest the hostile cases:
// libFuzzer then reaches deep engine states instead of drowning in
// packets the first check refuses.

/// Which QP: mostly the RC QP with every right.
#[derive(Arbitrary, Debug, Clone, Copy)]
struct QpSel(u8);

/// The opcode: mostly one of the QP's transport, else any of the table,
/// else an unknown byte.
#[derive(Arbitrary, Debug, Clone, Copy)]
struct OpSel(u8);

/// The PSN: mostly the expected one, else up to 48 behind or ahead, or
/// (255) anywhere.
#[derive(Arbitrary, Debug, Clone, Copy)]
struct PsnSel(u8);

/// The key: a region's (0..=10), a window's (11..=13), a stale one
/// (14..=16), or any number (17).
#[derive(Arbitrary, Debug, Clone, Copy)]
struct KeySel(u8);

/// The address: mostly inside the key's range or just past it; from
/// 0xff00, up to 255 bytes before it.
#[derive(Arbitrary, Debug, Clone, Copy)]
struct VaSel(u16);

/// The DMA length: mostly around the key's range; 0xfffc to the end of
/// the range, 0xfffd the payload length, 0xfffe and 0xffff huge.
#[derive(Arbitrary, Debug, Clone, Copy)]
struct LenSel(u16);

/// The payload length: a third of the time one MTU, else up to an MTU
/// and a bit.
#[derive(Arbitrary, Debug, Clone, Copy)]
struct PayloadSel(u16);

/// Who sends and how it arrives: mostly the peer with a good ICRC, else a
/// third party, a bad or unverified ICRC, or a packet cut short.
#[derive(Arbitrary, Debug, Clone, Copy)]
struct Env(u8);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum IcrcSel {
    Good,
    Bad,
    Unverified,
}

impl Env {
    const PEER: Env = Env(0);
    fn peer(self) -> bool {
        !(200..220).contains(&self.0)
    }
    fn icrc(self) -> IcrcSel {
        match self.0 {
            220..=234 => IcrcSel::Bad,
            235..=244 => IcrcSel::Unverified,
            _ => IcrcSel::Good,
        }
    }
    /// Bytes cut off the end (the ICRC is computed over what is left).
    fn cut(self) -> usize {
        match self.0 {
            245..=255 => usize::from(self.0 - 244) * 3,
            _ => 0,
        }
    }
}

#[derive(Arbitrary, Debug, Clone)]
struct Pkt {
    qp: QpSel,
    op: OpSel,
    psn: PsnSel,
    /// ack_req, solicited, mig_req, fecn, becn; bits 5-7 all set: P_Key
    /// 0x7fff, else 0xffff.
    flags: u8,
    /// The PSN when `psn` is 255, the key when `key` says "any".
    far: u32,
    /// Not from the input: an opcode that overrides `op`.
    #[arbitrary(default)]
    opcode: Option<u8>,
    key: KeySel,
    va: VaSel,
    len: LenSel,
    payload: PayloadSel,
    seed: u8,
    imm: u32,
    inv: KeySel,
    qkey_ok: bool,
    src_qp: u32,
    swap_add: u64,
    compare: u64,
    syndrome: u8,
    msn: u32,
    orig: u64,
    env: Env,
}

impl Pkt {
    /// A packet with every field at a plain default, to QP `qp`.
    fn plain(qp: QpSel) -> Pkt {
        Pkt {
            qp,
            op: OpSel(0),
            psn: PsnSel(0),
            flags: 0,
            far: 0,
            key: KeySel(0),
            va: VaSel(0),
            len: LenSel(0),
            payload: PayloadSel(0),
            seed: 0,
            imm: 0,
            inv: KeySel(17),
            qkey_ok: true,
            src_qp: 0,
            swap_add: 0,
            compare: 0,
            syndrome: 0,
            msn: 0,
            orig: 0,
            env: Env::PEER,
            opcode: None,
        }
    }

    fn with_opcode(mut self, op: Opcode) -> Pkt {
        self.opcode = Some(op.0);
        self
    }
}

#[derive(Arbitrary, Debug, Clone)]
enum Action {
    /// One packet, every field chosen.
    Packet(Pkt),
    /// A whole RDMA WRITE (with immediate if `imm`) at the expected PSNs.
    WriteMsg {
        qp: QpSel,
        key: KeySel,
        va: VaSel,
        len: LenSel,
        imm: bool,
        ack_every: u8,
        seed: u8,
        env: Env,
    },
    /// A whole SEND at the expected PSNs.
    SendMsg {
        qp: QpSel,
        len: u16,
        /// 0: plain, 1: with immediate, 2: with invalidate.
        kind: u8,
        inv: KeySel,
        seed: u8,
        env: Env,
    },
    /// A READ request: what the peer names, the rest as a good packet has it.
    Read {
        qp: QpSel,
        psn: PsnSel,
        key: KeySel,
        va: VaSel,
        len: LenSel,
        env: Env,
    },
    /// A compare-and-swap or fetch-and-add.
    Atomic {
        qp: QpSel,
        psn: PsnSel,
        key: KeySel,
        va: VaSel,
        swap: bool,
        swap_add: u64,
        compare: u64,
        env: Env,
    },
    /// Raw bytes, optionally patched to reach a QP at a chosen PSN.
    Raw {
        qp: QpSel,
        psn: PsnSel,
        patch: bool,
        env: Env,
        bytes: Vec<u8>,
    },
    /// The harness's own moves, by `what`: post a receive (0..=99), let
    /// time pass (100..=179), replay a recent packet (180..=219),
    /// reconnect a QP in ERR (220..=239), deregister a region (240..=249),
    /// force a QP to ERR (250..=255).
    Admin {
        what: u8,
        arg: u8,
        sges: [(u8, u16, u16); 2],
    },
}

#[derive(Arbitrary, Debug)]
struct Input {
    rq_psn: u32,
    mtu: u8,
    type2_zero_based: bool,
    actions: Vec<Action>,
}

// ---------------------------------------------------------------- model --

/// What a key grants, as the harness understands the rules.
#[derive(Debug, Clone)]
struct KeyEntry {
    key: u32,
    region: usize,
    /// Offset in the region's memory of the first byte the key reaches.
    start: usize,
    len: usize,
    /// The address of that first byte.
    base: u64,
    rights: Access,
    /// A type 2 window serves only the QP it was bound through.
    qp: Option<usize>,
    live: bool,
}

#[derive(Debug, Clone, Copy)]
enum Grant {
    Key(usize),
    Recv,
}

#[derive(Debug, Clone, Copy)]
struct Allowed {
    /// The QP the grant holds on (through which the peer named it, or to
    /// which the receive was posted): a packet on another QP may not use it.
    qp: usize,
    region: usize,
    start: usize,
    end: usize,
    grant: Grant,
}

/// A READ the peer was entitled to: its bytes may be sent back.
#[derive(Debug, Clone, Copy)]
struct GrantedRead {
    qp: usize,
    psn: Psn,
    npkts: u32,
    region: usize,
    off: usize,
    len: usize,
    entry: usize,
}

/// The READ request a packet was.
#[derive(Debug, Clone, Copy)]
struct ReadReq {
    qp: usize,
    psn: Psn,
    len: usize,
}

/// The atomic request a packet was, and where it lands if allowed.
#[derive(Debug, Clone, Copy)]
struct AtomicReq {
    qp: usize,
    psn: u32,
    at: Option<(usize, usize)>,
    op: Operation,
    compare: u64,
    swap_add: u64,
}

struct QpInfo {
    qpn: u32,
    qp_type: QpType,
    dest_qpn: u32,
    mtu: usize,
    access: Access,
}

struct Harness {
    e: Engine,
    cq: CqId,
    now: u64,
    mems: Vec<Arc<VecMemory>>,
    keys: Vec<u32>,
    /// Window keys: the type 1, the type 2, the unbound one.
    wkeys: [u32; 3],
    /// Keys that named something once and no longer do.
    stale: Vec<u32>,
    entries: Vec<KeyEntry>,
    type2_entry: usize,
    allowed: Vec<Allowed>,
    snaps: Vec<Vec<u8>>,
    qps: Vec<QpInfo>,
    granted_reads: VecDeque<GrantedRead>,
    granted_atomics: HashSet<(usize, u32, u64)>,
    next_wr: u64,
    posted_recvs: HashSet<u64>,
    completed_recvs: HashSet<u64>,
    recent: VecDeque<(Vec<u8>, IpAddr, IcrcStatus)>,
}

fn region_base(i: usize) -> u64 {
    if REGIONS[i].access.contains(Access::ZERO_BASED) {
        0
    } else {
        REGIONS[i].iova
    }
}

fn npkts(len: usize, mtu: usize) -> u32 {
    len.div_ceil(mtu).max(1) as u32
}

fn stale_of(k: u32) -> u32 {
    (k & !0xff) | (k.wrapping_add(1) & 0xff)
}

impl Harness {
    fn new(input: &Input) -> Harness {
        let mut cfg = EngineConfig::new(LOCAL, 0x5eed);
        cfg.port_mtu = Mtu::Mtu1024;
        let mut e = Engine::new(cfg);
        let pd = e.alloc_pd();
        let pd2 = e.alloc_pd();
        let cq = e.create_cq(8192).expect("cq");
        let mut mems = Vec::new();
        let mut keys = Vec::new();
        let mut entries = Vec::new();
        for (i, r) in REGIONS.iter().enumerate() {
            let m = Arc::new(VecMemory::from_vec(pattern(1000 + i as u64, r.len)));
            let k = e
                .reg_mr(
                    if r.other_pd { pd2 } else { pd },
                    m.clone(),
                    r.iova,
                    r.access,
                )
                .expect("reg_mr")
                .rkey;
            mems.push(m);
            keys.push(k);
            if !r.other_pd {
                entries.push(KeyEntry {
                    key: k,
                    region: i,
                    start: 0,
                    len: r.len,
                    base: region_base(i),
                    rights: r.access,
                    qp: None,
                    live: i != DEREG_REGION,
                });
            }
        }
        e.dereg_mr(keys[DEREG_REGION]).expect("dereg");
        let mtu = match input.mtu % 3 {
            0 => Mtu::Mtu256,
            1 => Mtu::Mtu512,
            _ => Mtu::Mtu1024,
        };
        let rq = input.rq_psn;
        let specs: [(QpType, Mtu, Access, u32); 4] = [
            (QpType::Rc, mtu, ALL_REMOTE, rq),
            (
                QpType::Rc,
                Mtu::Mtu256,
                Access::LOCAL_WRITE,
                rq.wrapping_add(1000),
            ),
            (
                QpType::Uc,
                Mtu::Mtu512,
                Access::LOCAL_WRITE | Access::REMOTE_WRITE,
                rq.wrapping_add(2000),
            ),
            (QpType::Ud, Mtu::Mtu1024, Access::empty(), 0),
        ];
        let mut qps = Vec::new();
        for (i, (t, mtu, access, rq_psn)) in specs.into_iter().enumerate() {
            let qpn = e
                .create_qp(QpInit {
                    qp_type: t,
                    pd,
                    send_cq: cq,
                    recv_cq: cq,
                    srq: None,
                    cap: QpCap::default(),
                    sq_sig_all: true,
                })
                .expect("create_qp");
            let dest_qpn = 0x00ab_cd00 + i as u32;
            bring_up(
                &mut e,
                qpn,
                t,
                &Conn {
                    dest_qpn,
                    rq_psn: psn(rq_psn),
                    sq_psn: psn(0x10_0000),
                    mtu,
                    access,
                    ..Conn::default()
                },
            );
            qps.push(QpInfo {
                qpn,
                qp_type: t,
                dest_qpn,
                mtu: if t == QpType::Ud { 1024 } else { mtu.bytes() },
                access,
            });
        }
        // Windows on region 7.
        let base7 = REGIONS[MW_REGION].iova;
        let w0 = e.alloc_mw(pd, MwType::Type1).expect("mw");
        let w0 = e
            .bind_mw(
                qps[0].qpn,
                &MwBind {
                    mw_rkey: w0,
                    new_rkey: w0,
                    mr_lkey: keys[MW_REGION],
                    addr: base7 + 1024,
                    length: 1024,
                    access: Access::REMOTE_READ | Access::REMOTE_WRITE,
                },
            )
            .expect("bind type 1");
        entries.push(KeyEntry {
            key: w0,
            region: MW_REGION,
            start: 1024,
            len: 1024,
            base: base7 + 1024,
            rights: Access::REMOTE_READ | Access::REMOTE_WRITE,
            qp: None,
            live: true,
        });
        let w1_old = e.alloc_mw(pd, MwType::Type2).expect("mw");
        let w1 = stale_of(w1_old);
        let mut access = Access::REMOTE_READ | Access::REMOTE_WRITE | Access::REMOTE_ATOMIC;
        if input.type2_zero_based {
            access |= Access::ZERO_BASED;
        }
        let mut wr = SendWr::new(u64::MAX, SendOpcode::BindMw);
        wr.bind = Some(MwBind {
            mw_rkey: w1_old,
            new_rkey: w1,
            mr_lkey: keys[MW_REGION],
            addr: base7 + 3072,
            length: 512,
            access,
        });
        e.post_send(qps[0].qpn, wr).expect("post BIND_MW");
        assert!(e.poll_transmit(at(0)).is_none(), "a BIND_MW sends nothing");
        let mut wc = Vec::new();
        e.poll_cq(cq, 16, &mut wc).expect("poll");
        assert!(
            wc.len() == 1 && wc[0].status == WcStatus::Success,
            "BIND_MW: {wc:?}"
        );
        assert!(e.mem().query_mw(w1).is_some_and(|m| m.binding.is_some()));
        entries.push(KeyEntry {
            key: w1,
            region: MW_REGION,
            start: 3072,
            len: 512,
            base: if input.type2_zero_based {
                0
            } else {
                base7 + 3072
            },
            rights: access - Access::ZERO_BASED,
            qp: Some(0),
            live: true,
        });
        let type2_entry = entries.len() - 1;
        let w2 = e.alloc_mw(pd, MwType::Type1).expect("mw");
        let snaps = mems.iter().map(|m| m.snapshot()).collect();
        let mut h = Harness {
            e,
            cq,
            now: 0,
            mems,
            keys,
            wkeys: [w0, w1, w2],
            stale: vec![w1_old],
            entries,
            type2_entry,
            allowed: Vec::new(),
            snaps,
            qps,
            granted_reads: VecDeque::new(),
            granted_atomics: HashSet::new(),
            next_wr: 1,
            posted_recvs: HashSet::new(),
            completed_recvs: HashSet::new(),
            recent: VecDeque::new(),
        };
        let r = RECV_REGION as u8;
        h.post_recv(0, &[(r, 0, 512)]);
        h.post_recv(0, &[(2, 0, 100), (r, 1800, 100)]);
        h.post_recv(0, &[(r, 512, 512)]);
        h.post_recv(1, &[(r, 1024, 256)]);
        h.post_recv(2, &[(r, 1280, 256)]);
        h.post_recv(3, &[(r, 1536, 512)]);
        h
    }

    fn qp_index(&self, s: QpSel) -> Option<usize> {
        match s.0 {
            0..=159 => Some(0),
            160..=191 => Some(1),
            192..=223 => Some(2),
            224..=247 => Some(3),
            _ => None,
        }
    }

    fn qpn_of(&self, s: QpSel) -> u32 {
        match self.qp_index(s) {
            Some(i) => self.qps[i].qpn,
            // A QP number nobody has (one off a real one, or far away).
            None if s.0 & 1 == 0 => self.qps[0].qpn ^ u32::from(s.0 & 0x7),
            None => 0x00ff_fff0 | u32::from(s.0 & 0xf),
        }
    }

    fn qp_by_qpn(&self, qpn: u32) -> Option<usize> {
        self.qps.iter().position(|q| q.qpn == qpn)
    }

    fn epsn(&self, q: Option<usize>) -> Psn {
        match q {
            Some(i) => self
                .e
                .query_qp(self.qps[i].qpn)
                .map(|(a, _)| a.rq_psn)
                .unwrap_or(Psn::new(0)),
            None => Psn::new(0),
        }
    }

    fn pick_psn(&self, q: Option<usize>, s: PsnSel, far: u32) -> Psn {
        let e = self.epsn(q);
        match s.0 {
            0..=159 => e,
            160..=207 => e.sub(u32::from(s.0 - 159)),
            208..=254 => e.add(u32::from(s.0 - 207)),
            255 => Psn::new(far),
        }
    }

    /// (key, base address, length) of what a key selector aims at.
    fn target(&self, s: KeySel, raw: u32) -> (u32, u64, u64) {
        let region = |r: usize| (self.keys[r], region_base(r), REGIONS[r].len as u64);
        let window = |w: usize| {
            let k = self.wkeys[w];
            match self.entries.iter().find(|e| e.key == k) {
                Some(e) => (k, e.base, e.len as u64),
                None => (k, REGIONS[MW_REGION].iova, 0),
            }
        };
        match s.0 % 18 {
            i @ 0..=10 => region(usize::from(i)),
            i @ 11..=13 => window(usize::from(i - 11)),
            14 => {
                let (k, b, l) = region(0);
                (stale_of(k), b, l)
            }
            15 => {
                let (k, b, l) = window(0);
                (stale_of(k), b, l)
            }
            16 => {
                // The type 2 window's key before its bind, or a key
                // deregistered since.
                let k = *self.stale.last().expect("the type 2 window's old key");
                (k, REGIONS[MW_REGION].iova + 3072, 512)
            }
            _ => (raw, REGIONS[0].iova, 4096),
        }
    }

    fn va(base: u64, span: u64, v: VaSel) -> u64 {
        if v.0 >= 0xff00 {
            base.wrapping_sub(u64::from(v.0 & 0xff))
        } else {
            base.wrapping_add(u64::from(v.0) % (span + 128))
        }
    }

    fn len(base: u64, span: u64, va: u64, l: LenSel, plen: usize) -> u32 {
        match l.0 {
            0xffff => 0x7fff_ffff,
            0xfffe => u32::MAX,
            0xfffd => plen as u32,
            0xfffc => base.wrapping_add(span).wrapping_sub(va) as u32,
            x => (u64::from(x) % (span + 256)) as u32,
        }
    }

    /// Where `len` bytes at `va` under `key` land, if the rules allow `need`
    /// on QP `q`: (region, offset, key entry).
    fn resolve(
        &self,
        key: u32,
        va: u64,
        len: u64,
        need: Access,
        q: usize,
    ) -> Option<(usize, usize, usize)> {
        if len == 0 || !self.qps[q].access.contains(need) {
            return None;
        }
        let (i, e) = self
            .entries
            .iter()
            .enumerate()
            .find(|(_, e)| e.key == key && e.live)?;
        if !e.rights.contains(need) || e.qp.is_some_and(|x| x != q) {
            return None;
        }
        let off = va.checked_sub(e.base)?;
        let end = off.checked_add(len)?;
        if end > e.len as u64 {
            return None;
        }
        Some((e.region, e.start + off as usize, i))
    }

    fn post_recv(&mut self, q: usize, sges: &[(u8, u16, u16)]) {
        let mut sg_list = Vec::new();
        let mut ranges = Vec::new();
        for &(r, off, len) in sges.iter().take(3) {
            let r = usize::from(r) % REGIONS.len();
            let (off, len) = (u64::from(off), u64::from(len));
            sg_list.push(Sge {
                addr: region_base(r).wrapping_add(off),
                length: len as u32,
                lkey: self.keys[r],
            });
            let spec = &REGIONS[r];
            let live = self
                .entries
                .iter()
                .any(|e| e.key == self.keys[r] && e.live && e.start == 0);
            if spec.access.contains(Access::LOCAL_WRITE)
                && !spec.other_pd
                && live
                && off + len <= spec.len as u64
                && len > 0
            {
                ranges.push((r, off as usize, (off + len) as usize));
            }
        }
        let wr_id = self.next_wr;
        self.next_wr += 1;
        let qpn = self.qps[q].qpn;
        if self
            .e
            .post_recv(
                qpn,
                RecvWr {
                    wr_id,
                    sg_list: sg_list.clone(),
                },
            )
            .is_ok()
        {
            self.posted_recvs.insert(wr_id);
            for (region, start, end) in ranges {
                self.allowed.push(Allowed {
                    qp: q,
                    region,
                    start,
                    end,
                    grant: Grant::Recv,
                });
            }
        }
        self.after_command();
    }

    /// Drains completions; a receive completes once.
    fn poll(&mut self) {
        let mut wc = Vec::new();
        self.e
            .poll_cq(self.cq, usize::MAX, &mut wc)
            .expect("poll_cq");
        for c in wc {
            if c.wr_id == u64::MAX {
                continue;
            }
            assert!(
                matches!(c.opcode, WcOpcode::Recv | WcOpcode::RecvRdmaWithImm),
                "a completion of a kind never posted: {c:?}"
            );
            assert!(
                self.posted_recvs.contains(&c.wr_id),
                "a completion for a receive never posted: {c:?}"
            );
            assert!(
                self.completed_recvs.insert(c.wr_id),
                "a receive completed twice: {c:?}"
            );
        }
    }

    fn after_command(&mut self) {
        while let Some(t) = self.e.poll_transmit(at(self.now)) {
            let p = check_transmit(&t);
            assert!(
                !p.info().operation.is_request(),
                "the responder sent a request: {:?}",
                p.info().name
            );
        }
        self.poll();
        // Commands of the harness's own (posts, deregistrations, ERR,
        // timers) never write registered memory.
        self.check_memory(None);
    }

    fn qp_in_error(&self, q: usize) -> bool {
        self.e
            .query_qp(self.qps[q].qpn)
            .is_ok_and(|(a, _)| a.state == QpState::Err)
    }

    /// Bytes changed since the last check must lie in ranges granted on QP
    /// `on` (`None`: nothing may change at all).
    fn check_memory(&mut self, on: Option<usize>) {
        for r in 0..self.mems.len() {
            let now = self.mems[r].snapshot();
            if now == self.snaps[r] {
                continue;
            }
            let Some(q) = on else {
                panic!("region {r} changed by something that must change nothing")
            };
            for (i, (a, b)) in self.snaps[r].iter().zip(&now).enumerate() {
                if a != b {
                    assert!(
                        self.allowed
                            .iter()
                            .any(|x| x.qp == q && x.region == r && x.start <= i && i < x.end),
                        "byte {i} of region {r} changed ({a:#04x} -> {b:#04x}) outside every \
                         range the peer was granted: {:?}",
                        self.allowed
                            .iter()
                            .filter(|x| x.region == r)
                            .collect::<Vec<_>>()
                    );
                }
            }
            self.snaps[r] = now;
        }
    }

    /// Forgets the ranges a key granted, once the key is gone.
    fn revoke(&mut self, entry: usize) {
        self.entries[entry].live = false;
        self.allowed
            .retain(|a| !matches!(a.grant, Grant::Key(k) if k == entry));
        self.granted_reads.retain(|g| g.entry != entry);
    }

    fn dereg(&mut self, i: u8) {
        let r = usize::from(i) % REGIONS.len();
        if self.e.dereg_mr(self.keys[r]).is_ok() {
            self.stale.push(self.keys[r]);
            if let Some(k) = self
                .entries
                .iter()
                .position(|e| e.key == self.keys[r] && e.live)
            {
                self.revoke(k);
            }
            // Its receive buffers may not be written either now.
            self.allowed.retain(|a| a.region != r);
        }
        self.after_command();
    }

    fn feed(&mut self, bytes: &[u8], src: IpAddr, icrc: IcrcStatus) {
        if self.recent.len() == 16 {
            self.recent.pop_front();
        }
        self.recent.push_back((bytes.to_vec(), src, icrc));
        let parsed = Packet::new_checked(bytes).ok();
        let q = parsed
            .as_ref()
            .and_then(|p| self.qp_by_qpn(p.bth().dest_qp()));
        let connected = q.is_some_and(|q| self.qps[q].qp_type != QpType::Ud);
        // Packets that must have no effect at all: a bad ICRC, an unparsable
        // packet, an unknown QP, a third party on a connected QP, a QP in ERR.
        let inert = icrc == IcrcStatus::Bad
            || parsed.is_none()
            || q.is_none()
            || (connected && src != PEER)
            || q.is_some_and(|q| self.qp_in_error(q));
        let fresh = match (&parsed, q) {
            (Some(p), Some(_)) => p.bth().psn() == self.epsn(q),
            _ => false,
        };
        // What the request names, if the rules allow it.
        let mut read: Option<ReadReq> = None;
        let mut atomic: Option<AtomicReq> = None;
        // A FLUSH (RC) is answered, when its checks pass, by a READ
        // response only without payload at its own PSN; it writes nothing.
        let mut flush: Option<(usize, Psn)> = None;
        if let (Some(p), Some(q), false) = (&parsed, q, inert) {
            let info = p.info();
            let qp_ok = matches!(
                (info.transport, self.qps[q].qp_type),
                (Transport::Rc, QpType::Rc) | (Transport::Uc, QpType::Uc)
            );
            if qp_ok {
                match info.operation {
                    Operation::Flush => flush = Some((q, p.bth().psn())),
                    Operation::RdmaWrite => {
                        if let Some(r) = p.reth() {
                            let len = u64::from(r.dma_len());
                            if let Some((region, off, entry)) =
                                self.resolve(r.rkey(), r.va(), len, Access::REMOTE_WRITE, q)
                            {
                                self.allowed.push(Allowed {
                                    qp: q,
                                    region,
                                    start: off,
                                    end: off + len as usize,
                                    grant: Grant::Key(entry),
                                });
                            }
                        }
                    }
                    Operation::ReadRequest => {
                        let r = p.reth().expect("a READ request has a RETH");
                        let len = r.dma_len() as usize;
                        let mtu = self.qps[q].mtu;
                        read = Some(ReadReq {
                            qp: q,
                            psn: p.bth().psn(),
                            len,
                        });
                        if let Some((region, off, entry)) =
                            self.resolve(r.rkey(), r.va(), len as u64, Access::REMOTE_READ, q)
                        {
                            if self.granted_reads.len() == 64 {
                                self.granted_reads.pop_front();
                            }
                            self.granted_reads.push_back(GrantedRead {
                                qp: q,
                                psn: p.bth().psn(),
                                npkts: npkts(len, mtu),
                                region,
                                off,
                                len,
                                entry,
                            });
                        }
                    }
                    Operation::CompareSwap | Operation::FetchAdd => {
                        let a = p.atomic_eth().expect("an atomic has an AtomicETH");
                        let res = if a.va() % 8 == 0 {
                            self.resolve(a.rkey(), a.va(), 8, Access::REMOTE_ATOMIC, q)
                        } else {
                            None
                        };
                        if let Some((region, off, entry)) = res {
                            self.allowed.push(Allowed {
                                qp: q,
                                region,
                                start: off,
                                end: off + 8,
                                grant: Grant::Key(entry),
                            });
                        }
                        atomic = Some(AtomicReq {
                            qp: q,
                            psn: p.bth().psn().value(),
                            at: res.map(|(region, off, _)| (region, off)),
                            op: info.operation,
                            compare: a.compare(),
                            swap_add: a.swap_add(),
                        });
                    }
                    _ => {}
                }
            }
        }
        let before = self.e.counters().clone();
        self.e.handle_datagram(at(self.now), meta(src, icrc), bytes);
        let after = self.e.counters().clone();
        assert_eq!(after.rcvd_pkts, before.rcvd_pkts + 1);
        if icrc == IcrcStatus::Bad {
            assert_eq!(
                after.dropped_for(DropReason::IcrcError),
                before.dropped_for(DropReason::IcrcError) + 1
            );
        }
        if connected && src != PEER && icrc != IcrcStatus::Bad {
            // Dropped before the source check only for state, transport or P_Key.
            assert_eq!(
                after.dropped(),
                before.dropped() + 1,
                "a third party's packet was not dropped"
            );
        }
        let mut reads_seen = 0u32;
        while let Some(t) = self.e.poll_transmit(at(self.now)) {
            assert!(!inert, "an inert packet made the engine send {t:?}");
            let p = check_transmit(&t);
            let info = p.info();
            assert_eq!(info.transport, Transport::Rc, "only RC QPs answer");
            assert!(!info.operation.is_request(), "the responder sent a request");
            let qi = self
                .qps
                .iter()
                .position(|x| x.dest_qpn == p.bth().dest_qp() && x.qp_type == QpType::Rc)
                .expect("a response to the peer of an RC QP");
            match info.operation {
                Operation::ReadResponse if read.is_none() && flush.is_some() => {
                    let (fq, fpsn) = flush.expect("checked");
                    assert_eq!(fq, qi, "a FLUSH's answer on another QP");
                    assert_eq!(p.bth().psn(), fpsn, "a FLUSH answered at another PSN");
                    assert!(
                        p.payload().is_empty() && info.position == Position::Only,
                        "a FLUSH answered with data"
                    );
                }
                Operation::ReadResponse => {
                    reads_seen += 1;
                    self.check_read_response(qi, &p, read, reads_seen);
                }
                Operation::AtomicAcknowledge => {
                    let orig = p.atomic_ack_eth().expect("AtomicAckETH").orig();
                    let rpsn = p.bth().psn().value();
                    let key = (qi, rpsn, orig);
                    match atomic {
                        Some(AtomicReq {
                            qp: aq,
                            psn: apsn,
                            at: Some((region, off)),
                            op,
                            compare,
                            swap_add,
                        }) if fresh && aq == qi && apsn == rpsn => {
                            let old = u64::from_ne_bytes(
                                self.snaps[region][off..off + 8].try_into().unwrap(),
                            );
                            let mut b = [0u8; 8];
                            assert!(self.mems[region].read(off, &mut b));
                            let new = u64::from_ne_bytes(b);
                            assert_eq!(orig, old, "an atomic acknowledge with a value never there");
                            let want = match op {
                                Operation::CompareSwap if old == compare => swap_add,
                                Operation::CompareSwap => old,
                                _ => old.wrapping_add(swap_add),
                            };
                            assert_eq!(new, want, "an atomic left the wrong result");
                            self.granted_atomics.insert(key);
                        }
                        _ => assert!(
                            self.granted_atomics.contains(&key),
                            "an atomic acknowledge that replays nothing: psn {rpsn:#x} orig {orig:#x}"
                        ),
                    }
                }
                _ => {}
            }
        }
        self.poll();
        self.check_memory(if inert { None } else { q });
        // A type 2 window invalidated by a SEND with invalidate is gone.
        let w1 = self.wkeys[1];
        if self.entries[self.type2_entry].live
            && self
                .e
                .mem()
                .query_mw(w1)
                .is_none_or(|m| m.binding.is_none())
        {
            self.revoke(self.type2_entry);
        }
    }

    fn check_read_response(
        &mut self,
        qi: usize,
        p: &Packet<&[u8]>,
        read: Option<ReadReq>,
        seen: u32,
    ) {
        let mtu = self.qps[qi].mtu;
        let ReadReq {
            qp: rq,
            psn: rpsn,
            len: rlen,
        } = read.expect("a READ response to a packet that was no READ request");
        assert_eq!(rq, qi, "a READ response on another QP");
        assert!(
            seen <= npkts(rlen, mtu),
            "more READ responses than the READ has packets"
        );
        let payload = p.payload();
        let psn = p.bth().psn();
        if payload.is_empty() {
            // Zero bytes leak nothing; only a zero-length READ gets one.
            assert_eq!(rlen, 0, "an empty READ response to a READ of {rlen} bytes");
            assert_eq!(psn, rpsn);
            return;
        }
        // The bytes must be those of a READ the peer was entitled to.
        let ok = self.granted_reads.iter().any(|g| {
            if g.qp != qi || !psn.in_window(g.psn, g.npkts) || !self.entries[g.entry].live {
                return false;
            }
            let k = g.psn.distance_to(psn) as usize;
            let off = k * mtu;
            let n = (g.len - off).min(mtu);
            if payload.len() != n {
                return false;
            }
            let mut want = vec![0u8; n];
            self.mems[g.region].read(g.off + off, &mut want) && want == payload
        });
        assert!(
            ok,
            "a READ response of {} bytes at PSN {psn:?} that no granted READ covers \
             (request PSN {rpsn:?}, {rlen} bytes)",
            payload.len()
        );
    }

    fn build(&self, k: &Pkt) -> Vec<u8> {
        let q = self.qp_index(k.qp);
        let qp_type = q.map_or(QpType::Rc, |i| self.qps[i].qp_type);
        let mtu = q.map_or(1024, |i| self.qps[i].mtu);
        let opcode = match k.op.0 {
            _ if k.opcode.is_some() => Opcode(k.opcode.unwrap_or_default()),
            0..=191 => {
                let want = match qp_type {
                    QpType::Rc => Transport::Rc,
                    QpType::Uc => Transport::Uc,
                    QpType::Ud => Transport::Ud,
                };
                let native: Vec<&OpcodeInfo> = ALL.iter().filter(|o| o.transport == want).collect();
                Opcode(native[usize::from(k.op.0) % native.len()].code)
            }
            192..=239 => Opcode(ALL[usize::from(k.op.0) % ALL.len()].code),
            // Mostly bytes the table does not know.
            b => Opcode(b.wrapping_mul(37)),
        };
        let bth = BthRepr {
            opcode,
            solicited: k.flags & 2 != 0,
            mig_req: k.flags & 4 != 0,
            pad_count: 0,
            pkey: if k.flags & 0xe0 == 0xe0 {
                0x7fff
            } else {
                0xffff
            },
            fecn: k.flags & 8 != 0,
            becn: k.flags & 16 != 0,
            dest_qp: self.qpn_of(k.qp),
            ack_req: k.flags & 1 != 0,
            psn: self.pick_psn(q, k.psn, k.far),
        };
        let plen = match k.payload.0 % 3 {
            0 => mtu,
            _ => usize::from(k.payload.0 / 3) % (mtu + 64),
        };
        let payload = pattern(u64::from(k.seed), plen);
        let (key, base, span) = self.target(k.key, k.far);
        let va = Self::va(base, span, k.va);
        let dma_len = Self::len(base, span, va, k.len, plen);
        let Some(info) = opcode.info() else {
            // An opcode nobody knows: a BTH and whatever follows.
            let mut b = vec![0u8; 12];
            bth.emit(&mut rxe_core::wire::Bth::new_unchecked(&mut b[..]));
            b.extend_from_slice(&payload);
            b.extend_from_slice(&[0; 4]);
            return b;
        };
        let mut r = PacketRepr::new(bth);
        let h = info.headers;
        use rxe_core::wire::ExtHeaders as H;
        if h.contains(H::RDETH) {
            r.rdeth = Some(RdethRepr::default());
        }
        if h.contains(H::DETH) {
            r.deth = Some(DethRepr {
                qkey: if k.qkey_ok { QKEY } else { k.imm | 1 },
                src_qp: k.src_qp & 0xff_ffff,
            });
        }
        if h.contains(H::FETH) {
            r.feth = Some(FethRepr::default());
        }
        if h.contains(H::RETH) {
            r.reth = Some(RethRepr {
                va,
                rkey: key,
                dma_len,
            });
        }
        if h.contains(H::ATOMIC_ETH) {
            r.atomic_eth = Some(AtomicEthRepr {
                va,
                rkey: key,
                swap_add: k.swap_add,
                compare: k.compare,
            });
        }
        if h.contains(H::AETH) {
            r.aeth = Some(AethRepr {
                syndrome: AethSyndrome::from_u8(k.syndrome),
                msn: k.msn & 0xff_ffff,
            });
        }
        if h.contains(H::ATOMIC_ACK_ETH) {
            r.atomic_ack_eth = Some(AtomicAckEthRepr { orig: k.orig });
        }
        if h.contains(H::IMMDT) {
            r.immdt = Some(k.imm);
        }
        if h.contains(H::IETH) {
            r.ieth = Some(self.target(k.inv, k.imm).0);
        }
        if info.payload {
            r.payload = &payload;
        }
        let src = if k.env.peer() { PEER } else { OTHER };
        emit(&r, src).unwrap_or_default()
    }

    fn send_bytes(&mut self, mut b: Vec<u8>, env: Env) {
        let src = if env.peer() { PEER } else { OTHER };
        if env.cut() > 0 {
            let n = b.len().saturating_sub(env.cut());
            b.truncate(n);
            fill_icrc(&mut b, src);
        }
        let icrc = match env.icrc() {
            IcrcSel::Good => IcrcStatus::Ok,
            IcrcSel::Bad => IcrcStatus::Bad,
            IcrcSel::Unverified => {
                if let Some(x) = b.last_mut() {
                    *x ^= 0x5a;
                }
                IcrcStatus::Unverified
            }
        };
        self.feed(&b, src, icrc);
    }

    fn packet(&mut self, k: &Pkt) {
        let b = self.build(k);
        self.send_bytes(b, k.env);
    }

    /// A whole message at the expected PSNs: first, middles, last.
    #[allow(clippy::too_many_arguments)]
    fn message(
        &mut self,
        qp: QpSel,
        write: Option<(KeySel, VaSel, LenSel)>,
        send_len: usize,
        kind: u8,
        inv: KeySel,
        ack_every: u8,
        seed: u8,
        env: Env,
    ) {
        let q = self.qp_index(qp);
        let qp_type = q.map_or(QpType::Rc, |i| self.qps[i].qp_type);
        let mtu = q.map_or(1024, |i| self.qps[i].mtu);
        let (key, va, len) = match write {
            Some((k, v, l)) => {
                let (key, base, span) = self.target(k, 0x1234_5600);
                let va = Self::va(base, span, v);
                let len = (Self::len(base, span, va, l, send_len) as usize).min(MAX_MSG);
                (key, va, len)
            }
            None => (0, 0, send_len),
        };
        let n = if qp_type == QpType::Ud {
            1
        } else {
            len.div_ceil(mtu).max(1)
        };
        let data = pattern(u64::from(seed) << 8, len);
        for i in 0..n {
            let pos = match (i, n) {
                (_, 1) => Position::Only,
                (0, _) => Position::First,
                (i, n) if i + 1 == n => Position::Last,
                _ => Position::Middle,
            };
            let chunk = &data[(i * mtu).min(len)..((i + 1) * mtu).min(len)];
            // UC has no SEND with invalidate.
            let kind = if qp_type == QpType::Uc {
                kind.min(1)
            } else {
                kind
            };
            let opcode = opcode_for(qp_type, write.is_some(), kind, pos);
            let last = pos.ends();
            let bth = BthRepr {
                opcode,
                solicited: false,
                mig_req: false,
                pad_count: 0,
                pkey: 0xffff,
                fecn: false,
                becn: false,
                dest_qp: self.qpn_of(qp),
                ack_req: last || (ack_every > 0 && i % usize::from(ack_every) == 0),
                psn: self.epsn(q),
            };
            let mut r = PacketRepr::new(bth);
            let info = opcode.info().expect("a known opcode");
            use rxe_core::wire::ExtHeaders as H;
            if info.headers.contains(H::RETH) {
                r.reth = Some(RethRepr {
                    va,
                    rkey: key,
                    dma_len: len as u32,
                });
            }
            if info.headers.contains(H::DETH) {
                r.deth = Some(DethRepr {
                    qkey: QKEY,
                    src_qp: 0x77,
                });
            }
            if info.headers.contains(H::IMMDT) {
                r.immdt = Some(0x1234_5678);
            }
            if info.headers.contains(H::IETH) {
                r.ieth = Some(self.target(inv, 0).0);
            }
            r.payload = chunk;
            let src = if env.peer() { PEER } else { OTHER };
            let b = emit(&r, src).expect("a well-formed message packet emits");
            self.send_bytes(b, env);
        }
    }

    fn run(&mut self, a: &Action) {
        match a {
            Action::Packet(k) => self.packet(k),
            Action::WriteMsg {
                qp,
                key,
                va,
                len,
                imm,
                ack_every,
                seed,
                env,
            } => self.message(
                *qp,
                Some((*key, *va, *len)),
                0,
                u8::from(*imm),
                KeySel(17),
                *ack_every,
                *seed,
                *env,
            ),
            Action::SendMsg {
                qp,
                len,
                kind,
                inv,
                seed,
                env,
            } => self.message(
                *qp,
                None,
                usize::from(*len) % MAX_MSG,
                *kind % 3,
                *inv,
                0,
                *seed,
                *env,
            ),
            Action::Read {
                qp,
                psn,
                key,
                va,
                len,
                env,
            } => self.packet(
                &Pkt {
                    psn: *psn,
                    flags: 1,
                    key: *key,
                    va: *va,
                    len: *len,
                    env: *env,
                    ..Pkt::plain(*qp)
                }
                .with_opcode(Opcode::RC_RDMA_READ_REQUEST),
            ),
            Action::Atomic {
                qp,
                psn,
                key,
                va,
                swap,
                swap_add,
                compare,
                env,
            } => self.packet(
                &Pkt {
                    psn: *psn,
                    flags: 1,
                    key: *key,
                    va: *va,
                    swap_add: *swap_add,
                    compare: *compare,
                    env: *env,
                    ..Pkt::plain(*qp)
                }
                .with_opcode(if *swap {
                    Opcode::RC_COMPARE_SWAP
                } else {
                    Opcode::RC_FETCH_ADD
                }),
            ),
            Action::Raw {
                qp,
                psn: ps,
                patch,
                env,
                bytes,
            } => {
                let mut b = bytes.clone();
                b.truncate(4200);
                let src = if env.peer() { PEER } else { OTHER };
                if *patch && b.len() >= 16 {
                    let qpn = self.qpn_of(*qp);
                    let p = self.pick_psn(self.qp_index(*qp), *ps, 0).value();
                    b[1] &= 0xf0;
                    b[2] = 0xff;
                    b[3] = 0xff;
                    b[5..8].copy_from_slice(&qpn.to_be_bytes()[1..]);
                    b[9..12].copy_from_slice(&p.to_be_bytes()[1..]);
                    fill_icrc(&mut b, src);
                }
                let icrc = match env.icrc() {
                    IcrcSel::Good => IcrcStatus::Ok,
                    IcrcSel::Bad => IcrcStatus::Bad,
                    IcrcSel::Unverified => IcrcStatus::Unverified,
                };
                self.feed(&b, src, icrc);
            }
            Action::Admin { what, arg, sges } => match what {
                0..=99 => {
                    if let Some(q) = self.qp_index(QpSel(*arg)) {
                        let n = 1 + usize::from(*arg & 1);
                        self.post_recv(q, &sges[..n]);
                    }
                }
                100..=179 => {
                    self.now += u64::from(*arg) * 1000;
                    self.e.handle_timeout(at(self.now));
                    self.after_command();
                }
                180..=219 => {
                    if !self.recent.is_empty() {
                        let j = usize::from(*arg) % self.recent.len();
                        let (b, src, icrc) = self.recent[j].clone();
                        self.feed(&b, src, icrc);
                    }
                }
                220..=239 => {
                    if let Some(q) = self.qp_index(QpSel(*arg)) {
                        self.reconnect(q, u32::from(*arg) << 16);
                    }
                }
                240..=249 => self.dereg(*arg),
                _ => {
                    if let Some(q) = self.qp_index(QpSel(*arg)) {
                        to_error(&mut self.e, self.qps[q].qpn);
                        self.after_command();
                    }
                }
            },
        }
    }

    /// Takes a QP in ERR back to RTS (through RESET), with a new expected
    /// PSN; its receives were flushed when it went to ERR, and it gets one
    /// fresh receive.
    fn reconnect(&mut self, q: usize, rq_psn: u32) {
        if !self.qp_in_error(q) {
            return;
        }
        let qpn = self.qps[q].qpn;
        let reset = QpAttr {
            state: QpState::Reset,
            ..QpAttr::default()
        };
        self.e
            .modify_qp(qpn, &reset, QpAttrMask::STATE)
            .expect("ERR -> RESET");
        let info = &self.qps[q];
        bring_up(
            &mut self.e,
            qpn,
            info.qp_type,
            &Conn {
                dest_qpn: info.dest_qpn,
                rq_psn: psn(rq_psn),
                sq_psn: psn(0x10_0000),
                mtu: Mtu::from_bytes(info.mtu).unwrap_or(Mtu::Mtu256),
                access: info.access,
                ..Conn::default()
            },
        );
        self.after_command();
        let r = RECV_REGION as u8;
        self.post_recv(q, &[(r, 0, 1024)]);
    }

    fn finish(mut self) {
        for q in 0..self.qps.len() {
            to_error(&mut self.e, self.qps[q].qpn);
        }
        self.after_command();
        let missing: Vec<_> = self
            .posted_recvs
            .difference(&self.completed_recvs)
            .collect();
        assert!(
            missing.is_empty(),
            "receives that never completed, even flushed: {missing:?}"
        );
        // Nothing left queued anywhere.
        assert!(self.e.poll_transmit(at(self.now)).is_none());
    }
}

fn opcode_for(qp_type: QpType, write: bool, kind: u8, pos: Position) -> Opcode {
    use Position::*;
    let rc = match (write, kind, pos) {
        (true, _, First) => Opcode::RC_RDMA_WRITE_FIRST,
        (true, _, Middle) => Opcode::RC_RDMA_WRITE_MIDDLE,
        (true, 0, Last) => Opcode::RC_RDMA_WRITE_LAST,
        (true, _, Last) => Opcode::RC_RDMA_WRITE_LAST_WITH_IMMEDIATE,
        (true, 0, Only) => Opcode::RC_RDMA_WRITE_ONLY,
        (true, _, Only) => Opcode::RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE,
        (false, _, First) => Opcode::RC_SEND_FIRST,
        (false, _, Middle) => Opcode::RC_SEND_MIDDLE,
        (false, 0, Last) => Opcode::RC_SEND_LAST,
        (false, 1, Last) => Opcode::RC_SEND_LAST_WITH_IMMEDIATE,
        (false, _, Last) => Opcode::RC_SEND_LAST_WITH_INVALIDATE,
        (false, 0, Only) => Opcode::RC_SEND_ONLY,
        (false, 1, Only) => Opcode::RC_SEND_ONLY_WITH_IMMEDIATE,
        (false, _, Only) => Opcode::RC_SEND_ONLY_WITH_INVALIDATE,
    };
    match qp_type {
        QpType::Rc => rc,
        // UC has no invalidate opcodes: 0x16/0x17 | 0x20 are unknown, which
        // is what a peer that tries gets.
        QpType::Uc => Opcode(rc.0 | 0x20),
        QpType::Ud => {
            if kind == 1 {
                Opcode::UD_SEND_ONLY_WITH_IMMEDIATE
            } else {
                Opcode::UD_SEND_ONLY
            }
        }
    }
}

fuzz_target!(|input: Input| {
    let mut h = Harness::new(&input);
    for a in input.actions.iter().take(MAX_ACTIONS) {
        h.run(a);
    }
    h.finish();
});
