"""One stylesheet per page: the stylesheets a page links, joined into one file in their order.

On a phone's network every request before the first paint costs a round trip, and a page
linked eight stylesheets. At the end of the build (after :mod:`.icons` has removed Font
Awesome from the theme's), each page's stylesheets become ``_static/styles/mha-bundle-<hash>
.css``, named by its content, its first comment naming its sources; pages with the same
stylesheets share one file, and bundles no page links are removed.
"""

from __future__ import annotations

import os
import re
import zlib
from pathlib import Path

from sphinx.application import Sphinx
from sphinx.util import logging

from . import html_edit
from .files import site_pages

logger = logging.getLogger(__name__)

BUNDLE_DIR = "_static/styles"  # beside the theme's stylesheet, whose url()s are relative
BUNDLE_PREFIX = "mha-bundle-"
BUNDLE_SOURCES = "mha bundle of:"  # its first comment, before the names of its sources
# CSS: a @charset rule, and a url() relative to the stylesheet's folder (not data:, not
# absolute, not a fragment).
_CHARSET = re.compile(r'^@charset "[^"]*";\s*', re.I)
_RELATIVE_URL = re.compile(r"""url\((["']?)(?!["']|[a-z]+:|/|#)""")


def page_stylesheets(page: str) -> list[html_edit.Element]:
    """The ``<link rel="stylesheet">`` elements of a page's head that apply to every medium."""
    head = page[: page.find("</head>")]
    return [
        link
        for link in html_edit.find(html_edit.parse(head), "link", rel="stylesheet")
        if "media" not in link.attrs
    ]


def rebase_urls(css: str, sheet: Path, folder: Path) -> str:
    """``css`` of the file ``sheet`` with its relative ``url()``s made relative to ``folder``."""
    prefix = os.path.relpath(sheet.parent, folder).replace(os.sep, "/")
    if prefix == ".":
        return css
    return _RELATIVE_URL.sub(lambda m: f"url({m[1]}{prefix}/", css)


def _bundle_name(href: str) -> str | None:
    name = href.split("?")[0].rsplit("/", 1)[-1]
    return name if name.startswith(BUNDLE_PREFIX) else None


def bundle_stylesheets(app: Sphinx, exception: Exception | None) -> None:
    """Each page's stylesheets as one file (``_static/styles/mha-bundle-<hash>.css``, named
    by its content, its first line naming its sources). The order, and so the cascade, is the
    page's; pages with the same stylesheets share one file."""
    if exception is not None or app.builder.name != "html":
        return
    outdir = Path(app.outdir)
    folder = outdir / BUNDLE_DIR
    written: set[str] = set()
    linked: set[str] = set()  # the bundles some page links, this build's or an earlier one's
    for path in site_pages(outdir):
        page = path.read_text(encoding="utf8")
        links = page_stylesheets(page)
        hrefs = [link.attrs.get("href") or "" for link in links]
        linked.update(name for href in hrefs if (name := _bundle_name(href)))
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
        linked.add(name)
        to_root = "../" * (len(path.relative_to(outdir).parts) - 1)
        one = f'<link rel="stylesheet" type="text/css" href="{to_root}{BUNDLE_DIR}/{name}" />\n'
        edits = [html_edit.removal(page, link) for link in links]
        edits[0] = (*edits[0][:2], one)
        path.write_text(html_edit.splice(page, edits), encoding="utf8")
    for stale in folder.glob(f"{BUNDLE_PREFIX}*.css"):
        if stale.name not in linked:
            stale.unlink()


def setup(app: Sphinx) -> None:
    # Last: after the theme's stylesheet has lost Font Awesome's rules (icons.py).
    app.connect("build-finished", bundle_stylesheets, priority=900)
