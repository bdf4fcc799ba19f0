"""mha.backends.tiled: the online softmax, the tiled forward and the three-pass forward, against the
reference backend, with random block sizes, masks and causal skipping.

(The instrumented IO counts and the memory measurements are in tests/test_cost_tiled.py.)"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.nn.attention.bias import causal_lower_right, causal_upper_left

import mha
from mha.backends import _tiles, np_backend, tiled, torch_backend
from mha.numerics import backward as G
from mha.numerics import tolerance
from mha.numerics.tolerance import assert_close, gamma, rounding_tolerance

DTYPES = (np.float64, np.float32)


def qkv(shape_q, shape_k, d_value=None, *, dtype=np.float64, seed=0, scale=1.0):
    rng = np.random.default_rng(seed)
    q = scale * rng.standard_normal(shape_q)
    k = scale * rng.standard_normal(shape_k)
    v = rng.standard_normal((*shape_k[:-1], d_value or shape_k[-1]))
    return q.astype(dtype), k.astype(dtype), v.astype(dtype)


def reference_lse(q, k, mask=None):
    """log sum_j exp(s_ij) over the allowed keys, in float64 (-inf for a fully masked row)."""
    s = q.astype(np.float64) @ k.astype(np.float64).swapaxes(-1, -2) / np.sqrt(q.shape[-1])
    if mask is not None:
        s = np.where(mask, s, -np.inf)
    m = s.max(-1, keepdims=True)
    safe = np.where(np.isneginf(m), 0.0, m)
    with np.errstate(divide="ignore"):
        return (safe + np.log(np.exp(s - safe).sum(-1, keepdims=True)))[..., 0]


def assert_attention_close(q, k, v, out, lse, mask=None):
    ref_out, _ = np_backend.scaled_dot_product_attention(q, k, v, mask)
    out_tol, lse_tol = tolerance.tiled_attention_tolerance(q, k, v)
    assert_close(out, ref_out, out_tol, name="tiled output")
    ref_lse = reference_lse(q, k, mask)
    empty = np.isneginf(ref_lse)  # fully masked rows
    np.testing.assert_array_equal(np.isneginf(lse), empty)
    assert_close(lse[~empty], ref_lse[~empty], lse_tol, name="log-sum-exp")


# ---- the online softmax ------------------------------------------------------------------


def test_softmax_stats_of_a_block_are_its_max_and_shifted_sum() -> None:
    s = np.array([[1.0, 3.0, 2.0], [0.0, 0.0, 0.0]])
    row_max, row_sum = tiled.softmax_stats(s)
    np.testing.assert_array_equal(row_max, [3.0, 0.0])  # exact: the max of the given values
    assert_close(row_sum, [np.exp(-2) + 1 + np.exp(-1), 3.0], rounding_tolerance(s, terms=3))


def test_softmax_stats_of_a_fully_masked_row_are_minus_inf_and_zero() -> None:
    s = np.array([[1.0, 2.0], [3.0, 4.0]])
    mask = np.array([[True, False], [False, False]])
    row_max, row_sum = tiled.softmax_stats(s, mask)
    np.testing.assert_array_equal(row_max, [1.0, -np.inf])  # exact: the max of the given values
    np.testing.assert_array_equal(row_sum, [1.0, 0.0])  # exact: exp(0) = 1, and an empty sum


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.integers(1, 6), min_size=2, max_size=5),
    st.integers(0, 2**31 - 1),
    st.sampled_from([1.0, 50.0, 500.0]),
)
def test_combining_block_stats_in_any_grouping_gives_the_stats_of_the_whole_row(
    widths, seed, spread
) -> None:
    rng = np.random.default_rng(seed)
    blocks = [spread * rng.standard_normal((3, w)) for w in widths]
    masks = [rng.random((3, w)) < 0.7 for w in widths]
    whole = tiled.softmax_stats(np.concatenate(blocks, -1), np.concatenate(masks, -1))
    stats = [tiled.softmax_stats(b, m) for b, m in zip(blocks, masks, strict=True)]
    left = stats[0]
    for s in stats[1:]:  # ((a b) c) d
        left = tiled.combine_stats(*left, *s)
    right = stats[-1]
    for s in reversed(stats[:-1]):  # a (b (c d)), with the arguments swapped
        right = tiled.combine_stats(*right, *s)
    sum_tol, _ = tolerance.online_softmax_tolerance(
        np.float64, terms=sum(widths), merges=len(widths) - 1
    )
    for combined in (left, right):
        # exact: the max of the maxima is the max
        np.testing.assert_array_equal(combined[0], whole[0])  # max is exact
        assert_close(combined[1], whole[1], sum_tol * whole[1], name="combined sum")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("block_size", [1, 3, 7, 8, 100])
def test_online_softmax_equals_the_softmax_for_every_block_size(dtype, block_size) -> None:
    rng = np.random.default_rng(1)
    s = (4 * rng.standard_normal((2, 5, 8))).astype(dtype)
    mask = rng.random((5, 8)) < 0.6
    mask[2] = False  # one fully masked row
    got = tiled.online_softmax(s, mask, block_size=block_size)
    ref = np_backend.softmax(s, mask)
    _, tol = tolerance.online_softmax_tolerance(dtype, terms=8, merges=-(-8 // block_size) - 1)
    assert_close(got, ref, tol, name="online softmax")
    assert np.all(got[:, 2] == 0) and np.all(got[:, ~mask] == 0)


@pytest.mark.parametrize("dtype", DTYPES)
def test_online_softmax_stays_finite_where_exp_overflows(dtype) -> None:
    big = np.log(np.finfo(dtype).max) * 1.5  # exp(big) is inf in this dtype
    s = np.array([[big, big - 1.0, big - 2.0, -big]], dtype=dtype)
    with np.errstate(over="ignore", invalid="ignore"):
        naive = np.exp(s) / np.exp(s).sum(-1, keepdims=True)
    assert np.isnan(naive).any()
    got = tiled.online_softmax(s, block_size=2)
    assert np.isfinite(got).all()
    expected = np.exp([0.0, -1.0, -2.0, -2 * float(big)]) / np.exp([0.0, -1.0, -2.0]).sum()
    assert_close(got[0], expected, rounding_tolerance(dtype, terms=4, scale=4 * big + 3))


# ---- the tiled forward -------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    ("block_q", "block_kv"), [(1, 1), (4, 5), (3, 7), (16, 7), (11, 13), (64, 64), (5, 100)]
)
def test_tiled_attention_equals_the_reference_for_dividing_and_other_blocks(
    dtype, block_q, block_kv
) -> None:
    q, k, v = qkv((2, 3, 16, 8), (2, 3, 21, 8), 5, dtype=dtype)  # L = 16, S = 21, Dv = 5
    out, lse = tiled.attention(q, k, v, block_q=block_q, block_kv=block_kv)
    assert out.shape == (2, 3, 16, 5) and lse.shape == (2, 3, 16)
    assert out.dtype == lse.dtype == dtype
    assert_attention_close(q, k, v, out, lse)


def test_tiled_attention_in_float64_is_within_1e_12_of_the_reference() -> None:
    q, k, v = qkv((1, 4, 40, 8), (1, 4, 30, 8), seed=3)  # unit-scale inputs
    out, _ = tiled.attention(q, k, v, block_q=17, block_kv=7)
    ref, _ = np_backend.scaled_dot_product_attention(q, k, v)
    out_tol, _ = tolerance.tiled_attention_tolerance(q, k, v)
    # The worst-case bound is about 1e-12 here; typical differences are ~sqrt(n) smaller.
    assert out_tol < 3e-12
    assert assert_close(out, ref, out_tol) <= 1e-12


@pytest.mark.parametrize("dtype", DTYPES)
def test_causal_flag_equals_the_causal_mask_and_skips_tiles_above_the_diagonal(dtype) -> None:
    q, k, v = qkv((2, 2, 19, 4), (2, 2, 19, 4), dtype=dtype, seed=2)
    trace: list[tiled.TileStep] = []
    out, lse = tiled.attention(q, k, v, causal=True, block_q=4, block_kv=3, trace=trace)
    assert_attention_close(q, k, v, out, lse, np_backend.causal_mask(19))
    with_mask, _ = tiled.attention(q, k, v, np_backend.causal_mask(19), block_q=4, block_kv=3)
    # exact: skipped tiles would add exact zeros
    np.testing.assert_array_equal(out, with_mask)  # the same arithmetic, tile for tile
    for step in trace:
        above = step.kv_block[0] > step.q_block[1] - 1
        assert step.computed == (not above)
    assert sum(not s.computed for s in trace) > 0


def test_causal_attention_with_more_queries_than_keys_aligns_positions_at_the_start() -> None:
    q, k, v = qkv((1, 12, 4), (1, 5, 4), seed=4)
    out, lse = tiled.attention(q, k, v, causal=True, block_q=5, block_kv=2)
    assert_attention_close(q, k, v, out, lse, np_backend.causal_mask(12, 5))


# ---- causal alignment: top-left and bottom-right ----------------------------------------

ALIGN_SIZES = [(5, 12), (12, 12), (12, 5)]  # L < S, L = S, L > S
ALIGN_BLOCKS = [(1, 1), (3, 4), (4, 3), (5, 7), (16, 16)]


def torch_causal_bias(align, L, S):
    """PyTorch's causal bias for ``align``: ``causal_upper_left`` or ``causal_lower_right``."""
    with warnings.catch_warnings():  # L > S: PyTorch warns that its first L - S rows are empty
        warnings.simplefilter("ignore", UserWarning)
        if align == "top_left":
            return causal_upper_left(L, S)
        return causal_lower_right(L, S)


