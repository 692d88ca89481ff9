//! From packets to a ladder: lanes, rows (one arrow per packet, or one per
//! run of MIDDLE packets), marks and links. Pure: no drawing, no I/O, so the
//! analysis is unit-tested on hand-made packets.
//!
//! * **Lanes** are endpoints: an address and a QP. The receiving QP of a
//!   packet is in its BTH; the sending QP of a request is not, so it is
//!   found, in this order, from the DETH (UD, MADs), from the connection
//!   (a response from B to A's QP p with PSN x answers the request A sent
//!   to B's QP q with PSN x, so p and q are the two ends of one connection),
//!   from the UDP source port (a QP sends from one port: rdma_rxe and
//!   rxe-rs hash the QP number into it), or as the only QP of that address
//!   that the peer talks to. Failing all of these the lane is "QP ?".
//! * **Marks**: per requester (source, destination, destination QP) the
//!   next PSN expected is followed; a request behind it is a
//!   retransmission (dashed), one ahead of it shows a gap (packets lost
//!   before the capture point). A READ response PSN seen before is a
//!   repeated response. A NAK or RNR NAK is linked to the request it asks
//!   for (the resent one after it if there is one).
//! * **Rows**: a run of MIDDLE packets of one message (same lanes, same
//!   opcode, consecutive PSNs, nothing marked) is one row.

use rxe_core::wire::{AethRepr, AethSyndrome, NakCode, Opcode, Operation, Position, Transport};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::IpAddr;

/// One frame sent to UDP port 4791, as the ladder needs it.
#[derive(Debug, Clone)]
pub struct Packet {
    /// Frame number in the file (counting every frame, from 1).
    pub frame: u64,
    /// Nanoseconds since the first frame of the file.
    pub time_ns: i128,
    /// IP source.
    pub src: IpAddr,
    /// IP destination.
    pub dst: IpAddr,
    /// UDP source port (0 if unknown).
    pub src_port: u16,
    /// The `rxe dump` line of the frame (the tooltip).
    pub line: String,
    /// The RoCE fields, or the parse error of a malformed frame.
    pub body: Result<Roce, String>,
}

/// The fields of a RoCE packet the ladder looks at.
#[derive(Debug, Clone)]
pub struct Roce {
    /// BTH opcode.
    pub opcode: Opcode,
    /// BTH destination QP.
    pub dest_qp: u32,
    /// BTH PSN.
    pub psn: u32,
    /// Payload bytes.
    pub len: usize,
    /// The AETH, if any.
    pub aeth: Option<AethRepr>,
    /// DETH source QP (UD, MADs).
    pub src_qp: Option<u32>,
    /// RETH DMA length.
    pub dma_len: Option<u32>,
    /// The MAD's name (`MAD CM ConnectRequest`), for packets to QP 1.
    pub mad: Option<String>,
    /// ECN marks in the BTH.
    pub fecn: bool,
    /// ECN marks in the BTH.
    pub becn: bool,
    /// Whether the ICRC checked.
    pub icrc_ok: bool,
}

/// What a packet is, for its colour.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    /// SEND, WRITE, READ request, atomics (RC, UC, UD).
    Request,
    /// READ response or atomic acknowledge: a response carrying data.
    Response,
    /// ACK.
    Ack,
    /// NAK (any code).
    Nak,
    /// RNR NAK.
    RnrNak,
    /// Congestion notification.
    Cnp,
    /// A management datagram on QP 1 (the CM's REQ, REP, RTU, ...).
    Mad,
    /// Sent to port 4791 but does not parse.
    Malformed,
}

