"""Low precision and the softmax: the thresholds of float16 and bfloat16, from ``finfo``.

A binary floating-point format with ``p`` significant bits has machine epsilon
``eps = 2**(1 - p)`` and a largest finite number ``max = (2 - eps) 2**emax``. Three facts about
attention follow, each computed here from the format's ``finfo`` (NumPy's or PyTorch's):

- ``exp(x)`` overflows once ``x`` passes about ``log(max)`` (:func:`exp_overflow_threshold`,
  the largest number of the format whose ``exp`` is finite): 11.09 in float16, 88.5 in
  bfloat16, 88.72 in float32. A softmax that does not subtract the row maximum first turns
  such scores into ``inf / inf = NaN``.
- Near a score ``s`` the representable numbers are :func:`spacing` apart, ``eps 2**floor(log2
  |s|)``: 8 at 1e4 in float16, 64 in bfloat16. Scores that differ by less collapse into
  one, and since the softmax depends on the differences of scores only, their weights are
  lost even though each score is "representable".
- A running sum of terms of size 1 stops growing at ``2 / eps`` (:func:`running_sum_limit`):
  2048 in float16, 256 in bfloat16; past it, each new term is less than half a spacing and
  rounds away. This is why the sums of a softmax and of ``weights @ V`` are accumulated in
  float32 even when the inputs are float16 or bfloat16 (:func:`sequential_sum` and
  :func:`pairwise_sum` show what a float16 or bfloat16 accumulator does instead).

:func:`rounded_attention` isolates where a low-precision attention rounds: the scores stored
in the format (the materialised path writes them to memory), or only the unnormalised
weights cast to it before they multiply V (what a fused kernel such as FlashAttention does;
its scores, maxima and sums stay in float32 registers).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from mha.core._checks.arguments import broadcast_batch, check_qkv, describe, is_finite_real
from mha.numerics.tolerance import unit_roundoff


def _finfo(dtype: Any) -> tuple[float, float, float]:
    """``(max, eps, tiny)`` of a NumPy or PyTorch floating dtype (``tiny`` the smallest normal)."""
    eps = 2 * unit_roundoff(dtype)  # refuses None and non-floating dtypes
    if not isinstance(dtype, type) and hasattr(dtype, "dtype"):
        dtype = dtype.dtype  # an array or a tensor, as unit_roundoff reads it
    info = torch.finfo(dtype) if isinstance(dtype, torch.dtype) else np.finfo(np.dtype(dtype))
    return float(info.max), eps, float(info.tiny)


def _torch_format(name: str, dtype: Any) -> None:
    """Check that ``dtype`` is a floating ``torch.dtype`` (what ``Tensor.to`` takes)."""
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise TypeError(f"{name} must be a floating torch.dtype; got {describe(dtype)}")


def _check_values(values: Any) -> None:
    """The terms of :func:`sequential_sum` and :func:`pairwise_sum`: a tensor with values."""
    if not isinstance(values, torch.Tensor):
        raise TypeError(f"values must be a torch.Tensor; got {type(values).__name__}")
    if values.device.type == "meta":
        raise TypeError("values must hold values; got a meta tensor")


def spacing(value: float, dtype: Any) -> float:
    """The gap between consecutive numbers of ``dtype`` at ``|value|`` (one unit in the last place).

    ``eps 2**floor(log2 |value|)`` in the normal range, ``|value| >= tiny`` (the smallest
    normal number); below it, among the subnormal numbers, the gap is constant, the smallest
    subnormal ``eps tiny``. So the spacing is ``max(eps 2**floor(log2 |value|), eps tiny)``,
    as ``np.spacing`` gives for a number of ``dtype`` (at a power of two, the gap above it),
    except at the largest finite number, where this is the gap below it and ``np.spacing``
    gives infinity (the next number up).

    Args:
        value: a nonzero, finite real number no larger in magnitude than ``dtype``'s
            largest finite number.
        dtype: a NumPy or PyTorch floating dtype.

    Returns:
        The spacing, a power of two.

    Raises:
        ValueError: if ``value`` is zero, NaN or infinite, or beyond ``dtype``'s finite range.
        TypeError: if ``value`` is not a real number (a bool is not), or ``dtype`` is
            ``None`` or not a floating dtype.
    """
    largest, eps, tiny = _finfo(dtype)
    if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
        raise TypeError(f"value must be a real number; got {describe(value)}")
    if value == 0 or (isinstance(value, float | np.floating) and not math.isfinite(value)):
        raise ValueError(f"value must be finite and nonzero; got value={value!r}")
    if not is_finite_real(value) or abs(float(value)) > largest:  # an int may exceed a float
        raise ValueError(
            f"value must be within the finite range of {dtype} (|value| <= {largest:.6g}); "
            f"got value={value!r}"
        )
    normal = eps * 2.0 ** (math.frexp(float(value))[1] - 1)  # |value| = m 2**e, 1/2 <= m < 1
    return max(normal, eps * tiny)  # below tiny, the subnormals' constant gap


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
        TypeError: if ``dtype`` is ``None`` or not a floating dtype.
    """
    largest, eps, _ = _finfo(dtype)
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
        ``2 / eps``.

    Raises:
        TypeError: if ``dtype`` is ``None`` or not a floating dtype.
    """
    _, eps, _ = _finfo(dtype)
    return 2.0 / eps


def sequential_sum(values: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Sum along the last dimension one term at a time, rounding each partial sum to ``dtype``.

    This is the accumulation of a naive loop in a low-precision format (PyTorch's own
    ``sum`` and ``cumsum`` accumulate float16 and bfloat16 in float32 on the CPU).

    The terms are converted to ``dtype`` as they are, of any dtype; NaN or infinite terms
    are summed like any other (the result is NaN or infinite).

    Args:
        values: the terms.
        dtype: the floating dtype of the accumulator.

    Shape:
        values ``(..., n)``; returns ``(...)``.

    Returns:
        The sums, of ``dtype`` (0 where there are no terms, ``n = 0``).

    Raises:
        ValueError: if ``values`` is 0-D.
        TypeError: if ``values`` is not a tensor or is a ``meta`` tensor, or ``dtype`` is
            not a floating ``torch.dtype``.
    """
    _check_values(values)
    _torch_format("dtype", dtype)
    if values.ndim < 1:
        raise ValueError(f"values must have shape (..., n); got 0-D shape {tuple(values.shape)}")
    terms = values.to(dtype)
    total = torch.zeros(values.shape[:-1], dtype=dtype)
    for j in range(values.shape[-1]):
        total = (total + terms[..., j]).to(dtype)  # one rounding per step
    return total


