"""Ablation and interpretation of a trained attention-only transformer's heads.

A head is switched off by its gate (:func:`mha.models.attention_only.gated_params`):
:func:`ablation_loss` is the loss with some heads off, :func:`head_importance` the gradient
of the loss with respect to the gates at 1 (Michel et al., 2019), and :func:`prune_curve`,
:func:`importance_order` and :func:`greedy_prune_order` prune heads in some order.
:func:`path_ablation` removes a head from only some of the paths that read it (the queries,
keys or values of later layers, or the logits), :func:`copying_scores` reads a head's OV
circuit, and :func:`with_kv_heads` turns a model into one with fewer key/value heads.
Like the training functions, they run on one CPU thread (:func:`mha.core._tools.one_thread`).
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import cast

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from mha.backends import torch_backend
from mha.backends.module import MultiHeadAttention
from mha.core import packing
from mha.core._checks import arguments, numpy_arrays
from mha.core._tools import one_thread
from mha.core.params import MHAParams, init_params, mean_pool_kv_heads, repeat_kv_heads
from mha.detectors import circuits
from mha.models.attention_only import (
    AttentionOnlyTransformer,
    head_contributions,
    layer_seed,
    next_token_loss,
)
from mha.training.runs import segment_losses, split_losses
from mha.training.tasks import RepeatedSegments


def _check_part(part: str) -> None:
    if not isinstance(part, str) or part not in ("all", "first", "repeat"):
        raise ValueError(f"part must be 'all', 'first' or 'repeat'; got part={part!r}")


def _check_model(model: AttentionOnlyTransformer) -> AttentionOnlyTransformer:
    return arguments.instance(
        "model", model, AttentionOnlyTransformer, "an AttentionOnlyTransformer"
    )


def _layers(model: AttentionOnlyTransformer) -> list[MultiHeadAttention]:
    """The model's attention layers, in order."""
    return [cast(MultiHeadAttention, layer) for layer in model.layers]


def _check_batches(name: str, batches: Sequence[RepeatedSegments]) -> list[RepeatedSegments]:
    out = arguments.items(name, batches)
    for i, batch in enumerate(out):
        arguments.instance(f"{name}[{i}]", batch, RepeatedSegments, "a RepeatedSegments batch")
    return out


def head_gates(
    num_layers: int, num_heads: int, off: Iterable[tuple[int, int]] = ()
) -> torch.Tensor:
    """Gates with every head on except the ``(layer, head)`` pairs in ``off``.

    Args:
        num_layers: number of layers.
        num_heads: heads per layer H.
        off: ``(layer, head)`` pairs whose gate is 0.

    Shape:
        Returns ``(num_layers, num_heads)`` float32 of ones and zeros.

    Returns:
        The gates, a float32 tensor.

    Raises:
        ValueError: if a size is not positive or a pair in ``off`` is outside the model.
        TypeError: if a size or an index is not an int (a Python or NumPy integer, not a
            bool), or ``off`` is not a list of pairs.
    """
    num_layers, num_heads = arguments.sizes(num_layers=num_layers, num_heads=num_heads).values()
    pairs = arguments.pairs("off", off)
    gates = torch.ones(num_layers, num_heads)
    for layer, head in pairs:
        if not (0 <= layer < num_layers and 0 <= head < num_heads):
            raise ValueError(
                f"off must hold (layer, head) with layer < {num_layers} and head < "
                f"{num_heads}; got ({layer}, {head})"
            )
        gates[layer, head] = 0.0
    return gates


def ablation_loss(
    model: AttentionOnlyTransformer,
    batch: RepeatedSegments,
    off: Iterable[tuple[int, int]] = (),
    part: str = "all",
) -> float:
    """The loss with the heads in ``off`` removed (gate 0).

    Args:
        model: the model.
        batch: the data.
        off: ``(layer, head)`` pairs to remove.
        part: ``"all"``, ``"first"`` or ``"repeat"`` (see :func:`mha.training.runs.segment_losses`).

    Returns:
        The mean next-token loss over ``part``, a ``float``.

    Raises:
        ValueError: if ``part`` is unknown or a pair is outside the model, or as
            :func:`mha.training.runs.segment_losses`.
        TypeError: if ``model`` or ``batch`` is of another kind, or as :func:`head_gates`.
    """
    _check_part(part)
    _check_model(model)
    gates = head_gates(model.num_layers, model.num_heads, off)
    return segment_losses(model, batch, gates)[part]