impl Kind {
    /// All kinds, in legend order.
    pub const ALL: [Kind; 8] = [
        Kind::Request,
        Kind::Response,
        Kind::Ack,
        Kind::Nak,
        Kind::RnrNak,
        Kind::Cnp,
        Kind::Mad,
        Kind::Malformed,
    ];
    /// The CSS class (and `data-kind`).
    pub fn class(self) -> &'static str {
        match self {
            Kind::Request => "req",
            Kind::Response => "resp",
            Kind::Ack => "ack",
            Kind::Nak => "nak",
            Kind::RnrNak => "rnr",
            Kind::Cnp => "cnp",
            Kind::Mad => "mad",
            Kind::Malformed => "bad",
        }
    }
    /// The legend's words.
    pub fn legend(self) -> &'static str {
        match self {
            Kind::Request => "request",
            Kind::Response => "READ/atomic response",
            Kind::Ack => "ACK",
            Kind::Nak => "NAK",
            Kind::RnrNak => "RNR NAK",
            Kind::Cnp => "CNP",
            Kind::Mad => "CM MAD (QP 1)",
            Kind::Malformed => "malformed",
        }
    }
}

/// What a mark says about a row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MarkKind {
    /// Retransmission or duplicate (the arrow is dashed).
    Retransmit,
    /// PSNs missing before this packet.
    Gap,
    /// What a NAK asked for.
    Nak,
    /// Bad ICRC, ECN bits.
    Note,
}

impl MarkKind {
    /// The CSS class.
    pub fn class(self) -> &'static str {
        match self {
            MarkKind::Retransmit => "m-retx",
            MarkKind::Gap => "m-gap",
            MarkKind::Nak => "m-nak",
            MarkKind::Note => "m-note",
        }
    }
}

/// A note next to a row's label.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mark {
    /// Which.
    pub kind: MarkKind,
    /// The words.
    pub text: String,
}

/// One endpoint: an address and a QP (`None`: not known).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Lane {
    /// The address.
    pub addr: IpAddr,
    /// The QP number.
    pub qp: Option<u32>,
}

impl Lane {
    /// The second line of the lane's header.
    pub fn qp_label(&self) -> String {
        match self.qp {
            Some(q) => format!("QP {q:#08x}"),
            None => "QP ?".to_owned(),
        }
    }
}

/// One arrow: a packet, or a run of MIDDLE packets.
#[derive(Debug, Clone)]
pub struct Row {
    /// The frames it stands for, in order.
    pub frames: Vec<u64>,
    /// Time of its first packet (ns since the first frame).
    pub time_ns: i128,
    /// Time of its last packet.
    pub end_ns: i128,
    /// Sending lane (index in [`Ladder::lanes`]).
    pub from: usize,
    /// Receiving lane.
    pub to: usize,
    /// Colour.
    pub kind: Kind,
    /// The label on the arrow.
    pub label: String,
    /// Notes after the label.
    pub marks: Vec<Mark>,
    /// Drawn dashed (a retransmission or duplicate).
    pub dashed: bool,
    /// The `rxe dump` lines of its packets.
    pub lines: Vec<String>,
    /// PSN of its first and last packet (RoCE rows).
    psns: Option<(u32, u32)>,
    /// Opcode (RoCE rows).
    opcode: Option<Opcode>,
    /// Payload bytes of all its packets.
    bytes: usize,
    /// For a run of retransmissions: the frames of the first copies.
    first_copies: Vec<u64>,
}

impl Row {
    /// Packets it stands for.
    pub fn count(&self) -> usize {
        self.frames.len()
    }
}

/// A dotted link from a NAK to the request it asks for, both ends on
/// the requester's lane.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Link {
    /// The NAK's row.
    pub from_row: usize,
    /// The request's row.
    pub to_row: usize,
    /// The lane both ends are on.
    pub lane: usize,
}

/// The whole diagram, before drawing.
#[derive(Debug, Clone)]
pub struct Ladder {
    /// Endpoints, left to right.
    pub lanes: Vec<Lane>,
    /// Arrows, top to bottom (in capture order of their first packet).
    pub rows: Vec<Row>,
    /// NAK links.
    pub links: Vec<Link>,
    /// Packets drawn (rows may stand for several).
    pub packets: usize,
}

const PSN_MASK: u32 = 0xff_ffff;

/// `a - b` in 24-bit PSN space, as a signed distance.
fn psn_diff(a: u32, b: u32) -> i32 {
    let d = a.wrapping_sub(b) & PSN_MASK;
    if d & 0x80_0000 != 0 {
        d as i32 - 0x100_0000
    } else {
        d as i32
    }
}

