/* The explorable "induction-heads" of trained-heads: the chapter's trained two-layer model on
 * a sequence the reader types, in the browser.
 *
 * The element carries its data as JSON (mha.display.live_decoder.decoder_data): the model's
 * parameters, the two heads the chapter measured, a previous-token head in layer 1 and an
 * induction head in layer 2, and the training task's settings, from which "Repeat a random
 * sequence" draws. window.mhaExplore runs the model (attention_only_model,
 * attention_only_forward, softmax); this script draws the sequence, the two heads' weights
 * from the chosen query (tap, click or the arrow keys) and the model's next-token
 * probabilities there, marking a prediction that copies the token after an earlier
 * occurrence of the query's token. The state and the numbers are in data-state,
 * data-weights, data-probs and data-copies for the browser test.
 */
(function () {
  "use strict";

  var kit = window.mhaExploreKit;
  if (!kit) return;
  var el = kit.el, fmt = kit.fmt;

  var START = "Kf3+Wq9zTmKf3+Wq9zTmKf3+"; // a segment of ten distinct tokens, repeated
  var TOP = 5; // the predictions listed
  var COLOURS = { previous_token: "#0072B2", induction: "#E69F00" };
  var STYLE = [
    ".mha-explore .mx-tokens{display:flex;flex-wrap:wrap;gap:.2rem;margin:.4rem 0}",
    ".mha-explore button.mx-tok{display:flex;flex-direction:column;align-items:stretch;gap:2px;",
    "min-width:2.3rem;min-height:44px;padding:.1rem .15rem;font-family:monospace;font-size:1.05em;line-height:1.2}",
    ".mha-explore button.mx-tok[aria-pressed=true]{outline:3px solid currentColor;outline-offset:1px}",
    ".mha-explore button.mx-tok:focus-visible{outline:3px solid #CC79A7;outline-offset:2px}",
    ".mha-explore .mx-tok .mx-pos{font-size:.55em;opacity:.7;font-family:sans-serif;margin-left:.1em}",
    ".mha-explore .mx-tok .mx-bar{height:.45rem;border-radius:1px;border:1px solid rgba(128,128,128,.35)}",
    ".mha-explore .mx-tok.mx-after{opacity:.45}",
    ".mha-explore .mx-swatch{display:inline-block;width:.9em;height:.9em;vertical-align:-.1em;margin-right:.25em}",
    ".mha-explore .mx-pbar{display:inline-block;height:.7em;background:currentColor;opacity:.55;vertical-align:middle}",
    // the sequence beside its label on a wide screen, on a line of its own on a phone
    ".mha-explore input.mx-seq{font-family:monospace;flex:1 1 14rem;min-width:0;max-width:100%;order:1}",
    ".mha-explore .mx-random{order:2}",
    "@media (max-width:48rem){.mha-explore input.mx-seq{flex-basis:100%;order:2}.mha-explore .mx-random{order:1}}",
    ".mha-explore .mx-copy{font-size:.8em;padding:0 .3em;border:1px solid currentColor;border-radius:.2rem}",
    ".mha-explore .mx-refused{color:#b00020}",
  ].join("");

  function addStyle() {
    if (document.getElementById("mha-explore-induction-style")) return;
    var style = el("style", { id: "mha-explore-induction-style" });
    style.textContent = STYLE;
    document.head.appendChild(style);
  }

  function headName(h) {
    return (h.layer + 1) + "." + (h.head + 1);
  }

  function quoted(c) {
    return "\u201c" + c + "\u201d";
  }

  /* A sequence as the training data draws one (mha.training.tasks.repeated_segments) with
   * the task's settings (the data's task): a period T in [min_period, max_period], with
   * probability prefix_prob a prefix of n unrelated tokens (n in [0, L - 2T]), then a
   * segment of T distinct tokens repeated to L tokens. */
  function repeatedSegment(V, L, task) {
    var T = task.min_period + Math.floor(Math.random() * (task.max_period - task.min_period + 1));
    var perm = [], i;
    for (i = 0; i < V; i++) perm.push(i);
    for (i = V - 1; i > 0; i--) {
      var j = Math.floor(Math.random() * (i + 1)), t = perm[i];
      perm[i] = perm[j];
      perm[j] = t;
    }
    var n = Math.random() < task.prefix_prob ? Math.floor(Math.random() * (L - 2 * T + 1)) : 0;
    var tokens = [];
    for (i = 0; i < L; i++) tokens.push(i < n ? perm[T + i] : perm[(i - n) % T]);
    return tokens;
  }

  function inductionFigure(root) {
    var mx = window.mhaExplore;
    var source = root.querySelector("script.mha-explore-data");
    if (!source) {
      root.appendChild(el("p", { class: "mx-note" }, "This figure's data is missing."));
      return;
    }
    var data = JSON.parse(source.textContent);
    var model = mx.attention_only_model(data);
    var alphabet = data.alphabet, L_MAX = data.max_len;
    var heads = data.heads;
    root.setAttribute("data-heads", JSON.stringify(heads));
    addStyle();

    var state = { text: START, query: START.length - 1 };
    var run = null; // the forward of state.text

    var about = el("p", { class: "mx-note" });
    about.textContent = "Tokens: the 64 characters A\u2013Z a\u2013z 0\u20139 + / (ids 0 to 63), " +
      "at most " + L_MAX + "; any other is refused.";
    root.appendChild(about);

    var controls = el("div", { class: "mx-row", "data-mha-control": "" });
    var inputId = root.id + "-sequence";
    var label = el("label", { for: inputId }, "Your sequence");
    var input = el("input", { id: inputId, type: "text", class: "mx-seq", autocomplete: "off",
      autocapitalize: "off", spellcheck: "false", value: state.text });
    input.value = state.text;
    var random = kit.button("Repeat a random sequence");
    random.className = "mx-random";
    [label, random, input].forEach(function (c) { controls.appendChild(c); });
    root.appendChild(controls);
    var message = el("p", { class: "mx-note mx-refused", role: "status", "aria-live": "polite",
      "data-mha-control": "" });
    root.appendChild(message);

    var legend = el("p", { class: "mx-note" });
    ["previous_token", "induction"].forEach(function (role, k) {
      var h = heads[role];
      if (k) legend.appendChild(document.createTextNode("; "));
      legend.appendChild(el("span", { class: "mx-swatch", style: "background:" + COLOURS[role] }));
      legend.appendChild(document.createTextNode("head " + headName(h) + ", " +
        (role === "induction" ? "induction" : "previous token") + " (score " + fmt(h.score, 2) + ")"));
    });
    legend.appendChild(document.createTextNode(": the darker its bar, the more weight from the chosen token."));
    root.appendChild(legend);

    var strip = el("div", { class: "mx-tokens", role: "group",
      "aria-label": "The sequence: choose a token to see where the two heads look from it" });
    root.appendChild(strip);
    var detail = el("p", { class: "mx-note", "aria-live": "polite" });
    root.appendChild(detail);
    var out = el("div", { class: "mx-scroll" });
    root.appendChild(out);

    function ids(text) {
      return text.split("").map(function (c) { return alphabet.indexOf(c); });
    }

    // The tokens that followed an earlier occurrence of the query's token: a copy of one of
    // them is what an induction head predicts.
    function copies(tokens, i) {
      var found = [];
      for (var j = 0; j < i; j++) {
        if (tokens[j] === tokens[i] && found.indexOf(tokens[j + 1]) < 0) found.push(tokens[j + 1]);
      }
      return found;
    }

    function compute() {
      var tokens = ids(state.text);
      var result = mx.attention_only_forward(model, tokens);
      run = { tokens: tokens, weights: result.weights, probs: mx.softmax(result.logits) };
    }

    function choose(i, focus) {
      state.query = Math.max(0, Math.min(run.tokens.length - 1, i));
      draw();
      if (focus) strip.children[state.query].focus();
    }

    function draw() {
      var tokens = run.tokens, i = state.query, L = tokens.length;
      var wPrev = run.weights[heads.previous_token.layer][heads.previous_token.head][i];
      var wInd = run.weights[heads.induction.layer][heads.induction.head][i];
      var probs = run.probs[i], copied = copies(tokens, i);
      root.setAttribute("data-state", JSON.stringify(state));
      root.setAttribute("data-weights", JSON.stringify({ previous_token: wPrev, induction: wInd }));
      root.setAttribute("data-probs", JSON.stringify(probs));
      root.setAttribute("data-copies", JSON.stringify(copied));

      strip.textContent = "";
      tokens.forEach(function (t, j) {
        var c = alphabet[t];
        var b = el("button", { type: "button", class: "mx-tok" + (j > i ? " mx-after" : ""),
          "aria-pressed": String(j === i), tabindex: j === i ? "0" : "-1", "data-position": String(j) });
        var top = el("span", {}, c);
        top.appendChild(el("span", { class: "mx-pos" }, String(j + 1)));
        b.appendChild(top);
        // the name is the visible text, then what a screen reader adds (not shown)
        var said = el("span", {}, ": token " + c + " at position " + (j + 1) + (j > i ? "" :
          ", weights " + fmt(wPrev[j], 2) + " and " + fmt(wInd[j], 2)));
        said.style.cssText = "position:absolute;width:1px;height:1px;overflow:hidden;" +
          "clip:rect(0 0 0 0);white-space:nowrap";
        b.appendChild(said);
        [[wPrev[j], COLOURS.previous_token], [wInd[j], COLOURS.induction]].forEach(function (pair) {
          var bar = el("span", { class: "mx-bar" });
          bar.style.background = pair[1];
          bar.style.opacity = String(0.08 + 0.92 * pair[0]);
          b.appendChild(bar);
        });
        b.addEventListener("click", function () { choose(j, false); });
        strip.appendChild(b);
      });

      function most(w) {
        var best = 0;
        for (var j = 1; j <= i; j++) if (w[j] > w[best]) best = j;
        return (best + 1) + " " + quoted(alphabet[tokens[best]]) + " (" + fmt(w[best], 2) + ")";
      }
      detail.textContent = "From position " + (i + 1) + " " + quoted(alphabet[tokens[i]]) +
        ", head " + headName(heads.previous_token) + " looks most at " + most(wPrev) +
        ", head " + headName(heads.induction) + " at " + most(wInd) + ". " +
        (copied.length ? quoted(alphabet[tokens[i]]) + " occurred before, followed by " +
          copied.map(function (t) { return quoted(alphabet[t]); }).join(" and ") + "."
          : quoted(alphabet[tokens[i]]) + " is new: nothing to copy.") +
        (i === L_MAX - 1 ? " In training, position " + L_MAX + " never had a next token to predict." : "");

      var order = probs.map(function (p, t) { return [t, p]; });
      order.sort(function (a, b) { return b[1] - a[1]; });
      var table = el("table", { "aria-label": "The model's next token after position " + (i + 1) +
        ", most likely first" });
      var head = el("tr");
      ["token", "probability", ""].forEach(function (h) { head.appendChild(el("th", { scope: "col" }, h)); });
      table.appendChild(head);
      order.slice(0, TOP).forEach(function (pair) {
        var copy = copied.indexOf(pair[0]) >= 0;
        var tr = el("tr", copy ? { class: "mx-current", "data-copy": "true" } : {});
        tr.appendChild(el("th", { scope: "row", style: "font-family:monospace;text-align:center" },
          alphabet[pair[0]]));
        var cell = el("td", { class: "mx-num" });
        cell.appendChild(el("span", { class: "mx-pbar", style: "width:" + (3 * pair[1]).toFixed(2) + "rem" }));
        cell.appendChild(document.createTextNode(" " + (100 * pair[1]).toFixed(1) + "%"));
        tr.appendChild(cell);
        var note = el("td", { style: "text-align:left" });
        if (copy) note.appendChild(el("span", { class: "mx-copy" }, "copy"));
        tr.appendChild(note);
        table.appendChild(tr);
      });
      out.textContent = "";
      out.appendChild(el("p", { class: "mx-note" }, "The next token, most likely first" +
        (copied.length ? "; a copy is a token that followed " + quoted(alphabet[tokens[i]]) + " before:" : ":")));
      out.appendChild(table);
    }

    function refuse(text) {
      message.textContent = text;
      root.setAttribute("data-refused", text);
    }

    input.addEventListener("input", function () {
      var text = input.value;
      var bad = text.split("").filter(function (c) { return alphabet.indexOf(c) < 0; });
      if (bad.length || text.length > L_MAX) {
        var caret = Math.max(0, (input.selectionStart || 0) - (text.length - state.text.length));
        input.value = state.text;
        input.setSelectionRange(caret, caret);
        refuse(bad.length ? quoted(bad[0]) + " is not one of the 64 characters A\u2013Z a\u2013z 0\u20139 + /: " +
          "the sequence is unchanged." : "At most " + L_MAX + " tokens (the model's positions): " +
          "the sequence is unchanged.");
        return;
      }
      if (!text.length) {
        refuse("Type at least one token: the figure keeps the last sequence.");
        return;
      }
      message.textContent = "";
      root.removeAttribute("data-refused");
      state.text = text;
      state.query = text.length - 1;
      compute();
      draw();
    });

    random.addEventListener("click", function () {
      var tokens = repeatedSegment(model.vocab_size, L_MAX, data.task);
      state.text = tokens.map(function (t) { return alphabet[t]; }).join("");
      state.query = tokens.length - 2; // the last token never has a next one in training
      input.value = state.text;
      message.textContent = "";
      root.removeAttribute("data-refused");
      compute();
      draw();
    });

    strip.addEventListener("keydown", function (evt) {
      var moves = { ArrowLeft: -1, ArrowRight: 1, ArrowUp: -1, ArrowDown: 1 };
      if (evt.key in moves) choose(state.query + moves[evt.key], true);
      else if (evt.key === "Home") choose(0, true);
      else if (evt.key === "End") choose(run.tokens.length - 1, true);
      else return;
      evt.preventDefault();
    });

    compute();
    draw();
  }

  kit.figure("induction-heads", inductionFigure);
})();
