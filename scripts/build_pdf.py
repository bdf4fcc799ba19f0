"""Build the whole book as one PDF, offline: ``_build/pdf/mha-book.pdf``.

1. Sphinx's ``singlehtml`` builder writes every chapter into one page, in
   ``_build/pdf/singlehtml`` (its own output and doctree folders, so ``_build/html`` is never
   touched), reusing the site build's execution cache (``_build/.jupyter_cache``): nothing is
   executed again when the chapters are unchanged. MathJax typesets every formula at once
   there (no lazy typesetting).
2. The system Chromium (``/usr/bin/chromium``, or ``$CHROME_PATH``), driven by Playwright,
   opens that page (the root document, ``book/preface.html``, copied to the top folder) from
   a loopback server, laid out for print at the printable width of an A4 page, draws every
   Plotly figure to fit its printed column (as SVG: vector in the PDF; the build fails if
   one is wider), waits for MathJax, adds a printed table of contents, and prints it with a
   PDF outline (bookmarks) and page numbers. Hidden code cells are not printed.
3. The PDF is copied to ``_build/html/mha-book.pdf``, where every page of the site links to
   it (download menu), if the site has been built.

Usage: ``python scripts/build_pdf.py`` (``make pdf``). Exits non-zero on failure.
"""

from __future__ import annotations

import functools
import http.server
import os
import shutil
import sys
import threading
import time
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
BUILD = ROOT / "_build"
OUT = BUILD / "pdf"
SINGLE = OUT / "singlehtml"
ROOT_PAGE = "book/preface.html"  # the root document of _toc.yml: the whole book
PRINTED_PAGE = "mha-book.html"  # the same at the top (its links are relative to the top)
PDF = OUT / "mha-book.pdf"
SITE_COPY = BUILD / "html" / "mha-book.pdf"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking"]
# Generous bounds for a loaded machine (the PDF was once printed with no figure drawn: it
# waited for the network to go quiet, not for the page to finish loading). A bound is a
# failure when it is reached, never a reason to print what is there.
TIMEOUT_MS = 600_000  # to load the single page (parsed, its deferred scripts run)
DRAW_BOUND_MS = 600_000  # to draw every figure once asked to
PAPER = "A4"
PAPER_WIDTH_MM = 210
PAPER_HEIGHT_MM = 297
MARGIN_MM = {"top": 16, "bottom": 16, "left": 14, "right": 14}
# The printable width in CSS pixels (96 per inch): the page is laid out, and its figures are
# drawn, at this width, so that what is printed is what was drawn.
PRINT_WIDTH_PX = int((PAPER_WIDTH_MM - MARGIN_MM["left"] - MARGIN_MM["right"]) / 25.4 * 96)
# The printable height: what one page holds.
PRINT_HEIGHT_PX = (PAPER_HEIGHT_MM - MARGIN_MM["top"] - MARGIN_MM["bottom"]) / 25.4 * 96
FIGURE_WIDTH_PX = 760

