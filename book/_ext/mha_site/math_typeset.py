"""The site's formulas typeset when it is built, or else in the reader's browser.

At the end of the site's build, ``scripts/node/render_math.mjs`` (MathJax 3 in Node, npm
``mathjax-full``, one process for all pages, with the configuration of the site's MathJax)
replaces each formula's TeX with MathJax's SVG and assistive MathML: the pages then load no
MathJax, and :mod:`.math_when_near` keeps the drawings off a page's first screen in a script
of the page. Without Node or ``mathjax-full`` (``make node``), pages keep
``_static/mha-math.js``, which loads MathJax 3 from ``_static/mathjax/`` (copied here from
the ``sphinx-mathjax-offline`` package; ``_config.yml`` points ``mathjax_path`` at it) when
the first formula comes near and typesets formulas as they come near the screen. The PDF's
``singlehtml`` build keeps MathJax in the page.
"""

from __future__ import annotations

import html
import importlib.util
import json
import re
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

from docutils import nodes
from sphinx.application import Sphinx
from sphinx.errors import ExtensionError
from sphinx.util import logging

from . import html_edit
from .files import copy_tree, site_pages
from .math_when_near import MATH_DIR, MATH_DRAWER, draw_formulas_when_near

logger = logging.getLogger(__name__)

MATHJAX_PACKAGE = "sphinx-mathjax-offline"
# What MathJax 3's tex-svg bundle may load on demand (TeX extensions, menu, a11y, fonts).
MATHJAX_PARTS = ("tex-svg.js", "input", "output/svg", "ui", "a11y", "sre", "adaptors")
NODE_DIR = Path(__file__).resolve().parents[3] / "scripts" / "node"
MATH_RENDERER = NODE_DIR / "render_math.mjs"  # MathJax (npm mathjax-full) in Node, all pages
MATHJAX_FULL = NODE_DIR / "node_modules" / "mathjax-full" / "package.json"
# "global": one <svg> of glyph shapes per page, which its formulas <use>; "local": each
# formula's own (larger pages, even gzip'd).
MATH_FONT_CACHE = "global"
MATH_CLASS = "math notranslate nohighlight"  # Sphinx's formulas: span (inline), div (display)
CLIENT_MATH_JS = "mha-math.js"
MATHJAX_CONFIG = "window.MathJax = "  # the text of sphinx.ext.mathjax's inline configuration


