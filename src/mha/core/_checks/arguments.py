"""Checks of single arguments: options, sizes, shapes and dtypes, the same for every array.

Every check raises ``ValueError`` (a shape or value is wrong) or ``TypeError`` (a kind or
dtype is wrong) with a message that names the argument, the rule and what it got. The
checks of arrays here read only ``.shape``, ``.ndim`` and ``.dtype``, so they work on NumPy
arrays and on PyTorch tensors alike; the checks that read an array's values take its
:class:`~mha.core._checks.arrays.ArrayKind` (:mod:`mha.core._checks.arrays`).

Options are checked as strictly as arrays: a flag must be a ``bool`` (:func:`check_bool`), a
count or size an ``int`` (a Python or NumPy integer, never a bool or float;
:func:`check_int`, :func:`check_positive`, :func:`check_at_least`), a positive number a finite
real number above 0 (:func:`check_positive_number`), a seed a non-negative int
(:func:`check_seed`) and a device a name PyTorch can allocate on (:func:`check_device`). The
same non-integer raises the same ``TypeError`` wherever it is passed.

The second half of the module (from :data:`INDEX_LIMIT` on) checks an argument and returns it
in the form to compute with: :func:`size`, :func:`number`, :func:`seed`, :func:`items` and
the rest.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Callable, Iterable, Sequence
from numbers import Integral, Real
from pathlib import Path
from typing import Any, SupportsFloat

from mha.core.mask_rules import CAUSAL_ALIGNMENTS


def distinct(*named: tuple[str, Any]) -> list[tuple[str, Any]]:
    """The ``(name, array)`` pairs with repeats of the same object dropped.

    Self-attention passes one array as query, key and value; its content checks (such as
    finiteness) need to run once, not three times.
    """
    seen: set[int] = set()
    out = []
    for name, x in named:
        if id(x) not in seen:
            seen.add(id(x))
            out.append((name, x))
    return out


def check_sizes(d_model: Any, num_heads: Any) -> None:
    """Check that ``d_model`` and ``num_heads`` are positive integers and H divides D."""
    check_positive("d_model", d_model)
    check_positive("num_heads", num_heads)
    if d_model % num_heads != 0:
        raise ValueError(
            f"num_heads must divide d_model; got d_model={d_model}, num_heads={num_heads}"
        )


def describe(value: Any) -> str:
    """``value``'s type and a short repr, for messages (``"float 2.5"``, ``"Tensor tensor(3)"``)."""
    if isinstance(value, type):
        return f"the type {value.__module__}.{value.__qualname__}"
    text = repr(value)
    if len(text) > 60:
        text = text[:57] + "..."
    return f"{type(value).__name__} {text}"


def check_int(name: str, value: Any) -> None:
    """Check that ``value`` is an integer (a Python or NumPy int, not a bool or float)."""
    if isinstance(value, bool) or not isinstance(value, Integral):
        raise TypeError(f"{name} must be an int; got {describe(value)}")


def check_positive(name: str, value: Any) -> None:
    """Check that ``value`` is a positive integer (a count or a size)."""
    check_int(name, value)
    if value <= 0:
        raise ValueError(f"{name} must be positive; got {name}={value}")


def check_positive_sizes(**sizes: Any) -> None:
    """Check that every keyword argument is a positive int, naming the first that is not."""
    for name, value in sizes.items():
        check_positive(name, value)


def check_at_least(name: str, value: Any, low: int) -> None:
    """Check that ``value`` is an integer of at least ``low`` (a count, a size or an index)."""
    check_int(name, value)
    if value < low:
        raise ValueError(f"{name} must be at least {low}; got {name}={value}")


def check_seed(name: str, value: Any) -> None:
    """Check that ``value`` is a seed for ``numpy.random.default_rng``: an int >= 0."""
    check_int(name, value)
    if value < 0:
        raise ValueError(f"{name} must be a non-negative int; got {name}={value}")


