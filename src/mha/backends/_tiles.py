"""Tile helpers shared by the tiled forward (:mod:`mha.backends.tiled`) and backward
(:mod:`mha.numerics.backward`).

A tile is a block of query rows ``rows`` against a block of key columns ``cols``. Slow memory
holds the whole arrays and fast memory the tiles: :func:`load` and :func:`store` move a tile
between them, counting the elements moved in an :data:`IOCounter`.
"""

from __future__ import annotations

import collections
from typing import Any, Literal

import numpy as np

from mha.core import mask_rules
from mha.core._checks import arguments

IOCounter = collections.Counter  # keys "read" and "write": elements moved


def load(x: np.ndarray, index: tuple, io: IOCounter | None) -> np.ndarray:
    """``x[index]`` brought from slow memory (the array) to fast memory (a tile), counted."""
    tile = x[index]
    if io is not None:
        io["read"] += tile.size
    return tile


def store(x: np.ndarray, index: tuple, value: np.ndarray, io: IOCounter | None) -> None:
    """Write the tile ``value`` to ``x[index]`` in slow memory, counted."""
    x[index] = value
    if io is not None:
        io["write"] += value.size


def row_index(rows: slice) -> tuple:
    """The index of rows ``rows`` of a ``(..., N, width)`` array."""
    return (..., rows, slice(None))


def check_io_counter(io_counter: object) -> None:
    """Refuse an ``io_counter`` that is neither a ``collections.Counter`` nor ``None``.

    Raises:
        TypeError: if ``io_counter`` is of another kind.
    """
    if io_counter is not None and not isinstance(io_counter, collections.Counter):
        raise TypeError(
            f"io_counter must be a collections.Counter or None; got {type(io_counter).__name__}"
        )


def safe_max(row_max: np.ndarray) -> np.ndarray:
    """The row maximum with ``-inf`` (a row with nothing attended yet) replaced by 0.

    Subtracting it keeps ``exp`` finite, and ``exp(-inf - 0) = 0`` for a masked entry.
    """
    return np.where(np.isneginf(row_max), row_max.dtype.type(0), row_max)


def tile_causal_offset(q_len: int, kv_len: int, align: Any, *, causal: bool) -> int:
    """Where query 0 sits among the keys of a causal mask: query ``i`` at ``i + offset``.

    :func:`mha.core.mask_rules.causal_offset`'s arguments in its order, with the flag and its
    checks added (``causal`` keyword-only, so that no int can take its place).

    ``"top_left"`` gives 0 (both sequences start together); ``"bottom_right"`` gives
    ``S - L`` (both end together; negative when ``L > S``), as
    :func:`mha.backends.np_backend.causal_mask`. Without ``causal`` the offset is 0 and unused.

    Raises:
        ValueError: if ``align`` is not ``"top_left"`` or ``"bottom_right"``, or is
            ``"bottom_right"`` while ``causal`` is False (it would be silently ignored).
        TypeError: if ``causal`` is not a bool.
    """
    arguments.check_causal_flag(causal, align)
    return mask_rules.causal_offset(q_len, kv_len, align) if causal else 0


def tile_mask(
    mask: np.ndarray | None, causal: bool, rows: slice, cols: slice, *, offset: int = 0
) -> np.ndarray | Literal[False] | None:
    """What may be attended in one tile: False (nothing), None (everything) or a boolean array.

    ``mask`` is ``None`` or already broadcast to ``(..., L, S)``. The causal part is computed
    from the positions: key ``j`` may be seen by query ``i`` when ``j <= i + offset``
    (:func:`tile_causal_offset`; 0 for the top-left diagonal). A tile is skipped whole when its
    first key lies beyond the aligned position of its last query,
    ``cols.start > rows.stop - 1 + offset``.

    Shape:
        Returns a boolean array broadcastable to ``(..., Br, Bc)`` when only part of the
        tile may be attended.
    """
    keep = None
    if causal:
        if cols.start > rows.stop - 1 + offset:
            return False  # the whole tile lies above the aligned diagonal
        if cols.stop - 1 > rows.start + offset:  # the diagonal crosses the tile
            i = np.arange(rows.start, rows.stop)[:, None] + offset  # (Br, 1): positions
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
