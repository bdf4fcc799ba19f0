"""Display formulas wider than a phone's column show that they scroll, and a keyboard scrolls them.

At 390 px several display formulas are wider than the column (equation (1) of
one-head-to-many read "softmax(QK/√" and stopped). Each scrolls sideways in its own box
(``mha-site.css``): the box shows a shadow at an edge beyond which the formula goes on, and has
a tab stop (MathJax gives one to each formula), so that a keyboard scrolls it too.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import loopback
import pytest

pytestmark = [pytest.mark.browser, pytest.mark.site]

WIDTH = 390
# Each display formula of the page (sections laid out), brought on screen in turn: its box's
# widths, how it overflows, its background (the edge shadows) and its tab stop.
WIDE_FORMULAS_JS = """
async () => {
  const frame = () => new Promise((done) => requestAnimationFrame(done));
  const wait = (ms) => new Promise((done) => setTimeout(done, ms));
  const found = [];
  for (const box of document.querySelectorAll('div.math > mjx-container[display="true"]')) {
    box.scrollIntoView({block: "center"});
    await frame(); await frame(); await wait(60);
    if (box.scrollWidth <= box.clientWidth + 1) continue;
    const style = getComputedStyle(box);
    const column = box.closest("article").getBoundingClientRect();
    const rect = box.getBoundingClientRect();
    found.push({
      where: box.closest("[id]").id, scrollWidth: box.scrollWidth, width: box.clientWidth,
      overflowX: style.overflowX, shadows: (style.backgroundImage.match(/radial-gradient/g) ||
      []).length, tabIndex: box.tabIndex, inColumn: rect.right <= column.right + 1,
    });
  }
  return found;
}
"""


def problems_of(formula: dict) -> list[str]:
    """What is wrong with a display formula wider than its box."""
    problems = []
    if formula["overflowX"] not in ("auto", "scroll"):
        problems.append(f"cut off (overflow-x: {formula['overflowX']})")
    if formula["shadows"] < 2:
        problems.append("no shadow shows that it scrolls")
    if formula["tabIndex"] != 0:
        problems.append("no tab stop")
    if not formula["inColumn"]:
        problems.append("its box is wider than the column")
    return problems


def test_problems_of_a_formula_that_scrolls_and_shows_it() -> None:
    fine = {"overflowX": "auto", "shadows": 2, "tabIndex": 0, "inColumn": True}
    assert problems_of(fine) == []
    assert len(problems_of({**fine, "overflowX": "hidden", "shadows": 0, "tabIndex": -1})) == 3


@pytest.fixture(scope="module")
def site(built_site: Path) -> Iterator[str]:
    with loopback.serve(built_site) as url:
        yield url


def test_wide_display_formulas_scroll_and_show_it_on_a_phone(
    browser, site: str, toc_page: str
) -> None:
    context = browser.new_context(viewport={"width": WIDTH, "height": 844}, is_mobile=True)
    try:
        tab = context.new_page()
        tab.goto(f"{site}{toc_page}.html")
        formulas = tab.evaluate(WIDE_FORMULAS_JS)
    finally:
        context.close()
    problems = [
        f"{formula['where']} ({formula['scrollWidth']} px in {formula['width']} px): {problem}"
        for formula in formulas
        for problem in problems_of(formula)
    ]
    assert problems == [], f"{toc_page} at {WIDTH} px:\n  " + "\n  ".join(problems)
