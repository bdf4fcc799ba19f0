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
- Formulas typeset at build time: at the end of the site's build,
  ``scripts/node/render_math.mjs`` (MathJax 3 in Node, npm ``mathjax-full``, one process for
  all pages) replaces each formula's
  TeX with MathJax's SVG and assistive MathML, the configuration of the site's MathJax; the
  pages then load no MathJax. Without Node or ``mathjax-full`` (``make node``), pages keep
  ``_static/mha-math.js``, which loads MathJax 3 from ``_static/mathjax/`` (copied from the
  ``sphinx-mathjax-offline`` package; ``_config.yml`` points ``mathjax_path`` at it) when the
  first formula comes near and typesets formulas as they come near the screen. The PDF's
  ``singlehtml`` build keeps MathJax in the page. The drawings of formulas off a page's
  first screen (and the glyphs only they use) are kept in ``_static/math/<page>.js``, and
  ``_static/mha-math-svg.js`` draws each as it comes near: every formula is in the page, with
  its MathML and its size, but the page is half as large (:func:`draw_formulas_when_near`).
- Lighter pages: highlighted code without the markup of tokens drawn as plain text, and
  (``book/_templates``) no Font Awesome JavaScript, no preloads of the theme's scripts, no
  search index but on the search page, and the theme's tab stops for scrollable blocks given
  as each block comes near (``_static/mha-tab-stops.js``), not by laying out the whole page.
- Icons without web fonts: at the end of the build, every Font Awesome icon element of the
  theme (``<i class="fa-solid fa-bars">``) becomes an ``mha-icon`` element holding the icon's
  inline SVG (Font Awesome Free 6.5.2, CC BY 4.0, vendored by ``scripts/vendor_icons.py`` in
  ``mha_icons.json``), and the served copy of the theme's stylesheet loses Font Awesome's
  rules (148 KB) and web fonts (fetched before the first paint); ``_static/mha-site.css``
  draws the theme's pseudo-element icons as masks of the same shapes.
  A faster first screen: the head's script files deferred, sphinx-design's stylesheet only on
  pages that use it, no MathJax in the browser (formulas typeset at build time), hidden
  code loaded when opened; the site's icon linked on every page and at the site's root.
- API reference: a ``{mha-api}`` block lists modules, one per line; each becomes a section
  with that module's autodoc documentation.
- Downloads: every chapter's executed notebook (with its outputs, also when they come from
  the execution cache) and the book's PDF are in the theme's download menu.
- Execution times: after a build, every chapter's execution time (from myst-nb's execution
  data, which the jupyter-cache keeps for cached chapters) is written to
  ``_build/execution_times.json`` for ``scripts/build_book.py`` to report.
"""

from __future__ import annotations

import functools
import html
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import time
import zlib
from pathlib import Path
from typing import Any

from docutils import nodes
from sphinx.application import Sphinx
from sphinx.errors import ExtensionError
from sphinx.util import logging


def _sibling(name: str) -> Any:
    """The module ``name`` beside this file, loaded once from its own path."""
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name(f"{name}.py"))
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


mha_figures = _sibling("mha_figures")  # the figure logic beside this file

logger = logging.getLogger(__name__)

PLOTLY_MIME = "application/vnd.plotly.v1+json"
PLOTLY_JS = "plotly/plotly.min.js"  # relative to _static; the full bundle, copied when needed
# plotly.js's cartesian partial bundle, vendored in book/_static/plotly/ with its licence
# (npm plotly.js-cartesian-dist-min, the version of the plotly package's plotly.js).
PLOTLY_CARTESIAN_JS = "plotly/plotly-cartesian.min.js"
TEMPLATES_JS = "mha-plotly-templates.js"
BOOK_PDF = "mha-book.pdf"  # at the site's root, written by scripts/build_pdf.py (make pdf)
FIGURES_DIR = "_figures"  # in the html output folder: one data script per figure
# Colour-blind-safe qualitative colours (Okabe and Ito), in the order traces take them; the
# dark theme has grey where the light one has black.
SAFE_COLORWAY = {
    "light": ["#0072B2", "#E69F00", "#009E73", "#D55E00", "#56B4E9", "#CC79A7", "#000000"],
    "dark": ["#56B4E9", "#E69F00", "#009E73", "#D55E00", "#F0E442", "#CC79A7", "#BBBBBB"],
}
MATHJAX_PACKAGE = "sphinx-mathjax-offline"
# What MathJax 3's tex-svg bundle may load on demand (TeX extensions, menu, a11y, fonts).
MATHJAX_PARTS = ("tex-svg.js", "input", "output/svg", "ui", "a11y", "sre", "adaptors")
FIGURE_CLASS = "mha-plotly"
# This extension's code and the book's own static files (``_static/mha-*``): a change to any
# of them rebuilds every page (Sphinx copies static files only when some page is written).
EXTENSION_FILES = ("mha_site.py", "mha_figures.py", "mha_icons.json")
OWN_STATIC = "mha-*"


def extension_files(here: Path) -> list[Path]:
    """The files whose change rebuilds every page: this extension's, ``_static/mha-*`` and
    the typesetter."""
    static = sorted((here.parent / "_static").glob(OWN_STATIC))
    own = [here / name for name in EXTENSION_FILES] + [path for path in static if path.is_file()]
    return [*own, MATH_RENDERER]


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


class FigureError(ValueError):
    """A figure breaks the site's rules (for example, it has no title)."""


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


