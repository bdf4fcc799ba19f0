"""Argument checks that return the value to compute with, for the modules that measure heads.

The checks of :mod:`mha.core._validate` say whether an argument is right; these also hand it
back in the one form the caller computes with: a size as a Python ``int`` (a NumPy integer
stays fixed-width and wraps around in products: ``int32(4096) ** 2 * 4096`` is 0), a number
as a ``float``, an array as a float64 or int64 NumPy array, a list as a ``list``. The
analysis, detector, model, training, cost and display modules use them, so that the same
wrong argument gets the same ``ValueError`` or ``TypeError``, naming it, in every one of them.

Sizes follow one rule: a Python or NumPy integer, never a ``bool`` (``True`` is not a
size) or a float, and below :data:`INDEX_LIMIT` wherever it shapes an array (NumPy and
PyTorch index with 64-bit integers). Arithmetic on sizes alone (the cost model) takes any
Python integer and stays exact.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Sequence
from numbers import Integral, Real
from pathlib import Path
from typing import Any

import numpy as np

from mha.core import _validate
from mha.core._np_checks import as_numpy

INDEX_LIMIT = 2**63
"""Sizes of arrays stay below this: NumPy and PyTorch index with signed 64-bit integers."""

SEED_LIMIT = 2**64
"""Seeds stay below this: ``torch.Generator.manual_seed`` takes 64 bits (NumPy takes more)."""

describe = _validate.describe


def check_elements(name: str, count: int, itemsize: int) -> None:
    """Refuse an array of ``count`` items of ``itemsize`` bytes that no array can hold.

    NumPy and PyTorch address at most ``2**63`` bytes; ``name`` is the size that asked.
    """
    if count * itemsize >= INDEX_LIMIT:
        raise ValueError(
            f"{name} asks for an array of {count} elements ({count * itemsize} bytes), more "
            "than NumPy and PyTorch can address (2**63 bytes)"
        )


def size(name: str, value: Any, low: int = 1, high: int | None = INDEX_LIMIT) -> int:
    """``value`` as a Python ``int`` after checking it is an integer in ``[low, high)``.

    ``high=None`` allows any integer, for arithmetic that allocates nothing.
    """
    if low == 1:
        _validate.check_positive(name, value)
    else:
        _validate.check_at_least(name, value, low)
    if high is not None and value >= high:
        raise ValueError(f"{name} must be below {high}; got {name}={value}")
    return int(value)


def sizes(low: int = 1, high: int | None = INDEX_LIMIT, **named: Any) -> dict[str, int]:
    """:func:`size` of every keyword argument, in order, as Python ints."""
    return {name: size(name, value, low, high) for name, value in named.items()}


def counts(**named: Any) -> dict[str, int]:
    """Positive sizes of any magnitude (for arithmetic that allocates nothing), as Python ints."""
    return {name: size(name, value, 1, None) for name, value in named.items()}


def index(name: str, value: Any, stop: int) -> int:
    """``value`` as an ``int`` after checking it is an integer in ``[0, stop)``."""
    _validate.check_int(name, value)
    if not 0 <= value < stop:
        raise ValueError(f"{name} must be in [0, {stop}); got {name}={value}")
    return int(value)


def integer(name: str, value: Any) -> int:
    """``value`` as an ``int`` after checking it is one (an offset, which may be negative)."""
    _validate.check_int(name, value)
    return int(value)


def seed(name: str, value: Any) -> int:
    """``value`` as an ``int`` after checking it is a seed in ``[0, 2**64)``."""
    _validate.check_seed(name, value)
    if value >= SEED_LIMIT:
        raise ValueError(f"{name} must be below 2**64; got {name}={value}")
    return int(value)


def number(
    name: str,
    value: Any,
    *,
    low: float | None = None,
    high: float | None = None,
    open_low: bool = False,
    open_high: bool = False,
) -> float:
    """``value`` as a ``float`` after checking it is a finite real number within the bounds.

    ``low`` and ``high`` bound it (strictly with ``open_low``/``open_high``); a Python or
    NumPy number, never a ``bool``, a string or an array.
    """
    if isinstance(value, bool) or not isinstance(value, Real):
        raise TypeError(
            f"{name} must be a real number (int or float); got {_validate.describe(value)}"
        )
    if not _validate.is_finite_real(value):
        raise ValueError(f"{name} must be finite; got {name}={value!r}")
    x = float(value)
    below = low is not None and (x <= low if open_low else x < low)
    above = high is not None and (x >= high if open_high else x > high)
    if below or above:
        if high is None and low == 0:
            rule = "positive" if open_low else "at least 0"
        else:
            left, right = "(" if open_low else "[", ")" if open_high else "]"
            lo = "-inf" if low is None else f"{low:g}"
            hi = "inf" if high is None else f"{high:g}"
            rule = f"in {left}{lo}, {hi}{right}"
        raise ValueError(f"{name} must be {rule}; got {name}={value!r}")
    return x


def choice(name: str, value: Any, choices: Sequence[str]) -> str:
    """``value`` after checking it is one of the strings ``choices``."""
    if not isinstance(value, str) or value not in choices:
        raise ValueError(f"{name} must be one of {tuple(choices)}; got {name}={value!r}")
    return value


def text(name: str, value: Any) -> str:
    """``value`` after checking it is a ``str``."""
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str; got {_validate.describe(value)}")
    return value


def path(name: str, value: Any) -> Path:
    """``value`` (a ``str`` or ``os.PathLike``) as a :class:`~pathlib.Path`."""
    if not isinstance(value, str | os.PathLike):
        raise TypeError(f"{name} must be a path (str or os.PathLike); got {describe(value)}")
    return Path(value)


def items(name: str, value: Any, *, nonempty: bool = False) -> list[Any]:
    """``value`` (a list, tuple or other iterable, not a string or an array) as a list."""
    if isinstance(value, str | bytes | dict) or hasattr(value, "shape"):
        raise TypeError(f"{name} must be a list or tuple; got {_validate.describe(value)}")
    if not isinstance(value, Iterable):
        raise TypeError(f"{name} must be a list or tuple; got {_validate.describe(value)}")
    out = list(value)
    if nonempty and not out:
        raise ValueError(f"{name} must hold at least one entry; got none")
    return out


def size_list(name: str, value: Any, low: int = 1, *, nonempty: bool = True) -> list[int]:
    """A list of sizes (each checked by :func:`size`, named ``name[i]``) as Python ints."""
    return [
        size(f"{name}[{i}]", v, low) for i, v in enumerate(items(name, value, nonempty=nonempty))
    ]


def optional_ids(name: str, value: Any) -> list[int | None]:
    """A list of non-negative ints or ``None`` (word indices, head words), as Python ints."""
    out: list[int | None] = []
    for i, v in enumerate(items(name, value)):
        out.append(None if v is None else size(f"{name}[{i}]", v, 0))
    return out


def pairs(name: str, value: Any) -> list[tuple[int, int]]:
    """A list of ``(int, int)`` pairs (arcs, ``(layer, head)`` pairs) as Python ints."""
    out = []
    for i, pair in enumerate(items(name, value)):
        if isinstance(pair, str) or not isinstance(pair, Sequence | np.ndarray) or len(pair) != 2:
            raise TypeError(f"{name}[{i}] must be a pair of ints; got {_validate.describe(pair)}")
        out.append((integer(f"{name}[{i}][0]", pair[0]), integer(f"{name}[{i}][1]", pair[1])))
    return out


def distinct_objects(name: str, objects: Sequence[Any]) -> None:
    """Refuse a sequence that holds one object twice (``[cache] * n``: one cache per layer)."""
    seen: dict[int, int] = {}
    for i, obj in enumerate(objects):
        if id(obj) in seen:
            raise ValueError(
                f"{name} must hold a separate object per entry; got the same "
                f"{type(obj).__name__} at {name}[{seen[id(obj)]}] and {name}[{i}] (a list "
                f"written [x] * n repeats one object)"
            )
        seen[id(obj)] = i


def instance(name: str, value: Any, kind: type | tuple[type, ...], what: str) -> Any:
    """``value`` after checking it is an instance of ``kind`` (``what`` names it in messages)."""
    if not isinstance(value, kind):
        raise TypeError(f"{name} must be {what}; got {_validate.describe(value)}")
    return value


def layer_sizes(
    d_model: Any, num_heads: Any, num_kv_heads: Any = None, *, high: int | None = INDEX_LIMIT
) -> tuple[int, int, int]:
    """``(D, H, H_kv)`` as Python ints after checking them: positive, H dividing D, H_kv
    dividing H (``num_kv_heads=None`` means H)."""
    D = size("d_model", d_model, high=high)
    H = size("num_heads", num_heads, high=high)
    if D % H != 0:
        raise ValueError(f"num_heads must divide d_model; got d_model={D}, num_heads={H}")
    if num_kv_heads is None:
        return D, H, H
    H_kv = size("num_kv_heads", num_kv_heads, high=high)
    if H % H_kv != 0:
        raise ValueError(
            f"num_kv_heads must divide num_heads; got num_heads={H}, num_kv_heads={H_kv}"
        )
    return D, H, H_kv


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
    if a.dtype == np.uint64 and a.size and a.max() >= INDEX_LIMIT:
        raise ValueError(f"{name} must hold values below 2**63; got {int(a.max())}")
    return a.astype(np.int64)


def bool_array(name: str, value: Any) -> np.ndarray:
    """``value`` as a boolean NumPy array; any other dtype is refused."""
    a = as_numpy(name, value)
    if a.dtype != np.bool_:
        raise TypeError(f"{name} must be boolean; got dtype {a.dtype}")
    return a


def torch_tensor(name: str, value: Any, *, integer: bool = False) -> Any:
    """``value`` after checking it is a dense ``torch.Tensor`` (of an integer dtype, or a
    floating one, finite)."""
    import torch  # only PyTorch callers reach here

    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor; got {_validate.describe(value)}")
    _validate.check_dense(name, value)
    if integer:
        if value.dtype == torch.bool or value.dtype.is_floating_point or value.dtype.is_complex:
            raise TypeError(f"{name} must have an integer dtype; got dtype {value.dtype}")
        return value
    if not value.dtype.is_floating_point:
        raise TypeError(f"{name} must have a floating dtype; got dtype {value.dtype}")
    if value.device.type != "meta" and value.numel() and not bool(torch.isfinite(value).all()):
        raise ValueError(f"{name} must be finite; got NaN or infinite values")
    return value


def flag(name: str, value: Any) -> bool:
    """``value`` after checking it is a ``bool``."""
    _validate.check_bool(name, value)
    return value


def integral(value: Any) -> bool:
    """Whether ``value`` is an integer (Python or NumPy) and not a ``bool``."""
    return isinstance(value, Integral) and not isinstance(value, bool)
