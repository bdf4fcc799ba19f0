"""Small, fully specified examples that the book works through.

- :func:`agreement_example`: one sentence whose tokens carry hand-made features, and the
  queries with which its verb looks for its subject, its neighbour, or both at once.
- :func:`worked_example`: a layer of three tokens, two heads of width two and integer
  weights, small enough to check every number by hand.
- :func:`fit_two_targets`: one sentence on which every query is asked to attend to two
  places at once (the previous token and the first token), fitted with one head or with
  several; :func:`two_target_shares` reads off the weight each target gets.
- :func:`two_output_task` and :func:`fit_two_outputs`: the same two places asked for at
  the level of the output, where they must land in different coordinates: a layer is
  fitted to return ``[x_{i-1} P, x_0 Q]`` for every query ``i``, with one head or two.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from mha.backends import np_backend
from mha.backends.module import MultiHeadAttention
from mha.core._checks import arguments
from mha.core._checks.numpy_arrays import as_numpy
from mha.core._tools import one_thread
from mha.core.params import MHAParams, init_params


@dataclass(frozen=True)
class AgreementExample:
    """The sentence of :func:`agreement_example`.

    Attributes:
        tokens: the words, one token each.
        features: the name of each feature (column of ``x``).
        x: one row of features per token, ``(L, D)``: 1 where the token has the feature.
            These are the keys: what a token offers, and where it sits.
        value_features: the name of each column of ``values``.
        values: what each token hands over, ``(L, 2)``: its grammatical number, 1 under
            ``plural`` or ``singular`` for a noun, 0 and 0 for any other word.
        queries: what the verb looks for, ``(D,)`` each: ``"subject"`` (a plural noun),
            ``"neighbour"`` (the token just before it) and ``"both"`` (their sum).
        verb: the verb's position.
    """

    tokens: list[str]
    features: list[str]
    x: np.ndarray
    value_features: list[str]
    values: np.ndarray
    queries: dict[str, np.ndarray]
    verb: int


def agreement_example(sharpness: float = 16.0) -> AgreementExample:
    """*The keys to the cabinet are on the table*, with features made by hand.

    Each token has the features ``noun``, ``plural`` and ``verb`` (1 or 0) and a one-hot
    ``position j``. The verb *are* needs two tokens: its subject *keys*, a plural noun, to
    agree with it, and its neighbour *cabinet*, at the position before it. Its queries say
    what it looks for, as features: a plural noun, the position before its own, or both.
    The features ``x`` are the keys, so each query scores every token. The values differ
    from the keys: a token hands over only its number, plural or singular (``values``).

    Args:
        sharpness: the length given to each part of a query; the larger, the more of the
            weight goes to the keys that match best.

    Returns:
        The tokens, the feature names, the features (keys), the values, the verb's queries.

    Shape:
        x ``(L, D)`` with ``L = 9`` tokens and ``D = 3 + L`` features; values ``(L, 2)``;
        each query ``(D,)``.

    Raises:
        TypeError: if ``sharpness`` is not a real number.
        ValueError: if ``sharpness`` is not positive and finite.
    """
    arguments.check_positive_number("sharpness", sharpness)
    tokens = ["The", "keys", "to", "the", "cabinet", "are", "on", "the", "table"]
    L = len(tokens)
    features = ["noun", "plural", "verb"] + [f"position {j}" for j in range(L)]
    x = np.zeros((L, len(features)))  # (L, D)
    x[[1, 4, 8], 0] = 1.0  # nouns: keys, cabinet, table
    x[1, 1] = 1.0  # plural: keys
    verb = 5  # are
    x[verb, 2] = 1.0
    x[:, 3:] = np.eye(L)  # token j is at position j
    values = np.zeros((L, 2))  # (L, 2): plural, singular
    values[1, 0] = 1.0  # keys
    values[[4, 8], 1] = 1.0  # cabinet, table
    subject = np.zeros(len(features))  # (D,)
    subject[[0, 1]] = sharpness  # a noun, plural
    neighbour = np.zeros(len(features))  # (D,)
    neighbour[3 + verb - 1] = sharpness  # at the position before the verb's
    queries = {"subject": subject, "neighbour": neighbour, "both": subject + neighbour}
    return AgreementExample(tokens, features, x, ["plural", "singular"], values, queries, verb)


def worked_example() -> tuple[np.ndarray, MHAParams]:
    """Three tokens, ``D = 4``, two heads of width ``Dh = 2``, integer weights, no biases.

    Head 1 compares the first two features of a query with the first two of each key;
    head 2 compares feature 3 of a query with feature 4 of a key and feature 4 with 3.
    Each head's values are its own two features, and ``W^O`` writes the sum of the two
    heads into the first two output features and their difference into the last two.

    Returns:
        ``(x, params)``: the input and the layer's parameters (float64).

    Shape:
        x ``(1, 3, 4)``: ``(B, L, D)``.
    """
    x = np.array([[[1, 0, 0, 1], [0, 1, 1, 0], [1, 1, 0, 0]]], dtype=np.float64)
    eye = np.eye(4)
    w_q, w_v = eye, eye  # head h reads features 2h - 1, 2h
    w_k = eye[:, [0, 1, 3, 2]]  # head 2's key swaps features 3 and 4
    head_1_out = np.array([[1, 0, 1, 0], [0, 1, 0, 1]])  # W^O_1: head 1 into both halves
    head_2_out = np.array([[1, 0, -1, 0], [0, 1, 0, -1]])  # W^O_2: + first half, - second
    w_o = np.vstack([head_1_out, head_2_out]).astype(np.float64)  # (D, D)
    return x, MHAParams.from_qkv(w_q, w_k, w_v, w_o, num_heads=2)


@dataclass(frozen=True)
class TwoTargetFit:
    """The result of :func:`fit_two_targets`.

    Attributes:
        weights: the fitted layer's attention weights on its sentence, ``(H, L, L)``.
        num_params: the number of parameters of the layer (``4 D^2 + 4 D``, for every H).
    """

    weights: np.ndarray
    num_params: int


def two_target_shares(weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The weight on the previous token (head 1) and on token 0 (head H), per query.

    Queries 0 and 1 are left out: query 0 has no previous token, and for query 1 the
    previous token is token 0.

    Args:
        weights: one sequence's attention weights, one map per head.

    Returns:
        ``(on_previous, on_first)``: head 1's weight on token ``i - 1`` and head H's on
        token 0, for queries ``2 .. L - 1``.

    Shape:
        weights ``(H, L, L)``. Returns two arrays ``(L - 2,)``.

    Raises:
        ValueError: if ``weights`` is not ``(H, L, L)`` with ``H >= 1`` or holds NaN or
            infinity.
        TypeError: if ``weights`` is not a floating array.
    """
    weights = as_numpy("weights", weights)
    if not np.issubdtype(weights.dtype, np.floating):
        raise TypeError(f"weights must be a floating array; got dtype {weights.dtype}")
    if weights.ndim != 3 or weights.shape[0] < 1 or weights.shape[1] != weights.shape[2]:
        raise ValueError(f"weights must have shape (H, L, L) with H >= 1; got {weights.shape}")
    if not np.isfinite(weights).all():
        raise ValueError("weights must be finite; got NaN or infinite values")
    queries = np.arange(2, weights.shape[-1])
    return weights[0, queries, queries - 1], weights[-1, queries, 0]


