"""Overflow: bounds on every stage from input magnitudes, and the float64 locator.

Results are checked without another pass over any array: the reduction that tests an input
for finiteness also gives its largest magnitude, and from those magnitudes a bound on every
stage of the computation follows (:func:`attention_bound`, :func:`mha_bound`,
:func:`layer_norm_bound`). While the bound stays below the dtype's largest finite value
nothing can overflow, and no check runs after the computation. Only beyond it (magnitudes of
about 1e16 in float32) is the computation redone in float64 (:func:`attention_overflow`,
:func:`mha_overflow`) to find a stage that overflowed, and :func:`check_range` raises naming
it: an overflow never returns a non-finite, or a finite but wrong, output silently.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import numpy as np

from mha.core._checks.arrays import ArrayKind

_F = TypeVar("_F", bound=Callable[..., Any])


def silence_numpy_warnings(fn: _F) -> _F:
    """``fn`` with NumPy's overflow and invalid-value warnings silenced inside it.

    It checks nothing itself. It is for functions that check the range of every result they
    compute (:func:`check_range`) and raise their own ``ValueError`` naming the stage that
    overflowed: NumPy's ``RuntimeWarning`` before that error would only repeat it, less
    precisely.
    """

    @functools.wraps(fn)
    def quiet(*args: Any, **kwargs: Any) -> Any:
        with np.errstate(over="ignore", invalid="ignore"):
            return fn(*args, **kwargs)

    return quiet  # type: ignore[return-value]


ROTATION_GROWTH = math.sqrt(2.0)
"""How much rotary positions can grow an entry: a turned pair ``(a c - b s, b c + a s)`` has
entries at most ``sqrt(a^2 + b^2) <= sqrt(2) max(|a|, |b|)`` (:mod:`mha.core.rotary`)."""

RANGE_MARGIN = 4.0
"""How far below the dtype's largest value a bound must stay (for rounding, and for the
bound's own arithmetic) for a computation to be taken as unable to overflow."""


def attention_bound(q_max: float, k_max: float, v_max: float, d_head: int) -> float:
    """A bound on every intermediate of ``softmax(Q K^T / sqrt(Dh)) V`` from input magnitudes.

    A score is a sum of ``Dh`` products, so ``|s| <= Dh |q|max |k|max / sqrt(Dh)``; the
    output averages values, so ``|o| <= |v|max``.
    """
    return max(math.sqrt(d_head) * q_max * k_max, v_max)


def key_value_bound(magnitudes: dict[str, float], d_model: int, rotated: bool = False) -> float:
    """A bound on every projected key and value, ``D max(|key|, |value|)max |W|max + |b|max``.

    ``magnitudes`` is as in :func:`mha_bound`. A layer hands it to
    :meth:`mha.core.kv_cache.KVCache.append`, so that the cache bounds what it holds without
    measuring it. Keys turned by rotary positions (``rotated``) can be larger by
    :data:`ROTATION_GROWTH`, and the bound is that much larger.
    """
    w, b = magnitudes["params.w_qkv"], magnitudes.get("params.b_qkv", 0.0)
    bound = d_model * max(magnitudes["key"], magnitudes["value"]) * w + b
    return bound * ROTATION_GROWTH if rotated else bound


