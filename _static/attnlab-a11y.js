// Accessibility fixes of the theme's markup, found by axe-core in `make test-browser`
// (scripts/browser_test.py). The project's own script, loaded on every page like
// attnlab-live.js; each fix is narrow and says what axe reported.
(function () {
  "use strict";

  function fix() {
    // 1. label-content-name-mismatch: pydata-sphinx-theme's search field is a button whose
    //    visible text is "検索 Ctrl+K" but whose aria-label is only "検索". Without the
    //    aria-label its name is its visible text, which a voice-control user can say.
    document.querySelectorAll(".search-button-field[aria-label]").forEach(function (b) {
      b.removeAttribute("aria-label");
    });
    // 2. label-content-name-mismatch: the colour-mode button is named by its aria-label, but
    //    its icons carry titles (ライト, ダーク, …) that count as its text. The icons are
    //    decorative; the name says in Japanese what the button does.
    document.querySelectorAll(".theme-switch-button").forEach(function (b) {
      b.setAttribute("aria-label", "表示の色（ライト・ダーク・システム設定）を切り替える");
      b.querySelectorAll("i").forEach(function (i) { i.setAttribute("aria-hidden", "true"); });
    });
    // 3. aria-required-children (critical): the bibliography (sphinxcontrib-bibtex through
    //    docutils) is a role="list" whose entries have role="doc-biblioentry", a role
    //    deprecated in DPUB-ARIA 1.1 that axe does not accept as a list item.
    document.querySelectorAll('[role="list"] > [role="doc-biblioentry"]').forEach(
      function (entry) { entry.setAttribute("role", "listitem"); });
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", fix);
  } else {
    fix();
  }
})();
