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
//! receiver of a build older than `928629e`, which cannot take a
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

use crate::mcast::Groups;
use crate::share::{Forward, ServiceClaim, Share};
use rxe_core::engine::{IcrcStatus, RecvMeta, Transmit};
use rxe_core::wire::icrc::Ipv4IdSolver;
use rxe_core::wire::{icrc, RoceFrame, BTH_LEN, ICRC_LEN, ROCE_V2_PORT};
use std::fmt;
use std::io;
use std::mem::size_of;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::time::{Duration, Instant};

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

/// The most UDP payload one GSO send carries: the IPv4 total length is 16
/// bits (65535, less 20 bytes of IP and 8 of UDP header).
const GSO_MAX_BYTES: usize = 65535 - 28;

/// `SOL_UDP` options (linux/udp.h).
const UDP_SEGMENT: libc::c_int = 103;
const UDP_GRO: libc::c_int = 104;

/// Which destinations a transport sends to with UDP GSO
/// ([`UdpTransport::set_gso_send`]; see "GSO and GRO" in the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GsoSend {
    /// None: one datagram per packet, as before GSO.
    Off,
    /// Loopback addresses only (127.0.0.0/8, `::1`), where the sender's
    /// own kernel hands the super-packet to a receiver on the same host
    /// (whole to a `UDP_GRO` or raw socket, cut in software for any
    /// other) and no NIC numbers segments. The default on a kernel with
    /// `UDP_GRO` (Linux 5.0 and later).
    Loopback,
    /// Every destination (`RXE_GSO=1`): also through real NICs, whose UDP
    /// segmentation offload must number segments as Linux's software path
    /// does (ID + k).
    On,
}

impl GsoSend {
    /// Whether a run of packets to `dst` may go as one GSO send.
    pub fn allows(self, dst: IpAddr) -> bool {
        match self {
            GsoSend::Off => false,
            GsoSend::Loopback => dst.is_loopback(),
            GsoSend::On => true,
        }
    }
}

/// What transports bound with [`UdpTransport::bind`] or
/// [`UdpTransport::bind_with`] start with, from `RXE_GSO`: `1` (or `on`,
/// `true`, `yes`) [`GsoSend::On`]; `0` (or `off`, `false`, `no`)
/// [`GsoSend::Off`]; unset, empty or `loopback`: [`GsoSend::Loopback`] if
/// this kernel has `UDP_GRO` (so that every local receiver takes a
/// super-packet whole and verifies each segment), else `Off`. Anything
/// else is an error naming the variable.
pub fn gso_from_env() -> io::Result<GsoSend> {
    gso_setting(std::env::var("RXE_GSO"))
}

/// [`gso_from_env`] for a given value of `RXE_GSO`.
fn gso_setting(v: Result<String, std::env::VarError>) -> io::Result<GsoSend> {
    match v.as_deref() {
        Ok("1" | "on" | "true" | "yes") => Ok(GsoSend::On),
        Ok("0" | "off" | "false" | "no") => Ok(GsoSend::Off),
        Ok("" | "loopback") | Err(std::env::VarError::NotPresent) => Ok(if kernel_has_udp_gro() {
            GsoSend::Loopback
        } else {
            GsoSend::Off
        }),
        Ok(other) => Err(bad_gso_setting(&other)),
        Err(std::env::VarError::NotUnicode(v)) => Err(bad_gso_setting(&v)),
    }
}

fn bad_gso_setting(v: &dyn fmt::Debug) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        format!("RXE_GSO={v:?}: expected 1, 0 or loopback (the default)"),
    )
}

/// Whether this kernel takes `UDP_GRO` (Linux 5.0; `UDP_SEGMENT` came in
/// 4.18): asked once, of a throwaway socket.
fn kernel_has_udp_gro() -> bool {
    static HAS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *HAS.get_or_init(|| {
        std::net::UdpSocket::bind((Ipv4Addr::LOCALHOST, 0))
            .map(|s| setsockopt_int(s.as_raw_fd(), libc::IPPROTO_UDP, UDP_GRO, 1).is_ok())
            .unwrap_or(false)
    })
}

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

/// RoCE v2 packets through a UDP socket bound to `(addr, 4791)`.
pub struct UdpTransport {
    addr: IpAddr,
    udp: OwnedFd,
    raw: Option<OwnedFd>,
    /// What the UDP socket puts in a packet sent without ancillary data.
    defaults: SocketDefaults,
    stats: UdpStats,
    /// `BATCH` buffers of `GSO_DATAGRAM` bytes.
    bufs: Vec<u8>,
    /// This transport's share of its address (see [`crate::share`]).
    share: Share,
    /// Where forwarded datagrams are received.
    fwd_buf: Vec<u8>,
    /// The system calls' message headers, kept from call to call.
    slots: Box<Slots>,
    /// The receive side's headers, set up once.
    rx: Box<RxSlots>,
    /// When to look at the forward socket.
    fwd: FwdLook,
    /// Checks IPv4 ICRCs that the ID-0 header does not explain.
    id_solver: Ipv4IdSolver,
    /// Where UDP GSO is used on send (receiving splits GRO datagrams and
    /// super-packets whatever this says).
    gso: GsoSend,
    /// What the IPv4 identification of segment k does to an ICRC.
    id_deltas: IdDeltas,
    /// Destinations a GSO send failed to (sent packet by packet since).
    no_gso: Vec<IpAddr>,
    /// The packets found in one received datagram: (offset, length, ICRC
    /// verdict), kept from call to call.
    segs: Vec<(usize, usize, IcrcStatus)>,
    /// The multicast groups joined ([`crate::mcast`]).
    groups: Groups,
}

/// Room for three control messages (two `int`s, one `u16`; 24 bytes each
/// on 64-bit Linux), aligned for `cmsghdr`.
type Cbuf = [u64; 10];

/// `recvmmsg`'s and `sendmmsg`'s headers and what they point at, kept in
/// the transport so that a call does not clear 13 KiB of them first (a
/// memset that was the costliest user-space work of a spinning wait, which
/// polls the socket over and over). Every call sets the fields it relies on
/// in the entries it passes.
struct Slots {
    names: [libc::sockaddr_storage; BATCH],
    iovs: [libc::iovec; BATCH],
    hdrs: [libc::mmsghdr; BATCH],
    cbufs: [Cbuf; BATCH],
    /// GSO sends: a packet whose ICRC changes goes as two pieces (all but
    /// the ICRC, then the ICRC from `icrcs`).
    gso_iovs: [libc::iovec; 2 * BATCH],
    icrcs: [[u8; ICRC_LEN]; BATCH],
    /// The IPv4 identification each packet of the last send went out with
    /// (k for segment k of a GSO send, else 0); `icrcs` has the ICRC of
    /// those with a nonzero one.
    ids: [u16; BATCH],
}

/// When a receive looks at the forward socket ([`crate::share`]), which
/// only another process on the same address ever writes to: a look that
/// finds nothing is a system call (about 0.3 µs) after every `recvmmsg`,
/// on a latency test's critical path and in every empty look of a spinning
/// receiver. It looks when a wait (the transport's own or a [`Waiter`]'s,
/// both of which watch the forward socket) saw it readable, while the
/// last look found datagrams, and otherwise every [`FWD_EVERY`]th receive,
/// so that a forwarded datagram that arrives while a receiver spins
/// without waiting still waits for at most that many receives.
#[derive(Debug, Default)]
struct FwdLook {
    ready: std::sync::Arc<std::sync::atomic::AtomicBool>,
    active: bool,
    skipped: u32,
}

/// See [`FwdLook`].
const FWD_EVERY: u32 = 16;

impl FwdLook {
    fn should_look(&mut self) -> bool {
        self.skipped += 1;
        let look = self.active
            || self.skipped >= FWD_EVERY
            || self.ready.swap(false, std::sync::atomic::Ordering::Relaxed);
        if look {
            self.skipped = 0;
            self.active = false;
        }
        look
    }

    /// The look found a datagram: look again next time.
    fn found(&mut self) {
        self.active = true;
    }
}

/// The receive side's message headers, set up once: `recvmmsg` writes
/// only the lengths and flags of the headers it filled, so only those are
/// reset before the next call. Setting up all [`BATCH`] headers before
/// every call was about 1,000 instructions a receive, most of a latency
/// test's receive (one datagram a call) and every empty look of a
/// spinning receiver.
struct RxSlots {
    names: [libc::sockaddr_storage; BATCH],
    iovs: [libc::iovec; BATCH],
    hdrs: [libc::mmsghdr; BATCH],
    cbufs: [Cbuf; BATCH],
    /// How many headers at the front the last call may have written.
    dirty: usize,
    /// What `msg_namelen` and `msg_controllen` start each call with.
    namelen: libc::socklen_t,
    controllen: usize,
}

impl RxSlots {
    /// Headers for `recvmmsg` into `bufs` ([`BATCH`] slots of
    /// [`GSO_DATAGRAM`] bytes, a heap block that never moves): with the
    /// sender's address unless `raw_mode` (a raw socket's packets carry
    /// their addresses in the IP header), and without it with room for a
    /// control message (a plain socket with `UDP_GRO` says in one how long
    /// the packets of a coalesced datagram are).
    fn new(bufs: &mut [u8], raw_mode: bool) -> Box<RxSlots> {
        assert!(bufs.len() >= BATCH * GSO_DATAGRAM);
        // SAFETY: all-zero is a valid value for these plain C structs
        // (null pointers, zero lengths).
        let mut r: Box<RxSlots> = Box::new(unsafe { std::mem::zeroed() });
        let base = bufs.as_mut_ptr();
        for i in 0..BATCH {
            r.iovs[i] = libc::iovec {
                // SAFETY: (i + 1) * GSO_DATAGRAM <= bufs.len(), asserted above.
                iov_base: unsafe { base.add(i * GSO_DATAGRAM) }.cast(),
                iov_len: GSO_DATAGRAM,
            };
            let name = (&mut r.names[i] as *mut libc::sockaddr_storage).cast();
            let control = r.cbufs[i].as_mut_ptr().cast();
            let iov: *mut libc::iovec = &mut r.iovs[i];
            let h = &mut r.hdrs[i].msg_hdr;
            h.msg_name = if raw_mode { std::ptr::null_mut() } else { name };
            h.msg_iov = iov;
            h.msg_iovlen = 1;
            h.msg_control = if raw_mode {
                std::ptr::null_mut()
            } else {
                control
            };
        }
        if !raw_mode {
            r.namelen = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
            r.controllen = size_of::<Cbuf>();
        }
        r.dirty = BATCH;
        r
    }

    /// Resets what the last call wrote, for the next `recvmmsg`.
    fn ready(&mut self) {
        for h in &mut self.hdrs[..self.dirty] {
            h.msg_len = 0;
            h.msg_hdr.msg_namelen = self.namelen;
            h.msg_hdr.msg_controllen = self.controllen as _;
            h.msg_hdr.msg_flags = 0;
        }
        self.dirty = 0;
    }
}

// SAFETY: as for `Slots`: the pointers point at the transport's own
// receive buffer (a heap block that never moves) and at this box's fields.
unsafe impl Send for RxSlots {}

impl Slots {
    fn new() -> Box<Slots> {
        // SAFETY: all-zero is a valid value for these plain C structs
        // (null pointers, zero lengths).
        Box::new(unsafe { std::mem::zeroed() })
    }
}

// SAFETY: the raw pointers in `iovs` and `hdrs` are written before every
// system call that uses them, pointing at the transport's own buffers and
// `Slots` fields (or at the packets being sent, for the one call), and are
// never dereferenced by Rust code: moving the transport to another thread
// moves nothing they could dangle into.
unsafe impl Send for Slots {}

impl fmt::Debug for UdpTransport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UdpTransport")
            .field("addr", &self.addr)
            .field("recv_mode", &self.recv_mode())
            .field("udp_fd", &self.udp.as_raw_fd())
            .field("raw_fd", &self.raw.as_ref().map(|r| r.as_raw_fd()))
            .field("defaults", &self.defaults)
            .field("stats", &self.stats)
            .finish()
    }
}

impl UdpTransport {
    /// Binds a UDP socket to `(addr, 4791)` and receives from it
    /// ([`RecvMode::Plain`]). `addr` must be a specific unicast address
    /// (the ICRC covers the destination address); an IPv4-mapped IPv6
    /// address means its IPv4 address.
    pub fn bind(addr: IpAddr) -> io::Result<Self> {
        Self::bind_with(addr, RecvMode::Plain)
    }

