//! Drawing a [`Ladder`] as SVG, by hand: it is simple text.
//!
//! Every text is placed on a grid that keeps label boxes apart, measured
//! with a fixed-width estimate ([`CHAR_W`] per character of a monospace
//! font at [`FONT`] px, a little wider than DejaVu Sans Mono's 0.602 em):
//! a row is at least [`ROW`] px below the previous one, its label sits
//! above its arrow, its marks after its label, its time in the left column.
//! Each arrow's group also holds an unpainted band over its row that the
//! pointer finds it in (for tooltips), the rows' bands never overlapping.
//!
//! Time runs down. The scale is linear with [`ROW`] px standing for the
//! median gap between rows; rows closer than that are spread to one row
//! apart, and a quiet spell longer than [`MAX_GAP`] px of the scale is
//! cut to a grey band that says how long it was. The scale is written in
//! the header, and every row has its capture time on the left.

use super::model::{Kind, Ladder, Row};
use std::fmt::Write as _;

/// Font size of labels, px.
pub const FONT: f64 = 11.0;
/// Width of one character used for layout, px.
pub const CHAR_W: f64 = FONT * 0.62;
/// Smallest distance between two rows, px.
pub const ROW: f64 = 17.0;
/// Longest gap drawn to scale, px; longer ones are cut.
pub const MAX_GAP: f64 = 6.0 * ROW;
/// Height of a cut gap, px.
const CUT: f64 = 44.0;
/// Left edge of the first lane.
const LANE0: f64 = 118.0;
/// Smallest distance between lanes.
const LANE_GAP: f64 = 250.0;
/// Largest distance between lanes made for labels.
const MAX_LANE_GAP: f64 = 400.0;
/// Label offset from the arrow's left end.
const LABEL_DX: f64 = 10.0;
/// A label's baseline above its arrow, px. A monospace font's line box is
/// about 1.17 em (13 px at [`FONT`], 3 px of it below the baseline), so
/// the label's box ends 2 px above its arrow, where a thick arrow's 4 px
/// line begins, and starts 15 px above it, where the thick line of the
/// row before (at least [`ROW`] px up) ends: no arrow runs through a label,
/// its underscores included.
const LABEL_UP: f64 = 5.0;
/// How far below its arrow a row's hover band reaches, px: to where the
/// capitals of the next row's label begin (the band is [`ROW`] px high, so
/// it reaches `ROW - HIT_BELOW` above, to this label's capitals). The
/// labels and marks themselves are transparent to the pointer, so the
/// bands alone say which arrow it is on.
const HIT_BELOW: f64 = 4.0;

/// Colours of the kinds (stroke and text).
pub fn colour(k: Kind) -> &'static str {
    match k {
        Kind::Request => "#1f5fbf",
        Kind::Response => "#1b8a3a",
        Kind::Ack => "#6b6b6b",
        Kind::Nak => "#d0201a",
        Kind::RnrNak => "#e07b00",
        Kind::Cnp => "#b0209a",
        Kind::Mad => "#7a4a12",
        Kind::Malformed => "#000000",
    }
}

/// Escapes text for XML content and attribute values.
pub fn esc(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            // Control characters are not allowed in XML 1.0.
            c if (c as u32) < 0x20 && c != '\n' && c != '\t' => o.push('?'),
            c => o.push(c),
        }
    }
    o
}

/// Width of a text in layout px.
pub fn text_w(s: &str) -> f64 {
    s.chars().count() as f64 * CHAR_W
}

/// Seconds with six decimals, as `rxe dump` prints them.
fn secs(ns: i128) -> String {
    let us = (ns.abs() + 500) / 1000;
    let sign = if ns < 0 { "-" } else { "" };
    format!("{sign}{}.{:06}", us / 1_000_000, us % 1_000_000)
}

/// A duration in words: `850 ns`, `5.1 µs`, `2.03 ms`, `1.25 s`.
pub fn duration(ns: f64) -> String {
    let (v, unit) = if ns < 1e3 {
        (ns, "ns")
    } else if ns < 1e6 {
        (ns / 1e3, "µs")
    } else if ns < 1e9 {
        (ns / 1e6, "ms")
    } else {
        (ns / 1e9, "s")
    };
    if v >= 100.0 || unit == "ns" {
        format!("{v:.0} {unit}")
    } else if v >= 10.0 {
        format!("{v:.1} {unit}")
    } else {
        format!("{v:.2} {unit}")
    }
}

