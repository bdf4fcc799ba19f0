"""Synthetic tasks with known solutions: repeated segments (two layers) and digit sums.

**Repeated segments** need an induction circuit, two roles in two layers.

Each sequence is an optional prefix of unrelated tokens, then one segment of distinct
random tokens repeated until the sequence is full: with prefix length ``n`` and period
``T``, ``x[i] = segment[(i - n) % T]`` for ``i >= n``. Every token in a sequence is
distinct except the copies of the segment. A token at position ``i >= n + T`` has occurred
before, at ``i - T``, and the token that followed it then, ``x[i - T + 1]``, is the next
token now. Predicting it takes two steps (Elhage et al., 2021; Olsson et al., 2022): a
*previous-token head* copies ``x[j - 1]`` into position ``j``, and an *induction head* at
position ``i`` then attends to the key whose previous token equals ``x[i]`` and copies
its token. Because the period and the prefix vary, no fixed positional offset solves the
task; the tokens before the first repeat are unpredictable.

:func:`mha.detectors.patterns.induction_targets` gives, for every query, the keys an induction head
should attend to, and :func:`mha.detectors.patterns.induction_score` measures how much attention
goes there. :func:`seen_guess_loss` is a baseline of the task: the loss on the repeats of a
model that knows which tokens occurred but not where.

**Digit sums** (:func:`digit_sums`) need two roles in *one* layer. Every token is a
two-digit number, and the answer at position ``i`` is the first digit of the previous
token plus the second digit of the first token: a layer reads position ``i - 1`` and
position 0 at once. Two heads can each take one read (a previous-token head and a
first-token head); one head has one attention distribution for both.
"""

from __future__ import annotations

from dataclasses import dataclass
from numbers import Real
from typing import Any

import numpy as np
import torch

from mha.core._checks import arguments


@dataclass(frozen=True)
class RepeatedSegments:
    """A batch of the repeated-segment task.

    Args:
        tokens: token ids; row ``b`` is a prefix of ``start[b]`` unrelated tokens, then a
            segment of ``period[b]`` tokens repeated to length L.
        period: the segment length of each sequence.
        start: where the first copy of the segment begins (the prefix length).

    Shape:
        tokens ``(B, L)`` int64, period and start ``(B,)`` int64.

    Raises:
        ValueError: if the shapes do not match, a period is not positive or a start is
            negative.
        TypeError: if a field is not an integer torch tensor.
    """

    tokens: torch.Tensor
    period: torch.Tensor
    start: torch.Tensor

    def __post_init__(self) -> None:
        for name in ("tokens", "period", "start"):
            arguments.torch_tensor(name, getattr(self, name), integer=True)
        B = self.tokens.shape[0] if self.tokens.ndim == 2 else None
        if B is None or self.period.shape != (B,) or self.start.shape != (B,):
            raise ValueError(
                "tokens, period and start must have shapes (B, L), (B,) and (B,); got "
                f"{tuple(self.tokens.shape)}, {tuple(self.period.shape)} and "
                f"{tuple(self.start.shape)}"
            )
        if B and (int(self.period.min()) < 1 or int(self.start.min()) < 0):
            raise ValueError(
                f"period must be positive and start non-negative; got periods from "
                f"{int(self.period.min())} and starts from {int(self.start.min())}"
            )

    @property
    def repeated(self) -> torch.Tensor:
        """True where the token has occurred before (``i >= start + period``): induction
        predicts the next token from there.

        Shape:
            ``(B, L)`` bool.
        """
        L = self.tokens.shape[1]
        return torch.arange(L)[None, :] >= (self.start + self.period)[:, None]  # (B, L)