def figure_html(figure: dict[str, Any], fig_id: str) -> str:
    """The placeholder of one figure: an image with a name and a text alternative.

    The ``div.mha-plotly`` keeps the figure's height before it is drawn (wide and narrow
    heights as CSS variables); ``mha-plotly.js`` loads ``_figures/<id>.js`` and draws the
    figure there when it scrolls near the viewport.

    Raises:
        FigureError: if the figure has no title (the title is its accessible name).
    """
    figure, auto = figure_payload(figure)
    title = mha_figures.title_text(figure)
    if not title:
        raise FigureError(f"figure {fig_id} has no title; every figure needs layout.title")
    wide, narrow = mha_figures.figure_heights(figure)
    narrow_patch = json.dumps(mha_figures.narrow_layout(figure), separators=(",", ":"))
    subtitles = json.dumps(mha_figures.subplot_titles(figure), separators=(",", ":"))
    description = mha_figures.describe(figure)
    mode = "auto" if auto else "fixed"
    return (
        f'<figure class="{FIGURE_CLASS}-figure">\n'
        f'<div class="{FIGURE_CLASS}" id="{fig_id}" role="img" '
        f'aria-label="{html.escape(title)}" aria-describedby="{fig_id}-text" '
        f'data-theme-template="{mode}" '
        f'data-narrow="{html.escape(narrow_patch)}" data-subtitles="{html.escape(subtitles)}" '
        f'style="--mha-height: {wide}px; --mha-narrow-height: {narrow}px"></div>\n'
        f'<figcaption class="{FIGURE_CLASS}-text" id="{fig_id}-text">'
        f"{html.escape(description)}</figcaption>\n</figure>\n"
    )


class mha_figure(nodes.General, nodes.Element):  # noqa: N801 (docutils node naming)
    """A Plotly figure: its id and its JSON (``figure``), written out by HTML builders."""


def visit_figure_html(translator: Any, node: mha_figure) -> None:
    figure = json.loads(node["figure"])
    fig_id = node["fig_id"]
    try:
        translator.body.append(figure_html(figure, fig_id))
    except FigureError as error:
        logger.warning(str(error), location=node)
        raise nodes.SkipNode from error
    shipped, _ = figure_payload(figure)
    path = Path(translator.builder.outdir) / FIGURES_DIR / f"{fig_id}.js"
    text = figure_script(fig_id, shipped)
    if not path.exists() or path.read_text(encoding="utf8") != text:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf8")
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


def add_math_script(
    app: Sphinx, pagename: str, templatename: str, context: dict, doctree: Any
) -> None:
    """Give pages with math ``mha-math.js``, which typesets formulas as they come near.

    On the site (the ``html`` builder) MathJax itself is not in the page: ``mha-math.js``
    loads it (its ``data-mathjax``) when the first formula comes near the screen, so a page
    whose formulas are further down does not download and run MathJax's 2 MB before the reader
    gets there. Other builders (the PDF's ``singlehtml``) keep MathJax in the page.

    Where Node and mathjax-full are installed, :func:`typeset_math` typesets the formulas at
    the end of the build and removes this script (and MathJax's configuration) from the page.
    """
    if doctree is None:
        return
    is_math = lambda node: isinstance(node, nodes.math | nodes.math_block)  # noqa: E731
    if not next(doctree.findall(is_math), None):
        return
    attributes = {}
    if app.builder.name == "html":
        scripts = context.get("script_files", [])
        path = app.config.mathjax_path  # Sphinx names it by its place in _static
        mathjax = [
            js for js in scripts if getattr(js, "filename", None) in (path, f"_static/{path}")
        ]
        for js in mathjax:
            scripts.remove(js)
        if mathjax:
            attributes["data-mathjax"] = context["pathto"](f"_static/{app.config.mathjax_path}", 1)
    app.add_js_file("mha-math.js", loading_method="defer", **attributes)


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
    types = set().union(*(mha_figures.trace_types(figure) for figure in figures))
    bundle = PLOTLY_CARTESIAN_JS if types <= mha_figures.CARTESIAN_TRACES else PLOTLY_JS
    if bundle == PLOTLY_JS:
        _copy_full_plotly(Path(app.outdir) / "_static")
    app.add_js_file(
        "mha-plotly.js",
        loading_method="defer",
        **{"data-plotly": bundle, "data-templates": TEMPLATES_JS, "data-figures": FIGURES_DIR},
    )


# --------------------------------------------------------------------------- a fast first screen

DESIGN_ASSETS = ("sphinx-design.min.css", "design-tabs.js")  # sphinx-design's, on every page
# Scripts that inline scripts of the head use as the parser reaches them (the theme sets
# ``DOCUMENTATION_OPTIONS.pagename`` inline): they stay where they are (0.4 KB).
PARSER_SCRIPTS = ("documentation_options.js",)
_DESIGN_CLASS = re.compile(r'class="(?:[^"]*\s)?sd-')


def uses_design(body: str) -> bool:
    """Whether a page's body has a sphinx-design element (``sd-`` classes: dropdowns, tabs,
    grids, cards, badges)."""
    return bool(_DESIGN_CLASS.search(body))


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


def favicon_at_the_root(app: Sphinx, exception: Exception | None) -> None:
    """Copy the site's icon (``html_favicon``, linked in every page's head) to the site's root
    as ``favicon.ico``, where browsers look for it on pages that do not name one."""
    if exception is not None or app.builder.name != "html" or not app.config.html_favicon:
        return
    icon = Path(app.outdir) / "_static" / Path(app.config.html_favicon).name
    if icon.is_file():
        _copy_if_changed(icon, Path(app.outdir) / "favicon.ico")


# --------------------------------------------------------------------------- icons

ICONS_FILE = Path(__file__).with_name("mha_icons.json")
THEME_CSS = Path("_static") / "styles" / "pydata-sphinx-theme.css"
# Font Awesome's style classes; every other ``fa-`` class but the sizes names the icon.
FA_STYLES = frozenset(
    {"fa", "fas", "far", "fab", "fa-solid", "fa-regular", "fa-brands", "fa-classic"}
)
FA_SIZES = {"fa-lg": "mha-icon-lg"}
_ICON_ELEMENT = re.compile(
    r'<(?P<tag>i|span)(?P<before>\s[^>]*?)?\sclass="(?P<classes>[^"]*)"(?P<after>[^>]*)>'
    r"(?P<inner>\s*)</(?P=tag)>"
)
_CLASS_ATTRIBUTE = re.compile(r'\sclass="([^"]*)"')
_FA_HEADER = re.compile(r"/\*!\s*\*\s*Font Awesome Free.*?\*/", re.S)
_SPACE = re.compile(r"\s*")
_FA_SELECTOR = re.compile(r"\.fa(?:[srb]|-[a-z0-9-]+)?(?![a-z0-9-])|@keyframes fa-")


