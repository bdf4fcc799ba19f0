"""Ways round a page: links that land, and sidebar buttons that open their sidebars.

A chapter's sections are laid out only when they come near the screen (``content-visibility``
in ``_static/mha-site.css``); ``_static/mha-links-land.js`` lays out those above a link's
target before the browser scrolls to it, on every page of the site.
``_static/mha-sidebar-toggles.js`` makes the visible sidebar buttons work (the theme wires only
a hidden copy of each: on a phone the navigation and the contents could not be opened).
"""

from __future__ import annotations

from sphinx.application import Sphinx

LINKS_LAND_JS = "mha-links-land.js"
SIDEBAR_TOGGLES_JS = "mha-sidebar-toggles.js"


def setup(app: Sphinx) -> None:
    app.add_js_file(LINKS_LAND_JS, loading_method="defer")
    app.add_js_file(SIDEBAR_TOGGLES_JS, loading_method="defer")
