"""The sidebar buttons a reader sees open the navigation and the contents, at every width.

The theme puts a hidden button of each kind (navigation, contents) in its top bar before the
one the reader sees in the article's header, and its scripts wire only the first: on a phone a
tap on either visible button did nothing. ``mha-sidebar-toggles.js`` hands those taps to the
wired button, and closes the sidebar when a link in it is followed. The page here has the
theme's buttons, sidebars and dialogs as the built pages have them, and runs the installed
themes' own scripts (pydata-sphinx-theme, sphinx-book-theme).
"""

from __future__ import annotations

from pathlib import Path

import pydata_sphinx_theme
import pytest
import sphinx_book_theme

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parents[2]
THEME_SCRIPTS = [
    Path(pydata_sphinx_theme.__file__).parent
    / "theme"
    / "pydata_sphinx_theme"
    / "static"
    / "scripts"
    / "pydata-sphinx-theme.js",
    Path(sphinx_book_theme.__file__).parent
    / "theme"
    / "sphinx_book_theme"
    / "static"
    / "scripts"
    / "sphinx-book-theme.js",
]
OURS = ROOT / "book" / "_static" / "mha-sidebar-toggles.js"
PAGE = """<!doctype html><html><head><meta charset="utf-8"></head><body>
<header class="bd-header"><button class="sidebar-toggle primary-toggle" style="display: none">
Site navigation</button><button class="sidebar-toggle secondary-toggle" style="display: none">
On this page</button></header>
<dialog id="pst-primary-sidebar-modal"></dialog>
<div id="pst-primary-sidebar" class="bd-sidebar-primary"><a href="#">A chapter</a></div>
<main><div class="bd-header-article">
<button class="sidebar-toggle primary-toggle" id="navigation">Toggle primary sidebar</button>
<button class="sidebar-toggle secondary-toggle" id="contents">Toggle secondary sidebar</button>
</div><p>Text.</p></main>
<dialog id="pst-secondary-sidebar-modal"></dialog>
<div id="pst-secondary-sidebar" class="bd-sidebar-secondary"><a href="#">A section</a></div>
{scripts}</body></html>
"""
OPEN_DIALOG_JS = "() => document.querySelector('dialog[open]')?.id || null"


def _page(browser, width: int):
    phone = width < 992
    context = browser.new_context(
        viewport={"width": width, "height": 800}, has_touch=phone, is_mobile=phone
    )
    page = context.new_page()
    scripts = "".join(
        f"<script>{path.read_text(encoding='utf8')}</script>" for path in [*THEME_SCRIPTS, OURS]
    )
    page.set_content(PAGE.format(scripts=scripts))
    page.wait_for_function("() => window.mhaSidebarToggles === true")
    return context, page


@pytest.mark.parametrize("button", ["navigation", "contents"])
def test_on_a_phone_each_visible_sidebar_button_opens_its_sidebar(browser, button) -> None:
    context, page = _page(browser, 390)
    try:
        page.tap(f"#{button}")
        page.wait_for_timeout(200)
        side = "primary" if button == "navigation" else "secondary"
        assert page.evaluate(OPEN_DIALOG_JS) == f"pst-{side}-sidebar-modal"
        assert page.locator(f"#pst-{side}-sidebar-modal a").is_visible()
        page.tap(f"#pst-{side}-sidebar-modal a")  # a link followed closes the sidebar
        page.wait_for_timeout(200)
        assert page.evaluate(OPEN_DIALOG_JS) is None
    finally:
        context.close()


def test_on_a_desktop_the_navigation_button_folds_the_navigation_away(browser) -> None:
    context, page = _page(browser, 1280)
    try:
        page.click("#navigation")
        page.wait_for_timeout(200)
        assert page.evaluate(OPEN_DIALOG_JS) is None
        hidden = "() => document.getElementById('pst-primary-sidebar').classList.value"
        assert "pst-sidebar-hidden" in page.evaluate(hidden)
    finally:
        context.close()
