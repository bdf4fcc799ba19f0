"""The digit-sum task's training: two reads in one layer (:mod:`mha.training.tasks`).

:func:`train_digit_sums` trains one :class:`~mha.models.attention_only.AttentionOnlyTransformer`
from a :class:`DigitSumConfig` with the loop of :func:`mha.training.runs.train` and records a
:class:`DigitSumHistory`; :func:`answer_loss` is its loss and :func:`digit_sum_scores` measures
a model. :func:`mha.training.runs.train_runs` takes these configs too, and keeps their runs.
Like :mod:`mha.training.runs`, the functions that train or evaluate run on one CPU thread.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F

from mha.core._checks import arguments
from mha.core._tools import one_thread
from mha.detectors import patterns
from mha.models.attention_only import AttentionOnlyTransformer
from mha.training import _loop, tasks


@dataclass(frozen=True)
class _DigitSumFields:
    """The digit-sum task's own fields, the first of :class:`DigitSumConfig`'s."""

    base: int = 8
    seq_len: int = 16


@dataclass(frozen=True)
class DigitSumConfig(_loop.TrainingFields, _DigitSumFields):
    """Everything that determines a training run on the digit-sum task (same config, same run).

    The run of a :class:`mha.training.runs.TrainConfig` (its seeds, model and optimiser) on
    :func:`mha.training.tasks.digit_sums` with this config's sizes: the model has one layer
    (``num_layers`` is a field) and ``base ** 2`` token ids, and the loss is the
    cross-entropy of the answer at every position but the first (:func:`answer_loss`).

    Attributes:
        base: the base of the digits; the vocabulary has ``base ** 2`` tokens.
        seq_len: sequence length L.
        d_model, num_heads, num_layers: model width D, heads per layer H, attention blocks.
        batch_size, steps, lr, weight_decay, seed, eval_every, eval_size: the training
            settings, as :class:`mha.training.runs.TrainConfig` describes them.

    Raises:
        ValueError: if a size or count is not positive, ``base`` or ``seq_len`` is below 2
            (or ``base`` above 3,037,000,499, whose ``base ** 2`` ids pass int64), H does not
            divide D, ``lr`` is not positive and finite, ``weight_decay`` is negative or not
            finite, or ``seed`` is not in ``[0, 2**64)``.
        TypeError: if a size, count or ``seed`` is not an int (a Python or NumPy integer,
            kept as a Python ``int``; not a bool), or a rate is not a real number.
    """

    num_heads: int = 2  # the training fields this task sets otherwise
    num_layers: int = 1
    steps: int = 500
    eval_size: int = 256

    def __post_init__(self) -> None:
        object.__setattr__(self, "base", arguments.size("base", self.base, 2, tasks.BASE_LIMIT + 1))
        object.__setattr__(self, "seq_len", arguments.size("seq_len", self.seq_len, 2))
        self._check_counts()
        self._check_rates()

    @property
    def vocab_size(self) -> int:
        """Number of token ids, ``base ** 2``."""
        return self.base**2

    def model(self) -> AttentionOnlyTransformer:
        """The model at initialisation.

        Returns:
            A new :class:`mha.models.attention_only.AttentionOnlyTransformer` with this config's
            sizes and seed.
        """
        return _loop.new_model(self)

    def batch(self, rng: np.random.Generator | int, batch_size: int) -> tasks.DigitSums:
        """A batch of the task with this config's sizes.

        Args:
            rng, batch_size: a NumPy generator (or a seed for one) and the number of
                sequences, as :meth:`mha.training.runs.TrainConfig.batch` takes them.

        Returns:
            A :class:`mha.training.tasks.DigitSums` batch.

        Raises:
            ValueError, TypeError: as :func:`mha.training.tasks.digit_sums` (a
                ``batch_size`` or seed that is not a positive or non-negative int).
        """
        return tasks.digit_sums(batch_size, self.seq_len, self.base, rng=rng)

    def eval_batch(self) -> tasks.DigitSums:
        """The fixed held-out batch, as :meth:`mha.training.runs.TrainConfig.eval_batch` draws it.

        Returns:
            The same :class:`mha.training.tasks.DigitSums` batch on every call, drawn from
            ``(seed, 2)``: the history is measured on it.
        """
        return self.batch(np.random.default_rng([self.seed, 2]), self.eval_size)


@dataclass(frozen=True)
class DigitSumHistory:
    """What was measured while training on the digit-sum task.

    Attributes:
        step, train_loss, cpu_seconds: the evaluation steps, the loss of every training step
            and the CPU time of the whole run, as in :class:`mha.training.runs.TrainHistory`.
        loss: the answer loss on the evaluation batch, at each evaluation.
        accuracy: the share of the evaluation batch's answers that are the model's most
            likely output, at each evaluation.
        previous_token: each head's previous-token score, at each evaluation.
        first_token: each head's first-token score, at each evaluation.

    Shape:
        step, loss and accuracy ``(E,)`` (0 = initialisation); train_loss ``(steps,)``;
        previous_token and first_token ``(E, num_layers, H)``.
    """

    step: np.ndarray
    train_loss: np.ndarray
    loss: np.ndarray
    accuracy: np.ndarray
    previous_token: np.ndarray
    first_token: np.ndarray
    cpu_seconds: float = field(default=0.0)


def answer_loss(logits: torch.Tensor, batch: tasks.DigitSums) -> torch.Tensor:
    """Mean cross-entropy of the digit-sum answers, at every position but the first.

    Args:
        logits: the model's output on ``batch.tokens``.
        batch: the data.

    Shape:
        logits ``(B, L, V)``. Returns a scalar.

    Returns:
        The mean loss, a scalar tensor (differentiable).

    Raises:
        ValueError: if ``logits`` does not have shape ``(B, L, V)`` for the batch's ``(B, L)``,
            has fewer than ``2 * base - 1`` outputs (an answer would have none), holds NaN
            or infinity, or the batch is empty.
        TypeError: if ``logits`` is not a floating torch tensor or ``batch`` not a
            :class:`~mha.training.tasks.DigitSums`.
    """
    arguments.instance("batch", batch, tasks.DigitSums, "a DigitSums batch")
    arguments.torch_tensor("logits", logits)  # floating and finite
    B, L = batch.tokens.shape
    if logits.ndim != 3 or tuple(logits.shape[:2]) != (B, L):
        raise ValueError(
            f"logits must have shape (B, L, V) = ({B}, {L}, V); got {tuple(logits.shape)}"
        )
    V = logits.shape[-1]
    if 2 * batch.base - 1 > V:
        raise ValueError(
            f"logits must have V >= 2 * base - 1 = {2 * batch.base - 1} outputs (the answers "
            f"run from 0 to 2 * (base - 1)); got V={V}"
        )
    if B == 0:
        raise ValueError("batch must hold at least one sequence; got B=0 (no answer to score)")
    return F.cross_entropy(logits[:, 1:].reshape(-1, V), batch.answers[:, 1:].reshape(-1))


@one_thread()
def digit_sum_scores(
    model: AttentionOnlyTransformer, batch: tasks.DigitSums, gates: torch.Tensor | None = None
) -> dict[str, np.ndarray | float]:
    """The answer loss, the accuracy, and each head's previous-token and first-token scores.

    Args:
        model: the model.
        batch: the data.
        gates: head gates ``(num_layers, H)``; ``None`` is the ungated model.

    Shape:
        The scores are ``(num_layers, H)`` arrays.

    Returns:
        ``{"loss", "accuracy"}`` as floats (the accuracy is the share of answers that are
        the model's most likely output), and ``{"previous_token", "first_token"}`` per head
        (:func:`mha.detectors.patterns.previous_token_score` and
        :func:`mha.detectors.patterns.first_token_score`, averaged over the batch).

    Raises:
        ValueError, TypeError: as the model's forward (``gates`` included) and
            :func:`answer_loss`.
        TypeError: if ``model`` or ``batch`` is of another kind.
    """
    arguments.instance("model", model, AttentionOnlyTransformer, "an AttentionOnlyTransformer")
    arguments.instance("batch", batch, tasks.DigitSums, "a DigitSums batch")
    with torch.no_grad():
        logits, weights = model(batch.tokens, gates, need_weights=True)
    return _digit_sum_measures(logits, weights, batch)


def _digit_sum_measures(
    logits: torch.Tensor, weights: list[torch.Tensor], batch: tasks.DigitSums
) -> dict[str, np.ndarray | float]:
    w = np.stack([x.numpy() for x in weights], axis=1)  # (B, layers, H, L, L)
    right = logits[:, 1:].argmax(dim=-1) == batch.answers[:, 1:]  # (B, L - 1)
    return {
        "loss": float(answer_loss(logits, batch)),
        "accuracy": float(right.double().mean()),
        "previous_token": patterns.previous_token_score(w).mean(axis=0),  # (layers, H)
        "first_token": patterns.first_token_score(w).mean(axis=0),  # (layers, H)
    }


@one_thread()
def train_digit_sums(
    config: DigitSumConfig, model: AttentionOnlyTransformer | None = None
) -> tuple[AttentionOnlyTransformer, DigitSumHistory]:
    """Train a model on the digit-sum task, measuring the heads as it learns.

    The loop of :func:`mha.training.runs.train` with the digit-sum task's data and loss: every
    ``eval_every`` steps (and at step 0 and the end) the model is measured on the
    evaluation batch with :func:`digit_sum_scores`. Runs on one CPU thread, with the
    backend's value checks off during the steps and on for the measurements.

    Args:
        config: everything that determines the run.
        model: a model to continue training (a copy is trained); ``None`` starts from
            ``config.model()``.

    Returns:
        The trained model and its :class:`DigitSumHistory`.

    Raises:
        TypeError: if ``config`` is not a :class:`DigitSumConfig` or ``model`` not an
            :class:`mha.models.attention_only.AttentionOnlyTransformer`.
        ValueError: if a training step's loss is NaN or infinite (training diverged).
    """
    arguments.instance("config", config, DigitSumConfig, "a DigitSumConfig")
    return _loop.train_and_record(config, model, answer_loss, _digit_sum_measures, DigitSumHistory)
