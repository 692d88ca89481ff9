//! RoCE v2 over the kernel's UDP stack, unprivileged: [`UdpTransport`].
//!
//! A soft device needs nothing more than a UDP socket bound to port 4791 of
//! one local address: the engine's [`Transmit`]s carry the UDP payload (BTH
//! through ICRC) and the kernel writes the IP and UDP headers. Packets go
//! out in batches with `sendmmsg(2)` and come in with `recvmmsg(2)`, waiting
//! with `ppoll(2)` when there is nothing queued. Both sockets are
//! nonblocking; [`UdpTransport::recv_fd`] and [`UdpTransport::send_fd`] can
//! go into an event loop. (`recvmmsg` runs with `MSG_DONTWAIT` after the
//! wait: on a nonblocking socket that is what `MSG_WAITFORONE` amounts to,
//! and it never blocks past the timeout when the packets that woke the
//! poll turn out to be filtered away.)
//!
//! # The ICRC and the IP header the kernel writes
//!
//! The ICRC covers most of the IP header (see [`rxe_core::wire::icrc`]), so
//! the sender must know the header the kernel will write before the kernel
//! writes it. The masked fields (TOS/traffic class, TTL/hop limit, IPv4
//! header checksum, IPv6 flow label, UDP checksum) may be anything. The one
//! troublesome field is the **IPv4 identification**, which is covered:
//!
//! * Linux gives a datagram with don't-fragment set *and not allowed to be
//!   fragmented* (`IP_PMTUDISC_DO`; plain `IP_PMTUDISC_WANT` also sets DF but
//!   lets the stack ignore it) an ID from the socket's own counter if the
//!   socket is connected, and **ID 0** if it is not (`ip_select_ident`).
//!   Everything else gets a hashed, unpredictable ID.
//! * So this transport sets `IP_MTU_DISCOVER = IP_PMTUDISC_DO` and never
//!   calls `connect(2)`: every IPv4 packet it sends has ID 0 and DF, which is
//!   exactly what [`rxe_core::wire::icrc::compute_udp`] (and so the engine)
//!   assumes. A send larger than the path MTU fails with `EMSGSIZE` instead
//!   of being fragmented, which RoCE forbids anyway.
//! * The kernel's `rdma_rxe` builds its own IP header, with DF set and IDs
//!   that go up by one per packet. Its packets carry a correct ICRC over
//!   that ID, which a UDP socket never sees.
//!
//! IPv6 has no identification field, and everything the ICRC covers (source
//! and destination address, payload length, next header, UDP ports and
//! length, the transport packet) is known to the receiver of a UDP socket.
//!
//! # ICRC verdicts ([`IcrcStatus`]) on receive
//!
//! * **IPv6**: always verifiable: [`IcrcStatus::Ok`] or [`IcrcStatus::Bad`].
//! * **IPv4, plain UDP socket** ([`RecvMode::Plain`]): the ICRC is checked
//!   assuming ID 0 and DF. A match is [`IcrcStatus::Ok`] (what this
//!   transport, and any unconnected `IP_PMTUDISC_DO` sender, produces). A
//!   mismatch may be a good packet from the kernel's rxe or a NIC, which
//!   number their packets, or a damaged one. [`Ipv4IdSolver`] tells them
//!   apart: if some identification (and DF bit) makes the ICRC right, the
//!   packet is [`IcrcStatus::Unverified`], which the engine accepts and
//!   counts (`Counters::icrc_unverified`, [`UdpStats::icrc_unverified`]);
//!   if none does, it is [`IcrcStatus::Bad`] and dropped. A damaged packet
//!   slips through with odds of 2^-15 (17 unknown header bits in a 32-bit
//!   CRC), against certainty before the solver (`rxe stress` under
//!   injected corruption found thousands of bad bytes accepted that way).
//!   An IPv4 header with options is never explained: such packets are Bad.
//! * **IPv4, raw mode** ([`RecvMode::Raw`]): every packet is checked against
//!   its real IP header: [`IcrcStatus::Ok`] or [`IcrcStatus::Bad`]. See below.
//!
//! A datagram too short to hold a BTH and an ICRC is handed out as
//! [`IcrcStatus::Bad`]: it cannot carry a correct ICRC.
//!
//! # Raw mode: checking every IPv4 packet
//!
//! With `CAP_NET_RAW`, [`UdpTransport::bind_with`] and [`RecvMode::Raw`]
//! (or [`RecvMode::Auto`]) also open `socket(AF_INET, SOCK_RAW,
//! IPPROTO_UDP)` bound to the same address. The kernel gives such a socket a
//! copy of every UDP packet to that address *with its IPv4 header*, so the
//! ICRC can be checked over the real identification field. The raw socket
//! carries a classic BPF filter keeping UDP destination port 4791 only, and
//! packets are checked again in userspace (destination address, port, IP
//! and UDP lengths) before the UDP payload is handed out.
//!
//! The UDP socket stays bound (it reserves the port, keeps the kernel from
//! answering with ICMP port unreachable, and does all the sending) but
//! carries a BPF filter that drops everything (`ret #0`), so the same
//! packets are not queued twice. The kernel counts those drops in the UDP
//! `InErrors` of `/proc/net/snmp`. The raw socket sees packets before the
//! UDP layer checks them, so a packet whose UDP checksum is wrong but whose
//! ICRC is right would be accepted; the ICRC covers everything the UDP
//! checksum does except the checksum itself.
//!
//! Raw mode is IPv4 only: an `AF_INET6` raw socket never hands out the IPv6
//! header, and IPv6 does not need it.
//!
//! # GSO and GRO (sending: to loopback addresses by default, [`GsoSend`]; receiving: always on)
//!
//! Which destinations get GSO sends is [`GsoSend`]: by default
//! ([`gso_from_env`], `RXE_GSO` unset) loopback addresses only, where the
//! receiver runs on the sender's own kernel, which either hands it the
//! super-packet whole (a `UDP_GRO` or raw socket: split and verified
//! below) or cuts it in software with the IDs described here; no NIC is
//! involved, so no hardware numbering of segments is trusted. `RXE_GSO=1`
//! sends with GSO to every destination, `RXE_GSO=0` to none (what a raw
//! receiver of an rxe-rs build from before 2026-11-28, which cannot take a
//! super-packet, needs from a sender on the same host).
//!
//! UDP segmentation offload (`UDP_SEGMENT`) sends one buffer that the
//! kernel cuts into datagrams of one size (the last may be shorter), in
//! software just before a device that cannot do it, or in the NIC. Each
//! datagram gets a copy of the IP header with **its own identification**:
//! for a super-packet with ID 0 and DF (what an unconnected
//! `IP_PMTUDISC_DO` socket sends), segment k carries ID k (the IPv4 GSO
//! handler numbers the segments from the super-packet's ID; seen on the
//! wire behind a veth pair whose sender segments in software: IDs 0, 1, 2,
//! 3, all DF). The ICRC covers the ID, so the packet that becomes segment
//! k leaves with its ICRC adjusted for ID k: the CRC is linear, so that is
//! the engine's ICRC (computed for ID 0) XOR a value that depends only on
//! k and the length (`IdDeltas`). A deliberately wrong ICRC stays wrong by
//! as much.
//!
//! A run is consecutive packets of one send batch to one destination with
//! the same TOS and TTL, of equal length (the last may be shorter), at
//! most [`GSO_MAX_SEGMENTS`] and 64 KiB; runs of one go out as without
//! GSO, in the same `sendmmsg` as the runs. A GSO send refused for a full
//! buffer (`EAGAIN`, `ENOBUFS`) is a full buffer as without GSO; refused
//! for anything else, its packets go one by one and the destination gets
//! no more GSO sends ([`UdpStats::tx_gso_fallbacks`]).
//! [`UdpTransport::send_batch_with`] reports the ID and ICRC each packet
//! went out with ([`SentAs`]), for a capture that shows the wire.
//!
//! The receive side does not depend on `set_gso`: every transport takes
//! what a GSO sender sends, so a process without `RXE_GSO` receives from
//! one with it. Its receive buffers are [`GSO_DATAGRAM`] bytes each
//! (allocated zeroed, so that only the pages datagrams are written to
//! become resident), and it costs nothing when no GSO traffic arrives:
//! the plain path only looks at a control message the kernel writes for a
//! coalesced datagram, the raw path only tries a packet whose ICRC already
//! failed. What receivers see of a loopback GSO sender (checked on Linux
//! 6.18):
//!
//! * A **plain socket with `UDP_GRO`** (always set, where the kernel has
//!   it) gets the whole super-packet as one datagram, with the segment
//!   size in a `UDP_GRO` control message; it is cut there, and packet k's
//!   ICRC is checked for ID 0 and then for ID k, which makes a GSO
//!   sender's packets [`IcrcStatus::Ok`]; anything else goes to the
//!   [`Ipv4IdSolver`] as before. A datagram that GRO coalesced on a real
//!   NIC is cut the same way.
//! * A **plain socket without it** (a kernel before 5.0, or an older
//!   rxe-rs build) gets the segments one by one (the UDP layer segments
//!   for it), without their IP headers: segment
//!   k > 0 fails the ID-0 check and the solver finds ID k: accepted as
//!   [`IcrcStatus::Unverified`].
//! * A **raw socket** sees the super-packet unsegmented, before the UDP
//!   layer: one IP packet with ID 0 and the lengths of the whole. An IPv4
//!   packet whose ICRC fails is tried as a super-packet
//!   (`split_super`): segment sizes are tried until the first segment's
//!   ICRC is right for the header's ID, and segment k is then checked with
//!   ID + k. A packet no size explains is handed out as one Bad packet, as
//!   before, or, if it is longer than [`MAX_DATAGRAM`], dropped and counted
//!   ([`UdpStats::rx_gso_malformed`]). (A raw receiver of an older build,
//!   which split only with GSO on, cannot take a loopback GSO sender's
//!   super-packets: longer than its buffers, or one packet with a bad
//!   ICRC.) Segmentation before a device (veth
//!   without UDP segmentation offload, tap, a NIC) hands a remote receiver
//!   ordinary packets, with IDs 0, 1, 2...
//!
//! # Zero UDP checksums over IPv6
//!
//! The kernel's rxe sends UDP checksum 0 also over IPv6 (RFC 6935 allows it
//! for tunnels). Linux drops zero-checksum UDP over IPv6 unless the
//! receiving socket sets `UDP_NO_CHECK6_RX`, which this transport does.
//! Its own IPv6 packets carry a real checksum.
//!
//! # Ports
//!
//! Everything goes to UDP port 4791, and everything leaves from 4791: a
//! socket bound to 4791 cannot choose a source port per QP as the kernel's
//! rxe does. The source port is covered by the ICRC, so the engine must
//! know it: set [`rxe_core::engine::EngineConfig::udp_src_port`] to
//! `Some(transport.src_port())`. Any source port is accepted on receive.

