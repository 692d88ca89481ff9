//! The guide (docs/guide/) cannot drift from the code.
//!
//! * `docs/guide/make-figures.sh`, run with the `rxe` just built, makes
//!   exactly the committed figures (same files, same bytes);
//! * every text excerpt a chapter pastes (marked `<!-- figure: FILE -->`
//!   before a fenced block) is that figure file, or the lines it names;
//! * every link and image of the guide points at a file that exists;
//! * every `rxe lesson` / `rxe dump` command a chapter shows in a fenced
//!   block is one the script runs (commands on the reader's own captures,
//!   under `/tmp/`, excepted);
//! * each lesson's ladder holds every frame of its capture, and no text on
//!   any of the guide's ladders overlaps another or is cut by the edge
//!   (the check of tests/ladder.rs, shared through tests/common/);
//! * `rxe lesson` is deterministic: the same seed gives the same bytes,
//!   another seed other bytes (and, for `loss`, other losses); a bad name
//!   is refused with status 2 and the list of lessons.
//!
//! * statements found false (issue 38's list) do not come back, in the
//!   guide, docs/explain.md or the sentences of `rxe dump --explain`.
//!
//! `RXE_BLESS=1 cargo test -p rxe-tests --test guide` rewrites the figures
//! and the pasted excerpts from what the commands make now.

#[path = "common/ladder_svg.rs"]
mod ladder_svg;

use rxe_net::capture::CaptureReader;
use rxe_tests::{rxe_bin, tests_dir};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

fn guide_dir() -> PathBuf {
    tests_dir().parent().unwrap().join("docs").join("guide")
}

fn figures_dir() -> PathBuf {
    guide_dir().join("figures")
}

fn scratch(name: &str) -> PathBuf {
    let p = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("guide-{name}"));
    let _ = std::fs::remove_dir_all(&p);
    std::fs::create_dir_all(&p).unwrap();
    p
}

fn bless() -> bool {
    std::env::var_os("RXE_BLESS").is_some()
}

/// The chapters: every Markdown file of the guide.
fn chapters() -> Vec<(PathBuf, String)> {
    let mut v: Vec<_> = std::fs::read_dir(guide_dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .map(|p| {
            let s = std::fs::read_to_string(&p).unwrap();
            (p, s)
        })
        .collect();
    v.sort();
    assert!(v.len() >= 10, "the guide has its chapters: {v:?}");
    v
}

/// Files of a directory, by name.
fn files(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file())
        .map(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            (name, std::fs::read(&p).unwrap())
        })
        .collect()
}

