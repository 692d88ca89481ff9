//! The packets: built with rxe-core's wire builders from the opcode table,
//! then bent by one *arm* per step. Each arm aims at one part of the
//! grammar (opcodes and their order, PSNs, RETH, AtomicETH, AETH, pad,
//! lengths, BTH fields, Q_Keys, QPNs, ICRC, duplicates and reordering).
//!
//! A generated packet ([`Gen`]) leaves out what only the connection knows:
//! the peer's QP number ([`QpnChoice`]), a PSN counted from the peer's own
//! PSN ([`PsnBase::Peer`]), the ICRC ([`IcrcChoice`]) and, against a peer
//! whose region the exchange named (a perftest server), where its RETH,
//! AtomicETH or IETH points in that region ([`RegionRef`]). [`finalize`]
//! writes them in, for the campaign and, on a new connection, for a replay.
//!
//! The `region` arm only runs against such a peer: WRITEs (one packet or
//! several), atomics, ATOMIC WRITE, FLUSH, READs past the end and SENDs
//! with invalidate, aimed at the region with its right R_Key, neighbouring
//! and stale keys, and at its edges. The `rkey` arm sends requests the
//! peer would execute but for their key: READs, WRITEs and atomics inside
//! the region with a key it did not grant (a neighbour of the granted key,
//! a stale key, an edge key), for the rkey oracle.

use super::bth::bth_repr;
use super::record::{region_fields, IcrcChoice, PsnBase, QpnChoice, RegionRef};
use super::session::Region;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::Rng;
use rxe_core::psn::Psn;
use rxe_core::wire::opcode::ALL;
use rxe_core::wire::{
    AethRepr, AethSyndrome, AtomicAckEthRepr, AtomicEthRepr, DethRepr, ExtHeaders, FethRepr,
    Opcode, PacketRepr, RdethRepr, RethRepr, Transport,
};

/// What a step knows of the connection.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ctx {
    /// The PSN the peer expects from us.
    pub sq_psn: Psn,
    /// The peer's path MTU.
    pub mtu: usize,
    /// The peer's receive buffer size.
    pub recv_size: usize,
    /// The largest UDP payload the route takes.
    pub max_datagram: usize,
    /// The peer's region, when the exchange named one (perftest).
    pub region: Option<Region>,
    /// An R_Key of an earlier connection's region that is not this one's.
    pub stale_rkey: Option<u32>,
}

/// One packet of a step, before [`finalize`].
#[derive(Debug, Clone)]
pub(crate) struct Gen {
    pub bytes: Vec<u8>,
    pub qpn: QpnChoice,
    pub icrc: IcrcChoice,
    pub psn: PsnBase,
    /// Built to be well formed: the sanity oracle re-parses it.
    pub wellformed: bool,
    /// Where it points in the peer's region, if it does.
    pub region: Option<RegionRef>,
}

/// The mutation families.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Arm {
    Valid,
    ValidMulti,
    PsnEdge,
    AnyOpcode,
    ForeignOpcode,
    UnknownOpcode,
    Sequence,
    Reth,
    Atomic,
    Aeth,
    Pad,
    Oversize,
    Truncated,
    Overlong,
    BthFields,
    Ud,
    Qpn,
    Icrc,
    Duplicate,
    Reorder,
    Burst,
    Region,
    Rkey,
}

/// The arms against a peer with no region known (a pingpong server).
pub(crate) const ARMS: [Arm; 21] = [
    Arm::Valid,
    Arm::ValidMulti,
    Arm::PsnEdge,
    Arm::AnyOpcode,
    Arm::ForeignOpcode,
    Arm::UnknownOpcode,
    Arm::Sequence,
    Arm::Reth,
    Arm::Atomic,
    Arm::Aeth,
    Arm::Pad,
    Arm::Oversize,
    Arm::Truncated,
    Arm::Overlong,
    Arm::BthFields,
    Arm::Ud,
    Arm::Qpn,
    Arm::Icrc,
    Arm::Duplicate,
    Arm::Reorder,
    Arm::Burst,
];

/// The arms against a peer whose region the exchange named (perftest):
/// [`ARMS`], then [`Arm::Region`] and [`Arm::Rkey`].
pub(crate) const REGION_ARMS: [Arm; ARMS.len() + 2] = {
    let mut arms = [Arm::Region; ARMS.len() + 2];
    arms[ARMS.len() + 1] = Arm::Rkey;
    let mut i = 0;
    while i < ARMS.len() {
        arms[i] = ARMS[i];
        i += 1;
    }
    arms
};

impl Arm {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Arm::Valid => "valid",
            Arm::ValidMulti => "valid-multi",
            Arm::PsnEdge => "psn-edge",
            Arm::AnyOpcode => "any-opcode",
            Arm::ForeignOpcode => "foreign-opcode",
            Arm::UnknownOpcode => "unknown-opcode",
            Arm::Sequence => "sequence",
            Arm::Reth => "reth",
            Arm::Atomic => "atomic",
            Arm::Aeth => "aeth",
            Arm::Pad => "pad",
            Arm::Oversize => "oversize",
            Arm::Truncated => "truncated",
            Arm::Overlong => "overlong",
            Arm::BthFields => "bth-fields",
            Arm::Ud => "ud-qkey",
            Arm::Qpn => "qpn",
            Arm::Icrc => "icrc",
            Arm::Duplicate => "duplicate",
            Arm::Reorder => "reorder",
            Arm::Burst => "burst",
            Arm::Region => "region",
            Arm::Rkey => "rkey",
        }
    }
}

// ---- building blocks ---------------------------------------------------------

/// A repr of `op` with every header its table row calls for, zeroed (an
/// AETH: ACK, MSN 0).
fn repr<'a>(op: Opcode, psn: Psn, ack: bool) -> PacketRepr<'a> {
    let h = op.info().map(|i| i.headers).unwrap_or(ExtHeaders::empty());
    let mut r = PacketRepr::new(bth_repr(op, 0, psn, ack));
    if h.contains(ExtHeaders::RDETH) {
        r.rdeth = Some(RdethRepr::default());
    }
    if h.contains(ExtHeaders::DETH) {
        r.deth = Some(DethRepr::default());
    }
    if h.contains(ExtHeaders::FETH) {
        r.feth = Some(FethRepr::default());
    }
    if h.contains(ExtHeaders::RETH) {
        r.reth = Some(RethRepr::default());
    }
    if h.contains(ExtHeaders::ATOMIC_ETH) {
        r.atomic_eth = Some(AtomicEthRepr::default());
    }
    if h.contains(ExtHeaders::AETH) {
        r.aeth = Some(AethRepr {
            syndrome: AethSyndrome::Ack { credits: 31 },
            msn: 0,
        });
    }
    if h.contains(ExtHeaders::ATOMIC_ACK_ETH) {
        r.atomic_ack_eth = Some(AtomicAckEthRepr::default());
    }
    if h.contains(ExtHeaders::IMMDT) {
        r.immdt = Some(0);
    }
    if h.contains(ExtHeaders::IETH) {
        r.ieth = Some(0);
    }
    r
}

