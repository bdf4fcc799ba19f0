"""Multi-head attention in PyTorch, with the names and arguments of :mod:`mha.backends.np_backend`.

Inputs are batch first: ``(B, L, D)`` queries and ``(B, S, D)`` keys/values. Masks are
boolean, **True = may attend**, broadcastable to ``(B, H, L, S)``: the convention of
``torch.nn.functional.scaled_dot_product_attention``, and the opposite of
``torch.nn.MultiheadAttention`` (see :mod:`mha.backends.module` for the conversion). They are
read as :mod:`mha.core.mask_rules` says, as in the NumPy backend.

Each form of multi-head attention is one function of pure math, with no check inside:
:func:`attention_per_head`, :func:`attention_fused` and :func:`attention_packed` (the tiled
form is NumPy's only). :func:`multi_head_attention` checks the arguments, runs the form, and
checks the result's range. When no weights are requested, the fused and packed forms call
``scaled_dot_product_attention``, which never stores the ``(B, H, L, S)`` score tensor; with
weights they call :func:`attend`, which on the CPU takes the shortcuts of
:mod:`mha.backends.cpu_shortcuts` when autograd does not record.

A fully masked query row gets all-zero weights and a zero attention output, as in the
NumPy backend: the fast path sets such rows to zero after ``scaled_dot_product_attention``,
whose kernels differ there (a fused GPU kernel may return NaN). Inputs, parameters and mask
must share one device. Every call reads the values of its inputs and parameters once, to refuse
NaN and infinity and to bound the result (:mod:`mha.backends.torch_checks`, whose
:func:`~mha.backends.torch_checks.value_checks` switches those reads off). Tensors on the
``meta`` device and graphs being traced (``torch.compile``, ``torch.export``) have no values
to read: every check that needs values is then skipped. ``torch.func.vmap``, ``grad`` and
``jacrev`` work over these functions, and so do negative views (``is_neg()``); sparse and
nested tensors are refused. Empty batches (``B = 0``) give empty outputs. Double backward (a
gradient of a gradient) needs the explicit path, ``need_weights=True``: PyTorch's CPU kernel
behind the fast path has no derivative of its backward.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.nn.attention.bias import causal_lower_right

from mha.backends import _docs, cpu_shortcuts
from mha.backends.torch_checks import TENSORS
from mha.core._checks import arguments, arrays, layer, overflow
from mha.core._groups import group_mask, head_slice
from mha.core.kv_cache import KVCache
from mha.core.mask_rules import causal_offset
from mha.core.params import MHAParams
from mha.core.rotary import Rotary, rotated

# The forms this backend computes. The tiled form of mha.backends.np_backend is refused here: this
# backend has no tiled computation of its own, and need_weights=False already runs
# scaled_dot_product_attention, whose kernel PyTorch chooses.
FORMS = ("per_head", "fused", "packed")


@_docs.shared(
    "causal_mask",
    _docs.TORCH,
    device_arg="\n        device: where to create the mask.",
    device_value=", ``device`` names no device available here",
    device_type=" or ``device`` is not a device or a name",
)
def causal_mask(
    q_len: int,
    kv_len: int | None = None,
    *,
    device: torch.device | None = None,
    align: str = "top_left",
) -> Tensor:
    kv_len = q_len if kv_len is None else kv_len
    arguments.check_causal(q_len, kv_len, align)
    device = arguments.check_device("device", device)
    keep = torch.ones(q_len, kv_len, dtype=torch.bool, device=device)
    return keep.tril(causal_offset(q_len, kv_len, align))


@_docs.shared("key_padding_mask", _docs.TORCH, lengths_type=" (or a meta tensor)")
def key_padding_mask(lengths: Tensor | list[int], kv_len: int) -> Tensor:
    arguments.check_length("kv_len", kv_len, "S")
    if isinstance(lengths, list | tuple) and len(lengths) == 0:
        lengths = torch.zeros(0, dtype=torch.int64)  # an empty list has no dtype to check
    try:
        lengths = torch.as_tensor(lengths)
    except (TypeError, ValueError, RuntimeError):
        raise TypeError(
            "lengths must be a 1-D sequence or tensor of integers; got "
            f"{arguments.describe(lengths)}"
        ) from None
    dtype = lengths.dtype
    is_integer = not (dtype.is_floating_point or dtype.is_complex or dtype == torch.bool)
    values = None if lengths.device.type == "meta" else lengths
    arguments.check_lengths(lengths, kv_len, is_integer, values)
    keep = torch.arange(kv_len, device=lengths.device)[None, :] < lengths[:, None]  # (B, S)
    return keep[:, None, None, :]  # (B, S) -> (B, 1, 1, S)


@_docs.shared(
    "with_causal", _docs.TORCH, device_arg="\n        device: where to create the causal mask."
)
def with_causal(
    mask: Tensor | None,
    causal: str | None,
    q_len: int,
    kv_len: int,
    *,
    device: torch.device | None = None,
) -> Tensor | None:
    if causal is None:
        return mask
    keep = causal_mask(q_len, kv_len, device=device, align=causal)  # (L, S)
    return keep if mask is None else mask & keep  # (..., L, S)


@_docs.shared(
    "softmax",
    _docs.TORCH,
    softmax_note="out of place, so autograd works",
    zero_grad=" (and zero gradient, never NaN)",
    low_precision=" Low-precision scores are normalised in float32.",
    differentiable=" (differentiable)",
)
def softmax(scores: Tensor, mask: Tensor | None = None) -> Tensor:
    arrays.check_softmax(scores, mask, TENSORS)
    return _softmax(scores, mask)


def _softmax(scores: Tensor, mask: Tensor | None) -> Tensor:
    """The masked softmax of :func:`softmax` (no checks), out of place."""
    work = scores.float() if scores.dtype in (torch.bfloat16, torch.float16) else scores  # 16-bit
    if mask is None:
        return torch.softmax(work, dim=-1).to(scores.dtype)
    allowed = mask.any(dim=-1, keepdim=True)  # (..., L, 1): False in a fully masked row
    work = work.masked_fill(~mask, float("-inf")).masked_fill(~allowed, 0.0)  # rows finite
    return (torch.softmax(work, dim=-1) * allowed).to(scores.dtype)


@_docs.shared(
    "scaled_dot_product_attention",
    _docs.TORCH,
    kind_errors=", tensors that are not dense, or tensors on different devices",
)
def scaled_dot_product_attention(
    query: Tensor, key: Tensor, value: Tensor, mask: Tensor | None = None
) -> tuple[Tensor, Tensor]:
    magnitudes = arrays.check_attention(query, key, value, mask, TENSORS)
    out, weights = attend(query, key, value, mask)
    overflow.check_attention_range(
        "scaled_dot_product_attention output", out, magnitudes, query, key, value, mask, TENSORS
    )
    return out, weights


def attend(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """Explicit attention ``softmax(Q K^T / sqrt(Dh)) V``, with its weights (no checks).

    Autograd records it. When it does not, on the CPU, :func:`mha.backends.cpu_shortcuts.attend`
    computes the same in one ``(..., L, S)`` buffer.

    Args:
        q: queries.
        k: keys.
        v: values.
        mask: boolean, True = may attend, or ``None``.

    Shape:
        q ``(..., L, Dh)``, k ``(..., S, Dh)``, v ``(..., S, Dv)``. Returns ``(..., L, Dv)``
        and ``(..., L, S)``.

    Returns:
        ``(output, weights)``.
    """
    if cpu_shortcuts.applies(q, k, v, mask):
        return cpu_shortcuts.attend(q, k, v, mask)
    # Scaling Q (L x Dh entries) costs less than scaling the scores (L x S entries).
    scores = (q * (1.0 / math.sqrt(q.shape[-1]))) @ k.transpose(-1, -2)  # (..., L, S)
    weights = _softmax(scores, mask)  # (..., L, S)
    return weights @ v, weights  # (..., L, S) @ (..., S, Dv) -> (..., L, Dv)


@_docs.shared(
    "split_heads", _docs.TORCH, split_note=" (a view when ``x`` is contiguous in its width)"
)
def split_heads(x: Tensor, num_heads: int) -> Tensor:
    arguments.check_rank("x", x, 3, "(B, L, D)")
    B, L, D = x.shape
    arguments.check_sizes(D, num_heads)
    return x.reshape(B, L, num_heads, D // num_heads).transpose(1, 2)  # -> (B, H, L, Dh)


@_docs.shared("merge_heads", _docs.TORCH)
def merge_heads(x: Tensor) -> Tensor:
    arguments.check_rank("x", x, 4, "(B, H, L, Dh)")
    B, H, L, Dh = x.shape
    return x.transpose(1, 2).reshape(B, L, H * Dh)  # (B, H, L, Dh) -> (B, L, D)


@_docs.shared("linear", _docs.TORCH)
def linear(x: Tensor, w: Tensor, b: Tensor | None = None) -> Tensor:
    if b is None:
        return x @ w
    y = torch.addmm(b, x.reshape(-1, x.shape[-1]), w)  # (N, D_in) @ (D_in, D_out), plus b
    return y.view(*x.shape[:-1], w.shape[-1])  # (N, D_out) -> (..., D_out)


def attention_heads(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Tensor | None = None,
    *,
    need_weights: bool = True,
    causal: str | None = None,
) -> tuple[Tensor, Tensor | None]:
    """``softmax(Q K^T / sqrt(Dh)) V`` for every head at once (no checks).

    With ``H_kv`` key/value heads, each serves a group of ``G = H / H_kv`` consecutive query
    heads: the keys broadcast over the group instead of being copied (``H_kv = H``: ``G = 1``).
    Without weights, ``scaled_dot_product_attention`` computes it (``_sdpa``), with its causal
    kernel when the layer is causal and has no mask.

    Args:
        q: the query heads.
        k: the key heads.
        v: the value heads.
        mask: boolean, True = may attend; broadcastable to ``(B, H, L, S)``, or ``None``.
        need_weights: return the weights (the explicit path, :func:`attend`) or ``None``.
        causal: ``None``, or the alignment of a causal mask applied with ``mask``
            (:func:`with_causal`).

    Shape:
        q ``(B, H, L, Dh)``, k and v ``(B, H_kv, S, Dh)``. Returns ``(B, H, L, Dh)`` and
        ``(B, H, L, S)``.

    Returns:
        ``(output, weights)``; ``weights`` is ``None`` when ``need_weights`` is False.
    """
    if not need_weights:
        return _sdpa(q, k, v, mask, causal), None
    (B, H, L, Dh), (H_kv, S) = q.shape, k.shape[1:3]
    mask = with_causal(mask, causal, L, S, device=q.device)  # (..., L, S)
    q = q.reshape(B, H_kv, H // H_kv, L, Dh)  # (B, H, L, Dh) -> (B, H_kv, G, L, Dh)
    out, weights = attend(q, k[:, :, None], v[:, :, None], group_mask(mask, H_kv))
    return out.reshape(B, H, L, v.shape[-1]), weights.reshape(B, H, L, S)  # G heads per group


def _sdpa(q, k, v, mask, causal=None):
    """``scaled_dot_product_attention`` (no weights); fully masked rows give zeros, as
    :func:`attend` gives them, whatever SDPA's kernel returns there (a fused GPU kernel may
    return NaN): the rows whose mask allows no key are set to zero after the call.

    A causal layer without a mask runs SDPA's causal kernel (:func:`_sdpa_causal`). With a
    mask too, the two make one boolean mask (:func:`with_causal`): SDPA takes a mask or
    ``is_causal``, not both.

    With fewer key/value heads than query heads, SDPA's ``enable_gqa`` lets each key/value
    head serve its group of query heads. A decoding step (one query per head, ``L = 1``)
    with a mask shared by the heads instead lays each group's ``G`` queries out as ``G``
    rows against their one key/value head: SDPA's CPU kernel then reads each cached key
    and value once per group rather than once per query head (2.2x faster at H = 16,
    H_kv = 1, S = 16,384).
    """
    if causal is not None and mask is None:
        return _sdpa_causal(q, k, v, causal)
    mask = with_causal(mask, causal, q.shape[-2], k.shape[-2], device=q.device)  # (..., L, S)
    if mask is None:
        return _sdpa_kernel(q, k, v, None)
    if mask.ndim < 2:
        mask = mask.reshape((1,) * (2 - mask.ndim) + tuple(mask.shape))  # (S,) -> (1, S)
    allowed = mask.any(dim=-1, keepdim=True)  # (..., L, 1): False in a fully masked row
    return torch.where(allowed, _sdpa_kernel(q, k, v, mask), 0.0)  # exact zeros there


def _sdpa_kernel(q, k, v, mask):
    """``scaled_dot_product_attention`` with ``H_kv`` key/value heads (see :func:`_sdpa`)."""
    B, H, L, Dh = q.shape
    H_kv = k.shape[-3]
    if H_kv == H:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    if L == 1 and (mask is None or mask.ndim < 3 or mask.shape[-3] == 1):
        rows = q.reshape(B, H_kv, H // H_kv, Dh)  # (B, H_kv, G, Dh): a group's queries as rows
        out = F.scaled_dot_product_attention(rows, k, v, attn_mask=mask)  # (B, H_kv, G, Dv)
        return out.reshape(B, H, 1, out.shape[-1])  # (B, H, 1, Dv)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)


def _sdpa_causal(q, k, v, causal):
    """``scaled_dot_product_attention`` with its causal kernel, aligned at ``causal`` (no mask).

    ``is_causal=True`` is the top-left diagonal, and the bottom-right one too when L = S.
    Bottom-right with L < S is ``causal_lower_right(L, S)``; with L > S the first L - S
    queries see no key (zero output) and the last S are top-left against the S keys.
    """
    L, S, gqa = q.shape[-2], k.shape[-2], k.shape[-3] != q.shape[-3]
    offset = causal_offset(L, S, causal)  # query i sees keys j <= i + offset
    if offset < 0:  # bottom-right with L > S
        out = _sdpa_causal(q[..., L - S :, :], k, v, "top_left")  # (B, H, S, Dv)
        return F.pad(out, (0, 0, L - S, 0))  # (B, H, L, Dv): zero rows first
    if offset >= S - 1:  # every query sees every key (one query at the last position)
        return _sdpa(q, k, v, None)
    bias = {"is_causal": True} if offset == 0 else {"attn_mask": causal_lower_right(L, S)}
    return F.scaled_dot_product_attention(q, k, v, enable_gqa=gqa, **bias)


def attention_per_head(
    query, key, value, params, mask=None, *, causal=None, cache=None, need_weights=True, rotary=None
):
    """Multi-head attention as a loop over heads: head ``h`` projects the inputs with its own
    ``(D, Dh)`` blocks of the weights and attends (:func:`attend`) on its own.

    Args:
        query, key, value, params, mask, need_weights, rotary: see
            :func:`multi_head_attention`.
        causal: ``None``, or the alignment of a causal mask applied with ``mask``
            (:func:`with_causal`).
        cache: ``None`` (a cache holds all heads' keys; the loop makes one head's at a time).

    Shape:
        Returns ``(B, L, D)`` and ``(B, H, L, S)``.

    Returns:
        The output and the weights (``None`` when ``need_weights`` is False).
    """
    heads, weights = [], []
    mask = with_causal(
        mask, causal, query.shape[1], key.shape[1], device=query.device
    )  # (..., L, S)
    for h in range(params.num_heads):
        p = params.head(h)  # head h's columns of W^Q, W^K and W^V, and of the biases
        q = linear(query, p["w_q"], p["b_q"])  # (B, L, D) -> (B, L, Dh)
        k = linear(key, p["w_k"], p["b_k"])  # (B, S, D) -> (B, S, Dh)
        v = linear(value, p["w_v"], p["b_v"])  # (B, S, D) -> (B, S, Dh)
        q, k = rotated(q, k, rotary)  # turned by their positions (rotary=None: unchanged)
        out_h, a = attend(q, k, v, head_slice(mask, h))  # (B, L, Dh), (B, L, S)
        heads.append(out_h)
        if need_weights:
            weights.append(a)
        del a  # without weights returned: one (B, L, S) tensor at a time
    out = linear(torch.cat(heads, dim=-1), params.w_o, params.b_o)  # H x (B, L, Dh) -> (B, L, D)
    return out, (torch.stack(weights, dim=1) if need_weights else None)  # (B, H, L, S)


def attention_fused(
    query, key, value, params, mask=None, *, causal=None, cache=None, need_weights=True, rotary=None
):
    """Multi-head attention with one ``(D, D)`` projection each for Q, K and V, split into
    heads that all attend at once (:func:`attention_heads`; without weights, the fast path).

    Args:
        query, key, value, params, mask, cache, need_weights, rotary: see
            :func:`multi_head_attention`; ``cache.extend`` appends the new keys and values.
        causal: ``None``, or the alignment of a causal mask applied with ``mask``
            (:func:`with_causal`); without weights or a mask, SDPA's causal kernel runs.

    Shape:
        Returns ``(B, L, D)`` and ``(B, H, L, S)``.

    Returns:
        The output and the weights (``None`` when ``need_weights`` is False).
    """
    H, H_kv = params.num_heads, params.num_kv_heads
    q = split_heads(linear(query, params.w_q, params.b_q), H)  # (B, L, D) -> (B, H, L, Dh)
    k = split_heads(linear(key, params.w_k, params.b_k), H_kv)  # (B, S, D) -> (B, H_kv, S, Dh)
    v = split_heads(linear(value, params.w_v, params.b_v), H_kv)  # (B, S, D) -> (B, H_kv, S, Dh)
    q, k = rotated(q, k, rotary, cache)  # turned by their positions, after the cached ones
    if cache is not None:  # a decoding step: every cached key and value, then the new ones
        k, v = cache.extend(k, v)  # (B, H_kv, S, Dh)
    # (B, H, L, Dh), and (B, H, L, S) or None
    out, weights = attention_heads(q, k, v, mask, need_weights=need_weights, causal=causal)
    return linear(merge_heads(out), params.w_o, params.b_o), weights  # -> (B, L, D)


def attention_packed(
    query, key, value, params, mask=None, *, causal=None, cache=None, need_weights=True, rotary=None
):
    """Multi-head attention whose projections share products: one with ``W_qkv`` when query,
    key and value are one tensor, one with the key/value columns when only key and value are.

    Args:
        query, key, value, params, mask, causal, cache, need_weights, rotary: see
            :func:`attention_fused`, which computes this form when key and value are
            different tensors.

    Shape:
        Returns ``(B, L, D)`` and ``(B, H, L, S)``.

    Returns:
        As :func:`attention_fused`.
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
    if query is key:  # (B, L, D) @ (D, D + 2 H_kv Dh), split into Q, K and V
        q, k, v = linear(query, params.w_qkv, params.b_qkv).split([D, kv, kv], dim=-1)
    else:  # Q alone, then (B, S, D) @ (D, 2 H_kv Dh) split into K and V
        q = linear(query, params.w_q, params.b_q)
        k, v = linear(key, *params.packed("kv")).split(kv, dim=-1)
    q = split_heads(q, params.num_heads)  # (B, L, D) -> (B, H, L, Dh)
    k, v = split_heads(k, params.num_kv_heads), split_heads(v, params.num_kv_heads)
    q, k = rotated(q, k, rotary, cache)  # turned by their positions, after the cached ones
    if cache is not None:  # a decoding step: every cached key and value, then the new ones
        k, v = cache.extend(k, v)  # (B, H_kv, S, Dh)
    # (B, H, L, Dh), and (B, H, L, S) or None
    out, weights = attention_heads(q, k, v, mask, need_weights=need_weights, causal=causal)
    return linear(merge_heads(out), params.w_o, params.b_o), weights  # -> (B, L, D)


