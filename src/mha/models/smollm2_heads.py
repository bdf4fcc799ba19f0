"""Experiments on SmolLM2's heads: random words repeated, copying, heads that share keys.

:func:`repeated_words` makes the test of Olsson et al. (2022) for induction heads: random
whole words, repeated once, after the token that separates documents. On it
:func:`attention_weights` gives every head's weights for the detectors of
:mod:`mha.detectors.patterns`, and :func:`copy_losses` the model's loss on the first copy
(unpredictable) and on the second (predictable only by copying), with heads removed by
gates if asked; :func:`removal_effect` adds what the removal does to every head's induction
score. :func:`head_distances` and :func:`group_contrast` measure how alike the
attention of two heads is, and whether the query heads that share a key/value head
(grouped-query attention) attend more alike than heads of different groups;
:func:`shuffled_group_contrast` is the same count for groups drawn at random.
:func:`positional_scores` isolates what rotary positions add to a head's scores: its mean
query against its mean key, rotated apart by each distance.
"""

from __future__ import annotations

from typing import Any, cast

import numpy as np
import torch
import torch.nn.functional as F

from mha.core._checks import arguments, numpy_arrays
from mha.core._checks.numpy_arrays import as_numpy
from mha.core.rotary import Rotary, rotate
from mha.detectors import patterns
from mha.models.smollm2 import SmolLM2

START_ID = 0
"""``<|endoftext|>``, the token between documents in SmolLM2's training data: it opens each
sequence of :func:`repeated_words`, as it would open a document."""


def word_ids(model: SmolLM2) -> np.ndarray:
    """Ids of whole-word tokens: a space, then at least three ASCII letters (`` garden``).

    Args:
        model: the model (for its vocabulary).

    Shape:
        Returns ``(n,)``, sorted.

    Returns:
        The ids, int64 (about 30,000 of the 49,152).

    Raises:
        TypeError: if ``model`` is not a :class:`~mha.models.smollm2.SmolLM2`.
    """
    _check_model(model)
    vocab = model.tokenizer.get_vocab()  # token -> id; "Ġ" is the byte-level space
    chosen = (i for t, i in vocab.items() if t[:1] == "Ġ" and t[1:].isascii() and t[1:].isalpha())
    ids = sorted(i for i in chosen if len(model.tokenizer.id_to_token(i)) > 3)
    return np.array(ids, dtype=np.int64)


def _check_model(model: Any) -> None:
    arguments.instance("model", model, SmolLM2, "a SmolLM2 (load_smollm2)")


def repeated_words(model: SmolLM2, num_sequences: int, length: int, seed: int = 0) -> torch.Tensor:
    """``<|endoftext|> w_1 ... w_T w_1 ... w_T``: ``T`` random distinct words, repeated once.

    The words of a sequence are drawn without replacement from :func:`word_ids` with a
    seeded generator, so the only repeats are the second copy: there the next word is
    predictable by copying, and a head that looks from a word to the word after its first
    copy is an induction head (:func:`mha.detectors.patterns.induction_score`).

    Args:
        model: the model (for its vocabulary).
        num_sequences: the batch size, B.
        length: T, the words of each copy.
        seed: seed of the draws.

    Shape:
        Returns ``(B, 1 + 2T)`` int64.

    Returns:
        The token ids.

    Raises:
        ValueError: if a size is not positive, the sequence would pass the model's
            positions, ``length`` is more than the words there are, or the seed is
            negative.
        TypeError: if ``model`` is not a ``SmolLM2``, or a size or the seed is not an int
            (a Python or NumPy integer, not a bool).
    """
    _check_model(model)
    num_sequences = arguments.size("num_sequences", num_sequences)
    length = arguments.size("length", length)
    seed = arguments.seed("seed", seed)
    if 1 + 2 * length > model.max_len:
        raise ValueError(
            f"length must satisfy 1 + 2 * length <= {model.max_len}; got length={length}"
        )
    words = word_ids(model)
    if length > len(words):
        raise ValueError(
            f"length must be at most the {len(words)} whole-word tokens (drawn without "
            f"replacement); got length={length}"
        )
    rng = np.random.default_rng(seed)
    segments = np.stack([rng.choice(words, length, replace=False) for _ in range(num_sequences)])
    start = np.full((num_sequences, 1), START_ID)
    ids = np.concatenate([start, segments, segments], axis=1)  # (B, 1 + 2T)
    return torch.from_numpy(ids.astype(np.int64))


