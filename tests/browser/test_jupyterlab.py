"""A chapter opened and run in a real JupyterLab, as a reader would, in headless Chromium.

The test starts ``.venv/bin/jupyter lab`` on 127.0.0.1 (free port, known token, no browser,
root dir = repository root) with temporary Jupyter config, data, runtime and workspace
directories, so that the user's own settings are neither used nor touched. The environment's
settings (``scripts/setup_jupyterlab.py``: Jupytext Notebook is the default viewer for ``.md``)
do apply. Autosave is off in the temporary user settings and checkpoints go to a temporary
directory, so running the chapter writes nothing in the repository; the test checks that.

In the browser: open the lab, double-click ``book`` in the file browser, double-click the
chapter, check it opened as a notebook (not a text editor), Run -> Run All Cells, wait until
the kernel is idle and every code cell has an execution count, then check that no cell shows
an error (except cells tagged ``raises-exception``), that every Plotly figure is drawn, and
that every exercise's solution opened folded and its code is still folded (a folded cell
shows no input prompt; running it shows its output).
The chapter's explorable (a cell's output, ``mha.display.explorables``) must be drawn in its
output, and a mouse drag of its query point must move the point and recompute the weights.

A second test opens the executed notebook that the site offers for download (the built
site's ``_sources/book/<chapter>.ipynb``) from a folder of its own, without running it, and
checks that its saved figures are drawn.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from playwright.sync_api import TimeoutError as PlaywrightTimeout

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parents[2]
CHAPTER = "book/one-head-to-many.md"
TOKEN = "mha-book-lab-test"
START_TIMEOUT_S = 180
UI_TIMEOUT_MS = 120_000
RUN_TIMEOUT_MS = 300_000
USER_SETTINGS = {
    # Never write the chapter: no autosave while the test runs the cells.
    "@jupyterlab/docmanager-extension/plugin.jupyterlab-settings": {"autosave": False},
    # Keep every cell in the DOM, so the checks below see all of them.
    "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none"},
    # No news or update checks (they would go to the internet).
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {
        "fetchNews": "false",
        "checkForUpdates": False,
    },
}

# State of the current notebook, read from JupyterLab's own model (exposed as window.jupyterapp).
NOTEBOOK_STATE_JS = """
() => {
  if (!window.jupyterapp) return null;
  const panel = window.jupyterapp.shell.currentWidget;
  if (!panel || !panel.content || !panel.content.widgets) return null;
  const kernel = panel.sessionContext.session && panel.sessionContext.session.kernel;
  const cells = panel.content.widgets.filter((cell) => cell.model.type === "code")
    .map((cell) => {
      const outputs = cell.model.sharedModel.outputs || [];
      const tags = cell.model.getMetadata("tags") || [];
      const stderr = [...cell.node.querySelectorAll(
        '.jp-RenderedText[data-mime-type="application/vnd.jupyter.stderr"]')]
        .map((el) => el.textContent);
      return {
        source: cell.model.sharedModel.getSource().slice(0, 80),
        count: cell.model.executionCount,
        empty: cell.model.sharedModel.getSource().trim() === "",
        raises: tags.includes("raises-exception"),
        errors: outputs.filter((o) => o.output_type === "error")
                       .map((o) => `${o.ename}: ${o.evalue}`),
        tracebacks: stderr.filter((text) => /Traceback|Error\\b/.test(text))
                          .map((text) => text.slice(0, 300)),
        plotly_outputs: outputs.filter((o) => o.data &&
                                         o.data["application/vnd.plotly.v1+json"]).length,
        figures_drawn: [...cell.node.querySelectorAll(".js-plotly-plot")].filter(
          (gd) => gd.querySelector(".main-svg") &&
                  gd.querySelector(".main-svg .trace, .main-svg .hm image, .imagelayer image"),
        ).length,
        prompt: (cell.node.querySelector(".jp-InputPrompt") || {}).textContent || "",
        // folded in JupyterLab (jupyter.source_hidden): no input prompt is shown
        folded: [cell.inputHidden, cell.outputHidden],
        solution: String((cell.model.getMetadata("mystnb") || {}).code_prompt_show || "")
          .startsWith("Solution"),
      };
    });
  return {
    title: panel.title.label,
    notebook_panel: panel.node.classList.contains("jp-NotebookPanel"),
    kernel: kernel ? kernel.status : "no kernel",
    kernel_name: kernel ? kernel.name : "",
    cells,
  };
}
"""


@dataclass
class Lab:
    url: str
    log: Path


def free_port() -> int:
    """Return a TCP port on 127.0.0.1 that is free right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _write_user_settings(config_dir: Path) -> None:
    for relative, values in USER_SETTINGS.items():
        path = config_dir / "lab" / "user-settings" / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(values, indent=2))


