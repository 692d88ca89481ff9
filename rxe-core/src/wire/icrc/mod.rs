//! The invariant CRC (IBTA Annex A17, RoCE v2, section A17.4.4).
//!
//! The ICRC protects the parts of a packet that no router may change. It is
//! CRC-32 (IEEE 802.3 polynomial, reflected, as in Ethernet and zlib) over:
//!
//! 1. 8 bytes of `0xFF`, standing in for the InfiniBand LRH;
//! 2. the IP header with the fields routers may change set to all ones:
//!    IPv4 type of service, time to live and header checksum; IPv6 traffic
//!    class, flow label and hop limit (the version nibble is kept);
//! 3. the UDP header with its checksum set to all ones;
//! 4. the BTH with byte 4 (FECN, BECN and reserved bits) set to all ones;
//! 5. everything after the BTH up to the ICRC itself.
//!
//! The result goes on the wire least significant byte first. Note that the
//! IPv4 identification field *is* covered: a receiver must see the real IP
//! header to check the ICRC.

use super::bth::BTH_LEN;
use super::{Error, Header, Result};
use crc32fast::Hasher;
use std::net::IpAddr;
use std::sync::OnceLock;

mod split;
mod verdict;

pub use split::{segment_headers, split_super, Split};
pub use verdict::{plain_verdict, raw_icrc_ok, IcrcStatus, IdDeltas};

/// Length of the ICRC trailer.
pub const ICRC_LEN: usize = 4;

const UDP_LEN: usize = 8;

/// A fresh CRC-32 state. `Hasher::new` checks the CPU's features to pick
/// crc32fast's implementation, and an ICRC is computed twice per packet
/// (once sent, once received): the choice is made once and copied.
fn hasher() -> Hasher {
    static PROTO: OnceLock<Hasher> = OnceLock::new();
    PROTO.get_or_init(Hasher::new).clone()
}

/// Computes the ICRC from its three parts: the IP header (IPv4 with any
/// options, or the 40-byte IPv6 header), the UDP header, and the transport
/// packet from the BTH up to but not including the ICRC.
///
/// This form lets a sender that never builds the IP header in memory (a
/// kernel UDP socket does that) compute the ICRC over the header the kernel
/// will write.
pub fn compute_parts(ip_header: &[u8], udp_header: &[u8], transport: &[u8]) -> Result<u32> {
    // The masked copies of the headers go into one buffer and through the
    // CRC in one piece: crc32fast is much faster on one 48-byte slice than
    // on four short ones.
    let mut head = [0u8; 8 + 60 + UDP_LEN + BTH_LEN];
    head[..8].fill(0xff);
    let mut n = 8;
    match ip_header.first().map(|b| b >> 4) {
        Some(4) => {
            if !(20..=60).contains(&ip_header.len()) {
                return Err(Error::BadHeaderLength {
                    header: Header::Ipv4,
                    len: ip_header.len(),
                });
            }
            let ip = &mut head[n..n + ip_header.len()];
            ip.copy_from_slice(ip_header);
            ip[1] = 0xff; // type of service
            ip[8] = 0xff; // time to live
            ip[10] = 0xff; // header checksum
            ip[11] = 0xff;
            n += ip_header.len();
        }
        Some(6) => {
            if ip_header.len() != 40 {
                return Err(Error::BadHeaderLength {
                    header: Header::Ipv6,
                    len: ip_header.len(),
                });
            }
            let ip = &mut head[n..n + 40];
            ip.copy_from_slice(ip_header);
            ip[0] |= 0x0f; // traffic class (high nibble) ...
            ip[1] = 0xff; // ... traffic class (low nibble) and flow label
            ip[2] = 0xff;
            ip[3] = 0xff;
            ip[7] = 0xff; // hop limit
            n += 40;
        }
        Some(v) => return Err(Error::BadIpVersion(v)),
        None => {
            return Err(Error::Truncated {
                header: Header::Ipv4,
                need: 20,
                have: 0,
            })
        }
    }
    if udp_header.len() != UDP_LEN {
        return Err(Error::BadHeaderLength {
            header: Header::Udp,
            len: udp_header.len(),
        });
    }
    let udp = &mut head[n..n + UDP_LEN];
    udp.copy_from_slice(udp_header);
    udp[6] = 0xff;
    udp[7] = 0xff;
    n += UDP_LEN;
    if transport.len() < BTH_LEN {
        return Err(Error::Truncated {
            header: Header::Bth,
            need: BTH_LEN,
            have: transport.len(),
        });
    }
    let bth = &mut head[n..n + BTH_LEN];
    bth.copy_from_slice(&transport[..BTH_LEN]);
    bth[4] = 0xff;
    n += BTH_LEN;
    let mut h = hasher();
    h.update(&head[..n]);
    h.update(&transport[BTH_LEN..]);
    Ok(h.finalize())
}

