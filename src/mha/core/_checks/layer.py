"""The checks of one call of a backend's ``multi_head_attention``, shared by both backends.

``multi_head_attention`` in :mod:`mha.backends.np_backend` and :mod:`mha.backends.torch_backend`
reads as three steps: :func:`check_mha` checks the arguments (a key/value cache's included) and
measures the inputs, a form computes, and :func:`check_mha_range` checks that the result did
not overflow. A cache keeps the call's new positions only when all three succeed
(:func:`staged`): a refused call leaves it as it was.
"""

from __future__ import annotations

import contextlib
import math
import warnings
from collections.abc import Iterator
from typing import Any, cast

import numpy as np

from mha.core._checks.arguments import (
    check_bool,
    check_causal_flag,
    check_nonempty,
    check_rank,
    check_same_dtype,
    describe,
    distinct_objects,
    torch_tensor,
)
from mha.core._checks.arrays import ArrayKind, check_arrays
from mha.core._checks.overflow import (
    check_range,
    float64_values,
    key_value_bound,
    mha_bound,
    mha_overflow,
)
from mha.core.kv_cache import KVCache
from mha.core.mask_rules import AmbiguousMaskWarning, causal_offset
from mha.core.params import MHAParams
from mha.core.rotary import Rotary

# The forms of multi_head_attention. mha.backends.np_backend computes all four;
# mha.backends.torch_backend computes the first three (its own FORMS) and refuses "tiled",
# which only NumPy computes tile by tile (mha.backends.tiled.attention).
FORMS = ("per_head", "fused", "packed", "tiled")
PARAM_ARRAYS = ("w_qkv", "w_o", "b_qkv", "b_o")


def check_mha(
    query: Any,
    key: Any,
    value: Any,
    params: Any,
    mask: Any,
    *,
    form: str,
    need_weights: Any,
    kind: ArrayKind,
    cache: Any = None,
    forms: tuple[str, ...] = FORMS,
    rotary: Any = None,
) -> dict[str, float]:
    """Check the arguments of a backend's ``multi_head_attention``.

    With a key/value ``cache``, the keys and values are the new positions only: the mask
    must cover the cached positions and the new ones, ``S = cache.length + key length``.
    ``forms`` are the forms the backend computes (all of ``FORMS`` unless it says less).
    ``rotary`` is a :class:`mha.core.rotary.Rotary` or ``None`` (:func:`check_rotary`).

    Returns:
        The largest magnitude of each input and parameter array, by name (for
        :func:`mha.core._checks.overflow.mha_bound`).
    """
    if not isinstance(params, MHAParams):
        raise TypeError(f"params must be MHAParams; got {type(params).__name__}")
    check_form(form, forms)
    check_rotary(rotary, params)
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
    check_form_weights(form, need_weights)
    return magnitudes


def causal_alignment(causal: Any, align: Any) -> str | None:
    """Check ``multi_head_attention``'s ``causal`` flag and ``align``; return what its forms take.

    Returns:
        ``None`` without ``causal``, else ``align``: where the causal mask's diagonal sits,
        ``"top_left"`` or ``"bottom_right"`` (:data:`mha.core.mask_rules.CAUSAL_ALIGNMENTS`).
    """
    check_causal_flag(causal, align)
    return align if causal else None


def check_rotary(rotary: Any, params: MHAParams) -> None:
    """Check that ``rotary`` is a :class:`mha.core.rotary.Rotary` or ``None``, and that the
    heads it turns have an even width (it turns pairs of coordinates)."""
    if rotary is None:
        return
    if not isinstance(rotary, Rotary):
        raise TypeError(f"rotary must be a mha.core.rotary.Rotary or None; got {describe(rotary)}")
    if params.d_head % 2:
        raise ValueError(
            "rotary positions turn pairs of coordinates, so d_head must be even; got "
            f"d_head={params.d_head} (d_model={params.d_model}, num_heads={params.num_heads})"
        )


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


def check_form_weights(form: str, need_weights: bool) -> None:
    """Check ``need_weights`` (a bool), and that the tiled form, which never forms weights,
    is not asked for them."""
    check_bool("need_weights", need_weights)
    if form == "tiled" and need_weights:
        raise ValueError(
            "form='tiled' never forms the (B, H, L, S) attention weights; pass need_weights=False"
        )


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
      mask ``(B, S)`` (:func:`looks_like_padding`), an
      :class:`mha.core.mask_rules.AmbiguousMaskWarning`
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
    want = (batch_size, params.num_kv_heads, params.d_head)
    got = (cache.batch_size, cache.num_kv_heads, cache.d_head)
    sizes = ("num_kv_heads and d_head", "(B, H_kv, Dh)")
    return check_cache_fits(cache, cache.keys, "inputs", dtype, kind, sizes, want, got, new)


