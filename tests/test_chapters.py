"""Every chapter in the table of contents executes top to bottom without an error.

Each chapter is read with jupytext and run with nbclient in ``book/`` (as the book build
runs it; ``chapter_runs.py``). Only cells tagged ``raises-exception`` may raise. Plotly
figures are emitted as the Plotly mime type, as in the build.

Two things differ from the book build, on purpose:

- the kernel runs under other numerical kernels and one thread (``portability.py``), while
  the build keeps the machine's defaults: a claim that holds only under one machine's
  rounding fails one of the two;
- exact comparisons of floating-point arrays are audited (``exactness.py``): each must say
  which exact operation makes it hold.

The selected chapters are executed two at a time, the longest first (``background.py``):
each kernel runs on one thread, so two of them keep two cores busy. Each test waits for its
chapter.
"""

from __future__ import annotations

from concurrent.futures import Future
from pathlib import Path

import background
import nbformat
import pytest
from booktoc import toc_pages
from chapter_runs import audit_violations, audited, execute, run_chapter, selected_stems
from nbclient.exceptions import CellExecutionError
from portability import portable_env

pytestmark = pytest.mark.chapter


def toc_chapters() -> list[str]:
    """The chapter stems of ``_toc.yml``, root first, in reading order."""
    return [Path(page).name for page in toc_pages()]


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


@pytest.fixture(scope="module")
def chapter_runs(request: pytest.FixtureRequest) -> dict[str, Future]:
    """The selected chapters' runs, started when the first of these tests comes."""
    return background.chapters(selected_stems(request.session.items))


@pytest.mark.parametrize("stem", toc_chapters())
def test_chapter_executes_top_to_bottom(chapter_runs: dict[str, Future], stem: str) -> None:
    """Under the portable kernels (the site build runs the machine's), audited."""
    run = chapter_runs.get(stem)
    violations = run.result() if run else run_chapter(stem)
    assert not violations, "\n".join(violations)
