//! ICRC verdicts on received datagrams, as pure functions of their bytes
//! (the transports in `rxe-net` call them): [`IcrcStatus`], a plain UDP
//! socket's datagram checked for the IPv4 identification its sender may
//! have used ([`plain_verdict`]), and the ICRC change an identification
//! makes ([`IdDeltas`]: a GSO sender's segment k carries ID k).

use super::{compute_parts, compute_udp, Ipv4IdSolver, ICRC_LEN};
use crate::wire::{RoceFrame, BTH_LEN};
use std::net::IpAddr;

/// What the transport knows about the ICRC of a received packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IcrcStatus {
    /// Checked against the real IP header: right.
    Ok,
    /// Checked: wrong. The engine drops the packet and counts it.
    Bad,
    /// Not checked (a plain UDP socket over IPv4 does not see the IP ID).
    Unverified,
}

/// What the IPv4 identification does to a RoCE packet's ICRC: the CRC is
/// linear, so the ICRC of a packet sent with ID `k` is the one computed for
/// ID 0 XOR a value that depends only on `k` and the packet's length. Kept
/// per length for IDs below 256 (8 bits), enough for a GSO send's segment
/// numbers.
///
/// A std `HashMap` (randomly seeded SipHash), not the engine's unseeded
/// fast hash: in plain mode the lengths of *received* datagrams go in, and
/// a peer could pick lengths that collide under a hash it can compute.
/// The last length looked up is kept in front of the map: the packets of
/// one burst (a GSO send's segments, a stream of equal messages) share it,
/// and most of a lookup's cost was SipHash (docs/performance.md).
#[derive(Debug, Default)]
pub struct IdDeltas {
    bits: std::collections::HashMap<usize, [u32; 8]>,
    last: Option<(usize, [u32; 8])>,
}

impl IdDeltas {
    /// Lengths kept; the cache starts over when it is full.
    const CACHE: usize = 4096;

    /// The change to the ICRC of an IPv4 RoCE packet whose transport (BTH
    /// up to the ICRC) is `n` bytes long when its identification goes from
    /// 0 to `id`. Only the low 8 bits of `id` count: callers keep it below
    /// 256.
    #[inline]
    pub fn delta(&mut self, n: usize, id: u16) -> u32 {
        debug_assert!(id < 256);
        if id == 0 {
            return 0;
        }
        let b = match self.last {
            Some((len, b)) if len == n => b,
            _ => {
                if self.bits.len() >= Self::CACHE && !self.bits.contains_key(&n) {
                    self.bits.clear();
                }
                let b = *self.bits.entry(n).or_insert_with(|| Self::compute(n));
                self.last = Some((n, b));
                b
            }
        };
        (0..8)
            .filter(|i| id & (1 << i) != 0)
            .fold(0, |acc, i| acc ^ b[i])
    }

    /// The ICRC changes of the 8 low ID bits for a transport of `n` bytes:
    /// two ICRCs over any packet of that length that differ only in that
    /// bit differ by it (zeros here; the other fields do not matter).
    fn compute(n: usize) -> [u32; 8] {
        let zeros = vec![0u8; n.max(BTH_LEN)];
        let mut ip = [0u8; 20];
        ip[0] = 0x45;
        let udp = [0u8; 8];
        let base = compute_parts(&ip, &udp, &zeros).unwrap_or(0);
        let mut out = [0u32; 8];
        for (bit, o) in out.iter_mut().enumerate() {
            ip[5] = 1 << bit; // the ID's low byte
            *o = compute_parts(&ip, &udp, &zeros).unwrap_or(0) ^ base;
        }
        out
    }
}

/// The verdict on a datagram from a plain UDP socket (see `rxe_net::udp`), packet `seg` of a `UDP_GRO` datagram (0 for one on its own): the
/// IPv4 identification a GSO sender's segment `seg` carries is `seg`.
pub fn plain_verdict(
    solver: &mut Ipv4IdSolver,
    deltas: &mut IdDeltas,
    seg: usize,
    src: IpAddr,
    dst: IpAddr,
    src_port: u16,
    payload: &[u8],
) -> IcrcStatus {
    let src = src.to_canonical();
    if payload.len() < BTH_LEN + ICRC_LEN {
        return IcrcStatus::Bad;
    }
    let (body, tail) = payload.split_at(payload.len() - ICRC_LEN);
    let carried = u32::from_le_bytes([tail[0], tail[1], tail[2], tail[3]]);
    let ok = compute_udp(src, dst, src_port, body).is_ok_and(|c| {
        c == carried
            || (seg > 0
                && seg < 256
                && src.is_ipv4()
                && c ^ deltas.delta(body.len(), seg as u16) == carried)
    });
    match (ok, src, dst) {
        (true, _, _) => IcrcStatus::Ok,
        // Maybe a nonzero IP ID (the kernel's rxe and NICs number their
        // packets): right for some ID, or damaged.
        (false, IpAddr::V4(s), IpAddr::V4(d)) => {
            match solver.solve(s, d, src_port, body, carried) {
                Some(_) => IcrcStatus::Unverified,
                None => IcrcStatus::Bad,
            }
        }
        (false, _, _) => IcrcStatus::Bad,
    }
}

/// Whether a raw-mode datagram's ICRC is right for it as one packet.
#[inline]
pub fn raw_icrc_ok(ip: &[u8]) -> bool {
    RoceFrame::parse_ip(ip, None)
        .is_ok_and(|f| f.transport.len() >= BTH_LEN + ICRC_LEN && f.icrc_ok())
}