def is_fa_class(name: str) -> bool:
    return name in FA_STYLES or name.startswith("fa-")


@functools.cache
def vendored_icons() -> dict[str, dict[str, str]]:
    """The site's icons (``mha_icons.json``): name -> ``viewBox`` and ``path``."""
    return json.loads(ICONS_FILE.read_text(encoding="utf8"))["icons"]


def icon_svg(icon: dict[str, str]) -> str:
    return (
        f'<svg viewBox="{icon["viewBox"]}" aria-hidden="true" focusable="false">'
        f'<path d="{icon["path"]}"/></svg>'
    )


def inline_icons(page: str, icons: dict[str, dict[str, str]]) -> tuple[str, list[str]]:
    """``page`` with each empty Font Awesome element (``<i class="fa-solid fa-sun fa-lg">``)
    turned into an ``mha-icon mha-icon-NAME`` element holding the icon's SVG: the element,
    its other classes and attributes kept. Also the problems: icons with no vendored SVG, and
    Font Awesome classes left on other elements."""
    problems: list[str] = []

    def inline(match: re.Match[str]) -> str:
        classes = match["classes"].split()
        if not any(is_fa_class(name) for name in classes):
            return match.group(0)
        names = [
            name.removeprefix("fa-")
            for name in classes
            if is_fa_class(name) and name not in FA_STYLES and name not in FA_SIZES
        ]
        if len(names) != 1 or names[0] not in icons:
            problems.append(f"no vendored icon for {match.group(0)}")
            return match.group(0)
        kept = [name for name in classes if not is_fa_class(name)]
        sizes = [FA_SIZES[name] for name in classes if name in FA_SIZES]
        new_classes = " ".join([*kept, "mha-icon", f"mha-icon-{names[0]}", *sizes])
        return (
            f'<{match["tag"]}{match["before"] or ""} class="{new_classes}"{match["after"]}>'
            f"{icon_svg(icons[names[0]])}</{match['tag']}>"
        )

    page = _ICON_ELEMENT.sub(inline, page)
    for found in _CLASS_ATTRIBUTE.finditer(page):
        left = [name for name in found[1].split() if is_fa_class(name)]
        if left:
            problems.append(f"Font Awesome classes {left} left: {found.group(0)}")
    return page, problems


def _rule_end(css: str, start: int) -> int:
    """The end of the CSS rule (at-rules with nested blocks included) that starts at
    ``start``."""
    depth, index = 0, css.index("{", start)
    while True:
        if css[index] == "{":
            depth += 1
        elif css[index] == "}":
            depth -= 1
            if depth == 0:
                return index + 1
        index += 1


def is_fa_rule(rule: str) -> bool:
    """Whether a CSS rule is one of Font Awesome's: its selector (or, in ``@media``, its
    rules' selectors) names a Font Awesome class or animation, it declares Font Awesome's
    custom properties, or its font."""
    prelude, _, body = rule.partition("{")
    selectors = rule if prelude.startswith("@media") else prelude  # nested rules' selectors
    return bool(
        _FA_SELECTOR.search(selectors)
        or "Font Awesome" in body
        or body.lstrip().startswith("--fa-")
    )


def without_font_awesome(css: str) -> str:
    """The theme's stylesheet without Font Awesome's blocks: each from its licence comment
    through the rules of Font Awesome that follow it (up to the next comment or rule of
    another kind)."""
    while found := _FA_HEADER.search(css):
        end = found.end()
        while True:
            start = _SPACE.match(css, end).end()
            if start >= len(css) or css.startswith("/*", start):
                break
            rule_end = _rule_end(css, start)
            if not is_fa_rule(css[start:rule_end]):
                break
            end = rule_end
        css = css[: found.start()] + css[end:]
    return css


def icons_without_fonts(app: Sphinx, exception: Exception | None) -> None:
    """Every page's Font Awesome icons as inline SVG (:func:`inline_icons`), and the served
    theme stylesheet without Font Awesome (:func:`without_font_awesome`). An icon with no
    vendored SVG is a build warning (``scripts/vendor_icons.py`` adds it)."""
    if exception is not None or app.builder.name != "html":
        return
    outdir = Path(app.outdir)
    icons = vendored_icons()
    for path in sorted(outdir.rglob("*.html")):
        if "_static" in path.relative_to(outdir).parts:
            continue
        text = path.read_text(encoding="utf8")
        page, problems = inline_icons(text, icons)
        for problem in problems:
            logger.warning(f"{path.relative_to(outdir)}: {problem[:300]}")
        if page != text:
            path.write_text(page, encoding="utf8")
    theme_css = outdir / THEME_CSS
    if not theme_css.is_file():
        logger.warning(f"mha_site: {THEME_CSS} is missing; Font Awesome's rules not removed")
        return
    css = theme_css.read_text(encoding="utf8")
    stripped = without_font_awesome(css)
    if "Font Awesome" in stripped:
        logger.warning(f"mha_site: {THEME_CSS} still names Font Awesome after its removal")
    if stripped != css:
        theme_css.write_text(stripped, encoding="utf8")


# --------------------------------------------------------------------------- one stylesheet

BUNDLE_DIR = "_static/styles"  # beside the theme's stylesheet, whose url()s are relative
BUNDLE_PREFIX = "mha-bundle-"
BUNDLE_SOURCES = "mha bundle of:"  # its first comment, before the names of its sources
_STYLESHEET_LINK = re.compile(r"<link\b[^>]*>\n?")
_HREF = re.compile(r'\bhref="([^"]+)"')
# A url() relative to the stylesheet's folder (not data:, not absolute, not a fragment).
_CHARSET = re.compile(r'^@charset "[^"]*";\s*', re.I)
_RELATIVE_URL = re.compile(r"""url\((["']?)(?!["']|[a-z]+:|/|#)""")


def page_stylesheets(page: str) -> list[re.Match[str]]:
    """The ``<link rel="stylesheet">`` elements of a page's head that apply to every medium."""
    head = page[: page.find("</head>")]
    return [
        link
        for link in _STYLESHEET_LINK.finditer(head)
        if 'rel="stylesheet"' in link.group(0) and "media=" not in link.group(0)
    ]


