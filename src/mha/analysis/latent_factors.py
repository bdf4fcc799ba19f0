"""A grouped-query layer's keys and values through a latent of rank ``Dc``: the SVD conversion.

A grouped-query layer caches ``2 H_kv Dh`` elements per position: ``Y W^K`` and ``Y W^V``.
Both are products of the same input with the ``(D, 2 H_kv Dh)`` matrix ``[W^K | W^V]``. Its
truncated SVD, ``U_r S_r V_r^T`` (``r = Dc``), is the closest rank-``Dc`` matrix in the
Frobenius and spectral norms (Eckart-Young), and it factors through a latent:

    ``W^DKV = U_r S_r``  ``(D, Dc)``,   ``[W^UK_g | W^UV_g] = V_r^T``  ``(Dc, 2 H_kv Dh)``.

So the layer caches ``c = y W^DKV`` (``Dc`` elements per position) and rebuilds every key and
value from it: a multi-head latent attention layer (:class:`mha.core.latent_params.MLAParams`)
whose key and value up-projections repeat each key/value head's columns for the query heads
of its group. With ``Dc = 2 H_kv Dh`` nothing is lost: grouped-query attention is latent
attention with a latent as wide as its keys and values. Below that, the squared singular
values left out (:func:`energy_kept`) measure what the weights lose; what the *model* loses
needs a model and text.

This is the joint low-rank step of published conversions (MHA2MLA: Ji et al., 2025;
TransMLA: Meng et al., 2025), without their other steps: no change to the rotary positions
(so the converted layer keeps its rotations on the rebuilt keys, and only the explicit route
computes it), no calibration data, no retraining.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from mha.analysis import _linalg
from mha.core._checks import arguments
from mha.core._checks.numpy_arrays import as_numpy
from mha.core.latent_params import MLAParams
from mha.core.params import MHAParams


def _check_finite(params: MHAParams, w: np.ndarray) -> None:
    if not np.isfinite(w).all():
        raise ValueError("params.w_qkv must be finite; got NaN or infinite values")


def _check_layer(params: Any) -> None:
    if not isinstance(params, MHAParams):
        raise TypeError(f"params must be MHAParams; got {type(params).__name__}")
    if params.b_qkv is not None or params.b_o is not None:
        raise ValueError(
            "params must have no biases: a latent layer has none (a key or value bias would "
            "be a constant the latent cannot carry); got a layer with biases"
        )


def key_value_weights(params: MHAParams) -> np.ndarray:
    """``[W^K | W^V]``, the keys' and values' weights side by side, as float64 NumPy.

    Args:
        params: a grouped-query (or multi-head) layer.

    Shape:
        Returns ``(D, 2 H_kv Dh)``.

    Returns:
        A new float64 array.

    Raises:
        TypeError: if ``params`` is not :class:`MHAParams`.
    """
    if not isinstance(params, MHAParams):
        raise TypeError(f"params must be MHAParams; got {type(params).__name__}")
    w = as_numpy("params.w_qkv", params.w_qkv)
    return np.array(w[:, params.d_model :], dtype=np.float64)  # (D, 2 H_kv Dh)


def energy_kept(params: MHAParams) -> np.ndarray:
    """The share of ``[W^K | W^V]``'s squared Frobenius norm that a latent of width ``r`` keeps.

    Args:
        params: a grouped-query (or multi-head) layer.

    Shape:
        Returns ``(min(D, 2 H_kv Dh) + 1,)``: entry ``r`` for a latent of width ``r``.

    Returns:
        ``sum(s[:r]**2) / sum(s**2)``, rising from 0 at ``r = 0`` to 1 at full rank.

    Raises:
        TypeError: if ``params`` is not :class:`MHAParams`.
        ValueError: if ``[W^K | W^V]`` holds NaN or infinity.
    """
    w = key_value_weights(params)
    _check_finite(params, w)
    s = _linalg.svdvals(w)  # descending
    return np.concatenate([[0.0], np.cumsum(s**2) / np.sum(s**2)])


def _svd(params: MHAParams) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The SVD of ``[W^K | W^V]``, float64: ``u (D, k)``, ``s (k,)``, ``vt (k, 2 H_kv Dh)``."""
    _check_layer(params)
    w = key_value_weights(params)
    _check_finite(params, w)
    return _linalg.svd(w)


def _factors(
    svd: tuple[np.ndarray, np.ndarray, np.ndarray], d_latent: int
) -> tuple[np.ndarray, np.ndarray]:
    """``W^DKV`` ``(D, Dc)`` and the latent's up-projection ``(Dc, 2 H_kv Dh)``, float64."""
    arguments.check_positive("d_latent", d_latent)
    u, s, vt = svd
    if d_latent > s.size:
        raise ValueError(
            f"d_latent must be at most min(D, 2 H_kv Dh) = {s.size}, the rank of "
            f"[W^K | W^V]; got d_latent={d_latent}"
        )
    return u[:, :d_latent] * s[:d_latent], vt[:d_latent]  # singular values in W^DKV


