//! Finding the RoCE v2 packet inside a frame: Ethernet (with up to two
//! 802.1Q/802.1ad VLAN tags), Linux cooked captures, or raw IP; then IPv4
//! or IPv6, then UDP to port 4791. pnet's packet types read the Ethernet, IP
//! and UDP headers.
//!
//! [`RoceFrame::parse`] stops at the UDP payload; [`RoceFrame::packet`]
//! checks the transport packet inside, and [`RoceFrame::icrc_ok`] checks the
//! ICRC against the real IP and UDP headers. [`FrameRepr`] builds whole
//! frames (with a correct ICRC) from a [`PacketRepr`].

use super::icrc;
use super::packet::{Packet, PacketRepr};
use super::{Error, Header, Result};
use crate::wire::error::{LengthField, NotRoce};
use pnet_packet::ethernet::{EtherType, EtherTypes, EthernetPacket, MutableEthernetPacket};
use pnet_packet::ip::IpNextHeaderProtocols;
use pnet_packet::ipv4::{self, Ipv4Packet, MutableIpv4Packet};
use pnet_packet::ipv6::{Ipv6Packet, MutableIpv6Packet};
use pnet_packet::udp::{self, MutableUdpPacket, UdpPacket};
use pnet_packet::vlan::VlanPacket;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// The UDP destination port of RoCE v2 (IANA).
pub const ROCE_V2_PORT: u16 = 4791;

const ETH_LEN: usize = 14;
const VLAN_LEN: usize = 4;
const UDP_LEN: usize = 8;
const SLL_LEN: usize = 16;
const SLL2_LEN: usize = 20;
/// 802.1ad service tag (QinQ outer tag).
const ETHERTYPE_QINQ: u16 = 0x88a8;

/// What a capture's frames start with (pcap link-layer header types).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LinkType {
    /// Ethernet II (LINKTYPE_ETHERNET, 1).
    Ethernet,
    /// Linux cooked capture v1 (LINKTYPE_LINUX_SLL, 113).
    LinuxSll,
    /// Linux cooked capture v2 (LINKTYPE_LINUX_SLL2, 276).
    LinuxSll2,
    /// Raw IPv4 or IPv6, told apart by the version nibble (LINKTYPE_RAW, 101).
    RawIp,
}

/// An 802.1Q tag control information field.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct VlanTag {
    /// The tag protocol identifier (0x8100 or 0x88a8).
    pub tpid: u16,
    /// Priority code point (3 bits).
    pub pcp: u8,
    /// Drop eligible indicator.
    pub dei: bool,
    /// VLAN identifier (12 bits).
    pub vid: u16,
}

/// The Ethernet header fields of a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct EthRepr {
    /// Destination MAC address.
    pub dst: [u8; 6],
    /// Source MAC address.
    pub src: [u8; 6],
    /// VLAN tags, outermost first.
    pub vlans: [Option<VlanTag>; 2],
}

/// The IP header fields the ICRC and a receiver care about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IpRepr {
    /// IPv4.
    V4 {
        /// Source address.
        src: Ipv4Addr,
        /// Destination address.
        dst: Ipv4Addr,
        /// DSCP and ECN (the former TOS byte).
        tos: u8,
        /// Identification (covered by the ICRC).
        id: u16,
        /// Don't-fragment flag.
        dont_fragment: bool,
        /// Time to live.
        ttl: u8,
    },
    /// IPv6.
    V6 {
        /// Source address.
        src: Ipv6Addr,
        /// Destination address.
        dst: Ipv6Addr,
        /// Traffic class.
        traffic_class: u8,
        /// Flow label (20 bits).
        flow_label: u32,
        /// Hop limit.
        hop_limit: u8,
    },
}

impl IpRepr {
    /// Source address.
    pub fn src(&self) -> IpAddr {
        match self {
            IpRepr::V4 { src, .. } => IpAddr::V4(*src),
            IpRepr::V6 { src, .. } => IpAddr::V6(*src),
        }
    }
    /// Destination address.
    pub fn dst(&self) -> IpAddr {
        match self {
            IpRepr::V4 { dst, .. } => IpAddr::V4(*dst),
            IpRepr::V6 { dst, .. } => IpAddr::V6(*dst),
        }
    }
    /// Length of the header [`FrameRepr`] emits.
    pub fn header_len(&self) -> usize {
        match self {
            IpRepr::V4 { .. } => 20,
            IpRepr::V6 { .. } => 40,
        }
    }