def fit_two_targets(
    num_heads: int, seed: int, *, q_len: int = 8, d_model: int = 16, steps: int = 100
) -> TwoTargetFit:
    """Fit one layer so that every query attends to both the previous token and token 0.

    The sentence is ``q_len`` random vectors of width ``d_model`` (seeded by ``[seed, 1]``,
    no positional encoding); the layer is :class:`mha.MultiHeadAttention` in float64
    (seeded by ``seed``). The loss is ``-log min(previous-token share, first-token share)``
    averaged over the queries of :func:`two_target_shares`: with one head both targets come
    from the same distribution, with several the first head serves the previous token and
    the last head token 0. Adam, learning rate 0.1 with a cosine decay to 0 over ``steps``,
    on one CPU thread.

    Args:
        num_heads: H (must divide ``d_model``).
        seed: seeds the sentence and the initial layer.
        q_len: L, the sentence length (at least 3).
        d_model: the model width, D.
        steps: optimiser steps.

    Returns:
        The fitted layer's weights and parameter count.

    Raises:
        ValueError: if a size is not positive, H does not divide D, ``q_len < 3``, or
            ``seed`` is not in ``[0, 2**64)``.
        TypeError: if a size or ``seed`` is not an int (a Python or NumPy integer, not a
            bool).
    """
    d_model, num_heads, _ = arguments.layer_sizes(d_model, num_heads)
    q_len = arguments.size("q_len", q_len, 3)
    steps = arguments.size("steps", steps)
    seed = arguments.seed("seed", seed)
    rng = np.random.default_rng([seed, 1])
    x = torch.from_numpy(rng.standard_normal((1, q_len, d_model)))  # (B, L, D)
    with one_thread():
        layer = MultiHeadAttention(d_model, num_heads, seed=seed, dtype=torch.float64)
        optimizer = torch.optim.Adam(layer.parameters(), lr=0.1)
        schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=steps)
        queries = torch.arange(2, q_len)
        for _ in range(steps):
            _, weights = layer(x, need_weights=True)  # (B, H, L, L)
            on_previous = weights[0, 0, queries, queries - 1]
            on_first = weights[0, -1, queries, 0]
            loss = -torch.log(torch.minimum(on_previous, on_first)).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            schedule.step()
        with torch.no_grad():
            _, weights = layer(x, need_weights=True)
    num_params = sum(p.numel() for p in layer.parameters())
    return TwoTargetFit(weights=weights[0].numpy(), num_params=num_params)