# A printed table of contents: one entry per chapter (the first heading of each document
# in the single page), inserted before the first chapter. A document listed as a section of
# another in _toc.yml (a page of the API reference) has a deeper heading; it is listed under
# its parent. Every document starts on a new page.
TOC_JS = r"""
() => {
  const main = document.querySelector("main article, article, main");
  const headings = [...main.querySelectorAll("h1, h2, h3, h4, h5, h6")];
  const after = (mark) => headings.find(
    (h) => mark.compareDocumentPosition(h) & Node.DOCUMENT_POSITION_FOLLOWING);
  // Sphinx marks where each document starts in the single page; the root one is the first h1.
  const marks = [...main.querySelectorAll('span[id^="document-"]')];
  const chapters = [main.querySelector("h1"), ...marks.map(after)].filter(Boolean);
  const level = (title) => Number(title.tagName.slice(1));
  const top = chapters.length > 1 ? level(chapters[1]) : 1;  // a chapter's heading level
  const nav = document.createElement("nav");
  nav.className = "mha-print-toc";
  nav.setAttribute("aria-label", "Contents");
  const heading = document.createElement("h1");
  heading.textContent = "Contents";
  const list = document.createElement("ol");
  let sections = null;  // the list of the current chapter's sections
  chapters.forEach((title, index) => {
    const section = title.closest("section") || title;
    if (!section.id) section.id = `mha-chapter-${index}`;
    const item = document.createElement("li");
    const link = document.createElement("a");
    link.href = `#${section.id}`;
    link.textContent = title.textContent.replace(/[#\u00b6]\s*$/, "").trim();
    item.appendChild(link);
    if (index > 0 && level(title) > top && list.lastElementChild) {
      if (!sections) {
        sections = document.createElement("ol");
        list.lastElementChild.appendChild(sections);
      }
      sections.appendChild(item);
    } else {
      sections = null;
      list.appendChild(item);
    }
    if (index > 0) section.style.breakBefore = "page";
  });
  nav.append(heading, list);
  nav.style.breakAfter = "page";
  main.prepend(nav);
  return chapters.length;
}
"""
# Every document starts on a new page (TOC_JS breaks the page before its section). Before
# the section, and so before the break, sits what prints nothing: Sphinx's mark where the
# document starts (an empty span), and at the end of the document before, a box of no height
# (a cell whose code is not printed and that has no output). Where the text above filled a
# page, Chromium could not fit such a box at its foot, put it on a page of its own and broke
# the page after it: a page blank but for its number (between the rank chapter and the next).
# The break goes before the first of these boxes instead, and those at the very end of the
# book are not printed. A box counts only in a block's flow, where a page can break before
# it; the search stops at the first box that prints something. Returns how many breaks moved.
BREAKS_JS = r"""
() => {
  const main = document.querySelector("main article, article, main");
  const GRAPHICS = "img, svg, canvas, video, iframe, object, embed, hr, mjx-container";
  const FLOWS = ["block", "flow-root", "list-item"];
  const isMark = (box) => box.matches('span[id^="document-"]');
  const inFlow = (box) => FLOWS.includes(getComputedStyle(box.parentElement).display);
  const printsNothing = (box) => box instanceof HTMLElement && inFlow(box) &&
    !box.innerText.trim() && !box.matches(GRAPHICS) && !box.querySelector(GRAPHICS) &&
    (isMark(box) || (FLOWS.includes(getComputedStyle(box).display) &&
                     box.getBoundingClientRect().height < 1));
  // The boxes that print nothing right before `node`, in document order: walking back past
  // the ancestors of `node` and what has no box (not printed), to the first that prints.
  const emptyBefore = (node) => {
    const walker = document.createTreeWalker(main, NodeFilter.SHOW_ELEMENT);
    walker.currentNode = node;
    const run = [];
    for (let box = walker.previousNode(); box; box = walker.previousNode()) {
      if (box.contains(node) || !box.getClientRects().length) continue;
      if (!printsNothing(box)) break;
      run.unshift(box);
    }
    return run;
  };
  const end = main.appendChild(document.createElement("div"));
  const last = emptyBefore(end);
  end.remove();
  const breaks = [...main.querySelectorAll('[style*="break-before"]')].filter(
    (box) => box.style.breakBefore === "page");
  const firsts = breaks.map((box) => emptyBefore(box)[0]);  // all found before any change
  for (const box of last) box.style.display = "none";
  let moved = 0;
  breaks.forEach((box, index) => {
    const first = firsts[index];
    if (!first) return;
    if (isMark(first)) first.style.display = "block";  // an inline box takes no page break
    first.style.breakBefore = "page";
    box.style.breakBefore = "";
    moved += 1;
  });
  return moved;
}
"""
# The explorables are printed as they first appear (a still); their controls are not
# printed (mha-site.css). After each, a sentence says that the site has it interactive and
# links to it there: the page is the document the single page holds it in (Sphinx marks where
# each starts), the place its id. A root marked data-mha-still="none" has nothing to show
# before the reader acts: it is not printed, and the sentence says what runs on the site
# (its data-mha-still-text). Returns how many sentences were added.
EXPLORABLES = ".mha-explore, .mha-live-minilm, [data-mha-explorable]"
STILLS_JS = r"""
([site, selector]) => {
  const marks = [...document.querySelectorAll('span[id^="document-"]')];
  const pageOf = (root) => {
    const before = marks.filter(
      (mark) => mark.compareDocumentPosition(root) & Node.DOCUMENT_POSITION_FOLLOWING);
    return before.length ? before[before.length - 1].id.slice("document-".length) : "";
  };
  const roots = [...document.querySelectorAll(selector)].filter(
    (root) => !root.parentElement.closest(selector));
  for (const root of roots) {
    const page = pageOf(root);
    const address = `${site}${page ? `${page}.html` : ""}${root.id ? `#${root.id}` : ""}`;
    const link = document.createElement("a");
    link.href = address;
    link.textContent = address;
    const note = document.createElement("p");
    note.className = "mha-still-note";
    if (root.dataset.mhaStill === "none") {
      const what = root.dataset.mhaStillText || "an interactive figure";
      note.append(`On the book's site, ${what} runs here: `, link, ".");
    } else {
      note.append("On the book's site this figure is interactive: ", link,
                  ". Here it is printed as it first appears.");
    }
    root.after(note);
  }
  return roots.length;
}
"""
# mha-site.css keeps a code cell and a figure whole on one page, and the theme a code block,
# an admonition and a table: one that does not fit at the foot of a page moves to the next.
# One about as tall as a page or taller cannot be kept whole. Asked to, Chromium moved the
# decoder-heads chapter's 1.3-page cell of sixteen texts past the page after the text before
# it, and printed that page blank but for its number; a code block kept whole inside a cell
# let break left an empty box at the foot of the page. Every such block may break like text.
# Returns how many blocks were let break.
TALL_JS = """
(page) => {
  const tall = [...document.body.querySelectorAll("*")].filter(
    (block) => block.getBoundingClientRect().height > 0.9 * page &&
               getComputedStyle(block).breakInside.startsWith("avoid"));
  for (const block of tall) block.style.breakInside = "auto";
  return tall.length;
}
"""
# Figures are drawn as on a desktop screen, FIGURE_WIDTH_PX wide (their layout for a wide
# column, which the browser tests check), then scaled to the printed column.
FIT_JS = """
(width) => {
  for (const figure of document.querySelectorAll("figure.mha-plotly-figure")) {
    const column = figure.parentElement.clientWidth;
    if (column >= width) continue;
    figure.style.width = `${width}px`;
    figure.style.maxWidth = "none";
    figure.style.zoom = String(column / width);
  }
}
"""
# Every figure drawn, every explorable drawn, every formula typeset. The figures are drawn by
# mha-plotly.js (its window.mhaDrawAllFigures), the explorables by mha-explore-kit.js (its
# window.mhaExploreKit.draw(), which loads a figure's data first where the site keeps it in a
# file of its own); each would otherwise wait until it comes near the screen. On a loaded
# machine that can take minutes, so the wait is bounded only by `bound_ms`: a figure or an
# explorable still undrawn by then, one that failed, or a page whose figure loader or
# explorables' kit never started is reported (the build then fails), never waited on for ever
# nor passed over.
READY_JS = """
async (bound_ms) => {
  const figures = [...document.querySelectorAll("div.mha-plotly")];
  const explorables = [...document.querySelectorAll(".mha-explore[data-explore]")];
  const isDrawn = (gd) => !!gd.querySelector(".main-svg");
  const isReady = (root) => root.hasAttribute("data-ready");
  let problem = "";
  const waits = [];
  if (figures.length && !window.mhaDrawAllFigures) {
    problem = "the figure loader (mha-plotly.js) did not start";
  } else if (figures.length) {
    waits.push(window.mhaDrawAllFigures().then(() => "", (error) => `a figure failed: ${error}`));
  }
  if (explorables.length && !(window.mhaExploreKit && window.mhaExploreKit.draw)) {
    problem = problem || "the explorables' kit (mha-explore-kit.js) did not start";
  } else if (explorables.length) {
    waits.push(new Promise((resolve) => resolve(window.mhaExploreKit.draw())).then(
      () => "", (error) => `an explorable failed: ${error}`));
  }
  if (waits.length) {
    let timer;
    const late = new Promise((resolve) => {
      timer = setTimeout(resolve, bound_ms, `not drawn within ${bound_ms / 1000} s`);
    });
    const all = Promise.all(waits).then((found) => found.filter(Boolean).join("; "));
    const found = await Promise.race([all, late]);
    clearTimeout(timer);
    problem = problem || found;
  }
  if (window.MathJax && MathJax.startup) {
    await MathJax.startup.promise;
    if (MathJax.typesetPromise) await MathJax.typesetPromise();
  }
  const page = document.documentElement.clientWidth;
  // A figure that is wider than its column, or than the page, would be cut on paper.
  const wide = figures.filter((gd) => {
    const column = gd.parentElement.getBoundingClientRect();
    return [...gd.querySelectorAll(".main-svg")].some((svg) => {
      const box = svg.getBoundingClientRect();
      return box.right > Math.min(column.right, page) + 1 || box.left < column.left - 1;
    });
  }).map((gd) => gd.id);
  return {
    figures: figures.length,
    drawn: figures.filter(isDrawn).length,
    undrawn: figures.filter((gd) => !isDrawn(gd)).map((gd) => gd.id),
    explorables: explorables.length,
    explorables_drawn: explorables.filter(isReady).length,
    explorables_undrawn: explorables.filter((root) => !isReady(root)).map((root) => root.id),
    problem,
    wide,
    math: document.querySelectorAll(".math").length,
    typeset: document.querySelectorAll(".math mjx-container, mjx-container").length,
  };
}
"""


