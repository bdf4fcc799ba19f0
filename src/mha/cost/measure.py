"""Generic probes of what a real run did: FLOPs, operators, memory, time, child processes.

The arithmetic of :mod:`mha.cost.arithmetic` is checked against these, which know nothing of
attention: :func:`count_flops` (``FlopCounterMode``, taught to count the CPU kernel of
``scaled_dot_product_attention``), :func:`count_aten_ops` (how many PyTorch operators a
callable dispatches), :func:`peak_rss_increase` (the resident-memory high-water mark, Linux
only), the timers (:func:`median_time` for one callable, :func:`interleaved_times` for
several taking turns, so that a slow spell of a shared machine hits all of them, with
:func:`calibrate`, :func:`clock_named` and :func:`cpu_model`), and :func:`run_child`, which runs
one measurement in a fresh Python process with its own memory baseline and BLAS thread count.
The measurements of attention built on them are in :mod:`mha.cost.peak_memory` and
:mod:`mha.cost.timings`.
"""

from __future__ import annotations

import collections
import ctypes
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import FlopCounterMode, sdpa_flop_count

from mha.core._checks import arguments

# --- FLOPs and operators ------------------------------------------------------------------


def _callable(name: str, fn: Any) -> Callable[..., Any]:
    if not callable(fn):
        raise TypeError(f"{name} must be callable; got {arguments.describe(fn)}")
    return fn


def _cpu_sdpa_flop(query_shape, key_shape, value_shape, *args, out_shape=None, **kwargs) -> int:
    return sdpa_flop_count(query_shape, key_shape, value_shape)


def flop_counter() -> FlopCounterMode:
    """A silent ``FlopCounterMode`` that also counts ``scaled_dot_product_attention`` on CPU.

    ``FlopCounterMode`` knows the matrix products (``mm``, ``addmm``, ``bmm``, ...) and the
    CUDA attention kernels, but not ``aten._scaled_dot_product_flash_attention_for_cpu``,
    the CPU kernel of ``torch.nn.functional.scaled_dot_product_attention``: without help it
    reports 0 FLOPs for it. This counter uses PyTorch's own SDPA formula for that kernel
    (``2 B H L S Dh`` for the scores plus the same for the weighted sum).

    Returns:
        A ``FlopCounterMode`` to use as a context manager; it prints nothing.
    """
    sdpa_cpu = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu
    return FlopCounterMode(display=False, custom_mapping={sdpa_cpu: _cpu_sdpa_flop})


def count_flops(fn: Callable[[], Any]) -> dict[str, int]:
    """Run ``fn()`` under :func:`flop_counter` and return the FLOPs of each operator.

    Args:
        fn: the work to count, called once with no arguments.

    Returns:
        ``{"aten.addmm": ..., "aten.bmm": ..., ...}``; its values sum to the total. Operators
        ``FlopCounterMode`` has no formula for (softmax, additions) are absent.

    Raises:
        TypeError: if ``fn`` is not callable.
    """
    _callable("fn", fn)
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

    Args:
        fn: the work to count, called once with no arguments.

    Returns:
        A ``collections.Counter`` of operator names (``"aten.bmm"``, ...).

    Raises:
        TypeError: if ``fn`` is not callable.
    """
    _callable("fn", fn)
    with torch.inference_mode(False), torch.no_grad(), _OpCounter() as counter:
        fn()
    return counter.counts


MATMUL_OPS = ("aten.mm", "aten.addmm", "aten.bmm", "aten.baddbmm")

# --- Memory ------------------------------------------------------------------------------


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
    process from timings (:func:`mha.cost.peak_memory.attention_peak_memory` does).
    The measurement runs with the calling thread on one CPU, where the kernel's count of
    resident pages lags least (:func:`_on_one_cpu`).

    Args:
        fn: the work to measure; its result is dropped before returning.
        warmup: run ``fn()`` once first, so one-off allocations (thread pools, caches)
            are not counted.

    Returns:
        Peak resident bytes above the level before the call (page granularity).

    Raises:
        RuntimeError: if ``/proc/self/clear_refs`` or glibc's ``mallopt`` is unavailable.
        TypeError: if ``fn`` is not callable or ``warmup`` is not a bool.
    """
    _callable("fn", fn)
    arguments.check_bool("warmup", warmup)
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
    with _on_one_cpu():
        libc.malloc_trim(0)
        clear_refs.write_text("5")
        before = _status_bytes("VmRSS")
        fn()
        return _status_bytes("VmHWM") - before


