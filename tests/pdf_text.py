"""A PDF's text by page and its outline's titles, read with PDFium (``pypdfium2``).

PDFium reads the book's PDF of 500 pages in seconds; a reader written in Python took over a
minute for the same text.
"""

from __future__ import annotations

from pathlib import Path

import pypdfium2 as pdfium


def page_texts(path: Path) -> list[str]:
    """The text of each page of the PDF at ``path``, in page order."""
    pdf = pdfium.PdfDocument(path)
    try:
        return [pdf[i].get_textpage().get_text_range() for i in range(len(pdf))]
    finally:
        pdf.close()


def outline_titles(path: Path) -> list[str]:
    """The title of every entry of the PDF's outline (its bookmarks), at every level."""
    pdf = pdfium.PdfDocument(path)
    try:
        return [bookmark.get_title() for bookmark in pdf.get_toc()]
    finally:
        pdf.close()
