"""The PDF prints each explorable as a still: no dead controls, a sentence linking to the site.

``scripts/build_pdf.py`` prints the single-page build in Chromium with print media. There
``mha-site.css`` hides an explorable's controls (and a root with nothing to show before the
reader acts), and ``STILLS_JS`` adds after each explorable a sentence with its address on the
site. The page here is made of the same parts the single page has: Sphinx's mark where a
document starts, an explorable root with its id, controls and drawing.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import build_pdf
import numpy as np
import pytest
from mha_site import plotly_figures

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parents[2]
SITE = "https://example.github.io/book/"
PAGE = """<!doctype html><html><head><meta charset="utf-8"><style>{css}</style></head><body>
<main><article>
<span id="document-book/first"></span><section><h1>First</h1><p>Text.</p></section>
<span id="document-book/heads"></span><section><h1>Heads</h1>
<div class="mha-explore" data-explore="heads" id="explore-heads">
  <div class="row"><label for="pick">Mask</label><select id="pick"><option>none</option></select>
  <button type="button">Random</button><input type="range" aria-label="step"></div>
  <p data-mha-control="">Drag x to move the query.</p>
  <svg width="100" height="50"><circle cx="20" cy="20" r="5"></circle></svg>
</div>
<div class="mha-live-minilm" id="live" data-mha-still="none"
     data-mha-still-text="a small model that attends to your sentence"><button>Load</button></div>
<div class="mha-screen-only docutils"><p>Drag the slider.</p></div>
</section></article></main></body></html>
"""
SHOWN_JS = """
(selector) => [...document.querySelectorAll(selector)].map(
  (element) => getComputedStyle(element).display !== "none" &&
               !!element.getBoundingClientRect().height)