def torch_sdpa_with_grads(q, k, v, d_out, bias):
    """PyTorch's attention with ``bias`` as the mask, and autograd's gradients."""
    tq, tk, tv = (torch.from_numpy(x.copy()).requires_grad_() for x in (q, k, v))
    out = torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, attn_mask=bias)
    out.backward(torch.from_numpy(d_out))
    return out.detach().numpy(), (tq.grad.numpy(), tk.grad.numpy(), tv.grad.numpy())


@pytest.mark.parametrize("align", ["top_left", "bottom_right"])
@pytest.mark.parametrize(("L", "S"), ALIGN_SIZES)
def test_causal_bias_of_pytorch_is_the_mask_of_each_alignment(align, L, S) -> None:
    bias = torch_causal_bias(align, L, S)._materialize()
    np.testing.assert_array_equal(bias.numpy(), np_backend.causal_mask(L, S, align=align))


@pytest.mark.parametrize("align", ["top_left", "bottom_right"])
@pytest.mark.parametrize(("L", "S"), ALIGN_SIZES)
@pytest.mark.parametrize(("block_q", "block_kv"), ALIGN_BLOCKS)
def test_aligned_causal_attention_and_its_gradients_equal_pytorch_causal_bias(
    align, L, S, block_q, block_kv
) -> None:
    q, k, v = qkv((2, L, 4), (2, S, 4), 3, seed=L * 100 + S, scale=1.5)
    d_out = np.random.default_rng(S).standard_normal((2, L, 3))
    mask = np_backend.causal_mask(L, S, align=align)  # (L, S)
    out, lse = tiled.attention(q, k, v, causal=True, align=align, block_q=block_q,
                               block_kv=block_kv)  # fmt: skip
    grads = G.tiled_attention(q, k, v, out, lse, d_out, causal=True, align=align,
                              block_q=block_q, block_kv=block_kv)  # fmt: skip
    ref_out, ref_grads = torch_sdpa_with_grads(q, k, v, d_out, torch_causal_bias(align, L, S))
    seen = mask.any(-1)  # (L,): rows with at least one key
    assert_attention_close(q, k, v, out, lse, mask)
    out_tol, _ = tolerance.tiled_attention_tolerance(q, k, v)
    assert_close(out[:, seen], ref_out[:, seen], out_tol, name="output against PyTorch")
    np.testing.assert_array_equal(out[:, ~seen], 0.0)  # exact: an empty row is set to zero
    _, weights = np_backend.scaled_dot_product_attention(q, k, v, mask)
    bounds = tolerance.attention_gradient_tolerance(q, k, v, weights, d_out)
    for name, g, r, b in zip(("d_query", "d_key", "d_value"), grads, ref_grads, bounds,
                             strict=True):  # fmt: skip
        assert_close(g, r, b, name=f"{name} against PyTorch")
    np.testing.assert_array_equal(grads[0][:, ~seen], 0.0)  # exact: an empty row passes nothing