/// Emits a repr that matches its opcode (every caller builds one).
fn emit(r: &PacketRepr<'_>) -> Vec<u8> {
    let mut b = vec![0u8; r.buffer_len()];
    match r.emit(&mut b) {
        Ok(n) => b.truncate(n),
        // Not reachable for reprs from `repr`; keep the BTH at least.
        Err(_) => b.truncate(16.min(b.len())),
    }
    b
}

fn ok(bytes: Vec<u8>) -> Gen {
    Gen {
        bytes,
        qpn: QpnChoice::Peer,
        icrc: IcrcChoice::Right,
        psn: PsnBase::Ours,
        wellformed: true,
        region: None,
    }
}

fn bad(bytes: Vec<u8>) -> Gen {
    Gen {
        wellformed: false,
        ..ok(bytes)
    }
}

fn payload(rng: &mut StdRng, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    if rng.gen_bool(0.5) {
        rng.fill(&mut v[..]);
    } else {
        let b: u8 = rng.gen();
        v.fill(b);
    }
    v
}

/// One of a list (evaluated before the draw, so it may draw too).
macro_rules! pick {
    ($rng:expr, $xs:expr $(,)?) => {{
        let xs = $xs;
        *xs.choose($rng).expect("non-empty")
    }};
}

/// A valid SEND ONLY of `len` bytes at `psn`.
fn send_only(rng: &mut StdRng, psn: Psn, len: usize) -> Vec<u8> {
    let data = payload(rng, len);
    let mut r = repr(Opcode::RC_SEND_ONLY, psn, true);
    r.payload = &data;
    emit(&r)
}

/// A valid multi-packet SEND of `len` bytes (more than one MTU) from `psn`.
fn send_message(rng: &mut StdRng, psn: Psn, len: usize, mtu: usize, imm: bool) -> Vec<Vec<u8>> {
    let data = payload(rng, len);
    let chunks: Vec<&[u8]> = data.chunks(mtu).collect();
    let n = chunks.len();
    chunks
        .into_iter()
        .enumerate()
        .map(|(i, c)| {
            let op = match (i, n) {
                (_, 1) if imm => Opcode::RC_SEND_ONLY_WITH_IMMEDIATE,
                (_, 1) => Opcode::RC_SEND_ONLY,
                (0, _) => Opcode::RC_SEND_FIRST,
                (i, n) if i + 1 == n && imm => Opcode::RC_SEND_LAST_WITH_IMMEDIATE,
                (i, n) if i + 1 == n => Opcode::RC_SEND_LAST,
                _ => Opcode::RC_SEND_MIDDLE,
            };
            let mut r = repr(op, psn.add(i as u32), i + 1 == n);
            r.payload = c;
            if imm {
                r.immdt = r.immdt.map(|_| 0x1234_5678);
            }
            emit(&r)
        })
        .collect()
}

fn edge_va(rng: &mut StdRng) -> u64 {
    pick!(
        rng,
        &[
            0,
            1,
            7,
            8,
            0xfff,
            0x1000,
            u64::MAX,
            u64::MAX - 7,
            u64::MAX - 4095,
            1 << 63,
            (1 << 63) - 1,
            0xffff_ffff,
            0x1_0000_0000,
            rng.gen(),
            rng.gen::<u64>() & 0x0000_7fff_ffff_f000,
        ],
    )
}

fn edge_len(rng: &mut StdRng, mtu: usize) -> u32 {
    let m = mtu as u32;
    pick!(
        rng,
        &[
            0,
            1,
            4,
            8,
            m - 1,
            m,
            m + 1,
            4096,
            4097,
            0x7fff_ffff,
            0x8000_0000,
            u32::MAX,
            u32::MAX - 7,
            rng.gen(),
            rng.gen_range(0..=2 * m),
        ],
    )
}

fn edge_rkey(rng: &mut StdRng) -> u32 {
    pick!(
        rng,
        &[
            0,
            1,
            0xffff_ffff,
            0x8000_0000,
            0x100,
            0x1ff,
            0x1000,
            rng.gen()
        ],
    )
}

fn rand_aeth(rng: &mut StdRng) -> AethRepr {
    let syndrome = match rng.gen_range(0..6) {
        0 => AethSyndrome::Ack {
            credits: rng.gen_range(0..32),
        },
        1 => AethSyndrome::RnrNak {
            timer: rng.gen_range(0..32),
        },
        2 | 3 => AethSyndrome::Nak(rxe_core::wire::NakCode::from_code(rng.gen_range(0..32))),
        _ => AethSyndrome::from_u8(pick!(rng, &[0x40, 0x5f, 0x80, 0xff, rng.gen()])),
    };
    AethRepr {
        syndrome,
        msn: pick!(rng, &[0, 1, 0xff_ffff, rng.gen::<u32>() & 0xff_ffff]),
    }
}

/// Fills every header of a repr with values from the edge lists.
fn scramble(rng: &mut StdRng, r: &mut PacketRepr<'_>, mtu: usize) {
    if let Some(x) = r.rdeth.as_mut() {
        x.ee_context = rng.gen::<u32>() & 0xff_ffff;
    }
    if let Some(x) = r.deth.as_mut() {
        x.qkey = pick!(rng, &[0, 0x1111_1111, 0x8001_0000, rng.gen()]);
        x.src_qp = rng.gen::<u32>() & 0xff_ffff;
    }
    if let Some(x) = r.feth.as_mut() {
        x.selectivity = rng.gen_range(0..4);
        x.placement = rng.gen_range(0..4);
    }
    if let Some(x) = r.reth.as_mut() {
        *x = RethRepr {
            va: edge_va(rng),
            rkey: edge_rkey(rng),
            dma_len: edge_len(rng, mtu),
        };
    }
    if let Some(x) = r.atomic_eth.as_mut() {
        *x = AtomicEthRepr {
            va: edge_va(rng),
            rkey: edge_rkey(rng),
            swap_add: rng.gen(),
            compare: rng.gen(),
        };
    }
    if r.aeth.is_some() {
        r.aeth = Some(rand_aeth(rng));
    }
    if let Some(x) = r.atomic_ack_eth.as_mut() {
        x.orig = rng.gen();
    }
    if r.immdt.is_some() {
        r.immdt = Some(rng.gen());
    }
    if r.ieth.is_some() {
        r.ieth = Some(edge_rkey(rng));
    }
}

