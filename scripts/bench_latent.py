"""One decoding step of a latent attention layer, by its two routes, and what the counts say.

A random multi-head latent attention layer (``mha.core.latent_params.init_mla_params``,
float32, decoupled rotary keys) decodes one token against a latent cache of S - 1
positions, by the explicit route (every head's keys and values rebuilt from the latents)
and the absorbed route (``W^UK`` folded into the queries, ``W^UV`` after attending over the
latents). ``mha.cost.timings.latent_step_times`` takes the fastest of interleaved rounds, on
one thread, in CPU time by default, all in this one process; the ratio explicit / absorbed
is what absorption saves on this machine. Beside it: the same ratio of FLOPs and of bytes
from ``mha.cost.latent_arithmetic.latent_decode_step_cost``.

Examples::

    .venv/bin/python scripts/bench_latent.py
    .venv/bin/python scripts/bench_latent.py --lengths 1024 4096 16384 --d-latent 256
"""

from __future__ import annotations

import argparse

import torch

from mha.core.latent_params import init_mla_params
from mha.core.rotary import Rotary
from mha.cost import latent_arithmetic, timings


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--lengths", type=int, nargs="+", default=[1024, 4096, 16384])
    parser.add_argument("--d-model", type=int, default=512)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--d-latent", type=int, default=128)
    parser.add_argument("--d-rope", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--clock", choices=("cpu", "wall"), default="cpu")
    args = parser.parse_args(argv)

    params = init_mla_params(args.d_model, args.heads, args.d_latent, args.d_rope, seed=0)
    params = params.to_torch(torch.float32)
    D, H, Dh = args.d_model, args.heads, params.d_head
    print(
        f"one decoding step of a latent layer: D = {D}, H = {H}, Dh = {Dh}, "
        f"Dc = {args.d_latent}, Dr = {args.d_rope}; float32, one thread, {args.clock} time"
    )
    print(
        f"{'S':>7} {'explicit ms':>12} {'absorbed ms':>12} {'time ratio':>11} "
        f"{'FLOP ratio':>11} {'byte ratio':>11}"
    )
    for S in args.lengths:
        times = timings.latent_step_times(
            params, S - 1, rounds=args.rounds, rotary=Rotary(), clock=args.clock
        )
        cost = {
            route: latent_arithmetic.latent_decode_step_cost(
                D, H, Dh, args.d_latent, args.d_rope, S, route=route, dtype=torch.float32
            )
            for route in times
        }
        e, a = times["explicit"], times["absorbed"]
        flops = cost["explicit"].flops / cost["absorbed"].flops
        moved = cost["explicit"].bytes / cost["absorbed"].bytes
        print(
            f"{S:>7} {e * 1e3:>12.3f} {a * 1e3:>12.3f} {e / a:>10.1f}x {flops:>10.1f}x "
            f"{moved:>10.1f}x"
        )


if __name__ == "__main__":
    main()