def mha_bound(
    magnitudes: dict[str, float], d_model: int, num_heads: int, rotated: bool = False
) -> float:
    """A bound on every intermediate of multi-head attention from input magnitudes.

    ``magnitudes`` maps ``query``, ``key``, ``value`` and ``params.<name>`` to the largest
    ``|x|`` of each (absent biases count as 0). A projection sums ``D`` products, so
    ``|x W + b| <= D |x|max |W|max + |b|max``; then :func:`attention_bound`; then the output
    projection of the attended values, ``D |v|max |W_o|max + |b_o|max``. An optional
    ``cache`` entry (:attr:`mha.core.kv_cache.KVCache.max_abs`) bounds the keys and values
    attended from a key/value cache. Grouped-query attention shares key heads, which changes
    none of these bounds; rotary positions (``rotated``) grow the queries and keys by at most
    :data:`ROTATION_GROWTH`.
    """
    w, b = magnitudes["params.w_qkv"], magnitudes.get("params.b_qkv", 0.0)
    q, k, v = (d_model * magnitudes[name] * w + b for name in ("query", "key", "value"))
    if rotated:
        q, k = q * ROTATION_GROWTH, k * ROTATION_GROWTH
    cached = magnitudes.get("cache", 0.0)  # the keys and values already in a cache
    k, v = max(k, cached), max(v, cached)
    out = d_model * v * magnitudes["params.w_o"] + magnitudes.get("params.b_o", 0.0)
    return max(q, k, attention_bound(q, k, v, d_model // num_heads), out)


def overflow_stage(stages: Sequence[tuple[str, Callable[[], float]]], largest: float) -> str | None:
    """The first stage whose float64 magnitude exceeds ``largest``, described for a message.

    Args:
        stages: ``(what, magnitude)`` in the order the computation runs; ``magnitude()`` is
            the largest absolute value of that stage recomputed in float64.
        largest: the largest finite value of the dtype.

    Returns:
        ``"<what> reach <value> in float64"``, or ``None`` when every stage fits.
    """
    for what, magnitude in stages:
        value = magnitude()
        if not value <= largest:
            return f"{what} reach {value:.3g} in float64"
    return None


def check_range(
    name: str,
    bound: float,
    result: Any,
    kind: ArrayKind,
    locate: Callable[[], str | None],
) -> None:
    """Check that a computation from finite inputs did not overflow its dtype.

    While ``bound`` (from the inputs' magnitudes) stays :data:`RANGE_MARGIN` times below the
    dtype's largest finite value, nothing can overflow and nothing more is done. Beyond it,
    ``locate()`` redoes the computation in float64 and names the first stage that leaves the
    range (``None`` if none does, or if it cannot be redone); the result must then also be
    finite.

    Args:
        name: what the result is (``"multi_head_attention output"``).
        bound: a bound on every intermediate's magnitude.
        result: the result, of the computation's dtype.
        kind: the backend's arrays.
        locate: finds the stage that overflowed; called only beyond the bound.

    Raises:
        ValueError: if a stage overflowed or the result is not finite (never while ``kind``'s
            checks of values are off).
    """
    if not kind.checks_values():
        return
    largest = kind.largest(result.dtype)
    if bound * RANGE_MARGIN < largest:
        return
    where = locate()
    if where is None and kind.all_finite(result):
        return
    wider = ", or compute in float64" if largest < 1e300 else ""
    raise ValueError(
        f"{name} overflowed {result.dtype} although every input is finite: "
        f"{where or 'an intermediate result is not finite'}, beyond its largest finite value "
        f"{largest:.3g}. Scale the inputs or parameters down{wider}"
    )


def float64_values(x: Any, kind: ArrayKind) -> np.ndarray | None:
    """A float64 NumPy copy of ``x``'s values (a mask keeps its bool dtype), for the locators;
    ``None`` when its values cannot be read with its shape (see ``ArrayKind.values``)."""
    values = kind.values(x)
    if values is None or values.shape != tuple(x.shape):
        return None
    return values if values.dtype == np.bool_ else values.astype(np.float64)


def check_attention_range(
    name: str,
    out: Any,
    magnitudes: dict[str, float],
    query: Any,
    key: Any,
    value: Any,
    mask: Any,
    kind: ArrayKind,
) -> None:
    """Raise if scaled dot-product attention overflowed (a float64 pass only beyond its bound).

    ``magnitudes`` are those :func:`mha.core._checks.arrays.check_attention` returned.
    """

    def locate() -> str | None:
        q, k, v = (float64_values(a, kind) for a in (query, key, value))
        mask64 = None if mask is None else float64_values(mask, kind)
        if q is None or k is None or v is None or (mask64 is None) != (mask is None):
            return None  # values not readable as they are (under torch.func's vmap, say)
        return attention_overflow(q, k, v, mask64, kind.largest(out.dtype))

    m = magnitudes
    bound = attention_bound(m["query"], m["key"], m["value"], query.shape[-1])
    check_range(name, bound, out, kind, locate)


def check_layer_norm_range(spread: float, width: int, largest: float, dtype: Any) -> None:
    """Check that LayerNorm's variance cannot overflow: ``D * spread**2`` below ``largest``.

    ``spread`` is the largest ``max - min`` of a row of ``x``; every squared deviation from
    the row's mean, and their sum over the ``D`` entries, is at most ``D * spread**2``.
    Beyond that range PyTorch and NumPy return zeros (the variance overflows to infinity).
    """
    bound = width * (spread * spread)
    if not bound * RANGE_MARGIN < largest:
        raise ValueError(
            f"x must have rows whose variance fits {dtype}: D (max - min)^2 = {bound:.3g} "
            f"(D={width}, largest max - min {spread:.3g}) reaches its largest finite value "
            f"{largest:.3g}, so the variance would overflow. Scale x down or compute in float64"
        )


def layer_norm_bound(magnitudes: dict[str, float], width: int) -> tuple[float, float]:
    """Bounds on LayerNorm's variance stage and on its output, from input magnitudes.

    A deviation from the row mean is at most ``2 |x|max``, so every squared deviation and
    their sum over the ``D`` entries is at most ``D (2 |x|max)^2``; a normalised entry is at
    most ``sqrt(D)`` in size, so the output is at most ``sqrt(D) |weight|max + |bias|max``.
    """
    spread = 2.0 * magnitudes["x"]
    variance = width * (spread * spread)
    return variance, math.sqrt(width) * magnitudes["weight"] + magnitudes["bias"]


def check_layer_norm_variance(x: Any, magnitudes: dict[str, float], kind: ArrayKind) -> float:
    """Check that LayerNorm's variance of ``x`` cannot overflow; return a bound on its output.

    Only when :func:`layer_norm_bound` does not rule the overflow out is there a pass over the
    rows (:func:`check_layer_norm_range`); never while ``kind``'s checks of values are off.

    Shape:
        x ``(..., D)``.
    """
    variance, bound = layer_norm_bound(magnitudes, x.shape[-1])
    largest = kind.largest(x.dtype)
    if kind.checks_values() and variance * RANGE_MARGIN >= largest:
        rows = kind.values(x)  # under torch.func's vmap: every mapped slice's rows
        if rows is not None:
            spread = float((rows.max(axis=-1).astype(np.float64) - rows.min(axis=-1)).max())
            check_layer_norm_range(spread, x.shape[-1], largest, x.dtype)
    return bound


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


@silence_numpy_warnings
def attention_overflow(
    query: np.ndarray, key: np.ndarray, value: np.ndarray, mask: Any, largest: float
) -> str | None:
    """Which stage of scaled dot-product attention exceeds ``largest``, from float64 copies."""
    top, out = _attention64(query, key, value, mask)
    return overflow_stage(
        [
            ("the scores Q K^T / sqrt(Dh)", lambda: top),
            ("the weighted sums of the values", lambda: _max_abs(out)),
        ],
        largest,
    )


def _turned(x: np.ndarray, rotary: Any, offset: int) -> np.ndarray:
    """``x`` turned by rotary positions from ``offset`` on, in float64 (as
    :func:`mha.core.rotary.rotate` turns it, with the tables unrounded)."""
    cos, sin = rotary.tables(x.shape[-1], x.shape[-2], offset)  # 2 x (n, Dh)
    return x * cos + x[..., rotary.partners(x.shape[-1])] * sin


@silence_numpy_warnings
def mha_overflow(
    query: np.ndarray,
    key: np.ndarray,
    value: np.ndarray,
    params: Any,
    mask: Any,
    cached: tuple[np.ndarray, np.ndarray] | None = None,
    *,
    largest: float,
    rotary: Any = None,
) -> str | None:
    """Which stage of multi-head attention exceeds ``largest``, from float64 copies.

    ``params`` are float64 NumPy :class:`mha.MHAParams`; ``cached`` the float64 keys and
    values ``(B, H_kv, S0, Dh)`` a key/value cache held before this call, which the new
    positions' keys and values follow. With ``H_kv < H`` each key/value head is repeated
    for its group (only on this error path). With a :class:`mha.core.rotary.Rotary`, the
    queries and new keys are turned from position ``S0`` on, a stage of its own.
    """
    H, H_kv = params.num_heads, params.num_kv_heads

    def heads(x: np.ndarray, w: np.ndarray, b: Any, n: int) -> np.ndarray:
        y = x @ w + (0.0 if b is None else b)  # (B, N, n Dh)
        return y.reshape(*y.shape[:-1], n, -1).swapaxes(-2, -3)  # (B, n, N, Dh)

    q = heads(query, params.w_q, params.b_q, H)  # (B, H, L, Dh)
    k = heads(key, params.w_k, params.b_k, H_kv)  # (B, H_kv, S, Dh)
    v = heads(value, params.w_v, params.b_v, H_kv)
    projected = max(_max_abs(q), _max_abs(k), _max_abs(v))
    stages = [("the projections x W + b", lambda: projected)]
    if rotary is not None:
        start = 0 if cached is None else cached[0].shape[2]  # new positions follow the cached
        q, k = _turned(q, rotary, start), _turned(k, rotary, start)
        turned = max(_max_abs(q), _max_abs(k))
        stages.append(("the queries and keys turned by rotary positions", lambda: turned))
    if cached is not None:
        k = np.concatenate([cached[0], k], axis=2)  # (B, H_kv, S0 + S, Dh)
        v = np.concatenate([cached[1], v], axis=2)
    k, v = (np.repeat(t, H // H_kv, axis=1) for t in (k, v))  # (B, H, S, Dh)
    top, attended = _attention64(q, k, v, mask)  # (B, H, L, Dh)
    concat = attended.swapaxes(-2, -3).reshape(*query.shape)  # (B, H, L, Dh) -> (B, L, D)
    return overflow_stage(
        [
            *stages,
            ("the scores Q K^T / sqrt(Dh)", lambda: top),
            ("the weighted sums of the values", lambda: _max_abs(attended)),
            (
                "the output projection",
                lambda: _max_abs(concat @ params.w_o + (0.0 if params.b_o is None else params.b_o)),
            ),
        ],
        largest,
    )
