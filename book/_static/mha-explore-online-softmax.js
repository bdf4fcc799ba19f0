/* The explorable "online-softmax" of attention-without-the-score-matrix: the softmax of one
 * row of scores computed block by block, as the tiled forward does.
 *
 * The reader steps through the blocks, types scores, draws random ones or changes the block
 * size B_c; the running max, running sum and accumulator come from
 * window.mhaExplore.tiled_attention's trace (mha-explore.js), beside the exact softmax. The
 * figure's state and numbers are in data-state, data-running and data-exact for the
 * browser test.
 */
(function () {
  "use strict";

  var kit = window.mhaExploreKit;
  if (!kit) return;
  var el = kit.el, svgEl = kit.svgEl, notation = kit.notation, spoken = kit.spoken, fmt = kit.fmt,
    select = kit.select, button = kit.button;

  function onlineSoftmaxFigure(root) {
    var state = {
      scores: [1.0, 3.5, -0.5, 2.0, 6.0, 0.5, 4.0, -2.0],
      values: [0.5, -1.0, 2.0, 1.5, -0.5, 1.0, 0.0, 2.5],
      block_size: 3,
      step: 0,
    };
    var S = state.scores.length;

    var controls = el("div", { class: "mx-row", "data-mha-control": "" });
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
    // a column per key (so that the table is as short as a phone needs): its score (an
    // input), its value, the exact weight, the running one; a column's cells are marked
    // (mx-current, mx-seen) as the blocks are read
    var rowsBox = el("div", { class: "mx-scroll", style: "flex-basis:100%" });
    var table = el("table", { class: "mx-keys" });
    var zInputs = [], vCells = [], exactCells = [], runCells = [], cols = [];
    var head = el("tr");
    head.appendChild(el("th", { scope: "col", style: "text-align:left" }, "j"));
    for (var j = 0; j < S; j++) {
      var th = el("th", { scope: "col" }, String(j + 1));
      cols.push([th]);
      head.appendChild(th);
    }
    table.appendChild(head);
    var caption = el("caption", { style: "caption-side:bottom;text-align:left" });
    notation(caption, "score z_j, value v_j; exact: softmax(z)_j; so far: e^{z_j \u2212 m}/\u2113 with m and " +
      "\u2113 of the blocks read.");
    table.appendChild(caption);
    [["score", zInputs], ["value", vCells], ["exact", exactCells], ["so far", runCells]].forEach(function (row) {
      var tr = el("tr");
      tr.appendChild(el("th", { scope: "row", style: "text-align:left" }, row[0]));
      for (var k = 0; k < S; k++) {
        var td = el("td", { class: "mx-num" });
        if (row[1] === zInputs) {
          var inp = el("input", { type: "number", step: "0.5", "aria-label": spoken("score z_" + (k + 1)),
            "data-j": String(k) });
          zInputs.push(inp);
          td.appendChild(inp);
        } else {
          row[1].push(td);
        }
        cols[k].push(td);
        tr.appendChild(td);
      }
      table.appendChild(tr);
    });
    rowsBox.appendChild(table);
    panels.appendChild(rowsBox);
    var stateBox = el("div", { class: "mx-scroll" });
    panels.appendChild(stateBox);
    // the step's result for a screen reader (the tables show it)
    var live = el("p", { class: "mx-note mx-sr", "aria-live": "polite" });
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
        var mark = b === state.step - 1 ? "mx-current" : b < state.step ? "mx-seen" : "";
        cols[j].forEach(function (cell) { cell.classList.remove("mx-current", "mx-seen"); if (mark) cell.classList.add(mark); });
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

  kit.figure("online-softmax", onlineSoftmaxFigure);
})();