    /// Binds as [`Self::bind`] and receives as `mode` says. [`RecvMode::Raw`]
    /// fails without `CAP_NET_RAW` (`PermissionDenied`) and for IPv6
    /// (`Unsupported`); [`RecvMode::Auto`] falls back to plain then.
    pub fn bind_with(addr: IpAddr, mode: RecvMode) -> io::Result<Self> {
        let addr = addr.to_canonical();
        let sa = SocketAddr::new(addr, ROCE_V2_PORT);
        if addr.is_unspecified() || addr.is_multicast() || is_broadcast(addr) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "bind {sa}: needs a specific unicast address \
                     (the ICRC covers the destination address)"
                ),
            ));
        }
        let raw = match (mode, addr) {
            (RecvMode::Plain, _) | (RecvMode::Auto, IpAddr::V6(_)) => None,
            (RecvMode::Raw, IpAddr::V6(_)) => {
                return Err(io::Error::new(
                    io::ErrorKind::Unsupported,
                    format!(
                        "bind {sa}: raw receive mode is IPv4 only \
                         (IPv6 is fully verified from the UDP socket)"
                    ),
                ))
            }
            (RecvMode::Raw, IpAddr::V4(a)) => Some(open_raw(a)?),
            (RecvMode::Auto, IpAddr::V4(a)) => match open_raw(a) {
                Ok(fd) => Some(fd),
                Err(e) if e.kind() == io::ErrorKind::PermissionDenied => None,
                Err(e) => return Err(e),
            },
        };
        let udp = open_udp(sa, raw.is_some())?;
        if raw.is_none() || addr.is_loopback() {
            // GRO on receive, always (whether this transport sends with
            // GSO or not): a local GSO sender's super-packets arrive whole,
            // with the segment size in a control message. Best effort:
            // without it (Linux before 5.0) the kernel segments them.
            //
            // In raw mode the UDP socket only holds the port and drops
            // everything (its filter), but without `UDP_GRO` the kernel
            // first cuts each super-packet a loopback GSO sender sends into
            // its segments for it, to drop them one by one: 14 % of a
            // 64-byte send_bw client's CPU, whose sendmmsg runs the
            // loopback receive. With it the super-packet is dropped whole.
            // Only on a loopback address: on another, `UDP_GRO` would also
            // let the kernel coalesce a NIC's packets for this port, and
            // the raw socket would see them merged.
            let _ = setsockopt_int(udp.as_raw_fd(), libc::IPPROTO_UDP, UDP_GRO, 1);
        }
        let share = Share::claim(addr, rand::random())
            .map_err(|e| context(e, format!("claim a share of {sa}")))?;
        let defaults = SocketDefaults::query(&udp, addr.is_ipv6())
            .map_err(|e| context(e, format!("read the TOS and TTL of the socket for {sa}")))?;
        let groups = Groups::new(addr).map_err(|e| context(e, "epoll_create1"))?;
        groups
            .configure_sender(&udp, defaults.ttl)
            .map_err(|e| context(e, format!("set the multicast interface of {sa}")))?;
        let gso = gso_from_env().map_err(|e| context(e, format!("bind {sa}")))?;
        // Zeroed and large (calloc maps it lazily): only the pages
        // datagrams are written to become resident, so without GSO
        // traffic each slot costs what MAX_DATAGRAM did.
        let mut bufs = vec![0; BATCH * GSO_DATAGRAM];
        let rx = RxSlots::new(&mut bufs, raw.is_some());
        Ok(UdpTransport {
            addr,
            udp,
            raw,
            defaults,
            stats: UdpStats::default(),
            bufs,
            share,
            fwd_buf: vec![0; MAX_DATAGRAM + 64],
            slots: Slots::new(),
            rx,
            fwd: FwdLook::default(),
            id_solver: Ipv4IdSolver::new(),
            gso,
            id_deltas: IdDeltas::default(),
            no_gso: Vec::new(),
            segs: Vec::new(),
            groups,
        })
    }

    /// Joins IP multicast group `group` on the device's interface, so that
    /// datagrams to `(group, 4791)` are received here as well (UD
    /// multicast: see [`crate::mcast`]). Joining twice does nothing.
    pub fn join_group(&mut self, group: IpAddr) -> io::Result<()> {
        self.groups.join(group)
    }

    /// Leaves a group [`Self::join_group`] joined; false if it was not.
    pub fn leave_group(&mut self, group: IpAddr) -> bool {
        self.groups.leave(group)
    }

    /// Turns UDP segmentation offload for sending on for every destination
    /// ([`GsoSend::On`]) or off ([`GsoSend::Off`]); the default is
    /// [`GsoSend::Loopback`] (see [`gso_from_env`]). With it on,
    /// [`Self::send_batch`] sends each run of packets to one destination
    /// whose lengths are equal (the last may be shorter) as one `sendmsg`
    /// with a `UDP_SEGMENT` control message, with the ICRC of the run's
    /// packet k adjusted for IPv4 identification k, which is what Linux
    /// writes into segment k (see "GSO and GRO" in the module docs).
    ///
    /// Receiving does not depend on it: every transport takes datagrams
    /// that hold several packets and splits them back into packets
    /// (`UDP_GRO` datagrams in plain mode, loopback senders' unsegmented
    /// super-packets in raw mode), with receive buffers of
    /// [`GSO_DATAGRAM`] bytes each.
    pub fn set_gso(&mut self, on: bool) -> io::Result<()> {
        self.set_gso_send(if on { GsoSend::On } else { GsoSend::Off });
        Ok(())
    }

    /// Chooses the destinations GSO sends go to ([`GsoSend`]; the default
    /// comes from [`gso_from_env`]).
    pub fn set_gso_send(&mut self, gso: GsoSend) {
        self.gso = gso;
    }

    /// Where GSO sending is used ([`Self::set_gso_send`]).
    pub fn gso_send(&self) -> GsoSend {
        self.gso
    }

    /// Whether GSO sending is used for any destination
    /// ([`Self::set_gso_send`]).
    pub fn gso(&self) -> bool {
        self.gso != GsoSend::Off
    }

    /// The bound address (also [`RecvMeta::dst`] of every datagram).
    pub fn addr(&self) -> IpAddr {
        self.addr
    }

    /// The top 8 bits of every QP number the engine behind this transport
    /// must hand out (`EngineConfig::qpn_prefix`): how datagrams find their
    /// process when several share the address ([`crate::share`]).
    pub fn qpn_prefix(&self) -> u8 {
        self.share.prefix()
    }

    /// Claims CM service `sid` at this address for this process, so that
    /// REQs for it reach this transport whichever process sharing the
    /// address receives them ([`Share::claim_service`]).
    pub fn claim_service(&self, sid: u64) -> io::Result<ServiceClaim> {
        self.share.claim_service(sid)
    }

    /// The bound socket address, `(addr, 4791)`.
    pub fn local_addr(&self) -> SocketAddr {
        SocketAddr::new(self.addr, ROCE_V2_PORT)
    }

    /// The UDP source port of every packet sent: 4791. Give it to the
    /// engine (`EngineConfig::udp_src_port = Some(4791)`), which covers it
    /// with the ICRC.
    pub fn src_port(&self) -> u16 {
        ROCE_V2_PORT
    }

    /// How packets are received: [`RecvMode::Plain`] or [`RecvMode::Raw`].
    pub fn recv_mode(&self) -> RecvMode {
        if self.raw.is_some() {
            RecvMode::Raw
        } else {
            RecvMode::Plain
        }
    }

    /// What happened so far.
    pub fn stats(&self) -> &UdpStats {
        &self.stats
    }

    /// The socket to wait on for readability (the raw socket in raw mode).
    pub fn recv_fd(&self) -> BorrowedFd<'_> {
        self.raw.as_ref().unwrap_or(&self.udp).as_fd()
    }

    /// The socket to wait on for writability (always the UDP socket).
    pub fn send_fd(&self) -> BorrowedFd<'_> {
        self.udp.as_fd()
    }

    /// The receive and send buffer sizes the kernel granted (it reports
    /// twice what was asked for, counting its bookkeeping).
    pub fn buffer_sizes(&self) -> io::Result<(usize, usize)> {
        let rcv = getsockopt_int(
            self.recv_fd().as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVBUF,
        )?;
        let snd = getsockopt_int(self.udp.as_raw_fd(), libc::SOL_SOCKET, libc::SO_SNDBUF)?;
        Ok((rcv.max(0) as usize, snd.max(0) as usize))
    }

    /// Sends packets, in order, with `sendmmsg(2)`, each to `(t.dst, 4791)`
    /// with its TOS/traffic class and TTL/hop limit (as ancillary data
    /// where they differ from the socket's own; a hop limit of 0 means the
    /// socket's default). Never blocks.
    ///
    /// Returns how many packets from the front went to the kernel; fewer
    /// than `pkts.len()` when the socket buffer is full (send the rest
    /// later: [`Self::wait_writable`]) or when a later packet fails (the
    /// next call reports it). An `Err` is always about `pkts[0]`, which
    /// cannot be sent (wrong source address or port, wrong address family,
    /// too large for the path MTU, no route...); skip it.
    pub fn send_batch(&mut self, pkts: &[Transmit]) -> io::Result<usize> {
        self.send_batch_reporting(pkts, None)
    }

    /// [`Self::send_batch`], calling `sent` for each packet the kernel
    /// took, in order, with what it went out as ([`SentAs`]: the IPv4
    /// identification of its segment and the ICRC it carried), for a
    /// capture that shows what went on the wire.
    pub fn send_batch_with(
        &mut self,
        pkts: &[Transmit],
        sent_as: &mut dyn FnMut(&Transmit, SentAs),
    ) -> io::Result<usize> {
        self.send_batch_reporting(pkts, Some(sent_as))
    }

    /// Both of the above: without a report (no capture), nothing is worked
    /// out per packet sent.
    fn send_batch_reporting(
        &mut self,
        pkts: &[Transmit],
        mut sent_as: Option<&mut SentReport<'_>>,
    ) -> io::Result<usize> {
        let mut sent = 0;
        while sent < pkts.len() {
            let chunk = &pkts[sent..pkts.len().min(sent + BATCH)];
            let mut valid = 0;
            for t in chunk {
                if let Err(e) = self.check_transmit(t) {
                    if sent + valid == 0 {
                        return Err(e);
                    }
                    break;
                }
                valid += 1;
            }
            if valid == 0 {
                return Ok(sent);
            }
            let r = if self.gso() {
                self.send_gso(&chunk[..valid])
            } else {
                self.sendmmsg(&chunk[..valid])
            };
            match r {
                Ok(n) => {
                    if let Some(report) = sent_as.as_mut() {
                        for (j, t) in chunk[..n].iter().enumerate() {
                            let ip_id = if self.gso() { self.slots.ids[j] } else { 0 };
                            let icrc = match ip_id {
                                0 => (t.payload.len().checked_sub(ICRC_LEN))
                                    .and_then(|at| t.payload[at..].try_into().ok())
                                    .unwrap_or([0; ICRC_LEN]),
                                _ => self.slots.icrcs[j],
                            };
                            report(t, SentAs { ip_id, icrc });
                        }
                    }
                    self.stats.tx_packets += n as u64;
                    self.stats.tx_batches += u64::from(n > 0);
                    self.stats.tx_bytes += chunk[..n]
                        .iter()
                        .map(|t| t.payload.len() as u64)
                        .sum::<u64>();
                    sent += n;
                    if n == 0 {
                        return Ok(sent);
                    }
                    if n < valid {
                        // The kernel stopped at packet n; the next call
                        // says why (a full buffer, or an error to report).
                        continue;
                    }
                    if valid < chunk.len() {
                        return Ok(sent);
                    }
                }
                Err(e) if is_full(&e) => {
                    self.stats.tx_full += 1;
                    return Ok(sent);
                }
                // Reported again by the next call, with this packet first.
                Err(_) if sent > 0 => return Ok(sent),
                Err(e) => {
                    let dst = SocketAddr::new(pkts[0].dst, ROCE_V2_PORT);
                    return Err(context(
                        e,
                        format!("send to {dst} from {}", self.local_addr()),
                    ));
                }
            }
        }
        Ok(sent)
    }

    /// Waits until the UDP socket has room to send, or `timeout` passes
    /// (`None`: no limit). Returns whether it has room.
    pub fn wait_writable(&self, timeout: Option<Duration>) -> io::Result<bool> {
        wait_fd(self.udp.as_raw_fd(), libc::POLLOUT, timeout)
    }

    /// Waits up to `timeout` until a datagram is ready to receive; true if
    /// one is.
    pub fn wait_readable(&self, timeout: Option<Duration>) -> io::Result<bool> {
        let mut pfds = [
            libc::pollfd {
                fd: self.recv_fd().as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: self.share.fd().as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: self.groups.fd().as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        let r = ppoll(&mut pfds, timeout);
        if pfds[1].revents != 0 {
            self.fwd
                .ready
                .store(true, std::sync::atomic::Ordering::Relaxed);
        }
        r
    }

    /// A handle that waits for incoming datagrams on its own duplicate of
    /// the receiving socket, so one thread can wait while another holds the
    /// transport (behind a lock) to send.
    pub fn waiter(&self) -> io::Result<Waiter> {
        let eventfd = || {
            // SAFETY: plain system call; the descriptor is checked before use.
            let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
            let fd = cvt(fd).map_err(|e| context(e, "eventfd"))?;
            // SAFETY: `fd` is a new descriptor that nothing else owns.
            Ok::<_, io::Error>(unsafe { OwnedFd::from_raw_fd(fd) })
        };
        Ok(Waiter {
            fd: self.recv_fd().try_clone_to_owned()?,
            fwd: self.share.fd().try_clone()?,
            fwd_ready: self.fwd.ready.clone(),
            groups: self.groups.fd().try_clone_to_owned()?,
            wake: eventfd()?,
            wake_receiver: eventfd()?,
        })
    }

    /// Receives at least one datagram, waiting up to `timeout` (`None`: no
    /// limit; `Some(Duration::ZERO)`: only what is queued), and appends up
    /// to [`BATCH`] of them to `out` (each datagram the kernel hands over
    /// may hold several packets, which are appended one by one). Returns how many were appended: 0 when the time ran out.
    pub fn recv_batch(
        &mut self,
        timeout: Option<Duration>,
        out: &mut Vec<Received>,
    ) -> io::Result<usize> {
        self.recv_with(timeout, |d| {
            out.push(Received {
                meta: d.meta,
                data: d.payload.to_vec(),
            })
        })
    }

    /// As [`Self::recv_batch`], without copying: `f` sees each datagram in
    /// the transport's own buffers (for example to pass it straight to
    /// `Engine::handle_datagram`).
    pub fn recv_with<F: FnMut(Datagram<'_>)>(
        &mut self,
        timeout: Option<Duration>,
        mut f: F,
    ) -> io::Result<usize> {
        if timeout == Some(Duration::ZERO) {
            // Only what is queued (a spinning receiver's look): one
            // receive, no clock.
            return Ok(self.recv_once(&mut f)?.1);
        }
        // An unrepresentable deadline is as good as none.
        let deadline = timeout.map(|d| Instant::now().checked_add(d));
        loop {
            let (got, handed) = self.recv_once(&mut f)?;
            if handed > 0 {
                return Ok(handed);
            }
            let wait = match deadline {
                None | Some(None) => None,
                Some(Some(d)) => {
                    let now = Instant::now();
                    if now >= d {
                        return Ok(0);
                    }
                    Some(d - now)
                }
            };
            if got > 0 {
                continue; // all filtered out: look again before waiting
            }
            self.wait_readable(wait)?;
        }
    }

    /// One `recvmmsg(2)`: returns (datagrams received, datagrams handed out).
    fn recv_once(&mut self, f: &mut dyn FnMut(Datagram<'_>)) -> io::Result<(usize, usize)> {
        let fd = self.recv_fd().as_raw_fd();
        let raw_mode = self.raw.is_some();
        let slot = GSO_DATAGRAM;
        // A plain socket with UDP_GRO says in a control message how long
        // the packets of a coalesced datagram are (and writes none for a
        // datagram on its own).
        let want_cmsg = !raw_mode;
        self.rx.ready();
        let RxSlots {
            names, hdrs, dirty, ..
        } = &mut *self.rx;
        let n = loop {
            // SAFETY: every header points at live buffers of the lengths
            // given (names, iovs, cbufs and bufs outlive the call); the
            // kernel writes at most that much.
            let r = unsafe {
                libc::recvmmsg(
                    fd,
                    hdrs.as_mut_ptr(),
                    BATCH as libc::c_uint,
                    libc::MSG_DONTWAIT as _,
                    std::ptr::null_mut(),
                )
            };
            if r >= 0 {
                *dirty = r as usize;
                break r as usize;
            }
            let e = io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::EINTR) => continue,
                // Nothing on the socket; forwarded datagrams may still wait.
                Some(libc::EAGAIN) => break 0,
                // Errors queued by ICMP (only on connected sockets, or
                // with IP_RECVERR): nothing to receive, nothing wrong here.
                Some(libc::ECONNREFUSED | libc::EHOSTUNREACH | libc::ENETUNREACH) => break 0,
                _ => return Err(context(e, format!("receive on {}", self.local_addr()))),
            }
        };
        let mut handed = 0;
        for (i, h) in hdrs.iter().enumerate().take(n) {
            let len = (h.msg_len as usize).min(slot);
            if h.msg_hdr.msg_flags & libc::MSG_TRUNC != 0 {
                self.stats.rx_truncated += 1;
                continue;
            }
            let data = &self.bufs[i * slot..i * slot + len];
            if raw_mode {
                // A datagram longer than any packet is no packet of its
                // own: its ICRC as one (64 KiB of CRC for a GSO sender's
                // super-packet, which the split below checks segment by
                // segment anyway) is looked at only if no split explains it.
                let whole = len <= MAX_DATAGRAM;
                let Some(d) = raw_datagram(self.addr, data, whole, &mut self.stats) else {
                    continue;
                };
                if d.meta.icrc != IcrcStatus::Bad {
                    // (`whole`: no longer than a packet can be.)
                    handed += deliver(&self.share, &mut self.stats, true, d, f);
                    continue;
                }
                // Maybe a loopback GSO sender's super-packet (whether this
                // transport sends with GSO or not): only packets whose
                // ICRC failed are tried.
                let ip = d.ip_packet.unwrap_or_default();
                match split_super(ip, d.payload, &mut self.segs) {
                    Split::One => handed += deliver(&self.share, &mut self.stats, true, d, f),
                    // Right as one packet: too long, as without GSO.
                    Split::Malformed if !whole && raw_icrc_ok(data) => self.stats.rx_truncated += 1,
                    Split::Malformed => self.stats.rx_gso_malformed += 1,
                    Split::Many => {
                        self.stats.rx_gso_split += 1;
                        let meta = d.meta;
                        // The IP and UDP headers, as the super-packet has them.
                        let hl = usize::from(ip[0] & 0x0f) * 4 + 8;
                        let mut head = [0u8; 68];
                        head[..hl].copy_from_slice(&ip[..hl]);
                        let start = i * slot;
                        for (k, &(off, n, icrc)) in self.segs.iter().enumerate() {
                            // Segment k's own headers go right before its
                            // payload, over the end of the segment before
                            // (handed out already): each segment is then
                            // the IP packet a wire would have carried.
                            let at = start + off;
                            segment_headers(&head[..hl], k, n, &mut self.bufs[at..at + hl]);
                            let ip_packet = &self.bufs[at..at + hl + n];
                            let seg = Datagram {
                                meta: RecvMeta { icrc, ..meta },
                                payload: &ip_packet[hl..],
                                ip_packet: Some(ip_packet),
                            };
                            handed += deliver(&self.share, &mut self.stats, true, seg, f);
                        }
                    }
                }
                continue;
            }
            let Some(from) = from_sockaddr(&names[i], h.msg_hdr.msg_namelen) else {
                self.stats.rx_ignored += 1;
                continue;
            };
            let seg_len = match want_cmsg {
                true => gro_segment_size(&h.msg_hdr).filter(|&g| g > 0 && g < len),
                false => None,
            };
            if seg_len.is_some() {
                self.stats.rx_gso_split += 1;
            } else if len > MAX_DATAGRAM {
                // Larger than any RoCE packet: as without GSO.
                self.stats.rx_truncated += 1;
                continue;
            }
            let seg_len = seg_len.unwrap_or(len.max(1));
            for (k, chunk) in data.chunks(seg_len).enumerate() {
                let icrc = plain_verdict(
                    &mut self.id_solver,
                    &mut self.id_deltas,
                    k,
                    from.ip(),
                    self.addr,
                    from.port(),
                    chunk,
                );
                let d = Datagram {
                    meta: RecvMeta {
                        src: from.ip().to_canonical(),
                        dst: self.addr,
                        src_port: from.port(),
                        icrc,
                    },
                    payload: chunk,
                    ip_packet: None,
                };
                handed += deliver(&self.share, &mut self.stats, false, d, f);
            }
            if data.is_empty() {
                // An empty datagram: handed out (as Bad) as before.
                let d = Datagram {
                    meta: RecvMeta {
                        src: from.ip().to_canonical(),
                        dst: self.addr,
                        src_port: from.port(),
                        icrc: IcrcStatus::Bad,
                    },
                    payload: data,
                    ip_packet: None,
                };
                handed += deliver(&self.share, &mut self.stats, false, d, f);
            }
        }
        // Datagrams other processes on the address passed on.
        let mut n = n;
        let look = self.fwd.should_look();
        while look && n < BATCH {
            let Some((meta, r)) = self.share.recv(&mut self.fwd_buf) else {
                break;
            };
            self.fwd.found();
            n += 1;
            let s = &mut self.stats;
            s.rx_packets += 1;
            s.rx_bytes += r.len() as u64;
            s.rx_forwarded_in += 1;
            match meta.icrc {
                IcrcStatus::Ok => s.icrc_ok += 1,
                IcrcStatus::Bad => s.icrc_bad += 1,
                IcrcStatus::Unverified => s.icrc_unverified += 1,
            }
            handed += 1;
            f(Datagram {
                meta,
                payload: &self.fwd_buf[r],
                ip_packet: None,
            });
        }
        // Datagrams to the multicast groups joined (none joined: no call).
        if !self.groups.is_empty() && n < BATCH {
            let (solver, deltas, stats) =
                (&mut self.id_solver, &mut self.id_deltas, &mut self.stats);
            let got = self
                .groups
                .recv(&mut self.fwd_buf, BATCH - n, |group, from, data| {
                    let icrc =
                        plain_verdict(solver, deltas, 0, from.ip(), group, from.port(), data);
                    stats.rx_multicast += 1;
                    stats.rx_packets += 1;
                    stats.rx_bytes += data.len() as u64;
                    match icrc {
                        IcrcStatus::Ok => stats.icrc_ok += 1,
                        IcrcStatus::Bad => stats.icrc_bad += 1,
                        IcrcStatus::Unverified => stats.icrc_unverified += 1,
                    }
                    // Not through `deliver`: every process in the group got
                    // its own copy from the kernel, so none is passed on.
                    f(Datagram {
                        meta: RecvMeta {
                            src: from.ip().to_canonical(),
                            dst: group,
                            src_port: from.port(),
                            icrc,
                        },
                        payload: data,
                        ip_packet: None,
                    });
                });
            n += got;
            handed += got;
        }
        Ok((n, handed))
    }

    fn check_transmit(&self, t: &Transmit) -> io::Result<()> {
        let bad = |why: String| Err(io::Error::new(io::ErrorKind::InvalidInput, why));
        if t.src != self.addr {
            return bad(format!(
                "packet from {} on a transport bound to {}: its ICRC would not match",
                t.src, self.addr
            ));
        }
        if t.src_port != ROCE_V2_PORT {
            return bad(format!(
                "packet from UDP port {}, but a socket bound to {ROCE_V2_PORT} sends from \
                 {ROCE_V2_PORT}: set EngineConfig::udp_src_port = Some({ROCE_V2_PORT})",
                t.src_port
            ));
        }
        if t.dst.is_ipv4() != self.addr.is_ipv4() {
            return bad(format!(
                "packet to {} on a transport bound to {}: wrong address family",
                t.dst, self.addr
            ));
        }
        Ok(())
    }

    /// How many packets from the front of `pkts` go out as one GSO send:
    /// same destination, TOS and TTL, equal lengths (the last may be
    /// shorter), at most [`GSO_MAX_SEGMENTS`] and [`GSO_MAX_BYTES`].
    fn gso_run(&self, pkts: &[Transmit]) -> usize {
        match pkts.first() {
            Some(t) if self.gso.allows(t.dst) => gso_run(pkts, &self.no_gso),
            _ => 1,
        }
    }

    /// One `sendmmsg(2)` of at most [`BATCH`] checked packets, each run of
    /// packets that [`Self::gso_run`] finds as one message with a
    /// `UDP_SEGMENT` control message. Returns how many packets went, as
    /// [`Self::sendmmsg`] does.
    fn send_gso(&mut self, pkts: &[Transmit]) -> io::Result<usize> {
        debug_assert!(pkts.len() <= BATCH);
        let mut runs = [0u8; BATCH];
        let mut nruns = 0;
        let mut i = 0;
        while i < pkts.len() {
            let m = self.gso_run(&pkts[i..]);
            runs[nruns] = m as u8;
            nruns += 1;
            i += m;
        }
        self.slots.ids[..pkts.len()].fill(0);
        if nruns == pkts.len() {
            // No run of two: exactly the path without GSO.
            return self.sendmmsg(pkts);
        }
        // SAFETY: CMSG_SPACE is pure arithmetic.
        let space = unsafe { libc::CMSG_SPACE(size_of::<libc::c_int>() as u32) } as usize;
        // SAFETY: as above.
        let seg_space = unsafe { libc::CMSG_SPACE(size_of::<u16>() as u32) } as usize;
        debug_assert!(2 * space + seg_space <= size_of::<Cbuf>());
        let fd = self.udp.as_raw_fd();
        let v6 = self.addr.is_ipv6();
        let (level, tos, ttl) = if v6 {
            (libc::IPPROTO_IPV6, libc::IPV6_TCLASS, libc::IPV6_HOPLIMIT)
        } else {
            (libc::IPPROTO_IP, libc::IP_TOS, libc::IP_TTL)
        };
        let Slots {
            names,
            hdrs,
            cbufs,
            gso_iovs,
            icrcs,
            ids,
            ..
        } = &mut *self.slots;
        let mut first = 0;
        let mut iov = 0;
        for r in 0..nruns {
            let m = usize::from(runs[r]);
            let run = &pkts[first..first + m];
            let t = &run[0];
            let namelen = to_sockaddr(SocketAddr::new(t.dst, ROCE_V2_PORT), &mut names[r]);
            let iov0 = iov;
            for (k, p) in run.iter().enumerate() {
                let len = p.payload.len();
                if k == 0 || v6 || len < ICRC_LEN {
                    gso_iovs[iov] = libc::iovec {
                        // The kernel only reads through this pointer.
                        iov_base: p.payload.as_ptr() as *mut libc::c_void,
                        iov_len: len,
                    };
                    iov += 1;
                } else {
                    // Segment k leaves with IPv4 identification k.
                    let carried = u32::from_le_bytes(
                        p.payload[len - ICRC_LEN..].try_into().expect("4 bytes"),
                    );
                    let crc = carried ^ self.id_deltas.delta(len - ICRC_LEN, k as u16);
                    icrcs[first + k] = crc.to_le_bytes();
                    ids[first + k] = k as u16;
                    gso_iovs[iov] = libc::iovec {
                        iov_base: p.payload.as_ptr() as *mut libc::c_void,
                        iov_len: len - ICRC_LEN,
                    };
                    gso_iovs[iov + 1] = libc::iovec {
                        iov_base: icrcs[first + k].as_mut_ptr().cast(),
                        iov_len: ICRC_LEN,
                    };
                    iov += 2;
                }
            }
            let (cmsgs, ncmsgs) = self.defaults.ancillary(t, tos, ttl);
            let cbuf = cbufs[r].as_mut_ptr().cast::<u8>();
            let mut clen = 0;
            if ncmsgs > 0 || m > 1 {
                cbufs[r] = [0; 10];
            }
            for &(ty, val) in &cmsgs[..ncmsgs] {
                // SAFETY: each cmsg lies within the 80-byte, 8-aligned
                // buffer (2 * space + seg_space <= 80); the data of an
                // `int` cmsg fits in its space.
                unsafe {
                    let c = cbuf.add(clen).cast::<libc::cmsghdr>();
                    (*c).cmsg_level = level;
                    (*c).cmsg_type = ty;
                    (*c).cmsg_len = libc::CMSG_LEN(size_of::<libc::c_int>() as u32) as _;
                    std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<libc::c_int>(), val);
                }
                clen += space;
            }
            if m > 1 {
                // SAFETY: as above, for a `u16` cmsg.
                unsafe {
                    let c = cbuf.add(clen).cast::<libc::cmsghdr>();
                    (*c).cmsg_level = libc::IPPROTO_UDP;
                    (*c).cmsg_type = UDP_SEGMENT;
                    (*c).cmsg_len = libc::CMSG_LEN(size_of::<u16>() as u32) as _;
                    std::ptr::write_unaligned(
                        libc::CMSG_DATA(c).cast::<u16>(),
                        t.payload.len() as u16,
                    );
                }
                clen += seg_space;
            }
            let h = &mut hdrs[r].msg_hdr;
            h.msg_name = (&mut names[r] as *mut libc::sockaddr_storage).cast();
            h.msg_namelen = namelen;
            h.msg_iov = &mut gso_iovs[iov0];
            h.msg_iovlen = (iov - iov0) as _;
            h.msg_control = if clen == 0 {
                std::ptr::null_mut()
            } else {
                cbuf.cast()
            };
            h.msg_controllen = clen as _;
            h.msg_flags = 0;
            hdrs[r].msg_len = 0;
            first += m;
        }
        let r = loop {
            // SAFETY: every header points at live buffers of the lengths
            // given (names, gso_iovs, icrcs, cbufs and the payloads
            // outlive the call).
            let r = unsafe {
                libc::sendmmsg(
                    fd,
                    hdrs.as_mut_ptr(),
                    nruns as libc::c_uint,
                    libc::MSG_DONTWAIT as _,
                )
            };
            if r >= 0 {
                break Ok(r as usize);
            }
            let e = io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::EINTR) {
                break Err(e);
            }
        };
        match r {
            Ok(sent) => {
                let mut n = 0;
                for &m in &runs[..sent] {
                    let m = usize::from(m);
                    if m > 1 {
                        self.stats.tx_gso_sends += 1;
                        self.stats.tx_gso_segments += m as u64;
                    }
                    n += m;
                }
                Ok(n)
            }
            // A full buffer: as without GSO (the caller waits, or drops
            // the rest and the protocol retries).
            Err(e) if is_full(&e) => Err(e),
            Err(e) if runs[0] == 1 => Err(e),
            Err(_) => {
                // The kernel refused the GSO send (a segment larger than
                // the path MTU, a device without checksum offload...):
                // the same packets one by one say which, if any, fails.
                self.stats.tx_gso_fallbacks += 1;
                let m = usize::from(runs[0]);
                self.slots.ids[..m].fill(0);
                let n = self.sendmmsg(&pkts[..m])?;
                if n > 0 && !self.no_gso.contains(&pkts[0].dst) && self.no_gso.len() < 1024 {
                    self.no_gso.push(pkts[0].dst);
                }
                Ok(n)
            }
        }
    }

    /// One `sendmmsg(2)` of at most [`BATCH`] checked packets.
    fn sendmmsg(&mut self, pkts: &[Transmit]) -> io::Result<usize> {
        debug_assert!(pkts.len() <= BATCH);
        // SAFETY: CMSG_SPACE is pure arithmetic.
        let space = unsafe { libc::CMSG_SPACE(size_of::<libc::c_int>() as u32) } as usize;
        debug_assert!(2 * space <= size_of::<Cbuf>());
        let fd = self.udp.as_raw_fd();
        let Slots {
            names,
            iovs,
            hdrs,
            cbufs,
            ..
        } = &mut *self.slots;
        let v6 = self.addr.is_ipv6();
        let (level, tos, ttl) = if v6 {
            (libc::IPPROTO_IPV6, libc::IPV6_TCLASS, libc::IPV6_HOPLIMIT)
        } else {
            (libc::IPPROTO_IP, libc::IP_TOS, libc::IP_TTL)
        };
        for (i, t) in pkts.iter().enumerate() {
            let namelen = to_sockaddr(SocketAddr::new(t.dst, ROCE_V2_PORT), &mut names[i]);
            iovs[i] = libc::iovec {
                // The kernel only reads through this pointer.
                iov_base: t.payload.as_ptr() as *mut libc::c_void,
                iov_len: t.payload.len(),
            };
            let (cmsgs, ncmsgs) = self.defaults.ancillary(t, tos, ttl);
            if ncmsgs > 0 {
                cbufs[i] = [0; 10];
            }
            let cbuf = cbufs[i].as_mut_ptr().cast::<u8>();
            for (k, &(ty, val)) in cmsgs[..ncmsgs].iter().enumerate() {
                // SAFETY: cmsg k lies at k * space within the 80-byte,
                // 8-aligned buffer (2 * space <= 80); the data of an `int`
                // cmsg fits in its space.
                unsafe {
                    let c = cbuf.add(k * space).cast::<libc::cmsghdr>();
                    (*c).cmsg_level = level;
                    (*c).cmsg_type = ty;
                    (*c).cmsg_len = libc::CMSG_LEN(size_of::<libc::c_int>() as u32) as _;
                    std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<libc::c_int>(), val);
                }
            }
            let h = &mut hdrs[i].msg_hdr;
            h.msg_name = (&mut names[i] as *mut libc::sockaddr_storage).cast();
            h.msg_namelen = namelen;
            h.msg_iov = &mut iovs[i];
            h.msg_iovlen = 1;
            if ncmsgs == 0 {
                h.msg_control = std::ptr::null_mut();
            } else {
                h.msg_control = cbuf.cast();
            }
            h.msg_controllen = (ncmsgs * space) as _;
            h.msg_flags = 0;
            hdrs[i].msg_len = 0;
        }
        loop {
            // SAFETY: every header points at live buffers of the lengths
            // given (names, iovs, cbufs and the payloads outlive the call).
            let r = unsafe {
                libc::sendmmsg(
                    fd,
                    hdrs.as_mut_ptr(),
                    pkts.len() as libc::c_uint,
                    libc::MSG_DONTWAIT as _,
                )
            };
            if r >= 0 {
                return Ok(r as usize);
            }
            let e = io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::EINTR) {
                return Err(e);
            }
        }
    }
}