/// A packet of opcode `op` at `psn` with scrambled headers and a payload
/// of up to one MTU where the opcode has one.
fn any_of(rng: &mut StdRng, op: Opcode, psn: Psn, c: &Ctx) -> Vec<u8> {
    let info = op.info().expect("from the table");
    let len = if info.payload {
        pick!(rng, &[0, 1, 8, c.mtu, rng.gen_range(0..=c.mtu)])
    } else {
        0
    };
    let data = payload(rng, len);
    let mut r = repr(op, psn, rng.gen_bool(0.9));
    r.payload = &data;
    scramble(rng, &mut r, c.mtu);
    emit(&r)
}

/// The peer-relative PSN offsets of the AETH arm.
const PEER_DELTAS: [i32; 7] = [-1, -2, 0, 1, 2, -(1 << 23), (1 << 23) - 1];

fn psn_delta(rng: &mut StdRng) -> i32 {
    pick!(
        rng,
        &[
            -1,
            -2,
            -3,
            1,
            2,
            3,
            -(1 << 23),
            (1 << 23) - 1,
            1 << 22,
            -(1 << 22),
            -((1 << 23) - 1),
            rng.gen_range(-64..64),
            rng.gen::<i32>() >> 8,
        ],
    )
}

// ---- the arms ----------------------------------------------------------------

