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

from mha import _validate as v
from mha import torch_backend
from mha.module import to_torch_mha
from mha.params import MHAParams, init_params


def _check_count(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int; got {type(value).__name__} {value!r}")
    if value <= 0:
        raise ValueError(f"{name} must be positive; got {name}={value}")


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
        _check_count(name, value)
    v.check_sizes(d_model, num_heads)
    G = num_heads if num_kv_heads is None else num_kv_heads
    _check_count("num_kv_heads", G)
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
    _check_count("num_heads", num_heads)
    v.check_form(form)
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
        _check_count(name, value)
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
    threads: int | None = 1,
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
    _check_count("batch_size", batch_size)
    for L in q_lens:
        _check_count("q_lens[i]", L)
    v.check_sizes(d_model, num_heads)
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
    _check_count("repeat", repeat)
    tick = _clock(clock)
    if not min_time > 0:
        raise ValueError(f"min_time must be positive; got min_time={min_time}")
    if number is None:
        number = _calibrate(fn, min_time)
    else:
        _check_count("number", number)
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
    _check_count("batch_size", batch_size)
    _check_count("q_len", q_len)
    params = init_params(d_model, num_heads, seed=seed).to_torch(torch.float32)
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(batch_size, q_len, d_model, generator=gen)
    _check_count("repeat", repeat)
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


# --- Inference: the key/value cache and one decoding step ----------------------------------


def kv_cache_bytes(
    num_layers: int,
    kv_len: int,
    num_kv_heads: int,
    d_head: int,
    dtype: Any = torch.float16,
    *,
    batch_size: int = 1,
) -> int:
    """Bytes of a key/value cache: ``2 * layers * B * S * H_kv * Dh`` times the item size.

    The 2 counts keys and values; each layer caches its own. Multi-query attention
    (``H_kv = 1``) and grouped-query attention (``1 < H_kv < H``) shrink the cache by
    ``H / H_kv`` against multi-head attention (``H_kv = H``).

    Args:
        num_layers: attention layers of the model.
        kv_len: S, the positions cached.
        num_kv_heads: H_kv.
        d_head: Dh.
        dtype: the cache's dtype (NumPy or PyTorch).
        batch_size: B, the sequences decoded together.

    Returns:
        The size in bytes.

    Raises:
        ValueError: if a size is not positive.
        TypeError: if a size is not an int or ``dtype`` is not a dtype.
    """
    for name, value in (
        ("num_layers", num_layers),
        ("kv_len", kv_len),
        ("num_kv_heads", num_kv_heads),
        ("d_head", d_head),
        ("batch_size", batch_size),
    ):
        _check_count(name, value)
    return 2 * num_layers * batch_size * kv_len * num_kv_heads * d_head * _itemsize(dtype)


@dataclass(frozen=True)
class PublishedConfig:
    """The attention sizes of a published model, from its released configuration.

    Attributes:
        name: the model.
        num_layers: attention layers.
        num_heads: H, query heads per layer.
        num_kv_heads: H_kv, key/value heads per layer.
        d_head: Dh.
        source: the citation key of the paper that describes the model.
    """

    name: str
    num_layers: int
    num_heads: int
    num_kv_heads: int
    d_head: int
    source: str


# From each model's released config (num_hidden_layers, num_attention_heads,
# num_key_value_heads, hidden_size / num_attention_heads).
PUBLISHED_CONFIGS = (
    PublishedConfig("Llama 2 7B", 32, 32, 32, 128, "touvron2023llama"),
    PublishedConfig("Llama 2 70B", 80, 64, 8, 128, "touvron2023llama"),
    PublishedConfig("Mistral 7B", 32, 32, 8, 128, "jiang2023mistral"),
    PublishedConfig("TinyLlama 1.1B", 22, 32, 4, 64, "zhang2024tinyllama"),
)


@dataclass(frozen=True)
class DecodeStepCost:
    """FLOPs and the least bytes moved by one attention layer for one new token per sequence.

    Attributes:
        flops: multiply-adds of the matrix products, 2 FLOPs each.
        bytes: the least traffic between memory and the processor: every weight read
            once, the cached keys and values read once, the new ones written once, and the
            layer's input and output.
    """

    flops: int
    bytes: int

    @property
    def intensity(self) -> float:
        """Arithmetic intensity, FLOPs per byte moved."""
        return self.flops / self.bytes


def decode_step_cost(
    d_model: int,
    num_heads: int,
    num_kv_heads: int,
    kv_len: int,
    dtype: Any = torch.float16,
    *,
    batch_size: int = 1,
    cached: bool = True,
) -> DecodeStepCost:
    """What one attention layer costs to produce the next token, with or without a cache.

    With a cache (``cached=True``), the new token of each sequence is projected
    (``4 D^2 + 4 D H_kv Dh`` FLOPs: queries, keys and values of width ``H Dh = D``,
    ``H_kv Dh`` and ``H_kv Dh``, and the output), and attends to the ``S`` cached positions
    and itself (``4 H (S + 1) Dh``). Without one, the layer runs again on the whole prefix
    of ``N = S + 1`` tokens: ``N (4 D^2 + 4 D H_kv Dh) + 4 H N^2 Dh``, the cost of a full
    forward (the explicit score matrix is dense even under a causal mask).

    Bytes: the weights (``2 D^2 + 2 D H_kv Dh`` elements) are read once per step whatever
    ``B``; with a cache the ``2 B S H_kv Dh`` cached elements are read and ``2 B H_kv Dh``
    written; without one the ``B N D`` inputs are read and the same outputs written. So a
    cached step reads every cached element for about ``4 H / H_kv`` FLOPs: its intensity is
    set by ``H / H_kv``, which is why multi-query and grouped-query attention speed up
    memory-bound decoding.

    Args:
        d_model: D.
        num_heads: H; must divide D.
        num_kv_heads: H_kv; must divide H.
        kv_len: S, the positions before the new token.
        dtype: the dtype of weights and cache.
        batch_size: B.
        cached: whether the keys and values of the prefix come from a cache.

    Returns:
        A :class:`DecodeStepCost`.

    Raises:
        ValueError: if a size is not positive, H does not divide D or H_kv does not
            divide H.
        TypeError: if a size is not an int or ``cached`` is not a bool.
    """
    v.check_sizes(d_model, num_heads)
    for name, value in (
        ("num_kv_heads", num_kv_heads),
        ("kv_len", kv_len),
        ("batch_size", batch_size),
    ):
        _check_count(name, value)
    if num_heads % num_kv_heads != 0:
        raise ValueError(
            f"num_kv_heads must divide num_heads; got num_heads={num_heads}, "
            f"num_kv_heads={num_kv_heads}"
        )
    if not isinstance(cached, bool):
        raise TypeError(f"cached must be a bool; got {type(cached).__name__} {cached!r}")
    D, H, H_kv, B = d_model, num_heads, num_kv_heads, batch_size
    Dh, N = D // H, kv_len + 1
    item = _itemsize(dtype)
    per_token = 4 * D * D + 4 * D * H_kv * Dh  # q, k, v and output projections
    weights = 2 * D * D + 2 * D * H_kv * Dh
    if cached:
        flops = B * (per_token + 4 * H * N * Dh)
        moved = weights + 2 * B * kv_len * H_kv * Dh + 2 * B * H_kv * Dh + 2 * B * D
    else:
        flops = B * (N * per_token + 4 * H * N * N * Dh)
        moved = weights + 2 * B * N * D
    return DecodeStepCost(flops=flops, bytes=moved * item)


# --- IO: the model (elements moved between slow and fast memory) ---------------------------


@dataclass(frozen=True)
class AttentionIO:
    """Elements one attention head moves between slow memory and fast memory.

    "Slow" memory holds the inputs and outputs (a GPU's HBM, a CPU's main memory); "fast"
    memory holds the tiles being worked on (on-chip SRAM, a cache) and has room for
    ``fast_memory`` elements. Counts are elements, not bytes.

    Attributes:
        reads: elements loaded from slow memory.
        writes: elements stored to slow memory.
    """

    reads: int
    writes: int

    @property
    def total(self) -> int:
        """Reads plus writes."""
        return self.reads + self.writes


def tiled_fast_memory(block_q: int, block_kv: int, d_head: int) -> int:
    """Elements the tiled forward holds in fast memory at once, per head.

    A query block and its output accumulator (``2 Br Dh``), a key and a value block
    (``2 Bc Dh``), one tile of scores (``Br Bc``), and the running maximum and sum (``2 Br``).

    Args:
        block_q: Br.
        block_kv: Bc.
        d_head: Dh.

    Returns:
        ``2 Br Dh + 2 Bc Dh + Br Bc + 2 Br``.

    Raises:
        ValueError: if a size is not positive.
        TypeError: if a size is not an int.
    """
    for name, value in (("block_q", block_q), ("block_kv", block_kv), ("d_head", d_head)):
        _check_count(name, value)
    return 2 * block_q * d_head + 2 * block_kv * d_head + block_q * block_kv + 2 * block_q


def tiled_block_sizes(d_head: int, fast_memory: int) -> tuple[int, int]:
    """The block sizes ``(Br, Bc)`` that the IO model uses for a fast memory of M elements.

    The key/value block is ``Bc = min(Dh, M // (4 Dh))`` (at least 1): ``Bc = Dh`` once
    ``M >= 4 Dh^2``, so that the score tile ``(Br, Bc)`` takes no more room than the query
    block ``(Br, Dh)``. The query block ``Br`` is then the largest for which
    :func:`tiled_fast_memory` fits in M:

        ``Br = floor((M - 2 Bc Dh) / (2 Dh + Bc + 2))``, i.e.
        ``floor((M - 2 Dh^2) / (3 Dh + 2))`` when ``Bc = Dh``.

    The outer (query) block is the large one, because the inner blocks are read once per
    outer block; FlashAttention (Dao et al., 2022) makes the same choice with its loops the
    other way round.

    Args:
        d_head: Dh.
        fast_memory: M, in elements.

    Returns:
        ``(Br, Bc)``.

    Raises:
        ValueError: if a size is not positive, or M is too small for one row of each block
            (``M < tiled_fast_memory(1, 1, Dh)``).
        TypeError: if a size is not an int.
    """
    _check_count("d_head", d_head)
    _check_count("fast_memory", fast_memory)
    block_kv = max(1, min(d_head, fast_memory // (4 * d_head)))
    block_q = (fast_memory - 2 * block_kv * d_head) // (2 * d_head + block_kv + 2)
    if block_q < 1:
        raise ValueError(
            f"fast_memory must hold at least one row of each block, "
            f"{tiled_fast_memory(1, 1, d_head)} elements for d_head={d_head}; "
            f"got fast_memory={fast_memory}"
        )
    return block_q, block_kv


def _io_blocks(
    d_head: int, fast_memory: int | None, blocks: tuple[int, int] | None
) -> tuple[int, int]:
    if (fast_memory is None) == (blocks is None):
        raise ValueError(
            f"give exactly one of fast_memory and blocks; got fast_memory={fast_memory}, "
            f"blocks={blocks}"
        )
    if blocks is None:
        return tiled_block_sizes(d_head, fast_memory)
    block_q, block_kv = blocks
    _check_count("blocks[0]", block_q)
    _check_count("blocks[1]", block_kv)
    return block_q, block_kv


def tiled_attention_io(
    q_len: int,
    kv_len: int,
    d_head: int,
    fast_memory: int | None = None,
    *,
    blocks: tuple[int, int] | None = None,
    causal: bool = False,
) -> AttentionIO:
    """Exact element count of one head of :func:`mha.tiled.attention` (``Dv = Dh``).

    Each of the ``ceil(L / Br)`` query blocks is read once and reads every key and value
    block (with ``causal``, only the blocks that start at or before its last row); the
    output and the log-sum-exp are written once:

        reads ``= L Dh + 2 Dh sum_i (key rows read by block i)``, writes ``= L Dh + L``.

    Without a mask that is ``2 L Dh + L + 2 ceil(L / Br) S Dh`` in all. With the blocks of
    :func:`tiled_block_sizes` (``Bc = Dh``, ``Br = floor((M - 2 Dh^2) / (3 Dh + 2))``) its
    ratio to ``L S Dh^2 / M`` (:func:`flash_io_bound`, the order of Dao et al., 2022,
    Theorem 2) is about ``6 (1 + 2 / (3 Dh)) M / (M - 2 Dh^2)`` plus the rounding up of
    ``L / Br``: it tends to 6 when ``M >> Dh^2`` and ``L >> Br``, and is about 7 to 10 for
    ``8 Dh^2 <= M <= N Dh`` at ``N = 4096``, ``Dh = 64`` (more for smaller M, where the
    ``2 Dh^2`` of the key and value blocks take much of the fast memory).

    Args:
        q_len: L.
        kv_len: S.
        d_head: Dh.
        fast_memory: M, in elements; the blocks come from :func:`tiled_block_sizes`.
        blocks: ``(Br, Bc)`` instead of ``fast_memory``.
        causal: query ``i`` attends to keys ``j <= i`` and tiles above the diagonal are
            skipped.

    Returns:
        The reads and writes, an :class:`AttentionIO`.

    Raises:
        ValueError: if a size is not positive, or not exactly one of ``fast_memory`` and
            ``blocks`` is given.
        TypeError: if a size is not an int.
    """
    for name, value in (("q_len", q_len), ("kv_len", kv_len), ("d_head", d_head)):
        _check_count(name, value)
    block_q, block_kv = _io_blocks(d_head, fast_memory, blocks)
    key_rows = 0
    for start in range(0, q_len, block_q):
        stop = min(start + block_q, q_len)
        seen = min(stop, kv_len) if causal else kv_len  # key blocks starting before `seen`
        key_rows += min(kv_len, math.ceil(seen / block_kv) * block_kv)
    return AttentionIO(reads=q_len * d_head + 2 * d_head * key_rows, writes=q_len * d_head + q_len)


def naive_attention_io(
    q_len: int,
    kv_len: int,
    d_head: int,
    fast_memory: int | None = None,
    *,
    blocks: tuple[int, int] | None = None,
    softmax_rows: int | None = None,
) -> AttentionIO:
    """Exact element count of one head of :func:`mha.tiled.three_pass_attention` (``Dv = Dh``).

    Standard attention with its two matrix products done in the tiles of the tiled
    algorithm, plus the materialisation of the scores and weights. Pass 1 reads Q once and
    K once per query block and writes the ``L S`` scores; pass 2 reads them, once when a
    block of whole rows fits in fast memory (``softmax_rows``; from ``fast_memory``,
    :func:`naive_softmax_rows`: ``M // (S + 2)`` rows, each with its maximum and sum) or when
    one tile spans a row (``Bc >= S``), twice otherwise (statistics, then weights), and
    writes the ``L S`` weights; pass 3 reads the weights and V once per query block and
    writes the output. So it is :func:`tiled_attention_io` (no mask) plus exactly
    ``4 L S - L`` elements (``5 L S - L`` when the scores are read twice): the tiled count's
    re-reading of K and V, ``2 ceil(L / Br) S Dh``, is shared. Standard attention's
    ``Theta(N d + N^2)`` of Dao et al. (2022), Theorem 2, holds when that shared term is at
    most of order ``N^2``, i.e. ``M`` of order ``Dh^2`` or more; with a smaller fast memory
    the products themselves dominate both counts.

    Args:
        q_len: L.
        kv_len: S.
        d_head: Dh.
        fast_memory: M, in elements; the blocks come from :func:`tiled_block_sizes` and the
            softmax rows from M.
        blocks: ``(Br, Bc)`` instead of ``fast_memory``.
        softmax_rows: with ``blocks``, the rows per block of the softmax pass (``None``: the
            tiles), as in :func:`mha.tiled.three_pass_attention`.

    Returns:
        The reads and writes, an :class:`AttentionIO`.

    Raises:
        ValueError: if a size is not positive, not exactly one of ``fast_memory`` and
            ``blocks`` is given, or ``softmax_rows`` is given with ``fast_memory``.
        TypeError: if a size is not an int.
    """
    for name, value in (("q_len", q_len), ("kv_len", kv_len), ("d_head", d_head)):
        _check_count(name, value)
    block_q, block_kv = _io_blocks(d_head, fast_memory, blocks)
    if softmax_rows is not None:
        if fast_memory is not None:
            raise ValueError(
                f"softmax_rows goes with blocks, not fast_memory (it follows from M); got "
                f"fast_memory={fast_memory}, softmax_rows={softmax_rows}"
            )
        _check_count("softmax_rows", softmax_rows)
    L, S, Dh = q_len, kv_len, d_head
    if fast_memory is not None:
        softmax_rows = naive_softmax_rows(S, fast_memory)
    rows_fit = softmax_rows is not None
    passes_over_scores = 1 if rows_fit or block_kv >= S else 2
    q_blocks = math.ceil(L / block_q)
    reads = (L * Dh + q_blocks * S * Dh) + passes_over_scores * L * S + (L * S + q_blocks * S * Dh)
    return AttentionIO(reads=reads, writes=L * S + L * S + L * Dh)


def naive_softmax_rows(kv_len: int, fast_memory: int) -> int | None:
    """Rows of scores the standard algorithm's softmax pass holds at once: ``M // (S + 2)``.

    Args:
        kv_len: S.
        fast_memory: M, in elements.

    Returns:
        The number of whole rows (with their maximum and sum) that fit in M, or ``None``
        when not even one does (then the softmax goes tile by tile and reads each score
        twice).

    Raises:
        ValueError: if a size is not positive.
        TypeError: if a size is not an int.
    """
    _check_count("kv_len", kv_len)
    _check_count("fast_memory", fast_memory)
    rows = fast_memory // (kv_len + 2)
    return rows if rows >= 1 else None


def flash_io_bound(q_len: int, kv_len: int, d_head: int, fast_memory: int) -> float:
    """``L S Dh^2 / M``: the order of FlashAttention's slow-memory traffic, without a constant.

    Dao et al. (2022), Theorem 2, state ``Theta(N^2 d^2 M^-1)`` for ``L = S = N``,
    ``Dh = d``, ``d <= M <= N d``.

    Args:
        q_len: L.
        kv_len: S.
        d_head: Dh.
        fast_memory: M, in elements.

    Returns:
        ``L S Dh^2 / M``.

    Raises:
        ValueError: if a size is not positive.
        TypeError: if a size is not an int.
    """
    for name, value in (
        ("q_len", q_len),
        ("kv_len", kv_len),
        ("d_head", d_head),
        ("fast_memory", fast_memory),
    ):
        _check_count(name, value)
    return q_len * kv_len * d_head**2 / fast_memory


# --- Memory and time of the tiled and backward passes in NumPy: measured -------------------


TILED_MEMORY_PATHS = ("numpy", "numpy tiled", "sdpa", "numpy backward", "numpy tiled backward")
_BLAS_THREAD_VARIABLES = (
    "OPENBLAS_NUM_THREADS",
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
)


def _tiled_memory_runner(path: str, params: MHAParams, x: np.ndarray) -> Callable[[], Any]:
    from mha import backward, np_backend

    N = np_backend
    if path == "numpy":
        return lambda: N.multi_head_attention(x, x, x, params, form="fused", need_weights=False)
    if path == "numpy tiled":
        return lambda: N.multi_head_attention(x, x, x, params, form="tiled", need_weights=False)
    if path == "sdpa":
        p_t, x_t = params.to_torch(), torch.from_numpy(x)

        def sdpa() -> Any:
            with torch.inference_mode():
                return torch_backend.multi_head_attention(
                    x_t, x_t, x_t, p_t, form="packed", need_weights=False
                )

        return sdpa
    form = "fused" if path == "numpy backward" else "tiled"
    d_out = np.ones_like(x)

    def train_step() -> Any:
        _, saved = backward.multi_head_attention_forward(x, x, x, params, form=form)
        return backward.multi_head_attention(saved, d_out)

    return train_step


def _child_env(threads: int | None) -> dict[str, str]:
    """This process's environment, with the BLAS thread count set (unless ``threads`` is None)."""
    import os

    env = dict(os.environ)
    if threads is not None:
        env.update({name: str(threads) for name in _BLAS_THREAD_VARIABLES})
    return env


def _tiled_memory_child() -> None:
    """Entry point of the child process of :func:`tiled_peak_memory` (JSON on stdin)."""
    spec = json.loads(sys.stdin.read())
    if spec["threads"] is not None:
        torch.set_num_threads(spec["threads"])
    D, H, B = spec["d_model"], spec["num_heads"], spec["batch_size"]
    params = init_params(D, H, seed=0, dtype=spec["dtype"])
    rng = np.random.default_rng(0)
    out: dict[str, list[int]] = {path: [] for path in spec["paths"]}
    for L in spec["q_lens"]:
        x = rng.standard_normal((B, L, D)).astype(spec["dtype"])
        for path in spec["paths"]:
            out[path].append(peak_rss_increase(_tiled_memory_runner(path, params, x)))
    print(json.dumps(out))


def _run_child(entry: str, spec: dict[str, Any], threads: int | None) -> Any:
    result = subprocess.run(
        [sys.executable, "-c", f"from mha.cost import {entry}; {entry}()"],
        input=json.dumps(spec),
        capture_output=True,
        text=True,
        env=_child_env(threads),
    )
    if result.returncode != 0:
        raise RuntimeError(f"measurement failed:\n{result.stderr[-3000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def tiled_peak_memory(
    batch_size: int,
    q_lens: list[int],
    d_model: int,
    num_heads: int,
    *,
    paths: tuple[str, ...] = TILED_MEMORY_PATHS,
    dtype: str = "float32",
    threads: int | None = 1,
) -> dict[str, list[int]]:
    """Measured peak extra resident memory of NumPy forward and backward passes, in a child.

    Self-attention of ``x`` of shape ``(B, L, D)`` with :func:`mha.init_params` weights:
    ``"numpy"`` is :func:`mha.np_backend.multi_head_attention` (fused form, weights not
    returned: one ``(B, H, L, S)`` tensor, scores then weights, is held); ``"numpy tiled"``
    the same function with ``form="tiled"``; ``"sdpa"`` the PyTorch packed form without
    weights (``scaled_dot_product_attention``); ``"numpy backward"`` a forward that stores the
    weights plus the backward of :mod:`mha.backward`; ``"numpy tiled backward"`` the tiled
    forward (storing the log-sum-exp) plus the tiled backward. Each number comes from
    :func:`peak_rss_increase` in a child Python process.

    Args:
        batch_size: B.
        q_lens: the lengths L = S to measure.
        d_model: model width D.
        num_heads: number of heads H.
        paths: which of :data:`TILED_MEMORY_PATHS` to run.
        dtype: ``"float32"`` or ``"float64"``.
        threads: BLAS and PyTorch threads in the child (``None``: their defaults).

    Returns:
        ``{path: [bytes for each L]}``.

    Raises:
        ValueError: on an unknown path or dtype, or bad sizes.
        RuntimeError: if the child process fails (e.g. not on Linux with glibc).
    """
    _check_count("batch_size", batch_size)
    for L in q_lens:
        _check_count("q_lens[i]", L)
    v.check_sizes(d_model, num_heads)
    if threads is not None:
        _check_count("threads", threads)
    unknown = [p for p in paths if p not in TILED_MEMORY_PATHS]
    if unknown:
        raise ValueError(f"paths must be among {TILED_MEMORY_PATHS}; got {unknown}")
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
    return _run_child("_tiled_memory_child", spec, threads)


def _deferred_attention(q: np.ndarray, k: np.ndarray, v_: np.ndarray) -> np.ndarray:
    """Naive attention with the two savings of the tiled form: Q scaled, output divided once.

    The ``(..., L, S)`` scores are still formed, but not scaled (the queries are) and not
    normalised (the output is divided by the row sums, as FlashAttention-2 does).
    """
    scores = np.matmul(q * q.dtype.type(1.0 / math.sqrt(q.shape[-1])), k.swapaxes(-1, -2))
    scores -= scores.max(axis=-1, keepdims=True)  # (..., L, S)
    np.exp(scores, out=scores)
    total = scores.sum(axis=-1, keepdims=True)  # (..., L, 1)
    out = np.matmul(scores, v_)  # (..., L, Dv)
    out /= total
    return out


def _tiled_time_child() -> None:
    """Entry point of the child process of :func:`time_tiled` (JSON on stdin)."""
    from mha import backward, np_backend, tiled

    spec = json.loads(sys.stdin.read())
    if spec["threads"] is not None:
        torch.set_num_threads(spec["threads"])
    B, L, D, H = spec["batch_size"], spec["q_len"], spec["d_model"], spec["num_heads"]
    rng = np.random.default_rng(spec["seed"])
    dtype = np.dtype(spec["dtype"])
    q, k, val = (rng.standard_normal((B, H, L, D // H)).astype(dtype) for _ in range(3))
    q_t, k_t, v_t = (torch.from_numpy(x) for x in (q, k, val))
    runners: dict[str, Callable[[], Any]] = {}
    if spec["attention"]:
        runners["naive"] = lambda: np_backend.scaled_dot_product_attention(q, k, val)
        runners["naive, deferred"] = lambda: _deferred_attention(q, k, val)
        runners["sdpa"] = lambda: torch.nn.functional.scaled_dot_product_attention(q_t, k_t, v_t)
    for block_q, block_kv in spec["blocks"]:
        runners[f"tiled {block_q}x{block_kv}"] = lambda bq=block_q, bk=block_kv: tiled.attention(
            q, k, val, block_q=bq, block_kv=bk
        )
    if spec["backward"]:
        params = init_params(D, H, seed=spec["seed"], dtype=dtype)
        x = rng.standard_normal((B, L, D)).astype(dtype)
        d_out = rng.standard_normal((B, L, D)).astype(dtype)
        saved = {f: backward.multi_head_attention_forward(x, x, x, params, form=f)[1]
                 for f in ("fused", "tiled")}  # fmt: skip
        runners["layer forward"] = lambda: np_backend.multi_head_attention(x, x, x, params)
        for f in ("fused", "tiled"):
            runners[f"layer forward, {f}, saving"] = lambda f=f: (
                backward.multi_head_attention_forward(x, x, x, params, form=f)
            )
            runners[f"layer backward, {f}"] = lambda f=f: backward.multi_head_attention(
                saved[f], d_out
            )
    tick = _clock(spec["clock"])
    numbers = {name: _calibrate(fn, spec["min_time"]) for name, fn in runners.items()}
    samples: dict[str, list[float]] = {name: [] for name in runners}
    for _ in range(spec["repeat"]):
        for name, fn in runners.items():
            samples[name].append(_mean_time(fn, numbers[name], tick))
    print(json.dumps({name: statistics.median(s) for name, s in samples.items()}))


def time_tiled(
    batch_size: int,
    q_len: int,
    d_model: int,
    num_heads: int,
    *,
    blocks: list[tuple[int, int]],
    backward: bool = False,
    attention: bool = True,
    repeat: int = 5,
    min_time: float = 0.05,
    threads: int | None = 1,
    dtype: str = "float32",
    clock: str = "cpu",
    seed: int = 0,
) -> dict[str, float]:
    """Median seconds of NumPy attention, naive and tiled, measured in a child process.

    On per-head ``q``, ``k``, ``v`` of shape ``(B, H, L, D / H)`` (self-attention, no
    mask): ``"naive"`` is :func:`mha.np_backend.scaled_dot_product_attention` (forms the
    scores, scales them, normalises the weights); ``"naive, deferred"`` forms the scores too,
    but scales the queries instead and divides the output by the row sums once, as the tiled
    form does; ``"sdpa"`` is PyTorch's ``scaled_dot_product_attention`` on the same float32
    or float64 arrays (a compiled loop over tiles); ``"tiled BrxBc"`` is
    :func:`mha.tiled.attention` with those blocks. With
    ``backward``, also the layer on ``x`` of shape ``(B, L, D)``: ``"layer forward"``
    (:func:`mha.np_backend.multi_head_attention`), ``"layer forward, fused, saving"`` and
    ``"layer forward, tiled, saving"`` (:func:`mha.backward.multi_head_attention_forward`),
    ``"layer backward, fused"`` and ``"layer backward, tiled"``
    (:func:`mha.backward.multi_head_attention`). Runs are interleaved, so a slow spell of the
    machine hits all of them. The child's BLAS runs ``threads`` threads (set through the
    usual environment variables before NumPy loads): on a shared machine, idle BLAS threads
    waiting for a core can slow the many small products of the tiles far more than the few
    large products of the naive path.

    Args:
        batch_size: B.
        q_len: L = S.
        d_model: model width D.
        num_heads: number of heads H.
        blocks: the ``(Br, Bc)`` pairs to time.
        backward: also time the layer's forward and backward passes.
        attention: time ``"naive"``, ``"naive, deferred"`` and ``"sdpa"`` (False: only the
            tiled blocks and, with ``backward``, the layer).
        repeat: timings per implementation (the median is taken).
        min_time: seconds per timing.
        threads: BLAS and PyTorch threads in the child (``None``: the libraries' defaults).
        dtype: ``"float32"`` or ``"float64"``.
        clock: ``"wall"`` or ``"cpu"``, as in :func:`median_time`.
        seed: seed of the inputs and weights.

    Returns:
        ``{name: seconds per call}``.

    Raises:
        ValueError: on bad sizes, block sizes, clock or dtype.
        RuntimeError: if the child process fails.
    """
    for name, value in (("batch_size", batch_size), ("q_len", q_len), ("repeat", repeat)):
        _check_count(name, value)
    if threads is not None:
        _check_count("threads", threads)
    v.check_sizes(d_model, num_heads)
    for block_q, block_kv in blocks:
        v.check_block_size("block_q", block_q)
        v.check_block_size("block_kv", block_kv)
    _clock(clock)
    if dtype not in ("float32", "float64"):
        raise ValueError(f"dtype must be 'float32' or 'float64'; got dtype={dtype!r}")
    if not min_time > 0:
        raise ValueError(f"min_time must be positive; got min_time={min_time}")
    spec = {
        "batch_size": batch_size,
        "q_len": q_len,
        "d_model": d_model,
        "num_heads": num_heads,
        "blocks": [list(b) for b in blocks],
        "backward": backward,
        "attention": attention,
        "repeat": repeat,
        "min_time": min_time,
        "dtype": dtype,
        "clock": clock,
        "seed": seed,
        "threads": threads,
    }
    return _run_child("_tiled_time_child", spec, threads)
