"""Fixtures for the browser tests: Debian's Chromium (driven by Playwright) and a loopback server.

The browser tests drive the system Chromium at ``/usr/bin/chromium``; Playwright's own browser
download is never used (the machines have no internet). A missing Chromium is a failure, not a
skip: install it with ``sudo apt-get install -y chromium`` (or ``make browser``).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import loopback
import pytest
from booktoc import toc_pages

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts"
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
INSTALL_HINT = (
    f"Chromium is missing at {CHROMIUM}; the browser tests need it. "
    "Install it with `sudo apt-get install -y chromium` (or `make browser`)."
)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "toc_page" in metafunc.fixturenames:
        metafunc.parametrize("toc_page", toc_pages())


@pytest.fixture(scope="session")
def artifacts_dir() -> Path:
    """``test-artifacts/`` at the repository root (gitignored): screenshots land here."""
    ARTIFACTS.mkdir(exist_ok=True)
    return ARTIFACTS


@pytest.fixture(scope="session")
def playwright_driver() -> Iterator[object]:
    from playwright.sync_api import sync_playwright

    manager = sync_playwright().start()
    try:
        yield manager
    finally:
        manager.stop()


def launch_chromium(driver) -> object:
    """The system Chromium, headless, started by the Playwright ``driver`` (one per thread)."""
    return driver.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS)


@pytest.fixture(scope="session")
def browser(playwright_driver) -> Iterator[object]:
    """One headless Chromium for the whole session; fails (never skips) when it is missing."""
    if not (CHROMIUM.exists() and os.access(CHROMIUM, os.X_OK)):
        found = shutil.which("chromium")
        pytest.fail(f"{INSTALL_HINT} (on PATH: {found})", pytrace=False)
    chromium = launch_chromium(playwright_driver)
    try:
        yield chromium
    finally:
        chromium.close()


@pytest.fixture(scope="session")
def chromium_launcher(browser):
    """``launch_chromium``, for a thread that drives its own Chromium (Playwright's objects
    belong to the thread that made them); asked for after ``browser``, so a missing Chromium
    fails first there."""
    return launch_chromium


@pytest.fixture(scope="session")
def subpath_url(built_site: Path) -> Iterator[str]:
    """The built site served over loopback under a subpath (``/html/``), as a project's GitHub
    Pages site is served under ``/<repository>/``; its URL, ending in ``/``."""
    with loopback.serve_under_subpath(built_site) as url:
        yield url


@pytest.fixture(scope="session")
def site_url(built_site: Path, built_pdf: Path) -> Iterator[str]:
    """Serve the built site (with the book's PDF, which every page links to) over loopback
    (``scripts/loopback.py``) and return its base URL."""
    if not (built_site / "index.html").exists():
        pytest.fail(f"the built site has no index.html: {built_site}", pytrace=False)
    with loopback.serve(built_site) as url:
        yield url
