"""Multi-head attention in NumPy: the reference implementation.

Same function and argument names as :mod:`mha.backends.torch_backend`, so a chapter switches
backend by changing one import. Inputs are batch first: ``(B, L, D)`` queries and
``(B, S, D)`` keys/values. Masks are boolean, **True = may attend**, broadcastable to
``(B, H, L, S)``, read as :mod:`mha.core.mask_rules` says.

Each form of multi-head attention is one function of pure math, with no check inside:
:func:`attention_per_head`, :func:`attention_fused`, :func:`attention_packed` and
:func:`attention_tiled`. :func:`multi_head_attention` checks the arguments, runs the form,
and checks the result's range.

A fully masked query row (no key may be attended) gets all-zero attention weights and a
zero attention output; in :func:`multi_head_attention` that row's output is the output
bias ``b_o`` (or zero). PyTorch's ``scaled_dot_product_attention`` gives the same zeros.

Empty batches (``B = 0``) are allowed and give empty outputs; empty sequences (``L = 0`` or
``S = 0``) raise. Every result is checked against overflow of its dtype: the largest
magnitudes of the inputs, which the finiteness checks find anyway, bound every stage, and
only when that bound comes near the dtype's largest value (inputs of about 1e16 in float32)
is the computation redone in float64 to find the stage that overflowed. An output that
would hold infinities or NaN, or wrong finite values from overflowed scores, raises
``ValueError`` naming that stage instead.
"""

from __future__ import annotations

import math

import numpy as np

from mha.backends import _docs, tiled
from mha.core._checks import arguments, arrays, layer, overflow
from mha.core._checks.numpy_arrays import NUMPY
from mha.core._groups import group_mask, head_slice
from mha.core.kv_cache import KVCache
from mha.core.mask_rules import causal_offset
from mha.core.params import MHAParams
from mha.core.rotary import Rotary, rotated

FORMS = layer.FORMS
"""The forms this backend computes: all four, ``"tiled"`` included."""


@_docs.shared(
    "causal_mask",
    _docs.NUMPY,
    device_arg="",
    device_value="",
    device_type="",
)
def causal_mask(q_len: int, kv_len: int | None = None, *, align: str = "top_left") -> np.ndarray:
    kv_len = q_len if kv_len is None else kv_len
    arguments.check_causal(q_len, kv_len, align)
    return np.tril(np.ones((q_len, kv_len), dtype=bool), k=causal_offset(q_len, kv_len, align))


@_docs.shared("key_padding_mask", _docs.NUMPY, lengths_type="")
def key_padding_mask(lengths: np.ndarray | list[int], kv_len: int) -> np.ndarray:
    arguments.check_length("kv_len", kv_len, "S")
    if isinstance(lengths, list | tuple) and len(lengths) == 0:
        lengths = np.zeros(0, dtype=np.int64)  # an empty list has no dtype to check
    try:
        lengths = np.asarray(lengths)
    except (TypeError, ValueError):
        raise TypeError(
            "lengths must be a 1-D sequence or array of integers; got "
            f"{arguments.describe(lengths)}"
        ) from None
    arguments.check_lengths(lengths, kv_len, np.issubdtype(lengths.dtype, np.integer), lengths)
    keep = np.arange(kv_len)[None, :] < lengths[:, None]  # (B, S)
    return keep[:, None, None, :]  # (B, S) -> (B, 1, 1, S)


@_docs.shared("with_causal", _docs.NUMPY, device_arg="")
def with_causal(
    mask: np.ndarray | None, causal: str | None, q_len: int, kv_len: int
) -> np.ndarray | None:
    if causal is None:
        return mask
    keep = causal_mask(q_len, kv_len, align=causal)  # (L, S)
    return keep if mask is None else mask & keep  # (..., L, S)


