"""Memory and speed of tiled attention and of the backward pass in NumPy, against their targets.

Run it with ``make bench`` (or ``.venv/bin/python scripts/bench_tiled.py``; ``--help`` lists the
options). Each measurement runs in a child process (mha.cost.peak_memory.tiled_peak_memory and
mha.cost.timings.time_tiled): memory from the resident-set high-water mark reset just before the
call, times as medians of interleaved rounds in one process, so ratios compare like with like. The
BLAS of that process runs one thread by default (``--threads``), so that on a busy machine idle
BLAS threads do not slow the many small products of the tiles more than the few large products
of the naive path, and the times are that process's CPU time (``--clock``): on one thread it is
the work done, which the other processes of a shared machine do not change as they change the
wall-clock time. Targets:

- Tiled forward at (B, L=S, D, H) = (1, 8192, 512, 8), float32: peak extra memory at most 1/16 of
  one (B, H, L, S) float32 score tensor (128 MiB), where the naive path needs more than 4 GiB
  (its forward holds one score tensor; a training step that stores the weights holds two).
- At L = 2048 the tiled forward takes at most 2x the naive NumPy forward with the best block
  size (the sweep over block sizes is printed), and its default blocks
  (``tiled.DEFAULT_BLOCK_Q`` x ``tiled.DEFAULT_BLOCK_KV``) at most 1.1x the best of the sweep.
- With ``causal=True`` (the tiles above the diagonal skipped) the tiled forward at the default
  blocks takes at most 0.6x its own time without it, at L = 2048.
- The backward pass in NumPy takes at most 3x its forward at (4, 512, 512, 8).
"""

from __future__ import annotations

import argparse

from mha.backends import tiled
from mha.cost import arithmetic, peak_memory, timings

MIB = 2**20


def parse_blocks(text: str) -> list[tuple[int, int]]:
    """``"64x128,256x512"`` -> ``[(64, 128), (256, 512)]``."""
    return [tuple(int(n) for n in item.split("x")) for item in text.split(",")]


def verdict(ok: bool) -> str:
    return "ok" if ok else "MISS"


def memory(args: argparse.Namespace) -> None:
    B, L, D, H = 1, args.memory_len, args.d_model, args.num_heads
    score = arithmetic.score_tensor_bytes(B, L, L, H)
    paths = ("numpy tiled", "numpy tiled backward", "sdpa")
    if not args.skip_naive_memory:
        paths += ("numpy", "numpy backward")
    peak = {p: b[0] for p, b in peak_memory.tiled_peak_memory(B, [L], D, H, paths=paths).items()}
    print(f"\npeak extra memory at (B, L=S, D, H) = ({B}, {L}, {D}, {H}), float32")
    print(f"  one (B, H, L, S) float32 score tensor: {score / MIB:.0f} MiB")
    print(f"{'path':32s} {'MiB':>9s} {'/ score':>8s} {'target':>12s}")
    for path, extra in peak.items():
        mark = ""
        if path == "numpy tiled":
            mark = f"<=1/16 {verdict(extra <= score / 16)}"
        print(f"{path:32s} {extra / MIB:9.1f} {extra / score:8.3f} {mark:>12s}")
    if not args.skip_naive_memory:
        naive = max(peak["numpy"], peak["numpy backward"])
        print(
            f"naive path needs {naive / 2**30:.2f} GiB at its largest (forward: "
            f"{peak['numpy'] / 2**30:.2f} GiB, forward and backward storing the weights: "
            f"{peak['numpy backward'] / 2**30:.2f} GiB); > 4 GiB {verdict(naive > 4 * 2**30)}"
        )


