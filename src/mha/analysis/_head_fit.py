"""Bias-free heads fitted by Adam to target patterns, all in one batch.

The fits of :func:`mha.analysis.bottleneck.fit_attention` and
:func:`mha.analysis.bottleneck.fit_attention_sweep`. The loss is the squared centred-logit
error of each head's scores against its target's centred logarithm; the heads are
independent, zero-padded to the widest and run together.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from mha.analysis import _targets
from mha.core import _tools
from mha.core._checks import arguments


def fit_heads(
    x: np.ndarray, targets: list[Any], d_heads: list[int], steps: int, lr: float, seed: int
) -> list[tuple[np.ndarray, np.ndarray]]:
    import torch

    N, D = x.shape
    steps = arguments.size("steps", steps)
    d_heads = [arguments.size("d_head", d) for d in d_heads]
    arguments.check_positive_number("lr", lr)
    lr = float(lr)
    seed = arguments.seed("seed", seed)
    logs = [_targets.centred_log("target", t) for t in targets]  # K x (N, N)
    if any(g.shape[0] != N for g in logs):
        shapes = sorted({g.shape for g in logs})
        raise ValueError(f"target must be (N, N) with N = x.shape[0] = {N}; got {shapes}")
    goals = np.stack(logs)  # (K, N, N)
    K, width = len(d_heads), max(d_heads)
    arguments.check_elements("d_head", K * 2 * D * width, 8)
    rng = np.random.default_rng(seed)
    init = np.zeros((K, 2, D, width))
    for i, d in enumerate(d_heads):
        init[i, :, :, :d] = rng.standard_normal((2, D, d)) / np.sqrt(D)
    mask = torch.tensor([[1.0] * d + [0.0] * (width - d) for d in d_heads])  # (K, width)
    scale = torch.tensor([d**-0.5 for d in d_heads], dtype=torch.float64)[:, None, None]
    w = torch.tensor(init, requires_grad=True)  # (K, 2, D, width)
    xt, goal_t = torch.tensor(x, dtype=torch.float64), torch.tensor(goals)
    opt = torch.optim.Adam([w], lr=lr)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=steps)
    with _tools.one_thread():  # tiny matrices: extra threads only add synchronisation
        for _ in range(steps):
            opt.zero_grad()
            q = xt @ (w[:, 0] * mask[:, None, :])  # (K, N, width)
            k = xt @ (w[:, 1] * mask[:, None, :])  # (K, N, width)
            z = q @ k.transpose(1, 2) * scale  # (K, N, N)
            z = z - z.mean(dim=2, keepdim=True)  # Z C
            loss = ((z - goal_t) ** 2).sum()
            loss.backward()
            opt.step()
            schedule.step()
    out = w.detach().numpy()
    if not np.isfinite(out).all():
        raise ValueError(
            f"lr={lr!r} made the fit diverge (its weights are no longer finite); take a smaller lr"
        )
    return [(out[i, 0, :, :d].copy(), out[i, 1, :, :d].copy()) for i, d in enumerate(d_heads)]
