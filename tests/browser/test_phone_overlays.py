"""Nothing covers a phone reader's text: Plotly's toolbar and the theme's "Back to top" pill.

On a touch screen (390 px) a tap on a figure showed Plotly's toolbar over the figure's title,
and scrolling up showed the theme's "Back to top" pill over the text and the explorables at
the foot of the screen. The toolbar stays on a desktop (1280 px, a mouse), the pill on a tablet
(800 px).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import loopback
import pytest

pytestmark = [pytest.mark.browser, pytest.mark.site]

PAGE = "book/inference"  # its first figure has a title that reaches the right edge on a phone
# The toolbar's and the title's boxes when the toolbar is shown (null: not shown).
TOOLBAR_JS = """
(id) => {
  const figure = document.getElementById(id);
  const bar = figure.querySelector(".modebar-container");
  const title = figure.querySelector(".gtitle");
  if (!bar || getComputedStyle(bar).display === "none") return null;
  const shown = bar.querySelector(".modebar");
  if (!shown || getComputedStyle(shown).opacity === "0") return null;
  const a = shown.getBoundingClientRect(), b = title.getBoundingClientRect();
  return {overlaps: a.left < b.right && b.left < a.right && a.top < b.bottom && b.top < a.bottom};
}
"""
BACK_TO_TOP_JS = """
() => {
  const pill = document.getElementById("pst-back-to-top");
  const box = pill.getBoundingClientRect();
  return getComputedStyle(pill).display !== "none" && box.height > 0;
}
"""


@pytest.fixture(scope="module")
def site(built_site: Path) -> Iterator[str]:
    with loopback.serve(built_site) as url:
        yield url


def _open(browser, site: str, width: int):
    phone = width < 500
    context = browser.new_context(
        viewport={"width": width, "height": 844}, has_touch=phone, is_mobile=phone
    )
    tab = context.new_page()
    tab.goto(f"{site}{PAGE}.html")
    return context, tab


def _first_figure(tab):
    figure = tab.locator("div.mha-plotly").first
    figure.scroll_into_view_if_needed()
    tab.wait_for_function(
        "(id) => document.getElementById(id).querySelector('.gtitle')",
        arg=figure.get_attribute("id"),
    )
    return figure


def test_a_tap_on_a_figure_shows_no_toolbar_over_its_title(browser, site: str) -> None:
    context, tab = _open(browser, site, 390)
    try:
        figure = _first_figure(tab)
        box = figure.bounding_box()
        tab.touchscreen.tap(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
        tab.wait_for_timeout(300)
        assert tab.evaluate(TOOLBAR_JS, figure.get_attribute("id")) is None
    finally:
        context.close()


def test_a_mouse_over_a_figure_still_shows_its_toolbar_on_a_desktop(browser, site: str) -> None:
    context, tab = _open(browser, site, 1280)
    try:
        figure = _first_figure(tab)
        figure.hover()
        tab.wait_for_timeout(300)
        assert tab.evaluate(TOOLBAR_JS, figure.get_attribute("id")) is not None
    finally:
        context.close()


# From 1200 px the book theme hides the pill (the sidebars are in reach); a tablet keeps it.
@pytest.mark.parametrize(("width", "shown"), [(390, False), (800, True)])
def test_back_to_top_shows_on_a_tablet_not_a_phone(
    browser, site: str, width: int, shown: bool
) -> None:
    context, tab = _open(browser, site, width)
    try:
        tab.mouse.wheel(0, 3000)
        tab.wait_for_timeout(300)
        tab.mouse.wheel(0, -600)
        tab.wait_for_timeout(600)
        assert tab.evaluate(BACK_TO_TOP_JS) is shown
    finally:
        context.close()