/// The packets of one step of `arm`.
pub(crate) fn generate(arm: Arm, rng: &mut StdRng, c: &Ctx) -> Vec<Gen> {
    let psn = c.sq_psn;
    let mtu = c.mtu;
    let fit = |n: usize| n.min(c.max_datagram.saturating_sub(64));
    match arm {
        Arm::Valid => {
            let len = pick!(rng, &[0, 1, 3, 4, mtu - 1, mtu, rng.gen_range(0..=mtu)]);
            vec![ok(send_only(rng, psn, len.min(c.recv_size)))]
        }
        Arm::ValidMulti => {
            let hi = c.recv_size.max(mtu + 1);
            let len = rng.gen_range(mtu + 1..=hi);
            let imm = rng.gen_bool(0.3);
            send_message(rng, psn, len, mtu, imm)
                .into_iter()
                .map(ok)
                .collect()
        }
        Arm::PsnEdge => {
            let d = psn_delta(rng);
            let len = rng.gen_range(0..=64);
            vec![ok(send_only(rng, psn.add(d as u32), len))]
        }
        Arm::AnyOpcode => {
            let op = Opcode(ALL.choose(rng).expect("table").code);
            vec![ok(any_of(rng, op, psn, c))]
        }
        Arm::ForeignOpcode => {
            let foreign: Vec<u8> = ALL
                .iter()
                .filter(|i| i.transport != Transport::Rc || !i.operation.is_request())
                .map(|i| i.code)
                .collect();
            let op = Opcode(pick!(rng, &foreign));
            vec![ok(any_of(rng, op, psn, c))]
        }
        Arm::UnknownOpcode => {
            let mut code: u8 = rng.gen();
            while Opcode(code).info().is_some() {
                code = code.wrapping_add(1);
            }
            let code = pick!(
                rng,
                &[0x15, 0x18, 0x1b, 0x1e, 0x1f, 0x2c, 0x55, 0x60, 0xa0, 0xff, code]
            );
            let mut b = emit(&repr(Opcode::RC_SEND_ONLY, psn, true));
            b[0] = code;
            let extra = 4 * rng.gen_range(0..=16);
            let n = b.len();
            let mut tail = payload(rng, extra);
            b.splice(n - 4..n - 4, tail.drain(..));
            vec![bad(b)]
        }
        Arm::Sequence => sequence(rng, c),
        Arm::Reth => {
            let op = pick!(
                rng,
                &[
                    Opcode::RC_RDMA_WRITE_ONLY,
                    Opcode::RC_RDMA_WRITE_FIRST,
                    Opcode::RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE,
                    Opcode::RC_RDMA_READ_REQUEST,
                    Opcode::RC_RDMA_READ_REQUEST,
                    Opcode::RC_ATOMIC_WRITE,
                    Opcode::RC_FLUSH,
                ],
            );
            let reth = RethRepr {
                va: edge_va(rng),
                rkey: edge_rkey(rng),
                dma_len: edge_len(rng, mtu),
            };
            let info = op.info().expect("table");
            let len = if !info.payload {
                0
            } else if op == Opcode::RC_ATOMIC_WRITE {
                pick!(rng, &[8, 0, 4, 16])
            } else if op == Opcode::RC_RDMA_WRITE_FIRST {
                pick!(rng, &[mtu, mtu - 4, 0])
            } else {
                pick!(
                    rng,
                    &[(reth.dma_len as usize).min(mtu), 0, rng.gen_range(0..=mtu),]
                )
            };
            let data = payload(rng, len);
            let mut r = repr(op, psn, true);
            r.reth = Some(reth);
            r.payload = &data;
            if let Some(f) = r.feth.as_mut() {
                f.selectivity = rng.gen_range(0..4);
                f.placement = rng.gen_range(0..4);
            }
            vec![ok(emit(&r))]
        }
        Arm::Atomic => {
            let op = pick!(rng, &[Opcode::RC_COMPARE_SWAP, Opcode::RC_FETCH_ADD]);
            let base = edge_va(rng) & !7;
            let va = pick!(rng, &[base, base | 1, base | 4, base | 7, edge_va(rng)]);
            let mut r = repr(op, psn, true);
            r.atomic_eth = Some(AtomicEthRepr {
                va,
                rkey: edge_rkey(rng),
                swap_add: pick!(rng, &[0, 1, u64::MAX, rng.gen()]),
                compare: pick!(rng, &[0, u64::MAX, rng.gen()]),
            });
            vec![ok(emit(&r))]
        }
        Arm::Aeth => {
            let op = pick!(
                rng,
                &[
                    Opcode::RC_ACKNOWLEDGE,
                    Opcode::RC_ACKNOWLEDGE,
                    Opcode::RC_ATOMIC_ACKNOWLEDGE,
                    Opcode::RC_RDMA_READ_RESPONSE_ONLY,
                    Opcode::RC_RDMA_READ_RESPONSE_FIRST,
                    Opcode::RC_RDMA_READ_RESPONSE_MIDDLE,
                    Opcode::RC_RDMA_READ_RESPONSE_LAST,
                ],
            );
            let d = pick!(rng, &PEER_DELTAS);
            let info = op.info().expect("table");
            let len = if !info.payload {
                0
            } else if info.position == rxe_core::wire::Position::Middle {
                mtu
            } else {
                rng.gen_range(0..=mtu)
            };
            let data = payload(rng, len);
            let mut r = repr(op, Psn::new(0), false);
            r.payload = &data;
            if r.aeth.is_some() {
                r.aeth = Some(rand_aeth(rng));
            }
            if let Some(x) = r.atomic_ack_eth.as_mut() {
                x.orig = rng.gen();
            }
            let mut g = ok(emit(&r));
            g.psn = PsnBase::Peer(d);
            vec![g]
        }
        Arm::Pad => {
            let len = rng.gen_range(0..=64);
            let mut b = send_only(rng, psn, len);
            let correct = (b[1] >> 4) & 3;
            if rng.gen_bool(0.3) && correct > 0 {
                // Nonzero pad bytes: still a valid packet.
                let n = b.len();
                for x in &mut b[n - 4 - usize::from(correct)..n - 4] {
                    *x = 0xa5;
                }
                vec![ok(b)]
            } else {
                let pad = (correct + rng.gen_range(1..4)) & 3;
                b[1] = (b[1] & !0x30) | (pad << 4);
                vec![bad(b)]
            }
        }
        Arm::Oversize => match rng.gen_range(0..3) {
            0 => {
                let len = fit(pick!(
                    rng,
                    &[mtu + 1, mtu + 4, 2 * mtu, rng.gen_range(mtu + 1..=2 * mtu)]
                ));
                vec![ok(send_only(rng, psn, len))]
            }
            1 => {
                let len = fit(rng.gen_range(mtu + 1..=2 * mtu));
                let data = payload(rng, len);
                let mut r = repr(Opcode::RC_RDMA_WRITE_ONLY, psn, true);
                r.reth = Some(RethRepr {
                    va: edge_va(rng),
                    rkey: edge_rkey(rng),
                    dma_len: len as u32,
                });
                r.payload = &data;
                vec![ok(emit(&r))]
            }
            _ => {
                // A message longer than the peer's receive buffer.
                let len = c.recv_size + pick!(rng, &[1, 4, mtu, rng.gen_range(1..=mtu)]);
                send_message(rng, psn, len, mtu, false)
                    .into_iter()
                    .map(ok)
                    .collect()
            }
        },
        Arm::Truncated => {
            let op = pick!(
                rng,
                &[
                    Opcode::RC_SEND_ONLY,
                    Opcode::RC_SEND_ONLY_WITH_IMMEDIATE,
                    Opcode::RC_RDMA_WRITE_ONLY,
                    Opcode::RC_RDMA_READ_REQUEST,
                    Opcode::RC_COMPARE_SWAP,
                    Opcode::RC_FLUSH,
                    Opcode::RC_ACKNOWLEDGE,
                    Opcode::RC_SEND_LAST_WITH_INVALIDATE,
                ],
            );
            let b = any_of(rng, op, psn, c);
            let hdr = op.info().expect("table").header_len();
            let cut = pick!(
                rng,
                &[
                    0,
                    1,
                    4,
                    8,
                    11,
                    12,
                    hdr - 1,
                    hdr,
                    hdr + 3,
                    rng.gen_range(0..b.len())
                ],
            )
            .min(b.len() - 1);
            let mut b = b;
            b.truncate(cut);
            let mut g = bad(b);
            if cut < 8 {
                g.qpn = QpnChoice::Keep;
            }
            if cut < 16 {
                g.icrc = IcrcChoice::Keep;
            }
            vec![g]
        }
        Arm::Overlong => {
            let op = pick!(
                rng,
                &[
                    Opcode::RC_RDMA_READ_REQUEST,
                    Opcode::RC_COMPARE_SWAP,
                    Opcode::RC_FETCH_ADD,
                    Opcode::RC_FLUSH,
                    Opcode::RC_SEND_ONLY,
                ],
            );
            let mut b = any_of(rng, op, psn, c);
            let extra = pick!(rng, &[1, 2, 3, 4, 16, 28, rng.gen_range(1..=64)]);
            let n = b.len();
            let mut tail = payload(rng, extra);
            b.splice(n - 4..n - 4, tail.drain(..));
            vec![bad(b)]
        }
        Arm::BthFields => {
            let len = rng.gen_range(0..=32);
            let mut b = send_only(rng, psn, len);
            match rng.gen_range(0..7) {
                0 => {
                    let pkey: u16 = pick!(rng, &[0, 0x7fff, 0x8000, 0x7ffe, 0xfffe, rng.gen()]);
                    b[2..4].copy_from_slice(&pkey.to_be_bytes());
                    vec![ok(b)]
                }
                1 => {
                    b[1] |= rng.gen_range(1..16);
                    vec![bad(b)]
                }
                2 => {
                    b[4] = rng.gen_range(1..=255);
                    vec![ok(b)]
                }
                3 => {
                    b[8] |= rng.gen_range(1..128);
                    vec![ok(b)]
                }
                4 => {
                    b[1] |= 0x40; // MigReq
                    vec![ok(b)]
                }
                5 => {
                    b[1] |= 0x80; // solicited event
                    vec![ok(b)]
                }
                _ => {
                    b[8] &= 0x7f; // no AckReq
                    vec![ok(b)]
                }
            }
        }
        Arm::Ud => {
            let to_gsi = rng.gen_bool(0.3);
            let op = pick!(
                rng,
                &[Opcode::UD_SEND_ONLY, Opcode::UD_SEND_ONLY_WITH_IMMEDIATE],
            );
            let len = if to_gsi {
                256
            } else {
                rng.gen_range(0..=mtu.min(256))
            };
            let mut data = payload(rng, len);
            if to_gsi {
                // A MAD header: base version 1, the CM class (7), version 2.
                data[0] = 1;
                data[1] = pick!(rng, &[7, 1, 0x81, rng.gen()]);
                data[2] = 2;
            }
            let mut r = repr(op, psn, false);
            r.deth = Some(DethRepr {
                qkey: if to_gsi {
                    0x8001_0000
                } else {
                    pick!(rng, &[0, 0x1111_1111, 0x8000_0000, 0x8001_0000, rng.gen()])
                },
                src_qp: pick!(rng, &[1, 0, 0xff_ffff, rng.gen::<u32>() & 0xff_ffff]),
            });
            r.payload = &data;
            if r.immdt.is_some() {
                r.immdt = Some(rng.gen());
            }
            let mut g = ok(emit(&r));
            if to_gsi {
                g.qpn = QpnChoice::Abs(1);
            }
            vec![g]
        }
        Arm::Qpn => {
            let len = rng.gen_range(0..=64);
            let mut g = ok(send_only(rng, psn, len));
            g.qpn = match rng.gen_range(0..5) {
                0 | 1 => QpnChoice::PeerXor(1 << rng.gen_range(0..24)),
                2 => QpnChoice::Abs(pick!(rng, &[0, 1, 2, 0xff_ffff, 0xff_fffe])),
                3 => QpnChoice::PeerXor(rng.gen_range(1..=0xff_ffff)),
                _ => QpnChoice::Abs(rng.gen::<u32>() & 0xff_ffff),
            };
            vec![g]
        }
        Arm::Icrc => {
            let len = rng.gen_range(0..=mtu);
            let mut g = ok(send_only(rng, psn, len));
            let flip: u32 = pick!(
                rng,
                &[1, 0x8000_0000, 0xffff_ffff, 0x0100, rng.gen::<u32>() | 1]
            );
            g.icrc = IcrcChoice::Flip(flip);
            vec![g]
        }
        Arm::Duplicate => {
            let len = rng.gen_range(0..=128);
            let b = send_only(rng, psn, len);
            let n = rng.gen_range(2..=4);
            (0..n).map(|_| ok(b.clone())).collect()
        }
        Arm::Reorder => {
            let n = rng.gen_range(3..=4usize).min((c.recv_size / mtu).max(2));
            let len = (n - 1) * mtu + rng.gen_range(1..=mtu);
            let mut pkts = send_message(rng, psn, len.min(c.recv_size.max(mtu + 1)), mtu, false);
            let orig = pkts.clone();
            while pkts.len() > 1 && pkts == orig {
                pkts.shuffle(rng);
            }
            pkts.into_iter().map(ok).collect()
        }
        Arm::Region => match c.region {
            Some(reg) => region(rng, c, reg),
            // Not drawn without a region; the RETH arm is the nearest.
            None => generate(Arm::Reth, rng, c),
        },
        Arm::Rkey => match c.region {
            Some(reg) => wrong_key(rng, c, reg),
            None => generate(Arm::Reth, rng, c),
        },
        Arm::Burst => {
            let n = rng.gen_range(8..=32);
            (0..n)
                .map(|i| {
                    let len = rng.gen_range(0..=32);
                    let mut b = send_only(rng, psn.add(i), len);
                    if i + 1 != n && rng.gen_bool(0.7) {
                        b[8] &= 0x7f;
                    }
                    ok(b)
                })
                .collect()
        }
    }
}

