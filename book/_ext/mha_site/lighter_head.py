"""A page's head without what holds up its first paint: scripts deferred, unused styles left out.

Runs last among the page's handlers, once every extension and the theme have added their
scripts and stylesheets. The templates in ``book/_templates`` do the rest of this job (no
Font Awesome JavaScript, no preloads of the theme's scripts, the search index only on the
search page).
"""

from __future__ import annotations

import os
from typing import Any

from sphinx.application import Sphinx

from . import html_edit

DESIGN_ASSETS = ("sphinx-design.min.css", "design-tabs.js")  # sphinx-design's, on every page
DESIGN_CLASS_PREFIX = "sd-"  # the classes of sphinx-design's elements
# Scripts that inline scripts of the head use as the parser reaches them (the theme sets
# ``DOCUMENTATION_OPTIONS.pagename`` inline): they stay where they are (0.4 KB).
PARSER_SCRIPTS = ("documentation_options.js",)


def uses_design(body: str) -> bool:
    """Whether a page's body has a sphinx-design element (``sd-`` classes: dropdowns, tabs,
    grids, cards, badges)."""
    if DESIGN_CLASS_PREFIX not in body:
        return False  # (without parsing the page)
    return any(
        name.startswith(DESIGN_CLASS_PREFIX)
        for element in html_edit.parse(body)
        for name in element.classes
    )


def _asset_name(asset: Any) -> str:
    return os.fspath(getattr(asset, "filename", "") or "").split("?")[0].rsplit("/", 1)[-1]


def lighter_head(
    app: Sphinx, pagename: str, templatename: str, context: dict, doctree: Any
) -> None:
    """A page's ``<head>`` without what holds up its first paint and that the page can do
    without until it is parsed.

    - Every script file in the head that would run as the parser reaches it (doctools,
      clipboard, copy buttons, toggles, the theme's) is deferred, but for the 0.4 KB of
      ``documentation_options.js``, which the theme's inline scripts use at once: they all
      act on the parsed page (on ``DOMContentLoaded``), and deferred scripts still run in
      their order, before that event. The inline scripts beside them only set variables
      that these read later.
    - sphinx-design's stylesheet (55 KB) and its tabs script are left out of pages with no
      sphinx-design element.

    Only the site's content pages (``page.html``); the search page loads its own scripts.
    """
    if app.builder.name != "html" or templatename != "page.html":
        return
    body = context.get("body", "")
    scripts, styles = context.get("script_files"), context.get("css_files")
    if scripts is None or styles is None:
        return
    if not uses_design(body):
        scripts[:] = [js for js in scripts if _asset_name(js) not in DESIGN_ASSETS]
        styles[:] = [css for css in styles if _asset_name(css) not in DESIGN_ASSETS]
    for index, js in enumerate(scripts):
        attributes = getattr(js, "attributes", None)
        if attributes is None or not js.filename or {"defer", "async"} & set(attributes):
            continue
        if _asset_name(js) in PARSER_SCRIPTS:
            continue
        if attributes.get("type", "text/javascript") not in ("text/javascript", "module"):
            continue
        scripts[index] = type(js)(js.filename, priority=js.priority, **attributes, defer="defer")


def setup(app: Sphinx) -> None:
    # Last: after every extension and the theme have added their scripts and stylesheets.
    app.connect("html-page-context", lighter_head, priority=900)
