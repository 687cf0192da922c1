// Live figures in the published book (attnlab.live_book): every state of a figure was
// drawn when the book was built, once for a light page and once for a dark one (two
// blocks of pictures, which the classes attnlab-light and attnlab-dark choose between);
// the controls show, in both blocks, the picture of the state they select. The project's
// own script, no library and nothing from a CDN.
(function () {
  "use strict";

  function setUp(figure) {
    var controls = Array.prototype.slice.call(
      figure.querySelectorAll(".attnlab-live-control"));
    var blockElements = Array.prototype.slice.call(
      figure.querySelectorAll(".attnlab-live-images"));
    var blocks = blockElements.map(
      function (block) { return block.querySelectorAll("img.attnlab-live-state"); });
    var counts = controls.map(function (c) { return Number(c.dataset.count); });
    var state = controls.map(function (c) { return Number(c.dataset.default); });
    // A polite live region: a screen reader hears the alt text of the picture now shown.
    var status = document.createElement("p");
    status.className = "attnlab-live-status";
    status.setAttribute("aria-live", "polite");
    figure.appendChild(status);
    // The shown state at full size (issue 48, M6): on a phone the figure's text is about
    // 6 px in the column; this link opens the picture shown (its PNG, twice the pixels).
    // The stylesheet shows it on narrow screens only; it follows the state and the page's
    // colour (the block the page shows).
    var open = document.createElement("a");
    open.className = "attnlab-figure-open attnlab-live-open";
    open.textContent = "図を原寸で開く";
    var last = figure.querySelector(".attnlab-live-images:last-of-type");
    figure.insertBefore(open, last ? last.nextSibling : null);
    var ready = false;

    function show() {
      var number = 0;
      for (var k = 0; k < counts.length; k++) number = number * counts[k] + state[k];
      blocks.forEach(function (images) {
        for (var i = 0; i < images.length; i++) {
          images[i].classList.toggle("attnlab-live-hidden", i !== number);
        }
      });
      figure.dataset.state = String(number);
      var visible = blockElements.findIndex(function (element) {
        return !element.checkVisibility || element.checkVisibility();
      });
      var picture = blocks[Math.max(visible, 0)] && blocks[Math.max(visible, 0)][number];
      if (picture) open.href = picture.getAttribute("src");
      var image = blocks.length && blocks[0][number];
      if (ready && image) status.textContent = image.alt;
      if (ready) preloadNeighbours(number);
    }

    // The pictures are loading="lazy" (a page does not fetch every state up front), so the
    // states one step away on each control are fetched now, in the block the page shows:
    // the next move shows a picture that is already there. Each keeps its width and height
    // attributes, so a picture still on its way holds its box and the page does not jump.
    function preloadNeighbours(number) {
      var stride = 1, near = [number];
      for (var k = counts.length - 1; k >= 0; k--) {
        if (state[k] > 0) near.push(number - stride);
        if (state[k] < counts[k] - 1) near.push(number + stride);
        stride *= counts[k];
      }
      blocks.forEach(function (images, b) {
        // the other colour's block stays unfetched (checkVisibility: Chromium 105, Firefox 106)
        var element = blockElements[b];
        if (element.checkVisibility && !element.checkVisibility()) return;
        near.forEach(function (i) { if (images[i]) images[i].loading = "eager"; });
      });
    }

    controls.forEach(function (control, k) {
      var kind = control.dataset.kind;
      if (kind === "slider") {
        var input = control.querySelector("input");
        var output = control.querySelector("output");
        var labels = JSON.parse(input.dataset.labels);
        input.addEventListener("input", function () {
          state[k] = Number(input.value);
          output.textContent = labels[state[k]];
          input.setAttribute("aria-valuetext", labels[state[k]]);
          show();
        });
      } else if (kind === "toggle") {
        var buttons = Array.prototype.slice.call(control.querySelectorAll("button"));
        var choose = function (index) {
          state[k] = index;
          buttons.forEach(function (b, i) {
            b.setAttribute("aria-pressed", i === index ? "true" : "false");
          });
          show();
        };
        buttons.forEach(function (button, i) {
          button.addEventListener("click", function () { choose(i); });
          button.addEventListener("keydown", function (event) {
            var step = { ArrowRight: 1, ArrowDown: 1, ArrowLeft: -1, ArrowUp: -1 }[event.key];
            if (!step) return;
            event.preventDefault();
            var next = (i + step + buttons.length) % buttons.length;
            buttons[next].focus();
            choose(next);
          });
        });
      } else if (kind === "dropdown") {
        var select = control.querySelector("select");
        select.addEventListener("change", function () {
          state[k] = Number(select.value);
          show();
        });
      } else if (kind === "checkbox") {
        var box = control.querySelector("input");
        box.addEventListener("change", function () {
          state[k] = box.checked ? 1 : 0;
          show();
        });
      }
    });
    figure.classList.add("attnlab-live-ready");
    show();
    ready = true;
    // a reader who reaches for the controls gets the neighbouring states before the first move
    var reach = function () { preloadNeighbours(Number(figure.dataset.state)); };
    figure.addEventListener("pointerenter", reach, { once: true });
    figure.addEventListener("focusin", reach, { once: true });
  }

  function setUpAll() {
    document.querySelectorAll(".attnlab-live").forEach(setUp);
  }
  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", setUpAll);
  } else {
    setUpAll();
  }
})();