def check_bool(name: str, value: Any) -> None:
    """Check that a flag is a ``bool`` (not a string, None, an int or a tensor)."""
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool; got {describe(value)}")


def check_dense(name: str, x: Any) -> None:
    """Check that a ``torch.Tensor`` is dense: not sparse, nested or MKL-DNN."""
    import torch  # only tensors reach here

    if x.is_nested:
        raise TypeError(
            f"{name} must be a dense torch.Tensor; got a nested tensor (pad it with "
            "torch.nested.to_padded_tensor and mask the padding)"
        )
    if x.layout != torch.strided:
        raise TypeError(
            f"{name} must be a dense (strided) torch.Tensor; got layout {x.layout} "
            f"(convert with {name}.to_dense())"
        )


def is_finite_real(value: SupportsFloat) -> bool:
    """``math.isfinite`` for any real number: an int too large for a float is not finite."""
    try:
        return math.isfinite(value)
    except OverflowError:  # int too large to convert to float
        return False


def check_positive_number(name: str, value: Any) -> None:
    """Check that ``value`` is a real number (Python or NumPy), finite and above 0."""
    if isinstance(value, bool) or not isinstance(value, Real):
        hint = f"; pass {name}.item()" if hasattr(value, "item") and hasattr(value, "shape") else ""
        raise TypeError(f"{name} must be a real number (int or float); got {describe(value)}{hint}")
    if not (is_finite_real(value) and float(value) > 0):
        raise ValueError(f"{name} must be positive and finite; got {name}={value!r}")


def check_magnitude(name: str, value: Any) -> float:
    """Check that ``value`` is a magnitude: a real number (Python or NumPy), finite, ``>= 0``.

    Returns:
        ``value`` as a float.
    """
    if isinstance(value, bool) or not isinstance(value, Real):
        hint = f"; pass {name}.item()" if hasattr(value, "item") and hasattr(value, "shape") else ""
        raise TypeError(f"{name} must be a real number (int or float); got {describe(value)}{hint}")
    if not (is_finite_real(value) and float(value) >= 0):
        raise ValueError(f"{name} must be finite and at least 0; got {name}={value!r}")
    return float(value)


def check_device(name: str, device: Any) -> Any:
    """Check that ``device`` is ``None`` or a torch device this machine can allocate on.

    Returns:
        ``None`` or the ``torch.device``.
    """
    if device is None:
        return None
    import torch  # only PyTorch code has devices; ``import mha`` does not need torch

    if not isinstance(device, torch.device | str) and not (
        isinstance(device, Integral) and not isinstance(device, bool)
    ):
        raise TypeError(
            f"{name} must be a torch.device, a device name such as 'cpu', or None; got "
            f"{describe(device)}"
        )
    try:
        parsed = torch.device(int(device) if isinstance(device, Integral) else device)
    except (RuntimeError, ValueError):
        raise ValueError(
            f"{name} must name a torch device such as 'cpu', 'cuda:0' or 'meta'; got "
            f"{name}={device!r}"
        ) from None
    try:
        torch.empty(0, device=parsed)
    except (RuntimeError, AssertionError) as error:  # e.g. CUDA on a CPU-only build
        raise ValueError(f"{name}={device!r} is not available here: {error}") from None
    return parsed


def check_length(name: str, value: Any, symbol: str) -> None:
    """Check that a requested sequence length is an int of at least one."""
    check_int(name, value)
    check_nonempty(name, value, symbol)


def check_causal(q_len: Any, kv_len: Any, align: Any) -> None:
    """Check the arguments of a backend's ``causal_mask``: two lengths and an alignment."""
    check_length("q_len", q_len, "L")
    check_length("kv_len", kv_len, "S")
    check_align(align)


def check_causal_flag(causal: Any, align: Any) -> None:
    """Check a ``causal`` flag (a bool) and its ``align``, which applies only with ``causal``."""
    check_bool("causal", causal)
    check_align(align)
    if not causal and align != "top_left":
        raise ValueError(f"align={align!r} applies only with causal=True; got causal=False")


