"""Grouped-query reshapes shared by the backends and the manual backward.

With ``H_kv`` key/value heads and ``G = H / H_kv`` query heads in each group, consecutive
query heads form a group (head ``h`` is in group ``h // G``).
"""

from __future__ import annotations

from typing import Any


def head_slice(mask: Any, h: int) -> Any:
    """The part of a ``(..., H|1, L, S)``-broadcastable mask that applies to head ``h``."""
    if mask.ndim < 3:
        return mask  # (L, S) or (S,): the same for every head
    return mask[..., h if mask.shape[-3] > 1 else 0, :, :]  # (B|1, H|1, L, S) -> (B|1, L, S)


def group_queries(q: Any, num_kv_heads: int) -> Any:
    """Query heads ``(B, H, L, Dh)`` as ``(B, H_kv, G, L, Dh)``: group ``g`` shares a key head.

    Consecutive query heads form a group (head ``h`` is in group ``h // G``), so the grouped
    product with keys ``(B, H_kv, 1, S, Dh)`` broadcasts over ``G`` and equals attention with
    each key head repeated ``G`` times (``repeat_interleave``), without the copies.
    """
    B, H, L, Dh = q.shape
    return q.reshape(B, num_kv_heads, H // num_kv_heads, L, Dh)  # (B, H_kv, G, L, Dh)


def group_mask(mask: Any, num_kv_heads: int) -> Any:
    """A ``(..., H|1, L, S)`` mask laid out like the grouped scores ``(..., H_kv, G, L, S)``."""
    if mask is None or mask.ndim < 3:
        return mask  # (L, S) or (S,): the same for every head
    *lead, H, L, S = mask.shape
    if H == 1:
        return mask.reshape(*lead, 1, 1, L, S)
    return mask.reshape(*lead, num_kv_heads, H // num_kv_heads, L, S)
