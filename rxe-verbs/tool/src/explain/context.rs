//! What each packet does in its capture: the context tracker behind the
//! one-line sentence of `rxe dump --explain`.
//!
//! Two passes over the packets of a capture. The first learns what only
//! the whole capture knows: which request stream (sender, receiver,
//! destination QP) each response belongs to, where each message starts
//! and ends (so a MIDDLE packet is "3 of 16"), how many response packets
//! answer each RDMA READ, which frame answers each atomic. The second
//! walks the packets in order, as the two ends saw them, keeping per
//! stream the next new PSN, the first frame of every PSN (so a repeat is
//! "a duplicate of frame 17"), and how far the responder has
//! acknowledged; and writes one sentence per packet from that.
//!
//! PSNs are 24-bit and wrap; each stream unwraps them into `i64` once, in
//! the first pass, from the signed distance to the stream's previous PSN.

use rxe_core::mad::cm::{CmMad, CmMessage};
use rxe_core::mad::GsiMad;
use rxe_core::psn::Psn;
use rxe_core::wire::{
    AethRepr, AethSyndrome, AtomicEthRepr, DethRepr, IpRepr, NakCode, Opcode, OpcodeInfo,
    Operation, PacketRepr, Position, RethRepr, RoceFrame, Transport,
};
use serde::Serialize;

use super::words::duration;
use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;

/// What the tracker needs of one packet that parsed.
#[derive(Debug, Clone)]
pub struct Facts {
    /// Frame number in the capture.
    pub frame: u64,
    /// IP source.
    pub src: IpAddr,
    /// IP destination.
    pub dst: IpAddr,
    /// IP ECN field is CE (congestion experienced).
    pub ecn_ce: bool,
    /// BTH opcode.
    pub opcode: Opcode,
    /// BTH DestQP.
    pub dest_qp: u32,
    /// BTH PSN.
    pub psn: Psn,
    /// BTH AckReq.
    pub ack_req: bool,
    /// BTH SE.
    pub solicited: bool,
    /// BTH BECN.
    pub becn: bool,
    /// Payload bytes (without pad).
    pub payload_len: usize,
    /// RETH.
    pub reth: Option<RethRepr>,
    /// AtomicETH.
    pub atomic: Option<AtomicEthRepr>,
    /// AETH.
    pub aeth: Option<AethRepr>,
    /// AtomicAckETH's original remote data.
    pub orig: Option<u64>,
    /// DETH.
    pub deth: Option<DethRepr>,
    /// Immediate data.
    pub immdt: Option<u32>,
    /// IETH R_Key.
    pub ieth: Option<u32>,
    /// The CM MAD, if this is one to QP1.
    pub cm: Option<CmMad>,
    /// Management class, method and attribute of a MAD to QP1 that is not
    /// a CM message rxe-core parses.
    pub other_mad: Option<(u8, u8, u16)>,
    /// ICRC right.
    pub icrc_ok: bool,
}

impl Facts {
    /// The facts of a parsed packet (frame number 0 until the caller sets it).
    pub fn new(f: &RoceFrame, r: &PacketRepr, icrc_ok: bool) -> Facts {
        let ecn_ce = match f.ip {
            IpRepr::V4 { tos, .. } => tos & 3 == 3,
            IpRepr::V6 { traffic_class, .. } => traffic_class & 3 == 3,
        };
        let gsi = GsiMad::from_packet(r).ok();
        let cm = gsi.as_ref().and_then(|g| g.cm().ok());
        let other_mad = match (&gsi, &cm) {
            (Some(g), None) => Some((
                g.mad[1],
                g.mad[3],
                u16::from_be_bytes([g.mad[16], g.mad[17]]),
            )),
            _ => None,
        };
        Facts {
            frame: 0,
            src: f.ip.src(),
            dst: f.ip.dst(),
            ecn_ce,
            opcode: r.bth.opcode,
            dest_qp: r.bth.dest_qp,
            psn: r.bth.psn,
            ack_req: r.bth.ack_req,
            solicited: r.bth.solicited,
            becn: r.bth.becn,
            payload_len: r.payload.len(),
            reth: r.reth,
            atomic: r.atomic_eth,
            aeth: r.aeth,
            orig: r.atomic_ack_eth.map(|a| a.orig),
            deth: r.deth,
            immdt: r.immdt,
            ieth: r.ieth,
            cm,
            other_mad,
            icrc_ok,
        }
    }
}

/// A packet's place in its capture, and the sentence saying it.
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct Context {
    /// "What this packet does here", one line.
    pub sentence: String,
    /// First PSN of the message (or READ) this packet belongs to.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message_psn: Option<u32>,
    /// Position in that message, from 1.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub packet: Option<u32>,
    /// Packets in that message, if the capture shows where it ends.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub packets: Option<u32>,
    /// For a request, the PSN the responder expects next after it; for a
    /// PSN sequence error NAK, the PSN the responder expects.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expected_psn: Option<u32>,
    /// A request whose PSN was sent before: true.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub retransmission: bool,
    /// The earlier frame this one repeats, if it was captured.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub duplicate_of: Option<u64>,
    /// For a response: the first and last frame of the requests it answers.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub answers: Option<[u64; 2]>,
}

