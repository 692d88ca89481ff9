//! Taking one frame apart into headers and fields, each with its byte
//! offset in the frame, bit range, value and meaning. Every value comes
//! from rxe-core's parsers ([`RoceFrame`], the header views, the MAD and
//! CM parsers); [`super::table`] only says where the fields are.

use super::context::Facts;
use super::table::{self, Spec};
use rxe_core::mad::cm::CmMad;
use rxe_core::mad::{GsiMad, Mad, MAD_LEN};
use rxe_core::wire::{
    AethSyndrome, EthRepr, ExtHeaders, IpRepr, LinkType, Opcode, Packet, PacketRepr, RoceFrame,
    BTH_LEN, ICRC_LEN,
};
use serde::Serialize;
use serde_json::{json, Value};

/// Where a field's bits are: `width` bits from bit `first` of the byte at
/// the field's offset, bit 0 being that byte's most significant bit.
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
pub struct Bits {
    /// First bit, from the most significant bit of the first byte.
    pub first: u8,
    /// Number of bits.
    pub width: u32,
}

/// One field of one header.
#[derive(Debug, Clone, Serialize)]
pub struct Field {
    /// The header it belongs to ("BTH", "AETH", "IPv4", ...).
    pub header: String,
    /// The IBTA's (or the IETF's) name for it.
    pub name: String,
    /// Byte offset of its first bit in the frame.
    pub offset: usize,
    /// Its bits.
    pub bits: Bits,
    /// Its value: a number, or a string for addresses and byte strings.
    pub value: Value,
    /// What the value means here.
    pub meaning: String,
}

/// One header: where it is and its fields.
#[derive(Debug, Clone, Serialize)]
pub struct HeaderView {
    /// Its name.
    pub name: String,
    /// Byte offset in the frame.
    pub offset: usize,
    /// Its length in bytes (as far as present in the frame).
    pub len: usize,
    /// Its fields.
    pub fields: Vec<Field>,
}

/// A frame taken apart as far as it parses.
#[derive(Debug, Clone)]
pub struct Dissection {
    /// The headers found, outermost first.
    pub headers: Vec<HeaderView>,
    /// Why the dissection stopped early, if it did.
    pub note: Option<String>,
    /// What the context tracker needs, if the packet parsed completely.
    pub facts: Option<Facts>,
    /// Source and destination addresses, if the IP header parsed.
    pub addrs: Option<(std::net::IpAddr, std::net::IpAddr)>,
}

struct Builder {
    headers: Vec<HeaderView>,
}

impl Builder {
    fn header(&mut self, name: &str, offset: usize, len: usize) -> &mut HeaderView {
        self.headers.push(HeaderView {
            name: name.into(),
            offset,
            len,
            fields: Vec::new(),
        });
        self.headers.last_mut().expect("just pushed")
    }
}

impl HeaderView {
    fn field(&mut self, name: &str, at: usize, bits: (u8, u32), value: Value, meaning: String) {
        self.fields.push(Field {
            header: self.name.clone(),
            name: name.into(),
            offset: self.offset + at,
            bits: Bits {
                first: bits.0,
                width: bits.1,
            },
            value,
            meaning,
        });
    }
    /// Adds a table's fields, read from `b` (the header's bytes).
    fn table(&mut self, specs: &[Spec], b: &[u8]) {
        for s in specs {
            if let Some(v) = s.value(b) {
                let meaning = (s.means)(v);
                self.field(s.name, s.at, (s.bit, u32::from(s.width)), json!(v), meaning);
            }
        }
    }
}

fn mac(m: &[u8; 6]) -> String {
    m.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// Up to `n` bytes as hex, with "..." if there are more.
pub fn hex_prefix(b: &[u8], n: usize) -> String {
    let mut s: String = b.iter().take(n).map(|x| format!("{x:02x}")).collect();
    if b.len() > n {
        s += "...";
    }
    s
}

fn ecn(v: u8) -> &'static str {
    match v & 3 {
        0 => "Not-ECT (no ECN)",
        1 => "ECT(1)",
        2 => "ECT(0): ECN capable",
        _ => "CE: congestion experienced (the receiver answers with a CNP)",
    }
}