def chromium() -> str:
    """The system Chromium (or Chrome): ``$CHROME_PATH``, else the first one on this machine."""
    candidates = [os.environ.get("CHROME_PATH", ""), "/usr/bin/chromium"]
    candidates += [shutil.which(name) or "" for name in ("chromium", "google-chrome")]
    for path in candidates:
        if path and os.access(path, os.X_OK):
            return path
    raise SystemExit("No Chromium found (set CHROME_PATH, or `sudo apt-get install -y chromium`)")


def build_single_page() -> None:
    """Sphinx ``singlehtml`` build of the book into ``_build/pdf/singlehtml``."""
    from jupyter_book.sphinx import build_sphinx

    os.environ["PLOTLY_RENDERER"] = "plotly_mimetype"
    overrides = {
        "external_toc_path": (ROOT / "_toc.yml").as_posix(),
        "latex_individualpages": False,
        "nb_execution_cache_path": str(BUILD / ".jupyter_cache"),
        "mathjax3_config": {},  # typeset everything at once (no lazy typesetting)
    }
    result = build_sphinx(
        ROOT,
        SINGLE,
        noconfig=True,
        path_config=str(ROOT / "_config.yml"),
        confoverrides=overrides,
        builder="singlehtml",
        doctreedir=OUT / ".doctrees",
        warningiserror=True,
        keep_going=True,
        quiet=True,
    )
    if result:
        raise SystemExit(f"the single-page build failed (exit code {result})")


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


