"""A small attention-only transformer, the model the training chapters train.

The model is the one of Elhage et al. (2021) and Olsson et al. (2022) at toy size: token
and learned positional embeddings, ``num_layers`` residual blocks ``x <- x + MHA(x)`` of
causal multi-head self-attention (this package's
:func:`mha.backends.torch_backend.multi_head_attention`), and a linear unembedding. No MLPs
and no LayerNorm, so everything the model computes goes through its attention heads.

Heads are switched on and off with *gates* ``xi`` (Michel et al., 2019): head ``h`` of a
layer contributes ``xi_h * head_h(x)`` before the output projection. Gating the heads'
outputs equals scaling the rows of ``W^O`` that read them,

    ``Concat(xi_1 head_1, ..., xi_H head_H) W^O = Concat(head_1, ..., head_H) (G W^O)``,

with ``G = diag(xi_1 1_Dh, ..., xi_H 1_Dh)``, so :func:`gated_params` implements the gate
by scaling ``W^O`` and the attention code is unchanged. With all gates 1 the model is the
ungated model exactly; ``xi_h = 0`` removes head ``h`` (ablation); ``dL / dxi_h`` at 1 is
the gradient in Michel et al.'s head importance. :mod:`mha.training.runs` trains the model
and :mod:`mha.training.ablation` takes its heads apart.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Sequence
from dataclasses import replace
from typing import cast

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from mha.backends import torch_backend, torch_checks
from mha.backends.module import MultiHeadAttention
from mha.core import packing
from mha.core._checks import arguments
from mha.core._checks import layer as layer_checks
from mha.core.kv_cache import KVCache, atomic
from mha.core.params import MHAParams, repeat_kv_heads


def _torch_params(params: MHAParams) -> MHAParams:
    """``params`` after checking they are ``MHAParams`` of torch tensors."""
    arguments.instance("params", params, MHAParams, "MHAParams")
    if not isinstance(params.w_qkv, torch.Tensor):
        raise TypeError(
            f"params must hold torch tensors; got {type(params.w_qkv).__name__} (convert with "
            "params.to_torch())"
        )
    return params


def _check_layer_input(x: torch.Tensor, params: MHAParams) -> None:
    """Check a layer's input ``x`` ``(B, L, D)`` and its torch parameters (finite, one dtype)."""
    _torch_params(params)
    for name in ("w_qkv", "w_o", "b_qkv", "b_o"):
        if getattr(params, name) is not None:
            arguments.torch_tensor(f"params.{name}", getattr(params, name))
    arguments.torch_tensor("x", x)
    if x.ndim != 3 or x.shape[-1] != params.d_model or x.shape[1] < 1:
        raise ValueError(
            f"x must have shape (B, L, D) with L >= 1 and D = {params.d_model}; got "
            f"{tuple(x.shape)}"
        )
    if x.dtype != params.w_qkv.dtype:
        raise TypeError(f"x must have the dtype of params ({params.w_qkv.dtype}); got {x.dtype}")


def gated_params(params: MHAParams, gate: torch.Tensor | None) -> MHAParams:
    """The parameters with head ``h``'s output multiplied by ``gate[h]`` before ``W^O``.

    Implemented as ``W^O`` with the ``Dh`` rows of head ``h`` scaled by ``gate[h]``; the
    biases are unchanged (``b_o`` belongs to no head).

    Args:
        params: one layer's parameters (torch tensors).
        gate: one gate per head, or ``None`` for ``params`` unchanged.

    Shape:
        gate ``(H,)``.

    Returns:
        New ``MHAParams`` sharing every tensor but ``w_o`` (or ``params`` itself).

    Raises:
        ValueError: if ``gate`` does not have shape ``(H,)`` or is not finite.
        TypeError: if ``params`` is not ``MHAParams`` of torch tensors, or ``gate`` is not a
            floating torch tensor.
    """
    _torch_params(params)
    if gate is None:
        return params
    arguments.torch_tensor("gate", gate)
    H = params.num_heads
    if tuple(gate.shape) != (H,):
        raise ValueError(f"gate must have shape (H,) = ({H},); got {tuple(gate.shape)}")
    rows = gate.to(params.w_o.dtype).repeat_interleave(params.d_head)  # (H,) -> (D,)
    return replace(params, w_o=params.w_o * rows[:, None])  # (D, D), row r scaled by rows[r]


