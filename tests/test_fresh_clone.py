"""The README's two commands work in a fresh clone of the repository.

This test clones the current HEAD of this repository (committed work only) into a temporary
directory and runs the README's commands there, as a new reader or CI would: ``make book``,
then ``make test``. ``make test`` runs there with ``PYTEST_ADDOPTS`` selecting the unit tests
only (``-m "not slow and not chapter and not site and not browser"``): this test starts it to
show that the command works in a clone (environment, Chromium, Node tools, lint, pytest),
while the chapter, site and browser tests are the ones this run itself goes on to run, on the
same commit; and it never starts this test again (no recursion). It asserts that both
commands exit 0, that ``_build/html`` has a page for every entry of ``_toc.yml``, and that
the clone's own ``.venv/bin/python -c "import mha"`` works.

It is slow (it creates the clone's virtual environment and builds the whole book): it is
marked ``slow`` and ``make unit`` leaves it out.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from booktoc import toc_pages

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
BOOK_TIMEOUT_S = 60 * 60
TEST_TIMEOUT_S = 60 * 60
TAIL_LINES = 80


def tail(text: str, lines: int = TAIL_LINES) -> str:
    return "\n".join(text.splitlines()[-lines:])


def run(command: list[str], cwd: Path, env: dict[str, str], timeout: int, log: Path) -> None:
    """Run ``command`` in ``cwd``; on a non-zero exit or a timeout, fail with the output's tail."""
    with log.open("w") as out:
        try:
            result = subprocess.run(
                command,
                cwd=cwd,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                timeout=timeout,
            )
        except subprocess.TimeoutExpired:
            pytest.fail(
                f"`{' '.join(command)}` did not finish in {timeout} s in {cwd}; last output:\n"
                f"{tail(log.read_text(errors='replace'))}",
                pytrace=False,
            )
    if result.returncode != 0:
        pytest.fail(
            f"`{' '.join(command)}` exited with {result.returncode} in {cwd}; last output "
            f"(full log: {log}):\n{tail(log.read_text(errors='replace'))}",
            pytrace=False,
        )


def test_readme_commands_work_in_a_fresh_clone(tmp_path: Path) -> None:
    clone = tmp_path / "clone"
    subprocess.run(
        ["git", "clone", "--quiet", "--no-hardlinks", str(ROOT), str(clone)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in {"VIRTUAL_ENV", "PYTHONPATH", "PYTEST_CURRENT_TEST", "PYTEST_ADDOPTS"}
    }
    env["PYTEST_ADDOPTS"] = '-m "not slow and not chapter and not site and not browser"'

    run(["make", "book"], clone, env, BOOK_TIMEOUT_S, tmp_path / "make-book.log")
    site = clone / "_build" / "html"
    missing = [page for page in toc_pages(clone) if not (site / f"{page}.html").is_file()]
    assert not missing, f"`make book` did not write these TOC pages: {missing}"

    run(["make", "test"], clone, env, TEST_TIMEOUT_S, tmp_path / "make-test.log")

    imported = subprocess.run(
        [str(clone / ".venv" / "bin" / "python"), "-c", "import mha; print(mha.__file__)"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert imported.returncode == 0, f"`import mha` failed in the clone:\n{imported.stderr}"
    assert Path(imported.stdout.strip()).is_relative_to(clone), (
        f"the clone's Python imported mha from {imported.stdout.strip()}, not from the clone"
    )
    shutil.rmtree(clone, ignore_errors=True)  # the clone's .venv is large; keep it only on failure
