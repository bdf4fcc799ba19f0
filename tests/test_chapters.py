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

The selected chapters are executed two at a time, in the order their tests run: each kernel
runs on one thread, so two of them keep two cores busy. Each test waits for its chapter.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
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
CHAPTERS_AT_ONCE = 2  # each kernel runs on one thread; the machine has at least two cores

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


def run_chapter(stem: str) -> list[str]:
    """Execute chapter ``stem`` under the portable kernels, audited; its audit's violations."""
    notebook = audited(jupytext.read(BOOK / f"{stem}.md"))
    # It may start before a test's fixtures take a developer's train store away (conftest.py).
    env = {key: value for key, value in portable_env().items() if key != "MHA_TRAIN_STORE"}
    return audit_violations(execute(notebook, BOOK, env))


def selected_stems(items: list[pytest.Item]) -> list[str]:
    """The chapters of the selected tests of this module, in the order the tests run."""
    stems = []
    for item in items:
        callspec = getattr(item, "callspec", None)
        if item.path == Path(__file__) and callspec and "stem" in callspec.params:
            stems.append(callspec.params["stem"])
    return list(dict.fromkeys(stems))


@pytest.fixture(scope="module")
def chapter_runs(request: pytest.FixtureRequest) -> Iterator[dict[str, Future]]:
    """The selected chapters, executed two at a time in the order their tests run: each in
    its own kernel on one thread (``portable_env``), so two of them share two cores."""
    with ThreadPoolExecutor(max_workers=CHAPTERS_AT_ONCE) as pool:
        runs = {
            stem: pool.submit(run_chapter, stem) for stem in selected_stems(request.session.items)
        }
        try:
            yield runs
        finally:
            for run in runs.values():
                run.cancel()  # those not started yet, when the session stops early


@pytest.mark.parametrize("stem", toc_chapters())
def test_chapter_executes_top_to_bottom(chapter_runs: dict[str, Future], stem: str) -> None:
    """Under the portable kernels (the site build runs the machine's), audited."""
    run = chapter_runs.get(stem)
    violations = run.result() if run else run_chapter(stem)
    assert not violations, "\n".join(violations)