fn ethertype(t: u16) -> String {
    match t {
        0x0800 => "IPv4".into(),
        0x86dd => "IPv6".into(),
        0x8100 => "802.1Q VLAN tag".into(),
        0x88a8 => "802.1ad service VLAN tag".into(),
        _ => format!("{t:#06x}"),
    }
}

fn eth(b: &mut Builder, e: &EthRepr, data: &[u8]) {
    let tags = e.vlans.iter().flatten().count();
    let h = b.header("Ethernet", 0, 14 + 4 * tags);
    h.field(
        "Destination",
        0,
        (0, 48),
        json!(mac(&e.dst)),
        "destination MAC address".into(),
    );
    h.field(
        "Source",
        6,
        (0, 48),
        json!(mac(&e.src)),
        "source MAC address".into(),
    );
    for (i, t) in e.vlans.iter().flatten().enumerate() {
        let at = 12 + 4 * i;
        h.field("TPID", at, (0, 16), json!(t.tpid), ethertype(t.tpid));
        h.field(
            "PCP",
            at + 2,
            (0, 3),
            json!(t.pcp),
            "priority (RoCE traffic class on a lossless priority)".into(),
        );
        h.field(
            "DEI",
            at + 2,
            (3, 1),
            json!(u8::from(t.dei)),
            "drop eligible".into(),
        );
        h.field(
            "VID",
            at + 2,
            (4, 12),
            json!(t.vid),
            "VLAN identifier".into(),
        );
    }
    // The EtherType after the tags: rxe-core checked it to find the IP
    // header, it does not keep it.
    let at = 12 + 4 * tags;
    if let Some(t) = data.get(at..at + 2) {
        let t = u16::from_be_bytes([t[0], t[1]]);
        h.field("EtherType", at, (0, 16), json!(t), ethertype(t));
    }
}

fn ip(b: &mut Builder, f: &RoceFrame, ip_off: usize, udp_off: usize) {
    match f.ip {
        IpRepr::V4 {
            src,
            dst,
            tos,
            id,
            dont_fragment,
            ttl,
        } => {
            let hlen = udp_off - ip_off;
            let ipb = f.ip_packet;
            let h = b.header("IPv4", ip_off, hlen);
            h.field("Version", 0, (0, 4), json!(4), "IPv4".into());
            h.field(
                "IHL",
                0,
                (4, 4),
                json!(hlen / 4),
                format!("header length {hlen} bytes"),
            );
            h.field(
                "DSCP",
                1,
                (0, 6),
                json!(tos >> 2),
                "differentiated services code point".into(),
            );
            h.field("ECN", 1, (6, 2), json!(tos & 3), ecn(tos).into());
            h.field(
                "Total Length",
                2,
                (0, 16),
                json!(ipb.len()),
                "IP header + UDP + RoCE packet".into(),
            );
            h.field(
                "Identification",
                4,
                (0, 16),
                json!(id),
                "covered by the ICRC (not masked)".into(),
            );
            h.field(
                "DF",
                6,
                (1, 1),
                json!(u8::from(dont_fragment)),
                "don't fragment (RoCE is never fragmented)".into(),
            );
            h.field("TTL", 8, (0, 8), json!(ttl), "masked by the ICRC".into());
            h.field("Protocol", 9, (0, 8), json!(17), "UDP".into());
            if let Some(c) = ipb.get(10..12) {
                h.field(
                    "Header Checksum",
                    10,
                    (0, 16),
                    json!(u16::from_be_bytes([c[0], c[1]])),
                    "not checked here; masked by the ICRC".into(),
                );
            }
            h.field(
                "Source",
                12,
                (0, 32),
                json!(src.to_string()),
                "source address".into(),
            );
            h.field(
                "Destination",
                16,
                (0, 32),
                json!(dst.to_string()),
                "destination address".into(),
            );
        }
        IpRepr::V6 {
            src,
            dst,
            traffic_class,
            flow_label,
            hop_limit,
        } => {
            let h = b.header("IPv6", ip_off, 40);
            h.field("Version", 0, (0, 4), json!(6), "IPv6".into());
            h.field(
                "Traffic Class",
                0,
                (4, 8),
                json!(traffic_class),
                format!("DSCP {}, ECN {}", traffic_class >> 2, ecn(traffic_class)),
            );
            h.field(
                "Flow Label",
                1,
                (4, 20),
                json!(flow_label),
                "masked by the ICRC".into(),
            );
            h.field(
                "Payload Length",
                4,
                (0, 16),
                json!(f.ip_packet.len() - 40),
                "UDP + RoCE packet".into(),
            );
            h.field("Next Header", 6, (0, 8), json!(17), "UDP".into());
            h.field(
                "Hop Limit",
                7,
                (0, 8),
                json!(hop_limit),
                "masked by the ICRC".into(),
            );
            h.field(
                "Source",
                8,
                (0, 128),
                json!(src.to_string()),
                "source address (a GID)".into(),
            );
            h.field(
                "Destination",
                24,
                (0, 128),
                json!(dst.to_string()),
                "destination address (a GID)".into(),
            );
        }
    }
}