/// Packets in and out of message order.
fn sequence(rng: &mut StdRng, c: &Ctx) -> Vec<Gen> {
    use Opcode as O;
    let mtu = c.mtu;
    let psn = c.sq_psn;
    let plans: [&[(Opcode, usize)]; 13] = [
        &[(O::RC_SEND_MIDDLE, mtu)],
        &[(O::RC_SEND_LAST, 16)],
        &[(O::RC_SEND_FIRST, mtu), (O::RC_SEND_FIRST, mtu)],
        &[(O::RC_SEND_FIRST, mtu), (O::RC_SEND_ONLY, 16)],
        &[(O::RC_SEND_FIRST, mtu), (O::RC_RDMA_WRITE_MIDDLE, mtu)],
        &[(O::RC_SEND_FIRST, mtu), (O::RC_RDMA_READ_REQUEST, 0)],
        &[(O::RC_RDMA_WRITE_MIDDLE, mtu)],
        &[(O::RC_RDMA_WRITE_FIRST, mtu), (O::RC_SEND_LAST, 8)],
        &[(O::RC_SEND_FIRST, mtu / 2), (O::RC_SEND_LAST, 8)],
        &[
            (O::RC_SEND_FIRST, mtu),
            (O::RC_SEND_MIDDLE, mtu - 4),
            (O::RC_SEND_LAST, 8),
        ],
        &[
            (O::RC_SEND_FIRST, mtu),
            (O::RC_SEND_LAST_WITH_INVALIDATE, 8),
        ],
        &[(O::RC_SEND_FIRST, mtu), (O::UC_SEND_LAST, 8)],
        &[
            (O::RC_SEND_FIRST, mtu),
            (O::RC_SEND_MIDDLE, mtu),
            (O::RC_SEND_MIDDLE, mtu),
            (O::RC_SEND_MIDDLE, mtu),
            (O::RC_SEND_MIDDLE, mtu),
            (O::RC_SEND_LAST, mtu),
        ],
    ];
    let plan = *plans.choose(rng).expect("plans");
    plan.iter()
        .enumerate()
        .map(|(i, &(op, len))| {
            let data = payload(rng, len);
            let mut r = repr(op, psn.add(i as u32), i + 1 == plan.len());
            r.payload = if op.info().is_some_and(|x| x.payload) {
                &data
            } else {
                &[]
            };
            scramble_keys_only(rng, &mut r, mtu);
            ok(emit(&r))
        })
        .collect()
}

/// RETH and invalidate keys from the edge lists (sequence arm: the order is
/// what is under test, the rest stays plausible).
fn scramble_keys_only(rng: &mut StdRng, r: &mut PacketRepr<'_>, mtu: usize) {
    if let Some(x) = r.reth.as_mut() {
        x.rkey = edge_rkey(rng);
        x.va = edge_va(rng);
        x.dma_len = pick!(rng, &[mtu as u32 * 2, mtu as u32]);
    }
    if r.ieth.is_some() {
        r.ieth = Some(edge_rkey(rng));
    }
    if r.immdt.is_some() {
        r.immdt = Some(rng.gen());
    }
}