/// The frame numbers of a row, consecutive ones as ranges: `2-5,9`.
pub fn frames_attr(frames: &[u64]) -> String {
    let mut s = String::new();
    let mut i = 0;
    while i < frames.len() {
        let mut j = i;
        while j + 1 < frames.len() && frames[j + 1] == frames[j] + 1 {
            j += 1;
        }
        if !s.is_empty() {
            s.push(',');
        }
        if j > i {
            let _ = write!(s, "{}-{}", frames[i], frames[j]);
        } else {
            let _ = write!(s, "{}", frames[i]);
        }
        i = j + 1;
    }
    s
}

/// The tooltip of a row: its packets' `rxe dump` lines (for a long run,
/// the first three, how many are left out, and the last two).
fn tooltip(r: &Row) -> String {
    let l = &r.lines;
    if l.len() <= 6 {
        return l.join("\n");
    }
    let mut v: Vec<String> = l[..3].to_vec();
    v.push(format!("      … {} more …", l.len() - 5));
    v.extend_from_slice(&l[l.len() - 2..]);
    v.join("\n")
}

/// Where the time axis puts each row, and the cut gaps.
struct TimeAxis {
    /// Row y (the arrow's line).
    ys: Vec<f64>,
    /// Cut gaps: (y of the row before, ns skipped).
    cuts: Vec<(f64, i128)>,
    /// ns per ROW px.
    unit_ns: f64,
}

fn time_axis(rows: &[Row], top: f64) -> TimeAxis {
    let mut gaps: Vec<i128> = rows
        .windows(2)
        .map(|w| w[1].time_ns - w[0].time_ns)
        .filter(|&g| g > 0)
        .collect();
    gaps.sort_unstable();
    // ROW px stand for the median gap (1 µs if there is none).
    let unit_ns = gaps.get(gaps.len() / 2).map_or(1000.0, |&g| g as f64);
    let px_per_ns = ROW / unit_ns;
    let mut ys = Vec::with_capacity(rows.len());
    let mut cuts = Vec::new();
    let mut y = top;
    for (i, r) in rows.iter().enumerate() {
        if i > 0 {
            let g = (r.time_ns - rows[i - 1].time_ns).max(0);
            let px = g as f64 * px_per_ns;
            if px > MAX_GAP {
                cuts.push((y, g));
                y += CUT;
            } else {
                y += px.max(ROW);
            }
        }
        ys.push(y);
    }
    TimeAxis { ys, cuts, unit_ns }
}

/// Length of a row's arrowhead, px (longer for a thick arrow).
fn head_len(r: &Row) -> f64 {
    if r.count() > 1 {
        9.0
    } else {
        6.0
    }
}

/// Where a row's label and marks start (the label first), for an arrow
/// from `x1` to `x2`: the label [`LABEL_DX`] after the arrow's left end,
/// each mark two characters after the text before it. A text that would
/// run over the arrowhead of a left-to-right arrow (or over an arrow to
/// its own lane, a loop) starts one character after it instead.
fn text_xs(r: &Row, x1: f64, x2: f64) -> Vec<f64> {
    let obstacle = if r.from == r.to {
        Some((x1, x1 + 30.0))
    } else if x2 > x1 {
        Some((x2 - head_len(r), x2))
    } else {
        None
    };
    let widths = std::iter::once(text_w(&r.label)).chain(r.marks.iter().map(|m| text_w(&m.text)));
    let mut xs = Vec::with_capacity(1 + r.marks.len());
    let mut x = x1.min(x2) + LABEL_DX;
    for (i, w) in widths.enumerate() {
        if i > 0 {
            x += 2.0 * CHAR_W;
        }
        if let Some((a, b)) = obstacle {
            if x < b + 1.0 && x + w > a - 1.0 {
                x = b + CHAR_W;
            }
        }
        xs.push(x);
        x += w;
    }
    xs
}