fn udp(b: &mut Builder, f: &RoceFrame, udp_off: usize) {
    let h = b.header("UDP", udp_off, 8);
    h.field(
        "Source Port",
        0,
        (0, 16),
        json!(f.udp_src_port),
        "chosen per QP by the sender, for ECMP flow entropy".into(),
    );
    h.field(
        "Destination Port",
        2,
        (0, 16),
        json!(f.udp_dst_port),
        "4791: RoCE v2".into(),
    );
    h.field(
        "Length",
        4,
        (0, 16),
        json!(f.transport.len() + 8),
        "UDP header + RoCE packet".into(),
    );
    h.field(
        "Checksum",
        6,
        (0, 16),
        json!(f.udp_checksum),
        if f.udp_checksum == 0 {
            "0: not computed (the ICRC protects the packet)".into()
        } else {
            "not checked here; masked by the ICRC".into()
        },
    );
}

/// The extension headers in wire order: (flag, name, length, table).
fn ext_tables() -> [(ExtHeaders, &'static str, &'static [Spec]); 9] {
    [
        (ExtHeaders::RDETH, "RDETH", table::RDETH),
        (ExtHeaders::DETH, "DETH", table::DETH),
        (ExtHeaders::FETH, "FETH", table::FETH),
        (ExtHeaders::RETH, "RETH", table::RETH),
        (ExtHeaders::ATOMIC_ETH, "AtomicETH", table::ATOMIC_ETH),
        (ExtHeaders::AETH, "AETH", table::AETH),
        (
            ExtHeaders::ATOMIC_ACK_ETH,
            "AtomicAckETH",
            table::ATOMIC_ACK_ETH,
        ),
        (ExtHeaders::IMMDT, "ImmDt", table::IMMDT),
        (ExtHeaders::IETH, "IETH", table::IETH),
    ]
}

/// Length of an extension header, from rxe-core's wire order table.
fn ext_len(h: ExtHeaders) -> usize {
    ExtHeaders::WIRE_ORDER
        .iter()
        .find(|(x, _)| *x == h)
        .map_or(0, |(_, n)| *n)
}

/// The meaning of the AETH syndrome's value bits for this syndrome type.
fn syndrome_value_meaning(s: AethSyndrome) -> String {
    match s {
        AethSyndrome::Ack { credits } => match rxe_core::wire::aeth::credit_count(credits) {
            Some(n) => format!("credit count code {credits}: {n} receive WQEs available"),
            None => {
                "credit count 31: end-to-end credits not used (no receive queue limit advertised)"
                    .into()
            }
        },
        AethSyndrome::RnrNak { timer } => format!(
            "RNR timer code {timer}: retry after {}",
            super::words::duration(rxe_core::engine::timers::rnr_delay(timer))
        ),
        AethSyndrome::Nak(c) => format!("NAK code {}: {c}", c.code()),
        AethSyndrome::Reserved(_) => "reserved syndrome".into(),
    }
}

