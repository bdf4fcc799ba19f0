"""The portable runs, started in the background while the site is built and once it is.

The unit tests run first, beside the book's build (``early_build.py``), and end before it:
the rest of the build, one chapter after another, leaves a core to spare. The unit tests'
second run, under the portable kernels (``portability.py``, ``test_portability.py``), needs
nothing from the build. So the first test that waits for the site (the ``built_site``
fixture, ``conftest.py``) starts that run with :func:`start_unit`, and its own test waits for
it when its turn comes; a selection without the site starts it then.

Once the site is built, :func:`start_chapters` starts the chapters under the portable
kernels, beside the browser tests (which spend much of their time waiting on pages), but only
those that time nothing, one at a time. Several chapters assert ratios of times measured in
one run (:func:`times_itself`), which a busy machine can upset: those wait until the chapter
tests come, when the browser tests are over. From then on two chapters run at a time
(``test_chapters.py``), the longest first. :func:`chapters` keeps their runs, so that a
chapter is executed once however many of its tests ask.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest
from chapter_runs import BOOK, CHAPTERS_AT_ONCE, run_chapter, selected_stems
from portability import portable_env

ROOT = Path(__file__).resolve().parents[1]
EXECUTION_TIMES = ROOT / "_build" / "execution_times.json"  # the site build's, per chapter
UNIT_TEST_ID = "tests/test_portability.py::test_unit_tests_pass_under_portable_kernels"
UNIT_COMMAND = [
    sys.executable,
    "-m",
    "pytest",
    "-q",
    "-p",
    "no:cacheprovider",
    "-m",
    "not chapter and not site and not browser and not slow and not portability",
]
"""Every unit, parity and property test: ``make unit``'s selection."""


@dataclass
class UnitRun:
    """The unit tests running under the portable kernels, their output going to ``log``."""

    process: subprocess.Popen
    log: Path

    def wait(self) -> tuple[int, str]:
        """The run's exit code and output, once it has finished (its log is kept on failure)."""
        returncode = self.process.wait()
        output = self.log.read_text(errors="replace")
        if returncode == 0:
            self.log.unlink()
        return returncode, output


# A chapter that imports the library's timers measures times in one run and asserts ratios.
TIMERS = re.compile(
    r"^\s*(?:from\s+mha\.cost\s+import\s.*\btimings\b|(?:from|import)\s+mha\.cost\.timings\b)", re.M
)

_pool: list[ThreadPoolExecutor] = []
_chapters: dict[str, Future] = {}
_units: list[UnitRun] = []
# Chapter runs at once: one beside the browser tests, CHAPTERS_AT_ONCE once the chapter tests
# come (``chapters`` adds the other slots).
_slots = threading.Semaphore(1)
_widened: list[bool] = []


def start_unit(items: list[pytest.Item]) -> None:
    """Start the portable unit run if the selected tests ``items`` will wait for it."""
    if any(item.nodeid == UNIT_TEST_ID for item in items) and not _units:
        _units.append(_start_unit())


def start_chapters(items: list[pytest.Item]) -> None:
    """Start the selected chapters that time nothing (:func:`times_itself`), one at a time."""
    _submit([stem for stem in selected_stems(items) if not times_itself(stem)])


def times_itself(stem: str, book: Path = BOOK) -> bool:
    """Whether chapter ``stem`` imports the library's timers (``mha.cost.timings``): its
    claims about times are ratios measured in one run, so it runs when the machine is calmer."""
    return bool(TIMERS.search((book / f"{stem}.md").read_text(encoding="utf8")))


def chapters(stems: list[str]) -> dict[str, Future]:
    """Every started chapter run by stem, after starting those of ``stems`` not started yet
    (the longest first, :data:`chapter_runs.CHAPTERS_AT_ONCE` at a time from now on)."""
    if not _widened:
        _widened.append(True)
        _slots.release(CHAPTERS_AT_ONCE - 1)
    _submit(stems)
    return _chapters


def _submit(stems: list[str]) -> None:
    """Queue the runs of ``stems`` not queued yet, the longest first."""
    if not _pool:
        _pool.append(ThreadPoolExecutor(max_workers=CHAPTERS_AT_ONCE))
    for stem in longest_first(stems):
        if stem not in _chapters:
            _chapters[stem] = _pool[0].submit(_run_in_slot, stem)


def _run_in_slot(stem: str) -> list[str]:
    with _slots:
        return run_chapter(stem)


def longest_first(stems: list[str], times: Path = EXECUTION_TIMES) -> list[str]:
    """``stems`` in the order of the time each chapter took in the site's build, longest
    first, where the build recorded it (``times``): so that the longest chapter does not run
    alone at the end while the other core waits. Unrecorded chapters keep their order, last."""
    try:
        recorded = json.loads(times.read_text(encoding="utf8"))
    except (OSError, ValueError):
        recorded = {}
    seconds = {Path(page).name: entry.get("runtime") or 0.0 for page, entry in recorded.items()}
    return sorted(stems, key=lambda stem: -seconds.get(stem, 0.0))


def unit_run() -> UnitRun:
    """The portable unit run: the one started in the background, or one started now."""
    return _units.pop() if _units else _start_unit()


def _start_unit() -> UnitRun:
    log = Path(tempfile.mkstemp(prefix="mha-portable-unit-", suffix=".log")[1])
    with log.open("w") as out:
        process = subprocess.Popen(
            UNIT_COMMAND,
            cwd=ROOT,
            env=portable_env(),
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # its own process group, stopped whole (``stop``)
        )
    return UnitRun(process, log)


def stop() -> None:
    """Stop the runs that no test waited for (the session ended first)."""
    for run in _chapters.values():
        run.cancel()  # those not started yet
    while _units:
        run = _units.pop()
        if run.process.poll() is None:
            os.killpg(run.process.pid, signal.SIGKILL)
            run.process.wait()
