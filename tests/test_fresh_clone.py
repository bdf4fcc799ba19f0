"""The README's test command works in a fresh clone of the repository.

This test clones the current HEAD of this repository (committed work only) into a temporary
directory and runs ``make test`` there, as a new reader or CI would: it creates the
environment with the pinned dependencies, installs the Node tools and Chromium, lints, and
runs pytest. ``make test`` runs there with ``PYTEST_ADDOPTS`` naming a few test files
(``CLONE_TESTS``): this test starts it to show that the command works in a clone, while every
test, this one aside, is run by this session on the same commit; and it never starts this
test again (no recursion). It asserts that the command exits 0 and that the clone's own
``.venv/bin/python -c "import mha"`` imports the clone's package.

The README's other command, ``make book``, is what this session's site tests build the site
with (the ``built_site`` fixture in ``conftest.py``); run from a fresh clone, as CI runs
``make test``, that build starts from nothing too. Building the book a second time here
would show nothing new.

It is slow (it creates the clone's virtual environment): it is marked ``slow`` and
``make unit`` leaves it out.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
TEST_TIMEOUT_S = 60 * 60
TAIL_LINES = 80
# What `make test` runs in the clone: lint (a prerequisite of `make test`), then pytest on the
# parity tests against PyTorch's attention with the clone's installed `mha`. That shows that
# the command, its environment and its test run work there; the rest of the suite runs in this
# session on the same commit, so running it again in the clone would show nothing new.
CLONE_TESTS = ["tests/test_parity.py", "tests/test_init.py"]
CLONE_PYTEST_ADDOPTS = " ".join(CLONE_TESTS)


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


def test_make_test_works_in_a_fresh_clone(tmp_path: Path) -> None:
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
    env["PYTEST_ADDOPTS"] = CLONE_PYTEST_ADDOPTS

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
