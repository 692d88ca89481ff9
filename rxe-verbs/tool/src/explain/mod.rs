//! `rxe dump --explain`: every field of every header of every RoCE v2
//! packet, with its byte offset, bits, value and meaning, and one sentence
//! saying what the packet does in its capture.
//!
//! * [`fields`] takes a frame apart with rxe-core's parsers, as far as it
//!   parses;
//! * [`table`] says where each field of each header is, checked against
//!   rxe-core's parsers by its tests;
//! * [`context`] tracks the capture (messages, PSNs, duplicates, what an
//!   ACK or NAK answers) and writes the sentence.
//!
//! The whole capture is read first, since "packet 3 of 16" needs to know
//! where the message ends; `--frames 3,10-12` then prints only those.

pub mod context;
pub mod fields;
pub mod table;
pub mod words;

use context::{Analysis, Context, Facts};
use fields::{Dissection, Field, HeaderView};
use rxe_net::capture::Record;
use serde::Serialize;
use std::io::{self, Write};
use std::net::IpAddr;
use std::ops::RangeInclusive;

/// A set of frame numbers: `3,10-12`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FrameSet(Vec<RangeInclusive<u64>>);

impl FrameSet {
    /// Whether frame `n` is in the set.
    pub fn contains(&self, n: u64) -> bool {
        self.0.iter().any(|r| r.contains(&n))
    }
}

impl std::str::FromStr for FrameSet {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let num = |x: &str| {
            x.trim()
                .parse::<u64>()
                .map_err(|_| format!("{x:?} is not a frame number"))
        };
        let mut v = Vec::new();
        for part in s.split(',').filter(|p| !p.trim().is_empty()) {
            let r = match part.split_once('-') {
                Some((a, b)) => num(a)?..=num(b)?,
                None => num(part)?..=num(part)?,
            };
            if r.is_empty() {
                return Err(format!("{part:?} is an empty range"));
            }
            v.push(r);
        }
        if v.is_empty() {
            return Err("no frames given".into());
        }
        Ok(FrameSet(v))
    }
}

/// One explained packet, as `--json` prints it.
#[derive(Debug, Serialize)]
struct JsonPacket<'a> {
    frame: u64,
    time: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    src: Option<IpAddr>,
    #[serde(skip_serializing_if = "Option::is_none")]
    dst: Option<IpAddr>,
    #[serde(flatten)]
    context: &'a Context,
    #[serde(skip_serializing_if = "Option::is_none")]
    note: Option<&'a str>,
    headers: Vec<JsonHeader<'a>>,
    fields: Vec<&'a Field>,
}

#[derive(Debug, Serialize)]
struct JsonHeader<'a> {
    name: &'a str,
    offset: usize,
    len: usize,
}

/// What `run` counted, for the summary line.
#[derive(Debug, Default)]
pub struct Counts {
    /// Packets that parsed.
    pub roce: u64,
    /// Of those, with a wrong ICRC.
    pub icrc_bad: u64,
    /// Frames to the RoCE port that did not parse.
    pub malformed: u64,
    /// Frames that are not RoCE.
    pub skipped: u64,
}

