"""Small, fully specified examples that the book works through.

- :func:`worked_example`: a layer of three tokens, two heads of width two and integer
  weights, small enough to check every number by hand.
- :func:`fit_two_targets`: one sentence on which every query is asked to attend to two
  places at once (the previous token and the first token), fitted with one head or with
  several; :func:`two_target_shares` reads off the weight each target gets.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from mha._linalg import one_thread
from mha.module import MultiHeadAttention
from mha.params import MHAParams


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
    """
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
        d_model: D.
        steps: optimiser steps.

    Returns:
        The fitted layer's weights and parameter count.
    """
    x = np.random.default_rng([seed, 1]).standard_normal((1, q_len, d_model))
    x = torch.from_numpy(x)  # (B, L, D)
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


def residual_stack(
    x: np.ndarray, num_blocks: int, *, num_heads: int, seed: int, norm_first: bool
) -> list[np.ndarray]:
    """Run ``x`` through ``num_blocks`` residual attention blocks with random layers.

    Block ``k`` is :func:`mha.np_backend.attention_block` with the layer
    ``init_params(D, num_heads, seed=100 * seed + k)``, post-norm or pre-norm, without
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
    """
    from mha import np_backend
    from mha.params import init_params

    streams = [x]
    for k in range(num_blocks):
        params = init_params(x.shape[-1], num_heads, seed=100 * seed + k)
        out, _ = np_backend.attention_block(streams[-1], params, norm_first=norm_first)
        streams.append(out)
    return streams
