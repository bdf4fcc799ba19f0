"""Time per generated token with and without a key/value cache, and the cache's memory.

A causal attention-only model of the book's kind
(``mha.models.attention_only.AttentionOnlyTransformer``,
random weights) generates one token at context lengths S: with a cache (prefill S tokens,
then decode one token at a time against the cached keys and values) and without (run the
model on all S + 1 tokens again). ``mha.cost.timings.decode_times`` takes the medians, on one
thread, in CPU time by default, all in this one process; the ratio uncached / cached is the
cache's speed-up on this machine.

It also checks the cache's memory: the bytes of the caches of a model against
``mha.cost.arithmetic.kv_cache_bytes``, and the resident memory that filling them adds
(``mha.cost.measure.peak_rss_increase``), and that an append allocates nothing that grows with
the cached length (``tracemalloc``, which NumPy reports to).

Examples::

    .venv/bin/python scripts/bench_decode.py
    .venv/bin/python scripts/bench_decode.py --lengths 128 512 1024 2048 --kv-heads 4 1
"""

from __future__ import annotations

import argparse
import tracemalloc

import numpy as np
import torch

from mha.core.kv_cache import KVCache
from mha.cost import arithmetic, measure, timings
from mha.models.attention_only import AttentionOnlyTransformer


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--lengths", type=int, nargs="+", default=[128, 512, 1024, 2048])
    parser.add_argument("--d-model", type=int, default=64)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--kv-heads", type=int, nargs="+", default=[4, 1])
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--clock", choices=("cpu", "wall"), default="cpu")
    parser.add_argument("--memory-len", type=int, default=4096)
    args = parser.parse_args(argv)

    max_len = max(args.lengths) + args.steps + 1
    print(f"seconds per generated token, {args.clock} time, one thread")
    print(f"{'H_kv':>5} {'S':>6} {'cached ms':>10} {'uncached ms':>12} {'speed-up':>9}")
    for h_kv in args.kv_heads:
        model = AttentionOnlyTransformer(
            64, max_len, args.d_model, args.heads, args.layers, num_kv_heads=h_kv
        )
        times = timings.decode_times(
            model, args.lengths, steps=args.steps, repeat=args.repeat, clock=args.clock
        )
        for S, c, u in zip(args.lengths, times["cached"], times["uncached"], strict=True):
            print(f"{h_kv:>5} {S:>6} {c * 1e3:>10.3f} {u * 1e3:>12.3f} {u / c:>8.1f}x")

    S, D_h, layers = args.memory_len, args.d_model // args.heads, args.layers
    for h_kv in args.kv_heads:
        expected = arithmetic.kv_cache_bytes(layers, S, h_kv, D_h, torch.float32)

        def fill(h_kv: int = h_kv) -> list[KVCache]:
            caches = [KVCache(1, h_kv, D_h, S, dtype=torch.float32) for _ in range(layers)]
            block = torch.ones(1, h_kv, S, D_h)
            for c in caches:
                c.append(block, block)
            return caches

        held = sum(c.nbytes for c in fill())
        rss = measure.peak_rss_increase(fill)
        print(
            f"cache of {layers} layers, S = {S}, H_kv = {h_kv}: {held / 2**20:.2f} MiB held, "
            f"formula {expected / 2**20:.2f} MiB, resident increase {rss / 2**20:.2f} MiB"
        )

    cache = KVCache(1, 2, 64, 4096, dtype=np.float64)
    step = np.random.default_rng(0).standard_normal((1, 2, 1, 64))
    peaks = []
    for length in (16, 1024, 4000):
        while cache.length < length:
            cache.append(step, step)
        tracemalloc.start()
        cache.append(step, step)
        peaks.append(tracemalloc.get_traced_memory()[1])
        tracemalloc.stop()
    print(
        "bytes allocated by one append at S = 16, 1024, 4000: "
        + ", ".join(str(p) for p in peaks)
        + f" (one step's keys and values: {2 * step.nbytes} bytes)"
    )


if __name__ == "__main__":
    main()
