"""Speed and memory of mha's implementations, as ratios against torch.nn.MultiheadAttention.

Run it with ``make bench`` (or ``.venv/bin/python scripts/bench.py``). Everything is timed in
this one process, on the same inputs, in interleaved rounds; each ratio is the median over
rounds of the time against nn.MultiheadAttention's time in the same round, so the ratios
compare like with like on whatever machine runs it. Default shape:
(B, L=S, D, H) = (4, 512, 512, 8), float32, self-attention, no mask. Targets (issue "Performance"):

- PyTorch fast path (no weights): <= 0.75x nn.MultiheadAttention; with weights: <= 1.0x.
- NumPy reference: <= 1.5x nn.MultiheadAttention.
- Peak extra memory of the fast path at (1, 4096, 512, 8) below one (B, H, L, S) float32
  score tensor (measured in a child process, from the resident-set high-water mark reset
  just before the call).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import statistics
import time

import numpy as np
import torch

import mha
from mha import cost, np_backend, torch_backend

REF = "nn.MultiheadAttention"
REF_NATIVE = "nn.MultiheadAttention native"


def interleaved_times(fns: dict[str, object], repeats: int, warmup: int = 2) -> dict[str, list]:
    """Wall times of each ``fn()``, run in turn within each round, ``repeats`` rounds.

    Interleaving means a change of machine load during the run hits every implementation
    alike, so per-round ratios stay meaningful on a shared machine.
    """
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    times = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    return times


def mha_matmul_flops(B: int, L: int, S: int, D: int) -> int:
    """Matmul FLOPs of one MHA forward (multiply-add = 2): projections, scores, mix, output."""
    return 2 * B * (L * D * D + 2 * S * D * D + L * S * D + L * S * D + L * D * D)


def _inference(fn):
    def run():
        with torch.inference_mode():
            return fn()

    return run


def time_forward(B: int, L: int, D: int, H: int, repeats: int) -> dict[str, list]:
    """Wall times of each implementation at (B, L=S, D, H), float32 self-attention.

    ``nn.MultiheadAttention`` is timed twice: as a module is called by default (training
    state, autograd on), and in eval state under ``torch.inference_mode()``, where PyTorch
    runs its native fused fast path. mha's functions are timed under inference mode too.
    """
    params = mha.init_params(D, H, seed=0, dtype=np.float32)
    x_np = np.random.default_rng(0).standard_normal((B, L, D)).astype(np.float32)
    x = torch.from_numpy(x_np)
    p_t = params.to_torch()
    ref = mha.to_torch_mha(params)
    ref_eval = mha.to_torch_mha(params).eval()
    a = torch.randn(2048, 2048)
    return interleaved_times(
        {
            REF: lambda: ref(x, x, x, need_weights=False),
            REF_NATIVE: _inference(lambda: ref_eval(x, x, x, need_weights=False)),
            "mha torch fast path": _inference(
                lambda: torch_backend.multi_head_attention(
                    x, x, x, p_t, form="packed", need_weights=False
                )
            ),
            "mha torch with weights": _inference(
                lambda: torch_backend.multi_head_attention(x, x, x, p_t, form="packed")
            ),
            "mha numpy": lambda: np_backend.multi_head_attention(
                x_np, x_np, x_np, params, form="packed"
            ),
            "matmul 2048^3": _inference(lambda: a @ a),
        },
        repeats,
    )


def _peak_extra_bytes(B: int, L: int, D: int, H: int, queue) -> None:
    torch.set_grad_enabled(False)
    params = mha.init_params(D, H, seed=0, dtype=np.float32).to_torch()
    x = torch.randn(B, L, D)
    queue.put(
        cost.peak_rss_increase(
            lambda: torch_backend.multi_head_attention(
                x, x, x, params, form="packed", need_weights=False
            )
        )
    )


def peak_extra_memory(B: int, L: int, D: int, H: int) -> int:
    """Bytes the fast path adds to resident memory at its peak, in a fresh process.

    :func:`mha.cost.peak_rss_increase` resets the kernel's high-water mark before the
    call, so what the parent process had resident is not counted.
    """
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
    times = time_forward(B, L, D, H, args.repeats)
    targets = {"mha torch fast path": 0.75, "mha torch with weights": 1.0, "mha numpy": 1.5}
    flops = mha_matmul_flops(B, L, L, D)
    matmul_rate = 2 * 2048**3 / statistics.median(times["matmul 2048^3"])
    head = ("implementation", "ms", "ratio", "target", "native", "GFLOP/s", "share")
    print("{:30s} {:>8s} {:>6s} {:>12s} {:>7s} {:>8s} {:>6s}".format(*head))
    for name, ts in times.items():
        if name == "matmul 2048^3":
            continue
        sec = statistics.median(ts)
        ratio = {
            ref: statistics.median(t / r for t, r in zip(ts, times[ref], strict=True))
            for ref in (REF, REF_NATIVE)
        }  # per-round ratios against each reference
        target = targets.get(name)
        mark = ""
        if target is not None:
            mark = f"<={target:.2f} " + ("ok" if ratio[REF] <= target else "MISS")
        rate = flops / sec
        print(
            f"{name:30s} {1e3 * sec:8.2f} {ratio[REF]:6.2f} {mark:>12s} {ratio[REF_NATIVE]:7.2f} "
            f"{rate / 1e9:8.1f} {rate / matmul_rate:6.0%}"
        )
    print(
        f"ratio: median over rounds of time / {REF}'s time in the same round (module called\n"
        "  as by default: training state, autograd on, need_weights=False);\n"
        f"native: the same against {REF} in eval state under inference_mode (PyTorch's\n"
        "  fused native path);\n"
        "share: GFLOP/s of the matmul work as a share of a plain float32 2048^3 matmul "
        f"({matmul_rate / 1e9:.1f} GFLOP/s)"
    )

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
