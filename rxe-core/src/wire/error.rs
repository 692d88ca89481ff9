//! Typed errors for malformed packets.

use core::fmt;

/// Which header or field an error is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Header {
    /// Ethernet II header.
    Ethernet,
    /// An 802.1Q / 802.1ad VLAN tag.
    Vlan,
    /// Linux cooked capture header (SLL or SLL2).
    LinuxSll,
    /// IPv4 header.
    Ipv4,
    /// IPv6 header.
    Ipv6,
    /// UDP header.
    Udp,
    /// Base Transport Header.
    Bth,
    /// Reliable Datagram ETH.
    Rdeth,
    /// Datagram ETH.
    Deth,
    /// Flush ETH.
    Feth,
    /// RDMA ETH.
    Reth,
    /// Atomic ETH.
    AtomicEth,
    /// ACK ETH.
    Aeth,
    /// Atomic ACK ETH.
    AtomicAckEth,
    /// Immediate data.
    ImmDt,
    /// Invalidate ETH.
    Ieth,
    /// The reserved bytes of a CNP.
    CnpPad,
    /// The invariant CRC trailer.
    Icrc,
}

impl fmt::Display for Header {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = match self {
            Header::Ethernet => "Ethernet header",
            Header::Vlan => "VLAN tag",
            Header::LinuxSll => "Linux cooked header",
            Header::Ipv4 => "IPv4 header",
            Header::Ipv6 => "IPv6 header",
            Header::Udp => "UDP header",
            Header::Bth => "BTH",
            Header::Rdeth => "RDETH",
            Header::Deth => "DETH",
            Header::Feth => "FETH",
            Header::Reth => "RETH",
            Header::AtomicEth => "AtomicETH",
            Header::Aeth => "AETH",
            Header::AtomicAckEth => "AtomicAckETH",
            Header::ImmDt => "ImmDt",
            Header::Ieth => "IETH",
            Header::CnpPad => "CNP reserved bytes",
            Header::Icrc => "ICRC",
        };
        f.write_str(s)
    }
}

/// A length field that disagrees with the bytes actually present.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LengthField {
    /// IPv4 total length.
    Ipv4TotalLength,
    /// IPv6 payload length.
    Ipv6PayloadLength,
    /// UDP length.
    UdpLength,
}

impl fmt::Display for LengthField {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LengthField::Ipv4TotalLength => "IPv4 total length",
            LengthField::Ipv6PayloadLength => "IPv6 payload length",
            LengthField::UdpLength => "UDP length",
        })
    }
}

/// Why a frame is not a RoCE v2 packet at all (as opposed to a malformed one).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NotRoce {
    /// The link layer carries something other than IPv4 or IPv6.
    NotIp(u16),
    /// The IP packet carries something other than UDP.
    NotUdp(u8),
    /// UDP to a port other than 4791.
    WrongPort(u16),
    /// A non-first IPv4 fragment or a fragmented datagram.
    Fragment,
}

impl fmt::Display for NotRoce {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NotRoce::NotIp(t) => write!(f, "ethertype {t:#06x} is not IP"),
            NotRoce::NotUdp(p) => write!(f, "IP protocol {p} is not UDP"),
            NotRoce::WrongPort(p) => write!(f, "UDP destination port {p} is not 4791"),
            NotRoce::Fragment => f.write_str("IP fragment"),
        }
    }
}

/// Everything that can be wrong with a packet. Small and `Copy`, so the
/// engine can count drops by reason without allocating.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A header is cut short.
    #[error("truncated {header}: need {need} bytes, have {have}")]
    Truncated {
        /// The header that does not fit.
        header: Header,
        /// Bytes it needs.
        need: usize,
        /// Bytes left.
        have: usize,
    },
    /// The BTH opcode is not one we know.
    #[error("unknown opcode {0:#04x}")]
    UnknownOpcode(u8),
    /// BTH transport header version other than 0.
    #[error("bad BTH transport version {0} (only 0 is defined)")]
    BadTransportVersion(u8),
    /// The IP version nibble is neither 4 nor 6, or disagrees with the link type.
    #[error("bad IP version {0}")]
    BadIpVersion(u8),
    /// IPv4 header length field below 5 words.
    #[error("bad IPv4 header length {0} words")]
    BadIpv4HeaderLength(u8),
    /// The BTH pad count is larger than the bytes after the headers.
    #[error("pad count {pad} larger than the {available} bytes after the headers")]
    PadTooLarge {
        /// The pad count.
        pad: u8,
        /// Bytes between the headers and the ICRC.
        available: usize,
    },
    /// Payload plus pad is not a multiple of 4 bytes.
    #[error("payload ({payload} bytes) plus pad ({pad}) is not a multiple of 4")]
    Misaligned {
        /// Payload length.
        payload: usize,
        /// Pad count.
        pad: u8,
    },
    /// An opcode that carries no payload came with payload bytes.
    #[error("{opcode} carries no payload but {len} bytes follow its headers")]
    UnexpectedPayload {
        /// The opcode.
        opcode: super::Opcode,
        /// Bytes found after the headers.
        len: usize,
    },
    /// A repr's extension headers are not the ones its opcode calls for.
    #[error("{opcode} {} a {header}", if *present { "must not carry" } else { "needs" })]
    HeadersDisagree {
        /// The opcode.
        opcode: super::Opcode,
        /// The first header that is wrong.
        header: Header,
        /// True if the header is present but must not be, false if missing.
        present: bool,
    },
    /// A header length that is not possible (IPv4 with options past 60 bytes, IPv6 not 40).
    #[error("bad {header} length {len}")]
    BadHeaderLength {
        /// Which header.
        header: Header,
        /// Its length.
        len: usize,
    },
    /// A datagram longer than the 16-bit IP and UDP length fields allow.
    #[error("datagram of {len} bytes is longer than IP/UDP allow (65535)")]
    TooLong {
        /// Length of the datagram.
        len: usize,
    },
    /// More than two VLAN tags in front of the IP header.
    #[error("more than two VLAN tags")]
    TooManyVlanTags,
    /// A length field disagrees with the bytes present.
    #[error("{field} says {claimed} bytes but {actual} are present")]
    LengthMismatch {
        /// Which field.
        field: LengthField,
        /// What it claims.
        claimed: usize,
        /// What is there.
        actual: usize,
    },
    /// The frame is not RoCE v2 at all.
    #[error("not RoCE v2: {0}")]
    NotRoce(NotRoce),
    /// A repr could not be emitted into a buffer that is too small.
    #[error("buffer too small for {header}: need {need}, have {have}")]
    BufferTooSmall {
        /// What was being written.
        header: Header,
        /// Bytes needed.
        need: usize,
        /// Bytes available.
        have: usize,
    },
}

impl Error {
    /// True if the input is simply not RoCE (and should be skipped, not counted as malformed).
    pub fn is_not_roce(&self) -> bool {
        matches!(self, Error::NotRoce(_))
    }
}

/// Result with the wire [`Error`].
pub type Result<T> = core::result::Result<T, Error>;
