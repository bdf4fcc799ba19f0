"""Multi-head attention in PyTorch, with the names and arguments of :mod:`mha.np_backend`.

Inputs are batch first: ``(B, L, D)`` queries and ``(B, S, D)`` keys/values. Masks are
boolean, **True = may attend**, broadcastable to ``(B, H, L, S)``: the convention of
``torch.nn.functional.scaled_dot_product_attention``, and the opposite of
``torch.nn.MultiheadAttention`` (see :mod:`mha.module` for the conversion).

A fully masked query row gets all-zero weights and a zero attention output, as in the
NumPy backend and in ``scaled_dot_product_attention``. When no weights are requested,
the fused and packed forms call ``scaled_dot_product_attention``, which never stores the
``(B, H, L, S)`` score tensor.
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F

from mha import _validate as v
from mha.params import MHAParams

FLOATS = (torch.float64, torch.float32, torch.bfloat16)
CAUSAL_ALIGNMENTS = ("top_left", "bottom_right")  # where query 0 of a causal mask sits


def _finite(x: torch.Tensor) -> bool:
    """True when ``x`` holds no NaN or infinity.

    The extremes of ``x`` are finite exactly when every entry is (min and max propagate
    NaN), and one ``aminmax`` pass is many times cheaper than ``isfinite(x).all()``.
    A float32/float64 CPU tensor is reduced by NumPy instead, on the calling thread: a
    PyTorch reduction of a large tensor waits for every intra-op thread, and on a busy
    machine that wait can cost milliseconds where the work itself takes a fraction of one.
    """
    if x.numel() == 0:
        return True
    if x.device.type == "cpu" and x.dtype in (torch.float32, torch.float64):
        a = x.detach().numpy()  # a view, no copy
        return math.isfinite(a.min()) and math.isfinite(a.max())
    with torch.no_grad():
        lo, hi = torch.aminmax(x)
    return math.isfinite(lo.item()) and math.isfinite(hi.item())


def _check_tensor(name: str, x: object) -> None:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor; got {type(x).__name__}")
    v.check_float(name, x, FLOATS)
    v.check_finite(name, x, _finite)


def _check_mask(mask: object, target: tuple[int, ...], layout: str = "(B, H, L, S)") -> None:
    if not isinstance(mask, torch.Tensor):
        raise TypeError(f"mask must be a torch.Tensor of bool; got {type(mask).__name__}")
    v.check_mask(mask, target, mask.dtype == torch.bool, layout)


def causal_mask(
    q_len: int,
    kv_len: int | None = None,
    device: torch.device | None = None,
    *,
    align: str = "top_left",
) -> torch.Tensor:
    """Boolean causal mask: query ``i`` may attend to the keys at or before its position.

    With ``L = S`` both alignments give the lower triangle, keys ``j <= i``. They differ
    when ``L != S``:

    - ``"top_left"`` (the default): query ``i`` sits at position ``i``, and sees keys
      ``j <= i``, as ``scaled_dot_product_attention(is_causal=True)`` and
      ``torch.nn.attention.bias.causal_upper_left``.
    - ``"bottom_right"``: the queries are the *last* ``L`` of ``S`` positions, query ``i``
      at position ``S - L + i``, and it sees keys ``j <= S - L + i``: decoding with a
      key/value cache, and ``torch.nn.attention.bias.causal_lower_right``. With ``L > S``
      its first ``L - S`` rows are fully masked.

    Args:
        q_len: query length L.
        kv_len: key length S (defaults to L).
        device: where to create the mask.
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
    return torch.ones(q_len, kv_len, dtype=torch.bool, device=device).tril(offset)


def key_padding_mask(lengths, kv_len: int) -> torch.Tensor:
    """Boolean mask letting each batch element attend only to its first ``lengths[b]`` keys.

    Shape:
        lengths ``(B,)``; returns ``(B, 1, 1, S)``, which broadcasts to ``(B, H, L, S)``.

    Raises:
        ValueError: if ``lengths`` is not 1-D or a length is outside ``[0, S]``.
        TypeError: if ``lengths`` are not integers or ``kv_len`` is not an int.
    """
    lengths = torch.as_tensor(lengths)
    v.check_length("kv_len", kv_len, "S")
    if lengths.ndim != 1:
        raise ValueError(f"lengths must have shape (B,); got shape {tuple(lengths.shape)}")
    if lengths.dtype.is_floating_point or lengths.dtype.is_complex or lengths.dtype == torch.bool:
        raise TypeError(f"lengths must be integers; got dtype {lengths.dtype}")
    if ((lengths < 0) | (lengths > kv_len)).any():
        raise ValueError(f"lengths must lie in [0, kv_len={kv_len}]; got {lengths.tolist()}")
    keep = torch.arange(kv_len, device=lengths.device)[None, :] < lengths[:, None]  # (B, S)
    return keep[:, None, None, :]  # (B, S) -> (B, 1, 1, S)


