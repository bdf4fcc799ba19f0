"""Each chapter's execution time, written after the build for ``scripts/build_book.py``.

From myst-nb's execution data, which the jupyter-cache keeps for cached chapters, into
``_build/execution_times.json``.
"""

from __future__ import annotations

import json
from pathlib import Path

from sphinx.application import Sphinx

EXEC_TIMES_FILE = "execution_times.json"  # in the parent of the html output folder


def write_execution_times(app: Sphinx, exception: Exception | None) -> None:
    """Write each executed document's execution data to ``_build/execution_times.json``."""
    metadata = getattr(app.env, "nb_metadata", {}) or {}
    times = {}
    for docname in sorted(app.env.found_docs):
        data = (metadata.get(docname) or {}).get("exec_data")
        if data:
            times[docname] = {
                "runtime": data.get("runtime"),
                "method": data.get("method"),
                "succeeded": data.get("succeeded"),
                "error": data.get("error"),
                "mtime": data.get("mtime"),
            }
    path = Path(app.outdir).parent / EXEC_TIMES_FILE
    path.write_text(json.dumps(times, indent=2, sort_keys=True) + "\n", encoding="utf8")


def setup(app: Sphinx) -> None:
    app.connect("build-finished", write_execution_times)
