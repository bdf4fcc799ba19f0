"""Attention patterns checked for :mod:`mha.analysis.bottleneck`: rows that are distributions.

A target must be square with positive rows summing to one (its logarithm is taken); a pair
of patterns compared by a distance must have one shape and rows that are distributions.
Each check names the argument it reads, as the public function calling it does.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from mha.analysis import _linalg
from mha.numerics.tolerance import DISTRIBUTION_ROW_SUM_ATOL, TARGET_ROW_SUM_ATOL


def check_distributions(
    name: str, m: np.ndarray, atol: float, positive: bool = False, tolerance: str = ""
) -> None:
    """A ``ValueError`` unless every row of ``m`` is a distribution (``> 0`` with ``positive``)."""
    sums, low = m.sum(axis=1), m.min(initial=np.inf)
    if low < 0 or (positive and low == 0) or np.any(np.abs(sums - 1.0) > atol):
        raise ValueError(
            f"{name} rows must be distributions ({'>' if positive else '>='} 0, summing to 1 "
            f"within {tolerance or atol}); got least entry {low:.3g}, row sums "
            f"{float(sums.min())!r} to {float(sums.max())!r}"
        )


def as_target(name: str, target: Any, atol: float = TARGET_ROW_SUM_ATOL) -> np.ndarray:
    """:func:`mha.analysis.bottleneck.check_attention_target` of an argument called ``name``."""
    p = _linalg.as_matrix(name, target)
    if p.shape[0] != p.shape[1]:
        raise ValueError(f"{name} must be square (N, N); got shape {p.shape}")
    check_distributions(name, p, atol, positive=True, tolerance=f"atol={atol!r}")
    return p


def centred_log(name: str, target: Any) -> np.ndarray:
    logp = np.log(as_target(name, target))
    return logp - logp.mean(axis=1, keepdims=True)  # log(P) C


def check_pair(weights: Any, target: Any) -> tuple[np.ndarray, np.ndarray]:
    """Two row-stochastic matrices of one shape (rows within ``DISTRIBUTION_ROW_SUM_ATOL`` of 1)."""
    p, w = _linalg.as_matrix("target", target), _linalg.as_matrix("weights", weights)
    if w.shape != p.shape:
        raise ValueError(f"weights and target must have the same shape; got {w.shape}, {p.shape}")
    check_distributions("weights", w, DISTRIBUTION_ROW_SUM_ATOL)
    check_distributions("target", p, DISTRIBUTION_ROW_SUM_ATOL)
    return w, p
