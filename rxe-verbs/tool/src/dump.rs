//! `rxe dump FILE`: one line per RoCE v2 packet in a capture file.
//!
//! Frames are numbered from 1 counting every frame, as Wireshark does, and
//! timed from the first frame. Frames that are not RoCE v2 are skipped; a
//! frame sent to UDP port 4791 that does not parse is printed with the
//! parse error. `--json` prints one JSON object per line instead (and no
//! summary, so stdout stays pure JSON lines). `--ladder OUT.svg` (or
//! `.html`) draws the capture as a sequence diagram instead (the `ladder`
//! module). `--explain` takes every packet apart field by field and says
//! what it does in the capture (the `explain` module).

use rxe_core::wire::{
    AethRepr, AethSyndrome, Error as WireError, LinkType, Operation, PacketRepr, RoceFrame,
    ROCE_V2_PORT,
};
use rxe_net::capture::{CaptureReader, CaptureWriter, Record};
use rxe_net::live::LiveCapture;
use serde::Serialize;
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::fs::File;
use std::io::{self, BufWriter, Read, Write};
use std::net::IpAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

#[path = "ladder/mod.rs"]
mod ladder;

#[path = "explain/mod.rs"]
mod explain;

/// Arguments of `rxe dump`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Capture file: pcap or pcapng (Ethernet, Linux cooked SLL/SLL2 or raw
    /// IP); `-` reads standard input (e.g. `tcpdump -U -w - | rxe dump -`).
    #[arg(required_unless_present = "interface", conflicts_with = "interface")]
    pub file: Option<PathBuf>,
    /// Capture live from this interface instead (e.g. `lo`; needs root or
    /// CAP_NET_RAW): RoCE packets are printed as they pass.
    #[arg(short, long, value_name = "IFACE")]
    pub interface: Option<String>,
    /// With -i: stop after this many RoCE packets (needed for --explain
    /// and --ladder, which draw on the whole capture).
    #[arg(short, long, value_name = "N", requires = "interface")]
    pub count: Option<u64>,
    /// With -i: also write the RoCE packets captured to this pcap file.
    #[arg(short, long, value_name = "FILE.pcap", requires = "interface")]
    pub write: Option<PathBuf>,
    /// Only packets from or to this address (one soft device's traffic on
    /// a shared interface).
    #[arg(long, value_name = "ADDR")]
    pub host: Option<IpAddr>,
    /// Print one JSON object per line instead of text.
    #[arg(long)]
    pub json: bool,
    /// Print only packets with a bad ICRC or that do not parse, and exit
    /// with status 1 if there are any.
    #[arg(long)]
    pub check: bool,
    /// Do not print the summary to stderr at the end (text mode only).
    #[arg(short, long)]
    pub quiet: bool,
    /// Draw the capture as a ladder (sequence) diagram into this file
    /// instead of printing it: `.svg`, or `.html` with zoom and tooltips.
    #[arg(long, value_name = "OUT.svg|OUT.html", conflicts_with_all = ["json", "check"])]
    pub ladder: Option<PathBuf>,
    /// Explain every packet instead: every field of every header with its
    /// byte offset, bits, value and meaning, and one sentence saying what
    /// the packet does in this capture (docs/explain.md).
    #[arg(long, conflicts_with_all = ["ladder", "check"])]
    pub explain: bool,
    /// With --explain: only these frames, e.g. `3,10-12` (the context
    /// still comes from the whole capture).
    #[arg(long, value_name = "LIST", requires = "explain")]
    pub frames: Option<explain::FrameSet>,
}

/// A RoCE packet taken apart, as the formatters see it.
struct Parsed<'a> {
    frame: u64,
    time: Rel,
    roce: &'a RoceFrame<'a>,
    repr: &'a PacketRepr<'a>,
    icrc: u32,
    icrc_expected: u32,
}

impl Parsed<'_> {
    fn icrc_ok(&self) -> bool {
        self.icrc == self.icrc_expected
    }
}

