"""Peak-memory experiments on attention, each in a fresh child process (Linux only).

:func:`attention_peak_memory` measures the forms of one layer, :func:`tiled_peak_memory`
the NumPy tiled form against the one that writes the scores, and
:func:`kv_cache_peak_memory` a key/value cache. Each starts its child with
:func:`mha.cost.measure.run_child` and measures with :func:`mha.cost.measure.peak_rss_increase`.
"""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from mha.backends import cpu_shortcuts, np_backend, torch_backend
from mha.backends.module import to_torch_mha
from mha.core._checks import arguments
from mha.core.kv_cache import KVCache
from mha.core.params import MHAParams, init_params
from mha.cost.measure import peak_rss_increase, run_child
from mha.numerics import backward

MEMORY_PATHS = (
    "explicit",
    "explicit, autograd",
    "per_head",
    "sdpa",
    "nn.MultiheadAttention",
    "explicit, plain",
)


def _plain_runner(params: MHAParams, x: torch.Tensor) -> Callable[[], Any]:
    """The packed form with weights, the CPU shortcuts off: scores, then a softmax copy."""

    def plain() -> Any:
        with cpu_shortcuts.use(False):
            return torch_backend.multi_head_attention(x, x, x, params, form="packed")

    return plain


def _memory_runner(path: str, params: MHAParams, x: torch.Tensor) -> Callable[[], Any]:
    if path == "explicit":
        return lambda: torch_backend.multi_head_attention(x, x, x, params, form="packed")
    if path == "explicit, plain":
        return _plain_runner(params, x)
    if path == "explicit, autograd":
        # Parameters that require grad, outside inference mode: autograd records the forward
        # and keeps the softmax's output for the backward pass. Copies made outside inference
        # mode are normal tensors, which autograd can record (inference tensors it cannot).
        with torch.inference_mode(False):
            p_grad = params.map(lambda t: t.clone().requires_grad_())
            x_plain = x.clone()

        def recorded() -> Any:
            with torch.inference_mode(False):
                return torch_backend.multi_head_attention(
                    x_plain, x_plain, x_plain, p_grad, form="packed"
                )

        return recorded
    if path == "per_head":
        return lambda: torch_backend.multi_head_attention(
            x, x, x, params, form="per_head", need_weights=False
        )
    if path == "sdpa":
        return lambda: torch_backend.multi_head_attention(
            x, x, x, params, form="packed", need_weights=False
        )
    module = to_torch_mha(params).eval()
    return lambda: module(x, x, x, need_weights=False)


def _memory_child() -> None:
    """Entry point of the child process of :func:`attention_peak_memory` (JSON on stdin)."""
    spec = _child_spec()
    dtype = getattr(torch, spec["dtype"])
    D, H, B = spec["d_model"], spec["num_heads"], spec["batch_size"]
    params = init_params(D, H, seed=0).to_torch(dtype)
    gen = torch.Generator().manual_seed(0)

    def draw(L: int) -> torch.Tensor:
        return torch.randn(B, L, D, generator=gen, dtype=dtype)  # (B, L, D)

    with torch.inference_mode():
        _print_peaks(spec, params, draw, _memory_runner)


def _child_spec() -> dict[str, Any]:
    """A child process's spec, read as JSON from stdin; sets torch's threads when it names them."""
    spec = json.loads(sys.stdin.read())
    if spec["threads"] is not None:
        torch.set_num_threads(spec["threads"])
    return spec


