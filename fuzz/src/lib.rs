//! Helpers shared by the engine fuzz targets (`responder`, `requester`):
//! bringing QPs up without a peer, building packets with a correct ICRC as
//! the fake peer would send them, and checking what the engine sends.
//!
//! Nothing here touches a socket: the engine is sans-IO, the "peer" is an
//! address label (127.0.0.2), and every packet goes straight into
//! `Engine::handle_datagram`.

use rxe_core::engine::{Engine, IcrcStatus, RecvMeta, Transmit};
use rxe_core::engine::state::Connect;
use rxe_core::psn::Psn;
use rxe_core::types::*;
use rxe_core::wire::{icrc, Packet, PacketRepr, ICRC_LEN};
use std::net::{IpAddr, Ipv4Addr};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The engine's own address.
pub const LOCAL: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 1));
/// The address of the connected QPs' peer.
pub const PEER: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2));
/// A third party: not the peer of any connected QP.
pub const OTHER: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 3));
/// The UDP source port the fake peer sends from.
pub const PEER_PORT: u16 = 0xc0de;
/// The Q_Key of the UD QPs.
pub const QKEY: u32 = 0x1111_1111;

/// A fixed starting instant, so that every run sees the same clock.
pub fn t0() -> Instant {
    static T0: OnceLock<Instant> = OnceLock::new();
    *T0.get_or_init(Instant::now)
}

/// `t0() + micros`.
pub fn at(micros: u64) -> Instant {
    t0() + Duration::from_micros(micros)
}

/// Connection attributes of a QP brought up by [`bring_up`].
#[derive(Debug, Clone, Copy)]
pub struct Conn {
    /// The peer's QP number (RC/UC).
    pub dest_qpn: u32,
    /// The first PSN expected from the peer.
    pub rq_psn: Psn,
    /// The first PSN this QP sends.
    pub sq_psn: Psn,
    /// Path MTU (RC/UC).
    pub mtu: Mtu,
    /// The QP's remote access rights (RC/UC).
    pub access: Access,
    /// READ/atomic depth, both directions (RC).
    pub rd_atomic: u8,
    /// ACK timeout code (RC).
    pub timeout: u8,
    /// Retries (RC).
    pub retry_cnt: u8,
    /// RNR retries (RC).
    pub rnr_retry: u8,
    /// RNR timer code asked of senders (RC).
    pub min_rnr_timer: u8,
}

impl Default for Conn {
    fn default() -> Self {
        Conn {
            dest_qpn: 0x00ab_cd00,
            rq_psn: Psn::new(0),
            sq_psn: Psn::new(0),
            mtu: Mtu::Mtu256,
            access: Access::LOCAL_WRITE
                | Access::REMOTE_WRITE
                | Access::REMOTE_READ
                | Access::REMOTE_ATOMIC,
            rd_atomic: 4,
            timeout: 10,
            retry_cnt: 7,
            rnr_retry: 7,
            min_rnr_timer: 1,
        }
    }
}

/// RESET -> INIT -> RTR -> RTS, connected to `PEER` (RC/UC) or ready (UD).
pub fn bring_up(e: &mut Engine, qpn: u32, qp_type: QpType, c: &Conn) {
    let steps = Connect {
        qp_type,
        access: c.access,
        qkey: QKEY,
        remote: PEER,
        dest_qpn: c.dest_qpn,
        rq_psn: c.rq_psn,
        sq_psn: c.sq_psn,
        mtu: c.mtu,
        rd_atomic: c.rd_atomic,
        min_rnr_timer: c.min_rnr_timer,
        timeout: c.timeout,
        retry_cnt: c.retry_cnt,
        rnr_retry: c.rnr_retry,
        port: 1,
        sgid_index: 0,
    }
    .steps();
    for ((a, m), step) in steps.iter().zip(["INIT", "RTR", "RTS"]) {
        e.modify_qp(qpn, a, *m).expect(step);
    }
}

/// Moves a QP to ERR (flushing what it holds).
pub fn to_error(e: &mut Engine, qpn: u32) {
    let a = QpAttr {
        state: QpState::Err,
        ..QpAttr::default()
    };
    let _ = e.modify_qp(qpn, &a, QpAttrMask::STATE);
}

/// Serializes `repr` as sent from `src:PEER_PORT` to `LOCAL:4791`, ICRC
/// included. `None` if the repr does not fit its opcode.
pub fn emit(repr: &PacketRepr<'_>, src: IpAddr) -> Option<Vec<u8>> {
    let mut buf = vec![0u8; repr.buffer_len()];
    let n = repr.emit(&mut buf).ok()?;
    buf.truncate(n);
    fill_icrc(&mut buf, src);
    Some(buf)
}

/// Writes the right ICRC into the last four bytes (if there are four).
pub fn fill_icrc(buf: &mut [u8], src: IpAddr) {
    let n = buf.len();
    if n < ICRC_LEN {
        return;
    }
    if let Ok(c) = icrc::compute_udp(src, LOCAL, PEER_PORT, &buf[..n - ICRC_LEN]) {
        buf[n - ICRC_LEN..].copy_from_slice(&c.to_le_bytes());
    }
}

/// What the transport says about a datagram from `src`.
pub fn meta(src: IpAddr, icrc: IcrcStatus) -> RecvMeta {
    RecvMeta {
        src,
        dst: LOCAL,
        src_port: PEER_PORT,
        icrc,
    }
}

/// Checks the envelope of a packet the engine sends and parses it: it goes
/// from `LOCAL` to `PEER`, carries a correct ICRC, and parses.
pub fn check_transmit(t: &Transmit) -> Packet<&[u8]> {
    assert_eq!(t.src, LOCAL, "sent from a foreign address: {t:?}");
    assert_eq!(t.dst, PEER, "sent to someone other than the peer: {t:?}");
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
    p
}

/// A deterministic byte for position `i` of a payload seeded with `seed`.
pub fn pattern_byte(seed: u64, i: usize) -> u8 {
    let mut x = seed ^ (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    x ^= x >> 29;
    x = x.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x ^= x >> 32;
    x as u8
}

/// `len` deterministic bytes seeded with `seed`.
pub fn pattern(seed: u64, len: usize) -> Vec<u8> {
    (0..len).map(|i| pattern_byte(seed, i)).collect()
}

/// A 24-bit PSN from any number.
pub fn psn(v: u32) -> Psn {
    Psn::new(v)
}
