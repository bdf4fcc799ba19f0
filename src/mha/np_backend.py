"""Multi-head attention in NumPy: the reference implementation.

Same function and argument names as :mod:`mha.torch_backend`, so a chapter switches
backend by changing one import. Inputs are batch first: ``(B, L, D)`` queries and
``(B, S, D)`` keys/values. Masks are boolean, **True = may attend**, broadcastable to
``(B, H, L, S)``.

A fully masked query row (no key may be attended) gets all-zero attention weights and a
zero attention output; in :func:`multi_head_attention` that row's output is the output
bias ``b_o`` (or zero). PyTorch's ``scaled_dot_product_attention`` gives the same zeros.
"""

from __future__ import annotations

import numpy as np

from mha import _validate as v
from mha.params import MHAParams

FLOATS = (np.dtype(np.float32), np.dtype(np.float64))
CAUSAL_ALIGNMENTS = ("top_left", "bottom_right")  # where query 0 of a causal mask sits


def _finite(x: np.ndarray) -> bool:
    """True when ``x`` holds no NaN or infinity.

    The extremes of ``x`` are finite exactly when every entry is (``min`` and ``max``
    propagate NaN); two reductions cost less than building an ``isfinite`` mask.
    """
    return x.size == 0 or bool(np.isfinite(x.min()) and np.isfinite(x.max()))


def _check_array(name: str, x: object) -> None:
    if not isinstance(x, np.ndarray):
        raise TypeError(f"{name} must be a numpy.ndarray; got {type(x).__name__}")
    v.check_float(name, x, FLOATS)
    v.check_finite(name, x, _finite)


def _check_mask(mask: object, target: tuple[int, ...], layout: str = "(B, H, L, S)") -> None:
    if not isinstance(mask, np.ndarray):
        raise TypeError(f"mask must be a numpy.ndarray of bool; got {type(mask).__name__}")
    v.check_mask(mask, target, mask.dtype == np.bool_, layout)


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

    Raises:
        ValueError: if a length is not positive or ``align`` is not one of the two.
        TypeError: if a length is not an int.
    """
    kv_len = q_len if kv_len is None else kv_len
    v.check_length("q_len", q_len, "L")
    v.check_length("kv_len", kv_len, "S")
    if not isinstance(align, str) or align not in CAUSAL_ALIGNMENTS:
        raise ValueError(f"align must be one of {CAUSAL_ALIGNMENTS}; got align={align!r}")
    offset = 0 if align == "top_left" else kv_len - q_len  # query i sits at i + offset
    return np.tril(np.ones((q_len, kv_len), dtype=bool), k=offset)


def key_padding_mask(lengths: np.ndarray | list[int], kv_len: int) -> np.ndarray:
    """Boolean mask letting each batch element attend only to its first ``lengths[b]`` keys.

    Args:
        lengths: number of real (non-padding) keys per batch element, each in ``[0, S]``.
        kv_len: key length S.

    Shape:
        lengths ``(B,)``; returns ``(B, 1, 1, S)``, which broadcasts to ``(B, H, L, S)``.

    Raises:
        ValueError: if ``lengths`` is not 1-D or a length is outside ``[0, S]``.
        TypeError: if ``lengths`` are not integers or ``kv_len`` is not an int.
    """
    lengths = np.asarray(lengths)
    v.check_length("kv_len", kv_len, "S")
    if lengths.ndim != 1:
        raise ValueError(f"lengths must have shape (B,); got shape {lengths.shape}")
    if not np.issubdtype(lengths.dtype, np.integer):
        raise TypeError(f"lengths must be integers; got dtype {lengths.dtype}")
    if ((lengths < 0) | (lengths > kv_len)).any():
        raise ValueError(f"lengths must lie in [0, kv_len={kv_len}]; got {lengths.tolist()}")
    keep = np.arange(kv_len)[None, :] < lengths[:, None]  # (B, S)
    return keep[:, None, None, :]  # (B, S) -> (B, 1, 1, S)


def softmax(scores: np.ndarray, mask: np.ndarray | None = None) -> np.ndarray:
    """Masked softmax over the last axis (``scores`` is left unchanged).

    Masked entries get weight exactly 0; a row with every entry masked gets all zeros.
    Subtracting the row maximum keeps large logits finite.

    Shape:
        scores ``(..., L, S)``; mask broadcastable to it. Returns ``(..., L, S)``.

    Raises:
        ValueError: if ``mask`` does not broadcast or ``scores`` is not finite.
        TypeError: if ``scores`` is not a float array or ``mask`` is not boolean.
    """
    _check_array("scores", scores)
    if scores.ndim < 1:
        raise ValueError(f"scores must have shape (..., S); got 0-D shape {scores.shape}")
    if mask is not None:
        _check_mask(mask, scores.shape, "scores.shape")
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

    Raises:
        ValueError: on mismatched shapes, empty sequences, a mask that does not
            broadcast, or non-finite inputs.
        TypeError: on non-float or mixed dtypes, or a non-boolean mask.
    """
    for name, x in (("query", query), ("key", key), ("value", value)):
        _check_array(name, x)
    v.check_same_dtype({"query": query, "key": key, "value": value})
    L, S, _, _ = v.check_qkv(query, key, value)
    batch = v.broadcast_batch(query, key, value)
    if mask is not None:
        _check_mask(mask, (*batch, L, S), "(..., L, S)")
    return _attend(query, key, value, mask)


