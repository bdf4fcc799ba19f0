"""The live model's files, built with the site: ``_static/live-minilm/`` (pretrained-heads).

When a build starts (HTML builders), the files are prepared in ``_build/.live_model`` if
ONNX Runtime Web is installed (``scripts/node``, by ``make node``): MiniLM's attention as an
ONNX graph (:mod:`mha.models.minilm_onnx`, exported once per key of its inputs) with its
weights stored as :data:`SERVED_WEIGHTS` (:mod:`mha.models.onnx_weights`), the model's
tokenizer and the runtime. Their sizes go on the live panel's button
(:func:`site_files`, used by :mod:`.explorables`). When the HTML build finishes they are
written into the site (:func:`write_files`), with ``manifest.json``, which
``_static/mha-live-loader.js`` reads, and ``file/NAME.js`` for each file but the runtime's
script: the same contents as a classic script handing them to ``window.mhaLivePayload``
(base64 for binaries), which a page opened from a file may run where it may not fetch().

Without ONNX Runtime Web (a plain ``jupyter-book build`` before ``make node``) nothing is
written and the panel says that the live model is not in this build: no page links to a
missing file. ``scripts/build_live_model.py`` writes the files alone.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

from sphinx.application import Sphinx
from sphinx.util import logging

from .files import copy_if_changed, write_if_changed

logger = logging.getLogger(__name__)

SERVED_WEIGHTS = "float16"
"""How the served graph stores its weights: the smallest that keeps the tolerance of
``scripts/live_model_sizes.py`` against float32 (measured there, asserted in the browser)."""
RUNTIME_FILES = ("ort.wasm.min.js", "ort-wasm-simd-threaded.mjs", "ort-wasm-simd-threaded.wasm")
FOLDER = "live-minilm"  # in _static


def ort_dist(root: Path) -> Path:
    """ONNX Runtime Web's ``dist`` folder under ``scripts/node`` (``make node`` installs it)."""
    return root / "scripts" / "node" / "node_modules" / "onnxruntime-web" / "dist"


def prepare(root: Path, cache: Path, weights: str = SERVED_WEIGHTS) -> dict[str, Any] | None:
    """The files of the live model and their manifest, ready in ``cache``; ``None`` without
    ONNX Runtime Web.

    Args:
        root: the repository (the book's source folder).
        cache: where exported graphs are kept (``_build/.live_model``).
        weights: how the served graph stores its weights (``"float32"``, ``"float16"``,
            ``"int8"``).

    Returns:
        ``{"manifest": ..., "files": {name: path}}``, or ``None``.
    """
    dist = ort_dist(root)
    package = dist.parent / "package.json"
    if not package.is_file():
        return None
    from mha.models import minilm_onnx

    staged = cache / "site"
    paths = minilm_onnx.build_cached(staged, cache, weights=weights)
    files = {path.name: path for path in (paths["model"], paths["tokenizer"])}
    files.update({name: dist / name for name in RUNTIME_FILES})
    manifest = {
        "model": paths["model"].name,
        "model_bytes": paths["model"].stat().st_size,
        "weights": weights,
        "tokenizer": paths["tokenizer"].name,
        "runtime": RUNTIME_FILES[0],
        "runtime_bytes": sum((dist / name).stat().st_size for name in RUNTIME_FILES),
        "wasm_module": RUNTIME_FILES[1],
        "wasm": RUNTIME_FILES[2],
        "onnxruntime_web": json.loads(package.read_text(encoding="utf8"))["version"],
        "key": minilm_onnx.cache_key(),
    }
    return {"manifest": manifest, "files": files}


def write_files(prepared: dict[str, Any], target: Path) -> None:
    """Write the prepared files, ``manifest.json`` and their ``file/NAME.js`` into ``target``."""
    manifest, files = prepared["manifest"], prepared["files"]
    for name, path in files.items():
        copy_if_changed(path, target / name)
    write_if_changed(target / "manifest.json", json.dumps(manifest, indent=1))
    scripts = target / "file"
    for name in ("manifest.json", manifest["tokenizer"]):
        _payload(scripts, name, (target / name).read_text(encoding="utf8"))  # JSON as is
    module = manifest["wasm_module"]
    _payload(scripts, module, json.dumps((target / module).read_text(encoding="utf8")))
    for name in (manifest["model"], manifest["wasm"]):
        encoded = base64.b64encode((target / name).read_bytes()).decode()
        _payload(scripts, name, f'"{encoded}"')


def _payload(folder: Path, name: str, literal: str) -> None:
    """Write ``folder/NAME.js``: ``window.mhaLivePayload(NAME, LITERAL);``."""
    write_if_changed(
        folder / f"{name}.js", f"window.mhaLivePayload({json.dumps(name)}, {literal});\n"
    )


def site_files(app: Sphinx):
    """The live model's files as the site serves them (``None``: not in this build)."""
    from mha.display.explorables import LiveFiles

    prepared = getattr(app, "_mha_live_model", None)
    return LiveFiles.from_manifest(prepared["manifest"]) if prepared else None


def _state(app: Sphinx) -> tuple[int, int] | None:
    files = site_files(app)
    return None if files is None else (files.model_bytes, files.runtime_bytes)


def outdated_panels(app: Sphinx, env: Any, added: set, changed: set, removed: set) -> list[str]:
    """The pages with the live panel, when what the panel says changed since the last build
    (the files became available, or their sizes changed): they are written again."""
    state = _state(app)
    if getattr(env, "mha_live_state", "unknown") == state:
        return []
    env.mha_live_state = state
    return [
        docname
        for docname in env.found_docs
        if FOLDER in Path(env.doc2path(docname)).read_text(encoding="utf8")
    ]


def prepare_live_model(app: Sphinx) -> None:
    app._mha_live_model = None  # type: ignore[attr-defined]
    if app.builder.format != "html":
        return
    root = Path(app.srcdir)
    prepared = prepare(root, root / "_build" / ".live_model")
    if prepared is None:
        logger.info(
            "mha_site: ONNX Runtime Web is not installed (make node): the live model is not "
            "in this build, and its panel says so"
        )
    app._mha_live_model = prepared  # type: ignore[attr-defined]


def write_live_model(app: Sphinx, exception: Exception | None) -> None:
    prepared = getattr(app, "_mha_live_model", None)
    if exception is not None or app.builder.name != "html" or not prepared:
        return
    write_files(prepared, Path(app.outdir) / "_static" / FOLDER)


def setup(app: Sphinx) -> None:
    app.connect("builder-inited", prepare_live_model)
    app.connect("env-get-outdated", outdated_panels)
    app.connect("build-finished", write_live_model)