def rebase_urls(css: str, sheet: Path, folder: Path) -> str:
    """``css`` of the file ``sheet`` with its relative ``url()``s made relative to ``folder``."""
    prefix = os.path.relpath(sheet.parent, folder).replace(os.sep, "/")
    if prefix == ".":
        return css
    return _RELATIVE_URL.sub(lambda m: f"url({m[1]}{prefix}/", css)


def bundle_stylesheets(app: Sphinx, exception: Exception | None) -> None:
    """Each page's stylesheets as one file (``_static/styles/mha-bundle-<hash>.css``, named
    by its content, its first line naming its sources): on a phone's network every request
    before the first paint costs a round trip, and a page linked eight. The order, and so
    the cascade, is the page's; pages with the same stylesheets share one file."""
    if exception is not None or app.builder.name != "html":
        return
    outdir = Path(app.outdir)
    folder = outdir / BUNDLE_DIR
    written: set[str] = set()
    for path in sorted(outdir.rglob("*.html")):
        if "_static" in path.relative_to(outdir).parts:
            continue
        page = path.read_text(encoding="utf8")
        links = page_stylesheets(page)
        hrefs = [_HREF.search(link.group(0))[1] for link in links]
        if len(links) < 2:
            continue
        sheets = [(path.parent / href.split("?")[0]).resolve() for href in hrefs]
        if any(not sheet.is_file() for sheet in sheets):
            logger.warning(f"mha_site: {path.name} links a stylesheet that is missing: {hrefs}")
            continue
        names = [sheet.relative_to(outdir.resolve()).as_posix() for sheet in sheets]
        # A @charset counts only as a file's first bytes: the bundle's own, the sources' out.
        parts = ['@charset "UTF-8";', f"/* {BUNDLE_SOURCES} {', '.join(names)} */"]
        parts += [
            _CHARSET.sub("", rebase_urls(s.read_text(encoding="utf8"), s, folder)) for s in sheets
        ]
        bundle = "\n".join(parts) + "\n"
        name = f"{BUNDLE_PREFIX}{zlib.crc32(bundle.encode()):08x}.css"
        if name not in written:
            folder.mkdir(parents=True, exist_ok=True)
            (folder / name).write_text(bundle, encoding="utf8")
            written.add(name)
        to_root = "../" * (len(path.relative_to(outdir).parts) - 1)
        one = f'<link rel="stylesheet" type="text/css" href="{to_root}{BUNDLE_DIR}/{name}" />\n'
        out, pos = [], 0
        for index, link in enumerate(links):
            out += [page[pos : link.start()], one if index == 0 else ""]
            pos = link.end()
        path.write_text("".join(out) + page[pos:], encoding="utf8")
    linked = {
        name
        for path in outdir.rglob("*.html")
        for name in re.findall(rf"{BUNDLE_PREFIX}[0-9a-f]{{8}}\.css", path.read_text("utf8"))
    }
    for stale in folder.glob(f"{BUNDLE_PREFIX}*.css"):
        if stale.name not in linked:
            stale.unlink()


# --------------------------------------------------------------------------- math typeset at build

NODE_DIR = Path(__file__).resolve().parents[2] / "scripts" / "node"
MATH_RENDERER = NODE_DIR / "render_math.mjs"  # MathJax (npm mathjax-full) in Node, all pages
MATHJAX_FULL = NODE_DIR / "node_modules" / "mathjax-full" / "package.json"
# "global": one <svg> of glyph shapes per page, which its formulas <use>; "local": each
# formula's own (larger pages, even gzip'd).
MATH_FONT_CACHE = "global"
_MATH_ELEMENT = re.compile(
    r'(?P<open><(?P<tag>span|div) class="math notranslate nohighlight"[^>]*>)'
    r"(?P<inner>.*?)(?P<close></(?P=tag)>)",
    re.S,
)
_MATH_SPAN = r'<span class="math notranslate nohighlight">[^<]*</span>'
_MATH_LINK = re.compile(rf"(?P<open><a\b[^>]*>)(?P<inner>(?:\s*{_MATH_SPAN})+\s*)(?=</a>)")
_CLIENT_MATH = re.compile(
    r'<script [^>]*src="[^"]*mha-math\.js[^"]*"[^>]*></script>\n?'
    r"|<script>window\.MathJax = .*?</script>\n?"
)


def math_renderer() -> list[str] | None:
    """The command that typesets formulas at build time, or None when Node or the npm
    package mathjax-full is missing (``make node`` installs it): then pages keep
    ``mha-math.js``, which typesets them in the browser."""
    node = shutil.which("node")
    if node is None or not MATHJAX_FULL.is_file():
        return None
    return [node, str(MATH_RENDERER)]


def plain_tex(tex: str) -> str:
    r"""A plain reading of a formula's TeX (``\(W^O\)`` reads "W^O"), to name a link."""
    tex = re.sub(r"^\\[(\[]|\\[)\]]$", "", tex.strip())
    tex = re.sub(r"\\(mathrm|mathbf|mathit|mathcal|operatorname|boldsymbol|text)\b", "", tex)
    tex = re.sub(r"\\[,;:! ]", " ", tex)
    tex = re.sub(r"\\([A-Za-z]+)", r" \1 ", tex)
    return " ".join(re.sub(r"[{}\\]", "", tex).split())


def name_math_links(page: str) -> str:
    """A link whose only text is formulas (a heading made of math, in the page's contents) is
    named by a plain reading of their TeX: the typeset SVG gives it no name of its own."""

    def name(match: re.Match[str]) -> str:
        if "aria-label=" in match.group("open"):
            return match.group(0)
        texts = [html.unescape(m.group("inner")) for m in _MATH_ELEMENT.finditer(match["inner"])]
        label = html.escape(" ".join(plain_tex(tex) for tex in texts), quote=True)
        return f'{match["open"][:-1]} aria-label="{label}">{match["inner"]}'

    return _MATH_LINK.sub(name, page)