@one_thread()
def head_importance(
    model: AttentionOnlyTransformer,
    batches: Sequence[RepeatedSegments],
    normalize: bool = True,
    *,
    per_sequence: bool = True,
) -> np.ndarray:
    """Michel et al. (2019)'s head importance ``I_h = E_x |dL(x) / dxi_h|`` at ``xi = 1``.

    ``L(x)`` is the mean next-token loss of one sequence ``x``, and the expectation is the
    mean over every sequence of ``batches`` (their equation 2, with a sequence as the
    sample). With ``per_sequence=False`` the absolute value is taken of each batch's
    gradient instead (``|dL(batch) / dxi_h|``, averaged over batches), as implementations
    that accumulate ``|grad|`` batch by batch do; gradients of opposite sign then cancel
    inside a batch, so this is never larger than the per-sequence score. With
    ``normalize``, each layer's scores are divided by their l2 norm, as in the paper.

    The per-sequence gradients come from one backward pass per batch: each sequence gets
    its own gates, ``x <- x + sum_h xi[b, layer, h] head_contribution_h(x) + b_o`` (see
    :func:`mha.models.attention_only.head_contributions`), which at ``xi = 1`` is the model's
    forward pass.

    Args:
        model: the model.
        batches: the data; every sequence counts once.
        normalize: divide each layer's scores by their l2 norm.
        per_sequence: take the absolute value per sequence (the paper's definition) rather
            than per batch.

    Shape:
        Returns ``(num_layers, H)``, non-negative.

    Returns:
        ``I[layer, h]``, a float NumPy array.

    Raises:
        ValueError: if ``batches`` is empty, or as the model's forward.
        TypeError: if ``model`` or a batch is of another kind, ``batches`` is not a list,
            or ``normalize`` or ``per_sequence`` is not a bool.
    """
    _check_model(model)
    batches = _check_batches("batches", batches)
    arguments.check_bool("normalize", normalize)
    arguments.check_bool("per_sequence", per_sequence)
    if len(batches) == 0:
        raise ValueError("batches must hold at least one batch; got none")
    total = torch.zeros(model.num_layers, model.num_heads, dtype=torch.float64)
    count = 0
    for batch in batches:
        if per_sequence:
            grad = _per_sequence_gate_gradients(model, batch.tokens)  # (B, layers, H)
            total += grad.abs().double().sum(dim=0)
            count += grad.shape[0]
        else:
            gates = torch.ones(
                model.num_layers, model.num_heads, dtype=model.embed.dtype, requires_grad=True
            )  # in the model's dtype: a float32 gradient of a float64 model loses digits
            logits, _ = model(batch.tokens, gates)
            (grad,) = torch.autograd.grad(next_token_loss(logits, batch.tokens), gates)
            total += grad.abs().double()  # (layers, H)
            count += 1
    importance = (total / count).numpy()  # (layers, H)
    if normalize:
        norms = np.linalg.norm(importance, axis=1, keepdims=True)  # (layers, 1)
        importance = importance / np.where(norms > 0, norms, 1.0)
    return importance


def _per_sequence_gate_gradients(
    model: AttentionOnlyTransformer, tokens: torch.Tensor
) -> torch.Tensor:
    """``dL(x_b) / dxi[b, layer, h]`` at all gates 1, for every sequence ``b``: ``(B, layers, H)``.

    Sequence ``b``'s loss depends only on its own gates, so the gradient of the summed
    per-sequence losses with respect to per-sequence gates is each sequence's own gradient.
    """
    tokens = model._check(tokens, None)
    B, L = tokens.shape
    gates = torch.ones(B, model.num_layers, model.num_heads, dtype=model.embed.dtype)
    gates.requires_grad_(True)
    x = model.embed[tokens] + model.pos[:L]  # (B, L) -> (B, L, D)
    mask = torch_backend.causal_mask(L)  # (L, L)
    for i, layer in enumerate(_layers(model)):
        params = layer.params()
        parts = head_contributions(x, params, mask)  # (B, H, L, D)
        x = x + (gates[:, i, :, None, None] * parts).sum(dim=1)  # (B, H, L, D) -> (B, L, D)
        if params.b_o is not None:
            x = x + params.b_o
    logits = x @ model.unembed  # (B, L, V)
    V = logits.shape[-1]
    losses = F.cross_entropy(
        logits[:, :-1].reshape(-1, V), tokens[:, 1:].reshape(-1), reduction="none"
    ).view(B, L - 1)  # (B, L - 1)
    (grad,) = torch.autograd.grad(losses.mean(dim=1).sum(), gates)
    return grad  # (B, layers, H)


