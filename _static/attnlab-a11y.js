// Accessibility fixes of the theme's markup, found by axe-core in `make test-browser`
// (tests/e2e/browser_test.py). The project's own script, loaded on every page like
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
    // 2. label-content-name-mismatch: the colour-mode button is named by its aria-label
    //    ("Color mode"), but its icons carry titles (ライト, ダーク, System Settings) that
    //    count as its visible text. The icons are decorative: no title, hidden from
    //    assistive technology; the name says in Japanese what the button does. Font Awesome
    //    replaces each <i> by an <svg> (its title becomes a <title>), before or after this
    //    runs, copying the attributes of the <i>: both forms are fixed.
    document.querySelectorAll(".theme-switch-button").forEach(function (b) {
      b.setAttribute("aria-label", "表示の色（ライト・ダーク・システム設定）を切り替える");
      b.querySelectorAll(".theme-switch").forEach(function (icon) {
        icon.removeAttribute("title");
        icon.removeAttribute("aria-labelledby");
        icon.setAttribute("aria-hidden", "true");
        icon.querySelectorAll("title").forEach(function (t) { t.remove(); });
      });
    });
    // 3. aria-required-children (critical): the bibliography (sphinxcontrib-bibtex through
    //    docutils) is a role="list" whose entries have role="doc-biblioentry", a role
    //    deprecated in DPUB-ARIA 1.1 that axe does not accept as a list item.
    document.querySelectorAll('[role="list"] > [role="doc-biblioentry"]').forEach(
      function (entry) { entry.setAttribute("role", "listitem"); });
    // 5. label-content-name-mismatch: myst-nb's folded cell (tag hide-input, each chapter's
    //    setup cell) is a <summary aria-label="Toggle hidden content"> whose visible text is
    //    the prompt of _config.yml (nb_code_prompt_show/hide). Its name is its visible text.
    document.querySelectorAll('summary[aria-label="Toggle hidden content"]').forEach(
      function (summary) { summary.removeAttribute("aria-label"); });
  }

  // 4. scrollable-region-focusable: pydata-sphinx-theme gives a scrollable code block or
  //    output tabindex 0 (so the keyboard can scroll it) when the page loads, on a resize
  //    and when nodes are added; a code block inside a folded solution is not scrollable
  //    then and keeps tabindex -1. Unfolding it (sphinx-togglebutton switches the class
  //    toggle-hidden) is none of those events: look again when a fold opens.
  var SCROLLABLE = "pre, .cell_output > .output, .pst-scrollable-table-container";
  function tabStops(root) {
    root.querySelectorAll(SCROLLABLE).forEach(function (el) {
      el.tabIndex = el.scrollWidth > el.clientWidth || el.scrollHeight > el.clientHeight
        ? 0 : -1;
    });
  }
  function watchFolds() {
    var main = document.getElementById("main-content");
    if (!main || !window.MutationObserver) return;
    new MutationObserver(function (mutations) {
      mutations.forEach(function (m) {
        if (m.target.classList && !m.target.classList.contains("toggle-hidden") &&
            m.oldValue && m.oldValue.indexOf("toggle-hidden") >= 0) {
          tabStops(m.target);
        }
      });
    }).observe(main, {subtree: true, attributes: true, attributeFilter: ["class"],
                      attributeOldValue: true});
  }

  function start() {
    fix();
    watchFolds();
    window.addEventListener("load", fix);  // after the theme's and Font Awesome's scripts
  }
  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", start);
  } else {
    start();
  }
})();