fn hex(u: i64) -> String {
    format!("{:#x}", u.rem_euclid(1 << 24))
}

fn psn24(u: i64) -> u32 {
    u.rem_euclid(1 << 24) as u32
}

/// (sender, receiver, destination QP of the requests; `None` when only
/// responses were captured).
type StreamKey = (IpAddr, IpAddr, Option<u32>);

#[derive(Debug, Default)]
struct Stream {
    last: Option<(Psn, i64)>,
    /// First pass: SEND/WRITE messages, start PSN -> last PSN if seen.
    messages: BTreeMap<i64, Option<i64>>,
    /// First pass: READ requests by start PSN.
    reads: BTreeMap<i64, Read>,
    /// First pass: the atomic acknowledge frame answering each atomic PSN.
    atomic_answer: HashMap<i64, u64>,
    /// Second pass: next new PSN.
    next: Option<i64>,
    /// Second pass: first frame of each request PSN.
    first_seen: BTreeMap<i64, u64>,
    /// Second pass: first frame of each response PSN (READ responses,
    /// atomic acknowledges).
    resp_seen: BTreeMap<i64, u64>,
    /// Second pass: first frame of each ACK or NAK PSN.
    ack_seen: BTreeMap<i64, u64>,
    /// Second pass: everything up to here is acknowledged.
    acked: Option<i64>,
}

#[derive(Debug, Clone, Copy)]
struct Read {
    frame: u64,
    dma_len: u32,
    end: Option<i64>,
    responses: Option<[u64; 2]>,
}

impl Stream {
    fn unwrap(&mut self, psn: Psn) -> i64 {
        let u = match self.last {
            None => i64::from(psn.value()),
            Some((p, u)) => u + i64::from(psn.diff(p)),
        };
        self.last = Some((psn, u));
        u
    }
    fn message_of(&self, u: i64) -> Option<(i64, Option<i64>)> {
        let (&s, &e) = self.messages.range(..=u).next_back()?;
        match e {
            Some(e) if e < u => None,
            _ => Some((s, e)),
        }
    }
    fn read_of(&self, u: i64) -> Option<(i64, Read)> {
        let (&s, &r) = self.reads.range(..=u).next_back()?;
        match r.end {
            Some(e) if e < u => None,
            None if s != u => None,
            _ => Some((s, r)),
        }
    }
}

/// The two-pass analysis of a capture.
pub struct Analysis {
    contexts: Vec<Context>,
}

enum Role {
    Request(usize, i64),
    Response(usize, i64),
    Other,
}

impl Analysis {
    /// Analyses the parsed packets of a capture, in capture order.
    pub fn new(packets: &[Facts]) -> Analysis {
        let mut streams: Vec<Stream> = Vec::new();
        let mut by_key: HashMap<StreamKey, usize> = HashMap::new();
        let mut resp_map: HashMap<(IpAddr, IpAddr, u32), usize> = HashMap::new();
        let mut roles = Vec::with_capacity(packets.len());
        // The path MTU: the payload of any FIRST or MIDDLE packet.
        let mtu = packets
            .iter()
            .filter(|p| {
                matches!(
                    p.opcode.info().map(|i| i.position),
                    Some(Position::First | Position::Middle)
                )
            })
            .map(|p| p.payload_len)
            .max();
        for p in packets {
            let role = match p.opcode.info() {
                Some(i) if matches!(i.transport, Transport::Rc | Transport::Uc) && p.icrc_ok => {
                    if i.operation.is_request() {
                        let key = (p.src, p.dst, Some(p.dest_qp));
                        let sid = *by_key.entry(key).or_insert_with(|| {
                            streams.push(Stream::default());
                            streams.len() - 1
                        });
                        let u = streams[sid].unwrap(p.psn);
                        first_pass_request(&mut streams[sid], i, p, u);
                        Role::Request(sid, u)
                    } else {
                        let rkey = (p.src, p.dst, p.dest_qp);
                        let sid = match resp_map.get(&rkey) {
                            Some(&s) => s,
                            None => {
                                let s = pick_stream(&streams, &by_key, p).unwrap_or_else(|| {
                                    let key = (p.dst, p.src, None);
                                    *by_key.entry(key).or_insert_with(|| {
                                        streams.push(Stream::default());
                                        streams.len() - 1
                                    })
                                });
                                resp_map.insert(rkey, s);
                                s
                            }
                        };
                        let u = streams[sid].unwrap(p.psn);
                        first_pass_response(&mut streams[sid], i, p, u);
                        Role::Response(sid, u)
                    }
                }
                _ => Role::Other,
            };
            roles.push(role);
        }
        let mut cm_seen: HashMap<(IpAddr, u64, u16), u64> = HashMap::new();
        let mut cm_req: HashMap<u32, u64> = HashMap::new();
        let mut cm_dreq: HashMap<u32, u64> = HashMap::new();
        let mut contexts = Vec::with_capacity(packets.len());
        for (p, role) in packets.iter().zip(&roles) {
            let info = p.opcode.info();
            let mut c = match (role, info) {
                (Role::Request(sid, u), Some(i)) => request(&mut streams[*sid], i, p, *u, mtu),
                (Role::Response(sid, u), Some(i)) => response(&mut streams[*sid], i, p, *u),
                (_, Some(i)) if i.transport == Transport::Cnp => Context {
                    sentence: format!(
                        "Congestion notification (CNP) to QP {:#x}: {} saw ECN congestion marks (CE) on packets from this QP and asks its sender to slow down (DCQCN rate reduction)",
                        p.dest_qp, p.src
                    ),
                    ..Context::default()
                },
                (_, Some(i)) if i.transport == Transport::Ud => Context {
                    sentence: ud(p, &mut cm_seen, &mut cm_req, &mut cm_dreq),
                    ..Context::default()
                },
                (_, Some(i)) => Context {
                    sentence: format!(
                        "{} (PSN {:#x}){}",
                        i.name,
                        p.psn.value(),
                        if p.icrc_ok { "" } else { "; not tracked" }
                    ),
                    ..Context::default()
                },
                (_, None) => Context {
                    sentence: format!("unknown opcode {:#04x}", p.opcode.0),
                    ..Context::default()
                },
            };
            if !p.icrc_ok {
                c.sentence = format!(
                    "ICRC WRONG: the receiver drops this packet silently, as if it were lost ({})",
                    c.sentence
                );
            }
            if p.ecn_ce {
                c.sentence += "; the IP ECN field is CE: a switch on the way saw congestion, so the receiver will send a CNP";
            }
            if p.becn {
                c.sentence += "; BECN set: the sender is told to slow down";
            }
            contexts.push(c);
        }
        Analysis { contexts }
    }

