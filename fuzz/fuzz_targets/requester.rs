//! The requester and completer against a hostile responder: an RC QP with
//! a mix of SENDs, WRITEs, READs and atomics posted, fed arbitrary
//! ACK/NAK/RNR NAK, READ response and atomic acknowledge sequences, raw
//! bytes and timer firings.
//!
//! # Set-up
//!
//! One engine (127.0.0.1) with an RC QP connected to the fake peer
//! 127.0.0.2 (path MTU, initial PSN, retry counts, ACK timeout and
//! READ/atomic depth from the input), and four regions, each its own
//! `VecMemory` filled with a pattern: `SRC` (the gather source of SENDs and
//! WRITEs; no LOCAL_WRITE), `DST` (LOCAL_WRITE: where READs and atomics put
//! their results), `RO` (no LOCAL_WRITE: a READ into it must fail) and
//! `GUARD` (LOCAL_WRITE, named by no work request). Work requests come from
//! the input (SGEs around the bounds of the regions, bad lkeys included);
//! each READ or atomic names a remote address of its own, so that the
//! harness can tell from a request packet which work request it belongs to.
//!
//! # Input
//!
//! Work requests to post, then events: ACKs and NAKs (any syndrome, PSNs
//! mostly among those sent, else near them or anywhere), READ responses
//! (any position, lengths as expected or not, from the peer or a third
//! party), whole READ answers (every response packet, but for one left out
//! and two swapped), ACKs of the latest PSN, atomic acknowledges, raw
//! packets (optionally patched to reach the QP), replays, more posts, and
//! timer firings. READ response payloads and atomic results are a function of the
//! PSN, so a READ that completes must hold exactly the bytes of its PSNs.
//!
//! # Oracle
//!
//! * no panic; everything sent goes to the peer with a correct ICRC;
//! * completions come in posting order, each work request at most once, and
//!   at the end (the QP forced to ERR if it is not there already) each
//!   exactly once; a QP that went to ERR on its own has flushed everything;
//! * `SRC`, `RO` and `GUARD` never change; a byte of `DST` changes only
//!   inside an SGE of a READ or atomic;
//! * a READ that completes successfully holds the bytes of the responses
//!   for its PSNs, an atomic the original value of its acknowledge;
//! * a response from a third party changes nothing and is dropped.
#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use rxe_core::engine::{CqId, Engine, EngineConfig, IcrcStatus, QpInit, RegionMemory, VecMemory};
use rxe_core::psn::Psn;
use rxe_core::types::*;
use rxe_core::wire::{
    AethRepr, AethSyndrome, AtomicAckEthRepr, BthRepr, Opcode, Operation, Packet, PacketRepr,
};
use rxe_fuzz::*;
use std::collections::{HashMap, HashSet, VecDeque};
use std::net::IpAddr;
use std::sync::Arc;

const MAX_WRS: usize = 24;
const MAX_EVENTS: usize = 200;
const DEST_QPN: u32 = 0x00ab_cd00;
/// Remote addresses: work request `i` names `REMOTE + i * REMOTE_STRIDE`.
const REMOTE: u64 = 0x7700_0000_0000;
const REMOTE_STRIDE: u64 = 1 << 32;

/// The region index of `DST`; the others are `SRC` (0), `RO` (2) and
/// `GUARD` (3), which must never change.
const DST: usize = 1;
/// (bytes, access, address) of SRC, DST, RO, GUARD.
const REGIONS: [(usize, Access, u64); 4] = [
    (4096, Access::empty(), 0x1000_0000),
    (4096, Access::LOCAL_WRITE, 0x2000_0000),
    (512, Access::empty(), 0x3000_0000),
    (1024, Access::LOCAL_WRITE, 0x4000_0000),
];

// ---------------------------------------------------------------- input --

#[derive(Arbitrary, Debug, Clone, Copy)]
enum SgeSel {
    /// `len` bytes at `off` of a region (0 SRC, 1 DST, 2 RO).
    In(u8, u16, u16),
    /// A key that names nothing.
    BadKey(u16),
}

