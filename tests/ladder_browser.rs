//! The HTML page of `rxe dump --ladder` in a real browser: Debian's
//! headless Chromium, driven by its chromedriver through the W3C WebDriver
//! protocol (HTTP on 127.0.0.1), with real pointer, wheel and key input.
//!
//! For each bundled capture the page is built by the `rxe` binary and
//! checked as it renders:
//!
//! * every RoCE frame that `rxe dump` prints is drawn exactly once (the
//!   arrows' `data-frames`), and every arrow has a visible line;
//! * no text is cut or squeezed: each one's box (`getBBox` and its
//!   rendered `getBoundingClientRect`) lies inside the drawing, its
//!   rendered length (`getComputedTextLength`) fits the width the layout
//!   reserved for it, and no two texts' boxes overlap;
//! * pointing at any arrow (on its line, or a little off it) shows the
//!   tooltip holding exactly that arrow's `rxe dump` lines; pointing away
//!   hides it;
//! * the page's zoom (its buttons, the `+`/`-`/`0` keys and Ctrl + wheel)
//!   scales the rendered drawing by the documented step and back, takes
//!   the wheel from the browser's own zoom, and hover still finds the right
//!   arrow when zoomed in and out;
//! * a screenshot is a PNG of the window's size with a drawing in it
//!   (`target/tmp/ladder-browser-NAME/NAME.png`, to look at).
//!
//! Needs /usr/bin/chromium and /usr/bin/chromedriver (Debian's `chromium`
//! and `chromium-driver`, which `bash tests/setup.sh` installs);
//! `RXE_SKIP_BROWSER_TESTS=1` skips these tests. Every HTTP call has a
//! timeout, chromedriver and its browser are ended when a test ends,
//! passes or panics. The browser is kept off the network: no DNS, a proxy
//! on 127.0.0.1 that refuses, no background services.

#[path = "common/ladder_svg.rs"]
mod ladder_svg;

use ladder_svg::parse_frames;
use rxe_tests::{pcap_dir, rxe_bin};
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const CHROMIUM: &str = "/usr/bin/chromium";
const CHROMEDRIVER: &str = "/usr/bin/chromedriver";
/// The longest any one WebDriver call may take.
const HTTP_TIMEOUT: Duration = Duration::from_secs(20);
/// The browser window.
const WINDOW: (u32, u32) = (1280, 900);
/// The page's zoom step for its buttons and keys, and for one notch of
/// Ctrl + wheel (docs/ladder.md).
const STEP: f64 = 1.25;
const WHEEL_STEP: f64 = 1.1;
/// How far two boxes (texts, arrows) may overlap, px of the drawing: at
/// 1:1 (rounding of the renderer), and zoomed (the font's metrics at
/// another pixel size, scaled back, differ by up to 0.7 px).
const OVERLAP_TOLERANCE: f64 = 0.5;
const OVERLAP_TOLERANCE_ZOOMED: f64 = 1.0;

/// True if the browser tests can run; panics with what to do if not.
fn browser_available() -> bool {
    if std::env::var("RXE_SKIP_BROWSER_TESTS").as_deref() == Ok("1") {
        eprintln!("skipped: RXE_SKIP_BROWSER_TESTS=1");
        return false;
    }
    let missing: Vec<&str> = [CHROMIUM, CHROMEDRIVER]
        .into_iter()
        .filter(|p| !Path::new(p).exists())
        .collect();
    assert!(
        missing.is_empty(),
        "{} not installed: run `bash tests/setup.sh` (it installs Debian's \
         chromium and chromium-driver), or set RXE_SKIP_BROWSER_TESTS=1 to skip",
        missing.join(" and ")
    );
    true
}

/// A fresh directory for one test's files.
fn scratch(name: &str) -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("ladder-browser-{name}"));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// What `rxe dump` says of a capture: each frame's line, and the number
/// of RoCE packets from its summary.
struct Dump {
    lines: BTreeMap<u64, String>,
    packets: usize,
}

fn dump(pcap: &Path) -> Dump {
    let o = Command::new(rxe_bin())
        .arg("dump")
        .arg(pcap)
        .output()
        .expect("run rxe dump");
    assert!(o.status.success(), "rxe dump {}", pcap.display());
    let lines: BTreeMap<u64, String> = String::from_utf8(o.stdout)
        .unwrap()
        .lines()
        .filter_map(|l| {
            let n = l.split_whitespace().next()?.parse().ok()?;
            Some((n, l.to_owned()))
        })
        .collect();
    // "NAME: 83 RoCE packets (0 ICRC BAD, 0 malformed), ..."
    let err = String::from_utf8(o.stderr).unwrap();
    let packets = err
        .split(" RoCE packets")
        .next()
        .and_then(|s| s.rsplit(' ').next())
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no packet count in rxe dump's summary: {err}"));
    assert_eq!(lines.len(), packets, "one line per packet");
    Dump { lines, packets }
}

