"""Time the forms of one multi-head attention layer and print their ratios to the fused form.

The five forms compute the same self-attention (see ``mha.cost.timings.form_runners``):

- ``per_head``: a Python loop over heads, 3H projections of width Dh (explicit scores);
- ``fused``: three (D, D) projections, then all heads at once (explicit scores);
- ``packed``: one (D, 3D) projection (explicit scores);
- ``nn.MultiheadAttention``: PyTorch's module with the same weights, eval mode (one
  native operator when H is even);
- ``sdpa``: the packed form calling ``scaled_dot_product_attention`` (no stored weights).

Everything runs in this one process on the same inputs, float32, under
``torch.inference_mode``; each number is the median of ``--repeat`` timings of about
``--min-time`` seconds each, the forms interleaved. ``--clock cpu`` measures this process's
CPU time instead of the wall clock, which helps on a machine busy with other work. The
ratios (time / fused time) compare like with like on whatever machine runs this; the
absolute times do not travel.

Examples::

    .venv/bin/python scripts/bench_forms.py
    .venv/bin/python scripts/bench_forms.py --d-model 512 --heads 1 8 64 --lengths 16 128 1024
    .venv/bin/python scripts/bench_forms.py --threads 0     # keep PyTorch's own thread count
    .venv/bin/python scripts/bench_forms.py --clock cpu     # CPU time, as the book measures
"""

from __future__ import annotations

import argparse

import torch

from mha.cost import measure, timings


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--d-model", type=int, default=128, help="model width D (default 128)")
    parser.add_argument(
        "--heads", type=int, nargs="+", default=[1, 8, 32], help="numbers of heads H"
    )
    parser.add_argument(
        "--lengths", type=int, nargs="+", default=[16, 64, 256, 1024], help="lengths N = L = S"
    )
    parser.add_argument("--batch-size", type=int, default=1, help="batch size B (default 1)")
    parser.add_argument("--repeat", type=int, default=7, help="timings per form (median taken)")
    parser.add_argument("--min-time", type=float, default=0.02, help="seconds per timing")
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="PyTorch threads (default 1); 0 keeps PyTorch's setting",
    )
    parser.add_argument(
        "--clock",
        choices=tuple(measure.CLOCKS),
        default="wall",
        help="wall (time.perf_counter, default) or cpu (time.process_time)",
    )
    args = parser.parse_args(argv)
    threads = None if args.threads == 0 else args.threads

    print(
        f"torch {torch.__version__}, threads {threads or torch.get_num_threads()}, "
        f"B = {args.batch_size}, D = {args.d_model}, float32, {args.clock} clock, "
        f"median of {args.repeat} timings of about {args.min_time} s"
    )
    header = f"{'H':>4} {'N':>6} {'fused ms':>9} " + " ".join(
        f"{name:>22}" for name in timings.FORMS_TIMED
    )
    print("time / fused time:")
    print(header)
    for h in args.heads:
        for n in args.lengths:
            t = timings.time_forms(
                args.batch_size,
                n,
                args.d_model,
                h,
                repeat=args.repeat,
                min_time=args.min_time,
                threads=threads,
                clock=args.clock,
            )
            ratios = " ".join(f"{t[name] / t['fused']:22.2f}" for name in timings.FORMS_TIMED)
            print(f"{h:4d} {n:6d} {1e3 * t['fused']:9.3f} {ratios}", flush=True)


if __name__ == "__main__":
    main()