    /// Writes the IP header for a UDP datagram of `udp_len` bytes.
    /// The IPv4 header checksum is computed.
    pub fn emit(&self, buf: &mut [u8], udp_len: usize) -> Result<()> {
        let need = self.header_len();
        if buf.len() < need {
            let header = if need == 20 {
                Header::Ipv4
            } else {
                Header::Ipv6
            };
            return Err(Error::BufferTooSmall {
                header,
                need,
                have: buf.len(),
            });
        }
        match *self {
            IpRepr::V4 {
                src,
                dst,
                tos,
                id,
                dont_fragment,
                ttl,
            } => {
                let mut p = MutableIpv4Packet::new(buf).expect("length checked");
                p.set_version(4);
                p.set_header_length(5);
                p.set_dscp(tos >> 2);
                p.set_ecn(tos & 3);
                p.set_total_length((20 + udp_len) as u16);
                p.set_identification(id);
                p.set_flags(if dont_fragment {
                    ipv4::Ipv4Flags::DontFragment
                } else {
                    0
                });
                p.set_fragment_offset(0);
                p.set_ttl(ttl);
                p.set_next_level_protocol(IpNextHeaderProtocols::Udp);
                p.set_source(src);
                p.set_destination(dst);
                p.set_checksum(0);
                let c = ipv4::checksum(&p.to_immutable());
                p.set_checksum(c);
            }
            IpRepr::V6 {
                src,
                dst,
                traffic_class,
                flow_label,
                hop_limit,
            } => {
                let mut p = MutableIpv6Packet::new(buf).expect("length checked");
                p.set_version(6);
                p.set_traffic_class(traffic_class);
                p.set_flow_label(flow_label & 0xf_ffff);
                p.set_payload_length(udp_len as u16);
                p.set_next_header(IpNextHeaderProtocols::Udp);
                p.set_hop_limit(hop_limit);
                p.set_source(src);
                p.set_destination(dst);
            }
        }
        Ok(())
    }
}

/// A RoCE v2 packet found in a frame, with its outer headers decoded.
#[derive(Debug, Clone, Copy)]
pub struct RoceFrame<'a> {
    /// The Ethernet header, if the frame had one.
    pub eth: Option<EthRepr>,
    /// The IP header.
    pub ip: IpRepr,
    /// UDP source port.
    pub udp_src_port: u16,
    /// UDP destination port (4791).
    pub udp_dst_port: u16,
    /// UDP checksum as carried (Linux rxe sends 0).
    pub udp_checksum: u16,
    /// From the IP header to the end of the ICRC, bounded by the IP length.
    pub ip_packet: &'a [u8],
    /// The UDP payload: the transport packet, BTH to ICRC.
    pub transport: &'a [u8],
}

/// The UDP destination port, if the bytes reach that far.
fn udp_dst_port(udp: &[u8]) -> Option<u16> {
    Some(u16::from_be_bytes([*udp.get(2)?, *udp.get(3)?]))
}

fn truncated(header: Header, need: usize, have: usize) -> Error {
    Error::Truncated { header, need, have }
}

