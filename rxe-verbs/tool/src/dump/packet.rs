//! A RoCE packet as `rxe dump` shows it: the parsed packet with its frame
//! number, time and ICRC verdict, its one-line text form, the MAD header
//! of a CM packet, and the lenient address reader for frames that do not
//! parse. The text dump, the ladder and the explainer all build on this.

use rxe_core::wire::{
    Error as WireError, LinkType, Operation, PacketRepr, RoceFrame, ROCE_V2_PORT,
};
use std::net::IpAddr;
use std::time::Duration;

/// A RoCE packet taken apart, as the formatters see it.
pub(crate) struct Parsed<'a> {
    pub(crate) frame: u64,
    pub(crate) time: Rel,
    pub(crate) roce: &'a RoceFrame<'a>,
    pub(crate) repr: &'a PacketRepr<'a>,
    pub(crate) icrc: u32,
    pub(crate) icrc_expected: u32,
}

impl Parsed<'_> {
    pub(crate) fn icrc_ok(&self) -> bool {
        self.icrc == self.icrc_expected
    }
}

/// Time relative to the first frame, in nanoseconds (negative if the
/// capture's timestamps go backwards).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Rel(pub(crate) i128);

impl Rel {
    pub(crate) fn new(t: Duration, t0: Duration) -> Rel {
        Rel(t.as_nanos() as i128 - t0.as_nanos() as i128)
    }
    pub(crate) fn secs(self) -> f64 {
        self.0 as f64 / 1e9
    }
}

impl std::fmt::Display for Rel {
    /// Seconds with six decimals, rounded to the microsecond.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let us = (self.0.abs() + 500) / 1000;
        let sign = if self.0 < 0 { "-" } else { "" };
        let s = format!("{sign}{}.{:06}", us / 1_000_000, us % 1_000_000);
        f.pad(&s)
    }
}

/// The text line of a packet, e.g.
/// `    1   0.000000      10.99.0.12 → 10.99.0.11      RC_SEND_ONLY QP=0x000011 PSN=5 A len=512 ICRC ok`.
pub(crate) fn text_line(p: &Parsed) -> String {
    let b = &p.repr.bth;
    let mut s = format!(
        "{:>5} {:>10} {:>15} → {:<15} {} QP={:#08x} PSN={}",
        p.frame,
        p.time,
        p.roce.ip.src(),
        p.roce.ip.dst(),
        b.opcode,
        b.dest_qp,
        b.psn.value()
    );
    let flags = [
        (b.solicited, "SE".to_owned()),
        (b.ack_req, "A".to_owned()),
        (b.mig_req, "M".to_owned()),
        (b.pad_count != 0, format!("pad={}", b.pad_count)),
        (b.pkey != 0xffff, format!("pkey={:#06x}", b.pkey)),
        (b.fecn, "FECN".to_owned()),
        (b.becn, "BECN".to_owned()),
    ];
    for (_, f) in flags.iter().filter(|(on, _)| *on) {
        s += &format!(" {f}");
    }
    let r = p.repr;
    if let Some(h) = r.rdeth {
        s += &format!(" {h}");
    }
    if let Some(h) = r.deth {
        s += &format!(" {h}");
    }
    if let Some(h) = r.feth {
        s += &format!(" {h}");
    }
    if let Some(h) = r.reth {
        s += &format!(
            " RETH va={:#x} rkey={:#010x} dma_len={}",
            h.va, h.rkey, h.dma_len
        );
    }
    if let Some(h) = r.atomic_eth {
        s += &format!(" AtomicETH va={:#x} rkey={:#010x}", h.va, h.rkey);
        s += &match b.opcode.info().map(|i| i.operation) {
            Some(Operation::FetchAdd) => format!(" add={:#x}", h.swap_add),
            _ => format!(" swap={:#x} compare={:#x}", h.swap_add, h.compare),
        };
    }
    if let Some(h) = r.aeth {
        s += &format!(" {h}");
    }
    if let Some(h) = r.atomic_ack_eth {
        s += &format!(" {h}");
    }
    if let Some(i) = r.immdt {
        s += &format!(" ImmDt={i:#010x}");
    }
    if let Some(k) = r.ieth {
        s += &format!(" IETH rkey={k:#010x}");
    }
    if let Some(m) = Mad::parse(p.repr) {
        s += &format!(" {m}");
    }
    let icrc = if p.icrc_ok() { "ok" } else { "BAD" };
    s + &format!(" len={} ICRC {icrc}", r.payload.len())
}