/// Runs `rxe dump -q --ladder DIR/NAME.html` on a capture.
fn page(dir: &Path, pcap: &Path, name: &str) -> PathBuf {
    let out = dir.join(format!("{name}.html"));
    let o = Command::new(rxe_bin())
        .args(["dump", "-q", "--ladder"])
        .arg(&out)
        .arg(pcap)
        .output()
        .expect("run rxe");
    assert!(
        o.status.success(),
        "rxe dump --ladder: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    out
}

/// A free TCP port on 127.0.0.1 (free when asked; chromedriver may lose
/// it to another program, then it is started again on another).
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// chromedriver with one browser session. Dropping it (also when a test
/// panics) ends the session, which closes the browser, and kills
/// chromedriver's process group.
struct Browser {
    child: Child,
    base: String,
    http: ureq::Agent,
    session: Option<String>,
    log: PathBuf,
}

impl Drop for Browser {
    fn drop(&mut self) {
        if let Some(s) = self.session.take() {
            let _ = self
                .http
                .delete(format!("{}/session/{s}", self.base))
                .call();
        }
        // chromedriver and anything it left (it was made the leader of
        // its own process group, whose id is its pid).
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", self.child.id())])
            .stderr(Stdio::null())
            .status();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Browser {
    /// Starts chromedriver on a free loopback port and opens a session of
    /// headless Chromium with its own profile in `dir`.
    fn start(dir: &Path) -> Browser {
        let http: ureq::Agent = ureq::Agent::config_builder()
            .timeout_global(Some(HTTP_TIMEOUT))
            .http_status_as_error(false)
            .proxy(None)
            .build()
            .into();
        let log = dir.join("chromedriver.log");
        for _attempt in 0..3 {
            let port = free_port();
            let child = {
                use std::os::unix::process::CommandExt;
                Command::new(CHROMEDRIVER)
                    .arg(format!("--port={port}"))
                    .arg("--allowed-ips=127.0.0.1")
                    .arg(format!("--log-path={}", log.display()))
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .process_group(0)
                    .spawn()
                    .expect("start chromedriver")
            };
            let mut b = Browser {
                child,
                base: format!("http://127.0.0.1:{port}"),
                http: http.clone(),
                session: None,
                log: log.clone(),
            };
            if b.wait_ready() {
                b.open_session(dir);
                return b;
            }
        }
        panic!("chromedriver did not start; see {}", log.display());
    }

    /// Waits for chromedriver's /status to say ready; false if it exited.
    fn wait_ready(&mut self) -> bool {
        let deadline = Instant::now() + Duration::from_secs(15);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return false;
            }
            let url = format!("{}/status", self.base);
            if let Ok(mut r) = self
                .http
                .get(&url)
                .config()
                .timeout_global(Some(Duration::from_secs(2)))
                .build()
                .call()
            {
                let v: Option<Value> = r
                    .body_mut()
                    .read_to_string()
                    .ok()
                    .and_then(|t| serde_json::from_str(&t).ok());
                if v.is_some_and(|v| v["value"]["ready"] == true) {
                    return true;
                }
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        false
    }

    fn open_session(&mut self, dir: &Path) {
        let profile = dir.join("profile");
        let args = [
            "--headless=new".to_owned(),
            "--no-sandbox".to_owned(), // we may be root
            "--disable-gpu".to_owned(),
            "--disable-dev-shm-usage".to_owned(),
            format!("--window-size={},{}", WINDOW.0, WINDOW.1),
            "--force-device-scale-factor=1".to_owned(),
            format!("--user-data-dir={}", profile.display()),
            "--no-first-run".to_owned(),
            "--no-default-browser-check".to_owned(),
            "--disable-breakpad".to_owned(),
            "--disable-crash-reporter".to_owned(),
            // Off the network: the page is a file and needs nothing.
            "--disable-background-networking".to_owned(),
            "--disable-component-update".to_owned(),
            "--disable-sync".to_owned(),
            "--host-resolver-rules=MAP * ~NOTFOUND".to_owned(),
            "--proxy-server=127.0.0.1:9".to_owned(),
        ];
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "timeouts": {"script": 10_000, "pageLoad": 15_000},
            "goog:chromeOptions": {"binary": CHROMIUM, "args": args},
        }}});
        let v = self.call("POST", "/session", Some(caps));
        let id = v["sessionId"].as_str().expect("a session id").to_owned();
        self.session = Some(id);
    }

    /// One WebDriver command: its `value`, or a panic naming the error.
    fn call(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        let url = format!("{}{path}", self.base);
        let r = match (method, body) {
            ("GET", _) => self.http.get(&url).call(),
            ("DELETE", _) => self.http.delete(&url).call(),
            (_, b) => self
                .http
                .post(&url)
                .content_type("application/json")
                .send(b.unwrap_or(json!({})).to_string()),
        };
        let mut r = r.unwrap_or_else(|e| {
            panic!(
                "WebDriver {method} {path}: {e} (chromedriver log: {})",
                self.log.display()
            )
        });
        let status = r.status();
        let text = r
            .body_mut()
            .with_config()
            .limit(64 << 20)
            .read_to_string()
            .unwrap_or_else(|e| panic!("WebDriver {method} {path}: {e}"));
        let v: Value = serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("WebDriver {method} {path}: {e}: {text}"));
        assert!(
            status.is_success(),
            "WebDriver {method} {path}: HTTP {status}: {}",
            v["value"]
        );
        v["value"].clone()
    }

    fn session_call(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        let s = self.session.as_deref().expect("a session");
        self.call(method, &format!("/session/{s}{path}"), body)
    }

    fn open(&self, file: &Path) {
        let url = format!("file://{}", file.canonicalize().unwrap().display());
        self.session_call("POST", "/url", Some(json!({ "url": url })));
    }

    /// Runs `script` (a function body) in the page; its return value.
    fn js(&self, script: &str, args: Value) -> Value {
        self.session_call(
            "POST",
            "/execute/sync",
            Some(json!({"script": script, "args": args})),
        )
    }

    /// Performs input actions (W3C Actions API) and releases them.
    fn actions(&self, sources: Value) {
        self.session_call("POST", "/actions", Some(json!({ "actions": sources })));
        self.session_call("DELETE", "/actions", None);
    }

    /// Moves the mouse to viewport point(s), in one gesture.
    fn mouse_path(&self, points: &[(f64, f64)]) {
        let moves: Vec<Value> = points
            .iter()
            .map(|&(x, y)| {
                json!({"type": "pointerMove", "duration": 0, "origin": "viewport",
                       "x": x, "y": y})
            })
            .collect();
        self.actions(json!([{"type": "pointer", "id": "mouse",
            "parameters": {"pointerType": "mouse"}, "actions": moves}]));
    }

    /// A left click at a viewport point.
    fn click(&self, (x, y): (f64, f64)) {
        self.actions(json!([{"type": "pointer", "id": "mouse",
            "parameters": {"pointerType": "mouse"}, "actions": [
                {"type": "pointerMove", "duration": 0, "origin": "viewport",
                 "x": x.round() as i64, "y": y.round() as i64},
                {"type": "pointerDown", "button": 0},
                {"type": "pointerUp", "button": 0}]}]));
    }

    /// Presses and releases a key.
    fn key(&self, key: &str) {
        self.actions(json!([{"type": "key", "id": "keyboard", "actions": [
            {"type": "keyDown", "value": key}, {"type": "keyUp", "value": key}]}]));
    }

    /// One notch of the wheel at a viewport point with Ctrl held
    /// (`up`: away from the user, negative deltaY).
    fn ctrl_wheel(&self, (x, y): (f64, f64), up: bool) {
        const CTRL: &str = "\u{E009}";
        let dy = if up { -100 } else { 100 };
        self.actions(json!([
            {"type": "key", "id": "keyboard", "actions": [
                {"type": "keyDown", "value": CTRL},
                {"type": "pause", "duration": 0},
                {"type": "keyUp", "value": CTRL}]},
            {"type": "wheel", "id": "wheel", "actions": [
                {"type": "pause", "duration": 0},
                {"type": "scroll", "origin": "viewport", "duration": 0,
                 "x": x.round() as i64, "y": y.round() as i64, "deltaX": 0, "deltaY": dy},
                {"type": "pause", "duration": 0}]}]));
    }

    /// The window as PNG bytes.
    fn screenshot(&self) -> Vec<u8> {
        let v = self.session_call("GET", "/screenshot", None);
        base64_decode(v.as_str().expect("base64 text"))
    }
}