def check_lengths(lengths: Any, kv_len: int, is_integer: bool, values: Any) -> None:
    """Check the ``lengths`` of a key-padding mask: ``(B,)``, integers, each in ``[0, S]``.

    ``is_integer`` says whether their dtype is an integer one; ``values`` are their values
    (a NumPy array or a tensor; ``None`` when they have none, as a ``meta`` tensor).
    """
    if lengths.ndim != 1:
        raise ValueError(f"lengths must have shape (B,); got shape {tuple(lengths.shape)}")
    if not is_integer:
        raise TypeError(f"lengths must be integers; got dtype {lengths.dtype}")
    if values is None:
        raise TypeError("lengths must hold values; got a meta tensor")
    if ((values < 0) | (values > kv_len)).any():
        raise ValueError(f"lengths must lie in [0, kv_len={kv_len}]; got {values.tolist()}")


def check_align(align: Any) -> None:
    """Raise ``TypeError`` if ``align`` is not a ``str``, and ``ValueError`` if it is not one
    of :data:`mha.core.mask_rules.CAUSAL_ALIGNMENTS`."""
    if not isinstance(align, str):
        raise TypeError(
            f"align must be a string, one of {CAUSAL_ALIGNMENTS}; got {describe(align)}"
        )
    if align not in CAUSAL_ALIGNMENTS:
        raise ValueError(f"align must be one of {CAUSAL_ALIGNMENTS}; got align={align!r}")


def check_rank(name: str, x: Any, ndim: int, layout: str) -> None:
    """Check that ``x`` has exactly ``ndim`` dimensions, ``layout`` naming them."""
    if x.ndim != ndim:
        raise ValueError(f"{name} must have shape {layout}; got {x.ndim}-D shape {tuple(x.shape)}")


def check_float(name: str, x: Any, allowed: Sequence[Any]) -> None:
    """Check that ``x.dtype`` is one of the ``allowed`` floating dtypes."""
    if x.dtype not in allowed:
        names = ", ".join(str(d) for d in allowed)
        raise TypeError(f"{name} must have a floating dtype ({names}); got dtype {x.dtype}")


def check_same_dtype(named: dict[str, Any]) -> None:
    """Check that every non-None array in ``named`` has the same dtype."""
    present = {name: x for name, x in named.items() if x is not None}
    dtypes = {str(x.dtype) for x in present.values()}
    if len(dtypes) > 1:
        got = ", ".join(f"{name}={x.dtype}" for name, x in present.items())
        raise TypeError(f"all inputs and parameters must share one dtype; got {got}")


def extremes_max_abs(lo: float, hi: float) -> float:
    """The largest magnitude from an array's extremes; ``inf`` if either is not finite."""
    lo, hi = float(lo), float(hi)
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return math.inf
    return max(-lo, hi)


def check_finite(name: str, x: Any, all_finite: Callable[[Any], bool]) -> None:
    """Check that ``x`` holds no NaN or infinity, which would spread through the softmax."""
    if not all_finite(x):
        raise ValueError(f"{name} must be finite; got NaN or infinite values")


def check_nonempty(name: str, length: int, symbol: str) -> None:
    """Check that a sequence length is at least one."""
    if length < 1:
        raise ValueError(f"{name} must have at least one position; got {symbol}={length}")