def _attend(
    q: np.ndarray, k: np.ndarray, v_: np.ndarray, mask: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray]:
    scale = 1.0 / np.sqrt(q.shape[-1])
    scores = np.matmul(q, k.swapaxes(-1, -2))  # (..., L, Dh) @ (..., Dh, S) -> (..., L, S)
    scores *= scores.dtype.type(scale)
    weights = _softmax_inplace(scores, mask)  # (..., L, S)
    return np.matmul(weights, v_), weights  # (..., L, S) @ (..., S, Dv) -> (..., L, Dv)


def split_heads(x: np.ndarray, num_heads: int) -> np.ndarray:
    """Split the model width into heads, as a contiguous array.

    Shape:
        ``(B, L, D)`` -> ``(B, H, L, Dh)``.

    Raises:
        ValueError: if ``x`` is not 3-D or H does not divide its width.
    """
    v.check_rank("x", x, 3, "(B, L, D)")
    B, L, D = x.shape
    v.check_sizes(D, num_heads)
    x = x.reshape(B, L, num_heads, D // num_heads)  # (B, L, D) -> (B, L, H, Dh)
    return np.ascontiguousarray(x.transpose(0, 2, 1, 3))  # -> (B, H, L, Dh)


def merge_heads(x: np.ndarray) -> np.ndarray:
    """Concatenate the heads back into the model width (the inverse of ``split_heads``).

    Shape:
        ``(B, H, L, Dh)`` -> ``(B, L, D)``.

    Raises:
        ValueError: if ``x`` is not 4-D.
    """
    v.check_rank("x", x, 4, "(B, H, L, Dh)")
    B, H, L, Dh = x.shape
    return x.transpose(0, 2, 1, 3).reshape(B, L, H * Dh)  # (B, H, L, Dh) -> (B, L, D)


def _linear(x: np.ndarray, w: np.ndarray, b: np.ndarray | None) -> np.ndarray:
    y = x @ w
    if b is not None:
        y += b
    return y


def _check_mha(
    query: np.ndarray,
    key: np.ndarray,
    value: np.ndarray,
    params: MHAParams,
    mask: np.ndarray | None,
    form: str,
) -> None:
    if not isinstance(params, MHAParams):
        raise TypeError(f"params must be MHAParams; got {type(params).__name__}")
    v.check_form(form)
    for name, x in v.distinct(("query", query), ("key", key), ("value", value)):
        _check_array(name, x)
    B, L, S = v.check_mha_inputs(query, key, value, params.d_model)
    for name in ("w_qkv", "w_o", "b_qkv", "b_o"):
        x = getattr(params, name)
        if x is not None:
            _check_array(f"params.{name}", x)
    v.check_same_dtype(
        {"query": query, "key": key, "value": value, "params.w_qkv": params.w_qkv}
        | {f"params.{n}": getattr(params, n) for n in ("w_o", "b_qkv", "b_o")}
    )
    if mask is not None:
        _check_mask(mask, (B, params.num_heads, L, S))


def multi_head_attention(
    query: np.ndarray,
    key: np.ndarray,
    value: np.ndarray,
    params: MHAParams,
    mask: np.ndarray | None = None,
    *,
    form: str = "fused",
    need_weights: bool = True,
) -> tuple[np.ndarray, np.ndarray | None]:
    """``Concat(head_1, ..., head_H) W^O`` with ``head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V)``.

    Three mathematically identical forms:

    - ``"per_head"``: a loop over heads, 3H projections of width Dh;
    - ``"fused"``: three ``(D, D)`` projections, then a reshape into heads;
    - ``"packed"``: one ``(D, 3D)`` projection for self-attention (when ``query``,
      ``key`` and ``value`` are the same array); for cross-attention the query is
      projected alone and key and value (the same array) share one ``(D, 2D)``
      projection; distinct key and value arrays fall back to three projections.

    Args:
        query: queries.
        key: keys (pass ``query`` again for self-attention).
        value: values.
        params: the layer's parameters, NumPy arrays of the inputs' dtype.
        mask: boolean, True = may attend; broadcastable to ``(B, H, L, S)``.
        form: ``"per_head"``, ``"fused"`` or ``"packed"``.
        need_weights: whether to return the attention weights.

    Shape:
        query ``(B, L, D)``, key and value ``(B, S, D)``. Returns output ``(B, L, D)``
        and weights ``(B, H, L, S)`` (or ``None`` when ``need_weights`` is False).

    Raises:
        ValueError: on mismatched shapes, empty sequences, a mask that does not
            broadcast, non-finite inputs or an unknown ``form``.
        TypeError: on non-float or mixed dtypes, a non-boolean mask, or wrong ``params``.
    """
    _check_mha(query, key, value, params, mask, form)
    H = params.num_heads
    if form == "per_head":
        heads, weights = [], []
        for h in range(H):
            blk = params.head(h)
            cols = slice(h * params.d_head, (h + 1) * params.d_head)
            b = {
                n: None if getattr(params, n) is None else getattr(params, n)[cols]
                for n in ("b_q", "b_k", "b_v")
            }
            q = _linear(query, blk["w_q"], b["b_q"])  # (B, L, D) -> (B, L, Dh)
            k = _linear(key, blk["w_k"], b["b_k"])  # (B, S, D) -> (B, S, Dh)
            val = _linear(value, blk["w_v"], b["b_v"])  # (B, S, D) -> (B, S, Dh)
            head_mask = None if mask is None else _head_slice(mask, h)
            out_h, w_h = _attend(q, k, val, head_mask)  # (B, L, Dh), (B, L, S)
            heads.append(out_h)
            if need_weights:  # otherwise each head's (B, L, S) weights are freed in turn
                weights.append(w_h)
        concat = np.concatenate(heads, axis=-1)  # H x (B, L, Dh) -> (B, L, D)
        out = _linear(concat, params.w_o, params.b_o)
        return out, (np.stack(weights, axis=1) if need_weights else None)  # (B, H, L, S)

    if form == "packed" and query is key and key is value:
        qkv = _linear(query, params.w_qkv, params.b_qkv)  # (B, L, D) -> (B, L, 3D)
        q, k, val = np.split(qkv, 3, axis=-1)  # 3 x (B, L, D)
    elif form == "packed" and key is value:
        D = params.d_model
        b_kv = None if params.b_qkv is None else params.b_qkv[D:]
        q = _linear(query, params.w_q, params.b_q)  # (B, L, D)
        kv = _linear(key, params.w_qkv[:, D:], b_kv)  # (B, S, D) -> (B, S, 2D)
        k, val = np.split(kv, 2, axis=-1)  # 2 x (B, S, D)
    else:
        q = _linear(query, params.w_q, params.b_q)  # (B, L, D)
        k = _linear(key, params.w_k, params.b_k)  # (B, S, D)
        val = _linear(value, params.w_v, params.b_v)  # (B, S, D)
    q, k, val = (split_heads(t, H) for t in (q, k, val))  # (B, H, L|S, Dh)
    out, weights = _attend(q, k, val, mask)  # (B, H, L, Dh), (B, H, L, S)
    out = _linear(merge_heads(out), params.w_o, params.b_o)  # (B, L, D)
    return out, (weights if need_weights else None)


def _head_slice(mask: np.ndarray, h: int) -> np.ndarray:
    """The part of a ``(..., H|1, L, S)``-broadcastable mask that applies to head ``h``."""
    if mask.ndim < 3:
        return mask  # (L, S) or (S,): the same for every head
    return mask[..., h if mask.shape[-3] > 1 else 0, :, :]  # (B|1, H|1, L, S) -> (B|1, L, S)


def _check_layer_norm(x, weight, bias, eps) -> None:
    _check_array("x", x)
    if x.ndim < 1:
        raise ValueError(f"x must have shape (..., D); got 0-D shape {tuple(x.shape)}")
    for name, p in (("weight", weight), ("bias", bias)):
        if p is not None:
            _check_array(name, p)
    v.check_same_dtype({"x": x, "weight": weight, "bias": bias})
    v.check_layer_norm_params(x.shape[-1], weight, bias, eps)


def layer_norm(
    x: np.ndarray,
    weight: np.ndarray | None = None,
    bias: np.ndarray | None = None,
    eps: float = 1e-5,
) -> np.ndarray:
    """Layer normalisation over the last axis (the model width), as ``torch.nn.LayerNorm``.

    Shape:
        x ``(..., D)``, weight and bias ``(D,)``. Returns ``(..., D)``.

    Raises:
        ValueError: if ``eps`` is not a positive number, ``weight``/``bias`` are not
            ``(D,)``, or an input is not finite.
        TypeError: on non-float or mixed dtypes.
    """
    _check_layer_norm(x, weight, bias, eps)
    mean = x.mean(axis=-1, keepdims=True)  # (..., 1)
    var = x.var(axis=-1, keepdims=True)  # (..., 1), biased as in torch
    y = (x - mean) / np.sqrt(var + eps)
    if weight is not None:
        y = y * weight
    if bias is not None:
        y = y + bias
    return y


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
        x: the block's input, which is the queries, keys and values.
        params: the attention layer's parameters.
        mask: boolean, True = may attend; broadcastable to ``(B, H, L, L)``.
        ln_weight: the layer norm's scale (``None``: 1).
        ln_bias: the layer norm's shift (``None``: 0).
        eps: the layer norm's epsilon.
        form: the form of :func:`multi_head_attention`.
        norm_first: normalise before the attention (pre-norm) instead of after the sum.

    Shape:
        x ``(B, L, D)``. Returns output ``(B, L, D)`` and weights ``(B, H, L, L)``.

    Raises:
        TypeError: if ``norm_first`` is not a bool; and the errors of
            :func:`multi_head_attention` and :func:`layer_norm`.
    """
    if not isinstance(norm_first, bool):
        raise TypeError(
            f"norm_first must be a bool; got {type(norm_first).__name__} {norm_first!r}"
        )
    if norm_first:
        normed = layer_norm(x, ln_weight, ln_bias, eps)
        attn, weights = multi_head_attention(normed, normed, normed, params, mask, form=form)
        return x + attn, weights
    attn, weights = multi_head_attention(x, x, x, params, mask, form=form)
    return layer_norm(x + attn, ln_weight, ln_bias, eps), weights
