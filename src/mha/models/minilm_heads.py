"""What MiniLM's heads do: detector scores against baselines, on sentences and random tokens.

:func:`sentence_scores` scores every head of :func:`mha.models.minilm.load_minilm` on parsed
sentences (the syntax arcs of :data:`SYNTAX_SCORES` and the pattern detectors of
:mod:`mha.detectors.patterns`); :func:`offset_baselines` and :func:`held_out_comparison` are
what a fixed-offset guess scores and whether a head beats it on held-out sentences;
:func:`pair_attention_weights` reads the weights between two words; and
:func:`repeated_random_ids` with :func:`repeated_token_scores` look for induction and
duplicate-token heads on repeated random tokens.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from mha.core._checks import arguments, numpy_arrays
from mha.detectors import patterns
from mha.models.minilm import MiniLM


def sentence_scores(
    weights: Any,
    tokens: list[str],
    word_ids: list[int | None],
    word_heads: list[int | None],
) -> dict[str, np.ndarray]:
    """Every detector of :mod:`mha.detectors` on one sentence of a BERT-style encoder.

    Positional scores, the weight on ``[CLS]`` (the first token), on ``[SEP]`` and on the
    full stop, broadness and future mass; the attention mass along the dependency arcs in
    both directions (``dep_to_head``: from each piece of a dependent to the pieces of its
    head word; ``head_to_dep``: the reverse), and Clark et al.'s (2019) accuracies in both
    directions (``dep_to_head_accuracy``: how often the word a dependent attends to most,
    leaving out itself, [CLS] and [SEP], is its head word; ``head_to_dep_accuracy``: how
    often the word attending most to it is), on word-level weights
    (:func:`mha.detectors.patterns.word_attention`).

    Args:
        weights: the attention weights of every head on the sentence.
        tokens: its tokens, ``[CLS]`` first.
        word_ids: the word index of each token, ``None`` for special tokens.
        word_heads: for each word, the index of its head word, ``None`` for a word
            without one (the root, the final full stop).

    Returns:
        Score name -> one value per head (and layer) of ``weights``.

    Shape:
        weights ``(..., L, L)`` with L = len(tokens). Each value ``(...)``.

    Raises:
        ValueError: if the lengths disagree, no word has a head, or as the detectors (rows
            that are not distributions, NaN, word indices out of range).
        TypeError: if ``tokens`` is not a list of strings, ``word_ids`` or ``word_heads``
            not a list of ints and ``None``, or ``weights`` not a floating array.
    """
    w = patterns.check_weights(weights)
    tokens = arguments.items("tokens", tokens)
    for i, token in enumerate(tokens):
        arguments.text(f"tokens[{i}]", token)
    word_ids = arguments.optional_ids("word_ids", word_ids)
    word_heads = arguments.optional_ids("word_heads", word_heads)
    L = w.shape[-1]
    if len(tokens) != L or len(word_ids) != L:
        raise ValueError(
            f"tokens and word_ids must have one entry per position (L={L}); got "
            f"{len(tokens)} and {len(word_ids)}"
        )
    arcs = [(d, h) for d, h in enumerate(word_heads) if h is not None]
    if not arcs:
        raise ValueError("word_heads must give at least one word a head; got none")
    s = patterns.all_scores(w, arcs=patterns.word_arcs_to_token_arcs(arcs, word_ids))
    s["dep_to_head"] = s.pop("arc")
    s["head_to_dep"] = patterns.arc_score(
        w, patterns.word_arcs_to_token_arcs([(h, d) for d, h in arcs], word_ids)
    )
    s["cls"] = s.pop("first_token")
    s["sep"] = patterns.token_class_score(w, np.array(tokens) == "[SEP]")
    s["full_stop"] = patterns.token_class_score(w, np.array(tokens) == ".")
    words = patterns.word_attention(w, word_ids)  # (..., W, W)
    for name, direction in (("dep_to_head", "dependent"), ("head_to_dep", "head")):
        s[f"{name}_accuracy"] = patterns.head_accuracy(words, word_heads, direction=direction)
    return s


SYNTAX_SCORES = ("dep_to_head", "head_to_dep", "dep_to_head_accuracy", "head_to_dep_accuracy")
"""The syntactic scores of :func:`sentence_scores` that :func:`offset_baselines` gives."""


def offset_baselines(
    word_ids: list[int | None],
    word_heads: list[int | None],
    offsets: tuple[int, ...] = (-2, -1, 1, 2),
) -> dict[str, np.ndarray]:
    """The syntactic scores of ideal fixed-offset heads on one sentence: the positional baselines.

    Many dependency arcs join neighbouring words, so a head that only looks ``k`` tokens
    away already scores on them. For each offset ``k``: the attention mass along the arcs
    (``dep_to_head``, ``head_to_dep``) of the token-level pattern
    :func:`mha.detectors.patterns.offset_attention` ``(L, k)``, computed with the detector
    :func:`sentence_scores` uses; and Clark et al.'s (2019) accuracy of always predicting
    the word at the fixed offset (``dep_to_head_accuracy``: word ``i``'s head predicted at
    ``i + k``; ``head_to_dep_accuracy``: the word attending to ``i`` is ``i - k``).

    Args:
        word_ids: the word index of each token, ``None`` for special tokens.
        word_heads: for each word, the index of its head word, or ``None``.
        offsets: the offsets ``k`` to score.

    Shape:
        Each value ``(len(offsets),)``.

    Returns:
        Score name (:data:`SYNTAX_SCORES`) -> one score per offset.

    Raises:
        ValueError: if no word has a head, or as the detectors.
        TypeError: if ``word_ids`` or ``word_heads`` is not a list of ints and ``None``, or
            ``offsets`` not a list of ints (Python or NumPy integers, not bools).
    """
    word_ids = arguments.optional_ids("word_ids", word_ids)
    word_heads = arguments.optional_ids("word_heads", word_heads)
    offsets = tuple(
        arguments.integer(f"offsets[{i}]", k)
        for i, k in enumerate(arguments.items("offsets", offsets))
    )
    L = len(word_ids)
    arcs = [(d, h) for d, h in enumerate(word_heads) if h is not None]
    if not arcs:
        raise ValueError("word_heads must give at least one word a head; got none")
    token_arcs = {
        "dep_to_head": patterns.word_arcs_to_token_arcs(arcs, word_ids),
        "head_to_dep": patterns.word_arcs_to_token_arcs([(h, d) for d, h in arcs], word_ids),
    }
    out = {
        name: np.array(
            [float(patterns.arc_score(patterns.offset_attention(L, k), a)) for k in offsets]
        )
        for name, a in token_arcs.items()
    }
    out["dep_to_head_accuracy"] = np.array(
        [patterns.offset_accuracy(word_heads, k) for k in offsets]
    )
    out["head_to_dep_accuracy"] = np.array(
        [patterns.offset_accuracy(word_heads, -k) for k in offsets]
    )
    return out


def held_out_comparison(head_scores: Any, offset_scores: Any, pick: Any) -> dict[str, Any]:
    """Choose the best head and the best offset on some sentences; score both on the others.

    The best of many heads, chosen on few sentences, beats a baseline partly because it
    was chosen. Choosing on the sentences ``pick`` and scoring on the rest removes that
    advantage: the comparison is fair on the held-out sentences.

    Args:
        head_scores: one score per sentence and head, e.g. ``(N, layers, H)``.
        offset_scores: one score per sentence and offset, ``(N, K)``.
        pick: boolean, True for the sentences to choose on.

    Shape:
        head_scores ``(N, ...)``; offset_scores ``(N, K)``; pick ``(N,)``.

    Returns:
        ``"head"``: the index of the chosen head in ``head_scores[0]`` (a tuple);
        ``"offset"``: the index of the chosen offset; ``"head_score"`` and
        ``"offset_score"``: their mean scores on the held-out sentences.

    Raises:
        ValueError: if the shapes disagree, a score is NaN or infinite, or ``pick``
            chooses no sentence or all.
        TypeError: if the scores are not numeric or ``pick`` is not boolean.
    """
    s = numpy_arrays.float_array("head_scores", head_scores)
    b = numpy_arrays.float_array("offset_scores", offset_scores)
    chosen = numpy_arrays.bool_array("pick", pick)
    N = s.shape[0] if s.ndim else 0
    if s.ndim < 2 or b.ndim != 2 or b.shape[0] != N or chosen.shape != (N,):
        raise ValueError(
            f"head_scores (N, ...), offset_scores (N, K) and pick (N,) must share N; got "
            f"{s.shape}, {b.shape} and {chosen.shape}"
        )
    if not 0 < chosen.sum() < N:
        raise ValueError(
            f"pick must be boolean and choose some sentences but not all; got {chosen.tolist()}"
        )
    head = tuple(int(i) for i in np.unravel_index(s[chosen].mean(0).argmax(), s.shape[1:]))
    offset = int(b[chosen].mean(0).argmax())
    return {
        "head": head,
        "offset": offset,
        "head_score": float(s[~chosen][(slice(None), *head)].mean()),
        "offset_score": float(b[~chosen, offset].mean()),
    }


def pair_attention_weights(model: MiniLM, first: str, second: str) -> tuple[list[str], np.ndarray]:
    """Attention weights on a pair of texts in BERT's input format ``[CLS] A [SEP] B [SEP]``.

    The format BERT was pretrained on and Clark et al. (2019) analysed (two consecutive
    paragraphs); the second text and its ``[SEP]`` get token type 1.

    Args:
        model: the model.
        first: text A.
        second: text B.

    Shape:
        Returns L tokens and weights ``(num_layers, H, L, L)``.

    Returns:
        The tokens and a float64 array of every layer's weights.

    Raises:
        TypeError: if a text is not a string or ``model`` not a :class:`MiniLM`.
        ValueError: if the pair is longer than the model's positions.
    """
    arguments.instance("model", model, MiniLM, "a MiniLM")
    if not isinstance(first, str) or not isinstance(second, str):
        raise TypeError(
            f"first and second must be str; got {type(first).__name__} and {type(second).__name__}"
        )
    enc = model.tokenizer.encode(first, second)
    if len(enc.ids) > model.max_positions:
        raise ValueError(
            f"the pair has {len(enc.ids)} tokens with [CLS] and two [SEP]; the model has "
            f"{model.max_positions} positions"
        )
    ids = torch.tensor([enc.ids], dtype=torch.int64)  # (1, L)
    types = torch.tensor([enc.type_ids], dtype=torch.int64)  # (1, L)
    with torch.no_grad():
        out = model.forward(ids, None, types)
    weights = torch.stack([a[0] for a in out.attentions])  # (num_layers, H, L, L)
    return list(enc.tokens), weights.double().numpy()


def repeated_random_ids(
    model: MiniLM, num_sequences: int, length: int, seed: int = 0
) -> torch.Tensor:
    """``[CLS] r [SEP]`` with ``r`` a segment of random words repeated once, per sequence.

    The words of a segment are distinct whole-word tokens of the vocabulary (no ``##``
    pieces, no special or unused tokens), drawn with a seeded generator, so the only
    repeats are the second copy: on these inputs a head that looks from the second copy
    of a word to the word after its first copy is an induction head
    (:func:`mha.detectors.patterns.induction_score`), one that looks at the other copy a
    duplicate-token head (:func:`mha.detectors.patterns.duplicate_token_score`).

    Args:
        model: the model (for its vocabulary).
        num_sequences: the batch size, B.
        length: the segment's length in tokens.
        seed: seed of the draws.

    Shape:
        Returns ``(B, 2 * length + 2)`` int64.

    Returns:
        The token ids.

    Raises:
        ValueError: if a size is not positive, the input would not fit the model, or
            ``seed`` is negative.
        TypeError: if a size or ``seed`` is not an int (a Python or NumPy integer, not a
            bool), or ``model`` is not a :class:`MiniLM`.
    """
    arguments.instance("model", model, MiniLM, "a MiniLM")
    num_sequences, length = arguments.sizes(num_sequences=num_sequences, length=length).values()
    seed = arguments.seed("seed", seed)
    if 2 * length + 2 > model.max_positions:
        raise ValueError(
            f"length must satisfy 2 * length + 2 <= {model.max_positions}; got length={length}"
        )
    vocab = model.tokenizer.get_vocab()  # token -> id
    words = np.array(sorted(i for t, i in vocab.items() if t.isalpha() and t.isascii()))
    rng = np.random.default_rng(seed)
    segments = np.stack(
        [rng.choice(words, size=length, replace=False) for _ in range(num_sequences)]
    )
    cls, sep = vocab["[CLS]"], vocab["[SEP]"]
    B = num_sequences
    ids = np.concatenate(
        [np.full((B, 1), cls), segments, segments, np.full((B, 1), sep)], axis=1
    )  # (B, 2 * length + 2)
    return torch.from_numpy(ids.astype(np.int64))


def repeated_token_scores(
    model: MiniLM, num_sequences: int = 8, length: int = 20, seed: int = 0
) -> dict[str, np.ndarray]:
    """Every head's induction and duplicate-token score on random words repeated once.

    The test of Olsson et al. (2022) for induction heads, on :func:`repeated_random_ids`,
    beside the same scores of a uniform head over all ``L`` tokens (this encoder has no
    mask).

    Args:
        model: the model.
        num_sequences: the batch size, B.
        length: the segment's length in tokens.
        seed: seed of the draws.

    Shape:
        ``"induction"`` and ``"duplicate"`` ``(num_layers, H)``; the baselines are scalars.

    Returns:
        ``"induction"``, ``"duplicate"``, ``"uniform_induction"``, ``"uniform_duplicate"``.

    Raises:
        ValueError, TypeError: as :func:`repeated_random_ids`.
    """
    ids = repeated_random_ids(model, num_sequences, length, seed)
    with torch.no_grad():
        out = model.forward(ids)
    w = torch.stack(out.attentions, dim=1).double().numpy()  # (B, num_layers, H, L, L)
    L = ids.shape[1]
    uniform = np.broadcast_to(
        patterns.uniform_attention(np.ones((L, L), dtype=bool)), (num_sequences, L, L)
    )
    return {
        "induction": patterns.induction_score(w, ids),
        "duplicate": patterns.duplicate_token_score(w, ids),
        "uniform_induction": patterns.induction_score(uniform, ids),
        "uniform_duplicate": patterns.duplicate_token_score(uniform, ids),
    }