"""
CONTROLS = ".mha-explore :is(label, select, button, input, [data-mha-control])"


@pytest.fixture()
def printed(browser):
    css = (ROOT / "book" / "_static" / "mha-site.css").read_text(encoding="utf8")
    context = browser.new_context(viewport={"width": 700, "height": 900})
    tab = context.new_page()
    tab.set_content(PAGE.format(css=css))
    yield tab
    context.close()


def test_on_screen_the_controls_are_shown(printed) -> None:
    assert printed.evaluate(SHOWN_JS, CONTROLS) == [True] * 5
    assert printed.evaluate(SHOWN_JS, ".mha-screen-only") == [True]


def test_the_pdf_leaves_out_a_chapters_instructions_for_the_screen(printed) -> None:
    """A chapter's sentence that says how to use a figure ({div} mha-screen-only) is shown
    on the site and not printed."""
    printed.emulate_media(media="print")
    assert printed.evaluate(SHOWN_JS, ".mha-screen-only") == [False]


def test_the_pdf_prints_each_explorable_as_a_still_with_its_address(printed) -> None:
    printed.emulate_media(media="print")
    added = printed.evaluate(build_pdf.STILLS_JS, [SITE, build_pdf.EXPLORABLES])
    assert added == 2
    assert printed.evaluate(SHOWN_JS, CONTROLS) == [False] * 5
    assert printed.evaluate(SHOWN_JS, ".mha-explore svg, .mha-live-minilm") == [True, False]
    notes = printed.evaluate(
        """() => [...document.querySelectorAll("p.mha-still-note")].map((note) => [
             note.previousElementSibling.id, note.textContent, note.querySelector("a").href])"""
    )
    heads = f"{SITE}book/heads.html#explore-heads"
    live = f"{SITE}book/heads.html#live"
    assert notes == [
        [
            "explore-heads",
            f"On the book's site this figure is interactive: {heads}. "
            "Here it is printed as it first appears.",
            heads,
        ],
        [
            "live",
            f"On the book's site, a small model that attends to your sentence runs here: {live}.",
            live,
        ],
    ]
    assert printed.evaluate(SHOWN_JS, "p.mha-still-note") == [True, True]


def test_the_pdf_links_to_the_sites_address_from_the_repository() -> None:
    assert build_pdf.site_url() == "https://mha-book.github.io/mha-book/"


# A code cell as the theme draws it: the cell's input (mha-site.css) and the code block in it
# (the theme's div.highlight) are each kept whole.
TALL_PAGE = """<!doctype html><html><head><meta charset="utf-8"><style>{css}
div.highlight {{ break-inside: avoid; }}</style></head><body>
<div class="cell"><div class="cell_input"><div class="highlight"><pre>{short}</pre>
</div></div></div>
<div class="cell"><div class="cell_input"><div class="highlight"><pre>{tall}</pre>
</div></div></div>
</body></html>
"""


def test_the_pdf_lets_a_cell_taller_than_a_page_break(browser) -> None:
    """A short code cell is kept whole on a page; one taller than a page, and its code block,
    may break (kept whole, Chromium left the page before it blank)."""
    css = (ROOT / "book" / "_static" / "mha-site.css").read_text(encoding="utf8")
    lines = [f"line {i}" for i in range(90)]  # about 1.5 pages of code
    context = browser.new_context(viewport={"width": build_pdf.PRINT_WIDTH_PX, "height": 900})
    tab = context.new_page()
    tab.set_content(TALL_PAGE.format(css=css, short="\n".join(lines[:5]), tall="\n".join(lines)))
    tab.emulate_media(media="print")
    breaks = """() => [...document.querySelectorAll("div.cell_input, div.highlight")].map(
      (block) => getComputedStyle(block).breakInside)"""
    assert tab.evaluate(breaks) == ["avoid"] * 4
    assert tab.evaluate(build_pdf.TALL_JS, build_pdf.PRINT_HEIGHT_PX) == 2
    assert tab.evaluate(breaks) == ["avoid", "avoid", "auto", "auto"]
    context.close()


# Plotly's own controls (layout.sliders, layout.updatemenus) do nothing on paper. The book has
# three kinds of figure with them, each made here by the code the chapters use: a head
# slider under a heatmap (its room pushed into the margin by Plotly), the tiled-attention
# steps (a slider in a margin the figure sets, with the legend under it) and a menu between
# the title and the plot. The page is built as the site's: the placeholder and data script
# written by the site extension, drawn by mha-plotly.js with the vendored plotly.js.
def head_slider_figure() -> dict:
    from mha.display import plotting

    rng = np.random.default_rng(0)
    scores = rng.standard_normal((3, 5, 5))
    weights = np.exp(scores) / np.exp(scores).sum(-1, keepdims=True)  # (3, 5, 5)
    return plotting.head_slider(weights, title="three heads").to_plotly_json()


def tile_steps_figure() -> dict:
    from mha.backends import tiled
    from mha.display import diagrams

    rng = np.random.default_rng(1)
    q, k, v = (rng.standard_normal((6, 4)) for _ in range(3))
    steps: list = []
    tiled.attention(q, k, v, causal=True, block_q=4, block_kv=3, trace=steps)
    return diagrams.tile_steps(steps, 6, 6, title="Tiled causal attention").to_plotly_json()


def menu_figure() -> dict:
    import plotly.graph_objects as go

    grids = {name: np.random.default_rng(seed).uniform(-1, 1, (6, 12)) for seed, name in
             enumerate(["first", "second"])}  # fmt: skip
    fig = go.Figure(go.Heatmap(z=grids["first"], zmin=-1, zmax=1, colorbar=dict(title="excess")))
    fig.update_layout(
        title="Every head", margin=dict(t=120), height=460,
        updatemenus=[dict(x=0, y=1.2, xanchor="left", buttons=[
            dict(label=name, method="restyle", args=[{"z": [grid.tolist()]}, [0]])
            for name, grid in grids.items()])])  # fmt: skip
    return fig.to_plotly_json()


CONTROLLED = {"head-slider": head_slider_figure, "tile-steps": tile_steps_figure,
              "menu": menu_figure}  # fmt: skip
FIGURES_PAGE = """<!doctype html><html><head><meta charset="utf-8"><style>{css}</style>
<script defer src="_static/mha-plotly-print.js"></script>
<script defer src="_static/mha-plotly.js" data-plotly="plotly/plotly-cartesian.min.js"
  data-templates="mha-plotly-templates.js" data-figures="_figures"></script></head><body>