/// Standard base64 (the screenshot endpoint's encoding).
fn base64_decode(s: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(s.len() / 4 * 3);
    let (mut acc, mut bits) = (0u32, 0);
    for c in s.bytes() {
        let v = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            b'=' | b'\n' | b'\r' => continue,
            _ => panic!("not base64: {c:#x}"),
        };
        acc = (acc << 6) | u32::from(v);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
        }
    }
    out
}

/// A box: left, top, right, bottom.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Rect {
    l: f64,
    t: f64,
    r: f64,
    b: f64,
}

impl Rect {
    fn of(v: &Value) -> Rect {
        let n = |k: &str| v[k].as_f64().unwrap_or_else(|| panic!("{k} of {v}"));
        Rect {
            l: n("l"),
            t: n("t"),
            r: n("r"),
            b: n("b"),
        }
    }
    fn w(&self) -> f64 {
        self.r - self.l
    }
    fn h(&self) -> f64 {
        self.b - self.t
    }
    fn centre(&self) -> (f64, f64) {
        ((self.l + self.r) / 2.0, (self.t + self.b) / 2.0)
    }
    fn contains(&self, o: &Rect, slack: f64) -> bool {
        o.l >= self.l - slack
            && o.t >= self.t - slack
            && o.r <= self.r + slack
            && o.b <= self.b + slack
    }
    /// How far two boxes overlap in each direction (negative: apart).
    fn overlap(&self, o: &Rect) -> (f64, f64) {
        (
            self.r.min(o.r) - self.l.max(o.l),
            self.b.min(o.b) - self.t.max(o.t),
        )
    }
}

