"""A small attention-only transformer, trained on the repeated-segment task, and its heads.

The model is the one of Elhage et al. (2021) and Olsson et al. (2022) at toy size: token
and learned positional embeddings, ``num_layers`` residual blocks ``x <- x + MHA(x)`` of
causal multi-head self-attention (this package's :func:`mha.torch_backend.multi_head_attention`),
and a linear unembedding. No MLPs and no LayerNorm, so everything the model computes goes
through its attention heads.

Heads are switched on and off with *gates* ``xi`` (Michel et al., 2019): head ``h`` of a
layer contributes ``xi_h * head_h(x)`` before the output projection. Gating the heads'
outputs equals scaling the rows of ``W^O`` that read them,

    ``Concat(xi_1 head_1, ..., xi_H head_H) W^O = Concat(head_1, ..., head_H) (G W^O)``,

with ``G = diag(xi_1 1_Dh, ..., xi_H 1_Dh)``, so :func:`gated_params` implements the gate
by scaling ``W^O`` and the attention code is unchanged. With all gates 1 the model is the
ungated model exactly; ``xi_h = 0`` removes head ``h`` (ablation); ``dL / dxi_h`` at 1 is
the gradient in Michel et al.'s head importance.

The functions that train or evaluate the model (:func:`train`, :func:`segment_losses` and
the ablation and pruning built on it, :func:`head_scores`, :func:`head_importance`) run on
one CPU thread whatever torch's global setting, and restore
the setting after; the model's own ``forward`` leaves it alone. The matrices are tiny: on a
2-core machine two threads took about six times the CPU time of one for the same training
run, and split the float32 sums differently from one run to the next, so that two runs of
the same config differed. On one thread the same config gives the same run, bit for bit, on
a given machine.

:func:`train_runs` can keep fresh runs in a folder (``store=``, or the ``MHA_TRAIN_STORE``
environment variable, which the book's build sets), under a key made of the config, the
package's source, the library versions and the numerical-kernel settings. A run asked for
again with the same key is loaded instead of trained; it is the run training would give
again on this machine, so two chapters that train the same run train it once per build.
"""

from __future__ import annotations