    /// The context of the `i`th packet given to [`Analysis::new`].
    pub fn context(&self, i: usize) -> &Context {
        &self.contexts[i]
    }
}

/// The request stream a response belongs to: the requests go the other
/// way; of several, the one whose last PSN is nearest.
fn pick_stream(streams: &[Stream], by_key: &HashMap<StreamKey, usize>, p: &Facts) -> Option<usize> {
    by_key
        .iter()
        .filter(|((s, d, q), _)| *s == p.dst && *d == p.src && q.is_some())
        .filter_map(|(_, &sid)| {
            let (last, _) = streams[sid].last?;
            Some((p.psn.diff(last).unsigned_abs(), sid))
        })
        .min()
        .map(|(_, sid)| sid)
}

fn first_pass_request(s: &mut Stream, i: &OpcodeInfo, p: &Facts, u: i64) {
    match i.operation {
        Operation::ReadRequest => {
            // A re-request from the middle of a READ whose responses were
            // seen is part of that READ, not a new one.
            if s.read_of(u)
                .is_some_and(|(start, r)| start < u && r.end.is_some())
            {
                return;
            }
            s.reads.entry(u).or_insert(Read {
                frame: p.frame,
                dma_len: p.reth.map_or(0, |r| r.dma_len),
                end: None,
                responses: None,
            });
        }
        Operation::CompareSwap | Operation::FetchAdd => {
            s.messages.insert(u, Some(u));
        }
        _ => match i.position {
            Position::First => {
                s.messages.entry(u).or_insert(None);
            }
            Position::Only => {
                s.messages.insert(u, Some(u));
            }
            Position::Last => {
                if let Some((_, e)) = s.messages.range_mut(..=u).next_back() {
                    if e.is_none() {
                        *e = Some(u);
                    }
                }
            }
            Position::Middle => {}
        },
    }
}

fn first_pass_response(s: &mut Stream, i: &OpcodeInfo, p: &Facts, u: i64) {
    match i.operation {
        Operation::ReadResponse => {
            if let Some((_, r)) = s.reads.range_mut(..=u).next_back() {
                if i.position.ends() {
                    r.end = Some(r.end.map_or(u, |e| e.max(u)));
                }
                r.responses = Some(match r.responses {
                    None => [p.frame, p.frame],
                    Some([a, _]) => [a, p.frame],
                });
            }
        }
        Operation::AtomicAcknowledge => {
            s.atomic_answer.entry(u).or_insert(p.frame);
        }
        _ => {}
    }
}

fn op_name(i: &OpcodeInfo) -> &'static str {
    match i.operation {
        Operation::Send => "SEND",
        Operation::RdmaWrite => "RDMA WRITE",
        Operation::ReadRequest => "RDMA READ request",
        Operation::ReadResponse => "RDMA READ response",
        Operation::Acknowledge => "Acknowledge",
        Operation::AtomicAcknowledge => "Atomic Acknowledge",
        Operation::CompareSwap => "Compare-and-swap",
        Operation::FetchAdd => "Fetch-and-add",
        Operation::Flush => "FLUSH",
        Operation::AtomicWrite => "ATOMIC WRITE",
        Operation::Cnp => "CNP",
    }
}

fn position_name(p: Position) -> &'static str {
    match p {
        Position::First => "first",
        Position::Middle => "middle",
        Position::Last => "last",
        Position::Only => "only",
    }
}

/// "packet 3 of 16 of the message starting at PSN 0x12"
fn position_phrase(c: &mut Context, start: i64, end: Option<i64>, u: i64, what: &str) -> String {
    let k = (u - start + 1) as u32;
    c.message_psn = Some(psn24(start));
    c.packet = Some(k);
    c.packets = end.map(|e| (e - start + 1) as u32);
    match end {
        Some(e) => format!(
            "packet {k} of {} of the {what} starting at PSN {}",
            e - start + 1,
            hex(start)
        ),
        None => format!(
            "packet {k} of the {what} starting at PSN {} (its end is not in the capture)",
            hex(start)
        ),
    }
}

