"""The drawings of a typeset page's formulas off its first screen, moved to a script of the page.

Every formula stays in the page, with its assistive MathML and the size of its drawing, so the
layout is final at once; the drawings of those off the first screen (and the glyphs only they
use) go to ``_static/math/<page>.js``, and ``_static/mha-math-svg.js`` puts each back as it
comes near the screen. The page is half as large. Called by :mod:`.math_typeset` on each page
it typesets.
"""

from __future__ import annotations

import html
import json

from . import html_edit

MATH_DIR = "_static/math"  # one script per page: the drawings of its formulas off the first screen
MATH_DRAWER = "mha-math-svg.js"
# Formulas drawn in the page as built: those before the article's first subsection (what a
# first screen shows), at most this many.
FIRST_SCREEN_FORMULAS = 24
GLYPH_CACHE_ID = "MJX-SVG-global-cache"  # MathJax's <svg> of the glyphs formulas <use>


def first_screen_end(elements: list[html_edit.Element], size: int) -> int:
    """Where the page's article's first subsection begins (or ``size``, the page's end)."""
    article = next((e for e in elements if e.tag == "article"), None)
    if article is None:
        return size
    sections = [e for e in elements if e.tag == "section" and e.start > article.start]
    return sections[1].start if len(sections) > 1 else size


def formula_drawing(container: html_edit.Element) -> html_edit.Element | None:
    """A typeset formula's drawing: the ``<svg>`` that opens its ``mjx-container``, just
    before its assistive MathML (a table's drawing holds inner ``<svg>``\\s)."""
    kids = container.children
    if len(kids) < 2 or kids[0].tag != "svg" or kids[0].start != container.open_end:
        return None
    svg, after = kids[0], kids[1]
    return svg if after.tag == "mjx-assistive-mml" and after.start == svg.end else None


def _glyphs_used(svg: html_edit.Element) -> set[str]:
    return {
        e.attrs["xlink:href"][1:]
        for e in svg.descendants()
        if (e.attrs.get("xlink:href") or "").startswith("#")
    }


def draw_formulas_when_near(page: str, data_url: str, drawer_url: str) -> tuple[str, str | None]:
    """A typeset page whose formulas off the first screen are drawn when they come near.

    Each such formula keeps its container, its assistive MathML (read by screen readers) and
    its ``<svg>`` element with the drawing's size and baseline, so the page's layout is final
    at once; the drawing inside it (``data-mha-svg``: its index) and the glyph shapes only
    those drawings use move to a script of the page (``data_url``), which ``mha-math-svg.js``
    (``drawer_url``) puts back as each formula comes within a screen of the viewport, and all
    of them before printing. Both scripts are deferred: they do not hold up the first paint.
    Returns the page and the script (None when every formula is on the first screen).
    """
    elements = html_edit.parse(page)
    end = first_screen_end(elements, len(page))
    drawings: list[str] = []
    kept_glyphs: set[str] = set()
    edits, kept = [], 0
    for container in html_edit.find(elements, "mjx-container"):
        svg = formula_drawing(container)
        if svg is None:
            continue
        if container.start < end and kept < FIRST_SCREEN_FORMULAS:
            kept += 1
            kept_glyphs |= _glyphs_used(svg)
            continue
        drawings.append(svg.inner(page))
        sized = f'{svg.start_tag(page)[:-1]} data-mha-svg="{len(drawings) - 1}"></svg>'
        edits.append((svg.start, svg.end, sized))
    if not drawings:
        return page, None
    cache = next(html_edit.find(elements, "svg", id=GLYPH_CACHE_ID), None)
    defs = cache.children[0] if cache is not None and cache.children else None
    glyphs = {}
    if defs is not None and defs.tag == "defs" and defs.start == cache.open_end:
        glyphs = {p.attrs["id"]: p.outer(page) for p in defs.children if p.attrs.get("id")}
        first_glyphs = "".join(path for name, path in glyphs.items() if name in kept_glyphs)
        edits.append((defs.open_end, defs.close_start, first_glyphs))
    later = "".join(path for name, path in glyphs.items() if name not in kept_glyphs)
    payload = json.dumps({"glyphs": later, "drawings": drawings}, separators=(",", ":"))
    script = "window.mhaMathSvg = " + payload.replace("</", "<\\/") + ";\n"
    tags = (
        f'<script defer src="{html.escape(data_url)}"></script>\n'
        f'<script defer src="{html.escape(drawer_url)}"></script>\n'
    )
    head = next(html_edit.find(elements, "head"))
    edits.append((head.close_start, head.close_start, tags))
    return html_edit.splice(page, edits), script
