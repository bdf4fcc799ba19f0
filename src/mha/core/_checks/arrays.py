"""Checks of whole arrays, through each backend's description of its arrays (:class:`ArrayKind`).

A backend describes its arrays once, in an :class:`ArrayKind`: the array type, its floating
and boolean dtypes, how to find an array's largest magnitude (which also tests it for
finiteness), how to read its values, and where it lives. The checks of a whole call,
:func:`check_softmax`, :func:`check_attention` and :func:`check_layer_norm` here, and
:func:`mha.core._checks.layer.check_mha`, take it, so that both backends refuse the same
inputs with the same messages. The magnitudes they return bound every stage of the
computation (:mod:`mha.core._checks.overflow`).

A backend may let its caller switch off every check that reads values (``reads_values``,
:func:`mha.backends.torch_checks.value_checks`): kinds, dtypes, shapes and devices are still
checked.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from mha.core._checks.arguments import (
    broadcast_batch,
    check_float,
    check_layer_norm_params,
    check_mask,
    check_qkv,
    check_same_dtype,
)


@dataclass(frozen=True, kw_only=True)
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
            none, as a ``meta`` tensor or one in a graph being traced; inside
            ``torch.func.vmap``, those of every mapped slice).
        check_kind: ``check_kind(name, x)`` raises ``TypeError`` for an array of the type
            that the backend still cannot compute with (a masked array, a sparse tensor).
        device_of: ``device_of(x)``, where ``x`` lives; ``None`` when there is one place.
        reads_values: ``reads_values()``, False while the backend's checks of values are
            switched off: no check then reads an array's values (finiteness, magnitudes,
            overflow), and :meth:`check_array` returns ``inf``, no bound. ``None``: always on.
    """

    type_name: str
    array_type: type[Any]
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


def check_arrays(named: Sequence[tuple[str, Any]], kind: ArrayKind) -> dict[str, float]:
    """:meth:`ArrayKind.check_array` each array once (repeats share a result); their magnitudes."""
    done: dict[int, float] = {}
    out = {}
    for name, x in named:
        if id(x) not in done:
            done[id(x)] = kind.check_array(name, x)
        out[name] = done[id(x)]
    return out


def check_softmax(scores: Any, mask: Any, kind: ArrayKind) -> None:
    """Check the arguments of a backend's ``softmax``."""
    kind.check_array("scores", scores)
    if scores.ndim < 1:
        raise ValueError(f"scores must have shape (..., S); got 0-D shape {tuple(scores.shape)}")
    if mask is not None:
        kind.check_mask(mask, tuple(scores.shape), "scores.shape")
        kind.check_devices({"scores": scores, "mask": mask})


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
