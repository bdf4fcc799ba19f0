"""Put the live model of pretrained-heads into the built site: _build/html/_static/live-minilm/.

- ``minilm-attention-f32.onnx``: MiniLM's attention as ONNX (:mod:`mha.models.minilm_onnx`),
  exported once per key of its inputs into ``_build/.live_model`` and copied from there;
- ``tokenizer.json``: the model's own tokenizer, from the weights package;
- ``ort.wasm.min.js``, ``ort-wasm-simd-threaded.mjs`` and ``ort-wasm-simd-threaded.wasm``:
  ONNX Runtime Web's wasm build, from the npm package ``onnxruntime-web`` pinned in
  ``scripts/node/package-lock.json`` (``make node`` installs it);
- ``manifest.json``: the file names and sizes that ``book/_static/mha-live-loader.js`` reads;
- ``file/NAME.js`` for each of these but ``ort.wasm.min.js``: the same contents as a classic
  script that hands them to ``window.mhaLivePayload`` (base64 for the binaries). A page opened
  from a file may not fetch() its neighbours; it may run scripts. Only a page opened from a
  file loads these (a third larger than the files).

``scripts/build_book.py`` runs this after the build. Usage: ``python scripts/build_live_model.py``.
"""

from __future__ import annotations

import base64
import json
import shutil
import sys
from pathlib import Path

from mha.models import minilm_onnx

ROOT = Path(__file__).resolve().parents[1]
BUILD = ROOT / "_build"
TARGET = BUILD / "html" / "_static" / "live-minilm"
CACHE = BUILD / ".live_model"
ORT_DIST = ROOT / "scripts" / "node" / "node_modules" / "onnxruntime-web" / "dist"
RUNTIME_FILES = ("ort.wasm.min.js", "ort-wasm-simd-threaded.mjs", "ort-wasm-simd-threaded.wasm")


def ort_version() -> str:
    """The installed onnxruntime-web's version (``make node`` installs the pinned one)."""
    package = ORT_DIST.parent / "package.json"
    if not package.is_file():
        raise FileNotFoundError(
            f"onnxruntime-web is not installed under {ORT_DIST.parent}; run `make node` "
            "(npm ci in scripts/node)"
        )
    return json.loads(package.read_text(encoding="utf8"))["version"]


def build(target: Path = TARGET, cache: Path = CACHE) -> dict:
    """Write the live model's files into ``target`` and return the manifest.

    Raises:
        FileNotFoundError: if onnxruntime-web is not installed (run ``make node``).
    """
    version = ort_version()
    paths = minilm_onnx.build_cached(target, cache)
    runtime_bytes = 0
    for name in RUNTIME_FILES:
        source = ORT_DIST / name
        shutil.copyfile(source, target / name)
        runtime_bytes += source.stat().st_size
    manifest = {
        "model": paths["float32"].name,
        "model_bytes": paths["float32"].stat().st_size,
        "tokenizer": paths["tokenizer"].name,
        "runtime": RUNTIME_FILES[0],
        "runtime_bytes": runtime_bytes,
        "wasm_module": RUNTIME_FILES[1],
        "wasm": RUNTIME_FILES[2],
        "onnxruntime_web": version,
        "key": minilm_onnx.cache_key(),
    }
    (target / "manifest.json").write_text(json.dumps(manifest, indent=1), encoding="utf8")
    scripts = target / "file"
    scripts.mkdir(exist_ok=True)
    for name in ("manifest.json", manifest["tokenizer"]):
        _payload(scripts, name, (target / name).read_text(encoding="utf8"))  # JSON as is
    _payload(scripts, RUNTIME_FILES[1], json.dumps((target / RUNTIME_FILES[1]).read_text("utf8")))
    for name in (manifest["model"], RUNTIME_FILES[2]):
        _payload(scripts, name, '"' + base64.b64encode((target / name).read_bytes()).decode() + '"')
    return manifest


def _payload(folder: Path, name: str, literal: str) -> None:
    """Write ``folder/NAME.js``: ``window.mhaLivePayload(NAME, LITERAL);``."""
    text = f"window.mhaLivePayload({json.dumps(name)}, {literal});\n"
    path = folder / f"{name}.js"
    if not (
        path.is_file()
        and path.stat().st_size == len(text.encode())
        and path.read_text("utf8") == text
    ):
        path.write_text(text, encoding="utf8")


def main() -> int:
    manifest = build()
    print(
        f"Live model in {TARGET.relative_to(ROOT)}: model {manifest['model_bytes'] / 1e6:.1f} MB, "
        f"runtime {manifest['runtime_bytes'] / 1e6:.1f} MB (onnxruntime-web "
        f"{manifest['onnxruntime_web']})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
