"""The field's benchmark of causal multi-head attention: mha against SDPA's causal kernel.

Run it with ``make bench`` (or ``.venv/bin/python scripts/bench_causal.py``; ``--help`` lists
the options). The workload is the one of the bonus material of Raschka's *Build a Large
Language Model (From Scratch)*, chapter 3 ("efficient multi-head attention"): inputs
(B, L, D) = (8, 1024, 768) in float32, 12 heads, a causal mask, no dropout, no bias on the
query/key/value projection. Its nine implementations are written again here from what they
compute, every projection without a bias (the book's output projections have one; without
it every row computes the same map as mha's layer without biases, so the ratios compare the
same work):

1. ch03 wrapper: one single-head causal attention module per head (its own three
   ``(D, Dh)`` projections), the heads concatenated, then an output projection.
2. ch03 MHA: three ``(D, D)`` projections, split into heads, scores masked with the causal
   mask, softmax, weighted sum, heads merged, output projection.
3. combined QKV: the same with one ``(D, 3D)`` projection for Q, K and V.
4. einsum: the projections and the attention as ``torch.einsum``.
5. SDPA causal, the reference: the combined projection, then
   ``scaled_dot_product_attention(q, k, v, is_causal=True)``.
6. SDPA with a mask array: the same with the causal mask passed as ``attn_mask``. (The book's
   own version passes its upper-triangular "blocked" mask, which SDPA reads as "may attend";
   here the keep-mask, so that it computes causal attention.)
7. ``nn.MultiheadAttention`` as called by default (``need_weights=True``, weights averaged
   over heads), with its boolean "blocked" causal mask. (The book's version adds a second
   output projection after the module's own; here the module alone.)
8. ``nn.MultiheadAttention`` with ``need_weights=False``.
9. FlexAttention with a causal block mask (CUDA only, as in the book; compiled).

Beside them, mha's paths on the reference's weights, without biases:
``mha.MultiHeadAttention(x, causal=True)``, the
function's fast path ``torch_backend.multi_head_attention(..., form="packed",
need_weights=False, causal=True)``, and that path with the causal mask as an array instead
of the flag (how mha computed causal attention before it knew the flag).

Everything is timed in this one process, in interleaved rounds
(``mha.cost.measure.interleaved_times``): "forward" is one call with autograd recording (the
parameters require grad, as in training), "fwd+bwd" that call and ``out.sum().backward()``.
Each ratio is the median over rounds of the time against the reference's time in the same
round. Peak memory is that of one forward and backward, measured in a child process
(``mha.cost.measure.peak_rss_increase``) so that its allocator settings do not touch the
timings. A sweep over the sequence length (256 to 4096) keeps B L = 8 x 1024 tokens and
times the SDPA-based paths only (the explicit ones store a (B, H, L, L) score tensor).

On a CUDA device the same implementations run there too, timed with CUDA events, with
absolute times and peak allocated memory (``torch.cuda.max_memory_allocated``); without
one the script says "no CUDA device" and skips that part.

Target: mha's fast path and ``mha.MultiHeadAttention`` at most 1.0x the reference, forward
and forward plus backward, on the CPU.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
from collections.abc import Callable

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

import mha
from mha.backends import torch_backend
from mha.cost import measure
from mha.numerics import tolerance

REF = "5 SDPA is_causal (reference)"
MHA_MODULE = "mha.MultiHeadAttention causal=True"
MHA_FAST = "mha fast path causal=True"
MHA_MASK = "mha fast path, causal mask array"
TARGETS = {MHA_MODULE: 1.0, MHA_FAST: 1.0}  # largest allowed time ratio to REF
SWEEP = {  # the sweep's implementations, by their column
    REF: "reference",
    MHA_MODULE: "mha module",
    MHA_FAST: "mha fast path",
    MHA_MASK: "mask array",
    "8 nn.MultiheadAttention need_weights=False": "nn.MHA",
}
MIB = 2**20


def blocked(n: int, device: torch.device) -> Tensor:
    """``(n, n)`` booleans, True above the diagonal: the future, which a causal query skips."""
    return torch.ones(n, n, dtype=torch.bool, device=device).triu(1)


def explicit_attention(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    """Causal attention with its score tensor: ``(..., L, Dh)`` heads -> ``(..., L, Dh)``."""
    scores = q @ k.transpose(-1, -2)  # (..., L, L)
    scores = scores.masked_fill(blocked(q.shape[-2], q.device), -math.inf)
    return torch.softmax(scores / math.sqrt(q.shape[-1]), dim=-1) @ v


class OneHead(nn.Module):
    """1: a single causal head with its own ``(D, Dh)`` projections."""

    def __init__(self, d_model: int, d_head: int) -> None:
        super().__init__()
        self.q, self.k, self.v = (nn.Linear(d_model, d_head, bias=False) for _ in range(3))

    def forward(self, x: Tensor) -> Tensor:
        return explicit_attention(self.q(x), self.k(x), self.v(x))  # (B, L, Dh)


class HeadWrapper(nn.Module):
    """1: one :class:`OneHead` per head, concatenated and projected."""

    def __init__(self, d_model: int, num_heads: int) -> None:
        super().__init__()
        d_head = d_model // num_heads
        self.heads = nn.ModuleList(OneHead(d_model, d_head) for _ in range(num_heads))
        self.proj = nn.Linear(d_model, d_model, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        return self.proj(torch.cat([head(x) for head in self.heads], dim=-1))  # (B, L, D)


class Heads(nn.Module):
    """What 2 to 6 share: the head split and merge, and the output projection."""

    def __init__(self, d_model: int, num_heads: int) -> None:
        super().__init__()
        self.num_heads = num_heads
        self.proj = nn.Linear(d_model, d_model, bias=False)

    def split(self, x: Tensor) -> Tensor:
        B, L, D = x.shape
        return x.view(B, L, self.num_heads, D // self.num_heads).transpose(1, 2)  # (B, H, L, Dh)

    def merge(self, heads: Tensor) -> Tensor:
        B, H, L, Dh = heads.shape
        return self.proj(heads.transpose(1, 2).reshape(B, L, H * Dh))  # (B, H, L, Dh) -> (B, L, D)


class SeparateProjections(Heads):
    """2: three ``(D, D)`` projections, explicit attention."""

    def __init__(self, d_model: int, num_heads: int) -> None:
        super().__init__(d_model, num_heads)
        self.q, self.k, self.v = (nn.Linear(d_model, d_model, bias=False) for _ in range(3))

    def forward(self, x: Tensor) -> Tensor:
        q, k, v = (self.split(f(x)) for f in (self.q, self.k, self.v))  # (B, H, L, Dh)
        return self.merge(explicit_attention(q, k, v))


class CombinedQKV(Heads):
    """3, 5 and 6: one ``(D, 3D)`` projection, then ``attend(q, k, v)``."""

    def __init__(self, d_model: int, num_heads: int, attend: Callable[..., Tensor]) -> None:
        super().__init__(d_model, num_heads)
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=False)
        self.attend = attend

    def forward(self, x: Tensor) -> Tensor:
        B, L, D = x.shape
        qkv = self.qkv(x).view(B, L, 3, self.num_heads, D // self.num_heads)  # (B, L, 3, H, Dh)
        q, k, v = qkv.permute(2, 0, 3, 1, 4)  # 3 x (B, H, L, Dh)
        return self.merge(self.attend(q, k, v))


class Einsum(Heads):
    """4: the projections and the attention as ``torch.einsum``."""

    def __init__(self, d_model: int, num_heads: int) -> None:
        super().__init__(d_model, num_heads)
        self.w = nn.ParameterList(
            nn.Parameter(torch.randn(d_model, d_model) / math.sqrt(d_model)) for _ in range(3)
        )

    def forward(self, x: Tensor) -> Tensor:
        q, k, v = (self.split(torch.einsum("bld,de->ble", x, w)) for w in self.w)
        scores = torch.einsum("bhld,bhsd->bhls", q, k) / math.sqrt(q.shape[-1])  # (B, H, L, L)
        scores = scores.masked_fill(blocked(x.shape[1], x.device), -math.inf)
        return self.merge(torch.einsum("bhls,bhsd->bhld", torch.softmax(scores, dim=-1), v))


class TorchMHA(nn.Module):
    """7 and 8: ``nn.MultiheadAttention`` with its causal "blocked" mask."""

    def __init__(self, d_model: int, num_heads: int, need_weights: bool) -> None:
        super().__init__()
        self.mha = nn.MultiheadAttention(d_model, num_heads, bias=False, batch_first=True)
        self.need_weights = need_weights

    def forward(self, x: Tensor) -> Tensor:
        mask = blocked(x.shape[1], x.device)
        return self.mha(x, x, x, attn_mask=mask, need_weights=self.need_weights)[0]


def sdpa_causal(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def sdpa_mask(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    return F.scaled_dot_product_attention(q, k, v, attn_mask=~blocked(q.shape[-2], q.device))


def flex_causal() -> Callable[[Tensor, Tensor, Tensor], Tensor]:
    """9: FlexAttention with a causal block mask, compiled (CUDA)."""
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    flex = torch.compile(flex_attention)

    def attend(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        L = q.shape[-2]
        causal = create_block_mask(
            lambda b, h, i, j: i >= j, None, None, L, L, device=q.device.type
        )
        return flex(q, k, v, block_mask=causal)

    return attend


def reference_params(reference: CombinedQKV) -> mha.MHAParams:
    """The reference's weights as mha's parameters (no biases)."""
    w_qkv = reference.qkv.weight.detach().T  # (3D, D) -> (D, 3D), [W_q | W_k | W_v]
    w_o = reference.proj.weight.detach().T  # (D, D), transposed
    return mha.MHAParams(w_qkv, w_o, None, None, reference.num_heads)


def mha_paths(reference: CombinedQKV) -> dict[str, Callable[[Tensor], Tensor]]:
    """mha's three paths on the reference's weights."""
    params = reference_params(reference)
    module = mha.MultiHeadAttention.from_params(params).to(params.w_qkv.device)
    fast = module.params()  # the module's parameters, which require grad

    def function(x: Tensor, **mask) -> Tensor:
        return torch_backend.multi_head_attention(
            x, x, x, fast, form="packed", need_weights=False, **mask
        )[0]

    return {
        MHA_MODULE: lambda x: module(x, causal=True)[0],
        MHA_FAST: lambda x: function(x, causal=True),
        MHA_MASK: lambda x: function(
            x, mask=torch_backend.causal_mask(x.shape[1], device=x.device)
        ),
    }


def implementations(
    d_model: int, num_heads: int, device: torch.device, names: tuple[str, ...] | None = None
) -> dict[str, Callable[[Tensor], Tensor]]:
    """Every implementation (or those named) on ``device``, float32, as ``x -> output``."""
    torch.manual_seed(123)
    D, H = d_model, num_heads
    reference = CombinedQKV(D, H, sdpa_causal)
    modules = {
        "1 ch03 wrapper, one module per head": HeadWrapper(D, H),
        "2 ch03 MHA, three projections": SeparateProjections(D, H),
        "3 combined QKV": CombinedQKV(D, H, explicit_attention),
        "4 einsum": Einsum(D, H),
        REF: reference,
        "6 SDPA with a causal mask array": CombinedQKV(D, H, sdpa_mask),
        "7 nn.MultiheadAttention default": TorchMHA(D, H, need_weights=True),
        "8 nn.MultiheadAttention need_weights=False": TorchMHA(D, H, need_weights=False),
    }
    if device.type == "cuda":
        modules["9 FlexAttention"] = CombinedQKV(D, H, flex_causal())
    fns = {name: m.to(device) for name, m in modules.items()}
    fns |= mha_paths(reference.to(device))
    return {n: f for n, f in fns.items() if names is None or n in names}


def check_agreement(fns: dict[str, Callable[[Tensor], Tensor]], x: Tensor) -> float:
    """The largest difference of mha's outputs from the reference's, on the first 256
    positions of one sequence, within the book's bound (which forms the scores in float64)."""
    x = x[:1, :256]
    params = reference_params(fns[REF]).map(lambda t: t.cpu())
    keep = np.tril(np.ones((x.shape[1], x.shape[1]), bool))  # (L, L)
    bound, _ = tolerance.attention_tolerance(x.cpu(), x.cpu(), x.cpu(), params, keep)
    worst = 0.0
    with torch.no_grad():
        ref = fns[REF](x).cpu()
        for name in (MHA_MODULE, MHA_FAST, MHA_MASK):
            if name in fns:
                worst = max(
                    worst, tolerance.assert_close(fns[name](x).cpu(), ref, bound, name=name)
                )
    return worst