def raw_formulas(page: str) -> list[dict[str, Any]]:
    """The formulas of a page still in TeX: each ``span.math`` (inline) and ``div.math``
    (display) that has no typeset ``mjx-container``, with its inner HTML."""
    return [
        {"display": m["tag"] == "div", "html": m["inner"]}
        for m in _MATH_ELEMENT.finditer(page)
        if "<mjx-container" not in m["inner"]
    ]


def typeset_page(page: str, rendered: dict[str, Any]) -> str:
    """A page with its formulas (:func:`raw_formulas`, in order) replaced by MathJax's
    output (``rendered``: ``formulas``, ``css`` and the glyph ``cache`` of render_math.mjs),
    MathJax's stylesheet in the head, and without the scripts that typeset in the browser
    (``mha-math.js`` and MathJax's configuration)."""
    formulas = iter(rendered["formulas"])

    def typeset(match: re.Match[str]) -> str:
        if "<mjx-container" in match["inner"]:
            return match.group(0)
        return match["open"] + next(formulas) + match["close"]

    page = _MATH_ELEMENT.sub(typeset, page)
    page = _CLIENT_MATH.sub("", page)
    css = " ".join(rendered["css"].split())
    page = page.replace("</head>", f'<style id="mha-mathjax">{css}</style>\n</head>', 1)
    if rendered.get("cache"):
        head, tail = page.rsplit("</body>", 1)
        page = f"{head}{rendered['cache']}\n</body>{tail}"
    return page


# A formula's drawing (its outer <svg>, which may hold a table's inner <svg>s) just before
# its assistive MathML.
_FORMULA_SVG = re.compile(
    r"(?P<container><mjx-container\b[^>]*>)(?P<open><svg\b[^>]*>)(?P<inner>.*?)"
    r"(?P<close></svg>)(?=<mjx-assistive-mml)",
    re.S,
)
_GLYPH = re.compile(r'<path id="(?P<id>[^"]+)"[^>]*></path>')
_GLYPH_CACHE = re.compile(
    r'(?P<open><svg [^>]*id="MJX-SVG-global-cache"[^>]*><defs>)(?P<paths>.*?)(?P<close></defs>)',
    re.S,
)
_GLYPH_USE = re.compile(r'xlink:href="#(?P<id>[^"]+)"')
MATH_DIR = "_static/math"  # one script per page: the drawings of its formulas off the first screen
MATH_DRAWER = "mha-math-svg.js"
# Formulas drawn in the page as built: those before the article's first subsection (what a
# first screen shows), at most this many.
FIRST_SCREEN_FORMULAS = 24


def first_screen_end(page: str) -> int:
    """The index in ``page`` where its article's first subsection begins (or its end)."""
    article = page.find("<article")
    if article == -1:
        return len(page)
    first = page.find("<section", article)
    second = page.find("<section", first + 1) if first != -1 else -1
    return second if second != -1 else len(page)


def draw_formulas_when_near(page: str, data_url: str, drawer_url: str) -> tuple[str, str | None]:
    """A typeset page whose formulas off the first screen are drawn when they come near.

    Each such formula keeps its container, its assistive MathML (read by screen readers) and
    its ``<svg>`` element with the drawing's size and baseline, so the page's layout is final
    at once; the drawing inside it (``data-mha-svg``: its index) and
    the glyph shapes only those drawings use move to a script of the page (``data_url``),
    which ``mha-math-svg.js`` (``drawer_url``) puts back as each formula comes within a screen
    of the viewport, and all of them before printing. Both scripts are deferred: they do not
    hold up the first paint. Returns the page and the script (None when every formula is on
    the first screen).
    """
    end = first_screen_end(page)
    drawings: list[str] = []
    kept_glyphs: set[str] = set()
    out, pos, kept = [], 0, 0
    for match in _FORMULA_SVG.finditer(page):
        out.append(page[pos : match.start()])
        pos = match.end()
        if match.start() < end and kept < FIRST_SCREEN_FORMULAS:
            kept += 1
            kept_glyphs.update(_GLYPH_USE.findall(match["inner"]))
            out.append(match.group(0))
            continue
        drawings.append(match["inner"])
        index = len(drawings) - 1
        out.append(f'{match["container"]}{match["open"][:-1]} data-mha-svg="{index}"></svg>')
    out.append(page[pos:])
    page = "".join(out)
    if not drawings:
        return page, None
    cache = _GLYPH_CACHE.search(page)
    glyphs = {m["id"]: m.group(0) for m in _GLYPH.finditer(cache["paths"])} if cache else {}
    later = "".join(path for name, path in glyphs.items() if name not in kept_glyphs)
    if cache:
        first_glyphs = "".join(path for name, path in glyphs.items() if name in kept_glyphs)
        page = page[: cache.start("paths")] + first_glyphs + page[cache.end("paths") :]
    payload = json.dumps({"glyphs": later, "drawings": drawings}, separators=(",", ":"))
    script = "window.mhaMathSvg = " + payload.replace("</", "<\\/") + ";\n"
    tags = (
        f'<script defer src="{html.escape(data_url)}"></script>\n'
        f'<script defer src="{html.escape(drawer_url)}"></script>\n'
    )
    return page.replace("</head>", f"{tags}</head>", 1), script


