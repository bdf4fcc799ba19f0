"""The training loop, and the config fields and checks, that every task shares.

:class:`TrainingFields` holds the fields of a task's config that size the model and drive the
loop, and checks them; :func:`new_model` builds a config's model. :func:`fit` trains an
:class:`~mha.models.attention_only.AttentionOnlyTransformer` with AdamW on a config's batches
and records measurements of the held-out batch as it goes; :func:`starting_model` picks the
model a run starts from, and :func:`train_and_record` does both and fills the run's history.
The tasks differ only in their own fields, their data, their loss and what they measure
(:mod:`mha.training.runs`, :mod:`mha.training.digit_sums`).
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np
import torch

from mha.backends import torch_checks
from mha.core._checks import arguments
from mha.models.attention_only import AttentionOnlyTransformer

History = TypeVar("History")
# The counts of every config, checked as positive ints after the task's own.
COUNTS = ("d_model", "num_heads", "num_layers", "batch_size", "steps", "eval_every", "eval_size")


@dataclass(frozen=True)
class TrainingFields:
    """The fields of a training config that size the model and drive the loop, and their checks.

    The defaults are those of :class:`mha.training.runs.TrainConfig`, whose docstring
    documents the fields; a task's config may declare a field again with its own default.
    A task's config names this class first among its bases and a dataclass of the task's
    own fields second: a dataclass takes its bases' fields from the last base to the first,
    so the task's fields come first in the constructor, then these. Its ``__post_init__``
    checks its own fields and calls :meth:`_check_counts` and :meth:`_check_rates`.
    """

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

    def _check_counts(self, *own: str) -> None:
        """Check the task's counts ``own``, then :data:`COUNTS` (kept as ints); H must divide D."""
        for name in (*own, *COUNTS):
            object.__setattr__(self, name, arguments.size(name, getattr(self, name)))
        arguments.layer_sizes(self.d_model, self.num_heads)

    def _check_rates(self) -> None:
        """Check ``lr`` and ``weight_decay`` (kept as floats), then ``seed`` (kept as an int)."""
        rates = {
            "lr": arguments.number("lr", self.lr, low=0.0, open_low=True),
            "weight_decay": arguments.number("weight_decay", self.weight_decay, low=0.0),
        }
        for name, value in rates.items():
            object.__setattr__(self, name, value)
        object.__setattr__(self, "seed", arguments.seed("seed", self.seed))


def new_model(config: Any) -> AttentionOnlyTransformer:
    """The model at initialisation: ``config``'s ``vocab_size``, ``seq_len``, sizes and seed."""
    return AttentionOnlyTransformer(
        config.vocab_size,
        config.seq_len,
        config.d_model,
        config.num_heads,
        config.num_layers,
        seed=config.seed,
    )


def starting_model(config: Any, model: AttentionOnlyTransformer | None) -> AttentionOnlyTransformer:
    """A copy of ``model`` to train, or ``config.model()`` when ``model`` is ``None``.

    Raises:
        TypeError: if ``model`` is not ``None`` or an AttentionOnlyTransformer.
    """
    if model is None:
        return config.model()
    arguments.instance("model", model, AttentionOnlyTransformer, "an AttentionOnlyTransformer")
    return copy.deepcopy(model)


def fit(
    model: AttentionOnlyTransformer,
    config: Any,
    loss: Callable[[torch.Tensor, Any], torch.Tensor],
    measures: Callable[[torch.Tensor, list[torch.Tensor], Any], dict[str, Any]],
) -> tuple[np.ndarray, dict[str, list]]:
    """Train ``model`` in place for ``config.steps`` AdamW steps, measuring as it learns.

    A fresh batch per step comes from ``config.batch`` with a generator seeded
    ``(config.seed, 1)``. At step 0, every ``config.eval_every`` steps and after the last step,
    the model's logits and weights on ``config.eval_batch()`` go to ``measures``, with the
    backend's value checks on. The steps run with them off: their inputs are the model's own
    embeddings and weights, and ``loss`` refuses logits or a loss that is not finite instead.

    Args:
        model: the model, trained in place.
        config: a training config: ``steps``, ``eval_every``, ``batch_size``, ``lr``,
            ``weight_decay``, ``seed``, ``batch(rng, size)`` and ``eval_batch()``.
        loss: the differentiable loss of a batch's logits, ``loss(logits, batch)``.
        measures: named measurements of the held-out batch,
            ``measures(logits, weights, batch)``.

    Returns:
        The loss of every step ``(steps,)``, and the log: ``"step"`` and each measurement's
        name, mapped to their values at each evaluation.

    Raises:
        ValueError: if a step's loss, or a measurement, meets NaN or infinity (training
            diverged).
    """
    opt = torch.optim.AdamW(model.parameters(), lr=config.lr, weight_decay=config.weight_decay)
    data = np.random.default_rng([config.seed, 1])
    held_out = config.eval_batch()
    log: dict[str, list] = {"step": []}
    train_loss = np.empty(config.steps)
    for step in range(config.steps + 1):
        try:  # NaN or infinity in the model: its loss (or a measurement) refuses it
            if step % config.eval_every == 0 or step == config.steps:
                with torch.no_grad():
                    logits, weights = model(held_out.tokens, need_weights=True)
                log["step"].append(step)
                for name, value in measures(logits, weights, held_out).items():
                    log.setdefault(name, []).append(value)
            if step == config.steps:
                break
            batch = config.batch(data, config.batch_size)
            with torch_checks.value_checks(False):  # the loss is checked instead
                logits, _ = model(batch.tokens)
            step_loss = loss(logits, batch)
            opt.zero_grad()
            step_loss.backward()
            opt.step()
            train_loss[step] = step_loss.item()
        except ValueError as error:
            raise ValueError(
                f"the training loss must stay finite at step {step} (lr={config.lr}): "
                f"training diverged ({error})"
            ) from None
    return train_loss, log


def train_and_record(
    config: Any,
    model: AttentionOnlyTransformer | None,
    loss: Callable[[torch.Tensor, Any], torch.Tensor],
    measures: Callable[[torch.Tensor, list[torch.Tensor], Any], dict[str, Any]],
    history: Callable[..., History],
) -> tuple[AttentionOnlyTransformer, History]:
    """:func:`fit` a copy of ``model`` (:func:`starting_model`) and record the run's history.

    Args:
        config: the training config, as :func:`fit` reads it, with a ``model()``.
        model: a model to continue training (a copy is trained), or ``None`` for
            ``config.model()``.
        loss: the loss of a batch's logits, as :func:`fit` takes it.
        measures: the measurements, as :func:`fit` takes them, named as ``history``'s fields.
        history: the history's class: it takes ``step``, ``train_loss``, ``cpu_seconds`` and
            each measurement, by name.

    Returns:
        The trained model and its history: each measurement's values stacked along a first
        axis of evaluations, and ``cpu_seconds`` the CPU time of the whole run.

    Raises:
        TypeError, ValueError: as :func:`starting_model` and :func:`fit`.
    """
    start = time.process_time()
    model = starting_model(config, model)
    train_loss, log = fit(model, config, loss, measures)
    recorded = {name: np.stack(values) for name, values in log.items()}
    seconds = time.process_time() - start
    return model, history(train_loss=train_loss, cpu_seconds=seconds, **recorded)