/// The TOS (traffic class) and TTL (hop limit) a socket gives packets sent
/// without ancillary data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct SocketDefaults {
    tos: u8,
    ttl: u8,
}

impl SocketDefaults {
    fn query(s: &OwnedFd, v6: bool) -> io::Result<Self> {
        let (level, tos, ttl) = if v6 {
            (
                libc::IPPROTO_IPV6,
                libc::IPV6_TCLASS,
                libc::IPV6_UNICAST_HOPS,
            )
        } else {
            (libc::IPPROTO_IP, libc::IP_TOS, libc::IP_TTL)
        };
        let fd = s.as_raw_fd();
        // An unset TTL or hop limit reads as the system's default; an
        // unset traffic class as 0.
        Ok(SocketDefaults {
            tos: getsockopt_int(fd, level, tos)?.clamp(0, 255) as u8,
            ttl: getsockopt_int(fd, level, ttl)?.clamp(0, 255) as u8,
        })
    }

    /// The control messages (type, value) `t` needs, and how many: only
    /// for what differs from the socket's own settings: the kernel's
    /// handling of ancillary data cost 0.3 µs per datagram for one control
    /// message and 0.5 µs for two on this project's test machine (a
    /// `sendmmsg` of two small datagrams over loopback, received: 6.3 µs
    /// without, 7.2 µs with two each). A hop limit of 0 asks for the
    /// socket's default (IPv4 refuses a TTL of 0).
    fn ancillary(
        self,
        t: &Transmit,
        tos_type: libc::c_int,
        ttl_type: libc::c_int,
    ) -> ([(libc::c_int, libc::c_int); 2], usize) {
        let mut cmsgs = [(0, 0); 2];
        let mut n = 0;
        if t.traffic_class != self.tos {
            cmsgs[n] = (tos_type, libc::c_int::from(t.traffic_class));
            n += 1;
        }
        if t.hop_limit != 0 && t.hop_limit != self.ttl {
            cmsgs[n] = (ttl_type, libc::c_int::from(t.hop_limit));
            n += 1;
        }
        (cmsgs, n)
    }
}

fn is_full(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EAGAIN | libc::ENOBUFS))
}

fn is_broadcast(addr: IpAddr) -> bool {
    matches!(addr, IpAddr::V4(a) if a.is_broadcast())
}

/// Hands a datagram to `f`, or passes it on to the process sharing the
/// address that owns it ([`crate::share`]), and counts it. Returns 1 if `f`
/// saw it, 0 if not.
fn deliver(
    share: &Share,
    stats: &mut UdpStats,
    raw_mode: bool,
    d: Datagram<'_>,
    f: &mut dyn FnMut(Datagram<'_>),
) -> usize {
    let owner = share.owner(d.payload);
    if raw_mode
        && owner.is_none()
        && rxe_core::mad::is_gsi_packet(d.payload)
        && !share.answers_unowned()
    {
        // A MAD no agent owns: in raw mode every process sees it, and one
        // answers (crate::share).
        stats.rx_others += 1;
        return 0;
    }
    if let Some(p) = owner.filter(|&p| p != share.prefix()) {
        // Another process's, if one holds the prefix: in raw mode it sees
        // the packet itself; a plain socket's datagram is passed on. A
        // prefix nobody holds (a QP of a process gone, a MAD for an agent
        // gone) is the engine's to answer or count, as before sharing.
        if raw_mode {
            if share.is_held(p) {
                stats.rx_others += 1;
                return 0;
            }
        } else {
            match share.forward(p, &d.meta, d.payload) {
                Forward::Sent => {
                    stats.rx_forwarded += 1;
                    return 0;
                }
                Forward::Full => {
                    stats.rx_forward_full += 1;
                    return 0;
                }
                Forward::Nobody => {}
            }
        }
        stats.rx_unowned += 1;
    }
    stats.rx_packets += 1;
    stats.rx_bytes += d.payload.len() as u64;
    match d.meta.icrc {
        IcrcStatus::Ok => stats.icrc_ok += 1,
        IcrcStatus::Bad => stats.icrc_bad += 1,
        IcrcStatus::Unverified => stats.icrc_unverified += 1,
    }
    f(d);
    1
}

/// The segment size in a `UDP_GRO` control message, if there is one.
fn gro_segment_size(h: &libc::msghdr) -> Option<usize> {
    if h.msg_control.is_null() || h.msg_controllen == 0 {
        return None;
    }
    // SAFETY: the kernel wrote msg_controllen bytes of well-formed control
    // messages into the buffer msg_control points at (a `Cbuf`, aligned
    // for cmsghdr); CMSG_FIRSTHDR and CMSG_NXTHDR stay within it.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(h);
        while !c.is_null() {
            if (*c).cmsg_level == libc::IPPROTO_UDP
                && (*c).cmsg_type == UDP_GRO
                && (*c).cmsg_len as usize
                    >= libc::CMSG_LEN(size_of::<libc::c_int>() as u32) as usize
            {
                let v = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast::<libc::c_int>());
                return usize::try_from(v).ok();
            }
            c = libc::CMSG_NXTHDR(h, c);
        }
    }
    None
}

/// How many packets from the front of `pkts` one GSO send carries: those
/// to the same destination with the same TOS and TTL (one set of control
/// messages for all), of the first one's length (the last may be shorter:
/// the kernel cuts the buffer into pieces of the first one's size), at
/// most [`GSO_MAX_SEGMENTS`] and [`GSO_MAX_BYTES`]. 1: no GSO.
fn gso_run(pkts: &[Transmit], no_gso: &[IpAddr]) -> usize {
    let Some(t) = pkts.first() else {
        return 0;
    };
    let seg = t.payload.len();
    if !(BTH_LEN + ICRC_LEN..=GSO_MAX_BYTES / 2).contains(&seg) || no_gso.contains(&t.dst) {
        return 1;
    }
    let mut total = seg;
    let mut m = 1;
    while m < pkts.len().min(GSO_MAX_SEGMENTS) {
        let p = &pkts[m];
        let len = p.payload.len();
        if p.dst != t.dst
            || p.traffic_class != t.traffic_class
            || p.hop_limit != t.hop_limit
            || len == 0
            || len > seg
            || total + len > GSO_MAX_BYTES
        {
            break;
        }
        total += len;
        m += 1;
        if len < seg {
            break;
        }
    }
    m
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
/// and SipHash was ~90 of the ~160 instructions a lookup cost.
#[derive(Debug, Default)]
struct IdDeltas {
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
    fn delta(&mut self, n: usize, id: u16) -> u32 {
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
        let base = icrc::compute_parts(&ip, &udp, &zeros).unwrap_or(0);
        let mut out = [0u32; 8];
        for (bit, o) in out.iter_mut().enumerate() {
            ip[5] = 1 << bit; // the ID's low byte
            *o = icrc::compute_parts(&ip, &udp, &zeros).unwrap_or(0) ^ base;
        }
        out
    }
}

/// What a raw-mode datagram that failed its ICRC check turned out to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Split {
    /// One packet (with a bad ICRC): handed out as it is, as without GSO.
    One,
    /// Several packets, in the segment list.
    Many,
    /// Longer than any packet, and no segment size explains it: dropped.
    Malformed,
}