#[derive(Arbitrary, Debug, Clone)]
enum WrSpec {
    Send {
        sge: SgeSel,
        imm: bool,
        inline: bool,
    },
    Write {
        sge: SgeSel,
        imm: bool,
    },
    Read {
        sges: Vec<SgeSel>,
    },
    CmpSwap {
        sge: SgeSel,
        compare: u64,
        swap: u64,
    },
    FetchAdd {
        sge: SgeSel,
        add: u64,
    },
}

/// A PSN: mostly (mode 0..=199) one the QP sent (`idx` picks which),
/// else one near a sent one (200..=239), near the highest sent
/// (240..=254), or any (255: `idx` itself).
#[derive(Arbitrary, Debug, Clone, Copy)]
struct PsnSel(u8, u16);

#[derive(Arbitrary, Debug, Clone, Copy)]
enum RLen {
    Expected,
    Mtu,
    Exact(u16),
}

/// Who sends a response: the peer, except for values 0..=23 (a third party).
#[derive(Arbitrary, Debug, Clone, Copy)]
struct From(u8);

impl From {
    fn src(self) -> IpAddr {
        if self.0 < 24 {
            OTHER
        } else {
            PEER
        }
    }
}

#[derive(Arbitrary, Debug, Clone)]
enum Event {
    Ack {
        psn: PsnSel,
        syndrome: u8,
        msn: u32,
        from: From,
    },
    ReadResp {
        psn: PsnSel,
        /// 0 first, 1 middle, 2 last, 3 only.
        pos: u8,
        len: RLen,
        from: From,
    },
    AtomicAck {
        psn: PsnSel,
        syndrome: u8,
    },
    /// The whole answer to the `idx`-th READ request sent: every response
    /// packet in order, but for one left out (`drop` > 0) and two
    /// neighbours swapped (`swap`).
    Answer {
        idx: u16,
        drop: u8,
        swap: bool,
    },
    /// An ACK of everything up to `back` PSNs before the highest sent.
    AckLatest(u8),
    Timeout(u32),
    Post(WrSpec),
    Raw {
        patch: bool,
        psn: PsnSel,
        bytes: Vec<u8>,
    },
    Replay(u8),
}

#[derive(Arbitrary, Debug)]
struct Input {
    sq_psn: u32,
    mtu: u8,
    retry_cnt: u8,
    rnr_retry: u8,
    timeout: u8,
    rd_atomic: u8,
    wrs: Vec<WrSpec>,
    events: Vec<Event>,
}

// ---------------------------------------------------------------- model --

#[derive(Debug, Clone)]
struct Posted {
    wr_id: u64,
    opcode: SendOpcode,
    /// DST ranges the work request may write (READ and atomic SGEs).
    writes: Vec<(usize, usize)>,
    /// The SGEs as posted, to read a finished READ back.
    sges: Vec<Sge>,
    len: usize,
    /// The PSN of its first packet, once seen on the wire.
    first_psn: Option<Psn>,
}

struct Harness {
    e: Engine,
    cq: CqId,
    qpn: u32,
    mtu: usize,
    now: u64,
    mems: Vec<Arc<VecMemory>>,
    keys: Vec<u32>,
    snaps: Vec<Vec<u8>>,
    posted: Vec<Posted>,
    by_id: HashMap<u64, usize>,
    /// Index in `posted` of the last completed work request.
    last_done: Option<usize>,
    done: Vec<bool>,
    /// Distinct PSNs of the request packets sent, in order.
    sent: Vec<Psn>,
    sent_set: HashSet<u32>,
    /// The highest PSN sent.
    high: Option<Psn>,
    /// READ requests sent: (PSN, work request, length).
    reads: Vec<(Psn, usize, usize)>,
    /// A raw packet that could be a response was fed: contents unknown.
    tainted: bool,
    recent: VecDeque<(Vec<u8>, IpAddr)>,
}

