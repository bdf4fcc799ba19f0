"""Argument checks shared by every module, the NumPy and PyTorch backends first.

Every check raises ``ValueError`` (a shape or value is wrong) or ``TypeError`` (a kind or
dtype is wrong) with a message that names the argument, the rule and what it got. The
checks only read ``.shape``, ``.ndim`` and ``.dtype``, so they work on NumPy arrays and on
PyTorch tensors alike; each backend describes its arrays once, in an :class:`ArrayKind`
(the array type, its floating dtypes, its boolean dtype, how to find an array's largest
magnitude, which also tests it for finiteness, and where it lives), and the checks of a
whole call (:func:`check_softmax`, :func:`check_attention`, :func:`check_layer_norm`, and
``mha.backends._mha_checks.check_mha``) take it.

Options are checked as strictly as arrays: a flag must be a ``bool`` (:func:`check_bool`), a
count or size an ``int`` (a Python or NumPy integer, never a bool or float;
:func:`check_int`, :func:`check_positive`, :func:`check_at_least`), a positive number a finite
real number above 0 (:func:`check_positive_number`), a seed a non-negative int
(:func:`check_seed`) and a device a name PyTorch can allocate on (:func:`check_device`). The
same non-integer raises the same ``TypeError`` wherever it is passed.

The magnitudes these checks measure bound every stage of the computation; the bounds, and
the float64 search for a stage that overflowed, are in ``mha.core._overflow``. A backend may
let its caller switch off every check that reads values (``ArrayKind.reads_values``, set by
:func:`mha.backends.torch_backend.value_checks`): kinds, dtypes, shapes and devices are still
checked.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from numbers import Integral, Real
from typing import Any

from mha.core.masks import CAUSAL_ALIGNMENTS, AmbiguousMaskWarning

# The forms of multi_head_attention. mha.backends.np_backend computes all four;
# mha.backends.torch_backend computes the first three (its own FORMS) and refuses "tiled",
# which only NumPy computes tile by tile (mha.backends.tiled.attention).
FORMS = ("per_head", "fused", "packed", "tiled")
PARAM_ARRAYS = ("w_qkv", "w_o", "b_qkv", "b_o")


@dataclass(frozen=True)
class ArrayKind:
    """One backend's arrays: what the checks need to know about them.

    Args:
        type_name: how messages name the type (``"numpy.ndarray"``, ``"torch.Tensor"``).
        array_type: the type itself.
        floats: the floating dtypes the backend computes in.
        bool_dtype: the boolean dtype masks must have.
        max_abs: ``max_abs(x)``, the largest ``|x|`` as a float (0 for an empty array or
            one without values, such as a ``meta`` tensor; ``inf`` if ``x`` holds NaN or
            infinity).
        convert: the ``MHAParams`` method that makes parameters of this kind.
        largest: ``largest(dtype)``, the dtype's largest finite value.
        values: ``values(x)``, the values of ``x`` as a NumPy array (``None`` when it has
            none, as a ``meta`` tensor).
        check_kind: ``check_kind(name, x)`` raises ``TypeError`` for an array of the type
            that the backend still cannot compute with (a masked array, a sparse tensor).
        device_of: ``device_of(x)``, where ``x`` lives; ``None`` when there is one place.
        reads_values: ``reads_values()``, False while the backend's checks of values are
            switched off: no check then reads an array's values (finiteness, magnitudes,
            overflow), and :meth:`check_array` returns ``inf``, no bound. ``None``: always on.
    """

    type_name: str
    array_type: type
    floats: tuple[Any, ...]
    bool_dtype: Any
    max_abs: Callable[[Any], float]
    convert: str
    largest: Callable[[Any], float]
    values: Callable[[Any], Any]
    check_kind: Callable[[str, Any], None] | None = None
    device_of: Callable[[Any], Any] | None = None
    reads_values: Callable[[], bool] | None = None

    def checks_values(self) -> bool:
        """True unless the backend's checks of values are switched off (see ``reads_values``)."""
        return self.reads_values is None or self.reads_values()

    def all_finite(self, x: Any) -> bool:
        """True when ``x`` holds no NaN or infinity."""
        return math.isfinite(self.max_abs(x))

    def check_array(self, name: str, x: Any, hint: str = "") -> float:
        """Check that ``x`` is a finite floating array of this kind; return its largest ``|x|``.

        With the checks of values off, its kind and dtype only, and ``inf`` (no bound).
        """
        if not isinstance(x, self.array_type):
            raise TypeError(f"{name} must be a {self.type_name}; got {type(x).__name__}{hint}")
        if self.check_kind is not None:
            self.check_kind(name, x)
        check_float(name, x, self.floats)
        if not self.checks_values():
            return math.inf
        magnitude = self.max_abs(x)
        if not math.isfinite(magnitude):
            raise ValueError(f"{name} must be finite; got NaN or infinite values")
        return magnitude

    def check_mask(self, mask: Any, target: tuple[int, ...], layout: str, hint: str = "") -> None:
        """Check that ``mask`` is a boolean array of this kind broadcasting to ``target``."""
        if not isinstance(mask, self.array_type):
            raise TypeError(f"mask must be a {self.type_name} of bool; got {type(mask).__name__}")
        if self.check_kind is not None:
            self.check_kind("mask", mask)
        check_mask(mask, target, mask.dtype == self.bool_dtype, layout, hint)

    def check_devices(self, named: dict[str, Any]) -> None:
        """Check that every non-None array in ``named`` lives on one device."""
        if self.device_of is None:
            return
        first = None
        for name, x in named.items():
            if x is None:
                continue
            device = self.device_of(x)
            if first is None:
                first = (name, device)
            elif device != first[1]:
                raise TypeError(
                    f"{name} must be on the device of {first[0]} ({first[1]}); got {name} on "
                    f"{device} (inputs, parameters, mask and cache must share one device)"
                )


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


