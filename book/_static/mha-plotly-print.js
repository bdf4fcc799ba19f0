// Plotly figures in print without their sliders and menus (for mha-plotly.js, loaded first).
//
// A figure's sliders and menus (layout.sliders, layout.updatemenus) are dead on paper: print
// leaves them out and the figure keeps its first state, shorter by the bands of the page they
// took. measureControls(div, narrow) measures those bands on the figure drawn with them;
// printView(view, bands) is the view without them. window.mhaPlotlyPrint holds both.
(function () {
  "use strict";

  var CONTROLS = ["sliders", "updatemenus"]; // Plotly's own controls, left out of print

  function isObject(value) {
    return value && typeof value === "object" && !Array.isArray(value);
  }

  function hasControls(layout) {
    return CONTROLS.some(function (name) {
      return (layout[name] || []).length > 0;
    });
  }

  // The horizontal bands of the drawn figure that its controls take above and below the plot
  // (a control over the plot takes none), with the empty space around them: a band reaches
  // GAP_PX from what is drawn on either side of it, or the plot itself when nothing is drawn
  // between them. Their heights, how far from the plot each starts, and the plot's top and
  // bottom margins then. In whole CSS pixels of the figure (the page may zoom it).
  var GAP_PX = 12;

  function measureControls(div, narrow) {
    var size = div._fullLayout._size;
    var box = div.querySelector(".main-svg").getBoundingClientRect();
    var scale = box.height / div._fullLayout.height || 1;
    var span = function (element) {
      var rect = element.getBoundingClientRect();
      return rect.height > 0 ? [(rect.top - box.top) / scale, (rect.bottom - box.top) / scale]
        : null;
    };
    var top = size.t;
    var bottom = size.t + size.h;
    var above = [Infinity, -Infinity];
    var below = [Infinity, -Infinity];
    var selector = ".slider-container, .updatemenu-container";
    div.querySelectorAll(selector).forEach(function (control) {
      control.style.setProperty("display", "inline", "important"); // print's CSS hides it
      var y = span(control);
      control.style.removeProperty("display");
      var band = !y ? null : (y[0] + y[1]) / 2 < top ? above : (y[0] + y[1]) / 2 > bottom ? below
        : null;
      if (band) {
        band[0] = Math.min(band[0], y[0]);
        band[1] = Math.max(band[1], y[1]);
      }
    });
    var drawn = [].map.call(div.querySelectorAll(".infolayer > g, .xaxislayer-above"), function (
      item) {
      return item.matches(selector) ? null : span(item);
    }).filter(Boolean);
    var middle = function (y) {
      return (y[0] + y[1]) / 2;
    };
    var nearest = function (from, to, edge, pick) {
      var found = drawn.filter(function (y) {
        return middle(y) > Math.min(from, to) && middle(y) < Math.max(from, to);
      }).map(function (y) {
        return y[edge];
      });
      return found.length ? pick.apply(null, found) : null;
    };
    if (above[1] > above[0]) {
      var over = nearest(0, above[0], 1, Math.max);
      var under = nearest(above[1], top, 0, Math.min);
      above = [over === null ? above[0] : Math.min(above[0], over + GAP_PX),
        under === null ? top : Math.max(above[1], under - GAP_PX)];
    }
    if (below[1] > below[0]) {
      var atop = nearest(bottom, below[0], 1, Math.max);
      var beneath = nearest(below[1], div._fullLayout.height, 0, Math.min);
      below = [atop === null ? bottom : Math.min(below[0], atop + GAP_PX),
        beneath === null ? below[1] : Math.max(below[1], beneath - GAP_PX)];
    }
    above = above.map(Math.round);
    below = below.map(Math.round);
    var bands = { narrow: narrow, width: div.clientWidth, t: size.t, b: size.b, above: 0,
      below: 0 };
    if (above[1] > above[0]) {
      bands.above = above[1] - above[0];
      bands.aboveFrom = top - above[1]; // from the plot's top up to the band
    }
    if (below[1] > below[0]) {
      bands.below = below[1] - below[0];
      bands.belowFrom = below[0] - bottom; // from the plot's bottom down to the band
    }
    return bands;
  }

  // The view for print: no controls, the same plot, the controls' bands cut out of the
  // margins. What lies beyond a band in paper coordinates (a legend under a slider) moves
  // with the figure's edge; what lies between the band and the plot stays by the plot.
  function printView(view, bands) {
    var layout = Object.assign({}, view.layout);
    CONTROLS.forEach(function (name) {
      delete layout[name];
    });
    var plot = layout.height - bands.t - bands.b;
    var cutAbove = bands.t - Math.max(view.titleRoom, bands.t - bands.above); // the title stays
    var shift = function (item, ref) {
      if (!isObject(item) || (item.yref || ref) !== "paper" || typeof item.y !== "number") {
        return item;
      }
      var y = item.y;
      if (bands.below && -y * plot >= bands.belowFrom) {
        y += bands.below / plot;
      } else if (cutAbove && (y - 1) * plot >= bands.aboveFrom) {
        y -= cutAbove / plot;
      }
      return Object.assign({}, item, { y: y });
    };
    layout.height -= cutAbove + bands.below;
    layout.margin = Object.assign({}, layout.margin, {
      t: bands.t - cutAbove,
      b: bands.b - bands.below,
    });
    if (layout.legend) {
      layout.legend = shift(layout.legend, "paper");
    }
    if (layout.annotations) {
      layout.annotations = layout.annotations.map(function (note) {
        return shift(note, "y");
      });
    }
    if (isObject(layout.title) && layout.title.yref === "container") {
      // the title keeps its place under the figure's top edge
      layout.title = Object.assign({}, layout.title, {
        y: 1 - (1 - layout.title.y) * view.layout.height / layout.height,
      });
    }
    return Object.assign({}, view, { layout: layout, print: true });
  }

  window.mhaPlotlyPrint = {
    hasControls: hasControls,
    measureControls: measureControls,
    printView: printView,
  };
})();