def softmax(scores: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """Masked softmax over the last dimension (out of place, so autograd works).

    Masked entries get weight exactly 0; a row with every entry masked gets all zeros
    (and zero gradient, never NaN). Low-precision scores are normalised in float32.

    Shape:
        scores ``(..., L, S)``; mask broadcastable to it. Returns ``(..., L, S)``.

    Raises:
        ValueError: if ``mask`` does not broadcast or ``scores`` is not finite.
        TypeError: if ``scores`` is not a float tensor or ``mask`` is not boolean.
    """
    _check_tensor("scores", scores)
    if scores.ndim < 1:
        raise ValueError(f"scores must have shape (..., S); got 0-D shape {tuple(scores.shape)}")
    if mask is not None:
        _check_mask(mask, tuple(scores.shape), "scores.shape")
    return _softmax(scores, mask)


def _softmax(scores: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """The masked softmax of :func:`softmax` (no checks)."""
    low = scores.dtype in (torch.float16, torch.bfloat16)
    work = scores.float() if low else scores
    if mask is None:
        weights = torch.softmax(work, dim=-1)
    else:
        any_allowed = mask.any(dim=-1, keepdim=True)  # (..., L, 1)
        work = work.masked_fill(~mask, float("-inf"))
        work = work.masked_fill(~any_allowed, 0.0)  # fully masked rows: finite, then zeroed
        weights = torch.softmax(work, dim=-1) * any_allowed
    return weights.to(scores.dtype)


def scaled_dot_product_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    mask: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
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
        _check_tensor(name, x)
    v.check_same_dtype({"query": query, "key": key, "value": value})
    L, S, _, _ = v.check_qkv(query, key, value)
    batch = v.broadcast_batch(query, key, value)
    if mask is not None:
        _check_mask(mask, (*batch, L, S), "(..., L, S)")
    return _attend(query, key, value, mask)


def _recording(*tensors: torch.Tensor) -> bool:
    """True when autograd records operations on any of ``tensors``."""
    return torch.is_grad_enabled() and any(t.requires_grad for t in tensors)


_NUMPY_FLOATS = {torch.float32: np.float32, torch.float64: np.float64}


def _empty_scores(shape: tuple[int, ...], like: torch.Tensor) -> torch.Tensor:
    """An uninitialised ``(..., L, S)`` tensor of ``like``'s dtype and device.

    A float32/float64 CPU buffer is allocated by NumPy, which asks the kernel for huge pages
    for large arrays: the first writes then fault once per 2 MiB instead of once per 4 KiB
    page, which for a 32 MiB score tensor saves several milliseconds.
    """
    if like.device.type == "cpu" and like.dtype in _NUMPY_FLOATS:
        return torch.from_numpy(np.empty(shape, dtype=_NUMPY_FLOATS[like.dtype]))
    return torch.empty(shape, dtype=like.dtype, device=like.device)


def _attend(q, k, v_, mask):
    scale = 1.0 / math.sqrt(q.shape[-1])
    if _recording(q, k, v_):
        # Scaling Q (L x Dh entries) costs less than scaling the scores (L x S entries).
        scores = (q * scale) @ k.transpose(-1, -2)  # (..., L, Dh) @ (..., Dh, S) -> (..., L, S)
        weights = _softmax(scores, mask)  # (..., L, S)
        return weights @ v_, weights  # (..., L, S) @ (..., S, Dv) -> (..., L, Dv)
    # Without autograd (which cannot record ``out=``) the same arithmetic runs faster: the
    # batched matmuls get contiguous operands (heads split from a projection are strided
    # views; scaling Q writes it contiguously in the same pass), the scores go to a buffer
    # from _empty_scores, and the softmax overwrites that buffer. Nothing keeps the scores
    # for a backward pass here, so this path holds one (..., L, S) tensor where the
    # recording path holds two (scores and weights), as mha.cost measures and the book reports.
    q = torch.mul(q, scale, out=torch.empty(q.shape, dtype=q.dtype, device=q.device))
    shape = (*torch.broadcast_shapes(q.shape[:-2], k.shape[:-2]), q.shape[-2], k.shape[-2])
    scores = torch.matmul(q, k.contiguous().transpose(-1, -2), out=_empty_scores(shape, q))
    weights = _softmax_(scores, mask)  # the same tensor as scores, now holding the weights
    return weights @ v_.contiguous(), weights  # (..., L, S) @ (..., S, Dv) -> (..., L, Dv)


def _softmax_(scores: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """The masked softmax of :func:`_softmax`, written over ``scores`` (returned).

    The same operations in the same order, so the result equals ``_softmax``'s exactly.
    Low-precision scores are normalised in a float32 copy that is then rounded back into
    ``scores``, as ``_softmax`` rounds its float32 result.
    """
    low = scores.dtype in (torch.float16, torch.bfloat16)
    work = scores.float() if low else scores  # (..., L, S)
    if mask is not None:
        any_allowed = mask.any(dim=-1, keepdim=True)  # (..., L, 1)
        work.masked_fill_(~mask, float("-inf"))
        work.masked_fill_(~any_allowed, 0.0)  # fully masked rows: finite, then zeroed
    torch.softmax(work, dim=-1, out=work)  # row by row, each row read before it is written
    if mask is not None:
        work.mul_(any_allowed)
    return scores.copy_(work) if low else work


def _attend_fast(q, k, v_, mask):
    """SDPA without materialising weights; fully masked rows give zeros, as in ``_attend``."""
    if mask is not None and mask.ndim < 2:
        mask = mask.reshape((1,) * (2 - mask.ndim) + tuple(mask.shape))  # (S,) -> (1, S)
    return F.scaled_dot_product_attention(q, k, v_, attn_mask=mask)  # (B, H, L, Dh)


def split_heads(x: torch.Tensor, num_heads: int) -> torch.Tensor:
    """Split the model width into heads (a view when ``x`` is contiguous in its width).

    Shape:
        ``(B, L, D)`` -> ``(B, H, L, Dh)``.

    Raises:
        ValueError: if ``x`` is not 3-D or H does not divide its width.
    """
    v.check_rank("x", x, 3, "(B, L, D)")
    B, L, D = x.shape
    v.check_sizes(D, num_heads)
    return x.reshape(B, L, num_heads, D // num_heads).transpose(1, 2)  # -> (B, H, L, Dh)


def merge_heads(x: torch.Tensor) -> torch.Tensor:
    """Concatenate the heads back into the model width (the inverse of ``split_heads``).

    Shape:
        ``(B, H, L, Dh)`` -> ``(B, L, D)``.

    Raises:
        ValueError: if ``x`` is not 4-D.
    """
    v.check_rank("x", x, 4, "(B, H, L, Dh)")
    B, H, L, Dh = x.shape
    return x.transpose(1, 2).reshape(B, L, H * Dh)  # (B, H, L, Dh) -> (B, L, D)


def _linear(x, w, b):
    return (
        x @ w
        if b is None
        else torch.addmm(b, x.reshape(-1, x.shape[-1]), w).view(*x.shape[:-1], w.shape[-1])
    )


def _check_mha(query, key, value, params, mask, form):
    if not isinstance(params, MHAParams):
        raise TypeError(f"params must be MHAParams; got {type(params).__name__}")
    v.check_form(form)
    for name, x in v.distinct(("query", query), ("key", key), ("value", value)):
        _check_tensor(name, x)
    B, L, S = v.check_mha_inputs(query, key, value, params.d_model)
    named = {"query": query, "key": key, "value": value}
    for name in ("w_qkv", "w_o", "b_qkv", "b_o"):
        x = getattr(params, name)
        if x is not None:
            if not isinstance(x, torch.Tensor):
                raise TypeError(
                    f"params.{name} must be a torch.Tensor; got {type(x).__name__} "
                    "(convert with params.to_torch())"
                )
            _check_tensor(f"params.{name}", x)
            named[f"params.{name}"] = x
    v.check_same_dtype(named)
    if mask is not None:
        _check_mask(mask, (B, params.num_heads, L, S))


def multi_head_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    params: MHAParams,
    mask: torch.Tensor | None = None,
    *,
    form: str = "fused",
    need_weights: bool = True,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``Concat(head_1, ..., head_H) W^O`` with ``head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V)``.

    The forms and arguments are those of :func:`mha.np_backend.multi_head_attention`.
    With ``need_weights=False`` the fused and packed forms use
    ``torch.nn.functional.scaled_dot_product_attention`` (the fast path).

    Shape:
        query ``(B, L, D)``, key and value ``(B, S, D)``. Returns output ``(B, L, D)``
        and weights ``(B, H, L, S)`` (or ``None`` when ``need_weights`` is False).

    Raises:
        ValueError: on mismatched shapes, empty sequences, a mask that does not
            broadcast, non-finite inputs or an unknown ``form``.
        TypeError: on non-float or mixed dtypes, a non-boolean mask, or wrong ``params``.
    """
    _check_mha(query, key, value, params, mask, form)
    H, D = params.num_heads, params.d_model
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
        out = _linear(torch.cat(heads, dim=-1), params.w_o, params.b_o)  # (B, L, D)
        return out, (torch.stack(weights, dim=1) if need_weights else None)  # (B, H, L, S)

    if form == "packed" and query is key and key is value:
        qkv = _linear(query, params.w_qkv, params.b_qkv)  # (B, L, D) -> (B, L, 3D)
        q, k, val = qkv.split(D, dim=-1)  # 3 x (B, L, D)
    elif form == "packed" and key is value:
        b_kv = None if params.b_qkv is None else params.b_qkv[D:]
        q = _linear(query, params.w_q, params.b_q)  # (B, L, D)
        k, val = _linear(key, params.w_qkv[:, D:], b_kv).split(D, dim=-1)  # 2 x (B, S, D)
    else:
        q = _linear(query, params.w_q, params.b_q)  # (B, L, D)
        k = _linear(key, params.w_k, params.b_k)  # (B, S, D)
        val = _linear(value, params.w_v, params.b_v)  # (B, S, D)
    q, k, val = (split_heads(t, H) for t in (q, k, val))  # (B, H, L|S, Dh)
    if need_weights:
        out, weights = _attend(q, k, val, mask)  # (B, H, L, Dh), (B, H, L, S)
    else:
        out, weights = _attend_fast(q, k, val, mask), None  # (B, H, L, Dh)
    out = _linear(merge_heads(out), params.w_o, params.b_o)  # (B, L, D)
    return out, weights


def _head_slice(mask: torch.Tensor, h: int) -> torch.Tensor:
    """The part of a ``(..., H|1, L, S)``-broadcastable mask that applies to head ``h``."""
    if mask.ndim < 3:
        return mask  # (L, S) or (S,): the same for every head
    return mask[..., h if mask.shape[-3] > 1 else 0, :, :]  # (B|1, H|1, L, S) -> (B|1, L, S)


def _check_layer_norm(x, weight, bias, eps) -> None:
    _check_tensor("x", x)
    if x.ndim < 1:
        raise ValueError(f"x must have shape (..., D); got 0-D shape {tuple(x.shape)}")
    for name, p in (("weight", weight), ("bias", bias)):
        if p is not None:
            _check_tensor(name, p)
    v.check_same_dtype({"x": x, "weight": weight, "bias": bias})
    v.check_layer_norm_params(x.shape[-1], weight, bias, eps)


def layer_norm(
    x: torch.Tensor,
    weight: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
    eps: float = 1e-5,
) -> torch.Tensor:
    """Layer normalisation over the last dimension, as ``torch.nn.LayerNorm``.

    Shape:
        x ``(..., D)``, weight and bias ``(D,)``. Returns ``(..., D)``.

    Raises:
        ValueError: if ``eps`` is not a positive number, ``weight``/``bias`` are not
            ``(D,)``, or an input is not finite.
        TypeError: on non-float or mixed dtypes.
    """
    _check_layer_norm(x, weight, bias, eps)
    return F.layer_norm(x, (x.shape[-1],), weight, bias, eps)


def attention_block(
    x: torch.Tensor,
    params: MHAParams,
    mask: torch.Tensor | None = None,
    *,
    ln_weight: torch.Tensor | None = None,
    ln_bias: torch.Tensor | None = None,
    eps: float = 1e-5,
    form: str = "fused",
    norm_first: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
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
