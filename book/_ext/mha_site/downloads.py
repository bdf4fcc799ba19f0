"""The theme's download menu: every chapter's executed notebook, and the whole book's PDF.

The notebook is the one with outputs, also when they came from the execution cache; the PDF
is ``mha-book.pdf`` at the site's root, written by ``scripts/build_pdf.py`` (``make pdf``).
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


def setup(app: Sphinx) -> None:
    app.connect("doctree-read", write_cached_outputs)
    # Before the theme's header buttons (priority 501), after them for the PDF link.
    app.connect("html-page-context", offer_notebook_download, priority=500)
    app.connect("html-page-context", link_book_pdf, priority=502)