def copy_mathjax(app: Sphinx) -> None:
    """Copy MathJax into the site's ``_static/mathjax`` (html builders only).

    Raises:
        ExtensionError: if the ``sphinx-mathjax-offline`` package is not installed.
    """
    if app.builder.format != "html":
        return
    spec = importlib.util.find_spec(MATHJAX_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ExtensionError(
            f"MathJax is served by the site: install the {MATHJAX_PACKAGE!r} package "
            f"(pip install {MATHJAX_PACKAGE})"
        )
    mathjax = Path(next(iter(spec.submodule_search_locations))) / "static" / "mathjax"
    static = Path(app.outdir) / "_static"
    for part in MATHJAX_PARTS:
        copy_tree(mathjax / part, static / "mathjax" / part)


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
    app.add_js_file(CLIENT_MATH_JS, loading_method="defer", **attributes)


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


def _formulas(elements: list[html_edit.Element]) -> list[html_edit.Element]:
    """The formulas Sphinx wrote: ``span.math`` (inline) and ``div.math`` (display)."""
    return [e for e in elements if e.tag in ("span", "div") and e.attrs.get("class") == MATH_CLASS]


def name_math_links(page: str) -> str:
    """A link whose only content is formulas still in TeX (a heading made of math, in the
    page's contents) is named by a plain reading of their TeX: the typeset SVG gives it no
    name of its own."""
    edits = []
    for link in html_edit.find(html_edit.parse(page), "a"):
        kids = link.children
        if not kids or "aria-label" in link.attrs or link.text_between_children(page).strip():
            continue
        if any(k.tag != "span" or k.attrs != {"class": MATH_CLASS} or k.children for k in kids):
            continue
        label = " ".join(plain_tex(html.unescape(kid.inner(page))) for kid in kids)
        opening = link.start_tag(page)
        edits.append(
            (link.start, link.open_end, f'{opening[:-1]} aria-label="{html.escape(label)}">')
        )
    return html_edit.splice(page, edits)


def raw_formulas(page: str) -> list[dict[str, Any]]:
    """The formulas of a page still in TeX: each ``span.math`` (inline) and ``div.math``
    (display) that has no typeset ``mjx-container``, with its inner HTML."""
    return [
        {"display": formula.tag == "div", "html": formula.inner(page)}
        for formula in _formulas(html_edit.parse(page))
        if not any(e.tag == "mjx-container" for e in formula.descendants())
    ]


def _client_math(page: str, element: html_edit.Element) -> bool:
    """Whether ``element`` is a script that typesets in the browser: ``mha-math.js`` or
    MathJax's configuration."""
    if element.tag != "script":
        return False
    src = element.attrs.get("src") or ""
    if src.split("?")[0].rsplit("/", 1)[-1] == CLIENT_MATH_JS:
        return True
    return not element.attrs and element.inner(page).startswith(MATHJAX_CONFIG)


def typeset_page(page: str, rendered: dict[str, Any]) -> str:
    """A page with its formulas (:func:`raw_formulas`, in order) replaced by MathJax's
    output (``rendered``: ``formulas``, ``css`` and the glyph ``cache`` of render_math.mjs),
    MathJax's stylesheet in the head, and without the scripts that typeset in the browser
    (``mha-math.js`` and MathJax's configuration)."""
    elements = html_edit.parse(page)
    formulas = iter(rendered["formulas"])
    edits = [
        (formula.open_end, formula.close_start, next(formulas))
        for formula in _formulas(elements)
        if not any(e.tag == "mjx-container" for e in formula.descendants())
    ]
    edits += [html_edit.removal(page, e) for e in elements if _client_math(page, e)]
    head = next(html_edit.find(elements, "head"))
    css = " ".join(rendered["css"].split())
    edits.append((head.close_start, head.close_start, f'<style id="mha-mathjax">{css}</style>\n'))
    if rendered.get("cache"):
        body = next(html_edit.find(elements, "body"))
        edits.append((body.close_start, body.close_start, f"{rendered['cache']}\n"))
    return html_edit.splice(page, edits)


def tex_error(error: str) -> str:
    """The message of a formula MathJax could not typeset (its ``data-mjx-error``)."""
    for element in html_edit.parse(error):
        if element.attrs.get("data-mjx-error"):
            return element.attrs["data-mjx-error"] or ""
    return error[:200]


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
    outdir = Path(app.outdir)
    pages = {}
    for path in site_pages(outdir):
        text = path.read_text(encoding="utf8")
        if f'class="{MATH_CLASS}"' in text:
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
            logger.warning(f"TeX error in {path.name}: {tex_error(error)}")
        name = path.relative_to(outdir)
        to_root = "../" * (len(name.parts) - 1)
        data_url = f"{to_root}{MATH_DIR}/{'__'.join(name.with_suffix('.js').parts)}"
        text, script = draw_formulas_when_near(
            typeset_page(text, page), data_url, f"{to_root}_static/{MATH_DRAWER}"
        )
        if script is not None:
            data = outdir / MATH_DIR / data_url.rsplit("/", 1)[1]
            data.parent.mkdir(parents=True, exist_ok=True)
            data.write_text(script, encoding="utf8")
        path.write_text(text, encoding="utf8")
    count = sum(len(formulas) for _, formulas in pages.values())
    logger.info(
        f"mha_site: typeset {count} formulas of {len(pages)} pages "
        f"in {time.monotonic() - start:.1f} s (MathJax {version})"
    )


def setup(app: Sphinx) -> None:
    app.connect("builder-inited", copy_mathjax)
    # After sphinx.ext.mathjax has added MathJax (deferred scripts run in order).
    app.connect("html-page-context", add_math_script, priority=600)
    app.connect("build-finished", typeset_math)