impl<'a> RoceFrame<'a> {
    /// Finds the RoCE v2 packet in a frame of the given link type.
    /// Frames that are plainly something else return [`Error::NotRoce`].
    pub fn parse(link: LinkType, frame: &'a [u8]) -> Result<RoceFrame<'a>> {
        match link {
            LinkType::Ethernet => Self::parse_ethernet(frame),
            LinkType::LinuxSll => {
                if frame.len() < SLL_LEN {
                    return Err(truncated(Header::LinuxSll, SLL_LEN, frame.len()));
                }
                let proto = u16::from_be_bytes([frame[14], frame[15]]);
                Self::parse_ethertype(proto, &frame[SLL_LEN..], None)
            }
            LinkType::LinuxSll2 => {
                if frame.len() < SLL2_LEN {
                    return Err(truncated(Header::LinuxSll, SLL2_LEN, frame.len()));
                }
                let proto = u16::from_be_bytes([frame[0], frame[1]]);
                Self::parse_ethertype(proto, &frame[SLL2_LEN..], None)
            }
            LinkType::RawIp => Self::parse_ip(frame, None),
        }
    }

    /// Parses an Ethernet II frame.
    pub fn parse_ethernet(frame: &'a [u8]) -> Result<RoceFrame<'a>> {
        let eth =
            EthernetPacket::new(frame).ok_or(truncated(Header::Ethernet, ETH_LEN, frame.len()))?;
        let mut repr = EthRepr {
            dst: eth.get_destination().octets(),
            src: eth.get_source().octets(),
            vlans: [None, None],
        };
        let mut ethertype = eth.get_ethertype().0;
        let mut rest = &frame[ETH_LEN..];
        let mut n = 0;
        while ethertype == EtherTypes::Vlan.0 || ethertype == ETHERTYPE_QINQ {
            if n == repr.vlans.len() {
                return Err(Error::TooManyVlanTags);
            }
            let tag = VlanPacket::new(rest).ok_or(truncated(Header::Vlan, VLAN_LEN, rest.len()))?;
            repr.vlans[n] = Some(VlanTag {
                tpid: ethertype,
                pcp: tag.get_priority_code_point().0,
                dei: tag.get_drop_eligible_indicator() != 0,
                vid: tag.get_vlan_identifier(),
            });
            ethertype = tag.get_ethertype().0;
            rest = &rest[VLAN_LEN..];
            n += 1;
        }
        Self::parse_ethertype(ethertype, rest, Some(repr))
    }

    fn parse_ethertype(ethertype: u16, rest: &'a [u8], eth: Option<EthRepr>) -> Result<Self> {
        let want = match EtherType(ethertype) {
            EtherTypes::Ipv4 => 4,
            EtherTypes::Ipv6 => 6,
            _ => return Err(Error::NotRoce(NotRoce::NotIp(ethertype))),
        };
        match rest.first() {
            Some(b) if b >> 4 != want => Err(Error::BadIpVersion(b >> 4)),
            None if want == 6 => Err(truncated(Header::Ipv6, 40, 0)),
            _ => Self::parse_ip(rest, eth),
        }
    }

    /// Parses a raw IPv4 or IPv6 packet.
    pub fn parse_ip(ip: &'a [u8], eth: Option<EthRepr>) -> Result<RoceFrame<'a>> {
        match ip.first().map(|b| b >> 4) {
            Some(4) => Self::parse_ipv4(ip, eth),
            Some(6) => Self::parse_ipv6(ip, eth),
            Some(v) => Err(Error::BadIpVersion(v)),
            None => Err(truncated(Header::Ipv4, 20, 0)),
        }
    }

    fn parse_ipv4(ip: &'a [u8], eth: Option<EthRepr>) -> Result<Self> {
        let p = Ipv4Packet::new(ip).ok_or(truncated(Header::Ipv4, 20, ip.len()))?;
        let ihl = p.get_header_length();
        if ihl < 5 {
            return Err(Error::BadIpv4HeaderLength(ihl));
        }
        let hlen = usize::from(ihl) * 4;
        if ip.len() < hlen {
            return Err(truncated(Header::Ipv4, hlen, ip.len()));
        }
        // What the packet is decides before whether its lengths add up, so
        // that other traffic cut short by a capture's snapshot length is
        // "not RoCE" rather than "malformed".
        if p.get_next_level_protocol() != IpNextHeaderProtocols::Udp {
            return Err(Error::NotRoce(NotRoce::NotUdp(
                p.get_next_level_protocol().0,
            )));
        }
        if p.get_fragment_offset() != 0 || p.get_flags() & ipv4::Ipv4Flags::MoreFragments != 0 {
            return Err(Error::NotRoce(NotRoce::Fragment));
        }
        if let Some(port) = udp_dst_port(&ip[hlen..]) {
            if port != ROCE_V2_PORT {
                return Err(Error::NotRoce(NotRoce::WrongPort(port)));
            }
        }
        let total = usize::from(p.get_total_length());
        if total > ip.len() || total < hlen {
            return Err(Error::LengthMismatch {
                field: LengthField::Ipv4TotalLength,
                claimed: total,
                actual: ip.len(),
            });
        }
        let repr = IpRepr::V4 {
            src: p.get_source(),
            dst: p.get_destination(),
            tos: (p.get_dscp() << 2) | p.get_ecn(),
            id: p.get_identification(),
            dont_fragment: p.get_flags() & ipv4::Ipv4Flags::DontFragment != 0,
            ttl: p.get_ttl(),
        };
        Self::parse_udp(&ip[..total], hlen, repr, eth)
    }

    fn parse_ipv6(ip: &'a [u8], eth: Option<EthRepr>) -> Result<Self> {
        let p = Ipv6Packet::new(ip).ok_or(truncated(Header::Ipv6, 40, ip.len()))?;
        if p.get_next_header() != IpNextHeaderProtocols::Udp {
            return Err(Error::NotRoce(NotRoce::NotUdp(p.get_next_header().0)));
        }
        if let Some(port) = udp_dst_port(&ip[40..]) {
            if port != ROCE_V2_PORT {
                return Err(Error::NotRoce(NotRoce::WrongPort(port)));
            }
        }
        let plen = usize::from(p.get_payload_length());
        if 40 + plen > ip.len() {
            return Err(Error::LengthMismatch {
                field: LengthField::Ipv6PayloadLength,
                claimed: plen,
                actual: ip.len() - 40,
            });
        }
        let repr = IpRepr::V6 {
            src: p.get_source(),
            dst: p.get_destination(),
            traffic_class: p.get_traffic_class(),
            flow_label: p.get_flow_label(),
            hop_limit: p.get_hop_limit(),
        };
        Self::parse_udp(&ip[..40 + plen], 40, repr, eth)
    }

    fn parse_udp(
        ip_packet: &'a [u8],
        hlen: usize,
        ip: IpRepr,
        eth: Option<EthRepr>,
    ) -> Result<Self> {
        let seg = &ip_packet[hlen..];
        let u = UdpPacket::new(seg).ok_or(truncated(Header::Udp, UDP_LEN, seg.len()))?;
        if u.get_destination() != ROCE_V2_PORT {
            return Err(Error::NotRoce(NotRoce::WrongPort(u.get_destination())));
        }
        let ulen = usize::from(u.get_length());
        if ulen != seg.len() {
            return Err(Error::LengthMismatch {
                field: LengthField::UdpLength,
                claimed: ulen,
                actual: seg.len(),
            });
        }
        Ok(RoceFrame {
            eth,
            ip,
            udp_src_port: u.get_source(),
            udp_dst_port: u.get_destination(),
            udp_checksum: u.get_checksum(),
            ip_packet,
            transport: &seg[UDP_LEN..],
        })
    }

    /// Checks the transport packet inside.
    pub fn packet(&self) -> Result<Packet<&'a [u8]>> {
        Packet::new_checked(self.transport)
    }

    /// The ICRC this packet should carry.
    pub fn computed_icrc(&self) -> Result<u32> {
        icrc::compute(self.ip_packet)
    }

    /// True if the carried ICRC is right.
    pub fn icrc_ok(&self) -> bool {
        icrc::verify(self.ip_packet).unwrap_or(false)
    }

    /// The outer headers as a repr that [`FrameRepr::emit`] turns back into
    /// the same bytes.
    pub fn repr(&self) -> FrameRepr {
        FrameRepr {
            eth: self.eth,
            ip: self.ip,
            udp_src_port: self.udp_src_port,
            udp_checksum: if self.udp_checksum == 0 {
                UdpChecksum::Zero
            } else {
                UdpChecksum::Carried(self.udp_checksum)
            },
        }
    }
}

/// How [`FrameRepr::emit`] fills the UDP checksum.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum UdpChecksum {
    /// Zero, as Linux rxe sends (also over IPv6).
    Zero,
    /// The real checksum.
    Compute,
    /// This exact value, right or wrong (to reproduce a captured frame: a
    /// host with checksum offload captures its own frames before the NIC
    /// fills the checksum in).
    Carried(u16),
}

/// The outer headers of a RoCE v2 frame, to build one around a
/// [`PacketRepr`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FrameRepr {
    /// Ethernet header; `None` builds a bare IP packet.
    pub eth: Option<EthRepr>,
    /// IP header.
    pub ip: IpRepr,
    /// UDP source port (the destination is always 4791).
    pub udp_src_port: u16,
    /// UDP checksum policy.
    pub udp_checksum: UdpChecksum,
}

