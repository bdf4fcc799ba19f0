"""Training the attention-only transformer on the book's tasks, and keeping runs.

:func:`train` trains one :class:`~mha.models.attention_only.AttentionOnlyTransformer` from a
:class:`TrainConfig` on the repeated-segment task and records a :class:`TrainHistory`;
:func:`train_runs` trains several configs in worker processes; :func:`segment_losses` and
:func:`head_scores` evaluate a model. :func:`phase_timing` reads from a history's curves when
the heads' roles appear, each moment the first recorded step at which a curve crosses a
level (:func:`first_step_above`). :mod:`mha.training.digit_sums` does the same for the
digit-sum task, whose answer needs two reads in one layer (its names are importable from
here too); :func:`train_runs` takes configs of both tasks.

The functions that train or evaluate the model (:func:`train`, :func:`segment_losses` and
the ablation and pruning of :mod:`mha.training.ablation` built on it, :func:`head_scores`) run on
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

import hashlib
import multiprocessing
import os
import pickle
import platform
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, cast
from zipfile import BadZipFile

import numpy as np
import torch

from mha.core._checks import arguments, numpy_arrays
from mha.core._tools import one_thread
from mha.detectors import patterns
from mha.models.attention_only import AttentionOnlyTransformer, next_token_loss
from mha.training import _loop, digit_sums, tasks
from mha.training.tasks import RepeatedSegments

# The digit-sum task lives in mha.training.digit_sums; its names stay importable from here.
DigitSumConfig = digit_sums.DigitSumConfig
DigitSumHistory = digit_sums.DigitSumHistory
answer_loss = digit_sums.answer_loss
digit_sum_scores = digit_sums.digit_sum_scores
train_digit_sums = digit_sums.train_digit_sums


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

    Raises:
        ValueError: as :meth:`mha.models.attention_only.AttentionOnlyTransformer.forward`
            and :func:`mha.models.attention_only.next_token_loss` (a batch with no
            repeated or no first position, NaN in the model).
        TypeError: if ``model`` or ``batch`` is of another kind, or as the model's forward.
    """
    _check_model_and_batch(model, batch)
    with torch.no_grad():
        logits, _ = model(batch.tokens, gates)
    return split_losses(logits, batch)


def _check_model_and_batch(model: AttentionOnlyTransformer, batch: RepeatedSegments) -> None:
    arguments.instance("model", model, AttentionOnlyTransformer, "an AttentionOnlyTransformer")
    arguments.instance("batch", batch, RepeatedSegments, "a RepeatedSegments batch")


def split_losses(logits: torch.Tensor, batch: RepeatedSegments) -> dict[str, float]:
    """The next-token losses of ``logits`` on the first and the repeated positions of ``batch``.

    Args:
        logits: the model's logits on ``batch.tokens``.
        batch: the data.

    Shape:
        logits ``(B, L, V)``.

    Returns:
        ``{"first": ..., "repeat": ..., "all": ...}``, as :func:`segment_losses` gives them.

    Raises:
        ValueError, TypeError: as :func:`mha.models.attention_only.next_token_loss`.
        TypeError: if ``batch`` is not a :class:`~mha.training.tasks.RepeatedSegments`.
    """
    arguments.instance("batch", batch, RepeatedSegments, "a RepeatedSegments batch")
    rep = batch.repeated  # (B, L)
    return {
        "first": float(next_token_loss(logits, batch.tokens, ~rep)),
        "repeat": float(next_token_loss(logits, batch.tokens, rep)),
        "all": float(next_token_loss(logits, batch.tokens)),
    }


@dataclass(frozen=True)
class _SegmentFields:
    """The repeated-segment task's own fields, the first of :class:`TrainConfig`'s."""

    vocab_size: int = 64
    seq_len: int = 32
    min_period: int = 8
    max_period: int = 16
    prefix_prob: float = 0.5


