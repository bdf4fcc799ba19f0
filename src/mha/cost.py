"""What one multi-head attention forward costs, by arithmetic: FLOPs, matmul calls, bytes.

The models are exact counts, not orders of magnitude: :func:`attention_flops` counts every
multiply-add of the four matrix-multiply stages as 2 FLOPs (the convention of
``torch.utils.flop_counter.FlopCounterMode``; :func:`matmul_flops` for one product) and,
separately, the element-wise work that ``FlopCounterMode`` does not count (bias additions,
the ``1/sqrt(Dh)`` scaling, the softmax). :func:`matmul_calls` is how many matrix products
each form dispatches, and :func:`score_tensor_bytes` the size of the ``(B, H, L, S)`` score
tensor.

Nothing here runs attention: :mod:`mha.measure` measures what a real run did (FLOPs counted
by PyTorch, operators, memory, time), and the tests and the book check each model against it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from mha import _validate

# --- FLOPs: the model --------------------------------------------------------------------


@dataclass(frozen=True)
class AttentionFlops:
    """FLOPs of one multi-head attention forward, stage by stage (multiply-add = 2 FLOPs).

    The first six stages are matrix multiplies (what ``FlopCounterMode`` counts); the
    last three are element-wise extras (what it does not count).

    Attributes:
        q_proj: the query projection ``x @ W_q``.
        k_proj: the key projection ``x @ W_k``.
        v_proj: the value projection ``x @ W_v``.
        scores: ``Q K^T`` for every head.
        weighted_sum: ``weights @ V`` for every head.
        out_proj: ``Concat(heads) @ W^O``.
        bias: one addition per output element of each biased projection.
        scale: one multiplication per score (``scores * 1/sqrt(Dh)``).
        softmax: per row of S scores, ``S - 1`` comparisons (max), ``S`` subtractions,
            ``S`` exponentials, ``S - 1`` additions (sum) and ``S`` divisions.
    """

    q_proj: int
    k_proj: int
    v_proj: int
    scores: int
    weighted_sum: int
    out_proj: int
    bias: int
    scale: int
    softmax: int

    @property
    def projections(self) -> int:
        """FLOPs of the query, key and value projections."""
        return self.q_proj + self.k_proj + self.v_proj

    @property
    def attention(self) -> int:
        """FLOPs of the two per-head matrix products (scores and weighted sum)."""
        return self.scores + self.weighted_sum

    @property
    def matmul(self) -> int:
        """All matrix-multiply FLOPs: what ``FlopCounterMode`` reports."""
        return self.projections + self.attention + self.out_proj

    @property
    def elementwise(self) -> int:
        """Bias, scaling and softmax operations, which ``FlopCounterMode`` does not count."""
        return self.bias + self.scale + self.softmax

    @property
    def total(self) -> int:
        """Matrix-multiply FLOPs plus element-wise operations."""
        return self.matmul + self.elementwise

    def as_dict(self) -> dict[str, int]:
        """Every stage and every total, by name.

        Returns:
            ``{name: FLOPs}`` for the nine stages and the five totals.
        """
        out = asdict(self)
        for name in ("projections", "attention", "matmul", "elementwise", "total"):
            out[name] = getattr(self, name)
        return out


def matmul_flops(m: int, k: int, n: int) -> int:
    """FLOPs of one ``(m, k) @ (k, n)`` matrix product: ``2 m k n`` (a multiply-add is 2).

    Args:
        m: rows of the left factor.
        k: the shared dimension.
        n: columns of the right factor.

    Returns:
        ``2 * m * k * n``.

    Raises:
        ValueError: if a size is not positive.
        TypeError: if a size is not an int.
    """
    for name, value in (("m", m), ("k", k), ("n", n)):
        _validate.check_positive(name, value)
    return 2 * m * k * n


def attention_flops(
    batch_size: int,
    q_len: int,
    kv_len: int,
    d_model: int,
    num_heads: int,
    *,
    bias: bool = True,
    num_kv_heads: int | None = None,
) -> AttentionFlops:
    """Exact FLOP count of one multi-head attention forward, per stage.

    The count does not depend on the form (per-head loop, fused or packed): the same
    multiply-adds are grouped into fewer, larger matrix products. With ``num_kv_heads``
    below ``num_heads`` the keys and values are projected to ``num_kv_heads`` heads shared
    by groups of query heads (grouped-query attention; ``num_kv_heads=1`` is multi-query
    attention), which shrinks only ``k_proj``, ``v_proj`` and their biases.

    Args:
        batch_size: B.
        q_len: query length L.
        kv_len: key/value length S (``S = L`` for self-attention).
        d_model: model width D.
        num_heads: number of query heads H; must divide D.
        bias: whether the four projections add a bias.
        num_kv_heads: number of key/value heads; must divide H. Defaults to H.

    Returns:
        ``AttentionFlops``; with ``Dh = D / H`` and ``Dkv = num_kv_heads * Dh``:
        q_proj ``2 B L D D``, k_proj = v_proj ``2 B S D Dkv``, scores = weighted_sum
        ``2 B H L S Dh``, out_proj ``2 B L D D``.

    Raises:
        ValueError: if a size is not positive, H does not divide D, or ``num_kv_heads``
            does not divide H.
        TypeError: if a size is not an int.
    """
    for name, value in (("batch_size", batch_size), ("q_len", q_len), ("kv_len", kv_len)):
        _validate.check_positive(name, value)
    _validate.check_sizes(d_model, num_heads)
    G = num_heads if num_kv_heads is None else num_kv_heads
    _validate.check_positive("num_kv_heads", G)
    if num_heads % G != 0:
        raise ValueError(
            f"num_kv_heads must divide num_heads; got num_heads={num_heads}, num_kv_heads={G}"
        )
    B, L, S, D, H = batch_size, q_len, kv_len, d_model, num_heads
    Dh = D // H
    Dkv = G * Dh
    rows = B * H * L  # softmax rows
    return AttentionFlops(
        q_proj=matmul_flops(B * L, D, D),
        k_proj=matmul_flops(B * S, D, Dkv),
        v_proj=matmul_flops(B * S, D, Dkv),
        scores=B * H * matmul_flops(L, Dh, S),
        weighted_sum=B * H * matmul_flops(L, S, Dh),
        out_proj=matmul_flops(B * L, D, D),
        bias=(B * L * D + 2 * B * S * Dkv + B * L * D) if bias else 0,
        scale=rows * S,
        softmax=rows * (5 * S - 2),
    )


def matmul_calls(num_heads: int, form: str, *, self_attention: bool = True) -> int:
    """Matrix products one :func:`mha.torch_backend.multi_head_attention` call dispatches.

    Counted for ``need_weights=True`` (explicit scores): the per-head form runs 3 input
    projections and 2 attention products per head, then one output projection
    (``5H + 1``); the fused form runs 3 + 2 + 1 = 6; the packed form projects queries,
    keys and values with one product in self-attention (4 in all) and with two when the
    query differs from the shared key/value tensor (5 in all).

    Args:
        num_heads: number of heads H.
        form: ``"per_head"``, ``"fused"`` or ``"packed"``.
        self_attention: whether query, key and value are one tensor (the packed form then
            projects them with one product).

    Returns:
        The number of matrix-multiply operators, an ``int``.

    Raises:
        ValueError: on an unknown form or a non-positive ``num_heads``.
        TypeError: if ``num_heads`` is not an int.
    """
    _validate.check_positive("num_heads", num_heads)
    _validate.check_form(form)
    if form == "per_head":
        return 5 * num_heads + 1
    if form == "fused":
        return 6
    return 4 if self_attention else 5


# --- Memory ------------------------------------------------------------------------------


def _itemsize(dtype: Any) -> int:
    size = getattr(dtype, "itemsize", None)
    if isinstance(size, int):
        return size
    try:
        return np.dtype(dtype).itemsize
    except TypeError as err:
        raise TypeError(f"dtype must be a NumPy or PyTorch dtype; got {dtype!r}") from err


def score_tensor_bytes(
    batch_size: int, q_len: int, kv_len: int, num_heads: int, dtype: Any = np.float32
) -> int:
    """Bytes of one ``(B, H, L, S)`` score (or weight) tensor: ``B H L S`` times the item size.

    An explicit implementation holds at least one such tensor (the scores, overwritten by the
    weights); two at once when autograd records, since the backward pass needs the softmax's
    output. ``scaled_dot_product_attention``'s fused CPU kernel works on blocks of
    queries and keys and never stores it.

    Args:
        batch_size: B.
        q_len: query length L.
        kv_len: key/value length S.
        num_heads: number of heads H.
        dtype: a NumPy or PyTorch dtype, or anything ``numpy.dtype`` accepts (float32 by
            default).

    Returns:
        ``B * H * L * S * itemsize``, an ``int``.

    Raises:
        ValueError: if a size is not positive.
        TypeError: if a size is not an int or ``dtype`` is not a dtype.
    """
    for name, value in (
        ("batch_size", batch_size),
        ("q_len", q_len),
        ("kv_len", kv_len),
        ("num_heads", num_heads),
    ):
        _validate.check_positive(name, value)
    return batch_size * num_heads * q_len * kv_len * _itemsize(dtype)
