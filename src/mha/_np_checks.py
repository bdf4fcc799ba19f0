"""Argument checks for NumPy arrays, shared by every NumPy module.

:mod:`mha.np_backend`, :mod:`mha.tiled` and :mod:`mha.backward` reject the same inputs with
the same messages: a float32/float64 ``numpy.ndarray``, finite, and a
boolean mask (True = may attend) that broadcasts to the target shape.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from mha import _validate

FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


def finite(x: np.ndarray) -> bool:
    """True when ``x`` holds no NaN or infinity.

    The extremes of ``x`` are finite exactly when every entry is (``min`` and ``max``
    propagate NaN); two reductions cost less than building an ``isfinite`` mask.
    """
    return x.size == 0 or bool(np.isfinite(x.min()) and np.isfinite(x.max()))


ARRAYS = _validate.ArrayKind("numpy.ndarray", np.ndarray, FLOATS, np.bool_, finite, "to_numpy")


def check_array(name: str, x: Any, *, check_finite: bool = True) -> None:
    """Check that ``x`` is a float32/float64 NumPy array (and finite, by default)."""
    if check_finite:
        ARRAYS.check_array(name, x)
        return
    if not isinstance(x, np.ndarray):
        raise TypeError(f"{name} must be a numpy.ndarray; got {type(x).__name__}")
    _validate.check_float(name, x, FLOATS)


def check_mask(mask: Any, target: tuple[int, ...], layout: str = "(..., L, S)") -> None:
    """Check that ``mask`` is a boolean NumPy array that broadcasts to ``target``."""
    ARRAYS.check_mask(mask, target, layout)


def check_shape(name: str, x: np.ndarray, shape: tuple[int, ...], layout: str) -> None:
    """Check that ``x`` has exactly ``shape`` (``layout`` names its axes)."""
    if tuple(x.shape) != tuple(shape):
        raise ValueError(f"{name} must have shape {layout} = {tuple(shape)}; got {x.shape}")
