"""What one multi-head attention forward costs: FLOPs, memory and time, modelled and measured.

The models are exact counts, not orders of magnitude: :func:`attention_flops` counts every
multiply-add of the four matrix-multiply stages as 2 FLOPs (the convention of
``torch.utils.flop_counter.FlopCounterMode``) and, separately, the element-wise work that
``FlopCounterMode`` does not count (bias additions, the ``1/sqrt(Dh)`` scaling, the
softmax). :func:`score_tensor_bytes` is the size of the ``(B, H, L, S)`` score tensor.

The measurements say what a real run did: :func:`count_flops` (``FlopCounterMode``, taught
to count the CPU kernel of ``scaled_dot_product_attention``), :func:`count_aten_ops` (how
many PyTorch operators a forward dispatches), :func:`peak_rss_increase` and
:func:`attention_peak_memory` (resident memory high-water marks, Linux only) and
:func:`time_forms` (median wall-clock or CPU times of the forms of one layer).
"""

from __future__ import annotations

import collections
import ctypes
import json
import math
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import FlopCounterMode, sdpa_flop_count

from mha import _validate, torch_backend
from mha.module import to_torch_mha
from mha.params import MHAParams, init_params

# --- FLOPs: the model --------------------------------------------------------------------


@dataclass(frozen=True)
class AttentionFlops:
    """FLOPs of one multi-head attention forward, stage by stage (multiply-add = 2 FLOPs).

    The first six stages are matrix multiplies (what ``FlopCounterMode`` counts); the
    last three are element-wise extras (what it does not count).

    Attributes:
        q_proj: the query projection ``x @ W_q``.
        k_proj: the key projection ``x @ W_k``.
        v_proj: the value projection ``x @ W_v``.
        scores: ``Q K^T`` for every head.
        weighted_sum: ``weights @ V`` for every head.
        out_proj: ``Concat(heads) @ W^O``.
        bias: one addition per output element of each biased projection.
        scale: one multiplication per score (``scores * 1/sqrt(Dh)``).
        softmax: per row of S scores, ``S - 1`` comparisons (max), ``S`` subtractions,
            ``S`` exponentials, ``S - 1`` additions (sum) and ``S`` divisions.
    """

    q_proj: int
    k_proj: int
    v_proj: int
    scores: int
    weighted_sum: int
    out_proj: int
    bias: int
    scale: int
    softmax: int

    @property
    def projections(self) -> int:
        """FLOPs of the query, key and value projections."""
        return self.q_proj + self.k_proj + self.v_proj

    @property
    def attention(self) -> int:
        """FLOPs of the two per-head matrix products (scores and weighted sum)."""
        return self.scores + self.weighted_sum

    @property
    def matmul(self) -> int:
        """All matrix-multiply FLOPs: what ``FlopCounterMode`` reports."""
        return self.projections + self.attention + self.out_proj

    @property
    def elementwise(self) -> int:
        """Bias, scaling and softmax operations, which ``FlopCounterMode`` does not count."""
        return self.bias + self.scale + self.softmax

    @property
    def total(self) -> int:
        """Matrix-multiply FLOPs plus element-wise operations."""
        return self.matmul + self.elementwise

    def as_dict(self) -> dict[str, int]:
        """Every stage and every total, by name."""
        out = asdict(self)
        for name in ("projections", "attention", "matmul", "elementwise", "total"):
            out[name] = getattr(self, name)
        return out