def check_qkv(query: Any, key: Any, value: Any) -> tuple[int, int, int, int]:
    """Check the per-head tensors of scaled dot-product attention.

    Shape:
        query ``(..., L, Dh)``, key ``(..., S, Dh)``, value ``(..., S, Dv)``, with
        ``Dh >= 1`` (``Dv = 0`` is allowed: an empty output).

    Returns:
        ``(L, S, Dh, Dv)``.
    """
    for name, x in (("query", query), ("key", key), ("value", value)):
        if x.ndim < 2:
            raise ValueError(
                f"{name} must have shape (..., length, width); got {x.ndim}-D shape "
                f"{tuple(x.shape)}"
            )
    L, d_q = query.shape[-2:]
    S, d_k = key.shape[-2:]
    S_v, d_v = value.shape[-2:]
    if d_q != d_k:
        raise ValueError(
            f"query and key must have the same width; got query width {d_q}, key width {d_k}"
        )
    if S_v != S:
        raise ValueError(f"key and value must have the same length; got key {S}, value {S_v}")
    if d_q == 0:  # the scores are scaled by 1 / sqrt(Dh); with no width they are not defined
        raise ValueError(
            "query and key must have a head width Dh (last dimension) of at least 1, since "
            f"the scores are divided by sqrt(Dh); got query {tuple(query.shape)}, key "
            f"{tuple(key.shape)}"
        )
    check_nonempty("query", L, "L")
    check_nonempty("key", S, "S")
    return L, S, d_q, d_v


def broadcast_batch(query: Any, key: Any, value: Any) -> tuple[int, ...]:
    """The broadcast leading (batch, head) shape of ``(..., length, width)`` tensors.

    Raises:
        ValueError: if the leading dimensions of query, key and value do not broadcast.
    """
    shapes = [tuple(x.shape[:-2]) for x in (query, key, value)]
    out: list[int] = []
    for i in range(1, max(len(s) for s in shapes) + 1):
        sizes = {s[-i] for s in shapes if len(s) >= i} - {1}
        if len(sizes) > 1:
            names = ("query", "key", "value")
            got = ", ".join(f"{n} {s}" for n, s in zip(names, shapes, strict=True))
            raise ValueError(
                "query, key and value must have broadcastable leading (batch) dimensions; "
                f"got {got}"
            )
        out.append(sizes.pop() if sizes else 1)
    return tuple(reversed(out))


def check_mask(
    mask: Any,
    target: tuple[int, ...],
    is_bool: bool,
    layout: str = "(B, H, L, S)",
    hint: str = "",
) -> None:
    """Check that ``mask`` is boolean and broadcasts to ``target`` (``(..., L, S)``).

    Broadcasting follows NumPy's rule: dimensions are aligned from the right and each
    mask dimension must be 1 or equal the target's. ``hint`` ends the message when the
    shape is wrong.
    """
    if not is_bool:
        raise TypeError(
            f"mask must be boolean (True = may attend); got dtype {mask.dtype}. "
            "Convert an additive float mask with `mask = additive == 0`."
        )
    shape = tuple(mask.shape)
    ok = len(shape) <= len(target) and all(
        m in (1, t) for m, t in zip(reversed(shape), reversed(target), strict=False)
    )
    if not ok:
        raise ValueError(f"mask must broadcast to {layout} = {target}; got shape {shape}{hint}")


def check_layer_norm_params(d_model: int, weight: Any, bias: Any, eps: Any) -> None:
    """Check LayerNorm's ``eps`` (a positive number) and ``weight``/``bias`` shapes ``(D,)``."""
    check_positive_number("eps", eps)
    for name, p in (("weight", weight), ("bias", bias)):
        if p is not None and tuple(p.shape) != (d_model,):
            raise ValueError(f"{name} must have shape (D,) = ({d_model},); got {tuple(p.shape)}")


def check_block_size(name: str, value: Any) -> None:
    """Check that a block size (rows of a tile) is an int of at least one."""
    check_at_least(name, value, 1)


# Checks that hand the argument back in the one form the caller computes with: a size as a
# Python ``int`` (a NumPy integer stays fixed-width and wraps around in products:
# ``int32(4096) ** 2 * 4096`` is 0), a number as a ``float``, a list as a ``list``. The
# analysis, detector, model, training, cost and display modules call them, so that one wrong
# argument gets one ``ValueError`` or ``TypeError``, naming it, in every module. A size is a
# Python or NumPy integer, never a ``bool`` or a float, and below :data:`INDEX_LIMIT` wherever
# it shapes an array; arithmetic on sizes alone (the cost model) takes any Python integer and
# stays exact. The arrays' counterparts (``float_array``, ``int_array``, ``bool_array``) are
# in :mod:`mha.core._checks.numpy_arrays`.

