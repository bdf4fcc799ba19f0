"""Argument checks for NumPy arrays, shared by every NumPy module.

:mod:`mha.np_backend`, :mod:`mha.tiled` and :mod:`mha.backward` reject the same inputs with
the same messages: a float32/float64 ``numpy.ndarray`` (not a masked array, whose hidden
entries the arithmetic would still read, nor a ``numpy.matrix``, whose ``*`` and shapes
differ), finite, and a boolean mask (True = may attend) that broadcasts to the target shape.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np

from mha import _validate

FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


_F = TypeVar("_F", bound=Callable[..., Any])


def range_checked(fn: _F) -> _F:
    """``fn`` with NumPy's overflow and invalid-value warnings silenced inside it.

    For functions that check the range of every result they compute and raise their own
    ``ValueError`` naming the stage that overflowed: NumPy's ``RuntimeWarning`` before that
    error would only repeat it, less precisely.
    """

    @functools.wraps(fn)
    def quiet(*args: Any, **kwargs: Any) -> Any:
        with np.errstate(over="ignore", invalid="ignore"):
            return fn(*args, **kwargs)

    return quiet  # type: ignore[return-value]


def max_abs(x: np.ndarray) -> float:
    """The largest ``|x|``: ``inf`` when ``x`` holds NaN or infinity, 0 when it is empty.

    The extremes of ``x`` are finite exactly when every entry is (``min`` and ``max``
    propagate NaN); two reductions cost less than building an ``isfinite`` mask, and they
    give the largest magnitude too.
    """
    return 0.0 if x.size == 0 else _validate.extremes_max_abs(x.min(), x.max())


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


ARRAYS = _validate.ArrayKind(
    "numpy.ndarray",
    np.ndarray,
    FLOATS,
    np.bool_,
    max_abs,
    "to_numpy",
    largest,
    np.asarray,
    check_kind,
)


def check_array(name: str, x: Any, *, check_finite: bool = True) -> float:
    """Check that ``x`` is a float32/float64 NumPy array (and finite, by default).

    Returns:
        The largest ``|x|`` when finiteness is checked, else ``nan``.
    """
    if check_finite:
        return ARRAYS.check_array(name, x)
    if not isinstance(x, np.ndarray):
        raise TypeError(f"{name} must be a numpy.ndarray; got {type(x).__name__}")
    check_kind(name, x)
    _validate.check_float(name, x, FLOATS)
    return math.nan


def as_numpy(name: str, x: Any) -> np.ndarray:
    """``x`` (an array, a nested sequence or a torch tensor) as a NumPy array.

    A tensor is detached and copied to the CPU (bfloat16 as float32, negative views
    resolved). What NumPy cannot read as one array is refused naming ``name``.

    Raises:
        TypeError: for a masked array, a sparse, nested or ``meta`` tensor, or an object
            that is not numbers.
        ValueError: for a ragged nested sequence.
    """
    if type(x).__module__.startswith("torch") and hasattr(x, "detach"):
        _validate.check_dense(name, x)
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
        raise TypeError(f"{name} must be an array of numbers; got {_validate.describe(x)}")
    return a


def numpy_float_dtype(name: str, dtype: Any, allowed: tuple[Any, ...]) -> np.dtype:
    """``dtype`` as one of the ``allowed`` NumPy floating dtypes, or a ``TypeError``."""
    names = " or ".join(np.dtype(d).name for d in allowed)
    if type(dtype).__module__ == "torch":  # a torch.dtype where NumPy's is meant
        raise TypeError(
            f"{name} must be a NumPy dtype ({names}); got {dtype}, a torch dtype (convert "
            f"afterwards with .to_torch({dtype}))"
        )
    try:
        np_dtype = np.dtype(dtype)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be {names}; got {_validate.describe(dtype)}") from None
    if np_dtype not in tuple(np.dtype(d) for d in allowed):
        raise TypeError(f"{name} must be {names}; got dtype {np_dtype}")
    return np_dtype


def check_result(name: str, x: np.ndarray) -> None:
    """Check that a result computed from finite inputs is finite (one reduction over ``x``).

    Raises:
        ValueError: if ``x`` holds NaN or infinity (an overflow of its dtype).
    """
    _validate.check_range(name, math.inf, x, ARRAYS, lambda: None)


def check_mask(mask: Any, target: tuple[int, ...], layout: str = "(..., L, S)") -> None:
    """Check that ``mask`` is a boolean NumPy array that broadcasts to ``target``."""
    ARRAYS.check_mask(mask, target, layout)


def check_shape(name: str, x: np.ndarray, shape: tuple[int, ...], layout: str) -> None:
    """Check that ``x`` has exactly ``shape`` (``layout`` names its axes)."""
    if tuple(x.shape) != tuple(shape):
        raise ValueError(f"{name} must have shape {layout} = {tuple(shape)}; got {x.shape}")


# --- Where an overflow happened (only on the error path, in float64) ----------------------

_ROWS = 256  # query rows per block, so that no float64 (..., L, S) array is formed


def _attention64(
    q: np.ndarray, k: np.ndarray, v: np.ndarray, mask: Any
) -> tuple[float, np.ndarray]:
    """Float64 attention block by block: the largest attended score and the output."""
    L, S = q.shape[-2], k.shape[-2]
    lead = np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    if mask is not None:
        lead = np.broadcast_shapes(lead, np.shape(mask)[:-2])
        mask = np.broadcast_to(mask, (*lead, L, S))
    scale = 1.0 / np.sqrt(q.shape[-1])
    top, out = 0.0, np.empty((*lead, L, v.shape[-1]))
    for i in range(0, L, _ROWS):
        rows = slice(i, min(i + _ROWS, L))
        s = np.matmul(q[..., rows, :], k.swapaxes(-1, -2)) * scale  # (..., Br, S)
        s = np.broadcast_to(s, (*lead, *s.shape[-2:]))
        if mask is None:
            top = max(top, _max_abs(s))
        else:
            keep = np.broadcast_to(mask[..., rows, :], s.shape)
            top = max(top, _max_abs(s[keep]))
            s = np.where(keep, s, -np.inf)
        row_max = s.max(axis=-1, keepdims=True)
        w = np.exp(s - np.where(np.isfinite(row_max), row_max, 0.0))
        total = w.sum(axis=-1, keepdims=True)
        out[..., rows, :] = np.matmul(w / np.where(total == 0, 1.0, total), v)
    return top, out


def _max_abs(x: np.ndarray) -> float:
    """The largest ``|x|`` (NaN counts as infinite)."""
    if not x.size:
        return 0.0
    top = float(np.abs(x).max())
    return math.inf if math.isnan(top) else top


@range_checked
def attention_overflow(
    query: np.ndarray, key: np.ndarray, value: np.ndarray, mask: Any, largest: float
) -> str:
    """Which stage of scaled dot-product attention exceeds ``largest``, from float64 copies."""
    top, out = _attention64(query, key, value, mask)
    return _validate.overflow_stage(
        [
            ("the scores Q K^T / sqrt(Dh)", lambda: top),
            ("the weighted sums of the values", lambda: _max_abs(out)),
        ],
        largest,
    )


@range_checked
def mha_overflow(
    query: np.ndarray,
    key: np.ndarray,
    value: np.ndarray,
    params: Any,
    mask: Any,
    cached: tuple[np.ndarray, np.ndarray] | None = None,
    *,
    largest: float,
) -> str | None:
    """Which stage of multi-head attention exceeds ``largest``, from float64 copies.

    ``params`` are float64 NumPy :class:`mha.MHAParams`; ``cached`` the float64 keys and
    values ``(B, H_kv, S0, Dh)`` a key/value cache held before this call, which the new
    positions' keys and values follow. With ``H_kv < H`` each key/value head is repeated
    for its group (only on this error path).
    """
    H, H_kv = params.num_heads, params.num_kv_heads

    def heads(x: np.ndarray, w: np.ndarray, b: Any, n: int) -> np.ndarray:
        y = x @ w + (0.0 if b is None else b)  # (B, N, n Dh)
        return y.reshape(*y.shape[:-1], n, -1).swapaxes(-2, -3)  # (B, n, N, Dh)

    q = heads(query, params.w_q, params.b_q, H)  # (B, H, L, Dh)
    k = heads(key, params.w_k, params.b_k, H_kv)  # (B, H_kv, S, Dh)
    v = heads(value, params.w_v, params.b_v, H_kv)
    projected = max(_max_abs(q), _max_abs(k), _max_abs(v))
    if cached is not None:
        k = np.concatenate([cached[0], k], axis=2)  # (B, H_kv, S0 + S, Dh)
        v = np.concatenate([cached[1], v], axis=2)
    k, v = (np.repeat(t, H // H_kv, axis=1) for t in (k, v))  # (B, H, S, Dh)
    top, attended = _attention64(q, k, v, mask)  # (B, H, L, Dh)
    concat = attended.swapaxes(-2, -3).reshape(*query.shape)  # (B, H, L, Dh) -> (B, L, D)
    return _validate.overflow_stage(
        [
            ("the projections x W + b", lambda: projected),
            ("the scores Q K^T / sqrt(Dh)", lambda: top),
            ("the weighted sums of the values", lambda: _max_abs(attended)),
            (
                "the output projection",
                lambda: _max_abs(concat @ params.w_o + (0.0 if params.b_o is None else params.b_o)),
            ),
        ],
        largest,
    )
