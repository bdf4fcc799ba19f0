// How the live model's page draws attention: maps in the book's colour scale, the grid's
// labels, the colour scale itself, the axis labels of a large map, and the page's stylesheet.
//
// window.mhaLiveMaps = {colour, drawMap, colourScale, gridLabels, tickLabels, scrollHint,
// addStyle}; mha-live-minilm.js draws the panel with them. Nothing here computes attention.
(function () {
  "use strict";

  var BLUES = [
    [247, 251, 255], [222, 235, 247], [198, 219, 239], [158, 202, 225], [107, 174, 214],
    [66, 146, 198], [33, 113, 181], [8, 81, 156], [8, 48, 107],
  ]; // Plotly's "Blues", the scale of the book's attention figures (mha.display.plotting)

  function colour(v) {
    var x = Math.max(0, Math.min(1, v)) * (BLUES.length - 1);
    var i = Math.min(BLUES.length - 2, Math.floor(x));
    var f = x - i;
    return BLUES[i].map(function (c, k) {
      return Math.round(c + f * (BLUES[i + 1][k] - c));
    });
  }

  function drawMap(canvas, values, offset, L, size) {
    canvas.width = size;
    canvas.height = size;
    var ctx = canvas.getContext("2d");
    var image = ctx.createImageData(L, L);
    for (var p = 0; p < L * L; p++) {
      var c = colour(values[offset + p]);
      image.data[4 * p] = c[0];
      image.data[4 * p + 1] = c[1];
      image.data[4 * p + 2] = c[2];
      image.data[4 * p + 3] = 255;
    }
    var tmp = document.createElement("canvas");
    tmp.width = L;
    tmp.height = L;
    tmp.getContext("2d").putImageData(image, 0, 0);
    ctx.imageSmoothingEnabled = false;
    ctx.drawImage(tmp, 0, 0, size, size);
  }

  function el(tag, className, text) {
    var node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined) node.textContent = text;
    return node;
  }

  // The colour scale of the maps: white at 0 to dark blue at 1, with what a cell holds.
  function colourScale(label) {
    var box = el("div", "mha-live-scale");
    var bar = el("span", "mha-live-scale-bar");
    bar.setAttribute("aria-hidden", "true");
    bar.style.background = "linear-gradient(to right," + BLUES.map(function (c, i) {
      return "rgb(" + c.join(",") + ") " + (100 * i / (BLUES.length - 1)).toFixed(1) + "%";
    }).join(",") + ")";
    box.append(el("span", "mha-live-scale-end", "0"), bar, el("span", "mha-live-scale-end", "1"),
      el("span", "mha-live-scale-name", label + ": white 0, dark blue 1"));
    return box;
  }

  // The grid's labels as cells of the grid: a corner, "H1" to "Hn" above the columns, and "L1"
  // to "Lm" before each row (placed by gridRow/gridColumn; the heads' buttons fill the rest).
  function gridLabels(layers, heads) {
    var labels = [];
    var corner = el("span", "mha-live-glabel mha-live-corner-label", "layer \\ head");
    corner.style.gridRow = "1";
    corner.style.gridColumn = "1";
    labels.push(corner);
    for (var h = 0; h < heads; h++) {
      var top = el("span", "mha-live-glabel mha-live-hlabel", "H" + (h + 1));
      top.style.gridRow = "1";
      top.style.gridColumn = String(h + 2);
      labels.push(top);
    }
    for (var l = 0; l < layers; l++) {
      var side = el("span", "mha-live-glabel mha-live-llabel", "L" + (l + 1));
      side.style.gridRow = String(l + 2);
      side.style.gridColumn = "1";
      labels.push(side);
    }
    labels.forEach(function (node) {
      node.setAttribute("aria-hidden", "true");
    });
    return labels;
  }

  // The axis labels of the large map: the book's "i token" (position from 0, [CLS] is 0),
  // thinned to every step-th when the cells are too small for a line of text each.
  function tickLabels(tokens, step, className) {
    var box = el("div", className);
    box.setAttribute("aria-hidden", "true");
    var longest = 1;
    tokens.forEach(function (t, i) {
      if (i % step) return;
      var text = i + " " + t;
      if (text.length > 12) text = text.slice(0, 11) + "…";
      longest = Math.max(longest, text.length);
      var span = el("span", "", text);
      span.style.setProperty("--at", ((i + 0.5) / tokens.length) * 100 + "%");
      box.appendChild(span);
    });
    // The labels are placed absolutely, so that they never stretch the map's rows.
    box.style.setProperty("--len", longest * 0.62 + 0.6 + "em");
    return box;
  }

  // A grid wider than its box scrolls sideways: a line says which heads are out of view and
  // which way to swipe, and the grid's edge fades on that side. Updated as it scrolls.
  function scrollHint(grid, hint, heads) {
    function update() {
      var hidden = grid.scrollWidth - grid.clientWidth;
      if (hidden <= 1) {
        hint.hidden = true;
        grid.classList.remove("mha-live-more-right", "mha-live-more-left");
        return;
      }
      var cells = grid.querySelectorAll('button.mha-live-cell[data-layer="0"]');
      var box = grid.getBoundingClientRect();
      var out = [];
      cells.forEach(function (b, h) {
        var r = b.getBoundingClientRect();
        if (r.right > box.right + 1 || r.left < box.left - 1) out.push(h + 1);
      });
      var right = grid.scrollLeft < hidden - 1;
      hint.hidden = false;
      hint.textContent = out.length
        ? "Heads " + out[0] + (out.length > 1 ? "–" + out[out.length - 1] : "") + " of " + heads +
          " are out of view: swipe the grid " + (right ? "left ←" : "right →") + " to see them."
        : "";
      grid.classList.toggle("mha-live-more-right", right);
      grid.classList.toggle("mha-live-more-left", grid.scrollLeft > 1);
    }
    grid.addEventListener("scroll", update, { passive: true });
    window.addEventListener("resize", update);
    update();
    return update;
  }

  var CSS =
    ".mha-live-minilm textarea{width:100%;box-sizing:border-box;font:inherit}" +
    ".mha-live-controls{display:flex;flex-wrap:wrap;gap:.5rem;align-items:center;margin:.5rem 0}" +
    ".mha-live-controls button,.mha-live-controls select{min-height:44px}" +
    ".mha-live-size{white-space:nowrap}" +
    ".mha-live-grid{display:grid;grid-template-columns:auto repeat(12,minmax(0,1fr));gap:2px;" +
    "max-width:800px;align-items:center}" +
    ".mha-live-glabel{font-size:11px;line-height:1.1;text-align:center;color:inherit;opacity:.8}" +
    ".mha-live-llabel,.mha-live-corner-label{text-align:right;padding-right:3px;white-space:nowrap}" +
    ".mha-live-cell{padding:0;border:1px solid #8884;background:none;cursor:pointer;" +
    "aspect-ratio:1}" +
    ".mha-live-cell canvas{width:100%;height:100%;display:block;image-rendering:pixelated}" +
    ".mha-live-cell[aria-pressed=true]{outline:3px solid #d95f02;outline-offset:1px;" +
    "border-color:#d95f02}" +
    ".mha-live-scale{display:flex;flex-wrap:wrap;align-items:center;gap:.3rem;font-size:.85em;" +
    "margin:.3rem 0}" +
    ".mha-live-scale-bar{display:inline-block;width:8rem;height:.8rem;border:1px solid #8886}" +
    ".mha-live-hint{font-size:.9em;margin:.2rem 0;font-weight:600}" +
    // On a touch screen every head is a 44 px target, as wide as it is tall: the twelve heads
    // of a layer stay in one row, which scrolls sideways inside the grid when the screen is
    // narrower, its layer labels held at the left edge. The padding keeps the chosen head's
    // outline inside the scrolling box; a shadow on an edge says more heads lie that way.
    "@media (pointer:coarse){.mha-live-grid{grid-template-columns:auto repeat(12,minmax(44px,1fr));" +
    "overflow-x:auto;padding:4px}.mha-live-cell{aspect-ratio:1;min-width:44px;min-height:44px}" +
    ".mha-live-llabel,.mha-live-corner-label{position:sticky;left:-4px;z-index:1;" +
    "background:var(--pst-color-background,#fff);align-self:stretch;display:flex;" +
    "align-items:center;justify-content:flex-end}}" +
    ".mha-live-grid.mha-live-more-right{box-shadow:inset -14px 0 10px -8px #0006}" +
    ".mha-live-grid.mha-live-more-left.mha-live-more-right{box-shadow:inset -14px 0 10px -8px #0006," +
    "inset 14px 0 10px -8px #0006}" +
    ".mha-live-grid.mha-live-more-left:not(.mha-live-more-right){box-shadow:inset 14px 0 10px -8px #0006}" +
    ".mha-live-map{display:grid;grid-template-columns:max-content minmax(0,var(--size));" +
    "font-size:11px;line-height:1;margin:0 0 .5rem}" +
    ".mha-live-corner{align-self:end;justify-self:end;padding:0 4px 4px 0;color:#666}" +
    ".mha-live-keys,.mha-live-queries{position:relative}" +
    ".mha-live-keys{height:var(--len)}.mha-live-queries{width:var(--len)}" +
    ".mha-live-keys span,.mha-live-queries span{position:absolute;white-space:nowrap}" +
    ".mha-live-keys span{bottom:3px;left:var(--at);writing-mode:vertical-rl;" +
    "transform:translateX(-50%) rotate(180deg)}" +
    ".mha-live-queries span{right:4px;top:var(--at);transform:translateY(-50%)}" +
    ".mha-live-detail canvas{width:100%;aspect-ratio:1;display:block;" +
    "image-rendering:pixelated}" +
    ".mha-live-detail canvas:focus-visible{outline:3px solid #d95f02;outline-offset:2px}" +
    ".mha-live-tokens{overflow-wrap:anywhere}" +
    // Printed (the book's PDF), the panel has nothing to show: data-mha-still="none"
    "@media print{.mha-live-minilm[data-mha-still=none]{display:none!important}}";

  function addStyle() {
    if (document.getElementById("mha-live-style")) return;
    var style = el("style");
    style.id = "mha-live-style";
    style.textContent = CSS;
    document.head.appendChild(style);
  }

  window.mhaLiveMaps = {
    colour: colour,
    drawMap: drawMap,
    colourScale: colourScale,
    gridLabels: gridLabels,
    tickLabels: tickLabels,
    scrollHint: scrollHint,
    addStyle: addStyle,
  };
})();
