"""The explorables on a phone (390 x 844, touch): drags that follow the finger, figures that fit.

Touch is real: ``Input.dispatchTouchEvent`` through the Chrome DevTools Protocol, as a finger
gives it (Chromium decides then whether the page scrolls). A draggable point must follow the
finger in every direction and the page must not scroll under it. Each explorable, scrolled
so that its top is just under the site's sticky header, must end above the screen's bottom:
each control and the figure it changes are on one screen. The key/value cache's picture
draws every layer the table counts, and keeps changing as tokens are appended.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from test_explorables import PAGES, PHONE, _center, _check_cache, _check_heads, _open

pytestmark = [pytest.mark.browser]

HEADS_ROOT = '.mha-explore[data-explore="heads"]'


def _touch_drag(cdp, start: tuple[float, float], end: tuple[float, float], steps: int = 8) -> None:
    """A finger put down at ``start``, moved in ``steps`` steps to ``end`` and lifted."""
    x0, y0 = start
    x1, y1 = end
    cdp.send(
        "Input.dispatchTouchEvent", {"type": "touchStart", "touchPoints": [{"x": x0, "y": y0}]}
    )
    for i in range(1, steps + 1):
        x, y = x0 + (x1 - x0) * i / steps, y0 + (y1 - y0) * i / steps
        cdp.send(
            "Input.dispatchTouchEvent", {"type": "touchMove", "touchPoints": [{"x": x, "y": y}]}
        )
    cdp.send("Input.dispatchTouchEvent", {"type": "touchEnd", "touchPoints": []})


def _point_centre(page, point: str) -> tuple[float, float]:
    box = page.locator(f'{HEADS_ROOT} [data-point="{point}"] .mx-hit').bounding_box()
    return box["x"] + box["width"] / 2, box["y"] + box["height"] / 2


# (dx, dy) in CSS pixels: up, down (back), left, right (back), and both ways at once
MOVES = [(0, -100), (0, 100), (-80, 0), (80, 0), (60, -60), (-60, 60)]


@pytest.mark.parametrize("point", ["x", "k4"])
def test_a_point_follows_the_finger_in_every_direction(
    browser, built_site: Path, point: str
) -> None:
    page, errors, _ = _open(
        browser,
        built_site.as_uri() + "/" + PAGES["heads"],
        viewport=PHONE,
        has_touch=True,
        is_mobile=True,
    )
    try:
        cdp = page.context.new_cdp_session(page)
        _center(page, page.locator(f"{HEADS_ROOT} svg").first)  # the plane in view, still
        for dx, dy in MOVES:
            x, y = _point_centre(page, point)
            scrolled = page.evaluate("() => window.scrollY")
            _touch_drag(cdp, (x, y), (x + dx, y + dy))
            page.wait_for_timeout(200)
            assert page.evaluate("() => window.scrollY") == scrolled, (
                f"a drag of {point} by {(dx, dy)} scrolled the page"
            )
            nx, ny = _point_centre(page, point)
            assert abs(nx - (x + dx)) < 2 and abs(ny - (y + dy)) < 2, (
                f"{point} dragged by {(dx, dy)} moved by {(nx - x, ny - y)}"
            )
            _check_heads(page)
        assert not errors, f"console errors: {errors}"
    finally:
        page.context.close()