_FORMS = {"per_head": attention_per_head, "fused": attention_fused, "packed": attention_packed}


@_docs.shared(
    "multi_head_attention",
    _docs.TORCH,
    tiled_form='; NumPy\'s ``"tiled"`` form is refused here, as this backend has no tiled '
    "computation of its own",
    backend_note="With ``need_weights=False`` the fused and packed forms use "
    "``torch.nn.functional.scaled_dot_product_attention`` (the fast path). "
    ":class:`mha.MultiHeadAttention` defaults to that path (``need_weights=False``, "
    '``form="packed"``); its ``forward`` says why.',
    device=" and device",
    need_weights="return the attention weights (the explicit path) or not (the fast path).",
    cache_arrays="tensors of the inputs' dtype and device",
    autograd_cache=" Autograd records through it: gradients through cached steps equal those "
    "of the full causal forward (while recording, each step's append writes a new buffer, "
    "see :meth:`mha.core.kv_cache.KVCache.append`).",
    autograd_result=" (autograd records them when it records the inputs or parameters)",
    tiled_errors=' (``"tiled"`` included)',
    causal_note="without weights and without a mask, ``scaled_dot_product_attention`` runs "
    "its causal kernel, forward and backward: ``is_causal=True`` for the top-left diagonal "
    "(and for bottom-right when L = S), ``torch.nn.attention.bias.causal_lower_right`` for "
    "bottom-right when L < S (the CUDA kernels take it as it is; on the CPU PyTorch builds "
    "its mask), and ``is_causal=True`` on the last S queries when L > S. With weights, or "
    "with a mask as well, the layer attends under :func:`with_causal`'s mask.",
)
def multi_head_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    params: MHAParams,
    mask: Tensor | None = None,
    *,
    causal: bool = False,
    align: str = "top_left",
    form: str = "fused",
    need_weights: bool = True,
    cache: KVCache | None = None,
    rotary: Rotary | None = None,
) -> tuple[Tensor, Tensor | None]:
    m = layer.check_mha(
        query, key, value, params, mask, form=form, need_weights=need_weights, kind=TENSORS,
        cache=cache, forms=FORMS, rotary=rotary,
    )  # fmt: skip
    diagonal = layer.causal_alignment(causal, align)  # None, or where the causal diagonal sits
    with layer.staged(cache, m, params.d_model, rotary) as kv:  # new positions kept on success
        out, w = _FORMS[form](
            query, key, value, params, mask, causal=diagonal, cache=kv,
            need_weights=need_weights, rotary=rotary,
        )  # fmt: skip
        layer.check_mha_range(
            out, m, query, key, value, params, mask, cache=cache, kind=TENSORS, causal=diagonal,
            rotary=rotary,
        )  # fmt: skip
    return out, w