impl FrameRepr {
    fn link_len(&self) -> usize {
        self.eth
            .map_or(0, |e| ETH_LEN + VLAN_LEN * e.vlans.iter().flatten().count())
    }

    /// Bytes [`Self::emit`] writes around a transport packet of `transport_len` bytes.
    pub fn buffer_len(&self, transport_len: usize) -> usize {
        self.link_len() + self.ip.header_len() + UDP_LEN + transport_len
    }

    /// Builds the whole frame, ICRC included. Returns the frame length.
    pub fn emit(&self, packet: &PacketRepr<'_>, buf: &mut [u8]) -> Result<usize> {
        let tlen = packet.buffer_len();
        let len = self.headers(buf, tlen)?;
        let ip_packet = &mut buf[self.link_len()..len];
        let hlen = self.ip.header_len();
        packet.emit(&mut ip_packet[hlen + UDP_LEN..])?;
        icrc::fill(ip_packet)?;
        self.udp_checksum(ip_packet);
        Ok(len)
    }

    /// Builds a frame around transport bytes that are already whole (BTH
    /// to ICRC, as a device sent them or a capture holds them), leaving
    /// them as they are: the ICRC is *not* computed again, so a packet
    /// sent with an ICRC for another IPv4 identification (a GSO segment)
    /// or a wrong one on purpose keeps it. Returns the frame length.
    pub fn wrap(&self, transport: &[u8], buf: &mut [u8]) -> Result<usize> {
        let len = self.headers(buf, transport.len())?;
        let ip_packet = &mut buf[self.link_len()..len];
        let hlen = self.ip.header_len();
        ip_packet[hlen + UDP_LEN..].copy_from_slice(transport);
        self.udp_checksum(ip_packet);
        Ok(len)
    }