def head_contributions(
    x: torch.Tensor, params: MHAParams, mask: torch.Tensor | None = None
) -> torch.Tensor:
    """Each head's term in the attention output: ``head_h(x) @ W^O[rows of h]``.

    The layer output is ``sum_h contributions[:, h] + b_o``.

    Args:
        x: the layer's input.
        params: the layer's parameters (torch tensors).
        mask: optional boolean keep-mask, broadcastable to ``(B, H, L, L)``.

    Shape:
        x ``(B, L, D)``. Returns ``(B, H, L, D)``.

    Returns:
        ``contributions[:, h]``, head ``h``'s share of the output.

    Raises:
        ValueError: if ``x`` is not ``(B, L, D)`` with the layer's D, or as
            :func:`mha.backends.torch_backend.multi_head_attention` (values, the mask).
        TypeError: if ``x`` is not a torch tensor or ``params`` not ``MHAParams`` of torch
            tensors, or as :func:`mha.backends.torch_backend.multi_head_attention`.
    """
    _check_layer_input(x, params)
    params = repeat_kv_heads(params)  # grouped-query heads: each head with its key/value head
    H = params.num_heads
    q, k, v = (x @ w for w in (params.w_q, params.w_k, params.w_v))  # 3 x (B, L, D)
    if params.b_qkv is not None:
        q, k, v = q + params.b_q, k + params.b_k, v + params.b_v
    q, k, v = (torch_backend.split_heads(t, H) for t in (q, k, v))  # 3 x (B, H, L, Dh)
    out, _ = torch_backend.scaled_dot_product_attention(q, k, v, mask)  # (B, H, L, Dh)
    w_o = packing.split_head_rows(params.w_o, H)  # (D, D) -> (H, Dh, D)
    return torch.einsum("bhld,hde->bhle", out, w_o)  # (B, H, L, D)