@pytest.mark.parametrize(("L", "S"), [(4, 9), (9, 4), (7, 7)])
def test_causal_alignment_defaults_to_top_left(L, S) -> None:
    q, k, v = qkv((L, 4), (S, 4), seed=13)
    default, lse = tiled.attention(q, k, v, causal=True, block_q=3, block_kv=2)
    top_left, _ = tiled.attention(q, k, v, causal=True, align="top_left", block_q=3, block_kv=2)
    np.testing.assert_array_equal(default, top_left)  # exact: the same call
    assert_attention_close(q, k, v, default, lse, np_backend.causal_mask(L, S))


@pytest.mark.parametrize("align", ["top_left", "bottom_right"])
@pytest.mark.parametrize(("L", "S"), [*ALIGN_SIZES, (3, 17), (17, 3), (1, 9)])
@pytest.mark.parametrize(("block_q", "block_kv"), ALIGN_BLOCKS)
def test_skipped_tiles_are_exactly_those_wholly_above_the_aligned_diagonal(
    align, L, S, block_q, block_kv
) -> None:
    mask = np_backend.causal_mask(L, S, align=align)  # (L, S)
    offset = _tiles.tile_causal_offset(L, S, align, causal=True)
    q, k, v = qkv((L, 4), (S, 4), seed=14)
    trace: list[tiled.TileStep] = []
    tiled.attention(q, k, v, causal=True, align=align, block_q=block_q, block_kv=block_kv,
                    trace=trace)  # fmt: skip
    assert len(trace) == -(-L // block_q) * -(-S // block_kv)
    for step in trace:
        rows, cols = slice(*step.q_block), slice(*step.kv_block)
        assert step.computed == mask[rows, cols].any()  # skipped: nothing in it may be seen
        keep = _tiles.tile_mask(None, True, rows, cols, offset=offset)  # the backward's too
        if keep is None:
            assert mask[rows, cols].all()
        elif keep is False:
            assert not mask[rows, cols].any()
        else:
            np.testing.assert_array_equal(keep, mask[rows, cols])


def test_bottom_right_skips_the_tiles_that_top_left_computes_when_lengths_differ() -> None:
    q, k, v = qkv((4, 4), (12, 4), seed=15)  # L < S: bottom-right sees more keys
    count = {}
    for align in ("top_left", "bottom_right"):
        trace: list[tiled.TileStep] = []
        tiled.attention(q, k, v, causal=True, align=align, block_q=2, block_kv=2, trace=trace)
        count[align] = sum(step.computed for step in trace)
    # top-left: query rows 0-1 see key block 0, rows 2-3 key blocks 0-1; bottom-right: every
    # query block sees key blocks 0-4, and rows 2-3 block 5 too
    assert count == {"top_left": 3, "bottom_right": 11}


def test_fully_masked_rows_get_zero_output_and_minus_inf_lse() -> None:
    q, k, v = qkv((2, 3, 9, 4), (2, 3, 11, 4), seed=5)
    mask = np_backend.key_padding_mask([0, 6], 11)  # batch 0 may attend to nothing
    out, lse = tiled.attention(q, k, v, mask, block_q=4, block_kv=4)
    np.testing.assert_array_equal(out[0], 0.0)  # exact: fully masked rows are set to zero
    np.testing.assert_array_equal(lse[0], -np.inf)  # exact: fully masked rows are set to -inf
    assert_attention_close(q, k, v, out, lse, mask)
    ref, weights = np_backend.scaled_dot_product_attention(q, k, v, mask)
    # exact: fully masked rows are set to zero
    np.testing.assert_array_equal(ref[0], 0.0)  # the book's result in the reference too
    np.testing.assert_array_equal(weights[0], 0.0)  # exact: fully masked rows are set to zero


@settings(max_examples=80, deadline=None)
@given(
    L=st.integers(1, 24),
    S=st.integers(1, 24),
    block_q=st.integers(1, 30),
    block_kv=st.integers(1, 30),
    causal=st.booleans(),
    align=st.sampled_from(["top_left", "bottom_right"]),
    masked=st.booleans(),
    dtype=st.sampled_from(DTYPES),
    seed=st.integers(0, 2**31 - 1),
)
def test_tiled_attention_equals_the_reference_for_random_blocks_and_masks(
    L, S, block_q, block_kv, causal, align, masked, dtype, seed
) -> None:
    q, k, v = qkv((2, L, 4), (2, S, 4), 3, dtype=dtype, seed=seed, scale=1.5)
    rng = np.random.default_rng(seed)
    mask = rng.random((2, L, S)) < 0.6 if masked else None
    align = align if causal else "top_left"
    out, lse = tiled.attention(
        q, k, v, mask, causal=causal, align=align, block_q=block_q, block_kv=block_kv
    )
    full = None
    if masked or causal:
        full = np.ones((2, L, S), bool) if mask is None else mask
        full = full & np_backend.causal_mask(L, S, align=align) if causal else full
    assert_attention_close(q, k, v, out, lse, full)
    if full is not None:
        empty = ~full.any(-1)
        np.testing.assert_array_equal(out[empty], 0.0)  # exact: fully masked rows are set to zero
        assert np.all(np.isneginf(lse[empty])) and np.all(np.isfinite(lse[~empty]))


def test_tiled_attention_broadcasts_batch_dimensions_like_the_reference() -> None:
    q, _, _ = qkv((2, 3, 6, 4), (1, 1, 1, 4), seed=6)
    _, k, v = qkv((1, 4), (3, 7, 4), seed=7)  # keys and values shared across the batch
    out, lse = tiled.attention(q, k, v, block_q=4, block_kv=3)
    assert out.shape == (2, 3, 6, 4)
    assert_attention_close(q, k, v, out, lse)


def test_trace_records_running_max_and_sum_that_end_at_the_lse() -> None:
    q, k, v = qkv((1, 6, 4), (1, 10, 4), seed=8, scale=2.0)
    trace: list[tiled.TileStep] = []
    _, lse = tiled.attention(q, k, v, block_q=3, block_kv=4, trace=trace)
    assert [(s.q_block, s.kv_block) for s in trace] == [
        ((i, i + 3), (j, min(j + 4, 10))) for i in (0, 3) for j in (0, 4, 8)
    ]
    for a, b in zip(trace, trace[1:], strict=False):
        if a.q_block == b.q_block:
            assert np.all(b.row_max >= a.row_max)  # the running max never decreases
    for last in (trace[2], trace[5]):
        rows = slice(*last.q_block)
        assert_close(last.row_max + np.log(last.row_sum), lse[:, rows], 1e-12)


@pytest.mark.parametrize("dtype", DTYPES)
def test_three_pass_attention_equals_the_reference_and_returns_its_weights(dtype) -> None:
    q, k, v = qkv((2, 13, 4), (2, 9, 4), dtype=dtype, seed=9)
    mask = np_backend.causal_mask(13, 9)
    for blocks in [(4, 3), (13, 9), (5, 20)]:
        out, weights = tiled.three_pass_attention(
            q, k, v, mask, block_q=blocks[0], block_kv=blocks[1]
        )
        ref_out, ref_w = np_backend.scaled_dot_product_attention(q, k, v, mask)
        out_tol, _ = tolerance.tiled_attention_tolerance(q, k, v)
        assert_close(out, ref_out, out_tol)
        assert_close(weights, ref_w, out_tol / float(np.abs(v).max()))


# ---- the tiled form of multi_head_attention ----------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
def test_tiled_form_equals_the_fused_form_with_masks_and_cross_attention(dtype) -> None:
    rng = np.random.default_rng(11)
    params = mha.init_params(12, 3, seed=1, dtype=dtype)
    x = rng.standard_normal((2, 7, 12)).astype(dtype)
    mem = rng.standard_normal((2, 10, 12)).astype(dtype)
    mask = np_backend.key_padding_mask([0, 8], 10)  # batch 0: every row fully masked
    got, none = np_backend.multi_head_attention(
        x, mem, mem, params, mask, form="tiled", need_weights=False
    )
    ref, _ = np_backend.multi_head_attention(
        x, mem, mem, params, mask, form="fused", need_weights=False
    )
    assert none is None
    q = np_backend.split_heads(x @ params.w_q + params.b_q, 3)
    k = np_backend.split_heads(mem @ params.w_k + params.b_k, 3)
    out_tol, _ = tolerance.tiled_attention_tolerance(
        q, k, np_backend.split_heads(mem @ params.w_v + params.b_v, 3)
    )
    # the heads' difference passes through the output projection: |W_o| sums D of them
    tol = out_tol * float(np.abs(params.w_o).sum(0).max()) * 2
    assert_close(got, ref, tol)
    assert_close(got[0], np.broadcast_to(params.b_o, (7, 12)), tol)  # fully masked: the bias


@pytest.mark.parametrize("align", ["top_left", "bottom_right"])
def test_the_tiled_form_of_a_causal_layer_computes_only_the_tiles_its_queries_see(
    monkeypatch, align: str
) -> None:
    Br, Bc = tiled.DEFAULT_BLOCK_Q, tiled.DEFAULT_BLOCK_KV
    L, S = 2 * Br + 3, 3 * Bc + 5  # the two alignments skip different tiles
    rng = np.random.default_rng(12)
    params = mha.init_params(8, 2, seed=1)
    x, mem = rng.standard_normal((1, L, 8)), rng.standard_normal((1, S, 8))
    computed = []
    update = tiled.RunningRows.update

    def counted(self, s, keep, v) -> None:
        computed.append(s.shape[-2:])
        update(self, s, keep, v)

    monkeypatch.setattr(tiled.RunningRows, "update", counted)
    np_backend.multi_head_attention(
        x, mem, mem, params, causal=True, align=align, form="tiled", need_weights=False
    )
    keep = np_backend.causal_mask(L, S, align=align)  # (L, S)
    tiles = [keep[i : i + Br, j : j + Bc] for i in range(0, L, Br) for j in range(0, S, Bc)]
    assert computed == [t.shape for t in tiles if t.any()]
    assert len(computed) < len(tiles)


def test_tiled_form_refuses_to_return_weights() -> None:
    params = mha.init_params(8, 2, seed=0)
    x = np.zeros((1, 3, 8))
    with pytest.raises(ValueError, match="form='tiled' never forms the .* pass need_weights=False"):
        np_backend.multi_head_attention(x, x, x, params, form="tiled")


@pytest.mark.parametrize("need_weights", [False, True])
def test_torch_backend_refuses_the_tiled_form_naming_its_forms(need_weights: bool) -> None:
    """PyTorch has no tiled computation here: the form is refused, not run as another."""
    params = mha.init_params(8, 2, seed=0).to_torch()
    x = torch.randn(2, 5, 8, dtype=torch.float64)
    assert torch_backend.FORMS == ("per_head", "fused", "packed")
    with pytest.raises(
        ValueError,
        match=r"form must be one of \('per_head', 'fused', 'packed'\); got form='tiled' "
        r"\(form='tiled' is computed by mha.backends.np_backend only\)",
    ):
        torch_backend.multi_head_attention(x, x, x, params, form="tiled", need_weights=need_weights)
    with pytest.raises(ValueError, match="got form='tiled'"):
        mha.MultiHeadAttention(8, 2)(x.float(), form="tiled")


# ---- errors ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "exc", "match"),
    [
        ({"block_q": 0}, ValueError, r"block_q must be at least 1; got block_q=0"),
        ({"block_kv": 2.5}, TypeError, r"block_kv must be an int; got float 2.5"),
        ({"mask": np.ones((3, 3))}, TypeError, r"mask must be boolean"),
        ({"mask": np.ones((2, 3), bool)}, ValueError, r"mask must broadcast to"),
        (
            {"causal": True, "align": "diagonal"},
            ValueError,
            r"align must be one of \('top_left', 'bottom_right'\); got align='diagonal'",
        ),
        (
            {"align": "bottom_right"},
            ValueError,
            r"align='bottom_right' applies only with causal=True; got causal=False",
        ),
    ],
)
def test_tiled_attention_rejects_bad_arguments(kwargs, exc, match) -> None:
    q, k, v = qkv((4, 2), (4, 2))
    with pytest.raises(exc, match=match):
        tiled.attention(q, k, v, **kwargs)


