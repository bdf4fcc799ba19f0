"""How the PyTorch backend's checks read a tensor's values, and the switch that turns them off.

Every call of :mod:`mha.backends.torch_backend` reads the values of its inputs and parameters
once: their finiteness and largest magnitudes, which bound the result so that an overflow is
caught (``mha.core._checks.overflow``). :data:`TENSORS` tells the shared checks
(``mha.core._checks``) how to read a tensor:

- a float32/float64 tensor on the CPU is reduced by NumPy through a view that shares its
  memory (``Tensor.numpy()``), on the calling thread: a PyTorch reduction of a large tensor
  waits for every intra-op thread, and on a busy machine that wait can cost milliseconds where
  the work takes a fraction of one. Other tensors are reduced by ``torch.aminmax``, one host
  synchronisation per tensor on an accelerator.
- a ``meta`` tensor holds no values, and neither does a tensor while ``torch.compile`` or
  ``torch.export`` (``torch.onnx.export`` too) traces a graph (``torch.compiler.is_compiling``):
  the checks that need values are then skipped, and the others (kinds, dtypes, shapes,
  devices, options) still run.
- inside ``torch.func.vmap`` or ``grad`` a tensor is a wrapper whose values cannot be read as
  above. Only then are they read through four private names of PyTorch, looked up on first use
  by :func:`functorch_internals`: a PyTorch that renames one breaks this path only, and the
  default path uses public names alone. Under ``vmap`` the values of every mapped slice are
  read, so a check of them checks them all.

:func:`value_checks` switches these reads off inside a block, as
:func:`mha.training.runs.train` does for its training steps.
"""

from __future__ import annotations

import contextvars
import functools
from collections.abc import Iterator
from contextlib import contextmanager
from types import SimpleNamespace
from typing import Any

import numpy as np
import torch

from mha.core._checks.arguments import check_dense, extremes_max_abs
from mha.core._checks.arrays import ArrayKind
from mha.core._checks.numpy_arrays import as_numpy
from mha.core._tools import switched
from mha.core.kv_cache import TORCH_FLOATS

FLOATS = tuple(getattr(torch, name) for name in TORCH_FLOATS)
"""The dtypes the PyTorch backend computes in (``kv_cache.TORCH_FLOATS``, the one list)."""

_VALUE_CHECKS = contextvars.ContextVar("mha_torch_value_checks", default=True)
_NUMPY_FLOATS = (torch.float32, torch.float64)


@contextmanager
def value_checks(enabled: bool) -> Iterator[None]:
    """Switch the checks that read tensors' values on or off inside the block (on by default).

    With the checks on, every function of :mod:`mha.backends.torch_backend` reads each input
    and parameter once: NaN and infinity are refused, and the largest magnitudes bound every
    intermediate, so that an overflow raises instead of returning a non-finite or wrong
    result. Each read is a reduction whose answer the host waits for: one synchronisation
    per array and per call.

    With them off, the block's calls check only what needs no values (kinds, dtypes, shapes,
    devices and options) and compute as PyTorch does: NaN or infinity in an input, or an
    overflow, comes out in the result, unreported. A key/value cache still measures what it
    appends (no bound comes from the inputs), so its own bound stays true. The results are
    the same tensors either way: the checks only read.

    Turn them off where the values are known to be fit, e.g. a model's own training steps
    whose loss is checked once per step (:func:`mha.training.runs.train`). A graph being
    traced needs no switch: its tensors hold no values, and the reads are skipped.

    Args:
        enabled: ``False`` to skip the checks of values inside the block, ``True`` to run them.

    Yields:
        Nothing; the setting applies to this thread (and task) until the block ends, and
        is restored when it ends, by an exception too.

    Raises:
        TypeError: if ``enabled`` is not a bool.
    """
    with switched(_VALUE_CHECKS, enabled):
        yield


def _reads_values() -> bool:
    """True unless the value checks are off or a graph is being traced."""
    return _VALUE_CHECKS.get() and not torch.compiler.is_compiling()


def _max_abs(x: torch.Tensor) -> float:
    """The largest ``|x|``: ``inf`` when ``x`` holds NaN or infinity, 0 when it holds nothing.

    The extremes of ``x`` are finite exactly when every entry is (min and max propagate
    NaN), and one pass for both is many times cheaper than ``isfinite(x).all()``; the
    largest magnitude comes with them. A ``meta`` tensor holds no values (0: shape inference
    only).
    """
    if x.numel() == 0 or x.device.type == "meta":
        return 0.0
    try:
        return _extremes_max_abs(x)
    except RuntimeError as error:  # a tensor wrapped by torch.func has no memory to read
        return _read_unwrapped(x, _extremes_max_abs, error)


