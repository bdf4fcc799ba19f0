"""The checks of one call of :func:`mha.backends.latent.multi_head_latent_attention`.

The call reads as the other layers' calls do: :func:`check_mla` checks the arguments (a
latent cache's included) and measures the input and the weights, a route computes, and
:func:`check_mla_range` checks that the result did not overflow. A cache keeps the call's
new positions only when all of it succeeds (:func:`staged`): a refused call leaves it as it
was.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from typing import Any

import numpy as np

from mha.core._checks.arguments import check_bool, check_nonempty, check_rank, check_same_dtype
from mha.core._checks.arrays import ArrayKind
from mha.core._checks.layer import check_cache_finite, check_cache_fits, check_mha_mask
from mha.core._checks.overflow import check_range, float64_values, overflow_stage
from mha.core.kv_cache import LatentCache
from mha.core.latent_params import MLAParams
from mha.core.rotary import Rotary, rotate

ROUTES = ("explicit", "absorbed")
"""The two routes to a latent layer: rebuild every head's keys and values from the latents
(``"explicit"``), or fold the up-projections into the query and output sides and attend over
the latents themselves (``"absorbed"``)."""

ROTATION_GAIN = math.sqrt(2.0)
"""The most a rotation can grow an entry: ``|a cos t - b sin t| <= sqrt(2) max(|a|, |b|)``."""


def check_mla(
    x: Any,
    params: Any,
    mask: Any,
    route: Any,
    need_weights: Any,
    cache: Any,
    rotary: Any,
    kind: ArrayKind,
) -> dict[str, float]:
    """Check the arguments of ``multi_head_latent_attention``.

    With a latent ``cache``, ``x`` holds the new positions only: the mask must cover the
    cached positions and the new ones, ``S = cache.length + L``.

    Returns:
        The largest magnitude of ``x`` and of each weight, by name (``cache`` too, with a
        cache), for :func:`mla_bound`.
    """
    if not isinstance(params, MLAParams):
        raise TypeError(f"params must be MLAParams; got {type(params).__name__}")
    if route not in ROUTES:
        raise ValueError(f"route must be one of {ROUTES}; got route={route!r}")
    check_bool("need_weights", need_weights)
    if rotary is not None and not isinstance(rotary, Rotary):
        raise TypeError(f"rotary must be a Rotary or None; got {type(rotary).__name__}")
    if rotary is not None and params.d_rope == 0:
        if route == "absorbed":
            raise ValueError(
                "route='absorbed' needs decoupled rotary keys (d_rope > 0) to take rotary "
                "positions: rotated keys rebuilt from the latents put a rotation by each "
                "key's distance between the query and W^UK, so W^UK cannot be folded into "
                "the query. Use route='explicit', or a layer with d_rope > 0"
            )
        if params.d_head % 2:
            raise ValueError(
                "d_head must be even for rotary positions on the rebuilt keys; got "
                f"Dh={params.d_head}"
            )
    magnitudes = {"x": kind.check_array("x", x)}
    check_rank("x", x, 3, "(B, L, D)")
    if x.shape[-1] != params.d_model:
        raise ValueError(
            f"x width must equal d_model={params.d_model}; got x.shape={tuple(x.shape)}"
        )
    B, L = int(x.shape[0]), int(x.shape[1])
    check_nonempty("x", L, "L")
    named = {"x": x}
    for name, w in params.arrays().items():
        hint = f" (convert with params.{kind.convert}())"
        magnitudes[f"params.{name}"] = kind.check_array(f"params.{name}", w, hint)
        named[f"params.{name}"] = w
    check_same_dtype(named)
    S = L
    if cache is not None:
        S = check_latent_cache(cache, params, B, L, x.dtype, kind)
        magnitudes["cache"] = cache.max_abs
        named["cache"] = cache.latents  # its buffers must live with the input
    if mask is not None:
        check_mha_mask(mask, (B, params.num_heads, L, S), kind)
        named["mask"] = mask
    kind.check_devices(named)
    return magnitudes


def check_latent_cache(
    cache: Any, params: MLAParams, batch_size: int, new: int, dtype: Any, kind: ArrayKind
) -> int:
    """Check that a latent cache fits this call; return S, the positions after appending."""
    if not isinstance(cache, LatentCache):
        raise TypeError(
            f"cache must be a mha.core.kv_cache.LatentCache; got {type(cache).__name__}"
        )
    want = (batch_size, params.d_latent, params.d_rope)
    got = (cache.batch_size, cache.d_latent, cache.d_rope)
    sizes = ("d_latent and d_rope", "(B, Dc, Dr)")
    return check_cache_fits(cache, cache.latents, "input", dtype, kind, sizes, want, got, new)


def _widths(params: MLAParams) -> dict[str, int]:
    return {
        "D": params.d_model,
        "Dc": params.d_latent,
        "Dh": params.d_head,
        "Dr": params.d_rope,
        "Dq": params.d_model if params.d_query_latent is None else params.d_query_latent,
        "H": params.num_heads,
    }


def latent_bound(magnitudes: dict[str, float], params: MLAParams) -> float:
    """A bound on every latent and rotary key a call appends: ``D |x| |W|``, rotation included.

    A layer hands it to :meth:`mha.core.kv_cache.LatentCache.appending`, so that the cache
    bounds what it holds without measuring it.
    """
    m, n = magnitudes, _widths(params)
    rotary_key = ROTATION_GAIN * n["D"] * m["x"] * m.get("params.w_kr", 0.0)
    return max(n["D"] * m["x"] * m["params.w_dkv"], rotary_key)


def mla_bound(magnitudes: dict[str, float], params: MLAParams) -> float:
    """A bound on every intermediate of either route, from the magnitudes of its inputs.

    Each product of ``n`` terms is at most ``n`` times the largest input entry times the
    largest weight entry; a rotation grows an entry by at most ``sqrt(2)``; a score sums the
    content part over ``Dh`` (or, absorbed, ``Dc``) terms and the rotary part over ``Dr``; an
    attention output averages what it attends to. A cache's :attr:`max_abs` bounds the
    latents and rotary keys it held before the call.
    """
    m, n = magnitudes, _widths(params)
    x_q = m["x"] if params.w_dq is None else n["D"] * m["x"] * m["params.w_dq"]
    q = n["Dq"] * x_q * m["params.w_uq"] * ROTATION_GAIN  # the query, maybe rotated
    q_r = ROTATION_GAIN * n["Dq"] * x_q * m.get("params.w_qr", 0.0)
    latent = max(latent_bound(m, params), m.get("cache", 0.0))  # c and k_r
    key = ROTATION_GAIN * n["Dc"] * latent * max(m["params.w_uk"], m["params.w_uv"])
    q_latent = n["Dh"] * q * m["params.w_uk"]  # W^UK folded into the query
    scale = math.sqrt((n["Dc"] + n["Dr"]) / (n["Dh"] + n["Dr"]))
    scores = max(n["Dh"] * q * key, n["Dc"] * q_latent * latent) + n["Dr"] * q_r * latent
    head = max(key, n["Dc"] * latent * m["params.w_uv"])  # a head's output, either route
    out = n["H"] * n["Dh"] * head * m["params.w_o"]
    return max(x_q, q, q_r, latent, key, scale * q_latent, scores, head, out)


@contextlib.contextmanager
def staged(cache: Any, magnitudes: dict[str, float], params: MLAParams) -> Iterator[Any]:
    """The cache a route extends during one checked call: it keeps what the route appends
    only when the block (the route and :func:`check_mla_range`) ends without an exception.

    Yields ``None`` without a cache; with one, an object with the cache's :attr:`length`
    (the position of the first new token) and an ``extend(latent, rotary_key)`` that goes
    through :meth:`~mha.core.kv_cache.LatentCache.appending`, bounded by
    :func:`latent_bound`.
    """
    if cache is None:
        yield None
        return
    bound = latent_bound(magnitudes, params)  # beyond float64's range: measured instead
    with contextlib.ExitStack() as blocks:
        yield _Staged(cache, bound if math.isfinite(bound) else None, blocks)


class _Staged:
    """A latent cache as a route sees it inside :func:`staged`."""

    def __init__(self, cache: LatentCache, max_abs: float | None, blocks: contextlib.ExitStack):
        self._cache, self._max_abs, self._blocks = cache, max_abs, blocks
        self.length = cache.length

    def extend(self, latent: Any, rotary_key: Any) -> tuple[Any, Any]:
        """The cached latents and rotary keys, then these (appended if the call succeeds).

        Shape:
            latent ``(B, n, Dc)``, rotary_key ``(B, n, Dr)``; returns ``(B, S, Dc)`` and
            ``(B, S, Dr)``.
        """
        appending = self._cache.appending(latent, rotary_key, max_abs=self._max_abs)
        return self._blocks.enter_context(appending)


def check_mla_range(
    out: Any,
    magnitudes: dict[str, float],
    x: Any,
    params: MLAParams,
    mask: Any,
    cache: Any,
    rotary: Any,
    kind: ArrayKind,
) -> None:
    """Raise if the layer's output overflowed (no pass over any array while the bound holds).

    Called inside :func:`staged`, before the cache appends this call's positions. A
    non-finite output with a cache is checked for NaN or infinity in the cache first (its
    appends refuse them, so they were written into its views). Beyond the bound, the
    explicit route is redone in float64 to name the stage that overflowed.
    """
    if cache is not None and kind.checks_values() and not kind.all_finite(out):
        check_cache_finite(cache, kind, ("latents", "rotary_keys"), hint="")

    def locate() -> str | None:
        values = [float64_values(a, kind) for a in (x, *params.arrays().values())]
        cached = () if cache is None else (cache.latents, cache.rotary_keys)
        held = [float64_values(a, kind) for a in cached]
        keep = None if mask is None else float64_values(mask, kind)
        if any(v is None for v in (*values, *held)) or (mask is not None and keep is None):
            return None  # values not readable as they are (under torch.func's vmap, say)
        p64 = params.to_numpy(np.float64)
        x64 = values[0]
        pair = None
        if held:
            first, second = held
            if first is None or second is None:
                return None  # checked above; said again for the type checker
            pair = (first, second)
        if x64 is None:
            return None
        return mla_overflow(x64, p64, keep, pair, rotary, kind.largest(out.dtype))

    check_range(
        "multi_head_latent_attention output", mla_bound(magnitudes, params), out, kind, locate
    )


def mla_overflow(
    x: np.ndarray,
    params: MLAParams,
    mask: Any,
    cached: tuple[np.ndarray, np.ndarray] | None,
    rotary: Rotary | None,
    largest: float,
) -> str | None:
    """Which stage of the explicit route exceeds ``largest``, from float64 copies."""
    with np.errstate(over="ignore", invalid="ignore"):
        H = params.num_heads
        offset = 0 if cached is None else cached[0].shape[1]
        x_q = x if params.w_dq is None else x @ params.w_dq
        c = x @ params.w_dkv  # (B, L, Dc)
        k_r = x @ params.w_kr if params.d_rope else c[..., :0]  # (B, L, Dr)
        if rotary is not None and params.d_rope:
            k_r = rotate(k_r, rotary, offset=offset)
        if cached is not None:
            c = np.concatenate([cached[0], c], axis=1)  # (B, S, Dc)
            k_r = np.concatenate([cached[1], k_r], axis=1)

        def heads(y: np.ndarray) -> np.ndarray:  # (B, N, H W) -> (B, H, N, W)
            return y.reshape(*y.shape[:-1], H, -1).swapaxes(-2, -3)

        q, k, v = heads(x_q @ params.w_uq), heads(c @ params.w_uk), heads(c @ params.w_uv)
        scores = q @ k.swapaxes(-1, -2)  # (B, H, L, S)
        if params.d_rope:
            q_r = heads(x_q @ params.w_qr)
            if rotary is not None:
                q_r = rotate(q_r, rotary, offset=offset)
            scores = scores + q_r @ k_r[:, None].swapaxes(-1, -2)
        elif rotary is not None:
            scores = rotate(q, rotary, offset=offset) @ rotate(k, rotary).swapaxes(-1, -2)
        scores = scores / math.sqrt(params.d_head + params.d_rope)
        if mask is not None:
            scores = np.where(mask, scores, -np.inf)
        top = np.nanmax(np.where(np.isfinite(scores), np.abs(scores), -np.inf), initial=0.0)
        weights = np.exp(scores - np.max(scores, axis=-1, keepdims=True, initial=-np.inf))
        weights = np.nan_to_num(weights / weights.sum(axis=-1, keepdims=True))
        o = weights @ v  # (B, H, L, Dh)
        out = o.swapaxes(-2, -3).reshape(*x.shape[:-1], -1) @ params.w_o

        def biggest(a: np.ndarray) -> float:
            value = float(np.abs(a).max()) if a.size else 0.0
            return math.inf if math.isnan(value) else value

        return overflow_stage(
            [
                ("the latents and projections", lambda: max(biggest(c), biggest(x_q))),
                ("the rebuilt keys and values", lambda: max(biggest(k), biggest(v))),
                ("the scores", lambda: top),
                ("the weighted sums of the values", lambda: biggest(o)),
                ("the output projection", lambda: biggest(out)),
            ],
            largest,
        )
