"""Open every page of the built book in headless Chromium and check what a reader sees.

Usage: python -m tests.e2e.browser_test [_build/html]

The site is served on 127.0.0.1 (a free port, a thread in this process) and every page
of ``_toc.yml`` is opened with Playwright driving Debian's Chromium (``/usr/bin/chromium``,
or ``$CHROMIUM``). Per page:

- no console error, no uncaught exception, no failed request or error response from the
  local server;
- every ``<img>`` loaded (``naturalWidth > 0``);
- math rendered: each ``.math`` node holds MathJax output, no MathJax error, and no raw
  ``$$``, ``\\(`` or ``\\[`` left in the page's text outside code;
- as many ``div.tag_widget`` as the notebook has cells tagged ``widget``, each with a
  loaded ``<img>``; a page with live figures says once (``p.attnlab-live-note``, above the
  first) that they run in Binder and Colab, and no caption repeats it;
- figure text a reader can read: for every figure image shown (``.cell_output img``), the
  smallest font the PNG records (``attnlab.plotting.PNG_FONT_KEY``, in points, drawn at
  the dpi it records) times the scale the page shows the image at is at least
  ``attnlab.plotting.MIN_TEXT_PX`` CSS pixels; a figure without the record was not drawn
  in the book's style;
- math: no literal backslash in rendered math (``\\text{one\\_hot}`` shows one), no display
  equation wider than its column (it would be cut off or scroll);
- tables: no cell wraps a number away from its unit (``約 12`` / ``分``);
- no code cell or text output scrolls sideways: every ``<pre>`` of a cell (``div.cell``),
  the folded solutions unfolded, has ``scrollWidth <= clientWidth``; each offending line
  is named (its first 60 characters). ``tests/test_book_width.py`` is the static
  counterpart (the column limits measured here);
- the licences at the foot of the page (``_config.yml`` ``html.extra_footer``): shown, and
  linking CC BY 4.0 and the MIT licence to their texts;
- every control of every live figure (``div.attnlab-live``, see ``attnlab.live_book``) moved
  through all its values (sliders with the keyboard): one image shows, it changes with the
  state, and its file is the pure render of that state;
- dark mode: every figure drawn in the book's style shows its dark version, with no panel,
  padding or colour filter;
- axe-core (``tests/browser/node_modules/axe-core``, injected from disk) finds no violation
  of impact "serious" or "critical" (contrast, names of controls, alt text, language…),
  once in light mode and once in dark mode (a second browser context whose localStorage
  says ``mode``/``theme`` = ``dark``, as the theme's switcher leaves it). Each violation is
  printed with its rule, page and node; :data:`AXE_EXCEPTIONS` lists the few left on
  purpose, each with its reason. Counts per page and impact are printed and written to
  ``screenshots/axe.json``;
- the book on a phone (issue 48): every page at 1280 px and at 390 px (:data:`PHONE`), in
  light and dark mode (:data:`LAYOUT_JS`): no figure whose shown aspect ratio differs from
  its PNG's by more than 1 %, no page wider than the screen, no display equation whose
  glyphs reach outside the box that scrolls it (the ⊤ of Qᵀ), no table cut by its box
  without a scroll cue (fade, tab stop, note), at 1280 px no table wider than its room
  (the column, or a narrower box that clips it: a fold), at 390 px every table's first
  number column starting within the screen (designer's third read, N1 and N2), at 390 px
  the 記号表 (``book/notation``)
  shows its tables of class ``attnlab-notation`` with every row's 「意味」 within the
  screen, and at 390 px a figure whose text is under
  ``MIN_TEXT_PX`` opens at full size (a link to its own file); on the text
  (:data:`PAGE_TEXT_JS`): no space a line may break at between a number and its counter
  (「3 つ」「第 4 章」 keep U+00A0), no plain-text math with an underscore (``d_k``)
  outside code and math;
- a full-page screenshot in ``screenshots/`` (dark mode: ``…__dark.png``; phone:
  ``…__phone.png``, ``…__phone_dark.png``), taken from the
  top of the page with nothing focused (a focused skip link and the sticky header would be
  painted over the page).

What today's notebooks still fail of the design checks (issue 36) is listed, by chapter
and figure, in :data:`KNOWN_UNTIL_PASS_2`: those are reported, not failed, until the
chapters are re-executed and edited; an entry that no longer fails is itself a problem
(remove it).

Then a Japanese search on ``search.html`` must list chapter 01 for each term of
``SEARCH_TERMS``.

MathJax: the book loads MathJax 3 from a CDN, which the test machine cannot reach. The test
answers those requests from ``tests/browser/node_modules/mathjax`` (``npm ci`` there,
which ``make test-browser`` runs); every other request off 127.0.0.1 gets an empty answer
and is listed.
"""

import json
import mimetypes
import os
import sys
import tempfile
import threading
import time
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import quote, urlparse

import matplotlib_fontja
import nbformat
from PIL import Image
from playwright.sync_api import sync_playwright

from attnlab.plotting import MIN_TEXT_PX, PNG_DPI_KEY, PNG_FONT_KEY
from attnlab.widgets.core import LIVE_NOTE
from scripts.book import ROOT, toc_pages
from scripts.make_student import CODE_LICENCE_URL, CONTENT_LICENCE_URL

CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
MATHJAX_CDN = "https://cdn.jsdelivr.net/npm/mathjax@3/es5/"
MATHJAX_LOCAL = ROOT / "tests" / "browser" / "node_modules" / "mathjax" / "es5"
AXE_LOCAL = ROOT / "tests" / "browser" / "node_modules" / "axe-core" / "axe.min.js"
SCREENSHOTS = ROOT / "screenshots"
SEARCH_PAGE = "notebooks/01_attention_review"
SEARCH_TERMS = ["因果", "飽和", "重み付き平均", "softmax"]
WIDGET_TAG = "widget"

# Waits for every image (loaded or failed) and returns those that did not load.
IMAGES_JS = """async () => {
  const images = [...document.images];
  images.forEach(img => { img.loading = "eager"; });
  await Promise.all(images.map(img => img.complete ? null :
    new Promise(done => {
      img.addEventListener("load", done);
      img.addEventListener("error", done);
    })));
  return {count: images.length,
          broken: images.filter(img => img.naturalWidth === 0).map(img => img.getAttribute("src"))};
}"""

MATH_JS = r"""async () => {
  const nodes = [...document.querySelectorAll(".math")];
  if (nodes.length === 0) return {count: 0, unrendered: [], errors: 0, raw: []};
  const deadline = Date.now() + 20000;
  while (!(window.MathJax && MathJax.startup && MathJax.startup.promise)) {
    if (Date.now() > deadline) {
      return {count: nodes.length, unrendered: ["MathJax が読み込まれません"], errors: 0, raw: []};
    }
    await new Promise(done => setTimeout(done, 50));
  }
  await MathJax.startup.promise;
  const unrendered = nodes.filter(n => !n.querySelector("mjx-container") ||
      /\\\(|\\\[|\$\$/.test(n.innerText)).map(n => n.textContent.slice(0, 60));
  const raw = [];
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  for (let t = walker.nextNode(); t; t = walker.nextNode()) {
    if (t.parentElement.closest("pre, code, script, style, mjx-container, .math")) continue;
    if (/\$\$|\\\(|\\\[/.test(t.textContent)) raw.push(t.textContent.trim().slice(0, 60));
  }
  return {count: nodes.length, unrendered, raw,
          errors: document.querySelectorAll("mjx-merror, [data-mjx-error]").length};
}"""