def speed(args: argparse.Namespace) -> None:
    L, D, H = args.time_len, args.d_model, args.num_heads
    default = (tiled.DEFAULT_BLOCK_Q, tiled.DEFAULT_BLOCK_KV)
    blocks = list(dict.fromkeys([*parse_blocks(args.blocks), default]))  # the default swept too
    times = timings.time_tiled(
        1, L, D, H, blocks=blocks, causal=True, repeat=args.repeats, min_time=args.min_time,
        threads=args.threads, clock=args.clock,
    )  # fmt: skip
    causal = {b: times.pop(f"tiled {b[0]}x{b[1]}, causal") for b in blocks}
    naive = times.pop("naive")
    deferred, sdpa = times.pop("naive, deferred"), times.pop("sdpa")
    print(f"\nforward time at (B, L=S, Dh, H) = (1, {L}, {D // H}, {H}), float32, per-head tensors")
    print(f"  naive (mha.backends.np_backend.scaled_dot_product_attention): {1e3 * naive:.1f} ms")
    print(f"  naive with Q scaled and O divided once: {1e3 * deferred:.1f} ms, "
          f"{deferred / naive:.2f} x naive")  # fmt: skip
    print(
        f"  PyTorch scaled_dot_product_attention: {1e3 * sdpa:.1f} ms, {sdpa / naive:.2f} x naive"
    )
    print(f"{'tiled Br x Bc':32s} {'ms':>9s} {'/ naive':>8s} {'causal ms':>10s} {'/ own':>6s}")
    for b in blocks:
        sec = times[f"tiled {b[0]}x{b[1]}"]
        mark = "  (default)" if b == default else ""
        print(
            f"{f'tiled {b[0]}x{b[1]}':32s} {1e3 * sec:9.1f} {sec / naive:8.2f} "
            f"{1e3 * causal[b]:10.1f} {causal[b] / sec:6.2f}{mark}"
        )
    best = min(times, key=times.get)
    ratio = times[best] / naive
    print(f"best block size {best}: {ratio:.2f}x naive; <=2.00 {verdict(ratio <= 2)}")
    own = times[f"tiled {default[0]}x{default[1]}"]
    print(
        f"default blocks {default[0]}x{default[1]}: {own / naive:.2f}x naive, "
        f"{own / times[best]:.2f}x the best; <=1.10 {verdict(own <= 1.1 * times[best])}"
    )
    share = causal[default] / own
    print(
        f"causal=True at the default blocks: {share:.2f}x its time without; "
        f"<=0.60 {verdict(share <= 0.6)}"
    )
    print("/ own: the time with causal=True over the same blocks' time without it")


def backward(args: argparse.Namespace) -> None:
    B, L, D, H = args.backward_shape
    times = timings.time_tiled(
        B, L, D, H, blocks=[], backward=True, repeat=args.repeats, min_time=args.min_time,
        threads=args.threads, clock=args.clock,
    )  # fmt: skip
    forward = times["layer forward"]
    print(f"\nlayer forward and backward at (B, L=S, D, H) = ({B}, {L}, {D}, {H}), float32")
    print(f"{'pass':32s} {'ms':>9s} {'/ forward':>10s} {'target':>12s}")
    for name in (
        "layer forward",
        "layer forward, fused, saving",
        "layer backward, fused",
        "layer forward, tiled, saving",
        "layer backward, tiled",
    ):
        ratio = times[name] / forward
        mark = f"<=3.00 {verdict(ratio <= 3)}" if name == "layer backward, fused" else ""
        print(f"{name:32s} {1e3 * times[name]:9.1f} {ratio:10.2f} {mark:>12s}")
    print(
        "forward: mha.backends.np_backend.multi_head_attention; saving: "
        "mha.numerics.backward.multi_head_attention_forward;\nbackward: "
        "mha.numerics.backward.multi_head_attention from the saved forward (weights, or "
        "log-sum-exp for tiled)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--memory-len", type=int, default=8192)
    parser.add_argument("--d-model", type=int, default=512)
    parser.add_argument("--num-heads", type=int, default=8)
    parser.add_argument("--time-len", type=int, default=2048)
    parser.add_argument(
        "--blocks",
        default="64x64,64x256,128x128,128x512,256x256,256x512,256x1024,512x512",
        help="Br x Bc pairs for the forward sweep",
    )
    parser.add_argument("--backward-shape", type=int, nargs=4, default=[4, 512, 512, 8])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--min-time", type=float, default=0.1, help="seconds per timing")
    parser.add_argument("--threads", type=int, default=1, help="BLAS threads; 0: the default")
    parser.add_argument("--clock", choices=["cpu", "wall"], default="cpu")
    parser.add_argument(
        "--skip-naive-memory",
        action="store_true",
        help="do not measure the naive paths (several GiB at the default length)",
    )
    args = parser.parse_args()
    args.threads = args.threads or None
    print(
        f"BLAS threads: {args.threads or 'library default'}; default blocks of mha.backends.tiled: "
        f"Br = {tiled.DEFAULT_BLOCK_Q}, Bc = {tiled.DEFAULT_BLOCK_KV}"
    )
    memory(args)
    speed(args)
    backward(args)


if __name__ == "__main__":
    main()