fn request(s: &mut Stream, i: &OpcodeInfo, p: &Facts, u: i64, mtu: Option<usize>) -> Context {
    let mut c = Context::default();
    let mut parts: Vec<String> = Vec::new();
    let rc = i.transport == Transport::Rc;
    // How many PSNs the request uses: a READ one per response packet.
    // A READ request's own entry, or for a re-request from the middle of
    // a READ, the original's.
    let read = match i.operation {
        Operation::ReadRequest => s
            .reads
            .get(&u)
            .copied()
            .or_else(|| s.read_of(u).map(|(_, r)| r)),
        _ => None,
    };
    let span = match (i.operation, read) {
        (Operation::ReadRequest, Some(r)) => match (r.end, mtu) {
            (Some(e), _) if e >= u => e - u + 1,
            (None, Some(m)) if m > 0 => (r.dma_len as usize).div_ceil(m).max(1) as i64,
            _ => 1,
        },
        _ => 1,
    };
    // Retransmission, duplicate or gap.
    let mut prefix = String::new();
    match s.next {
        Some(n) if u < n => {
            c.retransmission = true;
            let orig = s.first_seen.get(&u).copied().or_else(|| {
                // A READ re-requested from the middle: the original READ.
                (i.operation == Operation::ReadRequest)
                    .then(|| s.read_of(u).map(|(_, r)| r.frame))
                    .flatten()
                    .filter(|f| *f != p.frame)
            });
            c.duplicate_of = orig;
            prefix = match orig {
                Some(f) if i.operation == Operation::ReadRequest && !s.first_seen.contains_key(&u) => {
                    format!("Retransmission: re-request of the rest of the RDMA READ of frame {f}, from PSN {}. ", hex(u))
                }
                Some(f) => format!("Retransmission: duplicate of frame {f}. "),
                None => "Retransmission: this PSN was sent before, but the first copy is not in the capture (lost before the capture point). ".into(),
            };
        }
        Some(n) if u > n => {
            prefix = format!(
                "Gap: PSN {}{} not in the capture (lost before the capture point); the responder will answer with a PSN sequence error NAK. ",
                hex(n),
                if u - n > 1 { format!("..{} are", hex(u - 1)) } else { " is".into() }
            );
        }
        _ => {}
    }
    s.first_seen.entry(u).or_insert(p.frame);
    s.next = Some(s.next.map_or(u + span, |n| n.max(u + span)));

    let name = format!("{} {}", i.transport.prefix(), op_name(i));
    match i.operation {
        Operation::ReadRequest => {
            let len = p.reth.map_or(0, |r| r.dma_len);
            let mut t = format!("{name}: read {len} bytes");
            if let Some(r) = p.reth {
                t += &format!(" from VA {:#x} (R_Key {:#x})", r.va, r.rkey);
            }
            c.message_psn = Some(psn24(u));
            match read.and_then(|r| r.responses.map(|f| (r, f))) {
                Some((r, _)) if r.frame != p.frame => {
                    t += &format!(
                        "; the responder answers it with READ response packet(s) PSN {}..{} again",
                        hex(u),
                        hex(u + span - 1)
                    )
                }
                Some((r, [a, b])) if r.end.is_some() => {
                    t += &format!(
                    "; answered by {span} READ response packet(s), PSN {}..{} (frames {a}..{b})",
                    hex(u),
                    hex(u + span - 1)
                )
                }
                _ => t += &format!("; expects {span} READ response packet(s) (by the path MTU)"),
            }
            parts.push(t);
        }
        Operation::CompareSwap | Operation::FetchAdd => {
            let mut t = name;
            if let Some(a) = p.atomic {
                t += &match i.operation {
                    Operation::FetchAdd => {
                        format!(": add {:#x} to the 8 bytes at VA {:#x}", a.swap_add, a.va)
                    }
                    _ => format!(
                        ": if the 8 bytes at VA {:#x} equal {:#x}, write {:#x}",
                        a.va, a.compare, a.swap_add
                    ),
                };
            }
            if let Some(f) = s.atomic_answer.get(&u) {
                t += &format!("; answered in frame {f}");
            }
            parts.push(t);
        }
        _ => {
            let what = if i.position == Position::Only {
                format!(
                    "{name} only packet: a whole {}-byte message in one packet",
                    p.payload_len
                )
            } else {
                let pos = match s.message_of(u) {
                    Some((start, end)) => position_phrase(&mut c, start, end, u, "message"),
                    None => "packet of a message whose start is not in the capture".into(),
                };
                format!("{name} {} {pos}", position_name(i.position))
            };
            let mut t = what;
            if i.position == Position::Only {
                c.message_psn = Some(psn24(u));
                c.packet = Some(1);
                c.packets = Some(1);
            }
            if let Some(r) = p.reth {
                t += &format!(
                    "; writes {} bytes in all to VA {:#x} (R_Key {:#x})",
                    r.dma_len, r.va, r.rkey
                );
            }
            if i.position != Position::Only {
                t += &format!("; carries {} bytes", p.payload_len);
            }
            if let Some(imm) = p.immdt {
                t += &format!(
                    "; immediate data {imm:#x} for the receiver's completion (consumes a receive)"
                );
            }
            if let Some(k) = p.ieth {
                t += &format!("; invalidates R_Key {k:#x} at the receiver");
            }
            if p.solicited {
                t += "; solicited event";
            }
            parts.push(t);
        }
    }
    c.expected_psn = Some(psn24(u + span));
    parts.push(format!("PSN {} expected next", hex(u + span)));
    parts.push(if !rc {
        "UC: never acknowledged".into()
    } else if p.ack_req {
        "ACK requested".into()
    } else {
        "no ACK requested".into()
    });
    c.sentence = prefix + &parts.join("; ");
    c
}

