"""Multi-head latent attention (DeepSeek-V2) in NumPy or PyTorch: one layer, two routes.

A latent layer (:class:`mha.core.latent_params.MLAParams`) caches one latent per position,
from which every head's keys and values can be rebuilt, plus one rotary key shared by the
heads (:class:`mha.core.kv_cache.LatentCache`). This module computes it two ways, each one
function of pure math that takes NumPy arrays or PyTorch tensors alike (the arithmetic is
the library's own: NumPy's for arrays, PyTorch's for tensors):

- :func:`latent_attention_explicit` rebuilds every head's keys ``C W^UK_h`` and values
  ``C W^UV_h`` from the latents ``C``, and attends as multi-head attention does.
- :func:`latent_attention_absorbed` never rebuilds them. Since
  ``q_h (c W^UK_h)^T = (q_h (W^UK_h)^T) c^T``, the key up-projection is folded into the
  query side: each head's query becomes a vector of width ``Dc``, scored against the
  latents themselves. Since ``sum_j a_j c_j W^UV_h = (sum_j a_j c_j) W^UV_h``, the value
  up-projection moves to the output side, after the weighted sum of the latents. Every head
  then reads the same cached rows: multi-query attention with keys ``[c, k_r]`` of width
  ``Dc + Dr`` and values ``c``.

:func:`multi_head_latent_attention` checks the arguments, runs a route, and checks the
result's range, as :func:`mha.backends.np_backend.multi_head_attention` does.

**Rotary positions.** With ``Dr > 0`` the rotation (``rotary``) turns only the decoupled
rotary queries and the shared rotary key, which is cached after its rotation: the content
parts carry no position, so the absorbed route folds ``W^UK`` freely. With ``Dr = 0`` and a
``rotary``, the rotation turns each head's whole query and its rebuilt keys, as in a model
converted from grouped-query attention. Then a score is ``q^T R_(j-i) (W^UK_h)^T c_j`` (as
columns): the rotation by the distance ``j - i`` sits between the query and ``W^UK_h``, no
fixed matrix can be folded into the query, and only the explicit route computes it (it
rebuilds and rotates every cached key at every step).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from mha.backends import np_backend
from mha.core._checks import latent as checks
from mha.core._checks import overflow
from mha.core._checks.numpy_arrays import NUMPY
from mha.core.kv_cache import LatentCache
from mha.core.latent_params import MLAParams
from mha.core.rotary import Rotary, rotate

ROUTES = checks.ROUTES
"""``("explicit", "absorbed")``: the two routes of :func:`multi_head_latent_attention`."""


def _library(x: Any) -> Any:
    """The backend module whose helpers compute on ``x``'s library."""
    if isinstance(x, np.ndarray):
        return np_backend
    from mha.backends import torch_backend

    return torch_backend


def _cat(parts: list[Any]) -> Any:
    """Arrays side by side along their last axis."""
    if isinstance(parts[0], np.ndarray):
        return np.concatenate(parts, axis=-1)
    import torch

    return torch.cat(parts, dim=-1)


def _per_head(k_r: Any, num_heads: int) -> Any:
    """The shared rotary keys ``(B, S, Dr)`` as one per head ``(B, H, S, Dr)``, a view."""
    B, S, Dr = k_r.shape
    if isinstance(k_r, np.ndarray):
        return np.broadcast_to(k_r[:, None], (B, num_heads, S, Dr))
    return k_r[:, None].expand(B, num_heads, S, Dr)


def latent_queries(
    x: Any, params: MLAParams, rotary: Rotary | None, offset: int
) -> tuple[Any, Any]:
    """Every head's query and rotary query (the rotary query rotated, when there is one).

    Args:
        x: the input, new positions only when a cache holds the earlier ones.
        params: the layer.
        rotary: the rotation, or ``None``.
        offset: the position of ``x``'s first row.

    Shape:
        x ``(B, L, D)``; returns ``(B, H, L, Dh)`` and ``(B, H, L, Dr)``.

    Returns:
        ``(q, q_r)``.
    """
    lib, H = _library(x), params.num_heads
    source = x if params.w_dq is None else x @ params.w_dq  # (B, L, D) -> (B, L, Dc')
    q = lib.split_heads(source @ params.w_uq, H)  # (B, L, H Dh) -> (B, H, L, Dh)
    if not params.d_rope:
        return q, q[..., :0]  # (B, H, L, 0): no rotary query
    q_r = lib.split_heads(source @ params.w_qr, H)  # (B, L, H Dr) -> (B, H, L, Dr)
    return q, (q_r if rotary is None else rotate(q_r, rotary, offset=offset))


