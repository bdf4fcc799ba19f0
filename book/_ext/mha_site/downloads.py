"""The theme's download menu: every chapter's executed notebook, and the whole book's PDF.

The notebook is the one with outputs, also when they came from the execution cache; the PDF
is ``mha-book.pdf`` at the site's root, written by ``scripts/build_pdf.py`` (``make pdf``).
A site built without it (a plain ``jupyter-book build .``) gets the last PDF that ``make pdf``
wrote, or else a one-page PDF in its place that says how to build the book's: the link
never leads to a missing file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from docutils import nodes
from sphinx.application import Sphinx
from sphinx.util import logging

from .files import copy_if_changed

logger = logging.getLogger(__name__)

BOOK_PDF = "mha-book.pdf"  # at the site's root, written by scripts/build_pdf.py (make pdf)
PRINTED_PDF = Path("pdf") / BOOK_PDF  # where make pdf writes it, beside the site (_build/pdf)
# The page that stands in for the book's PDF in a site built without it.
PDF_NOTE = (
    "Multi-Head Attention, Measured",
    "",
    "This copy of the book's site was built without the book's PDF.",
    "To build it, run this in the book's repository:",
    "",
    "    make pdf",
    "",
    "It prints the whole book with Chromium (scripts/build_pdf.py) and puts",
    "the PDF here, at mha-book.pdf in the site, in place of this page.",
)


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
    copy_if_changed(executed, target)
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


def note_pdf(lines: tuple[str, ...]) -> bytes:
    """A one-page A4 PDF showing ``lines`` (ASCII) in Helvetica, top to bottom."""
    text = "".join(
        "(" + line.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)") + ") Tj T* "
        for line in lines
    )
    content = f"BT /F1 13 Tf 18 TL 64 760 Td {text}ET".encode("ascii")
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 595 842] /Contents 4 0 R "
        b"/Resources << /Font << /F1 5 0 R >> >> >>",
        b"<< /Length %d >>\nstream\n%s\nendstream" % (len(content), content),
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n%s\nendobj\n" % (number, body)
    table = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (
        len(objects) + 1,
        table,
    )
    return bytes(out)


def book_pdf_in_site(app: Sphinx, exception: Exception | None) -> None:
    """Give the site the book's PDF that every page links to: the one ``make pdf`` wrote last
    (``_build/pdf/mha-book.pdf``), or, when there is none and the site has none, a one-page
    PDF that says the book's is built by ``make pdf`` (which then writes over it)."""
    if exception is not None or app.builder.name != "html":
        return
    site = Path(app.outdir) / BOOK_PDF
    printed = Path(app.outdir).parent / PRINTED_PDF
    if printed.is_file():
        copy_if_changed(printed, site)
    elif not site.is_file():
        site.write_bytes(note_pdf(PDF_NOTE))


def setup(app: Sphinx) -> None:
    app.connect("doctree-read", write_cached_outputs)
    # Before the theme's header buttons (priority 501), after them for the PDF link.
    app.connect("html-page-context", offer_notebook_download, priority=500)
    app.connect("html-page-context", link_book_pdf, priority=502)
    app.connect("build-finished", book_pdf_in_site)