/// Computes the ICRC of a transport packet (BTH up to, not including, the
/// ICRC) as it will be carried from `src:src_port` to `dst:4791` over UDP,
/// assuming the IP header a Linux UDP socket writes for an unconnected
/// socket with `IP_PMTUDISC_DO`: IPv4 with no options, identification 0 and
/// don't-fragment set; or a plain IPv6 header. Every field the ICRC masks is
/// left out, so TOS, TTL and the checksums may be anything.
pub fn compute_udp(src: IpAddr, dst: IpAddr, src_port: u16, transport: &[u8]) -> Result<u32> {
    // What compute_parts hashes, written in place with the masked fields
    // already all ones (every packet sent goes through here: building the
    // headers apart and copying them over cost about as much as the CRC
    // of a short packet).
    let udp_len = (UDP_LEN + transport.len() + ICRC_LEN) as u16;
    let mut head = [0u8; 8 + 40 + UDP_LEN + BTH_LEN];
    head[..8].fill(0xff);
    let n = match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            let ip = &mut head[8..28];
            ip[0] = 0x45;
            ip[1] = 0xff; // type of service (masked)
            ip[2..4].copy_from_slice(&(20 + udp_len).to_be_bytes());
            ip[6] = 0x40; // don't fragment, identification 0
            ip[8] = 0xff; // time to live (masked)
            ip[9] = 17; // UDP
            ip[10..12].fill(0xff); // header checksum (masked)
            ip[12..16].copy_from_slice(&s.octets());
            ip[16..20].copy_from_slice(&d.octets());
            28
        }
        (IpAddr::V6(s), IpAddr::V6(d)) => {
            let ip = &mut head[8..48];
            // Version 6; traffic class and flow label masked.
            ip[..4].copy_from_slice(&[0x6f, 0xff, 0xff, 0xff]);
            ip[4..6].copy_from_slice(&udp_len.to_be_bytes());
            ip[6] = 17;
            ip[7] = 0xff; // hop limit (masked)
            ip[8..24].copy_from_slice(&s.octets());
            ip[24..40].copy_from_slice(&d.octets());
            48
        }
        _ => return Err(Error::BadIpVersion(if src.is_ipv4() { 6 } else { 4 })),
    };
    let udp = &mut head[n..n + UDP_LEN];
    udp[0..2].copy_from_slice(&src_port.to_be_bytes());
    udp[2..4].copy_from_slice(&super::ROCE_V2_PORT.to_be_bytes());
    udp[4..6].copy_from_slice(&udp_len.to_be_bytes());
    udp[6..8].fill(0xff); // checksum (masked)
    let Some(bth) = transport.get(..BTH_LEN) else {
        return Err(Error::Truncated {
            header: Header::Bth,
            need: BTH_LEN,
            have: transport.len(),
        });
    };
    let at = n + UDP_LEN;
    head[at..at + BTH_LEN].copy_from_slice(bth);
    head[at + 4] = 0xff; // FECN, BECN, reserved (masked)
    let mut h = hasher();
    h.update(&head[..at + BTH_LEN]);
    h.update(&transport[BTH_LEN..]);
    Ok(h.finalize())
}