def is_finite_real(value: Real) -> bool:
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
    if not (is_finite_real(value) and value > 0):
        raise ValueError(f"{name} must be positive and finite; got {name}={value!r}")


def check_magnitude(name: str, value: Any) -> float:
    """Check that ``value`` is a magnitude: a real number (Python or NumPy), finite, ``>= 0``.

    Returns:
        ``value`` as a float.
    """
    if isinstance(value, bool) or not isinstance(value, Real):
        hint = f"; pass {name}.item()" if hasattr(value, "item") and hasattr(value, "shape") else ""
        raise TypeError(f"{name} must be a real number (int or float); got {describe(value)}{hint}")
    if not (is_finite_real(value) and value >= 0):
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
        parsed = torch.device(device)
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


def check_form(form: str, forms: tuple[str, ...] = FORMS) -> None:
    """Check that ``form`` names one of ``forms``, the MHA forms a backend computes."""
    if form not in forms:
        elsewhere = [f for f in FORMS if f not in forms]
        note = (
            f" (form={form!r} is computed by mha.backends.np_backend only)"
            if form in elsewhere
            else ""
        )
        raise ValueError(f"form must be one of {forms}; got form={form!r}{note}")


def check_align(align: Any) -> None:
    """A ``ValueError`` unless ``align`` is one of :data:`mha.core.masks.CAUSAL_ALIGNMENTS`."""
    if not isinstance(align, str) or align not in CAUSAL_ALIGNMENTS:
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


def check_mha_inputs(query: Any, key: Any, value: Any, d_model: int) -> tuple[int, int, int]:
    """Check the inputs of multi-head attention against the model width.

    Shape:
        query ``(B, L, D)``, key and value ``(B, S, D)``.

    Returns:
        ``(B, L, S)``.
    """
    check_rank("query", query, 3, "(B, L, D)")
    check_rank("key", key, 3, "(B, S, D)")
    check_rank("value", value, 3, "(B, S, D)")
    for name, x in (("query", query), ("key", key), ("value", value)):
        if x.shape[-1] != d_model:
            raise ValueError(
                f"{name} width must equal d_model={d_model}; got {name}.shape={tuple(x.shape)}"
            )
    B, L, _ = query.shape
    if key.shape[0] != B or value.shape[0] != B:
        raise ValueError(
            "query, key and value must share the batch size; got "
            f"{B}, {key.shape[0]}, {value.shape[0]}"
        )
    S = key.shape[1]
    if value.shape[1] != S:
        raise ValueError(
            f"key and value must have the same length; got key {S}, value {value.shape[1]}"
        )
    check_nonempty("query", L, "L")
    check_nonempty("key", S, "S")
    return B, L, S


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


def check_form_weights(form: str, need_weights: bool) -> None:
    """Check ``need_weights`` (a bool), and that the tiled form, which never forms weights,
    is not asked for them."""
    check_bool("need_weights", need_weights)
    if form == "tiled" and need_weights:
        raise ValueError(
            "form='tiled' never forms the (B, H, L, S) attention weights; pass need_weights=False"
        )


def check_block_size(name: str, value: Any) -> None:
    """Check that a block size (rows of a tile) is an int of at least one."""
    check_at_least(name, value, 1)


def check_softmax(scores: Any, mask: Any, kind: ArrayKind) -> None:
    """Check the arguments of a backend's ``softmax``."""
    kind.check_array("scores", scores)
    if scores.ndim < 1:
        raise ValueError(f"scores must have shape (..., S); got 0-D shape {tuple(scores.shape)}")
    if mask is not None:
        kind.check_mask(mask, tuple(scores.shape), "scores.shape")
        kind.check_devices({"scores": scores, "mask": mask})


def check_arrays(named: Sequence[tuple[str, Any]], kind: ArrayKind) -> dict[str, float]:
    """:meth:`ArrayKind.check_array` each array once (repeats share a result); their magnitudes."""
    done: dict[int, float] = {}
    out = {}
    for name, x in named:
        if id(x) not in done:
            done[id(x)] = kind.check_array(name, x)
        out[name] = done[id(x)]
    return out


