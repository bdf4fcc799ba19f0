/* The attention-only transformer in the reader's browser, for the induction-heads figure.
 *
 * It adds two functions to window.mhaExplore (mha-explore.js, loaded before it), mirroring
 * `mha` as that module's functions do:
 *
 *   attention_only_model    mha.display.live_decoder.decoder_model
 *   attention_only_forward  the forward of mha.models.attention_only.AttentionOnlyTransformer
 *
 * Each head's attention is mha-explore.js's scaled_dot_product_attention. Arrays are nested
 * JavaScript arrays of numbers (float64), as there. tests/browser/test_explorables.py holds
 * both functions to `mha` in Chromium. A classic script, so that it also runs from file://.
 */
(function (root) {
  "use strict";

  var explore = root.mhaExplore;

  /* One float16 (its 16 bits) as a number: sign, 5 exponent bits, 10 fraction bits. */
  function fromFloat16(bits) {
    var sign = bits & 0x8000 ? -1 : 1, e = (bits >> 10) & 0x1f, f = bits & 0x3ff;
    if (e === 0) return sign * f * Math.pow(2, -24); // subnormal (and zero)
    if (e === 31) return f ? NaN : sign * Infinity;
    return sign * (1 + f / 1024) * Math.pow(2, e - 15);
  }

  function reshape(values, shape) {
    if (shape.length === 1) return values;
    var rows = new Array(shape[0]), n = shape[1];
    for (var i = 0; i < shape[0]; i++) rows[i] = values.slice(i * n, (i + 1) * n);
    return rows;
  }

  /** The model of mha.display.live_decoder.decoder_data's data (its JSON parsed):
   * {vocab_size, max_len, d_model, num_heads, num_layers, params}, each parameter a nested
   * array of its shape, by its name in the model's state_dict ("embed", "layers.0.w_qkv").
   * The values are the data's float16 numbers, exactly, as float64.
   */
  function attention_only_model(data) {
    var bytes = atob(data.float16), n = bytes.length / 2, values = new Array(n);
    for (var i = 0; i < n; i++) {
      values[i] = fromFloat16(bytes.charCodeAt(2 * i) | (bytes.charCodeAt(2 * i + 1) << 8));
    }
    var params = {}, start = 0;
    data.params.forEach(function (p) {
      var size = p[1].reduce(function (a, b) { return a * b; }, 1);
      params[p[0]] = reshape(values.slice(start, start + size), p[1]);
      start += size;
    });
    if (start !== n) {
      throw new Error("data's float16 values must fill its params (" + start + " numbers); got " + n);
    }
    return { vocab_size: data.vocab_size, max_len: data.max_len, d_model: data.d_model,
      num_heads: data.num_heads, num_layers: data.num_layers, params: params };
  }

  function matmul(a, b, bias) {
    var n = b.length, m = b[0].length, out = new Array(a.length);
    for (var i = 0; i < a.length; i++) {
      var row = new Array(m);
      for (var j = 0; j < m; j++) {
        var acc = 0;
        for (var k = 0; k < n; k++) acc += a[i][k] * b[k][j];
        row[j] = bias ? acc + bias[j] : acc;
      }
      out[i] = row;
    }
    return out;
  }

  function columns(x, start, stop) {
    return x.map(function (row) { return row.slice(start, stop); });
  }

  /** The logits and every head's weights of an attention-only transformer
   * (mha.models.attention_only.AttentionOnlyTransformer, forward with need_weights=True).
   *
   * x = E[tokens] + P[:L]; each layer adds its causal multi-head attention,
   * x <- x + Concat(head_1, ..., head_H) W^O + b_o, each head softmax(q k^T / sqrt(Dh)) v
   * of its Dh columns of x W^{QKV} + b_{QKV} (queries, keys, values side by side); then
   * logits = x U. tokens: L ids in [0, V), 1 <= L <= max_len. Returns {logits (L, V),
   * weights: one array per layer of H matrices (L, L)}.
   */
  function attention_only_forward(model, tokens) {
    var L = tokens.length, V = model.vocab_size, D = model.d_model, H = model.num_heads;
    if (!(L >= 1 && L <= model.max_len)) {
      throw new Error("tokens must have 1 <= L <= max_len=" + model.max_len + "; got L=" + L);
    }
    var p = model.params, Dh = D / H, i, j, h;
    var x = tokens.map(function (t, pos) {
      if (!(Number.isInteger(t) && t >= 0 && t < V)) throw new Error("tokens must lie in [0, " + V + "); got " + t);
      return p.embed[t].map(function (e, d) { return e + p.pos[pos][d]; });
    });
    var mask = [];
    for (i = 0; i < L; i++) {
      mask.push([]);
      for (j = 0; j < L; j++) mask[i].push(j <= i);
    }
    var weights = [];
    for (var layer = 0; layer < model.num_layers; layer++) {
      var name = "layers." + layer + ".";
      var qkv = matmul(x, p[name + "w_qkv"], p[name + "b_qkv"]); // (L, 3D)
      var heads = [], layerWeights = [];
      for (h = 0; h < H; h++) {
        var r = explore.scaled_dot_product_attention(columns(qkv, h * Dh, (h + 1) * Dh),
          columns(qkv, D + h * Dh, D + (h + 1) * Dh), columns(qkv, 2 * D + h * Dh, 2 * D + (h + 1) * Dh),
          mask, null);
        heads.push(r[0]);
        layerWeights.push(r[1]);
      }
      var concat = x.map(function (_, pos) {
        return [].concat.apply([], heads.map(function (o) { return o[pos]; }));
      }); // (L, D)
      var out = matmul(concat, p[name + "w_o"], p[name + "b_o"]);
      x = x.map(function (row, pos) { return row.map(function (v, d) { return v + out[pos][d]; }); });
      weights.push(layerWeights);
    }
    return { logits: matmul(x, p.unembed, null), weights: weights };
  }

  explore.attention_only_model = attention_only_model;
  explore.attention_only_forward = attention_only_forward;
})(window);
