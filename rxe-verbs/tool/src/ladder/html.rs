//! The HTML ladder: the same SVG inline, with a small script for zoom
//! (buttons, `+`/`-`/`0` keys, Ctrl + wheel) and a tooltip that shows the
//! `rxe dump` lines of the packet under the pointer (anywhere in its row:
//! each arrow's group holds an unpainted band, see [`super::svg`]).
//! Self-contained: no external script, style or font. The page is also
//! well-formed XML (the script sits in a CDATA section), so tests parse it
//! with an XML parser; `tests/ladder_browser.rs` runs it in Chromium.

use super::svg::esc;

const STYLE: &str = r#"
body{margin:0;font-family:DejaVu Sans Mono,Menlo,Consolas,monospace;background:#fafafa}
#bar{position:sticky;top:0;z-index:2;background:#fff;border-bottom:1px solid #ccc;padding:6px 10px;font-size:13px}
#bar button{font:inherit;min-width:2.2em;margin-right:4px}
#wrap{overflow:auto}
#wrap svg{display:block}
.pkt{cursor:default}
.pkt:hover line,.pkt.hl line{stroke-width:3}
.pkt.thick:hover line{stroke-width:7}
#tip{position:fixed;display:none;z-index:3;max-width:90vw;background:#ffffe8;border:1px solid #999;padding:4px 6px;font-size:12px;white-space:pre-wrap;pointer-events:none;box-shadow:2px 2px 4px rgba(0,0,0,.2)}
"#;

const SCRIPT: &str = r#"
(function () {
  var svg = document.querySelector('#wrap svg');
  var tip = document.getElementById('tip');
  var zoomText = document.getElementById('zoom');
  var w0 = parseFloat(svg.getAttribute('width'));
  var h0 = parseFloat(svg.getAttribute('height'));
  var zoom = 1;
  function setZoom(z) {
    zoom = Math.min(8, Math.max(0.05, z));
    svg.setAttribute('width', String(w0 * zoom));
    svg.setAttribute('height', String(h0 * zoom));
    zoomText.textContent = Math.round(zoom * 100) + '%';
  }
  function fit() {
    var wrap = document.getElementById('wrap');
    setZoom(Math.min(1, wrap.clientWidth / w0));
  }
  document.getElementById('zin').onclick = function () { setZoom(zoom * 1.25); };
  document.getElementById('zout').onclick = function () { setZoom(zoom / 1.25); };
  document.getElementById('z1').onclick = function () { setZoom(1); };
  document.getElementById('zfit').onclick = fit;
  document.addEventListener('keydown', function (e) {
    if (e.key === '+' || e.key === '=') { setZoom(zoom * 1.25); }
    else if (e.key === '-') { setZoom(zoom / 1.25); }
    else if (e.key === '0') { setZoom(1); }
  });
  document.getElementById('wrap').addEventListener('wheel', function (e) {
    if (!e.ctrlKey) { return; }
    e.preventDefault();
    setZoom(zoom * (e.deltaY < 0 ? 1.1 : 1 / 1.1));
  }, { passive: false });
  // The tooltips: move each packet's <title> (the browser's own tooltip)
  // into data-tip, shown in a box that follows the pointer.
  var pkts = svg.querySelectorAll('g.pkt[data-frames]');
  for (var i = 0; i < pkts.length; i++) {
    var t = pkts[i].querySelector('title');
    if (t) {
      pkts[i].setAttribute('data-tip', t.textContent);
      pkts[i].removeChild(t);
    }
  }
  svg.addEventListener('mousemove', function (e) {
    var g = e.target.closest ? e.target.closest('g.pkt[data-tip]') : null;
    if (!g) { tip.style.display = 'none'; return; }
    tip.textContent = g.getAttribute('data-tip');
    tip.style.display = 'block';
    // Measured at the top left, where it has the whole width, and kept
    // inside the page's visible area (the scroll bars are not).
    tip.style.left = '0px';
    tip.style.top = '0px';
    var r = tip.getBoundingClientRect();
    var vw = document.documentElement.clientWidth, vh = document.documentElement.clientHeight;
    var x = e.clientX + 14, y = e.clientY + 14;
    if (x + r.width > vw) { x = Math.max(0, Math.min(e.clientX - 14, vw) - r.width); }
    if (y + r.height > vh) { y = Math.max(0, Math.min(e.clientY - 14, vh) - r.height); }
    tip.style.left = x + 'px';
    tip.style.top = y + 'px';
  });
  svg.addEventListener('mouseleave', function () { tip.style.display = 'none'; });
  setZoom(1);
})();
"#;

/// The page around an SVG made by [`super::svg::render`].
pub fn render(svg: &str, title: &str) -> String {
    let mut o = String::new();
    o.push_str("<!DOCTYPE html>\n<html xmlns=\"http://www.w3.org/1999/xhtml\" lang=\"en\">\n<head>\n<meta charset=\"utf-8\"/>\n");
    o.push_str(&format!(
        "<title>rxe dump --ladder {}</title>\n",
        esc(title)
    ));
    o.push_str("<style>");
    o.push_str(STYLE);
    o.push_str("</style>\n</head>\n<body>\n");
    o.push_str(
        "<div id=\"bar\"><button id=\"zout\" title=\"zoom out (-)\">−</button>\
         <button id=\"zin\" title=\"zoom in (+)\">+</button>\
         <button id=\"z1\" title=\"actual size (0)\">1:1</button>\
         <button id=\"zfit\" title=\"fit the width\">fit</button> \
         <span id=\"zoom\">100%</span> · Ctrl + wheel zooms · \
         point at an arrow for its packets' rxe dump lines</div>\n",
    );
    o.push_str("<div id=\"wrap\">\n");
    o.push_str(svg);
    o.push_str("</div>\n<div id=\"tip\"></div>\n<script>//<![CDATA[");
    o.push_str(SCRIPT);
    o.push_str("//]]></script>\n</body>\n</html>\n");
    o
}
