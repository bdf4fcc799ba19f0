// Typeset the site's formulas at build time, as MathJax typesets them in the browser.
//
// Reads JSON from stdin: {"fontCache": "global" | "local", "pages": [[formula, ...], ...]}, where
// each formula is {"display": bool, "html": the inner HTML of a span.math or div.math as
// Sphinx writes it, e.g. "\\(x^2\\)"}. Writes JSON to stdout: {"version": MathJax's version,
// "pages": [{"formulas": [inner HTML with each TeX replaced by an mjx-container], "css":
// MathJax's stylesheet for the page, "cache": the page's glyph definitions (fontCache "global";
// "" otherwise), "errors": [the formulas with a TeX error, as rendered]}]}.
//
// TeX input (the packages that MathJax's tex-svg.js has or loads on demand), SVG output with
// assistive MathML: the configuration of the site's own MathJax (_config.yml, mathjax3_config).
// Used by book/_ext/mha_site/math_typeset.py at the end of the site's build: one process for
// every page.
import { createRequire } from "node:module";
import { readFileSync } from "node:fs";

const require = createRequire(import.meta.url);
const { mathjax } = require("mathjax-full/js/mathjax.js");
const { TeX } = require("mathjax-full/js/input/tex.js");
const { SVG } = require("mathjax-full/js/output/svg.js");
const { liteAdaptor } = require("mathjax-full/js/adaptors/liteAdaptor.js");
const { RegisterHTMLHandler } = require("mathjax-full/js/handlers/html.js");
const { AssistiveMmlHandler } = require("mathjax-full/js/a11y/assistive-mml.js");
const { AllPackages } = require("mathjax-full/js/input/tex/AllPackages.js");

// Without noerrors and noundefined, a TeX error (an undefined macro too) is an merror, which
// the build reports.
const PACKAGES = AllPackages.filter((name) => !["noerrors", "noundefined"].includes(name));

const request = JSON.parse(readFileSync(0, "utf8"));
const adaptor = liteAdaptor();
AssistiveMmlHandler(RegisterHTMLHandler(adaptor));

function renderPage(formulas) {
  const tex = new TeX({ packages: PACKAGES });
  const svg = new SVG({ fontCache: request.fontCache || "global" });
  const wrappers = formulas
    .map((f) => `<${f.display ? "div" : "span"} class="math">${f.html}</${f.display ? "div" : "span"}>`)
    .join("");
  const doc = mathjax.document(`<!DOCTYPE html><html><head></head><body>${wrappers}</body></html>`, {
    InputJax: tex,
    OutputJax: svg,
    processHtmlClass: "math",
  });
  doc.render();
  // A display formula scrolls sideways when wider than the text (the theme's CSS): it takes
  // the keyboard's focus, as MathJax's own menu code makes it do in the browser.
  for (const item of doc.math) {
    if (item.display) adaptor.setAttribute(item.typesetRoot, "tabindex", "0");
  }
  const body = adaptor.body(doc.document);
  // The wrappers, in order, then (fontCache "global") the glyphs' <svg>.
  const children = adaptor.childNodes(body).filter((node) => adaptor.kind(node) !== "#text");
  const rendered = children.slice(0, formulas.length).map((node) => adaptor.innerHTML(node));
  const cache = children.find((node) => adaptor.getAttribute(node, "id") === "MJX-SVG-global-cache");
  return {
    formulas: rendered,
    css: adaptor.textContent(svg.styleSheet(doc)),
    cache: cache ? adaptor.outerHTML(cache) : "",
    errors: rendered.filter((inner) => inner.includes("data-mjx-error")),
  };
}

const pages = request.pages.map(renderPage);
process.stdout.write(JSON.stringify({ version: mathjax.version, pages }));
