"""MHAParams (packed layout, views, conversions) and init_params (shared initialisation)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from mha import MHAParams, init_params
from mha.backends import np_backend
from mha.core.params import planted_heads
from mha.detectors import patterns

D, H = 12, 3


def test_q_k_v_weights_are_views_of_the_packed_columns() -> None:
    p = init_params(D, H)
    # exact: views of the packed columns
    np.testing.assert_array_equal(np.hstack([p.w_q, p.w_k, p.w_v]), p.w_qkv)
    # exact: views of the packed biases
    np.testing.assert_array_equal(np.concatenate([p.b_q, p.b_k, p.b_v]), p.b_qkv)
    for w in (p.w_q, p.w_k, p.w_v):
        assert np.shares_memory(w, p.w_qkv)
    assert (p.d_model, p.d_head, p.num_heads, p.dtype) == (D, D // H, H, np.float64)


def test_head_returns_the_column_and_row_blocks_of_that_head() -> None:
    p = init_params(D, H)
    Dh = D // H
    for h in range(H):
        blk = p.head(h)
        cols = slice(h * Dh, (h + 1) * Dh)
        np.testing.assert_array_equal(blk["w_q"], p.w_qkv[:, cols])  # exact: views
        # exact: views
        np.testing.assert_array_equal(blk["w_k"], p.w_qkv[:, D + h * Dh : D + (h + 1) * Dh])
        # exact: views
        np.testing.assert_array_equal(blk["w_v"], p.w_qkv[:, 2 * D + h * Dh : 2 * D + (h + 1) * Dh])
        np.testing.assert_array_equal(blk["w_o"], p.w_o[cols, :])  # exact: views
        for i, name in enumerate(("b_q", "b_k", "b_v")):
            # exact: views
            np.testing.assert_array_equal(blk[name], p.b_qkv[i * D + h * Dh : i * D + (h + 1) * Dh])
        assert {k: b.shape for k, b in blk.items()} == {
            "w_q": (D, Dh),
            "w_k": (D, Dh),
            "w_v": (D, Dh),
            "w_o": (Dh, D),
            "b_q": (Dh,),
            "b_k": (Dh,),
            "b_v": (Dh,),
        }


def test_head_of_params_without_bias_has_none_biases() -> None:
    blk = init_params(D, H, bias=False).head(1)
    assert blk["b_q"] is None and blk["b_k"] is None and blk["b_v"] is None
    assert blk["w_q"].shape == (D, D // H)


@pytest.mark.parametrize("lib", ["numpy", "torch"])
def test_from_qkv_packs_the_separate_weights(lib: str) -> None:
    p = init_params(D, H)
    if lib == "torch":
        p = p.to_torch()
    q = MHAParams.from_qkv(p.w_q, p.w_k, p.w_v, p.w_o, H, p.b_q, p.b_k, p.b_v, p.b_o)
    for name in ("w_qkv", "w_o", "b_qkv", "b_o"):
        assert (getattr(q, name) == getattr(p, name)).all()
    no_bias = MHAParams.from_qkv(p.w_q, p.w_k, p.w_v, p.w_o, H)
    assert no_bias.b_qkv is None and no_bias.b_o is None


def test_init_params_is_deterministic_per_seed() -> None:
    a, b, c = init_params(D, H, seed=7), init_params(D, H, seed=7), init_params(D, H, seed=8)
    for name in ("w_qkv", "w_o", "b_qkv", "b_o"):
        # exact: the same seeded draw
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name))
        assert not np.array_equal(getattr(a, name), getattr(c, name))  # exact: the same seeded draw


def test_init_params_scales_weights_by_one_over_sqrt_d_model() -> None:
    d = 256
    p = init_params(d, 4, seed=1)
    # N(0, 1/D) entries: the sample variance of 3 * 256^2 draws is within 2% of 1/D.
    assert abs(p.w_qkv.var() * d - 1) < 0.02
    assert abs(p.w_o.var() * d - 1) < 0.03
    # biases are small but non-zero, N(0, 0.02^2)
    assert 0.015 < p.b_qkv.std() < 0.025 and (p.b_o != 0).all()


def test_init_params_without_bias_and_in_float32() -> None:
    p = init_params(D, H, bias=False, dtype=np.float32)
    assert p.b_qkv is None and p.b_o is None
    assert p.w_qkv.dtype == np.float32 and p.w_o.dtype == np.float32
    # exact: the same values rounded to float32 once
    np.testing.assert_array_equal(p.w_qkv, init_params(D, H).w_qkv.astype(np.float32))


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16])
def test_to_torch_and_back_keeps_the_values(dtype: torch.dtype) -> None:
    p = init_params(D, H)
    t = p.to_torch(dtype)
    assert isinstance(t.w_qkv, torch.Tensor) and t.dtype == dtype
    back = t.to_numpy()
    expected = p.map(lambda a: torch.from_numpy(a).to(dtype).double().numpy())
    for name in ("w_qkv", "w_o", "b_qkv", "b_o"):
        np.testing.assert_array_equal(getattr(back, name), getattr(expected, name))  # exact: copies


def test_to_numpy_resolves_negative_views() -> None:
    p = init_params(D, H)
    back = p.to_torch().map(torch._neg_view).to_numpy()
    for name in ("w_qkv", "w_o", "b_qkv", "b_o"):
        np.testing.assert_array_equal(getattr(back, name), -getattr(p, name))  # exact: negation


def test_float64_round_trip_is_exact_and_copies() -> None:
    p = init_params(D, H)
    t = p.to_torch()
    back = t.to_numpy()
    for name in ("w_qkv", "w_o", "b_qkv", "b_o"):
        np.testing.assert_array_equal(getattr(back, name), getattr(p, name))  # exact: copies
        assert not np.shares_memory(getattr(back, name), getattr(p, name))
    t.w_qkv[0, 0] = 123.0  # the torch copy does not alias the NumPy original
    assert p.w_qkv[0, 0] != 123.0


def test_to_numpy_detaches_parameters_that_require_grad() -> None:
    t = init_params(D, H).to_torch().map(lambda a: a.requires_grad_())
    back = t.to_numpy(np.float32)
    assert back.dtype == np.float32


def test_map_keeps_missing_biases_missing() -> None:
    p = init_params(D, H, bias=False).map(lambda a: 2 * a)
    assert p.b_qkv is None and p.b_o is None
    # exact: doubling is exact
    np.testing.assert_array_equal(p.w_o, 2 * init_params(D, H, bias=False).w_o)


def test_params_is_frozen() -> None:
    p = init_params(D, H)
    with pytest.raises(AttributeError):
        p.num_heads = 4  # type: ignore[misc]


# ---- planted heads -----------------------------------------------------------------


def test_planted_heads_send_each_query_to_its_target_with_the_softmax_weight():
    targets = [[0, 0, 1, 2], [1, 2, 3, 3], [0, 0, 0, 0]]
    params, x = planted_heads(targets, d_model=12, logit=5.0)
    assert (params.num_heads, params.d_model, x.shape) == (3, 12, (1, 4, 12))
    out, w = np_backend.multi_head_attention(x, x, x, params)  # bidirectional
    n = 4
    on_target = np.exp(5.0) / (np.exp(5.0) + n - 1)
    for h, t in enumerate(targets):
        np.testing.assert_allclose(w[0, h, np.arange(n), t], on_target)
        # W_v copies positions and W_o is the identity: the output shows what was read.
        np.testing.assert_allclose(out[0, np.arange(n), h * 4 + np.array(t)], on_target)
    assert patterns.previous_token_score(w[0, 0]) == pytest.approx(on_target)
    assert patterns.first_token_score(w[0, 2]) == pytest.approx(on_target)


def test_planted_heads_under_a_causal_mask_share_the_rest_among_earlier_keys():
    params, x = planted_heads([[0, 0, 1, 2]], d_model=4, logit=3.0)
    _, w = np_backend.multi_head_attention(x, x, x, params, np_backend.causal_mask(4))
    allowed = np.arange(1, 5)  # query i may attend to i + 1 keys
    np.testing.assert_allclose(
        w[0, 0, np.arange(4), [0, 0, 1, 2]], np.exp(3) / (np.exp(3) + allowed - 1)
    )
    assert patterns.future_score(w[0, 0]) == 0.0


@pytest.mark.parametrize(
    ("targets", "d_model", "match"),
    [
        ([], 8, "targets must hold one list of positions per head"),
        (
            [[0, 1], [0]],
            8,
            r"targets must give every head the same number of queries; got \[2, 1\]",
        ),
        ([[0, 1, 2]], 2, r"d_model must be a multiple of num_heads=1 with d_head >= L=3"),
        ([[0, 1], [0, 0]], 5, r"d_model must be a multiple of num_heads=2"),
        ([[0, 3, 1]], 6, r"targets must be integer positions in \[0, L=3\); got \[\[0, 3, 1\]\]"),
    ],
)
def test_planted_heads_errors_name_the_argument(targets, d_model, match):
    with pytest.raises(ValueError, match=match):
        planted_heads(targets, d_model)