/// Splits an IP packet (IPv4 or IPv6 header, UDP header, transport packet
/// with its ICRC at the end) into the parts [`compute_parts`] takes.
fn split(ip_packet: &[u8]) -> Result<(&[u8], &[u8], &[u8])> {
    let ihl = match ip_packet.first().map(|b| b >> 4) {
        Some(4) => usize::from(ip_packet[0] & 0x0f) * 4,
        Some(6) => 40,
        Some(v) => return Err(Error::BadIpVersion(v)),
        None => {
            return Err(Error::Truncated {
                header: Header::Ipv4,
                need: 20,
                have: 0,
            })
        }
    };
    if ihl < 20 {
        return Err(Error::BadIpv4HeaderLength(ip_packet[0] & 0x0f));
    }
    let need = ihl + UDP_LEN + BTH_LEN + ICRC_LEN;
    if ip_packet.len() < need {
        return Err(Error::Truncated {
            header: Header::Icrc,
            need,
            have: ip_packet.len(),
        });
    }
    let end = ip_packet.len() - ICRC_LEN;
    Ok((
        &ip_packet[..ihl],
        &ip_packet[ihl..ihl + UDP_LEN],
        &ip_packet[ihl + UDP_LEN..end],
    ))
}

/// Computes the ICRC of an IP packet whose last four bytes are its ICRC
/// (their value is ignored).
pub fn compute(ip_packet: &[u8]) -> Result<u32> {
    let (ip, udp, rest) = split(ip_packet)?;
    compute_parts(ip, udp, rest)
}

/// The ICRC an IP packet carries in its last four bytes.
pub fn carried(ip_packet: &[u8]) -> Option<u32> {
    let tail = ip_packet.len().checked_sub(ICRC_LEN)?;
    let mut x = [0u8; 4];
    x.copy_from_slice(&ip_packet[tail..]);
    Some(u32::from_le_bytes(x))
}

/// True if the ICRC an IP packet carries is right.
pub fn verify(ip_packet: &[u8]) -> Result<bool> {
    Ok(Some(compute(ip_packet)?) == carried(ip_packet))
}

/// Computes and writes the ICRC into the last four bytes of an IP packet.
pub fn fill(ip_packet: &mut [u8]) -> Result<u32> {
    let crc = compute(ip_packet)?;
    let tail = ip_packet.len() - ICRC_LEN;
    ip_packet[tail..].copy_from_slice(&crc.to_le_bytes());
    Ok(crc)
}

/// Finds the IPv4 identification (and don't-fragment bit) under which a
/// packet's ICRC is right, for a receiver that never sees the IP header.
///
/// A plain UDP socket hands over the datagram, not its IP header, so it can
/// only check the ICRC against a header it assumes ([`compute_udp`]: ID 0,
/// DF set, as every rxe-rs sender and any unconnected `IP_PMTUDISC_DO`
/// socket writes). The kernel's `rdma_rxe` and RoCE NICs number their
/// packets, so their ICRCs fail that check; such a packet used to be
/// accepted unchecked, and so was a corrupted one.
///
/// The CRC is linear over GF(2): changing header bits changes the CRC by
/// the XOR of what each bit alone changes it by, and that depends only on
/// the bit's distance from the end. So the 16 identification bits and the
/// DF bit span a space of at most 2^17 CRC differences out of 2^32. If the
/// difference between the carried ICRC and the one computed for ID 0 lies
/// in it, exactly one (ID, DF) explains the packet; otherwise no IPv4
/// header of this shape does and the packet is damaged. A random
/// corruption passes with probability 2^-15.
///
/// The 17 differences are computed once per transport length and kept
/// (at most [`Ipv4IdSolver::CACHE`] lengths).
#[derive(Debug, Default)]
pub struct Ipv4IdSolver {
    bases: std::collections::HashMap<usize, Basis>,
}

/// A basis of the CRC differences, indexed by pivot bit: each row is a
/// difference and the set of header bits (0..16 the ID, 16 DF) that make it.
#[derive(Debug, Clone, Copy)]
struct Basis([Option<(u32, u32)>; 32]);

impl Basis {
    fn insert(&mut self, mut v: u32, mut combo: u32) {
        for bit in (0..32).rev() {
            if v & (1 << bit) == 0 {
                continue;
            }
            match self.0[bit] {
                Some((bv, bc)) => {
                    v ^= bv;
                    combo ^= bc;
                }
                None => {
                    self.0[bit] = Some((v, combo));
                    return;
                }
            }
        }
    }

