//! `rxe dump --ladder OUT.svg|OUT.html`: a sequence ("ladder") diagram of
//! a capture. One lane per endpoint (address and QP), one arrow per packet
//! (a run of MIDDLE packets of one message is one thick arrow), time
//! flowing down, colours by kind, retransmissions dashed, PSN gaps and
//! what each NAK asked for marked. See docs/ladder.md.
//!
//! * [`model`]: packets → lanes, rows, marks, links (pure, unit-tested);
//! * [`svg`]: the drawing, written by hand;
//! * [`html`]: the same SVG in a self-contained page with zoom and a
//!   tooltip holding each packet's `rxe dump` line.
//!
//! This module is a child of `dump` (declared there), so it reads the
//! packets as `dump` parsed them.

pub mod html;
pub mod model;
pub mod svg;

use crate::dump::packet::{error_line, text_line, Mad, Parsed, Rel};
use rxe_core::wire::Error as WireError;
use std::net::IpAddr;
use std::path::Path;

/// Output format, from the file name's extension.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// `.svg`
    Svg,
    /// `.html` or `.htm`
    Html,
}

impl Format {
    /// The format of `path`, or an error message.
    pub fn of(path: &Path) -> Result<Format, String> {
        let ext = path
            .extension()
            .and_then(|e| e.to_str())
            .map(str::to_ascii_lowercase);
        match ext.as_deref() {
            Some("svg") => Ok(Format::Svg),
            Some("html") | Some("htm") => Ok(Format::Html),
            _ => Err(format!(
                "--ladder {}: the file name must end in .svg or .html",
                path.display()
            )),
        }
    }
}

/// A parsed RoCE packet as the ladder sees it.
pub(super) fn packet(p: &Parsed) -> model::Packet {
    let r = p.repr;
    model::Packet {
        frame: p.frame,
        time_ns: p.time.0,
        src: p.roce.ip.src(),
        dst: p.roce.ip.dst(),
        src_port: p.roce.udp_src_port,
        line: text_line(p),
        body: Ok(model::Roce {
            opcode: r.bth.opcode,
            dest_qp: r.bth.dest_qp,
            psn: r.bth.psn.value(),
            len: r.payload.len(),
            aeth: r.aeth,
            src_qp: r.deth.map(|d| d.src_qp),
            dma_len: r.reth.map(|h| h.dma_len),
            mad: Mad::parse(r).map(|m| m.to_string()),
            fecn: r.bth.fecn,
            becn: r.bth.becn,
            icrc_ok: p.icrc_ok(),
        }),
    }
}

/// A frame to UDP port 4791 that does not parse.
pub(super) fn malformed(
    frame: u64,
    time: Rel,
    addrs: (IpAddr, IpAddr),
    e: &WireError,
) -> model::Packet {
    model::Packet {
        frame,
        time_ns: time.0,
        src: addrs.0,
        dst: addrs.1,
        src_port: 0,
        line: error_line(frame, time, addrs, e),
        body: Err(e.to_string()),
    }
}

/// The diagram of `packets` in `format`; `title` names the capture.
pub fn render(packets: &[model::Packet], title: &str, format: Format) -> String {
    let ladder = model::build(packets);
    let svg = svg::render(&ladder, title);
    match format {
        Format::Svg => format!("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n{svg}"),
        Format::Html => html::render(&svg, title),
    }
}