/// JavaScript: `R(el)` is an element's rendered box as {l, t, r, b}.
const RECT_JS: &str = "function R(e) { var r = e.getBoundingClientRect(); \
     return {l: r.left, t: r.top, r: r.right, b: r.bottom}; }";

/// Every arrow's frames and the rendered box of its line (or path).
fn arrows(b: &Browser) -> Vec<(Vec<u64>, Rect)> {
    let v = b.js(
        &format!(
            "{RECT_JS} return Array.from(document.querySelectorAll('#wrap svg g.pkt[data-frames]'))\
             .map(function (g) {{ var l = g.querySelector('line') || g.querySelector('path'); \
             return [g.getAttribute('data-frames'), l ? R(l) : null]; }});"
        ),
        json!([]),
    );
    v.as_array()
        .unwrap()
        .iter()
        .map(|a| {
            let frames = parse_frames(a[0].as_str().unwrap());
            assert!(!a[1].is_null(), "arrow {frames:?} has no line");
            (frames, Rect::of(&a[1]))
        })
        .collect()
}

/// Every frame `rxe dump` printed is drawn exactly once, with a line that
/// has a size and lies inside the drawing.
fn check_frames(b: &Browser, d: &Dump) -> usize {
    let svg = Rect::of(&b.js(
        &format!("{RECT_JS} return R(document.querySelector('#wrap svg'));"),
        json!([]),
    ));
    let arrows = arrows(b);
    let mut seen = BTreeSet::new();
    for (frames, r) in &arrows {
        for f in frames {
            assert!(seen.insert(*f), "frame {f} is drawn twice");
        }
        assert!(
            r.w() > 1.0 && svg.contains(r, 1.0),
            "the arrow of frames {frames:?} at {r:?} is not drawn inside {svg:?}"
        );
    }
    let expected: BTreeSet<u64> = d.lines.keys().copied().collect();
    assert_eq!(
        seen, expected,
        "the arrows stand for every frame of rxe dump"
    );
    assert_eq!(
        expected,
        (1..=d.packets as u64).collect(),
        "frames 1..={}",
        d.packets
    );
    arrows.len()
}

