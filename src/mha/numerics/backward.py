"""The backward pass of multi-head attention, by hand, in NumPy.

Each function is the gradient of the forward function of the same name: given the gradient
of a loss with respect to a forward function's output (``d_out``), it returns the gradients
with respect to that function's inputs. For scaled dot-product attention
``O = A V``, ``A = softmax(Z)``, ``Z = Q K^T / sqrt(Dh)`` (``Z`` the scores; ``S`` is the
key/value length, as everywhere in the book):

    ``dV = A^T dO``,  ``dA = dO V^T``,  ``dZ = A * (dA - rowsum(dA * A))``,
    ``dQ = dZ K / sqrt(Dh)``,  ``dK = dZ^T Q / sqrt(Dh)``.

:func:`softmax` and :func:`scaled_dot_product_attention` differentiate the functions of
:mod:`mha.backends.np_backend` from the stored weights ``A``; :func:`tiled_attention` differentiates
:func:`mha.backends.tiled.attention` from its log-sum-exp instead, recomputing ``A`` one tile at a
time (``rowsum(dA * A)`` equals ``rowsum(dO * O)``, which needs no ``A``).
:func:`multi_head_attention` differentiates the whole layer of
:func:`mha.backends.np_backend.multi_head_attention` (projections and biases, head split and merge,
output projection, masks) from what :func:`multi_head_attention_forward` saved, and
:func:`mha.numerics.gradcheck.compare_with_autograd` checks it against PyTorch autograd within
:func:`mha.numerics.tolerance.gradient_tolerance`.

Grouped-query attention (``H_kv < H`` key/value heads, :class:`mha.MHAParams`) is the
general case: each key/value head serves the ``G = H / H_kv`` query heads of its group, and
since it is used ``G`` times its gradient, and those of ``W_k``, ``W_v`` and their biases,
are the sums over the group (multi-head attention is ``H_kv = H``, multi-query ``H_kv = 1``).

Masked entries have zero weight and so zero gradient; a fully masked query row has zero
output and passes no gradient to the queries, keys or values.

Rotary positions (:mod:`mha.core.rotary`) turn each query and key by an orthogonal matrix
``R_p``, so their gradient turns back by its transpose: ``dq = R_p^T d(R_p q)``, the inverse
rotation (:func:`mha.core.rotary.rotate` with ``inverse=True``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TypeVar

import numpy as np

from mha.backends import np_backend, tiled
from mha.backends._tiles import (
    IOCounter,
    check_io_counter,
    load,
    row_index,
    store,
    tile_causal_offset,
    tile_mask,
)
from mha.core import _groups, mask_rules
from mha.core._checks import arguments, layer, numpy_arrays
from mha.core.params import MHAParams
from mha.core.rotary import Rotary, rotate, rotated
from mha.numerics._backward_steps import (
    lifted,
    linear_backward,
    sdpa_backward,
    sdpa_magnitudes,
    softmax_backward,
    turned_magnitudes,
    unbroadcast,
)

Grads = TypeVar("Grads", bound=tuple[np.ndarray, ...])

BACKWARD_FORMS = ("fused", "tiled")

# The tiles of the tiled backward, and of the forward that saves for it: 128 x 128, smaller
# than the forward's default (mha.backends.tiled.DEFAULT_BLOCK_Q). Per tile the backward
# holds the recomputed weights P, dP and their products into dQ and dK, several tiles where
# the forward holds one, and a training step keeps its memory below one score tensor from
# short lengths on (with 4 heads of width 16 at L = S = 512: 256 x 256 tiles held more).
BACKWARD_BLOCKS = (128, 128)


def softmax(weights: np.ndarray, d_weights: np.ndarray) -> np.ndarray:
    """Gradient of :func:`mha.backends.np_backend.softmax` with respect to its scores.

    With ``A = softmax(Z)`` row by row, ``dA_ij / dZ_ik = A_ij (delta_jk - A_ik)``, so
    ``dZ = A * (dA - rowsum(dA * A))``. A masked entry (weight 0) gets gradient 0.

    Args:
        weights: the softmax output ``A``.
        d_weights: the gradient of the loss with respect to ``A``.

    Shape:
        weights and d_weights ``(..., S)``; returns ``(..., S)``.

    Returns:
        ``dZ``, the gradient with respect to the scores.

    Raises:
        ValueError: if the shapes differ, an input is not finite, or the gradient overflows
            the dtype.
        TypeError: if an input is not a float array, or the dtypes differ.
    """
    numpy_arrays.check_array("weights", weights)
    numpy_arrays.check_array("d_weights", d_weights)
    arguments.check_same_dtype({"weights": weights, "d_weights": d_weights})
    numpy_arrays.check_shape("d_weights", d_weights, weights.shape, "weights.shape")
    d_scores = softmax_backward(weights, d_weights.copy())
    numpy_arrays.check_result("backward.softmax gradient", d_scores)
    return d_scores


def _check_sdpa_grads(query, key, value, d_out, extra: dict) -> tuple[tuple, int, int]:
    named = {"query": query, "key": key, "value": value, "d_out": d_out} | extra
    for name, x in arguments.distinct(*named.items()):
        numpy_arrays.check_array(name, x, check_finite=name != "lse")
    arguments.check_same_dtype(named)
    L, S, _, Dv = arguments.check_qkv(query, key, value)
    batch = arguments.broadcast_batch(query, key, value)
    numpy_arrays.check_shape("d_out", d_out, (*batch, L, Dv), "(..., L, Dv)")
    return batch, L, S


def scaled_dot_product_attention(
    query: np.ndarray, key: np.ndarray, value: np.ndarray, weights: np.ndarray, d_out: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Gradients of :func:`mha.backends.np_backend.scaled_dot_product_attention` from its weights.

    ``dV = A^T dO``, ``dA = dO V^T``, ``dZ = A * (dA - rowsum(dA * A))``,
    ``dQ = dZ K / sqrt(Dh)``, ``dK = dZ^T Q / sqrt(Dh)``. The mask acts through ``A``
    (zero where masked), so it is not an argument. Leading (batch) dimensions that were
    broadcast are summed over.

    Args:
        query: the forward's queries.
        key: its keys.
        value: its values.
        weights: the forward's attention weights ``A`` (as it returned them).
        d_out: the gradient of the loss with respect to the output.

    Shape:
        query ``(..., L, Dh)``, key ``(..., S, Dh)``, value ``(..., S, Dv)``, weights
        ``(..., L, S)``, d_out ``(..., L, Dv)``. Returns ``d_query``, ``d_key``, ``d_value``
        of the shapes of query, key and value.

    Returns:
        ``(d_query, d_key, d_value)``.

    Raises:
        ValueError: if an input has fewer than 2 dimensions, the widths of query and key or
            the lengths of key and value differ, the head width is 0, a length is 0, the
            leading dimensions do not broadcast, ``weights`` is not ``(..., L, S)`` or
            ``d_out`` not ``(..., L, Dv)`` of the broadcast leading shape, an input is not
            finite, or a gradient overflows the dtype.
        TypeError: if an input is not a float32/float64 NumPy array, or the dtypes differ.
    """
    batch, L, S = _check_sdpa_grads(query, key, value, d_out, {"weights": weights})
    numpy_arrays.check_shape("weights", weights, (*batch, L, S), "(..., L, S)")
    return _checked(
        "backward.scaled_dot_product_attention", sdpa_backward(query, key, value, weights, d_out)
    )