def attention_flops(
    batch_size: int,
    q_len: int,
    kv_len: int,
    d_model: int,
    num_heads: int,
    *,
    bias: bool = True,
    num_kv_heads: int | None = None,
) -> AttentionFlops:
    """Exact FLOP count of one multi-head attention forward, per stage.

    The count does not depend on the form (per-head loop, fused or packed): the same
    multiply-adds are grouped into fewer, larger matrix products. With ``num_kv_heads``
    below ``num_heads`` the keys and values are projected to ``num_kv_heads`` heads shared
    by groups of query heads (grouped-query attention; ``num_kv_heads=1`` is multi-query
    attention), which shrinks only ``k_proj``, ``v_proj`` and their biases.

    Args:
        batch_size: B.
        q_len: query length L.
        kv_len: key/value length S (``S = L`` for self-attention).
        d_model: model width D.
        num_heads: number of query heads H; must divide D.
        bias: whether the four projections add a bias.
        num_kv_heads: number of key/value heads; must divide H. Defaults to H.

    Returns:
        ``AttentionFlops``; with ``Dh = D / H`` and ``Dkv = num_kv_heads * Dh``:
        q_proj ``2 B L D D``, k_proj = v_proj ``2 B S D Dkv``, scores = weighted_sum
        ``2 B H L S Dh``, out_proj ``2 B L D D``.

    Raises:
        ValueError: if a size is not positive, H does not divide D, or ``num_kv_heads``
            does not divide H.
        TypeError: if a size is not an int.
    """
    for name, value in (("batch_size", batch_size), ("q_len", q_len), ("kv_len", kv_len)):
        _validate.check_positive(name, value)
    _validate.check_sizes(d_model, num_heads)
    G = num_heads if num_kv_heads is None else num_kv_heads
    _validate.check_positive("num_kv_heads", G)
    if num_heads % G != 0:
        raise ValueError(
            f"num_kv_heads must divide num_heads; got num_heads={num_heads}, num_kv_heads={G}"
        )
    B, L, S, D, H = batch_size, q_len, kv_len, d_model, num_heads
    Dh = D // H
    Dkv = G * Dh
    rows = B * H * L  # softmax rows
    return AttentionFlops(
        q_proj=2 * B * L * D * D,
        k_proj=2 * B * S * D * Dkv,
        v_proj=2 * B * S * D * Dkv,
        scores=2 * B * H * L * S * Dh,
        weighted_sum=2 * B * H * L * S * Dh,
        out_proj=2 * B * L * D * D,
        bias=(B * L * D + 2 * B * S * Dkv + B * L * D) if bias else 0,
        scale=rows * S,
        softmax=rows * (5 * S - 2),
    )


# --- FLOPs and operators: measured -------------------------------------------------------


def _cpu_sdpa_flop(query_shape, key_shape, value_shape, *args, out_shape=None, **kwargs) -> int:
    return sdpa_flop_count(query_shape, key_shape, value_shape)


def flop_counter() -> FlopCounterMode:
    """A silent ``FlopCounterMode`` that also counts ``scaled_dot_product_attention`` on CPU.

    ``FlopCounterMode`` knows the matrix products (``mm``, ``addmm``, ``bmm``, ...) and the
    CUDA attention kernels, but not ``aten._scaled_dot_product_flash_attention_for_cpu``,
    the CPU kernel of ``torch.nn.functional.scaled_dot_product_attention``: without help it
    reports 0 FLOPs for it. This counter uses PyTorch's own SDPA formula for that kernel
    (``2 B H L S Dh`` for the scores plus the same for the weighted sum).
    """
    sdpa_cpu = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu
    return FlopCounterMode(display=False, custom_mapping={sdpa_cpu: _cpu_sdpa_flop})


def count_flops(fn: Callable[[], Any]) -> dict[str, int]:
    """Run ``fn()`` under :func:`flop_counter` and return the FLOPs of each operator.

    Returns:
        ``{"aten.addmm": ..., "aten.bmm": ..., ...}``; its values sum to the total. Operators
        ``FlopCounterMode`` has no formula for (softmax, additions) are absent.
    """
    with flop_counter() as counter:
        fn()
    return {str(op): int(n) for op, n in counter.get_flop_counts().get("Global", {}).items()}


