// MiniLM in the reader's browser: type a sentence, see every layer's and head's attention.
//
// The page of the live model (pretrained-heads): its panel, its grid of the 72 heads and the
// large map of one head. Nothing loads until the reader presses the button; then
// mha-live-loader.js loads ONNX Runtime Web and the ONNX graph that mha.models.minilm_onnx
// exported from this book's MiniLM: one input, the token ids (1, L); two outputs, the
// attention weights (6, 12, L, L) and the value norms (6, 12, L) of
// mha.detectors.circuits.value_norms. The text is tokenised by mha-live-tokenizer.js. The
// chapter's "norm-weighted share" is mha.detectors.circuits.value_weighted_attention:
// A[i, j] n_j / sum_k A[i, k] n_k (rows whose norms are all 0 stay 0).
//
// The chapter loads mha-live-tokenizer.js, mha-live-loader.js, mha-live-maps.js (the drawing)
// and this script, deferred.
// window.mhaLiveMiniLM exposes the panel (and its last result) and valueWeighted to the tests.
(function () {
  "use strict";

  var MAX_POSITIONS = 512;

  // --------------------------------------------------------------- attention arithmetic
  // value_weighted_attention for one head: rows A[i, j] n_j / sum_k A[i, k] n_k.
  function valueWeighted(weights, norms, numMaps, L) {
    var out = new Float64Array(weights.length);
    for (var m = 0; m < numMaps; m++) {
      for (var i = 0; i < L; i++) {
        var row = (m * L + i) * L;
        var total = 0;
        for (var j = 0; j < L; j++) total += weights[row + j] * norms[m * L + j];
        if (total > 0) {
          for (var k = 0; k < L; k++) out[row + k] = (weights[row + k] * norms[m * L + k]) / total;
        }
      }
    }
    return out;
  }

  var maps = window.mhaLiveMaps;

  function mb(bytes) {
    return (bytes / 1e6).toFixed(1) + " MB";
  }

  // ---------------------------------------------------------------------------- page
  function LivePanel(root) {
    this.root = root;
    this.input = root.querySelector("textarea");
    this.load = root.querySelector("button.mha-live-load");
    this.run = root.querySelector("button.mha-live-run");
    this.status = root.querySelector(".mha-live-status");
    this.grid = root.querySelector(".mha-live-grid");
    this.view = root.querySelector("select.mha-live-view");
    this.detail = root.querySelector(".mha-live-detail");
    // above the grid: which heads a phone's narrow grid hides; below it: the colour scale
    this.hint = document.createElement("p");
    this.hint.className = "mha-live-hint";
    this.hint.hidden = true;
    this.grid.before(this.hint);
    this.scale = document.createElement("div");
    this.grid.after(this.scale);
    this.ready = null;
    this.busy = false;
    this.pending = false;
    this.result = null;
    this.selected = [0, 0];
    var panel = this;
    this.load.addEventListener("click", function () {
      panel.start();
    });
    this.run.addEventListener("click", function () {
      panel.request();
    });
    this.view.addEventListener("change", function () {
      if (panel.result) panel.draw();
    });
  }

  LivePanel.prototype.say = function (text, state) {
    this.status.textContent = text;
    this.root.dataset.state = state;
  };

  LivePanel.prototype.start = function () {
    if (this.ready) return this.ready;
    var panel = this;
    this.load.disabled = true;
    this.t0 = performance.now();
    this.say("Loading the runtime, the tokenizer and the model…", "loading");
    // (a promise first: a loader that is missing is an error the panel reports)
    this.ready = Promise.resolve()
      .then(function () {
        return window.mhaLiveLoader.load(panel.root.dataset.liveBase);
      })
      .then(function (loaded) {
        panel.manifest = loaded.manifest;
        panel.runtimeBytes = loaded.manifest.runtime_bytes;
        panel.tokenizer = new window.mhaWordPiece(loaded.tokenizer);
        panel.modelBytes = loaded.modelBytes;
        return loaded.session;
      })
      .then(function (session) {
        panel.session = session;
        panel.run.disabled = false;
        panel.loadSeconds = (performance.now() - panel.t0) / 1000;
        panel.say(
          "Loaded: model " + mb(panel.modelBytes) + ", runtime " + mb(panel.runtimeBytes) +
            " in " + panel.loadSeconds.toFixed(1) + " s.",
          "ready"
        );
        return panel.request();
      })
      .catch(function (err) {
        panel.say("The live model could not load: " + err.message, "error");
        throw err;
      });
    this.ready.catch(function () {});
    return this.ready;
  };

  // Run the text in the box. A request while one runs is queued (the newest text wins), so
  // that typing many sentences in a row never stacks work up.
  LivePanel.prototype.request = function () {
    if (this.busy) {
      this.pending = true;
      return this.running;
    }
    var panel = this;
    this.busy = true;
    this.running = this.compute(this.input.value)
      .catch(function (err) {
        panel.say("Error: " + err.message, "error");
      })
      .then(function () {
        panel.busy = false;
        if (panel.pending) {
          panel.pending = false;
          return panel.request();
        }
      });
    return this.running;
  };

  LivePanel.prototype.compute = function (text) {
    var panel = this;
    var enc = this.tokenizer.tokenize(text);
    var L = enc.tokens.length;
    if (L <= 2) {
      // Nothing but [CLS] and [SEP]: the maps would be of the two markers only.
      this.clear();
      this.say(
        text.trim()
          ? "This text has no word pieces (only [CLS] and [SEP] would run). Type a sentence, " +
              "then press “Run on this sentence”."
          : "The box is empty. Type a sentence, then press “Run on this sentence”.",
        "empty"
      );
      return Promise.resolve();
    }
    if (L > MAX_POSITIONS) {
      this.clear();
      this.say(
        "This text has " + L + " tokens with [CLS] and [SEP]; the model has " +
          MAX_POSITIONS + " positions. Shorten it by " + (L - MAX_POSITIONS) + " tokens.",
        "too-long"
      );
      return Promise.resolve();
    }
    this.say("Running the model on " + L + " tokens…", "running");
    var ids = new window.ort.Tensor("int64", BigInt64Array.from(enc.ids.map(BigInt)), [1, L]);
    var started = performance.now();
    return this.session.run({ input_ids: ids }).then(function (out) {
      var weights = out.weights.data;
      var norms = out.value_norms.data;
      var maps = out.weights.dims[0] * out.weights.dims[1];
      panel.result = {
        tokens: enc.tokens,
        ids: enc.ids,
        layers: out.weights.dims[0],
        heads: out.weights.dims[1],
        weights: weights,
        valueNorms: norms,
        valueWeighted: valueWeighted(weights, norms, maps, L),
        runSeconds: (performance.now() - started) / 1000,
      };
      panel.draw();
      if (panel.firstMapSeconds === undefined) {
        panel.firstMapSeconds = (performance.now() - panel.t0) / 1000;
      }
      panel.say(
        L + " tokens; the model ran in " + panel.result.runSeconds.toFixed(2) + " s. " +
          "Downloaded: model " + mb(panel.modelBytes) + ", runtime " + mb(panel.runtimeBytes) +
          "; first attention map " + panel.firstMapSeconds.toFixed(1) +
          " s after the button was pressed.",
        "done"
      );
    });
  };

  LivePanel.prototype.clear = function () {
    this.result = null;
    this.grid.replaceChildren();
    this.detail.replaceChildren();
    this.scale.replaceChildren();
    if (this.updateHint) this.updateHint();
  };

  LivePanel.prototype.shown = function () {
    var r = this.result;
    return this.view.value === "value-weighted" ? r.valueWeighted : r.weights;
  };

  LivePanel.prototype.viewName = function () {
    return this.view.value === "value-weighted" ? "norm-weighted share" : "attention weight";
  };

  // The 72 heads, one button each. One tab stop for the whole grid (a roving tabindex): the
  // arrow keys move between heads (left/right: heads, up/down: layers), Enter or Space
  // chooses one. The chosen head is outlined and aria-pressed.
  LivePanel.prototype.draw = function () {
    var r = this.result;
    var L = r.tokens.length;
    var values = this.shown();
    var label = this.viewName();
    var panel = this;
    var cells = maps.gridLabels(r.layers, r.heads);
    for (var l = 0; l < r.layers; l++) {
      for (var h = 0; h < r.heads; h++) {
        var button = document.createElement("button");
        button.type = "button";
        button.className = "mha-live-cell";
        button.dataset.layer = l;
        button.dataset.head = h;
        button.style.gridRow = String(l + 2); // after the row of head labels
        button.style.gridColumn = String(h + 2); // after the column of layer labels
        button.setAttribute("aria-label", "head " + (l + 1) + "." + (h + 1) + ", " + label);
        var canvas = document.createElement("canvas");
        maps.drawMap(canvas, values, (l * r.heads + h) * L * L, L, 64);
        button.appendChild(canvas);
        button.addEventListener("click", function (e) {
          var b = e.currentTarget;
          panel.selected = [Number(b.dataset.layer), Number(b.dataset.head)];
          panel.markSelected();
          panel.drawDetail();
        });
        button.addEventListener("keydown", function (e) {
          panel.gridKey(e);
        });
        cells.push(button);
      }
    }
    this.grid.replaceChildren.apply(this.grid, cells);
    this.scale.replaceChildren(maps.colourScale(label));
    if (!this.updateHint) this.updateHint = maps.scrollHint(this.grid, this.hint, r.heads);
    else this.updateHint();
    this.markSelected();
    this.drawDetail();
  };

  LivePanel.prototype.markSelected = function () {
    var chosen = this.selected[0] * this.result.heads + this.selected[1];
    this.grid.querySelectorAll("button.mha-live-cell").forEach(function (b, k) {
      b.setAttribute("aria-pressed", k === chosen ? "true" : "false");
      b.tabIndex = k === chosen ? 0 : -1;
    });
  };

  LivePanel.prototype.gridKey = function (e) {
    var r = this.result;
    var b = e.currentTarget;
    var l = Number(b.dataset.layer);
    var h = Number(b.dataset.head);
    if (e.key === "ArrowLeft") h -= 1;
    else if (e.key === "ArrowRight") h += 1;
    else if (e.key === "ArrowUp") l -= 1;
    else if (e.key === "ArrowDown") l += 1;
    else if (e.key === "Home") h = 0;
    else if (e.key === "End") h = r.heads - 1;
    else return;
    e.preventDefault();
    l = Math.max(0, Math.min(r.layers - 1, l));
    h = Math.max(0, Math.min(r.heads - 1, h));
    var buttons = this.grid.querySelectorAll("button.mha-live-cell");
    buttons.forEach(function (x) {
      x.tabIndex = -1;
    });
    var next = buttons[l * r.heads + h];
    next.tabIndex = 0;
    next.focus();
  };

  // One head, large, with its tokens on both axes. The numbers of one cell are in the caption:
  // the cell under the mouse (or a tap), or, with the map focused, the cell that the arrow
  // keys move (Home/End: first/last key, PageUp/PageDown: first/last query).
  LivePanel.prototype.drawDetail = function () {
    var r = this.result;
    var L = r.tokens.length;
    var l = this.selected[0];
    var h = this.selected[1];
    var name = l + 1 + "." + (h + 1);
    var values = this.shown();
    var offset = (l * r.heads + h) * L * L;
    var label = this.viewName();
    var size = Math.min(480, Math.max(160, 16 * L));
    // Room for the map once the row labels (about 6 rem) are beside it.
    var room = Math.min(size, Math.max(120, (this.detail.clientWidth || size + 96) - 96));
    var step = Math.max(1, Math.ceil(13 / (room / L))); // a 13 px line per label
    var figure = document.createElement("figure");
    var canvas = document.createElement("canvas");
    canvas.setAttribute("role", "application");
    canvas.tabIndex = 0;
    canvas.setAttribute(
      "aria-label",
      "Head " + name + ", " + label + ": rows are queries, columns keys, darker is larger. " +
        "Arrow keys move a cell cursor; its value is read below the map."
    );
    var cursor = null;
    function paint() {
      maps.drawMap(canvas, values, offset, L, size);
      if (cursor) {
        var ctx = canvas.getContext("2d");
        var c = size / L;
        ctx.lineWidth = Math.max(2, Math.min(4, c / 4));
        ctx.strokeStyle = "#d95f02";
        ctx.strokeRect(cursor[1] * c, cursor[0] * c, c, c);
      }
    }
    paint();
    var caption = document.createElement("figcaption");
    caption.setAttribute("aria-live", "polite");
    var intro =
      "Head " + name + " (layer " + (l + 1) + ", head " + (h + 1) + "; " + label + "). " +
      "Rows: queries; columns: keys; each labelled with its position, from 0 at [CLS], and " +
      "its token. From white (0) to dark blue (1).";
    caption.textContent =
      intro + (matchMedia("(hover: hover)").matches
        ? " Point at a cell, or focus the map and use the arrow keys, for its value."
        : " Tap a cell for its value.");
    function show(i, j) {
      cursor = [i, j];
      paint();
      caption.textContent =
        "Head " + name + ": query " + r.tokens[i] + " (position " + i + ") → key " +
        r.tokens[j] + " (position " + j + "): " + label + " " +
        values[offset + i * L + j].toFixed(4);
    }
    function pointAt(e) {
      var rect = canvas.getBoundingClientRect();
      var j = Math.floor(((e.clientX - rect.left) / rect.width) * L);
      var i = Math.floor(((e.clientY - rect.top) / rect.height) * L);
      if (i >= 0 && i < L && j >= 0 && j < L) show(i, j);
    }
    canvas.addEventListener("pointermove", pointAt); // a mouse or pen over the map
    canvas.addEventListener("pointerdown", pointAt); // a tap
    canvas.addEventListener("focus", function () {
      if (!cursor) show(0, 0);
    });
    canvas.addEventListener("keydown", function (e) {
      var at = cursor || [0, 0];
      var i = at[0];
      var j = at[1];
      if (e.key === "ArrowLeft") j -= 1;
      else if (e.key === "ArrowRight") j += 1;
      else if (e.key === "ArrowUp") i -= 1;
      else if (e.key === "ArrowDown") i += 1;
      else if (e.key === "Home") j = 0;
      else if (e.key === "End") j = L - 1;
      else if (e.key === "PageUp") i = 0;
      else if (e.key === "PageDown") i = L - 1;
      else return;
      e.preventDefault();
      show(Math.max(0, Math.min(L - 1, i)), Math.max(0, Math.min(L - 1, j)));
    });
    var map = document.createElement("div");
    map.className = "mha-live-map";
    map.style.setProperty("--size", size + "px");
    var corner = document.createElement("span");
    corner.className = "mha-live-corner";
    corner.setAttribute("aria-hidden", "true");
    corner.append("keys →", document.createElement("br"), "queries ↓");
    map.appendChild(corner);
    map.appendChild(maps.tickLabels(r.tokens, step, "mha-live-keys"));
    map.appendChild(maps.tickLabels(r.tokens, step, "mha-live-queries"));
    map.appendChild(canvas);
    var tokens = document.createElement("p");
    tokens.className = "mha-live-tokens";
    tokens.textContent =
      "Tokens by position: " +
      r.tokens
        .map(function (t, i) {
          return i + " " + t;
        })
        .join(", ");
    figure.appendChild(map);
    figure.appendChild(caption);
    this.detail.replaceChildren(figure, tokens);
  };

  function init() {
    if (!maps) return;
    maps.addStyle();
    document.querySelectorAll(".mha-live-minilm").forEach(function (root) {
      if (root.dataset.ready) return; // a notebook may run this script again
      root.dataset.ready = "true";
      var panel = new LivePanel(root);
      window.mhaLiveMiniLM = {
        panel: panel,
        valueWeighted: valueWeighted,
      };
    });
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", init);
  else init();
})();