/// Time relative to the first frame, in nanoseconds (negative if the
/// capture's timestamps go backwards).
#[derive(Debug, Clone, Copy)]
struct Rel(i128);

impl Rel {
    fn new(t: Duration, t0: Duration) -> Rel {
        Rel(t.as_nanos() as i128 - t0.as_nanos() as i128)
    }
    fn secs(self) -> f64 {
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
fn text_line(p: &Parsed) -> String {
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

/// The JSON object of a packet: fields in this order, headers the packet
/// does not have left out.
#[derive(Debug, Serialize)]
struct JsonPacket {
    frame: u64,
    time: f64,
    src: IpAddr,
    dst: IpAddr,
    udp_src_port: u16,
    opcode: u8,
    opcode_name: String,
    dest_qp: u32,
    psn: u32,
    solicited: bool,
    ack_req: bool,
    mig_req: bool,
    pad: u8,
    pkey: u16,
    fecn: bool,
    becn: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    rdeth: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    deth: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    feth: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reth: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    atomic_eth: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    aeth: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    atomic_ack_eth: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    immdt: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    ieth: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    mad: Option<Value>,
    payload_len: usize,
    icrc_ok: bool,
    icrc: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    icrc_expected: Option<u32>,
}

fn json_packet(p: &Parsed) -> JsonPacket {
    let (b, r) = (&p.repr.bth, p.repr);
    let aeth = |h: AethRepr| {
        let mut a = json!({ "msn": h.msn });
        let (name, (k, v)) = match h.syndrome {
            AethSyndrome::Ack { credits } => ("ACK", ("credits", json!(credits))),
            AethSyndrome::RnrNak { timer } => ("RNR_NAK", ("timer", json!(timer))),
            AethSyndrome::Nak(c) => {
                a["nak_name"] = json!(c.to_string());
                ("NAK", ("nak_code", json!(c.code())))
            }
            AethSyndrome::Reserved(x) => ("RESERVED", ("raw", json!(x))),
        };
        a["syndrome"] = json!(name);
        a[k] = v;
        a
    };
    JsonPacket {
        frame: p.frame,
        time: p.time.secs(),
        src: p.roce.ip.src(),
        dst: p.roce.ip.dst(),
        udp_src_port: p.roce.udp_src_port,
        opcode: b.opcode.0,
        opcode_name: b.opcode.to_string(),
        dest_qp: b.dest_qp,
        psn: b.psn.value(),
        solicited: b.solicited,
        ack_req: b.ack_req,
        mig_req: b.mig_req,
        pad: b.pad_count,
        pkey: b.pkey,
        fecn: b.fecn,
        becn: b.becn,
        rdeth: r.rdeth.map(|h| json!({ "ee_context": h.ee_context })),
        deth: r
            .deth
            .map(|h| json!({ "qkey": h.qkey, "src_qp": h.src_qp })),
        feth: r
            .feth
            .map(|h| json!({ "selectivity": h.selectivity, "placement": h.placement })),
        reth: r
            .reth
            .map(|h| json!({ "va": h.va, "rkey": h.rkey, "dma_len": h.dma_len })),
        atomic_eth: r.atomic_eth.map(
            |h| json!({ "va": h.va, "rkey": h.rkey, "swap_add": h.swap_add, "compare": h.compare }),
        ),
        aeth: r.aeth.map(aeth),
        atomic_ack_eth: r.atomic_ack_eth.map(|h| json!({ "orig": h.orig })),
        immdt: r.immdt,
        ieth: r.ieth,
        mad: Mad::parse(r).map(|m| m.json()),
        payload_len: r.payload.len(),
        icrc_ok: p.icrc_ok(),
        icrc: p.icrc,
        icrc_expected: (!p.icrc_ok()).then_some(p.icrc_expected),
    }
}

/// A frame to UDP port 4791 that rxe-core could not parse.
fn error_line(frame: u64, time: Rel, addrs: (IpAddr, IpAddr), e: &WireError) -> String {
    format!(
        "{frame:>5} {time:>10} {:>15} → {:<15} malformed RoCE packet: {e}",
        addrs.0, addrs.1
    )
}

/// The JSON object of a frame to UDP port 4791 that does not parse.
#[derive(Debug, Serialize)]
struct JsonError {
    frame: u64,
    time: f64,
    src: IpAddr,
    dst: IpAddr,
    error: String,
}

fn error_json(frame: u64, time: Rel, addrs: (IpAddr, IpAddr), e: &WireError) -> JsonError {
    JsonError {
        frame,
        time: time.secs(),
        src: addrs.0,
        dst: addrs.1,
        error: e.to_string(),
    }
}

/// The header of a management datagram sent to QP1 (CM REQ/REP/RTU/...).
struct Mad {
    class: u8,
    version: u8,
    method: u8,
    attr: u16,
}

impl Mad {
    fn parse(r: &PacketRepr) -> Option<Mad> {
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
    fn cm_name(&self) -> Option<&'static str> {
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
    fn json(&self) -> Value {
        json!({
            "mgmt_class": self.class,
            "class_version": self.version,
            "method": self.method,
            "attr_id": self.attr,
            "name": self.cm_name(),
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
fn roce_addresses(link: LinkType, frame: &[u8]) -> Option<(IpAddr, IpAddr)> {
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

#[derive(Debug, Default)]
struct Stats {
    roce: u64,
    icrc_bad: u64,
    malformed: u64,
    skipped: u64,
}

/// What one frame prints: `None` if it is not RoCE.
struct Output {
    line: String,
    /// ICRC bad or malformed.
    bad: bool,
}

fn dump_record(
    rec: &Record,
    time: Rel,
    json: bool,
    stats: &mut Stats,
    ladder: Option<&mut Vec<ladder::model::Packet>>,
) -> Option<Output> {
    if let Some(l) = ladder {
        return ladder_record(rec, time, stats, l);
    }
    // Any error, even "not RoCE" (an IP fragment), is worth a line if the
    // frame was sent to the RoCE port.
    let malformed = |e: &WireError, stats: &mut Stats| {
        let addrs = roce_addresses(rec.link_type, &rec.data)?;
        stats.malformed += 1;
        let line = if json {
            to_json(&error_json(rec.number, time, addrs, e))
        } else {
            error_line(rec.number, time, addrs, e)
        };
        Some(Output { line, bad: true })
    };
    let roce = match RoceFrame::parse(rec.link_type, &rec.data) {
        Ok(f) => f,
        Err(e) => return malformed(&e, stats),
    };
    let pkt = match roce.packet() {
        Ok(p) => p,
        Err(e) => return malformed(&e, stats),
    };
    let repr = match PacketRepr::parse(&pkt) {
        Ok(r) => r,
        Err(e) => return malformed(&e, stats),
    };
    let p = Parsed {
        frame: rec.number,
        time,
        roce: &roce,
        repr: &repr,
        icrc: pkt.icrc(),
        // Packet::new_checked succeeded, so the ICRC can be computed.
        icrc_expected: roce.computed_icrc().unwrap_or(!pkt.icrc()),
    };
    stats.roce += 1;
    stats.icrc_bad += u64::from(!p.icrc_ok());
    let line = if json {
        to_json(&json_packet(&p))
    } else {
        text_line(&p)
    };
    Some(Output {
        line,
        bad: !p.icrc_ok(),
    })
}

/// `dump_record` for `--ladder`: the packet is kept for the diagram.
fn ladder_record(
    rec: &Record,
    time: Rel,
    stats: &mut Stats,
    packets: &mut Vec<ladder::model::Packet>,
) -> Option<Output> {
    let parsed = RoceFrame::parse(rec.link_type, &rec.data).and_then(|roce| {
        let pkt = roce.packet()?;
        let repr = PacketRepr::parse(&pkt)?;
        let p = Parsed {
            frame: rec.number,
            time,
            roce: &roce,
            repr: &repr,
            icrc: pkt.icrc(),
            icrc_expected: roce.computed_icrc().unwrap_or(!pkt.icrc()),
        };
        stats.roce += 1;
        stats.icrc_bad += u64::from(!p.icrc_ok());
        Ok(ladder::packet(&p))
    });
    let p = match parsed {
        Ok(p) => p,
        Err(e) => {
            let addrs = roce_addresses(rec.link_type, &rec.data)?;
            stats.malformed += 1;
            ladder::malformed(rec.number, time, addrs, &e)
        }
    };
    let bad = p.body.as_ref().map_or(true, |r| !r.icrc_ok);
    packets.push(p);
    Some(Output {
        line: String::new(),
        bad,
    })
}

fn to_json(v: &impl Serialize) -> String {
    serde_json::to_string(v).expect("plain data serializes")
}

/// Runs `rxe dump`.
pub fn run(args: &Args) -> ExitCode {
    let name = match (&args.file, &args.interface) {
        (Some(f), _) => f.display().to_string(),
        (None, Some(i)) => format!("{i} (live)"),
        (None, None) => "-".into(),
    };
    let cannot_read = |e: &dyn std::fmt::Display| {
        eprintln!("rxe: cannot read {name}: {e}");
        ExitCode::from(2)
    };
    if args.interface.is_some() && args.count.is_none() && (args.explain || args.ladder.is_some()) {
        eprintln!("rxe: --explain and --ladder on a live interface need -c N");
        return ExitCode::from(2);
    }
    let ladder_format = match args.ladder.as_deref().map(ladder::Format::of) {
        Some(Err(e)) => {
            eprintln!("rxe: {e}");
            return ExitCode::from(2);
        }
        Some(Ok(f)) => Some(f),
        None => None,
    };
    let mut ladder_packets = Vec::new();
    let mut source = match (&args.file, &args.interface) {
        (_, Some(iface)) => match live_source(iface, args.write.as_deref()) {
            Ok(s) => s,
            Err(e) => return cannot_read(&e),
        },
        (Some(file), None) => {
            let input: Box<dyn Read> = if file.as_os_str() == "-" {
                Box::new(io::stdin().lock())
            } else {
                match File::open(file) {
                    Ok(f) => Box::new(f),
                    Err(e) => return cannot_read(&e),
                }
            };
            match CaptureReader::new(input) {
                Ok(r) => Source::File(r),
                Err(e) => return cannot_read(&e),
            }
        }
        (None, None) => unreachable!("clap requires a file or an interface"),
    };
    // Reading a pipe or an interface: show each packet at once.
    let streaming =
        args.interface.is_some() || args.file.as_ref().is_some_and(|f| f.as_os_str() == "-");
    let mut live_roce = 0u64;
    let mut out = BufWriter::new(io::stdout().lock());
    let mut stats = Stats::default();
    let mut t0 = None;
    let mut warned = BTreeSet::new();
    let mut any_bad = false;
    let mut explained = Vec::new();
    loop {
        let rec = match &mut source {
            Source::File(reader) => match reader.next() {
                None => break,
                Some(Ok(r)) => r,
                Some(Err(e)) if !e.is_fatal() => {
                    if warned.insert(e.to_string()) {
                        eprintln!("rxe: {name}: skipping frames: {e}");
                    }
                    stats.skipped += 1;
                    continue;
                }
                Some(Err(e)) => {
                    let _ = out.flush();
                    return cannot_read(&e);
                }
            },
            Source::Live(cap, writer) => {
                if args.count.is_some_and(|c| live_roce >= c) {
                    break;
                }
                let rec = match cap.next_frame(None) {
                    Ok(Some(r)) => r,
                    Ok(None) => continue,
                    Err(e) => {
                        let _ = out.flush();
                        return cannot_read(&e);
                    }
                };
                // Only RoCE (UDP to port 4791, parsed or not) of the
                // chosen host counts; the rest of the interface's traffic
                // is not even numbered.
                if !wanted(args.host, rec.link_type, &rec.data) {
                    continue;
                }
                live_roce += 1;
                let rec = Record {
                    number: live_roce,
                    ..rec
                };
                if let Some(w) = writer {
                    if let Err(e) = w.write(rec.timestamp, &rec.data) {
                        eprintln!("rxe: cannot write the capture: {e}");
                        return ExitCode::from(2);
                    }
                }
                rec
            }
        };
        if args.interface.is_none()
            && args.host.is_some()
            && !wanted(args.host, rec.link_type, &rec.data)
        {
            stats.skipped += 1;
            continue;
        }
        let time = Rel::new(rec.timestamp, *t0.get_or_insert(rec.timestamp));
        if args.explain {
            explained.push((rec, time.secs()));
            continue;
        }
        let collect = ladder_format.is_some().then_some(&mut ladder_packets);
        let Some(o) = dump_record(&rec, time, args.json, &mut stats, collect) else {
            stats.skipped += 1;
            continue;
        };
        any_bad |= o.bad;
        if ladder_format.is_none() && (o.bad || !args.check) {
            let mut written = writeln!(out, "{}", o.line);
            if streaming {
                written = written.and_then(|()| out.flush());
            }
            if let Err(e) = written {
                return stdout_error(e);
            }
        }
    }
    if args.explain {
        match explain::run(&explained, args.frames.as_ref(), args.json, &mut out) {
            Ok(c) => {
                stats.roce = c.roce;
                stats.icrc_bad = c.icrc_bad;
                stats.malformed = c.malformed;
                stats.skipped += c.skipped;
            }
            Err(e) => return stdout_error(e),
        }
    }
    if let Err(e) = out.flush() {
        return stdout_error(e);
    }
    if let (Some(path), Some(format)) = (&args.ladder, ladder_format) {
        let title = match &args.file {
            Some(f) => f
                .file_name()
                .map_or_else(|| "-".into(), |n| n.to_string_lossy().into_owned()),
            None => name.clone(),
        };
        let doc = ladder::render(&ladder_packets, &title, format);
        if let Err(e) = std::fs::write(path, doc) {
            eprintln!("rxe: cannot write {}: {e}", path.display());
            return ExitCode::from(2);
        }
    }
    if !args.json && !args.quiet {
        eprintln!(
            "{}: {} RoCE packets ({} ICRC BAD, {} malformed), {} other frames skipped",
            name, stats.roce, stats.icrc_bad, stats.malformed, stats.skipped
        );
    }
    if args.check && any_bad {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}

/// A RoCE frame (UDP to port 4791) from or to `host`, if one is named.
fn wanted(host: Option<IpAddr>, link: LinkType, frame: &[u8]) -> bool {
    match roce_addresses(link, frame) {
        None => false,
        Some((s, d)) => host.is_none_or(|h| h == s || h == d),
    }
}

/// Where the frames come from.
enum Source {
    File(CaptureReader<Box<dyn Read>>),
    /// A live interface, and the file its RoCE frames are also written to.
    Live(LiveCapture, Option<CaptureWriter<File>>),
}

fn live_source(iface: &str, write: Option<&std::path::Path>) -> io::Result<Source> {
    let cap = LiveCapture::open(iface)?;
    let writer = match write {
        // Unbuffered: a capture stopped with Ctrl-C keeps every frame.
        Some(p) => Some(
            File::create(p)
                .map_err(|e| io::Error::other(format!("create {}: {e}", p.display())))
                .and_then(|f| {
                    CaptureWriter::new(f, cap.link_type())
                        .map_err(|e| io::Error::other(format!("write {}: {e}", p.display())))
                })?,
        ),
        None => None,
    };
    Ok(Source::Live(cap, writer))
}

/// A closed pipe (`rxe dump f | head`) ends the dump quietly.
fn stdout_error(e: io::Error) -> ExitCode {
    if e.kind() == io::ErrorKind::BrokenPipe {
        ExitCode::SUCCESS
    } else {
        eprintln!("rxe: cannot write: {e}");
        ExitCode::from(2)
    }
}