/// Writes the IPv4 and UDP headers of segment `k` (`n` bytes of UDP
/// payload) of a super-packet whose headers are `head` into `out`: the
/// lengths of one segment, identification + k, a fresh header checksum
/// and UDP checksum 0 (none), as the kernel's segmentation would have
/// written them but for the UDP checksum.
fn segment_headers(head: &[u8], k: usize, n: usize, out: &mut [u8]) {
    let ihl = head.len() - 8;
    out.copy_from_slice(head);
    out[2..4].copy_from_slice(&((ihl + 8 + n) as u16).to_be_bytes());
    let id = u16::from_be_bytes([head[4], head[5]]).wrapping_add(k as u16);
    out[4..6].copy_from_slice(&id.to_be_bytes());
    out[10..12].fill(0);
    let sum = out[..ihl]
        .chunks(2)
        .map(|w| u32::from(u16::from_be_bytes([w[0], w[1]])))
        .sum::<u32>();
    let sum = (sum & 0xffff) + (sum >> 16);
    let sum = (sum & 0xffff) + (sum >> 16);
    out[10..12].copy_from_slice(&(!(sum as u16)).to_be_bytes());
    out[ihl + 4..ihl + 6].copy_from_slice(&((8 + n) as u16).to_be_bytes());
    out[ihl + 6..ihl + 8].fill(0);
}

/// The most ICRCs [`split_super`] computes to find a segment size.
const SPLIT_TRIES: usize = 8;

/// Splits an IPv4 packet that may be a loopback GSO sender's unsegmented
/// super-packet (a raw socket sees it before the UDP layer cuts it up)
/// into the packets it carries: `segs` gets (offset in the UDP payload,
/// length, ICRC verdict) of each.
///
/// The super-packet's header is the one segment 0 gets (its
/// identification `id`); segment k gets `id + k` and its own lengths. The
/// segment size is not written anywhere, so candidates are tried: first
/// the sizes of full packets at RoCE's MTUs (the middle packets of a
/// message), then every size from the smallest that fits the segment
/// limit upwards. A candidate must put something that looks like a BTH
/// (transport version 0, the first packet's P_Key, reserved bits clear) at
/// every segment start, and then the first segment's ICRC must be right
/// for `id`: a wrong size passes that with odds of 2^-32. At most
/// [`SPLIT_TRIES`] ICRCs are computed. A candidate whose every segment
/// verifies wins; failing that the first whose first segment does (its
/// other segments are then handed out as Bad).
fn split_super(ip: &[u8], payload: &[u8], segs: &mut Vec<(usize, usize, IcrcStatus)>) -> Split {
    segs.clear();
    let min = BTH_LEN + ICRC_LEN;
    let ihl = usize::from(ip.first().map_or(0, |b| b & 0x0f)) * 4;
    let total = payload.len();
    if ihl < 20 || ip.len() < ihl + 8 || total < 2 * min {
        return Split::One;
    }
    let hdr = &ip[..ihl];
    let udp = &ip[ihl..ihl + 8];
    let id = u16::from_be_bytes([hdr[4], hdr[5]]);
    let pkey = [payload[2], payload[3]];
    let bth_like =
        |b: &[u8]| b.len() >= min && b[1] & 0x0f == 0 && b[2..4] == pkey && b[8] & 0x7f == 0;
    // Segment k (offset off, length n) with ID id + k.
    let seg_ok = |off: usize, n: usize, k: usize| {
        let mut h = [0u8; 60];
        let h = &mut h[..ihl];
        h.copy_from_slice(hdr);
        h[2..4].copy_from_slice(&((ihl + 8 + n) as u16).to_be_bytes());
        h[4..6].copy_from_slice(&id.wrapping_add(k as u16).to_be_bytes());
        let mut u = [0u8; 8];
        u.copy_from_slice(udp);
        u[4..6].copy_from_slice(&((8 + n) as u16).to_be_bytes());
        let seg = &payload[off..off + n];
        let (body, tail) = seg.split_at(n - ICRC_LEN);
        let carried = u32::from_le_bytes([tail[0], tail[1], tail[2], tail[3]]);
        icrc::compute_parts(h, &u, body).is_ok_and(|c| c == carried)
    };
    let lo = min.max(total.div_ceil(128));
    let hi = (total - 1).min(MAX_DATAGRAM);
    let plausible = |s: usize| {
        if s < lo || s > hi {
            return false;
        }
        let n = total.div_ceil(s);
        let last = total - (n - 1) * s;
        last >= min && (1..n).all(|j| bth_like(&payload[j * s..]))
    };
    let guesses = [12usize, 16, 28, 32]
        .into_iter()
        .flat_map(|h| [256usize, 512, 1024, 2048, 4096].map(|m| h + m + ICRC_LEN));
    let mut tries = 0;
    let mut first_fit = None;
    // Whether every segment of `first_fit` was found right in the search:
    // then the verdicts below need no second pass over the ICRCs (which
    // was a third of a 64-byte SEND's receive cost).
    let mut all_ok = false;
    let mut seen = [0usize; 20];
    for (gi, s) in guesses.chain(lo..=hi).enumerate() {
        if gi >= seen.len() && seen.contains(&s) {
            continue; // a guess already tried
        }
        if gi < seen.len() {
            seen[gi] = s;
        }
        if !plausible(s) {
            continue;
        }
        tries += 1;
        if tries > SPLIT_TRIES {
            break;
        }
        if !seg_ok(0, s, 0) {
            continue;
        }
        let n = total.div_ceil(s);
        let all = (1..n).all(|k| seg_ok(k * s, s.min(total - k * s), k));
        if all {
            first_fit = Some(s);
            all_ok = true;
            break;
        }
        first_fit.get_or_insert(s);
    }
    let Some(s) = first_fit else {
        return if ihl + 8 + total > MAX_DATAGRAM {
            Split::Malformed
        } else {
            Split::One
        };
    };
    let mut off = 0;
    let mut k = 0;
    while off < total {
        let n = s.min(total - off);
        let ok = k == 0 || all_ok || seg_ok(off, n, k);
        let v = if ok { IcrcStatus::Ok } else { IcrcStatus::Bad };
        segs.push((off, n, v));
        off += n;
        k += 1;
    }
    Split::Many
}

/// The verdict on a datagram from a plain UDP socket (see the module
/// docs), packet `seg` of a `UDP_GRO` datagram (0 for one on its own): the
/// IPv4 identification a GSO sender's segment `seg` carries is `seg`.
fn plain_verdict(
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
    let ok = icrc::compute_udp(src, dst, src_port, body).is_ok_and(|c| {
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

/// Checks a packet from the raw socket and finds the datagram in it.
/// Whether a raw-mode datagram's ICRC is right for it as one packet.
fn raw_icrc_ok(ip: &[u8]) -> bool {
    RoceFrame::parse_ip(ip, None)
        .is_ok_and(|f| f.transport.len() >= BTH_LEN + ICRC_LEN && f.icrc_ok())
}

/// A raw-mode datagram for the engine: its ICRC checked (`check_icrc`) or
/// taken as Bad (a datagram longer than any packet, which the caller tries
/// to split).
fn raw_datagram<'a>(
    addr: IpAddr,
    ip: &'a [u8],
    check_icrc: bool,
    stats: &mut UdpStats,
) -> Option<Datagram<'a>> {
    let frame = match RoceFrame::parse_ip(ip, None) {
        Ok(f) => f,
        Err(rxe_core::wire::Error::NotRoce(_)) => {
            stats.rx_ignored += 1;
            return None;
        }
        Err(_) => {
            stats.rx_malformed += 1;
            return None;
        }
    };
    if frame.ip.dst() != addr {
        stats.rx_ignored += 1;
        return None;
    }
    let icrc = if check_icrc && frame.transport.len() >= BTH_LEN + ICRC_LEN && frame.icrc_ok() {
        IcrcStatus::Ok
    } else {
        IcrcStatus::Bad
    };
    Some(Datagram {
        meta: RecvMeta {
            src: frame.ip.src(),
            dst: addr,
            src_port: frame.udp_src_port,
            icrc,
        },
        payload: frame.transport,
        ip_packet: Some(frame.ip_packet),
    })
}

/// An `io::Error` that says what was being done, keeping the kind and the
/// original error as its source.
#[derive(Debug)]
struct Context {
    what: String,
    source: io::Error,
}

impl fmt::Display for Context {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.what, self.source)
    }
}

impl std::error::Error for Context {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.source)
    }
}

/// The errno behind `e`, also when this transport wrapped it with what it
/// was doing (`e.raw_os_error()` sees only the outer error).
pub fn os_error_of(e: &io::Error) -> Option<i32> {
    e.raw_os_error().or_else(|| {
        e.get_ref()
            .and_then(|i| i.downcast_ref::<Context>())
            .and_then(|c| os_error_of(&c.source))
    })
}

fn context(source: io::Error, what: impl Into<String>) -> io::Error {
    io::Error::new(
        source.kind(),
        Context {
            what: what.into(),
            source,
        },
    )
}

fn cvt(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

fn socket(domain: libc::c_int, ty: libc::c_int, proto: libc::c_int) -> io::Result<OwnedFd> {
    // SAFETY: plain system call; a nonnegative result is a new descriptor
    // that nothing else owns.
    let fd =
        cvt(unsafe { libc::socket(domain, ty | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC, proto) })?;
    // SAFETY: fd is open and ours.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn setsockopt<T>(fd: RawFd, level: libc::c_int, name: libc::c_int, val: &T) -> io::Result<()> {
    // SAFETY: val points at size_of::<T>() readable bytes.
    cvt(unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (val as *const T).cast(),
            size_of::<T>() as libc::socklen_t,
        )
    })
    .map(drop)
}

fn setsockopt_int(fd: RawFd, level: libc::c_int, name: libc::c_int, val: i32) -> io::Result<()> {
    setsockopt(fd, level, name, &(val as libc::c_int))
}

fn getsockopt_int(fd: RawFd, level: libc::c_int, name: libc::c_int) -> io::Result<libc::c_int> {
    let mut val: libc::c_int = 0;
    let mut len = size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: val and len are valid for writes of the lengths given.
    cvt(unsafe {
        libc::getsockopt(
            fd,
            level,
            name,
            (&mut val as *mut libc::c_int).cast(),
            &mut len,
        )
    })?;
    Ok(val)
}

/// Asks for large buffers: the forcing variant if permitted, else the capped one.
fn grow_buffers(fd: RawFd, rcv: bool, snd: bool) {
    let size = SOCKET_BUFFER as i32;
    let set = |force, plain| {
        if setsockopt_int(fd, libc::SOL_SOCKET, force, size).is_err() {
            let _ = setsockopt_int(fd, libc::SOL_SOCKET, plain, size);
        }
    };
    if rcv {
        set(libc::SO_RCVBUFFORCE, libc::SO_RCVBUF);
    }
    if snd {
        set(libc::SO_SNDBUFFORCE, libc::SO_SNDBUF);
    }
}

fn attach_filter(fd: RawFd, prog: &[libc::sock_filter]) -> io::Result<()> {
    let fprog = libc::sock_fprog {
        len: prog.len() as libc::c_ushort,
        // The kernel copies the program and only reads it.
        filter: prog.as_ptr() as *mut libc::sock_filter,
    };
    setsockopt(fd, libc::SOL_SOCKET, libc::SO_ATTACH_FILTER, &fprog)
}

const fn bpf(code: u32, jt: u8, jf: u8, k: u32) -> libc::sock_filter {
    libc::sock_filter {
        code: code as u16,
        jt,
        jf,
        k,
    }
}

/// `ret #0`: drop everything.
const DROP_ALL: [libc::sock_filter; 1] = [bpf(libc::BPF_RET | libc::BPF_K, 0, 0, 0)];

/// For a raw IPv4 socket (data starts at the IP header): keep UDP
/// destination port 4791, drop the rest.
const KEEP_ROCE: [libc::sock_filter; 5] = [
    // x = 4 * (ip[0] & 0xf): the IP header length
    bpf(libc::BPF_LDX | libc::BPF_B | libc::BPF_MSH, 0, 0, 0),
    // a = the 16 bits at x + 2: the UDP destination port
    bpf(libc::BPF_LD | libc::BPF_H | libc::BPF_IND, 0, 0, 2),
    bpf(
        libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K,
        0,
        1,
        ROCE_V2_PORT as u32,
    ),
    bpf(libc::BPF_RET | libc::BPF_K, 0, 0, u32::MAX),
    bpf(libc::BPF_RET | libc::BPF_K, 0, 0, 0),
];

fn open_udp(sa: SocketAddr, drop_all: bool) -> io::Result<OwnedFd> {
    let setup = || -> io::Result<OwnedFd> {
        let domain = if sa.is_ipv4() {
            libc::AF_INET
        } else {
            libc::AF_INET6
        };
        let s = socket(domain, libc::SOCK_DGRAM, 0)?;
        let fd = s.as_raw_fd();
        if sa.is_ipv4() {
            setsockopt_int(
                fd,
                libc::IPPROTO_IP,
                libc::IP_MTU_DISCOVER,
                libc::IP_PMTUDISC_DO,
            )?;
        } else {
            setsockopt_int(fd, libc::IPPROTO_IPV6, libc::IPV6_V6ONLY, 1)?;
            setsockopt_int(fd, libc::IPPROTO_UDP, libc::UDP_NO_CHECK6_RX, 1)?;
            setsockopt_int(
                fd,
                libc::IPPROTO_IPV6,
                libc::IPV6_MTU_DISCOVER,
                libc::IPV6_PMTUDISC_DO,
            )?;
        }
        // Several processes may share the address (crate::share).
        setsockopt_int(fd, libc::SOL_SOCKET, libc::SO_REUSEPORT, 1)?;
        grow_buffers(fd, !drop_all, true);
        if drop_all {
            // Before bind, so that nothing is ever queued here.
            attach_filter(fd, &DROP_ALL)?;
        }
        Ok(s)
    };
    let s = setup().map_err(|e| context(e, format!("set up a UDP socket for {sa}")))?;
    bind_fd(&s, sa).map_err(|e| context(e, format!("bind {sa}")))?;
    Ok(s)
}

fn open_raw(addr: Ipv4Addr) -> io::Result<OwnedFd> {
    let s = socket(libc::AF_INET, libc::SOCK_RAW, libc::IPPROTO_UDP).map_err(|e| {
        context(
            e,
            format!("raw IPv4/UDP socket for {addr} (needs CAP_NET_RAW)"),
        )
    })?;
    let fd = s.as_raw_fd();
    attach_filter(fd, &KEEP_ROCE).map_err(|e| {
        context(
            e,
            format!("attach a BPF filter to the raw socket for {addr}"),
        )
    })?;
    grow_buffers(fd, true, false);
    // A bound raw socket only gets packets to that address.
    bind_fd(&s, SocketAddr::new(IpAddr::V4(addr), 0))
        .map_err(|e| context(e, format!("bind a raw socket to {addr}")))?;
    Ok(s)
}

fn bind_fd(s: &OwnedFd, sa: SocketAddr) -> io::Result<()> {
    // SAFETY: all-zero is a valid sockaddr_storage.
    let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let len = to_sockaddr(sa, &mut ss);
    // SAFETY: ss holds a sockaddr of len bytes.
    cvt(unsafe {
        libc::bind(
            s.as_raw_fd(),
            (&ss as *const libc::sockaddr_storage).cast(),
            len,
        )
    })
    .map(drop)
}

/// Writes a socket address in C form; returns its length.
fn to_sockaddr(sa: SocketAddr, out: &mut libc::sockaddr_storage) -> libc::socklen_t {
    match sa {
        SocketAddr::V4(a) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: a.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from_ne_bytes(a.ip().octets()),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_storage is big enough and aligned for any sockaddr.
            unsafe { std::ptr::write((out as *mut libc::sockaddr_storage).cast(), sin) };
            size_of::<libc::sockaddr_in>() as libc::socklen_t
        }
        SocketAddr::V6(a) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: a.port().to_be(),
                sin6_flowinfo: 0,
                sin6_addr: libc::in6_addr {
                    s6_addr: a.ip().octets(),
                },
                sin6_scope_id: a.scope_id(),
            };
            // SAFETY: as above.
            unsafe { std::ptr::write((out as *mut libc::sockaddr_storage).cast(), sin6) };
            size_of::<libc::sockaddr_in6>() as libc::socklen_t
        }
    }
}

/// Reads a socket address the kernel wrote.
fn from_sockaddr(ss: &libc::sockaddr_storage, len: libc::socklen_t) -> Option<SocketAddr> {
    let len = len as usize;
    match libc::c_int::from(ss.ss_family) {
        libc::AF_INET if len >= size_of::<libc::sockaddr_in>() => {
            // SAFETY: the family says it is a sockaddr_in, and the storage
            // is aligned for it.
            let sin =
                unsafe { &*(ss as *const libc::sockaddr_storage).cast::<libc::sockaddr_in>() };
            let ip = Ipv4Addr::from(sin.sin_addr.s_addr.to_ne_bytes());
            Some(SocketAddr::V4(SocketAddrV4::new(
                ip,
                u16::from_be(sin.sin_port),
            )))
        }
        libc::AF_INET6 if len >= size_of::<libc::sockaddr_in6>() => {
            // SAFETY: as above, for sockaddr_in6.
            let sin6 =
                unsafe { &*(ss as *const libc::sockaddr_storage).cast::<libc::sockaddr_in6>() };
            let ip = Ipv6Addr::from(sin6.sin6_addr.s6_addr);
            Some(SocketAddr::V6(SocketAddrV6::new(
                ip,
                u16::from_be(sin6.sin6_port),
                sin6.sin6_flowinfo,
                sin6.sin6_scope_id,
            )))
        }
        _ => None,
    }
}

