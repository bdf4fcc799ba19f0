"""Every chapter in the table of contents executes top to bottom without an error.

Each chapter is read with jupytext and run with nbclient in ``book/`` (as the book build
runs it). Only cells tagged ``raises-exception`` may raise. Plotly figures are emitted as
the Plotly mime type, as in the build.

Two things differ from the book build, on purpose:

- the kernel runs under other numerical kernels and one thread (``portability.py``), while
  the build keeps the machine's defaults: a claim that holds only under one machine's
  rounding fails one of the two;
- exact comparisons of floating-point arrays are audited (``exactness.py``): each must say
  which exact operation makes it hold.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import jupytext
import nbformat
import pytest
from booktoc import toc_pages
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError
from portability import portable_env

ROOT = Path(__file__).resolve().parents[1]
BOOK = ROOT / "book"
TIMEOUT = 600  # seconds per cell: generous; the whole book must build in minutes

pytestmark = pytest.mark.chapter


def toc_chapters() -> list[str]:
    """The chapter stems of ``_toc.yml``, root first, in reading order."""
    return [Path(page).name for page in toc_pages()]


AUDIT_START = f"""
import sys as _sys
_sys.path.insert(0, {str(ROOT / "tests")!r})
import exactness as _exactness
_exactness.install()
del _sys.path[0]
"""
AUDIT_END = "import json as _json; print(_json.dumps(_exactness.violations))"


def execute(
    notebook: nbformat.NotebookNode, cwd: Path, env: dict[str, str] | None = None
) -> nbformat.NotebookNode:
    """Run ``notebook`` in ``cwd``; raise ``CellExecutionError`` on an unexpected error."""
    env = dict(os.environ if env is None else env, PLOTLY_RENDERER="plotly_mimetype")
    client = NotebookClient(
        notebook,
        timeout=TIMEOUT,
        kernel_name="python3",
        allow_errors=False,  # a cell tagged raises-exception may still raise
        resources={"metadata": {"path": str(cwd)}},
    )
    client.execute(env=env)
    return notebook


def audited(notebook: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """``notebook`` with the exactness audit installed first and reported last."""
    notebook.cells.insert(0, nbformat.v4.new_code_cell(AUDIT_START))
    notebook.cells.append(nbformat.v4.new_code_cell(AUDIT_END))
    return notebook


def audit_violations(executed: nbformat.NotebookNode) -> list[str]:
    """The exact float comparisons without a reason, reported by the last cell."""
    return json.loads(executed.cells[-1].outputs[0]["text"])


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


def test_the_audit_reports_an_exact_float_comparison_without_a_reason(tmp_path: Path) -> None:
    notebook = audited(
        notebook_from_cells(
            ("import numpy as np\na = np.ones(3) / 3", []),
            ("np.array_equal(a, a.copy())  # exact: a copy", []),
            ("np.array_equal(a, a.copy())", []),
            ("np.array_equal(np.arange(3), np.arange(3))", []),
        )
    )
    violations = audit_violations(execute(notebook, tmp_path))
    assert len(violations) == 1 and "np.array_equal(a, a.copy())" in violations[0]


def test_execute_passes_the_environment_to_the_kernel(tmp_path: Path) -> None:
    notebook = notebook_from_cells(("import torch; print(torch.get_num_threads())", []))
    executed = execute(notebook, tmp_path, portable_env())
    assert executed.cells[0].outputs[0]["text"].strip() == "1"


@pytest.mark.parametrize("stem", toc_chapters())
def test_chapter_executes_top_to_bottom(stem: str) -> None:
    """Under the portable kernels (the site build runs the machine's), audited."""
    notebook = audited(jupytext.read(BOOK / f"{stem}.md"))
    violations = audit_violations(execute(notebook, BOOK, portable_env()))
    assert not violations, "\n".join(violations)