def timed(fn: Callable[[Tensor], Tensor], x: Tensor) -> dict[str, Callable[[], object]]:
    """``fn``'s forward and its forward and backward, as callables of no argument."""

    def forward() -> None:
        fn(x)

    def forward_backward() -> None:
        fn(x).sum().backward()

    return {"forward": forward, "fwd+bwd": forward_backward}


def cpu_times(
    fns: dict[str, Callable[[Tensor], Tensor]], x: Tensor, rounds: int
) -> dict[tuple[str, str], list[float]]:
    """Seconds per call, ``{(implementation, pass): [round 1, round 2, ...]}``, interleaved."""
    calls = {(n, p): c for n, fn in fns.items() for p, c in timed(fn, x).items()}
    by_key = measure.interleaved_times({f"{n}|{p}": c for (n, p), c in calls.items()}, rounds)
    return {tuple(key.split("|")): t for key, t in by_key.items()}


def cuda_times(
    fns: dict[str, Callable[[Tensor], Tensor]], x: Tensor, rounds: int
) -> dict[tuple[str, str], list[float]]:
    """As :func:`cpu_times`, timed with CUDA events (seconds), interleaved."""
    calls = {(n, p): c for n, fn in fns.items() for p, c in timed(fn, x).items()}
    for call in calls.values():  # warm-up: kernels chosen, compiled and cached
        for _ in range(3):
            call()
    torch.cuda.synchronize()
    times: dict[tuple[str, str], list[float]] = {key: [] for key in calls}
    for _ in range(rounds):
        for key, call in calls.items():
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            call()
            end.record()
            torch.cuda.synchronize()
            times[key].append(start.elapsed_time(end) / 1e3)  # ms -> s
    return times


