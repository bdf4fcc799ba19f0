// Draw the book's Plotly figures only when they are about to be seen (no network).
//
// Each figure is a placeholder <div class="mha-plotly" id="ID" role="img" aria-label=...>
// sized by CSS from its --mha-height / --mha-narrow-height. When the first placeholder comes
// near the viewport, this script loads plotly.js (the bundle named by its own data-plotly
// attribute) and the light/dark templates; each figure's data script, _figures/ID.js, is
// loaded when that figure comes near and calls window.mhaFigure(ID, figure).
// Figures marked data-theme-template="auto" follow the page's light/dark theme (the pydata
// theme sets data-theme on <html>). A container narrower than NARROW_PX gets the figure's
// narrow layout (data-narrow). window.mhaDrawAllFigures() draws every figure at once and
// resolves when all are drawn (for printing). In print, a figure's sliders and menus, dead
// on paper, are left out (mha-plotly-print.js measures what they took).
// A figure with data-still (a page's opening figure) shows its still, SVGs of its first state
// drawn at build time (mha_site.figure_stills, through window.mhaFigureStill), until the
// reader touches the page, scrolls, or comes near a figure without one: only then is
// plotly.js fetched.
(function () {
  "use strict";

  var NARROW_PX = 600;
  var TITLE_TOP_PX = 10; // from the figure's top edge to its title
  var NEAR = "300px 0px"; // how close to the viewport a figure starts loading
  // A reader's acts that bring plotly.js for the stills, as they bubble to the window (the
  // page's scroll does; the theme's scroll of its sidebar at load does not).
  var READER_ACTS = ["pointerdown", "pointermove", "touchstart", "keydown", "wheel", "scroll",
    "focusin"];
  var self = document.currentScript;
  var base = new URL(".", self.src); // .../_static/
  var plotlyUrl = new URL(self.dataset.plotly, base).href;
  var templatesUrl = new URL(self.dataset.templates, base).href;
  var figuresUrl = new URL("../" + self.dataset.figures + "/", base).href;
  var scripts = {};
  var waiting = {};
  var figures = {};
  var PRINT = window.matchMedia ? window.matchMedia("print") : null;
  var paper = window.mhaPlotlyPrint; // mha-plotly-print.js, loaded just before
  var printRequested = false; // between the window's beforeprint and afterprint

  function printing() {
    return printRequested || !!(PRINT && PRINT.matches);
  }

  function loadScript(url) {
    if (!scripts[url]) {
      scripts[url] = new Promise(function (resolve, reject) {
        var tag = document.createElement("script");
        tag.src = url;
        tag.async = true;
        tag.onload = resolve;
        tag.onerror = function () {
          reject(new Error("could not load " + url));
        };
        document.head.appendChild(tag);
      });
    }
    return scripts[url];
  }

  function loadPlotly() {
    return Promise.all([loadScript(plotlyUrl), loadScript(templatesUrl)]);
  }

  window.mhaFigure = function (id, figure) {
    figures[id] = figure;
    if (waiting[id]) {
      waiting[id](figure);
    }
  };

  function loadFigure(id) {
    if (figures[id]) {
      return Promise.resolve(figures[id]);
    }
    var arrived = new Promise(function (resolve) {
      waiting[id] = resolve;
    });
    return loadScript(figuresUrl + encodeURIComponent(id) + ".js").then(function () {
      return arrived;
    });
  }

  function currentTheme() {
    var theme = document.documentElement.dataset.theme;
    if (theme === "dark" || theme === "light") {
      return theme;
    }
    var dark = window.matchMedia && window.matchMedia("(prefers-color-scheme: dark)").matches;
    return dark ? "dark" : "light";
  }

  function isObject(value) {
    return value && typeof value === "object" && !Array.isArray(value);
  }

  function merge(target, patch) {
    var out = Object.assign({}, target);
    Object.keys(patch).forEach(function (key) {
      out[key] = isObject(patch[key]) && isObject(out[key]) ? merge(out[key], patch[key])
        : patch[key];
    });
    return out;
  }

  // Break a title at spaces so that it fits `width` pixels at `size` px per character cell.
  function wrapText(text, width, size) {
    var chars = Math.max(16, Math.floor(width / (0.55 * size)));
    return String(text).split(/<br\s*\/?>/i).map(function (part) {
      var lines = [];
      var line = "";
      part.split(" ").forEach(function (word) {
        var plain = (line + " " + word).replace(/<[^>]+>/g, "");
        if (line && plain.length > chars) {
          lines.push(line);
          line = word;
        } else {
          line = line ? line + " " + word : word;
        }
      });
      lines.push(line);
      return lines.join("<br>");
    }).join("<br>");
  }

  function layoutFor(div) {
    var state = div._mha;
    var narrow = div.clientWidth < NARROW_PX;
    var layout = Object.assign({}, state.layout);
    var data = state.data;
    var theme = currentTheme();
    if (div.dataset.themeTemplate === "auto") {
      layout.template = (window.MHA_PLOTLY_TEMPLATES || {})[theme];
    }
    if (!layout.colorway && window.MHA_PLOTLY_COLORWAY) {
      layout.colorway = window.MHA_PLOTLY_COLORWAY[theme === "dark" ? "dark" : "light"];
    }
    delete layout.width; // the container decides the width
    layout.autosize = true;
    if (narrow) {
      var patch = Object.assign({}, state.narrow);
      var traces = patch._traces || {};
      delete patch._traces;
      layout = merge(layout, patch);
      data = data.map(function (trace, index) {
        return traces[index] ? merge(trace, traces[index]) : trace;
      });
    }
    // Wrap the title to the figure's width and each subplot title to its subplot's width;
    // the top margin holds the title, then the first row's subplot titles.
    var subtitles = state.subtitles;
    var subHeight = 0;
    var first = Object.keys(subtitles)[0];
    if (layout.annotations && first !== undefined) {
      var plotWidth = div.clientWidth - 160; // less the side margins and a colour bar
      layout.annotations = layout.annotations.map(function (note, index) {
        var share = narrow ? 1 : subtitles[index];
        if (!share || !note.text) {
          return note;
        }
        var size = (note.font && note.font.size) || 16;
        var text = wrapText(String(note.text).replace(/<br>/g, " "), share * plotWidth, size);
        if (!narrow || String(index) === first) {
          subHeight = Math.max(subHeight, text.split("<br>").length * (size + 4));
        }
        return Object.assign({}, note, { text: text });
      });
    }
    layout.height = layout.height || 450;
    var titleRoom = 0;
    var title = isObject(layout.title) ? Object.assign({}, layout.title) : { text: layout.title };
    if (title.text) {
      var size = (title.font && title.font.size) || 17;
      title.text = wrapText(title.text, div.clientWidth - 40, size);
      var lines = title.text.split("<br>").length;
      // plotly.js draws a title of several lines down from where its first line would be
      // as a one-line title, ignoring `pad` (and `y`, with yanchor "top"). With a middle
      // anchor `y` holds, and the first line's top is 0.57 em (one line) or 0.92 em (more)
      // above it: place that top TITLE_TOP_PX below the figure's top edge.
      title.yref = "container";
      title.yanchor = "middle";
      title.pad = { t: 0, b: 0 };
      title.y = 1 - (TITLE_TOP_PX + (lines > 1 ? 0.92 : 0.57) * size) / layout.height;
      var margin = Object.assign({}, layout.margin);
      titleRoom = 28 + lines * (size + 8) + subHeight;
      margin.t = Math.max(margin.t || 0, titleRoom);
      layout.margin = margin;
      layout.title = title;
    }
    return {
      data: data, layout: layout, narrow: narrow, theme: theme, print: false,
      titleRoom: titleRoom,
    };
  }

  // A figure is one image for assistive technology, named by its title and described by its
  // text alternative. The placeholder is that image until the figure is drawn; then the image
  // is Plotly's drawing (its first SVG), because the placeholder holds the modebar's buttons
  // and an image must not contain controls. The other SVG layers (title, legend, hover
  // labels) repeat what the name and the text alternative say.
  var LABELS = ["role", "aria-label", "aria-describedby"];

  function labelDrawing(div) {
    if (!div._mhaLabel) {
      div._mhaLabel = LABELS.map(function (name) {
        return div.getAttribute(name);
      });
    }
    var layers = div.querySelectorAll("svg.main-svg");
    if (!layers.length) {
      return;
    }
    LABELS.forEach(function (name, index) {
      div.removeAttribute(name);
      layers[0].setAttribute(name, div._mhaLabel[index]);
    });
    for (var i = 1; i < layers.length; i++) {
      layers[i].setAttribute("aria-hidden", "true");
    }
  }

  // plotly.js sometimes scrolls the page while it draws a figure (Chromium, a figure near
  // the top of the screen: the reader who followed a link to a heading saw it jump 420 px
  // away). It does so within the call, before the reader can scroll: put the page back.
  function keepingThePlace(drawing) {
    var x = window.scrollX;
    var y = window.scrollY;
    var drawn = drawing();
    if (window.scrollX !== x || window.scrollY !== y) {
      window.scrollTo(x, y);
    }
    return drawn;
  }

  function plot(div, view, first) {
    view.width = div.clientWidth;
    div._mhaView = view;
    return keepingThePlace(function () {
      var call = first ? window.Plotly.newPlot : window.Plotly.react;
      return call(div, view.data, view.layout, div._mha.config);
    }).then(function () {
      labelDrawing(div);
    });
  }

  // Draw the figure's current view: on screen as it is; in print without its controls, whose
  // bands are measured on the figure drawn with them (first drawn so if need be).
  function render(div, first) {
    var view = layoutFor(div);
    if (!printing() || !paper.hasControls(view.layout)) {
      return plot(div, view, first);
    }
    var bands = div._mha.bands;
    if (bands && bands.narrow === view.narrow && bands.width === div.clientWidth) {
      return plot(div, paper.printView(view, bands), first);
    }
    var shown = div._mhaView;
    var drawn = !first && shown && !shown.print && shown.narrow === view.narrow
      && shown.theme === view.theme && shown.width === div.clientWidth ? Promise.resolve()
      : plot(div, view, first);
    return drawn.then(function () {
      div._mha.bands = paper.measureControls(div, view.narrow);
      return plot(div, paper.printView(view, div._mha.bands));
    });
  }

  function draw(div) {
    if (!div._drawing) {
      wantPlotly();
      div._drawing = Promise.all([loadPlotly(), loadFigure(div.id)]).then(function (loaded) {
        var figure = loaded[1];
        [].slice.call(div.querySelectorAll("img.mha-still")).forEach(function (still) {
          still.remove();
        });
        div._mha = {
          data: figure.data || [],
          layout: figure.layout || {},
          narrow: JSON.parse(div.dataset.narrow || "{}"),
          subtitles: JSON.parse(div.dataset.subtitles || "{}"),
          config: Object.assign({ responsive: true, displaylogo: false }, figure.config || {}),
        };
        return render(div, true);
      });
    }
    return div._drawing;
  }

  // Redraw a drawn figure when the theme, the narrow/wide choice or print changes.
  function refresh(div) {
    if (!div._mha || !div._mhaView) {
      return Promise.resolve();
    }
    // one drawing at a time: a change that comes while the figure is drawn waits for it
    div._mhaQueue = (div._mhaQueue || div._drawing).then(function () {
      var shown = div._mhaView;
      if (shown.theme === currentTheme() && shown.narrow === div.clientWidth < NARROW_PX
          && shown.width === div.clientWidth
          && shown.print === (printing() && paper.hasControls(div._mha.layout))) {
        return null;
      }
      return render(div);
    });
    return div._mhaQueue;
  }

  // For the build: figure `id` drawn in `theme` at its width, as plotly.js's SVG export.
  window.mhaFigureStill = function (id, theme) {
    var div = document.getElementById(id);
    document.documentElement.dataset.theme = theme;
    return draw(div).then(function () {
      return refresh(div);
    }).then(function () {
      return window.Plotly.toImage(div, { format: "svg", imageDataOnly: true,
        width: div.clientWidth, height: div._mhaView.layout.height });
    });
  };

  // plotly.js is wanted once a figure without a still comes near, the reader acts on the
  // page, or it is printed; the stills near the screen then come alive.
  var plotlyWanted = false;
  var stillsNear = [];

  function wantPlotly() {
    if (!plotlyWanted) {
      plotlyWanted = true;
      READER_ACTS.forEach(function (name) {
        window.removeEventListener(name, wantPlotly);
      });
      loadPlotly();
      stillsNear.forEach(draw);
    }
  }

  function start() {
    var divs = [].slice.call(document.querySelectorAll("div.mha-plotly"));
    if (!divs.length) {
      return;
    }
    window.mhaDrawAllFigures = function () {
      return Promise.all(divs.map(draw));
    };
    if ("IntersectionObserver" in window) {
      var observer = new IntersectionObserver(function (entries) {
        entries.forEach(function (entry) {
          var div = entry.target;
          stillsNear = stillsNear.filter(function (other) {
            return other !== div;
          });
          if (entry.isIntersecting && div.hasAttribute("data-still") && !plotlyWanted) {
            stillsNear.push(div);
          } else if (entry.isIntersecting) {
            observer.unobserve(div);
            draw(div);
          }
        });
      }, { rootMargin: NEAR });
      READER_ACTS.forEach(function (name) {
        window.addEventListener(name, wantPlotly, { passive: true });
      });
      divs.forEach(function (div) {
        observer.observe(div);
      });
    } else {
      window.mhaDrawAllFigures();
    }
    var printChanged = function (requested) {
      return function () {
        printRequested = requested;
        divs.forEach(refresh);
      };
    };
    window.addEventListener("beforeprint", window.mhaDrawAllFigures);
    window.addEventListener("beforeprint", printChanged(true));
    window.addEventListener("afterprint", printChanged(false));
    if (PRINT && PRINT.addEventListener) {
      PRINT.addEventListener("change", function () {
        divs.forEach(refresh);
      });
    }
    new MutationObserver(function () {
      divs.forEach(refresh);
    }).observe(document.documentElement, { attributes: true, attributeFilter: ["data-theme"] });
    if ("ResizeObserver" in window) {
      var resized = new ResizeObserver(function (entries) {
        entries.forEach(function (entry) {
          var div = entry.target;
          if (div._mhaView && (div.clientWidth < NARROW_PX) !== div._mhaView.narrow) {
            refresh(div);
          }
        });
      });
      divs.forEach(function (div) {
        resized.observe(div);
      });
    }
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", start);
  } else {
    start();
  }
})();