    /// [`Self::wrap`] into a new buffer of the frame's length.
    pub fn wrap_vec(&self, transport: &[u8]) -> Result<Vec<u8>> {
        let mut buf = vec![0; self.buffer_len(transport.len())];
        self.wrap(transport, &mut buf)?;
        Ok(buf)
    }

    /// Writes the link, IP and UDP headers (UDP checksum 0) for a
    /// transport packet of `tlen` bytes; returns the frame length.
    fn headers(&self, buf: &mut [u8], tlen: usize) -> Result<usize> {
        let ip_len = self.ip.header_len() + UDP_LEN + tlen;
        let limit = match self.ip {
            IpRepr::V4 { .. } => 0xffff,
            IpRepr::V6 { .. } => 0xffff + 40,
        };
        if ip_len > limit {
            return Err(Error::TooLong { len: ip_len });
        }
        let len = self.buffer_len(tlen);
        if buf.len() < len {
            return Err(Error::BufferTooSmall {
                header: Header::Ethernet,
                need: len,
                have: buf.len(),
            });
        }
        let buf = &mut buf[..len];
        let link = self.link_len();
        if let Some(eth) = &self.eth {
            let mut e = MutableEthernetPacket::new(&mut buf[..]).expect("length checked");
            e.set_destination(eth.dst.into());
            e.set_source(eth.src.into());
            let mut off = 12;
            for tag in eth.vlans.iter().flatten() {
                buf[off..off + 2].copy_from_slice(&tag.tpid.to_be_bytes());
                let tci =
                    (u16::from(tag.pcp & 7) << 13) | (u16::from(tag.dei) << 12) | (tag.vid & 0xfff);
                buf[off + 2..off + 4].copy_from_slice(&tci.to_be_bytes());
                off += VLAN_LEN;
            }
            let et = match self.ip {
                IpRepr::V4 { .. } => EtherTypes::Ipv4.0,
                IpRepr::V6 { .. } => EtherTypes::Ipv6.0,
            };
            buf[off..off + 2].copy_from_slice(&et.to_be_bytes());
        }
        let ip_packet = &mut buf[link..];
        let hlen = self.ip.header_len();
        self.ip.emit(ip_packet, UDP_LEN + tlen)?;
        let mut u = MutableUdpPacket::new(&mut ip_packet[hlen..]).expect("length checked");
        u.set_source(self.udp_src_port);
        u.set_destination(ROCE_V2_PORT);
        u.set_length((UDP_LEN + tlen) as u16);
        u.set_checksum(0);
        Ok(len)
    }

