"""The PDF starts every chapter on a new page and never prints a page blank between two.

``scripts/build_pdf.py`` (``TOC_JS``) breaks the page before each chapter of the single page.
The page here is made as Sphinx makes it: each document starts with its mark (an empty
``span``) before its section, a part's chapters sit in one ``div.toctree-wrapper``, and a
chapter ends with a cell whose code is hidden in print and that has no output (an empty box).
With the break before the section, a chapter whose last line just fitted at the foot of a
page left the empty box and the mark on a page of their own: the PDF had a blank page between
the rank chapter and the next. Each chapter here ends lower and lower on its page, past its
foot, and each print is read back with PDFium.
"""

from __future__ import annotations

from pathlib import Path

import build_pdf
import pdf_text
import pytest

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parents[2]
CHAPTER = """<span id="document-book/{name}"></span><section><h2>{title}</h2>
<div style="height: {filler}px"></div><p>The last line of {title}.</p>
<div class="cell tag_hide-input docutils container"><details class="hide above-input">
<summary>Checks</summary><div class="cell_input"><pre>assert True</pre></div></details></div>
</section>"""
PAGE = """<!doctype html><html><head><meta charset="utf-8"><style>{css}
body {{ margin: 0; font: 16px/24px serif; }} h1, h2 {{ margin: 0; font-size: 20px; }}
p, div.cell {{ margin: 0 0 16px; }}</style></head><body><main><article>
<section><h1>Preface</h1><p>Text.</p>
<div class="toctree-wrapper compound">{first}{second}</div>
<div class="toctree-wrapper compound">{third}</div>
</section></article></main></body></html>
"""
TITLES = ["First", "Second", "Third"]
# Each chapter's last line ends from well above the foot of its page to below it.
FILLERS = range(int(build_pdf.PRINT_HEIGHT_PX) - 120, int(build_pdf.PRINT_HEIGHT_PX) + 4, 4)


def printed_pages(tab, filler: int, path: Path) -> list[str]:
    """The text of each page of the test page printed as ``build_pdf.py`` prints the book."""
    css = (ROOT / "book" / "_static" / "mha-site.css").read_text(encoding="utf8")
    chapters = {
        key: CHAPTER.format(name=title.lower(), title=title, filler=filler)
        for key, title in zip(("first", "second", "third"), TITLES, strict=True)
    }
    tab.set_content(PAGE.format(css=css, **chapters))
    assert tab.evaluate(build_pdf.TOC_JS) == 4  # the preface and three chapters
    assert tab.evaluate(build_pdf.BREAKS_JS) == 3  # each chapter's break moved up
    margin = {side: f"{mm}mm" for side, mm in build_pdf.MARGIN_MM.items()}
    tab.pdf(path=str(path), format=build_pdf.PAPER, margin=margin)
    return [text.strip() for text in pdf_text.page_texts(path)]


def test_a_chapter_ending_at_the_foot_of_a_page_leaves_no_blank_page(browser, tmp_path):
    context = browser.new_context(viewport={"width": build_pdf.PRINT_WIDTH_PX, "height": 900})
    tab = context.new_page()
    tab.emulate_media(media="print")
    counts = set()
    for filler in FILLERS:
        pages = printed_pages(tab, filler, tmp_path / f"filler-{filler}.pdf")
        assert "" not in pages, f"filler {filler} px: blank pages in {pages}"
        starts = [page for page in pages if page.startswith(tuple(TITLES))]
        assert [page.split()[0] for page in starts] == TITLES, f"filler {filler} px: {pages}"
        counts.add(len(pages))
    context.close()
    # The contents, the preface and one page per chapter; two per chapter once its last
    # line no longer fits: every chapter's end did cross the foot of its page.
    assert (min(counts), max(counts)) == (5, 8)