fn atomic_value(psn: Psn) -> u64 {
    u64::from_ne_bytes(
        pattern(u64::from(psn.value()) | (1 << 40), 8)
            .try_into()
            .expect("8 bytes"),
    )
}

impl Harness {
    fn new(input: &Input) -> Harness {
        let mut e = Engine::new(EngineConfig::new(LOCAL, 0xfeed));
        let pd = e.alloc_pd();
        let cq = e.create_cq(8192).expect("cq");
        let mut mems = Vec::new();
        let mut keys = Vec::new();
        for (i, &(len, access, iova)) in REGIONS.iter().enumerate() {
            let m = Arc::new(VecMemory::from_vec(pattern(77 + i as u64, len)));
            keys.push(e.reg_mr(pd, m.clone(), iova, access).expect("reg").lkey);
            mems.push(m);
        }
        let mtu = match input.mtu % 3 {
            0 => Mtu::Mtu256,
            1 => Mtu::Mtu512,
            _ => Mtu::Mtu1024,
        };
        let qpn = e
            .create_qp(QpInit {
                qp_type: QpType::Rc,
                pd,
                send_cq: cq,
                recv_cq: cq,
                srq: None,
                cap: QpCap {
                    max_send_wr: 1024,
                    ..QpCap::default()
                },
                sq_sig_all: true,
            })
            .expect("qp");
        bring_up(
            &mut e,
            qpn,
            QpType::Rc,
            &Conn {
                dest_qpn: DEST_QPN,
                rq_psn: psn(0x30_0000),
                sq_psn: psn(input.sq_psn),
                mtu,
                access: Access::LOCAL_WRITE,
                rd_atomic: 1 + input.rd_atomic % 16,
                timeout: 1 + input.timeout % 12,
                retry_cnt: input.retry_cnt % 8,
                rnr_retry: input.rnr_retry % 8,
                min_rnr_timer: 1,
            },
        );
        let snaps = mems.iter().map(|m| m.snapshot()).collect();
        Harness {
            e,
            cq,
            qpn,
            mtu: mtu.bytes(),
            now: 0,
            mems,
            keys,
            snaps,
            posted: Vec::new(),
            by_id: HashMap::new(),
            last_done: None,
            done: Vec::new(),
            sent: Vec::new(),
            sent_set: HashSet::new(),
            high: None,
            reads: Vec::new(),
            tainted: false,
            recent: VecDeque::new(),
        }
    }

    fn sge(&self, s: SgeSel) -> (Sge, Option<(usize, usize, usize)>) {
        match s {
            SgeSel::In(r, off, len) => {
                // SRC, DST or RO: GUARD is named by no work request.
                let r = usize::from(r) % 3;
                let (rlen, access, iova) = REGIONS[r];
                let (off, len) = (usize::from(off) % (rlen + 64), usize::from(len) % 5000);
                let ok = access.contains(Access::LOCAL_WRITE) && off + len <= rlen;
                (
                    Sge {
                        addr: iova + off as u64,
                        length: len as u32,
                        lkey: self.keys[r],
                    },
                    ok.then_some((r, off, off + len)),
                )
            }
            SgeSel::BadKey(len) => (
                Sge {
                    addr: REGIONS[DST].2,
                    length: u32::from(len) % 5000,
                    lkey: self.keys[DST] ^ 0x100,
                },
                None,
            ),
        }
    }