def prune_curve(
    model: AttentionOnlyTransformer,
    batch: RepeatedSegments,
    order: Sequence[tuple[int, int]],
    part: str = "all",
) -> np.ndarray:
    """The loss as the heads in ``order`` are removed one by one.

    Args:
        model: the model.
        batch: the data.
        order: ``(layer, head)`` pairs in the order they are removed.
        part: ``"all"``, ``"first"`` or ``"repeat"`` (see :func:`mha.training.runs.segment_losses`).

    Shape:
        Returns ``(len(order) + 1,)``: entry ``k`` is the loss with the first ``k`` heads
        of ``order`` removed.

    Returns:
        The losses, a float NumPy array.

    Raises:
        ValueError, TypeError: as :func:`ablation_loss`.
    """
    order = arguments.pairs("order", order)
    head_gates(_check_model(model).num_layers, model.num_heads, order)  # checks every pair
    return np.array([ablation_loss(model, batch, order[:k], part) for k in range(len(order) + 1)])


def importance_order(importance: np.ndarray) -> list[tuple[int, int]]:
    """Every ``(layer, head)``, least important first (ties broken by position).

    Args:
        importance: one score per head, e.g. from :func:`head_importance`.

    Shape:
        importance ``(num_layers, H)``.

    Returns:
        The ``(layer, head)`` pairs in ascending order of importance.

    Raises:
        ValueError: if ``importance`` is not 2-D or not finite.
        TypeError: if ``importance`` is not a numeric array.
    """
    imp = numpy_arrays.float_array("importance", importance)
    if imp.ndim != 2:
        raise ValueError(
            f"importance must have shape (num_layers, H); got {imp.ndim}-D shape {imp.shape}"
        )
    flat = np.argsort(imp, axis=None, kind="stable")
    return [(int(i) // imp.shape[1], int(i) % imp.shape[1]) for i in flat]


def greedy_prune_order(
    model: AttentionOnlyTransformer, batch: RepeatedSegments, part: str = "all"
) -> list[tuple[int, int]]:
    """Remove, at each step, the head whose removal raises the loss least (measured).

    The expensive reference the importance score approximates: it evaluates every
    remaining head at every step, ``N (N + 1) / 2`` forward passes for ``N`` heads.

    Args:
        model: the model.
        batch: the data.
        part: ``"all"``, ``"first"`` or ``"repeat"`` (see :func:`mha.training.runs.segment_losses`).

    Returns:
        Every ``(layer, head)``, in the order removed.

    Raises:
        ValueError, TypeError: as :func:`ablation_loss`.
    """
    _check_part(part)
    _check_model(model)
    remaining = [(i, h) for i in range(model.num_layers) for h in range(model.num_heads)]
    order: list[tuple[int, int]] = []
    while remaining:
        best = min(remaining, key=lambda pair: ablation_loss(model, batch, [*order, pair], part))
        order.append(best)
        remaining.remove(best)
    return order


def copying_scores(model: AttentionOnlyTransformer) -> np.ndarray:
    """The copying score of every head's OV circuit ``W_E W^V_h W^O_h W_U``.

    :func:`mha.detectors.circuits.copying_score` of each head, with the model's token embedding
    ``W_E`` and unembedding ``W_U`` (the positional embedding is left out): close to 1 for
    a head whose output raises the logit of the token it attends to, as an induction head's
    must (Olsson et al. 2022), near 0 for a random head. Computed in float64.

    Args:
        model: the trained (or initial) model.

    Returns:
        One score per head, in ``[-1, 1]``.

    Shape:
        Returns ``(num_layers, H)``.

    Raises:
        ValueError: if a head's OV circuit is zero, or the weights are not finite.
        TypeError: if ``model`` is not an
            :class:`mha.models.attention_only.AttentionOnlyTransformer`.
    """
    _check_model(model)
    w_e = model.embed.detach().double().numpy()  # (V, D)
    w_u = model.unembed.detach().double().numpy()  # (D, V)
    out = []
    for layer in _layers(model):
        p = layer.params().to_numpy(np.float64)
        blocks = [p.head(h) for h in range(p.num_heads)]
        w_v = np.stack([np.asarray(b["w_v"]) for b in blocks])  # (H, D, Dh)
        w_o = np.stack([np.asarray(b["w_o"]) for b in blocks])  # (H, Dh, D)
        out.append(circuits.copying_score(w_e, w_v, w_o, w_u))
    return np.stack(out)  # (num_layers, H)


def with_kv_heads(
    model: AttentionOnlyTransformer, num_kv_heads: int, *, init: str = "mean", seed: int = 0
) -> AttentionOnlyTransformer:
    """A copy of ``model`` whose layers have ``num_kv_heads`` key/value heads.

    ``init="mean"`` mean-pools the key and value projections of each group
    (:func:`mha.core.params.mean_pool_kv_heads`), the conversion of Ainslie et al. (2023);
    ``"random"`` draws them afresh (as :func:`mha.core.params.init_params` would, from ``seed``),
    the control their ablation compares with. Query and output projections, embeddings and
    unembedding are copied.

    Args:
        model: the model to convert.
        num_kv_heads: the new H_kv; must divide the model's H_kv.
        init: ``"mean"`` or ``"random"``.
        seed: seed of the random key/value projections (``init="random"``).

    Returns:
        A new :class:`mha.models.attention_only.AttentionOnlyTransformer` (the original is left
        alone), in the original's dtype, device and training mode.

    Raises:
        ValueError: if ``num_kv_heads`` is not positive or does not divide the model's
            key/value heads, ``init`` is unknown, or ``seed`` is not in ``[0, 2**64)``.
        TypeError: if ``model`` is not an
            :class:`mha.models.attention_only.AttentionOnlyTransformer`, or
            ``num_kv_heads`` or ``seed`` is not an int.
    """
    _check_model(model)
    if not isinstance(init, str) or init not in ("mean", "random"):
        raise ValueError(f"init must be 'mean' or 'random'; got init={init!r}")
    seed = arguments.seed("seed", seed)
    num_kv_heads = arguments.size("num_kv_heads", num_kv_heads)
    converted = []
    for i, layer in enumerate(_layers(model)):
        p = mean_pool_kv_heads(layer.params().map(torch.Tensor.detach), num_kv_heads)
        if init == "random":
            fresh = init_params(
                p.d_model,
                p.num_heads,
                num_kv_heads=num_kv_heads,
                bias=p.b_qkv is not None,
                seed=layer_seed(seed, i),
            ).to_torch(p.dtype, p.w_qkv.device)
            kv = slice(p.d_model, None)  # the key and value columns
            w_qkv = p.w_qkv.clone()
            w_qkv[:, kv] = fresh.w_qkv[:, kv]
            b_qkv = None if p.b_qkv is None else p.b_qkv.clone()
            if b_qkv is not None and fresh.b_qkv is not None:
                b_qkv[kv] = fresh.b_qkv[kv]
            p = replace(p, w_qkv=w_qkv, b_qkv=b_qkv)
        converted.append(p)
    new = copy.deepcopy(model)
    new.layers = nn.ModuleList(MultiHeadAttention.from_params(p) for p in converted)
    new.train(model.training)  # the new layers follow the model's mode, as the copied rest
    return new


PATHS = ("query", "key", "value", "logits")
"""The paths a head's output reaches: each later layer's query, key and value inputs, and
the unembedding (the direct path to the logits)."""


def _head_terms(
    xq: torch.Tensor, xk: torch.Tensor, xv: torch.Tensor, params: MHAParams, mask: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Each head's term of the layer output from separate query, key and value inputs.

    Returns ``(terms (B, H, L, D), weights (B, H, L, L))``; the output is
    ``terms.sum(1) + b_o``.
    """
    params = repeat_kv_heads(params)  # grouped-query heads: each head with its key/value head
    H = params.num_heads
    q, k, v = xq @ params.w_q, xk @ params.w_k, xv @ params.w_v  # 3 x (B, L, D)
    if params.b_qkv is not None:
        q, k, v = q + params.b_q, k + params.b_k, v + params.b_v
    q, k, v = (torch_backend.split_heads(t, H) for t in (q, k, v))  # 3 x (B, H, L, Dh)
    out, weights = torch_backend.scaled_dot_product_attention(q, k, v, mask)  # (B, H, L, Dh)
    w_o = packing.split_head_rows(params.w_o, H)  # (D, D) -> (H, Dh, D)
    return torch.einsum("bhld,hde->bhle", out, w_o), weights  # (B, H, L, D), (B, H, L, L)


@one_thread()
@torch.no_grad()
def path_ablation(
    model: AttentionOnlyTransformer,
    tokens: torch.Tensor,
    off: Iterable[tuple[int, int]],
    paths: Sequence[str] = PATHS,
    *,
    replacement: str = "zero",
) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """The model with some heads' outputs removed from some paths only (path ablation).

    The residual stream is computed as usual, but the term of each head in ``off`` is
    taken out of the inputs named in ``paths``: ``"query"``, ``"key"`` and ``"value"``
    are the inputs of every later layer's queries, keys and values, ``"logits"`` is the
    input of the unembedding (the head's direct path to the logits, Elhage et al. 2021).
    With all four paths and ``replacement="zero"`` this is the gated model with those heads
    at gate 0 (:func:`head_gates`). Removing a layer-1 head from the keys of layer 2 only
    tests K-composition; from the logits only, its direct effect.

    ``replacement="mean"`` replaces the term by its mean over the batch at each position,
    taken from the unablated model on ``tokens`` (mean ablation), instead of by zero.

    Args:
        model: the model.
        tokens: token ids.
        off: ``(layer, head)`` pairs whose term is removed.
        paths: a subset of :data:`PATHS`.
        replacement: ``"zero"`` or ``"mean"``.

    Shape:
        tokens ``(B, L)``. Returns logits ``(B, L, V)`` and ``num_layers`` weights
        ``(B, H, L, L)``.

    Returns:
        ``(logits, weights)`` of the ablated model.

    Raises:
        ValueError: if a path or the replacement is unknown, a pair is outside the model,
            or ``tokens`` is not valid for the model.
        TypeError: if ``model`` is of another kind, ``paths`` is not a list of names or
            ``off`` not a list of pairs, or as :meth:`AttentionOnlyTransformer.forward`.
    """
    _check_model(model)
    paths = tuple(arguments.items("paths", paths))
    unknown = [p for p in paths if not isinstance(p, str) or p not in PATHS]
    if unknown:
        raise ValueError(f"paths must be drawn from {PATHS}; got {unknown}")
    if not isinstance(replacement, str) or replacement not in ("zero", "mean"):
        raise ValueError(f"replacement must be 'zero' or 'mean'; got replacement={replacement!r}")
    off = sorted(set(arguments.pairs("off", off)))
    head_gates(model.num_layers, model.num_heads, off)  # checks every pair
    tokens = model._check(tokens, None)
    L = tokens.shape[1]
    mask = torch_backend.causal_mask(L)  # (L, L)
    means = {}
    if replacement == "mean":
        x = model.embed[tokens] + model.pos[:L]  # (B, L) -> (B, L, D)
        for i, layer in enumerate(_layers(model)):
            params = layer.params()
            terms, _ = _head_terms(x, x, x, params, mask)  # (B, H, L, D)
            means.update({(i, h): terms[:, h].mean(dim=0) for j, h in off if j == i})  # (L, D)
            x = x + terms.sum(dim=1) + (0.0 if params.b_o is None else params.b_o)
    x = model.embed[tokens] + model.pos[:L]  # (B, L) -> (B, L, D)
    removed = torch.zeros_like(x)  # the removed terms minus their replacements, (B, L, D)
    weights = []
    for i, layer in enumerate(_layers(model)):
        params = layer.params()
        xq, xk, xv = (x - removed if p in paths else x for p in ("query", "key", "value"))
        terms, w = _head_terms(xq, xk, xv, params, mask)  # (B, H, L, D), (B, H, L, L)
        for j, h in off:
            if j == i:
                removed = removed + terms[:, h] - means.get((i, h), 0.0)
        x = x + terms.sum(dim=1) + (0.0 if params.b_o is None else params.b_o)  # (B, L, D)
        weights.append(w)
    final = x - removed if "logits" in paths else x
    return final @ model.unembed, weights  # (B, L, V)


def path_ablation_losses(
    model: AttentionOnlyTransformer,
    batch: RepeatedSegments,
    off: Iterable[tuple[int, int]],
    paths: Sequence[str] = PATHS,
    *,
    replacement: str = "zero",
) -> dict[str, float]:
    """:func:`mha.training.runs.segment_losses` of the model under :func:`path_ablation`.

    Args:
        batch: the data; :func:`path_ablation` runs on its tokens.
        model, off, paths, replacement: as :func:`path_ablation` takes them.

    Returns:
        ``{"first": ..., "repeat": ..., "all": ...}`` as :func:`mha.training.runs.segment_losses`.

    Raises:
        ValueError, TypeError: as :func:`path_ablation` and
            :func:`mha.training.runs.split_losses`.
        TypeError: if ``batch`` is not a :class:`~mha.training.tasks.RepeatedSegments`.
    """
    arguments.instance("batch", batch, RepeatedSegments, "a RepeatedSegments batch")
    logits, _ = path_ablation(model, batch.tokens, off, paths, replacement=replacement)
    return split_losses(logits, batch)


def single_ablation_losses(
    model: AttentionOnlyTransformer, batch: RepeatedSegments, part: str = "all"
) -> np.ndarray:
    """The loss with each head removed alone (gate 0), for every head.

    Args:
        model: the model.
        batch: the data.
        part: ``"all"``, ``"first"`` or ``"repeat"`` (see :func:`mha.training.runs.segment_losses`).

    Shape:
        Returns ``(num_layers, H)``.

    Returns:
        ``losses[layer, h]``: :func:`ablation_loss` with ``(layer, h)`` removed.

    Raises:
        ValueError, TypeError: as :func:`ablation_loss`.
    """
    _check_part(part)
    _check_model(model)
    return np.array(
        [
            [ablation_loss(model, batch, [(i, h)], part) for h in range(model.num_heads)]
            for i in range(model.num_layers)
        ]
    )


def importance_cancellation(
    model: AttentionOnlyTransformer, batches: Sequence[RepeatedSegments]
) -> dict[str, object]:
    """Michel et al.'s importance with ``|.|`` per sequence and per batch, side by side.

    Args:
        model: the model.
        batches: the data, as for :func:`head_importance`.

    Shape:
        ``"per_sequence"``, ``"per_batch"`` and ``"ratio"`` are ``(num_layers, H)``.

    Returns:
        ``"per_sequence"`` and ``"per_batch"``: :func:`head_importance` unnormalised, with
        the absolute value taken per sequence and per batch; ``"ratio"``: per batch over
        per sequence (at most 1, by the triangle inequality); ``"order"``: the pruning
        order of the per-batch scores normalised per layer (:func:`importance_order`).

    Raises:
        ValueError, TypeError: as :func:`head_importance`.
    """
    per_sequence = head_importance(model, batches, normalize=False)
    per_batch = head_importance(model, batches, normalize=False, per_sequence=False)
    norms = np.linalg.norm(per_batch, axis=1, keepdims=True)  # (layers, 1)
    normalised = per_batch / np.where(norms > 0, norms, 1.0)
    return {
        "per_sequence": per_sequence,
        "per_batch": per_batch,
        "ratio": per_batch / np.where(per_sequence > 0, per_sequence, 1.0),
        "order": importance_order(normalised),
    }