/// The `region` arm: requests aimed at the peer's region.
fn region(rng: &mut StdRng, c: &Ctx, reg: Region) -> Vec<Gen> {
    use Opcode as O;
    let psn = c.sq_psn;
    let mtu = c.mtu;
    let len = u64::from(reg.len);
    // The key: mostly the right one, else a neighbour (another index or
    // variant of the same allocator), a stale one, an edge.
    let key: Option<u32> = match rng.gen_range(0..20) {
        0..=9 => Some(0),
        10..=14 => Some(pick!(rng, &[1, 0x80, 0xff, 0x100, 0x200, 0x1_0000])),
        _ => None,
    };
    let stale = c.stale_rkey.filter(|_| key.is_none() && rng.gen_bool(0.5));
    let rkey = match key {
        Some(x) => reg.rkey ^ x,
        None => stale.unwrap_or_else(|| edge_rkey(rng)),
    };
    // Where: inside (aligned, or flush with the end), across an edge,
    // just outside, or an absolute edge address.
    let place = |rng: &mut StdRng, n: u64| -> Option<i64> {
        let n = n.min(len);
        let room = len - n;
        match rng.gen_range(0..12) {
            0..=3 => Some((rng.gen_range(0..=room) & !7) as i64),
            4 => Some(0),
            5 => Some(room as i64),
            6 => Some(room as i64 + pick!(rng, &[1, 4, 8])),
            7 => Some(-(pick!(rng, &[1, 8, 64, 4096]) as i64)),
            8 => Some(len as i64),
            9 => Some((rng.gen_range(0..=room) | 1) as i64),
            10 => Some(rng.gen_range(0..=room) as i64),
            _ => None,
        }
    };
    let at = |off: Option<i64>, rng: &mut StdRng| match off {
        Some(o) => reg.va.wrapping_add(o as u64),
        None => edge_va(rng),
    };
    let tag = |g: &mut Gen, off: Option<i64>, has_va: bool| {
        g.region = Some(RegionRef {
            va: if has_va { off } else { None },
            key,
        });
    };
    let data_len = |rng: &mut StdRng| -> usize {
        pick!(
            rng,
            &[1, 8, 64, mtu, rng.gen_range(1..=mtu)].map(|n| n.min(reg.len as usize).max(1))
        )
    };
    match rng.gen_range(0..16) {
        // WRITE ONLY, well formed, or with a length that disagrees.
        0..=4 => {
            let n = data_len(rng);
            let off = place(rng, n as u64);
            let data = payload(rng, n);
            let dma_len = match rng.gen_range(0..6) {
                0 => pick!(rng, &[0, n as u32 + 1, n as u32 - 1, u32::MAX, reg.len + 1]),
                _ => n as u32,
            };
            let op = pick!(
                rng,
                &[
                    O::RC_RDMA_WRITE_ONLY,
                    O::RC_RDMA_WRITE_ONLY,
                    O::RC_RDMA_WRITE_ONLY,
                    O::RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE,
                ]
            );
            let mut r = repr(op, psn, true);
            r.reth = Some(RethRepr {
                va: at(off, rng),
                rkey,
                dma_len,
            });
            r.payload = &data;
            if r.immdt.is_some() {
                r.immdt = Some(rng.gen());
            }
            let mut g = ok(emit(&r));
            tag(&mut g, off, true);
            vec![g]
        }
        // A WRITE of two or three packets.
        5 | 6 => {
            let k = rng.gen_range(2..=3usize);
            let total = (k - 1) * mtu + rng.gen_range(1..=mtu);
            let off = place(rng, total as u64);
            let data = payload(rng, total);
            let va = at(off, rng);
            let chunks: Vec<&[u8]> = data.chunks(mtu).collect();
            let n = chunks.len();
            chunks
                .into_iter()
                .enumerate()
                .map(|(i, chunk)| {
                    let op = match i {
                        0 => O::RC_RDMA_WRITE_FIRST,
                        i if i + 1 == n => O::RC_RDMA_WRITE_LAST,
                        _ => O::RC_RDMA_WRITE_MIDDLE,
                    };
                    let mut r = repr(op, psn.add(i as u32), i + 1 == n);
                    r.payload = chunk;
                    if i == 0 {
                        r.reth = Some(RethRepr {
                            va,
                            rkey,
                            dma_len: total as u32,
                        });
                    }
                    let mut g = ok(emit(&r));
                    if i == 0 {
                        tag(&mut g, off, true);
                    }
                    g
                })
                .collect()
        }
        // A zero-length WRITE (no key check is due) anywhere.
        7 => {
            let off = place(rng, 0);
            let mut r = repr(O::RC_RDMA_WRITE_ONLY, psn, true);
            r.reth = Some(RethRepr {
                va: at(off, rng),
                rkey,
                dma_len: 0,
            });
            let mut g = ok(emit(&r));
            tag(&mut g, off, true);
            vec![g]
        }
        // Atomics, aligned or not.
        8..=10 => {
            let op = pick!(rng, &[O::RC_COMPARE_SWAP, O::RC_FETCH_ADD, O::RC_FETCH_ADD]);
            let off = place(rng, 8);
            let mut r = repr(op, psn, true);
            r.atomic_eth = Some(AtomicEthRepr {
                va: at(off, rng),
                rkey,
                swap_add: pick!(rng, &[1, u64::MAX, rng.gen::<u64>() | 1]),
                compare: rng.gen(),
            });
            let mut g = ok(emit(&r));
            tag(&mut g, off, true);
            vec![g]
        }
        // ATOMIC WRITE (8 bytes) and FLUSH.
        11 | 12 => {
            let off = place(rng, 8);
            let data = payload(rng, 8);
            let op = pick!(rng, &[O::RC_ATOMIC_WRITE, O::RC_FLUSH]);
            let mut r = repr(op, psn, true);
            r.reth = Some(RethRepr {
                va: at(off, rng),
                rkey,
                dma_len: if op == O::RC_ATOMIC_WRITE {
                    8
                } else {
                    pick!(rng, &[0, 8, reg.len])
                },
            });
            if op == O::RC_ATOMIC_WRITE {
                r.payload = &data;
            }
            if let Some(f) = r.feth.as_mut() {
                f.selectivity = rng.gen_range(0..4);
                f.placement = rng.gen_range(0..4);
            }
            let mut g = ok(emit(&r));
            tag(&mut g, off, true);
            vec![g]
        }
        // READs across and past the end, or longer than the region.
        13 | 14 => {
            let off = place(rng, 1);
            let dma_len = pick!(
                rng,
                &[
                    reg.len,
                    reg.len + 1,
                    2 * reg.len,
                    u32::MAX,
                    rng.gen_range(1..=reg.len)
                ]
            );
            let mut r = repr(O::RC_RDMA_READ_REQUEST, psn, true);
            r.reth = Some(RethRepr {
                va: at(off, rng),
                rkey,
                dma_len,
            });
            let mut g = ok(emit(&r));
            tag(&mut g, off, true);
            vec![g]
        }
        // A SEND with invalidate naming the region's key.
        _ => {
            let n = rng.gen_range(0..=64);
            let data = payload(rng, n);
            let op = pick!(
                rng,
                &[
                    O::RC_SEND_ONLY_WITH_INVALIDATE,
                    O::RC_SEND_LAST_WITH_INVALIDATE
                ]
            );
            let mut r = repr(op, psn, true);
            r.ieth = Some(rkey);
            r.payload = &data;
            let mut g = ok(emit(&r));
            tag(&mut g, None, false);
            vec![g]
        }
    }
}