    fn post(&mut self, w: &WrSpec) {
        let i = self.posted.len();
        let wr_id = 1000 + i as u64;
        let remote = REMOTE + i as u64 * REMOTE_STRIDE;
        let (opcode, sges, writes_dst) = match w {
            WrSpec::Send { sge, imm, .. } => (
                if *imm {
                    SendOpcode::SendWithImm
                } else {
                    SendOpcode::Send
                },
                vec![*sge],
                false,
            ),
            WrSpec::Write { sge, imm } => (
                if *imm {
                    SendOpcode::RdmaWriteWithImm
                } else {
                    SendOpcode::RdmaWrite
                },
                vec![*sge],
                false,
            ),
            WrSpec::Read { sges } => (
                SendOpcode::RdmaRead,
                sges.iter().take(3).copied().collect(),
                true,
            ),
            WrSpec::CmpSwap { sge, .. } => (SendOpcode::AtomicCmpSwap, vec![*sge], true),
            WrSpec::FetchAdd { sge, .. } => (SendOpcode::AtomicFetchAdd, vec![*sge], true),
        };
        let mut wr = SendWr::new(wr_id, opcode);
        let mut writes = Vec::new();
        for s in &sges {
            let (sge, ok) = self.sge(*s);
            wr.sg_list.push(sge);
            if let (true, Some((r, a, b))) = (writes_dst, ok) {
                if r == DST && a < b {
                    writes.push((a, b));
                }
            }
        }
        wr.remote_addr = remote;
        wr.rkey = 0x1234_5600;
        match w {
            WrSpec::Send { inline: true, .. } => {
                let len = wr.sg_list[0].length as usize % 257;
                wr.inline_data = Some(pattern(5, len));
                wr.flags |= SendFlags::INLINE;
            }
            WrSpec::CmpSwap { compare, swap, .. } => {
                wr.compare_add = *compare;
                wr.swap = *swap;
            }
            WrSpec::FetchAdd { add, .. } => wr.compare_add = *add,
            _ => {}
        }
        let len = wr.sg_list.iter().map(|s| s.length as usize).sum();
        let sg = wr.sg_list.clone();
        if self.e.post_send(self.qpn, wr).is_ok() {
            self.by_id.insert(wr_id, i);
            self.posted.push(Posted {
                wr_id,
                opcode,
                writes,
                sges: sg,
                len,
                first_psn: None,
            });
            self.done.push(false);
        }
        self.drain(true);
    }

    fn pick(&self, s: PsnSel) -> Psn {
        let PsnSel(mode, idx) = s;
        let Some(&last) = self.sent.last() else {
            return Psn::new(u32::from(idx));
        };
        let some = self.sent[usize::from(idx) % self.sent.len()];
        match mode {
            0..=199 => some,
            200..=239 => add_signed(some, i32::from(mode) - 220),
            240..=254 => add_signed(last, i32::from(mode) - 247),
            255 => Psn::new(u32::from(idx)),
        }
    }

    /// Drains what the QP sends and the completions, and checks memory.
    fn drain(&mut self, may_change: bool) {
        while let Some(t) = self.e.poll_transmit(at(self.now)) {
            assert!(
                may_change,
                "a packet that must change nothing made the QP send"
            );
            let p = check_transmit(&t);
            let info = p.info();
            if !info.operation.is_request() {
                continue; // an answer of the QP's responder to a raw request
            }
            assert_eq!(p.bth().dest_qp(), DEST_QPN);
            let psn = p.bth().psn();
            if self.high.is_none_or(|h| psn.is_after(h)) {
                self.high = Some(psn);
            }
            if self.sent.len() < 8192 && self.sent_set.insert(psn.value()) {
                self.sent.push(psn);
            }
            let va = p
                .reth()
                .map(|r| r.va())
                .or_else(|| p.atomic_eth().map(|a| a.va()));
            if let (Some(va), true) = (
                va,
                matches!(
                    info.operation,
                    Operation::ReadRequest | Operation::CompareSwap | Operation::FetchAdd
                ),
            ) {
                let i = ((va - REMOTE) / REMOTE_STRIDE) as usize;
                let k = ((va - REMOTE) % REMOTE_STRIDE) as usize / self.mtu;
                let w = &mut self.posted[i];
                let first = psn.sub(k as u32);
                match w.first_psn {
                    None => w.first_psn = Some(first),
                    Some(f) => assert_eq!(f, first, "a work request's PSNs moved"),
                }
                if info.operation == Operation::ReadRequest {
                    let len = p.reth().expect("RETH").dma_len() as usize;
                    assert_eq!(
                        len,
                        w.len - k * self.mtu,
                        "a READ request for other than what is left"
                    );
                    if self.reads.len() < 4096 {
                        self.reads.push((psn, i, len));
                    }
                }
            }
        }
        let mut wc = Vec::new();
        self.e
            .poll_cq(self.cq, usize::MAX, &mut wc)
            .expect("poll_cq");
        for c in &wc {
            assert!(
                may_change,
                "a packet that must change nothing completed {c:?}"
            );
            let i = *self
                .by_id
                .get(&c.wr_id)
                .unwrap_or_else(|| panic!("a completion nobody posted: {c:?}"));
            assert!(!self.done[i], "completed twice: {c:?}");
            assert!(
                self.last_done.is_none_or(|l| i > l),
                "completed out of posting order: {c:?}"
            );
            self.done[i] = true;
            self.last_done = Some(i);
            if c.status == WcStatus::Success && !self.tainted {
                self.check_result(i);
            }
        }
        self.check_memory(may_change);
    }