def attention_weights(model: SmolLM2, tokens: torch.Tensor) -> np.ndarray:
    """Every layer's attention weights on ``tokens``, as one float64 NumPy array.

    Args:
        model: the model.
        tokens: token ids.

    Shape:
        tokens ``(B, L)``; returns ``(B, num_layers, H, L, L)``.

    Returns:
        The weights (each row sums to 1; zeros above the diagonal).

    Raises:
        ValueError, TypeError: as :meth:`mha.models.smollm2.SmolLM2.forward`.
        TypeError: if ``model`` is not a ``SmolLM2``.
    """
    _check_model(model)
    with torch.no_grad():
        _, weights = model.hidden_states(tokens, need_weights=True)
    weights = cast(list[torch.Tensor], weights)  # a list, with need_weights
    return torch.stack(weights, dim=1).double().numpy()  # (B, num_layers, H, L, L)


def _check_repeated(model: Any, tokens: Any) -> None:
    _check_model(model)
    arguments.torch_tensor("tokens", tokens, integer=True)
    if tokens.ndim != 2 or tokens.shape[1] < 5 or (tokens.shape[1] % 2 == 0):
        got = tuple(tokens.shape) if isinstance(tokens, torch.Tensor) else type(tokens).__name__
        raise ValueError(
            f"tokens must be repeated_words sequences (B, 1 + 2T) with T >= 2; got {got}"
        )
    if tokens.shape[0] == 0:
        raise ValueError("tokens must hold at least one sequence (no loss over none); got B=0")


def copy_losses(
    model: SmolLM2,
    tokens: torch.Tensor,
    gates: torch.Tensor | None = None,
    parts: tuple[str, ...] = ("first", "second"),
) -> dict[str, float]:
    """Mean next-token loss on each copy of :func:`repeated_words`' sequences, in nats.

    ``"first"``: predicting ``w_2 ... w_T`` of the first copy, which nothing in the
    sequence predicts. ``"second"``: predicting ``w_2 ... w_T`` of the second copy, each the
    word that followed the current one in the first copy. (``w_1`` of each copy is left
    out: the start token and ``w_T`` do not predict it.)

    Args:
        model: the model.
        tokens: ``repeated_words`` sequences.
        gates: head gates ``(num_layers, H)`` (0 removes a head), or ``None``.
        parts: which losses to compute, ``"first"`` and/or ``"second"`` (each costs the
            output layer at ``T - 1`` positions per sequence).

    Shape:
        tokens ``(B, 1 + 2T)``.

    Returns:
        ``{part: loss}`` for each part asked for.

    Raises:
        ValueError: if ``tokens`` does not have an odd length of at least 5 or has no
            sequence, ``parts`` is empty or names another part, or as
            :meth:`mha.models.smollm2.SmolLM2.forward`.
        TypeError: if ``model`` is not a ``SmolLM2``, ``tokens`` not an integer tensor, or
            ``parts`` not a tuple or list.
    """
    names = arguments.items("parts", parts)
    if not names or not all(isinstance(n, str) and n in ("first", "second") for n in names):
        raise ValueError(f"parts must name 'first' and/or 'second'; got parts={parts!r}")
    _check_repeated(model, tokens)
    T = (tokens.shape[1] - 1) // 2
    with torch.no_grad():
        hidden, _ = model.hidden_states(tokens, gates)  # (B, 1 + 2T, D)
        out = {}
        for part, start in (("first", 1), ("second", 1 + T)):
            if part not in parts:
                continue
            logits = model.unembed(hidden[:, start : start + T - 1])  # (B, T - 1, V)
            targets = tokens[:, start + 1 : start + T]  # (B, T - 1)
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
            out[part] = float(loss)
    return out


