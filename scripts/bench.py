"""Speed and memory of mha's implementations, as ratios against torch.nn.MultiheadAttention.

Run it with ``make bench`` (or ``.venv/bin/python scripts/bench.py``). Everything is timed in
this one process, on the same inputs, in interleaved rounds
(``mha.cost.measure.interleaved_times``);
each ratio is the median over rounds of the time against the reference's time in the same
round, so the ratios compare like with like on whatever machine runs it. Default shape:
(B, L=S, D, H) = (4, 512, 512, 8), float32, self-attention, no mask.

Three references, all ``nn.MultiheadAttention`` on the same weights: the module as it is
called in training (training state, autograd on) without weights (``need_weights=False``);
the same module returning its weights per head (``need_weights=True``, its default, with
``average_attn_weights=False``, so that it returns the ``(B, H, L, S)`` weights mha's weights
path returns); and its native inference path (eval state, under ``torch.inference_mode``: one
fused native operator). Targets:

- PyTorch fast path (``need_weights=False``): <= 1.0x the module called by default, and
  <= 0.85x its native inference path. At the default shape both run the same three
  kernels (the packed projection, ``scaled_dot_product_attention``, the output projection).
- PyTorch path that returns the weights: <= 1.1x the module returning its weights. Its
  ratio to the module without weights is printed too: there the reference skips the
  ``(B, H, L, S)`` weights that this path must write and return.
- NumPy reference: <= 1.5x the native inference path.
- Peak extra memory of the fast path at (1, 4096, 512, 8) below one (B, H, L, S) float32
  score tensor (``mha.cost.peak_memory.attention_peak_memory``, in a child process).

GFLOP/s count the matrix products of one forward (``mha.cost.arithmetic.attention_flops``) and are
shown as a share of the best rate of a float32 square matmul at 1024, 2048 and 4096, timed in the
same rounds.
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

import mha
from mha.backends import np_backend, torch_backend
from mha.cost import arithmetic, measure, peak_memory

REF = "nn.MultiheadAttention"
REF_WEIGHTS = "nn.MultiheadAttention weights"
REF_NATIVE = "nn.MultiheadAttention native"
REF_COLUMNS = {REF: "ratio", REF_WEIGHTS: "weights", REF_NATIVE: "native"}
# implementation -> [(reference, largest allowed time ratio)]
TARGETS = {
    "mha torch fast path": [(REF, 1.0), (REF_NATIVE, 0.85)],
    "mha torch with weights": [(REF_WEIGHTS, 1.1)],
    "mha numpy": [(REF_NATIVE, 1.5)],
}
PEAK_SIZES = (1024, 2048, 4096)


def _inference(fn: Callable[[], Any]) -> Callable[[], Any]:
    def run() -> Any:
        with torch.inference_mode():
            return fn()

    return run


def implementations(B: int, L: int, D: int, H: int) -> dict[str, Callable[[], Any]]:
    """Each implementation at (B, L=S, D, H), float32 self-attention, as a callable.

    ``nn.MultiheadAttention`` is there three times: in training state with autograd on,
    without weights and with its weights per head, and in eval state under
    ``torch.inference_mode()``, where PyTorch runs its native fused path. mha's PyTorch
    functions run under inference mode.
    """
    params = mha.init_params(D, H, seed=0, dtype=np.float32)
    x_np = np.random.default_rng(0).standard_normal((B, L, D)).astype(np.float32)
    x = torch.from_numpy(x_np)
    p_t = params.to_torch()
    ref = mha.to_torch_mha(params)
    ref_eval = mha.to_torch_mha(params).eval()
    mha_torch = torch_backend.multi_head_attention
    return {
        REF: lambda: ref(x, x, x, need_weights=False),
        REF_WEIGHTS: lambda: ref(x, x, x, need_weights=True, average_attn_weights=False),
        REF_NATIVE: _inference(lambda: ref_eval(x, x, x, need_weights=False)),
        "mha torch fast path": _inference(
            lambda: mha_torch(x, x, x, p_t, form="packed", need_weights=False)
        ),
        "mha torch with weights": _inference(lambda: mha_torch(x, x, x, p_t, form="packed")),
        "mha numpy": lambda: np_backend.multi_head_attention(
            x_np, x_np, x_np, params, form="packed"
        ),
    }


def matmuls(sizes: tuple[int, ...]) -> dict[int, Callable[[], Any]]:
    """A float32 ``(n, n) @ (n, n)`` product for each size, under inference mode."""
    gen = torch.Generator().manual_seed(0)
    operands = {n: torch.randn(n, n, generator=gen) for n in sizes}
    return {n: _inference(lambda a=a: a @ a) for n, a in operands.items()}


def per_round_ratio(times: dict[str, list[float]], name: str, ref: str) -> float:
    """Median over rounds of ``name``'s time divided by ``ref``'s time in the same round."""
    return statistics.median(t / r for t, r in zip(times[name], times[ref], strict=True))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--q-len", type=int, default=512)
    parser.add_argument("--d-model", type=int, default=512)
    parser.add_argument("--num-heads", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--memory-len", type=int, default=4096)
    parser.add_argument(
        "--peak-sizes", type=int, nargs="+", default=list(PEAK_SIZES), help="matmul sizes n"
    )
    args = parser.parse_args()
    B, L, D, H = args.batch_size, args.q_len, args.d_model, args.num_heads

    print(f"torch {torch.__version__}, numpy {np.__version__}, threads {torch.get_num_threads()}")
    print(f"shape (B, L=S, D, H) = ({B}, {L}, {D}, {H}), float32, median of {args.repeats}")
    fns = implementations(B, L, D, H)
    peak_fns = {f"matmul {n}^3": fn for n, fn in matmuls(tuple(args.peak_sizes)).items()}
    times = measure.interleaved_times(fns | peak_fns, args.repeats, warmup=2)
    rates = {
        n: arithmetic.matmul_flops(n, n, n) / statistics.median(times[f"matmul {n}^3"])
        for n in args.peak_sizes
    }
    best_n = max(rates, key=rates.get)
    peak = rates[best_n]
    flops = arithmetic.attention_flops(B, L, L, D, H).matmul

    head = ("implementation", "ms", *REF_COLUMNS.values(), "GFLOP/s", "share", "targets")
    print("{:30s} {:>8s} {:>6s} {:>7s} {:>7s} {:>8s} {:>6s}  {}".format(*head))
    for name in fns:
        sec = statistics.median(times[name])
        ratio = {ref: per_round_ratio(times, name, ref) for ref in REF_COLUMNS}
        marks = [
            f"{REF_COLUMNS[ref]}<={limit:.2f} " + ("ok" if ratio[ref] <= limit else "MISS")
            for ref, limit in TARGETS.get(name, [])
        ]
        rate = flops / sec
        print(
            f"{name:30s} {1e3 * sec:8.2f} {ratio[REF]:6.2f} {ratio[REF_WEIGHTS]:7.2f} "
            f"{ratio[REF_NATIVE]:7.2f} {rate / 1e9:8.1f} {rate / peak:6.0%}  {', '.join(marks)}"
        )
    print(
        f"ratio: median over rounds of time / {REF}'s time in the same round (the module in\n"
        "  training state, autograd on, need_weights=False);\n"
        "weights: the same against the module returning its weights per head\n"
        "  (need_weights=True, average_attn_weights=False);\n"
        f"native: the same against {REF} in eval state under inference_mode (PyTorch's\n"
        "  fused native path);\n"
        "share: GFLOP/s of the forward's matrix products as a share of the best float32\n"
        "  square matmul timed in the same rounds: "
        + ", ".join(f"{n}^3 {r / 1e9:.1f}" for n, r in rates.items())
        + f" GFLOP/s (peak {peak / 1e9:.1f} GFLOP/s at {best_n})"
    )

    M = args.memory_len
    (extra,) = peak_memory.attention_peak_memory(
        1, [M], D, H, paths=("sdpa",), threads=torch.get_num_threads()
    )["sdpa"]
    score_bytes = arithmetic.score_tensor_bytes(1, M, M, H)
    verdict = "ok" if extra < score_bytes else "MISS"
    print(
        f"peak extra memory of the fast path at (1, {M}, {D}, {H}): {extra / 2**20:.1f} MiB; "
        f"one (B, H, L, S) float32 score tensor: {score_bytes / 2**20:.0f} MiB "
        f"(ratio {extra / score_bytes:.3f}, {verdict})"
    )


if __name__ == "__main__":
    main()