    /// A successful READ holds its responses' bytes; an atomic its value.
    fn check_result(&mut self, i: usize) {
        let w = self.posted[i].clone();
        if !matches!(
            w.opcode,
            SendOpcode::RdmaRead | SendOpcode::AtomicCmpSwap | SendOpcode::AtomicFetchAdd
        ) {
            return;
        }
        let first = w
            .first_psn
            .expect("a READ or atomic completed without being sent");
        // SGEs that overlap each other alias: the later ones overwrite the
        // earlier ones' bytes, so the result cannot be read back.
        let overlap = w.sges.iter().enumerate().any(|(i, x)| {
            w.sges[..i].iter().any(|y| {
                x.lkey == y.lkey
                    && x.length > 0
                    && y.length > 0
                    && x.addr < y.addr + u64::from(y.length)
                    && y.addr < x.addr + u64::from(x.length)
            })
        });
        if overlap {
            return;
        }
        let mut got = Vec::new();
        for s in w.sges.iter().filter(|s| s.length > 0) {
            let r = self
                .keys
                .iter()
                .position(|&k| k == s.lkey)
                .expect("a successful work request with a bad lkey");
            let off = (s.addr - REGIONS[r].2) as usize;
            let mut b = vec![0u8; s.length as usize];
            assert!(self.mems[r].read(off, &mut b));
            got.extend_from_slice(&b);
        }
        if w.opcode == SendOpcode::RdmaRead {
            let want: Vec<u8> = (0..w.len)
                .map(|j| pattern_byte(seed(first.add((j / self.mtu) as u32)), j % self.mtu))
                .collect();
            assert!(
                got == want,
                "a READ completed with other bytes than its responses"
            );
        } else {
            assert_eq!(
                &got[..8],
                &atomic_value(first).to_ne_bytes(),
                "an atomic completed with another value than its acknowledge"
            );
        }
    }

    fn check_memory(&mut self, may_change: bool) {
        for r in 0..self.mems.len() {
            let now = self.mems[r].snapshot();
            if now == self.snaps[r] {
                continue;
            }
            assert!(
                may_change,
                "region {r} changed by a packet that must change nothing"
            );
            assert_eq!(r, DST, "region {r}, named by no READ or atomic, changed");
            for (j, (a, b)) in self.snaps[r].iter().zip(&now).enumerate() {
                if a != b {
                    assert!(
                        self.posted
                            .iter()
                            .any(|w| w.writes.iter().any(|&(s, e)| s <= j && j < e)),
                        "byte {j} of DST changed outside every READ/atomic SGE"
                    );
                }
            }
            self.snaps[r] = now;
        }
    }