/// The BTH and extension headers of a transport packet, as far as they
/// are present; returns the opcode's extension headers if all were.
fn transport_headers(b: &mut Builder, t: &[u8], off: usize) -> Result<(), String> {
    let Some(bth) = t.get(..BTH_LEN) else {
        b.header("BTH", off, t.len());
        return Err(format!("BTH cut short: {} of {BTH_LEN} bytes", t.len()));
    };
    b.header("BTH", off, BTH_LEN).table(table::BTH, bth);
    let opcode = Opcode(bth[0]);
    let Some(info) = opcode.info() else {
        return Err(format!(
            "unknown opcode {:#04x}: the rest cannot be read",
            opcode.0
        ));
    };
    let mut at = BTH_LEN;
    for (flag, name, specs) in ext_tables() {
        if !info.headers.contains(flag) {
            continue;
        }
        let n = ext_len(flag);
        let Some(hb) = t.get(at..at + n) else {
            b.header(name, off + at, t.len().saturating_sub(at));
            return Err(format!(
                "{name} cut short: {} of {n} bytes",
                t.len().saturating_sub(at)
            ));
        };
        let h = b.header(name, off + at, n);
        h.table(specs, hb);
        if flag == ExtHeaders::AETH {
            let s = AethSyndrome::from_u8(hb[0]);
            if let Some(f) = h.fields.iter_mut().find(|f| f.name == "Syndrome.Value") {
                f.meaning = syndrome_value_meaning(s);
            }
            if let Some(f) = h.fields.iter_mut().find(|f| f.name == "Syndrome.Reserved") {
                f.meaning = "bit 7 of the syndrome: reserved, 0".into();
            }
        }
        at += n;
    }
    if info.headers.contains(ExtHeaders::CNP_PAD) {
        let n = ext_len(ExtHeaders::CNP_PAD);
        let Some(hb) = t.get(at..at + n) else {
            b.header("CNP", off + at, t.len().saturating_sub(at));
            return Err("CNP reserved bytes cut short".into());
        };
        let h = b.header("CNP", off + at, n);
        h.field(
            "Reserved",
            0,
            (0, 8 * n as u32),
            json!(hex_prefix(hb, n)),
            "16 reserved bytes, 0".into(),
        );
    }
    Ok(())
}

fn payload(b: &mut Builder, p: &Packet<&[u8]>, repr: &PacketRepr, off: usize) {
    let po = off + p.payload_offset();
    let pl = repr.payload;
    if !pl.is_empty() {
        let h = b.header("Payload", po, pl.len());
        h.field(
            "Length",
            0,
            (0, 8 * pl.len() as u32),
            json!(pl.len()),
            format!("{} bytes of message data", pl.len()),
        );
        h.field(
            "Data",
            0,
            (0, 8 * pl.len().min(16) as u32),
            json!(hex_prefix(pl, 16)),
            "the first bytes".into(),
        );
        mad(b, repr, po);
    }
    let pad = p.pad();
    if !pad.is_empty() {
        let h = b.header("Pad", po + pl.len(), pad.len());
        h.field(
            "Pad",
            0,
            (0, 8 * pad.len() as u32),
            json!(hex_prefix(pad, 4)),
            format!("{} pad byte(s) (BTH PadCnt)", pad.len()),
        );
    }
}