class _OpCounter(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.counts: collections.Counter[str] = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.counts[str(func.overloadpacket)] += 1
        return func(*args, **(kwargs or {}))


def count_aten_ops(fn: Callable[[], Any]) -> collections.Counter[str]:
    """How many times ``fn()`` dispatches each PyTorch operator (``aten.mm``, ``aten.bmm``, ...).

    Every dispatched operator is one call into PyTorch's kernel machinery with its own
    fixed overhead, whatever the size of its operands; views (``aten.view``,
    ``aten.transpose``) count too, though they move no data.

    ``fn`` runs under ``torch.no_grad()`` with inference mode switched off: inference mode
    hides the operators that composite ones (``matmul``, ``softmax``) are made of, and
    ``no_grad`` lets ``nn.MultiheadAttention`` take its inference fast path, as it does in
    the timings.
    """
    with torch.inference_mode(False), torch.no_grad(), _OpCounter() as counter:
        fn()
    return counter.counts


MATMUL_OPS = ("aten.mm", "aten.addmm", "aten.bmm", "aten.baddbmm")


def matmul_calls(num_heads: int, form: str, *, self_attention: bool = True) -> int:
    """Matrix products one :func:`mha.torch_backend.multi_head_attention` call dispatches.

    Counted for ``need_weights=True`` (explicit scores): the per-head form runs 3 input
    projections and 2 attention products per head, then one output projection
    (``5H + 1``); the fused form runs 3 + 2 + 1 = 6; the packed form projects queries,
    keys and values with one product in self-attention (4 in all) and with two when the
    query differs from the shared key/value tensor (5 in all).

    Raises:
        ValueError: on an unknown form or a non-positive ``num_heads``.
        TypeError: if ``num_heads`` is not an int.
    """
    _validate.check_positive("num_heads", num_heads)
    _validate.check_form(form)
    if form == "per_head":
        return 5 * num_heads + 1
    if form == "fused":
        return 6
    return 4 if self_attention else 5


# --- Memory ------------------------------------------------------------------------------


def _itemsize(dtype: Any) -> int:
    size = getattr(dtype, "itemsize", None)
    if isinstance(size, int):
        return size
    try:
        return np.dtype(dtype).itemsize
    except TypeError as err:
        raise TypeError(f"dtype must be a NumPy or PyTorch dtype; got {dtype!r}") from err


def score_tensor_bytes(
    batch_size: int, q_len: int, kv_len: int, num_heads: int, dtype: Any = torch.float32
) -> int:
    """Bytes of one ``(B, H, L, S)`` score (or weight) tensor: ``B H L S`` times the item size.

    An explicit implementation holds at least one such tensor (the scores, overwritten by the
    weights); two at once when autograd records, since the backward pass needs the softmax's
    output. ``scaled_dot_product_attention``'s fused CPU kernel works on blocks of
    queries and keys and never stores it.

    Raises:
        ValueError: if a size is not positive.
        TypeError: if a size is not an int or ``dtype`` is not a dtype.
    """
    for name, value in (
        ("batch_size", batch_size),
        ("q_len", q_len),
        ("kv_len", kv_len),
        ("num_heads", num_heads),
    ):
        _validate.check_positive(name, value)
    return batch_size * num_heads * q_len * kv_len * _itemsize(dtype)


_PROC_SELF = Path("/proc/self")
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3


def _status_bytes(key: str) -> int:
    for line in (_PROC_SELF / "status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024  # kB -> bytes
    raise RuntimeError(f"{_PROC_SELF / 'status'} has no {key} line")


def peak_rss_increase(fn: Callable[[], Any], *, warmup: bool = True) -> int:
    """Bytes by which ``fn()`` raises this process's resident memory at its peak (Linux).

    The measurement reads the kernel's resident-set high-water mark ``VmHWM`` after
    resetting it to the current resident size (``5`` written to ``/proc/self/clear_refs``),
    so it sees every page ``fn`` touches, whoever allocated it (PyTorch, NumPy, BLAS). So
    that freed memory really leaves the process, and is not silently reused from glibc's
    heap, it first fixes glibc's mmap threshold at 64 KiB (``mallopt``): every larger block
    is then mapped on allocation and unmapped on free. That setting stays for the rest of
    the process and makes large allocations slower, so measure memory in a separate
    process from timings (:func:`attention_peak_memory` does).

    Args:
        fn: the work to measure; its result is dropped before returning.
        warmup: run ``fn()`` once first, so one-off allocations (thread pools, caches)
            are not counted.

    Returns:
        Peak resident bytes above the level before the call (page granularity).

    Raises:
        RuntimeError: if ``/proc/self/clear_refs`` or glibc's ``mallopt`` is unavailable.
    """
    clear_refs = _PROC_SELF / "clear_refs"
    if not clear_refs.exists():
        raise RuntimeError(f"peak_rss_increase needs Linux: {clear_refs} does not exist")
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(_M_MMAP_THRESHOLD, 1 << 16)
        libc.mallopt(_M_TRIM_THRESHOLD, 1 << 16)
    except (OSError, AttributeError) as err:
        raise RuntimeError(f"peak_rss_increase needs glibc's mallopt; got {err}") from err
    if warmup:
        fn()
    libc.malloc_trim(0)
    clear_refs.write_text("5")
    before = _status_bytes("VmRSS")
    fn()
    return _status_bytes("VmHWM") - before


MEMORY_PATHS = ("explicit", "explicit, autograd", "per_head", "sdpa", "nn.MultiheadAttention")


def _memory_runner(path: str, params: MHAParams, x: torch.Tensor) -> Callable[[], Any]:
    T = torch_backend
    if path == "explicit":
        return lambda: T.multi_head_attention(x, x, x, params, form="packed")
    if path == "explicit, autograd":
        # Parameters that require grad, outside inference mode: autograd records the forward
        # and keeps the softmax's output for the backward pass. Copies made outside inference
        # mode are normal tensors, which autograd can record (inference tensors it cannot).
        with torch.inference_mode(False):
            p_grad = params.map(lambda t: t.clone().requires_grad_())
            x_plain = x.clone()

        def recorded() -> Any:
            with torch.inference_mode(False):
                return T.multi_head_attention(x_plain, x_plain, x_plain, p_grad, form="packed")

        return recorded
    if path == "per_head":
        return lambda: T.multi_head_attention(x, x, x, params, form="per_head", need_weights=False)
    if path == "sdpa":
        return lambda: T.multi_head_attention(x, x, x, params, form="packed", need_weights=False)
    module = to_torch_mha(params).eval()
    return lambda: module(x, x, x, need_weights=False)


def _memory_child() -> None:
    """Entry point of the child process of :func:`attention_peak_memory` (JSON on stdin)."""
    spec = json.loads(sys.stdin.read())
    torch.set_num_threads(spec["threads"])
    dtype = getattr(torch, spec["dtype"])
    D, H, B = spec["d_model"], spec["num_heads"], spec["batch_size"]
    params = init_params(D, H, seed=0).to_torch(dtype)
    gen = torch.Generator().manual_seed(0)
    out: dict[str, list[int]] = {path: [] for path in spec["paths"]}
    with torch.inference_mode():
        for L in spec["q_lens"]:
            x = torch.randn(B, L, D, generator=gen, dtype=dtype)
            for path in spec["paths"]:
                out[path].append(peak_rss_increase(_memory_runner(path, params, x)))
    print(json.dumps(out))


def attention_peak_memory(
    batch_size: int,
    q_lens: list[int],
    d_model: int,
    num_heads: int,
    *,
    paths: tuple[str, ...] = MEMORY_PATHS,
    dtype: str = "float32",
    threads: int = 1,
) -> dict[str, list[int]]:
    """Measured peak extra resident memory of self-attention forwards, in a fresh process.

    Each path runs on ``x`` of shape ``(B, L, D)``, all but one under
    ``torch.inference_mode``: ``"explicit"`` is the packed form with ``need_weights=True``
    (the softmax overwrites the scores, so one ``(B, H, L, S)`` tensor is held);
    ``"explicit, autograd"`` is the same forward with parameters that require grad, outside
    inference mode (autograd keeps the softmax's output for the backward pass, so scores and
    weights are held at once); ``"per_head"`` is the per-head loop, ``"sdpa"`` the packed form
    with ``need_weights=False`` (``scaled_dot_product_attention``), ``"nn.MultiheadAttention"``
    PyTorch's module in eval mode with ``need_weights=False``. Each number comes from
    :func:`peak_rss_increase` in a child Python process, so this process's allocator is
    left alone.

    Args:
        batch_size: B.
        q_lens: the lengths L = S to measure.
        d_model: model width D.
        num_heads: number of heads H.
        paths: which of :data:`MEMORY_PATHS` to run.
        dtype: ``"float32"`` or ``"float64"``.
        threads: PyTorch threads in the child.

    Returns:
        ``{path: [bytes for each L]}``.

    Raises:
        ValueError: on an unknown path or dtype, or bad sizes.
        RuntimeError: if the child process fails (e.g. not on Linux with glibc).
    """
    _validate.check_positive("batch_size", batch_size)
    for L in q_lens:
        _validate.check_positive("q_lens[i]", L)
    _validate.check_sizes(d_model, num_heads)
    unknown = [p for p in paths if p not in MEMORY_PATHS]
    if unknown:
        raise ValueError(f"paths must be among {MEMORY_PATHS}; got {unknown}")
    if dtype not in ("float32", "float64"):
        raise ValueError(f"dtype must be 'float32' or 'float64'; got dtype={dtype!r}")
    spec = {
        "batch_size": batch_size,
        "q_lens": list(q_lens),
        "d_model": d_model,
        "num_heads": num_heads,
        "paths": list(paths),
        "dtype": dtype,
        "threads": threads,
    }
    result = subprocess.run(
        [sys.executable, "-c", "from mha.cost import _memory_child; _memory_child()"],
        input=json.dumps(spec),
        capture_output=True,
        text=True,
    )
    if result.returncode != 0:
        raise RuntimeError(f"memory measurement failed:\n{result.stderr[-3000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


# --- Time --------------------------------------------------------------------------------


CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}


def _clock(name: str) -> Callable[[], float]:
    if name not in CLOCKS:
        raise ValueError(f"clock must be one of {tuple(CLOCKS)}; got clock={name!r}")
    return CLOCKS[name]


def _calibrate(fn: Callable[[], Any], min_time: float) -> int:
    """Calls of ``fn`` that last about ``min_time`` seconds (after one warm-up call)."""
    start = time.perf_counter()
    fn()
    first = time.perf_counter() - start
    return max(1, math.ceil(min_time / max(first, 1e-9)))


def _mean_time(fn: Callable[[], Any], number: int, clock: Callable[[], float]) -> float:
    start = clock()
    for _ in range(number):
        fn()
    return (clock() - start) / number


def median_time(
    fn: Callable[[], Any],
    *,
    repeat: int = 5,
    number: int | None = None,
    min_time: float = 2e-3,
    clock: str = "wall",
) -> float:
    """Median over ``repeat`` timings of the mean time of ``number`` calls of ``fn()``.

    Args:
        fn: the work to time.
        repeat: how many timings to take the median of.
        number: calls per timing; by default enough that one timing lasts about
            ``min_time`` (estimated from one warm-up call).
        min_time: target seconds per timing when ``number`` is not given.
        clock: ``"wall"`` (``time.perf_counter``) or ``"cpu"`` (``time.process_time``,
            the CPU time of this process, which stands still while other programs have
            the CPU; with one PyTorch thread it is close to the wall time of an idle
            machine, though caches and memory bandwidth are still shared).

    Returns:
        Seconds per call.

    Raises:
        ValueError: if ``repeat``, ``number`` or ``min_time`` is not positive, or the
            clock is unknown.
        TypeError: if ``repeat`` or ``number`` is not an int.
    """
    _validate.check_positive("repeat", repeat)
    tick = _clock(clock)
    if not min_time > 0:
        raise ValueError(f"min_time must be positive; got min_time={min_time}")
    if number is None:
        number = _calibrate(fn, min_time)
    else:
        _validate.check_positive("number", number)
        fn()  # warm-up
    return statistics.median(_mean_time(fn, number, tick) for _ in range(repeat))


FORMS_TIMED = ("per_head", "fused", "packed", "nn.MultiheadAttention", "sdpa")


def form_runners(params: MHAParams, x: torch.Tensor) -> dict[str, Callable[[], torch.Tensor]]:
    """Zero-argument callables computing the same self-attention of ``x`` five ways.

    ``"per_head"``, ``"fused"`` and ``"packed"`` are the three forms of
    :func:`mha.torch_backend.multi_head_attention` with explicit scores and weights (the
    same arithmetic, dispatched as 5H + 1, 6 and 4 matrix products; the per-head loop runs
    with ``need_weights=False``, which only skips stacking its heads' weights);
    ``"nn.MultiheadAttention"`` is PyTorch's module with the same weights (eval mode,
    ``need_weights=False``: one native operator when H is even, PyTorch's Python path
    otherwise); ``"sdpa"`` is the packed form with ``need_weights=False``, which calls
    ``torch.nn.functional.scaled_dot_product_attention``. Each returns the output
    ``(B, L, D)``.

    Raises:
        TypeError: if ``params`` are not PyTorch ``MHAParams``.
    """
    if not isinstance(params, MHAParams) or not isinstance(params.w_qkv, torch.Tensor):
        raise TypeError(f"params must be MHAParams of torch tensors; got {type(params).__name__}")
    T = torch_backend
    module = to_torch_mha(params).eval()

    def run(form: str, need_weights: bool) -> Callable[[], torch.Tensor]:
        return lambda: T.multi_head_attention(
            x, x, x, params, form=form, need_weights=need_weights
        )[0]

    return {
        "per_head": run("per_head", False),
        "fused": run("fused", True),
        "packed": run("packed", True),
        "nn.MultiheadAttention": lambda: module(x, x, x, need_weights=False)[0],
        "sdpa": run("packed", False),
    }


def time_forms(
    batch_size: int,
    q_len: int,
    d_model: int,
    num_heads: int,
    *,
    repeat: int = 5,
    min_time: float = 2e-3,
    threads: int | None = 1,
    seed: int = 0,
    clock: str = "wall",
) -> dict[str, float]:
    """Median seconds per self-attention forward of each of :func:`form_runners`' forms.

    Runs under ``torch.inference_mode`` in float32 on ``x`` of shape ``(B, L, D)``, the
    forms interleaved so that a slow spell of the machine hits all of them.

    Args:
        batch_size: B.
        q_len: L = S.
        d_model: model width D.
        num_heads: number of heads H.
        repeat: timings per form (the median is taken).
        min_time: seconds per timing.
        threads: PyTorch threads during the timing (restored afterwards); ``None`` keeps
            the current setting.
        seed: seed of the weights and of ``x``.
        clock: ``"wall"`` or ``"cpu"``, as in :func:`median_time`.

    Returns:
        ``{form: seconds}`` for every name in :data:`FORMS_TIMED`.

    Raises:
        ValueError, TypeError: on bad sizes, a non-positive ``repeat`` or an unknown clock.
    """
    _validate.check_positive("batch_size", batch_size)
    _validate.check_positive("q_len", q_len)
    params = init_params(d_model, num_heads, seed=seed).to_torch(torch.float32)
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(batch_size, q_len, d_model, generator=gen)
    _validate.check_positive("repeat", repeat)
    tick = _clock(clock)
    runners = form_runners(params, x)
    old_threads = torch.get_num_threads()
    samples: dict[str, list[float]] = {name: [] for name in runners}
    try:
        if threads is not None:
            torch.set_num_threads(threads)
        with torch.inference_mode():
            numbers = {name: _calibrate(fn, min_time) for name, fn in runners.items()}
            for _ in range(repeat):
                for name, fn in runners.items():
                    samples[name].append(_mean_time(fn, numbers[name], tick))
    finally:
        torch.set_num_threads(old_threads)
    return {name: statistics.median(s) for name, s in samples.items()}
