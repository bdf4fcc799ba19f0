"""Every chapter in the table of contents executes top to bottom without an error.

Each chapter is read with jupytext and run with nbclient in ``book/`` (as the book build
runs it). Only cells tagged ``raises-exception`` may raise. Plotly figures are emitted as
the Plotly mime type, as in the build.
"""

from __future__ import annotations

import os
from pathlib import Path

import jupytext
import nbformat
import pytest
from booktoc import toc_pages
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

ROOT = Path(__file__).resolve().parents[1]
BOOK = ROOT / "book"
TIMEOUT = 600  # seconds per cell: generous; the whole book must build in minutes

pytestmark = pytest.mark.chapter


def toc_chapters() -> list[str]:
    """The chapter stems of ``_toc.yml``, root first, in reading order."""
    return [Path(page).name for page in toc_pages()]


def execute(notebook: nbformat.NotebookNode, cwd: Path) -> nbformat.NotebookNode:
    """Run ``notebook`` in ``cwd``; raise ``CellExecutionError`` on an unexpected error."""
    os.environ["PLOTLY_RENDERER"] = "plotly_mimetype"  # the kernel inherits it
    client = NotebookClient(
        notebook,
        timeout=TIMEOUT,
        kernel_name="python3",
        allow_errors=False,  # a cell tagged raises-exception may still raise
        resources={"metadata": {"path": str(cwd)}},
    )
    client.execute()
    return notebook


def notebook_from_cells(*cells: tuple[str, list[str]]) -> nbformat.NotebookNode:
    notebook = nbformat.v4.new_notebook()
    for source, tags in cells:
        notebook.cells.append(nbformat.v4.new_code_cell(source, metadata={"tags": tags}))
    return notebook


def test_execute_fails_on_an_untagged_error(tmp_path: Path) -> None:
    notebook = notebook_from_cells(("x = 1", []), ("raise ValueError('boom')", []))
    with pytest.raises(CellExecutionError, match="boom"):
        execute(notebook, tmp_path)


def test_execute_allows_an_error_in_a_raises_exception_cell(tmp_path: Path) -> None:
    notebook = notebook_from_cells(
        ("import os", []),
        ("raise ValueError('expected')", ["raises-exception"]),
        ("y = os.getcwd()\nprint(y)", []),
    )
    executed = execute(notebook, tmp_path)
    assert executed.cells[1].outputs[0]["ename"] == "ValueError"
    assert executed.cells[2].outputs[0]["text"].strip() == str(tmp_path)


@pytest.mark.parametrize("stem", toc_chapters())
def test_chapter_executes_top_to_bottom(stem: str) -> None:
    notebook = jupytext.read(BOOK / f"{stem}.md")
    execute(notebook, BOOK)
