// The book's line breaking where CSS alone cannot do it (issue 36); the project's own
// script.
// 1. An inline formula keeps the punctuation around it: a line must not start with 、。）
//    or end with （ because a formula sits next to it. Each inline formula (Sphinx's
//    span.math) and the punctuation just before or after it are wrapped in
//    span.attnlab-nowrap (white-space: nowrap, _static/attnlab-typography.css). MathJax
//    typesets the formula where it is, before or after this runs.
// 2. In a table cell, a number keeps its unit (1 回, 約 12 分): the space between them
//    becomes a no-break space.
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

  function start() {
    document.querySelectorAll("#main-content span.math").forEach(glue);
    document.querySelectorAll("#main-content td, #main-content th").forEach(keepUnits);
  }
  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", start);
  } else {
    start();
  }
})();
