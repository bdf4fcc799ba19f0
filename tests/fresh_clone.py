"""The README's ``make test`` in a fresh clone of this repository (``test_fresh_clone.py``).

Most of that run creates the clone's environment (installing the pinned dependencies), which
depends on nothing the other tests do. ``conftest.py`` therefore starts it as soon as the
tests are collected, when its test is selected, and the test waits for it: it runs beside the
other tests instead of after them. A run is started by the test itself otherwise.
"""

from __future__ import annotations

import os
import signal
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TEST_ID = "tests/test_fresh_clone.py::test_make_test_works_in_a_fresh_clone"
# What `make test` runs in the clone: lint (a prerequisite of `make test`), then pytest on the
# parity tests against PyTorch's attention with the clone's installed `mha`. That shows that
# the command, its environment and its test run work there; the rest of the suite runs in this
# session on the same commit, so running it again in the clone would show nothing new.
CLONE_TESTS = ["tests/test_parity.py", "tests/test_init.py"]


@dataclass
class CloneRun:
    """A ``make test`` running in ``clone``, its output going to ``log``."""

    clone: Path
    log: Path
    env: dict[str, str]
    process: subprocess.Popen


def start(parent: Path) -> CloneRun:
    """Clone HEAD (committed work only) into ``parent/clone`` and start ``make test`` there."""
    clone = parent / "clone"
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
    env["PYTEST_ADDOPTS"] = " ".join(CLONE_TESTS)
    log = parent / "make-test.log"
    with log.open("w") as out:
        process = subprocess.Popen(
            ["make", "test"],
            cwd=clone,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # its own process group, stopped whole (``stop``)
        )
    return CloneRun(clone, log, env, process)


def stop(run: CloneRun) -> None:
    """Stop ``run``'s ``make test`` and everything it started, if it is still running."""
    if run.process.poll() is None:
        os.killpg(run.process.pid, signal.SIGKILL)
        run.process.wait()


_early: list[CloneRun] = []


def start_early() -> None:
    """Start the run now, in a temporary directory, for the test to take later."""
    _early.append(start(Path(tempfile.mkdtemp(prefix="mha-fresh-clone-"))))


def take_early() -> CloneRun | None:
    """The run started early, if any (once)."""
    return _early.pop() if _early else None


def stop_early() -> None:
    """Stop a run started early that no test took (the session ended first)."""
    while _early:
        stop(_early.pop())