def test_tiled_backward_rejects_a_bad_align() -> None:
    q, k, v = qkv((4, 2), (6, 2))
    out, lse = tiled.attention(q, k, v, causal=True, align="bottom_right")
    with pytest.raises(ValueError, match=r"align must be one of .*; got align='top-left'"):
        G.tiled_attention(q, k, v, out, lse, out, causal=True, align="top-left")
    with pytest.raises(ValueError, match=r"applies only with causal=True; got causal=False"):
        G.tiled_attention(q, k, v, out, lse, out, align="bottom_right")


def test_tiled_functions_reject_bad_inputs() -> None:
    q, k, v = qkv((4, 2), (4, 2))
    with pytest.raises(ValueError, match="query must be finite"):
        tiled.attention(np.full((4, 2), np.nan), k, v)
    with pytest.raises(TypeError, match="key must be a numpy.ndarray; got list"):
        tiled.three_pass_attention(q, [[1.0, 2.0]], v)
    with pytest.raises(ValueError, match="block_size must be at least 1"):
        tiled.online_softmax(q, block_size=0)
    with pytest.raises(ValueError, match="max_b must be finite or -inf"):
        tiled.combine_stats(np.zeros(2), np.ones(2), np.array([0.0, np.inf]), np.ones(2))
    with pytest.raises(ValueError, match="sum_a must be >= 0"):
        tiled.combine_stats(np.zeros(2), -np.ones(2), np.zeros(2), np.ones(2))
    with pytest.raises(TypeError, match="all inputs and parameters must share one dtype"):
        tiled.combine_stats(np.zeros(2), np.ones(2), np.zeros(2, np.float32), np.ones(2))
    with pytest.raises(ValueError, match="scores must have shape"):
        tiled.softmax_stats(np.array(1.0))