def _jupyter() -> Path:
    candidates = [ROOT / ".venv" / "bin" / "jupyter", Path(sys.executable).with_name("jupyter")]
    for candidate in candidates:
        if candidate.exists():
            return candidate
    pytest.fail("no `jupyter` in .venv/bin: run `make env` first", pytrace=False)


def _tail(path: Path, lines: int = 60) -> str:
    if not path.exists():
        return ""
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


def _stop(process: subprocess.Popen) -> None:
    """Stop the server we started and its kernels (its own process group), by its id."""
    if process.poll() is not None:
        return
    os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=20)


@pytest.fixture
def lab(tmp_path: Path) -> Iterator[Lab]:
    """A JupyterLab server at the repository root with throwaway Jupyter dirs; stopped after."""
    with running_lab(ROOT, tmp_path) as server:
        yield server


@contextlib.contextmanager
def running_lab(root: Path, tmp_path: Path) -> Iterator[Lab]:
    """Start JupyterLab on ``root`` with throwaway Jupyter dirs under ``tmp_path``; stop it."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    dirs = {
        name: tmp_path / name for name in ("config", "data", "runtime", "ipython", "workspaces")
    }
    for path in dirs.values():
        path.mkdir()
    _write_user_settings(dirs["config"])
    env = dict(
        os.environ,
        JUPYTER_CONFIG_DIR=str(dirs["config"]),
        JUPYTER_DATA_DIR=str(dirs["data"]),
        JUPYTER_RUNTIME_DIR=str(dirs["runtime"]),
        JUPYTERLAB_WORKSPACES_DIR=str(dirs["workspaces"]),
        IPYTHONDIR=str(dirs["ipython"]),
        JUPYTER_PLATFORM_DIRS="1",
        PYTHONUNBUFFERED="1",
    )
    port = free_port()
    log = tmp_path / "jupyterlab.log"
    command = [
        str(_jupyter()),
        "lab",
        "--no-browser",
        "--ip=127.0.0.1",
        f"--port={port}",
        "--ServerApp.port_retries=0",
        f"--IdentityProvider.token={TOKEN}",
        f"--ServerApp.root_dir={root}",
        # Opening a file makes a checkpoint: keep it out of the repository.
        f"--FileCheckpoints.checkpoint_dir={tmp_path / 'checkpoints'}",
        "--LabApp.expose_app_in_browser=True",
        "--LabApp.news_url=None",
        "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
        "--LabApp.extension_manager=readonly",
    ]
    if os.geteuid() == 0:  # CI and these machines run as root
        command.append("--allow-root")
    with log.open("w") as out:
        process = subprocess.Popen(
            command,
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if process.poll() is not None:
                pytest.fail(
                    f"jupyter lab exited with {process.returncode}:\n{_tail(log)}", pytrace=False
                )
            try:
                with urllib.request.urlopen(f"{url}/api/status?token={TOKEN}", timeout=5) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(
                    f"jupyter lab did not answer in {START_TIMEOUT_S} s:\n{_tail(log)}",
                    pytrace=False,
                )
            time.sleep(0.5)
        yield Lab(url=url, log=log)
    finally:
        _stop(process)


def _offline_tab(browser, lab: Lab) -> tuple[object, object, list[str], list[str]]:
    """A browser tab that may reach only the lab server: (context, page, other hosts asked
    for, page errors)."""
    origin = urlsplit(lab.url).netloc
    foreign: list[str] = []
    page_errors: list[str] = []

    def route(route) -> None:
        parts = urlsplit(route.request.url)
        if parts.scheme in {"data", "blob", "about"} or parts.netloc == origin:
            route.continue_()
        else:
            foreign.append(route.request.url)
            route.abort("blockedbyclient")

    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    context.route("**/*", route)
    page = context.new_page()
    page.on("pageerror", lambda error: page_errors.append(str(error)))
    return context, page, foreign, page_errors


def _open_lab(page, lab: Lab) -> None:
    page.goto(f"{lab.url}/lab?reset&token={TOKEN}", timeout=UI_TIMEOUT_MS)
    page.wait_for_function(
        "() => window.jupyterapp && window.jupyterapp.shell", timeout=UI_TIMEOUT_MS
    )


def _open_in_file_browser(page, names: list[str]) -> None:
    """Double-click each name in turn in JupyterLab's file browser (folders, then a file)."""
    for name in names:
        text = page.locator(".jp-DirListing-itemText", has_text=re.compile(f"^{re.escape(name)}$"))
        item = page.locator(".jp-DirListing-item").filter(has=text)
        item.wait_for(timeout=UI_TIMEOUT_MS)
        item.dblclick()