@contextmanager
def _on_one_cpu() -> Iterator[None]:
    """Keep the calling thread on one CPU inside the block (Linux; elsewhere a no-op).

    Since Linux 6.2 a process's resident-page count is a per-CPU counter whose ``VmRSS``
    and ``VmHWM`` in ``/proc`` lag by up to one batch of pages on every CPU the process ran
    on (the batch grows with the number of CPUs). On one CPU the lag is one batch, at most
    ``max(32, 2 n_cpus)`` pages: 512 KiB with 64 CPUs.
    """
    if not hasattr(os, "sched_getaffinity"):
        yield
        return
    allowed = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(allowed)})
    try:
        yield
    finally:
        os.sched_setaffinity(0, allowed)


# --- Time --------------------------------------------------------------------------------


CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}

# The least bytes written between timed cached steps (cached_step_times), so that each
# step reads its layer from main memory; more on a processor with a larger cache.
CACHE_FLUSH_BYTES = 256 * 2**20
_CPU_CACHES = Path("/sys/devices/system/cpu/cpu0/cache")
_SIZE_UNITS = {"K": 2**10, "M": 2**20, "G": 2**30}


def last_level_cache_bytes() -> int | None:
    """The size of this processor's largest cache, from Linux's sysfs (``None`` elsewhere).

    Returns:
        Bytes of the highest-level cache CPU 0 reports, or ``None`` if it reports none.
    """
    sizes: dict[int, int] = {}  # level -> bytes
    for index in sorted(_CPU_CACHES.glob("index*")):
        try:
            level = int((index / "level").read_text())
            text = (index / "size").read_text().strip()
        except (OSError, ValueError):
            continue
        unit = _SIZE_UNITS.get(text[-1:], 1)
        digits = text[:-1] if text[-1:] in _SIZE_UNITS else text
        if digits.isdigit():
            sizes[level] = max(sizes.get(level, 0), int(digits) * unit)
    return sizes[max(sizes)] if sizes else None


def default_flush_bytes() -> int:
    """Bytes to write between two timed calls so that the second reads from main memory.

    Returns:
        Twice the largest cache (:func:`last_level_cache_bytes`), and at least
        :data:`CACHE_FLUSH_BYTES`.
    """
    return max(CACHE_FLUSH_BYTES, 2 * (last_level_cache_bytes() or 0))


def clock_named(name: str) -> Callable[[], float]:
    """The clock of :data:`CLOCKS` called ``name``.

    Args:
        name: ``"wall"`` or ``"cpu"``.

    Returns:
        A function that returns seconds.

    Raises:
        ValueError: if ``name`` is not a key of :data:`CLOCKS`.
    """
    if not isinstance(name, str) or name not in CLOCKS:
        raise ValueError(f"clock must be one of {tuple(CLOCKS)}; got clock={name!r}")
    return CLOCKS[name]


def calibrate(fn: Callable[[], Any], min_time: float) -> int:
    """The number of calls of ``fn`` that last about ``min_time`` seconds.

    Args:
        fn: the function to time; called once here, as a warm-up, to measure one call.
        min_time: seconds the calls should last together.

    Returns:
        At least 1.

    Raises:
        ValueError: if ``min_time`` is negative or not finite.
        TypeError: if ``fn`` is not callable or ``min_time`` not a real number.
    """
    _callable("fn", fn)
    min_time = arguments.number("min_time", min_time, low=0.0)
    start = time.perf_counter()
    fn()
    first = time.perf_counter() - start
    return max(1, math.ceil(min_time / max(first, 1e-9)))