def test_softmax_tolerance_does_not_grow_with_the_spread_of_the_scores() -> None:
    rng = np.random.default_rng(5)
    sum_tol, weight_tol = tolerance.online_softmax_tolerance(np.float64, terms=200, merges=9)
    u = np.finfo(np.float64).eps / 2
    assert sum_tol == 2 * (u * 200 / np.e + 69 * u + gamma(np.float64, 200))  # exact: same sum
    for spread in (1.0, 1e3, 1e6):
        s = spread * rng.standard_normal((6, 200))
        whole = tiled.softmax_stats(s)
        parts = [tiled.softmax_stats(s[:, j : j + 20]) for j in range(0, 200, 20)]
        merged = parts[0]
        for part in parts[1:]:
            merged = tiled.combine_stats(*merged, *part)
        assert_close(merged[1], whole[1], sum_tol * whole[1])
        assert_close(tiled.online_softmax(s, block_size=20), np_backend.softmax(s), weight_tol)
    with pytest.raises(ValueError, match="merges must be at least 0; got merges=-1"):
        tolerance.online_softmax_tolerance(np.float64, terms=3, merges=-1)
    with pytest.raises(TypeError, match="merges must be an int"):
        tolerance.online_softmax_tolerance(np.float64, terms=3, merges=1.0)


