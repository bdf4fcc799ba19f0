"""NumPy's arrays as the checks see them (:data:`NUMPY`), and the one conversion to NumPy.

:mod:`mha.backends.np_backend`, :mod:`mha.backends.tiled` and :mod:`mha.numerics.backward`
reject the same inputs with the same messages: a float32/float64 ``numpy.ndarray`` (not a
masked array, whose hidden entries the arithmetic would still read, nor a ``numpy.matrix``,
whose ``*`` and shapes differ), finite, and a boolean mask (True = may attend) that
broadcasts to the target shape. Every module that reads a tensor or a nested sequence as a
NumPy array does it with :func:`as_numpy` (one rule: the values exactly, the dtype where
NumPy has it), and reads a mask beside arrays it did not compute with :func:`boolean_mask`.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from mha.core._checks import arguments
from mha.core._checks.arrays import ArrayKind
from mha.core._checks.overflow import check_range

FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


def max_abs(x: np.ndarray) -> float:
    """The largest ``|x|``: ``inf`` when ``x`` holds NaN or infinity, 0 when it is empty.

    The extremes of ``x`` are finite exactly when every entry is (``min`` and ``max``
    propagate NaN); two reductions cost less than building an ``isfinite`` mask, and they
    give the largest magnitude too.
    """
    return 0.0 if x.size == 0 else arguments.extremes_max_abs(x.min(), x.max())


def finite(x: np.ndarray) -> bool:
    """True when ``x`` holds no NaN or infinity."""
    return math.isfinite(max_abs(x))


def largest(dtype: Any) -> float:
    """The largest finite value of a NumPy floating dtype."""
    return float(np.finfo(dtype).max)


def check_kind(name: str, x: np.ndarray) -> None:
    """Refuse the ``ndarray`` subclasses whose arithmetic differs from a plain array's."""
    if isinstance(x, np.ma.MaskedArray):
        raise TypeError(
            f"{name} must be a plain numpy.ndarray; got a numpy.ma.MaskedArray, whose masked "
            f"entries would still be computed with. Fill them (np.ma.filled({name}, 0.0)) and "
            "pass a boolean mask for what may be attended"
        )
    if isinstance(x, np.matrix):
        raise TypeError(
            f"{name} must be a plain numpy.ndarray; got a numpy.matrix (convert with np.asarray)"
        )


NUMPY = ArrayKind(
    type_name="numpy.ndarray",
    array_type=np.ndarray,
    floats=FLOATS,
    bool_dtype=np.bool_,
    max_abs=max_abs,
    convert="to_numpy",
    largest=largest,
    values=np.asarray,
    check_kind=check_kind,
)
"""NumPy's arrays, for the checks of :mod:`mha.core._checks.arrays` and ``layer``."""


def check_array(name: str, x: Any, *, check_finite: bool = True) -> float:
    """Check that ``x`` is a float32/float64 NumPy array (and finite, by default).

    Returns:
        The largest ``|x|`` when finiteness is checked, else ``nan``.
    """
    if check_finite:
        return NUMPY.check_array(name, x)
    if not isinstance(x, np.ndarray):
        raise TypeError(f"{name} must be a numpy.ndarray; got {type(x).__name__}")
    check_kind(name, x)
    arguments.check_float(name, x, FLOATS)
    return math.nan


def as_numpy(name: str, x: Any) -> np.ndarray:
    """``x`` (an array, a nested sequence or a torch tensor) as a NumPy array: the one conversion.

    The rule: the values are kept exactly, and so is the dtype wherever NumPy has it. A tensor
    is detached and copied to the CPU, conjugate and negative views resolved; bfloat16, which
    NumPy lacks, becomes float32 (exactly: bfloat16 is float32 with a shorter significand).
    A NumPy array is returned as it is. A caller that computes in float64 casts the result,
    which is exact too. What NumPy cannot read as one array is refused naming ``name``.

    Raises:
        TypeError: for a masked array, a sparse, nested or ``meta`` tensor, or an object
            that is not numbers.
        ValueError: for a ragged nested sequence.
    """
    if type(x).__module__.startswith("torch") and hasattr(x, "detach"):
        arguments.check_dense(name, x)
        if x.device.type == "meta":
            raise TypeError(f"{name} must hold values; got a meta tensor")
        x = x.detach().cpu().resolve_conj().resolve_neg()
        if str(x.dtype) == "torch.bfloat16":
            x = x.float()
        return x.numpy()
    if isinstance(x, np.ndarray):
        check_kind(name, x)
        return x
    try:
        a = np.asarray(x)
    except ValueError:
        raise ValueError(
            f"{name} must be a rectangular array; got a ragged {type(x).__name__}"
        ) from None
    if a.dtype == object:
        raise TypeError(f"{name} must be an array of numbers; got {arguments.describe(x)}")
    return a


