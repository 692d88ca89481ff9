//! What every `rxe dump --ladder` SVG must satisfy, shared by the tests
//! that check one (`ladder.rs`: the bundled and simulated captures;
//! `guide.rs`: the guide's figures). Included with `#[path]`, so each test
//! crate uses only part of it.
#![allow(dead_code)]

use roxmltree::{Document, Node, ParsingOptions};
use std::collections::BTreeSet;

pub fn parse(doc: &str) -> Document<'_> {
    let opts = ParsingOptions {
        allow_dtd: true,
        ..ParsingOptions::default()
    };
    Document::parse_with_options(doc, opts).expect("well-formed XML")
}

pub fn classes<'a>(n: &Node<'a, '_>) -> Vec<&'a str> {
    n.attribute("class")
        .unwrap_or("")
        .split_whitespace()
        .collect()
}

/// `1-3,5` → {1, 2, 3, 5}.
pub fn parse_frames(s: &str) -> Vec<u64> {
    s.split(',')
        .flat_map(|part| match part.split_once('-') {
            Some((a, b)) => (a.parse::<u64>().unwrap()..=b.parse().unwrap()).collect(),
            None => vec![part.parse().unwrap()],
        })
        .collect()
}

/// The packet groups (arrows) of a diagram: (frames, classes, element).
pub fn arrows<'a, 'i>(svg: Node<'a, 'i>) -> Vec<(Vec<u64>, Vec<&'a str>, Node<'a, 'i>)> {
    svg.descendants()
        .filter(|n| n.has_tag_name("g"))
        .filter_map(|n| Some((parse_frames(n.attribute("data-frames")?), classes(&n), n)))
        .collect()
}

/// The arrow that stands for `frame`.
pub fn arrow_of<'a, 'i>(svg: Node<'a, 'i>, frame: u64) -> (Vec<u64>, Vec<&'a str>, Node<'a, 'i>) {
    arrows(svg)
        .into_iter()
        .find(|(f, _, _)| f.contains(&frame))
        .unwrap_or_else(|| panic!("no arrow for frame {frame}"))
}

/// The visible text of an arrow (its label and marks, not its tooltip).
pub fn arrow_text(g: Node) -> String {
    g.children()
        .filter(|n| n.has_tag_name("text"))
        .filter_map(|n| n.text())
        .collect::<Vec<_>>()
        .join(" | ")
}

/// A text's box: x0, y0, x1, y1.
#[derive(Debug, Clone, Copy)]
pub struct TextBox {
    pub x0: f64,
    pub y0: f64,
    pub x1: f64,
    pub y1: f64,
}

/// Width of one character as a fraction of the font size: DejaVu Sans
/// Mono's advance is 0.602 em.
pub const CHAR_EM: f64 = 0.6;

pub fn text_boxes(svg: Node) -> Vec<(TextBox, String)> {
    svg.descendants()
        .filter(|n| n.has_tag_name("text"))
        .map(|n| {
            let num = |a: &str| n.attribute(a).unwrap().parse::<f64>().unwrap();
            let (x, y, size) = (num("x"), num("y"), num("font-size"));
            assert!(
                n.attribute("text-anchor").is_none(),
                "every text is left-aligned"
            );
            let s = n.text().unwrap_or("").to_owned();
            let w = s.chars().count() as f64 * CHAR_EM * size;
            let b = TextBox {
                x0: x,
                y0: y - 0.8 * size,
                x1: x + w,
                y1: y + 0.2 * size,
            };
            (b, s)
        })
        .collect()
}

/// Checks an SVG element: every frame of `expected` drawn exactly once,
/// no overlapping or cut texts. Returns the arrows' count.
pub fn check_svg(svg: Node, expected: &BTreeSet<u64>) -> usize {
    assert!(svg.has_tag_name("svg"));
    let mut seen = BTreeSet::new();
    let arrows = arrows(svg);
    for (frames, _, _) in &arrows {
        for f in frames {
            assert!(seen.insert(*f), "frame {f} drawn twice");
        }
    }
    assert_eq!(&seen, expected, "the arrows stand for every RoCE frame");
    assert_eq!(
        svg.attribute("data-packets").unwrap(),
        expected.len().to_string()
    );

    let width: f64 = svg.attribute("width").unwrap().parse().unwrap();
    let height: f64 = svg.attribute("height").unwrap().parse().unwrap();
    let mut boxes = text_boxes(svg);
    for (b, s) in &boxes {
        assert!(
            b.x0 >= 0.0 && b.y0 >= 0.0 && b.x1 <= width && b.y1 <= height,
            "text {s:?} at {b:?} is cut by the edge ({width}x{height})"
        );
    }
    // Sweep by top edge: only boxes that start before one ends can meet.
    boxes.sort_by(|a, b| a.0.y0.total_cmp(&b.0.y0));
    for i in 0..boxes.len() {
        let (a, sa) = &boxes[i];
        for (b, sb) in &boxes[i + 1..] {
            if b.y0 >= a.y1 {
                break;
            }
            let apart = b.x0 >= a.x1 || a.x0 >= b.x1;
            assert!(apart, "texts overlap: {sa:?} at {a:?} and {sb:?} at {b:?}");
        }
    }
    arrows.len()
}
