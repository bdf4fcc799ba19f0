/* What the book's explorables share: their stylesheet, the helpers that build their HTML and
 * SVG, the book's notation as text, and the registry that draws each figure on its page.
 *
 * An explorable is a small figure that recomputes in the reader's browser. Every number it
 * shows comes from window.mhaExplore (mha-explore.js), whose functions mirror the library's
 * and are tested against it; a figure's own script (mha-explore-NAME.js) only draws and
 * listens. A chapter places a figure with
 *
 *   <div class="mha-explore" data-explore="NAME"><p class="mha-explore-fallback">...</p></div>
 *
 * and loads mha-explore.js, this script and mha-explore-NAME.js, in that order, deferred. The
 * figure's script hands its drawing function to window.mhaExploreKit.figure(NAME, draw), which
 * calls it once for each such element once the page is parsed, and not at all without
 * mha-explore.js: the fallback text stays. data-ready marks a drawn figure. A figure with
 * data carries it in the element as JSON (a script of class mha-explore-data), or on the site
 * names it in data-explore-data: such a figure is drawn when it comes near the screen (NEAR;
 * at once without IntersectionObserver, before printing, or when window.mhaExploreKit.draw()
 * is called), and its data script, _figures/NAME.js beside _static, is loaded then and hands
 * the JSON to window.mhaExploreKit.data(NAME, json), which puts it into the element as that
 * same script and draws the figure (a link's target below it keeps its place:
 * mha-links-land.js). Each figure is drawn in its initial state, and
 * again only when the reader changes something: a drag (mouse, pen or touch), an arrow key on
 * a focused point, a button or a menu. Each keeps its state and its computed numbers in data
 * attributes (data-state on the figure, data-* on its parts), which the browser test reads
 * back and checks against `mha`. Printed (the book's PDF), a figure is a still of that first
 * state: its rows of controls carry data-mha-control, which print leaves out.
 *
 * In JupyterLab the same element is a cell's output (mha.display.explorables), followed by
 * these scripts inline: they run when the output is shown, and draw the figures then present.
 */