def site_url() -> str:
    """The book's site address, as the site's Open Graph tags give it (``repository.url``)."""
    sys.path.insert(0, str(ROOT / "book" / "_ext"))
    from mha_site.site_identity import pages_url

    config = yaml.safe_load((ROOT / "_config.yml").read_text(encoding="utf8"))
    return pages_url(config["repository"]["url"])


def prepare(page: Any, url: str, site: str, bound_ms: int = DRAW_BOUND_MS) -> dict:
    """Open the single page at ``url`` in ``page`` (Playwright) and make it ready to print.

    The page is loaded first: parsed, its deferred scripts run (the figure loader among them),
    its ``load`` event fired. (Waiting for the network to go quiet returned while a loaded
    machine was still parsing the page: no figure was drawn. It is not waited for after the
    load either: on the book's page Playwright's "networkidle" never came, with nothing in
    flight; what the print needs is loaded by ``READY_JS``, which waits for it.) Then the
    explorables get their sentences (``STILLS_JS``), the figures their printed width, every
    figure is drawn and every formula typeset (``READY_JS``, bounded by ``bound_ms``), the
    printed contents are added, each chapter's page break is placed above what prints
    nothing before it (``BREAKS_JS``), and a block too tall to be kept on one page may break
    (``TALL_JS``).

    Returns:
        ``READY_JS``'s report, with ``chapters`` (the contents' entries), ``breaks`` (the
        chapter breaks moved up) and ``tall`` (the blocks let break) added; ``problems`` of it
        lists what would spoil the PDF.
    """
    page.goto(url, wait_until="load")
    page.evaluate(STILLS_JS, [site, EXPLORABLES])
    page.evaluate(FIT_JS, FIGURE_WIDTH_PX)
    ready = page.evaluate(READY_JS, bound_ms)
    ready["chapters"] = page.evaluate(TOC_JS)
    ready["breaks"] = page.evaluate(BREAKS_JS)
    ready["tall"] = page.evaluate(TALL_JS, PRINT_HEIGHT_PX)
    return ready


