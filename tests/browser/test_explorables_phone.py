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
from test_explorables import NO_SVG, PAGES, PHONE, _center, _check_cache, _check_heads, _open

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


def _header_bottom(page) -> float:
    """The bottom of the site's sticky header (the article's toolbar), 0 if there is none."""
    return page.evaluate(
        "() => { const h = document.querySelector('.bd-header-article');"
        " return h ? h.getBoundingClientRect().bottom : 0; }"
    )


def _fits_one_screen(page, figure: str, when: str) -> None:
    root = page.locator(f'.mha-explore[data-explore="{figure}"]')
    _center(page, root.locator(".mx-tokens" if figure in NO_SVG else "svg").first)
    top = page.evaluate(
        "(sel) => document.querySelector(sel).getBoundingClientRect().top + window.scrollY",
        f'.mha-explore[data-explore="{figure}"]',
    )
    page.evaluate("(y) => window.scrollTo(0, y)", top - _header_bottom(page))
    page.wait_for_timeout(200)
    box = root.bounding_box()
    room = PHONE["height"] - _header_bottom(page)
    assert box["height"] <= room, (
        f"{figure} ({when}) is {box['height']:.0f} px tall; the screen has {room:.0f} px "
        "under the header"
    )
    assert box["y"] + box["height"] <= PHONE["height"] + 0.5, (figure, when, box)


def _interact(page, figure: str) -> None:
    """Put the figure in a state that shows more than its first: notes, later blocks, a full
    cache, the widest latent."""
    root = f'.mha-explore[data-explore="{figure}"]'
    if figure == "heads":
        page.get_by_label("Mask", exact=True).select_option("causal")
        page.get_by_label("Scale of the scores", exact=True).select_option("none")
    elif figure == "online-softmax":
        nxt = page.get_by_role("button", name="Next block")
        while not nxt.is_disabled():
            nxt.click()
    elif figure == "kv-cache":
        page.get_by_label("Key/value heads H kv", exact=True).select_option("8")
        many = page.get_by_role("button", name="Append 256 tokens")
        while not many.is_disabled():
            many.click()
    elif figure == "latent-cache":  # the widest latent and rotary key: the longest labels
        page.get_by_label("Latent width D c", exact=True).select_option("4096")
        page.get_by_label("Rotary key width D r", exact=True).select_option("128")
        page.get_by_label("Key/value heads H kv", exact=True).select_option("2")
    elif figure == "induction-heads":  # the longest sequence, 32 tokens
        page.get_by_role("button", name="Repeat a random sequence").click()
    else:
        raise ValueError(f"no interaction written for the explorable {figure!r}")
    page.locator(root).wait_for()


@pytest.mark.parametrize("figure", list(PAGES))
def test_each_explorable_fits_one_phone_screen(browser, built_site: Path, figure: str) -> None:
    page, errors, _ = _open(
        browser,
        built_site.as_uri() + "/" + PAGES[figure],
        viewport=PHONE,
        has_touch=True,
        is_mobile=True,
    )
    try:
        _fits_one_screen(page, figure, "as drawn first")
        _interact(page, figure)
        _fits_one_screen(page, figure, "after its controls were used")
        assert not errors, f"console errors: {errors}"
    finally:
        page.context.close()


KV_ROOT = '.mha-explore[data-explore="kv-cache"]'


def _cache_picture(page) -> dict:
    """What the cache's picture draws: its layers (one band each), the drawn length of the
    cache (all bands' union) in positions of its axis, the axis's span and the band heights."""
    return page.evaluate(
        """(root) => {
        const svg = document.querySelector(root + ' svg');
        const cache = svg.querySelector('[data-part=cache]');
        const bands = [...svg.querySelectorAll('[data-layer]')];
        const boxes = bands.map((b) => b.getBBox());
        const right = Math.max(...boxes.map((b) => b.x + b.width));
        const left = Math.min(...boxes.map((b) => b.x));
        const span = cache ? Number(cache.getAttribute('data-axis-span')) : NaN;
        const width = cache ? Number(cache.getAttribute('data-axis-width')) : NaN;
        return {layers: bands.map((b) => Number(b.getAttribute('data-layer'))),
                positions: (right - left) / width * span, span: span,
                heights: boxes.map((b) => b.height), drawing: svg.innerHTML,
                ticks: [...svg.querySelectorAll('text')].map((t) => t.textContent)};
    }""",
        KV_ROOT,
    )


def test_the_cache_picture_draws_every_layer_and_changes_with_every_append(
    browser, built_site: Path
) -> None:
    """One band per layer the table counts (32 for Llama 2 7B), as tall as its key/value heads;
    the bands as long as the positions held, on an axis that doubles (and says so) as the cache
    grows, so that the picture changes with every append up to the model's context."""
    page, errors, _ = _open(browser, built_site.as_uri() + "/" + PAGES["kv-cache"], viewport=PHONE)
    try:
        _check_cache(page)
        model = page.evaluate(
            "(r) => JSON.parse(document.querySelector(r).getAttribute('data-model'))", KV_ROOT
        )
        first = _cache_picture(page)
        assert sorted(first["layers"]) == list(range(1, model["num_layers"] + 1)), (
            f"the picture draws layers {first['layers']}, the table counts {model['num_layers']}"
        )
        one = page.get_by_role("button", name="Append a token")
        many = page.get_by_role("button", name="Append 256 tokens")
        drawings = [first["drawing"]]
        for button in [one] * 3 + [many] * 20 + [one]:
            if button.is_disabled():
                break
            button.click()
            tokens = _check_cache(page)["tokens"]
            picture = _cache_picture(page)
            assert abs(picture["positions"] - tokens) < 1e-3 * tokens, (
                f"{tokens} tokens held, {picture['positions']:.2f} positions drawn"
            )
            assert tokens <= picture["span"] and f"{picture['span']:,}" in picture["ticks"]
            assert picture["drawing"] != drawings[-1], f"the picture did not change at {tokens}"
            drawings.append(picture["drawing"])
        assert tokens == model["max_context"] - 1, tokens
        tall = _cache_picture(page)["heights"]
        page.get_by_label("Key/value heads H kv", exact=True).select_option("8")
        short = _cache_picture(page)["heights"]
        assert all(abs(s - t / 4) < 0.01 for s, t in zip(short, tall, strict=True)), (
            "a layer's band is not as tall as its key/value heads"
        )
        assert not errors, f"console errors: {errors}"
    finally:
        page.context.close()