/// Waits for a transport's receiving socket; see [`UdpTransport::waiter`].
///
/// It waits on its own duplicate of the socket, so it needs no access to
/// the transport, and on an `eventfd(2)` that [`Waiter::wake`] sets, so
/// another thread can end a wait early (for example when something other
/// than a packet produced what the waiting thread waits for).
///
/// Two kinds of thread may wait at once, each with a wake-up of its own: a
/// *receiver* ([`Waiter::wait_receiver`], woken by
/// [`Waiter::wake_receiver`]) and any other ([`Waiter::wait`], woken by
/// [`Waiter::wake`]). A wake-up is used up by the wait that reads it, so
/// with one `eventfd` for both, a wake-up meant for the receiver could be
/// read by the other thread's wait, and the receiver slept on.
#[derive(Debug)]
pub struct Waiter {
    fd: OwnedFd,
    /// Where datagrams other processes pass on arrive ([`crate::share`]).
    fwd: OwnedFd,
    /// Set when a wait saw `fwd` readable ([`FwdLook`]).
    fwd_ready: std::sync::Arc<std::sync::atomic::AtomicBool>,
    /// The transport's multicast group sockets ([`crate::mcast`]).
    groups: OwnedFd,
    wake: OwnedFd,
    wake_receiver: OwnedFd,
}

impl Waiter {
    /// Waits up to `timeout` (`None`: no limit) for a datagram or a
    /// [`Waiter::wake`]; true if a datagram is ready. A wake-up is used up
    /// by the wait it ends (or by the next wait, if none was waiting).
    pub fn wait(&self, timeout: Option<Duration>) -> io::Result<bool> {
        self.wait_on(&self.wake, timeout)
    }

    /// [`Waiter::wait`] for the receiver, ended by
    /// [`Waiter::wake_receiver`] (and not by [`Waiter::wake`]).
    pub fn wait_receiver(&self, timeout: Option<Duration>) -> io::Result<bool> {
        self.wait_on(&self.wake_receiver, timeout)
    }

    fn wait_on(&self, wake: &OwnedFd, timeout: Option<Duration>) -> io::Result<bool> {
        let mut pfds = [
            libc::pollfd {
                fd: self.fd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: wake.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: self.fwd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: self.groups.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        if !ppoll(&mut pfds, timeout)? {
            return Ok(false);
        }
        if pfds[1].revents != 0 {
            take_wake(wake);
        }
        if pfds[2].revents != 0 {
            self.fwd_ready
                .store(true, std::sync::atomic::Ordering::Relaxed);
        }
        Ok(pfds[0].revents != 0 || pfds[2].revents != 0 || pfds[3].revents != 0)
    }

    /// Sleeps up to `timeout`, or until a [`Waiter::wake`] (true then),
    /// whatever the socket holds: for a thread that leaves the socket to
    /// another but must still be wakeable.
    pub fn nap(&self, timeout: Duration) -> io::Result<bool> {
        let mut pfds = [libc::pollfd {
            fd: self.wake.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        }];
        if !ppoll(&mut pfds, Some(timeout))? {
            return Ok(false);
        }
        take_wake(&self.wake);
        Ok(true)
    }

    /// Ends the current (or next) [`Waiter::wait`] or [`Waiter::nap`] of
    /// any thread.
    pub fn wake(&self) {
        signal(&self.wake);
    }

    /// Ends the current (or next) [`Waiter::wait_receiver`].
    pub fn wake_receiver(&self) {
        signal(&self.wake_receiver);
    }
}

/// Uses up a wake-up: reads (and so resets) an eventfd's counter.
fn take_wake(fd: &OwnedFd) {
    let mut v = 0u64;
    // SAFETY: reads 8 bytes into `v`; the eventfd is nonblocking, so a
    // wake-up another waiter took first is EAGAIN, not a hang.
    let _ = unsafe {
        libc::read(
            fd.as_raw_fd(),
            (&mut v as *mut u64).cast(),
            size_of::<u64>(),
        )
    };
}

/// Adds one to an eventfd's counter.
fn signal(fd: &OwnedFd) {
    let v = 1u64;
    // SAFETY: writes 8 bytes from `v` to the eventfd. It can only fail
    // when the counter is about to overflow, which means a wake-up is
    // already pending.
    let _ = unsafe { libc::write(fd.as_raw_fd(), (&v as *const u64).cast(), size_of::<u64>()) };
}

/// `ppoll(2)`: true if a descriptor is ready, false on timeout or
/// interruption.
fn ppoll(pfds: &mut [libc::pollfd], timeout: Option<Duration>) -> io::Result<bool> {
    let ts = timeout.map(|d| libc::timespec {
        tv_sec: d.as_secs().min(libc::time_t::MAX as u64) as libc::time_t,
        tv_nsec: d.subsec_nanos() as _,
    });
    let tsp = ts
        .as_ref()
        .map_or(std::ptr::null(), |t| t as *const libc::timespec);
    // SAFETY: the pollfds and the optional timespec are valid for the call.
    let r = unsafe {
        libc::ppoll(
            pfds.as_mut_ptr(),
            pfds.len() as libc::nfds_t,
            tsp,
            std::ptr::null(),
        )
    };
    if r < 0 {
        let e = io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::EINTR) {
            return Ok(false);
        }
        return Err(context(e, "poll"));
    }
    Ok(r > 0)
}

/// `ppoll(2)` on one descriptor. Returns whether it is ready; `false` on
/// timeout or interruption.
fn wait_fd(fd: RawFd, events: libc::c_short, timeout: Option<Duration>) -> io::Result<bool> {
    let mut pfd = [libc::pollfd {
        fd,
        events,
        revents: 0,
    }];
    ppoll(&mut pfd, timeout)
}

#[cfg(test)]
mod tests {
    //! Everything here sends to loopback addresses only (127.0.0.0/8, ::1).

    use super::*;
    use rxe_core::engine::{
        CqId, Engine, EngineConfig, MrKeys, PdId, QpInit, RegionMemory, VecMemory,
    };
    use rxe_core::psn::Psn;
    use rxe_core::types::*;
    use rxe_core::wire::{BthRepr, FrameRepr, IpRepr, Opcode, PacketRepr, UdpChecksum};
    use std::sync::Arc;

    /// Binds on `preferred`, or on a stand-in 127.x address if another run
    /// of these tests holds it.
    fn bind_loopback(preferred: Ipv4Addr, mode: RecvMode) -> io::Result<UdpTransport> {
        let [_, _, c, d] = preferred.octets();
        let mut last = None;
        for k in 0..32u8 {
            let a = if k == 0 {
                preferred
            } else {
                Ipv4Addr::new(127, 100 + k, c, d)
            };
            match UdpTransport::bind_with(IpAddr::V4(a), mode) {
                Err(e) if e.kind() == io::ErrorKind::AddrInUse => last = Some(e),
                r => return r,
            }
        }
        Err(last.expect("tried"))
    }

    fn lo(d: u8) -> Ipv4Addr {
        Ipv4Addr::new(127, 0, 0, d)
    }

    /// `None` (with a note) if raw sockets are not permitted here.
    fn bind_raw(preferred: Ipv4Addr, test: &str) -> Option<UdpTransport> {
        match bind_loopback(preferred, RecvMode::Raw) {
            Ok(t) => {
                assert_eq!(t.recv_mode(), RecvMode::Raw);
                Some(t)
            }
            Err(e) if e.kind() == io::ErrorKind::PermissionDenied => {
                println!("SKIPPED {test}: no CAP_NET_RAW ({e})");
                None
            }
            Err(e) => panic!("{e}"),
        }
    }

    fn bth(psn: u32) -> BthRepr {
        BthRepr {
            opcode: Opcode::RC_SEND_ONLY,
            solicited: false,
            mig_req: false,
            pad_count: 0,
            pkey: 0xffff,
            fecn: false,
            becn: false,
            dest_qp: 0x12,
            ack_req: true,
            psn: Psn::new(psn),
        }
    }

    /// A UDP payload (BTH through ICRC) with the ICRC `compute_udp` gives.
    fn roce(src: IpAddr, dst: IpAddr, src_port: u16, psn: u32, data: &[u8]) -> Vec<u8> {
        let mut p = PacketRepr::new(bth(psn));
        p.payload = data;
        let mut buf = vec![0; p.buffer_len()];
        let n = p.emit(&mut buf).unwrap();
        buf.truncate(n);
        let crc = icrc::compute_udp(src, dst, src_port, &buf[..n - ICRC_LEN]).unwrap();
        buf[n - ICRC_LEN..].copy_from_slice(&crc.to_le_bytes());
        buf
    }

    fn transmit(from: &UdpTransport, dst: IpAddr, psn: u32, data: &[u8]) -> Transmit {
        Transmit {
            src: from.addr(),
            dst,
            src_port: from.src_port(),
            traffic_class: 0,
            hop_limit: 64,
            payload: roce(from.addr(), dst, from.src_port(), psn, data),
        }
    }

    /// Flips one payload bit after the ICRC was computed.
    fn corrupt(mut t: Transmit) -> Transmit {
        t.payload[BTH_LEN + 1] ^= 0x10;
        t
    }

    /// Receives until `n` datagrams arrived (or 2 s passed); also returns
    /// how many each call returned.
    fn recv_n(t: &mut UdpTransport, n: usize) -> (Vec<Received>, Vec<usize>) {
        let deadline = Instant::now() + Duration::from_secs(2);
        let (mut out, mut calls) = (Vec::new(), Vec::new());
        while out.len() < n && Instant::now() < deadline {
            let k = t
                .recv_batch(Some(Duration::from_millis(100)), &mut out)
                .unwrap();
            if k > 0 {
                calls.push(k);
            }
        }
        (out, calls)
    }

    fn assert_nothing_queued(t: &mut UdpTransport) {
        let mut out = Vec::new();
        assert_eq!(
            t.recv_batch(Some(Duration::from_millis(20)), &mut out)
                .unwrap(),
            0,
            "{out:?}"
        );
    }

    /// Sends a whole IPv4 packet through an `IPPROTO_RAW` socket (IP_HDRINCL).
    fn send_ip_hdrincl(pkt: &[u8], dst: Ipv4Addr) -> io::Result<()> {
        let s = socket(libc::AF_INET, libc::SOCK_RAW, libc::IPPROTO_RAW)?;
        // SAFETY: all-zero is a valid sockaddr_storage.
        let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
        let len = to_sockaddr(SocketAddr::new(IpAddr::V4(dst), 0), &mut ss);
        // SAFETY: pkt and ss are valid for the lengths given.
        let r = unsafe {
            libc::sendto(
                s.as_raw_fd(),
                pkt.as_ptr().cast(),
                pkt.len(),
                0,
                (&ss as *const libc::sockaddr_storage).cast(),
                len,
            )
        };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        assert_eq!(r as usize, pkt.len());
        Ok(())
    }

    /// A whole IPv4 packet as the kernel's rxe builds it: any IP ID, DF,
    /// UDP checksum 0, a QP-hashed source port, a correct ICRC.
    fn rxe_style_ipv4(src: Ipv4Addr, dst: Ipv4Addr, id: u16, psn: u32, data: &[u8]) -> Vec<u8> {
        let f = FrameRepr {
            eth: None,
            ip: IpRepr::V4 {
                src,
                dst,
                tos: 0,
                id,
                dont_fragment: true,
                ttl: 64,
            },
            udp_src_port: 50596,
            udp_checksum: UdpChecksum::Zero,
        };
        let mut p = PacketRepr::new(bth(psn));
        p.payload = data;
        let mut buf = vec![0; f.buffer_len(p.buffer_len())];
        let n = f.emit(&p, &mut buf).unwrap();
        buf.truncate(n);
        buf
    }

    #[test]
    fn ipv4_plain_exchange_and_verdicts() {
        let mut a = bind_loopback(lo(4), RecvMode::Plain).unwrap();
        let mut b = bind_loopback(lo(5), RecvMode::Plain).unwrap();
        assert_eq!(a.recv_mode(), RecvMode::Plain);
        assert_eq!(a.src_port(), 4791);
        assert_eq!(a.local_addr(), SocketAddr::new(a.addr(), 4791));
        let (aa, ba) = (a.addr(), b.addr());
        let pkts = [
            transmit(&a, ba, 1, b"first packet"),
            corrupt(transmit(&a, ba, 2, b"second packet")),
            Transmit {
                traffic_class: 0x2e << 2,
                hop_limit: 3,
                ..transmit(&a, ba, 3, b"third packet, other TOS and TTL")
            },
            Transmit {
                hop_limit: 0,
                ..transmit(&a, ba, 4, b"fourth, default TTL")
            },
        ];
        assert_eq!(a.send_batch(&pkts).unwrap(), 4);
        let (got, _) = recv_n(&mut b, 4);
        let verdicts: Vec<_> = got.iter().map(|r| r.meta.icrc).collect();
        assert_eq!(
            verdicts,
            [
                // The corrupted one: no IPv4 ID explains its ICRC.
                IcrcStatus::Ok,
                IcrcStatus::Bad,
                IcrcStatus::Ok,
                IcrcStatus::Ok
            ]
        );
        for (r, t) in got.iter().zip(&pkts) {
            assert_eq!(r.data, t.payload);
            assert_eq!(
                r.meta,
                RecvMeta {
                    src: aa,
                    dst: ba,
                    src_port: 4791,
                    icrc: r.meta.icrc
                }
            );
        }
        assert_eq!(b.stats().icrc_bad, 1);
        assert_eq!(b.stats().icrc_unverified, 0);
        assert_eq!(b.stats().icrc_ok, 3);
        assert_eq!(b.stats().rx_packets, 4);
        assert_eq!(a.stats().tx_packets, 4);
        // And back.
        assert_eq!(b.send_batch(&[transmit(&b, aa, 9, b"reply")]).unwrap(), 1);
        let (got, _) = recv_n(&mut a, 1);
        assert_eq!(got[0].meta.icrc, IcrcStatus::Ok);
        assert_eq!(got[0].meta.src, ba);
        assert_nothing_queued(&mut a);
        assert_nothing_queued(&mut b);
    }

    #[test]
    fn batch_of_64_through_sendmmsg_and_recvmmsg() {
        let mut a = bind_loopback(lo(6), RecvMode::Plain).unwrap();
        let mut b = bind_loopback(lo(7), RecvMode::Plain).unwrap();
        let pkts: Vec<_> = (0..64u32)
            .map(|i| {
                let data: Vec<u8> = (0..100 + 17 * i).map(|j| (i + j) as u8).collect();
                transmit(&a, b.addr(), i, &data)
            })
            .collect();
        assert_eq!(a.send_batch(&pkts).unwrap(), 64);
        let (got, calls) = recv_n(&mut b, 64);
        println!(
            "64 datagrams came in {} recvmmsg batches: {calls:?}",
            calls.len()
        );
        assert_eq!(got.len(), 64);
        for (r, t) in got.iter().zip(&pkts) {
            assert_eq!(r.data, t.payload);
            assert_eq!(r.meta.icrc, IcrcStatus::Ok);
        }
        assert!(calls.iter().any(|&k| k > 1), "no batching: {calls:?}");
        // More than one sendmmsg worth in one call.
        let many: Vec<_> = (0..200).map(|i| transmit(&a, b.addr(), i, b"x")).collect();
        assert_eq!(a.send_batch(&many).unwrap(), 200);
        let (got, calls) = recv_n(&mut b, 200);
        assert_eq!(got.len(), 200);
        // BATCH datagrams a call; with GSO each may hold up to 64 packets.
        let most = if b.gso() {
            BATCH * GSO_MAX_SEGMENTS
        } else {
            BATCH
        };
        assert!(calls.iter().all(|&k| k <= most), "{calls:?}");
        assert_eq!(a.stats().tx_packets, 264);
    }

    #[test]
    fn recv_timeout_returns_zero_on_nothing() {
        // Auto: raw with CAP_NET_RAW, plain without; both must time out.
        let mut t = bind_loopback(lo(8), RecvMode::Auto).unwrap();
        println!("auto mode on {}: {}", t.addr(), t.recv_mode());
        assert_ne!(t.recv_mode(), RecvMode::Auto);
        let mut out = Vec::new();
        let start = Instant::now();
        assert_eq!(t.recv_batch(Some(Duration::ZERO), &mut out).unwrap(), 0);
        assert_eq!(
            t.recv_batch(Some(Duration::from_millis(50)), &mut out)
                .unwrap(),
            0
        );
        let took = start.elapsed();
        assert!(took >= Duration::from_millis(50), "{took:?}");
        assert!(took < Duration::from_secs(2), "{took:?}");
        assert!(out.is_empty());
        // A huge timeout does not overflow; something to read ends it.
        let addr = t.addr();
        assert_eq!(
            t.send_batch(&[transmit(&t, addr, 1, b"to self")]).unwrap(),
            1
        );
        assert_eq!(t.recv_batch(Some(Duration::MAX), &mut out).unwrap(), 1);
        assert_eq!(out[0].meta.icrc, IcrcStatus::Ok);
        assert!(t.wait_writable(Some(Duration::ZERO)).unwrap());
        let (rcv, snd) = t.buffer_sizes().unwrap();
        println!("socket buffers: rcv {rcv}, snd {snd}");
        // What was granted depends on privileges and net.core.[rw]mem_max.
        assert!(rcv > 0 && snd > 0);
    }

    #[test]
    fn bad_input_is_an_error_not_a_panic() {
        for a in ["0.0.0.0", "::", "224.0.0.1", "255.255.255.255", "ff02::1"] {
            let e = UdpTransport::bind(a.parse().unwrap()).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{a}: {e}");
        }
        let e = UdpTransport::bind_with("::1".parse().unwrap(), RecvMode::Raw).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::Unsupported, "{e}");
        // Not a local address: nothing is sent, bind just fails.
        let e = UdpTransport::bind("192.0.2.1".parse().unwrap()).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::AddrNotAvailable, "{e}");
        assert!(e.to_string().starts_with("bind 192.0.2.1:4791: "), "{e}");