def typeset_math(app: Sphinx, exception: Exception | None) -> None:
    """Typeset every formula of the site at build time (``render_math.mjs``: MathJax in Node,
    one process for all the pages written): the pages hold the SVG and no longer load
    MathJax. Without Node or mathjax-full, pages keep typesetting in the browser."""
    if exception is not None or app.builder.name != "html":
        return
    command = math_renderer()
    if command is None:
        logger.info("mha_site: Node or mathjax-full missing; formulas are typeset in the browser")
        return
    pages = {}
    for path in sorted(Path(app.outdir).rglob("*.html")):
        text = path.read_text(encoding="utf8")
        if 'class="math notranslate nohighlight"' in text:
            text = name_math_links(text)
            formulas = raw_formulas(text)
            if formulas:
                pages[path] = (text, formulas)
    if not pages:
        return
    request = {"fontCache": MATH_FONT_CACHE, "pages": [f for _, f in pages.values()]}
    start = time.monotonic()
    result = subprocess.run(
        command, input=json.dumps(request), capture_output=True, text=True, encoding="utf8"
    )
    if result.returncode != 0:
        raise ExtensionError(f"render_math.mjs failed: {result.stderr.strip()[-2000:]}")
    output = json.loads(result.stdout)
    rendered, version = output["pages"], output["version"]
    for (path, (text, _)), page in zip(pages.items(), rendered, strict=True):
        for error in page["errors"]:
            found = re.search(r'data-mjx-error="([^"]*)"', error)
            logger.warning(f"TeX error in {path.name}: {found[1] if found else error[:200]}")
        name = path.relative_to(app.outdir)
        to_root = "../" * (len(name.parts) - 1)
        data_url = f"{to_root}{MATH_DIR}/{'__'.join(name.with_suffix('.js').parts)}"
        text, script = draw_formulas_when_near(
            typeset_page(text, page), data_url, f"{to_root}_static/{MATH_DRAWER}"
        )
        if script is not None:
            data = Path(app.outdir) / MATH_DIR / data_url.rsplit("/", 1)[1]
            data.parent.mkdir(parents=True, exist_ok=True)
            data.write_text(script, encoding="utf8")
        path.write_text(text, encoding="utf8")
    count = sum(len(formulas) for _, formulas in pages.values())
    logger.info(
        f"mha_site: typeset {count} formulas of {len(pages)} pages "
        f"in {time.monotonic() - start:.1f} s (MathJax {version})"
    )


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
        layout["colorway"] = SAFE_COLORWAY[theme]
        templates[theme] = template
    body = json.dumps(templates, cls=PlotlyJSONEncoder, separators=(",", ":"))
    colorway = json.dumps(SAFE_COLORWAY, separators=(",", ":"))
    header = "// Generated by book/_ext/mha_site.py from plotly.io.templates.\n"
    return (
        f"{header}window.MHA_PLOTLY_TEMPLATES = {body};\nwindow.MHA_PLOTLY_COLORWAY = {colorway};\n"
    )


def _copy_full_plotly(static: Path) -> None:
    """Copy the plotly package's full plotly.min.js into ``_static`` (pages that need it)."""
    import plotly

    plotly_js = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"
    if not plotly_js.is_file():
        raise ExtensionError(f"plotly.min.js not found in the plotly package at {plotly_js}")
    _copy_if_changed(plotly_js, static / PLOTLY_JS)


def copy_static_assets(app: Sphinx) -> None:
    """Copy plotly.js and MathJax into the site's ``_static`` folder (html builders only)."""
    if app.builder.format != "html":
        return
    static = Path(app.outdir) / "_static"
    templates = static / TEMPLATES_JS
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


# --------------------------------------------------------------------------- downloads and site URL


def pages_url(repository_url: str) -> str:
    """The GitHub Pages address of a GitHub repository: ``https://OWNER.github.io/REPO/``.

    Raises:
        ValueError: if ``repository_url`` is not ``https://github.com/OWNER/REPO``.
    """
    match = re.fullmatch(r"https://github\.com/([^/]+)/([^/]+?)(?:\.git)?/?", repository_url)
    if not match:
        raise ValueError(
            f"repository.url must be https://github.com/OWNER/REPO; got {repository_url!r}"
        )
    owner, repo = match.groups()
    if repo.lower() == f"{owner.lower()}.github.io":
        return f"https://{owner.lower()}.github.io/"
    return f"https://{owner.lower()}.github.io/{repo}/"


def set_site_url(app: Sphinx, config: Any) -> None:
    """Derive the site's address (Open Graph) from ``repository.url`` unless it is set."""
    url = (config.html_theme_options or {}).get("repository_url", "")
    if url and not getattr(config, "ogp_site_url", ""):
        config.ogp_site_url = pages_url(url)
    if getattr(config, "ogp_site_name", False) is None:
        config.ogp_site_name = config.html_title


def offer_notebook_download(
    app: Sphinx, pagename: str, templatename: str, context: dict, doctree: Any
) -> None:
    """Offer the executed notebook (with outputs) of every chapter in the download menu.

    The theme copies ``_build/jupyter_execute/<page>.ipynb`` into ``_sources`` only when a
    launch provider (Binder, Colab, ...) is configured; the site has none (they load code
    from other hosts), so this does the copy and sets the theme's ``ipynb_source``.
    """
    if context.get("ipynb_source") or not str(context.get("sourcename", "")).endswith(".md"):
        return
    executed = Path(app.outdir).parent / "jupyter_execute" / f"{pagename}.ipynb"
    if not executed.is_file():
        return
    target = Path(app.outdir) / "_sources" / f"{pagename}.ipynb"
    _copy_if_changed(executed, target)
    context["ipynb_source"] = f"{pagename}.ipynb"


def write_cached_outputs(app: Sphinx, doctree: nodes.document) -> None:
    """Write the executed notebook of a chapter whose outputs came from the execution cache.

    myst-nb writes ``_build/jupyter_execute/<page>.ipynb`` (the notebook the download menu
    offers) from the notebook it parsed. A chapter executed in this build has its outputs in
    it; for an unchanged chapter myst-nb merges the cached outputs into a copy and writes the
    original, without outputs. This writes the merged notebook instead.
    """
    config = getattr(app.env, "mystnb_config", None)
    if config is None or config.execution_mode != "cache":
        return
    path = Path(config.output_folder, *f"{app.env.docname}.ipynb".split("/"))
    if not path.is_file():
        return
    import nbformat
    from jupyter_cache import get_cache

    notebook = nbformat.read(path, as_version=4)
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    if not code or any(cell.get("execution_count") for cell in code):
        return  # nothing to execute, or executed in this build
    try:
        _, merged = get_cache(config.execution_cache_path).merge_match_into_notebook(notebook)
    except KeyError:
        logger.warning(
            f"{app.env.docname}: no executed notebook in the execution cache matches it; "
            f"{path.name} has no outputs",
            location=app.env.docname,
        )
        return
    nbformat.write(merged, path)


