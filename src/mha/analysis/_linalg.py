"""Linear-algebra helpers shared by :mod:`mha.analysis.rank`, :mod:`mha.analysis.subspaces`
and :mod:`mha.analysis.bottleneck`.

Threads: every decomposition here (SVD, singular values, pseudo-inverse) is computed by
PyTorch's LAPACK on one CPU thread, not by ``numpy.linalg``. The matrices of this package
are small (a few hundred rows at most), so worker threads save little, and NumPy's OpenBLAS
thread pool, which no NumPy API limits locally, made many small SVDs and products over 20
times slower in CPU time when the machine's other core was busy. :func:`mha.core._tools.one_thread`
is the one switch, also used around small training runs.

Float32 matrices are decomposed in float32; every other floating dtype in float64.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from mha.core._checks import arguments
from mha.core._checks.numpy_arrays import as_numpy
from mha.core._tools import one_thread


def to_torch(a: np.ndarray) -> torch.Tensor:
    """``a`` as a CPU torch tensor of a LAPACK dtype (float32 stays, others become float64).

    Shares memory with ``a`` when ``a`` is already a contiguous float32/float64 array.
    """
    if a.dtype not in (np.float32, np.float64):
        a = a.astype(np.float64)
    return torch.from_numpy(np.ascontiguousarray(a))


def as_matrix(name: str, a: Any) -> np.ndarray:
    """``a`` (a NumPy array or a torch tensor) as a finite floating NumPy matrix.

    Raises:
        TypeError: if ``a`` is neither an array nor a tensor, or is not floating.
        ValueError: if ``a`` is not 2-D or holds NaN or infinity.
    """
    if hasattr(a, "detach"):
        a = as_numpy(name, a)
    if not isinstance(a, np.ndarray):
        raise TypeError(f"{name} must be a NumPy array or a torch tensor; got {type(a).__name__}")
    if a.ndim != 2:
        raise ValueError(f"{name} must be a 2-D matrix (m, n); got {a.ndim}-D shape {a.shape}")
    if not np.issubdtype(a.dtype, np.floating):
        raise TypeError(f"{name} must have a floating dtype; got dtype {a.dtype}")
    if not np.all(np.isfinite(a)):
        raise ValueError(f"{name} must be finite; got NaN or infinite values")
    return a


def default_rtol(shape: tuple[int, ...], dtype: Any = np.float64) -> float:
    """``max(m, n) * eps``, NumPy's (and MATLAB's) default relative rank tolerance."""
    return float(max(shape) * np.finfo(dtype).eps)


def scale(a: np.ndarray) -> float:
    """A power of two within a factor 2 of ``max |a|`` (1 for a zero or empty matrix).

    Dividing by it is exact and brings the largest entry into ``[1, 2)``, so that the
    singular values of ``a / scale(a)`` (at most ``2 sqrt(m n)``) neither overflow (entries
    near float64's largest value) nor lose digits to underflow (subnormal entries) on their
    way through the SVD. (The power at or above ``max |a|`` can be ``2**1024``, which
    overflows.)
    """
    top = float(np.abs(a).max()) if a.size else 0.0
    return 1.0 if top == 0 else float(np.ldexp(1.0, int(np.frexp(top)[1]) - 1))


def check_tolerances(rtol: Any, atol: Any) -> tuple[float | None, float]:
    """``rtol`` (``None`` or a finite number ``>= 0``) and ``atol`` (finite, ``>= 0``) as floats."""
    if rtol is not None:
        rtol = arguments.number("rtol", rtol, low=0.0)
    return rtol, arguments.number("atol", atol, low=0.0)


def rank_cutoff(
    s: np.ndarray, shape: tuple[int, ...], dtype: Any, rtol: float | None, atol: float
) -> float:
    """``max(atol, rtol * s[0])``: singular values at or below it count as zero.

    ``s`` holds the singular values in descending order; ``rtol=None`` means
    :func:`default_rtol` of ``shape`` and ``dtype``.

    Raises:
        ValueError: if ``rtol`` or ``atol`` is negative or not finite.
        TypeError: if ``rtol`` or ``atol`` is not a real number.
    """
    rtol, atol = check_tolerances(rtol, atol)
    if rtol is None:
        rtol = default_rtol(shape, dtype)
    s_max = float(s[0]) if s.size else 0.0
    return max(float(atol), float(rtol) * s_max)


def svdvals(a: np.ndarray) -> np.ndarray:
    """The singular values of a matrix (or a stack of them), descending, on one thread.

    Shape:
        a ``(..., m, n)``. Returns ``(..., min(m, n))``.
    """
    with one_thread():
        return torch.linalg.svdvals(to_torch(a)).numpy()


def svd(a: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The reduced SVD ``a = u @ diag(s) @ vt``, singular values descending, on one thread.

    Shape:
        a ``(m, n)``, ``k = min(m, n)``. Returns u ``(m, k)``, s ``(k,)``, vt ``(k, n)``.
    """
    with one_thread():
        u, s, vt = torch.linalg.svd(to_torch(a), full_matrices=False)
    return u.numpy(), s.numpy(), vt.numpy()


def pinv(a: np.ndarray) -> np.ndarray:
    """The Moore-Penrose pseudo-inverse, from the SVD, on one thread.

    Singular values at or below :func:`default_rtol` times the largest are treated as zero
    (``torch.linalg.pinv``'s default).

    Shape:
        a ``(m, n)``. Returns ``(n, m)``.
    """
    with one_thread():
        return torch.linalg.pinv(to_torch(a)).numpy()
