"""Argument checks and glue shared by the NumPy and PyTorch backends.

Every check raises ``ValueError`` (a shape or value is wrong) or ``TypeError`` (a kind or
dtype is wrong) with a message that names the argument, the rule and what it got. The
checks only read ``.shape``, ``.ndim`` and ``.dtype``, so they work on NumPy arrays and on
PyTorch tensors alike; each backend describes its arrays once, in an :class:`ArrayKind`
(the array type, its floating dtypes, its boolean dtype and how to test for finiteness),
and the checks of a whole call (:func:`check_softmax`, :func:`check_attention`,
:func:`check_mha`, :func:`check_layer_norm`) take it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from numbers import Integral, Real
from typing import Any

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
        all_finite: ``all_finite(x)`` is True when ``x`` holds no NaN or infinity.
        convert: the ``MHAParams`` method that makes parameters of this kind.
    """

    type_name: str
    array_type: type
    floats: tuple[Any, ...]
    bool_dtype: Any
    all_finite: Callable[[Any], bool]
    convert: str

    def check_array(self, name: str, x: Any, hint: str = "") -> None:
        """Check that ``x`` is a finite floating array of this kind."""
        if not isinstance(x, self.array_type):
            raise TypeError(f"{name} must be a {self.type_name}; got {type(x).__name__}{hint}")
        check_float(name, x, self.floats)
        check_finite(name, x, self.all_finite)

    def check_mask(self, mask: Any, target: tuple[int, ...], layout: str) -> None:
        """Check that ``mask`` is a boolean array of this kind broadcasting to ``target``."""
        if not isinstance(mask, self.array_type):
            raise TypeError(f"mask must be a {self.type_name} of bool; got {type(mask).__name__}")
        check_mask(mask, target, mask.dtype == self.bool_dtype, layout)


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


def check_int(name: str, value: Any) -> None:
    """Check that ``value`` is an integer (a Python or NumPy int, not a bool or float)."""
    if isinstance(value, bool) or not isinstance(value, Integral):
        raise TypeError(f"{name} must be an int; got {type(value).__name__} {value!r}")


def check_positive(name: str, value: Any) -> None:
    """Check that ``value`` is a positive integer (a count or a size)."""
    check_int(name, value)
    if value <= 0:
        raise ValueError(f"{name} must be positive; got {name}={value}")


def check_length(name: str, value: Any, symbol: str) -> None:
    """Check that a requested sequence length is an int of at least one."""
    check_int(name, value)
    check_nonempty(name, value, symbol)


def check_form(form: str) -> None:
    """Check that ``form`` names one of the MHA forms."""
    if form not in FORMS:
        raise ValueError(f"form must be one of {FORMS}; got form={form!r}")


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
        query ``(..., L, Dh)``, key ``(..., S, Dh)``, value ``(..., S, Dv)``.

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
    mask: Any, target: tuple[int, ...], is_bool: bool, layout: str = "(B, H, L, S)"
) -> None:
    """Check that ``mask`` is boolean and broadcasts to ``target`` (``(..., L, S)``).

    Broadcasting follows NumPy's rule: dimensions are aligned from the right and each
    mask dimension must be 1 or equal the target's.
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
        raise ValueError(f"mask must broadcast to {layout} = {target}; got shape {shape}")


def check_layer_norm_params(d_model: int, weight: Any, bias: Any, eps: Any) -> None:
    """Check LayerNorm's ``eps`` (a positive number) and ``weight``/``bias`` shapes ``(D,)``."""
    if isinstance(eps, bool) or not isinstance(eps, Real) or not eps > 0:
        raise ValueError(f"eps must be a positive number; got eps={eps!r}")
    for name, p in (("weight", weight), ("bias", bias)):
        if p is not None and tuple(p.shape) != (d_model,):
            raise ValueError(f"{name} must have shape (D,) = ({d_model},); got {tuple(p.shape)}")


def check_form_weights(form: str, need_weights: bool) -> None:
    """Check that weights are not requested from the tiled form, which never forms them."""
    if form == "tiled" and need_weights:
        raise ValueError(
            "form='tiled' never forms the (B, H, L, S) attention weights; pass need_weights=False"
        )


def check_block_size(name: str, value: Any) -> None:
    """Check that a block size (rows of a tile) is an int of at least one."""
    check_int(name, value)
    if value < 1:
        raise ValueError(f"{name} must be at least 1; got {name}={value}")


def head_slice(mask: Any, h: int) -> Any:
    """The part of a ``(..., H|1, L, S)``-broadcastable mask that applies to head ``h``."""
    if mask.ndim < 3:
        return mask  # (L, S) or (S,): the same for every head
    return mask[..., h if mask.shape[-3] > 1 else 0, :, :]  # (B|1, H|1, L, S) -> (B|1, L, S)


def check_softmax(scores: Any, mask: Any, kind: ArrayKind) -> None:
    """Check the arguments of a backend's ``softmax``."""
    kind.check_array("scores", scores)
    if scores.ndim < 1:
        raise ValueError(f"scores must have shape (..., S); got 0-D shape {tuple(scores.shape)}")
    if mask is not None:
        kind.check_mask(mask, tuple(scores.shape), "scores.shape")