def link_book_pdf(
    app: Sphinx, pagename: str, templatename: str, context: dict, doctree: Any
) -> None:
    """Add the whole book's PDF (``make pdf``) to every page's download menu."""
    for button in context.get("header_buttons", []):
        if button.get("label") == "download-buttons":
            button["buttons"].append(
                {
                    "type": "link",
                    "url": context["pathto"](BOOK_PDF, 1),
                    "text": "book .pdf",
                    "tooltip": "Download the whole book as a PDF",
                    "icon": "fas fa-book",
                    "label": "download-book-pdf-button",
                }
            )


# --------------------------------------------------------------------------- valid HTML

_SUMMARY_P = re.compile(r"(<summary\b[^>]*>\s*)((?:<p\b[^>]*>.*?</p>\s*)+)(</summary>)", re.S)


def summary_without_paragraphs(body: str) -> str:
    """``<summary><p class=...>text</p></summary>`` with ``<span>`` for ``<p>``.

    myst-nb writes the "Show code cell" toggles with paragraphs inside ``<summary>``, which
    HTML does not allow (the Nu HTML checker reports it); ``mha-site.css`` gives the spans
    the paragraphs' styles.
    """

    def fix(match: re.Match[str]) -> str:
        inner = re.sub(r"<p\b", "<span", match.group(2))
        inner = inner.replace("</p>", "</span>")
        return match.group(1) + inner + match.group(3)

    return _SUMMARY_P.sub(fix, body)


_SUMMARY_LABEL = re.compile(r"(<summary\b[^>]*?)\s+aria-label=\"[^\"]*\"")


def summary_named_by_its_text(body: str) -> str:
    """``<summary>`` toggles without an ``aria-label``: they are named by the text they show.

    myst-nb labels each "Show code cell source" toggle "Toggle hidden content", a name that
    does not contain its visible label (WCAG 2.5.3, axe's label-content-name-mismatch).
    """
    return _SUMMARY_LABEL.sub(r"\1", body)


def bibliography_list_items(body: str) -> str:
    """Bibliography entries as ``role="listitem"`` of their ``role="list"``.

    docutils marks each entry ``doc-biblioentry``, a role DPUB-ARIA 1.1 deprecates in favour
    of ``listitem``; a list of them is a list without items to assistive technology (axe's
    aria-required-children).
    """
    return body.replace('role="doc-biblioentry"', 'role="listitem"')


# Pygments token classes that may be drawn as plain text (names, punctuation, whitespace),
# when both of the theme's code styles (light and dark) draw them in the code's own colour.
PLAIN_TOKEN_CANDIDATES = frozenset({"n", "nn", "nx", "p", "pm", "w"})
_CODE_BLOCK = re.compile(r'(<div class="highlight"><pre>)(.*?)(</pre>)', re.S)
_TOKEN_SPAN = re.compile(r'<span class="([a-z0-9]+)">([^<]*)</span>')


@functools.lru_cache
def plain_token_classes(style_names: tuple[str, ...]) -> frozenset[str]:
    """The candidate token classes that every one of the pygments styles draws as plain text:
    in the style's text colour, not bold, italic, underlined, boxed or on a background."""
    from pygments.styles import get_style_by_name
    from pygments.token import STANDARD_TYPES, Token
    from pygments.util import ClassNotFound

    plain = set(PLAIN_TOKEN_CANDIDATES)
    types = {name: ttype for ttype, name in STANDARD_TYPES.items()}
    for name in style_names:
        try:
            style = get_style_by_name(name)
        except ClassNotFound:
            return frozenset()
        text = style.style_for_token(Token.Text)
        for cls in list(plain):
            token = style.style_for_token(types[cls])
            marks = ("bold", "italic", "underline", "bgcolor", "border")
            if token["color"] != text["color"] or any(token[mark] for mark in marks):
                plain.discard(cls)
    return frozenset(plain)


def plain_code_spans(body: str, plain: frozenset[str]) -> str:
    """Highlighted code without the ``<span class="n">`` wrappers of tokens drawn as plain text.

    They are a third of a chapter page's HTML (every name and bracket of every code cell) and
    change nothing on screen; fewer nodes also make the page cheaper to lay out.
    """
    if not plain:
        return body

    def unwrap(token: re.Match[str]) -> str:
        return token.group(2) if token.group(1) in plain else token.group(0)

    def block(match: re.Match[str]) -> str:
        return match.group(1) + _TOKEN_SPAN.sub(unwrap, match.group(2)) + match.group(3)

    return _CODE_BLOCK.sub(block, body)


def fix_page_html(
    app: Sphinx, pagename: str, templatename: str, context: dict, doctree: Any
) -> None:
    if "body" in context:
        body = summary_named_by_its_text(summary_without_paragraphs(context["body"]))
        styles = [context.get(f"theme_pygments_{mode}_style") for mode in ("light", "dark")]
        plain = plain_token_classes(tuple(styles)) if all(styles) else None
        body = plain_code_spans(bibliography_list_items(body), plain or frozenset())
        if app.builder.name == "html":
            body = hidden_code_loaded_when_shown(app, pagename, body)
        context["body"] = body


def named_toggles(add_toggles: Any) -> Any:
    """``add_toggles`` (the theme's ``add_collapse_checkboxes``), then name every toggle.

    The theme puts a page's sub-pages in the sidebar under a ``<summary>`` holding only a
    chevron, which a screen reader announces without a name (axe's ``summary-name``). Each
    such toggle is named after the page whose sub-pages it shows.
    """

    @functools.wraps(add_toggles)
    def add_and_name(soup: Any) -> None:
        add_toggles(soup)
        for summary in soup.select("li.has-children > details > summary"):
            if not summary.get_text(strip=True) and not summary.get("aria-label"):
                link = summary.find_parent("li").find("a", recursive=False)
                title = link.get_text(" ", strip=True) if link else "this section"
                summary["aria-label"] = f"Pages of {title}"

    return add_and_name


