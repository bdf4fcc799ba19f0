"""Tests of mha.core.packing: the layouts of the query, key and value weights."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import mha
from mha.backends import np_backend
from mha.core import packing

SIZES = [(8, 1), (8, 2), (12, 3), (16, 4), (16, 16)]


@st.composite
def d_and_h(draw):
    num_heads = draw(st.integers(1, 6))
    d_head = draw(st.integers(1, 5))
    return num_heads * d_head, num_heads


@pytest.mark.parametrize(("d_model", "num_heads"), SIZES)
def test_in_proj_weight_equals_torch_modules_parameter(d_model, num_heads):
    params = mha.init_params(d_model, num_heads, seed=1)
    module = mha.to_torch_mha(params)
    expected = module.in_proj_weight.detach()
    # exact: a transposed copy
    assert torch.equal(packing.to_in_proj_weight(params.to_torch().w_qkv), expected)
    # exact: a transposed copy
    np.testing.assert_array_equal(packing.to_in_proj_weight(params.w_qkv), expected.numpy())


@pytest.mark.parametrize(("d_model", "num_heads"), SIZES)
def test_in_proj_weight_left_multiplied_is_our_right_multiplied_projection(d_model, num_heads):
    params = mha.init_params(d_model, num_heads, seed=2)
    x = np.random.default_rng(0).standard_normal((3, 5, d_model))
    w_in = packing.to_in_proj_weight(params.w_qkv)  # (3D, D)
    np.testing.assert_allclose(np.einsum("od,bld->blo", w_in, x), x @ params.w_qkv, atol=1e-12)


@given(d_and_h(), st.booleans())
@settings(max_examples=30, deadline=None)
def test_in_proj_weight_round_trips(sizes, use_torch):
    d_model, num_heads = sizes
    params = mha.init_params(d_model, num_heads, seed=d_model)
    w = params.to_torch().w_qkv if use_torch else params.w_qkv
    back = packing.from_in_proj_weight(packing.to_in_proj_weight(w))
    assert type(back) is type(w)
    np.testing.assert_array_equal(np.asarray(back), np.asarray(w))  # exact: copies and transposes


@given(d_and_h(), st.booleans())
@settings(max_examples=30, deadline=None)
def test_head_blocks_are_the_per_head_projections_and_round_trip(sizes, use_torch):
    d_model, num_heads = sizes
    params = mha.init_params(d_model, num_heads, seed=d_model + num_heads)
    if use_torch:
        params = params.to_torch()
    blocks = packing.split_head_blocks(params.w_qkv, num_heads)
    assert tuple(blocks.shape) == (3, num_heads, d_model, d_model // num_heads)
    for h in range(num_heads):
        for p, name in enumerate(("w_q", "w_k", "w_v")):
            np.testing.assert_array_equal(  # exact: copies
                np.asarray(blocks[p, h]), np.asarray(params.head(h)[name])
            )
    merged = packing.merge_head_blocks(blocks)
    np.testing.assert_array_equal(np.asarray(merged), np.asarray(params.w_qkv))  # exact: copies


@pytest.mark.parametrize(("d_model", "num_heads"), SIZES)
def test_head_block_projection_is_a_slice_of_split_heads(d_model, num_heads):
    params = mha.init_params(d_model, num_heads, seed=3)
    x = np.random.default_rng(1).standard_normal((2, 4, d_model))
    blocks = packing.split_head_blocks(params.w_qkv, num_heads)
    for p, w in enumerate((params.w_q, params.w_k, params.w_v)):
        per_head = np_backend.split_heads(x @ w, num_heads)  # (B, H, L, Dh)
        for h in range(num_heads):
            np.testing.assert_allclose(x @ blocks[p, h], per_head[:, h], atol=1e-12)


@pytest.mark.parametrize(("d_model", "num_heads"), SIZES)
def test_head_columns_select_the_head_block_in_both_layouts(d_model, num_heads):
    params = mha.init_params(d_model, num_heads, seed=4)
    w_in = mha.to_torch_mha(params).in_proj_weight.detach().numpy()
    for h in range(num_heads):
        for proj in packing.PROJECTIONS:
            cols = packing.head_columns(d_model, num_heads, proj, h)
            # exact: a view
            np.testing.assert_array_equal(params.w_qkv[:, cols], params.head(h)[f"w_{proj}"])
            # exact: a transposed view
            np.testing.assert_array_equal(w_in[cols, :], params.head(h)[f"w_{proj}"].T)


@given(d_and_h())
@settings(max_examples=30, deadline=None)
def test_column_owner_agrees_with_head_columns(sizes):
    d_model, num_heads = sizes
    projection, head = packing.column_owner(d_model, num_heads)
    assert projection.shape == head.shape == (3 * d_model,)
    seen = np.zeros(3 * d_model, dtype=int)
    for p, proj in enumerate(packing.PROJECTIONS):
        for h in range(num_heads):
            cols = packing.head_columns(d_model, num_heads, proj, h)
            assert (projection[cols] == p).all() and (head[cols] == h).all()
            seen[cols] += 1
    assert (seen == 1).all()


@pytest.mark.parametrize(
    ("fn", "arg", "match"),
    [
        (
            packing.to_in_proj_weight,
            np.zeros((4, 8)),
            r"w_qkv must have shape \(D, 3D\); got \(4, 8\)",
        ),
        (packing.to_in_proj_weight, np.zeros(12), r"w_qkv must have shape \(D, 3D\); got \(12,\)"),
        (
            packing.from_in_proj_weight,
            np.zeros((4, 12)),
            r"in_proj_weight must have shape \(3D, D\); got \(4, 12\)",
        ),
        (
            packing.merge_head_blocks,
            np.zeros((3, 2, 8, 3)),
            r"blocks must have shape \(3, H, D, Dh\)",
        ),
        (packing.merge_head_blocks, np.zeros((2, 2, 8, 4)), r"got \(2, 2, 8, 4\)"),
    ],
)
def test_layout_helpers_reject_wrong_shapes(fn, arg, match):
    with pytest.raises(ValueError, match=match):
        fn(arg)


def test_layout_helpers_reject_non_arrays():
    with pytest.raises(TypeError, match="w_qkv must be a numpy.ndarray or torch.Tensor; got list"):
        packing.to_in_proj_weight([[0.0] * 3])
    with pytest.raises(TypeError, match="in_proj_weight must be a numpy.ndarray or torch.Tensor"):
        packing.from_in_proj_weight("w")


def test_split_head_blocks_rejects_heads_that_do_not_divide_d_model():
    with pytest.raises(
        ValueError, match="num_heads must divide d_model; got d_model=8, num_heads=3"
    ):
        packing.split_head_blocks(np.zeros((8, 24)), 3)


def test_head_columns_rejects_unknown_projection_and_head_out_of_range():
    with pytest.raises(
        ValueError, match=r"projection must be one of \('q', 'k', 'v'\); got projection='o'"
    ):
        packing.head_columns(8, 2, "o", 0)
    with pytest.raises(ValueError, match=r"h must be in \[0, num_heads=2\); got h=2"):
        packing.head_columns(8, 2, "q", 2)
    with pytest.raises(TypeError, match="num_heads must be an int"):
        packing.column_owner(8, 2.0)


@pytest.mark.parametrize(("d_model", "num_heads"), SIZES)
def test_head_span_and_projection_columns_compose_into_head_columns(d_model, num_heads):
    Dh = d_model // num_heads
    for h in range(num_heads):
        assert packing.head_span(d_model, num_heads, h) == slice(h * Dh, (h + 1) * Dh)
        for p, proj in enumerate(packing.PROJECTIONS):
            cols = packing.projection_columns(d_model, proj)
            assert cols == slice(p * d_model, (p + 1) * d_model)
            span = packing.head_span(d_model, num_heads, h)
            assert packing.head_columns(d_model, num_heads, proj, h) == slice(
                cols.start + span.start, cols.start + span.stop
            )
    assert packing.projection_columns(d_model, "kv") == slice(d_model, 3 * d_model)


@pytest.mark.parametrize("use_torch", [False, True])
def test_params_take_their_blocks_from_the_layout(use_torch):
    p = mha.init_params(12, 3, seed=1)
    p = p.to_torch() if use_torch else p
    for projection in ("q", "k", "v", "kv"):
        cols = packing.projection_columns(12, projection)
        w, b = p.packed(projection)
        for got, expected in [(w, p.w_qkv[:, cols]), (b, p.b_qkv[cols])]:
            assert tuple(got.shape) == tuple(expected.shape)
            assert np.array_equal(np.asarray(got), np.asarray(expected))  # exact: the same view
    assert p.packed("kv")[0].shape == (12, 24) and p.packed("kv")[1].shape == (24,)
    assert mha.init_params(12, 3, bias=False).packed("kv")[1] is None
    with pytest.raises(ValueError, match="projection must be one of"):
        p.packed("o")


@pytest.mark.parametrize("use_torch", [False, True])
def test_split_head_rows_gives_each_heads_rows_of_w_o(use_torch):
    p = mha.init_params(12, 3, seed=2)
    p = p.to_torch() if use_torch else p
    rows = packing.split_head_rows(p.w_o, 3)
    assert tuple(rows.shape) == (3, 4, 12)
    for h in range(3):
        assert np.array_equal(np.asarray(rows[h]), np.asarray(p.head(h)["w_o"]))  # exact: views
    wide = np.arange(24.0).reshape(6, 4)  # any number of columns
    assert packing.split_head_rows(wide, 2).shape == (2, 3, 4)


def test_linear_transpose_gives_the_weight_torch_linear_multiplies_on_the_left():
    w = np.random.default_rng(0).standard_normal((5, 3))  # (in, out)
    linear = torch.nn.Linear(5, 3, bias=False, dtype=torch.float64)
    with torch.no_grad():
        linear.weight.copy_(torch.from_numpy(packing.linear_transpose(w)))
    x = np.random.default_rng(1).standard_normal((2, 5))
    y = linear(torch.from_numpy(x)).detach().numpy()
    np.testing.assert_allclose(y, x @ w, rtol=0, atol=1e-14)
    back = packing.linear_transpose(linear.weight.detach())
    assert torch.equal(back, torch.from_numpy(w))  # exact: two transposes of a copy


def test_new_layout_helpers_reject_bad_arguments():
    with pytest.raises(ValueError, match=r"projection must be one of \('q', 'k', 'v', 'kv'\)"):
        packing.projection_columns(8, "qv")
    with pytest.raises(ValueError, match=r"h must be in \[0, num_heads=4\); got h=-1"):
        packing.head_span(8, 4, -1)
    with pytest.raises(ValueError, match=r"w must be a 2-D matrix; got 1-D shape \(8,\)"):
        packing.split_head_rows(np.zeros(8), 2)
    with pytest.raises(ValueError, match="num_heads must divide d_model; got d_model=8"):
        packing.split_head_rows(np.zeros((8, 3)), 3)
    with pytest.raises(TypeError, match="w must be a numpy.ndarray or torch.Tensor"):
        packing.linear_transpose([[1.0]])