def check_cache_fits(
    cache: Any,
    buffer: Any,
    source: str,
    dtype: Any,
    kind: ArrayKind,
    sizes: tuple[str, str],
    want: tuple[int, ...],
    got: tuple[int, ...],
    new: int,
) -> int:
    """The checks every cache kind shares; return S, the positions after appending ``new``.

    ``buffer`` (one of the cache's buffers) must be of the input's array kind and the cache
    of its dtype, ``got`` (the cache's sizes) must be ``want``, and ``new`` positions must fit.
    ``source`` names the input in messages (``"inputs"``) and ``sizes`` the layer's sizes
    and their symbols (``("num_kv_heads and d_head", "(B, H_kv, Dh)")``).
    """
    owner = source + ("'" if source.endswith("s") else "'s")  # inputs' or input's
    if not isinstance(buffer, kind.array_type):
        raise TypeError(
            f"cache must hold {kind.type_name} buffers like the {source}; got "
            f"{type(buffer).__name__}"
        )
    if cache.dtype != dtype:
        raise TypeError(
            f"cache must have the {owner} dtype {dtype}; got a cache of dtype {cache.dtype}"
        )
    if want != got:
        raise ValueError(
            f"cache must have the {owner} batch size and the layer's {sizes[0]}: "
            f"want {sizes[1]} = {want}; got {got}"
        )
    if cache.length + new > cache.capacity:
        raise ValueError(
            f"the cache holds at most capacity={cache.capacity} positions; it holds "
            f"{cache.length} and got {new} more"
        )
    return cache.length + new


def check_model_caches(caches: Any, num_layers: int) -> None:
    """Check a model's caches: a list or tuple of one distinct :class:`KVCache` per layer."""
    if (
        not isinstance(caches, list | tuple)
        or len(caches) != num_layers
        or not all(isinstance(c, KVCache) for c in caches)
    ):
        raise TypeError(
            f"caches must be a list of num_layers={num_layers} KVCache (see new_caches)"
        )
    distinct_objects("caches", caches)


def check_token_ids(tokens: Any, vocab_size: int) -> None:
    """Check that a model's token ids (an integer tensor) lie in ``[0, vocab_size)``."""
    if tokens.numel() and (tokens.min() < 0 or tokens.max() >= vocab_size):
        raise ValueError(
            f"tokens must lie in [0, vocab_size={vocab_size}); "
            f"got values in [{int(tokens.min())}, {int(tokens.max())}]"
        )


def check_gates(gates: Any, num_layers: int, num_heads: int) -> None:
    """Check a model's head gates: ``None``, or a finite floating tensor ``(num_layers, H)``."""
    if gates is None:
        return
    torch_tensor("gates", gates)  # floating and finite
    shape = (num_layers, num_heads)
    if tuple(gates.shape) != shape:
        raise ValueError(
            f"gates must be a tensor of shape (num_layers, H) = {shape}; got {tuple(gates.shape)}"
        )


def common_length(caches: Any) -> int:
    """The one length that a model's caches (one per layer) all hold."""
    lengths = {c.length for c in caches}
    if len(lengths) != 1:
        raise ValueError(f"caches must all hold the same positions; got {sorted(lengths)}")
    return lengths.pop()


def model_start(caches: Any, new: int, max_len: int) -> int:
    """The position of a model's first new token: the one length its checked ``caches`` hold
    (0 without caches), checked so that ``new`` more positions stay below ``max_len``."""
    start = 0 if caches is None else common_length(caches)
    if start + new > max_len:
        raise ValueError(
            f"positions must stay below max_len={max_len}; got {start} cached and {new} new"
        )
    return start


@contextlib.contextmanager
def staged(
    cache: Any, magnitudes: dict[str, float], d_model: int, rotary: Any = None
) -> Iterator[Any]:
    """The cache a form extends during one checked call: it keeps what the form appends only
    when the block (the form and :func:`check_mha_range`) ends without an exception.

    Yields ``None`` without a cache. With one, an object whose ``extend(key, value)`` returns
    the cached keys and values followed by ``key`` and ``value``, as
    :meth:`mha.core.kv_cache.KVCache.extend` does, but through
    :meth:`~mha.core.kv_cache.KVCache.appending`: the new positions, bounded by the inputs'
    magnitudes (:func:`~mha.core._checks.overflow.key_value_bound`, for keys turned by
    ``rotary`` too), are appended when the block ends, and a refused call leaves the cache as
    it was. Its ``length`` is the cache's length before the call, where the new positions
    start.
    """
    if cache is None:
        yield None
        return
    bound = key_value_bound(magnitudes, d_model, rotary is not None)  # beyond float64: measured
    with contextlib.ExitStack() as blocks:
        yield _Staged(cache, bound if math.isfinite(bound) else None, blocks)