    /// Fills the UDP checksum of a whole IP packet by the policy (the
    /// ICRC masks it, so this comes last).
    fn udp_checksum(&self, ip_packet: &mut [u8]) {
        let seg = &mut ip_packet[self.ip.header_len()..];
        let c = match self.udp_checksum {
            UdpChecksum::Zero => return,
            UdpChecksum::Carried(c) => c,
            UdpChecksum::Compute => {
                let u = UdpPacket::new(seg).expect("length checked");
                let c = match self.ip {
                    IpRepr::V4 { src, dst, .. } => udp::ipv4_checksum(&u, &src, &dst),
                    IpRepr::V6 { src, dst, .. } => udp::ipv6_checksum(&u, &src, &dst),
                };
                // A computed checksum of 0 is sent as 0xFFFF (RFC 768).
                if c == 0 {
                    0xffff
                } else {
                    c
                }
            }
        };
        MutableUdpPacket::new(seg)
            .expect("length checked")
            .set_checksum(c);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::psn::Psn;
    use crate::wire::{BthRepr, DethRepr, Opcode};

    fn ud_packet(payload: &[u8]) -> PacketRepr<'_> {
        let mut p = PacketRepr::new(BthRepr {
            opcode: Opcode::UD_SEND_ONLY,
            solicited: false,
            mig_req: false,
            pad_count: 0,
            pkey: 0xffff,
            fecn: false,
            becn: false,
            dest_qp: 0x11,
            ack_req: false,
            psn: Psn::new(100),
        });
        p.deth = Some(DethRepr {
            qkey: 0x1111_1111,
            src_qp: 0x22,
        });
        p.payload = payload;
        p
    }

    fn eth(vlans: [Option<VlanTag>; 2]) -> Option<EthRepr> {
        Some(EthRepr {
            dst: [2, 0, 0, 0, 0, 1],
            src: [2, 0, 0, 0, 0, 2],
            vlans,
        })
    }

    fn frames() -> Vec<FrameRepr> {
        let tag = VlanTag {
            tpid: 0x8100,
            pcp: 3,
            dei: false,
            vid: 42,
        };
        let outer = VlanTag {
            tpid: 0x88a8,
            pcp: 0,
            dei: true,
            vid: 7,
        };
        let v4 = IpRepr::V4 {
            src: Ipv4Addr::new(127, 0, 0, 2),
            dst: Ipv4Addr::new(127, 0, 0, 3),
            tos: 0x2a,
            id: 0,
            dont_fragment: true,
            ttl: 64,
        };
        let v6 = IpRepr::V6 {
            src: "fd00::2".parse().unwrap(),
            dst: "fd00::3".parse().unwrap(),
            traffic_class: 0x28,
            flow_label: 0x12345,
            hop_limit: 64,
        };
        let mut out = vec![];
        for ip in [v4, v6] {
            for e in [
                None,
                eth([None, None]),
                eth([Some(tag), None]),
                eth([Some(outer), Some(tag)]),
            ] {
                for udp_checksum in [UdpChecksum::Zero, UdpChecksum::Compute] {
                    out.push(FrameRepr {
                        eth: e,
                        ip,
                        udp_src_port: 49152,
                        udp_checksum,
                    });
                }
            }
        }
        out
    }

    #[test]
    fn emit_parse_round_trip() {
        let pkt = ud_packet(b"hello, world!");
        for f in frames() {
            let mut buf = vec![0u8; f.buffer_len(pkt.buffer_len())];
            let n = f.emit(&pkt, &mut buf).unwrap();
            assert_eq!(n, buf.len());
            let link = if f.eth.is_some() {
                LinkType::Ethernet
            } else {
                LinkType::RawIp
            };
            let rf = RoceFrame::parse(link, &buf).unwrap();
            assert!(rf.icrc_ok(), "{f:?}");
            let back = rf.repr();
            assert_eq!(
                (back.eth, back.ip, back.udp_src_port),
                (f.eth, f.ip, f.udp_src_port)
            );
            match f.udp_checksum {
                UdpChecksum::Zero => assert_eq!(back.udp_checksum, UdpChecksum::Zero),
                _ => assert!(matches!(back.udp_checksum, UdpChecksum::Carried(c) if c != 0)),
            }
            let p = rf.packet().unwrap();
            assert_eq!(PacketRepr::parse(&p).unwrap().payload, b"hello, world!");
            // Emitting the parsed form gives the same bytes back.
            let mut again = vec![0u8; n];
            rf.repr()
                .emit(&PacketRepr::parse(&p).unwrap(), &mut again)
                .unwrap();
            assert_eq!(again, buf);
        }
    }

