"""The built site as readers see it: every TOC page in headless Chromium, light and dark.

Each page is loaded once per theme from a loopback server (see ``conftest.py``) at 1280 px,
and pages with figures once more at 390 px (a phone). Every visit records every request,
console message and page error, probes the DOM, runs axe-core at 1280 px (npm ``axe-core`` in
``scripts/node``, injected into the page) and saves a screenshot of its first screen under
``test-artifacts/site/`` (of the whole page, up to 16,000 px, with
``MHA_FULL_PAGE_SCREENSHOTS=1``). The tests below then check one property each on those
records.

Only the light visit at 1280 px reads the page as a reader does: it checks what is loaded
before anything is scrolled (plotly.js only when a figure is near, every formula typeset:
they are in the page as built), scrolls the page to its end (figures and formulas are drawn
as they come near) and opens the toggles that hold formulas. That path depends on neither the
theme nor the width, and its pauses cost seconds per page, so the dark visit and the phone's
draw every figure and formula at once, as a page does before it is printed, and check what the
theme or the width changes: the theme's colours (contrast of text, formulas and figures, axe),
the figures drawn in the theme's template or the phone's layout, and the page's requests and
errors.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import threading
import time
import warnings
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

import jupytext
import loopback
import pytest
from playwright.sync_api import TimeoutError as PlaywrightTimeout

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.browser, pytest.mark.site]

THEMES = ["light", "dark"]
WIDE, NARROW = 1280, 390
AXE_JS = ROOT / "scripts" / "node" / "node_modules" / "axe-core" / "axe.min.js"
AXE_BLOCKING = {"serious", "critical"}
LOAD_TIMEOUT_MS = 60_000
SCREENSHOT_TIMEOUT_MS = 20_000  # a first screen takes a second or two; a stalled one never ends
RENDER_TIMEOUT_MS = 30_000
# Schemes that never leave the browser.
LOCAL_SCHEMES = {"data", "blob", "about"}
RAW_MATH = ["$$", "\\(", "\\)", "\\[", "\\]", "\\begin{"]
CLIENT_MATH = re.compile(r"mathjax/|mha-math\.js")  # what pages no longer load
MATH_ERRORS = "mjx-merror, [data-mjx-error], .MathJax_Error, .merror"
TYPESET = (
    "mjx-container, .MathJax, .MathJax_SVG, .MathJax_CHTML, .MathJax_Display, .MathJax_SVG_Display"
)
# SVG elements that Plotly draws for data (scatter/bar/box/pie traces, heatmap images).
TRACE_SELECTOR = ".main-svg .trace, .main-svg .hm image, .main-svg .imagelayer image"
MIN_CONTRAST = 3.0
LAID_OUT_CSS = "article section { content-visibility: visible !important; }"

# Wait until MathJax (version 2 or 3) has finished its first typesetting pass.
MATHJAX_DONE_JS = """
async () => {
  const mj = window.MathJax;
  if (!mj) return "absent";
  if (mj.startup && mj.startup.promise) { await mj.startup.promise; return "mathjax3"; }
  if (mj.Hub && mj.Hub.Queue) {
    await new Promise((done) => mj.Hub.Queue(done));
    return "mathjax2";
  }
  return "not started";
}
"""
# MathJax has started, or the page has no math, or it loads no MathJax (the site's formulas are
# typeset at build time; pages built without Node load it when the first formula comes near).
MATHJAX_LOADED_JS = """
() => !document.querySelector(".math") || (window.MathJax && (
  (window.MathJax.startup && window.MathJax.startup.promise) || (window.MathJax.Hub &&
  window.MathJax.Hub.Queue))) || !document.querySelector("script[src*='mathjax/']")
"""
# A formula off the first screen is drawn when it comes near: until then its <svg> is empty
# and marked data-mha-svg (mha-math-svg.js).
ALL_TYPESET_JS = """
() => [...document.querySelectorAll(".math")].every(
  (el) => el.querySelector("mjx-container") && !el.querySelector("svg[data-mha-svg]"))
"""
PLOTLY_DONE_JS = """
() => [...document.querySelectorAll("div.mha-plotly, .plotly-graph-div, .js-plotly-plot")].every(
  (gd) => gd.querySelector(".main-svg") && gd._fullLayout)
"""
# Scroll to the end of the page 0.8 of a viewport at a time, as a reader would. What comes
# near is seen by the page's observers (their margin is a viewport) at the next frame: each
# step waits for two frames, and for the observers' callbacks queued meanwhile to run.
SCROLL_JS = """
async () => {
  const pause = (ms) => new Promise((done) => setTimeout(done, ms));
  // a frame, or 250 ms if none comes (a page the browser does not paint gets no frames)
  const frame = () => Promise.race([new Promise((done) => requestAnimationFrame(done)),
                                    pause(250)]);
  for (let y = 0; y < document.documentElement.scrollHeight; y += window.innerHeight * 0.8) {
    window.scrollTo(0, y);
    await frame();
    await frame();
    await pause(0);
  }
  window.scrollTo(0, document.documentElement.scrollHeight);
  await pause(300);
}
"""
# Open every closed dropdown (hidden code cells, exercise solutions, and admonitions with
# `:class: dropdown`, which sphinx-togglebutton folds) that holds a formula, and bring each
# into view, as a reader opening them would: its formulas are typeset when seen.
OPEN_MATH_DROPDOWNS_JS = """
async () => {
  const pause = (ms) => new Promise((done) => setTimeout(done, ms));
  const closed = [...document.querySelectorAll("details:not([open])")].filter(
    (details) => details.querySelector(".math"));
  for (const details of closed) {
    details.open = true;
    details.scrollIntoView();
    await pause(120);
  }
  const folded = [...document.querySelectorAll(".admonition.toggle-hidden")].filter(
    (box) => box.querySelector(".math"));
  for (const box of folded) {
    box.querySelector(".toggle-button").click();
    box.scrollIntoView();
    await pause(120);
  }
  return closed.length + folded.length;
}
"""
# Bring each formula still untypeset into view, as a reader scrolling back to it would. A
# scroll step and a layout change together (a figure drawn, a section laid out) can carry a
# formula from below the near zone to above it between two frames; it is typeset when it is
# next seen, and this is that next time. Each waits on the screen until it is drawn (five
# seconds at most: on a busy machine the page's observer can take longer than a frame).
BRING_UNTYPESET_MATH_NEAR_JS = """
async () => {
  const pause = (ms) => new Promise((done) => setTimeout(done, ms));
  const drawn = (el) => el.querySelector("mjx-container") && !el.querySelector("svg[data-mha-svg]");
  const left = [...document.querySelectorAll("article .math")].filter((el) => !drawn(el));
  for (const el of left) {
    if (!drawn(el)) {
      el.scrollIntoView({block: "center"});
      for (let waited = 0; waited < 5000 && !drawn(el); waited += 60) await pause(60);
    }
  }
  return left.length;
}
"""
# The visit that reads a page as a reader does, scrolling: its figures and formulas are drawn
# as they come near. The other theme's visit and the phone's draw everything at once and check
# what a theme or a width changes (see load_page).
READER_VIEW = ("light", WIDE)
# What a page does before it is printed: every figure and every formula drawn at once
# (mha-plotly.js, mha-math-svg.js); resolves when the figures are drawn.
DRAW_ALL_JS = """
async () => {
  window.dispatchEvent(new Event("beforeprint"));
  // bounded: a figure never drawn is reported by the figure checks, not waited on for ever
  const late = new Promise((done) => setTimeout(done, 120000));
  if (window.mhaDrawAllFigures) await Promise.race([window.mhaDrawAllFigures(), late]);
}
"""
# axe-core on the whole page. Blocks that scroll get their tab stops as they come near
# (mha-tab-stops.js): only the reader's visit, which scrolls past every block, can check them
# (the rule named below); the other visits leave that rule out. The dark theme's visit runs
# only the rules whose result a theme can change (THEME_AXE_RULES): the reader's visit, in the
# light theme, has run every rule on the same page.
AXE_RUN_JS = """
async ([readerVisit, themeRules]) => (await axe.run(document, {resultTypes: ["violations"],
  ...(themeRules ? {runOnly: {type: "rule", values: themeRules}}
                 : {rules: {"scrollable-region-focusable": {enabled: readerVisit}}})})
  ).violations.map((v) => ({id: v.id, impact: v.impact, help: v.help,
                            nodes: v.nodes.slice(0, 3).map((n) => n.target.join(" "))}))