fn psn_add(a: u32, n: u32) -> u32 {
    a.wrapping_add(n) & PSN_MASK
}

fn info(r: &Roce) -> Option<&'static rxe_core::wire::OpcodeInfo> {
    r.opcode.info()
}

fn operation(r: &Roce) -> Option<Operation> {
    info(r).map(|i| i.operation)
}

/// A request of a reliable or unreliable connection (its PSNs are a
/// sequence worth following).
fn is_connected_request(r: &Roce) -> bool {
    info(r).is_some_and(|i| {
        matches!(i.transport, Transport::Rc | Transport::Uc) && i.operation.is_request()
    })
}

/// A response (ACK, READ response, atomic ACK).
fn is_response(r: &Roce) -> bool {
    operation(r).is_some_and(|o| !o.is_request())
}

fn kind(p: &Packet) -> Kind {
    let Ok(r) = &p.body else {
        return Kind::Malformed;
    };
    let Some(i) = info(r) else {
        return Kind::Malformed;
    };
    if i.transport == Transport::Cnp {
        return Kind::Cnp;
    }
    if r.dest_qp == 1 && i.transport == Transport::Ud {
        return Kind::Mad;
    }
    match i.operation {
        Operation::Acknowledge => match r.aeth.map(|a| a.syndrome) {
            Some(AethSyndrome::Ack { .. }) | None => Kind::Ack,
            Some(AethSyndrome::RnrNak { .. }) => Kind::RnrNak,
            Some(AethSyndrome::Nak(_)) | Some(AethSyndrome::Reserved(_)) => Kind::Nak,
        },
        Operation::ReadResponse | Operation::AtomicAcknowledge => Kind::Response,
        _ => Kind::Request,
    }
}

/// The AETH as a label shows it.
fn aeth_text(a: &AethRepr) -> String {
    match a.syndrome {
        AethSyndrome::Ack { .. } => format!("ACK msn={}", a.msn),
        AethSyndrome::RnrNak { timer } => format!("RNR NAK timer={timer} msn={}", a.msn),
        AethSyndrome::Nak(c) => format!("NAK {c} msn={}", a.msn),
        AethSyndrome::Reserved(x) => format!("AETH syndrome={x:#04x} msn={}", a.msn),
    }
}

/// The label of a single packet.
fn label(p: &Packet) -> String {
    let r = match &p.body {
        Ok(r) => r,
        Err(e) => return format!("malformed: {e}"),
    };
    // A MAD is named first: that is what the packet is for.
    let mut s = match &r.mad {
        Some(m) => format!("{m} {} PSN={}", r.opcode, r.psn),
        None => format!("{} PSN={}", r.opcode, r.psn),
    };
    let op = operation(r);
    match op {
        Some(Operation::ReadRequest) => {
            if let Some(d) = r.dma_len {
                let _ = write!(s, " dma_len={d}");
            }
        }
        Some(Operation::Acknowledge) | Some(Operation::AtomicAcknowledge) => {}
        _ => {
            let _ = write!(s, " len={}", r.len);
        }
    }
    if let Some(a) = &r.aeth {
        // READ responses FIRST/LAST carry an ACK syndrome too; show it
        // only where it is the point of the packet or not a plain ACK.
        let plain_ack = matches!(a.syndrome, AethSyndrome::Ack { .. });
        if op == Some(Operation::Acknowledge) || !plain_ack {
            let _ = write!(s, " {}", aeth_text(a));
        }
    }
    s
}

