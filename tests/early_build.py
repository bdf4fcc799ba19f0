"""The book's builds, the site's and the PDF's, started in the background as early as they can.

Building the book (``make book``) executes every chapter, one kernel at a time, for about five
minutes, and the unit tests need nothing from it. So when a selected test uses the built site,
``conftest.py`` starts the build at collection (:func:`start`), runs the tests that need
neither the site nor a chapter run first (:func:`run_first`), and the ``built_site`` fixture
takes the build's result (:func:`result`) when its turn comes. The PDF (``make pdf``'s
``scripts/build_pdf.py``, a minute or more of printing in Chromium) is started as soon as the
site is built (:func:`start_pdf`), beside the browser tests that do not link to it, and the
``built_pdf`` fixture takes its result.

Several chapters assert ratios of times measured in one run. So that the tests beside the
build take only the CPU it leaves, :func:`start` lowers this test session's scheduling
priority (``os.nice``) once the build is started; the processes the session starts after
that inherit it, the build does not. A session that needs no site starts no build and keeps
its priority.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# The stamp of `make env`, a prerequisite of `make book` (Makefile). `make test` has made the
# environment already; it is taken as current, so that a checkout whose files are newer than
# `.venv`'s stamp (a second worktree sharing one environment) does not reinstall it.
ENV_STAMP = ".venv/.installed"
SITE_COMMAND = ["make", f"--assume-old={ENV_STAMP}", "book"]
PDF_COMMAND = [sys.executable, str(ROOT / "scripts" / "build_pdf.py")]
SESSION_NICENESS = 10
"""How much lower than the build the session runs (Linux's ``nice`` scale, 0 to 19)."""
LATE_MARKERS = {"site", "browser", "chapter", "portability", "slow"}


@dataclass
class BuildRun:
    """A build running, its output going to ``log``."""

    process: subprocess.Popen
    log: Path


_runs: dict[str, BuildRun] = {}
"""The builds started and not yet taken, by name: ``"site"``, ``"pdf"``."""


def needs_site(item: pytest.Item) -> bool:
    return "built_site" in getattr(item, "fixturenames", ())


def run_first(item: pytest.Item) -> bool:
    """Whether ``item`` needs neither the site nor anything started after it (the unit tests)."""
    return not needs_site(item) and not any(
        marker.name in LATE_MARKERS for marker in item.iter_markers()
    )


def start(items: list[pytest.Item]) -> None:
    """Start the site's build if a test of ``items`` uses it, then lower the session's priority."""
    if "site" not in _runs and any(needs_site(item) for item in items):
        _runs["site"] = _start(SITE_COMMAND)
        if hasattr(os, "nice"):  # Unix
            os.nice(SESSION_NICENESS)


def start_pdf(items: list[pytest.Item]) -> None:
    """Start the PDF's build if a test of ``items`` uses it (the site is built)."""
    if "pdf" not in _runs and any("built_pdf" in getattr(i, "fixturenames", ()) for i in items):
        _runs["pdf"] = _start(PDF_COMMAND)


def running(name: str) -> subprocess.Popen | None:
    """The process of build ``name`` started early and not yet taken, if any."""
    run = _runs.get(name)
    return run.process if run else None


def result(name: str) -> tuple[int, str]:
    """The exit code and output of build ``name`` (``"site"`` or ``"pdf"``): of the one started
    early, or of one run now."""
    if name not in _runs:
        command = SITE_COMMAND if name == "site" else PDF_COMMAND
        done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
        return done.returncode, done.stdout + done.stderr
    run = _runs.pop(name)
    returncode = run.process.wait()
    output = run.log.read_text(errors="replace")
    run.log.unlink()
    return returncode, output


def stop() -> None:
    """Stop the builds that no test waited for (the session ended first)."""
    for run in _runs.values():
        if run.process.poll() is None:
            os.killpg(run.process.pid, signal.SIGKILL)
            run.process.wait()
        run.log.unlink(missing_ok=True)
    _runs.clear()


def _start(command: list[str]) -> BuildRun:
    log = Path(tempfile.mkstemp(prefix="mha-build-", suffix=".log")[1])
    with log.open("w") as out:
        process = subprocess.Popen(
            command,
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # its own process group, stopped whole (``stop``)
        )
    return BuildRun(process, log)