        let mut t = bind_loopback(lo(12), RecvMode::Plain).unwrap();
        // Another transport shares the address (crate::share); a socket
        // that does not share it (no SO_REUSEPORT) keeps it to itself.
        let other = UdpTransport::bind(t.addr()).unwrap();
        assert_ne!(other.qpn_prefix(), t.qpn_prefix());
        drop(other);
        let hold = std::net::UdpSocket::bind((lo(14), ROCE_V2_PORT)).unwrap();
        let e = UdpTransport::bind(lo(14).into()).unwrap_err();
        drop(hold);
        assert_eq!(e.kind(), io::ErrorKind::AddrInUse);
        let msg = e.to_string();
        assert!(msg.starts_with(&format!("bind {}:4791: ", lo(14))), "{msg}");
        assert!(std::error::Error::source(e.get_ref().unwrap()).is_some());

        let me = t.addr();
        let good = transmit(&t, me, 1, b"ok");
        let wrong_src = Transmit {
            src: IpAddr::V4(lo(99)),
            ..good.clone()
        };
        let wrong_port = Transmit {
            src_port: 50000,
            ..good.clone()
        };
        let wrong_family = Transmit {
            dst: "::1".parse().unwrap(),
            ..good.clone()
        };
        for bad in [&wrong_src, &wrong_port, &wrong_family] {
            let e = t.send_batch(std::slice::from_ref(bad)).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{e}");
        }
        assert!(t
            .send_batch(std::slice::from_ref(&wrong_port))
            .unwrap_err()
            .to_string()
            .contains("udp_src_port"));
        // A bad packet after good ones: the good ones go, the next call
        // reports the bad one.
        let batch = [good.clone(), good.clone(), wrong_src.clone(), good.clone()];
        assert_eq!(t.send_batch(&batch).unwrap(), 2);
        assert!(t.send_batch(&batch[2..]).is_err());
        assert_eq!(t.send_batch(&batch[3..]).unwrap(), 1);
        assert_eq!(t.send_batch(&[]).unwrap(), 0);
        // One the kernel refuses (larger than a UDP datagram can be; the
        // loopback MTU is 64 KiB, so EMSGSIZE from path MTU discovery cannot
        // be shown here): the packets before it go, then it is the error.
        let mut huge = good.clone();
        huge.payload = vec![0; 70_000];
        let batch = [good.clone(), huge, good.clone()];
        assert_eq!(t.send_batch(&batch).unwrap(), 1);
        let e = t.send_batch(&batch[1..]).unwrap_err();
        assert_eq!(e.raw_os_error(), None, "wrapped with context");
        assert!(
            e.to_string()
                .starts_with(&format!("send to {me}:4791 from {me}:4791: ")),
            "{e}"
        );
        assert_eq!(t.send_batch(&batch[2..]).unwrap(), 1);

