// The book's line breaking where CSS alone cannot do it (issue 36); the project's own
// script.
// 1. An inline formula keeps the punctuation around it: a line must not start with 、。）
//    or end with （ because a formula sits next to it. Each inline formula (Sphinx's
//    span.math) and the punctuation just before or after it are wrapped in
//    span.attnlab-nowrap (white-space: nowrap, _static/attnlab-typography.css). MathJax
//    typesets the formula where it is, before or after this runs.
// 2. In a table cell, a number keeps its unit (1 回, 約 12 分): the space between them
//    becomes a no-break space.
// 3. A box that scrolls sideways (a table wider than the column, a long display equation)
//    says so (issue 48, M2): the class attnlab-scrolls-right / -left fades the side that
//    hides more, a table gets a short note under it, and a ResultTable too wide loses
//    padding first (attnlab-table-tight), then, if still at most 15 % too wide, sets its
//    text a little smaller (attnlab-table-small). Measured again on resize and scroll.
// 4. Inline code breaks only after _ [ , : (a <wbr> there; issue 48).
// 5. A page title on a phone breaks between words, not inside one (issue 48, m7).
(function () {
  "use strict";

  var AFTER = /^[、。，．,.)）」』】：；！？!?%％]+/;
  var BEFORE = /[（(「『【]+$/;

  function glue(math) {
    if (math.parentElement && math.parentElement.classList.contains("attnlab-nowrap")) return;
    var next = math.nextSibling, prev = math.previousSibling;
    var after = next && next.nodeType === 3 ? AFTER.exec(next.data) : null;
    var before = prev && prev.nodeType === 3 ? BEFORE.exec(prev.data) : null;
    if (!after && !before) return;
    var box = document.createElement("span");
    box.className = "attnlab-nowrap";
    math.parentNode.insertBefore(box, math);
    if (before) {
      prev.data = prev.data.slice(0, prev.data.length - before[0].length);
      box.appendChild(document.createTextNode(before[0]));
    }
    box.appendChild(math);
    if (after) {
      next.data = next.data.slice(after[0].length);
      box.appendChild(document.createTextNode(after[0]));
    }
  }

  var UNIT = /(\d)[ \t]+(分|秒|ms|個|回|ステップ|文字|字|%|％|倍|行|列|桁|MiB|MB|KB|GB|GiB)/g;

  function keepUnits(cell) {
    var walker = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
    for (var t = walker.nextNode(); t; t = walker.nextNode()) {
      if (t.parentElement.closest("pre, code, .math")) continue;
      if (UNIT.test(t.data)) t.data = t.data.replace(UNIT, "$1\u00a0$2");
      UNIT.lastIndex = 0;
    }
  }

  var SCROLLERS = ".pst-scrollable-table-container, .attnlab-table-scroll, " +
    "div.math mjx-container[display='true']";
  var NOTE = "表は横にスクロールできます（→）";

  function cue(box) {
    if (box.clientWidth === 0) return;  // folded or hidden: measured when shown
    var over = box.scrollWidth - box.clientWidth;
    // a ResultTable wider than the column (its headers and labels already wrap: CSS)
    // first loses padding, then, when it is still at most 15 % too wide, sets its text
    // at 90 %; only what is still wider scrolls (designer's third read, N1)
    if (box.classList.contains("attnlab-table-scroll") && over > 0 &&
        !box.classList.contains("attnlab-table-tight")) {
      box.classList.add("attnlab-table-tight");
      over = box.scrollWidth - box.clientWidth;
      if (over > 0 && over <= 0.15 * box.clientWidth) {
        box.classList.add("attnlab-table-small");
        over = box.scrollWidth - box.clientWidth;
      }
    }
    var scrolls = over > 1;
    box.classList.toggle("attnlab-scrolls-right", scrolls && box.scrollLeft < over - 1);
    box.classList.toggle("attnlab-scrolls-left", scrolls && box.scrollLeft > 1);
    if (scrolls) box.tabIndex = 0;  // the keyboard scrolls it (the theme does the same)
    if (box.matches("mjx-container")) return;
    var note = box.nextElementSibling;
    var has = note && note.classList.contains("attnlab-scroll-note");
    if (scrolls && !has) {
      note = document.createElement("p");
      note.className = "attnlab-scroll-note";
      note.textContent = NOTE;
      box.parentNode.insertBefore(note, box.nextSibling);
    } else if (!scrolls && has) {
      note.remove();
    }
  }

  // A formula glued to its punctuation that is wider than its line (a phone) lets go of
  // it: the line may then break around the formula instead of widening the page.
  function unglueWide() {
    document.querySelectorAll("#main-content .attnlab-nowrap").forEach(function (box) {
      var block = box.closest("p, li, dd, td, th, figcaption, div");
      if (!block || block.clientWidth === 0) return;
      box.classList.remove("attnlab-nowrap-wide");
      if (box.getBoundingClientRect().width > block.clientWidth) {
        box.classList.add("attnlab-nowrap-wide");
      }
    });
  }

  function cueAll() {
    unglueWide();
    document.querySelectorAll("#main-content " + SCROLLERS.split(", ").join(", #main-content "))
      .forEach(function (box) {
        cue(box);
        if (!box.dataset.attnlabCue) {
          box.dataset.attnlabCue = "1";
          box.addEventListener("scroll", function () { cue(box); }, {passive: true});
        }
      });
  }
  window.attnlabScrollCues = cueAll;  // the browser test measures after unfolding

  // Numbers keep their counters everywhere on the page (issue 48, M3): the build makes
  // the spaces of the text no-break (book_ext/book_fixes.py); what it does not see — the
  // navigation, the numbers Sphinx and sphinx-exercise write (図 46, 練習 25), the tables a
  // notebook prints as HTML — gets the same rule here; so does a number with its
  // tolerance (「1 ± 0.15」).
  var JA = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\u3005\u3006\u3007" +
    "\uff01-\uff5e";
  var NUMBER_SPACE = new RegExp("([0-9%％]) (?=[" + JA + "])|([第約全各図表式練習節章]) (?=[0-9])" +
    "|([0-9]) (?=(?:ms|MiB|GiB|KiB|MB|GB|KB|px)\\b)|([0-9]) (?=±)|(±) (?=[0-9])", "g");

  function keepNumbers(root) {
    var walker = document.createTreeWalker(root, NodeFilter.SHOW_TEXT);
    for (var t = walker.nextNode(); t; t = walker.nextNode()) {
      if (t.parentElement.closest("pre, code, kbd, script, style, .math, mjx-container")) continue;
      NUMBER_SPACE.lastIndex = 0;
      if (NUMBER_SPACE.test(t.data)) {
        t.data = t.data.replace(NUMBER_SPACE, function (m, a, b, c, d, e) {
          return (a || b || c || d || e) + "\u00a0";
        });
      }
    }
  }

  // Inline code breaks only after _ [ , : (issue 48, m-new-1): a <wbr> after each of them
  // (CSS lets a piece break elsewhere only when it is wider than its line); a table's
  // column headed 「コード」 gets the class attnlab-code-column (a minimum width).
  var CODE_BREAK = /[_\[,:](?=[^\s])/g;

  function breakCode(code) {
    var texts = [];
    var walker = document.createTreeWalker(code, NodeFilter.SHOW_TEXT);
    for (var t = walker.nextNode(); t; t = walker.nextNode()) texts.push(t);
    texts.forEach(function (t) {
      CODE_BREAK.lastIndex = 0;
      if (!CODE_BREAK.test(t.data)) return;
      CODE_BREAK.lastIndex = 0;
      var parts = [], last = 0, m;
      while ((m = CODE_BREAK.exec(t.data)) !== null) {
        parts.push(t.data.slice(last, m.index + 1));
        last = m.index + 1;
      }
      parts.push(t.data.slice(last));
      var box = document.createDocumentFragment();
      parts.forEach(function (part, i) {
        box.appendChild(document.createTextNode(part));
        if (i < parts.length - 1) box.appendChild(document.createElement("wbr"));
      });
      t.parentNode.replaceChild(box, t);
    });
  }

  function codeColumns(table) {
    var head = table.querySelector("thead tr");
    if (!head) return;
    [].forEach.call(head.children, function (th, j) {
      if (th.textContent.trim() !== "コード") return;
      table.querySelectorAll("tr").forEach(function (row) {
        if (row.children[j]) row.children[j].classList.add("attnlab-code-column");
      });
    });
  }

  // A title's words (issue 48, m7): on a phone an H1 breaks only at a space or at a <wbr>
  // (CSS keep-all). One goes where a word begins: a kanji or katakana after a hiragana
  // (a particle or an ending closes the word before it: 「なぜ｜ヘッドを｜分けるのか」), and
  // where kanji and katakana meet (「正弦波位置｜エンコーディング」), after 「：」「、」.
  var HIRA = /[\u3041-\u309f]/, KANA = /[\u30a0-\u30ff]/, KANJI = /[\u3400-\u9fff\u3005]/;

  function wordStarts(heading) {
    var texts = [];
    var walker = document.createTreeWalker(heading, NodeFilter.SHOW_TEXT);
    for (var t = walker.nextNode(); t; t = walker.nextNode()) {
      if (!t.parentElement.closest("a.headerlink, .math, mjx-container")) texts.push(t);
    }
    texts.forEach(function (t) {
      var s = t.data, parts = [], last = 0;
      for (var i = 1; i < s.length; i++) {
        var a = s[i - 1], b = s[i];
        if ((HIRA.test(a) && (KANJI.test(b) || KANA.test(b))) || "：、".indexOf(a) >= 0 ||
            (KANJI.test(a) && KANA.test(b) && b !== "ー") || (KANA.test(a) && KANJI.test(b))) {
          parts.push(s.slice(last, i));
          last = i;
        }
      }
      if (!parts.length) return;
      parts.push(s.slice(last));
      var box = document.createDocumentFragment();
      parts.forEach(function (part, i) {
        if (i) box.appendChild(document.createElement("wbr"));
        box.appendChild(document.createTextNode(part));
      });
      t.parentNode.replaceChild(box, t);
    });
  }

  // A study's cell 「0.97 (0.94–0.99) ±0.01」 (a mean, its range and its standard error)
  // keeps the mean on its line and puts the spread in a span that a phone sets under
  // it (CSS): a table of three such columns then fits a phone's width instead of
  // showing only its first column (designer's fourth read, N2).
  var SPREAD = /^([−+\-]?[0-9][0-9.,]*) (\(.*)$/;
  function spreadLines(cell) {
    if (cell.children.length || cell.querySelector(".attnlab-spread")) return;
    var found = SPREAD.exec(cell.textContent);
    if (!found) return;
    cell.textContent = found[1] + " ";
    var span = document.createElement("span");
    span.className = "attnlab-spread";
    // the range and the standard error each stay whole; the line breaks between them
    found[2].split(/ (?=±)/).forEach(function (part, i) {
      if (i) span.appendChild(document.createTextNode(" "));
      var piece = document.createElement("span");
      piece.style.whiteSpace = "nowrap";
      piece.textContent = part;
      span.appendChild(piece);
    });
    cell.appendChild(span);
  }

  function start() {
    document.querySelectorAll("#main-content .attnlab-result-table td.attnlab-number")
      .forEach(spreadLines);
    document.querySelectorAll("#main-content h1").forEach(wordStarts);
    document.querySelectorAll("#main-content :not(pre) > code").forEach(breakCode);
    document.querySelectorAll("#main-content table").forEach(codeColumns);
    document.querySelectorAll("#main-content span.math").forEach(glue);
    document.querySelectorAll("#main-content td, #main-content th").forEach(keepUnits);
    keepNumbers(document.body);
    cueAll();
    if (window.MathJax && MathJax.startup && MathJax.startup.promise) {
      MathJax.startup.promise.then(cueAll);
    }
    // MathJax loads asynchronously: measure its equations once it has typeset them
    var tries = 0;
    (function waitForMath() {
      if (window.MathJax && MathJax.startup && MathJax.startup.promise) {
        MathJax.startup.promise.then(cueAll);
      } else if (tries++ < 40) {
        setTimeout(waitForMath, 250);
      }
    })();
    window.addEventListener("load", cueAll);
    var timer = null;
    window.addEventListener("resize", function () {
      clearTimeout(timer);
      timer = setTimeout(cueAll, 150);
    });
  }
  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", start);
  } else {
    start();
  }
})();
