"""Tile helpers shared by the tiled forward (:mod:`mha.tiled`) and backward (:mod:`mha.backward`).

A tile is a block of query rows ``rows`` against a block of key columns ``cols``.
"""

from __future__ import annotations

import numpy as np


def safe_max(row_max: np.ndarray) -> np.ndarray:
    """The row maximum with ``-inf`` (a row with nothing attended yet) replaced by 0.

    Subtracting it keeps ``exp`` finite, and ``exp(-inf - 0) = 0`` for a masked entry.
    """
    return np.where(np.isneginf(row_max), row_max.dtype.type(0), row_max)


def tile_mask(
    mask: np.ndarray | None, causal: bool, rows: slice, cols: slice
) -> np.ndarray | bool | None:
    """What may be attended in one tile: False (nothing), None (everything) or a boolean array.

    ``mask`` is ``None`` or already broadcast to ``(..., L, S)``. The causal part is computed
    from the positions: key ``j`` may be seen by query ``i`` when ``j <= i``.

    Shape:
        Returns a boolean array broadcastable to ``(..., Br, Bc)`` when only part of the
        tile may be attended.
    """
    keep = None
    if causal:
        if cols.start > rows.stop - 1:
            return False  # the whole tile lies above the diagonal
        if cols.stop - 1 > rows.start:  # the diagonal crosses the tile
            i = np.arange(rows.start, rows.stop)[:, None]  # (Br, 1)
            j = np.arange(cols.start, cols.stop)[None, :]  # (1, Bc)
            keep = j <= i  # (Br, Bc)
    if mask is not None:
        tile = mask[..., rows, cols]  # (..., Br, Bc), a view
        keep = tile if keep is None else tile & keep
    if keep is None:
        return None
    if not keep.any():
        return False
    return None if keep.all() else keep
