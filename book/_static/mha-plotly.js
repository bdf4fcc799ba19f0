// Draw the book's Plotly figures with the site's own copy of plotly.js (no network).
// Each figure is a <div class="mha-plotly"> followed by its JSON in
// <script type="application/json" class="mha-plotly-data" data-for="ID">.
// Figures marked data-theme-template="auto" follow the page's light/dark theme
// (the pydata theme sets data-theme on <html>).
(function () {
  "use strict";

  function currentTheme() {
    var theme = document.documentElement.dataset.theme;
    if (theme === "dark" || theme === "light") {
      return theme;
    }
    var dark = window.matchMedia && window.matchMedia("(prefers-color-scheme: dark)").matches;
    return dark ? "dark" : "light";
  }

  function templateFor(theme) {
    var templates = window.MHA_PLOTLY_TEMPLATES || {};
    return templates[theme] || templates.light;
  }

  function layoutFor(div, theme) {
    var layout = Object.assign({}, div._mhaLayout);
    if (div.dataset.themeTemplate === "auto") {
      layout.template = templateFor(theme);
    }
    return layout;
  }

  function draw(div) {
    var source = document.querySelector(
      'script.mha-plotly-data[data-for="' + div.id + '"]'
    );
    if (!source || !window.Plotly) {
      return;
    }
    var figure = JSON.parse(source.textContent);
    div._mhaData = figure.data || [];
    div._mhaLayout = figure.layout || {};
    var config = Object.assign({ responsive: true, displaylogo: false }, figure.config || {});
    div._mhaConfig = config;
    div._mhaTheme = currentTheme();
    window.Plotly.newPlot(div, div._mhaData, layoutFor(div, div._mhaTheme), config);
  }

  function retheme() {
    var theme = currentTheme();
    document.querySelectorAll('div.mha-plotly[data-theme-template="auto"]').forEach(
      function (div) {
        if (div._mhaTheme === theme || !div._mhaLayout) {
          return;
        }
        div._mhaTheme = theme;
        window.Plotly.react(div, div._mhaData, layoutFor(div, theme), div._mhaConfig);
      }
    );
  }

  function start() {
    document.querySelectorAll("div.mha-plotly").forEach(draw);
    new MutationObserver(retheme).observe(document.documentElement, {
      attributes: true,
      attributeFilter: ["data-theme"],
    });
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", start);
  } else {
    start();
  }
})();
