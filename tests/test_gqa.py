"""Grouped-query and multi-query attention: the general case of the one implementation.

MHA is H_kv = H through the same code; GQA equals MHA with each key/value head repeated for
its group; both backends agree with each other and with PyTorch's SDPA (enable_gqa); the
conversions mean-pool and repeat heads; the module, the converters and the FLOP model know
H_kv.
"""

from __future__ import annotations

from itertools import product

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import mha
from mha.backends import np_backend, torch_backend
from mha.core.params import MHAParams, init_params, mean_pool_kv_heads, repeat_kv_heads
from mha.cost import arithmetic, measure
from mha.numerics import tolerance

B, L, S, D, H = 2, 5, 7, 24, 6
KV_HEADS = [6, 3, 2, 1]  # MHA, two GQA groupings, MQA
FORMS = ["per_head", "fused", "packed"]


def inputs(cross: bool, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((B, L, D))
    return x, (rng.standard_normal((B, S, D)) if cross else x)


def masks(cross: bool) -> dict[str, np.ndarray | None]:
    s = S if cross else L
    per_head = np.random.default_rng(9).random((B, H, L, s)) < 0.7
    per_head[0, 1, 2] = False  # one fully masked row
    return {
        "none": None,
        "causal": np_backend.causal_mask(L, s, align="bottom_right"),
        "padding": np_backend.key_padding_mask([s, 2], s),
        "per head": per_head,
    }


def test_mha_is_gqa_with_as_many_key_value_heads_as_heads() -> None:
    """The same draws and the same code path: equal, not only close."""
    a, b = init_params(D, H, seed=3), init_params(D, H, num_kv_heads=H, seed=3)
    assert a.num_kv_heads == H and a.group_size == 1 and a.kv_width == D
    for name in ("w_qkv", "w_o", "b_qkv", "b_o"):
        assert np.array_equal(getattr(a, name), getattr(b, name))  # exact: the same draws
    x, kv = inputs(cross=True)
    for form in FORMS:
        out_a, w_a = np_backend.multi_head_attention(x, kv, kv, a, form=form)
        out_b, w_b = np_backend.multi_head_attention(x, kv, kv, b, form=form)
        assert np.array_equal(out_a, out_b)  # exact: one code path, the same values
        assert np.array_equal(w_a, w_b)  # exact: one code path, the same values


@pytest.mark.parametrize(
    ("h_kv", "form", "cross", "need_weights"),
    list(product(KV_HEADS, FORMS, [False, True], [True, False])),
)
def test_gqa_equals_mha_with_repeated_key_value_heads(h_kv, form, cross, need_weights) -> None:
    params = init_params(D, H, num_kv_heads=h_kv, seed=1)
    wide = repeat_kv_heads(params)
    assert (wide.num_kv_heads, wide.w_k.shape) == (H, (D, D))
    x, kv = inputs(cross)
    for name, mask in masks(cross).items():
        out_tol, w_tol = tolerance.attention_tolerance(x, kv, kv, wide, mask)
        for backend, convert in (
            (np_backend, lambda a: a),
            (torch_backend, lambda a: None if a is None else torch.from_numpy(a)),
        ):
            p, w_p = (
                (params, wide) if backend is np_backend else (params.to_torch(), wide.to_torch())
            )
            q_in, kv_in = convert(x), convert(kv)
            kv_in = q_in if not cross else kv_in
            got = backend.multi_head_attention(
                q_in, kv_in, kv_in, p, convert(mask), form=form, need_weights=need_weights
            )
            ref = backend.multi_head_attention(
                q_in, kv_in, kv_in, w_p, convert(mask), form=form, need_weights=need_weights
            )
            tolerance.assert_close(got[0], ref[0], out_tol, name=f"{name} output")
            if need_weights:
                tolerance.assert_close(got[1], ref[1], w_tol, name=f"{name} weights")
            else:
                assert got[1] is None
            if name == "per head" and got[1] is not None:
                assert (np.asarray(got[1])[0, 1, 2] == 0).all()  # the fully masked row


@pytest.mark.parametrize("h_kv", KV_HEADS)
def test_gqa_agrees_with_pytorch_sdpa_enable_gqa(h_kv: int) -> None:
    params = init_params(D, H, num_kv_heads=h_kv, seed=2).to_torch()
    x = torch.from_numpy(inputs(cross=False)[0])
    q = torch_backend.split_heads(x @ params.w_q + params.b_q, H)  # (B, H, L, Dh)
    k = torch_backend.split_heads(x @ params.w_k + params.b_k, h_kv)  # (B, H_kv, L, Dh)
    v = torch_backend.split_heads(x @ params.w_v + params.b_v, h_kv)
    mask = torch_backend.causal_mask(L)
    heads = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
    expected = torch_backend.merge_heads(heads) @ params.w_o + params.b_o
    out_tol, _ = tolerance.attention_tolerance(x, x, x, params, mask)
    for need_weights in (True, False):
        out, _ = torch_backend.multi_head_attention(
            x, x, x, params, mask, need_weights=need_weights
        )
        tolerance.assert_close(out, expected, out_tol)


def one_query_masks() -> dict[str, np.ndarray | None]:
    """Masks of one query per head against S keys, as in a decoding step."""
    per_head = np.random.default_rng(8).random((B, H, 1, S)) < 0.7
    per_head[0, 1] = False  # one fully masked row
    return {
        "none": None,
        "shared (S,)": np.arange(S) < S - 2,
        "padding": np_backend.key_padding_mask([S, 2], S),  # (B, 1, 1, S)
        "per head": per_head,  # (B, H, 1, S)
    }


@pytest.mark.parametrize("h_kv", KV_HEADS)
def test_a_decoding_step_without_weights_equals_the_step_with_weights(h_kv: int) -> None:
    """One query per head takes the fast path's own route for groups (queries as rows)."""
    params = init_params(D, H, num_kv_heads=h_kv, seed=6)
    rng = np.random.default_rng(7)
    x, kv = rng.standard_normal((B, 1, D)), rng.standard_normal((B, S, D))  # one new token
    tx, tkv, tp = torch.from_numpy(x), torch.from_numpy(kv), params.to_torch()
    for name, mask in one_query_masks().items():
        t_mask = None if mask is None else torch.from_numpy(mask)
        out_tol, _ = tolerance.attention_tolerance(x, kv, kv, params, mask)
        fast, none = torch_backend.multi_head_attention(
            tx, tkv, tkv, tp, t_mask, need_weights=False
        )
        explicit, _ = torch_backend.multi_head_attention(tx, tkv, tkv, tp, t_mask)
        reference, _ = np_backend.multi_head_attention(x, kv, kv, repeat_kv_heads(params), mask)
        assert none is None
        tolerance.assert_close(fast, explicit, out_tol, name=f"{name} fast against explicit")
        tolerance.assert_close(fast, reference, out_tol, name=f"{name} against repeated heads")


@pytest.mark.parametrize(("h_kv", "dtype"), list(product(KV_HEADS, [np.float32, np.float64])))
def test_numpy_and_pytorch_agree_on_gqa(h_kv: int, dtype) -> None:
    params = init_params(D, H, num_kv_heads=h_kv, seed=4, dtype=dtype)
    x, kv = (a.astype(dtype) for a in inputs(cross=True, seed=5))
    mask = masks(cross=True)["per head"]
    out, w = np_backend.multi_head_attention(x, kv, kv, params, mask)
    tk = torch.from_numpy(kv)
    t_out, t_w = torch_backend.multi_head_attention(
        torch.from_numpy(x), tk, tk, params.to_torch(), torch.from_numpy(mask)
    )
    out_tol, w_tol = tolerance.attention_tolerance(x, kv, kv, params, mask)
    tolerance.assert_close(t_out, out, out_tol)
    tolerance.assert_close(t_w, w, w_tol)


def test_each_group_of_query_heads_shares_one_key_and_value_head() -> None:
    params = init_params(D, H, num_kv_heads=2, seed=6)  # G = 3: heads 0-2 and 3-5
    assert params.group_size == 3 and params.w_k.shape == (D, 2 * (D // H))
    for h in range(H):
        g = h // 3
        kv_cols = slice(g * (D // H), (g + 1) * (D // H))
        head = params.head(h)
        assert np.array_equal(head["w_k"], params.w_k[:, kv_cols])  # exact: views
        assert np.array_equal(head["b_v"], params.b_v[kv_cols])  # exact: views
    assert np.shares_memory(params.head(0)["w_k"], params.head(2)["w_k"])


def test_mean_pooling_averages_the_key_and_value_heads_of_each_group() -> None:
    Dh = D // H
    rng = np.random.default_rng(7)
    w_q, w_o = rng.integers(-4, 5, (D, D)).astype(float), np.eye(D)
    w_k, w_v = (rng.integers(-4, 5, (D, D)).astype(float) for _ in range(2))  # integers:
    b = [rng.integers(-4, 5, D).astype(float) for _ in range(4)]  # their means of 2 are exact
    params = MHAParams.from_qkv(w_q, w_k, w_v, w_o, H, *b)
    pooled = mean_pool_kv_heads(params, 3)  # pairs of heads: (0, 1), (2, 3), (4, 5)
    assert pooled.num_kv_heads == 3 and pooled.w_k.shape == (D, 3 * Dh)
    for g in range(3):
        new = slice(g * Dh, (g + 1) * Dh)
        first, second = (
            slice(2 * g * Dh, (2 * g + 1) * Dh),
            slice((2 * g + 1) * Dh, (2 * g + 2) * Dh),
        )
        # exact: halves of sums of small integers
        assert np.array_equal(pooled.w_k[:, new], (w_k[:, first] + w_k[:, second]) / 2)
        assert np.array_equal(
            pooled.w_v[:, new], (w_v[:, first] + w_v[:, second]) / 2
        )  # exact: ditto
        assert np.array_equal(pooled.b_k[new], (b[1][first] + b[1][second]) / 2)  # exact: ditto
    assert np.array_equal(pooled.w_q, w_q) and np.array_equal(pooled.w_o, w_o)  # exact: copies
    again = mean_pool_kv_heads(pooled, 3)  # to its own H_kv: a copy
    assert np.array_equal(again.w_qkv, pooled.w_qkv)  # exact: means of one head
    mqa = mean_pool_kv_heads(pooled, 1)
    assert mqa.num_kv_heads == 1
    tolerance.assert_close(mqa.w_k, w_k.reshape(D, H, Dh).mean(1), 1e-12)


def test_mean_pooling_of_identical_heads_changes_nothing() -> None:
    """Heads that already agree in each group pool to the same layer: the output is kept."""
    gqa = init_params(D, H, num_kv_heads=2, seed=8)
    wide = repeat_kv_heads(gqa)  # each group's heads identical
    back = mean_pool_kv_heads(wide, 2)
    tolerance.assert_close(back.w_qkv, gqa.w_qkv, tolerance.rounding_tolerance(np.float64, terms=3))


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (
            lambda: init_params(D, H, num_kv_heads=4),
            ValueError,
            "num_kv_heads must divide num_heads; got num_heads=6, num_kv_heads=4",
        ),
        (lambda: init_params(D, H, num_kv_heads=0), ValueError, "num_kv_heads must be positive"),
        (lambda: init_params(D, H, num_kv_heads=2.0), TypeError, "num_kv_heads must be an int"),
        (
            lambda: mean_pool_kv_heads(init_params(D, H, num_kv_heads=2), 3),
            ValueError,
            "num_kv_heads must divide num_heads; got num_heads=2, num_kv_heads=3",
        ),
        (
            lambda: mha.to_torch_mha(init_params(D, H, num_kv_heads=2)),
            ValueError,
            r"nn.MultiheadAttention has no grouped-query layout.*repeat_kv_heads",
        ),
        (
            lambda: MHAParams(np.ones((D, D + 8)), np.ones((D, D)), None, None, H, 2),
            ValueError,
            r"w_qkv must have shape \(D, D \+ 2 H_kv Dh\) = \(24, 40\)",
        ),
    ],
)
def test_bad_key_value_head_counts_are_refused(call, error, match) -> None:
    with pytest.raises(error, match=match):
        call()


def test_repeated_heads_convert_to_nn_multihead_attention_with_the_same_output() -> None:
    params = init_params(D, H, num_kv_heads=3, seed=9)
    m = mha.to_torch_mha(repeat_kv_heads(params))
    x = torch.from_numpy(inputs(cross=False)[0])
    theirs, _ = m(x, x, x, need_weights=False)
    ours, _ = torch_backend.multi_head_attention(x, x, x, params.to_torch())
    out_tol, _ = tolerance.attention_tolerance(x, x, x, params)
    tolerance.assert_close(theirs, ours, out_tol)


def test_module_with_key_value_heads_has_narrower_projections_and_runs_the_backend() -> None:
    module = mha.MultiHeadAttention(D, H, num_kv_heads=2, seed=10, dtype=torch.float64)
    kv_cols = 2 * (D // H)
    assert module.w_qkv.shape == (D, D + 2 * kv_cols) and module.num_kv_heads == 2
    n = sum(p.numel() for p in module.parameters())
    assert n == D * (D + 2 * kv_cols) + D * D + (D + 2 * kv_cols) + D
    x = torch.from_numpy(inputs(cross=False)[0])
    out, _ = module(x)
    ref, _ = torch_backend.multi_head_attention(
        x, x, x, init_params(D, H, num_kv_heads=2, seed=10).to_torch()
    )
    tolerance.assert_close(out, ref, tolerance.attention_tolerance(x, x, x, module.params())[0])
    back = mha.MultiHeadAttention.from_params(module.params())
    assert back.num_kv_heads == 2 and torch.equal(back.w_qkv, module.w_qkv)  # exact: a copy


@pytest.mark.parametrize("h_kv", KV_HEADS)
def test_flop_model_counts_the_narrower_key_value_projections(h_kv: int) -> None:
    params = init_params(D, H, num_kv_heads=h_kv, seed=11).to_torch()
    x, kv = (torch.from_numpy(a) for a in inputs(cross=True))
    counted = measure.count_flops(
        lambda: torch_backend.multi_head_attention(x, kv, kv, params, form="fused")
    )
    model = arithmetic.attention_flops(B, L, S, D, H, num_kv_heads=h_kv)
    assert sum(counted.values()) == model.matmul
    assert model.k_proj == model.v_proj == 2 * B * S * D * h_kv * (D // H)