/// A `<text>` element (left-aligned; every text of the diagram is).
fn text(out: &mut String, class: &str, x: f64, y: f64, size: f64, s: &str) {
    let _ = writeln!(
        out,
        r#"<text class="{class}" x="{x:.1}" y="{y:.1}" font-size="{size}">{}</text>"#,
        esc(s)
    );
}

/// Draws the ladder. `title` heads it (the capture's file name).
pub fn render(l: &Ladder, title: &str) -> String {
    // Lanes.
    let head_w = l
        .lanes
        .iter()
        .map(|ln| text_w(&ln.addr.to_string()).max(text_w(&ln.qp_label())))
        .fold(0.0, f64::max);
    // Lanes as far apart as the widest label of an arrow between
    // neighbours needs (within reason: wider ones run past the lane).
    let label_w = l
        .rows
        .iter()
        .filter(|r| r.from.abs_diff(r.to) == 1)
        .map(|r| text_w(&r.label) + 2.0 * LABEL_DX)
        .fold(0.0, f64::max)
        .min(MAX_LANE_GAP);
    let gap = LANE_GAP.max(head_w + 20.0).max(label_w).ceil();
    let lane_x: Vec<f64> = (0..l.lanes.len()).map(|i| LANE0 + gap * i as f64).collect();

    // Header lines.
    let title_line = format!(
        "rxe dump --ladder {title}: {} RoCE packets in {} arrows",
        l.packets,
        l.rows.len()
    );
    // Legend items: (swatch class, words, dashed).
    let mut legend: Vec<(String, String, bool)> = Kind::ALL
        .iter()
        .map(|k| (k.class().to_owned(), k.legend().to_owned(), false))
        .collect();
    legend.push(("req".into(), "retransmission ↻".into(), true));
    legend.push(("gap".into(), "⚠ PSNs not seen".into(), false));
    legend.push(("link".into(), "NAK → request asked for".into(), true));
    legend.push((
        "thick".into(),
        "×N: MIDDLE packets of one message".into(),
        false,
    ));

    // Content width: lanes, and the rows' labels and marks.
    let mut width = lane_x.last().copied().unwrap_or(LANE0) + gap / 2.0;
    // Where each row's label and marks go, and where they end.
    let mut row_x: Vec<Vec<f64>> = Vec::with_capacity(l.rows.len());
    let mut row_end = Vec::with_capacity(l.rows.len());
    for r in &l.rows {
        let xs = text_xs(r, lane_x[r.from], lane_x[r.to]);
        let end = match r.marks.last() {
            Some(m) => xs[xs.len() - 1] + text_w(&m.text),
            None => xs[0] + text_w(&r.label),
        };
        row_x.push(xs);
        row_end.push(end);
        width = width.max(end + 20.0);
    }

    // Legend layout (wraps at the content width, at least 760 px).
    let legend_w = width.max(760.0);
    let mut legend_pos = Vec::new();
    let (mut lx, mut ly) = (10.0, 44.0);
    for (_, words, _) in &legend {
        let w = 30.0 + text_w(words) + 16.0;
        if lx + w > legend_w && lx > 10.0 {
            lx = 10.0;
            ly += ROW;
        }
        legend_pos.push((lx, ly));
        lx += w;
    }
    let scale_y = ly + ROW + 2.0;
    let lanes_y = scale_y + ROW + 8.0;
    let top = lanes_y + 2.0 * ROW + 20.0;
    let axis = time_axis(&l.rows, top);
    let scale_line = format!(
        "time runs down: {ROW} px = {} (the median gap); closer packets are one row apart; \
         quiet spells over {} are cut to a grey band with their length",
        duration(axis.unit_ns),
        duration(axis.unit_ns * MAX_GAP / ROW)
    );
    width = width
        .max(10.0 + text_w(&title_line) + 10.0)
        .max(10.0 + text_w(&scale_line) * 10.0 / FONT + 10.0)
        .max(legend_w)
        .ceil();
    let bottom = axis.ys.last().copied().unwrap_or(top) + ROW;
    let height = (bottom + 10.0).ceil();

    let mut o = String::new();
    let _ = writeln!(
        o,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" font-family="DejaVu Sans Mono, Menlo, Consolas, monospace" data-packets="{}" data-char-width="{CHAR_W}">"#,
        l.packets
    );
    o.push_str("<style>\n");
    o.push_str("text{white-space:pre}\n.lbl,.pkt [class^=m-]{stroke:#fff;stroke-width:3px;stroke-linejoin:round;paint-order:stroke;pointer-events:none}\n.pkt line,.pkt path{fill:none;stroke-width:1.5}\n");
    o.push_str(".pkt.thick line{stroke-width:4}\n.pkt.dashed line{stroke-dasharray:6 4}\n");
    o.push_str(".lane{stroke:#c8c8c8;stroke-width:1}\n.t,.pkt .t{fill:#555}\n.cut{fill:#eeeeee}\n");
    o.push_str(".m-retx,.pkt .m-retx{fill:#d0201a}\n.m-gap,.pkt .m-gap{fill:#b06000;font-weight:bold}\n.pkt .m-nak{fill:#d0201a}\n.pkt .m-note{fill:#000}\n");
    o.push_str(".link{fill:none;stroke:#d0201a;stroke-width:1.2;stroke-dasharray:2 3}\n");
    o.push_str(".head{font-weight:bold}\n");
    for k in Kind::ALL {
        let c = colour(k);
        let _ = writeln!(
            o,
            ".{0} line,.{0} path{{stroke:{c}}}\n.{0} text,text.{0}{{fill:{c}}}\n.{0} .ah{{fill:{c};stroke:none}}",
            k.class()
        );
    }
    o.push_str("</style>\n");
    let _ = writeln!(
        o,
        r##"<rect x="0" y="0" width="{width}" height="{height}" fill="#ffffff"/>"##
    );
    text(&mut o, "head", 10.0, 22.0, 13.0, &title_line);

    // Legend.
    for ((class, words, dashed), (x, y)) in legend.iter().zip(&legend_pos) {
        let ly = y - 4.0;
        match class.as_str() {
            "gap" => {}
            "link" => {
                let _ = writeln!(o, r#"<path class="link" d="M{:.1},{ly:.1} h24"/>"#, x);
            }
            "thick" => {
                let _ = writeln!(
                    o,
                    r#"<g class="pkt req thick"><line x1="{x:.1}" y1="{ly:.1}" x2="{:.1}" y2="{ly:.1}"/></g>"#,
                    x + 24.0
                );
            }
            _ => {
                let d = if *dashed { " dashed" } else { "" };
                let _ = writeln!(
                    o,
                    r#"<g class="pkt {class}{d}"><line x1="{x:.1}" y1="{ly:.1}" x2="{:.1}" y2="{ly:.1}"/></g>"#,
                    x + 24.0
                );
            }
        }
        let cls = if class == "gap" { "m-gap" } else { "t" };
        text(&mut o, cls, x + 30.0, *y, FONT, words);
    }
    text(&mut o, "t", 10.0, scale_y, 10.0, &scale_line);

    // Lanes: header and line.
    for (ln, &x) in l.lanes.iter().zip(&lane_x) {
        let a = ln.addr.to_string();
        let q = ln.qp_label();
        text(&mut o, "head", x - text_w(&a) / 2.0, lanes_y, FONT, &a);
        text(&mut o, "t", x - text_w(&q) / 2.0, lanes_y + ROW, FONT, &q);
        let _ = writeln!(
            o,
            r#"<line class="lane" x1="{x:.1}" y1="{:.1}" x2="{x:.1}" y2="{bottom:.1}"/>"#,
            lanes_y + ROW + 6.0
        );
    }

    // Cut gaps.
    for &(y, ns) in &axis.cuts {
        let _ = writeln!(
            o,
            r#"<rect class="cut" x="0" y="{:.1}" width="{width}" height="{:.1}"/>"#,
            y + 8.0,
            CUT - 22.0
        );
        text(
            &mut o,
            "t",
            6.0,
            y + 8.0 + (CUT - 22.0) / 2.0 + 3.5,
            10.0,
            &format!("⋯ {} ⋯", duration(ns as f64)),
        );
    }

    // NAK links (under the arrows).
    for k in &l.links {
        let x = lane_x[k.lane];
        let (y1, y2) = (axis.ys[k.from_row], axis.ys[k.to_row]);
        let bulge = x - 28.0;
        let _ = writeln!(
            o,
            r#"<path class="link" data-from="{}" data-to="{}" d="M{x:.1},{y1:.1} C{bulge:.1},{y1:.1} {bulge:.1},{y2:.1} {x:.1},{y2:.1}"/>"#,
            l.rows[k.from_row].frames[0], l.rows[k.to_row].frames[0]
        );
    }

    // Rows.
    for (i, r) in l.rows.iter().enumerate() {
        let y = axis.ys[i];
        let mut class = format!("pkt {}", r.kind.class());
        if r.dashed {
            class.push_str(" dashed");
        }
        if r.count() > 1 {
            class.push_str(" thick");
        }
        // The marks, as `has-m-retx` etc. (for scripts and tests).
        for m in &r.marks {
            let c = format!(" has-{}", m.kind.class());
            if !class.contains(&c) {
                class.push_str(&c);
            }
        }
        let _ = writeln!(
            o,
            r#"<g class="{class}" data-frames="{}" data-kind="{}">"#,
            frames_attr(&r.frames),
            r.kind.class()
        );
        let _ = writeln!(o, "<title>{}</title>", esc(&tooltip(r)));
        let (x1, x2) = (lane_x[r.from], lane_x[r.to]);
        // The band the pointer finds the arrow in: its row (ROW px, so
        // rows never share one) from the arrow's left end to the end of
        // its arrow, label or marks. A 1.5 px line, dashed at that, is
        // too thin to point at.
        let hit_x0 = x1.min(x2);
        let arrow_end = if r.from == r.to {
            x1 + 30.0
        } else {
            x1.max(x2)
        };
        let hit_x1 = arrow_end.max(row_end[i]);
        let _ = writeln!(
            o,
            r#"<rect class="hit" x="{hit_x0:.1}" y="{:.1}" width="{:.1}" height="{ROW}" fill="none" pointer-events="all"/>"#,
            y - ROW + HIT_BELOW,
            hit_x1 - hit_x0
        );
        let head = head_len(r);
        if r.from == r.to {
            // To itself: a small loop to the right.
            let _ = writeln!(
                o,
                r#"<path d="M{x1:.1},{:.1} h30 v8 h-{:.1}"/><path class="ah" d="M{x1:.1},{:.1} l{head},-3.5 v7 z"/>"#,
                y - 4.0,
                30.0 - head,
                y + 4.0
            );
        } else {
            let dir = if x2 > x1 { 1.0 } else { -1.0 };
            let xe = x2 - dir * head;
            let _ = writeln!(
                o,
                r#"<line x1="{x1:.1}" y1="{y:.1}" x2="{xe:.1}" y2="{y:.1}"/><path class="ah" d="M{x2:.1},{y:.1} l{:.1},-{:.1} v{:.1} z"/>"#,
                -dir * head,
                head * 0.55,
                head * 1.1
            );
        }
        let ly = y - LABEL_UP;
        text(&mut o, "lbl", row_x[i][0], ly, FONT, &r.label);
        for (m, &mx) in r.marks.iter().zip(&row_x[i][1..]) {
            text(&mut o, m.kind.class(), mx, ly, FONT, &m.text);
        }
        text(&mut o, "t", 6.0, y + 4.0, 10.0, &secs(r.time_ns));
        o.push_str("</g>\n");
    }
    o.push_str("</svg>\n");
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_are_listed_as_ranges() {
        assert_eq!(frames_attr(&[1]), "1");
        assert_eq!(frames_attr(&[1, 2, 3, 5, 7, 8]), "1-3,5,7-8");
    }

    #[test]
    fn text_is_escaped() {
        assert_eq!(esc("a<b & \"c\" >"), "a&lt;b &amp; &quot;c&quot; &gt;");
    }

    #[test]
    fn durations_read_well() {
        assert_eq!(duration(850.0), "850 ns");
        assert_eq!(duration(5_100.0), "5.10 µs");
        assert_eq!(duration(2_031_000.0), "2.03 ms");
        assert_eq!(duration(183_000.0), "183 µs");
    }
}
