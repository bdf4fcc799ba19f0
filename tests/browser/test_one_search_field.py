"""One search field on a desktop: the header's; the primary sidebar's copy is not shown.

At 1280 px the theme showed two search boxes at once, one in the header and one at the top
of the primary sidebar. The page here has the theme's two places for it (its markup, as the
built pages have it) and the site's own ``mha-site.css``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parents[2]
FIELD = '<button class="btn search-button-field search-button__button">Search</button>'
PAGE = f"""<!doctype html><html><head><meta charset="utf-8"><style>{{css}}</style></head><body>
<header class="bd-header navbar"><div class="bd-header__inner">
<div class="navbar-item navbar-persistent--container" id="header">{FIELD}</div></div></header>
<div class="bd-container"><div class="bd-sidebar-primary bd-sidebar">
<div class="sidebar-primary-items__start sidebar-primary__section">
<div class="sidebar-primary-item" id="sidebar">{FIELD}</div>
<div class="sidebar-primary-item"><nav><a href="#">A chapter</a></nav></div>
</div></div><main><p>Text.</p></main></div></body></html>
"""
SHOWN_JS = """
() => [...document.querySelectorAll(".search-button-field")].map((field) => {
  const box = field.getBoundingClientRect();
  return [field.parentElement.id, box.width > 0 && box.height > 0];
})
"""


@pytest.mark.parametrize("width", [390, 1280])
def test_only_the_header_shows_a_search_field(browser, width: int) -> None:
    css = (ROOT / "book" / "_static" / "mha-site.css").read_text(encoding="utf8")
    context = browser.new_context(viewport={"width": width, "height": 800})
    try:
        page = context.new_page()
        page.set_content(PAGE.format(css=css))
        assert page.evaluate(SHOWN_JS) == [["header", True], ["sidebar", False]]
        assert page.evaluate("() => document.getElementById('sidebar').offsetHeight") == 0
    finally:
        context.close()