/// The lanes of each packet: (sender, receiver).
fn assign_lanes(pkts: &[Packet]) -> (Vec<Lane>, Vec<(Lane, Lane)>) {
    // Learned facts.
    let mut port_qp: BTreeMap<(IpAddr, u16), u32> = BTreeMap::new();
    // (address, QP) -> (peer address, peer QP): the two ends of a connection.
    let mut peer: BTreeMap<(IpAddr, u32), (IpAddr, u32)> = BTreeMap::new();
    // The last request from src to dst with this PSN: (dest QP, UDP source port).
    let mut req_by_psn: BTreeMap<(IpAddr, IpAddr, u32), (u32, u16)> = BTreeMap::new();
    // QPs at an address that packets from a peer address were sent to.
    let mut talked_to: BTreeMap<(IpAddr, IpAddr), Vec<u32>> = BTreeMap::new();
    for p in pkts {
        let Ok(r) = &p.body else { continue };
        let qps = talked_to.entry((p.dst, p.src)).or_default();
        if !qps.contains(&r.dest_qp) {
            qps.push(r.dest_qp);
        }
        if let Some(s) = r.src_qp {
            port_qp.entry((p.src, p.src_port)).or_insert(s);
        } else if is_connected_request(r) {
            req_by_psn.insert((p.src, p.dst, r.psn), (r.dest_qp, p.src_port));
        } else if is_response(r) {
            // From B to A's QP p, answering A's request to B's QP q.
            if let Some(&(q, req_port)) = req_by_psn.get(&(p.dst, p.src, r.psn)) {
                let (a, pq, b) = (p.dst, r.dest_qp, p.src);
                peer.entry((a, pq)).or_insert((b, q));
                peer.entry((b, q)).or_insert((a, pq));
                port_qp.entry((a, req_port)).or_insert(pq);
                port_qp.entry((b, p.src_port)).or_insert(q);
            }
        }
    }
    let mut pairs = Vec::with_capacity(pkts.len());
    for p in pkts {
        let (to_qp, from_qp) = match &p.body {
            Ok(r) => {
                let from = r
                    .src_qp
                    .or_else(|| {
                        peer.get(&(p.dst, r.dest_qp))
                            .filter(|(a, _)| *a == p.src)
                            .map(|&(_, q)| q)
                    })
                    .or_else(|| port_qp.get(&(p.src, p.src_port)).copied())
                    .or_else(|| match talked_to.get(&(p.src, p.dst)).map(Vec::as_slice) {
                        Some(&[only]) => Some(only),
                        _ => None,
                    });
                (Some(r.dest_qp), from)
            }
            Err(_) => (None, port_qp.get(&(p.src, p.src_port)).copied()),
        };
        pairs.push((
            Lane {
                addr: p.src,
                qp: from_qp,
            },
            Lane {
                addr: p.dst,
                qp: to_qp,
            },
        ));
    }
    // Order: addresses by first appearance; the first address's lanes
    // right to left in order of appearance, the others left to right, so
    // that with two addresses the first QPs to talk sit side by side.
    let mut addrs: Vec<IpAddr> = Vec::new();
    let mut by_addr: BTreeMap<IpAddr, Vec<Lane>> = BTreeMap::new();
    for (f, t) in &pairs {
        for l in [f, t] {
            if !addrs.contains(&l.addr) {
                addrs.push(l.addr);
            }
            let v = by_addr.entry(l.addr).or_default();
            if !v.contains(l) {
                v.push(*l);
            }
        }
    }
    let mut lanes = Vec::new();
    for (i, a) in addrs.iter().enumerate() {
        let mut v = by_addr.remove(a).unwrap_or_default();
        // Unknown QPs last within their address.
        v.sort_by_key(|l| l.qp.is_none());
        if i == 0 && addrs.len() > 1 {
            v.reverse();
        }
        lanes.extend(v);
    }
    (lanes, pairs)
}

/// Path MTU as seen: FIRST and MIDDLE packets are exactly one MTU long.
fn mtu_estimate(pkts: &[Packet]) -> Option<u32> {
    pkts.iter()
        .filter_map(|p| p.body.as_ref().ok())
        .filter(|r| {
            info(r).is_some_and(|i| matches!(i.position, Position::First | Position::Middle))
        })
        .map(|r| r.len as u32)
        .max()
        .filter(|&m| m > 0)
}