def latents(x: Any, params: MLAParams, rotary: Rotary | None, offset: int) -> tuple[Any, Any]:
    """What a latent cache keeps of each position: its latent and its rotary key.

    Args:
        x: the input.
        params: the layer.
        rotary: the rotation of the rotary key, or ``None``.
        offset: the position of ``x``'s first row.

    Shape:
        x ``(B, L, D)``; returns ``(B, L, Dc)`` and ``(B, L, Dr)``.

    Returns:
        ``(c, k_r)``: ``x W^DKV``, and ``x W^KR`` rotated to its positions.
    """
    c = x @ params.w_dkv  # (B, L, D) -> (B, L, Dc)
    if not params.d_rope:
        return c, c[..., :0]  # (B, L, 0): no rotary key
    k_r = x @ params.w_kr  # (B, L, D) -> (B, L, Dr), one for every head
    return c, (k_r if rotary is None else rotate(k_r, rotary, offset=offset))


def latent_attention_explicit(x, params, mask=None, *, cache=None, rotary=None, need_weights=True):
    """The explicit route: rebuild every head's keys and values from the latents, and attend.

    Args:
        x, params, mask, cache, rotary, need_weights: those of
            :func:`multi_head_latent_attention`; ``cache.extend`` appends the new latents
            and rotary keys, and ``cache.length`` is the first new position.

    Shape:
        Returns ``(B, L, D)`` and ``(B, H, L, S)``.

    Returns:
        ``(output, weights)``; no weights (``None``) without ``need_weights``.
    """
    lib, H = _library(x), params.num_heads
    offset = 0 if cache is None else cache.length
    q, q_r = latent_queries(x, params, rotary, offset)  # (B, H, L, Dh), (B, H, L, Dr)
    c, k_r = latents(x, params, rotary, offset)  # (B, L, Dc), (B, L, Dr)
    if cache is not None:  # decoding: the cached positions first, then these
        c, k_r = cache.extend(c, k_r)  # (B, S, Dc), (B, S, Dr)
    k = lib.split_heads(c @ params.w_uk, H)  # (B, S, Dc) -> (B, H, S, Dh): keys rebuilt
    v = lib.split_heads(c @ params.w_uv, H)  # (B, S, Dc) -> (B, H, S, Dh): values rebuilt
    if params.d_rope:  # each head's key: its content part, then the shared rotary key
        q, k = _cat([q, q_r]), _cat([k, _per_head(k_r, H)])  # (B, H, L|S, Dh + Dr)
    elif rotary is not None:  # rotary positions on the rebuilt keys themselves
        q, k = rotate(q, rotary, offset=offset), rotate(k, rotary)
    # (B, H, L, Dh), (B, H, L, S)
    out, weights = lib.attention_heads(q, k, v, mask, need_weights=need_weights)
    return lib.merge_heads(out) @ params.w_o, weights  # (B, H, L, Dh) -> (B, L, D)


def latent_attention_absorbed(
    x, params, mask=None, *, cache=None, rotary=None, need_weights=True
):  # fmt: skip
    """The absorbed route: ``W^UK`` folded into the queries, ``W^UV`` applied after attending.

    Each head's query ``q_h`` becomes ``q_h (W^UK_h)^T``, of width ``Dc``, and is scored
    against the latents themselves; every head attends over the same cached rows
    ``[c, k_r]`` (one key/value head: multi-query attention, with values ``c``). The scale
    stays ``1 / sqrt(Dh + Dr)``: the queries are multiplied by ``sqrt((Dc + Dr) / (Dh + Dr))``
    to undo the ``1 / sqrt(Dc + Dr)`` of attention over rows of width ``Dc + Dr``.

    Args:
        x, params, mask, cache, rotary, need_weights: those of
            :func:`latent_attention_explicit` (``rotary`` turns the decoupled parts only).

    Shape:
        Returns ``(B, L, D)`` and ``(B, H, L, S)``.

    Returns:
        ``(output, weights)``; no weights (``None``) without ``need_weights``.
    """
    lib, H, Dh, Dc, Dr = (
        _library(x),
        params.num_heads,
        params.d_head,
        params.d_latent,
        params.d_rope,
    )
    offset = 0 if cache is None else cache.length
    # (B, H, L, Dh), (B, H, L, Dr)
    q, q_r = latent_queries(x, params, rotary, offset)
    c, k_r = latents(x, params, rotary, offset)  # (B, L, Dc), (B, L, Dr)
    if cache is not None:  # decoding: cached positions first, then these
        c, k_r = cache.extend(c, k_r)  # (B, S, Dc), (B, S, Dr)
    # (Dc, H Dh) -> (H, Dc, Dh)
    w_uk = params.w_uk.reshape(Dc, H, Dh).swapaxes(0, 1)
    # (B, H, L, Dh) @ (H, Dh, Dc) -> (B, H, L, Dc)
    q_c = q @ w_uk.swapaxes(-1, -2)
    # (B, H, L, Dc + Dr)
    queries = _cat([q_c, q_r]) * math.sqrt((Dc + Dr) / (Dh + Dr))
    # (B, S, Dc + Dr) -> (B, 1, S, Dc + Dr): shared by all heads
    rows = _cat([c, k_r])[:, None]
    shared = c[:, None]  # (B, 1, S, Dc): the values are the latents
    # (B, H, L, Dc)
    o_c, weights = lib.attention_heads(queries, rows, shared, mask, need_weights=need_weights)
    # (Dc, H Dh) -> (H, Dc, Dh)
    w_uv = params.w_uv.reshape(Dc, H, Dh).swapaxes(0, 1)
    # (B, H, L, Dc) @ (H, Dc, Dh) -> (B, H, L, Dh): each head's output
    out = o_c @ w_uv
    # (B, H, L, Dh) -> (B, L, D)
    return lib.merge_heads(out) @ params.w_o, weights