def mean_time(fn: Callable[[], Any], number: int, clock: Callable[[], float]) -> float:
    """The mean time of ``number`` calls of ``fn`` in a row.

    Args:
        fn: the function to time.
        number: how many calls.
        clock: a function that returns seconds (:func:`clock_named`).

    Returns:
        Seconds per call.

    Raises:
        ValueError: if ``number`` is not positive.
        TypeError: if ``fn`` or ``clock`` is not callable, or ``number`` not an int.
    """
    _callable("fn", fn)
    _callable("clock", clock)
    number = arguments.size("number", number, high=None)
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
        ValueError: if ``repeat``, ``number`` or ``min_time`` is not positive (or
            ``min_time`` not finite), or the clock is unknown.
        TypeError: if ``fn`` is not callable, ``repeat`` or ``number`` not an int (a Python
            or NumPy integer, not a bool), or ``min_time`` not a real number.
    """
    _callable("fn", fn)
    repeat = arguments.size("repeat", repeat, high=None)
    tick = clock_named(clock)
    min_time = arguments.number("min_time", min_time, low=0.0, open_low=True)
    if number is not None:
        number = arguments.size("number", number, high=None)
    if number is None:
        number = calibrate(fn, min_time)
    else:
        fn()  # warm-up
    return statistics.median(mean_time(fn, number, tick) for _ in range(repeat))


def interleaved_times(
    fns: dict[str, Callable[[], Any]],
    repeat: int,
    *,
    min_time: float = 0.0,
    warmup: int = 1,
    clock: str = "wall",
) -> dict[str, list[float]]:
    """Seconds per call of each ``fn()``, in ``repeat`` rounds that run every ``fn`` in turn.

    Interleaving means that a change of the machine's load during the run hits every
    callable alike, so ratios of times taken in the same round stay meaningful on a shared
    machine (take the median over rounds of the per-round ratios).

    Args:
        fns: the callables to time, by name.
        repeat: number of rounds.
        min_time: seconds each timing should last; each ``fn`` is called as many times per
            round as that takes (estimated from one call after warm-up), at least once.
        warmup: untimed rounds first (thread pools, caches, allocations).
        clock: ``"wall"`` or ``"cpu"``, as in :func:`median_time`.

    Returns:
        ``{name: [seconds per call in round 1, round 2, ...]}``.

    Raises:
        ValueError: if ``repeat`` is not positive, ``min_time`` or ``warmup`` is negative
            (or ``min_time`` not finite), or the clock is unknown.
        TypeError: if ``fns`` is not a dict of callables, ``repeat`` or ``warmup`` not an
            int (a Python or NumPy integer, not a bool), or ``min_time`` not a real number.
    """
    if not isinstance(fns, Mapping):
        raise TypeError(f"fns must be a dict of callables by name; got {arguments.describe(fns)}")
    for name, fn in fns.items():
        _callable(f"fns[{name!r}]", fn)
    repeat = arguments.size("repeat", repeat, high=None)
    warmup = arguments.size("warmup", warmup, 0, None)
    min_time = arguments.number("min_time", min_time, low=0.0)
    tick = clock_named(clock)
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    numbers = {name: calibrate(fn, min_time) if min_time > 0 else 1 for name, fn in fns.items()}
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeat):
        for name, fn in fns.items():
            times[name].append(mean_time(fn, numbers[name], tick))
    return times


def cpu_model() -> str:
    """The name of this machine's CPU, as the operating system reports it.

    Returns:
        The ``model name`` of ``/proc/cpuinfo`` on Linux, else :func:`platform.processor`
        or :func:`platform.machine`; ``"unknown CPU"`` if none says.
    """
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text(errors="replace").splitlines():
            if line.lower().startswith(("model name", "hardware", "cpu model")):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine() or "unknown CPU"


# --- Child processes: one measurement in a fresh Python process --------------------------


_BLAS_THREAD_VARIABLES = (
    "OPENBLAS_NUM_THREADS",
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
)


def _child_env(threads: int | None) -> dict[str, str]:
    """This process's environment, with the BLAS thread count set (unless ``threads`` is None)."""
    env = dict(os.environ)
    if threads is not None:
        env.update({name: str(threads) for name in _BLAS_THREAD_VARIABLES})
    return env


def run_child(module: str, entry: str, spec: dict[str, Any], threads: int | None) -> Any:
    """Run ``module.entry()`` in a fresh Python process and return what it prints.

    A fresh process measures memory from its own baseline, and reads the BLAS thread count
    from its environment when NumPy loads.

    Args:
        module: the module that defines ``entry``.
        entry: a function that reads ``spec`` as JSON on stdin and prints its result as JSON
            on the last line of stdout.
        spec: the arguments of the measurement.
        threads: the BLAS thread count of the child, or ``None`` for this process's setting.

    Returns:
        The decoded JSON result.

    Raises:
        RuntimeError: if the child fails, with the end of its stderr.
        ValueError: if ``threads`` is not positive.
        TypeError: if ``module`` or ``entry`` is not a string, ``spec`` is not a dict that
            JSON can write, or ``threads`` is not an int.
    """
    arguments.text("module", module)
    arguments.text("entry", entry)
    if not isinstance(spec, dict):
        raise TypeError(f"spec must be a dict; got {arguments.describe(spec)}")
    if threads is not None:
        threads = arguments.size("threads", threads, high=None)
    try:
        text = json.dumps(spec)
    except (TypeError, ValueError) as error:
        raise TypeError(f"spec must hold only what JSON can write; got {error}") from None
    result = subprocess.run(
        [sys.executable, "-c", f"from {module} import {entry}; {entry}()"],
        input=text,
        capture_output=True,
        text=True,
        env=_child_env(threads),
    )
    if result.returncode != 0:
        raise RuntimeError(f"measurement failed in {module}.{entry}:\n{result.stderr[-3000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])
