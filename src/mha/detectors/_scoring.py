"""Checks and conversions that the pattern and circuit scores share."""

from __future__ import annotations

from typing import Any

import numpy as np

from mha.core._checks import arguments, numpy_arrays
from mha.core._checks.numpy_arrays import as_numpy
from mha.core.params import MHAParams, repeat_kv_heads
from mha.numerics.tolerance import ATTENTION_ROW_SUM_ATOL


def check_weights(weights: Any, name: str = "weights") -> np.ndarray:
    """Check that ``weights`` is a float array ``(..., L, S)`` of probability rows.

    Returns:
        The weights in float64, each row divided by its sum.
    """
    w = as_numpy(name, weights)
    if not np.issubdtype(w.dtype, np.floating):
        raise TypeError(
            f"{name} must be a floating array of attention weights; got dtype {w.dtype}"
        )
    if w.ndim < 2:
        raise ValueError(f"{name} must have shape (..., L, S); got {w.ndim}-D shape {w.shape}")
    if w.shape[-2] < 1 or w.shape[-1] < 1:
        raise ValueError(f"{name} must have at least one query and one key; got shape {w.shape}")
    w = w.astype(np.float64)
    if not np.isfinite(w).all():
        raise ValueError(f"{name} must be finite; got NaN or infinite values")
    if (w < 0).any():
        raise ValueError(
            f"{name} must be non-negative (rows are distributions); got min {w.min():.3g}"
        )
    sums = w.sum(axis=-1, keepdims=True)  # (..., L, 1)
    bad = np.abs(sums - 1.0) > ATTENTION_ROW_SUM_ATOL
    if bad.any():
        worst = float(sums.reshape(-1)[np.argmax(np.abs(sums - 1.0))])
        raise ValueError(
            f"{name} rows must each sum to 1 (within {ATTENTION_ROW_SUM_ATOL}); got "
            f"{int(bad.sum())} row(s) that do not, e.g. a row summing to {worst:.6g}"
        )
    return w / sums


def float_array(name: str, x: Any) -> np.ndarray:
    """``x`` as a finite float64 NumPy array; a non-numeric array, NaN or infinity is
    refused naming ``name``."""
    return numpy_arrays.float_array(name, x)


def params64(params: Any) -> MHAParams:
    """``params`` as finite float64 NumPy parameters of multi-head attention.

    Grouped-query parameters come back with each key/value head repeated for the query
    heads of its group (:func:`mha.core.params.repeat_kv_heads`), so that head ``h`` has
    its own blocks: what it computes is what the grouped layer's head ``h`` computes.
    """
    arguments.instance("params", params, MHAParams, "MHAParams")
    p = repeat_kv_heads(params.to_numpy(np.float64))
    for name in ("w_qkv", "w_o", "b_qkv", "b_o"):
        if getattr(p, name) is not None:
            numpy_arrays.float_array(f"params.{name}", getattr(p, name))
    return p


def score(x: np.ndarray) -> np.ndarray:
    return np.asarray(np.clip(x, 0.0, 1.0))


def as_tokens(tokens: Any) -> np.ndarray:
    t = as_numpy("tokens", tokens)
    if not np.issubdtype(t.dtype, np.integer):
        raise TypeError(f"tokens must be an integer array of token ids; got dtype {t.dtype}")
    if t.ndim != 2:
        raise ValueError(f"tokens must have shape (B, L); got {t.ndim}-D shape {t.shape}")
    return t
