"""Shared fixtures: the repository root and the built site (built once per session)."""

from __future__ import annotations

from pathlib import Path

import background
import early_build
import exactness
import fresh_clone
import late_jobs
import pytest
import torch
from hypothesis import settings

ROOT = Path(__file__).resolve().parents[1]

# Property tests have no time limit per example. A deadline is a timing assertion, and on a
# busy machine (the book's build beside the unit tests, the browser tests beside their
# portable run: ``early_build.py``, ``background.py``) an example can take many times its
# usual time: a run failed with "took 704.51ms, which exceeded the deadline of 200.00ms".
settings.register_profile("mha", deadline=None)
settings.load_profile("mha")

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
    warning, so a fixture failure here is a broken book. It was started when the tests were
    collected (``early_build.py``), so the unit tests ran beside it; the unit tests' portable
    run (``background.py``) starts now, beside the rest of the build, and this waits for it.

    Once the site is built, the PDF's build (``early_build.py``), then the plain build and
    the link crawl (``late_jobs.py``), and the chapters that time nothing under the portable
    kernels (``background.py``) start in the background, each if a selected test needs it.
    """
    background.start_unit(request.session.items)
    returncode, output = early_build.result("site")
    if returncode != 0:
        pytest.fail(f"book build failed:\n{output[-12000:]}")
    early_build.start_pdf(request.session.items)
    late_jobs.start(request.session.items, after=early_build.running("pdf"))
    background.start_chapters(request.session.items)
    return ROOT / "_build" / "html"


@pytest.fixture(scope="session")
def built_pdf(built_site: Path) -> Path:
    """Build the whole book's PDF with ``scripts/build_pdf.py`` (``make pdf``) and return it.

    It is also copied into the built site, whose pages link to it. The build started once the
    site was built (``early_build.py``); this waits for it.
    """
    returncode, output = early_build.result("pdf")
    if returncode != 0:
        pytest.fail(f"PDF build failed:\n{output[-12000:]}")
    return ROOT / "_build" / "pdf" / "mha-book.pdf"


exactness.install()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The unit tests first: they run beside the book's build (``early_build``)."""
    items.sort(key=lambda item: not early_build.run_first(item))  # stable: False first


def pytest_collection_finish(session: pytest.Session) -> None:
    """Start the book's build when a selected test uses the site (``early_build``), and the
    fresh clone's ``make test`` when its test is selected (``fresh_clone``): both then overlap
    the other tests."""
    early_build.start(session.items)
    if any(item.nodeid == fresh_clone.TEST_ID for item in session.items):
        fresh_clone.start_early()


def pytest_sessionfinish(session: pytest.Session) -> None:
    fresh_clone.stop_early()  # a run that no test waited for (the session stopped first)
    early_build.stop()
    late_jobs.stop()
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