_ROUTES = {"explicit": latent_attention_explicit, "absorbed": latent_attention_absorbed}


def _kind(x: Any) -> Any:
    """How the checks read ``x``'s library (a tensor's kind needs PyTorch)."""
    if isinstance(x, np.ndarray):
        return NUMPY
    if type(x).__module__.startswith("torch"):
        from mha.backends.torch_checks import TENSORS

        return TENSORS
    raise TypeError(f"x must be a numpy.ndarray or a torch.Tensor; got {type(x).__name__}")


@overflow.silence_numpy_warnings
def multi_head_latent_attention(
    x: Any,  # (B, L, D)
    params: MLAParams,
    mask: Any = None,  # broadcastable to (B, H, L, S)
    *,
    route: str = "absorbed",
    need_weights: bool = True,
    cache: LatentCache | None = None,
    rotary: Rotary | None = None,
) -> tuple[Any, Any]:
    """Multi-head latent attention of ``x`` over itself (and a cache), by either route.

    Both routes compute the same layer; they differ only in the order of the products, so
    they agree to rounding (``mha.numerics.tolerance.latent_tolerance``).

    Args:
        x: the input, a float32/float64 NumPy array or a floating PyTorch tensor; with a
            ``cache``, the new positions only.
        params: the layer's weights, of ``x``'s library and dtype.
        mask: boolean, True = may attend, broadcastable to ``(B, H, L, S)``; ``None``
            attends everywhere. A causal layer passes ``causal_mask(L)``, or with a cache the
            bottom-right ``causal_mask(L, S, align="bottom_right")`` (one new token needs
            none).
        route: ``"absorbed"`` (:func:`latent_attention_absorbed`) or ``"explicit"``
            (:func:`latent_attention_explicit`).
        need_weights: return the attention weights (in PyTorch, ``False`` takes
            ``scaled_dot_product_attention``).
        cache: a :class:`~mha.core.kv_cache.LatentCache` holding the latents and rotary keys
            of the earlier positions; the new ones are appended only if the call succeeds.
            ``x``'s rows sit at positions ``cache.length`` onward.
        rotary: rotary positions (:class:`~mha.core.rotary.Rotary`), or ``None``: with
            ``Dr > 0`` they turn the decoupled rotary queries and keys; with ``Dr = 0`` each
            head's whole query and rebuilt keys (the explicit route only).

    Shape:
        x ``(B, L, D)``. Returns the output ``(B, L, D)`` and the weights ``(B, H, L, S)``,
        ``S`` = ``L`` plus the positions cached before the call.

    Returns:
        ``(output, weights)``; ``weights`` is ``None`` unless ``need_weights``.

    Raises:
        ValueError: if ``x`` is not ``(B, L, D)`` with the layer's D and ``L >= 1``, holds NaN
            or infinity, the mask does not broadcast to ``(B, H, L, S)``, ``route`` is
            unknown, the cache does not fit (batch, widths, capacity), the absorbed route is
            asked for rotary positions on rebuilt keys (``Dr = 0``), or the result would
            overflow its dtype.
        TypeError: if ``params`` is not :class:`MLAParams` or of another library or dtype than
            ``x``, ``rotary`` is not a :class:`Rotary`, ``need_weights`` is not a bool, or the
            cache is not a :class:`LatentCache` of ``x``'s library, dtype and device.
    """
    kind = _kind(x)
    m = checks.check_mla(x, params, mask, route, need_weights, cache, rotary, kind)
    with checks.staged(cache, m, params) as held:  # held keeps new positions only on success
        out, w = _ROUTES[route](
            x, params, mask, cache=held, rotary=rotary, need_weights=need_weights
        )
        checks.check_mla_range(out, m, x, params, mask, cache, rotary, kind)
    return out, w
