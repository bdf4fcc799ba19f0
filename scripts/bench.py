"""Speed and memory of mha's implementations, as ratios against torch.nn.MultiheadAttention.

Run it with ``make bench`` (or ``.venv/bin/python scripts/bench.py``). Everything is timed in
this one process, on the same inputs, as the median of repeated runs, so the ratios compare
like with like on whatever machine runs it. Default shape: (B, L=S, D, H) = (4, 512, 512, 8),
float32, self-attention, no mask. Targets (issue "Performance"):

- PyTorch fast path (no weights): <= 0.75x nn.MultiheadAttention; with weights: <= 1.0x.
- NumPy reference: <= 1.5x nn.MultiheadAttention.
- Peak extra memory of the fast path at (1, 4096, 512, 8) below one (B, H, L, S) float32
  score tensor (measured in a child process from its resident-set high-water mark).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import resource
import statistics
import time

import numpy as np
import torch

import mha
from mha import np_backend, torch_backend


def median_time(fn, repeats: int, warmup: int = 2) -> float:
    """Median wall time of ``fn()`` in seconds over ``repeats`` runs, after ``warmup`` runs."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def mha_matmul_flops(B: int, L: int, S: int, D: int) -> int:
    """Matmul FLOPs of one MHA forward (multiply-add = 2): projections, scores, mix, output."""
    return 2 * B * (L * D * D + 2 * S * D * D + L * S * D + L * S * D + L * D * D)


def time_forward(B: int, L: int, D: int, H: int, repeats: int) -> dict[str, float]:
    """Median seconds of each implementation at (B, L=S, D, H), float32 self-attention."""
    params = mha.init_params(D, H, seed=0, dtype=np.float32)
    x_np = np.random.default_rng(0).standard_normal((B, L, D)).astype(np.float32)
    x = torch.from_numpy(x_np)
    p_t = params.to_torch()
    ref = mha.to_torch_mha(params).eval()
    out = {}
    with torch.inference_mode():
        out["nn.MultiheadAttention"] = median_time(
            lambda: ref(x, x, x, need_weights=False), repeats
        )
        out["mha torch fast path"] = median_time(
            lambda: torch_backend.multi_head_attention(
                x, x, x, p_t, form="packed", need_weights=False
            ),
            repeats,
        )
        out["mha torch with weights"] = median_time(
            lambda: torch_backend.multi_head_attention(x, x, x, p_t, form="packed"), repeats
        )
    out["mha numpy"] = median_time(
        lambda: np_backend.multi_head_attention(x_np, x_np, x_np, params, form="packed"),
        repeats,
    )
    a = torch.randn(2048, 2048)
    out["matmul 2048^3"] = median_time(lambda: a @ a, repeats)
    return out


def _peak_extra_bytes(B: int, L: int, D: int, H: int, queue) -> None:
    torch.set_grad_enabled(False)
    params = mha.init_params(D, H, seed=0, dtype=np.float32).to_torch()
    x = torch.randn(B, L, D)
    torch_backend.multi_head_attention(x[:, :8], x[:, :8], x[:, :8], params, need_weights=False)
    before = _rss_bytes()
    torch_backend.multi_head_attention(x, x, x, params, form="packed", need_weights=False)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB -> bytes (Linux)
    queue.put(peak - before)


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize()


def peak_extra_memory(B: int, L: int, D: int, H: int) -> int:
    """Bytes the fast path adds to the resident-set high-water mark, in a fresh process."""
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=_peak_extra_bytes, args=(B, L, D, H, queue))
    proc.start()
    extra = queue.get()
    proc.join()
    return extra


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--q-len", type=int, default=512)
    parser.add_argument("--d-model", type=int, default=512)
    parser.add_argument("--num-heads", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--memory-len", type=int, default=4096)
    args = parser.parse_args()
    B, L, D, H = args.batch_size, args.q_len, args.d_model, args.num_heads

    print(f"torch {torch.__version__}, numpy {np.__version__}, threads {torch.get_num_threads()}")
    print(f"shape (B, L=S, D, H) = ({B}, {L}, {D}, {H}), float32, median of {args.repeats}")
    t = time_forward(B, L, D, H, args.repeats)
    ref = t["nn.MultiheadAttention"]
    targets = {"mha torch fast path": 0.75, "mha torch with weights": 1.0, "mha numpy": 1.5}
    print(f"{'implementation':28s} {'ms':>9s} {'ratio':>7s} {'target':>7s} {'GFLOP/s':>8s}")
    flops = mha_matmul_flops(B, L, L, D)
    matmul_rate = 2 * 2048**3 / t["matmul 2048^3"]
    for name, sec in t.items():
        if name == "matmul 2048^3":
            continue
        target = targets.get(name)
        mark = ""
        if target is not None:
            mark = f"<={target:.2f} " + ("ok" if sec / ref <= target else "MISS")
        print(f"{name:28s} {1e3 * sec:9.2f} {sec / ref:7.2f} {mark:>7s} {flops / sec / 1e9:8.1f}")
    print(f"plain float32 matmul 2048^3: {matmul_rate / 1e9:.1f} GFLOP/s")
    for name, sec in t.items():
        if name != "matmul 2048^3":
            print(f"  {name}: {flops / sec / matmul_rate:.0%} of the plain matmul's GFLOP/s")

    M = args.memory_len
    extra = peak_extra_memory(1, M, D, H)
    score_bytes = 1 * H * M * M * 4
    verdict = "ok" if extra < score_bytes else "MISS"
    print(
        f"peak extra memory of the fast path at (1, {M}, {D}, {H}): {extra / 2**20:.1f} MiB; "
        f"one (B, H, L, S) float32 score tensor: {score_bytes / 2**20:.0f} MiB "
        f"(ratio {extra / score_bytes:.3f}, {verdict})"
    )


if __name__ == "__main__":
    main()