import copy
import hashlib
import math
import multiprocessing
import os
import pickle
import platform
import time
from collections.abc import Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from zipfile import BadZipFile

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from mha import _validate, detectors, packing, tasks, torch_backend
from mha._linalg import one_thread
from mha.kv_cache import KVCache
from mha.module import MultiHeadAttention
from mha.params import MHAParams, init_params, mean_pool_kv_heads, repeat_kv_heads
from mha.tasks import RepeatedSegments


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
        ValueError: if ``gate`` does not have shape ``(H,)``.
    """
    if gate is None:
        return params
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
        ValueError, TypeError: as :func:`mha.torch_backend.scaled_dot_product_attention`.
    """
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
        ValueError: if a size is not positive or H does not divide D.
        TypeError: if a size is not an int.
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
        for name, value in (
            ("vocab_size", vocab_size),
            ("max_len", max_len),
            ("num_layers", num_layers),
        ):
            _validate.check_positive(name, value)
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
                seed=_layer_seed(seed, layer),
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
        return self.layers[0].num_heads

    @property
    def num_kv_heads(self) -> int:
        """Key/value heads per layer H_kv."""
        return self.layers[0].num_kv_heads

    @property
    def vocab_size(self) -> int:
        """Number of token ids V."""
        return self.embed.shape[0]

    @property
    def max_len(self) -> int:
        """The longest sequence the positional embedding covers."""
        return self.pos.shape[0]

    def new_caches(self, batch_size: int, capacity: int | None = None) -> list[KVCache]:
        """One empty :class:`mha.kv_cache.KVCache` per layer, for :meth:`forward`'s ``caches``.

        Args:
            batch_size: B, the sequences decoded together.
            capacity: positions each cache can hold (default: ``max_len``).

        Returns:
            ``num_layers`` caches of the model's dtype, ``H_kv`` heads of width ``Dh``.

        Raises:
            ValueError: if a size is not positive.
            TypeError: if a size is not an int.
        """
        capacity = self.max_len if capacity is None else capacity
        layer = self.layers[0]
        return [
            KVCache(batch_size, layer.num_kv_heads, layer.d_head, capacity, dtype=self.embed.dtype)
            for _ in self.layers
        ]

    def _check(self, tokens: torch.Tensor, gates: torch.Tensor | None) -> None:
        if not isinstance(tokens, torch.Tensor) or tokens.dtype != torch.int64:
            got = tokens.dtype if isinstance(tokens, torch.Tensor) else type(tokens).__name__
            raise TypeError(f"tokens must be an int64 torch.Tensor; got {got}")
        if tokens.ndim != 2 or not 1 <= tokens.shape[1] <= self.pos.shape[0]:
            raise ValueError(
                f"tokens must have shape (B, L) with 1 <= L <= max_len={self.pos.shape[0]}; "
                f"got {tuple(tokens.shape)}"
            )
        if tokens.numel() and (tokens.min() < 0 or tokens.max() >= self.vocab_size):
            raise ValueError(
                f"tokens must lie in [0, vocab_size={self.vocab_size}); "
                f"got values in [{int(tokens.min())}, {int(tokens.max())}]"
            )
        shape = (self.num_layers, self.num_heads)
        if gates is not None and tuple(gates.shape) != shape:
            raise ValueError(
                f"gates must have shape (num_layers, H) = {shape}; got {tuple(gates.shape)}"
            )

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
        self._check(tokens, gates)
        L = tokens.shape[1]
        start = 0 if caches is None else self._check_caches(caches, tokens)
        x = self.embed[tokens] + self.pos[start : start + L]  # (B, L) -> (B, L, D)
        # The new positions are the last L of start + L: bottom-right aligned (L = 1: all).
        mask = None if L == 1 else torch_backend.causal_mask(L, start + L, align="bottom_right")
        stream, weights = [x], []
        for i, layer in enumerate(self.layers):
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
        if len(caches) != self.num_layers or not all(isinstance(c, KVCache) for c in caches):
            raise TypeError(
                f"caches must be a list of num_layers={self.num_layers} KVCache (see new_caches)"
            )
        lengths = {c.length for c in caches}
        if len(lengths) != 1:
            raise ValueError(f"caches must all hold the same positions; got {sorted(lengths)}")
        start = lengths.pop()
        if start + tokens.shape[1] > self.max_len:
            raise ValueError(
                f"positions must stay below max_len={self.max_len}; got {start} cached and "
                f"{tokens.shape[1]} new"
            )
        return start

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

        Args:
            tokens: token ids.
            gates: head gates; ``None`` is the ungated model (equal to all ones).
            need_weights: also return the weights of every layer.
            caches: one key/value cache per layer, or ``None``.

        Shape:
            tokens ``(B, L)`` int64 with ``L <= max_len``; gates ``(num_layers, H)``. Returns logits
            ``(B, L, V)`` and, if asked, ``num_layers`` weights ``(B, H, L, L)``.

        Returns:
            ``(logits, weights)``; ``weights`` is ``None`` unless ``need_weights``.

        Raises:
            ValueError: if ``tokens`` has the wrong shape or ids, or ``gates`` the wrong shape.
            TypeError: if ``tokens`` is not an int64 tensor.
        """
        logits, _, weights = self._run(tokens, gates, need_weights, caches)
        return logits, (weights if need_weights else None)


def _layer_seed(seed: int, layer: int) -> int:
    return int(np.random.SeedSequence([seed, layer]).generate_state(1)[0])


def next_token_loss(
    logits: torch.Tensor, tokens: torch.Tensor, where: torch.Tensor | None = None
) -> torch.Tensor:
    """Mean cross-entropy of predicting ``tokens[:, i + 1]`` from position ``i``.

    Args:
        logits: the model's output.
        tokens: the input token ids.
        where: which query positions ``i`` count (the last position never does, having no
            next token); ``None`` counts all.

    Shape:
        logits ``(B, L, V)``, tokens and where ``(B, L)``. Returns a scalar.

    Returns:
        The mean loss, a scalar tensor (differentiable).

    Raises:
        ValueError: if the shapes do not match, or ``where`` selects no position.
    """
    B, L, V = logits.shape
    if tuple(tokens.shape) != (B, L):
        raise ValueError(f"tokens must have shape (B, L) = ({B}, {L}); got {tuple(tokens.shape)}")
    losses = F.cross_entropy(
        logits[:, :-1].reshape(-1, V), tokens[:, 1:].reshape(-1), reduction="none"
    ).view(B, L - 1)  # (B, L - 1)
    if where is None:
        return losses.mean()
    if tuple(where.shape) != (B, L):
        raise ValueError(f"where must have shape (B, L) = ({B}, {L}); got {tuple(where.shape)}")
    keep = where[:, :-1]
    if not keep.any():
        raise ValueError("where must select at least one query position before the last")
    return losses[keep].mean()


@one_thread()
def segment_losses(
    model: AttentionOnlyTransformer, batch: RepeatedSegments, gates: torch.Tensor | None = None
) -> dict[str, float]:
    """Next-token loss on the first occurrence of each segment, on its repeats, and overall.

    Args:
        model: the model.
        batch: the data.
        gates: head gates ``(num_layers, H)``; ``None`` is the ungated model.

    Shape:
        gates ``(num_layers, H)``; each loss is a ``float``.

    Returns:
        ``{"first": ..., "repeat": ..., "all": ...}``: ``repeat`` counts the query positions
        ``i >= start + period`` (``batch.repeated``: the token at ``i`` occurred before, and
        induction determines the next one), ``first`` the positions before them (the prefix
        and the first copy of the segment, whose next token the past does not determine).
    """
    with torch.no_grad():
        logits, _ = model(batch.tokens, gates)
    return _split_losses(logits, batch)


def _split_losses(logits: torch.Tensor, batch: RepeatedSegments) -> dict[str, float]:
    rep = batch.repeated  # (B, L)
    return {
        "first": float(next_token_loss(logits, batch.tokens, ~rep)),
        "repeat": float(next_token_loss(logits, batch.tokens, rep)),
        "all": float(next_token_loss(logits, batch.tokens)),
    }


@dataclass(frozen=True)
class TrainConfig:
    """Everything that determines a training run (same config, same run).

    Data: :func:`mha.tasks.repeated_segments` with this config's sizes, a fresh batch per
    step from a generator seeded with ``(seed, 1)``; the evaluation batch comes from
    ``(seed, 2)``. Model: :class:`AttentionOnlyTransformer` seeded with ``seed``.
    Optimiser: AdamW with constant learning rate ``lr``.

    Attributes:
        vocab_size: number of token ids V.
        seq_len: sequence length L.
        min_period: shortest repeated segment.
        max_period: longest repeated segment.
        prefix_prob: probability that a sequence starts with unrelated tokens.
        d_model: model width D.
        num_heads: heads per layer H.
        num_layers: number of attention blocks.
        batch_size: sequences per training step.
        steps: training steps.
        lr: AdamW's learning rate.
        weight_decay: AdamW's weight decay.
        seed: seed of the model and of both data generators.
        eval_every: steps between two measurements.
        eval_size: sequences in the evaluation batch.

    Raises:
        ValueError: if a count is not a positive int or ``lr`` is not positive.
    """

    vocab_size: int = 64
    seq_len: int = 32
    min_period: int = 8
    max_period: int = 16
    prefix_prob: float = 0.5
    d_model: int = 64
    num_heads: int = 4
    num_layers: int = 2
    batch_size: int = 32
    steps: int = 1000
    lr: float = 1e-2
    weight_decay: float = 0.0
    seed: int = 0
    eval_every: int = 25
    eval_size: int = 64

    def __post_init__(self) -> None:
        for name in ("steps", "eval_every", "eval_size", "batch_size"):
            value = getattr(self, name)
            _validate.check_positive(name, value)
        if not self.lr > 0:
            raise ValueError(f"lr must be positive; got lr={self.lr}")

    def model(self) -> AttentionOnlyTransformer:
        """The model at initialisation.

        Returns:
            A new :class:`AttentionOnlyTransformer` with this config's sizes and seed.
        """
        return AttentionOnlyTransformer(
            self.vocab_size,
            self.seq_len,
            self.d_model,
            self.num_heads,
            self.num_layers,
            seed=self.seed,
        )

    def batch(self, rng: np.random.Generator | int, batch_size: int) -> RepeatedSegments:
        """A batch of the task with this config's sizes.

        Args:
            rng: a NumPy generator, or a seed for one.
            batch_size: number of sequences.

        Returns:
            A :class:`mha.tasks.RepeatedSegments` batch.
        """
        return tasks.repeated_segments(
            batch_size,
            self.seq_len,
            self.vocab_size,
            min_period=self.min_period,
            max_period=self.max_period,
            prefix_prob=self.prefix_prob,
            rng=rng,
        )

    def eval_batch(self) -> RepeatedSegments:
        """The fixed held-out batch the history is measured on.

        Returns:
            The same batch on every call, drawn from ``(seed, 2)``.
        """
        return self.batch(np.random.default_rng([self.seed, 2]), self.eval_size)


@dataclass(frozen=True)
class TrainHistory:
    """What was measured during training.

    Attributes:
        step: the evaluation steps.
        train_loss: the loss of every training step.
        first_loss: loss on first occurrences, at each evaluation.
        repeat_loss: loss on repeats, at each evaluation.
        previous_token: each head's previous-token score, at each evaluation.
        induction: each head's induction score, at each evaluation.
        cpu_seconds: CPU time of the whole run.

    Shape:
        step ``(E,)`` (the evaluation steps, 0 = initialisation); train_loss ``(steps,)``;
        first_loss and repeat_loss ``(E,)`` (see :func:`segment_losses`);
        previous_token and induction ``(E, num_layers, H)``, each head's score on the
        evaluation batch. ``cpu_seconds`` is the CPU time of the whole run
        (:func:`time.process_time`), measurements included.
    """

    step: np.ndarray
    train_loss: np.ndarray
    first_loss: np.ndarray
    repeat_loss: np.ndarray
    previous_token: np.ndarray
    induction: np.ndarray
    cpu_seconds: float = field(default=0.0)


@one_thread()
def head_scores(model: AttentionOnlyTransformer, batch: RepeatedSegments) -> dict[str, np.ndarray]:
    """Each head's previous-token and induction score on a batch.

    Args:
        model: the model.
        batch: the data.

    Shape:
        Returns two ``(num_layers, H)`` arrays.

    Returns:
        ``{"previous_token": (num_layers, H), "induction": (num_layers, H)}``: the
        :func:`mha.detectors.previous_token_score` averaged over the batch, and
        :func:`mha.detectors.induction_score`.
    """
    with torch.no_grad():
        _, weights = model(batch.tokens, need_weights=True)
    return _scores(weights, batch)


def _scores(weights: list[torch.Tensor], batch: RepeatedSegments) -> dict[str, np.ndarray]:
    w = np.stack([x.numpy() for x in weights], axis=1)  # (B, layers, H, L, L)
    return {
        "previous_token": detectors.previous_token_score(w).mean(axis=0),  # (layers, H)
        "induction": detectors.induction_score(w, batch.tokens),  # (layers, H)
    }


@one_thread()
def train(
    config: TrainConfig, model: AttentionOnlyTransformer | None = None
) -> tuple[AttentionOnlyTransformer, TrainHistory]:
    """Train a model on the repeated-segment task, measuring the heads as it learns.

    Every ``eval_every`` steps (and at step 0 and the end) the model is measured on the
    evaluation batch, with one forward pass: :func:`segment_losses` and
    :func:`head_scores`. Runs on one CPU thread (see the module docstring).

    The training steps run with the backend's checks of values off
    (:func:`mha.torch_backend.value_checks`): their inputs are the model's own embeddings and
    weights, and the loss, read once per step, is checked instead; NaN or infinity anywhere
    in the model reaches it. The measurements run with the checks on.

    Args:
        config: everything that determines the run.
        model: a model to continue training (a copy is trained; this one is left alone),
            e.g. one converted by :func:`with_kv_heads`; ``None`` starts from
            ``config.model()``. The data still come from ``config``'s seed.

    Returns:
        The trained model and its :class:`TrainHistory`.

    Raises:
        TypeError: if ``model`` is not an :class:`AttentionOnlyTransformer`.
        ValueError: if a training step's loss is NaN or infinite (training diverged).
    """
    start = time.process_time()
    if model is None:
        model = config.model()
    elif not isinstance(model, AttentionOnlyTransformer):
        raise TypeError(f"model must be an AttentionOnlyTransformer; got {type(model).__name__}")
    else:
        model = copy.deepcopy(model)
    opt = torch.optim.AdamW(model.parameters(), lr=config.lr, weight_decay=config.weight_decay)
    data = np.random.default_rng([config.seed, 1])
    held_out = config.eval_batch()
    log: dict[str, list] = {k: [] for k in ("step", "first", "repeat", "prev", "ind")}

    def measure(step: int) -> None:
        with torch.no_grad():
            logits, weights = model(held_out.tokens, need_weights=True)
        losses, scores = _split_losses(logits, held_out), _scores(weights, held_out)
        log["step"].append(step)
        log["first"].append(losses["first"])
        log["repeat"].append(losses["repeat"])
        log["prev"].append(scores["previous_token"])
        log["ind"].append(scores["induction"])

    train_loss = np.empty(config.steps)
    for step in range(config.steps):
        if step % config.eval_every == 0:
            measure(step)
        tokens = config.batch(data, config.batch_size).tokens
        with torch_backend.value_checks(False):  # the loss is checked instead, below
            logits, _ = model(tokens)
            loss = next_token_loss(logits, tokens)
        opt.zero_grad()
        loss.backward()
        train_loss[step] = loss.item()
        if not math.isfinite(train_loss[step]):
            raise ValueError(
                f"the training loss must stay finite; got {train_loss[step]} at step {step} "
                f"(lr={config.lr}): training diverged"
            )
        opt.step()
    measure(config.steps)
    history = TrainHistory(
        step=np.array(log["step"]),
        train_loss=train_loss,
        first_loss=np.array(log["first"]),
        repeat_loss=np.array(log["repeat"]),
        previous_token=np.stack(log["prev"]),
        induction=np.stack(log["ind"]),
        cpu_seconds=time.process_time() - start,
    )
    return model, history


STORE_VARIABLE = "MHA_TRAIN_STORE"
# Environment variables that choose numerical kernels or threads, so that they key a stored run.
_KERNEL_PREFIXES = ("ATEN_", "NPY_", "OPENBLAS_", "MKL_", "OMP_", "KMP_", "DNNL_", "ONEDNN_")
_SOURCE = Path(__file__).resolve().parent


def run_key(config: TrainConfig) -> str:
    """The key under which :func:`train_runs` stores a fresh run of ``config``.

    A run is determined, on a given machine, by its config, the code and the numerical
    kernels, so the key hashes: the config's fields; every ``.py`` file of this package;
    the versions of Python, NumPy and PyTorch; the machine's architecture and processor;
    and the environment variables that select kernels or threads (``ATEN_*``, ``NPY_*``,
    ``OPENBLAS_*``, ``MKL_*``, ``OMP_*``, ...). Changing any of them trains again.

    Args:
        config: the run.

    Returns:
        A hexadecimal SHA-256 digest.

    Raises:
        TypeError: if ``config`` is not a :class:`TrainConfig`.
    """
    if not isinstance(config, TrainConfig):
        raise TypeError(f"config must be a TrainConfig; got {type(config).__name__}")
    digest = hashlib.sha256()
    parts = [
        repr(sorted(asdict(config).items())),
        platform.python_version(),
        np.__version__,
        torch.__version__,
        platform.machine(),
        platform.processor(),
        repr(sorted((k, v) for k, v in os.environ.items() if k.startswith(_KERNEL_PREFIXES))),
    ]
    for part in parts:
        digest.update(part.encode("utf8") + b"\0")
    for source in sorted(_SOURCE.rglob("*.py")):
        digest.update(source.relative_to(_SOURCE).as_posix().encode("utf8") + b"\0")
        digest.update(source.read_bytes() + b"\0")
    return digest.hexdigest()


def _stored_paths(store: Path, key: str) -> tuple[Path, Path]:
    return store / f"{key}.pt", store / f"{key}.npz"


def _load_run(
    store: Path, key: str, config: TrainConfig
) -> tuple[AttentionOnlyTransformer, TrainHistory] | None:
    """The stored run under ``key``, or ``None`` if there is none (or it cannot be read)."""
    weights, arrays = _stored_paths(store, key)
    if not (weights.is_file() and arrays.is_file()):
        return None
    try:
        model = config.model()
        model.load_state_dict(torch.load(weights, weights_only=True))
        with np.load(arrays, allow_pickle=False) as saved:
            history = TrainHistory(
                **{f.name: saved[f.name] for f in fields(TrainHistory) if f.name != "cpu_seconds"},
                cpu_seconds=float(saved["cpu_seconds"]),
            )
    except (OSError, RuntimeError, KeyError, ValueError, pickle.UnpicklingError, BadZipFile):
        return None  # unreadable or from another layout: train again
    return model, history


def _store_run(store: Path, key: str, run: tuple[AttentionOnlyTransformer, TrainHistory]) -> None:
    """Write ``run`` under ``key`` (each file written whole, then renamed into place)."""
    model, history = run
    store.mkdir(parents=True, exist_ok=True)
    weights, arrays = _stored_paths(store, key)
    partial = store / f"{key}.{os.getpid()}.partial"
    torch.save(model.state_dict(), partial)
    os.replace(partial, weights)
    with open(partial, "wb") as out:
        np.savez(out, **{f.name: np.asarray(getattr(history, f.name)) for f in fields(history)})
    os.replace(partial, arrays)


def train_runs(
    configs: Sequence[TrainConfig],
    processes: int | None = None,
    *,
    models: Sequence[AttentionOnlyTransformer | None] | None = None,
    store: str | os.PathLike[str] | None = None,
) -> list[tuple[AttentionOnlyTransformer, TrainHistory]]:
    """:func:`train` every config, in parallel worker processes, results in config order.

    Each run is :func:`train` on one thread in its own process, so a run's result is the
    one :func:`train` gives in this process on this machine. Claims about training are
    claims about the method, checked over several seeds: this runs those seeds side by
    side, one per CPU core. The workers are spawned, so in a script call this under
    ``if __name__ == "__main__":`` (a notebook needs nothing).

    Args:
        configs: the runs, e.g. one :class:`TrainConfig` per seed.
        processes: worker processes; ``None`` uses one per CPU core, at most one per run.
            ``1`` trains in this process, one run after the other.
        models: for each config, a model to continue training (as :func:`train`'s
            ``model``) or ``None`` for a fresh one; ``None`` for all fresh.
        store: a folder that keeps fresh runs under :func:`run_key`: a run found there is
            loaded instead of trained, and a run trained is written there. ``None`` uses
            the folder named by the ``MHA_TRAIN_STORE`` environment variable, if set, and
            otherwise stores nothing. Runs that continue a given model are never stored.

    Returns:
        ``(model, history)`` for each config, in order (a loaded run's ``cpu_seconds`` is
        that of the training that produced it).

    Raises:
        ValueError: if ``configs`` is empty, ``models`` has another length, or
            ``processes`` is not a positive int.
        TypeError: if a config is not a :class:`TrainConfig`.
    """
    configs = list(configs)
    if not configs:
        raise ValueError("configs must hold at least one TrainConfig; got none")
    for i, config in enumerate(configs):
        if not isinstance(config, TrainConfig):
            raise TypeError(f"configs[{i}] must be a TrainConfig; got {type(config).__name__}")
    models = [None] * len(configs) if models is None else list(models)
    if len(models) != len(configs):
        raise ValueError(
            f"models must give one model (or None) per config; got {len(models)} for "
            f"{len(configs)} configs"
        )
    if processes is not None:
        _validate.check_positive("processes", processes)
    if store is None and os.environ.get(STORE_VARIABLE):
        store = os.environ[STORE_VARIABLE]
    folder = None if store is None else Path(store)
    pairs = zip(configs, models, strict=True)
    keys = [run_key(c) if folder and m is None else None for c, m in pairs]  # stored if fresh
    runs = [_load_run(folder, k, c) if k else None for k, c in zip(keys, configs, strict=True)]
    todo = [i for i, run in enumerate(runs) if run is None]
    trained = _train_all([configs[i] for i in todo], [models[i] for i in todo], processes)
    for i, run in zip(todo, trained, strict=True):
        runs[i] = run
        if keys[i]:
            _store_run(folder, keys[i], run)
    return runs


def _train_all(
    configs: list[TrainConfig],
    models: list[AttentionOnlyTransformer | None],
    processes: int | None,
) -> list[tuple[AttentionOnlyTransformer, TrainHistory]]:
    """:func:`train` every config, ``processes`` at a time (one per core, at most one per run)."""
    if not configs:
        return []
    if processes is None:
        processes = min(len(configs), os.cpu_count() or 1)
    if processes == 1:
        return [train(config, model) for config, model in zip(configs, models, strict=True)]
    # Workers are spawned (a fresh interpreter each), never forked from a process whose
    # torch thread pool is already running.
    spawn = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=processes, mp_context=spawn) as pool:
        return list(pool.map(train, configs, models))


def first_step_above(steps: np.ndarray, values: np.ndarray, level: float) -> int:
    """The first recorded step at which ``values`` exceeds ``level``.

    Args:
        steps: the steps at which ``values`` was recorded, e.g. ``TrainHistory.step``.
        values: one value per recorded step, e.g. a head's score.
        level: the threshold.

    Shape:
        steps and values ``(E,)``.

    Returns:
        The first ``steps[e]`` with ``values[e] > level``, an ``int``.

    Raises:
        ValueError: if the shapes differ or no value exceeds ``level``.
    """
    steps, values = np.asarray(steps), np.asarray(values)
    if steps.ndim != 1 or steps.shape != values.shape:
        raise ValueError(
            f"steps and values must have the same shape (E,); got {steps.shape} and {values.shape}"
        )
    above = values > level
    if not above.any():
        raise ValueError(
            f"values never exceed level={level}; their maximum is {values.max(initial=-np.inf)}"
        )
    return int(steps[np.argmax(above)])


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
        ValueError: if a pair in ``off`` is outside the model.
    """
    gates = torch.ones(num_layers, num_heads)
    for layer, head in off:
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
        part: ``"all"``, ``"first"`` or ``"repeat"`` (see :func:`segment_losses`).

    Returns:
        The mean next-token loss over ``part``, a ``float``.

    Raises:
        ValueError: if ``part`` is unknown or a pair is outside the model.
    """
    if part not in ("all", "first", "repeat"):
        raise ValueError(f"part must be 'all', 'first' or 'repeat'; got part={part!r}")
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
    :func:`head_contributions`), which at ``xi = 1`` is the model's forward pass.

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
        ValueError: if ``batches`` is empty.
        TypeError: if ``normalize`` or ``per_sequence`` is not a bool.
    """
    _validate.check_bool("normalize", normalize)
    _validate.check_bool("per_sequence", per_sequence)
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
            gates = torch.ones(model.num_layers, model.num_heads, requires_grad=True)
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
    model._check(tokens, None)
    B, L = tokens.shape
    gates = torch.ones(B, model.num_layers, model.num_heads, dtype=model.embed.dtype)
    gates.requires_grad_(True)
    x = model.embed[tokens] + model.pos[:L]  # (B, L) -> (B, L, D)
    mask = torch_backend.causal_mask(L)  # (L, L)
    for i, layer in enumerate(model.layers):
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
        part: ``"all"``, ``"first"`` or ``"repeat"`` (see :func:`segment_losses`).

    Shape:
        Returns ``(len(order) + 1,)``: entry ``k`` is the loss with the first ``k`` heads
        of ``order`` removed.

    Returns:
        The losses, a float NumPy array.

    Raises:
        ValueError: as :func:`ablation_loss`.
    """
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
        ValueError: if ``importance`` is not 2-D.
    """
    imp = np.asarray(importance)
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
        part: ``"all"``, ``"first"`` or ``"repeat"`` (see :func:`segment_losses`).

    Returns:
        Every ``(layer, head)``, in the order removed.

    Raises:
        ValueError: as :func:`ablation_loss`.
    """
    remaining = [(i, h) for i in range(model.num_layers) for h in range(model.num_heads)]
    order: list[tuple[int, int]] = []
    while remaining:
        best = min(remaining, key=lambda pair: ablation_loss(model, batch, [*order, pair], part))
        order.append(best)
        remaining.remove(best)
    return order


def copying_scores(model: AttentionOnlyTransformer) -> np.ndarray:
    """The copying score of every head's OV circuit ``W_E W^V_h W^O_h W_U``.

    :func:`mha.detectors.copying_score` of each head, with the model's token embedding
    ``W_E`` and unembedding ``W_U`` (the positional embedding is left out): close to 1 for
    a head whose output raises the logit of the token it attends to, as an induction head's
    must (Olsson et al. 2022), near 0 for a random head. Computed in float64.

    Args:
        model: the trained (or initial) model.

    Returns:
        One score per head, in ``[-1, 1]``.

    Shape:
        Returns ``(num_layers, H)``.
    """
    w_e = model.embed.detach().double().numpy()  # (V, D)
    w_u = model.unembed.detach().double().numpy()  # (D, V)
    out = []
    for layer in model.layers:
        p = layer.params().to_numpy(np.float64)
        blocks = [p.head(h) for h in range(p.num_heads)]
        w_v = np.stack([b["w_v"] for b in blocks])  # (H, D, Dh)
        w_o = np.stack([b["w_o"] for b in blocks])  # (H, Dh, D)
        out.append(detectors.copying_score(w_e, w_v, w_o, w_u))
    return np.stack(out)  # (num_layers, H)


@torch.no_grad()
def greedy_decode(
    model: AttentionOnlyTransformer, prompt: torch.Tensor, steps: int, *, use_cache: bool = True
) -> torch.Tensor:
    """Extend ``prompt`` by ``steps`` tokens, each the most likely next token.

    With ``use_cache`` the prompt is run once (prefill) and each step runs only the new
    token, attending to the cached keys and values; without, every step runs the whole
    sequence again. Both give the same tokens, up to ties broken by rounding.

    Args:
        model: the model.
        prompt: the first tokens of each sequence.
        steps: how many tokens to add.
        use_cache: whether to decode with key/value caches.

    Shape:
        prompt ``(B, L)``; returns ``(B, L + steps)``.

    Returns:
        The prompt followed by the generated tokens.

    Raises:
        ValueError: if ``steps`` is negative or the sequence would pass ``max_len``.
        TypeError: if ``steps`` is not an int or ``use_cache`` not a bool; otherwise as
            :meth:`AttentionOnlyTransformer.forward`.
    """
    _validate.check_bool("use_cache", use_cache)
    _validate.check_at_least("steps", steps, 0)
    tokens = prompt
    if steps == 0:
        return tokens
    if tokens.shape[1] + steps > model.max_len:
        raise ValueError(
            f"prompt length + steps must stay within max_len={model.max_len}; got "
            f"{tokens.shape[1]} + {steps}"
        )
    caches = model.new_caches(tokens.shape[0]) if use_cache else None
    new = tokens
    for _ in range(steps):
        logits, _ = model(new if use_cache else tokens, caches=caches)
        nxt = logits[:, -1].argmax(dim=-1, keepdim=True)  # (B, 1)
        tokens = torch.cat([tokens, nxt], dim=1)
        new = nxt
    return tokens


def with_kv_heads(
    model: AttentionOnlyTransformer, num_kv_heads: int, *, init: str = "mean", seed: int = 0
) -> AttentionOnlyTransformer:
    """A copy of ``model`` whose layers have ``num_kv_heads`` key/value heads.

    ``init="mean"`` mean-pools the key and value projections of each group
    (:func:`mha.params.mean_pool_kv_heads`), the conversion of Ainslie et al. (2023);
    ``"random"`` draws them afresh (as :func:`mha.params.init_params` would, from ``seed``),
    the control their ablation compares with. Query and output projections, embeddings and
    unembedding are copied.

    Args:
        model: the model to convert.
        num_kv_heads: the new H_kv; must divide the model's H_kv.
        init: ``"mean"`` or ``"random"``.
        seed: seed of the random key/value projections (``init="random"``).

    Returns:
        A new :class:`AttentionOnlyTransformer` (the original is left alone), in the
        original's dtype, device and training mode.

    Raises:
        ValueError: if ``num_kv_heads`` does not divide the model's key/value heads,
            ``init`` is unknown, or ``seed`` is negative.
        TypeError: if ``model`` is not an :class:`AttentionOnlyTransformer`, or
            ``num_kv_heads`` or ``seed`` is not an int.
    """
    if not isinstance(model, AttentionOnlyTransformer):
        raise TypeError(f"model must be an AttentionOnlyTransformer; got {type(model).__name__}")
    if init not in ("mean", "random"):
        raise ValueError(f"init must be 'mean' or 'random'; got init={init!r}")
    _validate.check_seed("seed", seed)
    converted = []
    for i, layer in enumerate(model.layers):
        p = mean_pool_kv_heads(layer.params().map(torch.Tensor.detach), num_kv_heads)
        if init == "random":
            fresh = init_params(
                p.d_model,
                p.num_heads,
                num_kv_heads=num_kv_heads,
                bias=p.b_qkv is not None,
                seed=_layer_seed(seed, i),
            ).to_torch(p.dtype, p.w_qkv.device)
            kv = slice(p.d_model, None)  # the key and value columns
            w_qkv = p.w_qkv.clone()
            w_qkv[:, kv] = fresh.w_qkv[:, kv]
            b_qkv = None if p.b_qkv is None else p.b_qkv.clone()
            if b_qkv is not None:
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
        TypeError: as :meth:`AttentionOnlyTransformer.forward`.
    """
    paths = tuple(paths)
    unknown = [p for p in paths if p not in PATHS]
    if unknown:
        raise ValueError(f"paths must be drawn from {PATHS}; got {unknown}")
    if replacement not in ("zero", "mean"):
        raise ValueError(f"replacement must be 'zero' or 'mean'; got replacement={replacement!r}")
    off = sorted(set(off))
    head_gates(model.num_layers, model.num_heads, off)  # checks every pair
    model._check(tokens, None)
    L = tokens.shape[1]
    mask = torch_backend.causal_mask(L)  # (L, L)
    means = {}
    if replacement == "mean":
        x = model.embed[tokens] + model.pos[:L]  # (B, L) -> (B, L, D)
        for i, layer in enumerate(model.layers):
            params = layer.params()
            terms, _ = _head_terms(x, x, x, params, mask)  # (B, H, L, D)
            means.update({(i, h): terms[:, h].mean(dim=0) for j, h in off if j == i})  # (L, D)
            x = x + terms.sum(dim=1) + (0.0 if params.b_o is None else params.b_o)
    x = model.embed[tokens] + model.pos[:L]  # (B, L) -> (B, L, D)
    removed = torch.zeros_like(x)  # the removed terms minus their replacements, (B, L, D)
    weights = []
    for i, layer in enumerate(model.layers):
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
    """:func:`segment_losses` of the model under :func:`path_ablation`.

    Args:
        model: the model.
        batch: the data.
        off: ``(layer, head)`` pairs whose term is removed.
        paths: a subset of :data:`PATHS`.
        replacement: ``"zero"`` or ``"mean"``.

    Returns:
        ``{"first": ..., "repeat": ..., "all": ...}`` as :func:`segment_losses`.

    Raises:
        ValueError, TypeError: as :func:`path_ablation`.
    """
    logits, _ = path_ablation(model, batch.tokens, off, paths, replacement=replacement)
    return _split_losses(logits, batch)


