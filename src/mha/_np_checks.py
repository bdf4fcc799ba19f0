"""Argument checks for NumPy arrays, shared by the NumPy modules beside the reference backend.

:mod:`mha.tiled` and :mod:`mha.backward` take the arrays of :mod:`mha.np_backend` and reject
the same inputs with the same messages: a float32/float64 ``numpy.ndarray``, finite, and a
boolean mask (True = may attend) that broadcasts to the target shape.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from mha import _validate as v

FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


def finite(x: np.ndarray) -> bool:
    """True when ``x`` holds no NaN or infinity (its extremes are finite exactly then)."""
    return x.size == 0 or bool(np.isfinite(x.min()) and np.isfinite(x.max()))


def check_array(name: str, x: Any, *, check_finite: bool = True) -> None:
    """Check that ``x`` is a float32/float64 NumPy array (and finite, by default)."""
    if not isinstance(x, np.ndarray):
        raise TypeError(f"{name} must be a numpy.ndarray; got {type(x).__name__}")
    v.check_float(name, x, FLOATS)
    if check_finite:
        v.check_finite(name, x, finite)


def check_mask(mask: Any, target: tuple[int, ...], layout: str = "(..., L, S)") -> None:
    """Check that ``mask`` is a boolean NumPy array that broadcasts to ``target``."""
    if not isinstance(mask, np.ndarray):
        raise TypeError(f"mask must be a numpy.ndarray of bool; got {type(mask).__name__}")
    v.check_mask(mask, target, mask.dtype == np.bool_, layout)


def check_shape(name: str, x: np.ndarray, shape: tuple[int, ...], layout: str) -> None:
    """Check that ``x`` has exactly ``shape`` (``layout`` names its axes)."""
    if tuple(x.shape) != tuple(shape):
        raise ValueError(f"{name} must have shape {layout} = {tuple(shape)}; got {x.shape}")
