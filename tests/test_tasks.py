"""Tests of the repeated-segment task, its ground truth and the induction score."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mha.tasks import induction_score, induction_targets, repeated_segments


def _batch(seed=0, **kw):
    args = dict(min_period=4, max_period=8, rng=seed)
    args.update(kw)
    return repeated_segments(16, 20, 32, **args)


def test_repeated_segments_shapes_and_dtypes():
    b = _batch()
    assert b.tokens.shape == (16, 20) and b.tokens.dtype == torch.int64
    assert b.period.shape == (16,) and b.start.shape == (16,)
    assert b.repeated.shape == (16, 20) and b.repeated.dtype == torch.bool


def test_periods_and_prefix_lengths_lie_in_their_ranges():
    b = _batch(prefix_prob=1.0)
    assert ((b.period >= 4) & (b.period <= 8)).all()
    assert ((b.start >= 0) & (b.start <= 20 - 2 * b.period)).all()
    assert (b.start > 0).any()


def test_prefix_prob_zero_starts_every_segment_at_zero():
    assert (_batch(prefix_prob=0.0).start == 0).all()


def test_segment_repeats_with_its_period_after_the_prefix():
    b = _batch(prefix_prob=1.0)
    for tok, T, n in zip(b.tokens.tolist(), b.period.tolist(), b.start.tolist(), strict=True):
        for i in range(n + T, len(tok)):
            assert tok[i] == tok[i - T]


def test_tokens_are_distinct_except_the_copies():
    b = _batch(prefix_prob=1.0)
    for tok, T, n in zip(b.tokens.tolist(), b.period.tolist(), b.start.tolist(), strict=True):
        first = tok[: n + T]  # the prefix and the first copy of the segment
        assert len(set(first)) == n + T
        assert set(tok) == set(first)
        assert all(0 <= t < 32 for t in tok)


def test_repeated_marks_exactly_the_tokens_seen_before():
    b = _batch(prefix_prob=0.5, seed=3)
    for tok, rep in zip(b.tokens.tolist(), b.repeated.tolist(), strict=True):
        assert rep == [tok[i] in tok[:i] for i in range(len(tok))]


def test_same_seed_gives_the_same_batch_and_a_generator_moves_on():
    a, b = _batch(seed=5), _batch(seed=5)
    assert torch.equal(a.tokens, b.tokens) and torch.equal(a.start, b.start)
    gen = np.random.default_rng(5)
    first = repeated_segments(16, 20, 32, min_period=4, max_period=8, rng=gen)
    second = repeated_segments(16, 20, 32, min_period=4, max_period=8, rng=gen)
    assert torch.equal(first.tokens, a.tokens)
    assert not torch.equal(first.tokens, second.tokens)


def test_induction_targets_of_a_hand_example():
    tokens = np.array([[7, 1, 2, 3, 1, 2, 3]])  # prefix 7, segment (1, 2, 3) twice
    t = induction_targets(tokens)[0]
    expected = {(4, 2), (5, 3), (6, 4)}  # query -> the key after the previous copy
    assert {(int(i), int(j)) for i, j in zip(*np.nonzero(t), strict=True)} == expected


def test_induction_targets_match_brute_force_and_stay_causal():
    tokens = np.random.default_rng(0).integers(0, 4, size=(3, 12))  # many repeats
    t = induction_targets(tokens)
    for b in range(3):
        for i in range(12):
            for k in range(12):
                want = k >= 1 and k - 1 < i and tokens[b, k - 1] == tokens[b, i]
                assert t[b, i, k] == want
    assert not np.triu(t, k=1).any()  # never a key after the query


def test_induction_targets_accept_torch_tokens():
    b = _batch()
    assert np.array_equal(induction_targets(b.tokens), induction_targets(b.tokens.numpy()))


def _rows(mass):
    return mass / mass.sum(axis=-1, keepdims=True)


def test_perfect_induction_head_scores_one_and_previous_token_head_zero():
    b = _batch(prefix_prob=0.5)
    tokens = b.tokens.numpy()
    L = tokens.shape[1]
    t = induction_targets(tokens)
    causal = np.tril(np.ones((L, L)))
    perfect = _rows(np.where(t.any(-1, keepdims=True), t, causal))  # (B, L, L)
    previous = np.broadcast_to(_rows(np.eye(L, k=-1) + np.eye(L) * (np.arange(L) == 0)), t.shape)
    w = np.stack([perfect, previous], axis=1)  # (B, 2, L, L)
    assert np.allclose(induction_score(w, tokens), [1.0, 0.0], atol=1e-12)


def test_induction_score_keeps_the_middle_dimensions():
    b = _batch()
    L = b.tokens.shape[1]
    w = np.broadcast_to(_rows(np.tril(np.ones((L, L)))), (16, 2, 3, L, L))
    assert induction_score(w, b.tokens).shape == (2, 3)
    assert induction_score(w[:, 0, 0], b.tokens).shape == ()


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000))
def test_induction_score_lies_in_unit_interval(seed):
    rng = np.random.default_rng(seed)
    b = _batch(seed=seed)
    L = b.tokens.shape[1]
    scores = rng.normal(size=(16, 3, L, L)) * 3
    w = np.exp(np.where(np.tril(np.ones((L, L))) > 0, scores, -np.inf))
    s = induction_score(_rows(w), b.tokens)
    assert s.shape == (3,) and ((s >= 0) & (s <= 1)).all()


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        (dict(batch_size=0), ValueError, r"batch_size must be at least 1; got batch_size=0"),
        (dict(seq_len=2.0), TypeError, r"seq_len must be an int; got float 2.0"),
        (dict(min_period=9), ValueError, r"min_period <= max_period <= seq_len // 2"),
        (dict(max_period=11), ValueError, r"max_period=11, seq_len=20"),
        (dict(vocab_size=10), ValueError, r"vocab_size must be at least seq_len - min_period"),
        (dict(prefix_prob=1.5), ValueError, r"prefix_prob must lie in \[0, 1\]; got"),
    ],
)
def test_repeated_segments_errors(kwargs, error, match):
    args = dict(batch_size=4, seq_len=20, vocab_size=32, min_period=4, max_period=8, rng=0)
    args.update(kwargs)
    batch_size, seq_len, vocab_size = (args.pop(k) for k in ("batch_size", "seq_len", "vocab_size"))
    with pytest.raises(error, match=match):
        repeated_segments(batch_size, seq_len, vocab_size, **args)


def test_induction_errors():
    tokens = np.array([[1, 2, 1, 2]])
    w = np.full((1, 4, 4), 0.25)
    with pytest.raises(TypeError, match=r"integer array of token ids; got dtype float64"):
        induction_targets(tokens.astype(float))
    with pytest.raises(ValueError, match=r"tokens must have shape \(B, L\); got 1-D shape"):
        induction_targets(tokens[0])
    with pytest.raises(TypeError, match=r"weights must be a floating array; got dtype int64"):
        induction_score(np.ones((1, 4, 4), dtype=np.int64), tokens)
    with pytest.raises(ValueError, match=r"weights must have shape \(B, \.\.\., L, L\)"):
        induction_score(w[:, :3], tokens)
    with pytest.raises(ValueError, match=r"tokens must contain a repeated token"):
        induction_score(w, np.array([[1, 2, 3, 4]]))
