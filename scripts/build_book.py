"""Build the book: execute every chapter and write _build/html.

Runs ``jupyter-book build`` at the repository root with Sphinx warnings as errors, then
prints how long each chapter took to execute (from the execution data that the book's
extension writes to ``_build/execution_times.json``: ``book/_ext/mha_site/execution_times.py``)
and names the slowest chapter. Exits with the build's exit code. If an incremental build fails, it
builds once more without Sphinx's saved environment (``_build/.doctrees``), which can be
stale after a pull; the execution cache is kept, so chapters are not executed again.

Chapters that train the same run (``mha.training.runs.train_runs``) train it once per build: the
build sets ``MHA_TRAIN_STORE`` to ``_build/.train_store`` (unless it is set already), where
each fresh run is kept under a key of its config, the package's code, the library versions
and the kernel settings, and loaded when it is asked for again.

After the build, the files of ``book/_static`` that the site lacks or holds in another version
are copied into it (Sphinx skips its static files when no document is out of date), and
``scripts/build_live_model.py`` puts the live model of pretrained-heads (MiniLM's
attention as ONNX, exported once per key into ``_build/.live_model``, and ONNX Runtime Web from
``scripts/node``, which ``make node`` installs) into ``_build/html/_static/live-minilm/``.

Usage: ``python scripts/build_book.py [extra jupyter-book build options, e.g. --all]``
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BUILD = ROOT / "_build"
TIMES = BUILD / "execution_times.json"
DOCTREES = BUILD / ".doctrees"  # Sphinx's saved environment; the execution cache is elsewhere
TRAIN_STORE = BUILD / ".train_store"  # trained runs shared by the chapters (mha.training)
STATIC = ROOT / "book" / "_static"  # html_static_path
BUILT_STATIC = BUILD / "html" / "_static"


def jupyter_book() -> str:
    """The ``jupyter-book`` command of the running Python environment."""
    local = Path(sys.executable).parent / "jupyter-book"
    return str(local) if local.exists() else "jupyter-book"


def format_times(times: dict[str, dict], since: float) -> list[str]:
    """Lines reporting each document's execution time and the slowest one.

    Args:
        times: docname -> execution data (``runtime`` seconds, ``mtime`` when executed).
        since: start of this build (epoch seconds), to tell fresh runs from cached ones.
    """
    lines = ["Chapter execution times (s):"]
    timed = {doc: data for doc, data in times.items() if data.get("runtime") is not None}
    for doc, data in sorted(timed.items(), key=lambda item: -item[1]["runtime"]):
        fresh = (data.get("mtime") or 0) >= since
        how = "executed now" if fresh else "from cache"
        lines.append(f"  {data['runtime']:7.2f}  {doc}  ({how})")
    if timed:
        slowest = max(timed, key=lambda doc: timed[doc]["runtime"])
        total = sum(data["runtime"] for data in timed.values())
        lines.append(f"Slowest chapter: {slowest} ({timed[slowest]['runtime']:.2f} s)")
        lines.append(f"Total execution time of all chapters: {total:.2f} s")
    else:
        lines.append("  (no execution data)")
    return lines


def sync_static(source: Path, built: Path) -> list[str]:
    """Copy the files of ``source`` that ``built`` lacks or holds in another version.

    Sphinx copies the static files only when some document was rebuilt ("no targets are out
    of date" skips it), so an edit to ``book/_static/*.js`` alone would leave the site, and
    the browser tests, on the old script.

    Returns:
        The copied paths, relative to ``source``.
    """
    copied = []
    if not built.is_dir():
        return copied
    for path in sorted(source.rglob("*")):
        if not path.is_file() or path.name.startswith("."):
            continue  # Sphinx skips dotfiles too
        target = built / path.relative_to(source)
        if not target.exists() or target.read_bytes() != path.read_bytes():
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, target)
            copied.append(str(path.relative_to(source)))
    return copied


def live_model(env: dict[str, str]) -> int:
    """Run ``scripts/build_live_model.py`` (the live model's files into the built site)."""
    script = ROOT / "scripts" / "build_live_model.py"
    return subprocess.run([sys.executable, str(script)], cwd=ROOT, env=env).returncode


def main(argv: list[str]) -> int:
    env = dict(os.environ, PLOTLY_RENDERER="plotly_mimetype")
    env.setdefault("MHA_TRAIN_STORE", str(TRAIN_STORE))
    command = [jupyter_book(), "build", str(ROOT), "-W", "--keep-going", *argv]
    print("$", " ".join(command), flush=True)
    start = time.time()
    incremental = DOCTREES.exists()
    code = subprocess.call(command, cwd=ROOT, env=env)
    if code != 0 and incremental:
        # An incremental build can fail on Sphinx's saved environment alone, e.g. "duplicate
        # label" after a label moved between chapters. Build once more without it: the
        # execution cache is kept, so no chapter runs again, and a real error fails again.
        print("Build failed; building again with a fresh Sphinx environment", flush=True)
        shutil.rmtree(DOCTREES)
        code = subprocess.call(command, cwd=ROOT, env=env)
    if code == 0:
        copied = sync_static(STATIC, BUILT_STATIC)
        if copied:
            print(f"Static files copied that Sphinx left stale: {', '.join(copied)}")
        code = live_model(env)
    elapsed = time.time() - start
    if TIMES.exists() and TIMES.stat().st_mtime >= start:
        print("\n".join(format_times(json.loads(TIMES.read_text(encoding="utf8")), start)))
    print(f"Build {'succeeded' if code == 0 else 'FAILED'} in {elapsed:.1f} s (exit code {code})")
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