class _Staged:
    """A cache as a form sees it inside :func:`staged`."""

    def __init__(self, cache: KVCache, max_abs: float | None, blocks: contextlib.ExitStack):
        self._cache, self._max_abs, self._blocks = cache, max_abs, blocks

    @property
    def length(self) -> int:
        """The positions the cache held before this call: the first new one's position."""
        return self._cache.length

    def extend(self, key: Any, value: Any) -> tuple[Any, Any]:
        """The cached keys and values, then ``key`` and ``value`` (appended if the call succeeds).

        Shape:
            key and value ``(B, H_kv, n, Dh)``; returns two ``(B, H_kv, S, Dh)``.
        """
        appending = self._cache.appending(key, value, max_abs=self._max_abs)
        return self._blocks.enter_context(appending)


def check_cache_finite(
    cache: Any,
    kind: ArrayKind,
    buffers: tuple[str, str] = ("keys", "values"),
    hint: str = ", or appended with a max_abs that did not bound them",
) -> None:
    """Check that a cache's two ``buffers`` hold no NaN or infinity (one pass over each).

    Its appends refuse them, so they can only have been written into its views; ``hint``
    names the other way in, where the cache kind has one (the KV cache's ``max_abs``).
    """
    for name in buffers:
        if not kind.all_finite(getattr(cache, name)):
            held = " and ".join(b.replace("_", " ") for b in buffers)
            raise ValueError(
                f"cache must hold finite {held}; got NaN or infinite values in cache.{name} "
                f"(appends refuse them: were they written into its views{hint}?)"
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


def check_mha_range(
    out: Any,
    magnitudes: dict[str, float],
    query: Any,
    key: Any,
    value: Any,
    params: MHAParams,
    mask: Any,
    *,
    cache: KVCache | None,
    kind: ArrayKind,
    causal: str | None = None,
    rotary: Rotary | None = None,
    name: str = "multi_head_attention output",
) -> None:
    """Raise if the layer's output overflowed (no pass over any array while the bound holds).

    Called inside :func:`staged`, before the cache appends this call's positions: it holds
    those cached before the call. A non-finite output is checked for NaN or infinity in the
    cache first. Beyond the bound, the layer is redone in float64 to name the stage that
    overflowed, unless an array has no values to read (see ``ArrayKind.values``); a causal
    layer (``causal``, the alignment of its diagonal) is redone under its causal mask; with
    ``rotary``, its queries and keys are turned from the cache's length on.
    """
    if cache is not None:
        magnitudes = {**magnitudes, "cache": cache.max_abs}
        check_cached_output(cache, out, kind)

    def locate() -> str | None:
        if cache is not None:
            check_cache_finite(cache, kind)
        cached = () if cache is None else (cache.keys, cache.values)
        arrays = [query, key, value, *cached, params.w_qkv, params.w_o]
        if any(
            float64_values(a, kind) is None for a in (*arrays, *([] if mask is None else [mask]))
        ):
            return None  # values not readable as they are (under torch.func's vmap, say)
        # each readable, as just checked: float64 NumPy copies
        q, k, v, *cached64 = (
            cast(np.ndarray, float64_values(a, kind)) for a in arrays[: 3 + len(cached)]
        )
        L, S = query.shape[1], key.shape[1] + (0 if cache is None else cache.length)
        return mha_overflow(
            q,
            k,
            v,
            params.map(lambda a: float64_values(a, kind)),
            _with_causal(None if mask is None else kind.values(mask), causal, L, S),
            (cached64[0], cached64[1]) if cached64 else None,
            largest=kind.largest(out.dtype),
            rotary=rotary,
        )

    check_range(
        name,
        mha_bound(magnitudes, params.d_model, params.num_heads, rotary is not None),
        out,
        kind,
        locate,
    )


def _with_causal(mask: Any, causal: str | None, q_len: int, kv_len: int) -> Any:
    """A NumPy ``mask`` and the causal mask aligned at ``causal`` together (``mask`` without)."""
    if causal is None:
        return mask
    keep = np.tri(q_len, kv_len, causal_offset(q_len, kv_len, causal), dtype=bool)  # (L, S)
    return keep if mask is None else mask & keep
