// Keep an inline formula with the punctuation around it (issue 36): a line must not start
// with 、。） or end with （ because a formula sits next to it. Each inline formula
// (Sphinx's span.math) and the punctuation just before or after it are wrapped in
// span.attnlab-nowrap (white-space: nowrap, _static/attnlab-typography.css). MathJax
// typesets the formula where it is, before or after this runs. The project's own script.
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

  function start() {
    document.querySelectorAll("#main-content span.math").forEach(glue);
  }
  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", start);
  } else {
    start();
  }
})();