/// A frame to UDP port 4791 that rxe-core could not parse.
pub(crate) fn error_line(frame: u64, time: Rel, addrs: (IpAddr, IpAddr), e: &WireError) -> String {
    format!(
        "{frame:>5} {time:>10} {:>15} → {:<15} malformed RoCE packet: {e}",
        addrs.0, addrs.1
    )
}

/// The header of a management datagram sent to QP1 (CM REQ/REP/RTU/...).
pub(crate) struct Mad {
    pub(crate) class: u8,
    pub(crate) version: u8,
    pub(crate) method: u8,
    pub(crate) attr: u16,
}

impl Mad {
    pub(crate) fn parse(r: &PacketRepr) -> Option<Mad> {
        let p = r.payload;
        if r.bth.dest_qp != 1 || r.deth.is_none() || p.len() < 24 {
            return None;
        }
        Some(Mad {
            class: p[1],
            version: p[2],
            method: p[3],
            attr: u16::from_be_bytes([p[16], p[17]]),
        })
    }
    /// The CM attribute names Wireshark shows.
    pub(crate) fn cm_name(&self) -> Option<&'static str> {
        (self.class == 0x07).then_some(match self.attr {
            0x10 => "ConnectRequest",
            0x11 => "MsgRcptAck",
            0x12 => "ConnectReject",
            0x13 => "ConnectReply",
            0x14 => "ReadyToUse",
            0x15 => "DisconnectRequest",
            0x16 => "DisconnectReply",
            0x17 => "ServiceIDResReq",
            0x18 => "ServiceIDResReqResp",
            0x19 => "LoadAlternatePath",
            0x1a => "AlternatePathResponse",
            _ => return None,
        })
    }
}

impl std::fmt::Display for Mad {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.cm_name() {
            Some(n) => write!(f, "MAD CM {n}"),
            None => write!(
                f,
                "MAD class={:#04x} method={:#04x} attr={:#06x}",
                self.class, self.method, self.attr
            ),
        }
    }
}

/// Source and destination of a frame that is IPv4/IPv6 UDP to port 4791,
/// read leniently. rxe-core checks lengths before it looks at the protocol,
/// so its errors do not say whether a damaged frame was RoCE at all.
pub(crate) fn roce_addresses(link: LinkType, frame: &[u8]) -> Option<(IpAddr, IpAddr)> {
    let be16 = |b: &[u8], at: usize| Some(u16::from_be_bytes([*b.get(at)?, *b.get(at + 1)?]));
    let (mut ethertype, mut ip) = match link {
        LinkType::Ethernet => (be16(frame, 12)?, frame.get(14..)?),
        LinkType::LinuxSll => (be16(frame, 14)?, frame.get(16..)?),
        LinkType::LinuxSll2 => (be16(frame, 0)?, frame.get(20..)?),
        LinkType::RawIp => (0, frame),
    };
    while ethertype == 0x8100 || ethertype == 0x88a8 {
        ethertype = be16(ip, 2)?;
        ip = ip.get(4..)?;
    }
    let v4 = |at: usize| Some(IpAddr::from(<[u8; 4]>::try_from(ip.get(at..at + 4)?).ok()?));
    let v6 = |at: usize| {
        Some(IpAddr::from(
            <[u8; 16]>::try_from(ip.get(at..at + 16)?).ok()?,
        ))
    };
    let (version, proto, src, dst, udp) = match ip.first()? >> 4 {
        4 => {
            let hlen = usize::from(ip[0] & 0x0f) * 4;
            (4, *ip.get(9)?, v4(12)?, v4(16)?, ip.get(hlen..)?)
        }
        6 => (6, *ip.get(6)?, v6(8)?, v6(24)?, ip.get(40..)?),
        _ => return None,
    };
    let ip_ethertype = if version == 4 { 0x0800 } else { 0x86dd };
    let link_ok = link == LinkType::RawIp || ethertype == ip_ethertype;
    (link_ok && proto == 17 && be16(udp, 2)? == ROCE_V2_PORT).then_some((src, dst))
}
