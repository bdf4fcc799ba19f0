"""The book's explorables on the site: a cell's explorable output as its element and scripts.

A chapter shows an explorable with a code cell whose value is
``mha.display.explorables.explorable(name)``; its output carries the figure's name as
``application/vnd.mha.explorable+json`` (and, for JupyterLab, the same figure as HTML with its
scripts inline). A myst-nb mime renderer turns the name into an ``mha_explorable`` node, which
the HTML builders write as the figure's element (the same HTML the notebook shows, without
the scripts); each page with one loads the figure's scripts from ``_static``, deferred, in
order. A figure's data (a trained model, say) comes with its name and is written inside its
element, as in the notebook. The live model's panel gets the sizes of the files it downloads
(:mod:`.live_model`), which its button says before it is pressed, or says that they are not
in this build.
"""

from __future__ import annotations

from typing import Any

from docutils import nodes
from sphinx.application import Sphinx

from . import live_model

MIME = "application/vnd.mha.explorable+json"


class mha_explorable(nodes.General, nodes.Element):  # noqa: N801 (docutils node naming)
    """An explorable: its ``name``, element ``element_id`` and ``data`` (or ``None``)."""


def visit_explorable_html(translator: Any, node: mha_explorable) -> None:
    from mha.display.explorables import Explorable

    app = translator.builder.app
    live = live_model.site_files(app) if node["name"] == "live-minilm" else None
    figure = Explorable(node["name"], node["element_id"], live, node.get("data"))
    translator.body.append(figure.html(scripts=False))
    raise nodes.SkipNode


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
