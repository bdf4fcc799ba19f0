"""The PDF is printed once every figure is drawn, however slow the machine; a figure that never
draws fails the build.

``scripts/build_pdf.py`` (``prepare``) opens the single page and asks ``mha-plotly.js`` to draw
every figure. On a loaded machine the page was still being parsed when the network went quiet,
the figure loader had not started, and the PDF was refused with "only 0 of 47 figures were
drawn". The page here has a script that holds up the parser for a while, then one figure far
below the screen (the loader would not draw it by itself), then enough text to keep the parser
busy after the network has gone quiet, as the book's 27 MB page does on a loaded machine.
Plotly is a small stand-in that draws an SVG.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import build_pdf
import loopback
import pytest

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parents[2]
SITE = "https://example.github.io/book/"
# After the figure, text the parser takes a while over, in parts: the page has arrived (the
# network is quiet) long before it is parsed.
BUSY_PART = "<script>const until{n} = Date.now() + 300; while (Date.now() < until{n}) {{}}</script>"
FILLER = "".join(BUSY_PART.format(n=n) + "<p>Text after the figure.</p>" * 50 for n in range(10))
PAGE = """<!doctype html><html><head><meta charset="utf-8">
{loader}
</head><body><main><article>
<span id="document-book/first"></span><section><h1>First</h1>
<p style="height: 4000px">Text.</p>
<figure class="mha-plotly-figure"><div class="mha-plotly" id="far" style="height: 200px">
</div></figure>{filler}</section></article></main></body></html>
"""
LOADER = (
    '<script defer src="_static/mha-plotly-print.js"></script>'
    '<script defer src="_static/mha-plotly.js" data-plotly="plotly.js" '
    'data-templates="templates.js" data-figures="_figures"></script>'
)
PLOTLY_JS = """
window.Plotly = {
  newPlot(gd) {
    gd.innerHTML = '<svg class="main-svg" width="100" height="100"></svg>';
    return Promise.resolve(gd);
  },
  react(gd) { return Promise.resolve(gd); },
};
"""
FIGURE_JS = 'window.mhaFigure("far", {data: [], layout: {}});\n'
NO_FIGURE_JS = "// a broken figure file: it never hands its figure over\n"


def site(folder: Path, loader: bool = True, figure: str = FIGURE_JS) -> Path:
    """A single page like the book's, in ``folder``, with the site's own figure loader."""
    static = folder / "_static"
    (folder / "_figures").mkdir(parents=True)
    static.mkdir()
    for script in ("mha-plotly-print.js", "mha-plotly.js"):
        shutil.copy2(ROOT / "book" / "_static" / script, static)
    (static / "plotly.js").write_text(PLOTLY_JS, encoding="utf8")
    (static / "templates.js").write_text("window.MHA_PLOTLY_TEMPLATES = {};\n", encoding="utf8")
    (folder / "_figures" / "far.js").write_text(figure, encoding="utf8")
    page = PAGE.format(loader=LOADER if loader else "", filler=FILLER)
    (folder / "index.html").write_text(page, encoding="utf8")
    return folder


def prepared(browser, folder: Path, bound_ms: int = build_pdf.DRAW_BOUND_MS) -> dict:
    context = browser.new_context(viewport={"width": build_pdf.PRINT_WIDTH_PX, "height": 800})
    page = context.new_page()
    page.emulate_media(media="print")
    page.set_default_timeout(60_000)
    try:
        with loopback.serve(folder) as url:
            return build_pdf.prepare(page, f"{url}index.html", SITE, bound_ms=bound_ms)
    finally:
        context.close()


def test_every_figure_is_drawn_when_the_page_is_slow_to_start(browser, tmp_path) -> None:
    ready = prepared(browser, site(tmp_path))
    assert (ready["figures"], ready["drawn"], ready["problem"]) == (1, 1, "")
    assert build_pdf.problems(ready) == []


def test_a_figure_that_never_draws_fails_the_print(browser, tmp_path) -> None:
    ready = prepared(browser, site(tmp_path, figure=NO_FIGURE_JS), bound_ms=2000)
    assert (ready["figures"], ready["drawn"], ready["undrawn"]) == (1, 0, ["far"])
    [problem] = build_pdf.problems(ready)
    assert problem.startswith("only 0 of 1 figures were drawn (not drawn within 2 s)")
    assert problem.endswith("not drawn: far")


def test_a_page_whose_figure_loader_never_starts_fails_the_print(browser, tmp_path) -> None:
    ready = prepared(browser, site(tmp_path, loader=False))
    assert ready["problem"] == "the figure loader (mha-plotly.js) did not start"
    assert build_pdf.problems(ready) == [
        "only 0 of 1 figures were drawn (the figure loader (mha-plotly.js) did not start); "
        "not drawn: far"
    ]


# An explorable far below the screen whose data is a file of its own, as the site keeps the
# trained model's: mha-explore-kit.js draws it only when it comes near, or when asked to.
EXPLORABLE_PAGE = """<!doctype html><html><head><meta charset="utf-8">
<script defer src="_static/mha-explore.js"></script>
<script defer src="_static/mha-explore-kit.js"></script>
<script defer src="_static/mha-explore-tiny.js"></script>
</head><body><main><article>
<span id="document-book/first"></span><section><h1>First</h1>
<p style="height: 4000px">Text.</p>
<div class="mha-explore" data-explore="tiny" id="far-explorable" data-explore-data="far-data">
<p class="mha-explore-fallback">An interactive figure.</p></div>
</section></article></main></body></html>
"""
TINY_FIGURE_JS = """
window.mhaExploreKit.figure("tiny", function (root) {
  const data = root.querySelector("script.mha-explore-data");
  root.setAttribute("data-n", data ? JSON.parse(data.textContent).n : "missing");
});
"""
FAR_DATA_JS = 'window.mhaExploreKit.data("far-data", "{\\"n\\":3}");\n'


def test_every_explorable_is_drawn_with_its_data_before_the_print(browser, tmp_path) -> None:
    static = tmp_path / "_static"
    (tmp_path / "_figures").mkdir()
    static.mkdir()
    shutil.copy2(ROOT / "book" / "_static" / "mha-explore-kit.js", static)
    (static / "mha-explore.js").write_text("window.mhaExplore = {};\n", encoding="utf8")
    (static / "mha-explore-tiny.js").write_text(TINY_FIGURE_JS, encoding="utf8")
    (tmp_path / "_figures" / "far-data.js").write_text(FAR_DATA_JS, encoding="utf8")
    (tmp_path / "index.html").write_text(EXPLORABLE_PAGE, encoding="utf8")
    context = browser.new_context(viewport={"width": build_pdf.PRINT_WIDTH_PX, "height": 800})
    page = context.new_page()
    page.emulate_media(media="print")
    try:
        with loopback.serve(tmp_path) as url:
            ready = build_pdf.prepare(page, f"{url}index.html", SITE, bound_ms=30_000)
            root = page.locator("#far-explorable")
            assert root.get_attribute("data-ready") == "true", "not drawn for the print"
            assert root.get_attribute("data-n") == "3", "drawn without its data"
    finally:
        context.close()
    assert (ready["explorables"], ready["explorables_drawn"], ready["problem"]) == (1, 1, "")
    assert build_pdf.problems(ready) == []
