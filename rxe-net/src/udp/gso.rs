//! UDP GSO and GRO: which destinations a send segments with `UDP_SEGMENT`
//! (`RXE_GSO`, [`GsoSend`]), the segment size a `UDP_GRO` receive
//! reports, and how many packets of a batch go in one GSO send. See "GSO
//! and GRO" in the parent module's docs.

use super::sys::setsockopt_int;
#[cfg(doc)]
use super::UdpTransport;
use super::GSO_MAX_SEGMENTS;
use rxe_core::engine::Transmit;
use rxe_core::wire::{BTH_LEN, ICRC_LEN};
use std::fmt;
use std::io;
use std::net::{IpAddr, Ipv4Addr};
use std::os::fd::AsRawFd;

/// The most UDP payload one GSO send carries: the IPv4 total length is 16
/// bits (65535, less 20 bytes of IP and 8 of UDP header).
pub(super) const GSO_MAX_BYTES: usize = 65535 - 28;

/// `SOL_UDP` options (linux/udp.h).
pub(super) const UDP_SEGMENT: libc::c_int = 103;
pub(super) const UDP_GRO: libc::c_int = 104;

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
pub(super) fn gso_setting(v: Result<String, std::env::VarError>) -> io::Result<GsoSend> {
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
pub(super) fn kernel_has_udp_gro() -> bool {
    static HAS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *HAS.get_or_init(|| {
        std::net::UdpSocket::bind((Ipv4Addr::LOCALHOST, 0))
            .map(|s| setsockopt_int(s.as_raw_fd(), libc::IPPROTO_UDP, UDP_GRO, 1).is_ok())
            .unwrap_or(false)
    })
}

/// The segment size in a `UDP_GRO` control message, if there is one.
pub(super) fn gro_segment_size(h: &libc::msghdr) -> Option<usize> {
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
pub(super) fn gso_run(pkts: &[Transmit], no_gso: &[IpAddr]) -> usize {
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