def repeated_segments(
    batch_size: int,
    seq_len: int,
    vocab_size: int,
    *,
    min_period: int,
    max_period: int,
    prefix_prob: float = 0.5,
    rng: np.random.Generator | int,
) -> RepeatedSegments:
    """Sample sequences that repeat a segment of distinct random tokens.

    Each sequence draws a period ``T`` uniformly from ``[min_period, max_period]``. With
    probability ``prefix_prob`` it starts with a prefix of ``n`` unrelated tokens, ``n``
    uniform in ``[0, L - 2T]``; otherwise ``n = 0``. The segment's ``T`` tokens and the
    prefix are distinct draws from ``[0, vocab_size)``, and the segment is repeated until
    the sequence has ``seq_len`` tokens, so it occurs at least twice in full.

    Args:
        batch_size: number of sequences B.
        seq_len: sequence length L.
        vocab_size: number of token ids V.
        min_period: shortest segment.
        max_period: longest segment, at most ``seq_len // 2``.
        prefix_prob: probability that a sequence has a prefix (of random length).
        rng: a NumPy generator, or a seed for one, an int ``>= 0`` (the same seed gives
            the same batch).

    Shape:
        Returns tokens ``(B, L)``, period and start ``(B,)``.

    Returns:
        A :class:`RepeatedSegments` batch of torch int64 tensors.

    Raises:
        ValueError: if a size is not positive, the periods do not satisfy
            ``min_period <= max_period <= seq_len // 2``, there are too few token ids for
            distinct tokens (``vocab_size < seq_len - min_period``), ``prefix_prob`` is
            outside ``[0, 1]``, a seed is negative, or the batch would pass what an array
            can hold.
        TypeError: if a size or a seed is not an int (a Python or NumPy integer, not a
            bool), ``rng`` is neither a generator nor a seed, or ``prefix_prob`` is not a
            real number.
    """
    sizes = arguments.sizes(
        batch_size=batch_size,
        seq_len=seq_len,
        vocab_size=vocab_size,
        min_period=min_period,
        max_period=max_period,
    )
    batch_size, seq_len, vocab_size, min_period, max_period = sizes.values()
    if not min_period <= max_period <= seq_len // 2:
        raise ValueError(
            "periods must satisfy min_period <= max_period <= seq_len // 2; got "
            f"min_period={min_period}, max_period={max_period}, seq_len={seq_len}"
        )
    if vocab_size < seq_len - min_period:
        raise ValueError(
            "vocab_size must be at least seq_len - min_period (distinct tokens); got "
            f"vocab_size={vocab_size}, seq_len={seq_len}, min_period={min_period}"
        )
    if isinstance(prefix_prob, bool) or not isinstance(prefix_prob, Real):
        raise TypeError(f"prefix_prob must be a real number; got {arguments.describe(prefix_prob)}")
    if not 0.0 <= prefix_prob <= 1.0:
        raise ValueError(f"prefix_prob must lie in [0, 1]; got prefix_prob={prefix_prob}")
    arguments.check_elements("batch_size", batch_size * vocab_size, 8)
    gen = _generator("rng", rng)
    period = gen.integers(min_period, max_period + 1, size=batch_size)  # (B,)
    perm = np.argsort(gen.random((batch_size, vocab_size)), axis=1)  # (B, V) permutations
    longest = seq_len - 2 * period + 1  # prefix lengths 0 .. L - 2T
    start = np.floor(gen.random(batch_size) * longest).astype(np.int64)  # (B,)
    start = np.where(gen.random(batch_size) < prefix_prob, start, 0)  # (B,)
    pos = np.arange(seq_len)[None, :]  # (1, L)
    T, n = period[:, None], start[:, None]
    idx = np.where(pos < n, T + pos, (pos - n) % T)  # (B, L): prefix perm[T:], segment perm[:T]
    tokens = np.take_along_axis(perm, idx, axis=1)  # (B, L)
    return RepeatedSegments(
        torch.as_tensor(tokens, dtype=torch.int64), torch.as_tensor(period), torch.as_tensor(start)
    )


def _generator(name: str, rng: Any) -> np.random.Generator:
    """A NumPy generator from ``rng``: a generator (used as it is) or a seed for one.

    Args:
        name: the argument's name, for messages.
        rng: a ``numpy.random.Generator``, or a seed, an int ``>= 0`` (Python or NumPy).

    Returns:
        The generator.

    Raises:
        ValueError: if the seed is negative.
        TypeError: if ``rng`` is neither a generator nor an int (a bool or float included).
    """
    if isinstance(rng, np.random.Generator):
        return rng
    if not arguments.integral(rng):
        raise TypeError(
            f"{name} must be a numpy.random.Generator or a seed (an int >= 0); got "
            f"{arguments.describe(rng)}"
        )
    return np.random.default_rng(arguments.size(name, rng, 0, None))


def seen_guess_loss(batch: RepeatedSegments) -> float:
    """The loss on the repeats of a uniform guess among the distinct tokens seen so far.

    At a repeated position every token of the prefix and of the segment has been seen
    (``start + period`` distinct tokens), and the next token is one of them, so a model
    that knows only *which* tokens occurred, not where, loses ``log(start + period)``
    there. Averaged over the query positions that :func:`mha.training.runs.segment_losses` counts as
    ``"repeat"``.

    Args:
        batch: the data.

    Returns:
        The mean loss in nats, a ``float``.

    Raises:
        ValueError: if no position before the last is repeated.
        TypeError: if ``batch`` is not a :class:`RepeatedSegments`.
    """
    arguments.instance("batch", batch, RepeatedSegments, "a RepeatedSegments batch")
    rep = batch.repeated[:, :-1]  # (B, L - 1): the query positions with a next token
    if not rep.any():
        raise ValueError("batch must have a repeated position before the last; got none")
    seen = (batch.start + batch.period).double()  # (B,)
    per_query = torch.log(seen)[:, None].expand(rep.shape)  # (B, L - 1)
    return float(per_query[rep].mean())