<main><article><span id="document-book/figures"></span><section><h1>Figures</h1>
{figures}</section></article></main></body></html>
"""
# Each figure drawn: its height, its plot's size, its placeholder's height, and the boxes of
# its controls that show.
DRAWN_JS = """
async () => {
  await window.mhaDrawAllFigures();
  const shown = (element) => getComputedStyle(element).display !== "none" &&
    element.getBoundingClientRect().height > 0;
  return Object.fromEntries([...document.querySelectorAll("div.mha-plotly")].map((gd) => [
    gd.id, {
      height: gd._fullLayout.height,
      plot: [gd._fullLayout._size.w, gd._fullLayout._size.h],
      box: gd.getBoundingClientRect().height,
      controls: [...gd.querySelectorAll(".slider-container, .updatemenu-container")]
        .filter(shown).map((control) => control.getBoundingClientRect().height),
    }]));
}
"""


@pytest.fixture(scope="module")
def figures_page(tmp_path_factory) -> Path:
    """The three figures on one page, in a folder laid out as the built site's."""
    folder = tmp_path_factory.mktemp("figures")
    static = folder / "_static"
    (static / "plotly").mkdir(parents=True)
    (folder / "_figures").mkdir()
    for script in ("mha-plotly-print.js", "mha-plotly.js"):
        shutil.copy2(ROOT / "book" / "_static" / script, static)
    (static / "plotly" / "plotly-cartesian.min.js").symlink_to(
        ROOT / "book" / "_static" / "plotly" / "plotly-cartesian.min.js"
    )
    (static / "mha-plotly-templates.js").write_text(plotly_figures.plotly_templates_js())
    placeholders = []
    for name, make in CONTROLLED.items():
        figure = make()
        shipped, _ = plotly_figures.figure_payload(figure)
        (folder / "_figures" / f"{name}.js").write_text(plotly_figures.figure_script(name, shipped))
        placeholders.append(plotly_figures.figure_html(figure, name))
    css = (ROOT / "book" / "_static" / "mha-site.css").read_text(encoding="utf8")
    page = folder / "page.html"
    page.write_text(FIGURES_PAGE.format(css=css, figures="\n".join(placeholders)))
    return page


def drawn_figures(browser, page: Path, media: str) -> tuple[dict, object]:
    context = browser.new_context(viewport={"width": build_pdf.FIGURE_WIDTH_PX, "height": 900})
    tab = context.new_page()
    tab.emulate_media(media=media)  # before the figures are drawn, as build_pdf.py prints
    tab.goto(page.as_uri(), wait_until="load")
    return tab.evaluate(DRAWN_JS), context


def test_the_pdf_prints_a_plotly_figure_without_its_sliders_and_menus(browser, figures_page):
    """In print a figure with Plotly's sliders or menus shows none of them, has the sentence
    an explorable has, and keeps its plot's size with the controls' room taken out: no gap
    where they were, its box as tall as its drawing."""
    screen, context = drawn_figures(browser, figures_page, "screen")
    context.close()
    assert all(len(screen[name]["controls"]) == 1 for name in CONTROLLED)  # shown on screen
    printed, context = drawn_figures(browser, figures_page, "print")
    tab = context.pages[0]
    added = tab.evaluate(build_pdf.STILLS_JS, [SITE, build_pdf.EXPLORABLES])
    notes = tab.evaluate(
        """() => [...document.querySelectorAll("p.mha-still-note")].map((note) => [
             note.previousElementSibling.querySelector("div.mha-plotly").id, note.textContent,
             getComputedStyle(note).display !== "none"])"""
    )
    context.close()
    assert added == len(CONTROLLED)
    assert notes == [
        [
            name,
            f"On the book's site this figure is interactive: {SITE}book/figures.html#"
            f"{name}-figure. Here it is printed as it first appears.",
            True,
        ]
        for name in CONTROLLED
    ]
    for name in CONTROLLED:
        shown, paper = screen[name], printed[name]
        assert paper["controls"] == [], name
        assert paper["plot"] == shown["plot"], name
        assert paper["height"] <= shown["height"] - shown["controls"][0], name
        assert paper["box"] == paper["height"], name