def pairwise_sum(values: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Sum along the last dimension pairwise, rounding every partial sum to ``dtype``.

    Neighbours are added level by level (an odd last term is carried up), as a tree of
    depth ``ceil(log2 n)``; each addition is rounded to ``dtype``. This is pairwise summation
    with a low-precision accumulator: its error grows as ``log2 n`` roundings, not ``n``, but
    each rounding is the format's.

    The terms are converted to ``dtype`` as they are, of any dtype; NaN or infinite terms
    are summed like any other (the result is NaN or infinite).

    Args:
        values: the terms.
        dtype: the floating dtype of the partial sums.

    Shape:
        values ``(..., n)``; returns ``(...)``.

    Returns:
        The sum, of ``dtype``.

    Raises:
        ValueError: if ``values`` is 0-D or has no terms.
        TypeError: if ``values`` is not a tensor or is a ``meta`` tensor, or ``dtype`` is
            not a floating ``torch.dtype``.
    """
    _check_values(values)
    _torch_format("dtype", dtype)
    if values.ndim < 1 or values.shape[-1] == 0:
        raise ValueError(
            f"values must have shape (..., n), n >= 1; got shape {tuple(values.shape)}"
        )
    level = values.to(dtype)
    while level.shape[-1] > 1:
        n = level.shape[-1]
        pairs = (level[..., 0 : n - 1 : 2] + level[..., 1:n:2]).to(dtype)  # one rounding each
        level = torch.cat([pairs, level[..., n - 1 :]], dim=-1) if n % 2 else pairs
    return level[..., 0]


def rounded_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    *,
    scores_dtype: torch.dtype | None = None,
    weights_dtype: torch.dtype | None = None,
) -> torch.Tensor:
    """Attention in float64 except for one chosen rounding, to measure what that rounding costs.

    ``scores_dtype`` rounds the scores ``Z = Q K^T / sqrt(Dh)`` to that format before the
    softmax (a path that stores the scores in it). ``weights_dtype`` rounds only the
    unnormalised weights ``P = exp(Z - m)`` (each at most 1) to that format before ``P V``;
    the row maximum ``m`` and the sum ``l`` come from the unrounded ``P``, and the output is
    ``(P V) / l``, as in a fused kernel that casts ``P`` to float16 or bfloat16 for its matrix
    unit and keeps its statistics and accumulator in float32. Everything else is float64, so
    the difference from the float64 softmax is the effect of the chosen rounding alone. For
    ``weights_dtype`` it is at most ``u max |v|`` (``u`` the format's unit roundoff: each
    weight is rounded by a relative ``u`` and the output is their average of ``v``), plus
    ``S`` times half the smallest subnormal times ``max |v|`` for weights below the normal
    range.

    Args:
        query: queries.
        key: keys.
        value: values.
        scores_dtype: the format the scores are rounded to, or ``None``.
        weights_dtype: the format the unnormalised weights are rounded to, or ``None``.

    Shape:
        query ``(..., L, Dh)``, key ``(..., S, Dh)``, value ``(..., S, Dv)``; returns
        ``(..., L, Dv)``.

    Returns:
        The output, float64.

    Raises:
        TypeError: if an input is not a floating tensor, the inputs are on different devices
            (or hold no values, ``meta``), or a format is not a floating ``torch.dtype``.
        ValueError: if an input has fewer than 2 dimensions or holds NaN or infinity, the
            widths of query and key or the lengths of key and value differ, a length is 0,
            the leading (batch) dimensions do not broadcast, or a score is beyond the
            finite range of float64 or of ``scores_dtype`` (it would round to infinity and
            make the weights NaN).
    """
    named = {"query": query, "key": key, "value": value}
    for name, x in named.items():
        if not isinstance(x, torch.Tensor) or not x.dtype.is_floating_point:
            got = f"dtype {x.dtype}" if isinstance(x, torch.Tensor) else describe(x)
            raise TypeError(f"{name} must be a floating torch.Tensor; got {got}")
        if x.device.type == "meta":
            raise TypeError(f"{name} must hold values; got a meta tensor")
    devices = {name: x.device for name, x in named.items()}
    if len(set(devices.values())) > 1:
        got = ", ".join(f"{n} on {d}" for n, d in devices.items())
        raise TypeError(f"query, key and value must be on one device; got {got}")
    for name, fmt in (("scores_dtype", scores_dtype), ("weights_dtype", weights_dtype)):
        if fmt is not None:
            _torch_format(name, fmt)
    check_qkv(query, key, value)  # ranks, the width of query and key, the length of key and value
    broadcast_batch(query, key, value)  # the leading dimensions
    for name, x in named.items():
        if not bool(torch.isfinite(x).all()):
            raise ValueError(f"{name} must be finite; got NaN or infinite values")
    q, k, v = (x.double() for x in (query, key, value))
    z = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])  # (..., L, S)
    if scores_dtype is not None:
        z = z.to(scores_dtype).double()  # a score beyond its range becomes infinite
    if not bool(torch.isfinite(z).all()):  # an infinite score makes NaN weights: refuse it
        fmt = scores_dtype if scores_dtype is not None else torch.float64
        reach = float((q.abs() @ k.abs().transpose(-1, -2)).max()) / math.sqrt(q.shape[-1])
        raise ValueError(
            f"the scores Q K^T / sqrt(Dh) must be finite in {fmt}; got scores beyond its largest "
            f"finite value {torch.finfo(fmt).max:.3g} (|Q| |K|^T / sqrt(Dh) reaches {reach:.3g}). "
            "Scale query or key down"
        )
    p = torch.exp(z - z.amax(dim=-1, keepdim=True))  # (..., L, S), each <= 1
    row_sum = p.sum(dim=-1, keepdim=True)  # (..., L, 1)
    if weights_dtype is not None:
        p = p.to(weights_dtype).double()
    return (p @ v) / row_sum
