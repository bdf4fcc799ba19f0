"""A site built by the plain ``jupyter-book build .`` links to no missing file.

The design names ``jupyter-book build .`` as how a reader builds the book, and ``make book``
adds to it (formulas typeset in Node, the live model). This test copies the working tree (the
files git tracks or would track, as a fresh clone has them) to a temporary folder, with
the execution cache of the ``make book`` build (so that no chapter runs again: the cache is
keyed by the chapters' code), and builds it there with the plain command, without Node's
tools. It checks that the build prints no note about matplotlib (social cards are off), and
that every file a page of that site links to or loads (``href``, ``src``) is in the site,
the book's PDF link included (a page saying ``make pdf`` builds it, when it was not built).
"""

from __future__ import annotations

from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

import late_jobs
import pdf_text
import pytest
from mha_site.files import site_pages

pytestmark = pytest.mark.site

MATPLOTLIB_NOTE = "matplotlib is not installed"
REMOTE = ("http:", "https:", "mailto:", "data:", "javascript:", "#", "//")


class _Links(HTMLParser):
    """The ``href`` and ``src`` values of a page."""

    def __init__(self) -> None:
        super().__init__()
        self.links: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if name in ("href", "src") and value:
                self.links.append(value)


def missing_files(site: Path) -> list[str]:
    """Every local file that a page of ``site`` links to or loads and the site lacks (the
    theme's templates in ``_static``, ``{{ pathto(...) }}`` and all, are not pages)."""
    missing = []
    for page in site_pages(site):
        parser = _Links()
        parser.feed(page.read_text(encoding="utf8", errors="replace"))
        for link in parser.links:
            if link.startswith(REMOTE):
                continue
            path = unquote(urlsplit(link).path)
            if not path:
                continue
            target = (page.parent / path).resolve()
            if path.endswith("/"):
                target = target / "index.html"
            if not target.is_file():
                missing.append(f"{page.relative_to(site)}: {link}")
    return missing


def test_missing_files_finds_a_link_to_a_file_the_site_lacks(tmp_path: Path) -> None:
    (tmp_path / "book").mkdir()
    (tmp_path / "_static").mkdir()
    (tmp_path / "_static" / "macros.html").write_text("<link href=\"{{ pathto('x.css', 1) }}\">")
    (tmp_path / "here.pdf").write_bytes(b"%PDF")
    (tmp_path / "book" / "a.html").write_text(
        '<a href="../here.pdf">ok</a><a href="#x">ok</a><a href="https://x.org">ok</a>'
        '<script src="../gone.js?v=1"></script><a href="../absent.pdf#p=2">no</a>'
    )
    assert missing_files(tmp_path) == [
        "book/a.html: ../gone.js?v=1",
        "book/a.html: ../absent.pdf#p=2",
    ]


@pytest.fixture(scope="module")
def plain_build(built_site: Path) -> tuple[Path, str]:
    """The working tree built with ``jupyter-book build .`` in a copy; its site and output.

    The build started in the background once the PDF was built (``late_jobs.py``)."""
    returncode, output, site = late_jobs.result("plain")
    assert returncode == 0, output[-6000:]
    return site, output


def test_the_plain_build_prints_no_note_about_matplotlib(plain_build: tuple[Path, str]) -> None:
    _, output = plain_build
    notes = [line for line in output.splitlines() if MATPLOTLIB_NOTE in line]
    assert notes == []


def test_the_plain_build_links_to_no_missing_file(plain_build: tuple[Path, str]) -> None:
    """Every page's links and loads resolve in the plain site; the book's PDF link leads to a
    page that says how to build the PDF."""
    site, _ = plain_build
    assert len(list(site.rglob("*.html"))) > 20
    assert missing_files(site) == []
    text = " ".join(pdf_text.page_texts(site / "mha-book.pdf")[0].split())
    assert "built without the book's PDF" in text.replace("\u2019", "'") and "make pdf" in text
