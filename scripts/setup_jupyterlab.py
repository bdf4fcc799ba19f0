"""Make JupyterLab open the book's chapters (MyST Markdown ``.md`` files) as notebooks.

Usage: ``python scripts/setup_jupyterlab.py VENV`` (``scripts/setup_env.sh`` runs it).

1. Writes ``VENV/share/jupyter/lab/settings/overrides.json`` so that "Jupytext Notebook"
   is the default viewer for the ``markdown`` and ``myst`` file types (other settings in
   that file are kept).
2. Enables jupytext's Jupyter server extension in the environment (``--sys-prefix``), which
   lets JupyterLab read and save ``.md`` files as notebooks.

``jupyter lab`` started at the repository root then opens a chapter as a notebook on
double-click. Running the script again changes nothing.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

DOCMANAGER = "@jupyterlab/docmanager-extension:plugin"
VIEWER = "Jupytext Notebook"
FILE_TYPES = ("markdown", "myst")
SERVER_EXTENSIONS = ("jupyterlab_jupytext", "jupytext")  # new name first, then the old one


def overrides_path(venv: Path) -> Path:
    return venv / "share" / "jupyter" / "lab" / "settings" / "overrides.json"


def merged_overrides(existing: dict) -> dict:
    """``existing`` JupyterLab overrides with Jupytext Notebook as the default viewer."""
    merged = dict(existing)
    docmanager = dict(merged.get(DOCMANAGER, {}))
    viewers = dict(docmanager.get("defaultViewers", {}))
    viewers.update({file_type: VIEWER for file_type in FILE_TYPES})
    docmanager["defaultViewers"] = viewers
    merged[DOCMANAGER] = docmanager
    return merged


def write_overrides(venv: Path) -> Path:
    path = overrides_path(venv)
    existing = json.loads(path.read_text(encoding="utf8")) if path.exists() else {}
    if not isinstance(existing, dict):
        raise ValueError(f"{path} must hold a JSON object; got {type(existing).__name__}")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(merged_overrides(existing), indent=2) + "\n", encoding="utf8")
    return path


def server_extension(python: Path) -> str:
    """The importable name of jupytext's server extension in the environment."""
    for name in SERVER_EXTENSIONS:
        found = subprocess.run(
            [str(python), "-c", f"import {name}"], capture_output=True, check=False
        )
        if found.returncode == 0:
            return name
    raise RuntimeError(f"jupytext is not installed in {python.parent.parent}")


def enable_server_extension(venv: Path) -> str:
    python = venv / "bin" / "python"
    name = server_extension(python)
    subprocess.run(
        [str(python), "-m", "jupyter", "server", "extension", "enable", "--sys-prefix", name],
        check=True,
        capture_output=True,
    )
    return name


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("venv", type=Path, help="the virtual environment, e.g. .venv")
    venv = parser.parse_args(argv).venv.resolve()
    if not (venv / "bin" / "python").exists():
        parser.error(f"no Python environment at {venv}")
    path = write_overrides(venv)
    name = enable_server_extension(venv)
    print(f"JupyterLab: {VIEWER!r} is the default viewer for .md ({path})")
    print(f"JupyterLab: server extension {name!r} enabled in {venv}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