/// The `rkey` arm: a request the peer would execute but for its key (a
/// READ of all or part of the region, a WRITE or an atomic inside it, each
/// well formed), with a key it did not grant: a neighbour of the granted
/// key (its variant, the low 8 bits, or its index changed), a stale key
/// (an earlier connection's region) or an edge key.
fn wrong_key(rng: &mut StdRng, c: &Ctx, reg: Region) -> Vec<Gen> {
    use Opcode as O;
    let psn = c.sq_psn;
    let len = reg.len;
    let mut key: Option<u32> = Some(pick!(rng, &[1, 2, 0x80, 0xff, 0x100, 0x200, 0x1_0000]));
    let mut rkey = reg.rkey ^ key.unwrap_or(0);
    match rng.gen_range(0..10) {
        0 | 1 => {
            if let Some(st) = c.stale_rkey.filter(|&k| k != reg.rkey) {
                (key, rkey) = (None, st);
            }
        }
        2 | 3 => {
            let e = edge_rkey(rng);
            if e != reg.rkey {
                (key, rkey) = (None, e);
            }
        }
        _ => {}
    }
    let (off, n) = match rng.gen_range(0..4) {
        0 => (0, len),
        1 => (0, len.min(pick!(rng, &[1, 8, c.mtu as u32]))),
        _ => {
            let n = rng.gen_range(1..=len.min(2 * c.mtu as u32));
            (rng.gen_range(0..=len - n) & !7, n)
        }
    };
    let va = reg.va.wrapping_add(u64::from(off));
    let mut g = match rng.gen_range(0..5) {
        0..=2 => {
            let mut r = repr(O::RC_RDMA_READ_REQUEST, psn, true);
            r.reth = Some(RethRepr {
                va,
                rkey,
                dma_len: n,
            });
            ok(emit(&r))
        }
        3 => {
            let n = n.min(c.mtu as u32) as usize;
            let data = payload(rng, n);
            let mut r = repr(O::RC_RDMA_WRITE_ONLY, psn, true);
            r.reth = Some(RethRepr {
                va,
                rkey,
                dma_len: n as u32,
            });
            r.payload = &data;
            ok(emit(&r))
        }
        _ => {
            let op = pick!(rng, &[O::RC_COMPARE_SWAP, O::RC_FETCH_ADD]);
            let mut r = repr(op, psn, true);
            r.atomic_eth = Some(AtomicEthRepr {
                va: reg
                    .va
                    .wrapping_add(u64::from(off.min(len.saturating_sub(8)) & !7)),
                rkey,
                swap_add: 1,
                compare: rng.gen(),
            });
            ok(emit(&r))
        }
    };
    let va_off = match region_fields(&g.bytes) {
        Some((Some(at), _)) => {
            let v = u64::from_be_bytes(g.bytes[at..at + 8].try_into().unwrap_or_default());
            Some(v.wrapping_sub(reg.va) as i64)
        }
        _ => None,
    };
    g.region = Some(RegionRef { va: va_off, key });
    vec![g]
}