use rxe_core::engine::{RecvMeta, Transmit};
// (named in the docs)
use rxe_core::wire::ICRC_LEN;
#[cfg(doc)]
use rxe_core::{engine::IcrcStatus, wire::icrc::Ipv4IdSolver};
use std::fmt;

/// Largest datagram received: the UDP payload in plain mode, the whole IP
/// packet in raw mode. Covers a 9000-byte jumbo frame MTU; anything larger
/// is dropped and counted in [`UdpStats::rx_truncated`].
pub const MAX_DATAGRAM: usize = 9216;

/// Datagrams taken per `recvmmsg(2)` call (and sent per `sendmmsg(2)` call).
pub const BATCH: usize = 64;

/// The receive buffer per datagram (always; GSO sending or not): a
/// `UDP_GRO` datagram or an unsegmented super-packet holds up to 64 KiB.
/// A datagram longer than [`MAX_DATAGRAM`] that is neither is dropped as
/// before ([`UdpStats::rx_truncated`]).
pub const GSO_DATAGRAM: usize = 65536;

/// The most packets one GSO send carries (Linux 6.1 accepts 64, later
/// kernels 128).
pub const GSO_MAX_SEGMENTS: usize = 64;

/// The socket buffer size asked for (best effort: `SO_RCVBUFFORCE` if
/// permitted, else `SO_RCVBUF`, which `net.core.rmem_max` caps).
pub const SOCKET_BUFFER: usize = 4 << 20;

