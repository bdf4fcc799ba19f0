"""How the chapter tests execute a chapter (``test_chapters.py``, ``background.py``).

Each chapter is read with jupytext and run with nbclient in ``book/`` (as the book build
runs it), under the portable kernels (``portability.py``) and with the exactness audit
(``exactness.py``) installed in its kernel. Only cells tagged ``raises-exception`` may
raise. Plotly figures are emitted as the Plotly mime type, as in the build.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import jupytext
import nbformat
import pytest
from nbclient import NotebookClient
from portability import portable_env

ROOT = Path(__file__).resolve().parents[1]
BOOK = ROOT / "book"
TIMEOUT = 600  # seconds per cell: generous; the whole book must build in minutes
CHAPTERS_AT_ONCE = 2  # each kernel runs on one thread; the machine has at least two cores
TEST_FILE = "test_chapters.py"  # the module whose tests name the chapters they run

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


def run_chapter(stem: str) -> list[str]:
    """Execute chapter ``stem`` under the portable kernels, audited; its audit's violations."""
    notebook = audited(jupytext.read(BOOK / f"{stem}.md"))
    # It may start before a test's fixtures take a developer's train store away (conftest.py).
    env = {key: value for key, value in portable_env().items() if key != "MHA_TRAIN_STORE"}
    return audit_violations(execute(notebook, BOOK, env))


def selected_stems(items: list[pytest.Item]) -> list[str]:
    """The chapters of the selected chapter tests, in the order the tests run."""
    stems = []
    for item in items:
        callspec = getattr(item, "callspec", None)
        if item.path.name == TEST_FILE and callspec and "stem" in callspec.params:
            stems.append(callspec.params["stem"])
    return list(dict.fromkeys(stems))