fn nak_consequence(code: NakCode) -> &'static str {
    match code {
        NakCode::InvalidRequest => "was not valid at the responder (an opcode or length it does not accept)",
        NakCode::RemoteAccessError => "failed the responder's R_Key, address or access-rights check",
        NakCode::RemoteOperationalError => "could not be completed by the responder (e.g. a SEND longer than the posted receive buffer)",
        NakCode::InvalidRdRequest => "was an invalid RD request",
        _ => "was refused with a reserved NAK code",
    }
}

/// First and last frame of the request PSNs in `from..=to`.
fn frames(s: &Stream, from: i64, to: i64) -> Option<[u64; 2]> {
    let r = s.first_seen.range(from..=to).map(|(_, f)| *f);
    r.fold(None, |acc, f| match acc {
        None => Some([f, f]),
        Some([a, b]) => Some([a.min(f), b.max(f)]),
    })
}

fn frames_phrase(f: Option<[u64; 2]>) -> String {
    match f {
        Some([a, b]) if a == b => format!(" (frame {a})"),
        Some([a, b]) => format!(" (first sent in frames {a}..{b})"),
        None => String::new(),
    }
}

fn response(s: &mut Stream, i: &OpcodeInfo, p: &Facts, u: i64) -> Context {
    let mut c = Context::default();
    let aeth = p.aeth;
    // READ responses and atomic acknowledges repeat as a pair with their
    // request; ACKs and NAKs separately.
    let is_ack = i.operation == Operation::Acknowledge;
    let seen_map = if is_ack { &s.ack_seen } else { &s.resp_seen };
    let seen_before = seen_map.get(&u).copied();
    let mut t = match i.operation {
        Operation::ReadResponse => {
            let name = format!("RDMA READ response {}", position_name(i.position));
            let mut t = match s.read_of(u) {
                Some((start, r)) => {
                    let pos = position_phrase(&mut c, start, r.end, u, "READ");
                    c.answers = Some([r.frame, r.frame]);
                    format!(
                        "{name} {pos}, answering the READ request of frame {} ({} bytes asked)",
                        r.frame, r.dma_len
                    )
                }
                None => format!("{name} for a READ request not in the capture"),
            };
            t += &format!("; carries {} bytes", p.payload_len);
            if let (Some(_), Some(f)) = (aeth, seen_before) {
                t = format!("Sent again (first in frame {f}): the requester re-requested it. {t}");
                c.duplicate_of = Some(f);
            } else if let Some(f) = seen_before {
                t = format!("Sent again (first in frame {f}): the requester re-requested it. {t}");
                c.duplicate_of = Some(f);
            }
            if let Some(a) = aeth {
                t += &format!(
                    "; its AETH also acknowledges everything before (MSN {})",
                    a.msn
                );
            }
            if i.position.ends() {
                s.acked = Some(s.acked.map_or(u, |x| x.max(u)));
            }
            t
        }
        Operation::AtomicAcknowledge => {
            let req = s.first_seen.get(&u).copied();
            c.answers = req.map(|f| [f, f]);
            let mut t = format!(
                "Atomic Acknowledge of the atomic at PSN {}{}: the target held {:#x} before the operation",
                hex(u),
                req.map_or(String::new(), |f| format!(" (frame {f})")),
                p.orig.unwrap_or(0)
            );
            if let Some(f) = seen_before {
                t = format!("Sent again (first in frame {f}): the responder answered a duplicate atomic from its saved result. {t}");
                c.duplicate_of = Some(f);
            }
            if let Some(a) = aeth {
                t += &format!(
                    "; acknowledges everything through PSN {} (MSN {})",
                    hex(u),
                    a.msn
                );
            }
            s.acked = Some(s.acked.map_or(u, |x| x.max(u)));
            t
        }
        _ => match aeth.map(|a| a.syndrome) {
            Some(AethSyndrome::Ack { credits }) => {
                let from = s.acked.map_or_else(
                    || s.first_seen.range(..=u).next().map_or(u, |(k, _)| *k),
                    |a| a + 1,
                );
                let credit = match rxe_core::wire::aeth::credit_count(credits) {
                    Some(n) => format!("{n} credits"),
                    None => "credit field 31: end-to-end credits not used".into(),
                };
                let msn = aeth.map_or(0, |a| a.msn);
                let t = if from > u {
                    c.duplicate_of = seen_before;
                    format!(
                        "ACK of everything through PSN {} (MSN {msn}) again{}: nothing new is acknowledged (it answers a duplicate request); {credit}",
                        hex(u),
                        seen_before.map_or(String::new(), |f| format!(", as in frame {f}"))
                    )
                } else {
                    let f = frames(s, from, u);
                    c.answers = f;
                    let n = u - from + 1;
                    format!(
                        "ACK of everything through PSN {} (MSN {msn}): acknowledges {} {}{}{}; {credit}",
                        hex(u),
                        n,
                        if n == 1 { "packet".to_string() } else { format!("packets, PSN {}..{}", hex(from), hex(u)) },
                        frames_phrase(f),
                        if n > 1 { ", one cumulative ACK" } else { "" }
                    )
                };
                s.acked = Some(s.acked.map_or(u, |x| x.max(u)));
                t
            }
            Some(AethSyndrome::RnrNak { timer }) => {
                let req = s.first_seen.get(&u).copied();
                c.answers = req.map(|f| [f, f]);
                s.acked = Some(s.acked.map_or(u - 1, |x| x.max(u - 1)));
                format!(
                    "RNR NAK: receiver not ready, no receive posted for the request at PSN {}{}; retry after {} (timer code {timer}); the requester resends from PSN {} then",
                    hex(u),
                    req.map_or(String::new(), |f| format!(" (frame {f})")),
                    duration(rxe_core::engine::timers::rnr_delay(timer)),
                    hex(u)
                )
            }
            Some(AethSyndrome::Nak(NakCode::PsnSequenceError)) => {
                c.expected_psn = Some(psn24(u));
                let trigger = s.first_seen.range(u + 1..).next().map(|(k, f)| (*k, *f));
                c.answers = trigger.map(|(_, f)| [f, f]);
                s.acked = Some(s.acked.map_or(u - 1, |x| x.max(u - 1)));
                format!(
                    "NAK: PSN sequence error, the responder expects PSN {}{}; the requester will go back to it and resend from there (go-back-N); everything before it is acknowledged",
                    hex(u),
                    trigger.map_or(String::new(), |(k, f)| format!(
                        " but got PSN {} (frame {f})",
                        hex(k)
                    ))
                )
            }
            Some(AethSyndrome::Nak(code)) => {
                let req = s.first_seen.get(&u).copied();
                c.answers = req.map(|f| [f, f]);
                format!(
                    "NAK: {code} (code {}): the request at PSN {}{} {}; the requester completes it with an error and its QP goes to the error state",
                    code.code(),
                    hex(u),
                    req.map_or(String::new(), |f| format!(" (frame {f})")),
                    nak_consequence(code)
                )
            }
            Some(AethSyndrome::Reserved(b)) => {
                format!("Acknowledge with a reserved AETH syndrome {b:#04x}")
            }
            None => "Acknowledge without an AETH".into(),
        },
    };
    let seen_map = if is_ack {
        &mut s.ack_seen
    } else {
        &mut s.resp_seen
    };
    seen_map.entry(u).or_insert(p.frame);
    if i.transport == Transport::Uc {
        t += "; (a response on UC, which has none)";
    }
    c.sentence = t;
    c
}