def _summary(state: dict | None) -> str:
    if not state:
        return "no notebook is the current widget"
    head = f"{state['title']}: kernel {state['kernel_name']} {state['kernel']}"
    cells = [
        f"  [{cell['count'] if cell['count'] is not None else ' '}] {cell['source']!r}"
        f" errors={cell['errors']} figures={cell['figures_drawn']}/{cell['plotly_outputs']}"
        for cell in state["cells"]
    ]
    return "\n".join([head, *cells])


EXPLORABLE = '.jp-OutputArea-output .mha-explore[data-explore="heads"]'


def _drag_the_explorables_query(page) -> list[str]:
    """Drag the heads explorable's query point x by the mouse, in the cell's output; the
    problems found (the figure not drawn, the point not moved, the weights not recomputed)."""
    root = page.locator(EXPLORABLE)
    if root.count() != 1:
        return [f"{root.count()} heads explorables in the outputs, not 1"]
    # drawn when it comes near the screen
    root.evaluate("(e) => e.scrollIntoView({block: 'center'})")
    root.and_(page.locator("[data-ready=true]")).wait_for(timeout=UI_TIMEOUT_MS)
    hit = root.locator('[data-point="x"] .mx-hit')
    hit.scroll_into_view_if_needed()
    before_state = root.get_attribute("data-state")
    box = hit.bounding_box()
    x, y = box["x"] + box["width"] / 2, box["y"] + box["height"] / 2
    page.mouse.move(x, y)
    page.mouse.down()
    for i in range(1, 11):
        page.mouse.move(x + 6 * i, y - 5 * i)
    page.mouse.up()
    page.wait_for_timeout(300)
    after = hit.bounding_box()
    moved = (after["x"] + after["width"] / 2 - x, after["y"] + after["height"] / 2 - y)
    problems = []
    if abs(moved[0] - 60) > 3 or abs(moved[1] + 50) > 3:
        problems.append(f"the query point dragged by (60, -50) moved by {moved}")
    if root.get_attribute("data-state") == before_state:
        problems.append("the heads explorable's state did not change with the drag")
    return problems


