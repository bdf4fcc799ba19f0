/* The book's arithmetic in the reader's browser: the functions the explorables call.
 *
 * Each function mirrors the `mha` function of the same name, with the same argument names
 * and the same conventions, so that a figure computed here is the library's computation:
 *
 *   softmax                       mha.backends.np_backend.softmax
 *   scaled_dot_product_attention  mha.backends.np_backend.scaled_dot_product_attention
 *   softmax_stats, combine_stats, online_softmax, tiled_attention
 *                                 mha.backends.tiled (tiled_attention is tiled.attention)
 *   kv_cache_bytes, decode_step_cost
 *                                 mha.cost.arithmetic
 *   latent_cache_bytes            mha.cost.latent_arithmetic
 *
 * mha-explore-model.js adds the attention-only transformer's functions to it.
 *
 * Arrays are nested JavaScript arrays of numbers (float64), shaped as NumPy's: a row of
 * scores (S), a matrix (L, S), any leading dimensions before. Masks are nested arrays of
 * booleans, True = may attend, broadcast to the scores as NumPy broadcasts. A fully masked
 * row gets all-zero weights (and a zero output), as in every backend of `mha`. Keyword-only
 * arguments of the Python functions are an options object, e.g. {block_size: 4}.
 *
 * tests/browser/test_explorables.py evaluates each function in Chromium on inputs drawn in
 * Python and compares the results with `mha`'s. A classic script (no module, no import), so
 * that it also runs from file://; it defines window.mhaExplore and nothing else.
 */