    fn feed(&mut self, bytes: Vec<u8>, src: IpAddr) {
        if self.recent.len() == 16 {
            self.recent.pop_front();
        }
        self.recent.push_back((bytes.clone(), src));
        let before = self.e.counters().clone();
        self.e
            .handle_datagram(at(self.now), meta(src, IcrcStatus::Ok), &bytes);
        let after = self.e.counters().clone();
        assert_eq!(after.rcvd_pkts, before.rcvd_pkts + 1);
        let ours = Packet::new_checked(&bytes[..]).is_ok_and(|p| p.bth().dest_qp() == self.qpn);
        let third_party = src != PEER && ours;
        if third_party {
            assert_eq!(
                after.dropped(),
                before.dropped() + 1,
                "a third party's packet went in"
            );
        }
        self.drain(!third_party);
    }

    fn response(&self, opcode: Opcode, psn: Psn, syndrome: Option<u8>) -> PacketRepr<'static> {
        let mut r = PacketRepr::new(BthRepr {
            opcode,
            solicited: false,
            mig_req: false,
            pad_count: 0,
            pkey: 0xffff,
            fecn: false,
            becn: false,
            dest_qp: self.qpn,
            ack_req: false,
            psn,
        });
        if let Some(s) = syndrome {
            r.aeth = Some(AethRepr {
                syndrome: AethSyndrome::from_u8(s),
                msn: 0,
            });
        }
        r
    }

    fn run(&mut self, ev: &Event) {
        match ev {
            Event::Ack {
                psn,
                syndrome,
                msn,
                from,
            } => {
                let mut r = self.response(Opcode::RC_ACKNOWLEDGE, self.pick(*psn), Some(*syndrome));
                if let Some(a) = r.aeth.as_mut() {
                    a.msn = msn & 0xff_ffff;
                }
                let src = from.src();
                let b = emit(&r, src).expect("an ACK emits");
                self.feed(b, src);
            }
            Event::ReadResp {
                psn,
                pos,
                len,
                from,
            } => {
                let p = self.pick(*psn);
                let opcode = [
                    Opcode::RC_RDMA_READ_RESPONSE_FIRST,
                    Opcode::RC_RDMA_READ_RESPONSE_MIDDLE,
                    Opcode::RC_RDMA_READ_RESPONSE_LAST,
                    Opcode::RC_RDMA_READ_RESPONSE_ONLY,
                ][usize::from(*pos % 4)];
                let expected = self
                    .reads
                    .iter()
                    .rev()
                    .find_map(|&(q, _, l)| {
                        let n = l.div_ceil(self.mtu).max(1) as u32;
                        p.in_window(q, n)
                            .then(|| (l - q.distance_to(p) as usize * self.mtu).min(self.mtu))
                    })
                    .unwrap_or(self.mtu);
                let n = match len {
                    RLen::Expected => expected,
                    RLen::Mtu => self.mtu,
                    RLen::Exact(n) => usize::from(*n) % 4200,
                };
                let payload = pattern(seed(p), n);
                let syndrome = (opcode != Opcode::RC_RDMA_READ_RESPONSE_MIDDLE).then_some(0x1f);
                let mut r = self.response(opcode, p, syndrome);
                r.payload = &payload;
                let src = from.src();
                let b = emit(&r, src).expect("a READ response emits");
                self.feed(b, src);
            }
            Event::AtomicAck { psn, syndrome } => {
                let p = self.pick(*psn);
                let mut r = self.response(Opcode::RC_ATOMIC_ACKNOWLEDGE, p, Some(*syndrome));
                r.atomic_ack_eth = Some(AtomicAckEthRepr {
                    orig: atomic_value(p),
                });
                let b = emit(&r, PEER).expect("an atomic acknowledge emits");
                self.feed(b, PEER);
            }
            Event::Answer { idx, drop, swap } => {
                let Some(&(q, _, l)) = self.reads.get(usize::from(*idx) % self.reads.len().max(1))
                else {
                    return;
                };
                let n = l.div_ceil(self.mtu).max(1);
                let mut order: Vec<usize> = (0..n).collect();
                if *swap && n >= 2 {
                    let k = usize::from(*drop) % (n - 1);
                    order.swap(k, k + 1);
                }
                for k in order {
                    if *drop > 0 && (usize::from(*drop) - 1) % n == k {
                        continue;
                    }
                    let opcode = match (k, n) {
                        (_, 1) => Opcode::RC_RDMA_READ_RESPONSE_ONLY,
                        (0, _) => Opcode::RC_RDMA_READ_RESPONSE_FIRST,
                        (k, n) if k + 1 == n => Opcode::RC_RDMA_READ_RESPONSE_LAST,
                        _ => Opcode::RC_RDMA_READ_RESPONSE_MIDDLE,
                    };
                    let psn = q.add(k as u32);
                    let payload = pattern(seed(psn), (l - k * self.mtu).min(self.mtu));
                    let syndrome = (opcode != Opcode::RC_RDMA_READ_RESPONSE_MIDDLE).then_some(0x1f);
                    let mut r = self.response(opcode, psn, syndrome);
                    r.payload = &payload;
                    let b = emit(&r, PEER).expect("a READ response emits");
                    self.feed(b, PEER);
                }
            }
            Event::AckLatest(back) => {
                let Some(last) = self.high else {
                    return;
                };
                let r = self.response(
                    Opcode::RC_ACKNOWLEDGE,
                    last.sub(u32::from(*back % 4)),
                    Some(0x1f),
                );
                let b = emit(&r, PEER).expect("an ACK emits");
                self.feed(b, PEER);
            }
            Event::Timeout(us) => {
                self.now += u64::from(*us % 10_000_000);
                self.e.handle_timeout(at(self.now));
                self.drain(true);
            }
            Event::Post(w) => {
                if self.posted.len() < 4 * MAX_WRS {
                    self.post(w);
                }
            }
            Event::Raw { patch, psn, bytes } => {
                let mut b = bytes.clone();
                b.truncate(4200);
                if *patch && b.len() >= 16 {
                    let p = self.pick(*psn).value();
                    b[1] &= 0xf0;
                    b[2] = 0xff;
                    b[3] = 0xff;
                    b[5..8].copy_from_slice(&self.qpn.to_be_bytes()[1..]);
                    b[9..12].copy_from_slice(&p.to_be_bytes()[1..]);
                    fill_icrc(&mut b, PEER);
                }
                if Packet::new_checked(&b[..]).is_ok_and(|p| {
                    matches!(
                        p.info().operation,
                        Operation::ReadResponse | Operation::AtomicAcknowledge
                    )
                }) {
                    self.tainted = true;
                }
                self.feed(b, PEER);
            }
            Event::Replay(i) => {
                if !self.recent.is_empty() {
                    let j = usize::from(*i) % self.recent.len();
                    let (b, src) = self.recent[j].clone();
                    self.feed(b, src);
                }
            }
        }
    }

    fn finish(mut self) {
        let state = self.e.query_qp(self.qpn).expect("the QP").0.state;
        if state == QpState::Err {
            let open: Vec<u64> = self
                .posted
                .iter()
                .zip(&self.done)
                .filter(|(_, d)| !**d)
                .map(|(w, _)| w.wr_id)
                .collect();
            assert!(
                open.is_empty(),
                "in ERR with work requests not flushed: {open:?}"
            );
        } else {
            to_error(&mut self.e, self.qpn);
            self.drain(true);
        }
        assert!(
            self.done.iter().all(|d| *d),
            "work requests that never completed, even flushed"
        );
    }
}

fn seed(p: Psn) -> u64 {
    u64::from(p.value()) | (1 << 32)
}

fn add_signed(p: Psn, d: i32) -> Psn {
    if d >= 0 {
        p.add(d.unsigned_abs())
    } else {
        p.sub(d.unsigned_abs())
    }
}

fuzz_target!(|input: Input| {
    let mut h = Harness::new(&input);
    for w in input.wrs.iter().take(MAX_WRS) {
        h.post(w);
    }
    for ev in input.events.iter().take(MAX_EVENTS) {
        h.run(ev);
    }
    h.finish();
});
