"""Shared fixtures: the repository root and the built site (built once per session)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import background
import exactness
import fresh_clone
import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
# The stamp of `make env`, a prerequisite of `make book` (Makefile).
ENV_STAMP = ".venv/.installed"

# The unit tests use small tensors, where intra-op threads only add contention on a small
# machine. This affects the test process only: chapters run in their own kernels.
torch.set_num_threads(1)


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return ROOT


@pytest.fixture(scope="session")
def built_site(request: pytest.FixtureRequest) -> Path:
    """Build the book with the README's command, ``make book``, and return ``_build/html``.

    The build executes every chapter (with the execution cache) and fails on any
    warning, so a fixture failure here is a broken book. ``make test`` has made the
    environment already; it is taken as current here, so that a checkout whose files are
    newer than ``.venv``'s stamp (a second worktree sharing one environment) does not
    reinstall it. The Node tools are brought up to date as ``make book`` does.

    Once the site is built, the unit tests' portable run starts in the background, if it is
    selected (``background.py``).
    """
    result = subprocess.run(
        ["make", f"--assume-old={ENV_STAMP}", "book"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    if result.returncode != 0:
        pytest.fail(f"book build failed:\n{result.stdout[-6000:]}\n{result.stderr[-6000:]}")
    background.start(request.session.items)
    return ROOT / "_build" / "html"


@pytest.fixture(scope="session")
def built_pdf(built_site: Path) -> Path:
    """Build the whole book's PDF with ``scripts/build_pdf.py`` (``make pdf``) and return it.

    It is also copied into the built site, whose pages link to it.
    """
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "build_pdf.py")],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    if result.returncode != 0:
        pytest.fail(f"PDF build failed:\n{result.stdout[-6000:]}\n{result.stderr[-6000:]}")
    return ROOT / "_build" / "pdf" / "mha-book.pdf"


exactness.install()


def pytest_collection_finish(session: pytest.Session) -> None:
    """Start the fresh clone's ``make test`` now when its test is selected (``fresh_clone``):
    creating the clone's environment then overlaps the other tests."""
    if any(item.nodeid == fresh_clone.TEST_ID for item in session.items):
        fresh_clone.start_early()


def pytest_sessionfinish(session: pytest.Session) -> None:
    fresh_clone.stop_early()  # a run that no test waited for (the session stopped first)
    background.stop()


@pytest.fixture(autouse=True)
def no_train_store_from_the_shell(monkeypatch: pytest.MonkeyPatch) -> None:
    """A developer's ``MHA_TRAIN_STORE`` must not reach the tests: a test that trains
    would load runs kept from another source tree instead of training."""
    monkeypatch.delenv("MHA_TRAIN_STORE", raising=False)


@pytest.fixture(autouse=True)
def no_unjustified_exact_float_comparison():
    """Fail a test that compares floating-point arrays exactly without saying why it may."""
    before = len(exactness.violations)
    yield
    new = exactness.violations[before:]
    del exactness.violations[before:]
    if new:
        pytest.fail("\n".join(new), pytrace=False)