/// The MAD header and the CM message's key fields, for a MAD on QP1.
fn mad(b: &mut Builder, repr: &PacketRepr, po: usize) {
    let Ok(g) = GsiMad::from_packet(repr) else {
        return;
    };
    let m: &[u8] = g.mad;
    let view = Mad::new_unchecked(m);
    b.header("MAD", po, 24).table(table::MAD_HEADER, m);
    let attr = view.attribute_id();
    if view.mgmt_class().0 != 0x07 {
        return;
    }
    if let (Some((name, specs)), Ok(_)) = (table::cm_table(attr), CmMad::parse(&m[..MAD_LEN])) {
        b.header(name, po + 24, MAD_LEN - 24).table(specs, m);
        // Field offsets in the table count from the MAD; the header starts
        // 24 bytes in, so shift them back.
        let h = b.headers.last_mut().expect("just pushed");
        for f in &mut h.fields {
            f.offset -= 24;
        }
    }
}

fn icrc(b: &mut Builder, f: &RoceFrame, t_off: usize) -> bool {
    let t = f.transport;
    let carried = u32::from_le_bytes(t[t.len() - ICRC_LEN..].try_into().expect("4 bytes"));
    let right = f.computed_icrc().ok();
    let h = b.header("ICRC", t_off + t.len() - ICRC_LEN, ICRC_LEN);
    let ok = right == Some(carried);
    let meaning = match right {
        _ if ok => "correct: CRC-32 over the IP/UDP/BTH with variant fields masked, and the rest of the packet".to_owned(),
        Some(r) => format!("WRONG: should be {r:#010x}; a receiver drops the packet silently"),
        None => "cannot be computed".to_owned(),
    };
    h.field("ICRC", 0, (0, 32), json!(carried), meaning);
    ok
}

/// Takes a frame apart. `None` if the frame is not RoCE v2 at all;
/// `roce_addrs` says whether a frame that does not parse was sent to UDP
/// port 4791 (and so is worth showing).
pub fn dissect(
    link: LinkType,
    data: &[u8],
    roce_addrs: Option<(std::net::IpAddr, std::net::IpAddr)>,
) -> Option<Dissection> {
    let mut b = Builder {
        headers: Vec::new(),
    };
    let f = match RoceFrame::parse(link, data) {
        Ok(f) => f,
        Err(e) => {
            roce_addrs?;
            return Some(Dissection {
                headers: Vec::new(),
                note: Some(format!("the Ethernet/IP/UDP framing does not parse: {e}")),
                facts: None,
                addrs: roce_addrs,
            });
        }
    };
    let base = data.as_ptr() as usize;
    let ip_off = f.ip_packet.as_ptr() as usize - base;
    let t_off = f.transport.as_ptr() as usize - base;
    let udp_off = t_off - 8;
    match (link, &f.eth) {
        (LinkType::Ethernet, Some(e)) => eth(&mut b, e, data),
        (LinkType::LinuxSll | LinkType::LinuxSll2, _) => {
            b.header("Linux cooked capture", 0, ip_off);
        }
        _ => {}
    }
    ip(&mut b, &f, ip_off, udp_off);
    udp(&mut b, &f, udp_off);
    let addrs = Some((f.ip.src(), f.ip.dst()));
    let checked = f.packet();
    let headers_ok = transport_headers(&mut b, f.transport, t_off);
    let (p, repr) = match checked.and_then(|p| Ok((p, PacketRepr::parse(&p)?))) {
        Ok(x) => x,
        Err(e) => {
            let note = match headers_ok {
                Err(why) => format!("malformed RoCE packet: {e} ({why})"),
                Ok(()) => format!("malformed RoCE packet: {e}"),
            };
            return Some(Dissection {
                headers: b.headers,
                note: Some(note),
                facts: None,
                addrs,
            });
        }
    };
    payload(&mut b, &p, &repr, t_off);
    let icrc_ok = icrc(&mut b, &f, t_off);
    let facts = Facts::new(&f, &repr, icrc_ok);
    Some(Dissection {
        headers: b.headers,
        note: (!icrc_ok).then(|| "ICRC wrong: a receiver would drop this packet".to_owned()),
        facts: Some(facts),
        addrs,
    })
}