def test_chapter_opens_as_a_notebook_and_runs_clean_in_jupyterlab(
    lab: Lab, browser, artifacts_dir: Path
) -> None:
    chapter = ROOT / CHAPTER
    before = hashlib.sha256(chapter.read_bytes()).hexdigest()
    checkpoints = chapter.parent / ".ipynb_checkpoints"
    had_checkpoints = checkpoints.exists()
    context, page, foreign, page_errors = _offline_tab(browser, lab)
    shot = artifacts_dir / "jupyterlab" / f"{Path(CHAPTER).stem}.png"
    shot.parent.mkdir(parents=True, exist_ok=True)
    state = opened = None
    stuck = ""
    try:
        _open_lab(page, lab)
        _open_in_file_browser(page, ["book", Path(CHAPTER).name])

        opened = page.locator(
            "#jp-main-dock-panel .jp-NotebookPanel, #jp-main-dock-panel .jp-FileEditor"
        )
        opened.first.wait_for(state="visible", timeout=UI_TIMEOUT_MS)
        if page.locator("#jp-main-dock-panel .jp-NotebookPanel:visible").count() == 0:
            pytest.fail(
                f"{CHAPTER} opened in a text editor, not as a notebook: Jupytext Notebook must "
                "be the default viewer for .md (run `python scripts/setup_jupyterlab.py .venv`)",
                pytrace=False,
            )
        # Wait until the notebook's kernel is up.
        page.wait_for_function(
            "() => { const p = window.jupyterapp.shell.currentWidget; return p && p.sessionContext"
            " && p.sessionContext.session && p.sessionContext.session.kernel &&"
            " p.sessionContext.session.kernel.status === 'idle'; }",
            timeout=UI_TIMEOUT_MS,
        )
        state = page.evaluate(NOTEBOOK_STATE_JS)
        opened = state
        assert state["notebook_panel"], _summary(state)
        assert state["title"] == Path(CHAPTER).name, _summary(state)
        assert page.locator("#jp-main-dock-panel .jp-FileEditor:visible").count() == 0

        # Run -> Run All Cells, from the menu bar as a reader does.
        page.locator(".lm-MenuBar-item", has_text=re.compile("^Run$")).click()
        page.locator(".lm-Menu-itemLabel", has_text=re.compile("^Run All Cells$")).click()
        page.wait_for_function(
            f"""() => {{
              const s = ({NOTEBOOK_STATE_JS})();
              if (!s || s.kernel !== "idle") return false;
              const code = s.cells.filter((c) => !c.empty);
              const done = code.every((c) => c.count !== null &&
                                              (c.folded[0] || /\\[\\d+\\]/.test(c.prompt)));
              const stopped = code.some((c) => c.errors.length && !c.raises) &&
                              !code.some((c) => c.prompt.includes("*"));
              return done || stopped;
            }}""",
            timeout=RUN_TIMEOUT_MS,
            polling=500,
        )
        page.wait_for_timeout(1000)  # let the last outputs render
        dragged = _drag_the_explorables_query(page)
    except PlaywrightTimeout as error:
        stuck = str(error).splitlines()[0]
    finally:
        page.screenshot(path=str(shot), full_page=True)
        state = page.evaluate(NOTEBOOK_STATE_JS)
        context.close()

    problems = [f"timed out: {stuck}"] if stuck else []
    if not stuck:
        problems += dragged
    code = [cell for cell in state["cells"] if not cell["empty"]] if state else []
    problems += [f"not executed: {c['source']!r}" for c in code if c["count"] is None]
    # An exercise's solution opens folded (input and output), as on the site. Running a cell
    # shows its output again (JupyterLab's own rule); its code stays folded.
    solutions = [c for c in (opened or {"cells": []})["cells"] if c["solution"]]
    problems += [
        f"solution opened unfolded (input, output hidden: {c['folded']}): {c['source']!r}"
        for c in solutions
        if c["folded"] != [True, True]
    ]
    problems += [
        f"solution's code unfolded by the run: {c['source']!r}"
        for c in code
        if c["solution"] and not c["folded"][0]
    ]
    if opened and not solutions:
        problems.append(f"{CHAPTER} opened with no solution cell")
    for cell in code:
        if cell["raises"]:
            continue
        problems += [f"error in {cell['source']!r}: {error}" for error in cell["errors"]]
        problems += [f"traceback in {cell['source']!r}: {text}" for text in cell["tracebacks"]]
    expected = sum(cell["plotly_outputs"] for cell in code)
    drawn = sum(cell["figures_drawn"] for cell in code)
    if expected == 0:
        problems.append(f"{CHAPTER} produced no Plotly figure in JupyterLab")
    if drawn < expected:
        problems.append(f"{expected} Plotly outputs, {drawn} drawn as .js-plotly-plot .main-svg")
    problems += [f"page error: {error}" for error in page_errors]
    problems += [f"request to another host: {url}" for url in dict.fromkeys(foreign)]
    if hashlib.sha256(chapter.read_bytes()).hexdigest() != before:
        problems.append(f"{CHAPTER} was modified on disk by opening and running it")
    if checkpoints.exists() and not had_checkpoints:
        problems.append(f"JupyterLab created {checkpoints.relative_to(ROOT)}")
    if problems:
        pytest.fail(
            "\n".join(
                [
                    *problems,
                    "",
                    _summary(state),
                    "",
                    f"screenshot: {shot}",
                    "server log tail:",
                    _tail(lab.log, 30),
                ]
            ),
            pytrace=False,
        )


