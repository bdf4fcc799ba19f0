"""Tests for mha.analysis.bottleneck: the construction, the floor and the fits."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mha.analysis import bottleneck as bn
from mha.backends import np_backend
from mha.numerics import tolerance


def random_target(n: int, seed: int, scale: float = 2.0) -> np.ndarray:
    e = np.exp(scale * np.random.default_rng(seed).standard_normal((n, n)))
    return e / e.sum(axis=1, keepdims=True)


def full_rank_input(n: int, d: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed + 100).standard_normal((n, d))


@settings(max_examples=25, deadline=None)
@given(n=st.integers(2, 10), extra=st.integers(0, 6), seed=st.integers(0, 10**6))
def test_construction_reproduces_random_targets_at_width_n_minus_one(n, extra, seed):
    x, p = full_rank_input(n, n + extra, seed), random_target(n, seed)
    w_q, w_k = bn.bhojanapalli_projections(x, p, n - 1)
    assert w_q.shape == w_k.shape == (n + extra, n - 1)
    np.testing.assert_allclose(bn.attention_from_projections(x, w_q, w_k), p, atol=1e-10)


def test_uncentred_construction_needs_width_n_and_reproduces_the_target():
    x, p = full_rank_input(8, 12), random_target(8, 1)
    assert bn.required_head_width(p, centre=False) == 8
    assert bn.required_head_width(p) == 7
    w_q, w_k = bn.bhojanapalli_projections(x, p, 8, centre=False)
    np.testing.assert_allclose(bn.attention_from_projections(x, w_q, w_k), p, atol=1e-10)
    with pytest.raises(ValueError, match=r"d_head must be at least rank\(log P\) = 8"):
        bn.bhojanapalli_projections(x, p, 7, centre=False)


def test_construction_rejects_bad_input():
    p = random_target(4, 0)
    with pytest.raises(ValueError, match=r"x must have rank N=4 .* got numerical rank 2"):
        bn.bhojanapalli_projections(
            np.ones((4, 2)) @ np.eye(2, 6) + np.eye(4, 6)[[0, 0, 1, 1]], p, 3
        )
    with pytest.raises(ValueError, match=r"d_head must be at least rank\(log\(P\) C\) = 3"):
        bn.bhojanapalli_projections(full_rank_input(4, 6), p, 2)
    with pytest.raises(ValueError, match=r"target must be \(5, 5\) for x with N=5 rows"):
        bn.bhojanapalli_projections(full_rank_input(5, 6), p, 4)
    with pytest.raises(TypeError, match="d_head must be an int; got float"):
        bn.bhojanapalli_projections(full_rank_input(4, 6), p, 3.0)


@pytest.mark.parametrize(
    ("target", "match"),
    [
        (np.full((2, 3), 1 / 3), r"target must be square \(N, N\)"),
        (np.array([[1.0, 0.0], [0.5, 0.5]]), r"target rows must be distributions \(> 0"),
        (np.array([[0.7, 0.7], [0.5, 0.5]]), "target rows must be distributions"),
    ],
)
def test_target_checks(target, match):
    with pytest.raises(ValueError, match=match):
        bn.check_attention_target(target)


def test_self_focus_target_needs_width_n_minus_one_and_has_a_closed_form_floor():
    n, alpha = 10, 3.0
    p = bn.self_focus_target(n, alpha)
    np.testing.assert_allclose(p.sum(axis=1), 1.0)
    assert bn.required_head_width(p) == n - 1
    for d_head in range(n):
        floor = bn.centred_logit_floor(p, d_head)
        assert floor == pytest.approx(alpha * np.sqrt(max(n - 1 - d_head, 0)), abs=1e-12)


def test_gradient_descent_never_beats_the_floor_and_reaches_it_below_n_minus_one():
    n, d = 8, 12
    x, p = full_rank_input(n, d), bn.self_focus_target(n, 2.0)
    for d_head in (2, 5):
        _, _, err = bn.fit_attention(x, p, d_head, steps=300, seed=1)
        floor = bn.centred_logit_floor(p, d_head)
        assert floor - 1e-9 <= err <= floor * 1.01


def test_floor_is_a_lower_bound_for_a_rank_deficient_input_too():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((8, 3)) @ rng.standard_normal((3, 12))  # rank 3
    p = random_target(8, 2)
    _, _, err = bn.fit_attention(x, p, 6, steps=200)
    assert err >= bn.centred_logit_floor(p, 6) - 1e-9
    assert err >= bn.centred_logit_floor(p, 3) - 1e-9  # scores have rank <= rank(X) = 3


def test_centred_logit_error_is_zero_only_for_equal_patterns():
    p, q = random_target(5, 0), random_target(5, 1)
    assert bn.centred_logit_error(p, p) == 0.0
    assert bn.centred_logit_error(p, q) > 0.1
    with pytest.raises(ValueError, match="weights and target must have the same shape"):
        bn.centred_logit_error(p, random_target(4, 0))


def test_best_layer_error_is_zero_with_enough_wide_heads_and_grows_as_heads_narrow():
    targets = np.stack([random_target(6, s) for s in range(3)])
    assert bn.best_layer_error(targets, 3, 5) == pytest.approx(0.0, abs=1e-20)
    assert bn.best_layer_error(targets, 3, 5) < bn.best_layer_error(targets, 2, 5)
    errors = [bn.best_layer_error(targets, 3, dh) for dh in (5, 3, 2, 1)]
    assert all(a < b for a, b in zip(errors, errors[1:], strict=False))
    one_head = bn.best_layer_error(targets, 1, 5)
    logs = np.stack([bn.centred_log(t) for t in targets])
    assert one_head == pytest.approx(np.sum((logs - logs.mean(axis=0)) ** 2))


def test_size_arguments_are_checked():
    p = random_target(4, 0)
    with pytest.raises(ValueError, match="n must be positive; got n=0"):
        bn.centering_matrix(0)
    with pytest.raises(ValueError, match="d_head must be at least 0; got d_head=-1"):
        bn.centred_logit_floor(p, -1)
    with pytest.raises(ValueError, match="d_head must be positive; got d_head=0"):
        bn.fit_attention(full_rank_input(4, 5), p, 0)
    with pytest.raises(ValueError, match=r"target must be \(N, N\) with N = x.shape\[0\] = 3"):
        bn.fit_attention(full_rank_input(3, 5), p, 2)
    with pytest.raises(ValueError, match=r"targets must have shape \(K, N, N\)"):
        bn.best_layer_error(p, 1, 1)
    with pytest.raises(ValueError, match="num_heads must be positive; got num_heads=0"):
        bn.best_layer_error(p[None], 0, 1)
    with pytest.raises(ValueError, match="alpha must be finite"):
        bn.self_focus_target(3, np.inf)
    with pytest.raises(ValueError, match=r"w_q and w_k must both have shape \(D, Dh\)"):
        bn.attention_from_projections(np.eye(3), np.eye(3), np.eye(2))


def test_sweep_matches_single_fits_and_respects_the_floor():
    x, p = full_rank_input(6, 9), random_target(6, 3)
    errors = bn.fit_attention_sweep(x, [p, bn.self_focus_target(6, 2.0)], [1, 3], steps=150)
    assert errors.shape == (2, 2)
    single = bn.fit_attention(x, p, 1, steps=150)[2]
    assert errors[0, 0] == pytest.approx(single, rel=1e-6)  # the first fit draws the same init
    assert errors[0, 1] >= bn.centred_logit_floor(p, 3) - 1e-9
    with pytest.raises(ValueError, match="steps must be positive; got steps=0"):
        bn.fit_attention_sweep(x, [p], [1], steps=0)


@settings(max_examples=30, deadline=None)
@given(n=st.integers(2, 8), seed=st.integers(0, 10**6), shift=st.floats(-50, 50))
def test_softmax_sees_only_row_centred_scores(n, seed, shift):
    rng = np.random.default_rng(seed)
    z = 3 * rng.standard_normal((n, n))
    shifted = z + shift * rng.standard_normal((n, 1))  # a constant added to each row
    a = np.exp(z - z.max(1, keepdims=True))
    a /= a.sum(1, keepdims=True)
    b = np.exp(shifted - shifted.max(1, keepdims=True))
    b /= b.sum(1, keepdims=True)
    np.testing.assert_allclose(a, b, rtol=1e-9)
    np.testing.assert_allclose(bn.centred_log(a), z - z.mean(1, keepdims=True), atol=1e-9)
    np.testing.assert_allclose(bn.centred_log(a) @ bn.centering_matrix(n), bn.centred_log(a))


def test_attention_from_projections_equals_the_backends_attention_weights():
    rng = np.random.default_rng(3)
    x, (w_q, w_k) = rng.standard_normal((6, 10)), rng.standard_normal((2, 10, 4))
    _, weights = np_backend.scaled_dot_product_attention(x @ w_q, x @ w_k, x @ w_k)
    # two routes to the scores (sums of 10 and 4 products), then the softmax: a weight
    # moves by at most twice the largest score change
    scale = 2 * np.abs(x @ w_q).max() * np.abs(x @ w_k).max() * 4
    tol = tolerance.rounding_tolerance(np.float64, terms=10, scale=scale, stages=3)
    tolerance.assert_close(bn.attention_from_projections(x, w_q, w_k), weights, tol)


def test_one_target_on_one_head_costs_the_squared_floor():
    p = random_target(7, 5)
    for d_head in (1, 3, 6):
        assert bn.best_layer_error(p[None], 1, d_head) == pytest.approx(
            bn.centred_logit_floor(p, d_head) ** 2, rel=1e-12
        )


@settings(max_examples=25, deadline=None)
@given(n=st.integers(2, 12), seed=st.integers(0, 10**6))
def test_probability_errors_are_zero_on_equal_patterns_and_obey_pinsker(n, seed):
    p, a = random_target(n, seed), random_target(n, seed + 1)
    assert np.all(bn.total_variation(p, p) == 0) and np.allclose(bn.kl_divergence(p, p), 0)
    tv, kl = bn.total_variation(a, p), bn.kl_divergence(a, p)
    assert tv.shape == kl.shape == (n,)
    assert np.all((tv >= 0) & (tv <= 1)) and np.all(kl >= 2 * tv**2 - 1e-12)  # Pinsker


def test_total_variation_bounds_the_change_of_the_head_output():
    p, a = random_target(8, 1), random_target(8, 2)
    v = np.random.default_rng(3).standard_normal((8, 5))  # values (S, Dh)
    change = np.linalg.norm((a - p) @ v, axis=1)  # (N,)
    assert np.all(change <= 2 * bn.total_variation(a, p) * np.linalg.norm(v, axis=1).max())


def test_kl_divergence_is_infinite_where_the_head_ignores_a_key_the_target_uses():
    p = np.full((2, 2), 0.5)
    a = np.array([[1.0, 0.0], [0.5, 0.5]])
    kl = bn.kl_divergence(a, p)
    assert np.isinf(kl[0]) and kl[1] == 0.0
    assert bn.total_variation(a, p).tolist() == [0.5, 0.0]
    one_hot = np.array([[1.0, 0.0], [0.0, 1.0]])  # keys with target weight 0 add nothing
    np.testing.assert_allclose(bn.kl_divergence(p, one_hot), [np.log(2)] * 2, rtol=1e-15)


@pytest.mark.parametrize(
    ("weights", "target", "match"),
    [
        (np.eye(2), np.eye(3), "same shape"),
        (np.full((2, 2), 0.7), np.full((2, 2), 0.5), "weights rows must be distributions"),
    ],
)
def test_probability_errors_reject_bad_patterns(weights, target, match):
    with pytest.raises(ValueError, match=match):
        bn.total_variation(weights, target)


@pytest.mark.parametrize("n", [2, 5, 16, 64])
@pytest.mark.parametrize("offset", [-1, 0, 1])
def test_offset_head_puts_at_least_the_bound_on_the_offset_key(n, offset):
    gap = 6.0
    x, w_q, w_k = bn.offset_head(n, offset, gap)
    assert x.shape == (n, 2) and w_q.shape == w_k.shape == (2, 2)
    a = bn.attention_from_projections(x, w_q, w_k)
    i = np.arange(n)
    on_target = a[i, np.clip(i + offset, 0, n - 1)]  # out of range: the nearest end
    assert on_target.min() >= 1 / (1 + (n - 1) * np.exp(-gap)) - 1e-12
    assert (a.argmax(axis=1) == np.clip(i + offset, 0, n - 1)).all()


def test_offset_head_reaches_the_weights_of_the_rank_chapter():
    for n, gap, least in ((16, 7.0, 0.98), (512, 16.0, 0.9999)):
        a = bn.attention_from_projections(*bn.offset_head(n, -1, gap))
        assert a[np.arange(1, n), np.arange(n - 1)].min() >= least


@pytest.mark.parametrize(
    ("args", "error", "match"),
    [
        ((1, 0, 1.0), ValueError, "n must be at least 2; got n=1"),
        ((4.0, 0, 1.0), TypeError, r"n must be an int; got float 4\.0"),
        ((4, 0.5, 1.0), TypeError, "offset must be an int"),
        ((4, 1, 0.0), ValueError, "gap must be positive"),
        ((4, 1, np.inf), ValueError, "gap must be positive"),
    ],
)
def test_offset_head_errors_name_the_argument(args, error, match):
    with pytest.raises(error, match=match):
        bn.offset_head(*args)


def test_truncated_centred_log_reaches_the_floor_and_agrees_with_the_construction():
    p, x = random_target(8, 4), full_rank_input(8, 10)
    for d_head in (1, 3, 7):
        z = bn.truncated_centred_log(p, d_head)
        assert np.linalg.matrix_rank(z) == d_head
        errors = bn.attention_errors(z, p)
        assert errors["centred_logit"] == pytest.approx(bn.centred_logit_floor(p, d_head))
    w_q, w_k = bn.bhojanapalli_projections(x, p, 7)
    z = x @ w_q @ (x @ w_k).T / np.sqrt(7)
    np.testing.assert_allclose(z, bn.truncated_centred_log(p, 7), atol=1e-9)
    with pytest.raises(ValueError, match="d_head must be at least 0; got d_head=-1"):
        bn.truncated_centred_log(p, -1)


def test_attention_errors_match_the_errors_of_the_weights_and_survive_underflow():
    p, a = random_target(6, 7), random_target(6, 8)
    errors = bn.attention_errors(np.log(a) + 3.0, p)  # a constant per row is invisible
    assert errors["centred_logit"] == pytest.approx(bn.centred_logit_error(a, p))
    np.testing.assert_allclose(errors["total_variation"], bn.total_variation(a, p), rtol=1e-12)
    np.testing.assert_allclose(errors["kl"], bn.kl_divergence(a, p), rtol=1e-10)
    sharp = 2000.0 * np.eye(6)  # off-diagonal weights e^-2000: 0 in float64
    e = bn.attention_errors(sharp, bn.self_focus_target(6, 3.0))
    assert np.isfinite(e["kl"]).all() and e["kl"].min() > 100  # finite, large
    assert e["centred_logit"] == pytest.approx((2000.0 - 3.0) * np.sqrt(5))
    sharp_one_hot = bn.attention_errors(sharp, np.eye(6))  # a one-hot target
    assert np.isinf(sharp_one_hot["centred_logit"])
    assert sharp_one_hot["kl"].max() < 1e-300 and sharp_one_hot["total_variation"].max() < 1e-300
    with pytest.raises(ValueError, match="same shape"):
        bn.attention_errors(np.zeros((2, 2)), p)
    with pytest.raises(ValueError, match="target rows must be distributions"):
        bn.attention_errors(np.zeros((2, 2)), np.eye(2) * 2)


def test_positional_patterns_are_the_four_sharp_patterns_and_their_mixtures():
    sharp = bn.positional_patterns(5)
    assert sharp.shape == (4, 5, 5)
    assert bn.POSITIONAL_PATTERNS == ("previous", "next", "self", "first")
    assert sharp[0].argmax(1).tolist() == [0, 0, 1, 2, 3]  # token 0 attends to itself
    assert sharp[1].argmax(1).tolist() == [1, 2, 3, 4, 4]  # the last token attends to itself
    assert sharp[2].argmax(1).tolist() == [0, 1, 2, 3, 4] and sharp[3].argmax(1).tolist() == [0] * 5
    mixed = bn.positional_patterns(5, mix=0.1)
    np.testing.assert_allclose(mixed, 0.9 * sharp + 0.02, rtol=0, atol=1e-15)
    with pytest.raises(ValueError, match=r"mix must be in \[0, 1\); got mix=1.0"):
        bn.positional_patterns(5, mix=1.0)


@pytest.mark.parametrize("num_heads", [4, 8, 16])
def test_positional_layer_forms_the_four_patterns_in_its_first_heads(num_heads):
    gap = 9.0
    x, params = bn.positional_layer(16, 32, num_heads, gap)
    _, w = np_backend.multi_head_attention(x[None], x[None], x[None], params)  # (1, H, N, N)
    sharp = bn.positional_patterns(16)
    bound = 1 / (1 + 15 * np.exp(-gap))
    for k in range(4):
        on_target = (w[0, k] * sharp[k]).sum(axis=1)  # each query's weight on its target
        assert on_target.min() >= bound - 1e-12
    np.testing.assert_allclose(w[0, 4:], 1 / 16, rtol=0, atol=1e-15)  # spare heads: uniform
    with pytest.raises(ValueError, match="d_model / num_heads >= 2"):
        bn.positional_layer(16, 32, 32, gap)


def test_sharp_target_bounds_hold_for_layers_that_share_heads_or_have_width_one():
    sharp = bn.positional_patterns(8)
    pair = [bn.total_variation(a, b).mean() for i, a in enumerate(sharp) for b in sharp[i + 1 :]]
    one = bn.sharp_target_bounds(sharp, 1, 8)
    assert one["total_variation"] == max(pair) / 2 and one["kl"] == 2 * (max(pair) / 2) ** 2
    assert bn.sharp_target_bounds(sharp, 4, 2) == {"total_variation": 0.0, "kl": 0.0}
    narrow = bn.sharp_target_bounds(sharp, 4, 1)
    assert narrow["total_variation"] == (8 - 2) / 8 / 2  # self: every key is one row's favourite
    # Any width-1 head: its favourite keys are argmax b and argmin b, so the bound holds.
    rng = np.random.default_rng(0)
    for _ in range(20):
        a, b = rng.standard_normal(8), 5 * rng.standard_normal(8)
        weights = np_backend.softmax(np.outer(a, b))
        assert bn.total_variation(weights, sharp[2]).mean() >= narrow["total_variation"]
    with pytest.raises(ValueError, match="targets must have one-hot rows"):
        bn.sharp_target_bounds(bn.positional_patterns(8, mix=0.1), 2, 2)