def check_attention(query: Any, key: Any, value: Any, mask: Any, kind: ArrayKind) -> None:
    """Check the arguments of a backend's ``scaled_dot_product_attention``."""
    for name, x in (("query", query), ("key", key), ("value", value)):
        kind.check_array(name, x)
    check_same_dtype({"query": query, "key": key, "value": value})
    L, S, _, _ = check_qkv(query, key, value)
    batch = broadcast_batch(query, key, value)
    if mask is not None:
        kind.check_mask(mask, (*batch, L, S), "(..., L, S)")


def check_mha(
    query: Any,
    key: Any,
    value: Any,
    params: Any,
    mask: Any,
    form: str,
    kind: ArrayKind,
    cache: Any = None,
) -> None:
    """Check the arguments of a backend's ``multi_head_attention``.

    With a key/value ``cache``, the keys and values are the new positions only: the mask
    must cover the cached positions and the new ones, ``S = cache.length + key length``.
    """
    from mha.params import MHAParams  # here, not at the top: mha.params imports this module

    if not isinstance(params, MHAParams):
        raise TypeError(f"params must be MHAParams; got {type(params).__name__}")
    check_form(form)
    for name, x in distinct(("query", query), ("key", key), ("value", value)):
        kind.check_array(name, x)
    B, L, S = check_mha_inputs(query, key, value, params.d_model)
    named = {"query": query, "key": key, "value": value}
    for name in PARAM_ARRAYS:
        x = getattr(params, name)
        if x is not None:
            kind.check_array(f"params.{name}", x, f" (convert with params.{kind.convert}())")
            named[f"params.{name}"] = x
    check_same_dtype(named)
    if cache is not None:
        S = check_cache(cache, params, B, S, query.dtype, form, kind)
    if mask is not None:
        kind.check_mask(mask, (B, params.num_heads, L, S), "(B, H, L, S)")


def check_cache(
    cache: Any, params: Any, batch_size: int, new: int, dtype: Any, form: str, kind: ArrayKind
) -> int:
    """Check that a key/value cache fits this call; return S, the positions after appending."""
    from mha.kv_cache import KVCache  # here: mha.kv_cache imports this module

    if not isinstance(cache, KVCache):
        raise TypeError(f"cache must be a mha.kv_cache.KVCache; got {type(cache).__name__}")
    if form == "per_head":
        raise ValueError(
            "form='per_head' does not take a cache; use form='fused', 'packed' or 'tiled'"
        )
    if not isinstance(cache.keys, kind.array_type):
        raise TypeError(
            f"cache must hold {kind.type_name} buffers like the inputs; got "
            f"{type(cache.keys).__name__}"
        )
    want = (batch_size, params.num_kv_heads, params.d_head, dtype)
    got = (cache.batch_size, cache.num_kv_heads, cache.d_head, cache.dtype)
    if want != got:
        raise ValueError(
            "cache must have the inputs' batch size, the layer's num_kv_heads and d_head, "
            f"and the inputs' dtype: want (B, H_kv, Dh, dtype) = {want}; got {got}"
        )
    if cache.length + new > cache.capacity:
        raise ValueError(
            f"the cache holds at most capacity={cache.capacity} positions; it holds "
            f"{cache.length} and got {new} more"
        )
    return cache.length + new


def group_queries(q: Any, num_kv_heads: int) -> Any:
    """Query heads ``(B, H, L, Dh)`` as ``(B, H_kv, G, L, Dh)``: group ``g`` shares a key head.

    Consecutive query heads form a group (head ``h`` is in group ``h // G``), so the grouped
    product with keys ``(B, H_kv, 1, S, Dh)`` broadcasts over ``G`` and equals attention with
    each key head repeated ``G`` times (``repeat_interleave``), without the copies.
    """
    B, H, L, Dh = q.shape
    return q.reshape(B, num_kv_heads, H // num_kv_heads, L, Dh)  # (B, H_kv, G, L, Dh)


def group_mask(mask: Any, num_kv_heads: int) -> Any:
    """A ``(..., H|1, L, S)`` mask laid out like the grouped scores ``(..., H_kv, G, L, S)``."""
    if mask is None or mask.ndim < 3:
        return mask  # (L, S) or (S,): the same for every head
    *lead, H, L, S = mask.shape
    if H == 1:
        return mask.reshape(*lead, 1, 1, L, S)
    return mask.reshape(*lead, num_kv_heads, H // num_kv_heads, L, S)


def check_layer_norm(x: Any, weight: Any, bias: Any, eps: Any, kind: ArrayKind) -> None:
    """Check the arguments of a backend's ``layer_norm``."""
    kind.check_array("x", x)
    if x.ndim < 1:
        raise ValueError(f"x must have shape (..., D); got 0-D shape {tuple(x.shape)}")
    for name, p in (("weight", weight), ("bias", bias)):
        if p is not None:
            kind.check_array(name, p)
    check_same_dtype({"x": x, "weight": weight, "bias": bias})
    check_layer_norm_params(x.shape[-1], weight, bias, eps)