def check_attention(
    query: Any, key: Any, value: Any, mask: Any, kind: ArrayKind
) -> dict[str, float]:
    """Check the arguments of a backend's ``scaled_dot_product_attention``.

    Returns:
        The largest magnitude of ``query``, ``key`` and ``value``, by name.
    """
    magnitudes = check_arrays((("query", query), ("key", key), ("value", value)), kind)
    check_same_dtype({"query": query, "key": key, "value": value})
    kind.check_devices({"query": query, "key": key, "value": value})
    L, S, _, _ = check_qkv(query, key, value)
    batch = broadcast_batch(query, key, value)
    if mask is not None:
        kind.check_mask(mask, (*batch, L, S), "(..., L, S)")
        kind.check_devices({"query": query, "mask": mask})
    return magnitudes


def _mha_mask_hint(mask: Any, B: int, H: int) -> str:
    """What a mask that does not broadcast to ``(B, H, L, S)`` was probably meant to be."""
    if mask.ndim == 2 and mask.shape[0] == B:
        return (
            ". A 2-D mask is read as (L, S), one row per query; for one row of keys per batch "
            "element (B, S) use key_padding_mask(lengths, S) or mask[:, None, None, :], "
            "shape (B, 1, 1, S)"
        )
    if mask.ndim == 3 and mask.shape[0] == B:
        return (
            ". A 3-D mask is read as (H, L, S), one per head; for one mask per batch element "
            "(B, L, S) pass mask[:, None], shape (B, 1, L, S)"
        )
    return ""


def looks_like_padding(rows: Any) -> bool:
    """Whether a 2-D boolean NumPy mask looks like a key-padding mask ``(B, S)``.

    Its rows are runs of True then False (right padding) or False then True (left padding),
    not all the same (then both readings agree), and not a causal staircase whose run grows
    by one key per row (which an ``(L, S)`` causal mask is).
    """
    right = bool((rows[:, 1:] <= rows[:, :-1]).all())
    left = bool((rows[:, 1:] >= rows[:, :-1]).all())
    lengths = rows.sum(axis=-1).tolist()
    if not (right or left) or len(set(lengths)) == 1:
        return False
    steps = {b - a for a, b in zip(lengths, lengths[1:], strict=False)}
    return not (right and steps == {1})


def check_mha_mask(mask: Any, target: tuple[int, int, int, int], kind: ArrayKind) -> None:
    """Check a mask of multi-head attention against ``(B, H, L, S)``, refusing readings that
    NumPy's broadcasting would resolve against what the caller almost surely meant.

    - A 3-D mask is read as ``(H, L, S)``. When ``B = H > 1`` and its leading size is that
      number, it could as well be ``(B, L, S)``: refused, with the two explicit spellings.
    - A 2-D mask is read as ``(L, S)``. When ``B = L > 1`` and it looks like a key-padding
      mask ``(B, S)`` (:func:`looks_like_padding`), an :class:`mha.core.masks.AmbiguousMaskWarning`
      points to ``key_padding_mask`` and to ``mask[None, None]``, which states the ``(L, S)``
      reading and silences the warning.
    """
    B, H, L, _ = target
    hint = _mha_mask_hint(mask, B, H) if isinstance(mask, kind.array_type) else ""
    kind.check_mask(mask, target, "(B, H, L, S)", hint)
    if mask.ndim == 3 and B == H > 1 and mask.shape[0] == B:
        raise ValueError(
            f"mask of shape {tuple(mask.shape)} is ambiguous: its leading size {B} equals both "
            f"B and H. Pass mask[:, None] (B, 1, L, S) for one mask per batch element, or "
            f"mask[None] (1, H, L, S) for one mask per head"
        )
    if mask.ndim == 2 and B == L > 1 and mask.shape[0] == L:
        rows = kind.values(mask)
        if rows is not None and rows.shape == tuple(mask.shape) and looks_like_padding(rows):
            warnings.warn(
                f"mask of shape {tuple(mask.shape)} is read as (L, S), one row per query, but "
                f"B = L = {B} and its rows look like key padding: if it is a key-padding mask "
                "(B, S), that reading is wrong. Build padding masks with "
                "key_padding_mask(lengths, S), shape (B, 1, 1, S); pass mask[None, None] to "
                "keep the (L, S) reading without this warning",
                AmbiguousMaskWarning,
                stacklevel=4,
            )


def check_layer_norm(x: Any, weight: Any, bias: Any, eps: Any, kind: ArrayKind) -> dict[str, float]:
    """Check the arguments of a backend's ``layer_norm``.

    Returns:
        The largest magnitude of ``x``, ``weight`` and ``bias`` (1 and 0 when absent).
    """
    magnitudes = {"x": kind.check_array("x", x), "weight": 1.0, "bias": 0.0}
    if x.ndim < 1:
        raise ValueError(f"x must have shape (..., D); got 0-D shape {tuple(x.shape)}")
    for name, p in (("weight", weight), ("bias", bias)):
        if p is not None:
            magnitudes[name] = kind.check_array(name, p)
    check_same_dtype({"x": x, "weight": weight, "bias": bias})
    kind.check_devices({"x": x, "weight": weight, "bias": bias})
    check_layer_norm_params(x.shape[-1], weight, bias, eps)
    return magnitudes