    fn solve(&self, mut t: u32) -> Option<u32> {
        let mut combo = 0;
        for bit in (0..32).rev() {
            if t & (1 << bit) == 0 {
                continue;
            }
            let (bv, bc) = self.0[bit]?;
            t ^= bv;
            combo ^= bc;
        }
        Some(combo)
    }
}

impl Ipv4IdSolver {
    /// Transport lengths whose differences are kept; the cache starts over
    /// when it is full.
    pub const CACHE: usize = 4096;

    /// An empty solver.
    pub fn new() -> Self {
        Self::default()
    }

    /// The identification and don't-fragment bit under which `carried` is
    /// the ICRC of `transport` (BTH up to the ICRC) sent from
    /// `src:src_port` to `dst:4791` with a 20-byte IPv4 header; `None` if
    /// no such header makes it right (the packet is damaged, or its header
    /// has options). `Some((0, true))` is the header [`compute_udp`]
    /// assumes.
    pub fn solve(
        &mut self,
        src: std::net::Ipv4Addr,
        dst: std::net::Ipv4Addr,
        src_port: u16,
        transport: &[u8],
        carried: u32,
    ) -> Option<(u16, bool)> {
        let c0 = compute_udp(src.into(), dst.into(), src_port, transport).ok()?;
        let n = transport.len();
        if !self.bases.contains_key(&n) {
            if self.bases.len() >= Self::CACHE {
                self.bases.clear();
            }
            self.bases.insert(n, Self::basis(n));
        }
        let combo = self.bases[&n].solve(carried ^ c0)?;
        Some(((combo & 0xffff) as u16, combo & (1 << 16) == 0))
    }