fn ud(
    p: &Facts,
    seen: &mut HashMap<(IpAddr, u64, u16), u64>,
    reqs: &mut HashMap<u32, u64>,
    dreqs: &mut HashMap<u32, u64>,
) -> String {
    let src_qp = p.deth.map_or(0, |d| d.src_qp);
    let Some(m) = &p.cm else {
        if let Some((class, method, attr)) = p.other_mad {
            return format!(
                "MAD to the GSI QP (QP1) from QP {src_qp:#x}: class {class:#04x}, method {method:#04x}, attribute {attr:#06x}"
            );
        }
        return format!(
            "UD SEND only: one {}-byte datagram from QP {src_qp:#x} to QP {:#x}{}{}; UD is never acknowledged",
            p.payload_len,
            p.dest_qp,
            p.deth.map_or(String::new(), |d| format!(" (Q_Key {:#x})", d.qkey)),
            p.immdt.map_or(String::new(), |i| format!(", immediate data {i:#x}"))
        );
    };
    let attr = m.message.attribute_id();
    let key = (p.src, m.transaction_id, attr.0);
    let again = match seen.get(&key) {
        Some(f) => {
            format!("Sent again (same transaction ID as frame {f}: no answer came in time). ")
        }
        None => {
            seen.insert(key, p.frame);
            String::new()
        }
    };
    let body = match &m.message {
        CmMessage::Req(r) => {
            reqs.entry(r.local_comm_id).or_insert(p.frame);
            format!(
                "CM REQ: {} asks {} to connect to service ID {:#x}; its QP {:#x} ({}) expects PSN {:#x} first, which the passive side will send from; local comm ID {:#x}",
                p.src, p.dst, r.service_id, r.local_qpn, r.transport_service_type, r.starting_psn, r.local_comm_id
            )
        }
        CmMessage::Rep(r) => format!(
            "CM REP: accepts the REQ{} (comm IDs {:#x}/{:#x}); the passive side's QP {:#x} expects PSN {:#x} first, which the active side will send from",
            reqs.get(&r.remote_comm_id).map_or(String::new(), |f| format!(" of frame {f}")),
            r.remote_comm_id, r.local_comm_id, r.local_qpn, r.starting_psn
        ),
        CmMessage::Rtu(r) => format!(
            "CM RTU: ready to use; the connection (comm IDs {:#x}/{:#x}) is established and data can flow",
            r.local_comm_id, r.remote_comm_id
        ),
        CmMessage::Dreq(r) => {
            dreqs.entry(r.local_comm_id).or_insert(p.frame);
            format!(
                "CM DREQ: asks to disconnect (comm ID {:#x}, the peer's QP {:#x})",
                r.local_comm_id, r.remote_qpn_eecn
            )
        }
        CmMessage::Drep(r) => format!(
            "CM DREP: disconnect confirmed{}; the connection is gone",
            dreqs.get(&r.remote_comm_id).map_or(String::new(), |f| format!(", answering the DREQ of frame {f}"))
        ),
        CmMessage::Rej(r) => format!(
            "CM REJ: refuses the {} (comm ID {:#x}): {}",
            r.message_rejected, r.remote_comm_id, r.reason
        ),
        CmMessage::Mra(r) => format!(
            "CM MRA: the {} arrived, the answer will take up to {}",
            r.message_mraed,
            duration(rxe_core::mad::cm::timeout(r.service_timeout))
        ),
        CmMessage::SidrReq(r) => format!(
            "CM SIDR_REQ: which UD QP serves service ID {:#x}? (request ID {:#x})",
            r.service_id, r.request_id
        ),
        CmMessage::SidrRep(r) => format!(
            "CM SIDR_REP: service ID {:#x} is served by QP {:#x} with Q_Key {:#x} (status: {})",
            r.service_id, r.qpn, r.qkey, r.status
        ),
        other => format!("CM {}", other.attribute_id()),
    };
    format!("{again}{body}; a MAD from QP {src_qp:#x} to the GSI QP (QP1)")
}

