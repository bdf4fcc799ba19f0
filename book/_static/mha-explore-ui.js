/* The book's explorables: small figures that recompute in the reader's browser.
 *
 * Every number a figure shows comes from window.mhaExplore (mha-explore.js), whose
 * functions mirror the library's and are tested against it. This file only draws and
 * listens. A chapter places a figure with
 *
 *   <div class="mha-explore" data-explore="heads|online-softmax|kv-cache"></div>
 *
 * and loads both scripts (deferred). Each figure is drawn once in its initial state when
 * the page has loaded, and again only when the reader changes something: a drag (mouse,
 * pen or touch), an arrow key on a focused point, a button or a menu. Each figure keeps its
 * state and its computed numbers in data attributes (data-state on the figure, data-* on
 * its parts), which the browser test reads back and checks against `mha`.
 */
(function () {
  "use strict";

  var SVG_NS = "http://www.w3.org/2000/svg";
  // Okabe and Ito's colour-blind-safe colours, as the site's Plotly figures use them.
  var COLOURS = ["#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00"];
  var STYLE = [
    ".mha-explore{margin:1rem 0 1.5rem;padding:.75rem;border:1px solid var(--pst-color-border,#ccc);",
    "border-radius:.4rem;max-width:100%;box-sizing:border-box;overflow-wrap:anywhere}",
    // a swipe on a figure's background scrolls the page (pan-y); only a draggable point takes
    // the touch for itself (touch-action:none on .mx-point)
    ".mha-explore svg{display:block;width:100%;height:auto;touch-action:pan-y;user-select:none}",
    ".mha-explore .mx-row{display:flex;flex-wrap:wrap;gap:.5rem 1rem;align-items:center;margin:.4rem 0}",
    ".mha-explore .mx-panels{display:flex;flex-wrap:wrap;gap:.75rem}",
    ".mha-explore .mx-panels>*{flex:1 1 16rem;min-width:0}",
    ".mha-explore label{display:inline-flex;gap:.35rem;align-items:center}",
    ".mha-explore select,.mha-explore button,.mha-explore input{font:inherit;color:inherit;",
    "background:var(--pst-color-background,#fff);border:1px solid var(--pst-color-border,#888);",
    "border-radius:.25rem;padding:.15rem .4rem;min-height:2rem}",
    ".mha-explore button:disabled{opacity:.5}",
    ".mha-explore input[type=number]{width:3.6rem}",
    ".mha-explore td{white-space:nowrap}",
    ".mha-explore table.mx-wrap td{white-space:normal}",
    ".mha-explore table{border-collapse:collapse;font-size:.9em;margin:.3rem 0;max-width:100%}",
    ".mha-explore td,.mha-explore th{padding:.1rem .45rem;text-align:right;border-bottom:1px solid var(--pst-color-border,#ddd)}",
    ".mha-explore tr.mx-current{background:rgba(230,159,0,.22)}.mha-explore tr.mx-seen{background:rgba(86,180,233,.15)}",
    ".mha-explore .mx-scroll{overflow-x:auto;max-width:100%}",
    ".mha-explore .mx-point{cursor:grab;outline:none;touch-action:none}",
    ".mha-explore .mx-point:focus-visible circle,.mha-explore .mx-point:focus-visible rect{stroke-width:4}",
    ".mha-explore .mx-note{font-size:.9em;margin:.3rem 0}",
    ".mha-explore .mx-num{font-variant-numeric:tabular-nums}",
    ".mha-explore .mx-m,.mha-explore sup,.mha-explore sub{white-space:nowrap}", // a symbol and its scripts
    ".mha-explore th{overflow-wrap:normal}", // a heading breaks between words only
    ".mha-explore td.mx-num{overflow-wrap:normal}", // a number wraps at its spaces, not between digits
    // touch targets at least 44 px tall on a phone (WCAG 2.5.5)
    "@media (max-width:48rem){.mha-explore select,.mha-explore button,.mha-explore input{min-height:44px}",
    ".mha-explore td,.mha-explore th{padding:.1rem .3rem}}", // and a table's columns closer
  ].join("");

  function el(tag, attrs, text) {
    var node = document.createElement(tag);
    for (var k in attrs || {}) node.setAttribute(k, attrs[k]);
    if (text !== undefined) node.textContent = text;
    return node;
  }

  function svgEl(tag, attrs, text) {
    var node = document.createElementNS(SVG_NS, tag);
    for (var k in attrs || {}) node.setAttribute(k, attrs[k]);
    if (text !== undefined) node.textContent = text;
    return node;
  }

  // The book's notation as text: in a source string, "^" and "_" put the next character, or a
  // group in braces, above or below ("W^Q_2", "H_{kv}", "e^{z_j \u2212 m}"), and backticks
  // mark a code name (`kv_cache_bytes`). notation() draws it as <sup>/<sub> and <code> in
  // HTML and as shifted, smaller <tspan>s in SVG; spoken() gives the same as words for an
  // accessible name ("W Q 2", "H kv").
  function parseNotation(src) {
    var parts = [], text = "", i = 0;
    while (i < src.length) {
      var c = src[i];
      if (c === "`" && src.indexOf("`", i + 1) > i) {
        if (text) parts.push(text);
        text = "";
        var end = src.indexOf("`", i + 1);
        parts.push({ kind: "code", parts: [src.slice(i + 1, end)] });
        i = end + 1;
      } else if ((c === "^" || c === "_") && i + 1 < src.length) {
        if (text) parts.push(text);
        text = "";
        var body;
        if (src[i + 1] === "{") {
          var depth = 1, j = i + 2;
          while (j < src.length && depth) {
            if (src[j] === "{") depth++;
            else if (src[j] === "}") depth--;
            j++;
          }
          body = src.slice(i + 2, j - 1);
          i = j;
        } else {
          body = src[i + 1];
          i += 2;
        }
        parts.push({ kind: c === "^" ? "sup" : "sub", parts: parseNotation(body) });
      } else {
        text += c;
        i++;
      }
    }
    if (text) parts.push(text);
    return parts;
  }

  function notation(parent, src, inSvg) {
    var parts = typeof src === "string" ? parseNotation(src) : src;
    if (!inSvg && parts.some(function (p) { return typeof p !== "string"; })) {
      // In HTML a word that carries a script stays on one line: no break in "softmax(z)_j".
      var words = [[]];
      parts.forEach(function (p) {
        if (typeof p !== "string") { words[words.length - 1].push(p); return; }
        p.split(/( +)/).forEach(function (piece, k) {
          if (!piece) return;
          if (k % 2) words.push([piece], []);
          else words[words.length - 1].push(piece);
        });
      });
      words.forEach(function (word) {
        if (word.every(function (p) { return typeof p === "string"; })) {
          if (word.length) parent.appendChild(document.createTextNode(word.join("")));
        } else {
          parent.appendChild(notationParts(el("span", { class: "mx-m" }), word, false));
        }
      });
      return parent;
    }
    return notationParts(parent, parts, inSvg);
  }

  function notationParts(parent, parts, inSvg) {
    parts.forEach(function (part) {
      if (typeof part === "string") {
        parent.appendChild(document.createTextNode(part));
        return;
      }
      var node = !inSvg ? el(part.kind)
        : part.kind === "code" ? svgEl("tspan", { "font-family": "monospace" })
          : svgEl("tspan", { "baseline-shift": part.kind === "sup" ? "super" : "sub", "font-size": "75%" });
      notationParts(node, part.parts, inSvg);
      parent.appendChild(node);
    });
    return parent;
  }

  function spoken(src) {
    function words(parts) {
      return parts.map(function (p) { return typeof p === "string" ? p : " " + words(p.parts) + " "; }).join("");
    }
    return words(parseNotation(src)).replace(/ +/g, " ").replace(/ ([,.)\/])/g, "$1").trim();
  }

  function fmt(x, digits) {
    if (x === -Infinity) return "\u2212\u221e";
    if (x === Infinity) return "\u221e";
    return (Math.abs(x) < 5e-13 ? 0 : x).toFixed(digits === undefined ? 3 : digits).replace("-", "\u2212");
  }

  function select(label, options, value) {
    var wrap = el("label");
    wrap.appendChild(notation(el("span"), label));
    var s = el("select", { "aria-label": spoken(label) });
    options.forEach(function (o) {
      var opt = el("option", { value: o[0] }, o[1]);
      if (o[0] === value) opt.selected = true;
      s.appendChild(opt);
    });
    wrap.appendChild(s);
    return { wrap: wrap, select: s };
  }

  function button(text, name) {
    var b = el("button", { type: "button" }, text);
    if (name) b.setAttribute("aria-label", name);
    return b;
  }

  function svgPoint(svg, evt) {
    var p = svg.createSVGPoint();
    p.x = evt.clientX;
    p.y = evt.clientY;
    return p.matrixTransform(svg.getScreenCTM().inverse());
  }

  /* ---------------------------------------------------------------- one head, then many */

  var PLANE = 4; // the plane shows [-4, 4] x [-4, 4]
  var SIZE = 320; // SVG units
  var STEP = 0.25; // an arrow key moves a point this far (Shift: four times)
  var MARGIN = 12; // SVG units around the plane

  function toSvg(v) {
    return [(v[0] + PLANE) / (2 * PLANE) * SIZE, (PLANE - v[1]) / (2 * PLANE) * SIZE];
  }

  function fromSvg(x, y) {
    return [x / SIZE * 2 * PLANE - PLANE, PLANE - y / SIZE * 2 * PLANE];
  }

  function clamp(v) {
    return Math.max(-PLANE, Math.min(PLANE, Math.round(v * 100) / 100));
  }

  function matVec(x, w) {
    // the row vector x times the 2 x 2 matrix w (weights on the right)
    return [x[0] * w[0][0] + x[1] * w[1][0], x[0] * w[0][1] + x[1] * w[1][1]];
  }

  // The plane's labels are laid out so that none covers another. Each goes beside its mark, in
  // the first of eight directions (then farther out) where it covers no other label and no
  // mark, moved inside the figure if it would stick out; failing that, clear of the other
  // labels and of its own mark only; failing that, it is left off (and the figure names it in
  // a note). A mark is a circle {c, r} or a square {c, half}; a box is [left, top, right, bottom].
  var LABEL_DIRS = [[1, -1], [1, 0], [1, 1], [0, -1], [-1, -1], [-1, 0], [-1, 1], [0, 1]];
  var LABEL_RINGS = 4;
  var LABEL_BOUNDS = [1 - MARGIN, 1 - MARGIN, SIZE + MARGIN - 1, SIZE + MARGIN - 1]; // the viewBox, less a unit
  var labelSizes = {};

  function labelSize(node) {
    // the box of the text around its anchor (x, y) = (0, 0): its glyphs, scripts included
    var key = node.textContent + "|" + node.getAttribute("font-size");
    if (labelSizes[key]) return labelSizes[key];
    node.setAttribute("x", 0);
    node.setAttribute("y", 0);
    var b = null;
    try {
      b = node.getBBox();
    } catch (err) {
      // not in a rendered document: the guess below
    }
    if (b && b.width > 0) return (labelSizes[key] = { x: b.x, y: b.y, w: b.width, h: b.height });
    var fs = Number(node.getAttribute("font-size")); // not laid out yet: a generous guess
    return { x: 0, y: -0.95 * fs, w: 0.65 * fs * node.textContent.length, h: 1.4 * fs };
  }

  function boxesMeet(a, b, pad) {
    return a[0] < b[2] + pad && b[0] < a[2] + pad && a[1] < b[3] + pad && b[1] < a[3] + pad;
  }

  function boxMeetsMark(box, m) {
    if (m.half !== undefined) {
      return boxesMeet(box, [m.c[0] - m.half, m.c[1] - m.half, m.c[0] + m.half, m.c[1] + m.half], 1);
    }
    var dx = Math.max(box[0] - m.c[0], 0, m.c[0] - box[2]), dy = Math.max(box[1] - m.c[1], 0, m.c[1] - box[3]);
    return dx * dx + dy * dy < (m.r + 1) * (m.r + 1);
  }

  function layoutLabels(items, marks) {
    var placed = [], left = [];
    items.forEach(function (it) {
      var size = labelSize(it.node), at = it.mark.c, reach = it.mark.r || it.mark.half;
      var box = null;
      for (var pass = 0; pass < 2 && !box; pass++) {
        for (var ring = 0; ring < LABEL_RINGS && !box; ring++) {
          var d = reach + 3 + 8 * ring;
          var dirs = it.dirs || LABEL_DIRS;
          for (var k = 0; k < dirs.length && !box; k++) {
            var dir = dirs[k], f = dir[0] && dir[1] ? 0.75 : 1;
            var x0 = dir[0] > 0 ? at[0] + f * d : dir[0] < 0 ? at[0] - f * d - size.w : at[0] - size.w / 2;
            var y0 = dir[1] > 0 ? at[1] + f * d : dir[1] < 0 ? at[1] - f * d - size.h : at[1] - size.h / 2;
            x0 = Math.max(LABEL_BOUNDS[0], Math.min(LABEL_BOUNDS[2] - size.w, x0));
            y0 = Math.max(LABEL_BOUNDS[1], Math.min(LABEL_BOUNDS[3] - size.h, y0));
            var cand = [x0, y0, x0 + size.w, y0 + size.h];
            var fits = !boxMeetsMark(cand, it.mark) &&
              !placed.some(function (b) { return boxesMeet(cand, b, 1); }) &&
              (pass > 0 || !marks.some(function (m) { return boxMeetsMark(cand, m); }));
            if (fits) box = cand;
          }
        }
      }
      if (!box) {
        it.node.setAttribute("display", "none");
        left.push(it);
        return;
      }
      it.node.removeAttribute("display");
      placed.push(box);
      // a label inside a moved group (a point's) is placed relative to the group
      var ox = it.local ? at[0] : 0, oy = it.local ? at[1] : 0;
      it.node.setAttribute("x", (box[0] - size.x - ox).toFixed(2));
      it.node.setAttribute("y", (box[1] - size.y - oy).toFixed(2));
    });
    return left;
  }

  // a label drawn over the lines of the plane keeps a thin outline of the page's background
  var HALO = { stroke: "var(--pst-color-background, #fff)", "stroke-width": 3, "stroke-linejoin": "round",
    "paint-order": "stroke" };

  function haloText(attrs) {
    for (var k in HALO) attrs[k] = HALO[k];
    return svgEl("text", attrs);
  }

  var HEADS = [
    { name: "head 1", w_q: [[1, 0], [0, 1]], w_k: [[1, 0], [0, 1]] },
    { name: "head 2", w_q: [[0, 1], [-1, 0]], w_k: [[1, 0], [0, 1]] },
  ];
  var QUERY_POSITION = 3; // the query is token 3 of 5 for the causal mask

  function headsFigure(root) {
    var state = {
      query: [1.5, 1.0],
      keys: [[2.5, 2.0], [-2.0, 1.5], [0.5, -2.5], [-1.0, -1.0], [3.0, -1.5]],
      scale: "sqrt",
      mask: "none",
    };
    root.setAttribute("data-w-q", JSON.stringify(HEADS.map(function (h) { return h.w_q; })));
    root.setAttribute("data-w-k", JSON.stringify(HEADS.map(function (h) { return h.w_k; })));
    root.setAttribute("data-query-position", String(QUERY_POSITION));
    var S = state.keys.length;

    var controls = el("div", { class: "mx-row" });
    // an option is text only: the subscripts of the notation are in the note beside it
    var scaleSel = select("Scale of the scores", [["sqrt", "1/\u221a2"], ["none", "none (1)"]], "sqrt");
    var scaleNote = notation(el("span", { class: "mx-note" }), "1/\u221aD_h with D_h = 2");
    var maskSel = select("Mask", [["none", "none"],
      ["causal", "causal: x at position " + QUERY_POSITION],
      ["padding", "padding: k" + String.fromCharCode(0x2080 + S) + " is padding"]], "none");
    controls.appendChild(scaleSel.wrap);
    controls.appendChild(scaleNote);
    controls.appendChild(maskSel.wrap);
    root.appendChild(controls);

    var panels = el("div", { class: "mx-panels" });
    root.appendChild(panels);
    // a margin as wide as a point's circle: a point at the plane's edge is drawn whole
    var svg = svgEl("svg", { viewBox: -MARGIN + " " + -MARGIN + " " + (SIZE + 2 * MARGIN) + " " + (SIZE + 2 * MARGIN),
      role: "group",
      "aria-labelledby": root.id + "-title" });
    svg.appendChild(svgEl("title", { id: root.id + "-title" },
      "Tokens in the plane: drag the query token x or a key k; each head's output o is an average of the keys under its weights"));
    svg.style.maxWidth = "24rem";
    // the grid faint, the axes darker, and the origin marked: dot products are taken from it
    var grid = svgEl("g", { "aria-hidden": "true", stroke: "currentColor" });
    for (var t = -PLANE; t <= PLANE; t++) {
      var a = toSvg([t, 0])[0], op = t === 0 ? "0.55" : "0.15";
      grid.appendChild(svgEl("line", { x1: a, y1: 0, x2: a, y2: SIZE, "stroke-opacity": op }));
      grid.appendChild(svgEl("line", { x1: 0, y1: a, x2: SIZE, y2: a, "stroke-opacity": op }));
    }
    var origin = toSvg([0, 0]);
    grid.appendChild(svgEl("circle", { cx: origin[0], cy: origin[1], r: 3, fill: "currentColor", stroke: "none" }));
    var originLabel = haloText({ "font-size": 12, fill: "currentColor", "data-origin": "true" });
    originLabel.textContent = "0";
    grid.appendChild(originLabel);
    svg.appendChild(grid);
    var links = svgEl("g", { "aria-hidden": "true" });
    svg.appendChild(links);
    var outputs = svgEl("g", { "aria-hidden": "true" });
    svg.appendChild(outputs);
    var pointsLayer = svgEl("g");
    svg.appendChild(pointsLayer);
    var plane = el("div", { class: "mx-plane" });
    plane.appendChild(svg);
    // the labels left off where they would cover others, named here (empty when none is)
    var planeNote = el("p", { class: "mx-note", "data-labels-left-off": "" });
    plane.appendChild(planeNote);
    panels.appendChild(plane);

    var side = el("div");
    panels.appendChild(side);
    var headBoxes = HEADS.map(function (head, h) {
      var box = el("div", { class: "mx-head", "data-head": String(h + 1) });
      side.appendChild(box);
      return box;
    });
    var live = el("p", { class: "mx-note", "aria-live": "polite" });
    side.appendChild(live);

    function makePoint(kind, index) {
      var g = svgEl("g", { class: "mx-point", tabindex: "0", role: "button",
        "aria-roledescription": "movable point", "data-point": kind === "q" ? "x" : "k" + (index + 1) });
      var shape = kind === "q"
        ? svgEl("rect", { x: -9, y: -9, width: 18, height: 18, fill: "currentColor", stroke: "#E69F00", "stroke-width": 2 })
        : svgEl("circle", { r: 10, fill: "var(--pst-color-background, #fff)", stroke: "currentColor", "stroke-width": 2 });
      // a touch target of 44 px around the point (WCAG 2.5.5), drawn transparent
      g.appendChild(svgEl("circle", { r: 22, fill: "transparent", class: "mx-hit" }));
      g.appendChild(shape);
      var label = notation(haloText({ "font-size": 14, fill: "currentColor" }),
        kind === "q" ? "x" : "k_" + (index + 1), true);
      g.appendChild(label);
      pointsLayer.appendChild(g);
      function get() { return kind === "q" ? state.query : state.keys[index]; }
      function set(v) {
        if (kind === "q") state.query = v; else state.keys[index] = v;
        update();
      }
      g.addEventListener("pointerdown", function (evt) {
        evt.preventDefault();
        try {
          g.setPointerCapture(evt.pointerId); // keep the drag when the pointer leaves the point
        } catch (err) {
          // a pointer the browser no longer tracks: the drag still follows its moves here
        }
        g.focus({ preventScroll: true });
        function move(e) {
          var p = svgPoint(svg, e);
          set(fromSvg(p.x, p.y).map(clamp));
        }
        function up() {
          g.removeEventListener("pointermove", move);
          g.removeEventListener("pointerup", up);
          g.removeEventListener("pointercancel", up);
        }
        g.addEventListener("pointermove", move);
        g.addEventListener("pointerup", up);
        g.addEventListener("pointercancel", up);
      });
      g.addEventListener("keydown", function (evt) {
        var d = { ArrowLeft: [-1, 0], ArrowRight: [1, 0], ArrowUp: [0, 1], ArrowDown: [0, -1] }[evt.key];
        if (!d) return;
        evt.preventDefault();
        var step = evt.shiftKey ? 4 * STEP : STEP, v = get();
        set([clamp(v[0] + d[0] * step), clamp(v[1] + d[1] * step)]);
      });
      return { g: g, get: get, kind: kind, index: index, label: label };
    }
    var points = state.keys.map(function (_, j) { return makePoint("k", j); });
    points.push(makePoint("q", 0));

    function maskRow() {
      var row = [];
      for (var j = 0; j < S; j++) {
        row.push(state.mask === "causal" ? j + 1 <= QUERY_POSITION : state.mask === "padding" ? j + 1 < S : true);
      }
      return row;
    }

    function update() {
      var mx = window.mhaExplore;
      var scale = state.scale === "sqrt" ? null : 1;
      var keep = state.mask === "none" ? null : [maskRow()];
      root.setAttribute("data-state", JSON.stringify(state));
      links.textContent = "";
      outputs.textContent = "";
      var summary = [], outLabels = [], queryLabels = [];
      HEADS.forEach(function (head, h) {
        var q = [matVec(state.query, head.w_q)];
        var k = state.keys.map(function (y) { return matVec(y, head.w_k); });
        var r = mx.scaled_dot_product_attention(q, k, state.keys, keep, scale); // W^V_h = I
        var w = r[1][0], o = r[0][0], colour = COLOURS[h];
        var box = headBoxes[h];
        box.setAttribute("data-weights", JSON.stringify(w));
        box.setAttribute("data-output", JSON.stringify(o));
        box.textContent = "";
        // the head's colour on a swatch, its name in the text's colour (contrast in both themes)
        box.appendChild(el("span", { "aria-hidden": "true", style: "display:inline-block;width:.8em;" +
          "height:.8em;margin-right:.3em;border-radius:.15em;background:" + colour }));
        box.appendChild(el("strong", {}, "Head " + (h + 1)));
        notation(box, h === 0 ? ": x and the keys as they are"
          : ": x turned by 90\u00b0, q_2 = x\u00a0W^Q_2 (the hollow diamond), the keys as they are");
        var bars = svgEl("svg", { viewBox: "0 0 " + (S * 56) + " 74", role: "img",
          "aria-label": "Head " + (h + 1) + " weights: " + w.map(function (x, j) {
            return "k" + (j + 1) + " " + (keep && !keep[0][j] ? "masked" : fmt(x, 2));
          }).join(", ") });
        w.forEach(function (x, j) {
          var hgt = 46 * x;
          bars.appendChild(svgEl("rect", { x: j * 56 + 8, y: 50 - hgt, width: 40, height: Math.max(hgt, 0.5), fill: colour }));
          if (keep && !keep[0][j]) {
            // a masked key: no weight at all, not a small one
            bars.appendChild(svgEl("text", { x: j * 56 + 28, y: 44, "font-size": 11, "text-anchor": "middle",
              fill: "currentColor", "font-style": "italic", "data-masked": "true" }, "masked"));
          }
          bars.appendChild(notation(svgEl("text", { x: j * 56 + 28, y: 66, "font-size": 12, "text-anchor": "middle",
            fill: "currentColor" }), "k_" + (j + 1) + (keep && !keep[0][j] ? "" : " " + fmt(x, 2)), true));
        });
        bars.style.maxWidth = "22rem";
        box.appendChild(bars);
        box.appendChild(notation(el("div", { class: "mx-note mx-num" }),
          "output o_" + (h + 1) + " = (" + fmt(o[0], 2) + ", " + fmt(o[1], 2) + ")"));
        var from = toSvg(state.query);
        w.forEach(function (x, j) {
          if (x < 0.005) return;
          var to = toSvg(state.keys[j]);
          links.appendChild(svgEl("line", { x1: from[0], y1: from[1], x2: to[0], y2: to[1], stroke: colour,
            "stroke-width": 1 + 7 * x, "stroke-opacity": 0.45, "stroke-dasharray": h ? "6 3" : "none" }));
        });
        var p = toSvg(o);
        outputs.appendChild(svgEl("path", { d: "M" + (p[0] - 7) + " " + (p[1] - 7) + "l14 14m0 -14l-14 14",
          stroke: colour, "stroke-width": 3 }));
        var oLabel = notation(haloText({ "font-size": 13, fill: "currentColor" }), "o_" + (h + 1), true);
        outputs.appendChild(oLabel);
        outLabels.push({ node: oLabel, mark: { c: p, half: 8.5 }, name: "o_" + (h + 1),
          what: "head " + (h + 1) + "'s output, the cross in its colour" });
        if (h > 0) {
          // this head's query, x W^Q_h, where it differs from x: a hollow diamond in its colour
          var qp = toSvg(q[0]);
          outputs.appendChild(svgEl("path", { d: "M" + qp[0] + " " + (qp[1] - 8) + "l8 8l-8 8l-8 -8z", fill: "none",
            stroke: colour, "stroke-width": 2.5, "data-query-head": String(h + 1) }));
          var qLabel = notation(haloText({ "font-size": 13, fill: "currentColor" }), "q_" + (h + 1), true);
          outputs.appendChild(qLabel);
          queryLabels.push({ node: qLabel, mark: { c: qp, half: 9.5 }, name: "q_" + (h + 1),
            what: "head " + (h + 1) + "'s query, the hollow diamond" });
        }
        var top = w.indexOf(Math.max.apply(null, w));
        summary.push("head " + (h + 1) + " gives k_" + (top + 1) + " the most weight, " + fmt(w[top], 2));
      });
      var pointLabels = [];
      points.forEach(function (pt) {
        var v = pt.get(), p = toSvg(v);
        pt.g.setAttribute("transform", "translate(" + p[0] + " " + p[1] + ")");
        var item = { node: pt.label, local: true,
          mark: pt.kind === "q" ? { c: p, half: 10 } : { c: p, r: 11 },
          name: pt.kind === "q" ? "x" : "k_" + (pt.index + 1),
          what: pt.kind === "q" ? "the query token, the square"
            : "the key at (" + fmt(v[0], 2) + ", " + fmt(v[1], 2) + ")" };
        if (pt.kind === "q") pointLabels.unshift(item); else pointLabels.push(item);
        var masked = pt.kind === "k" && keep && !keep[0][pt.index];
        pt.g.setAttribute("opacity", masked ? "0.35" : "1");
        pt.g.setAttribute("aria-label", (pt.kind === "q" ? "query token x" : "key k" + (pt.index + 1)) +
          " at (" + fmt(v[0], 2) + ", " + fmt(v[1], 2) + ")" + (masked ? ", masked" : "") +
          "; arrow keys move it");
      });
      live.textContent = "";
      notation(live, summary.join("; ") + ".");

      // x first, then the keys, the outputs and the head's query; the origin's 0 last (left
      // off without a word when there is no room: the axes cross there)
      var originItem = { node: originLabel, mark: { c: origin, r: 3 },
        dirs: LABEL_DIRS.slice(6).concat(LABEL_DIRS.slice(0, 6)) }; // below left first
      var items = pointLabels.concat(outLabels, queryLabels, [originItem]);
      var left = layoutLabels(items, items.map(function (it) { return it.mark; })).filter(function (it) {
        return it !== originItem;
      });
      planeNote.textContent = "";
      planeNote.setAttribute("data-labels-left-off", left.map(function (it) { return it.name.replace("_", ""); }).join(" "));
      if (left.length) {
        notation(planeNote, "Not labelled, to keep the labels apart: " + left.map(function (it) {
          return it.name + " (" + it.what + ")";
        }).join("; ") + ".");
      }
    }

    scaleSel.select.addEventListener("change", function () { state.scale = scaleSel.select.value; update(); });
    maskSel.select.addEventListener("change", function () { state.mask = maskSel.select.value; update(); });
    update();
  }

  /* ---------------------------------------------------------------- the online softmax */

  function onlineSoftmaxFigure(root) {
    var state = {
      scores: [1.0, 3.5, -0.5, 2.0, 6.0, 0.5, 4.0, -2.0],
      values: [0.5, -1.0, 2.0, 1.5, -0.5, 1.0, 0.0, 2.5],
      block_size: 3,
      step: 0,
    };
    var S = state.scores.length;

    var controls = el("div", { class: "mx-row" });
    var prev = button("\u25c0 Previous block", "Previous block");
    var next = button("Next block \u25b6", "Next block");
    var random = button("Random scores");
    var blockSel = select("Block size B_c", [["1", "1"], ["2", "2"], ["3", "3"], ["4", "4"], ["8", "8"]], "3");
    [prev, next, blockSel.wrap, random].forEach(function (c) { controls.appendChild(c); });
    root.appendChild(controls);

    var svg = svgEl("svg", { viewBox: "0 0 " + (S * 50 + 10) + " 174", role: "img",
      "aria-labelledby": root.id + "-title" });
    var title = svgEl("title", { id: root.id + "-title" });
    svg.appendChild(title);
    svg.style.maxWidth = "34rem";
    root.appendChild(svg);

    var panels = el("div", { class: "mx-panels" });
    root.appendChild(panels);
    // one row per key: its score (an input), its value, the exact weight, the running one
    var rowsBox = el("div", { class: "mx-scroll" });
    var table = el("table", { class: "mx-keys" });
    var head = el("tr");
    ["j", "score z_j", "value v_j", "exact softmax(z)_j", "so far e^{z_j \u2212 m}/\u2113"].forEach(function (t) {
      head.appendChild(notation(el("th", { scope: "col" }), t));
    });
    table.appendChild(head);
    var zInputs = [], vCells = [], exactCells = [], runCells = [], trs = [];
    for (var j = 0; j < S; j++) {
      var tr = el("tr");
      tr.appendChild(el("th", { scope: "row" }, String(j + 1)));
      var td = el("td");
      var inp = el("input", { type: "number", step: "0.5", "aria-label": spoken("score z_" + (j + 1)),
        "data-j": String(j) });
      zInputs.push(inp);
      td.appendChild(inp);
      tr.appendChild(td);
      [vCells, exactCells, runCells].forEach(function (cells) {
        var c = el("td", { class: "mx-num" });
        cells.push(c);
        tr.appendChild(c);
      });
      trs.push(tr);
      table.appendChild(tr);
    }
    rowsBox.appendChild(table);
    panels.appendChild(rowsBox);
    var stateBox = el("div", { class: "mx-scroll" });
    panels.appendChild(stateBox);
    var live = el("p", { class: "mx-note", "aria-live": "polite" });
    root.appendChild(live);

    function blocks() {
      return Math.ceil(S / state.block_size);
    }

    function update() {
      var mx = window.mhaExplore;
      var nb = blocks();
      state.step = Math.max(0, Math.min(state.step, nb));
      root.setAttribute("data-state", JSON.stringify(state));
      // One row of scores as a query of width 1: q = 1, k_j = z_j and 1/sqrt(1) = 1, so the
      // scores of the tiled forward are exactly z (mha.backends.tiled.attention, the same).
      var trace = [];
      var key = state.scores.map(function (z) { return [z]; });
      var val = state.values.map(function (v) { return [v]; });
      mx.tiled_attention([[1]], key, val, null, { block_q: 1, block_kv: state.block_size, trace: trace });
      var exact = mx.softmax(state.scores);
      var exactOut = mx.scaled_dot_product_attention([[1]], key, val)[0][0][0];
      var st = state.step === 0
        ? { row_max: [-Infinity], row_sum: [0], rescale: [1], acc: [[0]], kv_block: [0, 0] }
        : trace[state.step - 1];
      var m = st.row_max[0], l = st.row_sum[0], acc = st.acc[0][0];
      var seen = st.kv_block[1];
      var running = [];
      for (var j = 0; j < S; j++) running.push(j < seen ? Math.exp(state.scores[j] - m) / l : null);
      root.setAttribute("data-running", JSON.stringify({ row_max: m, row_sum: l, rescale: st.rescale[0], acc: acc,
        seen: seen, weights: running }));
      root.setAttribute("data-exact", JSON.stringify({ weights: exact, output: exactOut }));
      for (j = 0; j < S; j++) {
        if (document.activeElement !== zInputs[j]) zInputs[j].value = String(state.scores[j]);
        vCells[j].textContent = fmt(state.values[j], 1);
        exactCells[j].textContent = fmt(exact[j]);
        runCells[j].textContent = running[j] === null ? "\u00b7" : fmt(running[j]);
        var b = Math.floor(j / state.block_size);
        trs[j].className = b === state.step - 1 ? "mx-current" : b < state.step ? "mx-seen" : "";
      }

      // bars: the exact weights (outlines) and e^(z_j - m) / l over the blocks read (filled)
      svg.textContent = "";
      svg.appendChild(title);
      title.textContent = "Scores in blocks of " + state.block_size + "; " +
        (state.step ? "blocks 1 to " + state.step + " of " + nb + " read" : "no block read yet") +
        ". Filled bars: each score's weight from the blocks read so far, over their running sum; " +
        "outlines: the exact softmax of the whole row.";
      for (var b2 = 0; b2 < nb; b2++) {
        var x0 = 5 + b2 * state.block_size * 50, w = Math.min(state.block_size, S - b2 * state.block_size) * 50;
        var current = b2 === state.step - 1;
        svg.appendChild(svgEl("rect", { x: x0 + 1, y: 2, width: w - 2, height: 130, rx: 4,
          fill: current ? "#E69F00" : b2 < state.step ? "#56B4E9" : "none", "fill-opacity": current ? 0.25 : 0.12,
          stroke: "currentColor", "stroke-opacity": 0.3 }));
        svg.appendChild(svgEl("text", { x: x0 + w / 2, y: 168, "font-size": 13, "text-anchor": "middle",
          fill: "currentColor" }, "block " + (b2 + 1)));
      }
      for (j = 0; j < S; j++) {
        var x = 5 + j * 50 + 10, h = 110 * exact[j];
        if (running[j] !== null) {
          svg.appendChild(svgEl("rect", { x: x, y: 125 - 110 * running[j], width: 30,
            height: Math.max(110 * running[j], 0.5), fill: "#0072B2" }));
        }
        svg.appendChild(svgEl("rect", { x: x, y: 125 - h, width: 30, height: Math.max(h, 0.5), fill: "none",
          stroke: "#D55E00", "stroke-width": 2, "stroke-dasharray": "4 2" }));
        svg.appendChild(notation(svgEl("text", { x: x + 15, y: 145, "font-size": 13, "text-anchor": "middle",
          fill: "currentColor" }), "z_" + (j + 1), true));
      }

      var rows = [
        ["blocks read", state.step + " of " + nb],
        ["running max m", fmt(m)],
        // the first block has nothing before it to rescale: e^(m_old - m_new) = e^(-inf) = 0
        ["this step's rescale e^{m_{old} \u2212 m_{new}}",
          state.step > 1 ? fmt(st.rescale[0], 4) : state.step ? "\u2014 (nothing before)" : "\u2014"],
        ["running sum \u2113", fmt(l, 4)],
        ["accumulator \u00f5 = \u03a3_j e^{z_j \u2212 m} v_j", fmt(acc, 4)],
        ["\u00f5 / \u2113, the output so far", l ? fmt(acc / l, 4) : "\u2014"],
        ["exact output \u03a3_j softmax(z)_j v_j", fmt(exactOut, 4)],
      ];
      var t = el("table");
      rows.forEach(function (r) {
        var tr2 = el("tr");
        tr2.appendChild(notation(el("th", { scope: "row", style: "text-align:left;white-space:normal" }), r[0]));
        tr2.appendChild(el("td", { class: "mx-num" }, r[1]));
        t.appendChild(tr2);
      });
      stateBox.textContent = "";
      stateBox.appendChild(t);
      prev.disabled = state.step === 0;
      next.disabled = state.step === nb;
      live.textContent = state.step === nb
        ? "All blocks read: \u00f5/\u2113 = " + fmt(acc / l, 4) + ", the exact output " + fmt(exactOut, 4) + "."
        : "Block " + state.step + " of " + nb + ": m = " + fmt(m) + ", \u2113 = " + fmt(l, 4) + ".";
    }

    zInputs.forEach(function (inp, j) {
      inp.addEventListener("input", function () {
        var x = parseFloat(inp.value);
        if (!isFinite(x)) return;
        state.scores[j] = Math.max(-50, Math.min(50, x));
        update();
      });
      inp.addEventListener("change", function () { inp.value = String(state.scores[j]); });
    });
    prev.addEventListener("click", function () { state.step -= 1; update(); });
    next.addEventListener("click", function () { state.step += 1; update(); });
    blockSel.select.addEventListener("change", function () {
      state.block_size = parseInt(blockSel.select.value, 10);
      state.step = 0;
      update();
    });
    random.addEventListener("click", function () {
      state.scores = state.scores.map(function () { return Math.round((Math.random() * 12 - 4) * 2) / 2; });
      state.values = state.values.map(function () { return Math.round((Math.random() * 6 - 3) * 2) / 2; });
      state.step = 0;
      update();
    });
    update();
  }

  /* ---------------------------------------------------------------- the cache */

  // Llama 2 7B's attention (mha.cost.arithmetic.PUBLISHED_CONFIGS), float16.
  var MODEL = { name: "Llama 2 7B", num_layers: 32, num_heads: 32, d_head: 128, d_model: 4096,
    max_context: 4096, dtype: "float16" };
  var PROMPT = 8;

  function bytesText(n) {
    var mib = n / 1048576;
    return n.toLocaleString("en-US") + " bytes (" +
      (mib >= 1024 ? (mib / 1024).toFixed(2) + " GiB" : mib >= 1 ? mib.toFixed(1) + " MiB" : (n / 1024).toFixed(1) + " KiB") + ")";
  }

  function kvCacheFigure(root) {
    var state = { tokens: PROMPT, num_kv_heads: MODEL.num_heads };
    root.setAttribute("data-model", JSON.stringify(MODEL));
    var controls = el("div", { class: "mx-row" });
    var one = button("Append a token");
    var many = button("Append 256 tokens");
    var reset = button("Start over", "Start over from the prompt of " + PROMPT + " tokens");
    var divisors = [];
    for (var d = 1; d <= MODEL.num_heads; d++) if (MODEL.num_heads % d === 0) divisors.push([String(d), String(d)]);
    var kvSel = select("Key/value heads H_{kv}", divisors, String(MODEL.num_heads));
    [one, many, reset, kvSel.wrap].forEach(function (c) { controls.appendChild(c); });
    root.appendChild(controls);
    var svg = svgEl("svg", { viewBox: "0 0 360 214", role: "img", "aria-labelledby": root.id + "-title" });
    var title = svgEl("title", { id: root.id + "-title" });
    svg.style.maxWidth = "34rem";
    root.appendChild(svg);
    function swatch(colour) {
      return el("span", { "aria-hidden": "true", style: "display:inline-block;width:.8em;height:.8em;" +
        "margin-right:.3em;vertical-align:-.05em;border-radius:.15em;background:" + colour });
    }
    var legend = el("p", { class: "mx-note mx-legend" });
    [["#0072B2", "the cache: a column per position held; in the bar, the cached keys and values the step reads. "],
      ["#D55E00", "The newest position. "],
      ["#999999", "Fixed: the bytes the step moves at any length: it reads the attention weights W^Q, W^K, W^V, " +
        "W^O (W^K and W^V narrower when H_{kv} < H) and the new token's input, and writes its output and its new " +
        "key and value."]].forEach(function (item) {
      legend.appendChild(swatch(item[0]));
      notation(legend, item[1]);
    });
    root.appendChild(legend);
    // one scale for every bar: the longest step, H_kv = H at the longest context, is the full width
    var FULL = window.mhaExplore.decode_step_cost(MODEL.d_model, MODEL.num_heads, MODEL.num_heads,
      MODEL.max_context, MODEL.dtype).bytes;
    var out = el("div", { class: "mx-scroll" });
    root.appendChild(out);
    var live = el("p", { class: "mx-note", "aria-live": "polite" });
    root.appendChild(live);

    function update() {
      var mx = window.mhaExplore;
      var S = state.tokens + 1; // the next step attends to the cached tokens and itself
      var H_kv = state.num_kv_heads;
      var cache = mx.kv_cache_bytes(MODEL.num_layers, state.tokens, H_kv, MODEL.d_head, MODEL.dtype);
      var step = mx.decode_step_cost(MODEL.d_model, MODEL.num_heads, H_kv, S, MODEL.dtype);
      // A step at S = 1 reads no cache: the weights, the new keys and values, input and output.
      var fixed = mx.decode_step_cost(MODEL.d_model, MODEL.num_heads, H_kv, 1, MODEL.dtype).bytes;
      var cacheRead = step.bytes - fixed; // 2 (S - 1) H_kv Dh elements
      root.setAttribute("data-state", JSON.stringify(state));
      root.setAttribute("data-cache-bytes", String(cache));
      root.setAttribute("data-step-bytes", String(step.bytes));
      root.setAttribute("data-step-flops", String(step.flops));

      svg.textContent = "";
      svg.appendChild(title);
      var cols = Math.min(state.tokens, 48);
      title.textContent = "The cache of one layer: one column per position held (" +
        (state.tokens > 48 ? "the last 48 of " + state.tokens : "all " + state.tokens) +
        "), as tall as its " + H_kv + " key/value head" + (H_kv > 1 ? "s" : "") + " (32 at most), the newest in orange. " +
        "The bar: the bytes the next step's attention sublayer reads and writes in one layer, " + (step.bytes / 1048576).toFixed(1) +
        " MiB, on a fixed scale of 0 to " + Math.round(FULL / 1048576) + " MiB.";
      // the cache: one column per position (the last 48 held), its height H_kv heads of 32
      var cw = 300 / 48, ch = 80 / 32;
      var cell = svgEl("g");
      for (var c = 0; c < cols; c++) {
        var newest = c === cols - 1;
        cell.appendChild(svgEl("rect", { x: 40 + (48 - cols + c) * cw, y: 10 + (32 - H_kv) * ch, width: cw - 1,
          height: H_kv * ch, fill: newest ? "#D55E00" : "#0072B2", "fill-opacity": 0.85, "data-newest": String(newest) }));
      }
      svg.appendChild(cell);
      // the height of H = 32 heads, for comparison
      svg.appendChild(svgEl("rect", { x: 40, y: 10, width: 300, height: 80, fill: "none", stroke: "currentColor",
        "stroke-opacity": 0.3, "stroke-dasharray": "3 3" }));
      svg.appendChild(notation(svgEl("text", { x: 0, y: 104, "font-size": 13, fill: "currentColor", "data-label": "h-kv" }),
        "H_{kv} = " + H_kv, true));
      svg.appendChild(svgEl("text", { x: 340, y: 104, "font-size": 13, "text-anchor": "end", fill: "currentColor" },
        (state.tokens > 48 ? "the last 48 of " : "") + state.tokens.toLocaleString("en-US") + " positions"));
      // the step's bytes on the fixed scale, with a MiB axis
      var scale = 340 / FULL, y0 = 130;
      svg.appendChild(svgEl("text", { x: 0, y: y0 - 8, "font-size": 13, fill: "currentColor" },
        "next step, one attention sublayer, reads and writes:"));
      svg.appendChild(svgEl("rect", { x: 0, y: y0, width: fixed * scale, height: 20, fill: "#999999",
        "data-bar": "fixed" }));
      svg.appendChild(svgEl("rect", { x: fixed * scale, y: y0, width: Math.max(cacheRead * scale, 0.5), height: 20,
        fill: "#0072B2", "data-bar": "cache" }));
      var axis = svgEl("g", { fill: "currentColor", stroke: "currentColor" });
      axis.appendChild(svgEl("line", { x1: 0, y1: y0 + 24, x2: 340, y2: y0 + 24, "stroke-opacity": 0.5 }));
      for (var mib = 0; mib * 1048576 <= FULL; mib += 64) {
        var tx = Math.min(mib * 1048576 * scale, 339.5);
        axis.appendChild(svgEl("line", { x1: tx, y1: y0 + 24, x2: tx, y2: y0 + 29, "stroke-opacity": 0.5 }));
        axis.appendChild(svgEl("text", { x: tx, y: y0 + 43, "font-size": 12, stroke: "none",
          "text-anchor": mib ? "middle" : "start" }, mib + (mib ? "" : " MiB")));
      }
      svg.appendChild(axis);
      svg.appendChild(svgEl("text", { x: 0, y: y0 + 66, "font-size": 13, fill: "currentColor" },
        (step.bytes / 1048576).toFixed(1) + " MiB: grey fixed, blue the cache"));

      var rows = [
        ["tokens held, S \u2212 1", state.tokens.toLocaleString("en-US")],
        ["cache, all " + MODEL.num_layers + " layers (`kv_cache_bytes`)", bytesText(cache)],
        ["next step, one attention sublayer, reads and writes (`decode_step_cost`, S = " + S.toLocaleString("en-US") + ")",
          bytesText(step.bytes)],
        ["of which the cache", bytesText(cacheRead)],
        ["next step's FLOPs, one attention sublayer", step.flops.toLocaleString("en-US")],
      ];
      var t = el("table", { class: "mx-wrap" });
      rows.forEach(function (r) {
        var tr = el("tr");
        tr.appendChild(notation(el("th", { scope: "row", style: "text-align:left" }), r[0]));
        tr.appendChild(el("td", { class: "mx-num" }, r[1]));
        t.appendChild(tr);
      });
      out.textContent = "";
      out.appendChild(t);
      var full = state.tokens >= MODEL.max_context - 1;
      one.disabled = full;
      many.disabled = full;
      live.textContent = (full ? MODEL.name + " was built for " + MODEL.max_context.toLocaleString("en-US") +
        " positions: the cache is full. " : "") + "Cache: " + bytesText(cache) + ".";
    }

    function append(n) {
      state.tokens = Math.min(state.tokens + n, MODEL.max_context - 1);
      update();
    }
    one.addEventListener("click", function () { append(1); });
    many.addEventListener("click", function () { append(256); });
    reset.addEventListener("click", function () { state.tokens = PROMPT; update(); });
    kvSel.select.addEventListener("change", function () {
      state.num_kv_heads = parseInt(kvSel.select.value, 10);
      update();
    });
    update();
  }

  var FIGURES = { heads: headsFigure, "online-softmax": onlineSoftmaxFigure, "kv-cache": kvCacheFigure };

  function start() {
    if (!window.mhaExplore) return;
    if (!document.getElementById("mha-explore-style")) {
      var style = el("style", { id: "mha-explore-style" });
      style.textContent = STYLE;
      document.head.appendChild(style);
    }
    var roots = document.querySelectorAll(".mha-explore[data-explore]");
    for (var i = 0; i < roots.length; i++) {
      var root = roots[i], make = FIGURES[root.getAttribute("data-explore")];
      if (!make || root.getAttribute("data-ready")) continue;
      if (!root.id) root.id = "mha-explore-" + i;
      var fallback = root.querySelector(".mha-explore-fallback");
      if (fallback) fallback.hidden = true;
      make(root);
      root.setAttribute("data-ready", "true");
    }
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