    /// The CRC differences of the ID and DF bits for a transport of `n`
    /// bytes. The ICRC covers 8 bytes of 0xFF, the 20-byte IPv4 header
    /// (ID at bytes 4 and 5, flags at 6), 8 bytes of UDP and the transport.
    fn basis(n: usize) -> Basis {
        let total = 8 + 20 + UDP_LEN + n;
        // A flip of `mask` in byte `pos` changes the CRC by
        // crc(mask, zeros) ^ crc(0, zeros), zeros running to the end.
        let delta = |pos: usize, mask: u8| {
            let crc_of = |first: u8| {
                let mut h = Hasher::new();
                h.update(&[first]);
                let mut left = total - pos - 1;
                const Z: [u8; 512] = [0; 512];
                while left > 0 {
                    let k = left.min(Z.len());
                    h.update(&Z[..k]);
                    left -= k;
                }
                h.finalize()
            };
            crc_of(mask) ^ crc_of(0)
        };
        let mut b = Basis([None; 32]);
        for bit in 0..16 {
            // The ID is big-endian: bits 8..16 in byte 12, 0..8 in byte 13.
            let (pos, mask) = if bit >= 8 {
                (8 + 4, 1u8 << (bit - 8))
            } else {
                (8 + 5, 1u8 << bit)
            };
            b.insert(delta(pos, mask), 1 << bit);
        }
        b.insert(delta(8 + 6, 0x40), 1 << 16);
        b
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `compute_udp` as it was before it wrote the masked headers in place:
    /// the headers a Linux UDP socket writes, through `compute_parts`.
    fn compute_udp_via_parts(src: IpAddr, dst: IpAddr, port: u16, t: &[u8]) -> Result<u32> {
        let udp_len = (UDP_LEN + t.len() + ICRC_LEN) as u16;
        let mut udp = [0u8; UDP_LEN];
        udp[0..2].copy_from_slice(&port.to_be_bytes());
        udp[2..4].copy_from_slice(&super::super::ROCE_V2_PORT.to_be_bytes());
        udp[4..6].copy_from_slice(&udp_len.to_be_bytes());
        match (src, dst) {
            (IpAddr::V4(s), IpAddr::V4(d)) => {
                let mut ip = [0u8; 20];
                ip[0] = 0x45;
                ip[2..4].copy_from_slice(&(20 + udp_len).to_be_bytes());
                ip[6] = 0x40;
                ip[9] = 17;
                ip[12..16].copy_from_slice(&s.octets());
                ip[16..20].copy_from_slice(&d.octets());
                compute_parts(&ip, &udp, t)
            }
            (IpAddr::V6(s), IpAddr::V6(d)) => {
                let mut ip = [0u8; 40];
                ip[0] = 0x60;
                ip[4..6].copy_from_slice(&udp_len.to_be_bytes());
                ip[6] = 17;
                ip[8..24].copy_from_slice(&s.octets());
                ip[24..40].copy_from_slice(&d.octets());
                compute_parts(&ip, &udp, t)
            }
            _ => Err(Error::BadIpVersion(if src.is_ipv4() { 6 } else { 4 })),
        }
    }

    #[test]
    fn compute_udp_agrees_with_the_headers_through_compute_parts() {
        let v4 = |a, b, c, d| IpAddr::V4(std::net::Ipv4Addr::new(a, b, c, d));
        let v6 = |x: u16| IpAddr::V6(std::net::Ipv6Addr::new(0xfe80, 0, 0, 0, x, 1, 2, 3));
        let pairs = [
            (v4(10, 99, 0, 12), v4(10, 99, 0, 11)),
            (v4(192, 168, 255, 1), v4(1, 2, 3, 4)),
            (v6(7), v6(0xffff)),
            (v4(1, 1, 1, 1), v6(1)),
            (v6(1), v4(1, 1, 1, 1)),
        ];
        let bytes: Vec<u8> = (0..300u32).map(|i| (i * 151 + 7) as u8).collect();
        for (src, dst) in pairs {
            for len in [0, 5, 11, 12, 13, 16, 64, 100, 299] {
                for port in [0xc000, 0xfedc, 4791] {
                    let t = &bytes[..len];
                    assert_eq!(
                        compute_udp(src, dst, port, t),
                        compute_udp_via_parts(src, dst, port, t),
                        "{src} -> {dst}, {len} bytes, port {port}"
                    );
                }
            }
        }
    }

    /// An RC ACKNOWLEDGE from 10.99.0.12 to 10.99.0.11, built by hand. Real
    /// captures and scapy's implementation are checked in the `tests` crate.
    #[test]
    fn masked_fields_do_not_matter_and_others_do() {
        let mut pkt = vec![
            0x45, 0x00, 0x00, 0x2c, 0x12, 0x34, 0x40, 0x00, 0x40, 0x11, 0x00, 0x00, // IPv4
            10, 99, 0, 12, 10, 99, 0, 11, //
            0xc5, 0x96, 0x12, 0xb7, 0x00, 0x18, 0x00, 0x00, // UDP 50582 -> 4791, len 24
            0x11, 0x00, 0xff, 0xff, 0x00, 0x00, 0x00, 0x11, 0x00, 0x00, 0x00, 0x05, // BTH
            0x1f, 0x00, 0x00, 0x01, // AETH
            0, 0, 0, 0, // ICRC
        ];
        let crc = fill(&mut pkt).unwrap();
        assert!(verify(&pkt).unwrap());
        for (i, mask) in [
            (1, 0xff),
            (8, 0xff),
            (10, 0xff),
            (11, 0xff),
            (26, 0xff),
            (27, 0xff),
            (32, 0xff),
        ] {
            let mut p = pkt.clone();
            p[i] ^= mask;
            assert_eq!(compute(&p).unwrap(), crc, "byte {i} is masked");
        }
        for i in 0..pkt.len() - 4 {
            if [1, 8, 10, 11, 26, 27, 32].contains(&i) {
                continue;
            }
            let mut p = pkt.clone();
            p[i] ^= 0x01;
            // Byte 0 holds the IP version and header length: a flip there
            // makes the packet unreadable, which is just as much a failure.
            assert!(!verify(&p).unwrap_or(false), "byte {i} is covered");
        }
    }

    #[test]
    fn compute_udp_matches_a_built_frame() {
        use crate::wire::{FrameRepr, IpRepr, PacketRepr, UdpChecksum};
        let mut p = PacketRepr::new(crate::wire::BthRepr {
            opcode: crate::wire::Opcode::RC_SEND_ONLY,
            solicited: false,
            mig_req: false,
            pad_count: 0,
            pkey: 0xffff,
            fecn: false,
            becn: false,
            dest_qp: 0x42,
            ack_req: true,
            psn: crate::psn::Psn::new(1),
        });
        p.payload = b"abcdef";
        let ips: [(IpAddr, IpAddr); 2] = [
            ("127.0.0.2".parse().unwrap(), "127.0.0.3".parse().unwrap()),
            ("fd00::2".parse().unwrap(), "fd00::3".parse().unwrap()),
        ];
        for (src, dst) in ips {
            let ip = match (src, dst) {
                (IpAddr::V4(s), IpAddr::V4(d)) => IpRepr::V4 {
                    src: s,
                    dst: d,
                    tos: 3,
                    id: 0,
                    dont_fragment: true,
                    ttl: 9,
                },
                (IpAddr::V6(s), IpAddr::V6(d)) => IpRepr::V6 {
                    src: s,
                    dst: d,
                    traffic_class: 1,
                    flow_label: 5,
                    hop_limit: 2,
                },
                _ => unreachable!(),
            };
            let f = FrameRepr {
                eth: None,
                ip,
                udp_src_port: 0xc123,
                udp_checksum: UdpChecksum::Zero,
            };
            let mut buf = vec![0u8; f.buffer_len(p.buffer_len())];
            f.emit(&p, &mut buf).unwrap();
            let hlen = ip.header_len() + 8;
            let t = &buf[hlen..buf.len() - 4];
            assert_eq!(
                compute_udp(src, dst, 0xc123, t).unwrap(),
                carried(&buf).unwrap()
            );
        }
    }

    #[test]
    fn rejects_what_is_not_ip() {
        assert_eq!(compute(&[0x55; 60]).unwrap_err(), Error::BadIpVersion(5));
        assert!(compute(&[]).is_err());
        assert!(compute(&[0x45; 30]).is_err());
        assert!(compute(&[0x41; 60]).is_err(), "IHL below 5");
    }

    /// Every (ID, DF) is found again from the ICRC alone; a flipped bit
    /// anywhere in the transport makes the packet unexplainable.
    #[test]
    fn the_ipv4_id_is_solved_from_the_icrc_and_damage_is_not() {
        use std::net::Ipv4Addr;
        let (src, dst) = (Ipv4Addr::new(10, 99, 0, 11), Ipv4Addr::new(10, 99, 0, 1));
        let mut solver = Ipv4IdSolver::new();
        let mut transport: Vec<u8> = (0..300u32).map(|i| (i * 7 + 3) as u8).collect();
        transport[0] = 0x04; // RC SEND ONLY
        let mut caught = 0;
        for (k, id) in [0u16, 1, 0x8000, 0x1234, 0xffff, 0xbeef]
            .into_iter()
            .enumerate()
        {
            for df in [true, false] {
                let udp_len = (UDP_LEN + transport.len() + ICRC_LEN) as u16;
                let mut ip = [0u8; 20];
                ip[0] = 0x45;
                ip[2..4].copy_from_slice(&(20 + udp_len).to_be_bytes());
                ip[4..6].copy_from_slice(&id.to_be_bytes());
                ip[6] = if df { 0x40 } else { 0 };
                ip[8] = 64;
                ip[9] = 17;
                ip[12..16].copy_from_slice(&src.octets());
                ip[16..20].copy_from_slice(&dst.octets());
                let mut udp = [0u8; UDP_LEN];
                udp[0..2].copy_from_slice(&49152u16.to_be_bytes());
                udp[2..4].copy_from_slice(&4791u16.to_be_bytes());
                udp[4..6].copy_from_slice(&udp_len.to_be_bytes());
                let crc = compute_parts(&ip, &udp, &transport).unwrap();
                assert_eq!(
                    solver.solve(src, dst, 49152, &transport, crc),
                    Some((id, df))
                );
                // One flipped bit of the transport (a different one each time).
                let mut bad = transport.clone();
                let bit = (k * 2 + usize::from(df)) * 97 % (bad.len() * 8);
                bad[bit / 8] ^= 1 << (bit % 8);
                if solver.solve(src, dst, 49152, &bad, crc).is_none() {
                    caught += 1;
                }
                // Nor is a wrong source port explained by some ID.
                assert_eq!(solver.solve(src, dst, 49153, &transport, crc), None);
            }
        }
        // 2^-15 odds of a miss each: all twelve are caught.
        assert_eq!(caught, 12);
    }
}
