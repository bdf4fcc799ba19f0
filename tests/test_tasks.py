"""Tests of the repeated-segment and digit-sum tasks."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from mha.training.tasks import digit_sum_answers, digit_sums, repeated_segments


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
        (dict(batch_size=0), ValueError, r"batch_size must be positive; got"),
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


def test_digit_sum_answer_is_the_previous_first_digit_plus_the_first_second_digit():
    b = digit_sums(16, 12, 5, rng=0)
    assert b.tokens.shape == b.answers.shape == (16, 12) and b.answers.dtype == torch.int64
    assert b.base == 5 and int(b.tokens.min()) >= 0 and int(b.tokens.max()) < 25
    for tok, ans in zip(b.tokens.tolist(), b.answers.tolist(), strict=True):
        assert ans[0] == -1  # position 0: no previous token, no answer
        for i in range(1, 12):
            first_digit, _ = divmod(tok[i - 1], 5)  # the previous token's
            _, second_digit = divmod(tok[0], 5)  # the first token's
            assert ans[i] == first_digit + second_digit


def test_digit_sum_answers_depend_on_the_previous_and_the_first_token_only():
    tokens = torch.tensor([[7, 3, 12, 5], [7, 9, 12, 0]])  # base 4: 7 = (1, 3), 12 = (3, 0)
    answers = digit_sum_answers(tokens, 4)
    assert answers[:, 3].tolist() == [3 + 3, 3 + 3]  # the previous token 12, the first 7
    assert answers[:, 2].tolist() == [0 + 3, 2 + 3]  # previous 3 = (0, 3), 9 = (2, 1)


def test_digit_sums_same_seed_same_batch_and_every_token_appears():
    a, b = digit_sums(64, 16, 4, rng=3), digit_sums(64, 16, 4, rng=3)
    assert torch.equal(a.tokens, b.tokens) and torch.equal(a.answers, b.answers)
    assert set(a.tokens.flatten().tolist()) == set(range(16))
    assert not torch.equal(a.tokens, digit_sums(64, 16, 4, rng=4).tokens)


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (lambda: digit_sums(0, 8, rng=0), ValueError, r"batch_size must be positive; got"),
        (lambda: digit_sums(2, 1, rng=0), ValueError, r"seq_len must be at least 2; got"),
        (lambda: digit_sums(2, 8, 1, rng=0), ValueError, r"base must be at least 2; got base=1"),
        (lambda: digit_sums(2, 8.0, rng=0), TypeError, r"seq_len must be an int; got float"),
        (lambda: digit_sum_answers(torch.zeros(2, 3), 4), TypeError, r"tokens must be an int64"),
        (
            lambda: digit_sum_answers(torch.zeros(2, 1, dtype=torch.int64), 4),
            ValueError,
            r"tokens must have shape \(B, L\) with L >= 2; got \(2, 1\)",
        ),
        (
            lambda: digit_sum_answers(torch.full((1, 3), 16), 4),
            ValueError,
            r"tokens must lie in \[0, base \*\* 2\) = \[0, 16\); got values in \[16, 16\]",
        ),
    ],
)
def test_digit_sum_errors(call, error, match):
    with pytest.raises(error, match=match):
        call()