def two_output_task(
    seed: int, num_sentences: int, *, q_len: int = 8, d_model: int = 16
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Sentences whose every query ``i >= 2`` must output ``[c_{i-1} P, c_0 Q]``.

    Token ``j`` of a sentence is ``x_j = [c_j, e_j]``: ``D/2`` features of content ``c_j``
    (standard normal, drawn anew for every sentence) and the one-hot position ``e_j``
    in the other ``D/2``. The target of query ``i`` puts the previous token's content,
    mapped by ``P``, into the first ``D/2`` output features and the first token's content,
    mapped by ``Q``, into the last ``D/2``. ``P`` and ``Q`` are random ``(D/2, D/2)``
    matrices with entries of variance ``2/D``, fixed by ``seed`` alone, so that sentences
    drawn with another ``seed`` but the same maps are held-out data (see
    :func:`fit_two_outputs`).

    Args:
        seed: seeds the maps ``P``, ``Q``; the sentences are seeded by
            ``[seed, num_sentences]``.
        num_sentences: how many sentences.
        q_len: L, at most ``D/2`` (one position per one-hot feature) and at least 3.
        d_model: D, even.

    Returns:
        ``(x, target, p, q)``: the sentences, the targets of queries ``2 .. L-1``, and the
        two maps.

    Shape:
        x ``(n, L, D)``, target ``(n, L - 2, D)``, p and q ``(D/2, D/2)``.

    Raises:
        ValueError: if a size is not positive, ``d_model`` is odd, ``q_len`` is outside
            ``3 .. D/2``, ``seed`` is negative, or the sentences would pass what an array
            can hold.
        TypeError: if a size or ``seed`` is not an int (a Python or NumPy integer, not a
            bool).
    """
    num_sentences, q_len, d_model = arguments.sizes(
        num_sentences=num_sentences, q_len=q_len, d_model=d_model
    ).values()
    seed = arguments.seed("seed", seed)
    arguments.check_elements("num_sentences", num_sentences * q_len * d_model, 8)
    if d_model % 2:
        raise ValueError(f"d_model must be even; got d_model={d_model}")
    half = d_model // 2
    if not 3 <= q_len <= half:
        raise ValueError(f"q_len must be between 3 and d_model / 2 = {half}; got q_len={q_len}")
    maps = np.random.default_rng([seed, 3]).standard_normal((2, half, half)) / np.sqrt(half)
    content = np.random.default_rng([seed, num_sentences]).standard_normal(
        (num_sentences, q_len, half)
    )  # (n, L, D/2)
    position = np.broadcast_to(np.eye(q_len, half), content.shape)  # (n, L, D/2): one-hot
    x = np.concatenate([content, position], axis=-1)  # (n, L, D)
    queries = np.arange(2, q_len)
    first = np.broadcast_to(content[:, :1] @ maps[1], (num_sentences, q_len - 2, half))
    target = np.concatenate([content[:, queries - 1] @ maps[0], first], axis=-1)  # (n, L-2, D)
    return x, target, maps[0], maps[1]


@dataclass(frozen=True)
class TwoOutputFit:
    """The result of :func:`fit_two_outputs`.

    Attributes:
        unexplained: on held-out sentences, the share of the targets' sum of squares that
            the layer's output leaves unexplained, ``|out - target|^2 / |target|^2``.
        train_unexplained: the same on the sentences it was fitted to.
        fixed_weight_floor: ``min(|P|_F^2, |Q|_F^2) / (|P|_F^2 + |Q|_F^2)``, the least
            share that one head whose weights do not depend on the content can leave,
            in expectation over the content.
        weights: the fitted layer's attention weights on the first held-out sentence,
            ``(H, L, L)``.
        num_params: the number of parameters of the layer (``4 D^2 + 4 D``, for every H).
    """

    unexplained: float
    train_unexplained: float
    fixed_weight_floor: float
    weights: np.ndarray
    num_params: int


def fit_two_outputs(
    num_heads: int,
    seed: int,
    *,
    num_sentences: int = 64,
    held_out: int = 256,
    q_len: int = 8,
    d_model: int = 16,
    steps: int = 150,
) -> TwoOutputFit:
    """Fit one layer to the task of :func:`two_output_task` and measure it on new sentences.

    The layer is :class:`mha.MultiHeadAttention` in float64 (seeded by ``seed``), fitted by
    Adam (learning rate 0.05 with a cosine decay to 0 over ``steps``, on one CPU thread) to
    minimise the unexplained share of the targets of ``num_sentences`` sentences, then run
    on ``held_out`` new sentences with the same maps.

    One head returns ``sum_j A_ij (x_j W^V + b^V) W^O + b^O``: one distribution, and one
    map ``W^V W^O`` for every key. If its weights did not depend on the content, it could
    leave no less than :attr:`TwoOutputFit.fixed_weight_floor` unexplained (about a half);
    two heads can serve one target each, through their own ``W^V_h W^O_h``.

    Args:
        num_heads: H (must divide ``d_model``).
        seed: seeds the task, the sentences and the initial layer.
        num_sentences: sentences fitted to.
        held_out: new sentences measured on.
        q_len: the query length, L.
        d_model: the model width, D.
        steps: optimiser steps.

    Returns:
        The held-out and fitted shares left unexplained, the floor, weights and size.

    Raises:
        ValueError: as :func:`two_output_task`, or if ``held_out`` or ``steps`` is not
            positive, H does not divide D, or ``held_out`` equals ``num_sentences`` (the two
            sets would be the same sentences).
        TypeError: if a size or ``seed`` is not an int (a Python or NumPy integer, not a
            bool).
    """
    d_model, num_heads, _ = arguments.layer_sizes(d_model, num_heads)
    held_out, steps = arguments.sizes(held_out=held_out, steps=steps).values()
    num_sentences = arguments.size("num_sentences", num_sentences)
    if held_out == num_sentences:
        raise ValueError(
            "held_out must differ from num_sentences, which seeds the fitted sentences; "
            f"got {held_out} and {num_sentences}"
        )
    x_np, target_np, p, q = two_output_task(seed, num_sentences, q_len=q_len, d_model=d_model)
    x_new, target_new, _, _ = two_output_task(seed, held_out, q_len=q_len, d_model=d_model)
    x, target = torch.from_numpy(x_np), torch.from_numpy(target_np)

    def unexplained(out: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        return ((out[:, 2:] - t) ** 2).sum() / (t**2).sum()  # queries 2 .. L-1

    with one_thread():
        layer = MultiHeadAttention(d_model, num_heads, seed=seed, dtype=torch.float64)
        optimizer = torch.optim.Adam(layer.parameters(), lr=0.05)
        schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=steps)
        for _ in range(steps):
            out, _ = layer(x)  # (n, L, D)
            loss = unexplained(out, target)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            schedule.step()
        with torch.no_grad():
            train = unexplained(layer(x)[0], target).item()
            out_new, weights = layer(torch.from_numpy(x_new), need_weights=True)
            held = unexplained(out_new, torch.from_numpy(target_new)).item()
    norms = sorted((float(np.sum(p**2)), float(np.sum(q**2))))
    return TwoOutputFit(
        unexplained=held,
        train_unexplained=train,
        fixed_weight_floor=norms[0] / sum(norms),
        weights=weights[0].numpy(),
        num_params=sum(t.numel() for t in layer.parameters()),
    )


def residual_stack(
    x: np.ndarray, num_blocks: int, *, num_heads: int, seed: int, norm_first: bool
) -> list[np.ndarray]:
    """Run ``x`` through ``num_blocks`` residual attention blocks with random layers.

    Block ``k`` is :func:`mha.backends.np_backend.attention_block` with the layer
    ``init_params(D, num_heads, seed=100 * seed + k)`` (in the dtype of ``x``), post-norm or
    pre-norm, without
    the layer norm's scale and shift (and without a final layer norm).

    Args:
        x: the input stream.
        num_blocks: how many blocks.
        num_heads: H of every layer.
        seed: picks the layers.
        norm_first: pre-norm (``True``) or post-norm blocks.

    Returns:
        The stream before the first block and after each block.

    Shape:
        x ``(B, L, D)``. Returns ``num_blocks + 1`` arrays ``(B, L, D)``: the input, then
        the stream after each block.

    Raises:
        ValueError: if ``num_blocks`` is negative, ``seed`` is negative, or as
            :func:`mha.backends.np_backend.attention_block` (``x`` not ``(B, L, D)`` or not
            finite, H not dividing D).
        TypeError: if ``norm_first`` is not a bool, ``num_blocks``, ``num_heads`` or
            ``seed`` not an int (a Python or NumPy integer, not a bool), or ``x`` not a
            float32/float64 NumPy array.
    """
    arguments.check_bool("norm_first", norm_first)
    num_blocks = arguments.size("num_blocks", num_blocks, 0)
    seed = arguments.seed("seed", seed)
    if not isinstance(x, np.ndarray):
        raise TypeError(f"x must be a numpy.ndarray; got {arguments.describe(x)}")
    if x.dtype not in (np.float32, np.float64):
        raise TypeError(f"x must be float32 or float64; got dtype {x.dtype}")
    if x.ndim != 3:
        raise ValueError(f"x must have shape (B, L, D); got {x.ndim}-D shape {x.shape}")
    arguments.layer_sizes(x.shape[-1], num_heads)

    streams = [x]
    for k in range(num_blocks):
        params = init_params(x.shape[-1], num_heads, seed=100 * seed + k, dtype=x.dtype)
        out, _ = np_backend.attention_block(streams[-1], params, norm_first=norm_first)
        streams.append(out)
    return streams
