"""Put the live model of pretrained-heads into the built site: _build/html/_static/live-minilm/.

The site's build writes these files itself when ONNX Runtime Web is installed
(``book/_ext/mha_site/live_model.py``, which says what each file is); this script writes the
same files alone, and fails when the runtime is missing, so that ``make book`` (which runs it
after the build, ``scripts/build_book.py``) always ships the live model:

- the graph of MiniLM's attention (:mod:`mha.models.minilm_onnx`), its weights stored as
  ``SERVED_WEIGHTS`` (:mod:`mha.models.onnx_weights`), and the model's ``tokenizer.json``;
- ONNX Runtime Web's wasm build (``make node`` installs it);
- ``manifest.json`` and ``file/NAME.js`` (the files as classic scripts, for ``file://``).

Usage: ``python scripts/build_live_model.py``.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "book" / "_ext"))

from mha_site import live_model  # noqa: E402 (the site's extension, beside the book)

TARGET = ROOT / "_build" / "html" / "_static" / live_model.FOLDER
CACHE = ROOT / "_build" / ".live_model"


def build(target: Path = TARGET, cache: Path = CACHE) -> dict:
    """Write the live model's files into ``target`` and return the manifest.

    Raises:
        FileNotFoundError: if onnxruntime-web is not installed (run ``make node``).
    """
    prepared = live_model.prepare(ROOT, cache)
    if prepared is None:
        raise FileNotFoundError(
            f"onnxruntime-web is not installed under {live_model.ort_dist(ROOT).parent}; run "
            "`make node` (npm ci in scripts/node)"
        )
    live_model.write_files(prepared, target)
    return prepared["manifest"]


def main() -> int:
    manifest = build()
    print(
        f"Live model in {TARGET.relative_to(ROOT)}: model {manifest['model_bytes'] / 1e6:.1f} MB "
        f"({manifest['weights']} weights), runtime {manifest['runtime_bytes'] / 1e6:.1f} MB "
        f"(onnxruntime-web {manifest['onnxruntime_web']})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
