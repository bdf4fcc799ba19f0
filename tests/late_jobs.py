"""The plain build and the link crawl, started in the background once the PDF is built.

Both check the built site and time nothing: ``test_plain_build.py`` builds a copy of the
working tree with the plain ``jupyter-book build .``, and ``test_site_build.py`` crawls the
whole site with linkchecker (the PDF's link included, so it needs the PDF). Run in turn at the
end of ``make test``, they left a core idle for two minutes. So once the site is built,
:func:`start` runs them one after the other in a background thread, after the PDF's build
(``early_build.py``): beside the browser tests, which spend much of their time waiting on
pages. Their tests take the results with :func:`result`, which runs a job now when it was not
started. The processes run at the session's priority, as the PDF's build does.
"""

from __future__ import annotations

import functools
import http.server
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BUILD_TIMEOUT_S = 1800
CRAWL_TIMEOUT_S = 900


def working_tree_files(root: Path = ROOT) -> list[str]:
    """The files of the working tree that git tracks or would track (not ignored ones)."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        cwd=root,
        capture_output=True,
        check=True,
    ).stdout.decode()
    return [name for name in listed.split("\0") if name and (root / name).is_file()]


def plain_build() -> tuple[int, str, Path]:
    """Build a copy of the working tree (as a fresh clone has it) with ``jupyter-book build .``:
    its exit code, its output and its site.

    The copy gets the execution cache of the ``make book`` build, so that no chapter runs
    again (the cache is keyed by the chapters' code), and no Node tools."""
    copy = Path(tempfile.mkdtemp(prefix="mha-plain-")) / "book"
    _temporary.append(copy.parent)
    for name in working_tree_files():
        target = copy / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, target)
    shutil.copytree(ROOT / "_build" / ".jupyter_cache", copy / "_build" / ".jupyter_cache")
    env = dict(os.environ, MHA_TRAIN_STORE=str(ROOT / "_build" / ".train_store"))
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
    returncode, output = _run(["jupyter-book", "build", "."], copy, env, BUILD_TIMEOUT_S)
    return returncode, output, copy / "_build" / "html"


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


def crawl_links() -> tuple[int, str]:
    """linkchecker's crawl of the built site over loopback (anchors too, nothing else): its
    exit code and its report."""
    handler = functools.partial(_Quiet, directory=str(ROOT / "_build" / "html"))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    linkchecker = str(Path(sys.executable).parent / "linkchecker")
    url = f"http://127.0.0.1:{server.server_address[1]}/"
    options = ["--no-status", "--no-warnings", "--ignore-url=^(?!http://127\\.0\\.0\\.1)"]
    command = [linkchecker, *options, "--threads=4", "-o", "csv", url]
    try:
        return _run(command, ROOT, None, CRAWL_TIMEOUT_S)
    finally:
        server.shutdown()
        server.server_close()


JOBS: dict[str, Callable[[], tuple]] = {"plain": plain_build, "links": crawl_links}
"""The jobs, in the order they run."""
TESTS = {
    "plain": lambda item: "plain_build" in getattr(item, "fixturenames", ()),
    "links": lambda item: item.name == "test_every_internal_link_resolves",
}
"""Which selected tests ask for each job."""

_jobs: dict[str, Future] = {}
_children: list[subprocess.Popen] = []
_temporary: list[Path] = []
_stopping = threading.Event()


def start(items: list[pytest.Item], after: subprocess.Popen | None) -> None:
    """Start, in one background thread, the jobs that the selected tests ``items`` ask for,
    once the process ``after`` (the PDF's build) has ended."""
    wanted = [name for name in JOBS if name not in _jobs and any(map(TESTS[name], items))]
    futures = {name: Future() for name in wanted}  # kept here: ``result`` takes them away
    _jobs.update(futures)

    def run() -> None:
        for name, future in futures.items():
            if _stopping.is_set() or not future.set_running_or_notify_cancel():
                continue
            try:
                if after is not None:
                    after.wait()
                future.set_result(JOBS[name]())
            except Exception as error:  # the test that takes the result reports it
                future.set_exception(error)

    if wanted:
        threading.Thread(target=run, name="plain build and link crawl", daemon=True).start()


def result(name: str) -> tuple:
    """The result of job ``name``: of the one started in the background, or of one run now."""
    job = _jobs.pop(name, None)
    return job.result() if job is not None else JOBS[name]()


def stop() -> None:
    """Stop the jobs that no test waited for (the session ended first); remove their files."""
    _stopping.set()
    for job in _jobs.values():
        job.cancel()
    for process in list(_children):
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    for folder in _temporary:
        shutil.rmtree(folder, ignore_errors=True)


def _run(command: list[str], cwd: Path, env: dict | None, timeout: int) -> tuple[int, str]:
    """Run ``command`` in its own process group (stopped whole by ``stop``): its exit code and
    its output, stdout then stderr."""
    process = subprocess.Popen(
        command,
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    )
    _children.append(process)
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        stdout, stderr = process.communicate()
        stderr += f"\n(stopped after {timeout} s)"
    finally:
        _children.remove(process)
    return process.returncode, stdout + stderr
