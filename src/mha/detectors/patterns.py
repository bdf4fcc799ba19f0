"""Head detectors: one score in ``[0, 1]`` per attention pattern, saying what a head does.

Each detector takes attention ``weights`` of shape ``(..., L, S)`` whose rows are
probability distributions over the S keys (one row per query) and returns one score per
leading index, shape ``(...)``: for the weights ``(B, H, L, S)`` of a batch, a ``(B, H)``
array of scores, one per sentence and head. A score of 1 means the head follows the
pattern exactly; the scores are plain averages of attention mass, so they read as
"the fraction of its attention the head puts where the pattern says".

Detectors (score, and the pattern that scores 1):

- :func:`previous_token_score`: mean over queries ``i >= 1`` of ``w[i, i-1]``; look one back.
- :func:`next_token_score`: mean over queries ``i <= L-2`` of ``w[i, i+1]``; look one ahead.
- :func:`self_score`: mean of the diagonal ``w[i, i]``; attend to oneself.
- :func:`first_token_score`: mean over queries of ``w[i, 0]``; a sink on key 0 ([CLS]).
- :func:`token_class_score`: mean over queries of the mass on a class of keys.
- :func:`broadness_score`: mean over queries of ``H(w[i]) / log(S_i)``; uniform rows.
- :func:`arc_score`: mean over arc queries of the mass on their arc targets.
- :func:`future_score`: mean over queries of the mass on later keys ``j > i``; 0 for a
  causal head, so it tells a causal pattern from a bidirectional one.
- :func:`induction_score`: mean over queries with a target of the mass on the key after an
  earlier copy of the query's token (:func:`induction_targets`); an induction head.
- :func:`duplicate_token_score`: mean over queries with a target of the mass on the other
  copies of the query's token (:func:`duplicate_targets`); a duplicate-token head.

:func:`mha.core.params.planted_heads` builds multi-head attention parameters whose heads follow
given patterns, to check that the detectors recover what was planted.

The positional detectors (previous, next, self) need self-attention, ``L == S``. Rows must
be non-negative and sum to 1 within
:data:`mha.numerics.tolerance.ATTENTION_ROW_SUM_ATOL`; scores are computed in float64 from
the rows divided by their sums, so the rounding of float32 softmax cannot push a score
outside ``[0, 1]``. Inputs may be NumPy arrays or anything ``numpy.asarray`` accepts (such
as a CPU ``torch.Tensor``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from mha.core._checks import arguments
from mha.core._checks.numpy_arrays import as_numpy, boolean_mask
from mha.detectors._scoring import as_tokens, check_weights, float_array, score

SCORE_NAMES = ("previous_token", "next_token", "self", "first_token", "broadness", "future")
"""The detectors that :func:`all_scores` always runs (on square weights)."""


def _check_square(w: np.ndarray, name: str, detector: str) -> None:
    if w.shape[-2] != w.shape[-1]:
        raise ValueError(
            f"{name} must be square (..., L, L) self-attention for {detector}; got shape {w.shape}"
        )


def _neighbour_score(weights: Any, offset: int, name: str) -> np.ndarray:
    """Mean weight on the key ``offset`` positions from each query that has one."""
    w = check_weights(weights)
    _check_square(w, "weights", name)
    if w.shape[-1] < 2:
        raise ValueError(f"weights must have L >= 2 for {name}; got shape {w.shape}")
    diag = np.diagonal(w, offset=offset, axis1=-2, axis2=-1)  # (..., L, L) -> (..., L-1)
    return score(diag.mean(axis=-1))  # (..., L-1) -> (...)


def previous_token_score(weights: Any) -> np.ndarray:
    """Mean weight a query puts on the token just before it.

    ``score = mean_{i=1..L-1} w[i, i-1]``; query 0 has no previous token and is left out.
    1 for a head that always looks one step back (a causal or bidirectional pattern alike).

    Args:
        weights: attention weights, rows summing to 1.

    Shape:
        weights ``(..., L, L)`` with ``L >= 2``. Returns ``(...)``.

    Returns:
        The scores in ``[0, 1]``, one per leading index.

    Raises:
        ValueError: if ``weights`` is not square, has ``L < 2``, or its rows are not
            distributions.
        TypeError: if ``weights`` is not a floating array.
    """
    return _neighbour_score(weights, -1, "previous_token_score")


def next_token_score(weights: Any) -> np.ndarray:
    """Mean weight a query puts on the token just after it (needs bidirectional attention).

    ``score = mean_{i=0..L-2} w[i, i+1]``; the last query has no next token and is left out.
    A causal head scores 0: it cannot see the next token.

    Args:
        weights: as :func:`previous_token_score`.

    Shape:
        weights ``(..., L, L)`` with ``L >= 2``. Returns ``(...)``.

    Returns:
        The scores in ``[0, 1]``, one per leading index.

    Raises:
        ValueError, TypeError: as :func:`previous_token_score`.
    """
    return _neighbour_score(weights, 1, "next_token_score")


def self_score(weights: Any) -> np.ndarray:
    """Mean weight a query puts on its own position: ``mean_i w[i, i]``.

    Args:
        weights: attention weights, rows summing to 1.

    Shape:
        weights ``(..., L, L)``. Returns ``(...)``.

    Returns:
        The scores in ``[0, 1]``, one per leading index.

    Raises:
        ValueError: if ``weights`` is not square or its rows are not distributions.
        TypeError: if ``weights`` is not a floating array.
    """
    w = check_weights(weights)
    _check_square(w, "weights", "self_score")
    return score(np.diagonal(w, axis1=-2, axis2=-1).mean(axis=-1))  # (..., L) -> (...)


def future_score(weights: Any) -> np.ndarray:
    """Mean weight a query puts on later positions: ``mean_i sum_{j > i} w[i, j]``.

    Exactly 0 for any causal head (the causal mask gives later keys weight 0). A head whose
    every query but the last looks only ahead scores the largest value, ``(L - 1) / L``
    (the last query has nothing ahead). Use it to say which kind of attention a pattern is.

    Args:
        weights: attention weights, rows summing to 1.

    Shape:
        weights ``(..., L, L)``. Returns ``(...)``.

    Returns:
        The scores in ``[0, (L - 1) / L]``, one per leading index.

    Raises:
        ValueError: if ``weights`` is not square or its rows are not distributions.
        TypeError: if ``weights`` is not a floating array.
    """
    w = check_weights(weights)
    _check_square(w, "weights", "future_score")
    later = np.triu(w, k=1).sum(axis=-1)  # (..., L, L) -> (..., L)
    return score(later.mean(axis=-1))  # (..., L) -> (...)


def first_token_score(weights: Any) -> np.ndarray:
    """Mean weight the queries put on key 0: the [CLS] token of BERT, an attention sink.

    ``score = mean_i w[i, 0]``. Heads that park their attention on a fixed first token
    when nothing else fits score near 1 (Clark et al. 2019; Xiao et al. 2023).

    Args:
        weights: attention weights, rows summing to 1.

    Shape:
        weights ``(..., L, S)``. Returns ``(...)``.

    Returns:
        The mean weight on key 0, in ``[0, 1]``, one per leading index.

    Raises:
        ValueError: if the rows of ``weights`` are not distributions.
        TypeError: if ``weights`` is not a floating array.
    """
    w = check_weights(weights)
    return score(w[..., :, 0].mean(axis=-1))  # (..., L) -> (...)


def _check_key_mask(key_in_class: Any, w: np.ndarray) -> np.ndarray:
    k = as_numpy("key_in_class", key_in_class)
    if k.dtype != np.bool_:
        raise TypeError(f"key_in_class must be a boolean array over the keys; got dtype {k.dtype}")
    S = w.shape[-1]
    if k.ndim < 1 or k.shape[-1] != S:
        raise ValueError(f"key_in_class must have shape (S,) = ({S},); got shape {k.shape}")
    try:
        np.broadcast_shapes(k.shape[:-1], w.shape[:-2])
    except ValueError:
        raise ValueError(
            f"key_in_class must have shape (S,) or broadcast to weights' leading shape "
            f"{w.shape[:-2]} + (S,); got shape {k.shape}"
        ) from None
    return k


def token_class_score(weights: Any, key_in_class: Any) -> np.ndarray:
    """Mean total weight the queries put on the keys of one class (e.g. punctuation, [SEP]).

    ``score = mean_i sum_{j in class} w[i, j]``. 1 for a head that attends only to
    the class; ``|class| / S`` for a uniform head.

    Args:
        weights: attention weights, rows summing to 1.
        key_in_class: boolean, True for the keys in the class.

    Shape:
        weights ``(..., L, S)``; key_in_class ``(S,)`` (or ``(..., S)``, broadcasting with
        the leading shape of ``weights``). Returns ``(...)``.

    Returns:
        The scores in ``[0, 1]``, one per leading index.

    Raises:
        ValueError: if ``key_in_class`` does not have S entries, or the rows of
            ``weights`` are not distributions.
        TypeError: if ``key_in_class`` is not boolean or ``weights`` not floating.
    """
    w = check_weights(weights)
    k = _check_key_mask(key_in_class, w)
    mass = (w * k[..., None, :]).sum(axis=-1)  # (..., L, S) -> (..., L)
    return score(mass.mean(axis=-1))  # (..., L) -> (...)


def broadness_score(weights: Any, mask: Any = None) -> np.ndarray:
    """Mean normalised entropy of the rows: 1 for uniform attention, 0 for one-hot.

    ``score = mean_i H(w[i]) / log(S_i)`` with ``H(p) = -sum_j p_j log p_j`` and ``S_i`` the
    number of keys query ``i`` may attend to: all S keys, or those allowed by ``mask``
    (pass the causal mask for a causal head, so that a causal uniform head scores 1).
    Rows with ``S_i < 2`` carry no choice and are left out of the mean.

    Args:
        weights: attention weights, rows summing to 1.
        mask: optional boolean keep-mask (True = may attend) broadcastable to ``(L, S)``
            or to ``weights``; weights must be 0 where it is False.

    Shape:
        weights ``(..., L, S)``. Returns ``(...)``.

    Returns:
        The scores in ``[0, 1]``, one per leading index.

    Raises:
        ValueError: if the mask does not broadcast, puts weight on masked keys, leaves
            no row with two keys, or the rows are not distributions.
        TypeError: if ``mask`` is not boolean or ``weights`` not floating.
    """
    w = check_weights(weights)
    if mask is None:
        allowed = np.full(w.shape[-2], float(w.shape[-1]))  # (L,)
    else:
        m = boolean_mask("mask", mask, w.shape, "weights")
        if (w[~m] > 0).any():
            raise ValueError("weights must be 0 where mask is False; got weight on masked keys")
        allowed = m.sum(axis=-1).astype(np.float64)  # (..., L)
    if not (allowed >= 2).any():
        raise ValueError(
            f"broadness_score needs rows with at least 2 allowed keys; got shape {w.shape}"
        )
    plogp = np.where(w > 0, w * np.log(np.where(w > 0, w, 1.0)), 0.0)  # (..., L, S)
    entropy = -plogp.sum(axis=-1)  # (..., L)
    valid = allowed >= 2  # (..., L) or (L,)
    norm = np.where(valid, entropy / np.log(np.where(valid, allowed, 2.0)), 0.0)  # (..., L)
    valid = np.broadcast_to(valid, norm.shape)
    return score(norm.sum(axis=-1) / valid.sum(axis=-1))  # (..., L) -> (...)


def _check_arcs(arcs: Any, L: int, S: int) -> np.ndarray:
    if isinstance(arcs, str | bytes):
        raise TypeError(f"arcs must be (query_index, key_index) pairs of ints; got {arcs!r}")
    a = as_numpy(
        "arcs", list(arcs) if isinstance(arcs, Iterable) and not hasattr(arcs, "shape") else arcs
    )
    if a.size == 0:
        raise ValueError("arcs must hold at least one (query_index, key_index) pair; got none")
    if a.ndim != 2 or a.shape[1] != 2:
        raise ValueError(
            f"arcs must be (query_index, key_index) pairs, shape (N, 2); got {a.shape}"
        )
    if not np.issubdtype(a.dtype, np.integer):
        raise TypeError(f"arcs must hold integer indices; got dtype {a.dtype}")
    q_bad = (a[:, 0] < 0) | (a[:, 0] >= L)
    k_bad = (a[:, 1] < 0) | (a[:, 1] >= S)
    if q_bad.any() or k_bad.any():
        first = tuple(int(x) for x in a[np.argmax(q_bad | k_bad)])
        raise ValueError(
            f"arcs must index queries in [0, L={L}) and keys in [0, S={S}); got arc {first}"
        )
    return a


def arc_score(weights: Any, arcs: Iterable[Sequence[int]]) -> np.ndarray:
    """Mean weight the queries with arcs put on their arc targets (e.g. dependency heads).

    ``arcs`` lists ``(query_index, key_index)`` pairs: for a syntactic head, from each
    dependent token to its head word (or the reverse direction). For each query that has
    at least one arc, take the total weight on its targets; the score is the mean over
    those queries. Queries without arcs do not count, and repeated arcs count once.

    Args:
        weights: attention weights, rows summing to 1.
        arcs: ``(query_index, key_index)`` integer pairs.

    Shape:
        weights ``(..., L, S)``; arcs ``(N, 2)``. Returns ``(...)``.

    Returns:
        The scores in ``[0, 1]``, one per leading index.

    Raises:
        ValueError: if ``arcs`` is empty, not pairs, or indexes outside ``[0, L)`` /
            ``[0, S)``; or the rows of ``weights`` are not distributions.
        TypeError: if ``arcs`` are not integers or ``weights`` not floating.
    """
    w = check_weights(weights)
    L, S = w.shape[-2:]
    a = _check_arcs(arcs, L, S)
    target = np.zeros((L, S), dtype=bool)
    target[a[:, 0], a[:, 1]] = True  # duplicates collapse
    queries = target.any(axis=-1)  # (L,)
    mass = (w * target).sum(axis=-1)  # (..., L, S) -> (..., L)
    return score(mass[..., queries].mean(axis=-1))  # (..., Q) -> (...)


def word_arcs_to_token_arcs(
    word_arcs: Iterable[Sequence[int]], word_ids: Sequence[int | None]
) -> list[tuple[int, int]]:
    """Expand arcs between words into arcs between the tokens (word pieces) of those words.

    A word split into several pieces (``"embeddings" -> "em", "##bed", "##ding", "##s"``)
    gives every piece of the dependent an arc to every piece of its head word, so that
    :func:`arc_score` counts the total weight a piece puts on the head word.

    Args:
        word_arcs: ``(dependent_word, head_word)`` pairs of word indices.
        word_ids: the word index of each token, ``None`` for special tokens such as [CLS]
            (the ``word_ids`` of a ``tokenizers.Encoding``).

    Returns:
        ``(query_token, key_token)`` pairs, sorted.

    Raises:
        ValueError: if a word index of an arc is not the index of any token's word, or a
            word index is negative.
        TypeError: if ``word_arcs`` is not a list of pairs of ints or ``word_ids`` not a
            list of ints and ``None`` (Python or NumPy integers, not bools).
    """
    word_arcs = arguments.pairs("word_arcs", word_arcs)
    word_ids = arguments.optional_ids("word_ids", word_ids)
    pieces: dict[int, list[int]] = {}
    for t, word in enumerate(word_ids):
        if word is not None:
            pieces.setdefault(int(word), []).append(t)
    arcs: set[tuple[int, int]] = set()
    for dep, head in word_arcs:
        for name, word in (("dependent", dep), ("head", head)):
            if word not in pieces:
                raise ValueError(
                    f"word_arcs must index words in word_ids (0..{max(pieces, default=-1)}); "
                    f"got {name} word {word} in arc ({dep}, {head})"
                )
        arcs.update((q, k) for q in pieces[dep] for k in pieces[head])
    return sorted(arcs)


def all_scores(
    weights: Any,
    *,
    key_in_class: Any = None,
    arcs: Iterable[Sequence[int]] | None = None,
    mask: Any = None,
) -> dict[str, np.ndarray]:
    """Every detector on the same weights, as a dict of name -> scores ``(...)``.

    Always ``previous_token``, ``next_token``, ``self``, ``first_token``, ``broadness`` and
    ``future``
    (``mask`` is passed to :func:`broadness_score`); ``token_class`` when ``key_in_class``
    is given and ``arc`` when ``arcs`` are given.

    Args:
        weights: attention weights, rows summing to 1 (square: self-attention).
        key_in_class: optional boolean class of keys for :func:`token_class_score`.
        arcs: optional ``(query_index, key_index)`` pairs for :func:`arc_score`.
        mask: optional keep-mask for :func:`broadness_score`.

    Shape:
        weights ``(..., L, L)``. Each value ``(...)``.

    Returns:
        ``{detector name: scores}``.

    Raises:
        The errors of the detectors it runs.
    """
    out = {
        "previous_token": previous_token_score(weights),
        "next_token": next_token_score(weights),
        "self": self_score(weights),
        "first_token": first_token_score(weights),
        "broadness": broadness_score(weights, mask),
        "future": future_score(weights),
    }
    if key_in_class is not None:
        out["token_class"] = token_class_score(weights, key_in_class)
    if arcs is not None:
        out["arc"] = arc_score(weights, arcs)
    return out


def induction_targets(tokens: Any) -> np.ndarray:
    """Where an induction head should attend: the key after each earlier copy of the query.

    ``targets[b, i, j + 1]`` is True when ``j < i`` and ``tokens[b, j] == tokens[b, i]``:
    query ``i`` should look at the token that followed the previous occurrence(s) of its
    own token. Queries whose token has not occurred before have no target. Targets are
    always at or before the query, so a causal head can reach them.

    Args:
        tokens: token ids (NumPy or torch).

    Shape:
        tokens ``(B, L)``. Returns ``(B, L, L)`` bool, indexed ``[b, query, key]``.

    Returns:
        The boolean targets, ``[b, query, key]``.

    Raises:
        ValueError: if ``tokens`` is not 2-D.
        TypeError: if ``tokens`` is not an integer array.
    """
    t = as_tokens(tokens)
    same = t[:, :, None] == t[:, None, :]  # (B, L, L): [b, i, j] = tokens[i] == tokens[j]
    earlier = np.tril(same, k=-1)  # keep j < i
    targets = np.zeros_like(earlier)
    targets[:, :, 1:] = earlier[:, :, :-1]  # key j -> key j + 1
    return targets


def induction_score(weights: Any, tokens: Any) -> np.ndarray:
    """Mean attention mass the queries put on their induction targets.

    Averages, over every (sequence, query) pair that has a target in
    :func:`induction_targets`, the total weight of that query's row on its targets. A
    perfect induction head scores 1; a previous-token head scores about 0 on repeated
    random tokens.

    Args:
        weights: attention weights, batch first, e.g. ``(B, H, L, L)`` for one layer.
        tokens: the token ids the weights were computed on.

    Shape:
        weights ``(B, ..., L, L)``, tokens ``(B, L)``. Returns ``(...)``, e.g. ``(H,)``.

    Returns:
        The scores in ``[0, 1]``, one per middle index (e.g. per head).

    Raises:
        ValueError: if the shapes do not match, the rows of ``weights`` are not
            distributions, or no query has a target (no token repeats).
        TypeError: if ``weights`` is not floating or ``tokens`` is not integer.
    """
    return _token_target_score(
        weights, tokens, induction_targets, "no query has an induction target"
    )


def uniform_attention(mask: Any) -> np.ndarray:
    """The weights of a head that attends uniformly to every key its mask allows.

    Row ``i`` is ``mask[i] / mask[i].sum()``: with the causal mask, query ``i`` spreads
    ``1 / (i + 1)`` over keys ``0..i``; with an all-True mask, ``1 / S`` over every key. It
    is the baseline a detector score should be compared with: a head that reads nothing
    in particular already scores this much (see :func:`uniform_baseline`).

    Args:
        mask: boolean keep-mask (True = may attend), every row with at least one key.

    Returns:
        The uniform head's weights.

    Shape:
        mask ``(..., L, S)``. Returns ``(..., L, S)`` float64, rows summing to 1.

    Raises:
        ValueError: if ``mask`` has fewer than 2 dimensions or a row with no key.
        TypeError: if ``mask`` is not boolean.
    """
    m = as_numpy("mask", mask)
    if m.dtype != np.bool_:
        raise TypeError(f"mask must be boolean (True = may attend); got dtype {m.dtype}")
    if m.ndim < 2:
        raise ValueError(f"mask must have shape (..., L, S); got {m.ndim}-D shape {m.shape}")
    allowed = m.sum(axis=-1, keepdims=True)  # (..., L, 1)
    if (allowed == 0).any():
        raise ValueError(
            f"mask must allow at least one key in every row; got {int((allowed == 0).sum())} "
            "fully masked row(s)"
        )
    return m / allowed  # (..., L, S)


def uniform_baseline(
    mask: Any,
    *,
    key_in_class: Any = None,
    arcs: Iterable[Sequence[int]] | None = None,
) -> dict[str, np.ndarray]:
    """:func:`all_scores` of the uniform head under ``mask``: what attending to nothing scores.

    A causal uniform head is not ``1 / L`` on every detector: its early queries have few
    keys, so at ``L = 7`` it scores ``(1/2 + ... + 1/7) / 6 = 0.27`` on the previous token,
    ``(1 + 1/2 + ... + 1/7) / 7 = 0.37`` on itself and on the first token, 0 on the next
    token and 1 on broadness (against its mask). Report a head's excess over these numbers,
    not its raw score.

    Args:
        mask: boolean keep-mask of the head being compared (causal, padding, all-True).
        key_in_class: as in :func:`all_scores`.
        arcs: as in :func:`all_scores`.

    Returns:
        :func:`all_scores`'s dictionary for the uniform head.

    Shape:
        mask ``(..., L, L)``. Each value ``(...)``.

    Raises:
        The errors of :func:`uniform_attention` and of the detectors.
    """
    return all_scores(uniform_attention(mask), key_in_class=key_in_class, arcs=arcs, mask=mask)


def offset_attention(q_len: int, offset: int) -> np.ndarray:
    """The ideal fixed-offset head: query ``i`` puts all its weight on key ``i + offset``.

    Queries whose key ``i + offset`` falls outside ``[0, L)`` attend to themselves (as the
    first query of a previous-token head does). ``offset = -1`` is the previous-token
    pattern, ``+1`` the next-token pattern: the positional baselines for :func:`arc_score`
    and :func:`head_accuracy`.

    Args:
        q_len: L (the weights are ``(L, L)``).
        offset: where each query looks, relative to itself.

    Returns:
        The weights of the ideal head.

    Shape:
        Returns ``(L, L)`` float64 one-hot rows.

    Raises:
        ValueError: if ``q_len`` is not positive or the weights would pass what an array
            can hold.
        TypeError: if ``q_len`` or ``offset`` is not an int (a Python or NumPy integer, not
            a bool).
    """
    q_len = arguments.size("q_len", q_len)
    offset = arguments.integer("offset", offset)
    offset = max(-q_len, min(q_len, offset))  # any farther offset leaves every query alone
    arguments.check_elements("q_len", q_len * q_len, 8)
    i = np.arange(q_len)
    target = np.where((i + offset >= 0) & (i + offset < q_len), i + offset, i)
    w = np.zeros((q_len, q_len))
    w[i, target] = 1.0
    return w


def word_attention(weights: Any, word_ids: Sequence[int | None]) -> np.ndarray:
    """Token-to-token weights turned into word-to-word weights, as Clark et al. (2019) do.

    Attention *to* a word is the sum of the weights on its pieces; attention *from* a word
    is the mean over its pieces. Tokens of no word (``None``: [CLS], [SEP]) are dropped, so
    a row sums to one minus the weight its word's pieces put on those tokens.

    Args:
        weights: token attention weights, rows summing to 1.
        word_ids: the word index of each token, ``None`` for special tokens (as in
            :func:`word_arcs_to_token_arcs`); word indices must be ``0..W-1``.

    Returns:
        The word-to-word weights.

    Shape:
        weights ``(..., L, L)``; word_ids ``(L,)``. Returns ``(..., W, W)``.

    Raises:
        ValueError: if ``word_ids`` does not have L entries or its words are not
            ``0..W-1``, or the rows of ``weights`` are not distributions.
        TypeError: if ``weights`` is not floating, or ``word_ids`` not a list of ints and
            ``None`` (Python or NumPy integers, not bools).
    """
    w = check_weights(weights)
    _check_square(w, "weights", "word_attention")
    word_ids = arguments.optional_ids("word_ids", word_ids)
    L = w.shape[-1]
    if len(word_ids) != L:
        raise ValueError(f"word_ids must give one entry per token (L={L}); got {len(word_ids)}")
    words = sorted({int(i) for i in word_ids if i is not None})
    if words != list(range(len(words))) or not words:
        raise ValueError(f"word_ids must number the words 0..W-1; got words {words}")
    member = np.zeros((L, len(words)))  # (L, W): token t is a piece of word member[t]
    for t, word in enumerate(word_ids):
        if word is not None:
            member[t, int(word)] = 1.0
    to_words = w @ member  # (..., L, W): summed over the pieces of each key word
    return np.swapaxes(member / member.sum(axis=0), 0, 1) @ to_words  # (..., W, W)


def head_accuracy(
    word_weights: Any, heads: Sequence[int | None], *, direction: str = "dependent"
) -> np.ndarray:
    """How often the most-attended word is the syntactic head: Clark et al.'s (2019) score.

    With ``direction="dependent"`` the prediction for word ``i`` is the other word it
    attends to most, ``argmax_{j != i} A[i, j]``; with ``"head"`` it is the other word that
    attends most to it, ``argmax_{j != i} A[j, i]``. The score is the fraction of the
    words with a head (``heads[i]`` not ``None``) whose prediction is their head.
    Special tokens are left out by passing word-level weights (:func:`word_attention`).

    Args:
        word_weights: word-to-word attention.
        heads: the head word of each word, ``None`` where no head is scored (the root).
        direction: ``"dependent"`` or ``"head"``.

    Returns:
        The fraction of words with a head whose prediction is that head.

    Shape:
        word_weights ``(..., W, W)``; heads ``(W,)``. Returns ``(...)``.

    Raises:
        ValueError: if ``heads`` has the wrong length, no word has a head, a head is not
            a word index other than the word itself, ``direction`` is unknown, or the
            weights are not a non-negative, finite square array.
        TypeError: if ``word_weights`` is not numeric, or ``heads`` not a list of ints and
            ``None`` (Python or NumPy integers, not bools).
    """
    a = float_array("word_weights", word_weights)
    heads = arguments.optional_ids("heads", heads)
    if a.ndim < 2 or a.shape[-1] != a.shape[-2] or (a < 0).any():
        raise ValueError(
            f"word_weights must be a non-negative (..., W, W) array; got shape {a.shape}"
        )
    if not isinstance(direction, str) or direction not in ("dependent", "head"):
        raise ValueError(f"direction must be 'dependent' or 'head'; got {direction!r}")
    W = a.shape[-1]
    if len(heads) != W:
        raise ValueError(f"heads must give one entry per word (W={W}); got {len(heads)}")
    given = {i: int(h) for i, h in enumerate(heads) if h is not None}  # word -> its head
    scored = list(given)
    if not scored:
        raise ValueError("heads must give at least one word a head; got none")
    bad = [(i, h) for i, h in given.items() if not 0 <= h < W or h == i]
    if bad:
        raise ValueError(f"heads must be indices of other words in [0, {W}); got {bad[0]}")
    if direction == "head":
        a = np.swapaxes(a, -1, -2)
    a = np.where(np.eye(W, dtype=bool), -np.inf, a)  # a word never predicts itself
    predicted = a.argmax(axis=-1)  # (..., W)
    gold = np.array(list(given.values()))
    return (predicted[..., scored] == gold).mean(axis=-1)  # (...)


def offset_accuracy(heads: Sequence[int | None], offset: int) -> float:
    """The accuracy of always predicting the word at ``i + offset`` as word ``i``'s head.

    The fixed-offset baseline of :func:`head_accuracy` (Clark et al. 2019).

    Args:
        heads: for each word, the index of its head word, or ``None``.
        offset: the fixed offset predicted for every word.

    Returns:
        The fraction of words with a head at ``i + offset``.

    Raises:
        ValueError: if no word has a head, or a head is negative.
        TypeError: if ``offset`` is not an int, or ``heads`` not a list of ints and
            ``None`` (Python or NumPy integers, not bools).
    """
    heads = arguments.optional_ids("heads", heads)
    offset = arguments.integer("offset", offset)
    scored = [(i, h) for i, h in enumerate(heads) if h is not None]
    if not scored:
        raise ValueError("heads must give at least one word a head; got none")
    return float(np.mean([i + offset == h for i, h in scored]))


def duplicate_targets(tokens: Any) -> np.ndarray:
    """Where a duplicate-token head should attend: every other position holding the query's token.

    ``targets[b, i, j]`` is True when ``j != i`` and ``tokens[b, j] == tokens[b, i]``, in
    both directions (an encoder's query may look at a later copy as well as an earlier
    one). Queries whose token occurs once have no target. Beside :func:`induction_targets`,
    which marks the key *after* an earlier copy, this marks the copy itself.

    Args:
        tokens: as :func:`induction_targets`.

    Shape:
        tokens ``(B, L)``. Returns ``(B, L, L)`` bool, indexed ``[b, query, key]``.

    Returns:
        The boolean targets, ``[b, query, key]``.

    Raises:
        ValueError, TypeError: as :func:`induction_targets`.
    """
    t = as_tokens(tokens)
    same = t[:, :, None] == t[:, None, :]  # (B, L, L): [b, i, j] = tokens[i] == tokens[j]
    return same & ~np.eye(t.shape[1], dtype=bool)


def duplicate_token_score(weights: Any, tokens: Any) -> np.ndarray:
    """Mean attention mass the queries put on the other copies of their own token.

    Averages, over every (sequence, query) pair that has a target in
    :func:`duplicate_targets`, the total weight of that query's row on its targets. On a
    random segment repeated once, a head that looks from each token to its other copy
    scores 1, an induction head about 0.

    Args:
        weights: as :func:`induction_score`.
        tokens: as :func:`induction_score`.

    Shape:
        weights ``(B, ..., L, L)``, tokens ``(B, L)``. Returns ``(...)``, e.g. ``(H,)``.

    Returns:
        The mean weight on the other copies, in ``[0, 1]``, one per middle index (e.g. per
        head).

    Raises:
        ValueError: if the shapes do not match, the rows of ``weights`` are not
            distributions, or no token occurs twice.
        TypeError: if ``weights`` is not floating or ``tokens`` is not integer.
    """
    return _token_target_score(weights, tokens, duplicate_targets, "no query has a duplicate")


def _token_target_score(
    weights: Any, tokens: Any, targets_of: Callable[[np.ndarray], np.ndarray], none: str
) -> np.ndarray:
    """Mean weight on the targets ``targets_of(tokens)`` over the queries that have one.

    ``none`` ends the error raised when no query has a target.
    """
    t = as_tokens(tokens)
    w = check_weights(weights)
    B, L = t.shape
    if w.ndim < 3 or w.shape[0] != B or w.shape[-2:] != (L, L):
        raise ValueError(
            f"weights must have shape (B, ..., L, L) = ({B}, ..., {L}, {L}) to match tokens; "
            f"got {w.shape}"
        )
    targets = targets_of(t)  # (B, L, L)
    has = targets.any(axis=-1)  # (B, L)
    if not has.any():
        raise ValueError(f"tokens must contain a repeated token; {none}")
    extra = (1,) * (w.ndim - 3)
    mass = (w * targets.reshape(B, *extra, L, L)).sum(axis=-1)  # (B, ..., L)
    mass = np.moveaxis(mass, 0, -2)  # (..., B, L)
    return score(mass[..., has].mean(axis=-1))  # (...)