@dataclass(frozen=True)
class TrainConfig(_loop.TrainingFields, _SegmentFields):
    """Everything that determines a training run (same config, same run).

    Data: :func:`mha.training.tasks.repeated_segments` with this config's sizes, a fresh batch per
    step from a generator seeded with ``(seed, 1)``; the evaluation batch comes from
    ``(seed, 2)``. Model: :class:`mha.models.attention_only.AttentionOnlyTransformer` seeded with
    ``seed``. Optimiser: AdamW with constant learning rate ``lr``.

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
        ValueError: if a size or count is not positive, the periods do not satisfy
            ``min_period <= max_period <= seq_len // 2``, ``vocab_size < seq_len -
            min_period``, H does not divide D, ``prefix_prob`` is outside ``[0, 1]``,
            ``lr`` is not positive and finite, ``weight_decay`` is negative or not finite,
            or ``seed`` is not in ``[0, 2**64)``.
        TypeError: if a size, count or ``seed`` is not an int (a Python or NumPy integer,
            kept as a Python ``int``; not a bool), or a rate is not a real number.
    """

    def __post_init__(self) -> None:
        self._check_counts("vocab_size", "seq_len", "min_period", "max_period")
        if not self.min_period <= self.max_period <= self.seq_len // 2:
            raise ValueError(
                "periods must satisfy min_period <= max_period <= seq_len // 2; got "
                f"min_period={self.min_period}, max_period={self.max_period}, "
                f"seq_len={self.seq_len}"
            )
        if self.vocab_size < self.seq_len - self.min_period:
            raise ValueError(
                "vocab_size must be at least seq_len - min_period (distinct tokens); got "
                f"vocab_size={self.vocab_size}, seq_len={self.seq_len}, "
                f"min_period={self.min_period}"
            )
        prefix_prob = arguments.number("prefix_prob", self.prefix_prob, low=0.0, high=1.0)
        object.__setattr__(self, "prefix_prob", prefix_prob)
        self._check_rates()

    def model(self) -> AttentionOnlyTransformer:
        """The model at initialisation.

        Returns:
            A new :class:`mha.models.attention_only.AttentionOnlyTransformer` with this config's
            sizes and seed.
        """
        return _loop.new_model(self)

    def batch(self, rng: np.random.Generator | int, batch_size: int) -> RepeatedSegments:
        """A batch of the task with this config's sizes.

        Args:
            rng: a NumPy generator, or a seed for one.
            batch_size: number of sequences.

        Returns:
            A :class:`mha.training.tasks.RepeatedSegments` batch.

        Raises:
            ValueError, TypeError: as :func:`mha.training.tasks.repeated_segments` (a
                ``batch_size`` or seed that is not a positive or non-negative int).
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
        :func:`mha.detectors.patterns.previous_token_score` averaged over the batch, and
        :func:`mha.detectors.patterns.induction_score`.

    Raises:
        ValueError: if the batch has no repeated token, or as the model's forward.
        TypeError: if ``model`` or ``batch`` is of another kind.
    """
    _check_model_and_batch(model, batch)
    with torch.no_grad():
        _, weights = model(batch.tokens, need_weights=True)
    return _scores(weights, batch)