# The output area of each widget cell (its code may be shown above it): the pictures and
# the caption; and the notes on Binder and Colab of the page.
WIDGETS_JS = """() => ({
  widgets: [...document.querySelectorAll("div.tag_widget")].map(div => {
    const outputs = [...div.querySelectorAll(".cell_output")];
    return {
      images: outputs.flatMap(o => [...o.querySelectorAll("img")]).map(img => img.naturalWidth),
      caption: outputs.map(o => [...o.querySelectorAll("figcaption")]
                                 .map(c => c.innerText).join(" ")).join(" "),
    };
  }),
  notes: [...document.querySelectorAll("p.attnlab-live-note")].map(p => p.innerText),
})"""


# Every <pre> of a code cell or of its output that scrolls sideways, with the lines too
# wide for it (measured with a canvas in the pre's own font). The folded solutions are
# unfolded meanwhile (a hidden pre has no width), then folded again.
OVERFLOW_JS = """() => {
  const folded = [...document.querySelectorAll(".toggle-hidden")];
  folded.forEach(e => e.classList.remove("toggle-hidden"));
  const ctx = document.createElement("canvas").getContext("2d");
  const pres = [...document.querySelectorAll("div.cell pre")];
  const wide = pres.filter(pre => pre.scrollWidth > pre.clientWidth).map(pre => {
    const style = getComputedStyle(pre);
    ctx.font = style.font;
    const room = pre.clientWidth - parseFloat(style.paddingLeft) - parseFloat(style.paddingRight);
    const lines = pre.innerText.split("\\n");
    const over = lines.filter(line => ctx.measureText(line).width > room);
    const longest = lines.reduce((a, b) => ctx.measureText(b).width >
                                 ctx.measureText(a).width ? b : a, "");
    return {output: !!pre.closest(".cell_output"), lines: over.length ? over : [longest]};
  });
  folded.forEach(e => e.classList.add("toggle-hidden"));
  return {count: pres.length, wide};
}"""

# Every figure image shown in a cell's output: its file, its size in pixels and on the page
# (inside padding and border), its figure's id, whether the book's style drew it, and how
# the page paints it (a dark-mode panel, padding or filter).
FIGURE_TEXT_JS = """() => [...document.querySelectorAll(".cell_output img")]
  .filter(img => img.checkVisibility()).map(img => {
    const s = getComputedStyle(img);
    const side = k => parseFloat(s[k + "Left"] || 0) + parseFloat(s[k + "Right"] || 0);
    const shown = img.getBoundingClientRect().width - side("padding") -
                  parseFloat(s.borderLeftWidth) - parseFloat(s.borderRightWidth);
    const figure = img.closest("figure");
    return {src: img.getAttribute("src"), natural: img.naturalWidth, shown,
            figure: figure ? figure.id : "", styled: img.classList.contains("attnlab-figure"),
            filter: s.filter, background: s.backgroundColor, padding: side("padding")};
  })"""

# Rendered math: formulas whose text (MathJax's assistive MathML) holds a literal backslash,
# and display equations wider than their column. The folded solutions are unfolded meanwhile.
MATH_LAYOUT_JS = r"""async () => {
  if (!(window.MathJax && MathJax.startup && MathJax.startup.promise)) {
    return {backslash: [], wide: [], widest: 0};
  }
  await MathJax.startup.promise;
  const folded = [...document.querySelectorAll(".toggle-hidden")];
  folded.forEach(e => e.classList.remove("toggle-hidden"));
  const backslash = [], wide = [];
  let widest = 0;
  for (const item of MathJax.startup.document.math) {
    const root = item.typesetRoot;
    if (!root || !root.isConnected) continue;
    const mml = root.querySelector("mjx-assistive-mml");
    if (mml && mml.textContent.includes("\\")) backslash.push(item.math.trim());
    const math = root.querySelector("mjx-math");
    const column = root.closest("div.math, .math") || root.parentElement;
    if (item.display && math && column.clientWidth > 0) {
      widest = Math.max(widest, math.getBoundingClientRect().width / column.clientWidth);
      const over = math.getBoundingClientRect().width - column.clientWidth;
      if (over > 1) wide.push({tex: item.math.trim(), over: Math.round(over)});
    }
  }
  folded.forEach(e => e.classList.add("toggle-hidden"));
  return {backslash, wide, widest};
}"""

# Table cells of the page's text (not code) where a number and its unit are drawn on two
# lines: the pieces of the range "number + unit" lie at different heights.
UNIT_WRAP_JS = r"""() => {
  const units = "分|秒|ms|個|回|ステップ|文字|字|%|％|倍|行|列|桁|MiB|MB|KB|GB|GiB";
  const pattern = new RegExp("(\\d[\\d,.]*)[\\s\\u00a0]*(" + units + ")", "g");
  const found = [];
  for (const cell of document.querySelectorAll("#main-content td, #main-content th")) {
    if (cell.closest("pre, .highlight, .toggle-hidden")) continue;
    const walker = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
    for (let t = walker.nextNode(); t; t = walker.nextNode()) {
      pattern.lastIndex = 0;
      for (let m = pattern.exec(t.data); m; m = pattern.exec(t.data)) {
        const range = document.createRange();
        range.setStart(t, m.index);
        range.setEnd(t, m.index + m[0].length);
        const tops = [...range.getClientRects()].filter(r => r.width > 0).map(r => r.top);
        if (tops.length > 1 && Math.max(...tops) - Math.min(...tops) > 4) {
          found.push({text: m[0], cell: cell.innerText.trim().slice(0, 40)});
        }
      }
    }
  }
  return found;
}"""

