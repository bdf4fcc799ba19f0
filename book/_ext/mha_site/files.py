"""Write the site's files only when they change, and list the pages of a built site.

Shared by the modules that copy files into the site or rewrite its pages: a file copied or
written again with the same content keeps its time, so an unchanged rebuild changes nothing.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path


def copy_if_changed(src: Path, dst: Path) -> None:
    """Copy ``src`` to ``dst`` unless ``dst`` has its size and is at least as new."""
    if (
        dst.exists()
        and dst.stat().st_size == src.stat().st_size
        and dst.stat().st_mtime >= src.stat().st_mtime
    ):
        return
    dst.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(src, dst)


def copy_tree(src: Path, dst: Path) -> None:
    """Copy the file or folder ``src`` to ``dst``, each file with :func:`copy_if_changed`."""
    if src.is_file():
        copy_if_changed(src, dst)
        return
    for path in src.rglob("*"):
        if path.is_file():
            copy_if_changed(path, dst / path.relative_to(src))


def write_if_changed(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` unless it holds that text already."""
    if path.exists() and path.read_text(encoding="utf8") == text:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf8")


def site_pages(outdir: Path) -> Iterator[Path]:
    """The HTML pages of a built site, sorted, without the theme's templates in ``_static``."""
    for path in sorted(outdir.rglob("*.html")):
        if "_static" not in path.relative_to(outdir).parts:
            yield path
