"""Time a training step of the book's model with and without the checks that read values.

The model and the step are those of ``mha.training.runs.train`` with the book's config
(``TrainConfig()``): a fresh batch of the repeated-segment task, the forward pass, the
next-token loss, its backward pass and an AdamW step, on one thread. With the checks on, every
attention call of the forward reads each of its inputs and parameters once
(``mha.backends.torch_checks.value_checks``); ``train`` switches them off for its steps. Two
copies of the model, one per setting, take their steps in turn
(``mha.cost.measure.interleaved_times``), all in this one process; the ratio on / off is
the median of the per-round ratios. The forward pass alone, the part of the step that the
checks touch, is timed the same way.

Examples::

    .venv/bin/python scripts/bench_checks.py
    .venv/bin/python scripts/bench_checks.py --repeat 41 --clock wall
"""

from __future__ import annotations

import argparse
import statistics

import numpy as np
import torch

from mha.backends import torch_checks
from mha.cost import measure
from mha.models.attention_only import next_token_loss
from mha.training.runs import TrainConfig


def _step(config: TrainConfig, checks: bool):
    """One training step of ``train``'s kind, on a model of its own, with the checks on or off."""
    model = config.model()
    opt = torch.optim.AdamW(model.parameters(), lr=config.lr, weight_decay=config.weight_decay)
    data = np.random.default_rng([config.seed, 1])

    def step() -> float:
        tokens = config.batch(data, config.batch_size).tokens
        with torch_checks.value_checks(checks):
            logits, _ = model(tokens)
            loss = next_token_loss(logits, tokens)
        opt.zero_grad()
        loss.backward()
        value = loss.item()
        opt.step()
        return value

    return step


def _forward(config: TrainConfig, checks: bool):
    """The forward pass of a step alone (recorded for autograd), the part the checks touch."""
    model = config.model()
    tokens = config.batch(np.random.default_rng([config.seed, 1]), config.batch_size).tokens

    def forward() -> torch.Tensor:
        with torch_checks.value_checks(checks):
            return model(tokens)[0]

    return forward


def _report(what: str, times: dict[str, list[float]]) -> None:
    on, off = times["checks on"], times["checks off"]
    ratio = statistics.median(a / b for a, b in zip(on, off, strict=True))
    print(
        f"{what:<14} checks on {statistics.median(on) * 1e3:8.3f} ms, checks off "
        f"{statistics.median(off) * 1e3:8.3f} ms, ratio on / off {ratio:.3f}"
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--repeat", type=int, default=21, help="rounds (each times both)")
    parser.add_argument("--min-time", type=float, default=0.2, help="seconds per timing")
    parser.add_argument("--clock", choices=("cpu", "wall"), default="cpu")
    args = parser.parse_args(argv)

    config = TrainConfig()
    torch.set_num_threads(1)  # as train runs
    print(
        f"the book's model (TrainConfig(): D = {config.d_model}, H = {config.num_heads}, "
        f"{config.num_layers} layers, B = {config.batch_size}, L = {config.seq_len}), "
        f"{args.clock} time, one thread, medians of {args.repeat} interleaved rounds "
        "(the ratio: of the per-round ratios)"
    )
    for what, make in (("training step", _step), ("forward only", _forward)):
        fns = {"checks on": make(config, True), "checks off": make(config, False)}
        _report(
            what,
            measure.interleaved_times(fns, args.repeat, min_time=args.min_time, clock=args.clock),
        )


if __name__ == "__main__":
    main()
