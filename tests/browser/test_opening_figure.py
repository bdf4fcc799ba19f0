"""A page's opening figure on screen: its still at load, plotly.js only once the reader acts.

The pages that open with a figure show its still (``figure_stills``) and fetch no plotly.js
while they load, so a phone is not blocked by it; the still is the one of the page's theme
and of the figure's width, and it is loaded. Once the reader touches the page (or moves the
mouse, or scrolls) plotly.js comes and the live figure replaces the still.
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytestmark = [pytest.mark.browser]

PHONE = {"viewport": {"width": 390, "height": 844}, "has_touch": True, "is_mobile": True}
DESKTOP = {"viewport": {"width": 1280, "height": 900}}
# The chapters whose first figure is on their first screen.
OPENING = ["book/one-head-to-many", "book/inference", "book/trained-heads"]
SETTLE_MS = 1500  # after load: time enough for a figure near the screen to start drawing

SHOWN_STILLS_JS = """
() => [...document.querySelectorAll("div.mha-plotly[data-still] img.mha-still")]
  .filter((img) => getComputedStyle(img).display !== "none")
  .map((img) => ({cls: img.className, loaded: img.complete && img.naturalWidth > 0,
                  width: img.getBoundingClientRect().width, filter: getComputedStyle(img).filter,
                  background: getComputedStyle(img).backgroundColor}))
"""
FIRST_FIGURE = "div.mha-plotly[data-still]"


def _open(browser, built_site: Path, page: str, theme: str, context: dict):
    """``page`` opened in ``theme``; the list that collects the plotly.js requests."""
    ctx = browser.new_context(color_scheme=theme, **context)
    ctx.add_init_script(
        f"try {{ localStorage.setItem('mode', '{theme}'); "
        f"localStorage.setItem('theme', '{theme}'); }} catch (e) {{}}"
    )
    tab = ctx.new_page()
    plotly: list[str] = []
    tab.on("request", lambda r: plotly.append(r.url) if "/plotly/" in r.url else None)
    tab.goto(f"{built_site.as_uri()}/{page}.html", wait_until="load")
    tab.wait_for_timeout(SETTLE_MS)
    return tab, plotly


def _check_still(tab, plotly: list[str], theme: str, width: str) -> None:
    assert plotly == [], f"plotly.js fetched before the reader acted: {plotly}"
    assert tab.locator(f"{FIRST_FIGURE} .main-svg").count() == 0, "drawn before the reader acted"
    shown = tab.wait_for_function(
        f"() => {{ const s = ({SHOWN_STILLS_JS})(); return s.length && s.every((x) => x.loaded)"
        " && s; }",
        timeout=30_000,
    ).json_value()
    assert len(shown) == 1, f"{len(shown)} stills shown: {shown}"
    assert f"mha-still-{theme}" in shown[0]["cls"] and f"mha-still-{width}" in shown[0]["cls"]
    box = tab.locator(FIRST_FIGURE).bounding_box()
    assert shown[0]["width"] == pytest.approx(box["width"], abs=1)
    # drawn for its theme: not dimmed nor framed as the theme does a cell's images in the dark
    assert (shown[0]["filter"], shown[0]["background"]) == ("none", "rgba(0, 0, 0, 0)"), shown


def _check_comes_alive(tab, plotly: list[str]) -> None:
    tab.locator(f"{FIRST_FIGURE} .main-svg").first.wait_for(timeout=60_000)
    assert plotly, "the figure was drawn without plotly.js"
    assert tab.locator(f"{FIRST_FIGURE} img.mha-still").count() == 0, "the still stayed"


@pytest.mark.parametrize("page", OPENING)
def test_a_phone_shows_the_still_until_the_reader_touches_the_page(
    browser, built_site: Path, page: str
) -> None:
    tab, plotly = _open(browser, built_site, page, "light", PHONE)
    try:
        _check_still(tab, plotly, "light", "narrow")
        box = tab.locator(FIRST_FIGURE).bounding_box()
        tab.touchscreen.tap(box["x"] + box["width"] / 2, box["y"] + 10)
        _check_comes_alive(tab, plotly)
    finally:
        tab.context.close()


def test_a_desktop_in_the_dark_theme_shows_the_dark_wide_still_until_the_mouse_moves(
    browser, built_site: Path
) -> None:
    tab, plotly = _open(browser, built_site, OPENING[0], "dark", DESKTOP)
    try:
        assert tab.evaluate("document.documentElement.dataset.theme") == "dark"
        _check_still(tab, plotly, "dark", "wide")
        tab.mouse.move(200, 300)
        tab.mouse.move(220, 320)
        _check_comes_alive(tab, plotly)
    finally:
        tab.context.close()


def test_scrolling_brings_the_live_figure(browser, built_site: Path) -> None:
    tab, plotly = _open(browser, built_site, OPENING[1], "light", PHONE)
    try:
        _check_still(tab, plotly, "light", "narrow")
        tab.evaluate("window.scrollBy(0, 40)")
        _check_comes_alive(tab, plotly)
    finally:
        tab.context.close()
