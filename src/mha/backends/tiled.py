"""Attention without the score matrix: the online softmax and a tiled forward, in NumPy.

The softmax of a row needs its maximum and the sum of its exponentials. Both can be built
block by block (Milakov and Gimelshein, 2018): a block of scores gives its own maximum
``m_b`` and sum ``l_b = sum exp(s - m_b)``, and two blocks combine exactly by

    ``m = max(m_a, m_b)``,  ``l = l_a exp(m_a - m) + l_b exp(m_b - m)``

(:func:`softmax_stats`, :func:`combine_stats`, :func:`online_softmax`). A row with nothing
attended has ``m = -inf`` and ``l = 0``; the rule then takes ``exp(-inf - m) = 0`` even when
``m = -inf`` too (it subtracts 0 instead of an infinite maximum), so ``(-inf, 0)`` is its
identity. The same rescaling applied to the running weighted sum of values gives attention
one tile at a time (:func:`attention`, the forward pass of FlashAttention, Dao et al., 2022):
queries in blocks of ``block_q`` rows (Br), keys and values in blocks of ``block_kv`` rows
(Bc). Per query block it keeps only an output accumulator ``(..., Br, Dv)`` (``Dv`` is the
width of the values, ``Dh`` in a multi-head layer), the running maximum and sum ``(..., Br)``
and one ``(..., Br, Bc)`` tile of scores, and it returns the output together with the
log-sum-exp of every row, ``lse = m + log l``, from which the backward pass recomputes the
weights (:func:`mha.numerics.backward.tiled_attention`). Like FlashAttention-2 (Dao, 2024) it
divides the accumulator by ``l`` once, after the last block, where the first FlashAttention rescaled
the output by ``l`` at every block, and it keeps only the log-sum-exp for the backward pass.
It scales the queries by ``1/sqrt(Dh)`` once per block rather than each tile of scores, a
choice of this library (FlashAttention-2's kernels scale each score inside ``exp2``).

Masks follow the book's convention (boolean, True = may attend, broadcastable to
``(..., L, S)``). A tile in which nothing may be attended is skipped without loading its
keys and values; with ``causal=True`` the mask is computed from the positions, so the
tiles above the diagonal are skipped without a mask array. ``align`` places that diagonal
as :func:`mha.backends.np_backend.causal_mask` does: top-left (query ``i`` at position ``i``) or
bottom-right (the queries are the last ``L`` of the ``S`` positions). A fully masked query row gets
zero output and ``lse = -inf`` (the log of its zero sum), as :mod:`mha.backends.np_backend` gives it
zero weights and zero output.

:func:`three_pass_attention` is the standard algorithm written the same way, tile by tile:
scores written to "slow" memory, read back for the softmax, weights written and read back
for the weighted sum. Both functions can count the elements they move between slow memory
(the arrays passed in and returned) and the working tiles (``io_counter``), which is how the
IO model in :mod:`mha.cost` is checked. :func:`mha.numerics.tolerance.online_softmax_tolerance`
bounds how far two blockings of the same softmax may differ.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from mha.backends._tiles import (
    IOCounter,
    check_io_counter,
    load,
    row_index,
    safe_max,
    store,
    tile_causal_offset,
    tile_mask,
)
from mha.core._checks import arguments, arrays, numpy_arrays, overflow
from mha.core._checks.numpy_arrays import NUMPY

# Default tiles of 256 x 256, chosen from the sweep of scripts/bench_tiled.py (L = S = 2048,
# 8 heads of width 64, float32, one thread, CPU time, on an AMD EPYC with 1 MiB of L2 cache
# per core and 32 MiB of L3). Each tile costs about a dozen NumPy calls of some microseconds
# whatever its size, so small tiles pay that often: 128 x 128 took about 1.2x the time of the
# best, 64 x 64 about 1.5x. From 256 x 256 to 512 x 512 the times were within a few per cent
# of each other: there the products dominate, and larger tiles only cost memory (a float32
# tile of all 8 heads is 2 MiB at 256 x 256, 8 MiB at 512 x 512). Square tiles of 256 also
# keep causal attention near half the work: with query blocks of Br rows it computes
# (T + 1) / (2 T) of the tiles, T = L / Br: 0.56 at L = 2048, against 0.63 with Br = 512.
DEFAULT_BLOCK_Q = 256
DEFAULT_BLOCK_KV = 256

BLOCKS = (DEFAULT_BLOCK_Q, DEFAULT_BLOCK_KV)


@dataclass(frozen=True)
class TileStep:
    """One step of :func:`attention`: a tile of query rows against a block of keys.

    Attributes:
        q_block: ``(start, stop)`` of the query rows.
        kv_block: ``(start, stop)`` of the key/value rows.
        computed: False when the tile was skipped (nothing in it may be attended).
        row_max: the running maximum ``m`` of each query row after this tile, ``(..., Br)``.
        row_sum: the running sum ``l = sum exp(z - m)`` of each row after it, ``(..., Br)``.
        rescale: the factor ``exp(m_old - m_new)`` that this tile applied to the row's
            earlier sum and accumulator, ``(..., Br)``: 1 where the maximum did not grow
            (and for a skipped tile), 0 where nothing had been attended before.
        acc: the unnormalised output accumulator ``sum exp(z - m) v`` of each row after this
            tile, ``(..., Br, Dv)``; the output is ``acc / l`` after the last tile.
    """

    q_block: tuple[int, int]
    kv_block: tuple[int, int]
    computed: bool
    row_max: np.ndarray
    row_sum: np.ndarray
    rescale: np.ndarray
    acc: np.ndarray


# --- The online softmax ------------------------------------------------------------------


def _stats(scores: np.ndarray, mask: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    if mask is not None:
        scores = np.where(mask, scores, -np.inf)
    row_max = scores.max(axis=-1)  # (...,)
    row_sum = np.exp(scores - safe_max(row_max)[..., None]).sum(axis=-1)  # (...,)
    return row_max, row_sum


def _normalise(scores: np.ndarray, mask: np.ndarray | None) -> np.ndarray:
    """The masked softmax of whole rows: ``exp(s - max) / sum``, zero where masked."""
    row_max, row_sum = _stats(scores, mask)
    if mask is not None:
        scores = np.where(mask, scores, -np.inf)
    total = np.where(row_sum == 0, 1, row_sum)[..., None]  # fully masked rows stay 0
    return np.exp(scores - safe_max(row_max)[..., None]) / total


def _combine(max_a, sum_a, max_b, sum_b) -> tuple[np.ndarray, np.ndarray]:
    row_max = np.maximum(max_a, max_b)
    shift = safe_max(row_max)
    return row_max, sum_a * np.exp(max_a - shift) + sum_b * np.exp(max_b - shift)


def softmax_stats(
    scores: np.ndarray, mask: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """The maximum and the shifted sum of exponentials of each row of a block of scores.

    Args:
        scores: a block of scores (any number of columns).
        mask: boolean, True = may attend; broadcastable to ``scores``.

    Shape:
        scores ``(..., S)``. Returns ``row_max`` and ``row_sum``, each ``(...,)``.

    Returns:
        ``row_max = max_j s_j`` over the allowed entries (``-inf`` when none is allowed) and
        ``row_sum = sum_j exp(s_j - row_max)`` over them (0 when none is allowed).

    Raises:
        ValueError: if ``scores`` is 0-D, has no columns (S = 0) or is not finite, or
            ``mask`` does not broadcast.
        TypeError: if ``scores`` is not a float32/float64 array or ``mask`` is not boolean.
    """
    numpy_arrays.check_array("scores", scores)
    if scores.ndim < 1 or scores.shape[-1] == 0:
        raise ValueError(f"scores must have shape (..., S) with S >= 1; got shape {scores.shape}")
    if mask is not None:
        numpy_arrays.check_mask(mask, scores.shape, "scores.shape")
    row_max, row_sum = _stats(scores, mask)
    return np.asarray(row_max), np.asarray(row_sum)  # 0-D arrays, not scalars, for one row


def combine_stats(
    max_a: np.ndarray, sum_a: np.ndarray, max_b: np.ndarray, sum_b: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Combine the softmax statistics of two blocks of the same rows into those of both.

    With ``m = max(m_a, m_b)``, ``l = l_a exp(m_a - m) + l_b exp(m_b - m)``: each block's sum
    is rescaled to the common maximum. The rule is exact (in exact arithmetic), commutative
    and associative, so blocks may be combined in any order and grouping.

    A block with nothing allowed has ``(m, l) = (-inf, 0)``. The factors are computed as
    ``exp(m_a - c)`` with ``c = m`` if ``m`` is finite and ``c = 0`` if ``m = -inf``, so a
    factor is 0 for an empty block even when both blocks are empty (``-inf - (-inf)`` is never
    formed): ``(-inf, 0)`` is the identity of the rule, and combining it with ``(m_b, l_b)``
    returns ``(m_b, l_b)`` exactly. The FlashAttention implementation uses the same convention
    (it subtracts 0 when a row's maximum is ``-inf``).

    Args:
        max_a: row maxima of block a (``-inf`` for a row with nothing allowed).
        sum_a: row sums ``sum exp(s - max_a)`` of block a.
        max_b: row maxima of block b.
        sum_b: row sums of block b.

    Shape:
        All four broadcast to one shape ``(...,)``; returns two arrays of that shape.

    Returns:
        ``(m, l)``, the row maxima and sums of the union of the two blocks.

    Raises:
        ValueError: if a maximum is NaN or ``+inf``, a sum is negative or not finite, the
            shapes do not broadcast, or the combined sum overflows the dtype.
        TypeError: if an input is not a float array, or the dtypes differ.
    """
    for name, m in (("max_a", max_a), ("max_b", max_b)):
        numpy_arrays.check_array(name, m, check_finite=False)
        if np.isnan(m).any() or np.isposinf(m).any():
            raise ValueError(f"{name} must be finite or -inf; got NaN or +inf values")
    for name, s in (("sum_a", sum_a), ("sum_b", sum_b)):
        numpy_arrays.check_array(name, s)
        if (s < 0).any():
            raise ValueError(f"{name} must be >= 0; got a negative sum")
    arguments.check_same_dtype({"max_a": max_a, "sum_a": sum_a, "max_b": max_b, "sum_b": sum_b})
    try:
        np.broadcast_shapes(max_a.shape, sum_a.shape, max_b.shape, sum_b.shape)
    except ValueError:
        raise ValueError(
            "max_a, sum_a, max_b and sum_b must broadcast to one shape; got "
            f"{max_a.shape}, {sum_a.shape}, {max_b.shape}, {sum_b.shape}"
        ) from None
    row_max, row_sum = _combine(max_a, sum_a, max_b, sum_b)
    numpy_arrays.check_result("combine_stats sum", row_sum)
    return row_max, row_sum