(function (root) {
  "use strict";

  var NEG_INF = -Infinity;

  function isArray(x) {
    return Array.isArray(x);
  }

  function shapeOf(x) {
    var shape = [];
    while (isArray(x)) {
      shape.push(x.length);
      x = x[0];
    }
    return shape;
  }

  /* `mask` (nested booleans) broadcast to `shape`, NumPy's rules; null stays null. */
  function broadcastMask(mask, shape) {
    if (mask === null || mask === undefined) return null;
    var mshape = shapeOf(mask);
    if (mshape.length > shape.length) {
      throw new Error("mask of shape (" + mshape + ") does not broadcast to (" + shape + ")");
    }
    var pad = shape.length - mshape.length;
    for (var i = 0; i < mshape.length; i++) {
      if (mshape[i] !== 1 && mshape[i] !== shape[pad + i]) {
        throw new Error("mask of shape (" + mshape + ") does not broadcast to (" + shape + ")");
      }
    }
    function build(m, depth) {
      if (depth === shape.length) return m;
      var out = new Array(shape[depth]);
      var own = depth - pad; // the mask's own axis, or < 0 for a missing leading axis
      for (var j = 0; j < shape[depth]; j++) {
        var sub = own < 0 ? m : m[mshape[own] === 1 ? 0 : j];
        out[j] = build(sub, depth + 1);
      }
      return out;
    }
    return build(mask, 0);
  }

  /* Apply `fn(row, maskRow)` to every row (last axis) of `x`, keeping the leading shape. */
  function mapRows(x, mask, fn) {
    if (!isArray(x[0])) return fn(x, mask);
    var out = new Array(x.length);
    for (var i = 0; i < x.length; i++) out[i] = mapRows(x[i], mask ? mask[i] : null, fn);
    return out;
  }

  function masked(row, maskRow) {
    var z = new Array(row.length);
    for (var j = 0; j < row.length; j++) z[j] = maskRow && !maskRow[j] ? NEG_INF : row[j];
    return z;
  }

  function rowMax(z) {
    var m = NEG_INF;
    for (var j = 0; j < z.length; j++) if (z[j] > m) m = z[j];
    return m;
  }

  /* The row maximum with -inf (nothing attended) replaced by 0 (mha.backends._tiles.safe_max). */
  function safeMax(m) {
    return m === NEG_INF ? 0 : m;
  }

  function checkFinite(name, row) {
    for (var j = 0; j < row.length; j++) {
      if (!isFinite(row[j])) throw new Error(name + " must be finite; got NaN or infinite values");
    }
  }

  /* --------------------------------------------------------------------- the softmax */

  function softmaxRow(row, maskRow) {
    checkFinite("scores", row);
    var z = masked(row, maskRow);
    var m = safeMax(rowMax(z)); // fully masked rows: exp(-inf) = 0 everywhere
    var total = 0;
    for (var j = 0; j < z.length; j++) {
      z[j] = Math.exp(z[j] - m);
      total += z[j];
    }
    if (total === 0) total = 1; // only fully masked rows sum to 0; they stay 0
    for (j = 0; j < z.length; j++) z[j] /= total;
    return z;
  }

  /** Masked softmax over the last axis (mha.backends.np_backend.softmax).
   *
   * Masked entries get weight exactly 0; a row with every entry masked gets all zeros.
   * The row maximum is subtracted before the exponential, so large scores stay finite.
   */
  function softmax(scores, mask) {
    return mapRows(scores, broadcastMask(mask, shapeOf(scores)), softmaxRow);
  }

  /* ------------------------------------------------------- scaled dot-product attention */

  function attend2d(query, key, value, mask, scale) {
    var L = query.length, S = key.length, Dh = query[0].length, Dv = value[0].length;
    if (key[0].length !== Dh) {
      throw new Error("query and key must have the same width Dh; got " + Dh + " and " + key[0].length);
    }
    if (value.length !== S) {
      throw new Error("value must have as many rows as key; got " + value.length + " and " + S);
    }
    var s = scale === null || scale === undefined ? 1 / Math.sqrt(Dh) : scale;
    var weights = new Array(L), output = new Array(L);
    for (var i = 0; i < L; i++) {
      var scores = new Array(S);
      for (var j = 0; j < S; j++) {
        var dot = 0;
        for (var d = 0; d < Dh; d++) dot += query[i][d] * key[j][d];
        scores[j] = dot * s;
      }
      var w = softmaxRow(scores, mask ? mask[i] : null);
      var o = new Array(Dv);
      for (var e = 0; e < Dv; e++) {
        var acc = 0;
        for (j = 0; j < S; j++) acc += w[j] * value[j][e];
        o[e] = acc;
      }
      weights[i] = w;
      output[i] = o;
    }
    return [output, weights];
  }

  /** softmax(Q K^T * scale) V with an optional boolean mask (np_backend's function).
   *
   * query (..., L, Dh), key (..., S, Dh), value (..., S, Dv) with the same leading
   * dimensions; mask broadcastable to (..., L, S). `scale` defaults to 1 / sqrt(Dh), as in
   * `mha`; a figure passes 1 to show unscaled scores. Returns [output, weights].
   */
  function scaled_dot_product_attention(query, key, value, mask, scale) {
    var qshape = shapeOf(query);
    var lead = qshape.slice(0, -2);
    var fullMask = broadcastMask(mask, lead.concat([qshape[qshape.length - 2], shapeOf(key).slice(-2)[0]]));
    function recurse(q, k, v, m) {
      if (!isArray(q[0][0])) return attend2d(q, k, v, m, scale);
      var outs = [], ws = [];
      for (var b = 0; b < q.length; b++) {
        var r = recurse(q[b], k[b], v[b], m ? m[b] : null);
        outs.push(r[0]);
        ws.push(r[1]);
      }
      return [outs, ws];
    }
    return recurse(query, key, value, fullMask);
  }

  /* ------------------------------------------------------------- the online softmax */

  function statsRow(row, maskRow) {
    var z = masked(row, maskRow);
    var m = rowMax(z);
    var shift = safeMax(m);
    var total = 0;
    for (var j = 0; j < z.length; j++) total += Math.exp(z[j] - shift);
    return [m, total];
  }

  /** The maximum and the shifted sum of exponentials of each row (tiled.softmax_stats).
   *
   * Returns [row_max, row_sum]: row_max = max over the allowed entries (-inf when none is
   * allowed), row_sum = sum exp(s - row_max) over them (0 when none is). For one row, two
   * numbers; for (..., S), two arrays of shape (...).
   */
  function softmax_stats(scores, mask) {
    var shape = shapeOf(scores);
    if (shape.length < 1 || shape[shape.length - 1] === 0) {
      throw new Error("scores must have shape (..., S) with S >= 1; got shape (" + shape + ")");
    }
    var both = mapRows(scores, broadcastMask(mask, shape), function (row, maskRow) {
      checkFinite("scores", row);
      return statsRow(row, maskRow);
    });
    function split(x, k) {
      return isArray(x[0]) ? x.map(function (y) { return split(y, k); }) : x[k];
    }
    return [split(both, 0), split(both, 1)];
  }

  function combineOne(max_a, sum_a, max_b, sum_b) {
    var m = Math.max(max_a, max_b);
    var shift = safeMax(m); // (-inf, 0) is the identity: -inf - (-inf) is never formed
    return [m, sum_a * Math.exp(max_a - shift) + sum_b * Math.exp(max_b - shift)];
  }

  /** Combine the statistics of two blocks of the same rows (tiled.combine_stats).
   *
   * m = max(m_a, m_b), l = l_a exp(m_a - m) + l_b exp(m_b - m), with exp(-inf - m) = 0
   * also when m = -inf. Numbers, or arrays of one shape. Returns [m, l].
   */
  function combine_stats(max_a, sum_a, max_b, sum_b) {
    if (!isArray(max_a)) {
      if (isNaN(max_a) || max_a === Infinity || isNaN(max_b) || max_b === Infinity) {
        throw new Error("max_a and max_b must be finite or -inf; got NaN or +inf values");
      }
      if (!(sum_a >= 0 && sum_b >= 0 && isFinite(sum_a) && isFinite(sum_b))) {
        throw new Error("sum_a and sum_b must be finite and >= 0");
      }
      return combineOne(max_a, sum_a, max_b, sum_b);
    }
    var ms = [], ls = [];
    for (var i = 0; i < max_a.length; i++) {
      var r = combine_stats(max_a[i], sum_a[i], max_b[i], sum_b[i]);
      ms.push(r[0]);
      ls.push(r[1]);
    }
    return [ms, ls];
  }

  function checkBlock(name, size) {
    if (!(Number.isInteger(size) && size >= 1)) {
      throw new Error(name + " must be an int >= 1; got " + size);
    }
  }

  /** Masked softmax from statistics gathered block by block (tiled.online_softmax).
   *
   * One pass over blocks of `block_size` columns combines their statistics into each
   * row's maximum and sum; a second pass writes exp(s - max) / sum. options: {block_size},
   * 128 by default as in `mha`.
   */
  function online_softmax(scores, mask, options) {
    var block_size = options && options.block_size !== undefined ? options.block_size : 128;
    checkBlock("block_size", block_size);
    return mapRows(scores, broadcastMask(mask, shapeOf(scores)), function (row, maskRow) {
      checkFinite("scores", row);
      var S = row.length, m = NEG_INF, l = 0, j0, j;
      for (j0 = 0; j0 < S; j0 += block_size) {
        var stop = Math.min(j0 + block_size, S);
        var st = statsRow(row.slice(j0, stop), maskRow ? maskRow.slice(j0, stop) : null);
        var c = combineOne(m, l, st[0], st[1]);
        m = c[0];
        l = c[1];
      }
      var shift = safeMax(m), total = l === 0 ? 1 : l; // fully masked rows stay 0
      var z = masked(row, maskRow), w = new Array(S);
      for (j = 0; j < S; j++) w[j] = Math.exp(z[j] - shift) / total;
      return w;
    });
  }

  /** Attention one tile at a time (tiled.attention), for query (L, Dh), key (S, Dh),
   * value (S, Dv) and a mask broadcastable to (L, S).
   *
   * For each block of `block_q` query rows (scaled by 1 / sqrt(Dh) once), each block of
   * `block_kv` keys updates the running maximum m, the running sum l and the accumulator
   * acc = sum exp(z - m) v, each rescaled by exp(m_old - m_new). A tile in which nothing
   * may be attended is skipped. options: {block_q, block_kv, trace}; `trace`, an array,
   * receives one step per tile: {q_block, kv_block, computed, row_max, row_sum, rescale,
   * acc}, as mha's TileStep. Returns [output, lse].
   */
  function tiled_attention(query, key, value, mask, options) {
    options = options || {};
    var block_q = options.block_q !== undefined ? options.block_q : 128;
    var block_kv = options.block_kv !== undefined ? options.block_kv : 128;
    var trace = options.trace || null;
    checkBlock("block_q", block_q);
    checkBlock("block_kv", block_kv);
    var L = query.length, S = key.length, Dh = query[0].length, Dv = value[0].length;
    var keepAll = broadcastMask(mask, [L, S]);
    var maskable = keepAll !== null;
    var scale = 1 / Math.sqrt(Dh);
    var out = [], lse = [];
    for (var i0 = 0; i0 < L; i0 += block_q) {
      var i1 = Math.min(i0 + block_q, L), n = i1 - i0, r, d, e, j;
      var q_i = [];
      for (r = 0; r < n; r++) q_i.push(query[i0 + r].map(function (x) { return x * scale; }));
      var row_max = [], row_sum = [], acc = [];
      for (r = 0; r < n; r++) {
        row_max.push(NEG_INF);
        row_sum.push(0);
        acc.push(new Array(Dv).fill(0));
      }
      for (var j0 = 0; j0 < S; j0 += block_kv) {
        var j1 = Math.min(j0 + block_kv, S);
        var any = !maskable;
        for (r = 0; r < n && !any; r++) {
          for (j = j0; j < j1; j++) if (keepAll[i0 + r][j]) any = true;
        }
        var rescale = [];
        for (r = 0; r < n; r++) {
          if (!any) {
            rescale.push(1);
            continue;
          }
          var s = [];
          for (j = j0; j < j1; j++) {
            var dot = 0;
            for (d = 0; d < Dh; d++) dot += q_i[r][d] * key[j][d];
            s.push(maskable && !keepAll[i0 + r][j] ? NEG_INF : dot);
          }
          var new_max = Math.max(row_max[r], rowMax(s));
          var shift = maskable ? safeMax(new_max) : new_max;
          var p_sum = 0;
          for (j = 0; j < s.length; j++) {
            s[j] = Math.exp(s[j] - shift);
            p_sum += s[j];
          }
          var factor = Math.exp(row_max[r] - shift); // 0 where nothing was seen
          row_sum[r] = row_sum[r] * factor + p_sum;
          for (e = 0; e < Dv; e++) {
            var pv = 0;
            for (j = 0; j < s.length; j++) pv += s[j] * value[j0 + j][e];
            acc[r][e] = acc[r][e] * factor + pv;
          }
          row_max[r] = new_max;
          rescale.push(factor);
        }
        if (trace) {
          trace.push({
            q_block: [i0, i1],
            kv_block: [j0, j1],
            computed: any,
            row_max: row_max.slice(),
            row_sum: row_sum.slice(),
            rescale: rescale,
            acc: acc.map(function (a) { return a.slice(); }),
          });
        }
      }
      for (r = 0; r < n; r++) {
        var empty = row_sum[r] === 0, total = empty ? 1 : row_sum[r];
        out.push(acc[r].map(function (a) { return a / total; }));
        lse.push(empty ? NEG_INF : row_max[r] + Math.log(total));
      }
    }
    return [out, lse];
  }

  /* ----------------------------------------------------------------- cost arithmetic */

  var ITEMSIZE = {
    float16: 2, bfloat16: 2, float32: 4, float64: 8, int8: 1, uint8: 1, int16: 2, int32: 4, int64: 8,
  };

  function itemsize(dtype) {
    var name = dtype === undefined || dtype === null ? "float16" : String(dtype).replace(/^torch\./, "");
    if (!(name in ITEMSIZE)) throw new Error("dtype must be a NumPy or PyTorch dtype; got " + dtype);
    return ITEMSIZE[name];
  }

  function checkSizes(sizes) {
    for (var name in sizes) {
      var v = sizes[name];
      if (!Number.isInteger(v)) throw new Error(name + " must be an int; got " + v);
      if (v < 1) throw new Error(name + " must be positive; got " + name + "=" + v);
    }
  }

  function exactInteger(name, n) {
    if (!Number.isSafeInteger(n)) {
      throw new Error(name + " = " + n + " is beyond 2**53: not exact in a JavaScript number");
    }
    return n;
  }

  /** Bytes of a key/value cache: 2 * layers * B * S * H_kv * Dh times the item size
   * (mha.cost.arithmetic.kv_cache_bytes). dtype: "float16" (default), "float32", ...;
   * options: {batch_size}. An integer, exact (an error beyond 2**53).
   */
  function kv_cache_bytes(num_layers, kv_len, num_kv_heads, d_head, dtype, options) {
    var batch_size = options && options.batch_size !== undefined ? options.batch_size : 1;
    checkSizes({ num_layers: num_layers, kv_len: kv_len, num_kv_heads: num_kv_heads,
      d_head: d_head, batch_size: batch_size });
    return exactInteger("kv_cache_bytes",
      2 * num_layers * batch_size * kv_len * num_kv_heads * d_head * itemsize(dtype));
  }

  /** Bytes of a latent cache: layers * B * S * (Dc + Dr) times the item size
   * (mha.cost.latent_arithmetic.latent_cache_bytes). Each layer caches, per position, its
   * latent (Dc) and the rotary key every head shares (Dr, 0 for none). dtype: "float16"
   * (default), "bfloat16", ...; options: {batch_size}. An integer, exact.
   */
  function latent_cache_bytes(num_layers, kv_len, d_latent, d_rope, dtype, options) {
    var batch_size = options && options.batch_size !== undefined ? options.batch_size : 1;
    checkSizes({ num_layers: num_layers, kv_len: kv_len, d_latent: d_latent, batch_size: batch_size });
    if (!Number.isInteger(d_rope)) throw new Error("d_rope must be an int; got " + d_rope);
    if (d_rope < 0) throw new Error("d_rope must be at least 0; got d_rope=" + d_rope);
    return exactInteger("latent_cache_bytes",
      num_layers * batch_size * kv_len * (d_latent + d_rope) * itemsize(dtype));
  }

  /** What one attention layer costs to produce the next token
   * (mha.cost.arithmetic.decode_step_cost): {flops, bytes}, exact integers.
   *
   * The new token attends to S = kv_len positions, itself included (S - 1 cached). With a
   * cache, bytes = (2 D^2 + 2 D H_kv Dh + 2 B (S - 1) H_kv Dh + 2 B H_kv Dh + 2 B D) times
   * the item size. options: {batch_size, cached}.
   */
  function decode_step_cost(d_model, num_heads, num_kv_heads, kv_len, dtype, options) {
    options = options || {};
    var B = options.batch_size !== undefined ? options.batch_size : 1;
    var cached = options.cached !== undefined ? options.cached : true;
    checkSizes({ d_model: d_model, num_heads: num_heads });
    if (d_model % num_heads !== 0) {
      throw new Error("num_heads must divide d_model; got d_model=" + d_model + ", num_heads=" + num_heads);
    }
    checkSizes({ num_kv_heads: num_kv_heads, kv_len: kv_len, batch_size: B });
    if (num_heads % num_kv_heads !== 0) {
      throw new Error("num_kv_heads must divide num_heads; got num_heads=" + num_heads +
        ", num_kv_heads=" + num_kv_heads);
    }
    if (typeof cached !== "boolean") throw new Error("cached must be a bool; got " + cached);
    var D = d_model, H = num_heads, H_kv = num_kv_heads, S = kv_len, Dh = D / H;
    var item = itemsize(dtype);
    var per_token = 4 * D * D + 4 * D * H_kv * Dh; // q, k, v and output projections
    var weights = 2 * D * D + 2 * D * H_kv * Dh;
    var flops, moved;
    if (cached) {
      flops = B * (per_token + 4 * H * S * Dh);
      moved = weights + 2 * B * (S - 1) * H_kv * Dh + 2 * B * H_kv * Dh + 2 * B * D;
    } else {
      flops = B * (S * per_token + 4 * H * S * S * Dh);
      moved = weights + 2 * B * S * D;
    }
    return { flops: exactInteger("flops", flops), bytes: exactInteger("bytes", moved * item) };
  }

  root.mhaExplore = {
    softmax: softmax,
    scaled_dot_product_attention: scaled_dot_product_attention,
    softmax_stats: softmax_stats,
    combine_stats: combine_stats,
    online_softmax: online_softmax,
    tiled_attention: tiled_attention,
    kv_cache_bytes: kv_cache_bytes,
    latent_cache_bytes: latent_cache_bytes,
    decode_step_cost: decode_step_cost,
  };
})(window);
