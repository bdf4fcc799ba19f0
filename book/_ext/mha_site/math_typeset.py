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

from . import html_edit, math_when_near
from .files import copy_tree, site_pages
from .math_when_near import MATH_DIR, MATH_DRAWER

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


class MathPage:
    """A written page whose formulas are still TeX, read once: what typesetting changes in it.

    ``formulas``: the ``span.math`` (inline) and ``div.math`` (display) elements Sphinx wrote
    that hold TeX, in order; ``links``: the links made only of such formulas (a heading made of
    math, in the page's contents), which the typeset SVG would leave without a name;
    ``client_math``: the scripts that would typeset in the browser (``mha-math.js`` and
    MathJax's configuration); ``first_screen``: where the article's first subsection begins.
    """

    def __init__(self, text: str) -> None:
        self.text = text
        elements = html_edit.parse(text)
        math = [
            e for e in elements if e.tag in ("span", "div") and e.attrs.get("class") == MATH_CLASS
        ]
        self.formulas = [
            e for e in math if not any(d.tag == "mjx-container" for d in e.descendants())
        ]
        self.links = [e for e in html_edit.find(elements, "a") if _named_by_math(text, e)]
        self.client_math = [e for e in elements if _client_math(text, e)]
        self.head = next(html_edit.find(elements, "head"))
        self.body = next(html_edit.find(elements, "body"))
        self.first_screen = math_when_near.first_screen_end(elements, len(text))

    def raw_formulas(self) -> list[dict[str, Any]]:
        """The formulas as render_math.mjs reads them: display or not, and their inner HTML."""
        return [{"display": f.tag == "div", "html": f.inner(self.text)} for f in self.formulas]

    def typeset(
        self, rendered: dict[str, Any], data_url: str, drawer_url: str
    ) -> tuple[str, str | None]:
        """The page with its formulas typeset (``rendered``: render_math.mjs's page), its math
        links named, MathJax's stylesheet and glyphs in it and the client's scripts out; and
        the page's script of drawings (None when every formula is drawn in the page): see
        :func:`.math_when_near.draw_formulas_when_near`. The page loads that script and
        ``mha-math-svg.js`` (``data_url``, ``drawer_url``) deferred."""
        first = [f.start < self.first_screen for f in self.formulas]
        formulas, cache, script = math_when_near.draw_formulas_when_near(rendered, first)
        edits = [
            (f.open_end, f.close_start, h) for f, h in zip(self.formulas, formulas, strict=True)
        ]
        edits += [self._named(link) for link in self.links]
        edits += [html_edit.removal(self.text, element) for element in self.client_math]
        css = " ".join(rendered["css"].split())
        head = [f'<style id="mha-mathjax">{css}</style>\n']
        if script is not None:
            head.append(f'<script defer src="{html.escape(data_url)}"></script>\n')
            head.append(f'<script defer src="{html.escape(drawer_url)}"></script>\n')
        edits.append((self.head.close_start, self.head.close_start, "".join(head)))
        if cache:
            edits.append((self.body.close_start, self.body.close_start, f"{cache}\n"))
        return html_edit.splice(self.text, edits), script

    def _named(self, link: html_edit.Element) -> tuple[int, int, str]:
        label = " ".join(plain_tex(html.unescape(kid.inner(self.text))) for kid in link.children)
        opening = link.start_tag(self.text)
        return link.start, link.open_end, f'{opening[:-1]} aria-label="{html.escape(label)}">'


def _named_by_math(page: str, link: html_edit.Element) -> bool:
    """Whether a link has no name but its formulas' TeX: its content is only formulas (spans
    with TeX only) and white space, and it has no ``aria-label``."""
    kids = link.children
    if not kids or "aria-label" in link.attrs or link.text_between_children(page).strip():
        return False
    return all(
        k.tag == "span" and k.attrs == {"class": MATH_CLASS} and not k.children for k in kids
    )


def _client_math(page: str, element: html_edit.Element) -> bool:
    """Whether ``element`` is a script that typesets in the browser: ``mha-math.js`` or
    MathJax's configuration."""
    if element.tag != "script":
        return False
    src = element.attrs.get("src") or ""
    if src.split("?")[0].rsplit("/", 1)[-1] == CLIENT_MATH_JS:
        return True
    return not element.attrs and element.inner(page).startswith(MATHJAX_CONFIG)


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
        # a typeset formula holds one mjx-container: fewer containers than formulas, some in TeX
        if text.count(f'class="{MATH_CLASS}"') > text.count("<mjx-container"):
            page = MathPage(text)
            if page.formulas:
                pages[path] = page
    if not pages:
        return
    request = {"fontCache": MATH_FONT_CACHE, "pages": [p.raw_formulas() for p in pages.values()]}
    start = time.monotonic()
    result = subprocess.run(
        command, input=json.dumps(request), capture_output=True, text=True, encoding="utf8"
    )
    if result.returncode != 0:
        raise ExtensionError(f"render_math.mjs failed: {result.stderr.strip()[-2000:]}")
    output = json.loads(result.stdout)
    rendered, version = output["pages"], output["version"]
    for (path, page), typeset in zip(pages.items(), rendered, strict=True):
        for error in typeset["errors"]:
            logger.warning(f"TeX error in {path.name}: {tex_error(error)}")
        name = path.relative_to(outdir)
        to_root = "../" * (len(name.parts) - 1)
        data_url = f"{to_root}{MATH_DIR}/{'__'.join(name.with_suffix('.js').parts)}"
        text, script = page.typeset(typeset, data_url, f"{to_root}_static/{MATH_DRAWER}")
        if script is not None:
            data = outdir / MATH_DIR / data_url.rsplit("/", 1)[1]
            data.parent.mkdir(parents=True, exist_ok=True)
            data.write_text(script, encoding="utf8")
        path.write_text(text, encoding="utf8")
    count = sum(len(page.formulas) for page in pages.values())
    logger.info(
        f"mha_site: typeset {count} formulas of {len(pages)} pages "
        f"in {time.monotonic() - start:.1f} s (MathJax {version})"
    )


def setup(app: Sphinx) -> None:
    app.connect("builder-inited", copy_mathjax)
    # After sphinx.ext.mathjax has added MathJax (deferred scripts run in order).
    app.connect("html-page-context", add_math_script, priority=600)
    app.connect("build-finished", typeset_math)