/// Where received packets come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum RecvMode {
    /// From the UDP socket. Unprivileged; IPv4 packets with a nonzero IP ID
    /// cannot have their ICRC checked ([`IcrcStatus::Unverified`]).
    #[default]
    Plain,
    /// From a raw IPv4 socket that sees the IP header, so that every ICRC
    /// is checked. Needs `CAP_NET_RAW`; IPv4 only.
    Raw,
    /// Raw for IPv4 if permitted, plain otherwise (and always for IPv6,
    /// which a plain socket verifies fully). Only a request:
    /// [`UdpTransport::recv_mode`] never returns it.
    Auto,
}

impl fmt::Display for RecvMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            RecvMode::Plain => "plain",
            RecvMode::Raw => "raw",
            RecvMode::Auto => "auto",
        })
    }
}

/// A received datagram, owned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Received {
    /// Where it came from and the ICRC verdict.
    pub meta: RecvMeta,
    /// The UDP payload: BTH through ICRC.
    pub data: Vec<u8>,
}

/// A received datagram, borrowed from the transport's receive buffers.
#[derive(Debug, Clone, Copy)]
pub struct Datagram<'a> {
    /// Where it came from and the ICRC verdict.
    pub meta: RecvMeta,
    /// The UDP payload: BTH through ICRC.
    pub payload: &'a [u8],
    /// In raw mode, the whole IP packet (IPv4 header, UDP header, payload);
    /// something a capture can write as a raw-IP frame. For a packet split
    /// out of a GSO super-packet, the packet as the kernel's segmentation
    /// would have written it (identification + k, its own lengths and
    /// header checksum, UDP checksum 0).
    pub ip_packet: Option<&'a [u8]>,
}