def removal_effect(
    model: SmolLM2, tokens: torch.Tensor, gates: torch.Tensor | None
) -> tuple[float, np.ndarray]:
    """The loss on the second copy, and every head's induction score, with some heads off.

    One forward with the weights: what removing heads does to copying, and whether the
    induction heads still find their token.

    Args:
        model: the model.
        tokens: :func:`repeated_words` sequences.
        gates: head gates ``(num_layers, H)`` (0 removes a head), or ``None`` (none removed).

    Shape:
        tokens ``(B, 1 + 2T)``; returns a float and ``(num_layers, H)``.

    Returns:
        ``(loss, induction)``: the loss of :func:`copy_losses` ``"second"``, in nats, and
        :func:`mha.detectors.patterns.induction_score` of every head.

    Raises:
        ValueError, TypeError: as :func:`copy_losses`.
    """
    _check_repeated(model, tokens)
    T = (tokens.shape[1] - 1) // 2
    with torch.no_grad():
        hidden, weights = model.hidden_states(tokens, gates, need_weights=True)
        logits = model.unembed(hidden[:, 1 + T : 2 * T])  # (B, T - 1, V)
        targets = tokens[:, 2 + T :]  # (B, T - 1)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
    weights = cast(list[torch.Tensor], weights)  # a list, with need_weights
    w = torch.stack(weights, dim=1).double().numpy()  # (B, num_layers, H, L, L)
    return float(loss), patterns.induction_score(w, tokens)


def head_distances(weights: Any) -> np.ndarray:
    """How differently two heads of a layer attend: the mean total variation of their rows.

    For heads ``a`` and ``b`` of a layer, the total variation ``(1/2) sum_j |w_a[i, j] -
    w_b[i, j]|`` of each query's two rows (0 for the same distribution, 1 for disjoint
    ones), averaged over queries and sequences.

    Args:
        weights: attention weights, rows summing to 1.

    Shape:
        weights ``(B, num_layers, H, L, S)``; returns ``(num_layers, H, H)``.

    Returns:
        The distances, float64, symmetric with zeros on the diagonal.

    Raises:
        ValueError: if ``weights`` is not 5-D, has no sequence or no query (no row to
            average), or holds NaN or infinity.
        TypeError: if ``weights`` is not a floating array.
    """
    w = as_numpy("weights", weights)
    if not np.issubdtype(w.dtype, np.floating):
        raise TypeError(f"weights must be a floating array; got dtype {w.dtype}")
    w = numpy_arrays.float_array("weights", w)  # float64, finite
    if w.ndim != 5:
        raise ValueError(
            f"weights must have shape (B, num_layers, H, L, S); got {w.ndim}-D shape {w.shape}"
        )
    if w.shape[0] == 0 or w.shape[3] == 0:
        raise ValueError(
            f"weights must hold at least one sequence and one query (B, L >= 1); got shape "
            f"{w.shape}"
        )
    H = w.shape[2]
    out = np.zeros((w.shape[1], H, H))
    for a in range(H):
        for b in range(a + 1, H):
            tv = 0.5 * np.abs(w[:, :, a] - w[:, :, b]).sum(-1)  # (B, num_layers, L)
            out[:, a, b] = out[:, b, a] = tv.mean(axis=(0, 2))
    return out


def _check_groups(distances: Any, num_kv_heads: Any) -> tuple[np.ndarray, int]:
    d = numpy_arrays.float_array("distances", distances)  # float64, finite
    if d.ndim != 3 or d.shape[1] != d.shape[2]:
        raise ValueError(f"distances must have shape (num_layers, H, H); got {d.shape}")
    num_kv_heads = arguments.size("num_kv_heads", num_kv_heads)
    H = d.shape[1]
    if H % num_kv_heads or num_kv_heads in (1, H):
        raise ValueError(
            f"num_kv_heads must divide H = {H} into groups of at least two, and at least two "
            f"groups; got num_kv_heads={num_kv_heads}"
        )
    return d, num_kv_heads