def online_softmax(
    scores: np.ndarray, mask: np.ndarray | None = None, *, block_size: int = DEFAULT_BLOCK_KV
) -> np.ndarray:
    """Masked softmax over the last axis from statistics gathered block by block.

    One pass over the blocks of ``block_size`` columns combines their statistics
    (:func:`combine_stats`) into each row's maximum and sum; a second pass writes
    ``exp(s - max) / sum``. The result equals :func:`mha.backends.np_backend.softmax` to rounding:
    masked entries get weight 0 and a fully masked row gets all zeros.

    Args:
        scores: the scores; left unchanged.
        mask: boolean, True = may attend; broadcastable to ``scores``.
        block_size: columns per block.

    Shape:
        scores ``(..., S)``; returns ``(..., S)``.

    Returns:
        The softmax weights, each row summing to 1 (0 for a fully masked row).

    Raises:
        ValueError: if ``scores`` is 0-D or not finite, ``mask`` does not broadcast, or
            ``block_size < 1``.
        TypeError: if ``scores`` is not a float array, ``mask`` is not boolean or
            ``block_size`` is not an int.
    """
    numpy_arrays.check_array("scores", scores)
    if scores.ndim < 1:
        raise ValueError(f"scores must have shape (..., S); got 0-D shape {scores.shape}")
    if mask is not None:
        numpy_arrays.check_mask(mask, scores.shape, "scores.shape")
        mask = np.broadcast_to(mask, scores.shape)  # a view: no copy
    arguments.check_block_size("block_size", block_size)
    S = scores.shape[-1]
    blocks = [slice(j, min(j + block_size, S)) for j in range(0, S, block_size)]
    row_max = np.full(scores.shape[:-1], -np.inf, dtype=scores.dtype)  # (...,)
    row_sum = np.zeros(scores.shape[:-1], dtype=scores.dtype)  # (...,)
    for cols in blocks:
        block_mask = None if mask is None else mask[..., cols]
        row_max, row_sum = _combine(row_max, row_sum, *_stats(scores[..., cols], block_mask))
    shift = safe_max(row_max)[..., None]  # (..., 1)
    total = np.where(row_sum == 0, 1, row_sum)[..., None]  # fully masked rows stay 0
    weights = np.empty_like(scores)
    for cols in blocks:
        block = (
            scores[..., cols]
            if mask is None
            else np.where(mask[..., cols], scores[..., cols], -np.inf)
        )
        weights[..., cols] = np.exp(block - shift) / total
    return weights


