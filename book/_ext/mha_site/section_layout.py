"""Links that land: the script that lays out the sections above a link's target first.

A chapter's sections are laid out only when they come near the screen (``content-visibility``
in ``_static/mha-site.css``); ``_static/mha-links-land.js`` lays out those above a link's
target before the browser scrolls to it, on every page of the site.
"""

from __future__ import annotations

from sphinx.application import Sphinx

LINKS_LAND_JS = "mha-links-land.js"


def setup(app: Sphinx) -> None:
    app.add_js_file(LINKS_LAND_JS, loading_method="defer")