def _scores(weights: list[torch.Tensor], batch: RepeatedSegments) -> dict[str, np.ndarray]:
    w = np.stack([x.numpy() for x in weights], axis=1)  # (B, layers, H, L, L)
    return {
        "previous_token": patterns.previous_token_score(w).mean(axis=0),  # (layers, H)
        "induction": patterns.induction_score(w, batch.tokens),  # (layers, H)
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
    (:func:`mha.backends.torch_checks.value_checks`): their inputs are the model's own
    embeddings and weights, and the loss, read once per step, is checked instead; NaN or
    infinity anywhere in the model reaches it. The measurements run with the checks on.

    Args:
        config: everything that determines the run.
        model: a model to continue training (a copy is trained; this one is left alone),
            e.g. one converted by :func:`mha.training.ablation.with_kv_heads`; ``None`` starts from
            ``config.model()``. The data still come from ``config``'s seed.

    Returns:
        The trained model and its :class:`TrainHistory`.

    Raises:
        TypeError: if ``config`` is not a :class:`TrainConfig` or ``model`` is not an
            :class:`mha.models.attention_only.AttentionOnlyTransformer`.
        ValueError: if a training step's loss, or a measurement, meets NaN or infinity
            (training diverged).
    """
    arguments.instance("config", config, TrainConfig, "a TrainConfig")

    def measures(
        logits: torch.Tensor, weights: list[torch.Tensor], batch: RepeatedSegments
    ) -> dict:
        losses = split_losses(logits, batch)
        first_and_repeat = {"first_loss": losses["first"], "repeat_loss": losses["repeat"]}
        return {**first_and_repeat, **_scores(weights, batch)}

    loss = lambda logits, batch: next_token_loss(logits, batch.tokens)  # noqa: E731
    return _loop.train_and_record(config, model, loss, measures, TrainHistory)


STORE_VARIABLE = "MHA_TRAIN_STORE"
# Environment variables that choose numerical kernels or threads, so that they key a stored run.
_KERNEL_PREFIXES = ("ATEN_", "NPY_", "OPENBLAS_", "MKL_", "OMP_", "KMP_", "DNNL_", "ONEDNN_")
_SOURCE = Path(__file__).resolve().parents[1]  # the package, every subpackage included


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
    if not isinstance(config, TrainConfig | DigitSumConfig):
        raise TypeError(
            f"config must be a TrainConfig or a DigitSumConfig; got {type(config).__name__}"
        )
    digest = hashlib.sha256()
    parts = [
        type(config).__name__,
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
    store: Path, key: str, config: TrainConfig | DigitSumConfig
) -> tuple[AttentionOnlyTransformer, TrainHistory | DigitSumHistory] | None:
    """The stored run under ``key``, or ``None`` if there is none (or it cannot be read)."""
    weights, arrays = _stored_paths(store, key)
    if not (weights.is_file() and arrays.is_file()):
        return None
    kind = DigitSumHistory if isinstance(config, DigitSumConfig) else TrainHistory
    try:
        model = config.model()
        model.load_state_dict(torch.load(weights, weights_only=True))
        with np.load(arrays, allow_pickle=False) as saved:
            history = kind(
                **{f.name: saved[f.name] for f in fields(kind) if f.name != "cpu_seconds"},
                cpu_seconds=float(saved["cpu_seconds"]),
            )
    except (OSError, RuntimeError, KeyError, ValueError, pickle.UnpicklingError, BadZipFile):
        return None  # unreadable or from another layout: train again
    return model, history


def _store_run(
    store: Path, key: str, run: tuple[AttentionOnlyTransformer, TrainHistory | DigitSumHistory]
) -> None:
    """Write ``run`` under ``key`` (each file written whole, then renamed into place)."""
    model, history = run
    store.mkdir(parents=True, exist_ok=True)
    weights, arrays = _stored_paths(store, key)
    partial = store / f"{key}.{os.getpid()}.partial"
    torch.save(model.state_dict(), partial)
    os.replace(partial, weights)
    with open(partial, "wb") as out:
        arrays_of: dict[str, Any] = {  # Any: np.savez's keywords include allow_pickle
            f.name: np.asarray(getattr(history, f.name)) for f in fields(history)
        }
        np.savez(out, **arrays_of)
    os.replace(partial, arrays)


def train_runs(
    configs: Sequence[TrainConfig | DigitSumConfig],
    processes: int | None = None,
    *,
    models: Sequence[AttentionOnlyTransformer | None] | None = None,
    store: str | os.PathLike[str] | None = None,
) -> list[tuple[AttentionOnlyTransformer, TrainHistory | DigitSumHistory]]:
    """:func:`train` every config, in parallel worker processes, results in config order.

    A :class:`DigitSumConfig` is trained by :func:`train_digit_sums` instead, so the runs
    of both tasks can share one pool of workers.

    Each run is :func:`train` on one thread in its own process, so a run's result is the
    one :func:`train` gives in this process on this machine. Claims about training are
    claims about the method, checked over several seeds: this runs those seeds side by
    side, one per CPU core. The workers are spawned, so in a script call this under
    ``if __name__ == "__main__":`` (a notebook needs nothing).

    Args:
        configs: the runs, e.g. one :class:`TrainConfig` (or :class:`DigitSumConfig`) per seed.
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
            ``processes`` is not positive. A refused call trains and stores nothing.
        TypeError: if ``configs`` or ``models`` is not a list or tuple, a config is neither
            a :class:`TrainConfig` nor a :class:`DigitSumConfig`, a model is neither
            ``None`` nor an :class:`~mha.models.attention_only.AttentionOnlyTransformer`,
            ``processes`` is not an int, or ``store`` is not a path.
    """
    configs = arguments.items("configs", configs)
    if not configs:
        raise ValueError("configs must hold at least one TrainConfig; got none")
    for i, config in enumerate(configs):
        arguments.instance(
            f"configs[{i}]",
            config,
            (TrainConfig, DigitSumConfig),
            "a TrainConfig or a DigitSumConfig",
        )
    models = [None] * len(configs) if models is None else arguments.items("models", models)
    if len(models) != len(configs):
        raise ValueError(
            f"models must give one model (or None) per config; got {len(models)} for "
            f"{len(configs)} configs"
        )
    for i, model in enumerate(models):
        if model is not None:
            arguments.instance(
                f"models[{i}]", model, AttentionOnlyTransformer, "an AttentionOnlyTransformer"
            )
    if processes is not None:
        processes = arguments.size("processes", processes)
    if store is not None and not isinstance(store, str | os.PathLike):
        raise TypeError(
            f"store must be a path (str or os.PathLike); got {arguments.describe(store)}"
        )
    if store is None and os.environ.get(STORE_VARIABLE):
        store = os.environ[STORE_VARIABLE]
    folder = None if store is None else Path(store)
    pairs = zip(configs, models, strict=True)
    keys = [run_key(c) if folder and m is None else None for c, m in pairs]  # stored if fresh
    runs = [
        _load_run(folder, k, c) if folder and k else None
        for k, c in zip(keys, configs, strict=True)
    ]
    todo = [i for i, run in enumerate(runs) if run is None]
    trained = _train_all([configs[i] for i in todo], [models[i] for i in todo], processes)
    for i, run in zip(todo, trained, strict=True):
        runs[i] = run
        key = keys[i]
        if folder and key:
            _store_run(folder, key, run)
    return cast(list[tuple[AttentionOnlyTransformer, TrainHistory | DigitSumHistory]], runs)


def _train_all(
    configs: list[TrainConfig | DigitSumConfig],
    models: list[AttentionOnlyTransformer | None],
    processes: int | None,
) -> list[tuple[AttentionOnlyTransformer, TrainHistory | DigitSumHistory]]:
    """:func:`train` every config, ``processes`` at a time (one per core, at most one per run)."""
    if not configs:
        return []
    if processes is None:
        processes = min(len(configs), os.cpu_count() or 1)
    if processes == 1:
        return [_train_any(config, model) for config, model in zip(configs, models, strict=True)]
    # Workers are spawned (a fresh interpreter each), never forked from a process whose
    # torch thread pool is already running.
    spawn = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=processes, mp_context=spawn) as pool:
        return list(pool.map(_train_any, configs, models))


def _train_any(
    config: TrainConfig | DigitSumConfig, model: AttentionOnlyTransformer | None
) -> tuple[AttentionOnlyTransformer, TrainHistory | DigitSumHistory]:
    """:func:`train` or :func:`train_digit_sums`, by the kind of ``config``."""
    if isinstance(config, DigitSumConfig):
        return train_digit_sums(config, model)
    return train(config, model)


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
        ValueError: if the shapes differ, ``values`` or ``level`` is not finite, or no
            value exceeds ``level``.
        TypeError: if ``steps`` is not an integer array, ``values`` not numeric, or
            ``level`` not a real number.
    """
    steps = numpy_arrays.int_array("steps", steps, ndim=1, layout="(E,)")
    values = numpy_arrays.float_array("values", values)
    level = arguments.number("level", level)
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
        ValueError: if the model has fewer than two layers, ``level`` is not finite, or a
            curve never crosses its level (the role did not appear).
        TypeError: if ``history`` is not a :class:`TrainHistory` or ``level`` not a real
            number.
    """
    h = arguments.instance("history", history, TrainHistory, "a TrainHistory")
    level = arguments.number("level", level)
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
