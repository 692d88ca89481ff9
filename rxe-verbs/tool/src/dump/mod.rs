//! `rxe dump FILE`: one line per RoCE v2 packet in a capture file.
//!
//! Frames are numbered from 1 counting every frame, as Wireshark does, and
//! timed from the first frame. Frames that are not RoCE v2 are skipped; a
//! frame sent to UDP port 4791 that does not parse is printed with the
//! parse error. `--json` prints one JSON object per line instead (and no
//! summary, so stdout stays pure JSON lines). `--ladder OUT.svg` (or
//! `.html`) draws the capture as a sequence diagram instead (the `ladder`
//! module). `--explain` takes every packet apart field by field and says
//! what it does in the capture (the `explain` module). A GSO super-packet
//! (several RoCE packets in one IPv4 packet, as a capture on `lo` of a
//! GSO sender holds them) is split into its packets first ([`split`]);
//! their lines say so.

use rxe_core::wire::{Error as WireError, LinkType, PacketRepr, RoceFrame};
use rxe_net::capture::{CaptureReader, CaptureWriter, Record};
use rxe_net::live::LiveCapture;
use serde::Serialize;
use std::collections::BTreeSet;
use std::fs::File;
use std::io::{self, BufWriter, Read, Write};
use std::net::IpAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use crate::{explain, ladder};

mod json;
pub(crate) mod packet;
mod split;

use json::{error_json, json_packet};
use packet::{error_line, roce_addresses, text_line, Parsed, Rel};

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

#[derive(Debug, Default)]
struct Stats {
    roce: u64,
    icrc_bad: u64,
    malformed: u64,
    skipped: u64,
    /// GSO super-packets found, and the packets they held ([`split`]).
    split_frames: u64,
    split_packets: u64,
}

/// Says on a packet's line that it is segment `s` of its frame: a
/// suffix in text, a `gso_segment: [index, count]` member in JSON.
fn mark_segment(line: String, s: split::Segment, json: bool) -> String {
    if !json {
        return format!("{line}  [GSO segment {}/{}]", s.index, s.count);
    }
    match serde_json::from_str::<serde_json::Value>(&line) {
        Ok(serde_json::Value::Object(mut m)) => {
            m.insert("gso_segment".into(), serde_json::json!([s.index, s.count]));
            to_json(&m)
        }
        _ => line,
    }
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
        for (rec, segment) in split::expand(rec) {
            if let Some(s) = segment {
                stats.split_packets += 1;
                stats.split_frames += u64::from(s.index == 1);
            }
            if args.explain {
                explained.push((rec, time.secs()));
                continue;
            }
            let collect = ladder_format.is_some().then_some(&mut ladder_packets);
            let Some(mut o) = dump_record(&rec, time, args.json, &mut stats, collect) else {
                stats.skipped += 1;
                continue;
            };
            if let Some(s) = segment {
                o.line = mark_segment(o.line, s, args.json);
            }
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
        let split = match stats.split_frames {
            0 => String::new(),
            n => format!(
                "; {n} GSO super-packet{} split into {} packets",
                if n == 1 { "" } else { "s" },
                stats.split_packets
            ),
        };
        eprintln!(
            "{}: {} RoCE packets ({} ICRC BAD, {} malformed), {} other frames skipped{split}",
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
