"""The theme's Font Awesome icons drawn as inline SVG, and its stylesheet without Font Awesome.

At the end of the build, every Font Awesome icon element of the theme (``<i class="fa-solid
fa-bars">``) becomes an ``mha-icon`` element holding the icon's inline SVG (Font Awesome
Free 6.5.2, CC BY 4.0, vendored by ``scripts/vendor_icons.py`` in ``icons.json`` beside this
file), and the served copy of the theme's stylesheet loses Font Awesome's rules (148 KB)
and web fonts (fetched before the first paint); ``_static/mha-site.css`` draws the theme's
pseudo-element icons as masks of the same shapes.
"""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path

from sphinx.application import Sphinx
from sphinx.util import logging

from . import html_edit
from .files import site_pages

logger = logging.getLogger(__name__)

ICONS_FILE = Path(__file__).with_name("icons.json")
THEME_CSS = Path("_static") / "styles" / "pydata-sphinx-theme.css"
# Font Awesome's style classes; every other ``fa-`` class but the sizes names the icon.
FA_STYLES = frozenset(
    {"fa", "fas", "far", "fab", "fa-solid", "fa-regular", "fa-brands", "fa-classic"}
)
FA_SIZES = {"fa-lg": "mha-icon-lg"}
ICON_TAGS = ("i", "span")  # the elements the theme draws an icon with
# Font Awesome's stylesheet: the licence comment that opens each of its blocks, and the
# selectors that name its classes and animations.
_FA_HEADER = re.compile(r"/\*!\s*\*\s*Font Awesome Free.*?\*/", re.S)
_SPACE = re.compile(r"\s*")
_FA_SELECTOR = re.compile(r"\.fa(?:[srb]|-[a-z0-9-]+)?(?![a-z0-9-])|@keyframes fa-")


def is_fa_class(name: str) -> bool:
    return name in FA_STYLES or name.startswith("fa-")


@functools.cache
def vendored_icons() -> dict[str, dict[str, str]]:
    """The site's icons (``icons.json``): name -> ``viewBox`` and ``path``."""
    return json.loads(ICONS_FILE.read_text(encoding="utf8"))["icons"]


def icon_svg(icon: dict[str, str]) -> str:
    return (
        f'<svg viewBox="{icon["viewBox"]}" aria-hidden="true" focusable="false">'
        f'<path d="{icon["path"]}"/></svg>'
    )


def _icon_name(classes: list[str]) -> list[str]:
    return [
        name.removeprefix("fa-")
        for name in classes
        if is_fa_class(name) and name not in FA_STYLES and name not in FA_SIZES
    ]


def inline_icons(page: str, icons: dict[str, dict[str, str]]) -> tuple[str, list[str]]:
    """``page`` with each empty Font Awesome element (``<i class="fa-solid fa-sun fa-lg">``)
    turned into an ``mha-icon mha-icon-NAME`` element holding the icon's SVG: the element,
    its other classes and attributes kept. Also the problems: icons with no vendored SVG, and
    Font Awesome classes left on other elements."""
    problems: list[str] = []
    elements = html_edit.parse(page)
    edits, inlined = [], set()
    for element in elements:
        classes = element.classes
        if element.tag not in ICON_TAGS or not any(is_fa_class(name) for name in classes):
            continue
        if element.children or not element.has_end_tag or element.inner(page).strip():
            continue  # not an icon: an element with content
        names = _icon_name(classes)
        if len(names) != 1 or names[0] not in icons:
            problems.append(f"no vendored icon for {element.outer(page)}")
            continue
        kept = [name for name in classes if not is_fa_class(name)]
        sizes = [FA_SIZES[name] for name in classes if name in FA_SIZES]
        attrs = dict(element.attrs)
        attrs["class"] = " ".join([*kept, "mha-icon", f"mha-icon-{names[0]}", *sizes])
        svg = icon_svg(icons[names[0]])
        opening = html_edit.start_tag(element.tag, attrs)
        edits.append((element.start, element.end, f"{opening}{svg}</{element.tag}>"))
        inlined.add(element)
    for element in elements:
        left = [name for name in element.classes if is_fa_class(name)]
        if left and element not in inlined:
            problems.append(f"Font Awesome classes {left} left: {element.start_tag(page)}")
    return html_edit.splice(page, edits), problems


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
    for path in site_pages(outdir):
        text = path.read_text(encoding="utf8")
        if "fa-" not in text:
            continue  # no icon's name (fa-NAME) in the page: nothing to draw (drawn already)
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


def setup(app: Sphinx) -> None:
    app.connect("build-finished", icons_without_fonts)
