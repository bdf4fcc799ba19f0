"""The live model's size against its attention: float32, float16 and int8 weights, measured.

Stores the weights of the live model's ONNX graph (MiniLM's attention,
:mod:`mha.models.minilm_onnx`) as float16 and as int8 (:mod:`mha.models.onnx_weights`), runs
each with ONNX Runtime on the CPU over held-out sentences (:func:`held_out_sentences`: 200
sentences of Python's own documentation, none of which a chapter uses) and prints, against the
float32 graph: the file's size, the largest difference of any attention weight, and the
share of rows (layer, head, query) whose most-attended key is the same. The site serves the
smallest graph within :data:`TOLERANCE` (``book/_ext/mha_site/live_model.py``).

Usage: ``python scripts/live_model_sizes.py [FLOAT32.onnx]`` (default: the graph that
``make book`` exported, exported first if needed).
"""

from __future__ import annotations

import re
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
CACHE = ROOT / "_build" / ".live_model"

TOLERANCE = {"max_weight_difference": 0.01, "same_top_key": 0.99}
"""What a smaller graph must keep of float32's attention on the held-out sentences: no weight
moves by more than 0.01, and the most-attended key of at least 99% of rows is the same."""


def held_out_sentences(count: int = 200) -> list[str]:
    """``count`` English sentences from Python's documentation (``pydoc_data.topics``) that
    no chapter of the book contains: 8 to 30 words, plain punctuation, evenly spread."""
    from pydoc_data.topics import topics

    text = re.sub(r"\s+", " ", " ".join(topics[key] for key in sorted(topics)))
    book = " ".join(path.read_text(encoding="utf8") for path in (ROOT / "book").glob("*.md"))
    found: list[str] = []
    for sentence in re.split(r"(?<=[.!?])\s+(?=[A-Z])", text):
        words = sentence.split()
        plain = not re.search(r"[^A-Za-z0-9 ,.;:'()\-!?]", sentence)
        new = sentence not in found and sentence not in book
        if 8 <= len(words) <= 30 and plain and sentence.endswith(".") and new:
            found.append(sentence)
    if len(found) < count:
        raise ValueError(f"count must be at most {len(found)}; got {count}")
    step = len(found) // count
    return found[::step][:count]


def attention(path: Path, ids: list[np.ndarray]) -> list[np.ndarray]:
    """The graph's attention weights ``(num_layers, H, L, L)`` for each text's ids, run by
    ONNX Runtime on the CPU (one session for all texts)."""
    import onnxruntime

    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return [session.run(["weights"], {"input_ids": row[None, :]})[0] for row in ids]


def compare(reference: list[np.ndarray], other: list[np.ndarray]) -> dict[str, float]:
    """The largest weight difference and the share of rows with the same most-attended key."""
    worst, same, rows = 0.0, 0, 0
    for a, b in zip(reference, other, strict=True):
        worst = max(worst, float(np.abs(a - b).max()))
        same += int((a.argmax(-1) == b.argmax(-1)).sum())
        rows += a.shape[0] * a.shape[1] * a.shape[2]
    return {"max_weight_difference": worst, "same_top_key": same / rows}


def within(measured: dict[str, float]) -> bool:
    """Whether a measurement keeps :data:`TOLERANCE`."""
    return (
        measured["max_weight_difference"] <= TOLERANCE["max_weight_difference"]
        and measured["same_top_key"] >= TOLERANCE["same_top_key"]
    )


def main() -> int:
    from tokenizers import Tokenizer

    from mha.models import minilm_onnx, onnx_weights
    from mha.models.minilm import model_dir

    sentences = held_out_sentences()
    tokenizer = Tokenizer.from_file(str(model_dir() / "tokenizer.json"))
    tokenizer.no_padding()  # the file pads to 128; the live page runs each text as it is
    tokenizer.no_truncation()
    ids = [np.array(e.ids, dtype=np.int64) for e in tokenizer.encode_batch(sentences)]
    with tempfile.TemporaryDirectory() as tmp:
        if len(sys.argv) > 1:
            f32 = Path(sys.argv[1])
        else:
            f32 = minilm_onnx.build_cached(Path(tmp), CACHE)["model"]
        reference = attention(f32, ids)
        print(f"{len(sentences)} held-out sentences, {sum(len(i) for i in ids)} tokens")
        print(f"{'weights':8} {'MB':>7} {'max |dA|':>9} {'same top key':>13}  s/sentence  ok")
        for dtype in ("float32", *onnx_weights.DTYPES):
            path = f32 if dtype == "float32" else Path(tmp) / f"{dtype}.onnx"
            if dtype != "float32":
                onnx_weights.compress_weights(f32, path, dtype)
            start = time.perf_counter()
            got = attention(path, ids)
            seconds = (time.perf_counter() - start) / len(ids)
            m = compare(reference, got)
            print(
                f"{dtype:8} {path.stat().st_size / 1e6:7.1f} {m['max_weight_difference']:9.2e} "
                f"{m['same_top_key']:13.4%}  {seconds:10.3f}  {'yes' if within(m) else 'NO'}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