/// What a transport did since it was bound.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UdpStats {
    /// Datagrams handed to the kernel.
    pub tx_packets: u64,
    /// The batches they went in: one `sendmmsg` (or one run of GSO sends)
    /// for up to `BATCH` datagrams that the kernel took.
    pub tx_batches: u64,
    /// Their UDP payload bytes.
    pub tx_bytes: u64,
    /// Sends that stopped early because the socket buffer was full
    /// (`EAGAIN`/`ENOBUFS`).
    pub tx_full: u64,
    /// Datagrams handed out.
    pub rx_packets: u64,
    /// Their UDP payload bytes.
    pub rx_bytes: u64,
    /// Handed out with [`IcrcStatus::Ok`].
    pub icrc_ok: u64,
    /// Handed out with [`IcrcStatus::Bad`].
    pub icrc_bad: u64,
    /// Handed out with [`IcrcStatus::Unverified`].
    pub icrc_unverified: u64,
    /// Dropped: larger than [`MAX_DATAGRAM`].
    pub rx_truncated: u64,
    /// Raw mode: packets that were not RoCE v2 to this address (dropped).
    pub rx_ignored: u64,
    /// Raw mode: packets to this address and port 4791 whose IP or UDP
    /// lengths do not add up (dropped, as the UDP layer would).
    pub rx_malformed: u64,
    /// Datagrams for another process sharing the address, passed on to it
    /// ([`crate::share`]).
    pub rx_forwarded: u64,
    /// Datagrams for a QP prefix no process on the address holds (handed
    /// to this transport's engine, which answers or counts them).
    pub rx_unowned: u64,
    /// Raw mode: packets for another process sharing the address (which
    /// sees them itself; skipped here).
    pub rx_others: u64,
    /// Datagrams another process sharing the address passed on to this one.
    pub rx_forwarded_in: u64,
    /// Datagrams received on a multicast group's socket (also in
    /// `rx_packets`).
    pub rx_multicast: u64,
    /// Datagrams for another process that could not be passed on because
    /// its queue was full (lost; the protocol retries).
    pub rx_forward_full: u64,
    /// GSO ([`UdpTransport::set_gso`]): sends that carried a run of two or
    /// more packets as one `UDP_SEGMENT` super-packet.
    pub tx_gso_sends: u64,
    /// GSO: the packets those sends carried (also in `tx_packets`).
    pub tx_gso_segments: u64,
    /// GSO: runs sent packet by packet after the kernel refused the GSO
    /// send with something other than a full buffer (the destination then
    /// gets no more GSO sends).
    pub tx_gso_fallbacks: u64,
    /// GSO: received datagrams holding two or more packets (a `UDP_GRO`
    /// datagram in plain mode, a loopback sender's unsegmented super-packet
    /// in raw mode) that were split back into packets.
    pub rx_gso_split: u64,
    /// GSO, raw mode: packets longer than any single RoCE packet that no
    /// segment size explains (dropped).
    pub rx_gso_malformed: u64,
}

/// What [`UdpTransport::send_batch_with`] calls for each packet sent.
type SentReport<'a> = dyn FnMut(&Transmit, SentAs) + 'a;

/// How a packet [`UdpTransport::send_batch_with`] sent went out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SentAs {
    /// The IPv4 identification the kernel gave it: k for segment k of a
    /// GSO send, else 0 (what an unconnected socket with path MTU
    /// discovery on sends); 0 for IPv6, which has none.
    pub ip_id: u16,
    /// The ICRC it carried: the packet's own, or, for segment k > 0 of a
    /// GSO send, that adjusted for ID k (all zeros for a payload shorter
    /// than an ICRC).
    pub icrc: [u8; ICRC_LEN],
}

mod gso;
mod slots;
mod sys;
mod transport;
mod waiter;

pub use gso::{gso_from_env, GsoSend};
pub use sys::os_error_of;
pub use transport::UdpTransport;
pub use waiter::Waiter;

#[cfg(test)]
mod tests;
