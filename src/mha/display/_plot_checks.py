"""The checks of :mod:`mha.display.plotting`'s arguments, shared by its figures.

Each takes an argument as given, with the name its message calls it, and returns it in the
form the figures draw (float64 arrays, lists of strings and numbers), or raises the
``ValueError`` or ``TypeError`` that the figure documents.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from mha.core._checks import arguments, numpy_arrays


def matrix_stack(name: str, weights: Any, ndim: int) -> np.ndarray:
    """A finite real array of ``ndim`` dimensions as float64 (NaN would show as a blank cell)."""
    layout = "(L, S)" if ndim == 2 else "(n, L, S)"
    w = numpy_arrays.float_array(name, weights)
    if w.ndim != ndim:
        raise ValueError(f"{name} must be a numeric array of shape {layout}; got shape {w.shape}")
    return w


def check_options(title: Any, zmin: Any, zmax: Any, height: Any, **texts: Any) -> None:
    """The options every heatmap takes: strings, a colour range and a height."""
    for name, value in {"title": title, **texts}.items():
        arguments.text(name, value)
    lo = None if zmin is None else arguments.number("zmin", zmin)
    hi = None if zmax is None else arguments.number("zmax", zmax)
    if lo is not None and hi is not None and not lo < hi:
        raise ValueError(f"zmin must be below zmax; got zmin={zmin!r}, zmax={zmax!r}")
    if height is not None:
        arguments.size("height", height)


def text_list(name: str, values: Any) -> list[str]:
    """A list of strings (not one string, whose characters would be read as the list)."""
    out = arguments.items(name, values)
    for i, v in enumerate(out):
        arguments.text(f"{name}[{i}]", v)
    return out


def axis_labels(name: str, labels: Sequence[str] | None, n: int) -> list[str]:
    if labels is None:
        return [str(i) for i in range(n)]
    labels = [str(x) for x in arguments.items(name, labels)]
    if len(labels) != n:
        raise ValueError(f"{name} must have one label per position ({n}); got {len(labels)}")
    if len(set(labels)) != n:
        raise ValueError(f"{name} must be unique (use token_labels); got repeats in {labels}")
    return labels


def line_values(name: str, values: Any, log: bool, gaps: bool = False) -> list[float]:
    """A 1-D list of numbers: finite, or NaN for a missing point where ``gaps`` (positive on a
    log axis)."""
    raw = arguments.items(name, values) if not hasattr(values, "shape") else values
    a = numpy_arrays.float_array(name, raw, ndim=1, layout="(n,)", finite=False)
    shown = a[~np.isnan(a)] if gaps else a
    if not np.isfinite(shown).all():
        what = "infinity" if gaps else "NaN or infinity"
        raise ValueError(f"{name} must be finite; got {what}")
    if log and not (shown > 0).all():
        raise ValueError(f"{name} must be positive on a log axis; got {a.tolist()}")
    return a.tolist()