def _checked(name: str, grads: Grads) -> Grads:
    """``grads``, each checked to be finite (an overflow of the dtype raises)."""
    for what, g in zip(("d_query", "d_key", "d_value"), grads, strict=False):
        numpy_arrays.check_result(f"{name} {what}", g)
    return grads


def _tiled_backward(
    q, k, v_, out, lse, d_out, mask, causal, block_q, block_kv,
    offset=0, io=None,
):  # fmt: skip
    batch, L, S = out.shape[:-2], q.shape[-2], k.shape[-2]
    scale = q.dtype.type(1.0 / math.sqrt(q.shape[-1]))
    if mask is not None:
        mask = np.broadcast_to(mask, (*batch, L, S))  # a view: no copy
    maskable = mask is not None or causal
    lse = lse[..., None]  # (..., L, 1): a view
    delta = np.empty_like(lse)  # rowsum(dO * O): (..., L, 1)
    for i0 in range(0, L, block_q):  # a first pass over the query blocks
        at = row_index(slice(i0, min(i0 + block_q, L)))  # the block's rows
        do_o = load(d_out, at, io) * load(out, at, io)  # (..., Br, Dv)
        store(delta, at, do_o.sum(axis=-1, keepdims=True), io)
    # dQ, dK, dV: (..., L, Dh), (..., S, Dh), (..., S, Dv)
    d_query = np.zeros((*batch, L, q.shape[-1]), dtype=q.dtype)
    d_key = np.empty((*batch, S, k.shape[-1]), dtype=q.dtype)
    d_value = np.empty((*batch, S, v_.shape[-1]), dtype=q.dtype)
    for j0 in range(0, S, block_kv):
        cols = slice(j0, min(j0 + block_kv, S))
        # (..., Bc, Dh|Dv): kept in fast memory with their gradients
        k_j, v_j = load(k, row_index(cols), io), load(v_, row_index(cols), io)
        dk_j = np.zeros_like(d_key[..., cols, :])
        dv_j = np.zeros_like(d_value[..., cols, :])
        for i0 in range(0, L, block_q):
            rows = slice(i0, min(i0 + block_q, L))
            keep = None
            if maskable:
                keep = tile_mask(mask, causal, rows, cols, offset=offset)
            if keep is False:
                continue
            at = row_index(rows)
            # (..., Br, Dh), (..., Br, Dv), then (..., Br, 1) twice
            q_i, do_i = load(q, at, io), load(d_out, at, io)
            lse_i, delta_i = load(lse, at, io), load(delta, at, io)
            # exp(s - lse) is 0 if lse = +inf: a fully masked row
            lse_i = np.where(np.isneginf(lse_i), np.inf, lse_i)
            # (..., Br, Dh) @ (..., Dh, Bc) -> (..., Br, Bc)
            s = np.matmul(q_i * scale, k_j.swapaxes(-1, -2))
            if keep is not None:
                np.copyto(s, -np.inf, where=~keep)
            s -= lse_i
            p = np.exp(s, out=s)  # the weights of this tile, recomputed
            # dV: (..., Bc, Br) @ (..., Br, Dv)
            dv_j += np.matmul(p.swapaxes(-1, -2), do_i)
            # dA: (..., Br, Dv) @ (..., Dv, Bc)
            dp = np.matmul(do_i, v_j.swapaxes(-1, -2))
            dp -= delta_i
            dp *= p
            dp *= scale  # dZ / sqrt(Dh)
            # dQ: read, add (..., Br, Bc) @ (..., Bc, Dh), write back
            dq_i = load(d_query, at, io) + np.matmul(dp, k_j)
            store(d_query, at, dq_i, io)
            # dK: (..., Bc, Br) @ (..., Br, Dh)
            dk_j += np.matmul(dp.swapaxes(-1, -2), q_i)
        store(d_key, row_index(cols), dk_j, io)
        store(d_value, row_index(cols), dv_j, io)
    return (
        unbroadcast(d_query, q.shape),
        unbroadcast(d_key, k.shape),
        unbroadcast(d_value, v_.shape),
    )


