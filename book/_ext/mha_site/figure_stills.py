"""Stills of the opening figures: each page's first Plotly figure as SVGs, drawn at build time.

A page that opens with a figure would otherwise fetch and run plotly.js (about 1 MB) while it
loads, the longest task of the page on a phone. When the build finds a Chromium (and
Playwright to drive it), the page's first figure gets ``data-still`` and four images, light
and dark, wide and narrow, which the stylesheet chooses between; ``mha-plotly.js`` fetches
plotly.js and draws the live figure in their place once the reader touches the page, scrolls,
or comes near another figure. After the pages are written, this module opens each page in
Chromium from ``file://`` and saves what ``window.mhaFigureStill`` returns: plotly.js's own
SVG export of the figure it drew, so a still is the live figure's first state. Without a
Chromium (or with ``MHA_FIGURE_STILLS=off``) the pages have no stills and draw their figures
as before.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

from sphinx.application import Sphinx
from sphinx.util import logging

from .files import write_if_changed

logger = logging.getLogger(__name__)

FIGURES_DIR = "_figures"  # as plotly_figures writes them
THEMES = ("light", "dark")
# The width class of a still -> the viewport it is drawn in (a phone's, a desktop's); the
# figure takes its narrow layout in the first and its wide one in the second.
VIEWPORTS = {"narrow": (390, 844), "wide": (1280, 900)}
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking"]
# The placeholders that want a still, as figure_html writes them.
STILL_PLACEHOLDER = re.compile(r'<div class="mha-plotly" id="([^"]+)"[^>]*\sdata-still="')
# The page's code that draws a still: a change to either redraws every still.
DRAWING_FILES = ("_static/mha-plotly.js", "_static/mha-plotly-templates.js")
TIMEOUT_MS = 120_000


def still_name(fig_id: str, theme: str, width: str) -> str:
    """The file name of one still of figure ``fig_id``, under ``_figures/``."""
    return f"{fig_id}.{theme}.{width}.svg"


def still_images(fig_id: str, figures_uri: str) -> str:
    """The ``<img>`` elements of a figure's four stills (``figures_uri``: ``_figures/`` as
    seen from the page). They are decorative: the placeholder is the image, with its name."""
    return "".join(
        f'<img class="mha-still mha-still-{theme} mha-still-{width}" '
        f'src="{figures_uri}{still_name(fig_id, theme, width)}" alt="" loading="lazy" '
        f'decoding="async">'
        for theme in THEMES
        for width in VIEWPORTS
    )


def find_chromium() -> str | None:
    """A Chromium to draw stills with (``$CHROME_PATH`` first), or ``None``; ``None`` also
    when Playwright, which drives it, is not installed, or when ``MHA_FIGURE_STILLS=off``."""
    if os.environ.get("MHA_FIGURE_STILLS") == "off":
        return None
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return None
    candidates = [os.environ.get("CHROME_PATH", ""), "/usr/bin/chromium"]
    candidates += [shutil.which(name) or "" for name in ("chromium", "google-chrome")]
    for candidate in candidates:
        if candidate and os.access(candidate, os.X_OK) and Path(candidate).is_file():
            return candidate
    return None


def enabled(app: Sphinx) -> bool:
    """Whether this build gives pages stills (the site's HTML build, with a Chromium)."""
    return bool(getattr(app, "_mha_still_chromium", None))


def choose_chromium(app: Sphinx) -> None:
    """At the start of an HTML build, find the Chromium that draws the stills, or say why
    the figures are drawn live."""
    app._mha_still_chromium = None  # type: ignore[attr-defined]
    if app.builder.name != "html":  # the site's pages only: the PDF's draw every figure live
        return
    found = find_chromium()
    if found is None:
        logger.info("no Chromium found (set CHROME_PATH): opening figures have no still")
    app._mha_still_chromium = found  # type: ignore[attr-defined]


def wanted_stills(outdir: Path) -> dict[Path, list[str]]:
    """Each written page and the ids of its figures that want a still."""
    pages: dict[Path, list[str]] = {}
    for page in sorted(outdir.rglob("*.html")):
        ids = STILL_PLACEHOLDER.findall(page.read_text(encoding="utf8"))
        if ids:
            pages[page] = ids
    return pages


def is_current(outdir: Path, fig_id: str) -> bool:
    """Whether all of a figure's stills exist and are newer than its data and the code."""
    sources = [outdir / FIGURES_DIR / f"{fig_id}.js", *(outdir / f for f in DRAWING_FILES)]
    newest = max(path.stat().st_mtime for path in sources if path.exists())
    stills = [
        outdir / FIGURES_DIR / still_name(fig_id, theme, width)
        for theme in THEMES
        for width in VIEWPORTS
    ]
    return all(path.exists() and path.stat().st_mtime >= newest for path in stills)


def draw_stills(chromium: str, outdir: Path, pages: dict[Path, list[str]]) -> int:
    """Open each page in ``chromium`` at each viewport and write its figures' stills;
    the number of stills written."""
    from playwright.sync_api import sync_playwright

    written = 0
    with sync_playwright() as driver:
        browser = driver.chromium.launch(
            executable_path=chromium, headless=True, args=CHROMIUM_ARGS
        )
        try:
            for width, (vw, vh) in VIEWPORTS.items():
                context = browser.new_context(viewport={"width": vw, "height": vh})
                tab = context.new_page()
                tab.set_default_timeout(TIMEOUT_MS)
                for page, ids in pages.items():
                    tab.goto(page.resolve().as_uri(), wait_until="load")
                    tab.wait_for_function("() => !!window.mhaFigureStill")
                    for fig_id in ids:
                        for theme in THEMES:
                            svg = tab.evaluate(
                                "([id, theme]) => window.mhaFigureStill(id, theme)",
                                [fig_id, theme],
                            )
                            if not isinstance(svg, str) or not svg.startswith("<svg"):
                                raise RuntimeError(f"no SVG for {fig_id} ({theme}, {width})")
                            target = outdir / FIGURES_DIR / still_name(fig_id, theme, width)
                            write_if_changed(target, svg)
                            target.touch()
                            written += 1
                context.close()
        finally:
            browser.close()
    return written


def write_stills(app: Sphinx, exception: Exception | None) -> None:
    """After an HTML build: draw the stills that are missing or older than their figure."""
    if exception is not None or not enabled(app):
        return
    outdir = Path(app.outdir)
    stale = {
        page: [fig_id for fig_id in ids if not is_current(outdir, fig_id)]
        for page, ids in wanted_stills(outdir).items()
    }
    stale = {page: ids for page, ids in stale.items() if ids}
    if not stale:
        return
    chromium = app._mha_still_chromium  # type: ignore[attr-defined]
    written = draw_stills(chromium, outdir, stale)
    logger.info(f"figure stills: {written} drawn for {len(stale)} pages")


def setup(app: Sphinx) -> None:
    app.connect("builder-inited", choose_chromium)
    # after every handler that rewrites the pages (the stylesheets are joined at 900)
    app.connect("build-finished", write_stills, priority=950)
