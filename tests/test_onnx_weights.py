"""Tests for mha.models.onnx_weights: a graph's large weights stored as float16 or int8.

A small graph (an embedding lookup, then a matrix product) is compressed and run by ONNX
Runtime: each stored weight is within its rounding bound of float32 (float16: a relative
2^-11; int8: half a step of its block's scale), small tensors stay float32, and the file is
smaller.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
onnxruntime = pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from mha.models import onnx_weights  # noqa: E402

ROWS, VOCAB, COLS = 64, 50, 96  # weight (64, 96): 2 int8 blocks of 32 rows; table (50, 64)


@pytest.fixture(scope="module")
def graph(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, np.ndarray]]:
    rng = np.random.default_rng(0)
    weights = {
        "table": rng.normal(size=(VOCAB, ROWS)).astype(np.float32),  # rows looked up
        "w": (rng.normal(size=(ROWS, COLS)) * np.linspace(0.01, 3, COLS)).astype(np.float32),
        "bias": rng.normal(size=(1, COLS)).astype(np.float32),  # too small to compress
    }
    nodes = [
        helper.make_node("Gather", ["table", "ids"], ["x"]),  # (n, ROWS)
        helper.make_node("MatMul", ["x", "w"], ["xw"]),  # (n, COLS)
        helper.make_node("Add", ["xw", "bias"], ["y"]),
    ]
    g = helper.make_graph(
        nodes,
        "small",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, ["n"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", COLS])],
        [numpy_helper.from_array(v, k) for k, v in weights.items()],
    )
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)], ir_version=9)
    path = tmp_path_factory.mktemp("graph") / "f32.onnx"
    onnx.save(model, str(path))
    return path, weights


def _run(path: Path, ids: np.ndarray) -> np.ndarray:
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return session.run(["y"], {"ids": ids})[0]


def _stored(path: Path) -> dict[str, np.ndarray]:
    return {i.name: numpy_helper.to_array(i) for i in onnx.load(str(path)).graph.initializer}


def test_float16_weights_stay_within_float16_rounding(graph, tmp_path: Path) -> None:
    source, weights = graph
    target = onnx_weights.compress_weights(source, tmp_path / "f16.onnx", "float16", min_size=1000)
    stored = _stored(target)
    assert stored["bias"].dtype == np.float32  # 96 entries: kept as they are
    for name in ("table", "w"):
        back = stored[f"{name}__f16"].astype(np.float32)
        assert np.all(np.abs(back - weights[name]) <= np.abs(weights[name]) * 2.0**-11)
    ids = np.arange(VOCAB, dtype=np.int64)
    expected = weights["table"][ids] @ weights["w"].astype(np.float64) + weights["bias"]
    restored = stored["table__f16"].astype(np.float64) @ stored["w__f16"].astype(np.float64)
    got = _run(target, ids)
    # float32 products of 64 terms of order 10: the float16-stored weights, run in float32
    assert np.abs(got - (restored + weights["bias"])).max() < 1e-3
    assert np.abs(got - expected).max() > 0  # the weights were rounded indeed
    assert target.stat().st_size < 0.6 * source.stat().st_size


def test_int8_weights_move_by_at_most_half_a_step_of_their_block(graph, tmp_path: Path) -> None:
    source, weights = graph
    target = onnx_weights.compress_weights(source, tmp_path / "i8.onnx", "int8", min_size=1000)
    stored = _stored(target)
    # w: (64, 96) in blocks of 32 rows per column, one scale per block and column
    q, scale = stored["w__q"], stored["w__scale"]
    assert q.dtype == np.int8 and q.shape == (2, 32, COLS) and scale.shape == (2, 1, COLS)
    back = (q.astype(np.float32) * scale).reshape(ROWS, COLS)
    assert np.all(
        np.abs(back - weights["w"]) <= scale.repeat(32, axis=0).reshape(ROWS, COLS) / 2 + 1e-7
    )
    # table: 50 rows do not divide into blocks of 32: one scale per row
    tq, tscale = stored["table__q"], stored["table__scale"]
    assert tq.shape == (VOCAB, ROWS) and tscale.shape == (VOCAB, 1)
    assert np.all(np.abs(tq * tscale - weights["table"]) <= tscale / 2 + 1e-7)
    ids = np.array([3, 0, 49, 3], dtype=np.int64)
    expected = (tq * tscale)[ids].astype(np.float64) @ back.astype(np.float64) + weights["bias"]
    assert np.abs(_run(target, ids) - expected).max() < 1e-3
    assert target.stat().st_size < 0.35 * source.stat().st_size


def test_compress_weights_refuses_unknown_kinds_and_sizes(graph, tmp_path: Path) -> None:
    source, _ = graph
    with pytest.raises(
        ValueError, match=r"dtype must be one of \('float16', 'int8'\); got dtype='int4'"
    ):
        onnx_weights.compress_weights(source, tmp_path / "x.onnx", "int4")
    with pytest.raises(ValueError, match=r"block must be positive; got block=0"):
        onnx_weights.compress_weights(source, tmp_path / "x.onnx", "int8", block=0)
    with pytest.raises(ValueError, match=r"source must be an ONNX file"):
        onnx_weights.compress_weights(tmp_path / "none.onnx", tmp_path / "x.onnx", "int8")
    with pytest.raises(TypeError, match=r"target must be a path"):
        onnx_weights.compress_weights(source, 3, "int8")
    assert not (tmp_path / "x.onnx").exists()
