"""Tests for mha.models.minilm_onnx: MiniLM's attention exported to ONNX for the reader's browser.

The exported float32 graph, run by ONNX Runtime on the CPU, must give the attention weights,
value norms and value-weighted shares that this package computes, to ``LIVE_TOLERANCE``, on
sentences that no chapter uses. ONNX Runtime's dynamic int8 quantisation is measured: it moves
the weights far past that tolerance. The graph the site serves stores its weights as float16
(:mod:`mha.models.onnx_weights`): held to ``SERVED_TOLERANCE``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from mha.models import minilm_onnx
from mha.models.minilm import load_minilm

LIVE_TOLERANCE = 1e-4
"""Largest absolute difference allowed between float32 ONNX Runtime and the package."""
SERVED_TOLERANCE = 0.01
"""Largest difference of any attention weight allowed between the served (float16-weight) graph
and the package: the tolerance ``scripts/live_model_sizes.py`` chose the served graph by."""

SENTENCES = [
    "Quantum foxes juggle marmalade beneath violet skies.",
    "Ça coûte 12 € — naïve façade? Ünïcödé, ñandú and Zürich.",
    "東京は晴れ。北京下雨了, 서울은 흐림.",
    "a",
    "",
    "[CLS] pretend tokens [SEP] in the middle [MASK] of text!!!",
    "Emoji 🙂 and tabs\tand\nnewlines, numbers 3.14159 and e-mail x@y.org.",
]


@pytest.fixture(scope="module")
def model():
    return load_minilm()


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory, model) -> Path:
    return minilm_onnx.export_attention_onnx(tmp_path_factory.mktemp("onnx") / "f32.onnx", model)


@pytest.mark.parametrize("text", SENTENCES)
def test_onnx_float32_attention_matches_the_package(model, exported: Path, text: str) -> None:
    ref = minilm_onnx.reference_views(model, text)
    weights, norms = minilm_onnx.run_onnx(exported, ref["input_ids"])
    L = len(ref["tokens"])
    assert weights.shape == (6, 12, L, L) and norms.shape == (6, 12, L)
    assert np.abs(weights - ref["weights"]).max() < LIVE_TOLERANCE
    # norms are of order 1 to 10: compared relative to the largest of each text
    assert np.abs(norms - ref["value_norms"]).max() < LIVE_TOLERANCE * ref["value_norms"].max()
    shares = minilm_onnx.circuits.value_weighted_attention(weights, norms)
    assert np.abs(shares - ref["value_weighted"]).max() < LIVE_TOLERANCE


def test_onnx_graph_takes_any_length_up_to_the_model_limit(model, exported: Path) -> None:
    ids = torch.randint(1000, 29000, (1, 512), generator=torch.Generator().manual_seed(0))
    ids[0, 0], ids[0, -1] = 101, 102  # [CLS] ... [SEP]
    weights, _ = minilm_onnx.run_onnx(exported, ids.numpy())
    with torch.no_grad():
        ref = torch.cat(model.forward(ids).attentions).double().numpy()  # (6, 12, 512, 512)
    assert np.abs(weights - ref).max() < LIVE_TOLERANCE


def test_int8_quantisation_moves_attention_past_the_tolerance(model, exported: Path) -> None:
    int8 = minilm_onnx.quantize_weights(exported, exported.with_name("int8.onnx"))
    assert int8.stat().st_size < 0.8 * exported.stat().st_size
    ref = minilm_onnx.reference_views(model, SENTENCES[0])
    weights, _ = minilm_onnx.run_onnx(int8, ref["input_ids"])
    assert np.abs(weights - ref["weights"]).max() > 100 * LIVE_TOLERANCE


def test_build_cached_exports_once_per_key(tmp_path: Path, exported: Path, monkeypatch) -> None:
    calls = []

    def fake_export(path, model=None):
        calls.append(path)
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_bytes(exported.read_bytes())
        return Path(path)

    monkeypatch.setattr(minilm_onnx, "export_attention_onnx", fake_export)
    first = minilm_onnx.build_cached(tmp_path / "out", tmp_path / "cache")
    second = minilm_onnx.build_cached(tmp_path / "out2", tmp_path / "cache")
    assert len(calls) == 1
    assert first["model"].read_bytes() == second["model"].read_bytes()
    assert first["model"].name == minilm_onnx.FLOAT32_NAME
    assert second["tokenizer"].read_bytes() == (first["tokenizer"]).read_bytes()
    monkeypatch.setattr(minilm_onnx, "OPSET", minilm_onnx.OPSET + 1)  # a new key
    minilm_onnx.build_cached(tmp_path / "out3", tmp_path / "cache")
    assert len(calls) == 2


def test_build_cached_stores_float16_weights_once_and_refuses_other_kinds(
    tmp_path: Path, model, exported: Path, monkeypatch
) -> None:
    monkeypatch.setattr(minilm_onnx, "export_attention_onnx", lambda path, model=None: None)
    cached = tmp_path / "cache" / minilm_onnx.cache_key()[:16]
    cached.mkdir(parents=True)
    (cached / minilm_onnx.FLOAT32_NAME).write_bytes(exported.read_bytes())
    f16 = minilm_onnx.build_cached(tmp_path / "out", tmp_path / "cache", weights="float16")
    assert f16["model"].name == minilm_onnx.WEIGHTS_NAMES["float16"]
    assert f16["model"].stat().st_size < 0.55 * exported.stat().st_size
    ref = minilm_onnx.reference_views(model, SENTENCES[1])
    weights, _ = minilm_onnx.run_onnx(f16["model"], ref["input_ids"])
    assert np.abs(weights - ref["weights"]).max() < SERVED_TOLERANCE
    with pytest.raises(ValueError, match=r"weights must be one of .*; got 'int4'"):
        minilm_onnx.build_cached(tmp_path / "out", tmp_path / "cache", weights="int4")


def test_export_refuses_a_float64_model(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match=r"model must be float32; got torch.float64"):
        minilm_onnx.export_attention_onnx(tmp_path / "x.onnx", load_minilm(torch.float64))
