"""The book's own Sphinx extension: an offline site, light on a phone, one job per module.

``_config.yml`` loads it as ``mha_site`` from ``book/_ext`` (``sphinx.local_extensions``).
Each module below does one job and registers its own event handlers in its ``setup``;
:func:`setup` calls them in the order in which handlers of the same event must run.

Module map (what each module changes, and when):

- :mod:`.plotly_figures`: Plotly figures as placeholders that ``_static/mha-plotly.js`` draws
  when near (a myst-nb mime renderer, a node, a data script per figure, the loader per page);
  :mod:`.figure_facts`: a figure's name, text alternative and narrow layout, from its JSON;
  :mod:`.figure_stills`: each page's opening figure as SVG stills drawn at build time, shown
  until plotly.js is needed (after the pages are written, when a Chromium is found).
- :mod:`.explorables`: the figures that recompute in the reader's browser, from a cell's
  explorable output (``mha.display.explorables``): their elements and scripts;
  :mod:`.live_model`: the live model's files (``_static/live-minilm``), built with the site
  when ONNX Runtime Web is installed, their sizes on the live panel's button.
- :mod:`.math_typeset`: formulas typeset at build time by MathJax in Node (or else in the
  browser by ``_static/mha-math.js``); :mod:`.math_when_near`: the drawings of formulas off
  a page's first screen moved to a script that ``_static/mha-math-svg.js`` draws from.
- :mod:`.hidden_code`: the code of hidden cell inputs loaded when opened
  (``_static/mha-hidden-code.js``).
- :mod:`.section_layout`: links land on their target though sections far from the screen
  are not laid out (``_static/mha-links-land.js``).
- :mod:`.plain_code`: highlighted code without spans for tokens drawn as plain text.
- :mod:`.accessible_html`: valid, named code toggles, bibliography entries, sidebar toggles.
- :mod:`.lighter_head`: head scripts deferred, sphinx-design's files only where used.
- :mod:`.icons`: Font Awesome icons as inline SVG (``icons.json``), no icon fonts.
- :mod:`.stylesheet_bundle`: one stylesheet per page.
- :mod:`.api_reference`: ``{mha-api}`` blocks as autodoc sections.
- :mod:`.downloads`: executed notebooks and the book's PDF in the download menu (a page
  saying ``make pdf`` builds it, in its place, in a site built without it).
- :mod:`.site_identity`: the site's address (Open Graph) and its icon at the root;
  :mod:`.opengraph_quiet` (its own extension, listed before ``sphinxext.opengraph`` in
  ``_config.yml``): no note about matplotlib while social cards are off.
- :mod:`.execution_times`: each chapter's execution time, for ``scripts/build_book.py``.
- :mod:`.html_edit`: finds elements of written pages with ``html.parser`` and splices
  edits into them; :mod:`.files`: writes only what changed, lists the built pages.

The scripts of ``book/_static`` say their own jobs in their first comments; the book's
stylesheet is ``_static/mha-site.css``.
"""

from __future__ import annotations

import zlib
from pathlib import Path
from typing import Any

from sphinx.application import Sphinx

from . import (
    accessible_html,
    api_reference,
    downloads,
    execution_times,
    explorables,
    figure_stills,
    hidden_code,
    icons,
    lighter_head,
    live_model,
    math_typeset,
    plain_code,
    plotly_figures,
    section_layout,
    site_identity,
    stylesheet_bundle,
)

HERE = Path(__file__).resolve().parent
STATIC = HERE.parents[1] / "_static"  # html_static_path
OWN_STATIC = "mha-*"  # the book's own static files


def extension_files(here: Path = HERE) -> list[Path]:
    """The files whose change rebuilds every page: this package's modules and data, the
    book's own static files (``_static/mha-*``), the formula typesetter and the module that
    writes the explorables' elements (``mha.display.explorables``).

    Sphinx copies static files only when some page is written, so each of them is part of
    the extension's version.
    """
    static = sorted((here.parents[1] / "_static").glob(OWN_STATIC))
    own = sorted(here.glob("*.py")) + [icons.ICONS_FILE]
    elements = here.parents[2] / "src" / "mha" / "display" / "explorables.py"
    return [
        *own,
        *(path for path in static if path.is_file()),
        math_typeset.MATH_RENDERER,
        elements,
    ]


# The modules in the order their handlers of one event run: the download menu's notebook
# before the theme's buttons, the figure loader's script before the hidden code's; the icons
# drawn before the formulas are typeset (the pages are smaller to read then), and both before
# the stylesheets are joined; the opening figures' stills drawn last, from the finished pages.
MODULES = (
    execution_times,
    site_identity,
    downloads,
    api_reference,
    plotly_figures,
    live_model,
    explorables,
    icons,
    math_typeset,
    hidden_code,
    section_layout,
    plain_code,
    accessible_html,
    stylesheet_bundle,
    lighter_head,
    figure_stills,
)


def setup(app: Sphinx) -> dict[str, Any]:
    for module in MODULES:
        module.setup(app)
    app.add_css_file("mha-site.css")
    code = b"".join(path.read_bytes() for path in extension_files())
    return {
        "version": "1.0",
        "env_version": zlib.crc32(code),
        "parallel_read_safe": True,
        "parallel_write_safe": True,
    }