def problems(ready: dict) -> list[str]:
    """What in ``prepare``'s report would spoil the PDF: undrawn figures or explorables,
    figures too wide."""
    found = []
    why = f" ({ready['problem']})" if ready["problem"] else ""
    for kind, drawn, count, undrawn in (
        ("figures", "drawn", "figures", "undrawn"),
        ("explorables", "explorables_drawn", "explorables", "explorables_undrawn"),
    ):
        if ready[drawn] != ready[count]:
            found.append(
                f"only {ready[drawn]} of {ready[count]} {kind} were drawn{why}; "
                f"not drawn: {', '.join(ready[undrawn])}"
            )
    if ready["problem"] and not found:
        found.append(ready["problem"])
    if ready["wide"]:
        found.append(f"figures wider than the printed column: {ready['wide']}")
    return found


def print_pdf() -> dict:
    """Print ``_build/pdf/singlehtml/book/preface.html`` to ``_build/pdf/mha-book.pdf``."""
    from playwright.sync_api import sync_playwright

    # Sphinx writes the single page as book/preface.html with links relative to the top
    # folder; a copy at the top resolves them.
    shutil.copy2(SINGLE / ROOT_PAGE, SINGLE / PRINTED_PAGE)
    handler = functools.partial(_QuietHandler, directory=str(SINGLE))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/{PRINTED_PAGE}"
    try:
        with sync_playwright() as driver:
            browser = driver.chromium.launch(
                executable_path=chromium(), headless=True, args=CHROMIUM_ARGS
            )
            # Laid out for print from the start, at the printable width: figures are drawn
            # to fit the printed column.
            context = browser.new_context(viewport={"width": PRINT_WIDTH_PX, "height": 1000})
            context.add_init_script("localStorage.setItem('mode', 'light')")
            page = context.new_page()
            page.emulate_media(media="print")
            page.set_default_timeout(TIMEOUT_MS)
            ready = prepare(page, url, site_url(), bound_ms=DRAW_BOUND_MS)
            page.pdf(
                path=str(PDF),
                format=PAPER,
                print_background=True,
                outline=True,
                tagged=True,
                margin={side: f"{mm}mm" for side, mm in MARGIN_MM.items()},
                display_header_footer=True,
                header_template="<span></span>",
                footer_template=(
                    '<div style="font-size:8px;width:100%;text-align:center">'
                    '<span class="pageNumber"></span> / <span class="totalPages"></span></div>'
                ),
            )
            browser.close()
    finally:
        server.shutdown()
        server.server_close()
    return ready


def main() -> int:
    start = time.time()
    OUT.mkdir(parents=True, exist_ok=True)
    build_single_page()
    ready = print_pdf()
    found = problems(ready)
    for problem in found:
        print(problem, file=sys.stderr)
    if found:
        return 1
    if SITE_COPY.parent.is_dir():
        shutil.copy2(PDF, SITE_COPY)
    size = PDF.stat().st_size / 1e6
    print(
        f"{PDF.relative_to(ROOT)}: {size:.1f} MB, {ready['chapters']} chapters, "
        f"{ready['figures']} figures, {ready['math']} formulas, {ready['tall']} blocks taller "
        f"than a page let break, in {time.time() - start:.0f} s"
        + (f"; copied to {SITE_COPY.relative_to(ROOT)}" if SITE_COPY.exists() else "")
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