@dataclass(frozen=True)
class DigitSums:
    """A batch of the digit-sum task, which needs two roles in one layer.

    Every token is a two-digit number in base ``base``: token ``t`` has the first digit
    ``t // base`` and the second digit ``t % base``. The answer at position ``i >= 1`` is
    the first digit of the previous token plus the second digit of the first token,
    ``answers[:, i] = tokens[:, i - 1] // base + tokens[:, 0] % base``, a number from 0 to
    ``2 * (base - 1)``. A layer answers it with two reads at once: one of the previous
    position and one of position 0. Position 0 has no previous token and no answer (-1).

    Args:
        tokens: token ids in ``[0, base ** 2)``, drawn uniformly and independently.
        answers: the answer at each position, -1 at position 0.
        base: the base of the digits.

    Shape:
        tokens and answers ``(B, L)`` int64.

    Raises:
        ValueError: if ``base < 2``, ``tokens`` is not ``(B, L)`` with ``L >= 2`` or
            ``answers`` has another shape.
        TypeError: if ``tokens`` or ``answers`` is not an integer torch tensor, or ``base``
            not an int (a Python or NumPy integer, not a bool).
    """

    tokens: torch.Tensor
    answers: torch.Tensor
    base: int

    def __post_init__(self) -> None:
        for name in ("tokens", "answers"):
            arguments.torch_tensor(name, getattr(self, name), integer=True)
        object.__setattr__(self, "base", _base(self.base))
        if self.tokens.ndim != 2 or self.tokens.shape[1] < 2:
            raise ValueError(
                f"tokens must have shape (B, L) with L >= 2; got {tuple(self.tokens.shape)}"
            )
        if self.answers.shape != self.tokens.shape:
            raise ValueError(
                f"answers must have the shape of tokens, {tuple(self.tokens.shape)}; got "
                f"{tuple(self.answers.shape)}"
            )


BASE_LIMIT = 3_037_000_499
"""The largest base whose ``base ** 2`` token ids fit in int64 (``base ** 2 < 2**63``)."""


def _base(base: Any) -> int:
    """``base`` as a Python int in ``[2, BASE_LIMIT]`` (its square must fit in int64)."""
    return arguments.size("base", base, 2, BASE_LIMIT + 1)


def digit_sum_answers(tokens: torch.Tensor, base: int) -> torch.Tensor:
    """The digit-sum task's answers for given tokens (see :class:`DigitSums`).

    Args:
        tokens: token ids, two-digit numbers in base ``base``.
        base: the base of the digits, at least 2.

    Shape:
        tokens ``(B, L)`` with ``L >= 2``. Returns ``(B, L)`` int64.

    Returns:
        ``answers[:, i] = tokens[:, i - 1] // base + tokens[:, 0] % base`` for ``i >= 1``, and
        -1 at position 0.

    Raises:
        TypeError: if ``tokens`` is not an int64 tensor or ``base`` not an int (a Python or
            NumPy integer, not a bool).
        ValueError: if ``base`` is not in ``[2, 3037000499]`` (``base ** 2`` ids must fit
            in int64), ``tokens`` is not ``(B, L)`` with ``L >= 2``, or a token lies outside
            ``[0, base ** 2)``.
    """
    base = _base(base)
    if not isinstance(tokens, torch.Tensor) or tokens.dtype != torch.int64:
        raise TypeError(f"tokens must be an int64 torch.Tensor; got {arguments.describe(tokens)}")
    if tokens.ndim != 2 or tokens.shape[1] < 2:
        raise ValueError(f"tokens must have shape (B, L) with L >= 2; got {tuple(tokens.shape)}")
    if tokens.numel() and (tokens.min() < 0 or tokens.max() >= base**2):
        raise ValueError(
            f"tokens must lie in [0, base ** 2) = [0, {base**2}); got values in "
            f"[{int(tokens.min())}, {int(tokens.max())}]"
        )
    answers = torch.full_like(tokens, -1)  # (B, L)
    answers[:, 1:] = tokens[:, :-1] // base + tokens[:, :1] % base  # (B, L - 1)
    return answers


def digit_sums(
    batch_size: int, seq_len: int, base: int = 8, *, rng: np.random.Generator | int
) -> DigitSums:
    """Sample a batch of the digit-sum task: uniform random tokens and their answers.

    Args:
        batch_size: number of sequences B.
        seq_len: sequence length L, at least 2.
        base: the base of the digits, at least 2 (the vocabulary has ``base ** 2`` tokens).
        rng: a NumPy generator, or a seed for one (the same seed gives the same batch).

    Shape:
        Returns tokens and answers ``(B, L)``.

    Returns:
        A :class:`DigitSums` batch of torch int64 tensors.

    Raises:
        ValueError: if ``batch_size < 1``, ``seq_len < 2``, ``base`` is not in
            ``[2, 3037000499]``, a seed is negative, or the batch would pass what an array
            can hold.
        TypeError: if a size or a seed is not an int (a Python or NumPy integer, not a
            bool), or ``rng`` is neither a generator nor a seed.
    """
    batch_size = arguments.size("batch_size", batch_size)
    seq_len = arguments.size("seq_len", seq_len, 2)
    base = _base(base)
    arguments.check_elements("batch_size", batch_size * seq_len, 8)
    gen = _generator("rng", rng)
    tokens = torch.as_tensor(gen.integers(0, base**2, size=(batch_size, seq_len)))  # (B, L)
    return DigitSums(tokens, digit_sum_answers(tokens, base), base)
