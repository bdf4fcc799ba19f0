"""SmolLM2 converted to latent attention by the SVD, with no retraining: its cache and loss.

Every layer of SmolLM2-135M-Instruct (:mod:`mha.models.smollm2`) caches ``2 H_kv Dh = 384``
elements per token: three key heads and three value heads of width 64. Factoring each
layer's ``[W^K | W^V]`` through a latent of width ``Dc`` (:mod:`mha.analysis.latent_factors`)
gives a model that caches ``Dc`` per token and layer instead, and rebuilds the keys and
values from the latents. Its rotary positions stay where they were, on the rebuilt keys, so
it runs by the explicit route (:func:`latent_logits`), and computes what the same model with
``W^K`` and ``W^V`` replaced by their rank-``Dc`` product computes (:func:`converted`): the
model whose loss :func:`next_token_loss` measures.

:func:`pooled` is the other way to a smaller cache that needs no data: grouped-query
attention with fewer key/value heads, each the mean of those it replaces (Ainslie et al.,
2023), to compare at an equal cache.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F

from mha.analysis.latent_factors import latent_from_gqa, low_rank_series
from mha.backends import torch_backend
from mha.backends.latent import multi_head_latent_attention
from mha.core._checks import arguments
from mha.core._checks import layer as layer_checks
from mha.core.kv_cache import LatentCache, atomic
from mha.core.latent_params import MLAParams
from mha.core.params import mean_pool_kv_heads
from mha.models.smollm2 import SmolLM2, rms_norm


def _check_model(model: Any) -> None:
    if not isinstance(model, SmolLM2):
        raise TypeError(f"model must be a SmolLM2 (load_smollm2); got {type(model).__name__}")


def _latent_layers(model: SmolLM2, layers: Any) -> list[MLAParams]:
    """``layers`` as a list, after checking it holds one latent layer per model layer."""
    return _per_layer(model, "layers", layers, MLAParams, "latent_layers")


def _per_layer(model: SmolLM2, name: str, items: Any, kind: type, maker: str) -> list:
    """``items`` as a list, after checking it holds one ``kind`` per model layer."""
    items = arguments.items(name, items)
    if len(items) != model.num_layers:
        raise ValueError(
            f"{name} must hold one entry per layer ({model.num_layers}); got {len(items)}"
        )
    if not all(isinstance(item, kind) for item in items):
        raise TypeError(f"{name} must be {kind.__name__}, one per layer (see {maker})")
    return items


def _with_attention(model: SmolLM2, attention: list[Any]) -> SmolLM2:
    """The model with each layer's attention parameters replaced (every other tensor shared)."""
    layers = [
        dataclasses.replace(layer, attn=attn)
        for layer, attn in zip(model.layers, attention, strict=True)
    ]
    return SmolLM2(model.metadata, model.tokenizer, model.embed, layers, model.final_norm)


def converted(model: SmolLM2, widths: Sequence[int]) -> dict[int, SmolLM2]:
    """The model whose every layer's ``[W^K | W^V]`` is its best rank-``Dc`` product, for
    each ``Dc`` of ``widths`` (one SVD per layer for all of them).

    Each computes what the latent layers of :func:`latent_layers` compute, through a
    key/value cache instead of a latent one: the same model, for its loss.

    Args:
        model: SmolLM2 as loaded.
        widths: the values of Dc, each at most ``2 H_kv Dh = 384`` (the model itself).

    Returns:
        ``{Dc: SmolLM2}``, each sharing every other tensor with ``model``.

    Raises:
        ValueError: if a width is not in ``[1, 384]``.
        TypeError: if ``model`` is not a SmolLM2 or a width is not an int.
    """
    _check_model(model)
    series = [low_rank_series(layer.attn, widths) for layer in model.layers]
    return {w: _with_attention(model, [layer[w] for layer in series]) for w in widths}


def pooled(model: SmolLM2, num_kv_heads: int) -> SmolLM2:
    """The model with fewer key/value heads, each the mean of those it replaces.

    Args:
        model: SmolLM2 as loaded.
        num_kv_heads: the new H_kv, dividing 3.

    Returns:
        A :class:`~mha.models.smollm2.SmolLM2` sharing every other tensor with ``model``.

    Raises:
        ValueError: if ``num_kv_heads`` does not divide the model's key/value heads.
        TypeError: if ``model`` is not a SmolLM2 or ``num_kv_heads`` is not an int.
    """
    _check_model(model)
    return _with_attention(
        model, [mean_pool_kv_heads(layer.attn, num_kv_heads) for layer in model.layers]
    )


def latent_layers(model: SmolLM2, d_latent: int) -> list[MLAParams]:
    """Each layer's attention as a latent layer caching ``Dc`` elements per token.

    Args:
        model: SmolLM2 as loaded.
        d_latent: Dc, at most 384.

    Returns:
        One :class:`~mha.core.latent_params.MLAParams` per layer (``Dr = 0``: the rotary
        positions turn the rebuilt keys).

    Raises:
        ValueError: if ``d_latent`` is not in ``[1, 384]``.
        TypeError: if ``model`` is not a SmolLM2 or ``d_latent`` is not an int.
    """
    _check_model(model)
    return [latent_from_gqa(layer.attn, d_latent) for layer in model.layers]