/// Writes what depends on the connection into a generated (or recorded)
/// packet: the peer's QPN, a PSN counted from the peer's, where it points
/// in the peer's region, and the ICRC.
#[allow(clippy::too_many_arguments)]
pub(crate) fn finalize(
    bytes: &[u8],
    qpn: QpnChoice,
    psn: PsnBase,
    icrc: IcrcChoice,
    region: Option<(RegionRef, Region)>,
    peer_qpn: u32,
    peer_epsn: Psn,
    compute: impl Fn(&[u8]) -> Option<u32>,
) -> Vec<u8> {
    let mut b = bytes.to_vec();
    if let (Some((r, reg)), Some((va_at, key_at))) = (region, region_fields(&b)) {
        if let (Some(o), Some(at)) = (r.va, va_at) {
            b[at..at + 8].copy_from_slice(&reg.va.wrapping_add(o as u64).to_be_bytes());
        }
        if let Some(x) = r.key {
            b[key_at..key_at + 4].copy_from_slice(&(reg.rkey ^ x).to_be_bytes());
        }
    }
    if b.len() >= 8 {
        let q = match qpn {
            QpnChoice::Peer => Some(peer_qpn),
            QpnChoice::PeerXor(x) => Some(peer_qpn ^ x),
            QpnChoice::Abs(v) => Some(v),
            QpnChoice::Keep => None,
        };
        if let Some(q) = q {
            b[5..8].copy_from_slice(&(q & 0xff_ffff).to_be_bytes()[1..]);
        }
    }
    if b.len() >= 12 {
        if let PsnBase::Peer(d) = psn {
            let p = peer_epsn.add(d as u32);
            b[9..12].copy_from_slice(&p.value().to_be_bytes()[1..]);
        }
    }
    if b.len() >= 16 {
        let x = match icrc {
            IcrcChoice::Right => Some(0),
            IcrcChoice::Flip(x) => Some(x),
            IcrcChoice::Keep => None,
        };
        if let (Some(x), Some(c)) = (x, compute(&b)) {
            let n = b.len();
            b[n - 4..].copy_from_slice(&(c ^ x).to_le_bytes());
        }
    }
    b
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rxe_core::wire::Packet;

    fn ctx() -> Ctx {
        Ctx {
            sq_psn: Psn::new(0xff_fffe),
            mtu: 1024,
            recv_size: 4096,
            max_datagram: 9000,
            region: None,
            stale_rkey: None,
        }
    }

    fn region_ctx() -> Ctx {
        Ctx {
            region: Some(Region {
                va: 0x7f00_1234_0000,
                rkey: 0x1a05,
                len: 4096,
            }),
            stale_rkey: Some(0x1905),
            ..ctx()
        }
    }

    #[test]
    fn well_formed_packets_parse_for_every_arm() {
        let mut rng = StdRng::seed_from_u64(7);
        for arm in REGION_ARMS {
            for _ in 0..300 {
                for g in generate(arm, &mut rng, &region_ctx()) {
                    let b = finalize(
                        &g.bytes,
                        g.qpn,
                        g.psn,
                        g.icrc,
                        None,
                        0x123456,
                        Psn::new(5),
                        |_| Some(0),
                    );
                    let p = std::panic::catch_unwind(|| Packet::new_checked(&b[..]).is_ok());
                    let parsed = p.expect("no panic");
                    if g.wellformed {
                        assert!(parsed, "{}: {:02x?}", arm.name(), &b[..b.len().min(40)]);
                    }
                }
            }
        }
    }

    #[test]
    fn same_seed_same_packets() {
        let run = |seed| {
            let mut rng = StdRng::seed_from_u64(seed);
            ARMS.iter()
                .flat_map(|&a| generate(a, &mut rng, &ctx()))
                .map(|g| g.bytes)
                .collect::<Vec<_>>()
        };
        assert_eq!(run(3), run(3));
        assert_ne!(run(3), run(4));
    }

    /// The region arm aims mostly at the region with its right key, and a
    /// replay on a new connection moves every such packet to the new region.
    #[test]
    fn region_packets_follow_the_region() {
        let mut rng = StdRng::seed_from_u64(5);
        let c = region_ctx();
        let reg = c.region.unwrap();
        let new = Region {
            va: 0x5500_0000_1000,
            rkey: 0x2207,
            len: 4096,
        };
        let (mut right_key, mut inside, mut total) = (0, 0, 0);
        for _ in 0..500 {
            for g in generate(Arm::Region, &mut rng, &c) {
                let Some(r) = g.region else { continue };
                let (va_at, key_at) = region_fields(&g.bytes).expect("a RETH, AtomicETH or IETH");
                let key = u32::from_be_bytes(g.bytes[key_at..key_at + 4].try_into().unwrap());
                total += 1;
                if r.key == Some(0) {
                    assert_eq!(key, reg.rkey);
                    right_key += 1;
                }
                if let (Some(o), Some(at)) = (r.va, va_at) {
                    let va = u64::from_be_bytes(g.bytes[at..at + 8].try_into().unwrap());
                    assert_eq!(va, reg.va.wrapping_add(o as u64));
                    if (0..4096).contains(&o) {
                        inside += 1;
                    }
                }
                let b = finalize(
                    &g.bytes,
                    g.qpn,
                    g.psn,
                    g.icrc,
                    Some((r, new)),
                    0x11,
                    Psn::new(0),
                    |_| Some(0),
                );
                let key2 = u32::from_be_bytes(b[key_at..key_at + 4].try_into().unwrap());
                match r.key {
                    Some(x) => assert_eq!(key2, new.rkey ^ x),
                    None => assert_eq!(key2, key),
                }
                if let (Some(o), Some(at)) = (r.va, va_at) {
                    let va = u64::from_be_bytes(b[at..at + 8].try_into().unwrap());
                    assert_eq!(va, new.va.wrapping_add(o as u64));
                }
            }
        }
        assert!(
            right_key * 3 > total,
            "{right_key} of {total} with the right key"
        );
        assert!(inside * 3 > total, "{inside} of {total} inside the region");
    }

    /// The rkey arm: well-formed requests inside the region, never with
    /// the granted key, mostly its neighbours; a replay keeps the relation.
    #[test]
    fn rkey_packets_carry_keys_not_granted() {
        let mut rng = StdRng::seed_from_u64(9);
        let c = region_ctx();
        let reg = c.region.unwrap();
        let (mut neighbours, mut reads, total) = (0, 0, 400);
        for _ in 0..total {
            let gs = generate(Arm::Rkey, &mut rng, &c);
            assert_eq!(gs.len(), 1);
            let g = &gs[0];
            let p = Packet::new_checked(&g.bytes[..]).expect("well formed");
            let r = g.region.expect("tagged");
            let (va_at, key_at) = region_fields(&g.bytes).unwrap();
            let key = u32::from_be_bytes(g.bytes[key_at..key_at + 4].try_into().unwrap());
            assert_ne!(key, reg.rkey);
            if let Some(x) = r.key {
                assert_eq!(key, reg.rkey ^ x);
                neighbours += 1;
            }
            let va = u64::from_be_bytes(g.bytes[va_at.unwrap()..][..8].try_into().unwrap());
            let len = p.reth().map_or(8, |x| x.dma_len());
            assert!(len > 0);
            assert!(va >= reg.va && va + u64::from(len) <= reg.va + u64::from(reg.len));
            assert_eq!(r.va, Some((va - reg.va) as i64));
            if p.reth().is_some() && p.payload().is_empty() {
                reads += 1;
            }
        }
        assert!(neighbours * 2 > total, "{neighbours} of {total}");
        assert!(reads * 3 > total, "{reads} of {total} READs");
    }

    #[test]
    fn finalize_rewrites_qpn_psn_and_icrc() {
        let mut rng = StdRng::seed_from_u64(1);
        let b = send_only(&mut rng, Psn::new(9), 5);
        let f = finalize(
            &b,
            QpnChoice::PeerXor(1),
            PsnBase::Peer(-1),
            IcrcChoice::Flip(1),
            None,
            0x10,
            Psn::new(0),
            |_| Some(0x100),
        );
        assert_eq!(&f[5..8], &[0, 0, 0x11]);
        assert_eq!(&f[9..12], &[0xff, 0xff, 0xff]);
        assert_eq!(
            u32::from_le_bytes(f[f.len() - 4..].try_into().unwrap()),
            0x101
        );
    }
}
