"""Multi-head attention in NumPy: the reference implementation.

Same function and argument names as :mod:`mha.backends.torch_backend`, so a chapter switches
backend by changing one import. Inputs are batch first: ``(B, L, D)`` queries and
``(B, S, D)`` keys/values. Masks are boolean, **True = may attend**, broadcastable to
``(B, H, L, S)``.

A fully masked query row (no key may be attended) gets all-zero attention weights and a
zero attention output; in :func:`multi_head_attention` that row's output is the output
bias ``b_o`` (or zero). PyTorch's ``scaled_dot_product_attention`` gives the same zeros.

**How a mask is read.** A mask broadcasts to ``(B, H, L, S)`` by NumPy's rule, aligned from
the right, as in ``scaled_dot_product_attention``: a 2-D mask is ``(L, S)`` (the same for
every batch element and head), a 3-D mask ``(H, L, S)``, and a per-batch mask must carry its
head and query dimensions, ``(B, 1, 1, S)`` for key padding (:func:`key_padding_mask` builds
it) or ``(B, 1, L, S)``. Two readings that broadcasting would take silently against what was
almost surely meant are caught: a 3-D mask whose leading size equals both ``B`` and ``H`` is
refused (``ValueError``; pass ``mask[:, None]`` or ``mask[None]``), and a 2-D mask that looks
like key padding while ``B = L`` draws an :class:`~mha.core.masks.AmbiguousMaskWarning` (pass
``mask[None, None]`` to state the ``(L, S)`` reading). A mask that does not broadcast names
the likely intended shape in its error.

Empty batches (``B = 0``) are allowed and give empty outputs; empty sequences (``L = 0`` or
``S = 0``) raise. Every result is checked against overflow of its dtype: the largest
magnitudes of the inputs, which the finiteness checks find anyway, bound every stage, and
only when that bound comes near the dtype's largest value (inputs of about 1e16 in float32)
is the computation redone in float64 to find the stage that overflowed. An output that
would hold infinities or NaN, or wrong finite values from overflowed scores, raises
``ValueError`` naming that stage instead.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from mha.backends import _mha_checks, tiled
from mha.core import _groups, _np_checks, _overflow, _validate
from mha.core._np_checks import ARRAYS
from mha.core.kv_cache import KVCache
from mha.core.params import MHAParams

_ARRAYS = ARRAYS  # the checks this backend's arguments get (mha.core._np_checks)
FORMS = _validate.FORMS  # the forms this backend computes: all four, "tiled" included


def causal_mask(q_len: int, kv_len: int | None = None, *, align: str = "top_left") -> np.ndarray:
    """Boolean causal mask: query ``i`` may attend to the keys at or before its position.

    With ``L = S`` both alignments give the lower triangle, keys ``j <= i``. They differ
    when ``L != S``:

    - ``"top_left"`` (the default): query ``i`` sits at position ``i``, and sees keys
      ``j <= i``. This is ``torch.nn.functional.scaled_dot_product_attention(is_causal=True)``
      and ``torch.nn.attention.bias.causal_upper_left``.
    - ``"bottom_right"``: the queries are the *last* ``L`` of ``S`` positions, query ``i``
      at position ``S - L + i``, and it sees keys ``j <= S - L + i``. This is what decoding
      with a key/value cache needs (the new queries come after the cached keys), and
      ``torch.nn.attention.bias.causal_lower_right``. With ``L > S`` its first ``L - S``
      rows are fully masked.

    Args:
        q_len: query length L.
        kv_len: key length S (defaults to L).
        align: ``"top_left"`` or ``"bottom_right"``, where query 0 sits.

    Shape:
        Returns ``(L, S)``.

    Returns:
        A boolean array, True on and below the diagonal.

    Raises:
        ValueError: if a length is not positive or ``align`` is not one of the two.
        TypeError: if a length is not an int.
    """
    kv_len = q_len if kv_len is None else kv_len
    _validate.check_length("q_len", q_len, "L")
    _validate.check_length("kv_len", kv_len, "S")
    _validate.check_align(align)
    offset = 0 if align == "top_left" else kv_len - q_len  # query i sits at i + offset
    return np.tril(np.ones((q_len, kv_len), dtype=bool), k=offset)


def key_padding_mask(lengths: np.ndarray | list[int], kv_len: int) -> np.ndarray:
    """Boolean mask letting each batch element attend only to its first ``lengths[b]`` keys.

    Args:
        lengths: number of real (non-padding) keys per batch element, each in ``[0, S]``.
        kv_len: key length S.

    Shape:
        lengths ``(B,)``; returns ``(B, 1, 1, S)``, which broadcasts to ``(B, H, L, S)``
        (``B = 0`` for an empty list gives an empty mask).

    Returns:
        A boolean array, True for the first ``lengths[b]`` keys of row ``b``.

    Raises:
        ValueError: if ``lengths`` is not 1-D or a length is outside ``[0, S]``.
        TypeError: if ``lengths`` are not integers or ``kv_len`` is not an int.
    """
    _validate.check_length("kv_len", kv_len, "S")
    if isinstance(lengths, list | tuple) and len(lengths) == 0:
        lengths = np.zeros(0, dtype=np.int64)  # an empty list has no dtype to check
    try:
        lengths = np.asarray(lengths)
    except (TypeError, ValueError):
        raise TypeError(
            "lengths must be a 1-D sequence or array of integers; got "
            f"{_validate.describe(lengths)}"
        ) from None
    if lengths.ndim != 1:
        raise ValueError(f"lengths must have shape (B,); got shape {lengths.shape}")
    if not np.issubdtype(lengths.dtype, np.integer):
        raise TypeError(f"lengths must be integers; got dtype {lengths.dtype}")
    if ((lengths < 0) | (lengths > kv_len)).any():
        raise ValueError(f"lengths must lie in [0, kv_len={kv_len}]; got {lengths.tolist()}")
    keep = np.arange(kv_len)[None, :] < lengths[:, None]  # (B, S)
    return keep[:, None, None, :]  # (B, S) -> (B, 1, 1, S)


@_overflow.range_checked
def softmax(scores: np.ndarray, mask: np.ndarray | None = None) -> np.ndarray:
    """Masked softmax over the last axis (``scores`` is left unchanged).

    Masked entries get weight exactly 0; a row with every entry masked gets all zeros.
    Subtracting the row maximum keeps large logits finite.

    Args:
        scores: the scores, a floating array.
        mask: optional boolean keep-mask (True = may attend).

    Shape:
        scores ``(..., L, S)``; mask broadcastable to it. Returns ``(..., L, S)``.

    Returns:
        The weights, a new array of ``scores``' dtype; rows sum to 1, fully masked rows
        are 0.

    Raises:
        ValueError: if ``mask`` does not broadcast or ``scores`` is not finite.
        TypeError: if ``scores`` is not a float array or ``mask`` is not boolean.
    """
    _validate.check_softmax(scores, mask, _ARRAYS)
    return _softmax_inplace(scores.copy(), mask)


def _softmax_inplace(scores: np.ndarray, mask: np.ndarray | None) -> np.ndarray:
    """The masked softmax of :func:`softmax`, overwriting ``scores`` (no checks)."""
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


@_overflow.range_checked
def scaled_dot_product_attention(
    query: np.ndarray,
    key: np.ndarray,
    value: np.ndarray,
    mask: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """``softmax(Q K^T / sqrt(Dh)) V`` with an optional boolean mask.

    Args:
        query: queries.
        key: keys, the same width as ``query``.
        value: values, the same length as ``key``.
        mask: boolean, True = may attend; broadcastable to ``(..., L, S)``.

    Shape:
        query ``(..., L, Dh)``, key ``(..., S, Dh)``, value ``(..., S, Dv)``.
        Returns output ``(..., L, Dv)`` and weights ``(..., L, S)``.

    Returns:
        ``(output, weights)``, NumPy arrays of the inputs' dtype. The weights' leading
        dimensions broadcast those of query, key and mask; the output's also value's.

    Raises:
        ValueError: on mismatched shapes, empty sequences, a head width ``Dh`` of 0 (the
            last dimension of query and key), a mask that does not broadcast, non-finite
            inputs, or scores that overflow the dtype.
        TypeError: on non-float or mixed dtypes, a non-boolean mask, or a masked array.
    """
    m = _validate.check_attention(query, key, value, mask, _ARRAYS)
    out, weights = _attend(query, key, value, mask)
    _overflow.check_range(
        "scaled_dot_product_attention output",
        _overflow.attention_bound(m["query"], m["key"], m["value"], query.shape[-1]),
        out,
        _ARRAYS,
        lambda: _overflow.attention_overflow(
            *(a.astype(np.float64) for a in (query, key, value)), mask, _largest(out)
        ),
    )
    return out, weights


def _largest(x: np.ndarray) -> float:
    return _np_checks.largest(x.dtype)


def _attend(
    q: np.ndarray, k: np.ndarray, v_: np.ndarray, mask: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray]:
    """Explicit attention, one slice of the first batch dimension at a time when there is one.

    Each slice's scores (e.g. one batch element's ``(H, L, S)``) are scaled, normalised and
    multiplied by the values while they are still in the processor's caches, instead of
    passing over the whole ``(..., L, S)`` tensor once per step. NumPy multiplies a stack
    of matrices one matrix at a time, so the result is the same as for the whole stack.
    """
    scale = q.dtype.type(1.0 / np.sqrt(q.shape[-1]))
    mask_lead = () if mask is None or mask.ndim <= 2 else mask.shape[:-2]
    lead = np.broadcast_shapes(q.shape[:-2], k.shape[:-2], mask_lead)  # the scores' batch
    if not lead or np.broadcast_shapes(lead, v_.shape[:-2]) != lead:
        q = np.broadcast_to(q, (*lead, *q.shape[-2:]))  # (..., L, Dh), a view
        scores = np.matmul(q, k.swapaxes(-1, -2))  # (..., L, Dh) @ (..., Dh, S) -> (..., L, S)
        scores *= scale
        weights = _softmax_inplace(scores, mask)  # (..., L, S)
        return np.matmul(weights, v_), weights  # (..., L, S) @ (..., S, Dv) -> (..., L, Dv)
    L, S, Dv = q.shape[-2], k.shape[-2], v_.shape[-1]
    dtype = np.result_type(q, k, v_)
    weights = np.empty((*lead, L, S), dtype=dtype)
    out = np.empty((*lead, L, Dv), dtype=dtype)
    q, k = np.broadcast_to(q, (*lead, L, q.shape[-1])), np.broadcast_to(k, (*lead, *k.shape[-2:]))
    v_ = np.broadcast_to(v_, (*lead, S, Dv))  # views
    if mask is not None:
        mask = np.broadcast_to(mask, (*lead, L, S))
    for i in range(lead[0]):
        scores = weights[i]  # (..., L, S) of slice i, written in place
        np.matmul(q[i], k[i].swapaxes(-1, -2), out=scores)
        scores *= scale
        _softmax_inplace(scores, None if mask is None else mask[i])
        np.matmul(scores, v_[i], out=out[i])  # (..., L, S) @ (..., S, Dv) -> (..., L, Dv)
    return out, weights


def split_heads(x: np.ndarray, num_heads: int) -> np.ndarray:
    """Split the model width into heads, as a contiguous array.

    Args:
        x: an array whose width is D.
        num_heads: number of heads H; must divide D.

    Shape:
        ``(B, L, D)`` -> ``(B, H, L, Dh)``.

    Returns:
        Head ``h`` is the column block ``h * Dh : (h + 1) * Dh`` of ``x``, copied contiguously.

    Raises:
        ValueError: if ``x`` is not 3-D or H does not divide its width.
    """
    _validate.check_rank("x", x, 3, "(B, L, D)")
    B, L, D = x.shape
    _validate.check_sizes(D, num_heads)
    x = x.reshape(B, L, num_heads, D // num_heads)  # (B, L, D) -> (B, L, H, Dh)
    return np.ascontiguousarray(x.transpose(0, 2, 1, 3))  # -> (B, H, L, Dh)


def merge_heads(x: np.ndarray) -> np.ndarray:
    """Concatenate the heads back into the model width (the inverse of ``split_heads``).

    Args:
        x: per-head arrays stacked along dimension 1.

    Shape:
        ``(B, H, L, Dh)`` -> ``(B, L, D)``.

    Returns:
        The heads side by side, an array of width ``H * Dh``.

    Raises:
        ValueError: if ``x`` is not 4-D.
    """
    _validate.check_rank("x", x, 4, "(B, H, L, Dh)")
    B, H, L, Dh = x.shape
    return x.transpose(0, 2, 1, 3).reshape(B, L, H * Dh)  # (B, H, L, Dh) -> (B, L, D)


def _linear(x: np.ndarray, w: np.ndarray, b: np.ndarray | None) -> np.ndarray:
    y = x @ w
    if b is not None:
        y += b
    return y


@_overflow.range_checked
def multi_head_attention(
    query: np.ndarray,
    key: np.ndarray,
    value: np.ndarray,
    params: MHAParams,
    mask: np.ndarray | None = None,
    *,
    form: str = "fused",
    need_weights: bool = True,
    cache: KVCache | None = None,
) -> tuple[np.ndarray, np.ndarray | None]:
    """``Concat(head_1, ..., head_H) W^O`` with ``head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V)``.

    Four mathematically identical forms (:data:`FORMS`):

    - ``"per_head"``: a loop over heads, 3H projections of width Dh;
    - ``"fused"``: three ``(D, D)`` projections, then a reshape into heads;
    - ``"packed"``: one ``(D, 3D)`` projection for self-attention (when ``query``,
      ``key`` and ``value`` are the same array); for cross-attention the query is
      projected alone and key and value (the same array) share one ``(D, 2D)``
      projection; distinct key and value arrays fall back to three projections;
    - ``"tiled"``: the fused projections, then :func:`mha.backends.tiled.attention`, which never
      forms the ``(B, H, L, S)`` scores or weights (so ``need_weights`` must be False).

    Args:
        query: queries.
        key: keys (pass ``query`` again for self-attention).
        value: values.
        params: the layer's parameters, NumPy arrays of the inputs' dtype.
        mask: boolean, True = may attend; broadcastable to ``(B, H, L, S)`` by NumPy's rule,
            aligned from the right: ``(L, S)`` for every batch element and head, ``(H, L, S)``
            per head, ``(B, 1, 1, S)`` (:func:`key_padding_mask`) or ``(B, 1, L, S)`` per
            batch element. A ``(B, S)`` or ``(B, L, S)`` mask is *not* read per batch
            element; a 3-D mask whose leading size equals both B and H is refused, and a
            padding-like 2-D mask with B = L warns (see the module's "How a mask is read").
        form: ``"per_head"``, ``"fused"``, ``"packed"`` or ``"tiled"``.
        need_weights: whether to return the attention weights (False for ``"tiled"``).
        cache: a :class:`mha.core.kv_cache.KVCache` of this layer's projected keys and values:
            the projections of ``key`` and ``value`` (the new positions) are appended to
            it, and the queries attend to everything it then holds. Its batch size,
            ``num_kv_heads``, ``d_head`` and dtype must match, the mask must cover its
            positions and the new ones, and the new ones must fit its capacity; not with
            ``"per_head"``. The call is atomic: the new positions are appended only once
            every check, the output's range included, has passed, so a refused call leaves
            the cache's length, contents and ``max_abs`` as they were. The cached keys and
            values are not checked again (``cache.max_abs`` bounds them), except by the
            tiled form, whose :func:`mha.backends.tiled.attention` checks every key it gets; NaN or
            infinity that reached them anyway (written into its views), and finite entries
            beyond ``cache.max_abs`` that make the output overflow, are reported naming the
            cache: a non-finite output is never returned.

    Shape:
        query ``(B, L, D)``, key and value ``(B, S, D)`` (with a cache: ``(B, n, D)``, the
        ``n`` new positions, and ``S`` is the cache's length after appending them). Returns
        output ``(B, L, D)`` and weights ``(B, H, L, S)`` (or ``None`` when
        ``need_weights`` is False).

    Returns:
        ``(output, weights)``, NumPy arrays of the inputs' dtype; ``weights`` is ``None``
        when ``need_weights`` is False.

    Raises:
        ValueError: on mismatched shapes, empty sequences, a mask that does not
            broadcast, non-finite inputs, an unknown ``form``, weights requested from
            the tiled form, an output that would overflow, or a cache that does not fit the
            layer or the call, is full, holds NaN or infinity, or holds entries beyond its
            ``max_abs`` that overflow the output.
        TypeError: on non-float or mixed dtypes, a non-boolean mask, wrong ``params``, or a
            cache that is not a ``KVCache`` of NumPy buffers of the inputs' dtype.
    """
    magnitudes = _mha_checks.check_mha(query, key, value, params, mask, form, _ARRAYS, cache)
    _validate.check_form_weights(form, need_weights)
    H, H_kv = params.num_heads, params.num_kv_heads
    if form == "tiled":  # one projection at a time, split into heads as it is made
        q = split_heads(_linear(query, params.w_q, params.b_q), H)  # (B, H, L, Dh)
        k = split_heads(_linear(key, params.w_k, params.b_k), H_kv)  # (B, H_kv, S, Dh)
        val = split_heads(_linear(value, params.w_v, params.b_v), H_kv)  # (B, H_kv, S, Dh)
        if cache is not None:  # tiled.attention checks the keys it gets: name the cache first
            _mha_checks.check_cache_finite(cache, _ARRAYS)
        with _mha_checks.cached(cache, k, val, magnitudes, params.d_model) as (k, val):
            out = _grouped(tiled.attention, q, k, val, mask, H_kv)[0]  # (B, H, L, Dh)
            del q, k, val
            out = _linear(merge_heads(out), params.w_o, params.b_o)  # (B, L, D)
            _check_mha_range(magnitudes, out, query, key, value, params, mask, cache)
        return out, None  # the cache has the new positions only now, after every check
    if form == "per_head":
        heads, weights = [], []
        for h in range(H):
            blk = params.head(h)
            q = _linear(query, blk["w_q"], blk["b_q"])  # (B, L, D) -> (B, L, Dh)
            k = _linear(key, blk["w_k"], blk["b_k"])  # (B, S, D) -> (B, S, Dh)
            val = _linear(value, blk["w_v"], blk["b_v"])  # (B, S, D) -> (B, S, Dh)
            head_mask = None if mask is None else _groups.head_slice(mask, h)
            out_h, w_h = _attend(q, k, val, head_mask)  # (B, L, Dh), (B, L, S)
            heads.append(out_h)
            if need_weights:  # otherwise each head's (B, L, S) weights are freed in turn
                weights.append(w_h)
            del w_h  # before the next head's scores exist: one (B, L, S) tensor at a time
        concat = np.concatenate(heads, axis=-1)  # H x (B, L, Dh) -> (B, L, D)
        out = _linear(concat, params.w_o, params.b_o)
        _check_mha_range(magnitudes, out, query, key, value, params, mask, cache)
        return out, (np.stack(weights, axis=1) if need_weights else None)  # (B, H, L, S)

    D, kv_cols = params.d_model, params.kv_width
    if form == "packed" and query is key and key is value:
        qkv = _linear(query, params.w_qkv, params.b_qkv)  # (B, L, D) -> (B, L, D + 2 H_kv Dh)
        q, k, val = np.split(qkv, [D, D + kv_cols], axis=-1)  # (B, L, D), 2 x (B, L, H_kv Dh)
    elif form == "packed" and key is value:
        q = _linear(query, params.w_q, params.b_q)  # (B, L, D)
        kv = _linear(key, *params.packed("kv"))  # (B, S, D) -> (B, S, 2 H_kv Dh)
        k, val = np.split(kv, 2, axis=-1)  # 2 x (B, S, H_kv Dh)
    else:
        q = _linear(query, params.w_q, params.b_q)  # (B, L, D)
        k = _linear(key, params.w_k, params.b_k)  # (B, S, H_kv Dh)
        val = _linear(value, params.w_v, params.b_v)  # (B, S, H_kv Dh)
    q = split_heads(q, H)  # (B, L, D) -> (B, H, L, Dh)
    k, val = split_heads(k, H_kv), split_heads(val, H_kv)  # (B, H_kv, S, Dh)
    # With a cache: all its positions, (B, H_kv, S, Dh), kept only if every check passes.
    with _mha_checks.cached(cache, k, val, magnitudes, D) as (k, val):
        out, weights = _grouped(_attend, q, k, val, mask, H_kv)  # (B, H, L, Dh), (B, H, L, S)
        out = _linear(merge_heads(out), params.w_o, params.b_o)  # (B, L, D)
        _check_mha_range(magnitudes, out, query, key, value, params, mask, cache)
    return out, (weights if need_weights else None)


def _check_mha_range(
    magnitudes: dict[str, float],
    out: np.ndarray,
    query: np.ndarray,
    key: np.ndarray,
    value: np.ndarray,
    params: MHAParams,
    mask: Any,
    cache: KVCache | None,
) -> None:
    """Raise if the layer overflowed (no pass over any array while the bound holds).

    With a cache, it has not appended this call's positions yet: it holds those before the
    call. A non-finite output is checked for NaN or infinity in the cache first.
    """
    if cache is not None:
        magnitudes = {**magnitudes, "cache": cache.max_abs}
        _mha_checks.check_cached_output(cache, out, _ARRAYS)

    def locate() -> str | None:
        cached = None
        if cache is not None:  # the positions cached before this call
            _mha_checks.check_cache_finite(cache, _ARRAYS)
            cached = tuple(x.astype(np.float64) for x in (cache.keys, cache.values))
        return _overflow.mha_overflow(
            *(a.astype(np.float64) for a in (query, key, value)),
            params.to_numpy(np.float64),
            mask,
            cached,
            largest=_largest(out),
        )

    _overflow.check_range(
        "multi_head_attention output",
        _overflow.mha_bound(magnitudes, params.d_model, params.num_heads),
        out,
        _ARRAYS,
        locate,
    )


def _grouped(attend: Any, q: Any, k: Any, val: Any, mask: Any, num_kv_heads: int) -> Any:
    """``attend`` over heads; with ``H_kv < H``, each key/value head serves its group.

    Multi-head attention (``H_kv = H``) runs ``attend`` on the ``(B, H, ...)`` heads as they
    are. Otherwise the queries are grouped ``(B, H_kv, G, L, Dh)`` against keys and values
    ``(B, H_kv, 1, S, Dh)``, which broadcast over the group instead of being copied, and the
    results are laid out per query head again.
    """
    B, H = q.shape[:2]
    if num_kv_heads == H:
        return attend(q, k, val, mask)
    qg = _groups.group_queries(q, num_kv_heads)  # (B, H_kv, G, L, Dh)
    grouped = _groups.group_mask(mask, num_kv_heads)
    out, *rest = attend(qg, k[:, :, None], val[:, :, None], grouped)  # (B, H_kv, G, L, ...)
    return tuple(  # (B, H_kv, G, ...) -> (B, H, ...): output, and weights or lse
        None if r is None else r.reshape(B, H, *r.shape[3:]) for r in (out, *rest)
    )


@_overflow.range_checked
def layer_norm(
    x: np.ndarray,
    weight: np.ndarray | None = None,
    bias: np.ndarray | None = None,
    eps: float = 1e-5,
) -> np.ndarray:
    """Layer normalisation over the last axis (the model width), as ``torch.nn.LayerNorm``.

    Args:
        x: the array to normalise over its last dimension.
        weight: optional scale ``gamma``.
        bias: optional shift ``beta``.
        eps: added to the variance before the square root.

    Shape:
        x ``(..., D)``, weight and bias ``(D,)``. Returns ``(..., D)``.

    Returns:
        ``(x - mean) / sqrt(var + eps) * weight + bias`` (biased variance, as in PyTorch).

    Raises:
        ValueError: if ``eps`` is not positive and finite, ``weight``/``bias`` are not
            ``(D,)``, an input is not finite, or a row of ``x`` spreads so widely that its
            variance would overflow (``D (max - min)^2`` reaches the dtype's largest value).
        TypeError: on non-float or mixed dtypes, or a non-number ``eps`` (such as an array).
    """
    magnitudes = _validate.check_layer_norm(x, weight, bias, eps, _ARRAYS)
    variance, bound = _overflow.layer_norm_bound(magnitudes, x.shape[-1])
    if variance * _overflow.RANGE_MARGIN >= _largest(x):  # only then a pass over the rows
        spread = float((x.max(axis=-1).astype(np.float64) - x.min(axis=-1)).max())
        _overflow.check_layer_norm_range(spread, x.shape[-1], _largest(x), x.dtype)
    mean = x.mean(axis=-1, keepdims=True)  # (..., 1)
    var = x.var(axis=-1, keepdims=True)  # (..., 1), biased as in torch
    y = (x - mean) / np.sqrt(var + eps)
    if weight is not None:
        y = y * weight
    if bias is not None:
        y = y + bias
    _overflow.check_range("layer_norm output", bound, y, _ARRAYS, lambda: None)
    return y


@_overflow.range_checked
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
) -> tuple[np.ndarray, np.ndarray]:
    """A residual block around self-attention, with layer normalisation after or before it.

    - ``norm_first=False`` (post-norm, Vaswani et al.): ``LayerNorm(X + MultiHead(X))``.
    - ``norm_first=True`` (pre-norm, GPT-2 and most later models):
      ``X + MultiHead(LayerNorm(X))``; the residual path carries ``X`` unchanged, and the
      output is not normalised.

    The argument has the name and meaning of ``norm_first`` in
    ``torch.nn.TransformerEncoderLayer``.

    Args:
        x: the block's input (a NumPy array), which is the queries, keys and values.
        params: the attention layer's parameters, of the kind and dtype of ``x``.
        mask: optional boolean array, True = may attend; broadcastable to ``(B, H, L, L)``.
        ln_weight: the layer norm's scale (``None``: ones).
        ln_bias: the layer norm's shift (``None``: zeros).
        eps: added to the variance in the layer norm.
        form: the form of :func:`multi_head_attention`.
        norm_first: normalise before the attention (pre-norm) instead of after the sum.

    Shape:
        x ``(B, L, D)``. Returns output ``(B, L, D)`` and weights ``(B, H, L, L)``.

    Returns:
        ``(output, weights)``: the block's output (the normalised residual sum with
        post-norm, the residual sum with pre-norm) and the attention weights.

    Raises:
        TypeError: if ``norm_first`` is not a bool; and the errors of
            :func:`multi_head_attention` and :func:`layer_norm`.
    """
    _validate.check_bool("norm_first", norm_first)
    if norm_first:
        normed = layer_norm(x, ln_weight, ln_bias, eps)
        attn, weights = multi_head_attention(normed, normed, normed, params, mask, form=form)
        return x + attn, weights
    attn, weights = multi_head_attention(x, x, x, params, mask, form=form)
    return layer_norm(x + attn, ln_weight, ln_bias, eps), weights
