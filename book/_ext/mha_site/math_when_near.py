"""The drawings of a typeset page's formulas off its first screen, moved to a script of the page.

Every formula stays in the page, with its assistive MathML and the size of its drawing, so the
layout is final at once; the drawings of those off the first screen (and the glyphs only they
use) go to ``_static/math/<page>.js``, and ``_static/mha-math-svg.js`` puts each back as it
comes near the screen. The page is half as large. :mod:`.math_typeset` calls this for each
page it typesets, with the formulas in the parts that ``scripts/node/render_math.mjs`` gives
(so their drawings are not parsed again).
"""

from __future__ import annotations

import json
from typing import Any

from . import html_edit

MATH_DIR = "_static/math"  # one script per page: the drawings of its formulas off the first screen
MATH_DRAWER = "mha-math-svg.js"
# Formulas drawn in the page as built: those before the article's first subsection (what a
# first screen shows), at most this many.
FIRST_SCREEN_FORMULAS = 24


def first_screen_end(elements: list[html_edit.Element], size: int) -> int:
    """Where the page's article's first subsection begins (or ``size``, the page's end)."""
    article = next((e for e in elements if e.tag == "article"), None)
    if article is None:
        return size
    sections = [e for e in elements if e.tag == "section" and e.start > article.start]
    return sections[1].start if len(sections) > 1 else size


def draw_formulas_when_near(
    rendered: dict[str, Any], on_first_screen: list[bool]
) -> tuple[list[str], str, str | None]:
    """The page's typeset formulas with those off the first screen to be drawn when near.

    Each such formula keeps its container, its assistive MathML (read by screen readers) and
    its ``<svg>`` element with the drawing's size and baseline, so the page's layout is final
    at once; the drawing inside it (``data-mha-svg``: its index) and the glyph shapes only
    those drawings use move to the page's script, which ``mha-math-svg.js`` reads to put each
    back as the formula comes within a screen of the viewport, and all of them before
    printing. At most ``FIRST_SCREEN_FORMULAS`` of those on the first screen are drawn in
    the page.

    Args:
        rendered: a page as ``render_math.mjs`` typeset it: ``formulas`` (each formula's
            HTML), ``drawings`` (each one's parts around its drawing, or None), ``cache`` and
            ``glyphCache`` (the glyphs' ``<svg>``, whole and in parts).
        on_first_screen: for each formula, whether it is before the article's first
            subsection.

    Returns:
        The HTML of each formula in the page, the glyphs' ``<svg>`` for the page, and the
        page's script (None when every formula is drawn in the page).
    """
    html, drawings, kept_glyphs, kept = [], [], set(), 0
    for formula, parts, first in zip(
        rendered["formulas"], rendered["drawings"], on_first_screen, strict=True
    ):
        if parts is None:  # not one drawing beside its MathML: left as it is
            html.append(formula)
            continue
        if first and kept < FIRST_SCREEN_FORMULAS:
            kept += 1
            kept_glyphs.update(parts["glyphs"])
            html.append(formula)
            continue
        drawings.append(parts["inner"])
        sized = f'{parts["open"][:-1]} data-mha-svg="{len(drawings) - 1}">'
        html.append(parts["before"] + sized + parts["after"])
    if not drawings:
        return html, rendered["cache"], None
    cache = rendered.get("glyphCache")
    glyphs = dict(cache["glyphs"]) if cache else {}
    first_glyphs = "".join(path for name, path in glyphs.items() if name in kept_glyphs)
    later = "".join(path for name, path in glyphs.items() if name not in kept_glyphs)
    page_cache = cache["open"] + first_glyphs + cache["close"] if cache else rendered["cache"]
    payload = json.dumps({"glyphs": later, "drawings": drawings}, separators=(",", ":"))
    return html, page_cache, "window.mhaMathSvg = " + payload.replace("</", "<\\/") + ";\n"