/// No text cut at the drawing's edge, squeezed, or over another.
fn check_texts(b: &Browser, tolerance: f64) {
    let v = b.js(
        &format!(
            "{RECT_JS} var svg = document.querySelector('#wrap svg'); \
             var vb = svg.viewBox.baseVal; \
             var texts = Array.from(svg.querySelectorAll('text')).map(function (t) {{ \
               var bb = t.getBBox(); \
               return {{s: t.textContent, n: t.getNumberOfChars(), \
                 size: parseFloat(getComputedStyle(t).fontSize), \
                 len: t.getComputedTextLength(), \
                 shown: getComputedStyle(t).visibility === 'visible' && getComputedStyle(t).display !== 'none', \
                 bbox: {{l: bb.x, t: bb.y, r: bb.x + bb.width, b: bb.y + bb.height}}, \
                 rect: R(t)}}; }}); \
             var strokes = Array.from(svg.querySelectorAll('g.pkt[data-frames] line, g.pkt[data-frames] path')) \
               .map(function (e) {{ \
                 var bb = e.getBBox(), cs = getComputedStyle(e); \
                 var w = cs.stroke === 'none' ? 0 : parseFloat(cs.strokeWidth) / 2; \
                 return {{l: bb.x - w, t: bb.y - w, r: bb.x + bb.width + w, b: bb.y + bb.height + w, \
                   frames: e.parentNode.getAttribute('data-frames')}}; }}); \
             var lbl = svg.querySelector('text.lbl'); \
             return {{vb: {{l: vb.x, t: vb.y, r: vb.x + vb.width, b: vb.y + vb.height}}, \
               rect: R(svg), charWidth: parseFloat(svg.getAttribute('data-char-width')), \
               lblSize: parseFloat(lbl.getAttribute('font-size')), texts: texts, strokes: strokes}};"
        ),
        json!([]),
    );
    let vb = Rect::of(&v["vb"]);
    let drawn = Rect::of(&v["rect"]);
    // The layout reserves this many em per character.
    let em = v["charWidth"].as_f64().unwrap() / v["lblSize"].as_f64().unwrap();
    let texts = v["texts"].as_array().unwrap();
    assert!(texts.len() > 20, "{} texts", texts.len());
    let mut boxes = Vec::new();
    for t in texts {
        let s = t["s"].as_str().unwrap();
        if s.is_empty() {
            continue;
        }
        let n = t["n"].as_f64().unwrap();
        assert_eq!(n as usize, s.chars().count(), "{s:?}: characters laid out");
        assert_eq!(t["shown"], true, "{s:?} is visible");
        let size = t["size"].as_f64().unwrap();
        let len = t["len"].as_f64().unwrap();
        let reserved = n * em * size;
        assert!(
            len > 0.0 && len <= reserved + 0.01,
            "{s:?} renders {len:.2} px long in {reserved:.2} px reserved"
        );
        let bbox = Rect::of(&t["bbox"]);
        assert!(
            vb.contains(&bbox, 0.01),
            "{s:?} at {bbox:?} is cut by the edge of {vb:?}"
        );
        let rect = Rect::of(&t["rect"]);
        assert!(
            drawn.contains(&rect, 0.5),
            "{s:?} renders at {rect:?}, outside the drawing at {drawn:?}"
        );
        boxes.push((bbox, s));
    }
    // Sweep by top edge: only boxes that start before one ends can meet.
    boxes.sort_by(|a, b| a.0.t.total_cmp(&b.0.t));
    for i in 0..boxes.len() {
        let (a, sa) = boxes[i];
        for &(c, sc) in &boxes[i + 1..] {
            if c.t >= a.b {
                break;
            }
            let (ox, oy) = a.overlap(&c);
            assert!(
                ox <= tolerance || oy <= tolerance,
                "texts overlap by {ox:.2}x{oy:.2} px: {sa:?} at {a:?} and {sc:?} at {c:?}"
            );
        }
    }
    // No arrow (its line as thick as it is drawn, its head) runs through
    // a text.
    let strokes = v["strokes"].as_array().unwrap();
    assert!(!strokes.is_empty());
    for st in strokes {
        let r = Rect::of(st);
        for (t, s) in &boxes {
            let (ox, oy) = r.overlap(t);
            assert!(
                ox <= tolerance || oy <= tolerance,
                "the arrow of frames {} at {r:?} crosses {s:?} at {t:?} by {ox:.2}x{oy:.2} px",
                st["frames"]
            );
        }
    }
}

/// The tooltip an arrow of `frames` must show: their `rxe dump` lines (of
/// a long run, the first three and the last two).
fn check_tip(tip: &str, frames: &[u64], d: &Dump) {
    let want: Vec<&str> = frames.iter().map(|f| d.lines[f].as_str()).collect();
    let got: Vec<&str> = tip.split('\n').collect();
    if want.len() <= 6 {
        assert_eq!(got, want, "tooltip of frames {frames:?}");
    } else {
        assert_eq!(got.len(), 6, "tooltip of frames {frames:?}: {tip}");
        assert_eq!(got[..3], want[..3], "tooltip of frames {frames:?}");
        assert_eq!(
            got[4..],
            want[want.len() - 2..],
            "tooltip of frames {frames:?}"
        );
        assert!(got[3].contains(&(want.len() - 5).to_string()), "{tip}");
    }
}