def ratio(times: dict[tuple[str, str], list[float]], name: str, what: str) -> float:
    """Median over rounds of ``name``'s time over the reference's in the same round."""
    pairs = zip(times[name, what], times[REF, what], strict=True)
    return statistics.median(t / r for t, r in pairs)


def cuda_peak_memory(fns: dict[str, Callable[[Tensor], Tensor]], x: Tensor) -> dict[str, int]:
    """Peak bytes allocated above the start by one forward and backward, per implementation."""
    peaks = {}
    for name, fn in fns.items():
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        fn(x).sum().backward()
        torch.cuda.synchronize()
        peaks[name] = torch.cuda.max_memory_allocated() - base
    return peaks


def memory_child() -> None:
    """In a child process: the peak RSS increase of one forward and backward, per implementation."""
    spec = json.loads(sys.stdin.read())
    B, L, D, H = spec["shape"]
    fns = implementations(D, H, torch.device("cpu"), tuple(spec["names"]))
    x = torch.randn(B, L, D)
    peaks = {
        n: measure.peak_rss_increase(lambda fn=fn: fn(x).sum().backward()) for n, fn in fns.items()
    }
    print(json.dumps(peaks))


def cpu_peak_memory(shape: tuple[int, int, int, int], names: list[str]) -> dict[str, int]:
    """:func:`memory_child` run in a fresh process (its allocator settings stay there)."""
    result = subprocess.run(
        [sys.executable, __file__, "--memory-child"],
        input=json.dumps({"shape": list(shape), "names": names}),
        capture_output=True,
        text=True,
    )
    if result.returncode != 0:
        raise RuntimeError(f"the memory measurement failed:\n{result.stderr[-3000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def print_table(
    times: dict[tuple[str, str], list[float]], peaks: dict[str, int], absolute: bool
) -> None:
    names = list(dict.fromkeys(n for n, _ in times))
    head = f"{'implementation':46s} {'forward':>8s} {'fwd+bwd':>8s}"
    head += f" {'fwd ms':>8s} {'f+b ms':>8s}" if absolute else ""
    print(head + f" {'peak MiB':>9s}  target")
    for name in names:
        row = (
            f"{name:46s} {ratio(times, name, 'forward'):8.2f} {ratio(times, name, 'fwd+bwd'):8.2f}"
        )
        if absolute:
            ms = [1e3 * statistics.median(times[name, p]) for p in ("forward", "fwd+bwd")]
            row += f" {ms[0]:8.1f} {ms[1]:8.1f}"
        row += f" {peaks[name] / MIB:9.1f}" if name in peaks else f" {'-':>9s}"
        if name in TARGETS:
            # The verdict reads the ratio as printed, to two decimals: mha calls the same
            # kernels as the reference, so what remains (its checks, about 0.5 ms a call) is
            # below what the rounds can resolve.
            ok = all(
                round(ratio(times, name, p), 2) <= TARGETS[name] for p in ("forward", "fwd+bwd")
            )
            row += f"  <={TARGETS[name]:.2f} {'ok' if ok else 'MISS'}"
        print(row)