        // Garbage in: short and non-RoCE datagrams are handed out, never a panic.
        let (got, _) = recv_n(&mut t, 5);
        assert_eq!(got.len(), 5);
        assert!(got.iter().all(|r| r.meta.icrc == IcrcStatus::Ok));
        let junk = std::net::UdpSocket::bind((lo(1), 0)).unwrap();
        for len in [0usize, 1, 15, 16, 100] {
            junk.send_to(&vec![0xa5; len], t.local_addr()).unwrap();
        }
        let (got, _) = recv_n(&mut t, 5);
        assert_eq!(got.len(), 5);
        for r in &got {
            // Too short for an ICRC, or one no IPv4 ID explains.
            assert_eq!(r.meta.icrc, IcrcStatus::Bad, "{} bytes", r.data.len());
            assert_eq!(r.meta.src, IpAddr::V4(lo(1)));
            assert_eq!(r.meta.src_port, junk.local_addr().unwrap().port());
        }
    }

    /// ::1 is one address: IPv6 checks run in this one test, with the
    /// transport sending to itself.
    #[test]
    fn ipv6_verdicts_and_zero_checksum() {
        let me: IpAddr = "::1".parse().unwrap();
        let mut tries = 0;
        let mut t = loop {
            match UdpTransport::bind_with(me, RecvMode::Auto) {
                Ok(t) => break t,
                Err(e) if e.kind() == io::ErrorKind::AddrInUse && tries < 60 => {
                    tries += 1; // another run of this test
                    std::thread::sleep(Duration::from_millis(500));
                }
                Err(e) if e.kind() == io::ErrorKind::AddrNotAvailable => {
                    println!("SKIPPED ipv6_verdicts_and_zero_checksum: no ::1 ({e})");
                    return;
                }
                Err(e) => panic!("{e}"),
            }
        };
        assert_eq!(t.recv_mode(), RecvMode::Plain, "auto is plain for IPv6");
        let pkts = [
            transmit(&t, me, 1, b"v6 good"),
            corrupt(transmit(&t, me, 2, b"v6 bad")),
            Transmit {
                traffic_class: 0xb8,
                hop_limit: 1,
                ..transmit(&t, me, 3, b"v6 tclass and hop limit")
            },
        ];
        assert_eq!(t.send_batch(&pkts).unwrap(), 3);
        let (got, _) = recv_n(&mut t, 3);
        let verdicts: Vec<_> = got.iter().map(|r| r.meta.icrc).collect();
        assert_eq!(verdicts, [IcrcStatus::Ok, IcrcStatus::Bad, IcrcStatus::Ok]);
        assert_eq!(got[0].meta.src, me);
        assert_eq!(got[0].meta.dst, me);
        assert_eq!(got[0].meta.src_port, 4791);

        // Zero-checksum UDP, as the kernel's rxe sends over IPv6, from an
        // ephemeral port. A socket without UDP_NO_CHECK6_RX drops it.
        let zero = std::net::UdpSocket::bind((me, 0)).unwrap();
        setsockopt_int(
            zero.as_raw_fd(),
            libc::IPPROTO_UDP,
            libc::UDP_NO_CHECK6_TX,
            1,
        )
        .unwrap();
        let normal = std::net::UdpSocket::bind((me, 0)).unwrap();
        let control = std::net::UdpSocket::bind((me, 0)).unwrap();
        control
            .set_read_timeout(Some(Duration::from_secs(2)))
            .unwrap();
        let zport = zero.local_addr().unwrap().port();
        let payload = roce(me, me, zport, 7, b"zero checksum");
        zero.send_to(b"zero checksum to control", control.local_addr().unwrap())
            .unwrap();
        zero.send_to(&payload, t.local_addr()).unwrap();
        normal
            .send_to(b"checksummed", control.local_addr().unwrap())
            .unwrap();
        let mut buf = [0u8; 64];
        let n = control.recv(&mut buf).unwrap();
        assert_eq!(
            &buf[..n],
            b"checksummed",
            "the control socket should have dropped the zero-checksum datagram"
        );
        let (got, _) = recv_n(&mut t, 1);
        assert_eq!(got.len(), 1, "zero-checksum datagram not received");
        assert_eq!(got[0].data, payload);
        assert_eq!(got[0].meta.src_port, zport);
        assert_eq!(got[0].meta.icrc, IcrcStatus::Ok);
        assert_eq!(t.stats().icrc_unverified, 0);
    }

    #[test]
    fn ancillary_data_only_where_the_socket_differs() {
        let t = bind_loopback(lo(12), RecvMode::Plain).unwrap();
        let d = SocketDefaults { tos: 0, ttl: 64 };
        let (tos, ttl) = (libc::IP_TOS, libc::IP_TTL);
        let pkt = |traffic_class, hop_limit| Transmit {
            traffic_class,
            hop_limit,
            ..transmit(&t, t.addr(), 1, b"x")
        };
        let n = |p: Transmit| d.ancillary(&p, tos, ttl);
        assert_eq!(n(pkt(0, 64)).1, 0);
        assert_eq!(n(pkt(0, 0)).1, 0, "0: the socket's default TTL");
        let (c, k) = n(pkt(0xb8, 64));
        assert_eq!((k, c[0]), (1, (tos, 0xb8)));
        let (c, k) = n(pkt(0, 7));
        assert_eq!((k, c[0]), (1, (ttl, 7)));
        let (c, k) = n(pkt(0x02, 1));
        assert_eq!((k, c), (2, [(tos, 2), (ttl, 1)]));
        // A fresh socket's own: TOS 0 and the system's default TTL (1..=255).
        assert_eq!(t.defaults.tos, 0);
        assert!(t.defaults.ttl >= 1, "{:?}", t.defaults);
    }

    #[test]
    fn raw_mode_verifies_every_ipv4_packet() {
        let Some(mut rx) = bind_raw(lo(9), "raw_mode_verifies_every_ipv4_packet") else {
            return;
        };
        let mut tx = bind_loopback(lo(10), RecvMode::Plain).unwrap();
        let mut plain_rx = bind_loopback(lo(11), RecvMode::Plain).unwrap();
        let (rxa, txa) = (rx.addr(), tx.addr());
        let (IpAddr::V4(rx4), IpAddr::V4(tx4), IpAddr::V4(plain4)) = (rxa, txa, plain_rx.addr())
        else {
            unreachable!()
        };

        // From our own unconnected IP_PMTUDISC_DO socket: ID 0, DF, Ok.
        let pkts = [
            transmit(&tx, rxa, 1, b"from a UDP socket"),
            corrupt(transmit(&tx, rxa, 2, b"corrupted")),
        ];
        assert_eq!(tx.send_batch(&pkts).unwrap(), 2);
        // From "the kernel's rxe": a nonzero ID, zero UDP checksum, another port.
        let kernel_like = rxe_style_ipv4(tx4, rx4, 0x1234, 3, b"nonzero IP ID");
        send_ip_hdrincl(&kernel_like, rx4).unwrap();
        let mut bad_kernel_like = rxe_style_ipv4(tx4, rx4, 0x1235, 4, b"nonzero IP ID, bad");
        let last = bad_kernel_like.len() - ICRC_LEN - 1;
        bad_kernel_like[last] ^= 1;
        send_ip_hdrincl(&bad_kernel_like, rx4).unwrap();
        // Not RoCE: another port. The raw socket's filter keeps it out.
        let other = std::net::UdpSocket::bind((tx4, 0)).unwrap();
        other.send_to(b"not for 4791", (rx4, 9)).unwrap();

        let mut got = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(2);
        while got.len() < 4 && Instant::now() < deadline {
            rx.recv_with(Some(Duration::from_millis(100)), |d| {
                let ip = d.ip_packet.expect("raw mode gives the IP packet").to_vec();
                got.push((d.meta, d.payload.to_vec(), ip));
            })
            .unwrap();
        }
        assert_eq!(got.len(), 4, "{got:?}");
        let id = |ip: &[u8]| u16::from_be_bytes([ip[4], ip[5]]);
        let df = |ip: &[u8]| ip[6] & 0x40 != 0;
        for (i, (meta, payload, ip)) in got.iter().enumerate() {
            assert_eq!(meta.dst, rxa);
            assert_eq!(meta.src, txa);
            assert_eq!(&ip[ip.len() - payload.len()..], &payload[..]);
            assert!(df(ip), "packet {i}: DF");
        }
        let (m, p, ip) = &got[0];
        assert_eq!(id(ip), 0, "unconnected IP_PMTUDISC_DO socket: IP ID 0");
        assert_eq!(m.icrc, IcrcStatus::Ok);
        assert_eq!(m.src_port, 4791);
        assert_eq!(p, &pkts[0].payload);
        assert_eq!(got[1].0.icrc, IcrcStatus::Bad);
        let (m, p, ip) = &got[2];
        assert_eq!(id(ip), 0x1234);
        assert_eq!(m.icrc, IcrcStatus::Ok, "a kernel-rxe-style packet verifies");
        assert_eq!(m.src_port, 50596);
        assert_eq!(&p[..], &kernel_like[28..]);
        assert_eq!(got[3].0.icrc, IcrcStatus::Bad);
        assert_eq!(rx.stats().icrc_unverified, 0);
        assert_eq!(rx.stats().icrc_ok, 2);
        assert_eq!(rx.stats().icrc_bad, 2);

        // The UDP socket queued nothing (its filter drops everything).
        let mut b = [0u8; 16];
        // SAFETY: b is valid for writes of its length.
        let r = unsafe {
            libc::recv(
                rx.udp.as_raw_fd(),
                b.as_mut_ptr().cast(),
                b.len(),
                libc::MSG_DONTWAIT,
            )
        };
        assert_eq!(r, -1);
        assert_eq!(
            io::Error::last_os_error().raw_os_error(),
            Some(libc::EAGAIN)
        );
        assert_nothing_queued(&mut rx);

        // The same kernel-style packet to a plain socket: Unverified.
        let to_plain = rxe_style_ipv4(tx4, plain4, 0x1234, 5, b"nonzero IP ID");
        send_ip_hdrincl(&to_plain, plain4).unwrap();
        let (got, _) = recv_n(&mut plain_rx, 1);
        assert_eq!(got[0].meta.icrc, IcrcStatus::Unverified);
        assert_eq!(got[0].meta.src_port, 50596);
        // Raw mode also sends (through the UDP socket).
        assert_eq!(rx.send_batch(&[transmit(&rx, txa, 1, b"back")]).unwrap(), 1);
        let (got, _) = recv_n(&mut tx, 1);
        assert_eq!(got[0].meta.icrc, IcrcStatus::Ok);

        // Per-packet TOS and TTL (ancillary data) reach the wire and do not
        // disturb the ICRC (both are masked). Packets with the socket's
        // own values go without ancillary data; one packet's values do
        // not stay for the next.
        let default_ttl = tx.defaults.ttl;
        let pkts = [
            Transmit {
                traffic_class: 0xb8,
                hop_limit: 7,
                ..transmit(&tx, rxa, 9, b"DSCP EF, TTL 7")
            },
            Transmit {
                hop_limit: default_ttl,
                ..transmit(&tx, rxa, 10, b"the socket's TOS and TTL")
            },
            Transmit {
                traffic_class: 0x02,
                hop_limit: 0,
                ..transmit(&tx, rxa, 11, b"ECT(0), the default TTL")
            },
            Transmit {
                hop_limit: default_ttl.wrapping_sub(1).max(1),
                ..transmit(&tx, rxa, 12, b"TOS 0, another TTL")
            },
        ];
        assert_eq!(tx.send_batch(&pkts).unwrap(), 4);
        let mut seen = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(2);
        while seen.len() < 4 && Instant::now() < deadline {
            rx.recv_with(Some(Duration::from_millis(100)), |d| {
                let ip = d.ip_packet.unwrap();
                seen.push((d.meta.icrc, ip[1], ip[8], id(ip)));
            })
            .unwrap();
        }
        let ok = IcrcStatus::Ok;
        assert_eq!(
            seen,
            [
                (ok, 0xb8, 7, 0),
                (ok, 0, default_ttl, 0),
                (ok, 0x02, default_ttl, 0),
                (ok, 0, default_ttl.wrapping_sub(1).max(1), 0),
            ]
        );
    }

    /// One soft device for the end-to-end tests.
    struct Dev {
        e: Engine,
        t: UdpTransport,
        cq: CqId,
        pd: PdId,
        mem: Arc<VecMemory>,
        mr: MrKeys,
        pending: Vec<Transmit>,
    }

    const IOVA: u64 = 0x1000_0000;

    fn dev(t: UdpTransport, seed: u64) -> Dev {
        let mut config = EngineConfig::new(t.addr(), seed);
        config.udp_src_port = Some(t.src_port());
        let mut e = Engine::new(config);
        let pd = e.alloc_pd();
        let cq = e.create_cq(4096).unwrap();
        let mem = Arc::new(VecMemory::new(1 << 20));
        let access = Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ;
        let mr = e.reg_mr(pd, mem.clone(), IOVA, access).unwrap();
        Dev {
            e,
            t,
            cq,
            pd,
            mem,
            mr,
            pending: Vec::new(),
        }
    }

    fn create_rc_qp(d: &mut Dev) -> u32 {
        let cap = QpCap {
            max_send_wr: 256,
            max_recv_wr: 256,
            ..QpCap::default()
        };
        d.e.create_qp(QpInit {
            qp_type: QpType::Rc,
            pd: d.pd,
            send_cq: d.cq,
            recv_cq: d.cq,
            srq: None,
            cap,
            sq_sig_all: false,
        })
        .unwrap()
    }

    fn bring_up(d: &mut Dev, qpn: u32, remote: IpAddr, remote_qpn: u32, rq: u32, sq: u32) {
        let a = QpAttr {
            state: QpState::Init,
            port: 1,
            pkey_index: 0,
            access: Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ,
            ..QpAttr::default()
        };
        let m = QpAttrMask::STATE
            | QpAttrMask::PKEY_INDEX
            | QpAttrMask::PORT
            | QpAttrMask::ACCESS_FLAGS;
        d.e.modify_qp(qpn, &a, m).unwrap();
        let a = QpAttr {
            state: QpState::Rtr,
            av: Some(AddressVector::to(remote)),
            path_mtu: Mtu::Mtu1024,
            dest_qpn: remote_qpn,
            rq_psn: Psn::new(rq),
            max_dest_rd_atomic: 4,
            min_rnr_timer: 1,
            ..QpAttr::default()
        };
        let m = QpAttrMask::STATE
            | QpAttrMask::AV
            | QpAttrMask::PATH_MTU
            | QpAttrMask::DEST_QPN
            | QpAttrMask::RQ_PSN
            | QpAttrMask::MAX_DEST_RD_ATOMIC
            | QpAttrMask::MIN_RNR_TIMER;
        d.e.modify_qp(qpn, &a, m).unwrap();
        let a = QpAttr {
            state: QpState::Rts,
            sq_psn: Psn::new(sq),
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            max_rd_atomic: 4,
            ..QpAttr::default()
        };
        let m = QpAttrMask::STATE
            | QpAttrMask::SQ_PSN
            | QpAttrMask::TIMEOUT
            | QpAttrMask::RETRY_CNT
            | QpAttrMask::RNR_RETRY
            | QpAttrMask::MAX_QP_RD_ATOMIC;
        d.e.modify_qp(qpn, &a, m).unwrap();
    }

    /// Drives both devices over real sockets until each has `want`
    /// completions (or 10 s pass); returns them.
    fn run_until(devs: &mut [Dev; 2], want: [usize; 2]) -> [Vec<Completion>; 2] {
        run_until_dropping(devs, want, &mut |_| false)
    }

    /// [`run_until`], with the datagrams `lose` says true for lost on
    /// arrival.
    fn run_until_dropping(
        devs: &mut [Dev; 2],
        want: [usize; 2],
        lose: &mut dyn FnMut(&Datagram<'_>) -> bool,
    ) -> [Vec<Completion>; 2] {
        let mut done: [Vec<Completion>; 2] = [Vec::new(), Vec::new()];
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline && (0..2).any(|i| done[i].len() < want[i]) {
            for d in devs.iter_mut() {
                let now = Instant::now();
                if d.e.next_timeout().is_some_and(|t| t <= now) {
                    d.e.handle_timeout(now);
                }
                while let Some(t) = d.e.poll_transmit(now) {
                    d.pending.push(t);
                }
                while !d.pending.is_empty() {
                    match d.t.send_batch(&d.pending) {
                        Ok(0) => break, // full: later
                        Ok(n) => drop(d.pending.drain(..n)),
                        Err(e) => panic!("{e}"),
                    }
                }
            }
            for (i, d) in devs.iter_mut().enumerate() {
                let Dev { e, t, cq, .. } = d;
                t.recv_with(Some(Duration::from_micros(200)), |dg| {
                    if !lose(&dg) {
                        e.handle_datagram(Instant::now(), dg.meta, dg.payload)
                    }
                })
                .unwrap();
                e.poll_cq(*cq, usize::MAX, &mut done[i]).unwrap();
            }
        }
        done
    }

    fn engines_over_udp(a: UdpTransport, b: UdpTransport) {
        let mode = a.recv_mode();
        let mut devs = [dev(a, 11), dev(b, 12)];
        let (aa, ba) = (devs[0].t.addr(), devs[1].t.addr());
        let qa = create_rc_qp(&mut devs[0]);
        let qb = create_rc_qp(&mut devs[1]);
        bring_up(&mut devs[0], qa, ba, qb, 5000, 100);
        bring_up(&mut devs[1], qb, aa, qa, 100, 5000);

        // RC SEND of 100 KB.
        const LEN: usize = 100 * 1024;
        let data: Vec<u8> = (0..LEN as u32)
            .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
            .collect();
        assert!(devs[0].mem.write(0, &data));
        let rlkey = devs[1].mr.lkey;
        devs[1]
            .e
            .post_recv(
                qb,
                RecvWr {
                    wr_id: 7,
                    sg_list: vec![Sge {
                        addr: IOVA + 4096,
                        length: LEN as u32,
                        lkey: rlkey,
                    }],
                },
            )
            .unwrap();
        let mut wr = SendWr::new(1, SendOpcode::Send);
        wr.sg_list = vec![Sge {
            addr: IOVA,
            length: LEN as u32,
            lkey: devs[0].mr.lkey,
        }];
        devs[0].e.post_send(qa, wr).unwrap();
        let [ca, cb] = run_until(&mut devs, [1, 1]);
        assert_eq!(ca.len(), 1, "{ca:?}");
        assert_eq!(ca[0].status, WcStatus::Success);
        assert_eq!(cb.len(), 1, "{cb:?}");
        assert_eq!(cb[0].status, WcStatus::Success);
        assert_eq!(cb[0].byte_len as usize, LEN);
        assert!(devs[1].mem.snapshot()[4096..4096 + LEN] == data[..]);

        // RDMA WRITE of 100 KB (plus an odd tail) to another place.
        const WLEN: usize = LEN + 13;
        let wdata: Vec<u8> = (0..WLEN as u32).map(|i| (i ^ (i >> 7)) as u8).collect();
        assert!(devs[0].mem.write(300_000, &wdata));
        let mut wr = SendWr::new(2, SendOpcode::RdmaWrite);
        wr.sg_list = vec![Sge {
            addr: IOVA + 300_000,
            length: WLEN as u32,
            lkey: devs[0].mr.lkey,
        }];
        wr.remote_addr = IOVA + 600_001;
        wr.rkey = devs[1].mr.rkey;
        devs[0].e.post_send(qa, wr).unwrap();
        let [ca, _] = run_until(&mut devs, [1, 0]);
        assert_eq!(ca.len(), 1, "{ca:?}");
        assert_eq!(ca[0].status, WcStatus::Success);
        let snap = devs[1].mem.snapshot();
        assert!(snap[600_001..600_001 + WLEN] == wdata[..]);
        assert!(snap[600_000] == 0 && snap[600_001 + WLEN] == 0);

        for d in &devs {
            let (c, s) = (d.e.counters(), d.t.stats());
            println!(
                "{mode} {}: engine sent {} rcvd {} retransmitted {}; udp tx {} rx {} \
                 (icrc ok {}, bad {}, unverified {}), tx_full {}",
                d.t.addr(),
                c.sent_pkts,
                c.rcvd_pkts,
                c.retransmitted_pkts,
                s.tx_packets,
                s.rx_packets,
                s.icrc_ok,
                s.icrc_bad,
                s.icrc_unverified,
                s.tx_full,
            );
            assert_eq!(c.icrc_unverified, 0);
            assert!(!c
                .drops
                .contains_key(&rxe_core::engine::DropReason::IcrcError));
            assert_eq!(s.icrc_ok, s.rx_packets);
            assert!(s.rx_packets > 0);
        }
    }

    #[test]
    fn engines_rc_send_and_write_over_real_udp() {
        let a = bind_loopback(lo(2), RecvMode::Plain).unwrap();
        let b = bind_loopback(lo(3), RecvMode::Plain).unwrap();
        engines_over_udp(a, b);
    }

    #[test]
    fn engines_rc_send_and_write_over_real_udp_raw_mode() {
        let test = "engines_rc_send_and_write_over_real_udp_raw_mode";
        let Some(a) = bind_raw(lo(13), test) else {
            return;
        };
        let Some(b) = bind_raw(lo(14), test) else {
            return;
        };
        engines_over_udp(a, b);
    }

    // ---- GSO and GRO ----

    /// Packets of `len` bytes of data each (a different QP every other
    /// one), then one shorter: a run of equal lengths whose last is shorter.
    fn gso_run_pkts(from: &UdpTransport, dst: IpAddr, n: usize, len: usize) -> Vec<Transmit> {
        let mut v: Vec<Transmit> = (0..n)
            .map(|i| {
                let data: Vec<u8> = (0..len).map(|j| (i * 31 + j) as u8).collect();
                let mut t = transmit(from, dst, 100 + i as u32, &data);
                if i % 2 == 1 {
                    // Another QP: BTH bytes 5..8 are the destination QP.
                    t.payload[7] = 0x34;
                    let end = t.payload.len() - ICRC_LEN;
                    let c = icrc::compute_udp(t.src, t.dst, t.src_port, &t.payload[..end]).unwrap();
                    t.payload[end..].copy_from_slice(&c.to_le_bytes());
                }
                t
            })
            .collect();
        v.push(transmit(from, dst, 100 + n as u32, b"short last"));
        v
    }

    /// The ID-per-segment rule against a segment list: the packet that
    /// becomes segment k of a GSO send leaves with the ICRC for IPv4 ID k,
    /// which verifies against segment k's real header (ID k, DF, its own
    /// lengths) and not against ID 0.
    #[test]
    fn gso_segment_k_carries_the_icrc_for_ip_id_k() {
        let (src, dst) = (Ipv4Addr::new(10, 1, 2, 3), Ipv4Addr::new(10, 1, 2, 4));
        let mut deltas = IdDeltas::default();
        for (n, len) in [(2usize, 16usize), (5, 1024), (64, 200), (15, 4096)] {
            let mut pkts: Vec<Vec<u8>> = (0..n)
                .map(|i| {
                    let data: Vec<u8> = (0..len).map(|j| (i ^ j) as u8).collect();
                    roce(src.into(), dst.into(), 4791, i as u32, &data)
                })
                .collect();
            pkts.push(roce(src.into(), dst.into(), 4791, 99, b"last"));
            let ts: Vec<Transmit> = pkts
                .iter()
                .map(|p| Transmit {
                    src: src.into(),
                    dst: dst.into(),
                    src_port: 4791,
                    traffic_class: 0,
                    hop_limit: 64,
                    payload: p.clone(),
                })
                .collect();
            let run = gso_run(&ts, &[]);
            assert_eq!(run, (n + 1).min(GSO_MAX_SEGMENTS), "n {n}");
            for (k, p) in pkts.iter().enumerate().take(run) {
                // What send_gso puts on the wire for segment k.
                let body = &p[..p.len() - ICRC_LEN];
                let carried = u32::from_le_bytes(p[p.len() - ICRC_LEN..].try_into().unwrap());
                let crc = carried ^ deltas.delta(body.len(), k as u16);
                // Segment k as the kernel writes it.
                let seg = |id: u16| {
                    let mut ip = Vec::new();
                    ip.extend_from_slice(&[0x45, 0]);
                    ip.extend_from_slice(&((28 + p.len()) as u16).to_be_bytes());
                    ip.extend_from_slice(&id.to_be_bytes());
                    ip.extend_from_slice(&[0x40, 0, 64, 17, 0, 0]);
                    ip.extend_from_slice(&src.octets());
                    ip.extend_from_slice(&dst.octets());
                    ip.extend_from_slice(&4791u16.to_be_bytes());
                    ip.extend_from_slice(&4791u16.to_be_bytes());
                    ip.extend_from_slice(&((8 + p.len()) as u16).to_be_bytes());
                    ip.extend_from_slice(&[0, 0]);
                    ip.extend_from_slice(body);
                    ip.extend_from_slice(&crc.to_le_bytes());
                    ip
                };
                assert!(icrc::verify(&seg(k as u16)).unwrap(), "n {n}, segment {k}");
                if k > 0 {
                    assert!(!icrc::verify(&seg(0)).unwrap(), "n {n}, segment {k}");
                }
            }
        }
        // What ends a run: another destination, TOS, a longer packet, the
        // segment and byte limits.
        let t = |dst: u8, tc: u8, len: usize| Transmit {
            src: src.into(),
            dst: IpAddr::V4(Ipv4Addr::new(10, 1, 2, dst)),
            src_port: 4791,
            traffic_class: tc,
            hop_limit: 64,
            payload: vec![0; len],
        };
        assert_eq!(gso_run(&[t(4, 0, 100), t(4, 0, 100), t(5, 0, 100)], &[]), 2);
        assert_eq!(gso_run(&[t(4, 0, 100), t(4, 4, 100)], &[]), 1);
        assert_eq!(gso_run(&[t(4, 0, 100), t(4, 0, 101)], &[]), 1);
        assert_eq!(gso_run(&[t(4, 0, 100), t(4, 0, 50), t(4, 0, 50)], &[]), 2);
        assert_eq!(gso_run(&vec![t(4, 0, 100); 80], &[]), 64);
        assert_eq!(gso_run(&vec![t(4, 0, 4112); 20], &[]), 15);
        assert_eq!(gso_run(&vec![t(4, 0, 100); 3], &[t(4, 0, 0).dst]), 1);
        assert_eq!(gso_run(&[t(4, 0, 8), t(4, 0, 8)], &[]), 1, "not RoCE");
    }

    /// Two transports on one address (`crate::share`): the kernel hands
    /// all of one sender's datagrams to one of them, which passes the
    /// other's on. A receiver that never waits (non-blocking receives
    /// only, as a spinning poller makes them) still gets what was passed
    /// on to it: the forward socket is looked at every `FWD_EVERY`th
    /// receive even when no wait saw it readable.
    #[test]
    fn forwarded_datagrams_reach_a_receiver_that_never_waits() {
        let mut a = UdpTransport::bind_with(lo(43).into(), RecvMode::Plain).unwrap();
        let mut b = UdpTransport::bind_with(lo(43).into(), RecvMode::Plain).unwrap();
        let mut tx = UdpTransport::bind(lo(44).into()).unwrap();
        let to = |prefix: u8, i: u32| {
            let mut t = transmit(&tx, a.addr(), i, b"shared");
            // The top 8 bits of the destination QP name the owner.
            t.payload[5] = prefix;
            let end = t.payload.len() - ICRC_LEN;
            let c = icrc::compute_udp(t.src, t.dst, t.src_port, &t.payload[..end]).unwrap();
            t.payload[end..].copy_from_slice(&c.to_le_bytes());
            t
        };
        let (pa, pb) = (a.qpn_prefix(), b.qpn_prefix());
        assert_ne!(pa, pb);
        let pkts: Vec<_> = (0..20)
            .map(|i| to(if i % 2 == 0 { pa } else { pb }, i))
            .collect();
        assert_eq!(tx.send_batch(&pkts).unwrap(), pkts.len());
        let (mut got_a, mut got_b) = (Vec::new(), Vec::new());
        for _ in 0..400 {
            for (t, got) in [(&mut a, &mut got_a), (&mut b, &mut got_b)] {
                t.recv_with(Some(Duration::ZERO), |d| got.push(d.payload[5]))
                    .unwrap();
            }
            if got_a.len() + got_b.len() == pkts.len() {
                break;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(got_a, vec![pa; 10]);
        assert_eq!(got_b, vec![pb; 10]);
        let passed = a.stats().rx_forwarded_in + b.stats().rx_forwarded_in;
        assert_eq!(passed, 10, "one of them got all 20 from the kernel");
    }

    /// `RXE_GSO`: 1 every destination, 0 none, unset or `loopback` the
    /// loopback addresses (on a kernel with UDP_GRO), anything else an
    /// error that names the variable.
    #[test]
    fn gso_setting_from_rxe_gso() {
        use std::env::VarError;
        let set = |v: &str| gso_setting(Ok(v.to_string()));
        assert_eq!(set("1").unwrap(), GsoSend::On);
        assert_eq!(set("0").unwrap(), GsoSend::Off);
        let default = if kernel_has_udp_gro() {
            GsoSend::Loopback
        } else {
            GsoSend::Off
        };
        assert_eq!(gso_setting(Err(VarError::NotPresent)).unwrap(), default);
        assert_eq!(set("loopback").unwrap(), default);
        let e = set("sometimes").unwrap_err();
        assert!(e.to_string().contains("RXE_GSO"), "{e}");
        assert!(GsoSend::Loopback.allows(Ipv4Addr::new(127, 0, 2, 3).into()));
        assert!(GsoSend::Loopback.allows(Ipv6Addr::LOCALHOST.into()));
        assert!(!GsoSend::Loopback.allows(Ipv4Addr::new(10, 1, 2, 3).into()));
        assert!(!GsoSend::Off.allows(Ipv4Addr::new(127, 0, 0, 1).into()));
        assert!(GsoSend::On.allows(Ipv4Addr::new(10, 1, 2, 3).into()));
    }

    /// The default policy to a loopback receiver: a run goes as one GSO
    /// send, and the receiver gets every packet, verified.
    #[test]
    fn loopback_policy_sends_a_run_to_loopback_as_one_gso_send() {
        let mut a = UdpTransport::bind(lo(41).into()).unwrap();
        let mut b = UdpTransport::bind(lo(42).into()).unwrap();
        a.set_gso_send(GsoSend::Loopback);
        let pkts = gso_run_pkts(&a, b.addr(), 10, 200);
        assert_eq!(a.send_batch(&pkts).unwrap(), pkts.len());
        assert_eq!(a.stats().tx_gso_sends, 1);
        assert_eq!(a.stats().tx_gso_segments, pkts.len() as u64);
        let (got, _) = recv_n(&mut b, pkts.len());
        assert_eq!(got.len(), pkts.len());
        for (r, t) in got.iter().zip(&pkts) {
            let end = t.payload.len() - ICRC_LEN;
            assert_eq!(r.data[..end], t.payload[..end]);
            assert_eq!(r.meta.icrc, IcrcStatus::Ok);
        }
    }

    /// One GSO send that mixes QPs and ends shorter, with a corrupted
    /// packet in the middle, to receivers that did not turn GSO on: a
    /// plain one (UDP_GRO, always set: one datagram, cut at the segment
    /// size), a plain one whose UDP_GRO is cleared, as on a kernel without
    /// it (the UDP layer segments), and a raw one (the unsegmented
    /// super-packet): all get every packet, bytes right, each with the
    /// ICRC the sender reported (SentAs).
    #[test]
    fn gso_sender_reaches_gro_plain_and_raw_receivers() {
        let mut tx = bind_loopback(lo(30), RecvMode::Plain).unwrap();
        tx.set_gso(true).unwrap();
        // Receivers that did not turn GSO on: the receive side is always on.
        let mut gro = bind_loopback(lo(31), RecvMode::Plain).unwrap();
        // As on a kernel without UDP_GRO (before 5.0): the UDP layer
        // segments for the socket, which gets the segments one by one.
        let mut nogro = bind_loopback(lo(32), RecvMode::Plain).unwrap();
        setsockopt_int(nogro.recv_fd().as_raw_fd(), libc::IPPROTO_UDP, UDP_GRO, 0).unwrap();
        let mut raw = bind_raw(lo(33), "gso_sender_reaches_gro_plain_and_raw_receivers");
        let mut rxs: Vec<(&mut UdpTransport, bool)> = vec![(&mut gro, true), (&mut nogro, false)];
        if let Some(r) = raw.as_mut() {
            rxs.push((r, true));
        }
        for (rx, whole) in rxs {
            // As a process started without RXE_GSO (whatever this one's
            // environment says).
            rx.set_gso(false).unwrap();
            let before = *tx.stats();
            let mut pkts = gso_run_pkts(&tx, rx.addr(), 9, 300);
            pkts[4] = corrupt(pkts[4].clone());
            let mut sent_as = Vec::new();
            let n = tx
                .send_batch_with(&pkts, &mut |_, s| sent_as.push(s))
                .unwrap();
            assert_eq!(n, pkts.len());
            let ids: Vec<u16> = sent_as.iter().map(|s| s.ip_id).collect();
            assert_eq!(ids, (0..pkts.len() as u16).collect::<Vec<_>>());
            assert_eq!(tx.stats().tx_gso_sends - before.tx_gso_sends, 1);
            assert_eq!(
                tx.stats().tx_gso_segments - before.tx_gso_segments,
                pkts.len() as u64
            );
            let mut got = Vec::new();
            let deadline = Instant::now() + Duration::from_secs(2);
            while got.len() < pkts.len() && Instant::now() < deadline {
                rx.recv_with(Some(Duration::from_millis(100)), |d| {
                    got.push((
                        d.meta.icrc,
                        d.payload.to_vec(),
                        d.ip_packet.map(<[u8]>::to_vec),
                    ))
                })
                .unwrap();
            }
            let mode = rx.recv_mode();
            assert_eq!(got.len(), pkts.len(), "{mode} gro {whole}");
            for (k, ((v, p, ip), t)) in got.iter().zip(&pkts).enumerate() {
                let end = p.len() - ICRC_LEN;
                assert_eq!(p[..end], t.payload[..end], "{mode} gro {whole} packet {k}");
                // The ICRC as sent: adjusted for ID k, as SentAs says.
                assert_eq!(p[end..], sent_as[k].icrc, "{mode} gro {whole} packet {k}");
                let want = match (k, whole) {
                    (4, _) => IcrcStatus::Bad,
                    (0, _) | (_, true) => IcrcStatus::Ok,
                    // No header, no GRO: the solver finds ID k.
                    (_, false) => IcrcStatus::Unverified,
                };
                assert_eq!(*v, want, "{mode} gro {whole} packet {k}");
                if let Some(ip) = ip {
                    // Raw mode: the segment as the kernel would have cut it.
                    assert_eq!(u16::from_be_bytes([ip[4], ip[5]]), k as u16);
                    assert_eq!(&ip[28..], &p[..]);
                    assert_eq!(icrc::verify(ip).unwrap(), k != 4, "packet {k}");
                    assert_eq!(
                        RoceFrame::parse_ip(ip, None).unwrap().transport,
                        &p[..],
                        "lengths add up"
                    );
                }
            }
            let s = rx.stats();
            assert_eq!(s.rx_gso_split, u64::from(whole), "{mode}");
            assert_eq!(s.icrc_bad, 1);
            assert_eq!(s.rx_truncated, 0);
            assert_nothing_queued(rx);
        }
    }

    /// Raw mode with GSO: a long packet no segment size explains is dropped
    /// and counted; a short one goes on as one Bad packet; a super-packet
    /// whose segments are not of one size is not split; none panics.
    #[test]
    fn raw_mode_drops_malformed_super_packets() {
        let Some(mut rx) = bind_raw(lo(34), "raw_mode_drops_malformed_super_packets") else {
            return;
        };
        // As a process without RXE_GSO: the receive side is always on.
        rx.set_gso(false).unwrap();
        let tx4 = lo(35);
        let IpAddr::V4(rx4) = rx.addr() else {
            unreachable!()
        };
        // 20,000 bytes of garbage behind a good BTH: longer than any packet.
        let mut big = rxe_style_ipv4(tx4, rx4, 7, 1, &vec![0x5a; 20_000]);
        // The same with its ICRC right as one packet: too long, dropped as
        // truncated (its ICRC is looked at only after no split fits it).
        send_ip_hdrincl(&big, rx4).unwrap();
        let n = big.len();
        big[n - 1] ^= 1;
        send_ip_hdrincl(&big, rx4).unwrap();
        // Segments of 3 sizes, each ICRC right for ID + k: no one size
        // explains them, and it is short enough for one packet.
        let mut odd = Vec::new();
        let mut payload = Vec::new();
        for (k, len) in [40usize, 60, 40].into_iter().enumerate() {
            let seg = rxe_style_ipv4(tx4, rx4, 50 + k as u16, k as u32, &vec![k as u8; len]);
            payload.extend_from_slice(&seg[28..]);
            if k == 0 {
                odd.extend_from_slice(&seg[..28]);
            }
        }
        odd.extend_from_slice(&payload);
        let l = odd.len();
        odd[2..4].copy_from_slice(&(l as u16).to_be_bytes());
        odd[24..26].copy_from_slice(&((l - 20) as u16).to_be_bytes());
        send_ip_hdrincl(&odd, rx4).unwrap();
        let (got, _) = recv_n(&mut rx, 1);
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].meta.icrc, IcrcStatus::Bad);
        assert_eq!(got[0].data, odd[28..]);
        assert_nothing_queued(&mut rx);
        let s = rx.stats();
        assert_eq!(s.rx_gso_malformed, 1, "{s:?}");
        assert_eq!(s.rx_truncated, 1, "{s:?}");
        assert_eq!(s.rx_gso_split, 0, "{s:?}");
        assert_eq!(s.rx_packets, 1, "{s:?}");
    }

    /// RC over GSO senders and GRO (plain) or splitting (raw) receivers,
    /// with packet 2 of a GSO batch lost on arrival: the responder NAKs,
    /// the requester goes back, the bytes arrive right.
    fn gso_engines_recover_a_lost_segment(mut a: UdpTransport, mut b: UdpTransport) {
        a.set_gso(true).unwrap();
        b.set_gso(true).unwrap();
        let mode = a.recv_mode();
        let mut devs = [dev(a, 21), dev(b, 22)];
        let (aa, ba) = (devs[0].t.addr(), devs[1].t.addr());
        let qa = create_rc_qp(&mut devs[0]);
        let qb = create_rc_qp(&mut devs[1]);
        bring_up(&mut devs[0], qa, ba, qb, 7000, 300);
        bring_up(&mut devs[1], qb, aa, qa, 300, 7000);
        const LEN: usize = 150 * 1024 + 77;
        let data: Vec<u8> = (0..LEN as u32)
            .map(|i| (i.wrapping_mul(2246822519) >> 11) as u8)
            .collect();
        assert!(devs[0].mem.write(0, &data));
        let mut wr = SendWr::new(3, SendOpcode::RdmaWrite);
        wr.sg_list = vec![Sge {
            addr: IOVA,
            length: LEN as u32,
            lkey: devs[0].mr.lkey,
        }];
        wr.remote_addr = IOVA + 400_000;
        wr.rkey = devs[1].mr.rkey;
        devs[0].e.post_send(qa, wr).unwrap();
        // Segment 2 of a GSO send: its ICRC is right for ID 2, not 0.
        let mut deltas = IdDeltas::default();
        let mut lost = 0;
        let [ca, _] = run_until_dropping(&mut devs, [1, 0], &mut |d| {
            let p = d.payload;
            if lost > 0 || d.meta.dst != ba || p.len() < 100 {
                return false;
            }
            let (body, tail) = p.split_at(p.len() - ICRC_LEN);
            let carried = u32::from_le_bytes(tail.try_into().unwrap());
            let c0 = icrc::compute_udp(d.meta.src, d.meta.dst, d.meta.src_port, body).unwrap();
            if c0 ^ deltas.delta(body.len(), 2) == carried {
                lost += 1;
                return true;
            }
            false
        });
        assert_eq!(lost, 1, "{mode}: a segment 2 came by");
        assert_eq!(ca.len(), 1, "{mode}: {ca:?}");
        assert_eq!(ca[0].status, WcStatus::Success);
        assert!(devs[1].mem.snapshot()[400_000..400_000 + LEN] == data[..]);
        let c = devs[0].e.counters();
        assert!(c.retransmitted_pkts > 0, "{mode}: {c:?}");
        for d in &devs {
            let s = d.t.stats();
            assert!(s.tx_gso_sends > 0 || d.t.addr() == ba, "{mode}: {s:?}");
            assert_eq!(s.icrc_bad, 0, "{mode}: {s:?}");
            assert_eq!(s.icrc_unverified, 0, "{mode}: {s:?}");
        }
        assert!(devs[1].t.stats().rx_gso_split > 0);
    }

    #[test]
    fn gso_rc_write_recovers_a_segment_lost_mid_batch_plain() {
        let a = bind_loopback(lo(36), RecvMode::Plain).unwrap();
        let b = bind_loopback(lo(37), RecvMode::Plain).unwrap();
        gso_engines_recover_a_lost_segment(a, b);
    }

    #[test]
    fn gso_rc_write_recovers_a_segment_lost_mid_batch_raw() {
        let test = "gso_rc_write_recovers_a_segment_lost_mid_batch_raw";
        let Some(a) = bind_raw(lo(38), test) else {
            return;
        };
        let Some(b) = bind_raw(lo(39), test) else {
            return;
        };
        gso_engines_recover_a_lost_segment(a, b);
    }

    /// A network namespace of its own (`ip netns add`), deleted on drop.
    struct Netns(String);

    impl Netns {
        fn new(tag: &str) -> Option<Netns> {
            let name = format!("rxe-gso-{tag}-{}", std::process::id());
            let ok = std::process::Command::new("ip")
                .args(["netns", "add", &name])
                .stderr(std::process::Stdio::null())
                .status()
                .is_ok_and(|s| s.success());
            ok.then_some(Netns(name))
        }

        /// Runs a command in the namespace; true if it succeeded.
        fn run(&self, cmd: &str) -> bool {
            std::process::Command::new("ip")
                .args(["netns", "exec", &self.0])
                .args(cmd.split_whitespace())
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        }

        /// Moves the calling thread into the namespace (sockets it opens
        /// then belong there, and stay there).
        fn enter(&self) {
            let f = std::fs::File::open(format!("/run/netns/{}", self.0)).unwrap();
            // SAFETY: plain system call on an open descriptor.
            let r = unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) };
            assert_eq!(r, 0, "setns: {}", io::Error::last_os_error());
        }
    }

    impl Drop for Netns {
        fn drop(&mut self) {
            let _ = std::process::Command::new("ip")
                .args(["netns", "del", &self.0])
                .status();
        }
    }

    /// Receives `n` packets (or for 3 s): (verdict, payload, IP packet).
    fn recv_full(rx: &mut UdpTransport, n: usize) -> Vec<(IcrcStatus, Vec<u8>, Option<Vec<u8>>)> {
        let mut got = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(3);
        while got.len() < n && Instant::now() < deadline {
            rx.recv_with(Some(Duration::from_millis(100)), |d| {
                got.push((
                    d.meta.icrc,
                    d.payload.to_vec(),
                    d.ip_packet.map(<[u8]>::to_vec),
                ))
            })
            .unwrap();
        }
        got
    }

    /// On the wire: a GSO send cut up in software in front of a veth (its
    /// UDP segmentation offload off) arrives as ordinary packets with IDs
    /// 0, 1, 2..., all DF, which a raw receiver without GSO checks against
    /// their real headers: every ICRC right. With the offload on, the
    /// super-packet crosses the veth whole and a raw receiver with GSO
    /// splits it. Two namespaces of the test's own, root only.
    #[test]
    fn gso_segments_on_the_wire_carry_ids_0_1_2_and_verify() {
        let test = "gso_segments_on_the_wire_carry_ids_0_1_2_and_verify";
        let (Some(na), Some(nb)) = (Netns::new("wa"), Netns::new("wb")) else {
            println!("SKIPPED {test}: cannot create network namespaces");
            return;
        };
        let setup = [
            (
                &na,
                format!("ip link add va type veth peer name vb netns {}", nb.0),
            ),
            (&na, "ip addr add 10.213.7.1/24 dev va".into()),
            (&nb, "ip addr add 10.213.7.2/24 dev vb".into()),
            (&na, "ip link set va up".into()),
            (&nb, "ip link set vb up".into()),
            (&na, "ethtool -K va tx-udp-segmentation off".into()),
        ];
        for (ns, cmd) in &setup {
            if !ns.run(cmd) {
                println!("SKIPPED {test}: `{cmd}` failed");
                return;
            }
        }
        std::thread::spawn(move || {
            let (a4, b4) = (Ipv4Addr::new(10, 213, 7, 1), Ipv4Addr::new(10, 213, 7, 2));
            na.enter();
            let mut tx = UdpTransport::bind(a4.into()).unwrap();
            tx.set_gso(true).unwrap();
            nb.enter();
            // A receiver that does not send with GSO.
            let mut rx = UdpTransport::bind_with(b4.into(), RecvMode::Raw).unwrap();
            rx.set_gso(false).unwrap();
            // Resolve the neighbour first.
            let (txa, rxa) = (tx.addr(), rx.addr());
            assert_eq!(tx.send_batch(&[transmit(&tx, rxa, 1, b"arp")]).unwrap(), 1);
            assert_eq!(recv_full(&mut rx, 1).len(), 1);
            // The default policy sends no GSO to an address that is not
            // loopback: one datagram a packet, every ID 0.
            tx.set_gso_send(GsoSend::Loopback);
            let pkts = gso_run_pkts(&tx, rxa, 9, 300);
            assert_eq!(tx.send_batch(&pkts).unwrap(), pkts.len());
            assert_eq!(tx.stats().tx_gso_sends, 0);
            let got = recv_full(&mut rx, pkts.len());
            assert_eq!(got.len(), pkts.len());
            for ((v, p, ip), t) in got.iter().zip(&pkts) {
                let ip = ip.as_ref().unwrap();
                assert_eq!(u16::from_be_bytes([ip[4], ip[5]]), 0, "IP ID");
                assert_eq!(*v, IcrcStatus::Ok);
                assert_eq!(*p, t.payload);
            }
            tx.set_gso(true).unwrap();
            for offload in [false, true] {
                if offload {
                    assert!(na.run("ethtool -K va tx-udp-segmentation on"));
                }
                let mut pkts = gso_run_pkts(&tx, rxa, 9, 300);
                pkts[4] = corrupt(pkts[4].clone());
                let sends = tx.stats().tx_gso_sends;
                assert_eq!(tx.send_batch(&pkts).unwrap(), pkts.len());
                assert_eq!(tx.stats().tx_gso_sends, sends + 1);
                let got = recv_full(&mut rx, pkts.len());
                assert_eq!(got.len(), pkts.len(), "offload {offload}");
                for (k, ((v, p, ip), t)) in got.iter().zip(&pkts).enumerate() {
                    let ip = ip.as_ref().unwrap();
                    let end = p.len() - ICRC_LEN;
                    assert_eq!(p[..end], t.payload[..end]);
                    assert_eq!(u16::from_be_bytes([ip[4], ip[5]]), k as u16, "IP ID");
                    assert_eq!(ip[6] & 0x40, 0x40, "DF");
                    let want = if k == 4 {
                        IcrcStatus::Bad
                    } else {
                        IcrcStatus::Ok
                    };
                    assert_eq!(*v, want, "offload {offload}, packet {k}");
                }
                assert_eq!(rx.stats().rx_gso_split, u64::from(offload));
            }
            let _ = txa;
            drop((tx, rx));
            (na, nb)
        })
        .join()
        .unwrap();
    }

    /// A full socket buffer cuts a batch of GSO sends short at a send: the
    /// call returns how many packets went (whole runs), counts `tx_full`,
    /// and the rest goes once there is room; the receiver gets exactly the
    /// packets sent, in order, every ICRC right. The buffer fills behind a
    /// slow qdisc (4 Mbit/s) on the loopback device of a namespace of the
    /// test's own.
    #[test]
    fn gso_send_cut_short_by_a_full_socket_buffer() {
        let test = "gso_send_cut_short_by_a_full_socket_buffer";
        let Some(ns) = Netns::new("full") else {
            println!("SKIPPED {test}: cannot create a network namespace");
            return;
        };
        for cmd in [
            "ip link set lo up",
            "tc qdisc add dev lo root tbf rate 4mbit burst 64kb limit 64mb",
        ] {
            if !ns.run(cmd) {
                println!("SKIPPED {test}: `{cmd}` failed");
                return;
            }
        }
        std::thread::spawn(move || {
            ns.enter();
            let mut tx = UdpTransport::bind(lo(2).into()).unwrap();
            tx.set_gso(true).unwrap();
            let mut rx = UdpTransport::bind(lo(3).into()).unwrap();
            setsockopt_int(tx.udp.as_raw_fd(), libc::SOL_SOCKET, libc::SO_SNDBUF, 65536).unwrap();
            let rxa = rx.addr();
            // Four runs a batch: 16 packets of 1040 bytes, 1 of 26, ...
            let batch: Vec<Transmit> = (0..4)
                .flat_map(|r| gso_run_pkts(&tx, rxa, 15, 1000 + 8 * r))
                .collect();
            let bounds: Vec<usize> = (0..=4).map(|r| 16 * r).collect();
            let mut sent: Vec<Transmit> = Vec::new();
            let mut cut = None;
            for _ in 0..100 {
                let n = tx.send_batch(&batch).unwrap();
                sent.extend_from_slice(&batch[..n]);
                if n < batch.len() {
                    cut = Some(n);
                    break;
                }
            }
            let n = cut.expect("the send buffer never filled");
            assert!(bounds.contains(&n), "cut at {n}: not at a run's end");
            assert!(tx.stats().tx_full >= 1);
            // Room again once the qdisc lets some out: the rest goes.
            assert!(tx.wait_writable(Some(Duration::from_secs(10))).unwrap());
            let mut rest = &batch[n..];
            let deadline = Instant::now() + Duration::from_secs(10);
            while !rest.is_empty() && Instant::now() < deadline {
                let k = tx.send_batch(rest).unwrap();
                sent.extend_from_slice(&rest[..k]);
                rest = &rest[k..];
                if k == 0 {
                    tx.wait_writable(Some(Duration::from_millis(10))).unwrap();
                }
            }
            assert!(rest.is_empty());
            let got = recv_full(&mut rx, sent.len());
            assert_eq!(got.len(), sent.len());
            for (k, ((v, p, _), t)) in got.iter().zip(&sent).enumerate() {
                let end = p.len() - ICRC_LEN;
                assert_eq!(p[..end], t.payload[..end], "packet {k}");
                assert_eq!(*v, IcrcStatus::Ok, "packet {k}");
            }
            assert_nothing_queued(&mut rx);
            drop((tx, rx));
            ns
        })
        .join()
        .unwrap();
    }
}