#[cfg(test)]
mod tests {
    use super::*;
    use rxe_core::wire::AethSyndrome;

    fn pkt(frame: u64, op: Opcode, psn: u32, from_a: bool) -> Facts {
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let b: IpAddr = "10.0.0.2".parse().unwrap();
        let (src, dst, qp) = if from_a { (a, b, 0x11) } else { (b, a, 0x22) };
        Facts {
            frame,
            src,
            dst,
            ecn_ce: false,
            opcode: op,
            dest_qp: qp,
            psn: Psn::new(psn),
            ack_req: false,
            solicited: false,
            becn: false,
            payload_len: 1024,
            reth: None,
            atomic: None,
            aeth: None,
            orig: None,
            deth: None,
            immdt: None,
            ieth: None,
            cm: None,
            other_mad: None,
            icrc_ok: true,
        }
    }

    fn ack(frame: u64, psn: u32, syndrome: AethSyndrome, msn: u32) -> Facts {
        let mut p = pkt(frame, Opcode::RC_ACKNOWLEDGE, psn, false);
        p.payload_len = 0;
        p.aeth = Some(AethRepr { syndrome, msn });
        p
    }

    /// A 4-packet WRITE at PSN 0x10, the third packet lost and resent
    /// after a NAK, with the last one's PSN wrapping past 0xFFFFFF.
    #[test]
    fn write_with_loss_nak_and_retransmission() {
        let s = 0xff_fffe;
        let mut v = vec![
            pkt(1, Opcode::RC_RDMA_WRITE_FIRST, s, true),
            pkt(2, Opcode::RC_RDMA_WRITE_MIDDLE, s + 1, true),
            // s+2 = 0 lost.
            pkt(3, Opcode::RC_RDMA_WRITE_LAST, 1, true),
            ack(4, 0, AethSyndrome::Nak(NakCode::PsnSequenceError), 0),
            pkt(5, Opcode::RC_RDMA_WRITE_MIDDLE, 0, true),
            pkt(6, Opcode::RC_RDMA_WRITE_LAST, 1, true),
            ack(7, 1, AethSyndrome::Ack { credits: 31 }, 1),
        ];
        v[0].reth = Some(RethRepr {
            va: 0x1000,
            rkey: 7,
            dma_len: 4096,
        });
        v[2].ack_req = true;
        let a = Analysis::new(&v);
        let c = |i: usize| a.context(i).clone();
        assert_eq!((c(1).packet, c(1).packets), (Some(2), Some(4)));
        assert!(
            c(1).sentence
                .contains("middle packet 2 of 4 of the message starting at PSN 0xfffffe"),
            "{}",
            c(1).sentence
        );
        assert_eq!(c(1).expected_psn, Some(0));
        assert!(c(1).sentence.contains("no ACK requested"));
        assert!(
            c(2).sentence
                .starts_with("Gap: PSN 0x0 is not in the capture"),
            "{}",
            c(2).sentence
        );
        assert!(c(2).sentence.contains("ACK requested"));
        assert_eq!(c(2).expected_psn, Some(2));
        assert_eq!(c(3).expected_psn, Some(0));
        assert!(
            c(3).sentence
                .contains("expects PSN 0x0 but got PSN 0x1 (frame 3)"),
            "{}",
            c(3).sentence
        );
        assert_eq!(c(3).answers, Some([3, 3]));
        // The lost packet's first copy is not in the capture.
        assert!(c(4).retransmission);
        assert_eq!(c(4).duplicate_of, None);
        assert_eq!((c(4).packet, c(4).packets), (Some(3), Some(4)));
        assert!(c(4).sentence.contains("first copy is not in the capture"));
        // The last packet was captured before: a duplicate of frame 3.
        assert!(c(5).retransmission);
        assert_eq!(c(5).duplicate_of, Some(3));
        assert!(c(5)
            .sentence
            .starts_with("Retransmission: duplicate of frame 3."));
        // The ACK covers what the NAK did not: PSN 0 and 1.
        assert!(c(6).sentence.starts_with("ACK of everything through PSN 0x1 (MSN 1): acknowledges 2 packets, PSN 0x0..0x1 (first sent in frames 3..5)"), "{}", c(6).sentence);
        assert!(c(6).sentence.contains("credits not used"));
        assert!(c(0).sentence.contains("writes 4096 bytes in all"));
    }

