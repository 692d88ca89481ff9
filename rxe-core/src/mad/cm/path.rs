//! The path a connection takes, as a REQ (primary and alternate, IBTA
//! 12.6.5 table 106) and a LAP (alternate, table 115) carry it.
//!
//! In a REQ, 44 bytes from `base` (52 for the primary path, 96 for the
//! alternate):
//! ```text
//! +0  local port LID (16)          +2  remote port LID (16)
//! +4  local port GID (128)
//! +20 remote port GID (128)
//! +36 flow label (20) | resv (6) | packet rate (6)
//! +40 traffic class (8)            +41 hop limit (8)
//! +42 SL (4) | subnet local (1) | resv (3)
//! +43 local ACK timeout (5) | resv (3)
//! ```
//! In a LAP, from byte 20, the same fields in another order: LIDs, GIDs,
//! then flow label (20) | resv (4) | traffic class (8), hop limit, resv (2)
//! | packet rate (6), SL | subnet local | resv, local ACK timeout | resv.
//!
//! Over RoCE the GIDs are the IP addresses (IPv4 as `::ffff:a.b.c.d`) and
//! Linux puts the permissive LID 0xFFFF in both LID fields of the primary
//! path; an absent alternate path is all zeros.

use crate::mad::{Reader, Writer};
use core::fmt;
use std::net::Ipv6Addr;

/// One path of a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CmPath {
    /// Local Port LID (the sender's).
    pub local_lid: u16,
    /// Remote Port LID.
    pub remote_lid: u16,
    /// Local Port GID.
    pub local_gid: Ipv6Addr,
    /// Remote Port GID.
    pub remote_gid: Ipv6Addr,
    /// Flow Label (20 bits).
    pub flow_label: u32,
    /// Packet Rate (6 bits, IBTA's rate encoding).
    pub packet_rate: u8,
    /// Traffic Class.
    pub traffic_class: u8,
    /// Hop Limit.
    pub hop_limit: u8,
    /// SL (4 bits).
    pub sl: u8,
    /// Subnet Local: the remote port is on the local subnet.
    pub subnet_local: bool,
    /// Local ACK Timeout (5-bit exponent, 4.096 µs × 2^value).
    pub local_ack_timeout: u8,
}

impl Default for CmPath {
    fn default() -> Self {
        CmPath {
            local_lid: 0,
            remote_lid: 0,
            local_gid: Ipv6Addr::UNSPECIFIED,
            remote_gid: Ipv6Addr::UNSPECIFIED,
            flow_label: 0,
            packet_rate: 0,
            traffic_class: 0,
            hop_limit: 0,
            sl: 0,
            subnet_local: false,
            local_ack_timeout: 0,
        }
    }
}

impl CmPath {
    /// True if every field is zero: how a REQ says "no alternate path".
    pub fn is_empty(&self) -> bool {
        *self == CmPath::default()
    }

    /// Reads a path in the REQ layout at `base`.
    pub(crate) fn read_req(r: &Reader<'_>, base: usize) -> Self {
        CmPath {
            local_lid: r.u16(base),
            remote_lid: r.u16(base + 2),
            local_gid: r.gid(base + 4),
            remote_gid: r.gid(base + 20),
            flow_label: r.u32(base + 36) >> 12,
            packet_rate: r.bits(base + 39, 2, 6),
            traffic_class: r.u8(base + 40),
            hop_limit: r.u8(base + 41),
            sl: r.bits(base + 42, 0, 4),
            subnet_local: r.flag(base + 42, 4),
            local_ack_timeout: r.bits(base + 43, 0, 5),
        }
    }

    /// Writes a path in the REQ layout at `base`.
    pub(crate) fn write_req(&self, w: &mut Writer<'_>, base: usize) {
        w.u16(base, self.local_lid);
        w.u16(base + 2, self.remote_lid);
        w.gid(base + 4, self.local_gid);
        w.gid(base + 20, self.remote_gid);
        w.u32(base + 36, (self.flow_label & 0xf_ffff) << 12);
        w.bits(base + 39, 2, 6, self.packet_rate);
        w.u8(base + 40, self.traffic_class);
        w.u8(base + 41, self.hop_limit);
        w.bits(base + 42, 0, 4, self.sl);
        w.flag(base + 42, 4, self.subnet_local);
        w.bits(base + 43, 0, 5, self.local_ack_timeout);
    }

    /// Reads the alternate path of a LAP (from byte 20).
    pub(crate) fn read_lap(r: &Reader<'_>) -> Self {
        CmPath {
            local_lid: r.u16(20),
            remote_lid: r.u16(22),
            local_gid: r.gid(24),
            remote_gid: r.gid(40),
            flow_label: r.u32(56) >> 12,
            traffic_class: r.u8(59),
            hop_limit: r.u8(60),
            packet_rate: r.bits(61, 2, 6),
            sl: r.bits(62, 0, 4),
            subnet_local: r.flag(62, 4),
            local_ack_timeout: r.bits(63, 0, 5),
        }
    }

    /// Writes the alternate path of a LAP (from byte 20).
    pub(crate) fn write_lap(&self, w: &mut Writer<'_>) {
        w.u16(20, self.local_lid);
        w.u16(22, self.remote_lid);
        w.gid(24, self.local_gid);
        w.gid(40, self.remote_gid);
        w.u32(56, (self.flow_label & 0xf_ffff) << 12);
        w.u8(59, self.traffic_class);
        w.u8(60, self.hop_limit);
        w.bits(61, 2, 6, self.packet_rate);
        w.bits(62, 0, 4, self.sl);
        w.flag(62, 4, self.subnet_local);
        w.bits(63, 0, 5, self.local_ack_timeout);
    }
}

/// Shows a GID as an IPv4 address when it is an IPv4-mapped one.
pub(crate) fn show_gid(g: &Ipv6Addr) -> String {
    match g.to_ipv4_mapped() {
        Some(v4) => v4.to_string(),
        None => g.to_string(),
    }
}

impl fmt::Display for CmPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "local_lid={:#06x} remote_lid={:#06x} local_gid={} remote_gid={} flow_label={:#07x} \
             packet_rate={} traffic_class={} hop_limit={} sl={} subnet_local={} local_ack_timeout={}",
            self.local_lid,
            self.remote_lid,
            show_gid(&self.local_gid),
            show_gid(&self.remote_gid),
            self.flow_label,
            self.packet_rate,
            self.traffic_class,
            self.hop_limit,
            self.sl,
            u8::from(self.subnet_local),
            self.local_ack_timeout
        )
    }
}
