"""The book's Plotly figures on the site: each a placeholder drawn by one shared plotly.js.

Chapters call ``fig.show()``; the build sets ``PLOTLY_RENDERER`` to ``plotly_mimetype``, so
each figure is stored as ``application/vnd.plotly.v1+json`` (the output JupyterLab renders
with the plotly wheel's extension). A myst-nb mime renderer turns that output into an
``mha_figure`` node, which the HTML builders write as a ``<div class="mha-plotly">`` with
the figure's name, text alternative and heights (:mod:`.figure_facts`), and a data script
``_figures/<id>.js``. ``_static/mha-plotly.js`` draws each figure as it comes near, with the
cartesian partial bundle vendored in ``_static/plotly/`` or, for a page that needs it, the
plotly package's full plotly.js. Figures on Plotly's default template follow the site's
light/dark theme: the template is dropped from the page and ``mha-plotly-templates.js``
(written here from ``plotly.io.templates``) applies the light or the dark one.
"""

from __future__ import annotations

import html
import json
import os
import re
from pathlib import Path
from typing import Any

from docutils import nodes
from sphinx.application import Sphinx
from sphinx.errors import ExtensionError
from sphinx.util import logging
from sphinx.util.osutil import relative_uri

from . import figure_facts, figure_stills
from .files import copy_if_changed, write_if_changed

logger = logging.getLogger(__name__)

PLOTLY_MIME = "application/vnd.plotly.v1+json"
PLOTLY_JS = "plotly/plotly.min.js"  # relative to _static; the full bundle, copied when needed
# plotly.js's cartesian partial bundle, vendored in book/_static/plotly/ with its licence
# (npm plotly.js-cartesian-dist-min, the version of the plotly package's plotly.js).
PLOTLY_CARTESIAN_JS = "plotly/plotly-cartesian.min.js"
TEMPLATES_JS = "mha-plotly-templates.js"
FIGURES_DIR = "_figures"  # in the html output folder: one data script per figure
FIGURE_CLASS = "mha-plotly"
CONTROLS = ("sliders", "updatemenus")  # layout keys of Plotly's own controls
# Colour-blind-safe qualitative colours (Okabe and Ito), in the order traces take them; the
# dark theme has grey where the light one has black.
SAFE_COLORWAY = {
    "light": ["#0072B2", "#E69F00", "#009E73", "#D55E00", "#56B4E9", "#CC79A7", "#000000"],
    "dark": ["#56B4E9", "#E69F00", "#009E73", "#D55E00", "#F0E442", "#CC79A7", "#BBBBBB"],
}


class FigureError(ValueError):
    """A figure breaks the site's rules (for example, it has no title)."""


def _default_template() -> dict[str, Any]:
    """Plotly's default template as it appears in a figure's JSON."""
    import plotly.io as pio
    from plotly.utils import PlotlyJSONEncoder

    template = pio.templates[pio.templates.default]
    return json.loads(json.dumps(template.to_plotly_json(), cls=PlotlyJSONEncoder))


_DEFAULT_TEMPLATE: dict[str, Any] | None = None