/// Runs make-figures.sh into a fresh directory; returns it.
fn make_figures() -> PathBuf {
    let out = scratch("figures");
    let o = Command::new("bash")
        .arg(guide_dir().join("make-figures.sh"))
        .arg(rxe_bin())
        .arg(&out)
        .output()
        .expect("run bash");
    assert!(
        o.status.success(),
        "make-figures.sh failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    out
}

#[test]
fn figures_are_what_the_script_makes_now() {
    let made_dir = make_figures();
    let made = files(&made_dir);
    assert!(made.len() > 40, "{} figures", made.len());
    if bless() {
        let dir = figures_dir();
        std::fs::create_dir_all(&dir).unwrap();
        for old in files(&dir).keys() {
            std::fs::remove_file(dir.join(old)).unwrap();
        }
        for (name, bytes) in &made {
            std::fs::write(dir.join(name), bytes).unwrap();
        }
    }
    let kept = files(&figures_dir());
    let made_names: BTreeSet<_> = made.keys().collect();
    let kept_names: BTreeSet<_> = kept.keys().collect();
    assert_eq!(
        kept_names, made_names,
        "docs/guide/figures holds other files than make-figures.sh makes; \
         regenerate with RXE_BLESS=1 cargo test -p rxe-tests --test guide"
    );
    let stale: Vec<_> = made
        .iter()
        .filter(|(name, bytes)| kept.get(*name) != Some(bytes))
        .map(|(name, _)| name.as_str())
        .collect();
    assert!(
        stale.is_empty(),
        "these figures are not what the commands make now: {stale:?}; \
         regenerate with RXE_BLESS=1 cargo test -p rxe-tests --test guide \
         (or bash docs/guide/make-figures.sh target/debug/rxe) and commit them"
    );
}

/// A pasted excerpt: `<!-- figure: figures/X.txt -->` or
/// `<!-- figure: figures/X.txt lines A-B -->`, then a fenced block.
struct Excerpt {
    file: String,
    lines: Option<(usize, usize)>,
    /// Byte range of the block's content in the chapter.
    body: std::ops::Range<usize>,
}

fn excerpts(text: &str) -> Vec<Excerpt> {
    let mut v = Vec::new();
    let mut at = 0;
    while let Some(i) = text[at..].find("<!-- figure:") {
        let start = at + i;
        let end = start + text[start..].find("-->").expect("a closed comment");
        let spec: Vec<&str> = text[start + 12..end].split_whitespace().collect();
        let lines = match spec.as_slice() {
            [_] => None,
            [_, "lines", r] => {
                let (a, b) = r.split_once('-').expect("lines A-B");
                Some((a.parse().unwrap(), b.parse().unwrap()))
            }
            other => panic!("bad figure marker {other:?}"),
        };
        // The fence opens on the next line.
        let after = end + 3;
        let fence_line_end = after + 1 + text[after + 1..].find('\n').unwrap();
        let fence = text[after..fence_line_end].trim();
        assert!(
            fence.starts_with("```"),
            "a figure marker is followed by a fenced block, not {fence:?}"
        );
        let body_start = fence_line_end + 1;
        // An empty block closes at once; otherwise at the next fence line.
        let rest = &text[body_start..];
        let close = if rest.starts_with("```") {
            body_start
        } else {
            body_start + rest.find("\n```").expect("a closed block") + 1
        };
        v.push(Excerpt {
            file: spec[0].to_string(),
            lines,
            body: body_start..close,
        });
        at = close;
    }
    v
}

fn excerpt_text(file: &str, lines: Option<(usize, usize)>) -> String {
    let path = guide_dir().join(file);
    let whole =
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    match lines {
        None => whole,
        Some((a, b)) => {
            let v: Vec<&str> = whole.lines().collect();
            assert!(
                a >= 1 && a <= b && b <= v.len(),
                "{file} has {} lines, not {a}-{b}",
                v.len()
            );
            v[a - 1..b].iter().map(|l| format!("{l}\n")).collect()
        }
    }
}

#[test]
fn pasted_excerpts_are_the_figures() {
    let mut count = 0;
    for (path, text) in chapters() {
        let ex = excerpts(&text);
        let mut out = String::new();
        let mut last = 0;
        let mut wrong = Vec::new();
        for e in &ex {
            count += 1;
            let want = excerpt_text(&e.file, e.lines);
            if text[e.body.clone()] != want {
                wrong.push(e.file.clone());
            }
            out.push_str(&text[last..e.body.start]);
            out.push_str(&want);
            last = e.body.end;
        }
        out.push_str(&text[last..]);
        if bless() && out != text {
            std::fs::write(&path, &out).unwrap();
            continue;
        }
        assert!(
            wrong.is_empty(),
            "{}: the excerpts of {wrong:?} are not the figure files; \
             RXE_BLESS=1 cargo test -p rxe-tests --test guide pastes them again",
            path.display()
        );
    }
    assert!(count >= 10, "only {count} excerpts");
}

/// Relative link targets of a Markdown text: `](target)`.
fn links(text: &str) -> Vec<String> {
    let mut v = Vec::new();
    let mut at = 0;
    while let Some(i) = text[at..].find("](") {
        let s = at + i + 2;
        let Some(j) = text[s..].find(')') else { break };
        let target = text[s..s + j]
            .split_whitespace()
            .next()
            .unwrap_or("")
            .to_string();
        at = s + j;
        if target.is_empty()
            || target.starts_with('#')
            || target.contains("://")
            || target.starts_with("mailto:")
        {
            continue;
        }
        v.push(target);
    }
    v
}

#[test]
fn every_link_and_figure_exists() {
    let mut seen = 0;
    let mut figures_used = BTreeSet::new();
    for (path, text) in chapters() {
        for target in links(&text) {
            let file = target.split('#').next().unwrap();
            let full = guide_dir().join(file);
            assert!(
                full.exists(),
                "{}: link to {target}, which does not exist",
                path.display()
            );
            if let Some(f) = file.strip_prefix("figures/") {
                figures_used.insert(f.to_string());
            }
            seen += 1;
        }
        for e in excerpts(&text) {
            if let Some(f) = e.file.strip_prefix("figures/") {
                figures_used.insert(f.to_string());
            }
        }
    }
    assert!(seen > 20, "only {seen} links");
    // Every ladder diagram the script makes is shown somewhere.
    for name in files(&figures_dir()).keys().filter(|n| n.ends_with(".svg")) {
        assert!(
            figures_used.contains(name),
            "figures/{name} is made but no chapter shows it"
        );
    }
}

/// The `rxe` command lines of a shell script or a fenced block, with
/// `$ ` prompts and output redirections taken off.
fn normalise(line: &str) -> Option<String> {
    let l = line.trim();
    let l = l.strip_prefix("$ ").unwrap_or(l);
    if !l.starts_with("rxe ") {
        return None;
    }
    let l = match l.find(" > ") {
        Some(i) => &l[..i],
        None => l,
    };
    Some(l.split_whitespace().collect::<Vec<_>>().join(" "))
}

#[test]
fn commands_shown_are_the_commands_run() {
    let script = std::fs::read_to_string(guide_dir().join("make-figures.sh")).unwrap();
    let run: BTreeSet<String> = script.lines().filter_map(normalise).collect();
    assert!(run.len() > 40, "{} commands in the script", run.len());
    let mut shown = 0;
    for (path, text) in chapters() {
        let mut in_block = false;
        for line in text.lines() {
            if line.trim_start().starts_with("```") {
                in_block = !in_block;
                continue;
            }
            if !in_block {
                continue;
            }
            let Some(cmd) = normalise(line) else { continue };
            let makes_figure = cmd.starts_with("rxe lesson ") || cmd.starts_with("rxe dump ");
            if !makes_figure || cmd.contains("/tmp/") {
                continue;
            }
            shown += 1;
            assert!(
                run.contains(&cmd),
                "{}: `{cmd}` is shown but make-figures.sh does not run it",
                path.display()
            );
        }
    }
    assert!(shown >= 15, "only {shown} commands shown");
}

fn lessons() -> Vec<String> {
    let o = Command::new(rxe_bin())
        .args(["lesson", "--list"])
        .output()
        .unwrap();
    assert!(o.status.success());
    let v: Vec<String> = String::from_utf8(o.stdout)
        .unwrap()
        .lines()
        .map(|l| l.split_whitespace().next().unwrap().to_string())
        .collect();
    assert!(v.len() >= 10, "{v:?}");
    v
}

#[test]
fn each_lesson_ladder_shows_every_frame() {
    let dir = figures_dir();
    for name in lessons() {
        let pcap = dir.join(format!("{name}.pcap"));
        let mut r =
            CaptureReader::open(&pcap).unwrap_or_else(|e| panic!("{}: {e}", pcap.display()));
        let mut n = 0u64;
        while let Some(rec) = r.next_record() {
            rec.unwrap();
            n += 1;
        }
        assert!(
            n > 0 && n <= 40,
            "{name}: {n} frames (a lesson fits one diagram)"
        );
        let svg = std::fs::read_to_string(dir.join(format!("{name}.svg"))).unwrap();
        // Every frame once, and no text overlapping another or cut by the
        // edge (the same check as tests/ladder.rs).
        ladder_svg::check_svg(
            ladder_svg::parse(&svg).root_element(),
            &(1..=n).collect::<BTreeSet<u64>>(),
        );
    }
}

/// The guide's other ladders (of bundled kernel captures): well-formed, and
/// no text overlapping another or cut by the edge. (Which frames they hold
/// is checked on the same captures by tests/ladder.rs.)
#[test]
fn every_guide_ladder_is_legible() {
    let mut checked = 0;
    for (name, bytes) in files(&figures_dir()) {
        if !name.ends_with(".svg") {
            continue;
        }
        let svg = String::from_utf8(bytes).unwrap();
        let doc = ladder_svg::parse(&svg);
        let root = doc.root_element();
        let frames: BTreeSet<u64> = ladder_svg::arrows(root)
            .into_iter()
            .flat_map(|(f, _, _)| f)
            .collect();
        assert!(!frames.is_empty(), "{name}: no arrows");
        ladder_svg::check_svg(root, &frames);
        checked += 1;
    }
    assert!(checked >= 10, "only {checked} ladders in the guide");
}

fn lesson(args: &[&str], out: &Path) -> (std::process::Output, Vec<u8>) {
    let o = Command::new(rxe_bin())
        .arg("lesson")
        .args(args)
        .arg("-w")
        .arg(out)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "rxe lesson {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let bytes = std::fs::read(out).unwrap();
    (o, bytes)
}

#[test]
fn same_seed_same_bytes_other_seed_other_bytes() {
    let dir = scratch("determinism");
    for name in lessons() {
        let (_, a) = lesson(&[&name], &dir.join("a.pcap"));
        let (_, b) = lesson(&[&name], &dir.join("b.pcap"));
        assert_eq!(a, b, "{name}: same seed, same bytes");
        let (_, c) = lesson(&[&name, "--seed", "99"], &dir.join("c.pcap"));
        assert_ne!(a, c, "{name}: another seed, other QPNs, PSNs and keys");
    }
    // In `loss` the seed also decides which SENDs the network loses.
    let lost = |seed: &str| {
        let (o, _) = lesson(&["loss", "--seed", seed], &dir.join("l.pcap"));
        String::from_utf8(o.stdout)
            .unwrap()
            .lines()
            .find(|l| l.starts_with("lost on the way") || l.starts_with("no SEND"))
            .unwrap()
            .to_string()
    };
    assert_eq!(lost("7"), "lost on the way: SEND 3");
    assert_eq!(lost("7"), lost("7"));
    assert_eq!(lost("18"), "lost on the way: SEND 8");
    assert_eq!(lost("13"), "no SEND was lost with this seed");
}

#[test]
fn a_bad_lesson_name_is_refused_with_the_list() {
    let out = scratch("bad").join("x.pcap");
    let o = Command::new(rxe_bin())
        .args(["lesson", "no-such-lesson", "-w"])
        .arg(&out)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    for name in lessons() {
        assert!(err.contains(&name), "{err}");
    }
    assert!(!out.exists(), "nothing written for a bad name");
    let o = Command::new(rxe_bin())
        .args(["lesson", "send"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "no -w");
    assert!(String::from_utf8_lossy(&o.stderr).contains("-w"));
}

/// Phrasings that taught something false, each with what is true instead;
/// none may reappear where a student reads (issue 38).
const FALSE_CLAIMS: [(&str, &str); 9] = [
    (
        "does coalesce",
        "kernel rxe sends one ACK for every AckReq packet (acknowledge() in rxe_resp.c)",
    ),
    (
        "coalesced ACK",
        "an ACK covering several packets is cumulative; it coalesces only if several asked",
    ),
    (
        "may be coalesced",
        "a packet without AckReq asks for no ACK; a later cumulative ACK covers it",
    ),
    (
        "with its own PSN) if it asks",
        "the kernel acknowledges every duplicate SEND/WRITE with ePSN - 1 (C9-105)",
    ),
    (
        "path migration armed or not used",
        "a QP that does not use migration is in Migrated and sends MigReq 1; 0 is ReArm/Armed",
    ),
    (
        "The 24 bits above the variant are random, so",
        "random in rxe-rs only; the kernel's keys are a pool index and an 8-bit random variant",
    ),
    (
        "the C is what `ibv_rc_pingpong`",
        "ibv_rc_pingpong never WRITEs and posts its receives in INIT",
    ),
    (
        "`wr.rdma.remote_addr`",
        "the field is wr.wr.rdma.remote_addr",
    ),
    (
        "No other request to the same QP can come between",
        "atomics are atomic against the device's other atomics (ATOMIC_HCA), not the CPU or WRITEs",
    ),
];

#[test]
fn statements_found_false_do_not_come_back() {
    let root = tests_dir().parent().unwrap().to_path_buf();
    let mut texts: Vec<(PathBuf, String)> = chapters();
    texts.push((
        root.join("docs/explain.md"),
        std::fs::read_to_string(root.join("docs/explain.md")).unwrap(),
    ));
    let explain_src = root.join("rxe-verbs/tool/src/explain");
    for e in std::fs::read_dir(&explain_src).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "rs") {
            let t = std::fs::read_to_string(&p).unwrap();
            texts.push((p, t));
        }
    }
    for (file, text) in files(&figures_dir()) {
        texts.push((
            figures_dir().join(file),
            String::from_utf8_lossy(&text).into_owned(),
        ));
    }
    let mut found = Vec::new();
    for (path, text) in &texts {
        for (phrase, truth) in FALSE_CLAIMS {
            if text.contains(phrase) {
                found.push(format!("{}: \"{phrase}\" ({truth})", path.display()));
            }
        }
    }
    assert!(
        found.is_empty(),
        "false statements are back:\n{}",
        found.join("\n")
    );
}
