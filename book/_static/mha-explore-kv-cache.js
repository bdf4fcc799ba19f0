/* The explorable "kv-cache" of inference: Llama 2 7B's key/value cache as tokens are
 * appended, and the bytes one decoding step of an attention sublayer reads and writes.
 *
 * The reader appends tokens and chooses the number of key/value heads H_kv; the cache's
 * size and the step's cost come from window.mhaExplore.kv_cache_bytes and decode_step_cost
 * (mha-explore.js). The figure's state and numbers are in data-state, data-cache-bytes,
 * data-step-bytes and data-step-flops for the browser test.
 */
(function () {
  "use strict";

  var kit = window.mhaExploreKit;
  if (!kit) return;
  var el = kit.el, svgEl = kit.svgEl, notation = kit.notation, select = kit.select,
    button = kit.button;

  // Llama 2 7B's attention (mha.cost.arithmetic.PUBLISHED_CONFIGS), float16.
  var MODEL = { name: "Llama 2 7B", num_layers: 32, num_heads: 32, d_head: 128, d_model: 4096,
    max_context: 4096, dtype: "float16" };
  var PROMPT = 8;
  // The picture, in SVG units: the cache's bands, then the step's bar.
  var CACHE_X = 50, CACHE_Y = 18, CACHE_W = 300, CACHE_H = 96, BAR_Y = 168, VIEW_H = 206;

  // The axis of positions: 64, doubled until it holds n (the model's context at most).
  function axisSpan(n) {
    var span = 64;
    while (span < n && span < MODEL.max_context) span *= 2;
    return span;
  }

  function bytesText(n) {
    var mib = n / 1048576;
    return n.toLocaleString("en-US") + " bytes (" +
      (mib >= 1024 ? (mib / 1024).toFixed(2) + " GiB" : mib >= 1 ? mib.toFixed(1) + " MiB" : (n / 1024).toFixed(1) + " KiB") + ")";
  }

  // the same in a table cell: the bytes and their binary size each on one line
  function bytesCell(n) {
    var text = bytesText(n), cut = text.indexOf(" (");
    var td = el("td", { class: "mx-num" });
    td.appendChild(el("span", { style: "white-space:nowrap" }, text.slice(0, cut)));
    td.appendChild(document.createTextNode(" "));
    td.appendChild(el("span", { style: "white-space:nowrap" }, text.slice(cut + 1)));
    return td;
  }

  function kvCacheFigure(root) {
    var state = { tokens: PROMPT, num_kv_heads: MODEL.num_heads };
    root.setAttribute("data-model", JSON.stringify(MODEL));
    var controls = el("div", { class: "mx-row", "data-mha-control": "" });
    var one = button("Append a token");
    var many = button("Append 256", "Append 256 tokens");
    var reset = button("Start over", "Start over from the prompt of " + PROMPT + " tokens");
    var divisors = [];
    for (var d = 1; d <= MODEL.num_heads; d++) if (MODEL.num_heads % d === 0) divisors.push([String(d), String(d)]);
    var kvSel = select("Key/value heads H_{kv}", divisors, String(MODEL.num_heads));
    [one, many, reset, kvSel.wrap].forEach(function (c) { controls.appendChild(c); });
    root.appendChild(controls);
    var svg = svgEl("svg", { viewBox: "0 0 360 " + VIEW_H, role: "img", "aria-labelledby": root.id + "-title" });
    var title = svgEl("title", { id: root.id + "-title" });
    svg.style.maxWidth = "34rem";
    root.appendChild(svg);
    function swatch(colour) {
      return el("span", { "aria-hidden": "true", style: "display:inline-block;width:.8em;height:.8em;" +
        "margin-right:.3em;vertical-align:-.05em;border-radius:.15em;background:" + colour });
    }
    var legend = el("p", { class: "mx-note mx-legend" });
    [["#0072B2", "cached keys and values (in the bar: what the step reads) "],
      ["#D55E00", "the newest position "],
      ["#999999", "fixed: the weights W^Q, W^K, W^V, W^O and the token's own vectors"]
    ].forEach(function (item) {
      legend.appendChild(swatch(item[0]));
      notation(legend, item[1]);
    });
    root.appendChild(legend);
    // one scale for every bar: the longest step, H_kv = H at the longest context, is the full width
    var FULL = window.mhaExplore.decode_step_cost(MODEL.d_model, MODEL.num_heads, MODEL.num_heads,
      MODEL.max_context, MODEL.dtype).bytes;
    var out = el("div", { class: "mx-scroll" });
    root.appendChild(out);
    // the cache's size for a screen reader (the table shows it); a full cache is said aloud
    var live = el("p", { class: "mx-note", "aria-live": "polite" });
    root.appendChild(live);

    // The cache of every layer: a band per layer (rows), its height the layer's H_kv heads of
    // H, its length the positions held, on an axis of positions that doubles as the cache
    // grows (64 at least, the model's context at most), so that every append shows.
    function drawCache(H_kv) {
      var n = state.tokens, span = axisSpan(n), L = MODEL.num_layers;
      var per = CACHE_W / span, band = CACHE_H / L, h = band * H_kv / MODEL.num_heads;
      var newest = Math.max(per, 1.2); // the newest position, at least a pixel wide on any axis
      var g = svgEl("g", { "data-part": "cache", "data-axis-span": String(span), "data-axis-width": String(CACHE_W) });
      for (var l = 0; l < L; l++) {
        var y = CACHE_Y + l * band, layer = svgEl("g", { "data-layer": String(l + 1) });
        layer.appendChild(svgEl("rect", { x: CACHE_X, y: y, width: n * per - newest, height: h, fill: "#0072B2",
          "fill-opacity": 0.85 }));
        layer.appendChild(svgEl("rect", { x: CACHE_X + n * per - newest, y: y, width: newest, height: h,
          fill: "#D55E00", "data-newest": "true" }));
        g.appendChild(layer);
      }
      svg.appendChild(g);
      // the room of H heads per layer over the axis, for comparison
      svg.appendChild(svgEl("rect", { x: CACHE_X, y: CACHE_Y, width: CACHE_W, height: CACHE_H, fill: "none",
        stroke: "currentColor", "stroke-opacity": 0.3, "stroke-dasharray": "3 3" }));
      [[1, CACHE_Y + 6], [L, CACHE_Y + CACHE_H]].forEach(function (at) {
        svg.appendChild(svgEl("text", { x: CACHE_X - 4, y: at[1], "font-size": 10, "text-anchor": "end",
          fill: "currentColor" }, "layer " + at[0]));
      });
      svg.appendChild(notation(svgEl("text", { x: 0, y: 11, "font-size": 12, fill: "currentColor", "data-label": "h-kv" }),
        "the cache, all " + L + " layers, H_{kv} = " + H_kv + " of " + MODEL.num_heads + " heads each", true));
      var axis = svgEl("g", { fill: "currentColor", stroke: "currentColor" }), y0 = CACHE_Y + CACHE_H;
      for (var t = 0; t <= 4; t++) {
        var tx = CACHE_X + t * CACHE_W / 4;
        axis.appendChild(svgEl("line", { x1: tx, y1: y0, x2: tx, y2: y0 + 4, "stroke-opacity": 0.5 }));
        axis.appendChild(svgEl("text", { x: tx, y: y0 + 15, "font-size": 10, stroke: "none",
          "text-anchor": t === 0 ? "start" : t === 4 ? "end" : "middle" }, (t * span / 4).toLocaleString("en-US")));
      }
      axis.appendChild(svgEl("text", { x: CACHE_X + CACHE_W / 2, y: y0 + 27, "font-size": 11, stroke: "none",
        "text-anchor": "middle" }, n.toLocaleString("en-US") + " positions held, on an axis of " +
        span.toLocaleString("en-US")));
      svg.appendChild(axis);
      return span;
    }

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
      var span = drawCache(H_kv);
      title.textContent = "The cache of all " + MODEL.num_layers + " layers: a band per layer, " + state.tokens +
        " positions long on an axis of " + span + ", as tall as its " + H_kv + " key/value head" +
        (H_kv > 1 ? "s" : "") + " (" + MODEL.num_heads + " at most), the newest position in orange. " +
        "The bar: the bytes the next step's attention sublayer reads and writes in one layer, " +
        (step.bytes / 1048576).toFixed(1) + " MiB, on a fixed scale of 0 to " + Math.round(FULL / 1048576) + " MiB.";
      // the step's bytes on the fixed scale, with a MiB axis
      var scale = 340 / FULL, y0 = BAR_Y;
      svg.appendChild(svgEl("text", { x: 0, y: y0 - 6, "font-size": 12, fill: "currentColor" },
        "next step, one layer's attention: " + (step.bytes / 1048576).toFixed(1) + " MiB"));
      svg.appendChild(svgEl("rect", { x: 0, y: y0, width: fixed * scale, height: 16, fill: "#999999",
        "data-bar": "fixed" }));
      svg.appendChild(svgEl("rect", { x: fixed * scale, y: y0, width: Math.max(cacheRead * scale, 0.5), height: 16,
        fill: "#0072B2", "data-bar": "cache" }));
      var axis = svgEl("g", { fill: "currentColor", stroke: "currentColor" });
      axis.appendChild(svgEl("line", { x1: 0, y1: y0 + 19, x2: 340, y2: y0 + 19, "stroke-opacity": 0.5 }));
      for (var mib = 0; mib * 1048576 <= FULL; mib += 64) {
        var tx = Math.min(mib * 1048576 * scale, 339.5);
        axis.appendChild(svgEl("line", { x1: tx, y1: y0 + 19, x2: tx, y2: y0 + 23, "stroke-opacity": 0.5 }));
        axis.appendChild(svgEl("text", { x: tx, y: y0 + 34, "font-size": 10, stroke: "none",
          "text-anchor": mib ? "middle" : "start" }, mib + (mib ? "" : " MiB")));
      }
      svg.appendChild(axis);

      var rows = [
        ["tokens held, S \u2212 1", el("td", { class: "mx-num" }, state.tokens.toLocaleString("en-US"))],
        ["cache, all " + MODEL.num_layers + " layers (`kv_cache_bytes`)", bytesCell(cache)],
        ["next step, one layer's attention (`decode_step_cost`, S = " + S.toLocaleString("en-US") + ")",
          bytesCell(step.bytes)],
        ["of which the cache", bytesCell(cacheRead)],
        ["FLOPs of that step", el("td", { class: "mx-num" }, step.flops.toLocaleString("en-US"))],
      ];
      var t = el("table", { class: "mx-wrap" });
      rows.forEach(function (r) {
        var tr = el("tr");
        tr.appendChild(notation(el("th", { scope: "row", style: "text-align:left" }), r[0]));
        tr.appendChild(r[1]);
        t.appendChild(tr);
      });
      out.textContent = "";
      out.appendChild(t);
      var full = state.tokens >= MODEL.max_context - 1;
      one.disabled = full;
      many.disabled = full;
      live.textContent = full ? "The cache is full: " + MODEL.name + " has " +
        MODEL.max_context.toLocaleString("en-US") + " positions." : "Cache: " + bytesText(cache) + ".";
      live.className = full ? "mx-note" : "mx-note mx-sr";
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

  kit.figure("kv-cache", kvCacheFigure);
})();
