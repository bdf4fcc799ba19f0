// Typeset the site's formulas at build time, as MathJax typesets them in the browser.
//
// Reads JSON from stdin: {"fontCache": "global" | "local", "pages": [[formula, ...], ...]}, where
// each formula is {"display": bool, "html": the inner HTML of a span.math or div.math as
// Sphinx writes it, e.g. "\\(x^2\\)"}. Writes JSON to stdout: {"version": MathJax's version,
// "pages": [{"formulas": [inner HTML with each TeX replaced by an mjx-container], "drawings":
// [for each formula, its HTML in parts around its drawing, {"before", "open" (the drawing's
// <svg> start tag), "inner", "after" (from its </svg> on, the assistive MathML first), "glyphs"
// (the ids of the cached glyphs it uses)}, or null if it is not one mjx-container], "css":
// MathJax's stylesheet for the page, "cache": the page's glyph definitions (fontCache "global";
// "" otherwise), "glyphCache": {"open", "close", "glyphs": [[id, <path>], ...]} (the cache in
// parts; null without one), "errors": [the formulas with a TeX error, as rendered]}]}.
// The drawings' parts let the build move the drawings of formulas off a page's first screen
// into a script of the page (book/_ext/mha_site/math_when_near.py) without parsing them again.
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
  const wrappersDone = children.slice(0, formulas.length);
  const rendered = wrappersDone.map((node) => adaptor.innerHTML(node));
  const cache = children.find((node) => adaptor.getAttribute(node, "id") === "MJX-SVG-global-cache");
  return {
    formulas: rendered,
    drawings: wrappersDone.map((node, k) => drawingParts(node, rendered[k])),
    css: adaptor.textContent(svg.styleSheet(doc)),
    cache: cache ? adaptor.outerHTML(cache) : "",
    glyphCache: cache ? glyphCacheParts(cache) : null,
    errors: rendered.filter((inner) => inner.includes("data-mjx-error")),
  };
}

function elements(node) {
  return adaptor.childNodes(node).filter((child) => !adaptor.kind(child).startsWith("#"));
}

// The start tag of an element: its outer HTML before its inner HTML and end tag.
function startTag(node) {
  const outer = adaptor.outerHTML(node);
  return outer.slice(0, outer.length - adaptor.innerHTML(node).length - `</${adaptor.kind(node)}>`.length);
}

// The ids of the glyphs an element's drawing uses (its elements' xlink:href="#id").
function glyphsUsed(node, found = []) {
  for (const child of elements(node)) {
    const href = adaptor.getAttribute(child, "xlink:href");
    if (typeof href === "string" && href.startsWith("#")) found.push(href.slice(1));
    glyphsUsed(child, found);
  }
  return found;
}

// A formula's HTML around its drawing: the <svg> that opens its one mjx-container, just before
// its assistive MathML (a table's drawing holds inner <svg>s).
function drawingParts(wrapper, html) {
  const containers = adaptor.tags(wrapper, "mjx-container");
  if (containers.length !== 1) return null;
  const [drawing, mml] = elements(containers[0]);
  const first = adaptor.childNodes(containers[0])[0];
  if (!drawing || drawing !== first || adaptor.kind(drawing) !== "svg") return null;
  if (!mml || adaptor.kind(mml) !== "mjx-assistive-mml") return null;
  const outer = adaptor.outerHTML(drawing);
  const at = html.indexOf(adaptor.outerHTML(containers[0])) + startTag(containers[0]).length;
  if (html.slice(at, at + outer.length) !== outer) return null;
  return {
    before: html.slice(0, at),
    open: startTag(drawing),
    inner: adaptor.innerHTML(drawing),
    after: html.slice(at + outer.length - "</svg>".length),
    glyphs: glyphsUsed(drawing),
  };
}

// The glyph cache in parts: what opens it up to its <defs>, each glyph's <path>, what closes it.
function glyphCacheParts(cache) {
  const [defs] = elements(cache);
  const outer = adaptor.outerHTML(cache);
  const at = outer.indexOf(adaptor.outerHTML(defs));
  return {
    open: outer.slice(0, at) + startTag(defs),
    close: outer.slice(at + startTag(defs).length + adaptor.innerHTML(defs).length),
    glyphs: elements(defs).map((path) => [adaptor.getAttribute(path, "id"), adaptor.outerHTML(path)]),
  };
}

const pages = request.pages.map(renderPage);
process.stdout.write(JSON.stringify({ version: mathjax.version, pages }));
