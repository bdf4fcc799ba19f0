"""The book's own Sphinx extension: an offline site.

- Plotly figures. Chapters call ``fig.show()``; the build sets ``PLOTLY_RENDERER`` to
  ``plotly_mimetype`` so each figure is stored as ``application/vnd.plotly.v1+json`` (the
  same output JupyterLab renders with the plotly wheel's extension). A myst-nb mime
  renderer turns that output into a ``<div class="mha-plotly">`` and a JSON data block;
  ``_static/mha-plotly.js`` draws it with the one shared copy of plotly.js, which is copied
  from the installed ``plotly`` package into ``_static/plotly/`` and loaded only by pages
  that have a figure. Figures that use Plotly's default template follow the site's
  light/dark theme (the default template is dropped from the page and applied in the
  browser, which keeps pages small).
- MathJax 3 is served from ``_static/mathjax/`` (copied from the ``sphinx-mathjax-offline``
  package; ``_config.yml`` points ``mathjax_path`` at it).
- API reference: a ``{mha-api}`` block lists modules, one per line; each becomes a section
  with that module's autodoc documentation.
- Execution times: after a build, every chapter's execution time (from myst-nb's execution
  data, which the jupyter-cache keeps for cached chapters) is written to
  ``_build/execution_times.json`` for ``scripts/build_book.py`` to report.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
from pathlib import Path
from typing import Any

from docutils import nodes
from sphinx.application import Sphinx
from sphinx.errors import ExtensionError
from sphinx.util import logging

logger = logging.getLogger(__name__)

PLOTLY_MIME = "application/vnd.plotly.v1+json"
PLOTLY_JS = "plotly/plotly.min.js"  # relative to _static
MATHJAX_PACKAGE = "sphinx-mathjax-offline"
# What MathJax 3's tex-chtml bundle may load on demand (fonts, TeX extensions, menu, a11y).
MATHJAX_PARTS = ("tex-chtml.js", "input", "output/chtml", "ui", "a11y", "sre", "adaptors")
FIGURE_CLASS = "mha-plotly"
EXEC_TIMES_FILE = "execution_times.json"  # in the parent of the html output folder

API_BLOCK = re.compile(r"^```\{mha-api\}[^\n]*\n(?P<body>.*?)^```[ \t]*$", re.M | re.S)


# --------------------------------------------------------------------------- plotly figures


def _default_template() -> dict[str, Any]:
    """Plotly's default template as it appears in a figure's JSON."""
    import plotly.io as pio
    from plotly.utils import PlotlyJSONEncoder

    template = pio.templates[pio.templates.default]
    return json.loads(json.dumps(template.to_plotly_json(), cls=PlotlyJSONEncoder))


_DEFAULT_TEMPLATE: dict[str, Any] | None = None


def figure_html(figure: dict[str, Any], fig_id: str) -> str:
    """HTML for one Plotly figure: an empty container and its JSON, drawn by mha-plotly.js.

    A figure whose template is Plotly's default has the template removed and is marked
    ``data-theme-template="auto"``: the browser applies the light or dark template.
    """
    global _DEFAULT_TEMPLATE
    if _DEFAULT_TEMPLATE is None:
        _DEFAULT_TEMPLATE = _default_template()
    figure = dict(figure)
    layout = dict(figure.get("layout") or {})
    auto = layout.get("template") in (None, _DEFAULT_TEMPLATE)
    layout.pop("template", None) if auto else None
    figure["layout"] = layout
    payload = json.dumps(figure, separators=(",", ":"), allow_nan=False)
    payload = payload.replace("</", "<\\/")  # cannot close the <script> element
    mode = "auto" if auto else "fixed"
    return (
        f'<div class="{FIGURE_CLASS}" id="{fig_id}" data-theme-template="{mode}"></div>\n'
        f'<script type="application/json" class="{FIGURE_CLASS}-data" '
        f'data-for="{fig_id}">{payload}</script>\n'
    )


class PlotlyMimeRenderer:
    """myst-nb mime renderer plugin for ``application/vnd.plotly.v1+json``."""

    mime_priority_overrides = (("html", PLOTLY_MIME, 1), ("dirhtml", PLOTLY_MIME, 1))

    @staticmethod
    def handle_mime(renderer: Any, data: Any, inline: bool) -> list[nodes.Element] | None:
        if data.mime_type != PLOTLY_MIME:
            return None
        content = data.content
        figure = json.loads(content) if isinstance(content, str | bytes) else content
        docname = getattr(renderer.renderer.document.settings, "env", None)
        prefix = re.sub(r"[^A-Za-z0-9]+", "-", docname.docname) if docname else "doc"
        fig_id = f"{FIGURE_CLASS}-{prefix}-{data.cell_index}-{data.output_index}"
        node = nodes.raw("", figure_html(figure, fig_id), format="html")
        node["classes"] += ["output", "mha-plotly-output"]
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


def _page_has_figure(doctree: nodes.document | None) -> bool:
    if doctree is None:
        return False
    return any(f'class="{FIGURE_CLASS}"' in node.astext() for node in doctree.findall(nodes.raw))


def add_figure_scripts(
    app: Sphinx, pagename: str, templatename: str, context: dict, doctree: Any
) -> None:
    """Load plotly.js and the figure loader only on pages that show a figure."""
    if _page_has_figure(doctree):
        app.add_js_file(PLOTLY_JS, loading_method="defer")
        app.add_js_file("mha-plotly-templates.js", loading_method="defer")
        app.add_js_file("mha-plotly.js", loading_method="defer")


# --------------------------------------------------------------------------- static files


def _copy_if_changed(src: Path, dst: Path) -> None:
    if (
        dst.exists()
        and dst.stat().st_size == src.stat().st_size
        and dst.stat().st_mtime >= src.stat().st_mtime
    ):
        return
    dst.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(src, dst)


def _copy_tree(src: Path, dst: Path) -> None:
    if src.is_file():
        _copy_if_changed(src, dst)
        return
    for path in src.rglob("*"):
        if path.is_file():
            _copy_if_changed(path, dst / path.relative_to(src))


def _plotly_templates_js() -> str:
    import plotly.io as pio
    from plotly.utils import PlotlyJSONEncoder

    templates = {}
    for theme, name in (("light", "plotly"), ("dark", "plotly_dark")):
        template = pio.templates[name].to_plotly_json()
        layout = template.setdefault("layout", {})
        layout["paper_bgcolor"] = "rgba(0,0,0,0)"  # the page's own background shows through
        templates[theme] = template
    body = json.dumps(templates, cls=PlotlyJSONEncoder, separators=(",", ":"))
    header = "// Generated by book/_ext/mha_site.py from plotly.io.templates.\n"
    return f"{header}window.MHA_PLOTLY_TEMPLATES = {body};\n"


def copy_static_assets(app: Sphinx) -> None:
    """Copy plotly.js and MathJax into the site's ``_static`` folder (html builders only)."""
    if app.builder.format != "html":
        return
    static = Path(app.outdir) / "_static"
    import plotly

    plotly_js = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"
    if not plotly_js.is_file():
        raise ExtensionError(f"plotly.min.js not found in the plotly package at {plotly_js}")
    _copy_if_changed(plotly_js, static / PLOTLY_JS)
    templates = static / "mha-plotly-templates.js"
    text = _plotly_templates_js()
    if not templates.exists() or templates.read_text(encoding="utf8") != text:
        templates.parent.mkdir(parents=True, exist_ok=True)
        templates.write_text(text, encoding="utf8")

    spec = importlib.util.find_spec(MATHJAX_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ExtensionError(
            f"MathJax is served by the site: install the {MATHJAX_PACKAGE!r} package "
            f"(pip install {MATHJAX_PACKAGE})"
        )
    mathjax = Path(next(iter(spec.submodule_search_locations))) / "static" / "mathjax"
    for part in MATHJAX_PARTS:
        _copy_tree(mathjax / part, static / "mathjax" / part)


# --------------------------------------------------------------------------- API reference


def api_markdown(modules: list[str]) -> str:
    """MyST text documenting each module: a heading, then autodoc of its public members.

    The top-level package shows only its docstring (its members are documented in the
    submodules that define them).
    """
    parts = []
    for name in modules:
        members = "" if "." not in name else "   :members:\n"
        label = "api-" + name.replace(".", "-").replace("_", "-")
        parts.append(
            f"({label})=\n## `{name}`\n\n```{{eval-rst}}\n.. automodule:: {name}\n{members}```\n"
        )
    return "\n".join(parts)


def api_modules(text: str) -> list[str]:
    """The module names listed in the ``{mha-api}`` blocks of a page, in order."""
    names = []
    for match in API_BLOCK.finditer(text):
        for line in match.group("body").splitlines():
            line = line.split("#", 1)[0].strip()
            if line and not line.startswith(":"):
                names.append(line)
    return names


def expand_api_blocks(app: Sphinx, docname: str, source: list[str]) -> None:
    """Replace each ``{mha-api}`` block by the generated module sections."""
    if "{mha-api}" not in source[0]:
        return

    def expand(match: re.Match[str]) -> str:
        return api_markdown(api_modules(match.group(0)))

    source[0] = API_BLOCK.sub(expand, source[0])


# --------------------------------------------------------------------------- execution times


def write_execution_times(app: Sphinx, exception: Exception | None) -> None:
    """Write each executed document's execution data to ``_build/execution_times.json``."""
    metadata = getattr(app.env, "nb_metadata", {}) or {}
    times = {}
    for docname in sorted(app.env.found_docs):
        data = (metadata.get(docname) or {}).get("exec_data")
        if data:
            times[docname] = {
                "runtime": data.get("runtime"),
                "method": data.get("method"),
                "succeeded": data.get("succeeded"),
                "error": data.get("error"),
                "mtime": data.get("mtime"),
            }
    path = Path(app.outdir).parent / EXEC_TIMES_FILE
    path.write_text(json.dumps(times, indent=2, sort_keys=True) + "\n", encoding="utf8")


def setup(app: Sphinx) -> dict[str, Any]:
    # Executed chapters emit Plotly figures as the plotly mime type, with no boilerplate.
    os.environ["PLOTLY_RENDERER"] = "plotly_mimetype"
    _install_mime_renderer()
    app.connect("builder-inited", copy_static_assets)
    app.connect("source-read", expand_api_blocks)
    app.connect("html-page-context", add_figure_scripts)
    app.connect("build-finished", write_execution_times)
    app.add_css_file("mha-site.css")
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