/// The tooltip: shown, its text, and its box; its text must fit the box.
fn tip(b: &Browser) -> (bool, String, Rect) {
    let v = b.js(
        &format!(
            "{RECT_JS} var t = document.getElementById('tip'); \
             return [getComputedStyle(t).display !== 'none', t.textContent, R(t), \
               t.scrollWidth <= t.clientWidth && t.scrollHeight <= t.clientHeight];"
        ),
        json!([]),
    );
    let shown = v[0].as_bool().unwrap();
    let text = v[1].as_str().unwrap().to_owned();
    assert!(
        !shown || v[3] == true,
        "the tooltip's text runs out of its box: {text}"
    );
    (shown, text, Rect::of(&v[2]))
}

/// A point in the page's toolbar, off the drawing.
fn bar_point(b: &Browser) -> (f64, f64) {
    let r = Rect::of(&b.js(
        &format!("{RECT_JS} return R(document.getElementById('zoom'));"),
        json!([]),
    ));
    (r.r + 40.0, r.centre().1)
}

/// Scrolls the arrow of `frames` to the middle of the window; the
/// rendered box of its line.
fn bring_into_view(b: &Browser, frames: &str) -> Rect {
    Rect::of(&b.js(
        &format!(
            "{RECT_JS} var g = document.querySelector('#wrap svg g.pkt[data-frames=\"' + arguments[0] + '\"]'); \
             g.scrollIntoView({{block: 'center', inline: 'nearest'}}); \
             return R(g.querySelector('line') || g.querySelector('path'));"
        ),
        json!([frames]),
    ))
}

/// Points the mouse at each arrow (every `every`-th) as a user would, on
/// its line and `off` px of the drawing (scaled by the zoom) below it, and
/// checks the tooltip each time.
fn hover_arrows(b: &Browser, d: &Dump, every: usize, off: f64) -> usize {
    let all = arrows(b);
    let bar = bar_point(b);
    let (vw, vh) = viewport(b);
    let zoom = b.js(
        "var svg = document.querySelector('#wrap svg'); \
         return svg.getBoundingClientRect().width / svg.viewBox.baseVal.width;",
        json!([]),
    );
    let off = off * zoom.as_f64().unwrap();
    let mut n = 0;
    for (i, (frames, _)) in all.iter().enumerate() {
        if i % every != 0 && i + 1 != all.len() {
            continue;
        }
        let attr = frames_attr(frames);
        let line = bring_into_view(b, &attr);
        // Middle of the line's visible part (a long arrow may be wider
        // than the window).
        let x = (line.l.max(0.0) + line.r.min(vw)) / 2.0;
        let y = line.centre().1;
        for dy in [0.0, off] {
            // From the toolbar (which hides the tooltip), so that each
            // hover is a fresh move onto the arrow.
            b.mouse_path(&[bar, (x, y + dy)]);
            let (shown, text, r) = tip(b);
            assert!(
                shown,
                "no tooltip over frames {frames:?} at ({x}, {})",
                y + dy
            );
            check_tip(&text, frames, d);
            assert!(
                r.l >= 0.0 && r.t >= 0.0 && r.r <= vw + 0.5 && r.b <= vh + 0.5 && r.w() > 0.0,
                "the tooltip at {r:?} is not inside the window {vw}x{vh}"
            );
        }
        n += 1;
    }
    // Away from the arrows: the toolbar, then the drawing's header.
    b.js("window.scrollTo(0, 0);", json!([]));
    let first = bring_into_view(b, &frames_attr(&all[0].0)).centre();
    b.mouse_path(&[first]);
    assert!(tip(b).0, "the tooltip is shown over the first arrow");
    b.mouse_path(&[bar]);
    assert!(!tip(b).0, "the tooltip is hidden over the toolbar");
    b.mouse_path(&[first]);
    assert!(tip(b).0, "the tooltip is shown again over the first arrow");
    let head = Rect::of(&b.js(
        &format!("{RECT_JS} return R(document.querySelector('#wrap svg text.head'));"),
        json!([]),
    ));
    b.mouse_path(&[head.centre()]);
    assert!(!tip(b).0, "the tooltip is hidden over the drawing's title");
    n
}

fn frames_attr(frames: &[u64]) -> String {
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
            s.push_str(&format!("{}-{}", frames[i], frames[j]));
        } else {
            s.push_str(&frames[i].to_string());
        }
        i = j + 1;
    }
    s
}

fn viewport(b: &Browser) -> (f64, f64) {
    let v = b.js(
        "return [document.documentElement.clientWidth, document.documentElement.clientHeight];",
        json!([]),
    );
    (v[0].as_f64().unwrap(), v[1].as_f64().unwrap())
}

/// The drawing's rendered size, a label's rendered width, the page's
/// zoom readout, and the browser's own zoom.
#[derive(Debug)]
struct Scale {
    svg: Rect,
    label_w: f64,
    readout: String,
    browser_zoom: f64,
}