def new_latent_caches(
    model: SmolLM2, layers: Sequence[MLAParams], batch_size: int, capacity: int
) -> list[LatentCache]:
    """One empty latent cache per layer, for :func:`latent_logits`.

    Args:
        model: the model the layers came from.
        layers: its latent layers (:func:`latent_layers`).
        batch_size: the batch size, B.
        capacity: positions each cache can hold.

    Returns:
        ``num_layers`` caches of the model's dtype, ``Dc`` wide, no rotary keys.

    Raises:
        ValueError: if a size is not positive, or ``layers`` does not hold one entry per
            layer of the model.
        TypeError: if a size is not an int, ``model`` is not a SmolLM2, or ``layers`` is
            not a list or tuple of :class:`MLAParams`.
    """
    _check_model(model)
    layers = _latent_layers(model, layers)
    return [
        LatentCache(batch_size, p.d_latent, p.d_rope, capacity, dtype=model.dtype) for p in layers
    ]


def latent_logits(
    model: SmolLM2,
    layers: Sequence[MLAParams],
    tokens: torch.Tensor,
    caches: Sequence[LatentCache] | None = None,
) -> torch.Tensor:
    """Next-token logits of the model with latent attention layers, with or without caches.

    Each layer normalises its input (RMSNorm), attends by
    :func:`mha.backends.latent.multi_head_latent_attention` (the explicit route, with the
    model's rotary positions on the rebuilt keys), and runs its feed-forward block as
    :class:`~mha.models.smollm2.SmolLM2` does. With ``caches``, ``tokens`` follow the cached
    positions, and the call is atomic (:func:`mha.core.kv_cache.atomic`).

    Args:
        model: SmolLM2 as loaded (its embedding, norms and feed-forward blocks).
        layers: one latent layer per layer of the model (:func:`latent_layers`).
        tokens: token ids, int64.
        caches: one :class:`~mha.core.kv_cache.LatentCache` per layer, or ``None``.

    Shape:
        tokens ``(B, L)``; returns ``(B, L, V)``.

    Returns:
        The logits.

    Raises:
        ValueError: if ``tokens`` is not ``(B, L)`` with ``B, L >= 1``, the numbers of layers
            or caches differ from the model's, the caches hold different lengths, or a layer
            refuses its call (a cache that does not fit).
        TypeError: if ``model`` is not a SmolLM2, ``tokens`` is not an int64 tensor,
            ``layers`` or ``caches`` is not a list or tuple, a layer is not
            :class:`MLAParams`, or a cache is not a :class:`LatentCache`.
    """
    _check_model(model)
    if not isinstance(tokens, torch.Tensor) or tokens.dtype != torch.int64:
        raise TypeError(f"tokens must be an int64 torch.Tensor; got {arguments.describe(tokens)}")
    if tokens.ndim != 2 or tokens.shape[0] < 1 or tokens.shape[1] < 1:
        raise ValueError(
            f"tokens must have shape (B, L) with B >= 1 and L >= 1; got {tuple(tokens.shape)}"
        )
    layers = _latent_layers(model, layers)
    start = 0
    if caches is not None:
        caches = _per_layer(model, "caches", caches, LatentCache, "new_latent_caches")
        start = layer_checks.common_length(caches)
    L = tokens.shape[1]
    mask = None if L == 1 else torch_backend.causal_mask(L, start + L, align="bottom_right")
    x = model.embed[tokens]  # (B, L) -> (B, L, D)
    with torch.no_grad(), contextlib.nullcontext() if caches is None else atomic(list(caches)):
        for i, (layer, params) in enumerate(zip(model.layers, layers, strict=True)):
            n = rms_norm(x, layer.attn_norm, model.eps)
            out, _ = multi_head_latent_attention(
                n,
                params,
                mask,
                route="explicit",
                need_weights=False,
                cache=None if caches is None else caches[i],
                rotary=model.rotary,
            )
            x = x + out  # (B, L, D)
            n = rms_norm(x, layer.ffn_norm, model.eps)
            gate, up = (n @ layer.w_gate_up).chunk(2, dim=-1)  # 2 x (B, L, F): SwiGLU
            x = x + (F.silu(gate) * up) @ layer.w_down  # (B, L, D)
    return model.unembed(rms_norm(x, model.final_norm, model.eps))


def next_token_loss(model: SmolLM2, tokens: torch.Tensor) -> float:
    """The mean next-token loss on ``tokens``, in nats (cross-entropy, every position but the
    last predicting the next).

    Args:
        model: a SmolLM2 (as loaded, :func:`converted` or :func:`pooled`).
        tokens: token ids, int64, at least two per sequence.

    Shape:
        tokens ``(B, L)``.

    Returns:
        The loss.

    Raises:
        ValueError: if there is no sequence or one has fewer than two tokens, or as
            :meth:`mha.models.smollm2.SmolLM2.forward`.
        TypeError: if ``model`` is not a SmolLM2, or as its ``forward``.
    """
    _check_model(model)
    if isinstance(tokens, torch.Tensor) and (
        tokens.ndim != 2 or tokens.shape[0] < 1 or tokens.shape[1] < 2
    ):
        raise ValueError(
            f"tokens must have shape (B, L) with B >= 1 and L >= 2; got {tuple(tokens.shape)}"
        )
    with torch.no_grad():
        logits, _ = model.forward(tokens)  # (B, L, V)
        predicted = logits[:, :-1].reshape(-1, logits.shape[-1])  # (B (L - 1), V)
        return float(F.cross_entropy(predicted.double(), tokens[:, 1:].reshape(-1)))
