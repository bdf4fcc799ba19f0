"""The book's explorables on the site: a cell's explorable output as its element and scripts.

A chapter shows an explorable with a code cell whose value is
``mha.display.explorables.explorable(name)``; its output carries the figure's name as
``application/vnd.mha.explorable+json`` (and, for JupyterLab, the same figure as HTML with its
scripts inline). A myst-nb mime renderer turns the name into an ``mha_explorable`` node, which
the HTML builders write as the figure's element (the same HTML the notebook shows, without
the scripts); each page with one loads the figure's scripts from ``_static``, deferred, in
order. A figure's data (a trained model, say) comes with its name; the page does not carry it
(117 kB for the trained model, which first paint would wait for): it goes to a data script of
its own, ``_figures/<name>.js`` beside the Plotly figures' (a script, so that it also loads
from ``file://``), which ``mha-explore-kit.js`` loads when the figure comes near. The script
hands the data to the kit as JSON text, and the kit puts it into the element as the notebook's
output carries it. The live model's panel gets the sizes of the files it downloads
(:mod:`.live_model`), which its button says before it is pressed, or says that they are not
in this build.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from docutils import nodes
from sphinx.application import Sphinx

from . import live_model
from .files import write_if_changed
from .plotly_figures import FIGURES_DIR

MIME = "application/vnd.mha.explorable+json"


class mha_explorable(nodes.General, nodes.Element):  # noqa: N801 (docutils node naming)
    """An explorable: its ``name``, element ``element_id`` and ``data`` (or ``None``)."""


def visit_explorable_html(translator: Any, node: mha_explorable) -> None:
    from mha.display.explorables import Explorable

    builder = translator.builder
    live = live_model.site_files(builder.app) if node["name"] == "live-minilm" else None
    data = node.get("data")
    figure = Explorable(node["name"], node["element_id"], live, data)
    name = None
    if data is not None:  # written with its page, so an incremental build keeps it current
        name = data_name(builder.current_docname, node["element_id"])
        write_if_changed(Path(builder.outdir) / FIGURES_DIR / f"{name}.js", data_script(name, data))
    translator.body.append(figure.html(scripts=False, data_name=name))
    raise nodes.SkipNode


def data_name(docname: str, element_id: str) -> str:
    """The name of a figure's data script: its page's and its element's, one per figure."""
    return f"{re.sub(r'[^A-Za-z0-9]+', '-', docname)}-{element_id}"


def data_script(name: str, data: Any) -> str:
    """The text of ``_figures/<name>.js``: it hands the figure's data, as JSON text (what the
    notebook's element holds), to ``window.mhaExploreKit.data``."""
    text = json.dumps(data, separators=(",", ":"))
    return f"window.mhaExploreKit.data({json.dumps(name)},{json.dumps(text)});\n"


def skip_explorable(translator: Any, node: mha_explorable) -> None:
    raise nodes.SkipNode


class ExplorableMimeRenderer:
    """myst-nb mime renderer plugin for ``application/vnd.mha.explorable+json``."""

    mime_priority_overrides = (
        ("html", MIME, 1),
        ("dirhtml", MIME, 1),
        ("singlehtml", MIME, 1),
    )

    @staticmethod
    def handle_mime(renderer: Any, data: Any, inline: bool) -> list[nodes.Element] | None:
        if data.mime_type != MIME:
            return None
        content = data.content
        node = mha_explorable(
            "",
            name=content["name"],
            element_id=content["id"],
            data=content.get("data"),
        )
        if inline:
            return [node]
        return [nodes.container("", node, classes=["output", "mha-explorable-output"])]


def _install_mime_renderer() -> None:
    """Add the explorables' renderer to myst-nb's mime renderer plugins (normally entry
    points)."""
    from myst_nb.core import render

    if getattr(render.load_mime_renders, "_mha_explorables", False):
        return
    original = render.load_mime_renders

    def load_mime_renders() -> list[Any]:
        return [ExplorableMimeRenderer, *original()]

    load_mime_renders._mha_explorables = True  # type: ignore[attr-defined]
    load_mime_renders._mha_site = getattr(original, "_mha_site", False)  # type: ignore[attr-defined]
    render.load_mime_renders = load_mime_renders


def add_explorable_scripts(
    app: Sphinx, pagename: str, templatename: str, context: dict, doctree: Any
) -> None:
    """Load each explorable's scripts, in order and once, on the pages that show it."""
    from mha.display.explorables import FIGURES

    if doctree is None:
        return
    loaded: list[str] = []
    for node in doctree.findall(mha_explorable):
        for script in FIGURES[node["name"]].scripts:
            if script not in loaded:
                loaded.append(script)
                app.add_js_file(script, loading_method="defer")


def setup(app: Sphinx) -> None:
    _install_mime_renderer()
    skip = (skip_explorable, None)
    app.add_node(
        mha_explorable,
        html=(visit_explorable_html, None),
        latex=skip,
        text=skip,
        man=skip,
        texinfo=skip,
    )
    app.connect("html-page-context", add_explorable_scripts)