def tiled_attention(
    query: np.ndarray,
    key: np.ndarray,
    value: np.ndarray,
    out: np.ndarray,
    lse: np.ndarray,
    d_out: np.ndarray,
    mask: np.ndarray | None = None,
    *,
    causal: bool = False,
    align: str = "top_left",
    block_q: int = BACKWARD_BLOCKS[0],
    block_kv: int = BACKWARD_BLOCKS[1],
    io_counter: IOCounter | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Gradients of :func:`mha.backends.tiled.attention` from its output and log-sum-exp, tile by
    tile.

    No ``(L, S)`` array is formed. For each block ``K^(j)``, ``V^(j)`` of keys and values
    (outer loop) and each block ``Q^(i)`` of queries (inner loop) the tile ``P`` of the
    weights ``A`` is recomputed as ``P = exp(Q^(i) K^(j)^T / sqrt(Dh) - lse^(i))``; then
    ``dV^(j) += P^T dO^(i)``, ``dP = dO^(i) V^(j)^T``, ``dZ = P * (dP - delta^(i))`` with
    ``delta = rowsum(dO * O)`` (equal to ``rowsum(dA * A)``),
    ``dQ^(i) += dZ K^(j) / sqrt(Dh)`` and ``dK^(j) += dZ^T Q^(i) / sqrt(Dh)``.

    Slow memory holds the arrays passed in and returned, and ``delta``; fast memory holds
    the tiles. A first pass over the query blocks reads ``O`` and ``dO`` and writes
    ``delta``. Each key block loads ``K^(j)`` and ``V^(j)`` once and stores ``dK^(j)`` and
    ``dV^(j)`` once; each tile loads ``Q^(i)``, ``dO^(i)``, ``lse^(i)`` and ``delta^(i)``
    and reads and writes back ``dQ^(i)``. With ``T_c = ceil(S / block_kv)`` key blocks and
    no tile skipped, that is ``2 L Dv + S (Dh + Dv) + T_c (2 L Dh + L Dv + 2 L)`` elements
    read and ``L + S (Dh + Dv) + T_c L Dh`` written, per batch entry.

    Args:
        query: the forward's queries.
        key: its keys.
        value: its values.
        out: the forward's output.
        lse: the forward's log-sum-exp (``-inf`` in fully masked rows).
        d_out: the gradient of the loss with respect to the output.
        mask: the forward's mask (boolean, True = may attend).
        causal: the forward's ``causal``.
        align: the forward's ``align``; the tiles wholly above its diagonal are skipped.
        block_q: query rows per tile (need not be the forward's).
        block_kv: key/value rows per tile.
        io_counter: if given, ``io_counter["read"]`` and ``io_counter["write"]`` grow by
            the elements moved between slow memory and the tiles, as above (the mask, read
            tile by tile, is not counted).

    Shape:
        query ``(..., L, Dh)``, key ``(..., S, Dh)``, value ``(..., S, Dv)``, out and d_out
        ``(..., L, Dv)``, lse ``(..., L)``. Returns ``d_query``, ``d_key``, ``d_value`` of the
        shapes of query, key and value.

    Returns:
        ``(d_query, d_key, d_value)``, computed tile by tile from ``lse``.

    Raises:
        ValueError: on the shapes refused by :func:`scaled_dot_product_attention` (and
            ``out`` not ``d_out``'s shape, ``lse`` not ``(..., L)``), non-finite inputs
            (``lse`` may be ``-inf``), a mask that does not broadcast, a block size below 1,
            gradients that overflow the dtype, an ``align`` other than ``"top_left"`` and
            ``"bottom_right"``, or ``"bottom_right"`` without ``causal=True``.
        TypeError: on non-float or mixed dtypes, a non-boolean mask, a non-int block size,
            a ``causal`` that is not a bool, or an ``io_counter`` of another kind.
    """
    batch, L, S = _check_sdpa_grads(query, key, value, d_out, {"out": out, "lse": lse})
    numpy_arrays.check_shape("out", out, d_out.shape, "(..., L, Dv)")
    numpy_arrays.check_shape("lse", lse, (*batch, L), "(..., L)")
    if np.isnan(lse).any() or np.isposinf(lse).any():
        raise ValueError("lse must be finite or -inf; got NaN or +inf values")
    if mask is not None:
        numpy_arrays.check_mask(mask, (*batch, L, S))
    offset = tile_causal_offset(L, S, align, causal=causal)
    arguments.check_block_size("block_q", block_q)
    arguments.check_block_size("block_kv", block_kv)
    check_io_counter(io_counter)
    grads = _tiled_backward(
        query, key, value, out, lse, d_out, mask, causal, block_q, block_kv, offset, io_counter
    )
    return _checked("backward.tiled_attention", grads)


def split_heads(d_heads: np.ndarray) -> np.ndarray:
    """Gradient of :func:`mha.backends.np_backend.split_heads`: a permutation, so its inverse.

    Args:
        d_heads: the gradient with respect to the per-head tensor.

    Shape:
        ``(B, H, L, Dh)`` -> ``(B, L, D)``.

    Returns:
        The gradient with respect to the tensor before the split.

    Raises:
        ValueError: if ``d_heads`` is not 4-D or not finite.
        TypeError: if ``d_heads`` is not a float32/float64 NumPy array.
    """
    numpy_arrays.check_array("d_heads", d_heads)
    arguments.check_rank("d_heads", d_heads, 4, "(B, H, L, Dh)")
    return np_backend.merge_heads(d_heads)


def merge_heads(d_x: np.ndarray, num_heads: int) -> np.ndarray:
    """Gradient of :func:`mha.backends.np_backend.merge_heads`: a permutation, so its inverse.

    Args:
        d_x: the gradient with respect to the merged tensor.
        num_heads: the number of heads, H.

    Shape:
        ``(B, L, D)`` -> ``(B, H, L, Dh)``.

    Returns:
        The gradient with respect to the per-head tensor.

    Raises:
        ValueError: if ``d_x`` is not 3-D or not finite, or ``num_heads`` is below 1 or
            does not divide its width.
        TypeError: if ``d_x`` is not a float32/float64 NumPy array, or ``num_heads`` is not
            an int.
    """
    numpy_arrays.check_array("d_x", d_x)
    arguments.check_rank("d_x", d_x, 3, "(B, L, D)")
    return np_backend.split_heads(d_x, num_heads)


def linear(
    x: np.ndarray, weight: np.ndarray, d_y: np.ndarray, *, bias: bool = True
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """Gradients of ``y = x @ weight (+ bias)``: ``dx = dy W^T``, ``dW = x^T dy``, ``db = sum dy``.

    The sums for ``dW`` and ``db`` run over every leading (batch and position) axis.

    Args:
        x: the input.
        weight: the weight.
        d_y: the gradient of the loss with respect to ``y``.
        bias: whether the forward added a bias (``d_bias`` is ``None`` otherwise).

    Shape:
        x ``(..., D_in)``, weight ``(D_in, D_out)``, d_y ``(..., D_out)``. Returns d_x
        ``(..., D_in)``, d_weight ``(D_in, D_out)`` and d_bias ``(D_out,)``.

    Returns:
        ``(d_x, d_weight, d_bias)``; ``d_bias`` is ``None`` without a bias.

    Raises:
        ValueError: if ``weight`` is not 2-D, the width of ``x`` is not ``weight``'s rows,
            ``d_y`` is not ``(*x.shape[:-1], D_out)``, an input is not finite, or a gradient
            overflows the dtype.
        TypeError: on non-float or mixed dtypes, or a ``bias`` that is not a bool.
    """
    for name, a in (("x", x), ("weight", weight), ("d_y", d_y)):
        numpy_arrays.check_array(name, a)
    arguments.check_same_dtype({"x": x, "weight": weight, "d_y": d_y})
    arguments.check_rank("weight", weight, 2, "(D_in, D_out)")
    if x.ndim < 1 or x.shape[-1] != weight.shape[0]:
        raise ValueError(
            f"x must have shape (..., D_in) with D_in = weight.shape[0] = {weight.shape[0]}; "
            f"got x.shape={x.shape}, weight.shape={weight.shape}"
        )
    numpy_arrays.check_shape("d_y", d_y, (*x.shape[:-1], weight.shape[1]), "(..., D_out)")
    arguments.check_bool("bias", bias)
    d_x, d_weight, d_bias = linear_backward(x, weight, d_y, bias)
    for what, g in (("d_x", d_x), ("d_weight", d_weight), ("d_bias", d_bias)):
        if g is not None:
            numpy_arrays.check_result(f"backward.linear {what}", g)
    return d_x, d_weight, d_bias


def _check_layer(query, key, value, params, mask, rotary=None) -> dict[str, float]:
    """The argument checks of :func:`mha.backends.np_backend.multi_head_attention`; the
    magnitudes."""
    return layer.check_mha(
        query, key, value, params, mask, form="fused", need_weights=False,
        kind=numpy_arrays.NUMPY, rotary=rotary,
    )  # fmt: skip


@dataclass(frozen=True)
class MHASaved:
    """What :func:`multi_head_attention_forward` keeps for the backward pass.

    Attributes:
        query: the layer's query input ``(B, L, D)``.
        key: its key input ``(B, S, D)``.
        value: its value input ``(B, S, D)``.
        params: its parameters.
        mask: its mask, or ``None``.
        form: ``"fused"`` (weights stored) or ``"tiled"`` (log-sum-exp stored).
        causal: ``None``, or the alignment of its causal diagonal (``"top_left"`` or
            ``"bottom_right"``).
        q: per-head queries ``(B, H, L, Dh)`` (turned by ``rotary`` when it is set).
        k: per-head keys ``(B, H_kv, S, Dh)`` (``H_kv = H`` for multi-head attention;
            turned by ``rotary`` when it is set).
        v: per-head values ``(B, H_kv, S, Dh)``.
        heads: per-head attention outputs ``(B, H, L, Dh)``.
        weights: the attention weights ``(B, H, L, S)`` (fused form), else ``None``.
        lse: the log-sum-exp ``(B, H, L)`` (tiled form), else ``None``.
        block_q: query rows per tile of the tiled form.
        block_kv: key/value rows per tile of the tiled form.
        rotary: its rotary positions, or ``None``.
    """

    query: np.ndarray
    key: np.ndarray
    value: np.ndarray
    params: MHAParams
    mask: np.ndarray | None
    form: str
    causal: str | None
    q: np.ndarray
    k: np.ndarray
    v: np.ndarray
    heads: np.ndarray
    weights: np.ndarray | None
    lse: np.ndarray | None
    block_q: int
    block_kv: int
    rotary: Rotary | None = None


@dataclass(frozen=True)
class MHAGradients:
    """Gradients of a loss with respect to the inputs and parameters of one MHA layer.

    For self-attention (one array passed as query, key and value) the gradient with respect
    to that array is ``d_query + d_key + d_value``.

    Attributes:
        d_query: ``(B, L, D)``.
        d_key: ``(B, S, D)``.
        d_value: ``(B, S, D)``.
        d_params: gradients of ``w_qkv``, ``w_o``, ``b_qkv``, ``b_o`` as ``MHAParams``
            (``None`` biases where the layer has none).
    """

    d_query: np.ndarray
    d_key: np.ndarray
    d_value: np.ndarray
    d_params: MHAParams


def multi_head_attention_forward(
    query: np.ndarray,
    key: np.ndarray,
    value: np.ndarray,
    params: MHAParams,
    mask: np.ndarray | None = None,
    *,
    causal: bool = False,
    align: str = "top_left",
    form: str = "fused",
    block_q: int = BACKWARD_BLOCKS[0],
    block_kv: int = BACKWARD_BLOCKS[1],
    rotary: Rotary | None = None,
) -> tuple[np.ndarray, MHASaved]:
    """The forward of :func:`mha.backends.np_backend.multi_head_attention`, keeping what backward
    needs.

    The ``"fused"`` form stores the ``(B, H, L, S)`` weights; the ``"tiled"`` form runs
    :func:`mha.backends.tiled.attention` and stores only the ``(B, H, L)`` log-sum-exp. Both store
    the per-head queries, keys, values and outputs, ``O(B L D)`` numbers. With grouped-query
    parameters the keys and values have ``H_kv`` heads, each shared by a group of ``G``
    query heads (broadcast, not copied). With ``causal``, the tiled form and its backward skip
    every tile wholly above the diagonal; the fused form attends under
    :func:`mha.backends.np_backend.with_causal`'s mask. With ``rotary`` the stored queries and
    keys are the turned ones.

    Args:
        query: queries.
        key: keys.
        value: values.
        params: the layer's parameters, NumPy arrays of the inputs' dtype.
        mask: boolean, True = may attend; broadcastable to ``(B, H, L, S)``.
        causal: as in :func:`mha.backends.np_backend.multi_head_attention`.
        align: as there.
        form: ``"fused"`` or ``"tiled"``.
        block_q: query rows per tile (tiled form).
        block_kv: key/value rows per tile (tiled form).
        rotary: rotary positions, as in :func:`mha.backends.np_backend.multi_head_attention`.

    Shape:
        query ``(B, L, D)``, key and value ``(B, S, D)``. Returns output ``(B, L, D)``.

    Returns:
        The output and an :class:`MHASaved` for :func:`multi_head_attention`.

    Raises:
        ValueError: the errors of :func:`mha.backends.np_backend.multi_head_attention`, or a
            ``form`` other than ``"fused"`` and ``"tiled"``.
        TypeError: the errors of :func:`mha.backends.np_backend.multi_head_attention`.
    """
    if form not in BACKWARD_FORMS:
        raise ValueError(f"form must be one of {BACKWARD_FORMS}; got form={form!r}")
    magnitudes = _check_layer(query, key, value, params, mask, rotary)
    diagonal = layer.causal_alignment(causal, align)  # None, or where the causal diagonal sits
    arguments.check_block_size("block_q", block_q)
    arguments.check_block_size("block_kv", block_kv)
    H, H_kv = params.num_heads, params.num_kv_heads

    def heads_of(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, n: int) -> np.ndarray:
        return np_backend.split_heads(np_backend.linear(x, w, b), n)  # (B, N, D) -> (B, n, N, Dh)

    q = heads_of(query, params.w_q, params.b_q, H)  # (B, H, L, Dh)
    k = heads_of(key, params.w_k, params.b_k, H_kv)  # (B, H_kv, S, Dh)
    val = heads_of(value, params.w_v, params.b_v, H_kv)  # (B, H_kv, S, Dh)
    q, k = rotated(q, k, rotary)  # turned by their positions (rotary=None: unchanged)
    qg = _groups.group_queries(q, H_kv)  # (B, H_kv, G, L, Dh)
    kg, vg = _groups.group_kv(k, H, H_kv), _groups.group_kv(val, H, H_kv)  # (B, H_kv, 1, S, Dh)
    maskg = _groups.group_mask(mask, H_kv) if H_kv < H else mask
    weights = lse = None
    if form == "fused":  # (B, H_kv, G, L, Dh), (B, H_kv, G, L, S)
        keep = np_backend.with_causal(maskg, diagonal, q.shape[2], k.shape[2])  # (..., L, S)
        heads, weights = np_backend.scaled_dot_product_attention(qg, kg, vg, keep)
        weights = _groups.ungroup(weights, H, H_kv)  # (B, H, L, S)
    else:  # (B, H_kv, G, L, Dh), (B, H_kv, G, L)
        heads, lse = tiled.attention(
            qg, kg, vg, maskg, causal=causal, align=align, block_q=block_q, block_kv=block_kv
        )
        lse = _groups.ungroup(lse, H, H_kv)  # (B, H, L)
    heads = _groups.ungroup(heads, H, H_kv)  # (B, H, L, Dh)
    out = np_backend.linear(np_backend.merge_heads(heads), params.w_o, params.b_o)  # (B, L, D)
    layer.check_mha_range(
        out, magnitudes, query, key, value, params, mask, cache=None, kind=numpy_arrays.NUMPY,
        causal=diagonal, rotary=rotary, name="multi_head_attention_forward output",
    )  # fmt: skip
    kept = (q, k, val, heads, weights, lse, block_q, block_kv)
    saved = MHASaved(query, key, value, params, mask, form, diagonal, *kept, rotary=rotary)
    return out, saved


def _check_d_out(saved: MHASaved, d_out: np.ndarray) -> None:
    """The checks of :func:`multi_head_attention` and :func:`gradient_magnitudes`, one set."""
    if not isinstance(saved, MHASaved):
        raise TypeError(f"saved must be MHASaved; got {arguments.describe(saved)}")
    numpy_arrays.check_array("d_out", d_out)
    arguments.check_same_dtype({"d_out": d_out, "saved.query": saved.query})
    numpy_arrays.check_shape("d_out", d_out, saved.query.shape, "(B, L, D)")


def multi_head_attention(saved: MHASaved, d_out: np.ndarray) -> MHAGradients:
    """Gradients of :func:`mha.backends.np_backend.multi_head_attention` from a saved forward.

    In order: the output projection (:func:`linear`), the head merge
    (:func:`merge_heads`), attention (:func:`scaled_dot_product_attention` from the stored
    weights, or :func:`tiled_attention` from the log-sum-exp), the rotary positions if any
    (the inverse rotation), the head split (:func:`split_heads`) and the three input
    projections (:func:`linear`).

    Args:
        saved: what :func:`multi_head_attention_forward` returned with the output.
        d_out: the gradient of the loss with respect to the output.

    Shape:
        d_out ``(B, L, D)``.

    Returns:
        :class:`MHAGradients`.

    Raises:
        ValueError: if ``d_out`` is not ``(B, L, D)`` or not finite, or a gradient overflows
            the dtype.
        TypeError: if ``saved`` is not an :class:`MHASaved`, or ``d_out`` is not a float
            array of the layer's dtype.
    """
    _check_d_out(saved, d_out)
    p, H, H_kv = saved.params, saved.params.num_heads, saved.params.num_kv_heads
    bias_in, bias_out = p.b_qkv is not None, p.b_o is not None
    concat = np_backend.merge_heads(saved.heads)  # (B, H, L, Dh) -> (B, L, D)
    d_concat, d_w_o, d_b_o = linear_backward(concat, p.w_o, d_out, bias_out)
    d_heads = _groups.group_queries(
        merge_heads(d_concat, H), H_kv
    )  # (B, L, D) -> (B, H_kv, G, L, Dh)
    qg = _groups.group_queries(saved.q, H_kv)  # (B, H_kv, G, L, Dh)
    kg, vg = (
        _groups.group_kv(saved.k, H, H_kv),
        _groups.group_kv(saved.v, H, H_kv),
    )  # (B, H_kv, 1, S, Dh)
    if saved.form == "fused":  # d_key, d_value summed over each group by _unbroadcast
        weights = _groups.group_queries(saved.weights, H_kv)  # (B, H_kv, G, L, S)
        dq, dk, dv = sdpa_backward(qg, kg, vg, weights, d_heads)
    else:
        maskg = _groups.group_mask(saved.mask, H_kv) if H_kv < H else saved.mask
        heads, lse = (
            _groups.group_queries(saved.heads, H_kv),
            _groups.group_queries(saved.lse, H_kv),
        )
        L, S = saved.q.shape[2], saved.k.shape[2]
        offset = 0 if saved.causal is None else mask_rules.causal_offset(L, S, saved.causal)
        blocks, causal = (saved.block_q, saved.block_kv), saved.causal is not None
        dq, dk, dv = _tiled_backward(
            qg, kg, vg, heads, lse, d_heads, maskg, causal, *blocks, offset=offset
        )
    dq = _groups.ungroup(dq, H, H_kv)  # (B, H_kv, G, L, Dh) -> (B, H, L, Dh)
    dk, dv = (
        _groups.ungroup(dk, H, H_kv),
        _groups.ungroup(dv, H, H_kv),
    )  # (B, H_kv, 1, S, Dh) -> (B, H_kv, S, Dh)
    if saved.rotary is not None:  # R^T turns the gradients back: the inverse rotation
        dq, dk = (rotate(g, saved.rotary, inverse=True) for g in (dq, dk))
    grads = [
        linear_backward(x, w, split_heads(d), bias_in)  # (B, N, D) each
        for x, w, d in ((saved.query, p.w_q, dq), (saved.key, p.w_k, dk), (saved.value, p.w_v, dv))
    ]
    d_w_qkv = np.concatenate([g[1] for g in grads], axis=1)  # -> (D, D + 2 H_kv Dh)
    d_b_qkv = np.concatenate([g[2] for g in grads]) if bias_in else None  # (D + 2 H_kv Dh,)
    d_params = MHAParams(d_w_qkv, d_w_o, d_b_qkv, d_b_o, H, H_kv)
    result = MHAGradients(grads[0][0], grads[1][0], grads[2][0], d_params)
    named = {"d_query": result.d_query, "d_key": result.d_key, "d_value": result.d_value}
    named |= {f"d_params.{n}": getattr(d_params, n) for n in ("w_qkv", "w_o", "b_qkv", "b_o")}
    for what, g in named.items():
        if g is not None:
            numpy_arrays.check_result(f"backward.multi_head_attention {what}", g)
    return result


def attention_gradient_magnitudes(
    query: np.ndarray,
    key: np.ndarray,
    value: np.ndarray,
    weights: np.ndarray,
    d_out: np.ndarray,
) -> tuple[tuple[np.ndarray, np.ndarray, np.ndarray], float, int]:
    """The backward of :func:`scaled_dot_product_attention` run on magnitudes, in float64.

    Absolute values throughout, ``A * (dA + rowsum(dA * A))`` for the softmax, and the
    dtype's ``tiny`` added to every rounded stage for underflow: what
    :func:`mha.numerics.tolerance.attention_gradient_tolerance` scales into a bound.

    Args:
        query: the queries of the forward whose backward is bounded.
        key: the keys of that forward.
        value: the values of that forward.
        weights: the attention weights that forward computed.
        d_out: the gradient of a loss with respect to that forward's output.

    Shape:
        As in :func:`scaled_dot_product_attention`; the magnitudes have the shapes of query,
        key and value.

    Returns:
        ``((for d_query, for d_key, for d_value), c, n)``: the magnitudes, the largest score
        magnitude ``c`` and the longest sum ``n``.

    Raises:
        The errors of :func:`scaled_dot_product_attention`.
    """
    batch, L, S = _check_sdpa_grads(query, key, value, d_out, {"weights": weights})
    numpy_arrays.check_shape("weights", weights, (*batch, L, S), "(..., L, S)")
    q, k, v_, a, d_o = (np.abs(x).astype(np.float64) for x in (query, key, value, weights, d_out))
    tiny = float(np.finfo(query.dtype).tiny)  # for underflow, as in gradient_magnitudes
    d_q, d_k, d_v, c_max = sdpa_magnitudes(q, k, v_, a + tiny, d_o, tiny)
    n = max(L, S, query.shape[-1], value.shape[-1])
    shapes = (query.shape, key.shape, value.shape)
    d_q, d_k, d_v = (unbroadcast(g, s) for g, s in zip((d_q, d_k, d_v), shapes, strict=True))
    return (d_q, d_k, d_v), c_max, n


def gradient_magnitudes(saved: MHASaved, d_out: np.ndarray) -> tuple[MHAGradients, float, int]:
    """The backward of :func:`multi_head_attention` run on magnitudes, in float64.

    Every input, weight and bias replaced by its absolute value and
    ``dZ = A * (dA - rowsum(dA * A))`` by ``A * (dA + rowsum(dA * A))``, with the dtype's
    ``tiny`` added to every rounded intermediate: each result bounds the sum of the absolute
    values of everything added into its gradient, which
    :func:`mha.numerics.tolerance.gradient_tolerance` scales into a bound. Rotary positions
    turn the magnitudes of the queries and keys, and of their gradients, by the absolute
    values of the rotation's cosines and sines. It forms the ``(B, H, L, S)`` weights
    (recomputed for the tiled form).

    Args:
        saved: what :func:`multi_head_attention_forward` returned.
        d_out: the gradient of the loss with respect to the output.

    Shape:
        d_out ``(B, L, D)``.

    Returns:
        ``(magnitudes, c, n)``: :class:`MHAGradients` of float64 magnitudes, each of its
        gradient's shape, the largest score magnitude ``c`` and the longest sum ``n``.

    Raises:
        The errors of :func:`multi_head_attention`.
    """
    _check_d_out(saved, d_out)
    p = saved.params.map(lambda a: np.abs(a).astype(np.float64))
    H, H_kv = p.num_heads, p.num_kv_heads
    tiny = float(np.finfo(saved.query.dtype).tiny)  # u tiny bounds an underflow's error
    weights = _groups.group_queries(saved.weights, H_kv)  # (B, H_kv, G, L, S)
    if weights is None:
        q_g = _groups.group_queries(saved.q, H_kv)  # (B, H_kv, G, L, Dh)
        k_g, v_g = (
            _groups.group_kv(saved.k, H, H_kv),
            _groups.group_kv(saved.v, H, H_kv),
        )  # (B, H_kv, 1, S, Dh)
        mask = _groups.group_mask(saved.mask, H_kv) if H_kv < H else saved.mask
        mask = np_backend.with_causal(mask, saved.causal, saved.q.shape[2], saved.k.shape[2])
        weights = np_backend.scaled_dot_product_attention(q_g, k_g, v_g, mask)[1]
    A = weights.astype(np.float64) + tiny  # (B, H_kv, G, L, S)
    inputs = [np.abs(x).astype(np.float64) for x in (saved.query, saved.key, saved.value)]
    q = _groups.group_queries(
        np_backend.split_heads(np_backend.linear(inputs[0], p.w_q, p.b_q) + tiny, H), H_kv
    )
    k, val = (  # (B, H_kv, 1, S, Dh)
        _groups.group_kv(np_backend.split_heads(np_backend.linear(x, w, b) + tiny, H_kv), H, H_kv)
        for x, w, b in ((inputs[1], p.w_k, p.b_k), (inputs[2], p.w_v, p.b_v))
    )
    q, k = (turned_magnitudes(x, saved.rotary, tiny) for x in (q, k))
    d_out_abs = np.abs(d_out).astype(np.float64)
    concat = np_backend.merge_heads(_groups.ungroup(A @ val + tiny, H, H_kv))  # (B, L, D)
    d_concat, d_w_o, d_b_o = lifted(
        linear_backward(concat, p.w_o, d_out_abs, p.b_o is not None), tiny
    )
    d_heads = _groups.group_queries(merge_heads(d_concat, H), H_kv)  # (B, H_kv, G, L, Dh)
    d_q, d_k, d_v, c_max = sdpa_magnitudes(q, k, val, A, d_heads, tiny)
    bias = p.b_qkv is not None
    d_q = _groups.ungroup(d_q, H, H_kv)  # (B, H, L, Dh)
    d_k, d_v = (
        _groups.ungroup(unbroadcast(g, k.shape), H, H_kv) for g in (d_k, d_v)
    )  # (B, H_kv, S, Dh)
    d_q, d_k = (turned_magnitudes(g, saved.rotary, tiny) for g in (d_q, d_k))
    grads = [
        lifted(linear_backward(x, w, split_heads(d), bias), tiny)
        for x, w, d in zip(inputs, (p.w_q, p.w_k, p.w_v), (d_q, d_k, d_v), strict=True)
    ]
    B, L, D = saved.query.shape
    S = saved.key.shape[1]
    n = max(B * L, B * S, L, S, D, H // H_kv * L)  # the group sum of d_key adds G L terms
    d_params = MHAParams(
        np.concatenate([g[1] for g in grads], axis=1),
        d_w_o,
        None if p.b_qkv is None else np.concatenate([g[2] for g in grads]),
        None if p.b_o is None else d_b_o,
        H,
        H_kv,
    )
    d_query, d_key, d_value = (g[0] for g in grads)
    return MHAGradients(d_query, d_key, d_value, d_params), c_max, n