class AttentionOnlyTransformer(nn.Module):
    """A causal attention-only transformer: embeddings, residual MHA blocks, unembedding.

    ``x_0 = E[tokens] + P[:L]``, ``x_{l+1} = x_l + MHA_l(x_l)`` with a causal mask, and
    ``logits = x_n @ U``. Every parameter is drawn from ``seed``, so the same arguments
    give the same model.

    Args:
        vocab_size: number of token ids V.
        max_len: longest sequence the positional embedding covers.
        d_model: model width D.
        num_heads: heads per layer H; must divide D.
        num_layers: number of attention blocks.
        num_kv_heads: key/value heads per layer H_kv, dividing H (``None``: H, multi-head
            attention, and the draws of every earlier version of this class).
        seed: seed of every initial parameter.
        dtype: parameter dtype.

    Shape:
        tokens ``(B, L)`` int64 with ``L <= max_len``; gates ``(num_layers, H)``.
        Returns logits ``(B, L, V)`` and, if asked, a list of ``num_layers`` weights
        ``(B, H, L, L)``.

    Raises:
        ValueError: if a size is not positive, H does not divide D, H_kv does not divide H,
            ``seed`` is not in ``[0, 2**64)``, or the embeddings would pass what an array can
            hold.
        TypeError: if a size or ``seed`` is not an int (a Python or NumPy integer, not a
            bool), or ``dtype`` is not float64, float32 or bfloat16 (a torch dtype).
    """

    def __init__(
        self,
        vocab_size: int,
        max_len: int,
        d_model: int,
        num_heads: int,
        num_layers: int = 2,
        *,
        num_kv_heads: int | None = None,
        seed: int = 0,
        dtype: torch.dtype = torch.float32,
    ) -> None:
        super().__init__()
        sizes = arguments.sizes(vocab_size=vocab_size, max_len=max_len, num_layers=num_layers)
        vocab_size, max_len, num_layers = sizes.values()
        d_model, num_heads, _ = arguments.layer_sizes(d_model, num_heads, num_kv_heads)
        num_kv_heads = None if num_kv_heads is None else int(num_kv_heads)
        seed = arguments.seed("seed", seed)
        if dtype not in torch_checks.FLOATS:
            names = ", ".join(str(d) for d in torch_checks.FLOATS)
            raise TypeError(f"dtype must be one of {names}; got {arguments.describe(dtype)}")
        arguments.check_elements("vocab_size", (2 * vocab_size + max_len) * d_model, 8)
        gen = torch.Generator().manual_seed(seed)
        scale = 1.0 / math.sqrt(d_model)

        def draw(*shape: int) -> nn.Parameter:
            return nn.Parameter(torch.randn(*shape, generator=gen, dtype=torch.float64).to(dtype))

        self.embed = draw(vocab_size, d_model)  # (V, D)
        self.pos = draw(max_len, d_model)  # (max_len, D)
        self.unembed = draw(d_model, vocab_size)  # (D, V)
        with torch.no_grad():
            for p in (self.embed, self.pos, self.unembed):
                p.mul_(scale)
        self.layers = nn.ModuleList(
            MultiHeadAttention(
                d_model,
                num_heads,
                num_kv_heads=num_kv_heads,
                seed=layer_seed(seed, layer),
                dtype=dtype,
            )
            for layer in range(num_layers)
        )

    @property
    def num_layers(self) -> int:
        """Number of attention blocks."""
        return len(self.layers)

    @property
    def num_heads(self) -> int:
        """Heads per layer H."""
        return self._first_layer.num_heads

    @property
    def num_kv_heads(self) -> int:
        """Key/value heads per layer H_kv."""
        return self._first_layer.num_kv_heads

    @property
    def _first_layer(self) -> MultiHeadAttention:
        """The first attention layer (every layer has its sizes)."""
        return cast(MultiHeadAttention, self.layers[0])

    @property
    def vocab_size(self) -> int:
        """Number of token ids V."""
        return self.embed.shape[0]

    @property
    def max_len(self) -> int:
        """The longest sequence the positional embedding covers."""
        return self.pos.shape[0]

    def new_caches(self, batch_size: int, capacity: int | None = None) -> list[KVCache]:
        """One empty :class:`mha.core.kv_cache.KVCache` per layer, for :meth:`forward`'s ``caches``.

        Args:
            batch_size: B, the sequences decoded together.
            capacity: positions each cache can hold (default: ``max_len``).

        Returns:
            ``num_layers`` caches of the model's dtype, ``H_kv`` heads of width ``Dh``.

        Raises:
            ValueError: if a size is not positive.
            TypeError: if a size is not an int (a Python or NumPy integer, not a bool).
        """
        batch_size = arguments.size("batch_size", batch_size)
        capacity = self.max_len if capacity is None else arguments.size("capacity", capacity)
        layer = self._first_layer
        return [
            KVCache(batch_size, layer.num_kv_heads, layer.d_head, capacity, dtype=self.embed.dtype)
            for _ in self.layers
        ]

    def _check(self, tokens: torch.Tensor, gates: torch.Tensor | None) -> torch.Tensor:
        """Check ``tokens`` and ``gates``; return the tokens as int64."""
        if not isinstance(tokens, torch.Tensor):
            raise TypeError(
                f"tokens must be a torch.Tensor of token ids; got {arguments.describe(tokens)}"
            )
        arguments.torch_tensor("tokens", tokens, integer=True)
        tokens = tokens.long()
        if tokens.ndim != 2 or not 1 <= tokens.shape[1] <= self.pos.shape[0]:
            raise ValueError(
                f"tokens must have shape (B, L) with 1 <= L <= max_len={self.pos.shape[0]}; "
                f"got {tuple(tokens.shape)}"
            )
        layer_checks.check_token_ids(tokens, self.vocab_size)
        layer_checks.check_gates(gates, self.num_layers, self.num_heads)
        return tokens

    def residual_stream(
        self, tokens: torch.Tensor, gates: torch.Tensor | None = None
    ) -> list[torch.Tensor]:
        """The residual stream before each layer and after the last.

        Args:
            tokens: token ids.
            gates: head gates ``(num_layers, H)``; ``None`` is the ungated model.

        Shape:
            tokens ``(B, L)``. Returns ``num_layers + 1`` tensors ``(B, L, D)``.

        Returns:
            The stream before layer 0, ..., and after the last layer.

        Raises:
            ValueError, TypeError: as :meth:`forward`.
        """
        return self._run(tokens, gates, need_weights=False)[1]

    def _run(self, tokens, gates, need_weights, caches=None):
        tokens = self._check(tokens, gates)
        arguments.check_bool("need_weights", need_weights)
        L = tokens.shape[1]
        start = 0 if caches is None else self._check_caches(caches, tokens)
        x = self.embed[tokens] + self.pos[start : start + L]  # (B, L) -> (B, L, D)
        # The new positions are the last L of start + L: bottom-right aligned (L = 1: all).
        mask = None if L == 1 else torch_backend.causal_mask(L, start + L, align="bottom_right")
        stream, weights = [x], []
        # With caches, every layer's append is undone when a later layer refuses its call.
        with contextlib.nullcontext() if caches is None else atomic(caches):
            for i, layer in enumerate(self.layers):
                layer = cast(MultiHeadAttention, layer)
                params = gated_params(layer.params(), None if gates is None else gates[i])
                cache = None if caches is None else caches[i]
                out, w = torch_backend.multi_head_attention(
                    x, x, x, params, mask, form="fused", need_weights=need_weights, cache=cache
                )  # (B, L, D), (B, H, L, start + L) or None
                x = x + out
                stream.append(x)
                weights.append(w)
        return x @ self.unembed, stream, weights  # (B, L, V)

    def _check_caches(self, caches: Sequence[KVCache], tokens: torch.Tensor) -> int:
        """Check one cache per layer, all of one length; return that length."""
        layer_checks.check_model_caches(caches, self.num_layers)
        batches = {c.batch_size for c in caches}
        if batches != {tokens.shape[0]}:
            raise ValueError(
                f"caches must hold the batch of tokens (B={tokens.shape[0]}); got caches of "
                f"batch {sorted(batches)}"
            )
        return layer_checks.model_start(caches, tokens.shape[1], self.max_len)

    def forward(
        self,
        tokens: torch.Tensor,
        gates: torch.Tensor | None = None,
        *,
        need_weights: bool = False,
        caches: Sequence[KVCache] | None = None,
    ) -> tuple[torch.Tensor, list[torch.Tensor] | None]:
        """Next-token logits, and each layer's attention weights if ``need_weights``.

        With ``caches`` (one per layer, from :meth:`new_caches`), ``tokens`` are the next
        positions after those cached: they are embedded at those positions, their keys and
        values are appended, and they attend to everything cached (incremental decoding).
        The call is atomic (:func:`mha.core.kv_cache.atomic`): when a layer refuses its call,
        every cache keeps its length, contents and ``max_abs``, the earlier layers' too.

        Args:
            tokens: token ids (any integer dtype; read as int64).
            gates: head gates, a floating tensor; ``None`` is the ungated model (equal to
                all ones).
            need_weights: also return the weights of every layer.
            caches: one key/value cache per layer (a list or tuple), or ``None``.

        Shape:
            tokens ``(B, L)`` with ``L <= max_len``; gates ``(num_layers, H)``. Returns logits
            ``(B, L, V)`` and, if asked, ``num_layers`` weights ``(B, H, L, L)``.

        Returns:
            ``(logits, weights)``; ``weights`` is ``None`` unless ``need_weights``.

        Raises:
            ValueError: if ``tokens`` has the wrong shape or ids outside ``[0, V)``,
                ``gates`` the wrong shape or NaN or infinity, the caches hold different
                numbers of positions, would pass ``max_len`` or hold one cache twice
                (``[cache] * num_layers``); and the errors of
                :func:`mha.backends.torch_backend.multi_head_attention` (a cache that does
                not fit a layer, is full, or holds NaN, an overflow).
            TypeError: if ``tokens`` is not an integer tensor, ``gates`` not a floating
                tensor, ``need_weights`` not a bool, or ``caches`` not one
                :class:`~mha.core.kv_cache.KVCache` per layer; and the errors of
                :func:`mha.backends.torch_backend.multi_head_attention`.
        """
        logits, _, weights = self._run(tokens, gates, need_weights, caches)
        return logits, (weights if need_weights else None)


