"""Tests for mha.analysis.rank: numerical rank and the rank bounds of self-attention."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import mha
import mha.backends.np_backend
from mha.analysis import rank


def known_rank(m: int, n: int, r: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.standard_normal((m, r)) @ rng.standard_normal((r, n))


@settings(max_examples=40, deadline=None)
@given(m=st.integers(1, 12), n=st.integers(1, 12), data=st.data(), seed=st.integers(0, 10**6))
def test_numerical_rank_recovers_the_rank_of_a_product_of_factors(m, n, data, seed):
    r = data.draw(st.integers(0, min(m, n)))
    a = known_rank(m, n, r, seed)
    assert rank.numerical_rank(a) == r
    assert rank.numerical_rank(a) == np.linalg.matrix_rank(a)


def test_numerical_rank_of_zero_and_empty_matrices_is_zero():
    assert rank.numerical_rank(np.zeros((3, 4))) == 0
    assert rank.numerical_rank(np.zeros((0, 4))) == 0


def test_default_tolerance_is_numpys_sigma_max_times_size_times_eps():
    a = known_rank(7, 5, 5)
    s = np.linalg.svd(a, compute_uv=False)
    assert rank.default_rtol((7, 5)) == 7 * np.finfo(np.float64).eps
    assert rank.rank_tolerance(a) == pytest.approx(s[0] * 7 * np.finfo(np.float64).eps)
    assert rank.default_rtol((7, 5), np.float32) == 7 * np.finfo(np.float32).eps


def test_singular_value_just_above_or_below_the_tolerance_decides_the_rank():
    sigma_max, size = 1.0, 4
    tol = sigma_max * size * np.finfo(np.float64).eps
    above = np.diag([sigma_max, 2 * tol, 0.0, 0.0])
    below = np.diag([sigma_max, 0.5 * tol, 0.0, 0.0])
    at = np.diag([sigma_max, tol, 0.0, 0.0])
    assert rank.numerical_rank(above) == 2
    assert rank.numerical_rank(below) == 1
    assert rank.numerical_rank(at) == 1  # strictly above counts


def test_float32_matrices_use_the_float32_epsilon():
    a = np.diag([1.0, 1e-5]).astype(np.float32)  # 1e-5 > 2 * eps32 = 2.4e-7
    b = np.diag([1.0, 1e-7]).astype(np.float32)
    assert rank.numerical_rank(a) == 2
    assert rank.numerical_rank(b) == 1
    assert rank.numerical_rank(b.astype(np.float64)) == 2


def test_rtol_and_atol_raise_the_threshold():
    a = np.diag([1.0, 1e-3, 1e-9])
    assert rank.numerical_rank(a) == 3
    assert rank.numerical_rank(a, rtol=1e-6) == 2
    assert rank.numerical_rank(a, atol=1e-2) == 1


def test_numerical_rank_accepts_torch_tensors():
    a = torch.tensor(known_rank(6, 6, 3))
    assert rank.numerical_rank(a) == 3


@pytest.mark.parametrize(
    ("a", "err", "match"),
    [
        (np.ones(3), ValueError, r"a must be a 2-D matrix \(m, n\); got 1-D"),
        (np.ones((2, 2), dtype=int), TypeError, "a must have a floating dtype; got dtype int"),
        (np.array([[np.nan]]), ValueError, "a must be finite"),
        ([[1.0]], TypeError, "a must be a NumPy array or a torch tensor; got list"),
    ],
)
def test_numerical_rank_rejects_bad_input(a, err, match):
    with pytest.raises(err, match=match):
        rank.numerical_rank(a)


def test_negative_tolerance_is_rejected():
    with pytest.raises(ValueError, match="rtol must be at least 0; got rtol=-1"):
        rank.numerical_rank(np.eye(2), rtol=-1.0)
    with pytest.raises(ValueError, match="atol must be at least 0; got atol=-0.5"):
        rank.rank_tolerance(np.eye(2), atol=-0.5)


def test_attention_parts_output_equals_multi_head_attention():
    p = mha.init_params(16, 4, seed=3)
    x = np.random.default_rng(0).standard_normal((2, 5, 16))
    parts = rank.attention_parts(x, p)
    out, w = mha.backends.np_backend.multi_head_attention(x, x, x, p)
    np.testing.assert_allclose(parts["output"], out, atol=1e-12)
    np.testing.assert_allclose(parts["concat"] @ p.w_o + p.b_o, out, atol=1e-12)
    assert parts["heads"].shape == (2, 4, 5, 4)


def test_count_distinct_rows_counts_exact_repeats():
    x = np.array([[1.0, 2.0], [3.0, 4.0], [1.0, 2.0]])
    assert rank.count_distinct_rows(x) == 2


def _ranks(x: np.ndarray, p: mha.MHAParams) -> tuple[list[int], int, int]:
    parts = rank.attention_parts(x[None], p)
    heads = [rank.numerical_rank(parts["heads"][0, h]) for h in range(p.num_heads)]
    return heads, rank.numerical_rank(parts["concat"][0]), rank.numerical_rank(parts["output"][0])


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize(
    ("kind", "expect_head", "expect_concat"),
    [("n16", 8, 16), ("n5", 5, 5), ("n64", 8, 32), ("repeated", 3, 3)],
)
def test_generic_inputs_reach_the_rank_bounds(bias, kind, expect_head, expect_concat):
    rng = np.random.default_rng(1)
    x = {
        "n16": lambda: rng.standard_normal((16, 32)),
        "n5": lambda: rng.standard_normal((5, 32)),
        "n64": lambda: rng.standard_normal((64, 32)),
        "repeated": lambda: rng.standard_normal((3, 32))[[0, 1, 2] * 4],
    }[kind]()
    p = mha.init_params(32, 4, bias=bias, seed=2)
    heads, concat, out = _ranks(x, p)
    bounds = rank.rank_bounds(x, p)
    assert heads == [expect_head] * 4 == list(bounds["head"])
    assert concat == expect_concat == bounds["concat"]
    assert out == expect_concat == bounds["output"]


def test_value_bias_adds_exactly_one_to_the_concatenation_not_one_per_head():
    rng = np.random.default_rng(4)
    x = rng.standard_normal((16, 2)) @ rng.standard_normal((2, 32))  # rank 2, distinct rows
    for bias, head, concat in ((False, 2, 8), (True, 3, 9)):
        p = mha.init_params(32, 4, bias=bias, seed=5)
        heads, c, o = _ranks(x, p)
        b = rank.rank_bounds(x, p)
        assert heads == [head] * 4 == list(b["head"])
        assert c == concat == b["concat"] and o == concat == b["output"]


def test_rank_bounds_rejects_wrong_inputs():
    p = mha.init_params(8, 2)
    with pytest.raises(ValueError, match=r"x width must equal d_model=8; got x.shape=\(3, 4\)"):
        rank.rank_bounds(np.ones((3, 4)), p)
    with pytest.raises(TypeError, match="params must be MHAParams; got dict"):
        rank.rank_bounds(np.ones((3, 8)), {})


def test_singular_values_agree_with_numpy_and_keep_float32():
    a = known_rank(9, 6, 6, seed=3)
    np.testing.assert_allclose(
        rank.singular_values(a), np.linalg.svd(a, compute_uv=False), rtol=1e-12
    )
    s32 = rank.singular_values(a.astype(np.float32))
    assert s32.dtype == np.float32
    np.testing.assert_allclose(s32, np.linalg.svd(a, compute_uv=False), rtol=1e-5)
    assert rank.singular_values(a.astype(np.float16)).shape == (6,)  # computed in float64


def test_circuit_singular_values_match_each_heads_products():
    p = mha.init_params(12, 3, seed=6)
    spectra = rank.circuit_singular_values(p)
    assert spectra["QK"].shape == spectra["OV"].shape == (3, 12)
    for h in range(3):
        blk = p.head(h)
        qk = np.linalg.svd(blk["w_q"] @ blk["w_k"].T, compute_uv=False)
        ov = np.linalg.svd(blk["w_v"] @ blk["w_o"], compute_uv=False)
        np.testing.assert_allclose(spectra["QK"][h], qk, atol=1e-12)
        np.testing.assert_allclose(spectra["OV"][h], ov, atol=1e-12)
        for s in (spectra["QK"][h], spectra["OV"][h]):  # rank Dh = 4: a tail at rounding level
            assert s[3] > 1e-3 * s[0] and s[4] < 1e-14 * s[0]
    with pytest.raises(TypeError, match="params must be MHAParams; got tuple"):
        rank.circuit_singular_values(())


def test_circuit_singular_values_see_a_rank_deficient_head():
    p = mha.init_params(8, 2, bias=False, seed=1)
    w_k = p.w_k.copy()
    w_k[:, 1] = w_k[:, 0]  # head 0's key block has rank Dh - 1 = 3
    p = mha.MHAParams.from_qkv(p.w_q, w_k, p.w_v, p.w_o, 2)
    s = rank.circuit_singular_values(p)["QK"]
    tol = s[:, :1] * rank.default_rtol((8, 8))
    assert list((s > tol).sum(axis=1)) == [3, 4]


def test_output_bound_uses_the_rank_of_w_o():
    rng = np.random.default_rng(7)
    x = rng.standard_normal((16, 32))
    p = mha.init_params(32, 4, bias=False, seed=3)
    w_o = rng.standard_normal((32, 5)) @ rng.standard_normal((5, 32))  # rank 5
    p = mha.MHAParams.from_qkv(p.w_q, p.w_k, p.w_v, w_o, 4)
    heads, concat, out = _ranks(x, p)
    bounds = rank.rank_bounds(x, p)
    assert concat == 16 == bounds["concat"]
    assert out == 5 == bounds["output"]
    p_bias = mha.MHAParams.from_qkv(p.w_q, p.w_k, p.w_v, w_o, 4, b_o=np.ones(32))
    assert rank.rank_bounds(x, p_bias)["output"] == 6 == _ranks(x, p_bias)[2]  # + 1 b_o^T


class _BiasedModel:
    """A stand-in for MiniLM: one biased layer of mha, run on random embeddings."""

    num_layers, num_heads = 1, 2

    def __init__(self) -> None:
        self.params = mha.init_params(8, 2, seed=3)
        self.params = mha.MHAParams(
            self.params.w_qkv, self.params.w_o, self.params.b_qkv + 0.5, self.params.b_o, 2
        )

    def attention_params(self, layer: int) -> mha.MHAParams:
        return self.params

    def run(self, text: str):
        from types import SimpleNamespace

        x = np.random.default_rng(len(text)).standard_normal((1, len(text), 8))
        _, w = mha.backends.np_backend.multi_head_attention(x, x, x, self.params)
        out = SimpleNamespace(hidden_states=[torch.from_numpy(x)], attentions=[torch.from_numpy(w)])
        return out, [list(text)]


def test_query_bias_shares_reproduce_the_weights_only_with_the_query_bias_term():
    result = rank.query_bias_shares(_BiasedModel(), ["abcde", "abcdefg"])
    assert result["share"].shape == (1, 2) and (result["share"] > 0).all()
    assert result["error_with_bias"] < 1e-12 < 1e-3 < result["error_without_bias"]
    with pytest.raises(ValueError, match="texts must hold at least one text"):
        rank.query_bias_shares(_BiasedModel(), [])