def _print_peaks(
    spec: dict[str, Any],
    params: Any,
    draw: Callable[[int], Any],
    runner: Callable[[str, Any, Any], Callable[[], Any]],
) -> None:
    """Print, as JSON, each path's peak RSS increase at each query length of ``spec``: the
    input ``(B, L, D)`` from ``draw(L)``, the call from ``runner(path, params, x)``."""
    out: dict[str, list[int]] = {path: [] for path in spec["paths"]}
    for L in spec["q_lens"]:
        x = draw(L)  # (B, L, D)
        for path in spec["paths"]:
            out[path].append(peak_rss_increase(runner(path, params, x)))
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
    PyTorch's module in eval mode with ``need_weights=False``; ``"explicit, plain"`` is
    ``"explicit"`` with the CPU shortcuts off (:func:`mha.backends.cpu_shortcuts.use`), the
    documented operations a plain ``softmax(q @ k.T)`` uses (scores, then the weights in a tensor of
    their own: two are held). Each number comes from
    :func:`mha.cost.measure.peak_rss_increase` in a child Python process, so this process's
    allocator is left alone.

    Args:
        batch_size: the batch size, B.
        q_lens: the lengths L = S to measure.
        d_model: model width D.
        num_heads: number of heads H.
        paths: which of :data:`MEMORY_PATHS` to run.
        dtype: ``"float32"`` or ``"float64"``.
        threads: PyTorch threads in the child.

    Returns:
        ``{path: [bytes for each L]}``.

    Raises:
        ValueError: on an unknown path or dtype, a size or ``threads`` that is not
            positive, or H not dividing D; all before the child starts.
        TypeError: if a size or ``threads`` is not an int (a Python or NumPy integer, not
            a bool), or ``q_lens`` or ``paths`` is not a list.
        RuntimeError: if the child process fails (e.g. not on Linux with glibc).
    """
    threads = arguments.size("threads", threads)  # the child sets it: None is not a count
    spec = _memory_spec(batch_size, q_lens, d_model, num_heads, paths, dtype, threads, MEMORY_PATHS)
    return run_child(__name__, "_memory_child", spec, threads)


TILED_MEMORY_PATHS = ("numpy", "numpy tiled", "sdpa", "numpy backward", "numpy tiled backward")


def _tiled_memory_runner(path: str, params: MHAParams, x: np.ndarray) -> Callable[[], Any]:

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


def _tiled_memory_child() -> None:
    """Entry point of the child process of :func:`tiled_peak_memory` (JSON on stdin)."""
    spec = _child_spec()
    D, H, B = spec["d_model"], spec["num_heads"], spec["batch_size"]
    params = init_params(D, H, seed=0, dtype=spec["dtype"])
    rng = np.random.default_rng(0)

    def draw(L: int) -> np.ndarray:
        return rng.standard_normal((B, L, D)).astype(spec["dtype"])  # (B, L, D)

    _print_peaks(spec, params, draw, _tiled_memory_runner)


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
    ``"numpy"`` is :func:`mha.backends.np_backend.multi_head_attention` (fused form, weights not
    returned: one ``(B, H, L, S)`` tensor, scores then weights, is held); ``"numpy tiled"``
    the same function with ``form="tiled"``; ``"sdpa"`` the PyTorch packed form without
    weights (``scaled_dot_product_attention``); ``"numpy backward"`` a forward that stores the
    weights plus the backward of :mod:`mha.numerics.backward`; ``"numpy tiled backward"`` the tiled
    forward (storing the log-sum-exp) plus the tiled backward. Each number comes from
    :func:`mha.cost.measure.peak_rss_increase` in a child Python process.

    Args:
        batch_size: the batch size, B.
        q_lens: the lengths L = S to measure.
        d_model: model width D.
        num_heads: number of heads H.
        paths: which of :data:`TILED_MEMORY_PATHS` to run.
        dtype: ``"float32"`` or ``"float64"``.
        threads: BLAS and PyTorch threads in the child (``None``: their defaults).

    Returns:
        ``{path: [bytes for each L]}``.

    Raises:
        ValueError, TypeError, RuntimeError: as :func:`attention_peak_memory`.
    """
    spec = _memory_spec(
        batch_size, q_lens, d_model, num_heads, paths, dtype, threads, TILED_MEMORY_PATHS
    )
    return run_child(__name__, "_tiled_memory_child", spec, threads)


def _kv_cache_fill(
    num_layers: int, num_kv_heads: int, d_head: int, capacity: int, positions: int
) -> list[Any]:
    """Caches of ``num_layers`` layers of ``capacity``, each holding ``positions`` (float32)."""

    caches = [
        KVCache(1, num_kv_heads, d_head, capacity, dtype=torch.float32) for _ in range(num_layers)
    ]
    block = torch.ones(1, num_kv_heads, positions, d_head)  # one layer's keys (and values)
    for cache in caches:
        cache.append(block, block)
    return caches