fn scale(b: &Browser) -> Scale {
    let v = b.js(
        &format!(
            "{RECT_JS} var svg = document.querySelector('#wrap svg'); \
             return [R(svg), R(svg.querySelector('g.pkt[data-frames] text.lbl')), \
               document.getElementById('zoom').textContent, \
               window.devicePixelRatio * (window.visualViewport ? window.visualViewport.scale : 1)];"
        ),
        json!([]),
    );
    Scale {
        svg: Rect::of(&v[0]),
        label_w: Rect::of(&v[1]).w(),
        readout: v[2].as_str().unwrap().to_owned(),
        browser_zoom: v[3].as_f64().unwrap(),
    }
}

/// `now` is `before` scaled by `factor`: the drawing, its labels, the
/// readout; the browser's own zoom untouched.
fn assert_scaled(before: &Scale, now: &Scale, factor: f64, what: &str) {
    let close = |a: f64, b: f64| (a - b).abs() <= 0.01 * b.abs().max(1.0);
    assert!(
        close(now.svg.w(), before.svg.w() * factor) && close(now.svg.h(), before.svg.h() * factor),
        "{what}: the drawing is {:.1}x{:.1}, expected {factor:.4} × {:.1}x{:.1}",
        now.svg.w(),
        now.svg.h(),
        before.svg.w(),
        before.svg.h()
    );
    assert!(
        close(now.label_w, before.label_w * factor),
        "{what}: a label is {:.2} px wide, expected {factor:.4} × {:.2}",
        now.label_w,
        before.label_w
    );
    assert_eq!(
        now.browser_zoom, before.browser_zoom,
        "{what}: browser zoom"
    );
}

/// The page's zoom controls: buttons, keys, Ctrl + wheel, fit.
fn check_zoom(b: &Browser) {
    b.js("window.scrollTo(0, 0);", json!([]));
    let one = scale(b);
    assert_eq!(one.readout, "100%");
    let button = |id: &str| {
        Rect::of(&b.js(
            &format!("{RECT_JS} return R(document.getElementById(arguments[0]));"),
            json!([id]),
        ))
        .centre()
    };
    let readout = |s: &Scale, z: f64| {
        assert_eq!(s.readout, format!("{}%", (z * 100.0).round()), "{s:?}");
    };

    b.click(button("zin"));
    let s = scale(b);
    assert_scaled(&one, &s, STEP, "the + button");
    readout(&s, STEP);
    b.click(button("zout"));
    assert_scaled(&one, &scale(b), 1.0, "the − button after +");

    b.key("+");
    b.key("+");
    let s = scale(b);
    assert_scaled(&one, &s, STEP * STEP, "the + key twice");
    readout(&s, STEP * STEP);
    b.key("0");
    let s = scale(b);
    assert_scaled(&one, &s, 1.0, "the 0 key");
    readout(&s, 1.0);
    b.key("-");
    assert_scaled(&one, &scale(b), 1.0 / STEP, "the - key");
    b.click(button("z1"));
    assert_scaled(&one, &scale(b), 1.0, "the 1:1 button");

    // Ctrl + wheel over the drawing: the page zooms, not the browser.
    let over = (one.svg.l + 200.0, one.svg.t + 200.0);
    b.ctrl_wheel(over, true);
    let s = scale(b);
    assert_scaled(&one, &s, WHEEL_STEP, "Ctrl + wheel up");
    readout(&s, WHEEL_STEP);
    b.ctrl_wheel(over, false);
    assert_scaled(&one, &scale(b), 1.0, "Ctrl + wheel down after up");

    // Fit: the drawing as wide as the page (never above 1:1).
    b.click(button("zfit"));
    let s = scale(b);
    let wrap_w = b.js(
        "return document.getElementById('wrap').clientWidth;",
        json!([]),
    );
    let fit = (wrap_w.as_f64().unwrap() / one.svg.w()).min(1.0);
    assert_scaled(&one, &s, fit, "the fit button");
    b.key("0");
    assert_scaled(&one, &scale(b), 1.0, "the 0 key after fit");
}

/// Sets the page's zoom to STEP^n with its keys.
fn zoom_by_keys(b: &Browser, n: i32) {
    b.key("0");
    let k = if n > 0 { "+" } else { "-" };
    for _ in 0..n.abs() {
        b.key(k);
    }
}