def test_the_empty_block_is_the_identity_of_the_combination_rule() -> None:
    m_b, l_b = np.array([2.5, -np.inf]), np.array([3.0, 0.0])
    empty = (np.full(2, -np.inf), np.zeros(2))
    with np.errstate(invalid="raise"):  # no -inf - (-inf) is formed
        for combined in (
            tiled.combine_stats(*empty, m_b, l_b),
            tiled.combine_stats(m_b, l_b, *empty),
        ):
            np.testing.assert_array_equal(combined[0], m_b)  # exact: max with -inf
            np.testing.assert_array_equal(combined[1], l_b)  # exact: l_b * exp(0) + 0


def test_trace_records_the_rescale_factor_and_the_accumulator() -> None:
    q, k, v = qkv((7, 4), (9, 4), d_value=3, seed=12, scale=2.0)
    trace: list[tiled.TileStep] = []
    out, _ = tiled.attention(q, k, v, causal=True, block_q=4, block_kv=3, trace=trace)
    z = q @ k.T / 2.0
    out_tol, lse_tol = tolerance.tiled_attention_tolerance(q, k, v)
    acc_tol = 9 * out_tol  # acc = output * l, and l <= 9 (at most 9 terms of at most 1)
    previous = {}
    for step in trace:
        rows, cols = slice(*step.q_block), slice(*step.kv_block)
        assert step.acc.shape == (rows.stop - rows.start, 3)
        if not step.computed:  # skipped: nothing changes
            np.testing.assert_array_equal(step.rescale, 1.0)  # exact: ones
            np.testing.assert_array_equal(step.acc, previous[rows.start].acc)  # exact: a copy
        elif rows.start in previous:  # the factor is exp(m_old - m_new) of the two steps
            before = previous[rows.start]
            assert_close(step.rescale, np.exp(before.row_max - step.row_max), lse_tol)
        else:  # the first tile of a block: nothing was attended before
            np.testing.assert_array_equal(step.rescale, 0.0)  # exact: exp(-inf)
        keep = np.tril(np.ones((7, 9), bool))[rows, : cols.stop]
        p = np.where(keep, np.exp(z[rows, : cols.stop] - step.row_max[:, None]), 0.0)
        assert_close(step.acc, p @ v[: cols.stop], acc_tol)  # the sum over the keys so far
        previous[rows.start] = step
    for step in (previous[0], previous[4]):  # the last step of each query block
        rows = slice(*step.q_block)
        assert_close(step.acc / step.row_sum[:, None], out[rows], out_tol)