def name_sidebar_toggles(app: Sphinx) -> None:
    """Name the sidebar's sub-page toggles (see :func:`named_toggles`)."""
    try:
        from pydata_sphinx_theme import toctree
    except ImportError:
        return
    if not hasattr(toctree, "add_collapse_checkboxes"):
        raise ExtensionError("pydata_sphinx_theme.toctree has no add_collapse_checkboxes")
    if not getattr(toctree.add_collapse_checkboxes, "__wrapped__", None):
        toctree.add_collapse_checkboxes = named_toggles(toctree.add_collapse_checkboxes)


HIDDEN_CODE_DIR = "_static/hidden-code"  # one script with the list of code blocks per page
_HIDDEN_INPUT = '<details class="admonition hide above-input">'
_CELL_INPUT = '<div class="cell_input docutils container">'
_DIV_TAG = re.compile(r"<div\b|</div>")


def _div_end(body: str, start: int) -> int:
    """The index just past the ``</div>`` closing the ``<div`` that opens at ``start``."""
    depth = 0
    for tag in _DIV_TAG.finditer(body, start):
        depth += 1 if tag.group(0) == "<div" else -1
        if depth == 0:
            return tag.end()
    raise ValueError(f"an unclosed <div> at {start}")


def take_hidden_code(body: str, url: str) -> tuple[str, list[str]]:
    """``body`` with the code of every hidden cell input moved out, and that code.

    A chapter's hidden inputs (``hide-input``: the code behind a figure or a computed
    paragraph) are closed until the reader opens them, yet they can make up half of the
    page's HTML. Each one's code is replaced by an empty placeholder that names ``url`` (a
    script with the list of the code blocks) and its index there; ``mha-hidden-code.js`` fills it in
    when its toggle is first opened.
    """
    codes: list[str] = []
    out, pos = [], 0
    while (hidden := body.find(_HIDDEN_INPUT, pos)) != -1:
        cell = body.find(_CELL_INPUT, hidden)
        if cell == -1:
            break
        end = _div_end(body, cell)
        codes.append(body[cell + len(_CELL_INPUT) : end - len("</div>")])
        out.append(body[pos:cell])
        out.append(
            f'<div class="cell_input docutils container" data-mha-code="{html.escape(url)}" '
            f'data-mha-index="{len(codes) - 1}"></div>'
        )
        pos = end
    out.append(body[pos:])
    return "".join(out), codes


def hidden_code_script(url: str, codes: list[str]) -> str:
    """The file of a page's hidden code: a script that hands the list to mha-hidden-code.js
    under the ``url`` the page names it by. A script (not JSON fetched by the page) so that it
    also loads from ``file://``."""
    payload = json.dumps(codes, separators=(",", ":")).replace("</", "<\\/")
    return f"window.mhaHiddenCode({json.dumps(url)},{payload});\n"


def hidden_code_loaded_when_shown(app: Sphinx, pagename: str, body: str) -> str:
    """Write the page's hidden code to ``_static/hidden-code/<page>.js`` (see
    :func:`take_hidden_code`) and give the page the script that loads it."""
    name = pagename.replace("/", "__") + ".js"
    url = "../" * pagename.count("/") + f"{HIDDEN_CODE_DIR}/{name}"
    body, codes = take_hidden_code(body, url)
    if codes:
        folder = Path(app.outdir) / HIDDEN_CODE_DIR
        folder.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(hidden_code_script(url, codes), encoding="utf8")
        app.add_js_file("mha-hidden-code.js", loading_method="defer")
    return body


_LETTER_ITEM = re.compile(r"^(\s*)([A-Za-z]{1,2})\.(?=\s|$)")
_FIELD = re.compile(r"^:(param|returns?|raises?)\b[^:]*:\s*")


def keep_letters_as_text(
    app: Sphinx, what: str, name: str, obj: Any, options: Any, lines: list[str]
) -> None:
    """A parameter described as just ``B.`` reads "B.", not as a list item lettered B.

    docutils takes a field body that starts with one or two letters and a period for an
    enumerated list (napoleon writes ``:param batch_size:`` and ``B.`` on the next line);
    a backslash keeps the period literal.
    """
    for index, line in enumerate(lines):
        field = _FIELD.match(line)
        if field and line[field.end() :].strip():
            head, rest = line[: field.end()], line[field.end() :]
            lines[index] = head + _LETTER_ITEM.sub(r"\1\2\\.", rest)
        elif index and _FIELD.match(lines[index - 1]) and lines[index - 1].rstrip().endswith(":"):
            lines[index] = _LETTER_ITEM.sub(r"\1\2\\.", line)


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
    skip = (skip_figure, None)
    app.add_node(
        mha_figure,
        html=(visit_figure_html, None),
        latex=skip,
        text=skip,
        man=skip,
        texinfo=skip,
    )
    app.connect("config-inited", set_site_url)
    app.connect("builder-inited", copy_static_assets)
    # Before the theme's header buttons (priority 501), after them for the PDF link.
    app.connect("html-page-context", offer_notebook_download, priority=500)
    app.connect("html-page-context", link_book_pdf, priority=502)
    app.connect("source-read", expand_api_blocks)
    app.connect("doctree-read", write_cached_outputs)
    app.connect("html-page-context", add_figure_scripts)
    # After sphinx.ext.mathjax has added MathJax (deferred scripts run in order).
    app.connect("html-page-context", add_math_script, priority=600)
    app.connect("html-page-context", fix_page_html)
    # Last: after every extension and the theme have added their scripts and stylesheets.
    app.connect("html-page-context", lighter_head, priority=900)
    app.connect("builder-inited", name_sidebar_toggles)
    app.connect("autodoc-process-docstring", keep_letters_as_text, priority=600)
    app.connect("build-finished", write_execution_times)
    app.connect("build-finished", favicon_at_the_root)
    app.connect("build-finished", typeset_math)
    app.connect("build-finished", icons_without_fonts)
    # Last: after the theme's stylesheet has lost Font Awesome's rules.
    app.connect("build-finished", bundle_stylesheets, priority=900)
    app.add_css_file("mha-site.css")
    here = Path(__file__).parent
    code = b"".join(path.read_bytes() for path in extension_files(here))
    return {
        "version": "1.0",
        "env_version": zlib.crc32(code),
        "parallel_read_safe": True,
        "parallel_write_safe": True,
    }