def group_contrast(distances: Any, num_kv_heads: int) -> tuple[np.ndarray, np.ndarray]:
    """Per layer, the mean distance between heads of one group, and between other pairs.

    Groups are as in grouped-query attention: ``G = H / H_kv`` consecutive query heads
    share a key/value head (head ``h`` in group ``h // G``).

    Args:
        distances: :func:`head_distances`.
        num_kv_heads: H_kv.

    Shape:
        distances ``(num_layers, H, H)``; returns two ``(num_layers,)``.

    Returns:
        ``(within, across)``: the mean over pairs of heads in one group, and over pairs of
        heads in different groups.

    Raises:
        ValueError: if ``distances`` is not ``(num_layers, H, H)`` or holds NaN or
            infinity, or ``num_kv_heads`` does not make at least two groups of at least two
            heads.
        TypeError: if ``num_kv_heads`` is not an int (a Python or NumPy integer, not a
            bool) or ``distances`` is not a real array.
    """
    d, H_kv = _check_groups(distances, num_kv_heads)
    return _contrast(d, np.arange(d.shape[1]) // (d.shape[1] // H_kv))


def _contrast(d: np.ndarray, group: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    pairs = np.triu(np.ones(d.shape[1:], dtype=bool), k=1)  # each pair once
    same = pairs & (group[:, None] == group[None, :])
    return d[:, same].mean(axis=1), d[:, pairs & ~same].mean(axis=1)  # (num_layers,) each


def shuffled_group_contrast(
    distances: Any, num_kv_heads: int, draws: int, seed: int = 0
) -> np.ndarray:
    """For groups drawn at random, in how many layers their heads attend more alike.

    Each draw shuffles the heads into groups of the real size, the same in every layer,
    and counts the layers whose within-group mean distance is below the across-group mean
    (:func:`group_contrast`). A draw that gives back the real groups is drawn again, so the
    counts are those of other groupings, to compare the real groups' count with.

    Args:
        distances: :func:`head_distances`.
        num_kv_heads: H_kv.
        draws: how many random groupings.
        seed: seed of the shuffles.

    Shape:
        distances ``(num_layers, H, H)``; returns ``(draws,)``.

    Returns:
        The count for each draw, int64.

    Raises:
        ValueError, TypeError: as :func:`group_contrast`, and if ``draws`` is not a
            positive int or ``seed`` not an int ``>= 0``.
    """
    d, num_kv_heads = _check_groups(distances, num_kv_heads)
    draws = arguments.size("draws", draws)
    rng = np.random.default_rng(arguments.seed("seed", seed))
    counts = np.empty(draws, dtype=np.int64)
    G = d.shape[1] // num_kv_heads
    real = np.arange(d.shape[1]) // G
    for k in range(draws):
        group = real
        while all(len(set(group[real == g])) == 1 for g in range(num_kv_heads)):  # the real
            group = rng.permutation(d.shape[1]) // G  # head -> a random group of G heads
        within, across = _contrast(d, group)
        counts[k] = int((within < across).sum())
    return counts


def positional_scores(queries: Any, keys: Any, rotary: Rotary, max_distance: int) -> np.ndarray:
    """A head's score for a key ``d`` positions back, averaged over query and key tokens.

    A score is bilinear in the query and the key, so its average over every query token and
    every key token, at a fixed distance ``d``, is that of the mean query ``q`` and the mean
    key ``k``: ``(R_i q) . (R_(i-d) k) / sqrt(Dh)``, the same at every position ``i``. How it
    changes with ``d`` is what the rotation adds to the head's preference, content averaged
    out.

    Args:
        queries: one head's queries before rotation, one row per token.
        keys: the keys of its key/value head before rotation, one row per token.
        rotary: the rotation.
        max_distance: the largest ``d``.

    Shape:
        queries ``(n, Dh)``, keys ``(m, Dh)``; returns ``(max_distance + 1,)``.

    Returns:
        The scores at ``d = 0, 1, ..., max_distance``, float64.

    Raises:
        ValueError: if ``queries`` or ``keys`` is not 2-D with one even width and at least
            one row, holds NaN or infinity, or ``max_distance`` is negative (or asks for
            more rows than an array can hold).
        TypeError: if ``max_distance`` is not an int, ``rotary`` not a ``Rotary``, or
            ``queries`` or ``keys`` not a real array.
    """
    q = numpy_arrays.float_array("queries", queries)  # float64, finite
    k = numpy_arrays.float_array("keys", keys)
    if q.ndim != 2 or k.ndim != 2 or q.shape[1] != k.shape[1] or q.shape[1] % 2:
        raise ValueError(
            f"queries and keys must be (n, Dh) and (m, Dh) of one width, Dh even; got {q.shape} "
            f"and {k.shape}"
        )
    if not (q.shape[0] and k.shape[0]):
        raise ValueError(
            f"queries and keys must hold at least one row each; got {q.shape} and {k.shape}"
        )
    arguments.instance("rotary", rotary, Rotary, "a Rotary")
    max_distance = arguments.size("max_distance", max_distance, 0)
    arguments.check_elements("max_distance", (max_distance + 1) * q.shape[1], 8)
    d_head = q.shape[1]
    query = rotate(q.mean(axis=0)[None], rotary, offset=max_distance)  # (1, Dh) at position d
    key = rotate(np.tile(k.mean(axis=0), (max_distance + 1, 1)), rotary)  # (d + 1, Dh) at 0..d
    scores = key @ query[0] / np.sqrt(d_head)  # key at j: distance max_distance - j
    return scores[::-1].copy()  # index d: the key d positions back