def _kv_cache_memory_child() -> None:
    """Entry point of the child process of :func:`kv_cache_peak_memory` (JSON on stdin)."""
    spec = json.loads(sys.stdin.read())
    sizes = (spec["num_layers"], spec["num_kv_heads"], spec["d_head"])
    out = [
        peak_rss_increase(functools.partial(_kv_cache_fill, *sizes, capacity, positions))
        for capacity, positions in spec["fills"]
    ]
    print(json.dumps(out))


def kv_cache_peak_memory(
    num_layers: int,
    num_kv_heads: int,
    d_head: int,
    fills: list[tuple[int, int]],
) -> list[int]:
    """Measured resident memory that filling key/value caches adds, in a fresh process.

    For each ``(capacity, positions)``, ``num_layers`` float32 :class:`mha.core.kv_cache.KVCache`
    of batch 1 and ``capacity`` positions are allocated, and one block of ``positions``
    keys and values, ``(1, H_kv, positions, Dh)``, is appended to each; the figure is
    :func:`mha.cost.measure.peak_rss_increase` of that, so it holds the pages written (not the
    capacity reserved) and the block itself. It runs in a child Python process, so that this
    process's allocator, and any timing done in it afterwards, are left alone.

    Args:
        num_layers: caches (one per layer).
        num_kv_heads: H_kv.
        d_head: Dh.
        fills: the ``(capacity, positions)`` pairs to measure, ``positions <= capacity``.

    Returns:
        Peak resident bytes added, one per pair.

    Raises:
        ValueError: if a size is not positive or ``positions`` passes ``capacity``.
        TypeError: if a size is not an int (a Python or NumPy integer, not a bool), or
            ``fills`` is not a list of pairs.
        RuntimeError: if the child process fails (e.g. not on Linux with glibc).
    """
    num_layers, num_kv_heads, d_head = arguments.sizes(
        num_layers=num_layers, num_kv_heads=num_kv_heads, d_head=d_head
    ).values()
    fills = arguments.pairs("fills", fills)
    for i, (capacity, positions) in enumerate(fills):
        arguments.size(f"fills[{i}] capacity", capacity)
        arguments.size(f"fills[{i}] positions", positions)
        if positions > capacity:
            raise ValueError(
                f"fills[{i}] positions must not pass capacity; got capacity={capacity}, "
                f"positions={positions}"
            )
    spec = {
        "num_layers": num_layers,
        "num_kv_heads": num_kv_heads,
        "d_head": d_head,
        "fills": [list(pair) for pair in fills],
    }
    return run_child(__name__, "_kv_cache_memory_child", spec, 1)


def _memory_spec(
    batch_size: int,
    q_lens: Sequence[int],
    d_model: int,
    num_heads: int,
    paths: Sequence[str],
    dtype: str,
    threads: int | None,
    known: Sequence[str],
) -> dict[str, Any]:
    """The checked arguments of a memory measurement, as the child process reads them."""
    batch_size = arguments.size("batch_size", batch_size)
    q_lens = arguments.size_list("q_lens", q_lens, nonempty=False)
    d_model, num_heads, _ = arguments.layer_sizes(d_model, num_heads)
    if threads is not None:
        threads = arguments.size("threads", threads)
    paths = arguments.items("paths", paths)
    unknown = [p for p in paths if not isinstance(p, str) or p not in known]
    if unknown:
        raise ValueError(f"paths must be among {tuple(known)}; got {unknown}")
    if not isinstance(dtype, str) or dtype not in ("float32", "float64"):
        raise ValueError(f"dtype must be 'float32' or 'float64'; got dtype={dtype!r}")
    return {
        "batch_size": batch_size,
        "q_lens": q_lens,
        "d_model": d_model,
        "num_heads": num_heads,
        "paths": list(paths),
        "dtype": dtype,
        "threads": threads,
    }