@_docs.shared("layer_norm", _docs.TORCH, devices=", or tensors on different devices")
def layer_norm(
    x: Tensor, weight: Tensor | None = None, bias: Tensor | None = None, eps: float = 1e-5
) -> Tensor:
    magnitudes = arrays.check_layer_norm(x, weight, bias, eps, TENSORS)
    bound = overflow.check_layer_norm_variance(x, magnitudes, TENSORS)
    y = F.layer_norm(x, (x.shape[-1],), weight, bias, eps)
    overflow.check_range("layer_norm output", bound, y, TENSORS, lambda: None)
    return y


@_docs.shared("attention_block", _docs.TORCH, device=" and device")
def attention_block(
    x: Tensor,
    params: MHAParams,
    mask: Tensor | None = None,
    *,
    ln_weight: Tensor | None = None,
    ln_bias: Tensor | None = None,
    eps: float = 1e-5,
    form: str = "fused",
    norm_first: bool = False,
    rotary: Rotary | None = None,
) -> tuple[Tensor, Tensor | None]:
    arguments.check_bool("norm_first", norm_first)
    h = layer_norm(x, ln_weight, ln_bias, eps) if norm_first else x
    attn, weights = multi_head_attention(h, h, h, params, mask, form=form, rotary=rotary)
    out = x + attn if norm_first else layer_norm(x + attn, ln_weight, ln_bias, eps)
    return out, weights