# --- The tiled forward -------------------------------------------------------------------


def _check_attention(
    query, key, value, mask, block_q, block_kv, io_counter=None
) -> tuple[tuple[int, ...], int, int, dict[str, float]]:
    """The checks of :func:`attention`; returns the batch, L, S and the inputs' magnitudes."""
    magnitudes = arrays.check_attention(query, key, value, mask, NUMPY)
    L, S, _, _ = arguments.check_qkv(query, key, value)
    batch = arguments.broadcast_batch(query, key, value)
    arguments.check_block_size("block_q", block_q)
    arguments.check_block_size("block_kv", block_kv)
    check_io_counter(io_counter)
    return batch, L, S, magnitudes


def attention(
    query: np.ndarray,  # (..., L, Dh)
    key: np.ndarray,  # (..., S, Dh)
    value: np.ndarray,  # (..., S, Dv)
    mask: np.ndarray | None = None,  # broadcastable to (..., L, S)
    *,
    causal: bool = False,
    align: str = "top_left",
    block_q: int = DEFAULT_BLOCK_Q,
    block_kv: int = DEFAULT_BLOCK_KV,
    io_counter: IOCounter | None = None,
    trace: list[TileStep] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """``softmax(Q K^T / sqrt(Dh)) V`` one tile at a time, never forming an ``(L, S)`` array.

    For each block ``Q^(i)`` of ``block_q`` query rows, the blocks ``K^(j)``, ``V^(j)`` of
    ``block_kv`` keys and values are visited in turn: the tile of scores
    ``Z^(ij) = Q^(i) K^(j)^T / sqrt(Dh)`` (the queries are scaled, not the tile) updates the
    running row maximum ``m`` and sum ``l`` by the rule of :func:`combine_stats`, and the
    output accumulator is rescaled the same way,
    ``acc <- acc exp(m_old - m_new) + exp(Z^(ij) - m_new) V^(j)``. After the last block,
    ``acc / l`` is the attention output (one division per output entry, FlashAttention-2's
    deferred normalisation) and ``m + log l`` the log-sum-exp of the row.

    Args:
        query: queries.
        key: keys, the same width as ``query``.
        value: values, the same length as ``key``.
        mask: boolean, True = may attend; broadcastable to ``(..., L, S)``.
        causal: also let each query attend only to the keys at or before its position, as
            :func:`mha.backends.np_backend.causal_mask`; the tiles wholly above that diagonal are
            skipped.
        align: where the queries sit when ``causal``, as in
            :func:`mha.backends.np_backend.causal_mask`: ``"top_left"`` (query ``i`` at position
            ``i``, keys ``j <= i``; PyTorch's ``is_causal=True``) or ``"bottom_right"`` (the
            queries are the last ``L`` of ``S`` positions, keys ``j <= S - L + i``; what a
            cache, chunked prefill and checking drafted tokens need, and flash-attn's
            ``causal=True`` from version 2.1). Only with ``causal=True``.
        block_q: query rows per tile (Br); need not divide L.
        block_kv: key/value rows per tile (Bc); need not divide S.
        io_counter: if given, ``io_counter["read"]`` and ``io_counter["write"]`` grow by
            the elements of query, key, value, output and log-sum-exp moved between the
            arrays and the tiles (the mask, read tile by tile, is not counted).
        trace: if given, one :class:`TileStep` per tile is appended, in order.

    Shape:
        query ``(..., L, Dh)``, key ``(..., S, Dh)``, value ``(..., S, Dv)``.
        Returns output ``(..., L, Dv)`` and log-sum-exp ``(..., L)``.

    Returns:
        The output (zero in a fully masked row) and ``lse`` (``-inf`` in a fully masked row).

    Raises:
        ValueError: on mismatched shapes, empty sequences, a head width ``Dh`` of 0 (the
            last dimension of query and key; as in both backends), a mask that does not
            broadcast, non-finite inputs, a block size below 1, scores that overflow the dtype,
            an ``align`` other than ``"top_left"`` and ``"bottom_right"``, or
            ``"bottom_right"`` without ``causal=True``.
        TypeError: on non-float or mixed dtypes, a non-boolean mask, a non-int block size,
            a ``causal`` that is not a bool, or an ``io_counter``/``trace`` of another kind.
    """
    _, L, S, magnitudes = _check_attention(query, key, value, mask, block_q, block_kv, io_counter)
    offset = tile_causal_offset(L, S, align, causal=causal)
    if trace is not None and not isinstance(trace, list):
        raise TypeError(f"trace must be a list or None; got {type(trace).__name__}")
    blocks, io = (block_q, block_kv), io_counter
    out, lse = attention_tiles(
        query, key, value, mask, causal=causal, offset=offset, blocks=blocks, io=io, trace=trace
    )
    overflow.check_attention_range(
        "tiled.attention output", out, magnitudes, query, key, value, mask, NUMPY
    )
    return out, lse


def attention_tiles(
    q, k, v, mask=None, *,
    causal=False, offset=0, blocks=BLOCKS, io=None, trace=None,
):  # fmt: skip
    """The tile loop of :func:`attention`, pure math (no checks): the FlashAttention forward.

    Args:
        q, k, v, mask, causal, trace: those of :func:`attention` (queries, keys, values).
        offset: where query 0 sits among the keys when ``causal``
            (:func:`mha.core.mask_rules.causal_offset`).
        blocks: ``(block_q, block_kv)``, the rows of Q and of K and V in a tile.
        io: :func:`attention`'s ``io_counter``.

    Shape:
        q ``(..., L, Dh)``, k ``(..., S, Dh)``, v ``(..., S, Dv)``. Returns ``(..., L, Dv)``
        and ``(..., L)``.

    Returns:
        ``(output, lse)``.
    """
    (block_q, block_kv), (L, S) = blocks, (q.shape[-2], k.shape[-2])
    batch = np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    scale = q.dtype.type(1.0 / math.sqrt(q.shape[-1]))
    if mask is not None:
        mask = np.broadcast_to(mask, (*batch, L, S))  # a view: no copy
    out = np.empty((*batch, L, v.shape[-1]), dtype=q.dtype)  # (..., L, Dv)
    lse = np.empty((*batch, L), dtype=q.dtype)  # (..., L)
    for i0 in range(0, L, block_q):
        rows = slice(i0, min(i0 + block_q, L))
        # (..., Br, Dh), scaled once a block
        q_i = load(q, row_index(rows), io) * scale
        br = rows.stop - rows.start
        running = RunningRows((*batch, br), v.shape[-1], q.dtype)
        for j0 in range(0, S, block_kv):
            cols = slice(j0, min(j0 + block_kv, S))
            keep = tile_mask(mask, causal, rows, cols, offset=offset)
            if keep is not False:  # only then are K^(j) and V^(j) loaded
                # (..., Br, Dh) @ (..., Dh, Bc) -> (..., Br, Bc)
                s = q_i @ load(k, row_index(cols), io).swapaxes(-1, -2)
                running.update(s, keep, load(v, row_index(cols), io))
            if trace is not None:
                trace.append(running.step(rows, cols, keep is not False))
        store(out, row_index(rows), running.output(), io)  # (..., Br, Dv)
        store(lse, (..., rows), running.lse(), io)  # (..., Br)
    return out, lse


class RunningRows:
    """What the tiled forward keeps for one block of query rows while it visits the keys.

    The running maximum ``m`` and sum ``l`` of each row's exponentials, and the unnormalised
    output ``acc = sum exp(z - m) v``, all rescaled whenever a tile raises a row's maximum.

    Args:
        rows: the shape of the block's rows, ``(..., Br)``.
        width: the values' width Dv.
        dtype: the arrays' dtype.
    """

    def __init__(self, rows: tuple[int, ...], width: int, dtype: np.dtype) -> None:
        self.row_max = np.full((*rows, 1), -np.inf, dtype=dtype)  # (..., Br, 1)
        self.row_sum = np.zeros((*rows, 1), dtype=dtype)  # (..., Br, 1)
        self.acc = np.zeros((*rows, width), dtype=dtype)  # (..., Br, Dv)
        self.rescale = np.ones((*rows, 1), dtype=dtype)  # the last tile's factor

    def update(
        self, s: np.ndarray, keep: np.ndarray | None, v: np.ndarray
    ) -> None:  # fmt: skip
        """Take in one tile of scores ``s`` (overwritten) and its values.

        Args:
            s: the tile's scores ``Q^(i) K^(j)^T / sqrt(Dh)``.
            keep: what the tile may attend (``None``: everything).
            v: the tile's values.

        Shape:
            s ``(..., Br, Bc)``, keep broadcastable to it, v ``(..., Bc, Dv)``.
        """
        if keep is not None:
            np.copyto(s, -np.inf, where=~keep)
        # (..., Br, 1)
        new_max = np.maximum(self.row_max, s.max(axis=-1, keepdims=True))
        shift = safe_max(new_max)  # 0 for a row that has seen nothing yet
        s -= shift
        np.exp(s, out=s)  # the tile's unnormalised weights
        # (..., Br, 1); 0 where nothing was seen
        self.rescale = np.exp(self.row_max - shift)
        self.row_sum *= self.rescale
        self.row_sum += s.sum(axis=-1, keepdims=True)
        self.acc *= self.rescale
        self.acc += s @ v  # (..., Br, Bc) @ (..., Bc, Dv) -> (..., Br, Dv)
        self.row_max = new_max

    def output(self) -> np.ndarray:
        """``acc / l``, the block's attention output (zero in a row that attended nothing).

        Shape:
            Returns ``(..., Br, Dv)``.

        Returns:
            A new array.
        """
        return self.acc / np.where(self.row_sum == 0, 1, self.row_sum)

    def lse(self) -> np.ndarray:
        """``m + log l``, each row's log-sum-exp (``-inf`` in a row that attended nothing).

        Shape:
            Returns ``(..., Br)``.

        Returns:
            A new array.
        """
        empty = self.row_sum == 0  # (..., Br, 1): fully masked rows
        lse = self.row_max + np.log(np.where(empty, 1, self.row_sum))
        return np.where(empty, -np.inf, lse)[..., 0]  # (..., Br, 1) -> (..., Br)

    def step(self, rows: slice, cols: slice, computed: bool) -> TileStep:
        """A copy of the state after the tile ``rows`` x ``cols``, for a trace.

        Args:
            rows: the query rows of the tile.
            cols: its key columns.
            computed: False for a tile that was skipped.

        Returns:
            The :class:`TileStep`.
        """
        factor = self.rescale if computed else np.ones_like(self.row_max)
        return TileStep(
            (rows.start, rows.stop),
            (cols.start, cols.stop),
            computed,
            self.row_max[..., 0].copy(),
            self.row_sum[..., 0].copy(),
            factor[..., 0].copy(),
            self.acc.copy(),
        )


def _softmax_tiles(scores, weights, mask, rows, col_blocks, io) -> None:
    """Pass 2 of :func:`three_pass_attention` for one row block, with the (Br, Bc) tiles."""
    keeps = {j.start: None if mask is None else mask[..., rows, j] for j in col_blocks}
    if len(col_blocks) == 1:  # one tile spans the row: read once
        tile = load(scores, (..., rows, col_blocks[0]), io)  # (..., Br, S)
        store(weights, (..., rows, col_blocks[0]), _normalise(tile, keeps[0]), io)
        return
    row_max = np.full(scores.shape[:-2] + (rows.stop - rows.start,), -np.inf, scores.dtype)
    row_sum = np.zeros_like(row_max)  # (..., Br)
    for cols in col_blocks:  # first read: the statistics, by the online rule
        tile = load(scores, (..., rows, cols), io)  # (..., Br, Bc)
        row_max, row_sum = _combine(row_max, row_sum, *_stats(tile, keeps[cols.start]))
    shift = safe_max(row_max)[..., None]  # (..., Br, 1)
    total = np.where(row_sum == 0, 1, row_sum)[..., None]  # (..., Br, 1)
    for cols in col_blocks:  # second read: the weights
        tile = load(scores, (..., rows, cols), io)
        keep = keeps[cols.start]  # None without a mask
        if keep is not None:
            tile = np.where(keep, tile, -np.inf)
        store(weights, (..., rows, cols), np.exp(tile - shift) / total, io)


def three_pass_attention(
    query: np.ndarray,
    key: np.ndarray,
    value: np.ndarray,
    mask: np.ndarray | None = None,
    *,
    block_q: int = DEFAULT_BLOCK_Q,
    block_kv: int = DEFAULT_BLOCK_KV,
    softmax_rows: int | None = None,
    io_counter: IOCounter | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Standard attention in three passes through slow memory, tile by tile.

    Pass 1 writes the scores ``Z = Q K^T / sqrt(Dh)`` to an ``(..., L, S)`` array, one
    ``(Br, Bc)`` tile at a time (the product done with the tiles of :func:`attention`, so it
    reads K once per query block). Pass 2 reads them back and writes the weights: with
    ``softmax_rows``, in blocks of that many whole rows, each read once (the rows fit in fast
    memory); otherwise with the ``(Br, Bc)`` tiles, each score read once when one tile spans
    all S columns and twice when not (statistics by the online rule, then normalisation).
    Pass 3 reads the weights and the values back, again tile by tile, and writes the output.
    The result equals :func:`attention` and
    :func:`mha.backends.np_backend.scaled_dot_product_attention` to rounding; it exists to count
    (``io_counter``) what materialising the scores and weights moves.

    Args:
        query: queries.
        key: keys.
        value: values.
        mask: boolean, True = may attend; broadcastable to ``(..., L, S)``.
        block_q: query rows per tile (Br).
        block_kv: key/value columns per tile (Bc).
        softmax_rows: rows per block of the softmax pass, or ``None`` for the tiles.
        io_counter: as in :func:`attention`; scores and weights are counted as they are
            written and read back (the mask is not counted).

    Shape:
        query ``(..., L, Dh)``, key ``(..., S, Dh)``, value ``(..., S, Dv)``. Returns output
        ``(..., L, Dv)`` and weights ``(..., L, S)``.

    Returns:
        ``(output, weights)``: the output and the weights (as they were stored in "slow
        memory").

    Raises:
        ValueError: the errors of :func:`attention`, or ``softmax_rows < 1``.
        TypeError: the errors of :func:`attention`, or a ``softmax_rows`` that is not an int.
    """
    batch, L, S, magnitudes = _check_attention(
        query, key, value, mask, block_q, block_kv, io_counter
    )
    if softmax_rows is not None:
        arguments.check_block_size("softmax_rows", softmax_rows)
    user_mask = mask
    dtype = query.dtype
    scale = dtype.type(1.0 / math.sqrt(query.shape[-1]))
    if mask is not None:
        mask = np.broadcast_to(mask, (*batch, L, S))
    row_blocks = [slice(i, min(i + block_q, L)) for i in range(0, L, block_q)]
    col_blocks = [slice(j, min(j + block_kv, S)) for j in range(0, S, block_kv)]
    scores = np.empty((*batch, L, S), dtype=dtype)  # (..., L, S) in slow memory
    for rows in row_blocks:  # pass 1: scores
        q_i = load(query, row_index(rows), io_counter) * scale  # (..., Br, Dh)
        for cols in col_blocks:
            k_j = load(key, row_index(cols), io_counter)  # (..., Bc, Dh)
            store(scores, (..., rows, cols), np.matmul(q_i, k_j.swapaxes(-1, -2)), io_counter)
    weights = np.empty_like(scores)  # (..., L, S) in slow memory
    if softmax_rows is None:  # pass 2: softmax by tiles
        for rows in row_blocks:
            _softmax_tiles(scores, weights, mask, rows, col_blocks, io_counter)
    else:  # pass 2: softmax of blocks of whole rows, each score read once
        for i0 in range(0, L, softmax_rows):
            whole = (..., slice(i0, min(i0 + softmax_rows, L)), slice(None))
            keep = None if mask is None else mask[whole]
            store(weights, whole, _normalise(load(scores, whole, io_counter), keep), io_counter)
    del scores
    out = np.empty((*batch, L, value.shape[-1]), dtype=dtype)  # (..., L, Dv)
    for rows in row_blocks:  # pass 3: weighted sum
        acc = np.zeros((*batch, rows.stop - rows.start, value.shape[-1]), dtype=dtype)
        for cols in col_blocks:
            p = load(weights, (..., rows, cols), io_counter)  # (..., Br, Bc)
            acc += np.matmul(p, load(value, row_index(cols), io_counter))  # (..., Br, Dv)
        store(out, row_index(rows), acc, io_counter)
    overflow.check_attention_range(
        "tiled.three_pass_attention output", out, magnitudes, query, key, value, user_mask, NUMPY
    )
    return out, weights