def _like(a: np.ndarray, ref: Any) -> Any:
    """A float64 array in ``ref``'s library, dtype and device."""
    if isinstance(ref, np.ndarray):
        return a.astype(ref.dtype)
    import torch

    return torch.as_tensor(a, device=ref.device).to(ref.dtype)


def low_rank_gqa(params: MHAParams, d_latent: int) -> MHAParams:
    """The grouped-query layer with ``[W^K | W^V]`` replaced by its best rank-``Dc`` product.

    It computes what :func:`latent_from_gqa`'s layer computes, with the keys and values
    rebuilt before the cache instead of after it: the same model, for measuring its loss.

    Args:
        params: a grouped-query (or multi-head) layer without biases.
        d_latent: Dc, at most ``min(D, 2 H_kv Dh)``.

    Returns:
        ``MHAParams`` of the input's library and dtype, with ``W^K`` and ``W^V`` of rank at
        most ``Dc`` together.

    Raises:
        ValueError: if the layer has biases or NaN or infinite weights, or ``d_latent`` is
            not in ``[1, min(D, 2 H_kv Dh)]``.
        TypeError: if ``params`` is not :class:`MHAParams` or ``d_latent`` is not an int.
    """
    d_latent = arguments.size("d_latent", d_latent)
    return low_rank_series(params, [d_latent])[d_latent]


def low_rank_series(params: MHAParams, widths: Sequence[int]) -> dict[int, MHAParams]:
    """:func:`low_rank_gqa` at several widths, from one SVD.

    Args:
        params: a grouped-query (or multi-head) layer without biases.
        widths: the values of Dc, each at most ``min(D, 2 H_kv Dh)``.

    Returns:
        ``{Dc: MHAParams}``.

    Raises:
        ValueError, TypeError: as :func:`low_rank_gqa`, and if ``widths`` is not a list or
            tuple of positive ints (``widths[i]`` named).
    """
    widths = arguments.size_list("widths", widths, nonempty=False)
    svd = _svd(params)
    out = {}
    for d_latent in widths:
        down, up = _factors(svd, d_latent)
        w_qkv = as_numpy("params.w_qkv", params.w_qkv).astype(np.float64)
        w_qkv[:, params.d_model :] = down @ up  # (D, Dc) @ (Dc, 2 H_kv Dh)
        out[d_latent] = MHAParams(
            _like(w_qkv, params.w_qkv),
            params.w_o,
            None,
            None,
            params.num_heads,
            params.num_kv_heads,
        )
    return out


def latent_from_gqa(params: MHAParams, d_latent: int) -> MLAParams:
    """A latent attention layer that caches ``Dc`` elements per position, from a GQA layer.

    ``W^DKV`` and the up-projections are the truncated SVD of ``[W^K | W^V]``; the query
    head ``h``'s key and value up-projections are those of its key/value head (each
    repeated for the ``G`` query heads of its group); ``W^UQ = W^Q`` and ``W^O`` are kept. The
    layer has no decoupled rotary key (``Dr = 0``): a model with rotary positions rotates
    the rebuilt keys, as it rotated its keys before.

    Args:
        params: a grouped-query (or multi-head) layer without biases.
        d_latent: Dc, at most ``min(D, 2 H_kv Dh)``.

    Returns:
        :class:`MLAParams` of the input's library and dtype.

    Raises:
        ValueError: if the layer has biases or NaN or infinite weights, or ``d_latent`` is
            not in ``[1, min(D, 2 H_kv Dh)]``.
        TypeError: if ``params`` is not :class:`MHAParams` or ``d_latent`` is not an int.
    """
    down, up = _factors(_svd(params), d_latent)
    H, H_kv, Dh = params.num_heads, params.num_kv_heads, params.d_head
    kv = H_kv * Dh

    def per_query_head(block: np.ndarray) -> np.ndarray:  # (Dc, H_kv Dh) -> (Dc, H Dh)
        heads = block.reshape(d_latent, H_kv, Dh)  # (Dc, H_kv, Dh)
        return np.repeat(heads, H // H_kv, axis=1).reshape(d_latent, H * Dh)

    ref = params.w_qkv
    return MLAParams(
        w_dkv=_like(down, ref),
        w_uk=_like(per_query_head(up[:, :kv]), ref),
        w_uv=_like(per_query_head(up[:, kv:]), ref),
        w_uq=params.w_q,
        w_o=params.w_o,
        num_heads=H,
    )