@overflow.silence_numpy_warnings
@_docs.shared(
    "softmax",
    _docs.NUMPY,
    softmax_note="``scores`` is left unchanged",
    zero_grad="",
    low_precision="",
    differentiable="",
)
def softmax(scores: np.ndarray, mask: np.ndarray | None = None) -> np.ndarray:
    arrays.check_softmax(scores, mask, NUMPY)
    return softmax_in_place(scores.copy(), mask)


def softmax_in_place(scores: np.ndarray, mask: np.ndarray | None = None) -> np.ndarray:
    """The masked softmax of :func:`softmax`, written over ``scores`` (no checks).

    Args:
        scores: the scores, overwritten.
        mask: boolean, True = may attend, or ``None``.

    Shape:
        scores ``(..., L, S)``; mask broadcastable to it. Returns ``(..., L, S)``.

    Returns:
        ``scores``, now holding the weights: rows sum to 1, fully masked rows are 0.
    """
    if mask is not None:
        np.copyto(scores, -np.inf, where=~mask)
    row_max = scores.max(axis=-1, keepdims=True)  # (..., L, 1)
    row_max[np.isneginf(row_max)] = 0.0  # fully masked rows: exp(-inf) = 0 everywhere
    scores -= row_max
    np.exp(scores, out=scores)
    total = scores.sum(axis=-1, keepdims=True)  # (..., L, 1)
    total[total == 0.0] = 1.0  # only fully masked rows sum to 0; they stay 0
    scores /= total
    return scores