def single_ablation_losses(
    model: AttentionOnlyTransformer, batch: RepeatedSegments, part: str = "all"
) -> np.ndarray:
    """The loss with each head removed alone (gate 0), for every head.

    Args:
        model: the model.
        batch: the data.
        part: ``"all"``, ``"first"`` or ``"repeat"`` (see :func:`segment_losses`).

    Shape:
        Returns ``(num_layers, H)``.

    Returns:
        ``losses[layer, h]``: :func:`ablation_loss` with ``(layer, h)`` removed.

    Raises:
        ValueError: as :func:`ablation_loss`.
    """
    return np.array(
        [
            [ablation_loss(model, batch, [(i, h)], part) for h in range(model.num_heads)]
            for i in range(model.num_layers)
        ]
    )


def seen_guess_loss(batch: RepeatedSegments) -> float:
    """The loss on the repeats of a uniform guess among the distinct tokens seen so far.

    At a repeated position every token of the prefix and of the segment has been seen
    (``start + period`` distinct tokens), and the next token is one of them, so a model
    that knows only *which* tokens occurred, not where, loses ``log(start + period)``
    there. Averaged over the query positions that :func:`segment_losses` counts as
    ``"repeat"``.

    Args:
        batch: the data.

    Returns:
        The mean loss in nats, a ``float``.

    Raises:
        ValueError: if no position before the last is repeated.
    """
    rep = batch.repeated[:, :-1]  # (B, L - 1): the query positions with a next token
    if not rep.any():
        raise ValueError("batch must have a repeated position before the last; got none")
    seen = (batch.start + batch.period).double()  # (B,)
    per_query = torch.log(seen)[:, None].expand(rep.shape)  # (B, L - 1)
    return float(per_query[rep].mean())