def _extremes_max_abs(x: torch.Tensor) -> float:
    """``_max_abs`` of a tensor whose values can be read."""
    if x.device.type == "cpu" and x.dtype in _NUMPY_FLOATS and not x.is_neg():
        a = x.detach().numpy()  # a view of the tensor's memory, no copy
        return extremes_max_abs(a.min(), a.max())
    with torch.no_grad():
        lo, hi = torch.aminmax(x)
    return extremes_max_abs(lo.item(), hi.item())


def _values(x: torch.Tensor) -> np.ndarray | None:
    """``x``'s values as a NumPy array (inside ``torch.func.vmap``, every mapped slice's);
    ``None`` for a tensor without values (``meta``, or one in a graph being traced)."""
    if x.device.type == "meta" or torch.compiler.is_compiling():
        return None
    try:
        return as_numpy("x", x)
    except RuntimeError as error:  # a tensor wrapped by torch.func has no memory to read
        return _read_unwrapped(x, functools.partial(as_numpy, "x"), error)


def _read_unwrapped(x: torch.Tensor, read: Any, error: RuntimeError) -> Any:
    """``read`` of the values inside ``torch.func``'s wrappers of ``x`` (every vmapped slice).

    Raises:
        RuntimeError: ``error``, when no ``torch.func`` transform is active (``x`` could not
            be read for another reason).
    """
    internals = _functorch()
    if internals is None or internals.level() is None:
        raise error
    with internals.disable():  # read the values outside the transforms
        while internals.is_wrapped(x):
            x = internals.unwrap(x)
        return read(x)


# PyTorch's private names for reading the values inside torch.func's wrappers (vmap, grad),
# by the role each plays here; every use of them goes through functorch_internals.
FUNCTORCH_NAMES = {
    "is_wrapped": "torch._C._functorch.is_functorch_wrapped_tensor",
    "level": "torch._C._functorch.maybe_current_level",
    "unwrap": "torch._C._functorch.get_unwrapped",
    "disable": "torch._C._DisableFuncTorch",
}


def functorch_internals() -> SimpleNamespace:
    """The private ``torch.func`` names of :data:`FUNCTORCH_NAMES`, looked up in ``torch``.

    The one place where this package reads PyTorch's private ``torch.func`` names, and only
    when a tensor inside a ``torch.func`` transform must be read: a PyTorch that renames or
    removes one of them breaks reading values under those transforms, and nothing else.

    Returns:
        A namespace with ``is_wrapped(x)``, ``level()`` (``None`` outside any transform),
        ``unwrap(x)`` and ``disable()`` (a context manager that suspends the transforms).

    Raises:
        ImportError: naming every one of the names this PyTorch lacks.
    """
    found, missing = {}, []
    for role, path in FUNCTORCH_NAMES.items():
        obj: Any = torch
        for part in path.split(".")[1:]:
            obj = getattr(obj, part, None)
        if obj is None:
            missing.append(path)
        found[role] = obj
    if missing:
        raise ImportError(
            f"torch {torch.__version__} lacks the private torch.func names that "
            "mha.backends.torch_checks reads values under vmap and grad with: "
            f"{', '.join(missing)}"
        )
    return SimpleNamespace(**found)


@functools.cache
def _functorch() -> SimpleNamespace | None:
    """:func:`functorch_internals`, looked up once; ``None`` if this PyTorch lacks one."""
    try:
        return functorch_internals()
    except ImportError:  # the tests name what is missing; here, the read fails as it would
        return None


TENSORS = ArrayKind(
    type_name="torch.Tensor",
    convert="to_torch",
    array_type=torch.Tensor,
    bool_dtype=torch.bool,
    floats=FLOATS,
    check_kind=check_dense,
    max_abs=_max_abs,
    largest=lambda dtype: float(torch.finfo(dtype).max),
    values=_values,
    device_of=lambda x: x.device,
    reads_values=_reads_values,
)
"""PyTorch's tensors as the shared checks see them (``mha.core._checks.arrays.ArrayKind``)."""