@pytest.mark.parametrize("softmax_rows", [1, 3, 13, 40])
def test_three_pass_attention_with_whole_rows_in_the_softmax_pass(softmax_rows) -> None:
    q, k, v = qkv((2, 13, 4), (2, 9, 4), seed=10)
    mask = np_backend.causal_mask(13, 9)
    out, weights = tiled.three_pass_attention(q, k, v, mask, block_q=4, block_kv=3,
                                              softmax_rows=softmax_rows)  # fmt: skip
    ref_out, ref_w = np_backend.scaled_dot_product_attention(q, k, v, mask)
    out_tol, _ = tolerance.tiled_attention_tolerance(q, k, v)
    assert_close(out, ref_out, out_tol)
    assert_close(weights, ref_w, out_tol / float(np.abs(v).max()))
    with pytest.raises(ValueError, match="softmax_rows must be at least 1"):
        tiled.three_pass_attention(q, k, v, softmax_rows=0)


def test_combine_stats_refuses_statistics_that_do_not_broadcast() -> None:
    m, s = np.zeros((2, 3)), np.ones((2, 3))
    with pytest.raises(ValueError, match=r"max_a, sum_a, max_b and sum_b must broadcast"):
        tiled.combine_stats(m, s, np.zeros(4), np.ones(4))


def test_softmax_stats_refuses_rows_without_columns() -> None:
    with pytest.raises(ValueError, match=r"scores must have shape \(\.\.\., S\) with S >= 1"):
        tiled.softmax_stats(np.zeros((2, 0)))


def test_attention_tolerance_takes_values_of_width_zero() -> None:
    q, k = np.ones((2, 3)), np.ones((4, 3))
    out_tol, lse_tol = tolerance.tiled_attention_tolerance(q, k, np.ones((4, 0)))
    assert out_tol == 0.0 and lse_tol > 0  # exact: no value, no output to be off