(function () {
  "use strict";

  var SVG_NS = "http://www.w3.org/2000/svg";
  var STYLE = [
    ".mha-explore{position:relative;margin:1rem 0 1.5rem;padding:.75rem;border:1px solid var(--pst-color-border,#ccc);",
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
    ".mha-explore .mx-current{background:rgba(230,159,0,.22)}.mha-explore .mx-seen{background:rgba(86,180,233,.15)}",
    // a table of numbers per key: inputs as narrow as their numbers, no spinner
    ".mha-explore table.mx-keys input{width:2.9rem;padding:.15rem .2rem;text-align:right;-moz-appearance:textfield}",
    ".mha-explore table.mx-keys input::-webkit-inner-spin-button{-webkit-appearance:none;margin:0}",
    ".mha-explore .mx-scroll{overflow-x:auto;max-width:100%}",
    ".mha-explore .mx-point{cursor:grab;outline:none;touch-action:none}",
    ".mha-explore .mx-point:focus-visible circle,.mha-explore .mx-point:focus-visible rect{stroke-width:4}",
    ".mha-explore .mx-note{font-size:.9em;margin:.3rem 0}",
    ".mha-explore .mx-num{font-variant-numeric:tabular-nums}",
    // read by a screen reader, not shown (what the figure shows already)
    ".mha-explore .mx-sr{position:absolute;width:1px;height:1px;overflow:hidden;clip:rect(0 0 0 0);white-space:nowrap}",
    ".mha-explore .mx-m,.mha-explore sup,.mha-explore sub{white-space:nowrap}", // a symbol and its scripts
    ".mha-explore th{overflow-wrap:normal}", // a heading breaks between words only
    ".mha-explore td.mx-num{overflow-wrap:normal}", // a number wraps at its spaces, not between digits
    // touch targets at least 44 px tall on a phone (WCAG 2.5.5)
    "@media (max-width:48rem){.mha-explore select,.mha-explore button,.mha-explore input{min-height:44px;font-size:.9em}",
    ".mha-explore{padding:.5rem}.mha-explore .mx-row{gap:.4rem .6rem}",
    // a row of menus (mx-stack): each label above its menu, so that two menus share a line
    ".mha-explore .mx-stack label{flex-direction:column;align-items:flex-start;gap:0}",
    ".mha-explore td,.mha-explore th{padding:.1rem .3rem}", // and a table's columns closer
    ".mha-explore table.mx-keys{font-size:.72em}.mha-explore table.mx-keys td,.mha-explore table.mx-keys th{padding:.1rem .12rem}",
    ".mha-explore table.mx-keys caption{font-size:1.2em}.mha-explore table.mx-keys input{width:2rem}}",
    // Printed, a figure is a still of its first state, its controls left out
    "@media print{.mha-explore [data-mha-control]{display:none!important}.mha-explore{break-inside:avoid}}",
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

  function addStyle() {
    if (document.getElementById("mha-explore-style")) return;
    var style = el("style", { id: "mha-explore-style" });
    style.textContent = STYLE;
    document.head.appendChild(style);
  }

  var NEAR = "800px 0px"; // how close to the viewport a figure whose data is a file is drawn
  var self = document.currentScript;
  // the site's data scripts; none where this script is inline (a notebook: data in the element)
  var dataBase = self && self.src ? new URL("../_figures/", self.src).href : null;
  var drawers = {}; // figure name -> its drawing function, as each figure's script registers it
  var texts = {}; // data name -> its JSON text, once its script has run
  var asked = {}; // data name -> "loading", or "failed" (the figure says its data is missing)
  var waiting = []; // draw()'s promises, resolved when every figure asked for is drawn
  var observer = "IntersectionObserver" in window ? new IntersectionObserver(function (entries) {
    entries.forEach(function (entry) {
      if (entry.isIntersecting) entry.target._mhaWanted = true;
    });
    drawWanted();
  }, { rootMargin: NEAR }) : null;

  function roots() {
    return document.querySelectorAll(".mha-explore[data-explore]");
  }

  // Whether the figure's data is in its element (or it has none, or it could not be loaded);
  // data that has arrived is put in as the element's JSON script.
  function hasData(root) {
    var name = root.getAttribute("data-explore-data");
    if (!name || asked[name] === "failed" || root.querySelector("script.mha-explore-data")) {
      return true;
    }
    if (texts[name] === undefined) return false;
    var script = el("script", { type: "application/json", class: "mha-explore-data" });
    script.textContent = texts[name];
    root.appendChild(script);
    return true;
  }

  function loadData(name) {
    if (asked[name]) return;
    asked[name] = "loading";
    if (!dataBase) {
      asked[name] = "failed";
      return;
    }
    var tag = el("script", { src: dataBase + encodeURIComponent(name) + ".js" });
    tag.async = true;
    tag.onload = tag.onerror = function () {
      if (texts[name] !== undefined) return; // handed over: drawn already
      asked[name] = "failed";
      drawWanted();
    };
    document.head.appendChild(tag);
  }

  // Draw each figure that is wanted (near the screen, or asked for) and not drawn yet, if its
  // script has registered it; one whose data is not here yet has it loaded, and is drawn when
  // it arrives.
  function drawWanted() {
    var all = window.mhaExplore ? roots() : [];
    if (all.length) addStyle();
    for (var i = 0; i < all.length; i++) {
      var root = all[i], draw = drawers[root.getAttribute("data-explore")];
      if (!draw || !root._mhaWanted || root.getAttribute("data-ready")) continue;
      if (!hasData(root)) {
        loadData(root.getAttribute("data-explore-data"));
        if (!hasData(root)) continue;
      }
      if (!root.id) root.id = "mha-explore-" + i;
      var fallback = root.querySelector(".mha-explore-fallback");
      if (fallback) fallback.hidden = true;
      draw(root);
      root.setAttribute("data-ready", "true");
      if (observer) observer.unobserve(root);
    }
    settle();
  }

  // Resolve draw()'s promises once no figure asked for is left undrawn.
  function settle() {
    var all = roots();
    for (var i = 0; i < all.length; i++) {
      var root = all[i];
      if (root._mhaWanted && drawers[root.getAttribute("data-explore")] && window.mhaExplore
          && !root.getAttribute("data-ready")) return;
    }
    waiting.splice(0).forEach(function (resolve) { resolve(); });
  }

  // Watch each registered figure of the page that is not watched yet: one whose data is a
  // file of its own is drawn when it comes near the screen (or at once without
  // IntersectionObserver), the others at once.
  function watch() {
    var all = roots();
    for (var i = 0; i < all.length; i++) {
      var root = all[i];
      if (root._mhaWatched || !drawers[root.getAttribute("data-explore")]) continue;
      root._mhaWatched = true;
      if (observer && root.hasAttribute("data-explore-data")) observer.observe(root);
      else root._mhaWanted = true;
    }
    drawWanted();
  }

  // Draw every registered figure of the page that is not drawn yet, those whose data is here
  // at once (a figure added to the page later is drawn by calling this again). Returns a
  // promise that resolves when all of them are drawn, those whose data had to be loaded too.
  function drawAll() {
    var all = roots();
    for (var i = 0; i < all.length; i++) all[i]._mhaWanted = true;
    var drawn = new Promise(function (resolve) { waiting.push(resolve); });
    watch();
    return drawn;
  }

  // A figure's script registers its drawing function here; its figures are drawn once the
  // page is parsed (those whose data is a file, once they come near the screen).
  function figure(name, draw) {
    drawers[name] = draw;
    if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", watch);
    else watch();
  }

  // A data script (_figures/NAME.js) hands its figure's data here, as JSON text.
  function data(name, json) {
    texts[name] = json;
    drawWanted();
  }

  window.addEventListener("beforeprint", drawAll);

  window.mhaExploreKit = {
    el: el,
    svgEl: svgEl,
    notation: notation,
    spoken: spoken,
    fmt: fmt,
    select: select,
    button: button,
    svgPoint: svgPoint,
    figure: figure,
    draw: drawAll,
    data: data,
  };
})();