def figure_payload(figure: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    """The figure as the page ships it, and whether it follows the site's light/dark theme.

    A figure whose template is Plotly's default has the template removed (the browser
    applies the light or dark one); a chosen template is kept.
    """
    global _DEFAULT_TEMPLATE
    if _DEFAULT_TEMPLATE is None:
        _DEFAULT_TEMPLATE = _default_template()
    figure = dict(figure)
    layout = dict(figure.get("layout") or {})
    auto = layout.get("template") in (None, _DEFAULT_TEMPLATE)
    if auto:
        layout.pop("template", None)
    figure["layout"] = layout
    return figure, auto


def figure_script(fig_id: str, figure: dict[str, Any]) -> str:
    """The figure's data file: a script that hands the figure to mha-plotly.js.

    A script (not JSON fetched by the page) so that it also loads from ``file://``.
    """
    payload = json.dumps(figure, separators=(",", ":"), allow_nan=False)
    payload = payload.replace("</", "<\\/")
    return f"window.mhaFigure({json.dumps(fig_id)},{payload});\n"


def has_controls(figure: dict[str, Any]) -> bool:
    """Whether the figure has Plotly's own controls: sliders or dropdown/button menus."""
    layout = figure.get("layout") or {}
    return any(layout.get(name) for name in CONTROLS)


def figure_html(figure: dict[str, Any], fig_id: str, stills_uri: str | None = None) -> str:
    """The placeholder of one figure: an image with a name and a text alternative.

    The ``div.mha-plotly`` keeps the figure's height before it is drawn (wide and narrow
    heights as CSS variables); ``mha-plotly.js`` loads ``_figures/<id>.js`` and draws the
    figure there when it scrolls near the viewport. With ``stills_uri`` (``_figures/`` as
    seen from the page) it holds the figure's stills (:mod:`.figure_stills`) until then.

    Raises:
        FigureError: if the figure has no title (the title is its accessible name).
    """
    figure, auto = figure_payload(figure)
    title = figure_facts.title_text(figure)
    if not title:
        raise FigureError(f"figure {fig_id} has no title; every figure needs layout.title")
    wide, narrow = figure_facts.figure_heights(figure)
    narrow_patch = json.dumps(figure_facts.narrow_layout(figure), separators=(",", ":"))
    subtitles = json.dumps(figure_facts.subplot_titles(figure), separators=(",", ":"))
    description = figure_facts.describe(figure)
    mode = "auto" if auto else "fixed"
    # A figure whose labels need its full width (layout.meta.mha_min_width, CSS pixels)
    # keeps it on a phone and scrolls sideways in its box.
    meta = (figure.get("layout") or {}).get("meta")
    min_width = meta.get("mha_min_width") if isinstance(meta, dict) else None
    classes, figure_style = f"{FIGURE_CLASS}-figure", ""
    if isinstance(min_width, (int, float)) and min_width > 0:
        classes += f" {FIGURE_CLASS}-wide"
        figure_style = f' style="--mha-min-width: {int(min_width)}px"'
    # A figure with Plotly's own sliders or menus is printed without them, in its first state
    # (mha-plotly.js), and, like an explorable, with a sentence giving its address on the site.
    if has_controls(figure):
        figure_style += f' id="{fig_id}-figure" data-mha-explorable=""'
    still, images = "", ""
    if stills_uri is not None:
        still, images = ' data-still=""', figure_stills.still_images(fig_id, stills_uri)
    return (
        f'<figure class="{classes}"{figure_style}>\n'
        f'<div class="{FIGURE_CLASS}" id="{fig_id}" role="img" '
        f'aria-label="{html.escape(title)}" aria-describedby="{fig_id}-text" '
        f'data-theme-template="{mode}" '
        f'data-narrow="{html.escape(narrow_patch)}" data-subtitles="{html.escape(subtitles)}" '
        f'style="--mha-height: {wide}px; --mha-narrow-height: {narrow}px"{still}>'
        f"{images}</div>\n"
        f'<figcaption class="{FIGURE_CLASS}-text" id="{fig_id}-text">'
        f"{html.escape(description)}</figcaption>\n</figure>\n"
    )


class mha_figure(nodes.General, nodes.Element):  # noqa: N801 (docutils node naming)
    """A Plotly figure: its id and its JSON (``figure``), written out by HTML builders."""


def visit_figure_html(translator: Any, node: mha_figure) -> None:
    figure = json.loads(node["figure"])
    fig_id = node["fig_id"]
    builder = translator.builder
    # The page's first figure gets stills when the build can draw them.
    first = not getattr(translator, "_mha_figure_seen", False)
    translator._mha_figure_seen = True
    stills_uri = None
    if first and figure_stills.enabled(builder.app):
        page_uri = builder.get_target_uri(builder.current_docname)
        stills_uri = relative_uri(page_uri, f"{FIGURES_DIR}/")
    try:
        translator.body.append(figure_html(figure, fig_id, stills_uri))
    except FigureError as error:
        logger.warning(str(error), location=node)
        raise nodes.SkipNode from error
    shipped, _ = figure_payload(figure)
    path = Path(translator.builder.outdir) / FIGURES_DIR / f"{fig_id}.js"
    write_if_changed(path, figure_script(fig_id, shipped))
    raise nodes.SkipNode


def skip_figure(translator: Any, node: mha_figure) -> None:
    raise nodes.SkipNode


class PlotlyMimeRenderer:
    """myst-nb mime renderer plugin for ``application/vnd.plotly.v1+json``."""

    mime_priority_overrides = (
        ("html", PLOTLY_MIME, 1),
        ("dirhtml", PLOTLY_MIME, 1),
        ("singlehtml", PLOTLY_MIME, 1),
    )

    @staticmethod
    def handle_mime(renderer: Any, data: Any, inline: bool) -> list[nodes.Element] | None:
        if data.mime_type != PLOTLY_MIME:
            return None
        content = data.content
        figure = json.loads(content) if isinstance(content, str | bytes) else content
        docname = getattr(renderer.renderer.document.settings, "env", None)
        prefix = re.sub(r"[^A-Za-z0-9]+", "-", docname.docname) if docname else "doc"
        fig_id = f"{FIGURE_CLASS}-{prefix}-{data.cell_index}-{data.output_index}"
        node = mha_figure("", fig_id=fig_id, figure=json.dumps(figure, separators=(",", ":")))
        if inline:
            return [node]
        container = nodes.container("", node, classes=["output", "mha-plotly-output"])
        return [container]


def _install_mime_renderer() -> None:
    """Add the Plotly renderer to myst-nb's mime renderer plugins (normally entry points)."""
    from myst_nb.core import render

    if getattr(render.load_mime_renders, "_mha_site", False):
        return
    original = render.load_mime_renders

    def load_mime_renders() -> list[Any]:
        return [PlotlyMimeRenderer, *original()]

    load_mime_renders._mha_site = True  # type: ignore[attr-defined]
    render.load_mime_renders = load_mime_renders


def page_figures(doctree: nodes.document | None) -> list[dict[str, Any]]:
    """The figures of a page, in order."""
    if doctree is None:
        return []
    return [json.loads(node["figure"]) for node in doctree.findall(mha_figure)]


def add_figure_scripts(
    app: Sphinx, pagename: str, templatename: str, context: dict, doctree: Any
) -> None:
    """Give pages with figures the small figure loader (it fetches plotly.js when needed).

    The loader's ``data-plotly`` names the bundle: the cartesian partial bundle when it
    draws every trace type of the page, else the full plotly.js (copied on first use).
    """
    figures = page_figures(doctree)
    if not figures:
        return
    types = set().union(*(figure_facts.trace_types(figure) for figure in figures))
    bundle = PLOTLY_CARTESIAN_JS if types <= figure_facts.CARTESIAN_TRACES else PLOTLY_JS
    if bundle == PLOTLY_JS:
        _copy_full_plotly(Path(app.outdir) / "_static")
    app.add_js_file("mha-plotly-print.js", loading_method="defer")
    app.add_js_file(
        "mha-plotly.js",
        loading_method="defer",
        **{"data-plotly": bundle, "data-templates": TEMPLATES_JS, "data-figures": FIGURES_DIR},
    )


def plotly_templates_js() -> str:
    """``mha-plotly-templates.js``: Plotly's light and dark templates with the safe colours."""
    import plotly.io as pio
    from plotly.utils import PlotlyJSONEncoder

    templates = {}
    for theme, name in (("light", "plotly"), ("dark", "plotly_dark")):
        template = pio.templates[name].to_plotly_json()
        layout = template.setdefault("layout", {})
        layout["paper_bgcolor"] = "rgba(0,0,0,0)"  # the page's own background shows through
        layout["colorway"] = SAFE_COLORWAY[theme]
        templates[theme] = template
    body = json.dumps(templates, cls=PlotlyJSONEncoder, separators=(",", ":"))
    colorway = json.dumps(SAFE_COLORWAY, separators=(",", ":"))
    header = "// Generated by book/_ext/mha_site/plotly_figures.py from plotly.io.templates.\n"
    return (
        f"{header}window.MHA_PLOTLY_TEMPLATES = {body};\nwindow.MHA_PLOTLY_COLORWAY = {colorway};\n"
    )


def _copy_full_plotly(static: Path) -> None:
    """Copy the plotly package's full plotly.min.js into ``_static`` (pages that need it)."""
    import plotly

    plotly_js = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"
    if not plotly_js.is_file():
        raise ExtensionError(f"plotly.min.js not found in the plotly package at {plotly_js}")
    copy_if_changed(plotly_js, static / PLOTLY_JS)


def write_templates(app: Sphinx) -> None:
    """Write ``_static/mha-plotly-templates.js`` (html builders only)."""
    if app.builder.format == "html":
        write_if_changed(Path(app.outdir) / "_static" / TEMPLATES_JS, plotly_templates_js())


def setup(app: Sphinx) -> None:
    # Executed chapters emit Plotly figures as the plotly mime type, with no boilerplate.
    os.environ["PLOTLY_RENDERER"] = "plotly_mimetype"
    _install_mime_renderer()
    skip = (skip_figure, None)
    app.add_node(
        mha_figure,
        html=(visit_figure_html, None),
        latex=skip,
        text=skip,
        man=skip,
        texinfo=skip,
    )
    app.connect("builder-inited", write_templates)
    app.connect("html-page-context", add_figure_scripts)
