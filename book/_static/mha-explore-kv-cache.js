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

  kit.figure("kv-cache", kvCacheFigure);
})();