/// Explains the RoCE packets among `records` (with their times relative
/// to the first frame, in seconds), printing those `frames` selects.
pub fn run(
    records: &[(Record, f64)],
    frames: Option<&FrameSet>,
    json: bool,
    out: &mut impl Write,
) -> io::Result<Counts> {
    let mut counts = Counts::default();
    let mut shown: Vec<(&Record, f64, Dissection)> = Vec::new();
    for (rec, t) in records {
        let addrs = crate::dump::packet::roce_addresses(rec.link_type, &rec.data);
        match fields::dissect(rec.link_type, &rec.data, addrs) {
            Some(mut d) => {
                match &mut d.facts {
                    Some(f) => {
                        f.frame = rec.number;
                        counts.roce += 1;
                        counts.icrc_bad += u64::from(!f.icrc_ok);
                    }
                    None => counts.malformed += 1,
                }
                shown.push((rec, *t, d));
            }
            None => counts.skipped += 1,
        }
    }
    let facts: Vec<Facts> = shown
        .iter()
        .filter_map(|(_, _, d)| d.facts.clone())
        .collect();
    let analysis = Analysis::new(&facts);
    let mut next_fact = 0;
    for (rec, t, d) in &shown {
        let context = match d.facts {
            Some(_) => {
                next_fact += 1;
                analysis.context(next_fact - 1).clone()
            }
            None => Context {
                sentence: format!(
                    "{}; a receiver drops it",
                    d.note.as_deref().unwrap_or("malformed")
                ),
                ..Context::default()
            },
        };
        if frames.is_some_and(|f| !f.contains(rec.number)) {
            continue;
        }
        if json {
            let p = JsonPacket {
                frame: rec.number,
                time: *t,
                src: d.addrs.map(|a| a.0),
                dst: d.addrs.map(|a| a.1),
                context: &context,
                note: d.note.as_deref(),
                headers: d
                    .headers
                    .iter()
                    .map(|h| JsonHeader {
                        name: &h.name,
                        offset: h.offset,
                        len: h.len,
                    })
                    .collect(),
                fields: d.headers.iter().flat_map(|h| &h.fields).collect(),
            };
            let line = serde_json::to_string(&p).expect("plain data serializes");
            writeln!(out, "{line}")?;
        } else {
            text(out, rec, *t, d, &context)?;
        }
    }
    Ok(counts)
}

/// Where a field's bits are, for the text view: a Wireshark-style mask
/// for a field inside one byte, else a byte count or a bit range.
fn bits_column(f: &Field) -> String {
    let (first, width) = (u32::from(f.bits.first), f.bits.width);
    if first + width <= 8 && width < 8 {
        let mut s = String::new();
        for i in 0..8 {
            if i == 4 {
                s.push(' ');
            }
            s.push(if i >= first && i < first + width {
                'x'
            } else {
                '.'
            });
        }
        s
    } else if first == 0 && width % 8 == 0 {
        let n = width / 8;
        format!("{n} byte{}", if n == 1 { "" } else { "s" })
    } else {
        format!("bits {first}-{}", first + width - 1)
    }
}

fn value_column(f: &Field) -> String {
    match &f.value {
        serde_json::Value::Number(n) if f.bits.width < 8 => n.to_string(),
        serde_json::Value::Number(n) => match n.as_u64() {
            Some(v) if f.bits.width <= 64 => {
                let digits = f.bits.width.div_ceil(4) as usize;
                format!("{v:#0w$x}", w = digits + 2)
            }
            _ => n.to_string(),
        },
        serde_json::Value::String(s) => s.clone(),
        v => v.to_string(),
    }
}

fn text(out: &mut impl Write, rec: &Record, t: f64, d: &Dissection, c: &Context) -> io::Result<()> {
    let addrs = d
        .addrs
        .map_or(String::new(), |(s, d)| format!("  {s} → {d}"));
    writeln!(
        out,
        "Frame {} at {t:.6} s{addrs}, {} bytes",
        rec.number,
        rec.data.len()
    )?;
    writeln!(out, "  {}", c.sentence)?;
    for h in &d.headers {
        text_header(out, h)?;
    }
    if let Some(n) = &d.note {
        writeln!(out, "  NOTE: {n}")?;
    }
    writeln!(out)
}

fn text_header(out: &mut impl Write, h: &HeaderView) -> io::Result<()> {
    let end = (h.offset + h.len).saturating_sub(1);
    writeln!(
        out,
        "  {} (bytes {}-{end}, {} bytes)",
        h.name, h.offset, h.len
    )?;
    for f in &h.fields {
        writeln!(
            out,
            "    {:>5}  {:<10} {:<24} {:<20} {}",
            f.offset,
            bits_column(f),
            f.name,
            value_column(f),
            f.meaning
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests;
