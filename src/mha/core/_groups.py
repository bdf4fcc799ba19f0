"""Grouped-query reshapes shared by the backends and the manual backward.

With ``H_kv`` key/value heads and ``G = H / H_kv`` query heads in each group, consecutive
query heads form a group (head ``h`` is in group ``h // G``).
"""

from __future__ import annotations

from typing import Any


def head_slice(mask: Any, h: int) -> Any:
    """The part of a ``(..., H|1, L, S)``-broadcastable mask that applies to head ``h``."""
    if mask is None or mask.ndim < 3:
        return mask  # None, (L, S) or (S,): the same for every head
    return mask[..., h if mask.shape[-3] > 1 else 0, :, :]  # (B|1, H|1, L, S) -> (B|1, L, S)


def group_queries(q: Any, num_kv_heads: int) -> Any:
    """Query heads ``(B, H, L, Dh)`` as ``(B, H_kv, G, L, Dh)``: group ``g`` shares a key head.

    Consecutive query heads form a group (head ``h`` is in group ``h // G``), so the grouped
    product with keys ``(B, H_kv, 1, S, Dh)`` broadcasts over ``G`` and equals attention with
    each key head repeated ``G`` times (``repeat_interleave``), without the copies. Any
    per-query-head ``(B, H, ...)`` (weights, log-sum-exp, gradients) is grouped the same way;
    multi-head attention (``H_kv = H``) and ``None`` are returned as they are.
    """
    if q is None or q.shape[1] == num_kv_heads:
        return q
    B, H = q.shape[:2]
    return q.reshape(B, num_kv_heads, H // num_kv_heads, *q.shape[2:])  # (B, H_kv, G, ...)


def group_kv(x: Any, num_heads: int, num_kv_heads: int) -> Any:
    """Key or value heads ``(B, H_kv, S, Dh)`` as ``(B, H_kv, 1, S, Dh)``, shared by a group.

    Broadcast against the grouped queries, each key/value head serves the ``G = H / H_kv``
    query heads of its group without a copy, and a backward sums its gradient over the group
    (over the axis of size 1). Multi-head attention (``H_kv = H``) keeps ``x`` as it is.
    """
    return x if num_kv_heads == num_heads else x[:, :, None]  # (B, H_kv, 1, S, Dh)


def ungroup(x: Any, num_heads: int, num_kv_heads: int) -> Any:
    """``(B, H_kv, G, ...)`` back to ``(B, H_kv G, ...)``: per query head (or key head, G = 1)."""
    if num_kv_heads == num_heads:
        return x
    return x.reshape(x.shape[0], -1, *x.shape[3:])  # (B, H_kv, G, ...) -> (B, H_kv G, ...)


def group_mask(mask: Any, num_kv_heads: int) -> Any:
    """A ``(..., H|1, L, S)`` mask laid out like the grouped scores ``(..., H_kv, G, L, S)``."""
    if mask is None or mask.ndim < 3:
        return mask  # (L, S) or (S,): the same for every head
    *lead, H, L, S = mask.shape
    if H == 1:
        return mask.reshape(*lead, 1, 1, L, S)
    return mask.reshape(*lead, num_kv_heads, H // num_kv_heads, L, S)