    #[test]
    fn wrap_builds_emits_frame_around_finished_transport_bytes() {
        let pkt = ud_packet(b"wrapped as sent");
        for f in frames() {
            let mut whole = vec![0u8; f.buffer_len(pkt.buffer_len())];
            f.emit(&pkt, &mut whole).unwrap();
            let t = f.link_len() + f.ip.header_len() + UDP_LEN;
            let transport = whole[t..].to_vec();
            assert_eq!(f.wrap_vec(&transport).unwrap(), whole, "{f:?}");
            // An ICRC that is wrong (or right for another IPv4 ID) stays.
            let mut bad = transport.clone();
            let n = bad.len();
            bad[n - 1] ^= 0x5a;
            let w = f.wrap_vec(&bad).unwrap();
            assert_eq!(&w[t..], &bad[..]);
            let link = if f.eth.is_some() {
                LinkType::Ethernet
            } else {
                LinkType::RawIp
            };
            assert!(!RoceFrame::parse(link, &w).unwrap().icrc_ok(), "{f:?}");
        }
        let f = frames()[0];
        let mut small = vec![0u8; 30];
        assert!(matches!(
            f.wrap(&[0u8; 16], &mut small),
            Err(Error::BufferTooSmall { .. })
        ));
        assert!(matches!(
            f.wrap_vec(&vec![0u8; 0x10000]),
            Err(Error::TooLong { .. })
        ));
    }

    #[test]
    fn ethernet_padding_is_ignored() {
        let pkt = ud_packet(b"");
        let f = frames()[2];
        let mut buf = vec![0u8; f.buffer_len(pkt.buffer_len()) + 10];
        let n = f.emit(&pkt, &mut buf).unwrap();
        let rf = RoceFrame::parse(LinkType::Ethernet, &buf).unwrap();
        assert!(rf.icrc_ok());
        assert_eq!(rf.ip_packet.len(), n - ETH_LEN);
    }

    #[test]
    fn not_roce_and_malformed() {
        let pkt = ud_packet(b"abcd");
        let f = frames()[2];
        let mut buf = vec![0u8; f.buffer_len(pkt.buffer_len())];
        f.emit(&pkt, &mut buf).unwrap();
        // ARP.
        let mut b = buf.clone();
        b[12..14].copy_from_slice(&[0x08, 0x06]);
        assert_eq!(
            RoceFrame::parse_ethernet(&b).unwrap_err(),
            Error::NotRoce(NotRoce::NotIp(0x0806))
        );
        // Another UDP port.
        let mut b = buf.clone();
        b[14 + 22..14 + 24].copy_from_slice(&53u16.to_be_bytes());
        assert_eq!(
            RoceFrame::parse_ethernet(&b).unwrap_err(),
            Error::NotRoce(NotRoce::WrongPort(53))
        );
        // UDP length that disagrees.
        let mut b = buf.clone();
        b[14 + 24..14 + 26].copy_from_slice(&100u16.to_be_bytes());
        assert!(matches!(
            RoceFrame::parse_ethernet(&b).unwrap_err(),
            Error::LengthMismatch {
                field: LengthField::UdpLength,
                claimed: 100,
                ..
            }
        ));
        // IPv4 total length past the end of the frame.
        let mut b = buf.clone();
        b[16..18].copy_from_slice(&1000u16.to_be_bytes());
        assert!(matches!(
            RoceFrame::parse_ethernet(&b).unwrap_err(),
            Error::LengthMismatch {
                field: LengthField::Ipv4TotalLength,
                ..
            }
        ));
        // Truncated everywhere.
        for cut in 0..buf.len() {
            let r = RoceFrame::parse_ethernet(&buf[..cut]).and_then(|f| f.packet().map(|_| ()));
            assert!(r.is_err(), "cut at {cut}");
        }
        // A flipped payload bit breaks the ICRC.
        let mut b = buf.clone();
        let at = b.len() - 6;
        b[at] ^= 0x10;
        assert!(!RoceFrame::parse_ethernet(&b).unwrap().icrc_ok());
    }
}
