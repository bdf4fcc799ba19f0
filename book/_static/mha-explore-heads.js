/* The explorable "heads" of one-head-to-many: one query token and five keys in the plane,
 * and two heads' attention weights and outputs for that query.
 *
 * The reader drags the query x or a key (or moves a focused one with the arrow keys) and
 * chooses the scale of the scores and a mask; both heads' weights, outputs and queries are
 * recomputed with window.mhaExplore.scaled_dot_product_attention (mha-explore.js) and drawn
 * with mha-explore-kit.js, their labels laid out so that none covers another. The figure's
 * state and numbers are in data-state, data-weights and data-output for the browser test.
 */
(function () {
  "use strict";

  var kit = window.mhaExploreKit;
  if (!kit) return;
  var el = kit.el, svgEl = kit.svgEl, notation = kit.notation, fmt = kit.fmt, select = kit.select,
    svgPoint = kit.svgPoint;

  // Okabe and Ito's colour-blind-safe colours, as the site's Plotly figures use them.
  var COLOURS = ["#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00"];

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

    var controls = el("div", { class: "mx-row mx-stack", "data-mha-control": "" });
    // an option is text only: the subscripts of the notation are in the note beside it
    var scaleSel = select("Scale of the scores", [["sqrt", "1/\u221a2"], ["none", "none (1)"]], "sqrt");
    var scaleNote = notation(el("span", { class: "mx-note" }), "1/\u221aD_h with D_h = 2");
    var maskSel = select("Mask", [["none", "none"],
      ["causal", "causal, x at " + QUERY_POSITION],
      ["padding", "padding at k" + String.fromCharCode(0x2080 + S)]], "none");
    controls.appendChild(scaleSel.wrap);
    controls.appendChild(maskSel.wrap);
    root.appendChild(controls);
    root.appendChild(scaleNote);

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
    // which key each head favours, for a screen reader (the bars show it)
    var live = el("p", { class: "mx-note mx-sr", "aria-live": "polite" });
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
      // Chromium does not apply touch-action to an SVG <g>: the svg's pan-y would let a
      // vertical drag scroll the page. A touch that starts on a point is the drag's alone.
      g.addEventListener("touchstart", function (evt) { evt.preventDefault(); }, { passive: false });
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
        notation(box, h === 0 ? ": x as it is" : ": x turned by 90\u00b0, q_2 = x\u00a0W^Q_2 (\u25c7)");
        var bars = svgEl("svg", { viewBox: "0 0 " + (S * 56) + " 66", role: "img",
          "aria-label": "Head " + (h + 1) + " weights: " + w.map(function (x, j) {
            return "k" + (j + 1) + " " + (keep && !keep[0][j] ? "masked" : fmt(x, 2));
          }).join(", ") });
        w.forEach(function (x, j) {
          var hgt = 40 * x;
          bars.appendChild(svgEl("rect", { x: j * 56 + 8, y: 42 - hgt, width: 40, height: Math.max(hgt, 0.5), fill: colour }));
          if (keep && !keep[0][j]) {
            // a masked key: no weight at all, not a small one
            bars.appendChild(svgEl("text", { x: j * 56 + 28, y: 36, "font-size": 11, "text-anchor": "middle",
              fill: "currentColor", "font-style": "italic", "data-masked": "true" }, "masked"));
          }
          bars.appendChild(notation(svgEl("text", { x: j * 56 + 28, y: 60, "font-size": 13, "text-anchor": "middle",
            fill: "currentColor" }), "k_" + (j + 1) + (keep && !keep[0][j] ? "" : " " + fmt(x, 2)), true));
        });
        bars.style.maxWidth = "22rem";
        box.appendChild(notation(el("span", { class: "mx-num" }),
          "; output o_" + (h + 1) + " = (" + fmt(o[0], 2) + ", " + fmt(o[1], 2) + ")"));
        box.appendChild(bars);
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

  kit.figure("heads", headsFigure);
})();