/// The screenshot: a PNG of the window's size with a drawing in it.
fn check_screenshot(b: &Browser, out: &Path) {
    let png = b.screenshot();
    std::fs::write(out, &png).unwrap();
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n", "a PNG");
    assert_eq!(&png[12..16], b"IHDR");
    let w = u32::from_be_bytes(png[16..20].try_into().unwrap());
    let h = u32::from_be_bytes(png[20..24].try_into().unwrap());
    let (vw, vh) = viewport(b);
    assert!(
        (w as f64) >= vw && (h as f64) >= vh && w <= WINDOW.0 && h <= WINDOW.1,
        "{w}x{h} for a {vw}x{vh} page in a {}x{} window",
        WINDOW.0,
        WINDOW.1
    );
    // Decoded by the browser itself: many colours, and neither blank nor
    // filled (the drawing is mostly white, with lines and text).
    let v = b.session_call(
        "POST",
        "/execute/async",
        Some(json!({"script": "var done = arguments[arguments.length - 1]; \
            var img = new Image(); \
            img.onload = function () { \
              var c = document.createElement('canvas'); c.width = img.width; c.height = img.height; \
              var x = c.getContext('2d'); x.drawImage(img, 0, 0); \
              var d = x.getImageData(0, 0, c.width, c.height).data, colours = new Set(), ink = 0; \
              for (var i = 0; i < d.length; i += 4) { \
                colours.add((d[i] << 16) | (d[i + 1] << 8) | d[i + 2]); \
                if (d[i] + d[i + 1] + d[i + 2] < 600) { ink++; } } \
              done([colours.size, ink / (d.length / 4)]); }; \
            img.onerror = function () { done(null); }; \
            img.src = 'data:image/png;base64,' + arguments[0];",
            "args": [base64_encode(&png)]})),
    );
    assert!(!v.is_null(), "the browser cannot decode the screenshot");
    let (colours, ink) = (v[0].as_u64().unwrap(), v[1].as_f64().unwrap());
    assert!(
        colours >= 50 && (0.01..0.5).contains(&ink),
        "{}: {colours} colours, {:.1} % ink",
        out.display(),
        ink * 100.0
    );
}

fn base64_encode(b: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut s = String::with_capacity(b.len().div_ceil(3) * 4);
    for c in b.chunks(3) {
        let n = (u32::from(c[0]) << 16)
            | (u32::from(*c.get(1).unwrap_or(&0)) << 8)
            | u32::from(*c.get(2).unwrap_or(&0));
        for i in 0..4 {
            if i <= c.len() {
                s.push(A[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                s.push('=');
            }
        }
    }
    s
}

/// The whole check of one capture's page (`hover_zoomed`: hover again
/// zoomed in and out).
fn check_capture(name: &str, hover_zoomed: bool) {
    if !browser_available() {
        return;
    }
    let started = Instant::now();
    let dir = scratch(name);
    let pcap = pcap_dir().join(format!("{name}.pcap"));
    let d = dump(&pcap);
    let html = page(&dir, &pcap, name);
    let b = Browser::start(&dir);
    b.open(&html);
    let n = check_frames(&b, &d);
    check_texts(&b, OVERLAP_TOLERANCE);
    // Every arrow, on its line and 3 px below it.
    let hovered = hover_arrows(&b, &d, 1, 3.0);
    assert_eq!(hovered, n);
    check_zoom(&b);
    if hover_zoomed {
        // Zoomed in and out: the texts scale with the drawing and the
        // pointer still finds each arrow.
        for k in [2, -3] {
            zoom_by_keys(&b, k);
            check_texts(&b, OVERLAP_TOLERANCE_ZOOMED);
            hover_arrows(&b, &d, 3, 3.0);
        }
        zoom_by_keys(&b, 0);
    }
    // The picture, with the tooltip of a NAK (or of the middle arrow).
    let frames = b.js(
        "var g = document.querySelector('#wrap svg g.pkt.nak[data-frames]') || \
           document.querySelectorAll('#wrap svg g.pkt[data-frames]')[arguments[0]]; \
         return g.getAttribute('data-frames');",
        json!([n / 2]),
    );
    let line = bring_into_view(&b, frames.as_str().unwrap());
    b.mouse_path(&[(line.l + 60.0, line.centre().1)]);
    assert!(tip(&b).0, "a tooltip for the screenshot");
    check_screenshot(&b, &dir.join(format!("{name}.png")));
    eprintln!(
        "{name}: {} frames in {n} arrows checked in Chromium in {:.1} s",
        d.packets,
        started.elapsed().as_secs_f64()
    );
}

#[test]
fn loss_write_bw_4096_in_chromium() {
    check_capture("loss_write_bw_4096", true);
}

#[test]
fn rping_in_chromium() {
    check_capture("rping", false);
}