/// A requester's PSN stream.
#[derive(Debug, Default)]
struct Stream {
    /// The PSN after the highest one seen.
    next: Option<u32>,
    /// Where each PSN was first seen.
    seen: BTreeMap<u32, u64>,
}

/// Builds the ladder of a capture's packets (in file order).
pub fn build(pkts: &[Packet]) -> Ladder {
    let (lanes, pairs) = assign_lanes(pkts);
    let lane_idx = |l: &Lane| lanes.iter().position(|x| x == l).expect("lane assigned");
    let mtu = mtu_estimate(pkts);

    // Marks per packet.
    let mut marks: Vec<Vec<Mark>> = vec![Vec::new(); pkts.len()];
    let mut dashed = vec![false; pkts.len()];
    // For a retransmission: the frame of the first copy, if captured.
    let mut first_copy: Vec<Option<u64>> = vec![None; pkts.len()];
    let mut req_streams: BTreeMap<(IpAddr, IpAddr, u32), Stream> = BTreeMap::new();
    let mut resp_seen: BTreeMap<(IpAddr, IpAddr, u32, u32), u64> = BTreeMap::new();
    // Requests by (src, dst, PSN): packet indices, for NAK links.
    let mut reqs: BTreeMap<(IpAddr, IpAddr, u32), Vec<usize>> = BTreeMap::new();
    for (i, p) in pkts.iter().enumerate() {
        let Ok(r) = &p.body else { continue };
        if !r.icrc_ok {
            marks[i].push(Mark {
                kind: MarkKind::Note,
                text: "ICRC BAD".into(),
            });
        }
        if r.fecn || r.becn {
            let bits = match (r.fecn, r.becn) {
                (true, true) => "FECN BECN",
                (true, false) => "FECN",
                _ => "BECN",
            };
            marks[i].push(Mark {
                kind: MarkKind::Note,
                text: format!("ECN: {bits}"),
            });
        }
        if is_connected_request(r) {
            reqs.entry((p.src, p.dst, r.psn)).or_default().push(i);
            let span = match (operation(r), r.dma_len, mtu) {
                (Some(Operation::ReadRequest), Some(d), Some(m)) => d.div_ceil(m).max(1),
                _ => 1,
            };
            let s = req_streams.entry((p.src, p.dst, r.dest_qp)).or_default();
            if let Some(&f) = s.seen.get(&r.psn) {
                dashed[i] = true;
                first_copy[i] = Some(f);
                marks[i].push(Mark {
                    kind: MarkKind::Retransmit,
                    text: format!("↻ retransmission of frame {f}"),
                });
            } else if let Some(next) = s.next {
                let d = psn_diff(r.psn, next);
                if d < 0 {
                    dashed[i] = true;
                    marks[i].push(Mark {
                        kind: MarkKind::Retransmit,
                        text: "↻ retransmission (first copy not in the capture)".into(),
                    });
                } else if d > 0 {
                    let last = psn_add(r.psn, PSN_MASK); // r.psn - 1
                    let missing = if d == 1 {
                        format!("PSN {next}")
                    } else {
                        format!("PSNs {next}..{last}")
                    };
                    marks[i].push(Mark {
                        kind: MarkKind::Gap,
                        text: format!("⚠ gap: {missing} not seen"),
                    });
                }
            }
            s.seen.entry(r.psn).or_insert(p.frame);
            let end = psn_add(r.psn, span);
            s.next = Some(match s.next {
                Some(n) if psn_diff(end, n) <= 0 => n,
                _ => end,
            });
        } else if matches!(
            operation(r),
            Some(Operation::ReadResponse) | Some(Operation::AtomicAcknowledge)
        ) {
            match resp_seen.entry((p.src, p.dst, r.dest_qp, r.psn)) {
                std::collections::btree_map::Entry::Occupied(e) => {
                    dashed[i] = true;
                    marks[i].push(Mark {
                        kind: MarkKind::Retransmit,
                        text: format!("↻ repeated response (first in frame {})", e.get()),
                    });
                }
                std::collections::btree_map::Entry::Vacant(e) => {
                    e.insert(p.frame);
                }
            }
        }
    }

    // NAK targets: packet index of the request each NAK asks for.
    let mut nak_target: Vec<Option<usize>> = vec![None; pkts.len()];
    for (i, p) in pkts.iter().enumerate() {
        let Ok(r) = &p.body else { continue };
        let Some(a) = r.aeth else { continue };
        let (rnr, code) = match a.syndrome {
            AethSyndrome::RnrNak { .. } => (true, None),
            AethSyndrome::Nak(c) => (false, Some(c)),
            _ => continue,
        };
        // The requester is the NAK's destination; its requests went to
        // the NAK's source.
        let cands = reqs
            .get(&(p.dst, p.src, r.psn))
            .map(Vec::as_slice)
            .unwrap_or(&[]);
        let after = cands.iter().copied().find(|&j| j > i);
        let before = cands.iter().copied().rev().find(|&j| j < i);
        let text = match (rnr, code, after, before) {
            (true, _, Some(j), _) => format!("→ retried in frame {}", pkts[j].frame),
            (true, _, None, Some(j)) => format!("→ for frame {}", pkts[j].frame),
            (false, Some(NakCode::PsnSequenceError), Some(j), _) => {
                format!(
                    "→ asks for PSN {}: resent in frame {}",
                    r.psn, pkts[j].frame
                )
            }
            (false, Some(NakCode::PsnSequenceError), None, _) => {
                format!("→ asks for PSN {} (not resent in the capture)", r.psn)
            }
            (false, _, _, Some(j)) => format!("→ for frame {}", pkts[j].frame),
            (false, _, Some(j), None) => format!("→ PSN {} is frame {}", r.psn, pkts[j].frame),
            _ => format!("→ PSN {} (request not in the capture)", r.psn),
        };
        marks[i].push(Mark {
            kind: MarkKind::Nak,
            text,
        });
        nak_target[i] = match code {
            Some(NakCode::PsnSequenceError) | None => after.or(before),
            Some(_) => before.or(after),
        };
    }

    // Rows, collapsing MIDDLE runs.
    let mut rows: Vec<Row> = Vec::new();
    let mut row_of = vec![0usize; pkts.len()];
    let mut open_run: BTreeMap<(usize, usize), usize> = BTreeMap::new();
    for (i, p) in pkts.iter().enumerate() {
        let (from, to) = (lane_idx(&pairs[i].0), lane_idx(&pairs[i].1));
        // A MIDDLE packet with nothing to say, or a retransmitted one
        // (go-back-N resends whole runs): runs of either kind collapse.
        let middle = p.body.as_ref().ok().filter(|r| {
            info(r).is_some_and(|x| x.position == Position::Middle)
                && marks[i].iter().all(|m| m.kind == MarkKind::Retransmit)
                && marks[i].is_empty() != dashed[i]
        });
        if let Some(r) = middle {
            if let Some(&ri) = open_run.get(&(from, to)) {
                let row = &mut rows[ri];
                let follows = row.opcode == Some(r.opcode)
                    && row.dashed == dashed[i]
                    && row.psns.is_some_and(|(_, last)| psn_add(last, 1) == r.psn);
                if follows {
                    row.frames.push(p.frame);
                    row.end_ns = p.time_ns;
                    row.lines.push(p.line.clone());
                    row.bytes += r.len;
                    row.first_copies.extend(first_copy[i]);
                    if let Some(ps) = &mut row.psns {
                        ps.1 = r.psn;
                    }
                    row_of[i] = ri;
                    continue;
                }
            }
        }
        let r = p.body.as_ref().ok();
        rows.push(Row {
            frames: vec![p.frame],
            time_ns: p.time_ns,
            end_ns: p.time_ns,
            from,
            to,
            kind: kind(p),
            label: label(p),
            marks: std::mem::take(&mut marks[i]),
            dashed: dashed[i],
            lines: vec![p.line.clone()],
            psns: r.map(|r| (r.psn, r.psn)),
            opcode: r.map(|r| r.opcode),
            bytes: r.map_or(0, |r| r.len),
            first_copies: first_copy[i].into_iter().collect(),
        });
        row_of[i] = rows.len() - 1;
        if middle.is_some() {
            open_run.insert((from, to), rows.len() - 1);
        } else {
            open_run.remove(&(from, to));
        }
    }
    for row in &mut rows {
        if row.count() > 1 {
            let (a, b) = row.psns.unwrap_or_default();
            let op = row.opcode.map(|o| o.to_string()).unwrap_or_default();
            row.label = format!("×{} {op} PSN={a}..{b} len={}", row.count(), row.bytes);
            if row.dashed {
                row.marks = vec![Mark {
                    kind: MarkKind::Retransmit,
                    text: match row.first_copies.as_slice() {
                        [] => format!("↻ {} retransmissions", row.count()),
                        [f] => format!("↻ {} retransmissions (of frame {f})", row.count()),
                        [f, .., l] => {
                            format!("↻ {} retransmissions (of frames {f}..{l})", row.count())
                        }
                    },
                }];
            }
        }
    }
    let links = nak_target
        .iter()
        .enumerate()
        .filter_map(|(i, t)| {
            let j = (*t)?;
            Some(Link {
                from_row: row_of[i],
                to_row: row_of[j],
                lane: rows[row_of[i]].to,
            })
        })
        .collect();
    Ladder {
        lanes,
        rows,
        links,
        packets: pkts.len(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rxe_core::wire::{AethSyndrome, NakCode};

    const A: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(10, 0, 0, 1));
    const B: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(10, 0, 0, 2));

    fn pkt(frame: u64, src: IpAddr, port: u16, opcode: Opcode, qp: u32, psn: u32) -> Packet {
        let dst = if src == A { B } else { A };
        Packet {
            frame,
            time_ns: frame as i128 * 1000,
            src,
            dst,
            src_port: port,
            line: format!("line {frame}"),
            body: Ok(Roce {
                opcode,
                dest_qp: qp,
                psn,
                len: if opcode == Opcode::RC_ACKNOWLEDGE {
                    0
                } else {
                    1024
                },
                aeth: None,
                src_qp: None,
                dma_len: None,
                mad: None,
                fecn: false,
                becn: false,
                icrc_ok: true,
            }),
        }
    }

    fn ack(frame: u64, qp: u32, psn: u32, syndrome: AethSyndrome) -> Packet {
        let mut p = pkt(frame, B, 2000, Opcode::RC_ACKNOWLEDGE, qp, psn);
        if let Ok(r) = &mut p.body {
            r.aeth = Some(AethRepr { syndrome, msn: 1 });
        }
        p
    }

    /// A WRITE of 5 packets from A's QP 0x11 to B's QP 0x22, ACKed.
    fn write(first_frame: u64, psn: u32) -> Vec<Packet> {
        let ops = [
            Opcode::RC_RDMA_WRITE_FIRST,
            Opcode::RC_RDMA_WRITE_MIDDLE,
            Opcode::RC_RDMA_WRITE_MIDDLE,
            Opcode::RC_RDMA_WRITE_MIDDLE,
            Opcode::RC_RDMA_WRITE_LAST,
        ];
        let mut v: Vec<Packet> = ops
            .iter()
            .enumerate()
            .map(|(k, &op)| pkt(first_frame + k as u64, A, 1000, op, 0x22, psn + k as u32))
            .collect();
        v.push(ack(
            first_frame + 5,
            0x11,
            psn + 4,
            AethSyndrome::Ack { credits: 31 },
        ));
        v
    }

    #[test]
    fn lanes_pair_the_two_ends_of_a_connection() {
        let l = build(&write(1, 100));
        let a = Lane {
            addr: A,
            qp: Some(0x11),
        };
        let b = Lane {
            addr: B,
            qp: Some(0x22),
        };
        assert_eq!(l.lanes, vec![a, b]);
        assert!(l
            .rows
            .iter()
            .all(|r| r.kind != Kind::Ack || (r.from, r.to) == (1, 0)));
        assert!(l
            .rows
            .iter()
            .all(|r| r.kind != Kind::Request || (r.from, r.to) == (0, 1)));
    }

    #[test]
    fn middle_runs_collapse_into_one_row() {
        let l = build(&write(1, 100));
        let labels: Vec<&str> = l.rows.iter().map(|r| r.label.as_str()).collect();
        assert_eq!(
            labels,
            [
                "RC_RDMA_WRITE_FIRST PSN=100 len=1024",
                "×3 RC_RDMA_WRITE_MIDDLE PSN=101..103 len=3072",
                "RC_RDMA_WRITE_LAST PSN=104 len=1024",
                "RC_ACKNOWLEDGE PSN=104 ACK msn=1",
            ]
        );
        assert_eq!(l.rows[1].frames, [2, 3, 4]);
        assert_eq!(l.packets, 6);
    }

    #[test]
    fn gap_nak_and_retransmission_are_marked_and_linked() {
        let mut v = write(1, 100);
        v.remove(2); // PSN 102 lost before the capture point
        v.pop(); // no ACK
        v.push(ack(
            7,
            0x11,
            102,
            AethSyndrome::Nak(NakCode::PsnSequenceError),
        ));
        // Go-back-N from 102.
        v.push(pkt(8, A, 1000, Opcode::RC_RDMA_WRITE_MIDDLE, 0x22, 102));
        v.push(pkt(9, A, 1000, Opcode::RC_RDMA_WRITE_MIDDLE, 0x22, 103));
        let l = build(&v);
        let find = |f: u64| l.rows.iter().position(|r| r.frames.contains(&f)).unwrap();
        let gap = &l.rows[find(4)];
        assert_eq!(gap.marks[0].kind, MarkKind::Gap);
        assert_eq!(gap.marks[0].text, "⚠ gap: PSN 102 not seen");
        let nak = &l.rows[find(7)];
        assert_eq!(nak.kind, Kind::Nak);
        assert_eq!(nak.marks[0].text, "→ asks for PSN 102: resent in frame 8");
        let resent = &l.rows[find(8)];
        assert!(resent.dashed);
        assert_eq!(resent.marks[0].kind, MarkKind::Retransmit);
        // 102 (never captured) and 103 (frame 4) again: one dashed run.
        assert_eq!(find(9), find(8));
        assert_eq!(resent.frames, [8, 9]);
        assert_eq!(resent.marks[0].text, "↻ 2 retransmissions (of frame 4)");
        assert_eq!(
            l.links,
            [Link {
                from_row: find(7),
                to_row: find(8),
                lane: 0
            }]
        );
    }

    #[test]
    fn psn_arithmetic_wraps() {
        assert_eq!(psn_diff(0, 0xff_ffff), 1);
        assert_eq!(psn_diff(0xff_ffff, 0), -1);
        assert_eq!(psn_add(0xff_ffff, 2), 1);
        // A stream across the wrap has no gap.
        let mut v = write(1, 0xff_fffe);
        for p in &mut v {
            if let Ok(r) = &mut p.body {
                r.psn &= PSN_MASK;
            }
        }
        let l = build(&v);
        assert!(l.rows.iter().all(|r| r.marks.is_empty()), "{:?}", l.rows);
    }

    #[test]
    fn unknown_sender_qp_gets_its_own_lane() {
        // UC: no responses, two QPs at B talked to: A's QP cannot be found.
        let v = vec![
            pkt(1, A, 1000, Opcode::UC_SEND_ONLY, 0x22, 5),
            pkt(2, B, 2000, Opcode::UC_SEND_ONLY, 0x11, 9),
        ];
        let l = build(&v);
        // Each side talks to exactly one QP of the other: that is the lane.
        assert_eq!(l.lanes.len(), 2);
        let v = vec![
            pkt(1, A, 1000, Opcode::UC_SEND_ONLY, 0x22, 5),
            pkt(2, A, 1001, Opcode::UC_SEND_ONLY, 0x23, 9),
        ];
        let l = build(&v);
        assert!(l.lanes.contains(&Lane { addr: A, qp: None }));
    }
}