INDEX_LIMIT = 2**63
"""Sizes of arrays stay below this: NumPy and PyTorch index with signed 64-bit integers."""

SEED_LIMIT = 2**64
"""Seeds stay below this: ``torch.Generator.manual_seed`` takes 64 bits (NumPy takes more)."""


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
        check_positive(name, value)
    else:
        check_at_least(name, value, low)
    if high is not None and value >= high:
        raise ValueError(f"{name} must be below {high}; got {name}={value}")
    return int(value)


def sizes(low: int = 1, high: int | None = INDEX_LIMIT, **named: Any) -> dict[str, int]:
    """:func:`size` of every keyword argument, in order, as Python ints."""
    return {name: size(name, value, low, high) for name, value in named.items()}


def counts(**named: Any) -> dict[str, int]:
    """Positive sizes of any magnitude (for arithmetic that allocates nothing), as Python ints."""
    return {name: size(name, value, 1, None) for name, value in named.items()}


def count_fields(record: Any) -> None:
    """Check every field of the frozen dataclass ``record`` as a count: an int of at least 0.

    Each field is kept as a Python ``int``, of any magnitude (arithmetic allocates nothing).
    """
    for f in dataclasses.fields(record):
        object.__setattr__(record, f.name, size(f.name, getattr(record, f.name), 0, None))


def index(name: str, value: Any, stop: int) -> int:
    """``value`` as an ``int`` after checking it is an integer in ``[0, stop)``."""
    check_int(name, value)
    if not 0 <= value < stop:
        raise ValueError(f"{name} must be in [0, {stop}); got {name}={value}")
    return int(value)


def integer(name: str, value: Any) -> int:
    """``value`` as an ``int`` after checking it is one (an offset, which may be negative)."""
    check_int(name, value)
    return int(value)


def seed(name: str, value: Any) -> int:
    """``value`` as an ``int`` after checking it is a seed in ``[0, 2**64)``."""
    check_seed(name, value)
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
        raise TypeError(f"{name} must be a real number (int or float); got {describe(value)}")
    if not is_finite_real(value):
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
        raise TypeError(f"{name} must be a str; got {describe(value)}")
    return value


def path(name: str, value: Any) -> Path:
    """``value`` (a ``str`` or ``os.PathLike``) as a :class:`~pathlib.Path`."""
    if not isinstance(value, str | os.PathLike):
        raise TypeError(f"{name} must be a path (str or os.PathLike); got {describe(value)}")
    return Path(value)


def items(name: str, value: Any, *, nonempty: bool = False) -> list[Any]:
    """``value`` (a list, tuple or other iterable, not a string or an array) as a list."""
    if isinstance(value, str | bytes | dict) or hasattr(value, "shape"):
        raise TypeError(f"{name} must be a list or tuple; got {describe(value)}")
    if not isinstance(value, Iterable):
        raise TypeError(f"{name} must be a list or tuple; got {describe(value)}")
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
        sequence = isinstance(pair, Sequence) or hasattr(pair, "shape")  # a list or an array
        if isinstance(pair, str) or not sequence or len(pair) != 2:
            raise TypeError(f"{name}[{i}] must be a pair of ints; got {describe(pair)}")
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
        raise TypeError(f"{name} must be {what}; got {describe(value)}")
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


def torch_tensor(name: str, value: Any, *, integer: bool = False) -> Any:
    """``value`` after checking it is a dense ``torch.Tensor`` (of an integer dtype, or a
    floating one, finite)."""
    import torch  # only PyTorch callers reach here

    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor; got {describe(value)}")
    check_dense(name, value)
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
    check_bool(name, value)
    return value


def integral(value: Any) -> bool:
    """Whether ``value`` is an integer (Python or NumPy) and not a ``bool``."""
    return isinstance(value, Integral) and not isinstance(value, bool)
