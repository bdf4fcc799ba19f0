"""Copies of a parameter set in NumPy or PyTorch: what ``to_numpy`` and ``to_torch`` share.

:class:`mha.core.params.MHAParams` and :class:`mha.core.latent_params.MLAParams` copy their
arrays the same way, through their own ``map``; only the NumPy dtypes they allow differ.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from mha.core._checks.arguments import check_device, describe
from mha.core._checks.numpy_arrays import as_numpy, numpy_float_dtype


def numpy_copy(params: Any, dtype: Any, allowed: tuple[Any, ...]) -> Any:
    """``params.map`` of a NumPy copy of each array, cast to ``dtype`` (one of ``allowed``)."""
    if dtype is not None:
        dtype = numpy_float_dtype("dtype", dtype, allowed)

    def convert(x: Any) -> np.ndarray:
        a = as_numpy("params", x)
        return np.array(a, dtype=dtype or a.dtype)

    return params.map(convert)


def torch_copy(params: Any, dtype: Any, device: Any) -> Any:
    """``params.map`` of a detached PyTorch copy of each array, cast and moved if asked."""
    import torch  # only PyTorch copies need it; ``import mha`` does not

    if dtype is not None and (not isinstance(dtype, torch.dtype) or not dtype.is_floating_point):
        raise TypeError(f"dtype must be a floating torch.dtype or None; got {describe(dtype)}")
    device = check_device("device", device)

    def convert(x: Any) -> Any:
        t = torch.as_tensor(x).detach().clone()
        return t.to(dtype=dtype or t.dtype, device=device)

    return params.map(convert)
