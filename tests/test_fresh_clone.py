"""The README's test command works in a fresh clone of the repository.

This test clones the current HEAD of this repository (committed work only) into a temporary
directory and runs ``make test`` there, as a new reader or CI would: it creates the
environment with the pinned dependencies, installs the Node tools and Chromium, lints, and
runs pytest. ``make test`` runs there with ``PYTEST_ADDOPTS`` naming a few test files
(``fresh_clone.CLONE_TESTS``): this test starts it to show that the command works in a clone,
while every test, this one aside, is run by this session on the same commit; and it never
starts this test again (no recursion). It asserts that the command exits 0 and that the
clone's own ``.venv/bin/python -c "import mha"`` imports the clone's package.

The clone's run starts when the tests are collected (``conftest.py``, ``fresh_clone.py``), so
that creating its environment overlaps the other tests; this test waits for it.

The README's other command, ``make book``, is what this session's site tests build the site
with (the ``built_site`` fixture in ``conftest.py``); run from a fresh clone, as CI runs
``make test``, that build starts from nothing too. Building the book a second time here
would show nothing new.

It is slow (it creates the clone's virtual environment): it is marked ``slow`` and
``make unit`` leaves it out.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import fresh_clone
import pytest

pytestmark = pytest.mark.slow

TEST_TIMEOUT_S = 60 * 60
TAIL_LINES = 80


def tail(text: str, lines: int = TAIL_LINES) -> str:
    return "\n".join(text.splitlines()[-lines:])


def finished(run: fresh_clone.CloneRun, timeout: int) -> None:
    """Wait for ``run``; on a non-zero exit or a timeout, fail with its output's tail."""
    what = f"`make test` in {run.clone}"
    try:
        returncode = run.process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        fresh_clone.stop(run)
        pytest.fail(
            f"{what} did not finish in {timeout} s; last output:\n"
            f"{tail(run.log.read_text(errors='replace'))}",
            pytrace=False,
        )
    if returncode != 0:
        pytest.fail(
            f"{what} exited with {returncode}; last output (full log: {run.log}):\n"
            f"{tail(run.log.read_text(errors='replace'))}",
            pytrace=False,
        )


def test_make_test_works_in_a_fresh_clone(tmp_path: Path) -> None:
    run = fresh_clone.take_early() or fresh_clone.start(tmp_path)
    finished(run, TEST_TIMEOUT_S)

    imported = subprocess.run(
        [str(run.clone / ".venv" / "bin" / "python"), "-c", "import mha; print(mha.__file__)"],
        cwd=tmp_path,
        env=run.env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert imported.returncode == 0, f"`import mha` failed in the clone:\n{imported.stderr}"
    assert Path(imported.stdout.strip()).is_relative_to(run.clone), (
        f"the clone's Python imported mha from {imported.stdout.strip()}, not from the clone"
    )
    shutil.rmtree(run.clone, ignore_errors=True)  # its .venv is large; kept only on failure