def phase_timing(history: TrainHistory, level: float = 0.5) -> dict[str, float]:
    """When the previous-token and induction roles appear in a two-layer run, and the plateau.

    Read off the recorded curves with :func:`first_step_above` (so to the resolution of
    ``eval_every`` steps):

    - ``"prev"``: the first step at which a layer-1 head's previous-token score (code
      layer 0) exceeds ``level``;
    - ``"ind"``: the same for a layer-2 head's induction score (code layer 1);
    - ``"loss"``: the first step at which the loss on the repeats is below half its
      initial value;
    - ``"plateau"``: the first step at which any head of either layer scores above 0.3 on
      either score (the end of the plateau);
    - ``"rise"``: the steps the best layer-2 induction score takes from its last
      recording below 0.2 to its first above 0.8;
    - ``"start"`` and ``"plateau_loss"``: the loss on the repeats at step 0 and at the last
      recording before the plateau ends.

    Args:
        history: the run's :class:`TrainHistory` (two or more layers).
        level: the threshold of ``"prev"`` and ``"ind"``.

    Returns:
        The steps (``int``) and losses (``float``) named above.

    Raises:
        ValueError: if the model has fewer than two layers, or a curve never crosses
            its level (the role did not appear).
    """
    h = history
    if h.previous_token.ndim != 3 or h.previous_token.shape[1] < 2:
        raise ValueError(
            f"history must come from a model with at least two layers; got scores of shape "
            f"{h.previous_token.shape}"
        )
    prev0 = h.previous_token[:, 0].max(axis=1)  # (E,): the best first-layer score
    ind1 = h.induction[:, 1].max(axis=1)  # (E,): the best second-layer score
    any_score = np.maximum(h.previous_token.max(axis=(1, 2)), h.induction.max(axis=(1, 2)))
    plateau = first_step_above(h.step, any_score, 0.3)
    rise_end = first_step_above(h.step, ind1, 0.8)
    below = (h.step < rise_end) & (ind1 < 0.2)
    rise_start = int(h.step[below].max()) if below.any() else int(h.step[0])
    return {
        "prev": first_step_above(h.step, prev0, level),
        "ind": first_step_above(h.step, ind1, level),
        "loss": first_step_above(h.step, -h.repeat_loss, -0.5 * h.repeat_loss[0]),
        "plateau": plateau,
        "rise": rise_end - rise_start,
        "start": float(h.repeat_loss[0]),
        "plateau_loss": float(h.repeat_loss[h.step < plateau][-1]),
    }


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
        ValueError: if ``batches`` is empty.
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