def layer_seed(seed: int, layer: int) -> int:
    """The seed of layer ``layer``'s parameters in a model seeded with ``seed``.

    Args:
        seed: the model's seed.
        layer: the layer's index.

    Returns:
        A seed drawn from ``numpy.random.SeedSequence([seed, layer])``.

    Raises:
        ValueError: if ``seed`` or ``layer`` is negative.
        TypeError: if ``seed`` or ``layer`` is not an int (a Python or NumPy integer, not a
            bool).
    """
    seed = arguments.size("seed", seed, 0, None)
    layer = arguments.size("layer", layer, 0, None)
    return int(np.random.SeedSequence([seed, layer]).generate_state(1)[0])


def next_token_loss(
    logits: torch.Tensor, tokens: torch.Tensor, where: torch.Tensor | None = None
) -> torch.Tensor:
    """Mean cross-entropy of predicting ``tokens[:, i + 1]`` from position ``i``.

    Args:
        logits: the model's output, a floating tensor.
        tokens: the input token ids, an integer tensor with ids in ``[0, V)``.
        where: a boolean tensor, True at the query positions ``i`` that count (the last
            position never does, having no next token); ``None`` counts all. A 0/1
            integer tensor is refused: indexing with it would pick positions 0 and 1.

    Shape:
        logits ``(B, L, V)``, tokens and where ``(B, L)``. Returns a scalar.

    Returns:
        The mean loss, a scalar tensor (differentiable).

    Raises:
        ValueError: if the shapes do not match, an id is outside ``[0, V)``, no position
            counts (``L = 1``, ``B = 0``, or ``where`` selects none before the last),
            ``logits`` holds NaN or ``+inf``, or a counted target's logit is ``-inf``.
        TypeError: if ``logits`` is not a floating tensor, ``tokens`` not an integer tensor,
            or ``where`` not a boolean tensor.
    """
    for name, x in (("logits", logits), ("tokens", tokens)):
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor; got {arguments.describe(x)}")
    if not isinstance(logits, torch.Tensor) or not logits.dtype.is_floating_point:
        got = logits.dtype if isinstance(logits, torch.Tensor) else arguments.describe(logits)
        raise TypeError(f"logits must be a floating torch.Tensor; got {got}")
    if logits.numel() and bool((torch.isnan(logits) | (logits == math.inf)).any()):
        raise ValueError("logits must not hold NaN or +inf (-inf, a probability of 0, may)")
    arguments.torch_tensor("tokens", tokens, integer=True)
    if logits.ndim != 3:
        raise ValueError(f"logits must have shape (B, L, V); got {tuple(logits.shape)}")
    B, L, V = logits.shape
    if tuple(tokens.shape) != (B, L):
        raise ValueError(
            f"tokens must have the shape (B, L) = ({B}, {L}) of logits (B, L, V); got "
            f"{tuple(tokens.shape)}"
        )
    if tokens.numel() and (int(tokens.min()) < 0 or int(tokens.max()) >= V):
        raise ValueError(
            f"tokens must lie in [0, V={V}); got values in [{int(tokens.min())}, "
            f"{int(tokens.max())}]"
        )
    keep = torch.ones(B, max(L - 1, 0), dtype=torch.bool)  # (B, L - 1)
    if where is not None:
        if not isinstance(where, torch.Tensor) or where.dtype != torch.bool:
            got = where.dtype if isinstance(where, torch.Tensor) else arguments.describe(where)
            raise TypeError(f"where must be a boolean torch.Tensor (True = counts); got {got}")
        if tuple(where.shape) != (B, L):
            raise ValueError(f"where must have shape (B, L) = ({B}, {L}); got {tuple(where.shape)}")
        keep = where[:, :-1]
    if not keep.any():
        raise ValueError(
            "where must select at least one query position before the last; got none (of "
            f"B={B} sequences of L={L} positions)"
            if where is not None
            else f"logits must hold a position with a next token (B >= 1, L >= 2); got B={B}, L={L}"
        )
    losses = F.cross_entropy(
        logits[:, :-1].reshape(-1, V), tokens[:, 1:].reshape(-1).long(), reduction="none"
    ).view(B, L - 1)  # (B, L - 1)
    loss = losses[keep.to(losses.device)].mean()
    if bool(torch.isinf(loss.detach())):
        raise ValueError("logits must give every counted target a finite logit; got -inf for one")
    return loss
