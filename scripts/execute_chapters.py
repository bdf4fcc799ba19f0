"""Execute the chapters that the book's execution cache lacks, several at a time.

``jupyter-book build`` executes every chapter missing from its execution cache
(``_build/.jupyter_cache``) one after another, as it reads the book. ``scripts/build_book.py``
runs this script first: it executes the missing chapters ``JOBS`` at a time, each in its own
kernel in ``book/`` (as the build runs them), and stores each one in that cache as the build
would (read by the same reader, so under the same hash). The build then takes every chapter
from the cache.

A chapter that fails here is not cached: the build executes it again and reports its error as
it always does. So this script changes how long a build takes, never what it builds.

Usage: ``python scripts/execute_chapters.py`` (with the environment the build will have).
"""

from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import yaml
from count_prose import toc_pages
from jupyter_cache import get_cache
from jupyter_cache.executors.utils import create_cache_bundle, single_nb_execution
from myst_nb.core.read import is_myst_markdown_notebook

ROOT = Path(__file__).resolve().parents[1]
CACHE = ROOT / "_build" / ".jupyter_cache"  # where jupyter-book keeps it (execute.cache unset)
READER = {"type": "plugin", "name": "myst_nb_md"}  # the reader the build registers for .md
# Kernels at once: each chapter runs in its own kernel, and PyTorch in each uses every core,
# so more than a few only share the same cores; memory grows with each (the models' chapters
# hold a pretrained model).
JOBS = max(1, min(4, os.cpu_count() or 1))


def notebooks(root: Path = ROOT) -> list[Path]:
    """The pages of ``_toc.yml`` that are notebooks (MyST Markdown with a kernel), in order."""
    paths = [root / f"{page}.md" for page in toc_pages(root)]
    return [p for p in paths if is_myst_markdown_notebook(p.read_text(encoding="utf8"))]


def cell_timeout(root: Path = ROOT) -> int:
    """The build's time limit per cell (``execute.timeout`` of ``_config.yml``)."""
    config = yaml.safe_load((root / "_config.yml").read_text(encoding="utf8"))
    return int(config["execute"]["timeout"])


def execute_one(cache_path: Path, uri: str, timeout: int) -> tuple[str, float, str | None]:
    """Execute the project notebook ``uri`` in its folder and cache it if it succeeds.

    Returns:
        ``uri``, the seconds it took, and the error's name (``None`` when it succeeded).
    """
    cache = get_cache(cache_path)  # one per thread: its own database connection
    project_nb = cache.get_project_notebook(uri)
    result = single_nb_execution(
        project_nb.nb, cwd=str(Path(uri).parent), timeout=timeout, allow_errors=False
    )
    if result.err is not None:
        return uri, result.time, type(result.err).__name__
    bundle = create_cache_bundle(project_nb, None, None, result.time, None)
    cache.cache_notebook_bundle(bundle, check_validity=False, overwrite=True)
    return uri, result.time, None


def execute_missing(paths: list[Path], cache_path: Path, timeout: int, jobs: int) -> list[str]:
    """Execute those of ``paths`` that the cache at ``cache_path`` lacks, ``jobs`` at a time,
    and print a line for each; returns their URIs (absolute paths)."""
    cache = get_cache(cache_path)
    for path in paths:
        cache.add_nb_to_project(str(path), read_data=READER)
    # only these: the cache may list files of another checkout, since moved or deleted
    missing = [r.uri for r in cache.list_unexecuted([str(p.absolute()) for p in paths])]
    if not missing:
        return missing
    print(f"Executing {len(missing)} chapters, {jobs} at a time", flush=True)
    start = time.time()
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        runs = pool.map(lambda uri: execute_one(cache_path, uri, timeout), missing)
        for uri, seconds, error in runs:
            name = Path(uri).name
            how = f"failed ({error}); the build runs it again" if error else "executed"
            print(f"  {seconds:7.2f}  {name}  {how}", flush=True)
    print(f"Chapters executed in {time.time() - start:.1f} s", flush=True)
    return missing


if __name__ == "__main__":
    execute_missing(notebooks(), CACHE, cell_timeout(), JOBS)