# The page's geometry as a reader sees it at the context's width (issue 48), the folded
# solutions unfolded meanwhile and the scroll cues measured again
# (_static/attnlab-typography.js):
# - squashed: every figure shown (an <img> of the text, loaded) whose shown aspect ratio
#   differs from its file's by more than 1 %;
# - pageWidth: the page wider than the window (the whole page pans on a phone);
# - clipped: display equations whose glyphs (MathJax's mjx-c boxes) come within 2 px of
#   the edge of the container that scrolls them (overflow: auto clips what rises above it,
#   and the ⊤ of Qᵀ, its box at the very edge, lost its bar);
# - cut: tables wider than the box that clips them, where that box does not say it scrolls
#   (class attnlab-scrolls-right/-left), is no tab stop, or (a table) has no note under it;
# - notation: the 記号表's tables (in a container of class attnlab-notation): how many are
#   shown, and each row whose 「意味」 cell (the column headed 意味…, else the last) is not
#   within the window (at a phone's width the rows are stacked, the meaning below);
# - small: figures whose smallest text is under the limit at this width and that do not
#   open at full size (a link to the picture's own file; a live figure's link follows its
#   state), with what the PNG records to compute the text size.
LAYOUT_JS = r"""async () => {
  if (window.MathJax && MathJax.startup && MathJax.startup.promise) {
    await MathJax.startup.promise;
  }
  const folded = [...document.querySelectorAll(".toggle-hidden")];
  folded.forEach(e => e.classList.remove("toggle-hidden"));
  if (window.attnlabScrollCues) window.attnlabScrollCues();
  await new Promise(done => setTimeout(done, 50));
  const main = document.querySelector("#main-content") || document.body;
  const squashed = [];
  const figures = [];
  for (const img of main.querySelectorAll("img")) {
    if (!img.checkVisibility() || !img.naturalWidth || !img.naturalHeight) continue;
    const box = img.getBoundingClientRect();
    if (box.width < 2 || box.height < 2) continue;
    const natural = img.naturalWidth / img.naturalHeight, shown = box.width / box.height;
    const off = Math.abs(shown / natural - 1);
    const figure = img.closest("figure");
    const key = (figure && figure.id) || img.getAttribute("src");
    if (off > 0.01) squashed.push({key, natural, shown, off});
    if (!img.closest(".cell_output")) continue;
    const live = img.closest(".attnlab-live");
    const link = live ? live.querySelector("a.attnlab-live-open") : img.closest("a");
    const here = u => new URL(u, location.href).href;
    const opens = !!link && link.checkVisibility() &&
      here(link.getAttribute("href")) === here(img.getAttribute("src"));
    figures.push({key, src: img.getAttribute("src"), natural: img.naturalWidth,
                  shown: box.width, opens});
  }
  const clipped = [];
  for (const box of main.querySelectorAll("mjx-container[display='true']")) {
    if (!box.checkVisibility()) continue;
    const outer = box.getBoundingClientRect();
    const s = getComputedStyle(box);
    const top = outer.top + parseFloat(s.borderTopWidth);
    const bottom = outer.bottom - parseFloat(s.borderBottomWidth);
    // a glyph's ink reaches a little past the box MathJax gives it (the ⊤ of Qᵀ sat with
    // its box at the very top of its container and lost its bar): 2 px of room each side
    const room = 2;
    let over = 0;
    for (const c of box.querySelectorAll("mjx-math mjx-c")) {
      const r = c.getBoundingClientRect();
      if (r.height === 0) continue;
      over = Math.max(over, top + room - r.top, r.bottom + room - bottom);
    }
    if (over > 0) {
      const item = [...MathJax.startup.document.math].find(m => m.typesetRoot === box);
      clipped.push({tex: item ? item.math.trim() : box.textContent.slice(0, 40),
                    over: Math.round(over * 10) / 10});
    }
  }
  // the nearest box around a table that clips it sideways (a scroller, a fold), or null
  const clipOf = table => {
    let clip = table.parentElement;
    while (clip && clip !== main && getComputedStyle(clip).overflowX === "visible") {
      clip = clip.parentElement;
    }
    return clip && clip !== main ? clip : null;
  };
  const cut = [];
  for (const table of main.querySelectorAll("table")) {
    if (!table.checkVisibility()) continue;
    const clip = clipOf(table);
    if (!clip) continue;
    const right = table.getBoundingClientRect().right, edge = clip.getBoundingClientRect().right;
    if (clip.scrollWidth - clip.clientWidth <= 1 && right <= edge + 1) continue;
    const cue = clip.classList.contains("attnlab-scrolls-right") ||
                clip.classList.contains("attnlab-scrolls-left");
    const note = clip.nextElementSibling &&
                 clip.nextElementSibling.classList.contains("attnlab-scroll-note");
    if (!cue || clip.tabIndex < 0 || !note) {
      cut.push({table: table.innerText.trim().slice(0, 40), over: Math.round(right - edge),
                cue, tab: clip.tabIndex, note: !!note});
    }
  }
  // third read, N1 + N2: every table within the room it may use. The room is the column
  // (the article's content box; the theme's contents sit in the right margin from 1200 px)
  // or, inside a narrower box that clips it (a fold), that box. At a desktop width no
  // table is wider than its room; on a phone the first number column starts within the
  // screen (a table that scrolls keeps its label column in place: the CSS).
  const article = document.querySelector(".bd-article") || main;
  const as = getComputedStyle(article), ab = article.getBoundingClientRect();
  const columnRight = ab.right - parseFloat(as.paddingRight);
  const tables = [];
  for (const table of main.querySelectorAll("table")) {
    if (!table.checkVisibility()) continue;
    const scroller = clipOf(table);
    const keep = scroller ? scroller.scrollLeft : 0;
    if (scroller) scroller.scrollLeft = 0;
    const r = table.getBoundingClientRect();
    let right = columnRight;
    let box = table.parentElement;  // the nearest box narrower than the column
    while (box && box !== main) {
      const b = box.getBoundingClientRect(), bs = getComputedStyle(box);
      if (getComputedStyle(box).overflowX !== "visible") {
        right = Math.min(right, b.left + box.clientWidth + parseFloat(bs.borderLeftWidth) -
                                parseFloat(bs.paddingRight));
      }
      box = box.parentElement;
    }
    const holder = table.closest(".attnlab-result-table");
    const titled = holder && holder.querySelector(".attnlab-table-title");
    const title = (titled ? titled.innerText : table.innerText).replace(/\s+/g, " ").trim();
    let number = null;
    const row = table.querySelector("tbody tr");
    for (const cell of row ? row.children : []) {
      if (cell.classList.contains("attnlab-number") ||
          /^[-−+]?[0-9][0-9.,]*(\s|$|%|\s*\()/.test(cell.innerText.trim())) {
        number = Math.round(cell.getBoundingClientRect().left);
        break;
      }
    }
    tables.push({title: [...title].slice(0, 50).join(""), width: Math.round(r.width),
                 room: Math.round(right - r.left),
                 numberRoom: number === null ? null : Math.round(right - number)});
    if (scroller) scroller.scrollLeft = keep;
  }
  const notation = {tables: 0, rows: 0, hidden: []};
  for (const table of main.querySelectorAll(".attnlab-notation table")) {
    if (!table.checkVisibility()) continue;
    notation.tables += 1;
    const head = [...table.querySelectorAll("thead th")].map(th => th.innerText.trim());
    const meaning = head.findIndex(text => text.startsWith("意味"));
    for (const row of table.querySelectorAll("tbody tr")) {
      const cell = row.children[meaning < 0 ? row.children.length - 1 : meaning];
      notation.rows += 1;
      const r = cell ? cell.getBoundingClientRect() : null;
      if (!cell || !cell.checkVisibility() || r.width < 1 || r.left < -1 ||
          r.right > window.innerWidth + 1) {
        const text = row.innerText.replace(/\s+/g, " ").trim();
        notation.hidden.push({row: [...text].slice(0, 30).join(""), meaning,
                              left: r ? Math.round(r.left) : null,
                              right: r ? Math.round(r.right) : null});
      }
    }
  }
  folded.forEach(e => e.classList.add("toggle-hidden"));
  if (window.attnlabScrollCues) window.attnlabScrollCues();
  return {squashed, figures, clipped, cut, notation, tables,
          pageWidth: document.documentElement.scrollWidth, window: window.innerWidth};
}"""

# The text of the page (not code, not math, not scripts; issue 48):
# - split: a typed space between a number and its counter that a line may break at
#   (「3 つ」「第 4 章」「図 1」「約 5」; the build makes them no-break spaces,
#   book_ext/book_fixes.py);
# - plainMath: math written as plain text with an underscore (d_k, h_kv, θ_i).
PAGE_TEXT_JS = r"""() => {
  const ja = "\\u3040-\\u30ff\\u3400-\\u4dbf\\u4e00-\\u9fff\\uf900-\\ufaff\\u3005\\uff01-\\uff5e";
  const split = new RegExp("[0-9%％] (?=[" + ja + "])|[第約全各図表式練習節章] (?=[0-9])", "g");
  const plain = new RegExp("(?<![\\w/.\\-])(?:√)?[A-Za-zα-ωΑ-Ω]_" +
                           "(?:[A-Za-z0-9]+|\\{[^}]*\\}|\\([^)]*\\))(?![\\w/])", "g");
  const found = {split: [], plainMath: []};
  const main = document.querySelector("#main-content") || document.body;
  const walker = document.createTreeWalker(main, NodeFilter.SHOW_TEXT);
  for (let t = walker.nextNode(); t; t = walker.nextNode()) {
    const el = t.parentElement;
    if (el.closest("pre, code, kbd, script, style, mjx-container, .math, .highlight, " +
                   ".attnlab-live-controls, a.headerlink")) continue;
    for (const m of t.data.matchAll(split)) {
      found.split.push(t.data.slice(Math.max(0, m.index - 8), m.index + 8));
    }
    for (const m of t.data.matchAll(plain)) {
      if (/^(https?|www)/.test(m[0])) continue;
      found.plainMath.push({text: m[0], context: t.data.slice(Math.max(0, m.index - 12),
                                                             m.index + 20).trim()});
    }
  }
  return found;
}"""