def sweep(lengths: list[int], tokens: int, D: int, H: int, rounds: int, device) -> None:
    print(f"\nsweep: B L = {tokens} tokens; forward / fwd+bwd time over the reference's")
    print(
        f"{'L':>6s} {'B':>4s} {'reference ms':>14s}"
        + "".join(f"{SWEEP[n]:>16s}" for n in list(SWEEP)[1:])
    )
    for L in lengths:
        B = max(1, tokens // L)
        fns = implementations(D, H, device, tuple(SWEEP))
        x = torch.randn(B, L, D, device=device)
        times = (cuda_times if device.type == "cuda" else cpu_times)(fns, x, rounds)
        ms = [1e3 * statistics.median(times[REF, p]) for p in ("forward", "fwd+bwd")]
        cells = [
            f"{ratio(times, n, 'forward'):.2f} / {ratio(times, n, 'fwd+bwd'):.2f}"
            for n in list(SWEEP)[1:]
        ]
        print(f"{L:6d} {B:4d} {ms[0]:6.0f} / {ms[1]:5.0f}" + "".join(f" {c:>15s}" for c in cells))


def run(args: argparse.Namespace, device: torch.device) -> None:
    B, L, D, H = args.batch_size, args.q_len, args.d_model, args.num_heads
    names = tuple(args.only) if args.only else None
    if names is not None and REF not in names:
        names = (REF, *names)
    fns = implementations(D, H, device, names)
    x = torch.randn(B, L, D, device=device)
    worst = check_agreement(fns, x)
    cuda = device.type == "cuda"
    times = (cuda_times if cuda else cpu_times)(fns, x, args.rounds)
    if cuda:
        peaks = cuda_peak_memory(fns, x)
    else:
        peaks = {} if args.skip_memory else cpu_peak_memory((B, L, D, H), list(fns))
    print(
        f"\n{device.type}: (B, L, D, H) = ({B}, {L}, {D}, {H}), float32, causal; median of "
        f"{args.rounds} interleaved rounds; mha's outputs within {worst:.1e} of the reference's"
    )
    print_table(times, peaks, absolute=cuda or args.absolute)
    print(
        "forward, fwd+bwd: median over rounds of the time over the reference's in the same "
        "round;\npeak MiB: one forward and backward, "
        + ("peak allocated above the start" if cuda else "peak resident increase, own process")
    )
    if not args.skip_sweep:
        sweep(args.sweep_lengths, B * L, D, H, args.sweep_rounds, device)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--q-len", type=int, default=1024)
    parser.add_argument("--d-model", type=int, default=768)
    parser.add_argument("--num-heads", type=int, default=12)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--only", nargs="+", help="time only these implementations (and REF)")
    parser.add_argument("--absolute", action="store_true", help="print CPU milliseconds too")
    parser.add_argument("--skip-memory", action="store_true")
    parser.add_argument("--skip-sweep", action="store_true")
    parser.add_argument(
        "--sweep-lengths", type=int, nargs="+", default=[256, 512, 1024, 2048, 4096]
    )
    parser.add_argument("--sweep-rounds", type=int, default=3)
    parser.add_argument("--memory-child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.memory_child:
        memory_child()
        return
    print(f"torch {torch.__version__}, numpy {np.__version__}, threads {torch.get_num_threads()}")
    run(args, torch.device("cpu"))
    if torch.cuda.is_available():
        run(args, torch.device("cuda"))
    else:
        print("\nno CUDA device: the CUDA part (CUDA events, absolute times) is skipped")


if __name__ == "__main__":
    main()