def test_downloaded_notebook_opens_in_jupyterlab_and_shows_its_figures(
    built_site: Path, browser, artifacts_dir: Path, tmp_path: Path
) -> None:
    """The executed notebook that the site's download menu offers, opened in JupyterLab from
    a download folder and not run: every code cell shows its execution count and every Plotly
    output is drawn from the saved outputs."""
    name = Path(CHAPTER).with_suffix(".ipynb").name
    downloaded = built_site / "_sources" / "book" / name
    saved = json.loads(downloaded.read_text(encoding="utf8"))
    expected = sum(
        "application/vnd.plotly.v1+json" in output.get("data", {})
        for cell in saved["cells"]
        for output in cell.get("outputs", [])
    )
    assert expected > 0, f"{downloaded} has no Plotly output"
    folder = tmp_path / "Downloads"
    folder.mkdir()
    shutil.copy2(downloaded, folder / name)
    shot = artifacts_dir / "jupyterlab" / f"downloaded-{Path(name).stem}.png"
    shot.parent.mkdir(parents=True, exist_ok=True)
    drawn_js = f"""() => {{
      const s = ({NOTEBOOK_STATE_JS})();
      return !!s && s.cells.reduce((n, c) => n + c.figures_drawn, 0) >= {expected};
    }}"""
    state, stuck = None, ""
    with running_lab(folder, tmp_path / "lab") as lab:
        context, page, foreign, page_errors = _offline_tab(browser, lab)
        try:
            _open_lab(page, lab)
            _open_in_file_browser(page, [name])
            page.locator("#jp-main-dock-panel .jp-NotebookPanel").first.wait_for(
                state="visible", timeout=UI_TIMEOUT_MS
            )
            page.wait_for_function(drawn_js, timeout=UI_TIMEOUT_MS, polling=500)
        except PlaywrightTimeout as error:
            stuck = str(error).splitlines()[0]
        finally:
            page.screenshot(path=str(shot), full_page=True)
            state = page.evaluate(NOTEBOOK_STATE_JS)
            context.close()
    problems = [f"timed out: {stuck}"] if stuck else []
    code = [cell for cell in state["cells"] if not cell["empty"]] if state else []
    if not code:
        problems.append(f"{name} did not open as a notebook with code cells")
    problems += [f"no execution count: {c['source']!r}" for c in code if c["count"] is None]
    drawn = sum(cell["figures_drawn"] for cell in code)
    if drawn < expected:
        problems.append(f"{expected} Plotly outputs saved, {drawn} drawn")
    problems += [f"page error: {error}" for error in page_errors]
    problems += [f"request to another host: {url}" for url in dict.fromkeys(foreign)]
    if problems:
        pytest.fail("\n".join([*problems, "", _summary(state), f"screenshot: {shot}"]))