# Before a screenshot: nothing focused (a focused skip link shows its bar over the page)
# and the page at its top (the sticky header is painted where the window last was).
UNFOCUS_JS = """() => {
  if (document.activeElement && document.activeElement !== document.body) {
    document.activeElement.blur();
  }
  window.scrollTo(0, 0);
}"""

# What today's notebooks fail of the design checks of issue 36, until the second pass
# re-executes and edits the chapters: (page, check, key, what was measured). Checks:
# "old-style-figure" — a notebook figure drawn before the book's style (no record of its
# smallest font, no dark version; the value is its text size today, measured by executing
# a copy of the chapter); "math-backslash", "wide-equation" — a formula, by its first 40
# characters; "unit-wrap" — a table cell's first 40 characters and its number and unit.
# The second pass empties it.
_CODE_MATH = "章のコードが書く表・ラベル（Markdown でない）"
KNOWN_UNTIL_PASS_2: tuple[tuple[str, str, str, str], ...] = ()

# axe-core's impacts, worst first; a violation of the first two fails the test.
AXE_IMPACTS = ("critical", "serious", "moderate", "minor")
AXE_FAILING = ("critical", "serious")

# Violations left on purpose: (rule id, a substring of the node's CSS target, the reason).
# Keep this list short and every reason true; a new violation never matches by accident
# because both the rule and the node must match.
AXE_EXCEPTIONS: tuple[tuple[str, str, str], ...] = ()

# The theme's own switch: pydata-sphinx-theme reads localStorage "mode" (light/dark/auto)
# and "theme" before the page is drawn. A reader who chose dark mode has both set.
# The licence line of the page's footer: is it drawn, and what does it link?
FOOTER_JS = """() => {
  const footer = document.querySelector(".bd-footer-content .extra_footer");
  if (!footer) return null;
  const box = footer.getBoundingClientRect();
  return {
    shown: box.width > 0 && box.height > 0
      && footer.checkVisibility({checkOpacity: true, checkVisibilityCSS: true}),
    links: [...footer.querySelectorAll("a[href]")].map(a => [a.innerText.trim(), a.href]),
  };
}"""
FOOTER_LINKS = {"CC BY 4.0": CONTENT_LICENCE_URL, "MIT ライセンス": CODE_LICENCE_URL}

DARK_MODE_JS = 'localStorage.setItem("mode", "dark"); localStorage.setItem("theme", "dark");'

# Runs axe-core (already injected) on the whole page; returns its violations, trimmed.
# The folded solutions (sphinx-togglebutton hides a dropdown admonition's body with the
# class toggle-hidden) are unfolded while axe runs, so their text and code are checked too.
# Transitions are switched off meanwhile: the unfold fades in over 0.3 s, and axe measuring
# half-transparent text would report contrast that no reader sees (and flakily).
AXE_RUN_JS = """async () => {
  const still = document.createElement("style");
  still.textContent = "*, *::before, *::after { transition: none !important; " +
                      "animation: none !important; }";
  document.head.appendChild(still);
  const folded = [...document.querySelectorAll(".toggle-hidden")];
  folded.forEach(e => e.classList.remove("toggle-hidden"));
  await new Promise(done => setTimeout(done, 100));  // the page's observers see the unfold
  const result = await axe.run(document, {resultTypes: ["violations"]});
  folded.forEach(e => e.classList.add("toggle-hidden"));
  still.remove();
  return {theme: document.documentElement.dataset.theme || "",
          violations: result.violations.map(v => ({
            id: v.id, impact: v.impact, help: v.help,
            nodes: v.nodes.map(n => ({target: n.target.join(" "), impact: n.impact,
                                      summary: (n.failureSummary || "").slice(0, 300)}))}))};
}"""


def axe_exception(rule: str, target: str) -> str | None:
    """The reason a violation of ``rule`` on the node ``target`` is left, else None."""
    for rule_id, fragment, reason in AXE_EXCEPTIONS:
        if rule == rule_id and fragment in target:
            return reason
    return None


def run_axe(tab, mode: str) -> tuple[list[str], dict[str, int], list[str]]:
    """axe-core on the open page: failing violations, counts per impact, excused ones.

    Counts are of nodes (one violation of a rule on three nodes counts three), by the
    node's own impact.
    """
    tab.add_script_tag(path=str(AXE_LOCAL))
    result = tab.evaluate(AXE_RUN_JS)
    problems, excused = [], []
    counts = dict.fromkeys(AXE_IMPACTS, 0)
    if result["theme"] != mode:
        problems.append(f"axe（{mode}）：テーマが {result['theme']!r} です（{mode} のはず）")
    for violation in result["violations"]:
        for node in violation["nodes"]:
            impact = node["impact"] or violation["impact"] or "minor"
            counts[impact] += 1
            if impact not in AXE_FAILING:
                continue
            line = (f"axe（{mode}）{violation['id']} [{impact}] {node['target']}："
                    f"{violation['help']}")
            if reason := axe_exception(violation["id"], node["target"]):
                excused.append(f"{line}（例外：{reason}）")
            else:
                problems.append(f"{line} — {node['summary']}")
    return problems, counts, excused


def fontconfig_with_japanese(folder: Path) -> Path:
    """A fontconfig file: the system's fonts plus IPAexGothic from matplotlib-fontja.

    The test machine has no Japanese system font; without one the screenshots would show
    empty boxes. The same font draws the book's figures.
    """
    fonts = Path(matplotlib_fontja.__file__).parent / "fonts"
    path = folder / "fonts.conf"
    path.write_text(
        '<?xml version="1.0"?>\n<!DOCTYPE fontconfig SYSTEM "fonts.dtd">\n<fontconfig>\n'
        '  <include ignore_missing="yes">/etc/fonts/fonts.conf</include>\n'
        f"  <dir>{fonts}</dir>\n  <cachedir>{folder / 'cache'}</cachedir>\n</fontconfig>\n",
        encoding="utf-8")
    return path


def missing_chromium() -> str | None:
    """The problem to report when Chromium is not installed, else None."""
    if Path(CHROMIUM).exists():
        return None
    return f"{CHROMIUM} がありません（Debian なら apt-get install chromium）"


def japanese_context(playwright, folder: Path, height: int = 900):
    """A Japanese browser context of headless Chromium that draws Japanese text.

    ``folder`` holds the fontconfig file (see :func:`fontconfig_with_japanese`).
    """
    env = {**os.environ, "FONTCONFIG_FILE": str(fontconfig_with_japanese(folder))}
    browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, env=env)
    context = browser.new_context(viewport={"width": 1280, "height": height}, locale="ja-JP")
    context.set_default_timeout(30_000)
    return browser, context


class QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def serve(site: Path) -> ThreadingHTTPServer:
    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(QuietHandler, directory=str(site)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def expected_widgets(page: str) -> int:
    path = ROOT / f"{page}.ipynb"
    if not path.exists():
        return 0
    nb = nbformat.read(path, as_version=4)
    return sum(WIDGET_TAG in cell.metadata.get("tags", []) for cell in nb.cells)


class Router:
    """Local requests pass, the MathJax CDN is answered from disk, the rest gets an empty body.

    The machine has no network: a script from a CDN (e.g. the ipywidgets embedder that
    myst-nb adds to a page whose notebook stores widget state) would fail to load and log a
    console error that a reader online never sees. Those URLs, and console errors about them
    (an empty body fails a script's integrity check), are listed, not failed.
    """

    def __init__(self, base: str):
        self.base = base
        self.blocked: set[str] = set()
        self.offline_errors: list[str] = []

    def explains(self, text: str, url: str) -> bool:
        """Whether a console error is about a resource answered offline (e.g. its integrity)."""
        return any(blocked in text or blocked == url for blocked in self.blocked)

    def __call__(self, route):
        url = route.request.url
        if url.startswith(self.base):
            route.continue_()
        elif url.startswith(MATHJAX_CDN):
            local = MATHJAX_LOCAL / urlparse(url).path.removeprefix(urlparse(MATHJAX_CDN).path)
            if local.is_file():
                route.fulfill(path=str(local))
            else:
                self.blocked.add(url)
                route.abort()
        else:  # offline: answer with an empty body, as if the resource had no content
            self.blocked.add(url)
            route.fulfill(status=200, body="", content_type=mimetypes.guess_type(url)[0])


# The state a live figure shows and the one visible image of it (of two blocks of
# pictures, light and dark, the page's colour shows one).
LIVE_STATE_JS = """figure => {
  const shown = [...figure.querySelectorAll("img.attnlab-live-state")]
    .filter(img => img.checkVisibility());
  return {state: Number(figure.dataset.state), shown: shown.map(img => img.getAttribute("src")),
          loaded: shown.every(img => img.naturalWidth > 0)};
}"""


class PureRenders:
    """PNG of every state of every live figure, drawn here with the pure render, as the
    book draws it for a light page (``attnlab.live_book.state_pngs``, without its cache)."""

    def __init__(self):
        self.cache: dict[tuple[str, int], bytes] = {}
        self.figures: dict[str, tuple] = {}

    def png(self, name: str, number: int) -> bytes:
        from attnlab.plotting import PNG_SCALE, figure_to_png
        from attnlab.widgets import WIDGETS
        from attnlab.widgets.core import render

        if name not in self.figures:
            figure = WIDGETS[name]()
            self.figures[name] = (figure, list(figure.states()))
        if (name, number) not in self.cache:
            figure, states = self.figures[name]
            fig = render(figure.plot, **states[number])  # as state_pngs draws the light one
            self.cache[name, number] = figure_to_png(fig, scale=PNG_SCALE)
        return self.cache[name, number]


def _move_control(tab, control, kind: str, index: int) -> None:
    """Set one HTML control of a live figure to its value number ``index``, as a reader does."""
    if kind == "slider":  # the keyboard: Home, then one arrow key per step
        handle = control.locator("input")
        handle.focus()
        tab.keyboard.press("Home")
        for _ in range(index):
            tab.keyboard.press("ArrowRight")
    elif kind == "toggle":
        control.locator("button").nth(index).click()
    elif kind == "dropdown":
        control.locator("select").select_option(str(index))
    elif kind == "checkbox":
        box = control.locator("input")
        if box.is_checked() != bool(index):
            box.click()


def check_live_figures(tab, site: Path, page: str, renders: PureRenders) -> tuple[list[str], int]:
    """Move every control of every live figure on the page through its values.

    After each move exactly one image shows, it is loaded, it changed when the state did,
    and its file is the pure render of the state the controls select. Returns the problems
    and the number of moves.
    """
    problems, moves = [], 0
    figures = tab.locator("div.attnlab-live")
    for f in range(figures.count()):
        figure = figures.nth(f)
        name = figure.locator(".attnlab-live-controls").get_attribute("data-figure")
        controls = figure.locator(".attnlab-live-control")
        counts = [int(controls.nth(c).get_attribute("data-count"))
                  for c in range(controls.count())]
        defaults = [int(controls.nth(c).get_attribute("data-default"))
                    for c in range(controls.count())]
        where = f"ライブ図 {name}"
        for c in range(controls.count()):
            control = controls.nth(c)
            kind = control.get_attribute("data-kind")
            order = list(range(counts[c])) + [defaults[c]]  # every value, then back
            previous = figure.evaluate(LIVE_STATE_JS)
            for index in order:
                _move_control(tab, control, kind, index)
                moves += 1
                shown = figure.evaluate(LIVE_STATE_JS)
                indices = list(defaults)
                indices[c] = index
                number = 0
                for count, i in zip(counts, indices, strict=True):
                    number = number * count + i
                label = f"{where}、{control.get_attribute('data-name')}={index}"
                if shown["state"] != number:
                    problems.append(f"{label}：状態 {shown['state']}（期待 {number}）")
                if len(shown["shown"]) != 1 or not shown["loaded"]:
                    problems.append(f"{label}：表示されている画像が {len(shown['shown'])} 枚")
                    continue
                if (number != previous["state"]) == (shown["shown"] == previous["shown"]):
                    problems.append(f"{label}：状態と画像の変化が食い違います")
                file = (site / page).parent / shown["shown"][0]
                if file.resolve().read_bytes() != renders.png(name, number):
                    problems.append(f"{label}：画像が純粋な描画と一致しません（{file.name}）")
                previous = shown
    return problems, moves


# A shown picture's box and whether it has arrived (a lazy picture on its way has no
# naturalWidth; with its width and height attributes it still holds its box).
LIVE_BOX_JS = """figure => {
  const img = [...figure.querySelectorAll("img.attnlab-live-state")]
    .find(img => img.checkVisibility());
  const box = img.getBoundingClientRect();
  return {height: box.height, width: box.width, loaded: img.complete && img.naturalWidth > 0,
          figure: figure.getBoundingClientRect().height};
}"""

# The picture of state `number` in the block the page shows, loaded or not.
LIVE_LOADED_JS = """([figure, number]) => {
  const block = [...figure.querySelectorAll(".attnlab-live-images")]
    .find(b => b.checkVisibility());
  const img = block.querySelectorAll("img.attnlab-live-state")[number];
  return img.complete && img.naturalWidth > 0;
}"""


def check_live_on_a_slow_network(context, base: str, page: str) -> list[str]:
    """The first live figure of ``page`` once the connection turns slow (400 ms, 400 kbit/s).

    A reader who reaches for the controls gets the neighbouring states ahead of time, so the
    first move shows a picture that is already there; a jump to a state far away shows a
    picture on its way, which must hold its box (no collapse, no jump of the page).
    """
    problems: list[str] = []
    tab = context.new_page()
    tab.goto(f"{base}/{page}.html", wait_until="load")
    # the reader's connection turns slow after the page is there: the moves are what we time
    cdp = context.new_cdp_session(tab)
    cdp.send("Network.enable")
    cdp.send("Network.emulateNetworkConditions", {
        "offline": False, "latency": 400, "downloadThroughput": 50_000,
        "uploadThroughput": 50_000})
    figure = tab.locator("div.attnlab-live").first
    figure.scroll_into_view_if_needed()
    tab.wait_for_function("f => { const img = [...f.querySelectorAll('img.attnlab-live-state')]"
                          ".find(i => i.checkVisibility()); return img && img.naturalWidth > 0; }",
                          arg=figure.element_handle(), timeout=60_000)
    control = figure.locator(".attnlab-live-control").first
    kind = control.get_attribute("data-kind")
    count = int(control.get_attribute("data-count"))
    default = int(control.get_attribute("data-default"))
    strides = [int(c.get_attribute("data-count"))
               for c in figure.locator(".attnlab-live-control").all()]
    stride = 1
    for c in strides[1:]:
        stride *= c
    state = int(figure.get_attribute("data-state"))
    step = 1 if default < count - 1 else -1
    figure.hover()  # a reader reaches for the controls
    try:
        tab.wait_for_function(LIVE_LOADED_JS, arg=[figure.element_handle(),
                                                   state + step * stride], timeout=60_000)
    except Exception:  # noqa: BLE001 - reported as a finding below
        problems.append(f"低速回線：ライブ図の隣の状態 {state + step * stride} が"
                        "先に読み込まれません")
    before = figure.evaluate(LIVE_BOX_JS)
    _move_control(tab, control, kind, default + step)
    after = figure.evaluate(LIVE_BOX_JS)
    if not after["loaded"]:
        problems.append("低速回線：1 つ隣の状態の画像が、操作の時点でまだ届いていません")
    far = 0 if step < 0 else count - 1
    if abs(far - (default + step)) > 1:
        _move_control(tab, control, kind, far)
        jumped = figure.evaluate(LIVE_BOX_JS)
        moved = max(abs(jumped["height"] - before["height"]),
                    abs(jumped["figure"] - before["figure"]))
        if moved > 1:
            problems.append(f"低速回線：遠い状態に動かすと画像の枠が {before['height']:.0f} px"
                            f" から {jumped['height']:.0f} px に変わります"
                            "（読み込み中も大きさを保つ）")
    tab.close()
    return problems


class DesignFindings:
    """Findings of the design checks: those in :data:`KNOWN_UNTIL_PASS_2` are listed, not
    failed; the figures' measured text sizes are kept for the summary."""

    def __init__(self, known: tuple[tuple[str, str, str, str], ...] = KNOWN_UNTIL_PASS_2):
        self.known = {(page, check, key): note for page, check, key, note in known}
        self.seen: set[tuple[str, str, str]] = set()
        self.listed: list[str] = []
        self.sizes: dict[tuple[str, str], float] = {}

    def add(self, problems: list[str], page: str, check: str, key: str, message: str) -> None:
        """A finding: a problem, unless it is a known one."""
        self.seen.add((page, check, key))
        note = self.known.get((page, check, key))
        if note is None:
            problems.append(message)
        else:
            self.listed.append(f"{page}: {message}（{note}）")

    def stale(self) -> list[str]:
        """Known findings that did not occur: the list must shrink with the chapters."""
        return [f"{page}: KNOWN_UNTIL_PASS_2 の ({check!r}, {key!r}) はもう起きません。"
                "リストから消してください" for page, check, key in self.known
                if (page, check, key) not in self.seen]


def figure_text_px(png: Path, shown: float, natural: int) -> float | None:
    """CSS pixels of a figure's smallest text as the page shows it; None without a record.

    The PNG records its smallest font (points) and the dpi it was drawn at: the text is
    ``points / 72 * dpi`` pixels of the image, shown at ``shown / natural`` of its size.
    """
    text = Image.open(png).text
    if PNG_FONT_KEY not in text or PNG_DPI_KEY not in text or natural <= 0:
        return None
    return float(text[PNG_FONT_KEY]) / 72 * float(text[PNG_DPI_KEY]) * shown / natural


def check_figures(tab, site: Path | None, page: str, design: DesignFindings,
                  problems: list[str]) -> list[float]:
    """The smallest text of every figure shown on the page, in CSS pixels (see the module
    docstring); a figure under :data:`MIN_TEXT_PX` or without the record is a finding."""
    sizes = []
    if site is None:
        return sizes
    for figure in tab.evaluate(FIGURE_TEXT_JS):
        key = figure["figure"] or figure["src"]
        px = figure_text_px(((site / page).parent / figure["src"]).resolve(),
                            figure["shown"], figure["natural"])
        if px is None or not figure["styled"]:
            design.add(problems, page, "old-style-figure", key,
                       f"図 {key} は本の様式で描かれていません（最小の字の記録も"
                       "ダークモードの版もない。make notebooks で保存し直してください）")
            continue
        sizes.append(px)
        design.sizes[page, key] = px
        if px < MIN_TEXT_PX:
            design.add(problems, page, "text-size", key,
                       f"図 {key} の最小の字が {px:.1f} px です（{MIN_TEXT_PX:g} px 以上に）")
    return sizes


#: On a phone, the room a table's first number column must have between its start and
#: the right edge of the column (CSS px, at the table's first scroll position): a number
#: of 4 figures (48 px) and the 2.5rem fade of a table that scrolls (third read, N2).
TABLE_NUMBER_ROOM = 88

#: The page whose tables (class attnlab-notation) must show their 「意味」 on a phone.
NOTATION_PAGE = "book/notation"

#: The phone of issue 48: 390 CSS pixels wide, a touch screen, one device pixel per CSS
#: pixel (the figures' text size is in CSS pixels either way).
PHONE = {"viewport": {"width": 390, "height": 844}, "is_mobile": True, "has_touch": True,
         "device_scale_factor": 1}


def check_layout(tab, site: Path | None, page: str, where: str, design: "DesignFindings",
                 problems: list[str]) -> str:
    """The geometry checks of :data:`LAYOUT_JS` at the tab's width and colour (``where``
    names them: 「1280 px」「390 px、ダーク」); returns a summary."""
    layout = tab.evaluate(LAYOUT_JS)
    # the screen's width: a phone widens its layout viewport (innerWidth) to a wide page
    layout["window"] = (tab.viewport_size or {}).get("width", layout["window"])
    for item in layout["squashed"]:
        problems.append(f"{where}：図 {item['key']} の縦横比が {item['shown']:.3f} です"
                        f"（画像は {item['natural']:.3f}、{item['off']:.1%} の歪み）")
    if layout["pageWidth"] > layout["window"]:
        problems.append(f"{where}：ページの幅 {layout['pageWidth']} px が画面"
                        f" {layout['window']} px より広く、ページ全体が横に動きます")
    for item in layout["clipped"]:
        design.add(problems, page, "clipped-equation", item["tex"][:40],
                   f"{where}：別行の数式が枠で {item['over']} px 切れています"
                   f"：{item['tex'][:60]!r}")
    for item in layout["cut"]:
        problems.append(f"{where}：表が枠より {item['over']} px 広いのに、スクロールの手がかりが"
                        f"ありません（フェード {item['cue']}、tabIndex {item['tab']}、"
                        f"注記 {item['note']}）：{item['table']!r}")
    # third read, N1 + N2: tables within their room at a desktop width; on a phone the
    # first number column starts within the screen (TABLE_NUMBER_ROOM px before the edge)
    for item in layout["tables"]:
        if layout["window"] >= 1200 and item["width"] > item["room"] + 1:
            problems.append(f"{where}：表の幅 {item['width']} px が使える幅 {item['room']} px"
                            f"より広い：{item['title']!r}")
        if (layout["window"] <= 600 and item["numberRoom"] is not None
                and item["numberRoom"] < TABLE_NUMBER_ROOM):
            problems.append(f"{where}：表の最初の数の列の始まりから右端まで {item['numberRoom']}"
                            f" px しかなく、数が見えません（{TABLE_NUMBER_ROOM} px 以上に）："
                            f"{item['title']!r}")
    # the 記号表 on a phone (second read, minor 3): each row's 「意味」 inside the screen
    # (_static/attnlab-typography.css stacks the rows of .attnlab-notation under 600 px)
    notation = layout["notation"]
    if layout["window"] <= 600:
        if page == NOTATION_PAGE and notation["tables"] == 0:
            problems.append(f"{where}：記号表に .attnlab-notation の表がありません"
                            "（book/notation.md が表をその container に入れる）")
        for item in notation["hidden"]:
            problems.append(f"{where}：記号表の行の「意味」が画面の外です（左 {item['left']}"
                            f" px、右 {item['right']} px、画面 {layout['window']} px）："
                            f"{item['row']!r}")
    small = 0
    if site is not None:
        for figure in layout["figures"]:
            px = figure_text_px(((site / page).parent / figure["src"]).resolve(),
                                figure["shown"], figure["natural"])
            if px is None or px >= MIN_TEXT_PX:
                continue
            small += 1
            if not figure["opens"]:
                problems.append(f"{where}：図 {figure['key']} の字が {px:.1f} px で、"
                                "原寸で開くリンクもありません")
    return (f"{where}：図 {len(layout['figures'])}（うち小さい字で原寸リンク {small}）、"
            f"ページ幅 {layout['pageWidth']} px")


def check_page_text(tab, page: str, design: "DesignFindings", problems: list[str]) -> None:
    """:data:`PAGE_TEXT_JS`: numbers split from their counters, plain-text math."""
    text = tab.evaluate(PAGE_TEXT_JS)
    for context in text["split"]:
        problems.append(f"数と助数詞の間の空白で行が分かれうります（U+00A0 に）：{context!r}")
    for item in text["plainMath"]:
        design.add(problems, page, "plain-math", f"{item['text']}|{item['context'][:30]}",
                   f"下線つきの記号が数式でなく地の文に書かれています：{item['text']!r}"
                   f"（{item['context']!r}）")


def check_page_phone(context, router: "Router", base: str, page: str, site: Path | None,
                     mode: str, design: "DesignFindings") -> tuple[list[str], str]:
    """The page on a phone (:data:`PHONE`) in ``mode``: :func:`check_layout` and a
    screenshot (``…__phone.png``, ``…__phone_dark.png``)."""
    problems: list[str] = []
    tab = context.new_page()
    _watch(tab, router, base, page, problems)
    tab.goto(f"{base}/{page}.html", wait_until="load")
    tab.evaluate(IMAGES_JS)
    where = "390 px" + ("、ダーク" if mode == "dark" else "")
    summary = check_layout(tab, site, page, where, design, problems)
    SCREENSHOTS.mkdir(exist_ok=True)
    tab.evaluate(UNFOCUS_JS)
    suffix = "__phone" if mode == "light" else "__phone_dark"
    tab.screenshot(path=str(SCREENSHOTS / f"{page.replace('/', '__')}{suffix}.png"),
                   full_page=True)
    tab.close()
    return problems, summary


def _watch(tab, router: "Router", base: str, page: str, problems: list[str]) -> None:
    """Console errors, exceptions, failed requests and error responses become problems."""
    def on_console(message):
        if message.type != "error":
            return
        if router.explains(message.text, message.location.get("url", "")):
            router.offline_errors.append(f"{page}: {message.text[:160]}")
        else:
            problems.append(f"コンソールのエラー：{message.text}")

    tab.on("console", on_console)
    tab.on("pageerror", lambda e: problems.append(f"JavaScript の例外：{e}"))
    tab.on("requestfailed", lambda r: problems.append(
        f"読み込み失敗：{r.url}（{r.failure}）") if r.url.startswith(base) else None)
    tab.on("response", lambda r: problems.append(f"HTTP {r.status}：{r.url}")
           if r.url.startswith(base) and r.status >= 400 else None)


def check_page(context, router: "Router", base: str, page: str,
               site: Path | None = None, renders: "PureRenders | None" = None,
               axe_counts: dict | None = None, excused: list[str] | None = None,
               design: "DesignFindings | None" = None) -> tuple[list[str], str]:
    problems: list[str] = []
    design = design if design is not None else DesignFindings()
    tab = context.new_page()
    _watch(tab, router, base, page, problems)
    start = time.perf_counter()
    tab.goto(f"{base}/{page}.html", wait_until="load")

    images = tab.evaluate(IMAGES_JS)
    problems += [f"画像が読み込めません：{src}" for src in images["broken"]]

    math = tab.evaluate(MATH_JS)
    problems += [f"数式が描画されていません：{text!r}" for text in math["unrendered"]]
    problems += [f"数式の記号がそのまま残っています：{text!r}" for text in math["raw"]]
    if math["errors"]:
        problems.append(f"MathJax のエラーが {math['errors']} 個あります")

    shown = tab.evaluate(WIDGETS_JS)
    widgets, notes = shown["widgets"], shown["notes"]
    want = expected_widgets(page)
    if len(widgets) != want:
        problems.append(f"ウィジェットの図が {len(widgets)} 個です"
                        f"（ノートブックのタグ {WIDGET_TAG}：{want} 個）")
    for number, widget in enumerate(widgets, start=1):
        if not widget["images"] or 0 in widget["images"]:
            problems.append(f"ウィジェット {number} の図が表示されていません")
        if "Binder" in widget["caption"] or "Colab" in widget["caption"]:
            problems.append(f"ウィジェット {number} のキャプションが Binder と Colab の注記を"
                            "繰り返しています（ページに 1 回だけ書きます）")
    if len(notes) != (1 if widgets else 0):
        problems.append(f"Binder と Colab の注記が {len(notes)} 個です"
                        f"（ライブ図のあるページに 1 個）")
    for note in notes:
        if note.strip() != LIVE_NOTE or "Binder" not in note or "Colab" not in note:
            problems.append(f"Binder と Colab の注記が LIVE_NOTE と違います：{note[:60]!r}")

    sizes = check_figures(tab, site, page, design, problems)
    math_layout = tab.evaluate(MATH_LAYOUT_JS)
    for tex in math_layout["backslash"]:
        design.add(problems, page, "math-backslash", tex[:40],
                   f"数式にバックスラッシュがそのまま描かれています：{tex[:60]!r}")
    for item in math_layout["wide"]:
        design.add(problems, page, "wide-equation", item["tex"][:40],
                   f"別行の数式が列より {item['over']} px 広く、切れます：{item['tex'][:60]!r}")
    for item in tab.evaluate(UNIT_WRAP_JS):
        design.add(problems, page, "unit-wrap", f"{item['cell']}|{item['text']}",
                   f"表のセルで数と単位が別の行に分かれています：{item['text']!r}"
                   f"（{item['cell']!r}）")

    layout = check_layout(tab, site, page, "1280 px", design, problems)
    check_page_text(tab, page, design, problems)

    overflow = tab.evaluate(OVERFLOW_JS)
    for block in overflow["wide"]:
        kind = "出力" if block["output"] else "コード"
        problems += [f"{kind}の行が枠からはみ出して横にスクロールします：{line[:60]!r}"
                     for line in block["lines"]]

    footer = tab.evaluate(FOOTER_JS)
    if footer is None or not footer["shown"]:
        problems.append("ページの下にライセンスの行（html.extra_footer）が表示されていません")
    elif dict(footer["links"]) != FOOTER_LINKS:
        problems.append(f"ページの下のライセンスのリンクが違います：{footer['links']}")

    live_problems, moves = ([], 0) if site is None else check_live_figures(
        tab, site, page, renders or PureRenders())
    problems += live_problems

    counts = _axe_on(tab, page, "light", problems, axe_counts, excused)

    SCREENSHOTS.mkdir(exist_ok=True)
    tab.evaluate(UNFOCUS_JS)
    tab.screenshot(path=str(SCREENSHOTS / f"{page.replace('/', '__')}.png"), full_page=True)
    tab.close()
    smallest = f"{min(sizes):.1f} px" if sizes else "—"
    summary = (f"画像 {images['count']}、数式 {math['count']}、ウィジェット {len(widgets)}、"
               f"図の最小の字 {smallest}、別行の数式の最大幅 {math_layout['widest']:.0%}、"
               f"コードと出力の枠 {overflow['count']}、"
               f"ライブ図の操作 {moves} 回、axe {_counts_text(counts)}、{layout}、"
               f"{time.perf_counter() - start:.1f} 秒")
    return problems, summary


def _axe_on(tab, page: str, mode: str, problems: list[str], axe_counts: dict | None,
            excused: list[str] | None) -> dict[str, int]:
    """axe on ``tab`` in ``mode``: its violations join ``problems``, its counts and
    excused findings are recorded for the page; returns the counts."""
    axe_problems, counts, left = run_axe(tab, mode)
    problems += axe_problems
    if axe_counts is not None:
        axe_counts.setdefault(page, {})[mode] = counts
    if excused is not None:
        excused += [f"{page}: {line}" for line in left]
    return counts


def _counts_text(counts: dict[str, int]) -> str:
    return " ".join(f"{impact} {counts[impact]}" for impact in AXE_IMPACTS)


def check_page_dark(context, router: "Router", base: str, page: str,
                    axe_counts: dict | None = None, excused: list[str] | None = None,
                    design: "DesignFindings | None" = None) -> tuple[list[str], str]:
    """The page in dark mode (``context`` has :data:`DARK_MODE_JS`): the figures' dark
    versions, axe and a screenshot."""
    problems: list[str] = []
    design = design if design is not None else DesignFindings()
    tab = context.new_page()
    _watch(tab, router, base, page, problems)
    tab.goto(f"{base}/{page}.html", wait_until="load")
    tab.evaluate(IMAGES_JS)
    math = tab.evaluate(MATH_JS)
    if math["unrendered"] or math["errors"]:
        problems.append("ダークモードで数式が描画されていません")
    for figure in tab.evaluate(FIGURE_TEXT_JS):
        key = figure["figure"] or figure["src"]
        if not figure["styled"]:
            design.add(problems, page, "old-style-figure", key,
                       f"図 {key} にダークモードの版がありません（本の様式で描かれていないか、"
                       "make notebooks 以外で保存された）")
            continue
        transparent = figure["background"] in ("transparent", "rgba(0, 0, 0, 0)")
        if figure["filter"] != "none" or not transparent or figure["padding"] > 0:
            problems.append(f"図 {key} にダークモードのパネルかフィルターがかかっています（"
                            f"filter {figure['filter']}、背景 {figure['background']}、"
                            f"余白 {figure['padding']} px）")
    layout = check_layout(tab, None, page, "1280 px、ダーク", design, problems)
    counts = _axe_on(tab, page, "dark", problems, axe_counts, excused)
    tab.evaluate(UNFOCUS_JS)
    tab.screenshot(path=str(SCREENSHOTS / f"{page.replace('/', '__')}__dark.png"),
                   full_page=True)
    tab.close()
    return problems, f"axe {_counts_text(counts)}、{layout}"


def check_search(context, base: str) -> list[str]:
    problems = []
    tab = context.new_page()
    for term in SEARCH_TERMS:
        tab.goto(f"{base}/search.html?q={quote(term)}", wait_until="load")
        try:  # searchtools.js sets the title to "Search Results" once the search has finished
            tab.wait_for_function(
                "() => { const h = document.querySelector('#search-results h2');"
                " return h && h.textContent.startsWith(_('Search Results')); }",
                timeout=20_000)
        except Exception:  # noqa: BLE001 - a timeout is reported as a problem
            problems.append(f"検索「{term}」が終わりません")
            continue
        hrefs = tab.eval_on_selector_all("#search-results ul.search li a",
                                         "links => links.map(a => a.getAttribute('href'))")
        if not any(SEARCH_PAGE in href for href in hrefs):
            problems.append(f"検索「{term}」の結果に {SEARCH_PAGE} がありません：{hrefs}")
        else:
            print(f"  検索「{term}」：{len(hrefs)} 件、{SEARCH_PAGE} を含む")
    tab.screenshot(path=str(SCREENSHOTS / "search.png"), full_page=True)
    tab.close()
    return problems


def main(site: Path) -> int:
    if not (site / "index.html").exists():
        print(f"問題: {site} に本がありません（make build を先に）", file=sys.stderr)
        return 1
    if problem := missing_chromium():
        print(f"問題: {problem}", file=sys.stderr)
        return 1
    if not (MATHJAX_LOCAL / "tex-mml-chtml.js").exists():
        print(f"問題: {MATHJAX_LOCAL} がありません（tests/browser で npm ci）", file=sys.stderr)
        return 1
    if not AXE_LOCAL.exists():
        print(f"問題: {AXE_LOCAL} がありません（tests/browser で npm ci）", file=sys.stderr)
        return 1
    server = serve(site)
    base = f"http://127.0.0.1:{server.server_address[1]}"
    router = Router(base)
    failed: list[str] = []
    failed_checks = 0
    start = time.perf_counter()
    fonts_dir = tempfile.TemporaryDirectory()
    try:
        with sync_playwright() as playwright:
            browser, context = japanese_context(playwright, Path(fonts_dir.name))
            context.route("**/*", router)
            pages = toc_pages()
            renders = PureRenders()
            axe_counts: dict[str, dict[str, dict[str, int]]] = {}
            excused: list[str] = []
            design = DesignFindings()
            for page in pages:
                problems, summary = check_page(context, router, base, page, site, renders,
                                               axe_counts, excused, design)
                print(f"  {'OK' if not problems else '失敗'} {page}（{summary}）")
                failed += [f"{page}: {p}" for p in problems]
                failed_checks += bool(problems)
            live_pages = [page for page in pages if expected_widgets(page)]
            slow = check_live_on_a_slow_network(context, base, live_pages[0]) if live_pages else []
            print(f"  {'OK' if not slow else '失敗'} {live_pages[0] if live_pages else '—'}"
                  "（低速回線のライブ図：隣の状態の先読み、読み込み中の枠）")
            failed += [f"低速回線: {p}" for p in slow]
            failed_checks += bool(slow)
            search_problems = check_search(context, base)
            failed += [f"search: {p}" for p in search_problems]
            failed_checks += bool(search_problems)
            dark = browser.new_context(viewport={"width": 1280, "height": 900},
                                       locale="ja-JP")
            dark.set_default_timeout(30_000)
            dark.add_init_script(DARK_MODE_JS)
            dark.route("**/*", router)
            for page in pages:
                problems, summary = check_page_dark(dark, router, base, page,
                                                    axe_counts, excused, design)
                print(f"  {'OK' if not problems else '失敗'} {page}、ダークモード（{summary}）")
                failed += [f"{page}（ダーク）: {p}" for p in problems]
                failed_checks += bool(problems)
            for mode in ("light", "dark"):
                phone = browser.new_context(**PHONE, locale="ja-JP")
                phone.set_default_timeout(30_000)
                if mode == "dark":
                    phone.add_init_script(DARK_MODE_JS)
                phone.route("**/*", router)
                for page in pages:
                    problems, summary = check_page_phone(phone, router, base, page, site,
                                                         mode, design)
                    print(f"  {'OK' if not problems else '失敗'} {page}（{summary}）")
                    failed += [f"{page}（スマートフォン、{mode}）: {p}" for p in problems]
                    failed_checks += bool(problems)
                phone.close()
            browser.close()
        failed += design.stale()
        failed_checks += bool(design.stale())
    finally:
        server.shutdown()
        fonts_dir.cleanup()
    for url in sorted(router.blocked):
        print(f"  外部への要求（オフラインのため空で応答）：{url}")
    for error in router.offline_errors:
        print(f"  そのためのコンソールのエラー（数えない）：{error}")
    for line in excused:
        print(f"  axe の例外（数えない）：{line}")
    for line in design.listed:
        print(f"  既知（KNOWN_UNTIL_PASS_2、数えない）：{line}")
    for (page, figure), px in sorted(design.sizes.items()):
        print(f"  図の最小の字：{page} {figure} {px:.1f} px")
    SCREENSHOTS.mkdir(exist_ok=True)
    (SCREENSHOTS / "axe.json").write_text(
        json.dumps(axe_counts, ensure_ascii=False, indent=1), encoding="utf-8")
    for problem in failed:
        print("問題:", problem, file=sys.stderr)
    seconds = time.perf_counter() - start
    print(f"browser: {4 * len(pages) + 2 - failed_checks} passed, {failed_checks} failed")
    if failed:
        print(f"ブラウザの検査：{len(failed)} 個の問題（{seconds:.0f} 秒）", file=sys.stderr)
        return 1
    print(f"ブラウザの検査：{len(pages)} ページと検索 OK（{seconds:.0f} 秒、"
          f"スクリーンショットは {SCREENSHOTS.relative_to(ROOT)}/）")
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "_build" / "html"))
