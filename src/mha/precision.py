"""Low precision and the softmax: the thresholds of float16 and bfloat16, from ``finfo``.

A binary floating-point format with ``p`` significant bits has machine epsilon
``eps = 2**(1 - p)`` and a largest finite number ``max = (2 - eps) 2**emax``. Three facts about
attention follow, each computed here from the format's ``finfo`` (NumPy's or PyTorch's):

- ``exp(x)`` overflows once ``x`` passes about ``log(max)`` (:func:`exp_overflow_threshold`):
  11.09 in float16, 88.72 in bfloat16 and float32. A softmax that does not subtract the row
  maximum first turns such scores into ``inf / inf = NaN``.
- Near a score ``s`` the representable numbers are :func:`spacing` apart, ``eps 2**floor(log2
  |s|)``: 8 at 1e4 in float16, 64 in bfloat16. Scores that differ by less collapse into
  one, and since the softmax depends on the differences of scores only, their weights are
  lost even though each score is "representable".
- A running sum of terms of size 1 stops growing at ``2 / eps`` (:func:`running_sum_limit`):
  2048 in float16, 256 in bfloat16; past it, each new term is less than half a spacing and
  rounds away. This is why the sums of a softmax and of ``weights @ V`` are accumulated in
  float32 even when the inputs are float16 or bfloat16 (:func:`sequential_sum` shows what
  happens otherwise).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch


def _finfo(dtype: Any) -> tuple[float, float]:
    """``(max, eps)`` of a NumPy or PyTorch floating dtype."""
    if isinstance(dtype, torch.dtype):
        if not dtype.is_floating_point:
            raise TypeError(f"dtype must be a floating dtype; got dtype {dtype}")
        info = torch.finfo(dtype)
        return float(info.max), float(info.eps)
    try:
        np_dtype = np.dtype(dtype)
    except TypeError as error:
        raise TypeError(f"dtype must be a floating dtype; got {dtype!r}") from error
    if not np.issubdtype(np_dtype, np.floating):
        raise TypeError(f"dtype must be a floating dtype; got dtype {np_dtype}")
    info = np.finfo(np_dtype)
    return float(info.max), float(info.eps)


def spacing(value: float, dtype: Any) -> float:
    """The gap between consecutive numbers of ``dtype`` at ``|value|`` (one unit in the last place).

    ``eps 2**floor(log2 |value|)``, for ``|value|`` in the normal range.

    Args:
        value: a nonzero, finite number.
        dtype: a NumPy or PyTorch floating dtype.

    Returns:
        The spacing, as a float.

    Raises:
        ValueError: if ``value`` is zero or not finite.
        TypeError: if ``dtype`` is not a floating dtype.
    """
    _, eps = _finfo(dtype)
    if not (math.isfinite(value) and value != 0):
        raise ValueError(f"value must be finite and nonzero; got value={value!r}")
    return eps * 2.0 ** (math.frexp(value)[1] - 1)  # |value| = m 2**e, 1/2 <= m < 1


def exp_overflow_threshold(dtype: Any) -> float:
    """The largest ``x`` of ``dtype`` for which ``exp(x)``, rounded to ``dtype``, is finite.

    With ``max = (2 - eps) 2**emax``, a real result rounds to infinity from
    ``(2 - eps/2) 2**emax`` up (half a spacing above ``max``), so ``exp(x)`` is finite
    exactly below ``T = (emax + 1) log 2 + log(1 - eps/4)``; the threshold is the largest
    number of ``dtype`` below ``T``. ``T`` is computed in float64, so the threshold is exact
    for the narrower formats (float16, bfloat16, float32) and within a few spacings for
    float64 itself.

    Args:
        dtype: a NumPy or PyTorch floating dtype.

    Returns:
        The threshold, as a Python float (exactly representable in ``dtype``).

    Raises:
        TypeError: if ``dtype`` is not a floating dtype.
    """
    largest, eps = _finfo(dtype)
    emax = math.frexp(largest)[1] - 1
    bound = (emax + 1) * math.log(2.0) + math.log1p(-eps / 4)
    step = spacing(bound, dtype)
    return (math.ceil(bound / step) - 1) * step


def running_sum_limit(dtype: Any) -> float:
    """The value at which a running sum of ones, rounded to ``dtype`` each step, stops growing.

    At ``2 / eps`` the spacing is 2, so adding 1 is a tie that rounds back to the even sum.

    Args:
        dtype: a NumPy or PyTorch floating dtype.

    Returns:
        ``2 / eps`` of ``dtype``.

    Raises:
        TypeError: if ``dtype`` is not a floating dtype.
    """
    _, eps = _finfo(dtype)
    return 2.0 / eps


def sequential_sum(values: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Sum along the last dimension one term at a time, rounding each partial sum to ``dtype``.

    This is the accumulation of a naive loop in a low-precision format (PyTorch's own
    ``sum`` and ``cumsum`` accumulate float16 and bfloat16 in float32 on the CPU).

    Args:
        values: the terms.
        dtype: the floating dtype of the accumulator.

    Returns:
        The sums, in ``dtype``.

    Shape:
        values ``(..., n)``; returns ``(...)``.

    Raises:
        ValueError: if ``values`` is 0-D.
        TypeError: if ``values`` is not a tensor or ``dtype`` is not a floating dtype.
    """
    if not isinstance(values, torch.Tensor):
        raise TypeError(f"values must be a torch.Tensor; got {type(values).__name__}")
    _finfo(dtype)
    if values.ndim < 1:
        raise ValueError(f"values must have shape (..., n); got 0-D shape {tuple(values.shape)}")
    terms = values.to(dtype)
    total = torch.zeros(values.shape[:-1], dtype=dtype)
    for j in range(values.shape[-1]):
        total = (total + terms[..., j]).to(dtype)  # one rounding per step
    return total