"""
# Colours, and the images a theme shows or hides (the theme's logo has a light and a dark one).
THEME_AXE_RULES = [
    "color-contrast",
    "link-in-text-block",
    "image-alt",
    "svg-img-alt",
    "role-img-alt",
]
FULL_PAGE_SCREENSHOTS = os.environ.get("MHA_FULL_PAGE_SCREENSHOTS") == "1"
SCREENSHOT_MAX_PX = 16_000  # a full-page screenshot of a very long page (an API page) is clipped
# Before scrolling: what the page has loaded and drawn.
LOADED_JS = """
() => ({
  plotly: !!window.Plotly,
  scripts: [...document.scripts].map((s) => s.src).filter((src) => /plotly/.test(src)),
  drawn: document.querySelectorAll("div.mha-plotly.js-plotly-plot").length,
  untypesetMath: [...document.querySelectorAll(".math")].filter(
    (el) => !el.querySelector("mjx-container")).length,
  undrawnOnScreen: [...document.querySelectorAll(".math svg[data-mha-svg]")].filter((svg) => {
    const box = svg.getBoundingClientRect();
    return svg.checkVisibility() && box.bottom > 0 && box.top < window.innerHeight;
  }).length,
  placeholders: [...document.querySelectorAll("div.mha-plotly")].map((div) => {
    const box = div.getBoundingClientRect();
    return {id: div.id, top: box.top + window.scrollY, height: box.height};
  }),
})
"""
# Layout of every drawn figure: boxes of the figure, its container, its plot areas, title,
# subplot titles and legend (page coordinates), and its accessible name and description.
FIGURE_BOXES_JS = """
() => [...document.querySelectorAll("div.mha-plotly")].map((gd) => {
  const rect = (el) => { const b = el.getBoundingClientRect();
    return {left: b.left, right: b.right, top: b.top, bottom: b.bottom,
            width: b.width, height: b.height}; };
  // The figure's image for assistive technology: the placeholder, or a layer of the drawing.
  const images = [gd, ...gd.querySelectorAll("[role]")].filter(
    (el) => el.getAttribute("role") === "img");
  const image = images[0];
  const described = image && document.getElementById(image.getAttribute("aria-describedby") || "");
  const controls = image ? image.querySelectorAll(
    "button, a[href], input, select, textarea, [tabindex], [role=button], [role=toolbar]") : [];
  return {
    id: gd.id,
    role: images.length === 1 ? "img" : `${images.length} elements with role img`,
    name: image ? image.getAttribute("aria-label") || "" : "",
    description: described ? described.textContent.trim() : "",
    controls: controls.length,
    title: gd._fullLayout && gd._fullLayout.title ? String(gd._fullLayout.title.text || "") : "",
    box: rect(gd),
    container: rect(gd.parentElement.closest(".cell_output, .output, article") || gd.parentElement),
    // A figure that keeps its full width scrolls sideways in its own box (mha-site.css).
    wide: (() => {
      const box = gd.closest("figure.mha-plotly-wide");
      return box && {box: rect(box), overflow: getComputedStyle(box).overflowX,
                     min_width: parseFloat(getComputedStyle(gd).minWidth) || 0};
    })(),
    scroll: [gd.scrollWidth, gd.clientWidth],
    plots: [...gd.querySelectorAll(".draglayer .nsewdrag")].map(rect),
    titles: [...gd.querySelectorAll(".g-gtitle .gtitle")].map(rect),
    notes: [...gd.querySelectorAll(".infolayer .annotation")].map(rect),
    legend: [...gd.querySelectorAll(".infolayer .legend")].map(rect),
  };
})
"""

# Collect everything the tests check, in one pass over the rendered DOM.
PROBE_JS = """
([rawMath, mathErrors, typeset, traceSelector]) => {
  const skip = new Set(["SCRIPT", "STYLE", "PRE", "CODE", "TEXTAREA", "NOSCRIPT", "TEMPLATE",
                        "MJX-ASSISTIVE-MML"]);
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  const raw = [];
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    let el = node.parentElement, skipped = false;
    for (; el; el = el.parentElement) {
      if (skip.has(el.tagName.toUpperCase()) || el.classList.contains("MathJax_Preview")) {
        skipped = true; break;
      }
    }
    if (skipped) continue;
    const text = node.textContent;
    const found = rawMath.filter((token) => text.includes(token));
    if (found.length) {
      const at = Math.min(...found.map((token) => text.indexOf(token)));
      raw.push(`${found.join(" ")} in "${text.slice(Math.max(0, at - 40), at + 60).trim()}"`);
    }
  }
  const math = [...document.querySelectorAll(".math")];
  const untypeset = math.filter((el) => !el.querySelector(typeset) ||
                                       el.querySelector("svg[data-mha-svg]"))
                        .map((el) => el.textContent.trim().slice(0, 80));
  const errors = [...new Set([...document.querySelectorAll(mathErrors)].map(
    (el) => (el.getAttribute("data-mjx-error") || el.textContent).slice(0, 80)))];

  const canvas = document.createElement("canvas").getContext("2d");
  const rgba = (color) => {
    canvas.fillStyle = "#000"; canvas.fillStyle = color;
    const c = canvas.fillStyle;
    if (c.startsWith("#")) return [1, 3, 5].map((i) => parseInt(c.slice(i, i + 2), 16)).concat(1);
    const parts = c.match(/[\\d.]+/g).map(Number);
    return parts.length === 3 ? parts.concat(1) : parts;
  };
  const over = (top, bottom) => top.slice(0, 3).map((v, i) => v * top[3] + bottom[i] * (1 - top[3]))
                                  .concat(1);
  const luminance = (c) => {
    const lin = c.slice(0, 3).map((v) => { v /= 255;
      return v <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4); });
    return 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2];
  };
  const contrast = (a, b) => { const [x, y] = [luminance(a), luminance(b)].sort((p, q) => q - p);
                               return (x + 0.05) / (y + 0.05); };
  const pageBg = over(rgba(getComputedStyle(document.body).backgroundColor), [255, 255, 255, 1]);

  const containers = new Set(document.querySelectorAll(".plotly-graph-div, .js-plotly-plot"));
  const figures = [...containers].map((gd) => {
    const box = gd.getBoundingClientRect();
    const layout = gd._fullLayout;
    let ratio = null;
    if (layout) {
      const paper = over(rgba(layout.paper_bgcolor), pageBg);
      ratio = contrast(over(rgba(layout.font.color), paper), paper);
    }
    return {
      id: gd.id || "(no id)",
      plotted: gd.classList.contains("js-plotly-plot"),
      main_svg: gd.querySelectorAll(".main-svg").length,
      traces: gd.querySelectorAll(traceSelector).length,
      data: Array.isArray(gd.data) ? gd.data.length : 0,
      width: box.width, height: box.height,
      title: layout && layout.title && layout.title.text ? String(layout.title.text) : "",
      contrast: ratio,
    };
  });
  // How the formulas of the text stand out from the page (their SVG draws in currentColor).
  const mathContrast = Math.min(...[...document.querySelectorAll("article .math svg > g")]
    .slice(0, 50).map((g) => contrast(over(rgba(getComputedStyle(g).fill), pageBg), pageBg)));
  const links = [...document.querySelectorAll("a[href]")].map((a) => a.href);
  return {raw, untypeset, errors, mathCount: math.length, mathContrast, figures, links,
          theme: document.documentElement.dataset.theme || "",
          mode: document.documentElement.dataset.mode || ""};
}
"""


@dataclass
class Visit:
    """What one load of one page in one theme showed."""

    page: str
    theme: str
    requests: list[str] = field(default_factory=list)
    foreign: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    console_errors: list[str] = field(default_factory=list)
    page_errors: list[str] = field(default_factory=list)
    mathjax: str = ""
    plotly_settled: bool = True
    probe: dict = field(default_factory=dict)
    before_scroll: dict = field(default_factory=dict)
    boxes: list = field(default_factory=list)
    axe: list = field(default_factory=list)
    page_width: tuple = (0, 0)
    screenshot: Path | None = None
    first_try: str = ""  # why the first load gave no record, when a second one was made


def html_path(page: str) -> str:
    """The site path of a TOC page: ``book/x`` -> ``book/x.html``."""
    return f"{page}.html"


def expected_figures(site: Path, page: str) -> int:
    """Count Plotly figures among the executed notebook's visible outputs for ``page``.

    Fails (so that the figure checks never pass on nothing) when the executed notebook is
    missing, when its code cells were not executed or have no outputs, or when it has fewer
    Plotly outputs than the built page has figure placeholders.
    """
    executed = site.parent / "jupyter_execute" / f"{page}.ipynb"
    if not executed.exists():
        pytest.fail(f"{page}: no executed notebook at {executed}", pytrace=False)
    cells = [c for c in json.loads(executed.read_text())["cells"] if c["cell_type"] == "code"]
    code = [c for c in cells if "".join(c["source"]).strip()]
    if code and not (all(c["execution_count"] for c in code) and any(c["outputs"] for c in code)):
        pytest.fail(f"{page}: {executed.name} has unexecuted cells or no outputs", pytrace=False)
    count = 0
    for cell in cells:
        tags = set(cell.get("metadata", {}).get("tags", []))
        if tags & {"remove-output", "remove-cell"}:
            continue
        for output in cell.get("outputs", []):
            data = output.get("data", {})
            html = data.get("text/html", "")
            html = "".join(html) if isinstance(html, list) else html
            if "application/vnd.plotly.v1+json" in data or "plotly-graph-div" in html:
                count += 1
    placeholders = (site / html_path(page)).read_text(encoding="utf8").count('class="mha-plotly"')
    if count < placeholders:
        pytest.fail(
            f"{page}: {placeholders} figure placeholders, {count} Plotly outputs in "
            f"{executed.name}",
            pytrace=False,
        )
    return count


class _Anchors(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.ids: set[str] = set()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if name == "id" or (tag == "a" and name == "name"):
                self.ids.add(value or "")


_ANCHOR_CACHE: dict[Path, set[str]] = {}


def anchors_of(path: Path) -> set[str]:
    """The ids (and ``<a name>``) of an HTML file, parsed once."""
    if path not in _ANCHOR_CACHE:
        parser = _Anchors()
        parser.feed(path.read_text(encoding="utf-8", errors="replace"))
        _ANCHOR_CACHE[path] = parser.ids
    return _ANCHOR_CACHE[path]


def wait_until_quiet(tab, in_flight: set, quiet_ms: int = 500) -> None:
    """Wait until no request has been in flight for ``quiet_ms`` (late loads by MathJax, fonts)."""
    deadline = time.monotonic() + LOAD_TIMEOUT_MS / 1000
    quiet = 0
    while quiet < quiet_ms and time.monotonic() < deadline:
        tab.wait_for_timeout(100)
        quiet = 0 if in_flight else quiet + 100


def read_like_a_reader(tab, visit: Visit, in_flight: set) -> None:
    """The reader's visit: record what is loaded before any scrolling, scroll to the end one
    screen at a time (figures and formulas are drawn as they come near), open the toggles that
    hold formulas, and wait until every figure and formula is drawn."""
    with contextlib.suppress(PlaywrightTimeout):  # the math checks report what is left
        tab.wait_for_function(MATHJAX_LOADED_JS, timeout=RENDER_TIMEOUT_MS)
    visit.mathjax = tab.evaluate(MATHJAX_DONE_JS)
    wait_until_quiet(tab, in_flight)
    visit.before_scroll = tab.evaluate(LOADED_JS)
    tab.evaluate(SCROLL_JS)
    tab.evaluate(OPEN_MATH_DROPDOWNS_JS)
    wait_until_quiet(tab, in_flight)
    try:
        tab.wait_for_function(PLOTLY_DONE_JS, timeout=RENDER_TIMEOUT_MS)
    except PlaywrightTimeout:  # the figure checks report which figure is not drawn
        visit.plotly_settled = False
    wait_until_quiet(tab, in_flight)
    tab.evaluate("() => window.MathJax && MathJax.startup && MathJax.startup.promise")
    tab.evaluate(BRING_UNTYPESET_MATH_NEAR_JS)
    with contextlib.suppress(PlaywrightTimeout):  # formulas are typeset as they come near
        tab.wait_for_function(ALL_TYPESET_JS, timeout=RENDER_TIMEOUT_MS)


def draw_everything_at_once(tab, visit: Visit, in_flight: set) -> None:
    """The other visits: the page draws every figure (in the theme's template, at the
    viewport's width) and every formula at once, as it does before it is printed, without
    scrolling. How figures and formulas come in as a reader scrolls depends on neither the
    theme nor the width: the reader's visit checks it."""
    visit.mathjax = "typeset at build"
    # Sections far from the screen are not laid out (content-visibility: auto) until they come
    # near: lay them out first, so that each figure is drawn at its container's width.
    tab.add_style_tag(content=LAID_OUT_CSS)
    tab.evaluate(DRAW_ALL_JS)
    try:
        tab.wait_for_function(PLOTLY_DONE_JS, timeout=RENDER_TIMEOUT_MS)
    except PlaywrightTimeout:  # the figure checks report which figure is not drawn
        visit.plotly_settled = False
    with contextlib.suppress(PlaywrightTimeout):  # the math checks report what is left
        tab.wait_for_function(ALL_TYPESET_JS, timeout=RENDER_TIMEOUT_MS)
    wait_until_quiet(tab, in_flight)


def load_page(
    browser, base_url: str, page: str, theme: str, artifacts: Path, width: int = WIDE
) -> Visit:
    """Load ``page`` in ``theme`` in a fresh context, wait for rendering, and record it all."""
    visit = Visit(page, theme)
    origin = urlsplit(base_url).netloc
    context = browser.new_context(
        viewport={"width": width, "height": 900}, color_scheme=theme, service_workers="block"
    )
    # The theme (pydata-sphinx-theme) reads its mode from local storage before first paint.
    context.add_init_script(
        f"try {{ localStorage.setItem('mode', '{theme}'); "
        f"localStorage.setItem('theme', '{theme}'); }} catch (e) {{}}"
    )

    def route(route) -> None:
        url = route.request.url
        parts = urlsplit(url)
        if parts.scheme in LOCAL_SCHEMES or (parts.scheme == "http" and parts.netloc == origin):
            route.continue_()
        else:
            visit.foreign.append(url)
            route.abort("blockedbyclient")

    def on_request(request) -> None:
        visit.requests.append(request.url)
        parts = urlsplit(request.url)
        is_local = parts.scheme in LOCAL_SCHEMES or parts.netloc == origin
        if not is_local and request.url not in visit.foreign:
            visit.foreign.append(request.url)

    def on_response(response) -> None:
        if response.status >= 400:
            visit.failed.append(f"HTTP {response.status} {response.url}")

    def on_request_failed(request) -> None:
        if urlsplit(request.url).netloc == origin:
            visit.failed.append(f"{request.failure} {request.url}")

    def on_console(message) -> None:
        if message.type == "error":
            where = message.location.get("url", "")
            visit.console_errors.append(f"{message.text} ({where})")

    in_flight: set = set()
    context.route("**/*", route)
    tab = context.new_page()
    tab.on("request", on_request)
    tab.on("request", lambda request: in_flight.add(request))
    tab.on("requestfinished", lambda request: in_flight.discard(request))
    tab.on("requestfailed", lambda request: in_flight.discard(request))
    tab.on("response", on_response)
    tab.on("requestfailed", on_request_failed)
    tab.on("console", on_console)
    tab.on("pageerror", lambda error: visit.page_errors.append(str(error)))
    tab.on("websocket", lambda socket: visit.foreign.append(socket.url))
    try:
        tab.goto(base_url + html_path(page), wait_until="networkidle", timeout=LOAD_TIMEOUT_MS)
        reader = (theme, width) == READER_VIEW
        if reader:
            read_like_a_reader(tab, visit, in_flight)
        else:
            draw_everything_at_once(tab, visit, in_flight)
        visit.probe = tab.evaluate(PROBE_JS, [RAW_MATH, MATH_ERRORS, TYPESET, TRACE_SELECTOR])
        tab.evaluate("window.scrollTo(0, 0)")
        visit.boxes = tab.evaluate(FIGURE_BOXES_JS)
        visit.page_width = tuple(
            tab.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")
        )
        if width == WIDE:
            # Sections far from the screen are not laid out (content-visibility: auto), and
            # axe-core reads colours and overlaps from the layout: lay everything out first.
            tab.add_style_tag(content=LAID_OUT_CSS)
            tab.add_script_tag(path=str(AXE_JS))
            theme_rules = None if theme == READER_VIEW[0] else THEME_AXE_RULES
            visit.axe = tab.evaluate(AXE_RUN_JS, [reader, theme_rules])
        shots = artifacts / "site"
        shots.mkdir(parents=True, exist_ok=True)
        visit.screenshot = shots / f"{page.replace('/', '__')}-{theme}-{width}.png"
        # Headless Chromium draws no new frame for a page it takes as in the background, and a
        # screenshot waits for one: twice a screenshot waited out its timeout after the checks.
        tab.bring_to_front()
        if FULL_PAGE_SCREENSHOTS:
            page_height = tab.evaluate("document.documentElement.scrollHeight")
            height = min(page_height, SCREENSHOT_MAX_PX)
            clip = {"x": 0, "y": 0, "width": width, "height": height}
            tab.screenshot(
                path=str(visit.screenshot), full_page=True, clip=clip, timeout=LOAD_TIMEOUT_MS
            )
        else:
            tab.screenshot(path=str(visit.screenshot), timeout=SCREENSHOT_TIMEOUT_MS)
    finally:
        context.close()
    return visit


VisitKey = tuple[str, str, int]  # page, theme, width


def planned_visits(items: list[pytest.Item], site: Path) -> list[VisitKey]:
    """The visits the selected tests of this module will ask for, in the order they run
    (read from their parameters as the tests read them; a wrong guess costs a visit, not a
    result: a visit not planned is made when asked for)."""
    planned: dict[VisitKey, None] = {}
    for item in items:
        params = getattr(item, "callspec", None)
        params = params.params if params else {}
        if item.path != Path(__file__) or "visit" not in item.fixturenames:
            continue
        if "toc_page" not in params:
            continue
        page, width = params["toc_page"], params.get("width", WIDE)
        if width != WIDE and not expected_figures(site, page):
            width = WIDE
        planned[page, params.get("theme", "light"), width] = None
    return list(planned)


class Visits:
    """Visits made two at a time: this thread and a helper thread (with its own Playwright
    and Chromium, as Playwright's objects belong to the thread that made them) each take the
    next planned visit nobody has started. A visit is mostly one renderer's work, and the
    machine has at least two cores."""

    def __init__(self, browser, launch, site_url: str, artifacts: Path, planned: list) -> None:
        self.browser, self.launch = browser, launch
        self.site_url, self.artifacts = site_url, artifacts
        self.planned = planned
        self.started: set[VisitKey] = set()
        self.done: dict[VisitKey, Visit | Exception] = {}
        self.changed = threading.Condition()
        self.stopping = False
        self.helper = threading.Thread(target=self._help, name="second visit", daemon=True)
        self.helper.start()

    def _load(self, browser, key: VisitKey) -> None:
        page, theme, width = key
        record: Visit | Exception
        try:
            record = load_page(browser, self.site_url, page, theme, self.artifacts, width)
        except PlaywrightTimeout as stalled:
            # A renderer stalled on a busy machine (in CI: a screenshot waited 60 s for a frame).
            # The page is loaded again, in a fresh context; one that stalls every time fails as
            # before, and a second try is reported (``visit``'s warning).
            try:
                record = load_page(browser, self.site_url, page, theme, self.artifacts, width)
                record.first_try = repr(stalled)
            except Exception as error:
                record = error
        except Exception as error:  # one failed load fails every test of that visit, fast
            record = error
        with self.changed:
            self.done[key] = record
            self.changed.notify_all()

    def _claim_next(self) -> VisitKey | None:
        with self.changed:
            for key in self.planned:
                if key not in self.started and not self.stopping:
                    self.started.add(key)
                    return key
        return None

    def _help(self) -> None:
        from playwright.sync_api import sync_playwright

        with sync_playwright() as driver:
            browser = self.launch(driver)
            try:
                while (key := self._claim_next()) is not None:
                    self._load(browser, key)
            finally:
                browser.close()

    def get(self, key: VisitKey) -> Visit | Exception:
        """The record of ``key``, made here or by the helper; while the helper makes it,
        this thread makes the next planned visit."""
        while True:
            with self.changed:
                if key in self.done:
                    return self.done[key]
                mine = key not in self.started
                if mine:
                    self.started.add(key)
            if mine:
                self._load(self.browser, key)
            elif (other := self._claim_next()) is not None:
                self._load(self.browser, other)
            else:
                with self.changed:
                    self.changed.wait_for(lambda: key in self.done)

    def close(self) -> None:
        with self.changed:
            self.stopping = True
        self.helper.join()


@pytest.fixture(scope="session")
def visit(browser, chromium_launcher, site_url, built_site, artifacts_dir, request):
    """``visit(page, theme)``: load a page once per theme per session and return its record.

    The visits the selected tests will ask for are made two at a time (``Visits``)."""
    planned = planned_visits(request.session.items, built_site)
    visits = Visits(browser, chromium_launcher, site_url, artifacts_dir, planned)

    def get(page: str, theme: str, width: int = WIDE) -> Visit:
        record = visits.get((page, theme, width))
        if isinstance(record, Exception):
            pytest.fail(f"loading {page} ({theme}, {width} px) failed: {record!r}", pytrace=False)
        if record.first_try:
            message = f"{page} ({theme}, {width} px) loaded twice: {record.first_try}"
            warnings.warn(message, stacklevel=2)
        return record

    yield get
    visits.close()


def fail_if(problems: list[str], header: str, limit: int = 25) -> None:
    """Fail with ``header`` and one line per problem (no Python traceback noise)."""
    if problems:
        shown = "\n  ".join(problems[:limit])
        more = f"\n  ... and {len(problems) - limit} more" if len(problems) > limit else ""
        pytest.fail(f"{header}:\n  {shown}{more}", pytrace=False)


def test_every_toc_page_is_in_the_site(built_site: Path, toc_page: str) -> None:
    assert (built_site / html_path(toc_page)).is_file(), f"{html_path(toc_page)} was not built"


@pytest.mark.parametrize("theme", THEMES)
def test_page_requests_only_the_loopback_server(visit, toc_page: str, theme: str) -> None:
    record = visit(toc_page, theme)
    assert record.requests, f"{toc_page}: no request was recorded at all"
    fail_if(
        list(dict.fromkeys(record.foreign)), f"{toc_page} ({theme}) requested other hosts (aborted)"
    )


@pytest.mark.parametrize("theme", THEMES)
def test_page_loads_every_resource(visit, toc_page: str, theme: str) -> None:
    record = visit(toc_page, theme)
    fail_if(record.failed, f"{toc_page} ({theme}) has failed requests")


@pytest.mark.parametrize("theme", THEMES)
def test_page_has_no_console_or_page_errors(visit, toc_page: str, theme: str) -> None:
    record = visit(toc_page, theme)
    problems = [f"console: {e}" for e in record.console_errors]
    problems += [f"page error: {e}" for e in record.page_errors]
    fail_if(problems, f"{toc_page} ({theme}) logged errors")


@pytest.mark.parametrize("theme", THEMES)
def test_page_renders_in_the_requested_theme(visit, toc_page: str, theme: str) -> None:
    record = visit(toc_page, theme)
    assert record.probe["theme"] == theme, (
        f"{toc_page}: asked for the {theme} theme, the page shows data-theme="
        f"{record.probe['theme']!r} (mode {record.probe['mode']!r})"
    )
    assert record.screenshot is not None and record.screenshot.stat().st_size > 0


@pytest.mark.parametrize("theme", THEMES)
def test_page_math_is_typeset(visit, toc_page: str, theme: str) -> None:
    record = visit(toc_page, theme)
    probe = record.probe
    problems = [f"raw TeX left: {item}" for item in probe["raw"]]
    problems += [f"math not typeset: {item}" for item in probe["untypeset"]]
    problems += [f"MathJax error: {item}" for item in probe["errors"]]
    if record.before_scroll.get("untypesetMath"):  # the reader's visit only
        problems.append(f"{record.before_scroll['untypesetMath']} formulas not typeset at load")
    if record.before_scroll.get("undrawnOnScreen"):
        problems.append(f"{record.before_scroll['undrawnOnScreen']} formulas on screen not drawn")
    problems += [f"requested {url}" for url in record.requests if CLIENT_MATH.search(url)]
    if probe["mathCount"] and probe["mathContrast"] < MIN_CONTRAST:
        problems.append(f"formulas have a contrast of {probe['mathContrast']:.2f} to the page")
    fail_if(
        problems,
        f"{toc_page} ({theme}; MathJax: {record.mathjax}; {probe['mathCount']} math nodes)",
    )


@pytest.mark.parametrize("theme", THEMES)
def test_page_figures_are_drawn(visit, built_site: Path, toc_page: str, theme: str) -> None:
    record = visit(toc_page, theme)
    figures = record.probe["figures"]
    expected = expected_figures(built_site, toc_page)
    problems = []
    for fig in figures:
        name = f"figure {fig['id']} {fig['title']!r}"
        if not (fig["plotted"] and fig["main_svg"] and fig["data"] and fig["traces"]):
            problems.append(
                f"{name} not drawn: plotted={fig['plotted']} main-svg={fig['main_svg']} "
                f"data={fig['data']} trace elements={fig['traces']}"
            )
        if fig["width"] < 100 or fig["height"] < 100:
            problems.append(f"{name} is {fig['width']:.0f}x{fig['height']:.0f} px")
        if fig["contrast"] is not None and fig["contrast"] < MIN_CONTRAST:
            problems.append(
                f"{name} text contrast {fig['contrast']:.2f} < {MIN_CONTRAST} on its background"
            )
    drawn = sum(1 for fig in figures if fig["plotted"] and fig["traces"])
    if drawn < expected:
        problems.append(
            f"{expected} Plotly outputs in the executed notebook, {drawn} drawn on the page "
            f"({len(figures)} figure containers; Plotly settled: {record.plotly_settled})"
        )
    fail_if(problems, f"{toc_page} ({theme}) figures")


def test_page_internal_links_resolve(visit, built_site: Path, site_url: str, toc_page: str) -> None:
    record = visit(toc_page, "light")
    origin = urlsplit(site_url).netloc
    assert record.probe["links"], f"{toc_page}: the page has no links at all"
    problems = []
    for href in sorted(set(record.probe["links"])):
        parts = urlsplit(href)
        if parts.netloc != origin or parts.scheme not in {"http", "https"}:
            continue
        path = unquote(parts.path).lstrip("/")
        target = built_site / path
        if path == "" or path.endswith("/"):
            target = target / "index.html"
        if not target.is_file():
            problems.append(f"{href}: no file {target.relative_to(built_site)}")
            continue
        fragment = unquote(parts.fragment)
        if fragment and target.suffix == ".html" and fragment not in anchors_of(target):
            problems.append(f"{href}: no id {fragment!r} in {target.relative_to(built_site)}")
    fail_if(problems, f"{toc_page} has broken internal links")


def _overlap(a: dict, b: dict, slack: float = 1.0) -> bool:
    return (
        a["left"] < b["right"] - slack
        and b["left"] < a["right"] - slack
        and a["top"] < b["bottom"] - slack
        and b["top"] < a["bottom"] - slack
    )


def _inside(inner: dict, outer: dict, slack: float = 1.0) -> bool:
    return (
        inner["left"] >= outer["left"] - slack
        and inner["right"] <= outer["right"] + slack
        and inner["top"] >= outer["top"] - slack
        and inner["bottom"] <= outer["bottom"] + slack
    )


def test_plotly_is_loaded_only_when_a_figure_is_near(
    visit, built_site: Path, toc_page: str
) -> None:
    """Before any scrolling, plotly.js is loaded only if a figure is within reach of the
    viewport, no figure far below is drawn, and every placeholder has its figure's height."""
    record = visit(toc_page, "light")
    before = record.before_scroll
    near = [p for p in before["placeholders"] if p["top"] < 900 + 300]
    problems = []
    if not before["placeholders"]:
        if before["plotly"] or before["scripts"]:
            problems.append(f"a page without figures loaded plotly: {before['scripts']}")
    elif not near and before["plotly"]:
        problems.append("plotly.js was loaded although no figure is near the viewport")
    far_drawn = before["drawn"] - len(near)
    if far_drawn > 0:
        problems.append(f"{far_drawn} figure(s) far below the viewport were drawn at load")
    heights = {box["id"]: box["box"]["height"] for box in record.boxes}
    for placeholder in before["placeholders"]:
        drawn = heights.get(placeholder["id"], 0)
        if abs(drawn - placeholder["height"]) > 2:
            problems.append(
                f"{placeholder['id']}: placeholder {placeholder['height']:.0f} px high, "
                f"figure {drawn:.0f} px (the page jumps)"
            )
    fail_if(problems, f"{toc_page}: loading figures")


def _layout_problems(record: Visit) -> list[str]:
    problems = []
    scroll_width, viewport = record.page_width
    if scroll_width > viewport + 1:
        problems.append(f"the page is {scroll_width} px wide in a {viewport} px viewport")
    for fig in record.boxes:
        name = f"{fig['id']} {fig['title'][:40]!r}"
        box, wide = fig["box"], fig["wide"]
        if wide:  # wider than its container only by the width it asks for, in a box that scrolls
            if wide["box"]["width"] > fig["container"]["width"] + 1:
                problems.append(f"{name}: its scrolling box is wider than its container")
            if wide["overflow"] not in ("auto", "scroll"):
                problems.append(f"{name}: its box does not scroll ({wide['overflow']})")
            if box["width"] > max(wide["min_width"], wide["box"]["width"]) + 1:
                problems.append(f"{name} is {box['width']:.0f} px wide, beyond its own width")
        elif box["width"] > fig["container"]["width"] + 1:
            problems.append(
                f"{name} is {box['width']:.0f} px wide in a {fig['container']['width']:.0f} px "
                "container"
            )
        if fig["scroll"][0] > fig["scroll"][1] + 1:
            problems.append(f"{name} overflows its box: {fig['scroll']}")
        if not fig["plots"]:
            problems.append(f"{name} has no plot area")
        for kind in ("titles", "notes", "legend"):
            for item in fig[kind]:
                if not _inside(item, box):
                    problems.append(f"{name}: a {kind[:-1]} is clipped by the figure's edge")
                if kind != "notes" and any(_overlap(item, plot) for plot in fig["plots"]):
                    problems.append(f"{name}: the {kind.rstrip('s')} lies over the plot")
        for a, b in ((a, b) for i, a in enumerate(fig["titles"]) for b in fig["notes"][: i + 9]):
            if _overlap(a, b):
                problems.append(f"{name}: the title overlaps a subplot title")
    return problems


@pytest.mark.parametrize("width", [WIDE, NARROW])
def test_figures_fit_the_screen(visit, built_site: Path, toc_page: str, width: int) -> None:
    """At 1280 px and at 390 px (a phone): no figure is wider than its container (one that
    keeps its full width does so in a box that scrolls sideways, no wider than the
    container), titles, subplot titles and legends are inside the figure, and titles and
    legends are not over the plot."""
    if not expected_figures(built_site, toc_page):
        record = visit(toc_page, "light")
        assert record.boxes == [], f"{toc_page}: figure containers on a page with no figure"
        return
    record = visit(toc_page, "light", width)
    assert len(record.boxes) >= expected_figures(built_site, toc_page)
    fail_if(_layout_problems(record), f"{toc_page} at {width} px: figure layout")


def test_figures_are_images_with_a_name_and_a_text_alternative(
    visit, built_site: Path, toc_page: str
) -> None:
    record = visit(toc_page, "light")
    expected = expected_figures(built_site, toc_page)
    assert len(record.boxes) >= expected, f"{toc_page}: {len(record.boxes)} of {expected} figures"
    problems = []
    for fig in record.boxes:
        if fig["role"] != "img":
            problems.append(f"{fig['id']}: {fig['role']!r}, not one image")
        if fig["controls"]:
            problems.append(f"{fig['id']}: the image contains {fig['controls']} controls")
        if not fig["name"] or fig["name"] != " ".join(fig["name"].split()):
            problems.append(f"{fig['id']}: accessible name {fig['name']!r}")
        drawn = re.sub(r"<br\s*/?>", " ", fig["title"], flags=re.I)
        drawn = " ".join(re.sub(r"<[^>]+>", "", drawn).split())
        if fig["name"] != drawn:
            problems.append(f"{fig['id']}: name {fig['name']!r} is not the title {drawn!r}")
        if len(fig["description"]) < 20 or not re.search(r"\d", fig["description"]):
            problems.append(f"{fig['id']}: text alternative {fig['description']!r}")
    fail_if(problems, f"{toc_page}: figure accessibility")


@pytest.mark.parametrize("theme", THEMES)
def test_page_has_no_serious_accessibility_violations(visit, toc_page: str, theme: str) -> None:
    record = visit(toc_page, theme)
    blocking = [v for v in record.axe if v["impact"] in AXE_BLOCKING]
    fail_if(
        [f"{v['impact']}: {v['id']} ({v['help']}) at {v['nodes']}" for v in blocking],
        f"{toc_page} ({theme}): axe-core violations",
    )


def test_search_from_a_chapter_finds_the_chapter_that_teaches_it(browser, site_url) -> None:
    """The search field of a page (which loads no search scripts) leads to results on
    search.html."""
    context = browser.new_context(viewport={"width": WIDE, "height": 900})
    try:
        tab = context.new_page()
        tab.goto(f"{site_url}book/preface.html", wait_until="load", timeout=LOAD_TIMEOUT_MS)
        tab.keyboard.press("Control+k")
        field = tab.locator("#pst-search-dialog input[name=q]")
        field.fill("multi-query")
        field.press("Enter")
        tab.wait_for_url("**/search.html?q=multi-query*", timeout=LOAD_TIMEOUT_MS)
        tab.wait_for_selector("#search-results ul.search li a", timeout=LOAD_TIMEOUT_MS)
        found = tab.eval_on_selector_all(
            "#search-results ul.search li a", "(links) => links.map((a) => a.href)"
        )
    finally:
        context.close()
    assert any(urlsplit(href).path.endswith("/book/inference.html") for href in found), found


def test_a_hidden_code_cell_shows_its_code_when_opened(browser, site_url) -> None:
    """Hidden inputs load their code from the page's JSON the first time they are opened, and
    the code can be reached by keyboard as soon as it is there."""
    context = browser.new_context(viewport={"width": WIDE, "height": 900})
    errors: list[str] = []
    try:
        tab = context.new_page()
        tab.on("pageerror", lambda error: errors.append(str(error)))
        tab.goto(f"{site_url}book/trained-heads.html", wait_until="load", timeout=LOAD_TIMEOUT_MS)
        slot = tab.locator("[data-mha-code]").first
        assert slot.inner_html() == ""  # nothing loaded before it is opened
        details = tab.locator("details.hide.above-input").first
        details.locator("summary").click()
        # The code's tab stop when it first appears: a block that scrolls sideways must be
        # reachable by keyboard at once (axe's scrollable-region-focusable).
        first_tab_index = tab.wait_for_function(
            "() => { const pre = document.querySelector('[data-mha-code] pre');"
            " return pre ? String(pre.tabIndex) : null; }",
            timeout=LOAD_TIMEOUT_MS,
        ).json_value()
        code = slot.locator("pre").inner_text()
        # Its copy button, like every other code cell's, copies this code.
        target = slot.locator("pre + button.copybtn").get_attribute("data-clipboard-target")
        copied_id = slot.locator("pre").get_attribute("id")
        buttons = tab.locator("div.highlight pre + button.copybtn").count()
    finally:
        context.close()
    assert errors == []
    assert first_tab_index == "0"
    assert code.strip() in _code_cell_sources("trained-heads"), f"not a cell's code: {code!r}"
    assert target == f"#{copied_id}" and buttons > 1


def _open(browser, url: str, width: int = NARROW):
    """A fresh tab at ``url`` (loaded), and the list its page errors and console errors go to."""
    context = browser.new_context(viewport={"width": width, "height": 800})
    tab = context.new_page()
    errors: list[str] = []
    tab.on("pageerror", lambda error: errors.append(str(error)))
    tab.on("console", lambda m: m.type == "error" and errors.append(m.text))
    tab.goto(url, wait_until="load", timeout=LOAD_TIMEOUT_MS)
    return context, tab, errors


# Each formula: whether its drawing is in place, whether it is on the screen, its box.
FORMULA_BOXES_JS = """
() => [...document.querySelectorAll(".math mjx-container > svg")].map((svg) => {
  const box = svg.getBoundingClientRect();
  return {drawn: !svg.hasAttribute("data-mha-svg") && !!svg.firstElementChild,
          inToggle: !!svg.closest("details, .admonition.toggle"),
          shown: svg.checkVisibility() && box.bottom > 0 && box.top < window.innerHeight,
          size: [Math.round(box.width * 10), Math.round(box.height * 10)]};
})
"""


def test_formulas_are_typeset_at_load_without_mathjax(browser, site_url) -> None:
    """Formulas are typeset when the site is built: as soon as a page has loaded, before any
    scrolling, every formula is MathJax's SVG with its size, those on the screen are drawn, and
    those far below are drawn when they come near, in the box they had (nothing moves); no
    page asks for MathJax or mha-math.js."""
    requested: list[str] = []
    seen = {}
    for page in ("book/one-head-to-many.html", "book/preface.html"):
        context, tab, errors = _open(browser, "about:blank")
        try:
            tab.on("request", lambda request: requested.append(request.url))
            tab.goto(f"{site_url}{page}", wait_until="load", timeout=LOAD_TIMEOUT_MS)
            tab.wait_for_timeout(300)  # the first frames
            counts = tab.evaluate(
                "() => [document.querySelectorAll('.math').length, "
                "document.querySelectorAll('.math mjx-container > svg').length, "
                "typeof window.MathJax]"
            )
            at_load = tab.evaluate(FORMULA_BOXES_JS)
            tab.evaluate(SCROLL_JS)
            tab.evaluate(OPEN_MATH_DROPDOWNS_JS)
            tab.evaluate(BRING_UNTYPESET_MATH_NEAR_JS)
            seen[page] = (counts, at_load, tab.evaluate(FORMULA_BOXES_JS))
        finally:
            context.close()
        assert errors == []
    assert [url for url in requested if CLIENT_MATH.search(url)] == []
    for page, ((formulas, svgs, mathjax), at_load, scrolled) in seen.items():
        assert formulas > 0 and svgs == formulas and mathjax == "undefined", (page, formulas)
        assert [f for f in at_load if f["shown"] and not f["drawn"]] == [], page
        assert all(f["drawn"] for f in scrolled), page
        boxes = [
            (a["size"], b["size"])
            for a, b in zip(at_load, scrolled, strict=True)
            if not a["inToggle"]
        ]
        assert [a for a, b in boxes if a != b] == [], page
    _, at_load, _ = seen["book/one-head-to-many.html"]
    assert sum(not f["drawn"] for f in at_load) > 100  # far below: not drawn before it is near


SCROLLABLE_BLOCKS = "pre, .cell_output > .output, .pst-scrollable-table-container"
# The theme's rule: a block whose content overflows it is a tab stop (0), another is not (-1).
TAB_STOPS_JS = f"""
() => [...document.querySelectorAll({SCROLLABLE_BLOCKS!r})].map((el) => {{
  const box = el.getBoundingClientRect();
  return {{below: box.top > 3 * window.innerHeight, tabindex: el.getAttribute("tabindex"),
           wanted: el.scrollWidth > el.clientWidth || el.scrollHeight > el.clientHeight ? 0 : -1}};
}})
"""


def test_scrollable_blocks_become_tab_stops_as_they_come_near(browser, site_url) -> None:
    """The theme's tab stops for code and outputs that scroll sideways are given as each block
    comes near (mha-tab-stops.js), not by measuring every block of the page at load: at load,
    blocks far below have none yet; once the reader has scrolled past them, every block has
    the theme's tab stop, and a keyboard reaches the wide ones."""
    page = "book/attention-without-the-score-matrix.html"
    context, tab, errors = _open(browser, f"{site_url}{page}", NARROW)
    try:
        tab.wait_for_timeout(300)
        mode = tab.evaluate("window.mhaTabStops")
        at_load = [b for b in tab.evaluate(TAB_STOPS_JS) if b["below"]]
        tab.evaluate(SCROLL_JS)
        tab.add_style_tag(content=LAID_OUT_CSS)
        scrolled = tab.evaluate(TAB_STOPS_JS)
    finally:
        context.close()
    assert mode == "lazy" and errors == []
    assert len(at_load) > 10 and all(b["tabindex"] is None for b in at_load)
    assert [b for b in scrolled if b["tabindex"] != str(b["wanted"])] == []
    assert sum(b["wanted"] == 0 for b in scrolled) > 5


# Formulas of the text that print as nothing: no SVG, or an SVG with no size or not shown
# (but for those in a closed toggle, hidden code and its text, which print closed).
UNPRINTED_MATH_JS = """
() => [...document.querySelectorAll("article .math")].filter((el) => {
  if (el.closest("details:not([open])")) return false;
  if (el.closest(".mha-screen-only")) return false;  // instructions for the screen
  const svg = el.querySelector("mjx-container > svg");
  if (!svg || svg.hasAttribute("data-mha-svg") || !svg.firstElementChild) return true;
  const box = svg.getBoundingClientRect(), style = getComputedStyle(svg);
  return !(box.width > 0 && box.height > 0) || style.display === "none" ||
    style.visibility !== "visible";
}).map((el) => el.textContent.trim().slice(0, 60))
"""


def test_printing_shows_every_formula(browser, site_url) -> None:
    """Printed (print media), every formula of a long chapter is drawn, also those the reader
    never scrolled to: they are in the page as built."""
    context, tab, errors = _open(browser, f"{site_url}book/one-head-to-many.html", WIDE)
    try:
        tab.emulate_media(media="print")
        tab.evaluate("window.dispatchEvent(new Event('beforeprint'))")  # toggles open to print
        count = tab.evaluate("document.querySelectorAll('article .math').length")
        unprinted = tab.evaluate(UNPRINTED_MATH_JS)
        pdf = tab.pdf()  # headless Chromium prints it
    finally:
        context.close()
    assert count > 100 and unprinted == [] and errors == []
    assert pdf.startswith(b"%PDF")


def test_site_icon_loads(browser, site_url) -> None:
    context, tab, errors = _open(browser, f"{site_url}book/api-core.html")
    try:
        linked = tab.evaluate("document.querySelector('link[rel~=icon]').href")
        statuses = [
            tab.evaluate(f"async () => (await fetch({url!r})).status")
            for url in (linked, f"{site_url}favicon.ico")
        ]
    finally:
        context.close()
    assert statuses == [200, 200] and errors == []


def _reader_features(tab) -> dict:
    """What a reader sees work on a chapter page: math typeset, figures drawn, code revealed."""
    tab.evaluate(SCROLL_JS)
    tab.evaluate(OPEN_MATH_DROPDOWNS_JS)
    tab.evaluate(BRING_UNTYPESET_MATH_NEAR_JS)
    tab.wait_for_function(ALL_TYPESET_JS, timeout=RENDER_TIMEOUT_MS)
    tab.wait_for_function(PLOTLY_DONE_JS, timeout=RENDER_TIMEOUT_MS)
    tab.locator("details.hide.above-input summary").first.click()
    tab.wait_for_function(
        "() => document.querySelector('[data-mha-code] pre')", timeout=RENDER_TIMEOUT_MS
    )
    return {
        "figures": tab.locator("div.mha-plotly .main-svg").count(),
        "copy buttons": tab.locator("button.copybtn").count(),
        "code": tab.locator("[data-mha-code] pre").first.inner_text(),
    }


@pytest.mark.parametrize("where", ["file", "subpath"])
def test_a_chapter_works_offline_from_files_and_under_a_subpath(
    browser, built_site: Path, site_url: str, tmp_path: Path, where: str
) -> None:
    """From file:// (a downloaded copy) and under /mha-book/ (a project's GitHub Pages)."""
    page = "book/one-head-to-many.html"
    if where == "file":
        context, tab, errors = _open(browser, (built_site / page).as_uri(), WIDE)
        try:
            seen = _reader_features(tab)
        finally:
            context.close()
    else:
        (tmp_path / "mha-book").symlink_to(built_site, target_is_directory=True)
        failed: list[str] = []
        with loopback.serve_under_subpath(tmp_path / "mha-book") as base:
            context, tab, errors = _open(browser, "about:blank", WIDE)
            tab.on("response", lambda r: r.status >= 400 and failed.append(f"{r.status} {r.url}"))
            tab.goto(f"{base}{page}", wait_until="load", timeout=LOAD_TIMEOUT_MS)
            try:
                seen = _reader_features(tab)
            finally:
                context.close()
        errors += failed
    assert errors == []
    assert seen["figures"] > 0 and seen["copy buttons"] > 1, seen
    assert seen["code"].strip() in _code_cell_sources("one-head-to-many"), seen["code"]


def _code_cell_sources(chapter: str) -> set[str]:
    """The sources of the code cells of ``book/<chapter>.md``, stripped."""
    notebook = jupytext.read(ROOT / "book" / f"{chapter}.md")
    return {cell.source.strip() for cell in notebook.cells if cell.cell_type == "code"}


# Every icon of the page drawn (inline SVG with a box), and no Font Awesome font declared,
# computed for an element or a pseudo-element that is drawn, or fetched.
ICONS_JS = """
(names) => {
  const shown = (el) => el.checkVisibility({visibilityProperty: true, opacityProperty: false});
  const icons = [...document.querySelectorAll(".mha-icon")].filter(shown);
  const empty = icons.filter((el) => {
    const svg = el.querySelector(":scope > svg"), box = svg && svg.getBoundingClientRect();
    return !box || !(box.width > 0 && box.height > 0);
  }).map((el) => el.outerHTML.slice(0, 120));
  const fonts = [], badMasks = [];
  // The shapes the theme's pseudo-element icons are masked with (custom properties that
  // mha-site.css uses): each must be an image on the page.
  const probe = document.body.appendChild(document.createElement("span"));
  for (const name of names) {
    probe.style.webkitMaskImage = `var(${name})`;
    const image = getComputedStyle(probe).webkitMaskImage;
    if (!image.startsWith('url("data:image/svg+xml')) badMasks.push(`${name}: ${image}`);
  }
  probe.remove();
  for (const el of document.querySelectorAll("body *")) {
    for (const pseudo of [null, "::before", "::after"]) {
      const style = getComputedStyle(el, pseudo);
      const drawn = pseudo === null || !["none", "normal"].includes(style.content);
      if (drawn && /awesome/i.test(style.fontFamily)) {
        fonts.push(`${el.tagName.toLowerCase()}.${el.className}${pseudo || ""}`);
      }

    }
  }
  const declared = [...document.fonts].map((f) => f.family).filter((f) => /awesome/i.test(f));
  const themeIcons = [...document.querySelectorAll(".theme-switch-button .theme-switch")];
  return {shown: icons.length, empty, fonts: fonts.slice(0, 10), declared,
          badMasks: badMasks.slice(0, 5),
          themeShown: themeIcons.filter(shown).map((el) => el.dataset.mode),
          mode: document.documentElement.dataset.mode || ""};
}
"""
# The icon shapes that mha-site.css masks the theme's pseudo-element icons with.
SITE_CSS = (ROOT / "book" / "_static" / "mha-site.css").read_text(encoding="utf8")
MASKS = sorted(set(re.findall(r"var\((--mha-icon-[a-z-]+)\)", SITE_CSS)))
FONT_AWESOME_FILE = re.compile(r"(/webfonts/|fontawesome|fa-[a-z]+-\d+\.(woff2?|ttf))", re.I)
ICON_PAGES = ["book/preface", "book/one-head-to-many", "book/api-core", "search"]


@pytest.mark.parametrize("theme", THEMES)
def test_icons_are_inline_svg_and_no_font_awesome_font_is_loaded(
    browser, site_url: str, theme: str
) -> None:
    """The theme's icons (header, sidebars, buttons) are drawn from inline SVG on a few pages,
    in both themes: no page asks for Font Awesome's fonts, no element uses them, and the
    theme switch shows one icon at a time, the one of the mode that a click moves on from."""
    problems: list[str] = []
    for page in ICON_PAGES:
        context = browser.new_context(viewport={"width": WIDE, "height": 900})
        context.add_init_script(
            f"try {{ localStorage.setItem('mode', '{theme}'); }} catch (e) {{}}"
        )
        requested: list[str] = []
        try:
            tab = context.new_page()
            tab.on("request", lambda request, urls=requested: urls.append(request.url))
            tab.goto(f"{site_url}{html_path(page)}", wait_until="load", timeout=LOAD_TIMEOUT_MS)
            seen = tab.evaluate(ICONS_JS, MASKS)
            tab.locator(".theme-switch-button").first.click()
            after_click = tab.evaluate(ICONS_JS, MASKS)
        finally:
            context.close()
        where = f"{page} ({theme})"
        problems += [
            f"{where} requested {url}" for url in requested if FONT_AWESOME_FILE.search(url)
        ]
        problems += [f"{where}: icon with no box: {html}" for html in seen["empty"]]
        problems += [f"{where}: Font Awesome font on {name}" for name in seen["fonts"]]
        problems += [f"{where}: Font Awesome declared: {name}" for name in seen["declared"]]
        problems += [f"{where}: icon mask is no image: {mask}" for mask in seen["badMasks"]]
        if seen["shown"] < 5:
            problems.append(f"{where}: only {seen['shown']} icons shown")
        if seen["themeShown"] != [theme] or after_click["themeShown"] == [theme]:
            problems.append(f"{where}: theme icons {seen['themeShown']}, then {after_click}")
        if len(after_click["themeShown"]) != 1 or after_click["empty"]:
            problems.append(f"{where}: after a click on the theme switch: {after_click}")
    if len(MASKS) < 5:
        problems.append(f"only {MASKS} icon shapes for the theme's pseudo-elements")
    fail_if(problems, "icons")
