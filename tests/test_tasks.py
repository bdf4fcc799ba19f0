"""Tests of the repeated-segment task."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from mha.training.tasks import repeated_segments


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


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        (dict(batch_size=0), ValueError, r"batch_size must be positive; got batch_size=0"),
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