@overflow.silence_numpy_warnings
@_docs.shared(
    "scaled_dot_product_attention",
    _docs.NUMPY,
    kind_errors=", or a masked array",
)
def scaled_dot_product_attention(
    query: np.ndarray, key: np.ndarray, value: np.ndarray, mask: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    magnitudes = arrays.check_attention(query, key, value, mask, NUMPY)
    out, weights = attend(query, key, value, mask)
    overflow.check_attention_range(
        "scaled_dot_product_attention output", out, magnitudes, query, key, value, mask, NUMPY
    )
    return out, weights


def attend(
    q: np.ndarray, k: np.ndarray, v: np.ndarray, mask: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Explicit attention ``softmax(Q K^T / sqrt(Dh)) V``, with its weights (no checks).

    When the scores have leading dimensions, it works on one slice of the first at a time:
    each slice's scores (e.g. one batch element's ``(H, L, S)``) are scaled, normalised and
    multiplied by the values while they are still in the processor's caches, instead of
    passing over the whole ``(..., L, S)`` tensor once per step. NumPy multiplies a stack of
    matrices one matrix at a time, so the result is the same as for the whole stack. The
    checked version is :func:`scaled_dot_product_attention`.

    Args:
        q: queries.
        k: keys.
        v: values.
        mask: boolean, True = may attend, broadcastable to ``(..., L, S)``, or ``None``.

    Shape:
        q ``(..., L, Dh)``, k ``(..., S, Dh)``, v ``(..., S, Dv)``. Returns ``(..., L, Dv)``
        and ``(..., L, S)``.

    Returns:
        ``(output, weights)``.
    """
    scale = q.dtype.type(1.0 / np.sqrt(q.shape[-1]))
    mask_lead = () if mask is None or mask.ndim <= 2 else mask.shape[:-2]
    lead = np.broadcast_shapes(q.shape[:-2], k.shape[:-2], mask_lead)  # the scores' batch
    if not lead or np.broadcast_shapes(lead, v.shape[:-2]) != lead:
        q = np.broadcast_to(q, (*lead, *q.shape[-2:]))  # (..., L, Dh), a view
        scores = np.matmul(q, k.swapaxes(-1, -2))  # (..., L, Dh) @ (..., Dh, S) -> (..., L, S)
        scores *= scale
        weights = softmax_in_place(scores, mask)  # (..., L, S)
        return np.matmul(weights, v), weights  # (..., L, S) @ (..., S, Dv) -> (..., L, Dv)
    L, S, Dv = q.shape[-2], k.shape[-2], v.shape[-1]
    dtype = np.result_type(q, k, v)
    weights = np.empty((*lead, L, S), dtype=dtype)
    out = np.empty((*lead, L, Dv), dtype=dtype)
    q, k = np.broadcast_to(q, (*lead, L, q.shape[-1])), np.broadcast_to(k, (*lead, *k.shape[-2:]))
    v = np.broadcast_to(v, (*lead, S, Dv))  # views
    if mask is not None:
        mask = np.broadcast_to(mask, (*lead, L, S))
    for i in range(lead[0]):
        scores = weights[i]  # (..., L, S) of slice i, written in place
        np.matmul(q[i], k[i].swapaxes(-1, -2), out=scores)
        scores *= scale
        softmax_in_place(scores, None if mask is None else mask[i])
        np.matmul(scores, v[i], out=out[i])  # (..., L, S) @ (..., S, Dv) -> (..., L, Dv)
    return out, weights


@_docs.shared("split_heads", _docs.NUMPY, split_note=", as a contiguous array")
def split_heads(x: np.ndarray, num_heads: int) -> np.ndarray:
    arguments.check_rank("x", x, 3, "(B, L, D)")
    B, L, D = x.shape
    arguments.check_sizes(D, num_heads)
    x = x.reshape(B, L, num_heads, D // num_heads)  # (B, L, D) -> (B, L, H, Dh)
    return np.ascontiguousarray(x.transpose(0, 2, 1, 3))  # -> (B, H, L, Dh)


@_docs.shared("merge_heads", _docs.NUMPY)
def merge_heads(x: np.ndarray) -> np.ndarray:
    arguments.check_rank("x", x, 4, "(B, H, L, Dh)")
    B, H, L, Dh = x.shape
    return x.transpose(0, 2, 1, 3).reshape(B, L, H * Dh)  # (B, H, L, Dh) -> (B, L, D)


@_docs.shared("linear", _docs.NUMPY)
def linear(x: np.ndarray, w: np.ndarray, b: np.ndarray | None = None) -> np.ndarray:
    y = x @ w
    if b is not None:
        y += b
    return y


def attention_heads(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    mask: np.ndarray | None = None,
    *,
    need_weights: bool = True,
    causal: str | None = None,
) -> tuple[np.ndarray, np.ndarray | None]:
    """``softmax(Q K^T / sqrt(Dh)) V`` for every head at once (no checks).

    With ``H_kv`` key/value heads, each serves a group of ``G = H / H_kv`` consecutive query
    heads: the keys broadcast over the group instead of being copied (``H_kv = H``: ``G = 1``).

    Args:
        q: the query heads.
        k: the key heads.
        v: the value heads.
        mask: boolean, True = may attend; broadcastable to ``(B, H, L, S)``, or ``None``.
        need_weights: return the weights or ``None`` (they are computed either way).
        causal: ``None``, or the alignment of a causal mask applied with ``mask``
            (:func:`with_causal`).

    Shape:
        q ``(B, H, L, Dh)``, k and v ``(B, H_kv, S, Dh)``. Returns ``(B, H, L, Dh)`` and
        ``(B, H, L, S)``.

    Returns:
        ``(output, weights)``; ``weights`` is ``None`` when ``need_weights`` is False.
    """
    (B, H, L, Dh), (H_kv, S) = q.shape, k.shape[1:3]
    mask = with_causal(mask, causal, L, S)  # (..., L, S)
    q = q.reshape(B, H_kv, H // H_kv, L, Dh)  # (B, H, L, Dh) -> (B, H_kv, G, L, Dh)
    out, weights = attend(q, k[:, :, None], v[:, :, None], group_mask(mask, H_kv))
    out = out.reshape(B, H, L, v.shape[-1])  # G heads per group -> (B, H, L, Dh)
    return out, (weights.reshape(B, H, L, S) if need_weights else None)


def attention_per_head(
    query, key, value, params, mask=None, *,
    causal=None, cache=None, need_weights=True, rotary=None,
):  # fmt: skip
    """The per-head form: a loop over the heads, each projecting the inputs to width Dh.

    Args:
        query, key, value, params, mask, need_weights, rotary: those of
            :func:`multi_head_attention`.
        causal: ``None``, or the alignment of a causal mask applied with ``mask``
            (:func:`with_causal`).
        cache: unused (``None``): a cache holds every head's keys, and the loop makes one's.

    Shape:
        Returns ``(B, L, D)`` and ``(B, H, L, S)``.

    Returns:
        ``(output, weights)``; no weights (``None``) without ``need_weights``.
    """
    heads, weights = [], []
    scale = 1 / math.sqrt(params.d_head)
    # the mask, with the causal one if asked for: (..., L, S)
    mask = with_causal(mask, causal, query.shape[1], key.shape[1])
    for h in range(params.num_heads):
        # head h's columns of W^Q, W^K and W^V, and of the biases
        p = params.head(h)
        q = linear(query, p["w_q"], p["b_q"])  # (B, L, D) -> (B, L, Dh)
        k = linear(key, p["w_k"], p["b_k"])  # (B, S, D) -> (B, S, Dh)
        v = linear(value, p["w_v"], p["b_v"])  # (B, S, D) -> (B, S, Dh)
        # turned by their positions (rotary=None: unchanged)
        q, k = rotated(q, k, rotary)
        # (B, L, Dh) @ (B, Dh, S) -> (B, L, S)
        scores = q @ k.swapaxes(-1, -2) * scale
        # (B, L, S): each row sums to 1
        a = softmax_in_place(scores, head_slice(mask, h))
        heads.append(a @ v)  # (B, L, S) @ (B, S, Dh) -> (B, L, Dh)
        if need_weights:
            weights.append(a)
        del a  # without weights returned: one (B, L, S) array at a time
    # H x (B, L, Dh) -> (B, L, H*Dh) -> (B, L, D)
    out = linear(np.concatenate(heads, axis=-1), params.w_o, params.b_o)
    # the weights: H x (B, L, S) -> (B, H, L, S)
    return out, (np.stack(weights, axis=1) if need_weights else None)


def attention_fused(
    query, key, value, params, mask=None, *,
    causal=None, cache=None, need_weights=True, rotary=None,
):  # fmt: skip
    """The fused form: one projection each for Q, K and V, split into heads, all heads at once.

    Args:
        query, key, value, params, mask, cache, need_weights, rotary: those of
            :func:`multi_head_attention`; ``cache.extend`` appends the new keys and values.
        causal: ``None``, or the alignment of a causal mask applied with ``mask``
            (:func:`with_causal`).

    Shape:
        Returns ``(B, L, D)`` and ``(B, H, L, S)``.

    Returns:
        ``(output, weights)``; no weights (``None``) without ``need_weights``.
    """
    H, H_kv = params.num_heads, params.num_kv_heads
    # (B, L, D) -> (B, H, L, Dh)
    q = split_heads(linear(query, params.w_q, params.b_q), H)
    # (B, S, D) -> (B, H_kv, S, Dh), for the keys and for the values
    k = split_heads(linear(key, params.w_k, params.b_k), H_kv)
    v = split_heads(linear(value, params.w_v, params.b_v), H_kv)
    # turned by their positions, after the cached ones
    q, k = rotated(q, k, rotary, cache)
    if cache is not None:  # decoding: cached positions first, then these
        # (B, H_kv, S, Dh), S counting the cached positions
        k, v = cache.extend(k, v)
    # (B, H, L, Dh) and (B, H, L, S)
    out, weights = attention_heads(q, k, v, mask, causal=causal)
    # (B, H, L, Dh) -> (B, L, D)
    out = linear(merge_heads(out), params.w_o, params.b_o)
    return out, (weights if need_weights else None)


def attention_packed(
    query, key, value, params, mask=None, *, causal=None, cache=None, need_weights=True, rotary=None
):
    """The packed form: self-attention projects Q, K and V in one product with ``W_qkv``.

    For cross-attention the query is projected alone and key and value (the same array)
    share one product; distinct key and value arrays take the fused form's three products.

    Args:
        query, key, value, params, mask, causal, cache, need_weights, rotary: those of
            :func:`attention_fused`.

    Shape:
        Returns ``(B, L, D)`` and ``(B, H, L, S)``.

    Returns:
        ``(output, weights)``: those of :func:`attention_fused`.
    """
    if key is not value:
        return attention_fused(
            query,
            key,
            value,
            params,
            mask,
            causal=causal,
            cache=cache,
            need_weights=need_weights,
            rotary=rotary,
        )
    D, kv = params.d_model, params.kv_width
    if query is key:  # self-attention: one product, (B, L, D) -> (B, L, D + 2 H_kv Dh)
        q, k, v = np.split(linear(query, params.w_qkv, params.b_qkv), [D, D + kv], axis=-1)
    else:  # cross-attention: keys and values share one product, (B, S, D) -> (B, S, 2 H_kv Dh)
        q = linear(query, params.w_q, params.b_q)
        k, v = np.split(linear(key, *params.packed("kv")), 2, axis=-1)
    q = split_heads(q, params.num_heads)  # (B, L, D) -> (B, H, L, Dh)
    k, v = (split_heads(x, params.num_kv_heads) for x in (k, v))  # -> (B, H_kv, S, Dh)
    q, k = rotated(q, k, rotary, cache)  # turned by their positions, after the cached ones
    if cache is not None:  # decoding: cached positions first, then these
        k, v = cache.extend(k, v)  # (B, H_kv, S, Dh), S counting the cached positions
    out, weights = attention_heads(q, k, v, mask, causal=causal)  # (B, H, L, Dh), (B, H, L, S)
    return linear(merge_heads(out), params.w_o, params.b_o), (weights if need_weights else None)


def attention_tiled(
    query,
    key,
    value,
    params,
    mask=None,
    *,
    causal=None,
    cache=None,
    need_weights=False,
    rotary=None,
):
    """The tiled form: attention one tile at a time (:func:`mha.backends.tiled.attention_tiles`),
    never forming the ``(B, H, L, S)`` scores, so it has no weights to return. With
    ``causal`` the tiles wholly above the diagonal are skipped, and no mask array is formed.

    Args:
        query, key, value, params, mask, causal, cache, rotary: those of :func:`attention_fused`.
        need_weights: False (:func:`multi_head_attention` refuses True).

    Shape:
        Returns ``(B, L, D)``.

    Returns:
        ``(output, None)``.
    """
    H, H_kv = params.num_heads, params.num_kv_heads
    q = split_heads(linear(query, params.w_q, params.b_q), H)  # (B, L, D) -> (B, H, L, Dh)
    k = split_heads(linear(key, params.w_k, params.b_k), H_kv)  # (B, S, D) -> (B, H_kv, S, Dh)
    v = split_heads(linear(value, params.w_v, params.b_v), H_kv)  # (B, S, D) -> (B, H_kv, S, Dh)
    q, k = rotated(q, k, rotary, cache)  # turned by their positions, after the cached ones
    if cache is not None:  # decoding: cached positions first, then these
        k, v = cache.extend(k, v)  # (B, H_kv, S, Dh)
    (B, _, L, Dh), S = q.shape, k.shape[2]
    offset = 0 if causal is None else causal_offset(L, S, causal)  # query 0 sits at key offset
    q = q.reshape(B, H_kv, H // H_kv, L, Dh)  # (B, H, L, Dh) -> (B, H_kv, G, L, Dh)
    k, v, mask = k[:, :, None], v[:, :, None], group_mask(mask, H_kv)  # (B, H_kv, 1, S, Dh)
    out, _ = tiled.attention_tiles(q, k, v, mask, causal=causal is not None, offset=offset)
    out = out.reshape(B, H, L, Dh)  # (B, H_kv, G, L, Dh) -> (B, H, L, Dh)
    return linear(merge_heads(out), params.w_o, params.b_o), None  # (B, H, L, Dh) -> (B, L, D)


_FORMS = {
    "per_head": attention_per_head,
    "fused": attention_fused,
    "packed": attention_packed,
    "tiled": attention_tiled,
}


@overflow.silence_numpy_warnings
@_docs.shared(
    "multi_head_attention",
    _docs.NUMPY,
    tiled_form=' and ``"tiled"`` (:func:`attention_tiled`), which never forms the '
    "``(B, H, L, S)`` scores",
    backend_note="",
    device="",
    need_weights='whether to return the attention weights (False for ``"tiled"``).',
    cache_arrays="NumPy buffers of the inputs' dtype",
    autograd_cache="",
    autograd_result="",
    tiled_errors=", weights requested from the tiled form",
    causal_note="the tiled form skips every tile wholly above the diagonal and forms no mask "
    "array; the other forms, which write every score anyway, attend under "
    ":func:`with_causal`'s mask.",
)
def multi_head_attention(
    query: np.ndarray,  # (B, L, D)
    key: np.ndarray,  # (B, S, D)
    value: np.ndarray,  # (B, S, D)
    params: MHAParams,
    mask: np.ndarray | None = None,  # broadcastable to (B, H, L, S)
    *,
    causal: bool = False,
    align: str = "top_left",
    form: str = "fused",
    need_weights: bool = True,
    cache: KVCache | None = None,
    rotary: Rotary | None = None,
) -> tuple[np.ndarray, np.ndarray | None]:
    m = layer.check_mha(
        query, key, value, params, mask, form=form,
        need_weights=need_weights, kind=NUMPY, cache=cache, rotary=rotary,
    )  # fmt: skip
    # None, or where the causal diagonal sits
    diagonal = layer.causal_alignment(causal, align)
    # new positions kept in the cache on success
    with layer.staged(cache, m, params.d_model, rotary) as kv:
        out, w = _FORMS[form](
            query, key, value, params, mask, causal=diagonal, cache=kv,
            need_weights=need_weights, rotary=rotary,
        )  # fmt: skip
        layer.check_mha_range(
            out, m, query, key, value, params, mask, cache=cache,
            kind=NUMPY, causal=diagonal, rotary=rotary,
        )  # fmt: skip
    return out, w


@overflow.silence_numpy_warnings
@_docs.shared("layer_norm", _docs.NUMPY, devices="")
def layer_norm(
    x: np.ndarray,
    weight: np.ndarray | None = None,
    bias: np.ndarray | None = None,
    eps: float = 1e-5,
) -> np.ndarray:
    magnitudes = arrays.check_layer_norm(x, weight, bias, eps, NUMPY)
    bound = overflow.check_layer_norm_variance(x, magnitudes, NUMPY)
    mean = x.mean(axis=-1, keepdims=True)  # (..., 1)
    var = x.var(axis=-1, keepdims=True)  # (..., 1), biased as in torch
    y = (x - mean) / np.sqrt(var + eps)
    if weight is not None:
        y = y * weight
    if bias is not None:
        y = y + bias
    overflow.check_range("layer_norm output", bound, y, NUMPY, lambda: None)
    return y


@overflow.silence_numpy_warnings
@_docs.shared("attention_block", _docs.NUMPY, device="")
def attention_block(
    x: np.ndarray,
    params: MHAParams,
    mask: np.ndarray | None = None,
    *,
    ln_weight: np.ndarray | None = None,
    ln_bias: np.ndarray | None = None,
    eps: float = 1e-5,
    form: str = "fused",
    norm_first: bool = False,
    rotary: Rotary | None = None,
) -> tuple[np.ndarray, np.ndarray | None]:
    arguments.check_bool("norm_first", norm_first)
    h = layer_norm(x, ln_weight, ln_bias, eps) if norm_first else x
    attn, weights = multi_head_attention(h, h, h, params, mask, form=form, rotary=rotary)
    out = x + attn if norm_first else layer_norm(x + attn, ln_weight, ln_bias, eps)
    return out, weights
