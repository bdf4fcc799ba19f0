/* The explorable "latent-cache" of latent-attention: the cache per token of DeepSeek-V2's
 * attention sizes, as multi-head, grouped-query, multi-query and latent attention.
 *
 * The reader chooses the latent's width D_c, the rotary key's width D_r and the key/value
 * heads H_kv of the grouped-query design; the bytes come from window.mhaExplore's
 * latent_cache_bytes and kv_cache_bytes (mha-explore.js). The figure's state and numbers are
 * in data-state, data-latent-bytes, data-kv-bytes, data-mha-bytes and data-mqa-bytes for the
 * browser test.
 */
(function () {
  "use strict";

  var kit = window.mhaExploreKit;
  if (!kit) return;
  var el = kit.el, svgEl = kit.svgEl, notation = kit.notation, select = kit.select;

  // DeepSeek-V2's attention (mha.cost.latent_arithmetic.DEEPSEEK_V2), cached in bfloat16.
  var MODEL = { name: "DeepSeek-V2", num_layers: 60, num_heads: 128, d_head: 128,
    d_latent: 512, d_rope: 64, dtype: "bfloat16" };
  var LATENTS = [64, 128, 256, 512, 1024, 2048, 4096];
  var ROPES = [0, 32, 64, 128];
  var COLOURS = ["#0072B2", "#009E73", "#D55E00", "#CC79A7"];

  function kib(n) {
    return (n / 1024).toLocaleString("en-US", { minimumFractionDigits: 1, maximumFractionDigits: 1 }) + " KiB";
  }

  function options(values) {
    return values.map(function (v) { return [String(v), v.toLocaleString("en-US")]; });
  }

  function latentCacheFigure(root) {
    var state = { d_latent: MODEL.d_latent, d_rope: MODEL.d_rope, num_kv_heads: 8 };
    root.setAttribute("data-model", JSON.stringify(MODEL));
    var controls = el("div", { class: "mx-row" });
    var dcSel = select("Latent width D_c", options(LATENTS), String(state.d_latent));
    var drSel = select("Rotary key width D_r", options(ROPES), String(state.d_rope));
    var divisors = [];
    for (var d = 1; d <= MODEL.num_heads; d++) if (MODEL.num_heads % d === 0) divisors.push(d);
    var kvSel = select("Key/value heads H_{kv}", options(divisors), String(state.num_kv_heads));
    [dcSel.wrap, drSel.wrap, kvSel.wrap].forEach(function (c) { controls.appendChild(c); });
    root.appendChild(controls);
    var svg = svgEl("svg", { viewBox: "0 0 360 200", role: "img", "aria-labelledby": root.id + "-title" });
    var title = svgEl("title", { id: root.id + "-title" });
    svg.style.maxWidth = "34rem";
    root.appendChild(svg);
    var out = el("div", { class: "mx-scroll" });
    root.appendChild(out);
    var live = el("p", { class: "mx-note", "aria-live": "polite" });
    root.appendChild(live);

    function update() {
      var mx = window.mhaExplore;
      var L = MODEL.num_layers, H = MODEL.num_heads, Dh = MODEL.d_head, dt = MODEL.dtype;
      var Dc = state.d_latent, Dr = state.d_rope, H_kv = state.num_kv_heads;
      var designs = [
        ["multi-head, H_{kv} = " + H, mx.kv_cache_bytes(L, 1, H, Dh, dt), 2 * H * Dh, "mha", "multi-head"],
        ["grouped-query, H_{kv} = " + H_kv, mx.kv_cache_bytes(L, 1, H_kv, Dh, dt), 2 * H_kv * Dh, "gqa", "grouped-query"],
        ["latent, D_c = " + Dc + ", D_r = " + Dr, mx.latent_cache_bytes(L, 1, Dc, Dr, dt), Dc + Dr, "mla", "latent"],
        ["multi-query, H_{kv} = 1", mx.kv_cache_bytes(L, 1, 1, Dh, dt), 2 * Dh, "mqa", "multi-query"],
      ];
      var mha = designs[0][1], latent = designs[2][1];
      root.setAttribute("data-state", JSON.stringify(state));
      root.setAttribute("data-mha-bytes", String(mha));
      root.setAttribute("data-kv-bytes", String(designs[1][1]));
      root.setAttribute("data-latent-bytes", String(latent));
      root.setAttribute("data-mqa-bytes", String(designs[3][1]));

      // one bar per design, on one scale: multi-head attention's cache is the full width
      svg.textContent = "";
      svg.appendChild(title);
      title.textContent = "The cache per token of " + MODEL.name + "'s " + L + " layers, in " + dt +
        ", one bar per design on one scale, with its share of multi-head attention's: " +
        designs.map(function (r) {
          return kit.spoken(r[0]) + ", " + kib(r[1]) + ", " + (100 * r[1] / mha).toFixed(1) + "%";
        }).join("; ") + ".";
      designs.forEach(function (row, i) {
        var y = 8 + i * 48;
        svg.appendChild(notation(svgEl("text", { x: 0, y: y + 12, "font-size": 13, fill: "currentColor",
          "data-label": row[3] }), row[0], true));
        svg.appendChild(svgEl("text", { x: 340, y: y + 12, "font-size": 13, "text-anchor": "end",
          fill: "currentColor", class: "mx-num" },
          kib(row[1]) + ", " + (100 * row[1] / mha).toFixed(1) + "%"));
        svg.appendChild(svgEl("rect", { x: 0, y: y + 18, width: 340, height: 16, fill: "none",
          stroke: "currentColor", "stroke-opacity": 0.25 }));
        svg.appendChild(svgEl("rect", { x: 0, y: y + 18, width: Math.max(340 * row[1] / mha, 1), height: 16,
          fill: COLOURS[i], "data-bar": row[3] }));
      });

      var t = el("table");
      var head = el("tr");
      ["design", "numbers per token and layer", "bytes per token, " + L + " layers"].forEach(function (h) {
        head.appendChild(el("th", { scope: "col" }, h));
      });
      t.appendChild(head);
      designs.forEach(function (row) {
        var tr = el("tr", row[3] === "mla" ? { class: "mx-current" } : {});
        tr.appendChild(el("th", { scope: "row", style: "text-align:left" }, row[4]));
        tr.appendChild(el("td", { class: "mx-num" }, row[2].toLocaleString("en-US")));
        tr.appendChild(el("td", { class: "mx-num" }, row[1].toLocaleString("en-US") + " bytes"));
        t.appendChild(tr);
      });
      out.textContent = "";
      out.appendChild(t);
      live.textContent = "";
      notation(live, "The latent caches " + kib(latent) + " per token, as much as " +
        ((Dc + Dr) / (2 * Dh)).toLocaleString("en-US", { maximumFractionDigits: 3 }) +
        " key/value heads: (D_c + D_r) / (2 D_h).");
    }

    [[dcSel, "d_latent"], [drSel, "d_rope"], [kvSel, "num_kv_heads"]].forEach(function (pair) {
      pair[0].select.addEventListener("change", function () {
        state[pair[1]] = parseInt(pair[0].select.value, 10);
        update();
      });
    });
    update();
  }

  kit.figure("latent-cache", latentCacheFigure);
})();
