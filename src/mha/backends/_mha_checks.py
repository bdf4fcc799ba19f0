"""The argument checks of a backend's ``multi_head_attention``, the cache's included.

They need :class:`mha.core.params.MHAParams` and :class:`mha.core.kv_cache.KVCache`, so they
sit above :mod:`mha.core`, whose ``_validate`` checks the arrays alone.
"""

from __future__ import annotations

import contextlib
import math
from typing import Any

from mha.core._overflow import key_value_bound
from mha.core._validate import (
    FORMS,
    PARAM_ARRAYS,
    ArrayKind,
    check_arrays,
    check_form,
    check_mha_inputs,
    check_mha_mask,
    check_same_dtype,
)
from mha.core.kv_cache import KVCache
from mha.core.params import MHAParams


def check_mha(
    query: Any,
    key: Any,
    value: Any,
    params: Any,
    mask: Any,
    form: str,
    kind: ArrayKind,
    cache: Any = None,
    forms: tuple[str, ...] = FORMS,
) -> dict[str, float]:
    """Check the arguments of a backend's ``multi_head_attention``.

    With a key/value ``cache``, the keys and values are the new positions only: the mask
    must cover the cached positions and the new ones, ``S = cache.length + key length``.
    ``forms`` are the forms the backend computes (all of ``FORMS`` unless it says less).

    Returns:
        The largest magnitude of each input and parameter array, by name (for
        :func:`mha.core._overflow.mha_bound`).
    """
    if not isinstance(params, MHAParams):
        raise TypeError(f"params must be MHAParams; got {type(params).__name__}")
    check_form(form, forms)
    magnitudes = check_arrays((("query", query), ("key", key), ("value", value)), kind)
    B, L, S = check_mha_inputs(query, key, value, params.d_model)
    named = {"query": query, "key": key, "value": value}
    for name in PARAM_ARRAYS:
        x = getattr(params, name)
        if x is not None:
            hint = f" (convert with params.{kind.convert}())"
            magnitudes[f"params.{name}"] = kind.check_array(f"params.{name}", x, hint)
            named[f"params.{name}"] = x
    check_same_dtype(named)
    if cache is not None:
        S = check_cache(cache, params, B, S, query.dtype, form, kind, forms)
        named["cache"] = cache.keys  # its buffers must live with the inputs
    if mask is not None:
        check_mha_mask(mask, (B, params.num_heads, L, S), kind)
        named["mask"] = mask
    kind.check_devices(named)
    return magnitudes


def check_cache(
    cache: Any,
    params: Any,
    batch_size: int,
    new: int,
    dtype: Any,
    form: str,
    kind: ArrayKind,
    forms: tuple[str, ...] = FORMS,
) -> int:
    """Check that a key/value cache fits this call; return S, the positions after appending."""
    if not isinstance(cache, KVCache):
        raise TypeError(f"cache must be a mha.core.kv_cache.KVCache; got {type(cache).__name__}")
    if form == "per_head":
        names = [repr(f) for f in forms if f != "per_head"]
        others = f"{', '.join(names[:-1])} or {names[-1]}"
        raise ValueError(f"form='per_head' does not take a cache; use form={others}")
    if not isinstance(cache.keys, kind.array_type):
        raise TypeError(
            f"cache must hold {kind.type_name} buffers like the inputs; got "
            f"{type(cache.keys).__name__}"
        )
    if cache.dtype != dtype:
        raise TypeError(
            f"cache must have the inputs' dtype {dtype}; got a cache of dtype {cache.dtype}"
        )
    want = (batch_size, params.num_kv_heads, params.d_head)
    got = (cache.batch_size, cache.num_kv_heads, cache.d_head)
    if want != got:
        raise ValueError(
            "cache must have the inputs' batch size and the layer's num_kv_heads and d_head: "
            f"want (B, H_kv, Dh) = {want}; got {got}"
        )
    if cache.length + new > cache.capacity:
        raise ValueError(
            f"the cache holds at most capacity={cache.capacity} positions; it holds "
            f"{cache.length} and got {new} more"
        )
    return cache.length + new


def cached(cache: Any, key: Any, value: Any, magnitudes: dict[str, float], d_model: int) -> Any:
    """The keys and values a layer attends to, as a context manager.

    Without a cache, ``key`` and ``value`` themselves. With one, its positions followed by
    these, which :meth:`mha.core.kv_cache.KVCache.appending` appends only when the block (the
    attention, the output projection and the range checks) ends without an exception: a
    refused call leaves the cache as it was.

    Shape:
        key and value ``(B, H_kv, n, Dh)``; yields ``(B, H_kv, S, Dh)``, ``S`` the positions
        cached before the call plus ``n``.
    """
    if cache is None:
        return contextlib.nullcontext((key, value))
    bound = key_value_bound(magnitudes, d_model)  # beyond float64's range: measured instead
    return cache.appending(key, value, max_abs=bound if math.isfinite(bound) else None)


def check_cache_finite(cache: Any, kind: ArrayKind) -> None:
    """Check that a cache holds no NaN or infinity (one pass over its keys and values).

    Its appends refuse them, so they can only have been written into its views, or appended
    under a ``max_abs`` that was not a bound.
    """
    for name, x in (("keys", cache.keys), ("values", cache.values)):
        if not kind.all_finite(x):
            raise ValueError(
                f"cache must hold finite keys and values; got NaN or infinite values in "
                f"cache.{name} (appends refuse them: were they written into its views, or "
                "appended with a max_abs that did not bound them?)"
            )


def check_cached_output(cache: Any, out: Any, kind: ArrayKind) -> None:
    """With a cache, check that the output is finite, and name what in the cache made it not.

    A layer does not read the cached keys and values before attending to them (their bound,
    :attr:`mha.core.kv_cache.KVCache.max_abs`, says they cannot overflow); a non-finite output,
    one pass over ``(B, L, D)``, is then the sign that the cache holds NaN or infinity, or
    finite entries beyond that bound (written into its views, or appended under a
    ``max_abs`` that did not bound them). Either is named here; within the bound, the
    layer's range check names the stage that overflowed.
    """
    if cache is None or not kind.checks_values() or kind.all_finite(out):
        return
    check_cache_finite(cache, kind)
    held = max(kind.max_abs(cache.keys), kind.max_abs(cache.values))
    if held > cache.max_abs:
        raise ValueError(
            f"cache must hold keys and values within its max_abs={cache.max_abs:.3g}, the bound "
            f"a layer relies on; got entries up to {held:.3g} (written into its views, or "
            "appended with a max_abs that did not bound them?), and the output overflowed "
            f"{out.dtype}"
        )