    #[test]
    fn read_spans_its_responses_and_rnr_and_naks_are_named() {
        let mut r = pkt(1, Opcode::RC_RDMA_READ_REQUEST, 100, true);
        r.payload_len = 0;
        r.reth = Some(RethRepr {
            va: 0,
            rkey: 1,
            dma_len: 3000,
        });
        let mut v = vec![r];
        for (f, op, psn) in [
            (2, Opcode::RC_RDMA_READ_RESPONSE_FIRST, 100),
            (3, Opcode::RC_RDMA_READ_RESPONSE_MIDDLE, 101),
            (4, Opcode::RC_RDMA_READ_RESPONSE_LAST, 102),
        ] {
            let mut p = pkt(f, op, psn, false);
            if op != Opcode::RC_RDMA_READ_RESPONSE_MIDDLE {
                p.aeth = Some(AethRepr {
                    syndrome: AethSyndrome::Ack { credits: 31 },
                    msn: 1,
                });
            }
            v.push(p);
        }
        v.push(pkt(5, Opcode::RC_SEND_ONLY, 103, true));
        v.push(ack(6, 103, AethSyndrome::RnrNak { timer: 12 }, 1));
        v.push(pkt(7, Opcode::RC_SEND_ONLY, 103, true));
        v.push(ack(
            8,
            103,
            AethSyndrome::Nak(NakCode::RemoteOperationalError),
            1,
        ));
        let a = Analysis::new(&v);
        let c = |i: usize| a.context(i).clone();
        assert_eq!(c(0).expected_psn, Some(103));
        assert!(
            c(0).sentence
                .contains("answered by 3 READ response packet(s), PSN 0x64..0x66 (frames 2..4)"),
            "{}",
            c(0).sentence
        );
        assert!(c(2).sentence.starts_with("RDMA READ response middle packet 2 of 3 of the READ starting at PSN 0x64, answering the READ request of frame 1"), "{}", c(2).sentence);
        assert_eq!(c(3).answers, Some([1, 1]));
        assert!(c(4)
            .sentence
            .contains("a whole 1024-byte message in one packet"));
        assert!(c(5).sentence.starts_with("RNR NAK: receiver not ready"));
        assert!(
            c(5).sentence
                .contains("retry after 0.64 ms (timer code 12)"),
            "{}",
            c(5).sentence
        );
        assert_eq!(c(6).duplicate_of, Some(5));
        assert!(
            c(7).sentence.starts_with(
                "NAK: remote operational error (code 3): the request at PSN 0x67 (frame 5)"
            ),
            "{}",
            c(7).sentence
        );
    }

    #[test]
    fn duplicate_ack_and_durations() {
        let v = vec![
            pkt(1, Opcode::RC_SEND_ONLY, 5, true),
            ack(2, 5, AethSyndrome::Ack { credits: 3 }, 1),
            pkt(3, Opcode::RC_SEND_ONLY, 5, true),
            ack(4, 5, AethSyndrome::Ack { credits: 5 }, 1),
        ];
        let a = Analysis::new(&v);
        assert!(
            a.context(1)
                .sentence
                .contains("acknowledges 1 packet (frame 1); 3 credits"),
            "{}",
            a.context(1).sentence
        );
        assert_eq!(a.context(2).duplicate_of, Some(1));
        assert_eq!(a.context(3).duplicate_of, Some(2));
        assert!(a.context(3).sentence.contains("again, as in frame 2"));
        assert!(a.context(3).sentence.contains("6 credits"));
    }

    #[test]
    fn responses_pick_the_nearest_stream_between_two_hosts() {
        // Two QPs from A to B (0x11 and 0x33), PSNs far apart; the ACK to
        // A's second QP must be matched by PSN, not by the first stream.
        let mut v = vec![
            pkt(1, Opcode::RC_SEND_ONLY, 10, true),
            pkt(2, Opcode::RC_SEND_ONLY, 500_000, true),
        ];
        v[1].dest_qp = 0x33;
        let mut a2 = ack(3, 500_000, AethSyndrome::Ack { credits: 31 }, 1);
        a2.dest_qp = 0x44;
        v.push(a2);
        v.push(ack(4, 10, AethSyndrome::Ack { credits: 31 }, 1));
        let a = Analysis::new(&v);
        assert_eq!(a.context(2).answers, Some([2, 2]));
        assert_eq!(a.context(3).answers, Some([1, 1]));
    }
}
