"""The PDF prints each explorable as a still: no dead controls, a sentence linking to the site.

``scripts/build_pdf.py`` prints the single-page build in Chromium with print media. There
``mha-site.css`` hides an explorable's controls (and a root with nothing to show before the
reader acts), and ``STILLS_JS`` adds after each explorable a sentence with its address on the
site. The page here is made of the same parts the single page has: Sphinx's mark where a
document starts, an explorable root with its id, controls and drawing.
"""

from __future__ import annotations

from pathlib import Path

import build_pdf
import pytest

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
