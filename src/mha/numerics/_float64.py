"""The arrays that :mod:`mha.numerics.tolerance` bounds and compares, read as float64.

A NumPy array or a torch tensor of real numbers is cast to float64 exactly, after a check of
its dtype; :func:`largest_excess` finds where two arrays differ by the most beyond a
tolerance, for :func:`mha.numerics.tolerance.is_close` and
:func:`mha.numerics.tolerance.assert_close`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from mha.core._checks.numpy_arrays import as_numpy, broadcast


def as_float64(name: str, x: Any) -> np.ndarray:
    """``x`` as a float64 NumPy array of real numbers (exactly: every float casts exactly).

    Raises:
        TypeError: for ``None`` or another object that is not numbers, a complex array, a
            masked array, or a sparse or ``meta`` tensor.
        ValueError: for a ragged nested sequence.
    """
    if x is None:
        raise TypeError(f"{name} must be an array or tensor of numbers; got None")
    x = as_numpy(name, x)
    if x.dtype.kind not in "biuf":
        raise TypeError(f"{name} must hold real numbers; got dtype {x.dtype}")
    return x.astype(np.float64, copy=False)


def check_float_inputs(named: dict[str, Any], together: str | None = None) -> None:
    """Each of ``named`` a NumPy array or torch tensor of a floating dtype; with ``together``
    (how the message names them), all of one dtype."""
    dtypes = {}
    for name, x in named.items():
        dtype = getattr(x, "dtype", None)
        floating = dtype is not None and (
            dtype.is_floating_point
            if hasattr(dtype, "is_floating_point")
            else np.issubdtype(dtype, np.floating)
        )
        if not floating:
            got = f"dtype {dtype}" if dtype is not None else type(x).__name__
            raise TypeError(f"{name} must be a floating array or tensor; got {got}")
        dtypes[name] = str(dtype).removeprefix("torch.")  # torch.float32 is float32
    if together is not None and len(set(dtypes.values())) > 1:
        got = ", ".join(f"{n} {d}" for n, d in dtypes.items())
        raise TypeError(f"{together} must share one dtype; got {got}")


def largest_excess(actual: Any, expected: Any, tolerance: Any) -> tuple[float, float, float]:
    """(largest ``|diff| - tol``, the diff there, the tolerance there)."""
    a = as_float64("actual", actual)
    e = as_float64("expected", expected)
    if a.shape != e.shape:
        raise ValueError(f"actual and expected must have one shape; got {a.shape} and {e.shape}")
    tol = broadcast("tolerance", as_float64("tolerance", tolerance), a.shape, "the shape of actual")
    if np.any(tol < 0) or not np.all(np.isfinite(tol)):
        raise ValueError("tolerance must be finite and >= 0")
    if a.size == 0:
        return -np.inf, 0.0, 0.0
    if not (np.all(np.isfinite(a)) and np.all(np.isfinite(e))):
        same = (a == e) | (np.isnan(a) & np.isnan(e))
        if not same[~(np.isfinite(a) & np.isfinite(e))].all():
            return np.inf, np.inf, np.nan  # no tolerance: NaN and infinity must agree exactly
        a, e = np.where(np.isfinite(a), a, 0.0), np.where(np.isfinite(e), e, 0.0)
    diff = np.abs(a - e)
    over = diff - tol
    i = np.unravel_index(np.argmax(over), over.shape)
    return float(over[i]), float(diff[i]), float(tol[i])