def numpy_float_dtype(name: str, dtype: Any, allowed: tuple[Any, ...]) -> np.dtype:
    """``dtype`` as one of the ``allowed`` NumPy floating dtypes, or a ``TypeError``."""
    names = " or ".join(np.dtype(d).name for d in allowed)
    from_torch = type(dtype).__module__ == "torch"  # a torch.dtype where NumPy's is meant
    if from_torch:
        hint = f"convert afterwards with .to_torch({dtype})"
        raise TypeError(
            f"{name} must be a NumPy dtype ({names}); got {dtype}, a torch dtype ({hint})"
        )
    try:
        np_dtype = np.dtype(dtype)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be {names}; got {arguments.describe(dtype)}") from None
    if np_dtype not in tuple(np.dtype(d) for d in allowed):
        raise TypeError(f"{name} must be {names}; got dtype {np_dtype}")
    return np_dtype


def check_result(name: str, x: np.ndarray) -> None:
    """Check that a result computed from finite inputs is finite (one reduction over ``x``).

    Raises:
        ValueError: if ``x`` holds NaN or infinity (an overflow of its dtype).
    """
    check_range(name, math.inf, x, NUMPY, lambda: None)


def check_mask(mask: Any, target: tuple[int, ...], layout: str = "(..., L, S)") -> None:
    """Check that ``mask`` is a boolean NumPy array that broadcasts to ``target``."""
    NUMPY.check_mask(mask, target, layout)


def broadcast(name: str, x: np.ndarray, shape: tuple[int, ...], target: str) -> np.ndarray:
    """``x`` broadcast to ``shape`` (a read-only view), or a ``ValueError`` naming ``target``."""
    try:
        return np.broadcast_to(x, shape)
    except ValueError:
        raise ValueError(
            f"{name} must broadcast to {target} {tuple(shape)}; got shape {x.shape}"
        ) from None


def boolean_mask(name: str, mask: Any, shape: tuple[int, ...], target: str) -> np.ndarray:
    """A boolean mask (True = may attend), converted and broadcast to ``shape``.

    For code that reads a mask beside arrays it did not compute (detectors, figures); the
    backends check masks against the layer's ``(B, H, L, S)`` in :mod:`mha.core._checks.layer`.
    """
    m = as_numpy(name, mask)
    if m.dtype != np.bool_:
        raise TypeError(f"{name} must be boolean (True = may attend); got dtype {m.dtype}")
    return broadcast(name, m, shape, target)


def check_shape(name: str, x: np.ndarray, shape: tuple[int, ...], layout: str) -> None:
    """Check that ``x`` has exactly ``shape`` (``layout`` names its axes)."""
    if tuple(x.shape) != tuple(shape):
        raise ValueError(f"{name} must have shape {layout} = {tuple(shape)}; got {x.shape}")


def float_array(
    name: str,
    value: Any,
    *,
    ndim: int | None = None,
    min_ndim: int = 0,
    layout: str = "",
    finite: bool = True,
) -> np.ndarray:
    """``value`` (an array, a tensor or nested numbers) as a float64 NumPy array.

    Floating, integer and boolean arrays are read (their values are exact in float64,
    integers up to 2**53); with ``finite`` NaN and infinity are refused; ``ndim`` or
    ``min_ndim`` checks the rank, ``layout`` names the axes in the message.
    """
    a = as_numpy(name, value)
    if not (np.issubdtype(a.dtype, np.number) or a.dtype == np.bool_) or np.iscomplexobj(a):
        raise TypeError(f"{name} must be a real numeric array; got dtype {a.dtype}")
    if (ndim is not None and a.ndim != ndim) or a.ndim < min_ndim:
        want = layout or (f"{ndim}-D" if ndim is not None else f"at least {min_ndim}-D")
        raise ValueError(f"{name} must have shape {want}; got {a.ndim}-D shape {a.shape}")
    with np.errstate(over="ignore"):
        a = a.astype(np.float64)
    if finite and a.size and not math.isfinite(float(np.abs(a).max())):
        raise ValueError(f"{name} must be finite; got NaN or infinite values")
    return a


def int_array(name: str, value: Any, *, ndim: int, layout: str) -> np.ndarray:
    """``value`` as an int64 NumPy array of rank ``ndim``; floats and booleans are refused."""
    a = as_numpy(name, value)
    if a.dtype == np.bool_ or not np.issubdtype(a.dtype, np.integer):
        raise TypeError(f"{name} must be an integer array; got dtype {a.dtype}")
    if a.ndim != ndim:
        raise ValueError(f"{name} must have shape {layout}; got {a.ndim}-D shape {a.shape}")
    if a.dtype == np.uint64 and a.size and a.max() >= arguments.INDEX_LIMIT:
        raise ValueError(f"{name} must hold values below 2**63; got {int(a.max())}")
    return a.astype(np.int64)


def bool_array(name: str, value: Any) -> np.ndarray:
    """``value`` as a boolean NumPy array; any other dtype is refused."""
    a = as_numpy(name, value)
    if a.dtype != np.bool_:
        raise TypeError(f"{name} must be boolean; got dtype {a.dtype}")
    return a
