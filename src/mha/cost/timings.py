"""Timing experiments on attention: the forms, the projections, tiled attention, decoding.

Built on the timers of :mod:`mha.cost.measure`: :func:`time_forms` and
:func:`time_form_rounds` time the forms of one layer, :func:`projection_times` the
projections, :func:`time_tiled` the tiled form in a child process with its BLAS threads set,
:func:`decode_times` and :func:`cached_step_times` decoding with and without a key/value
cache, :func:`latent_step_times` a latent layer's decoding step by its two routes, and
:func:`fit_growth` fits how a time grows with length.
"""

from __future__ import annotations

import functools
import json
import math
import statistics
import sys
from collections.abc import Callable, Sequence
from itertools import product
from typing import Any

import numpy as np
import torch

from mha.backends import latent, np_backend, tiled, torch_backend
from mha.backends.module import to_torch_mha
from mha.core._checks import arguments, numpy_arrays
from mha.core._tools import one_thread
from mha.core.kv_cache import KVCache, LatentCache
from mha.core.latent_params import MLAParams
from mha.core.params import MHAParams, init_params
from mha.core.rotary import Rotary
from mha.cost.measure import (
    calibrate,
    clock_named,
    default_flush_bytes,
    interleaved_times,
    mean_time,
    run_child,
)
from mha.numerics import backward

FORMS_TIMED = ("per_head", "fused", "packed", "nn.MultiheadAttention", "sdpa")


def form_runners(params: MHAParams, x: torch.Tensor) -> dict[str, Callable[[], torch.Tensor]]:
    """Zero-argument callables computing the same self-attention of ``x`` five ways.

    ``"per_head"``, ``"fused"`` and ``"packed"`` are the three forms of
    :func:`mha.backends.torch_backend.multi_head_attention` with explicit scores and weights (the
    same arithmetic, dispatched as 5H + 1, 6 and 4 matrix products; the per-head loop runs
    with ``need_weights=False``, which only skips stacking its heads' weights);
    ``"nn.MultiheadAttention"`` is PyTorch's module with the same weights (eval mode,
    ``need_weights=False``: one native operator when H is even, PyTorch's Python path
    otherwise); ``"sdpa"`` is the packed form with ``need_weights=False``, which calls
    ``torch.nn.functional.scaled_dot_product_attention``. Each returns the output
    ``(B, L, D)``.

    Args:
        params: PyTorch parameters of the layer.
        x: the input, attended to itself.

    Shape:
        x ``(B, L, D)``; each callable returns ``(B, L, D)``.

    Returns:
        ``{form: callable}`` for every name in :data:`FORMS_TIMED`, in that order.

    Raises:
        TypeError: if ``params`` are not PyTorch ``MHAParams`` or ``x`` is not a tensor, or
            as :func:`mha.backends.torch_backend.multi_head_attention`.
        ValueError: as :func:`mha.backends.torch_backend.multi_head_attention`.
    """
    if not isinstance(params, MHAParams) or not isinstance(params.w_qkv, torch.Tensor):
        raise TypeError(f"params must be MHAParams of torch tensors; got {type(params).__name__}")
    arguments.torch_tensor("x", x)  # a floating tensor, finite
    if x.ndim != 3 or x.shape[1] < 1:
        raise ValueError(f"x must have shape (B, L, D) with L >= 1; got {tuple(x.shape)}")
    with torch.no_grad():  # every check of the five forms, on the first query
        torch_backend.multi_head_attention(x[:, :1], x, x, params, need_weights=False)
    module = to_torch_mha(params).eval()

    def run(form: str, need_weights: bool) -> Callable[[], torch.Tensor]:
        return lambda: torch_backend.multi_head_attention(
            x, x, x, params, form=form, need_weights=need_weights
        )[0]

    return {
        "per_head": run("per_head", False),
        "fused": run("fused", True),
        "packed": run("packed", True),
        "nn.MultiheadAttention": lambda: module(x, x, x, need_weights=False)[0],
        "sdpa": run("packed", False),
    }


def _check_timing(repeat: Any, min_time: Any, clock: Any, seed: Any) -> tuple[int, float, int]:
    """``repeat``, ``min_time`` and ``seed`` checked (and the clock's name), before any work."""
    repeat = arguments.size("repeat", repeat, high=None)
    min_time = arguments.number("min_time", min_time, low=0.0, open_low=True)
    clock_named(clock)
    return repeat, min_time, arguments.seed("seed", seed)


def _check_threads(threads: Any) -> int | None:
    return None if threads is None else arguments.size("threads", threads, high=None)


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
        batch_size: the batch size, B.
        q_len: L = S.
        d_model: model width D.
        num_heads: number of heads H.
        repeat: timings per form (the median is taken).
        min_time: seconds per timing.
        threads: PyTorch threads during the timing (restored afterwards); ``None`` keeps
            the current setting.
        seed: seed of the weights and of ``x``.
        clock: ``"wall"`` or ``"cpu"``, as in :func:`mha.cost.measure.median_time`.

    Returns:
        ``{form: seconds}`` for every name in :data:`FORMS_TIMED`.

    Raises:
        ValueError: if a size, ``repeat``, ``min_time`` or ``threads`` is not positive (or
            ``min_time`` not finite), H does not divide D, ``seed`` is not in
            ``[0, 2**64)``, or the clock is unknown; all before any work.
        TypeError: if a size, ``repeat``, ``threads`` or ``seed`` is not an int (a Python or
            NumPy integer, not a bool), or ``min_time`` not a real number.
    """
    B, L = arguments.sizes(batch_size=batch_size, q_len=q_len).values()
    D, H, _ = arguments.layer_sizes(d_model, num_heads)
    repeat, min_time, seed = _check_timing(repeat, min_time, clock, seed)
    threads = _check_threads(threads)
    params = init_params(D, H, seed=seed).to_torch(torch.float32)
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(B, L, D, generator=gen)
    runners = form_runners(params, x)
    old_threads = torch.get_num_threads()
    try:
        if threads is not None:
            torch.set_num_threads(threads)
        with torch.inference_mode():
            samples = interleaved_times(runners, repeat, min_time=min_time, warmup=0, clock=clock)
    finally:
        torch.set_num_threads(old_threads)
    return {name: statistics.median(s) for name, s in samples.items()}


def time_form_rounds(
    batch_size: int,
    q_len: int,
    d_model: int,
    num_heads: int,
    *,
    repeat: int = 5,
    min_time: float = 2e-3,
    seed: int = 0,
    clock: str = "cpu",
) -> dict[str, list[float]]:
    """Every round of :func:`time_forms`' timings, not only their medians.

    The forms of :func:`form_runners` on ``x`` of shape ``(B, L, D)`` (float32, inference
    mode, one PyTorch thread), interleaved as in :func:`mha.cost.measure.interleaved_times`: round
    ``k`` of every form ran at about the same moment, so per-round ratios of two forms cancel a slow
    spell of a shared machine, and their spread over the rounds shows how well a ratio is
    measured.

    Args:
        batch_size: the batch size, B.
        q_len: L = S.
        d_model: model width D.
        num_heads: number of heads H.
        repeat: rounds.
        min_time: seconds per timing.
        seed: seed of the weights and of ``x``.
        clock: ``"wall"`` or ``"cpu"``, as in :func:`mha.cost.measure.median_time`.

    Returns:
        ``{form: [seconds per call in round 1, round 2, ...]}`` for every name in
        :data:`FORMS_TIMED`.

    Raises:
        ValueError: if a size, ``repeat`` or ``min_time`` is not positive (or ``min_time``
            not finite), H does not divide D, ``seed`` is not in ``[0, 2**64)``, or the
            clock is unknown; all before any work.
        TypeError: if a size, ``repeat`` or ``seed`` is not an int (a Python or NumPy
            integer, not a bool), or ``min_time`` not a real number.
    """
    B, L = arguments.sizes(batch_size=batch_size, q_len=q_len).values()
    D, H, _ = arguments.layer_sizes(d_model, num_heads)
    repeat, min_time, seed = _check_timing(repeat, min_time, clock, seed)
    params = init_params(D, H, seed=seed).to_torch(torch.float32)
    x = torch.randn(B, L, D, generator=torch.Generator().manual_seed(seed))
    runners = form_runners(params, x)
    with one_thread(), torch.inference_mode():
        return interleaved_times(runners, repeat, min_time=min_time, warmup=0, clock=clock)


def trivial_op_time(*, calls: int = 2000, repeat: int = 5, clock: str = "cpu") -> float:
    """Seconds per call of a PyTorch operator that does almost no arithmetic.

    The median over ``repeat`` timings of ``calls`` calls of ``torch.add`` on two
    one-element float32 tensors (inference mode, one thread): what one operator costs in
    Python, argument parsing, dispatch and allocating its output, with nothing to compute.
    Multiplied by a count of operators (:func:`mha.cost.measure.count_aten_ops`), it predicts the
    part of a time difference that dispatch alone explains.

    Args:
        calls: operator calls per timing.
        repeat: timings (the median is taken).
        clock: ``"wall"`` or ``"cpu"``, as in :func:`mha.cost.measure.median_time`.

    Returns:
        Seconds per operator call.

    Raises:
        ValueError: if ``calls`` or ``repeat`` is not positive, or the clock is unknown.
        TypeError: if ``calls`` or ``repeat`` is not an int (a Python or NumPy integer, not
            a bool).
    """
    calls, repeat = arguments.counts(calls=calls, repeat=repeat).values()
    tick = clock_named(clock)
    a, b = torch.ones(1), torch.ones(1)

    def loop() -> None:
        for _ in range(calls):
            torch.add(a, b)

    with one_thread(), torch.inference_mode():
        loop()  # warm-up
        return statistics.median(mean_time(loop, 1, tick) for _ in range(repeat)) / calls


def projection_times(
    q_len: int,
    d_model: int,
    num_heads: int,
    *,
    repeat: int = 5,
    min_time: float = 2e-3,
    seed: int = 0,
    clock: str = "cpu",
) -> dict[str, float]:
    """Seconds for a layer's three projections: one product per head, or one per projection.

    ``"narrow"`` runs the per-head loop's ``3H`` products ``(L, D) @ (D, Dh)``; ``"wide"``
    the fused form's three ``(L, D) @ (D, D)`` products of the same weights (float32,
    inference mode, one thread, interleaved as in :func:`mha.cost.measure.interleaved_times`). The
    same FLOPs, so the difference is what ``3H - 3`` more calls and narrower products cost.

    Args:
        q_len: the query length, L.
        d_model: model width D.
        num_heads: number of heads H.
        repeat: timings per variant (the median is taken).
        min_time: seconds per timing.
        seed: seed of ``x`` and the weights.
        clock: ``"wall"`` or ``"cpu"``, as in :func:`mha.cost.measure.median_time`.

    Shape:
        x ``(L, D)``; wide weights ``(D, D)``; narrow weights ``(D, Dh)``.

    Returns:
        ``{"narrow": seconds, "wide": seconds}`` per set of three projections.

    Raises:
        ValueError, TypeError: as :func:`time_form_rounds`.
    """
    q_len = arguments.size("q_len", q_len)
    d_model, num_heads, _ = arguments.layer_sizes(d_model, num_heads)
    repeat, min_time, seed = _check_timing(repeat, min_time, clock, seed)
    d_head = d_model // num_heads
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(q_len, d_model, generator=g)  # (L, D)
    wide = [torch.randn(d_model, d_model, generator=g) for _ in range(3)]  # 3 x (D, D)
    narrow = [
        w[:, h * d_head : (h + 1) * d_head].contiguous() for w in wide for h in range(num_heads)
    ]  # 3H x (D, Dh)
    with one_thread(), torch.inference_mode():
        times = interleaved_times(
            {
                "narrow": lambda: [x @ w for w in narrow],
                "wide": lambda: [x @ w for w in wide],
            },
            repeat=repeat,
            min_time=min_time,
            clock=clock,
        )
    return {name: statistics.median(t) for name, t in times.items()}


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
    for (block_q, block_kv), causal in product(spec["blocks"], spec["causal"]):
        name = f"tiled {block_q}x{block_kv}" + (", causal" if causal else "")
        runners[name] = functools.partial(
            tiled.attention, q, k, val, causal=causal, block_q=block_q, block_kv=block_kv
        )
    if spec["backward"]:
        params = init_params(D, H, seed=spec["seed"], dtype=dtype)
        x = rng.standard_normal((B, L, D)).astype(dtype)
        d_out = rng.standard_normal((B, L, D)).astype(dtype)
        saved = {f: backward.multi_head_attention_forward(x, x, x, params, form=f)[1]
                 for f in ("fused", "tiled")}  # fmt: skip
        runners["layer forward"] = lambda: np_backend.multi_head_attention(x, x, x, params)
        for f in ("fused", "tiled"):
            runners[f"layer forward, {f}, saving"] = functools.partial(
                backward.multi_head_attention_forward, x, x, x, params, form=f
            )
            runners[f"layer backward, {f}"] = functools.partial(
                backward.multi_head_attention, saved[f], d_out
            )
    tick = clock_named(spec["clock"])
    numbers = {name: calibrate(fn, spec["min_time"]) for name, fn in runners.items()}
    samples: dict[str, list[float]] = {name: [] for name in runners}
    for _ in range(spec["repeat"]):
        for name, fn in runners.items():
            samples[name].append(mean_time(fn, numbers[name], tick))
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
    causal: bool = False,
    repeat: int = 5,
    min_time: float = 0.05,
    threads: int | None = 1,
    dtype: str = "float32",
    clock: str = "cpu",
    seed: int = 0,
) -> dict[str, float]:
    """Median seconds of NumPy attention, naive and tiled, measured in a child process.

    On per-head ``q``, ``k``, ``v`` of shape ``(B, H, L, D / H)`` (self-attention, no
    mask): ``"naive"`` is :func:`mha.backends.np_backend.scaled_dot_product_attention` (forms the
    scores, scales them, normalises the weights); ``"naive, deferred"`` forms the scores too,
    but scales the queries instead and divides the output by the row sums once, as the tiled
    form does; ``"sdpa"`` is PyTorch's ``scaled_dot_product_attention`` on the same float32
    or float64 arrays (a compiled loop over tiles); ``"tiled BrxBc"`` is
    :func:`mha.backends.tiled.attention` with those blocks, and with ``causal``
    ``"tiled BrxBc, causal"`` the same with ``causal=True`` (the tiles above the diagonal
    skipped). With
    ``backward``, also the layer on ``x`` of shape ``(B, L, D)``: ``"layer forward"``
    (:func:`mha.backends.np_backend.multi_head_attention`), ``"layer forward, fused, saving"`` and
    ``"layer forward, tiled, saving"`` (:func:`mha.numerics.backward.multi_head_attention_forward`),
    ``"layer backward, fused"`` and ``"layer backward, tiled"``
    (:func:`mha.numerics.backward.multi_head_attention`). Runs are interleaved, so a slow spell of
    the machine hits all of them. The child's BLAS runs ``threads`` threads (set through the
    usual environment variables before NumPy loads): on a shared machine, idle BLAS threads
    waiting for a core can slow the many small products of the tiles far more than the few
    large products of the naive path.

    Args:
        batch_size: the batch size, B.
        q_len: L = S.
        d_model: model width D.
        num_heads: number of heads H.
        blocks: the ``(Br, Bc)`` pairs to time.
        backward: also time the layer's forward and backward passes.
        attention: time ``"naive"``, ``"naive, deferred"`` and ``"sdpa"`` (False: only the
            tiled blocks and, with ``backward``, the layer).
        causal: also time each block size with ``causal=True``.
        repeat: timings per implementation (the median is taken).
        min_time: seconds per timing.
        threads: BLAS and PyTorch threads in the child (``None``: the libraries' defaults).
        dtype: ``"float32"`` or ``"float64"``.
        clock: ``"wall"`` or ``"cpu"``, as in :func:`mha.cost.measure.median_time`.
        seed: seed of the inputs and weights.

    Returns:
        ``{name: seconds per call}``.

    Raises:
        ValueError: if a size, block size, ``repeat``, ``min_time`` or ``threads`` is not
            positive (or ``min_time`` not finite), H does not divide D, ``seed`` is not in
            ``[0, 2**64)``, or the clock or dtype is unknown; all before the child starts.
        RuntimeError: if the child process fails.
        TypeError: if ``backward``, ``attention`` or ``causal`` is not a bool, ``blocks`` not
            a list of pairs of ints, a size or ``seed`` not an int (a Python or NumPy integer, not a
            bool), or ``min_time`` not a real number.
    """
    arguments.check_bool("backward", backward)
    arguments.check_bool("attention", attention)
    arguments.check_bool("causal", causal)
    batch_size, q_len = arguments.sizes(batch_size=batch_size, q_len=q_len).values()
    d_model, num_heads, _ = arguments.layer_sizes(d_model, num_heads)
    repeat, min_time, seed = _check_timing(repeat, min_time, clock, seed)
    threads = _check_threads(threads)
    pairs = arguments.pairs("blocks", blocks)
    for i, (block_q, block_kv) in enumerate(pairs):
        arguments.size(f"blocks[{i}][0]", block_q)
        arguments.size(f"blocks[{i}][1]", block_kv)
    if not isinstance(dtype, str) or dtype not in ("float32", "float64"):
        raise ValueError(f"dtype must be 'float32' or 'float64'; got dtype={dtype!r}")
    spec = {
        "batch_size": batch_size,
        "q_len": q_len,
        "d_model": d_model,
        "num_heads": num_heads,
        "blocks": [list(b) for b in pairs],
        "backward": backward,
        "attention": attention,
        "causal": [False, True] if causal else [False],
        "repeat": repeat,
        "min_time": min_time,
        "dtype": dtype,
        "clock": clock,
        "seed": seed,
        "threads": threads,
    }
    return run_child(__name__, "_tiled_time_child", spec, threads)


def fit_growth(lengths: Sequence[int], seconds: Sequence[float], degree: int) -> np.ndarray:
    """Non-negative coefficients of ``t = c_0 + c_1 S + ... + c_degree S^degree``.

    Fitted by least squares on the relative error (each equation divided by its measured
    time, so that short contexts count as much as long ones), with every coefficient kept at
    0 or above: a cost model's terms (a constant, a linear and a quadratic term) cannot be
    negative, and an unconstrained fit lets one term go negative to offset another.

    Args:
        lengths: the context lengths S, at least ``degree + 1`` of them.
        seconds: the time measured at each length, each positive.
        degree: the highest power of S, 1 or more.

    Shape:
        lengths and seconds ``(n,)``; returns ``(degree + 1,)``, constant first.

    Returns:
        The coefficients, in seconds per power of S.

    Raises:
        ValueError: if the lengths and times differ in number, are too few for the degree,
            a length or a time is not positive and finite, or ``degree`` is not positive.
        TypeError: if ``degree`` is not an int (a Python or NumPy integer, not a bool), or
            the lengths or times are not numbers.
    """
    from scipy.optimize import nnls

    degree = arguments.size("degree", degree)
    s = numpy_arrays.float_array("lengths", lengths)
    t = numpy_arrays.float_array("seconds", seconds, finite=False)
    if not (s > 0).all():
        raise ValueError(f"lengths must be positive; got {s.tolist()}")
    if s.shape != t.shape or s.ndim != 1:
        raise ValueError(
            f"lengths and seconds must be two sequences of one length; got {s.shape} and {t.shape}"
        )
    if s.size < degree + 1:
        raise ValueError(
            f"a fit of degree {degree} needs at least {degree + 1} lengths; got {s.size}"
        )
    if not (np.isfinite(t).all() and (t > 0).all()):
        raise ValueError(f"seconds must be positive and finite; got {t.tolist()}")
    scale = s.max()  # powers of S / S_max stay near 1, so the system is well conditioned
    powers = (s[:, None] / scale) ** np.arange(degree + 1)  # (n, degree + 1)
    coef, _ = nnls(powers / t[:, None], np.ones_like(t))  # relative error: (A c - t) / t
    return coef / scale ** np.arange(degree + 1)


def decode_times(
    model: Any,
    context_lens: list[int],
    *,
    steps: int = 4,
    repeat: int = 3,
    clock: str = "cpu",
    seed: int = 0,
    statistic: str = "median",
) -> dict[str, list[float]]:
    """Seconds per generated token at each context length, with and without a cache.

    At context length S a sequence of S random tokens is in hand. With the cache
    (``"cached"``), the S tokens are prefilled once into the model's caches (not timed),
    then ``steps`` tokens are decoded one at a time, each attending to the cached keys and
    values; the time is per token. Without (``"uncached"``), generating the next token
    runs the whole model on the S + 1 tokens again, as a model without a cache must. Each
    figure is the median (or the minimum) of ``repeat`` timings, after two untimed rounds at
    the first length (the first calls pay for allocation and set-up); PyTorch runs on one
    thread, with gradients off. The timings are taken in ``repeat`` rounds, each of which
    times every length in turn, so that a slow spell of the machine falls on all lengths
    alike rather than on one. On a busy machine the minimum is the steadier estimate of the
    work itself: other processes only ever add time.

    Args:
        model: an :class:`mha.models.attention_only.AttentionOnlyTransformer` (any model with
            ``new_caches``, ``vocab_size``, ``max_len`` and ``forward(tokens, caches=...)``).
        context_lens: the context lengths S.
        steps: tokens decoded per cached timing.
        repeat: timings per figure.
        clock: ``"cpu"`` (process time) or ``"wall"``.
        seed: seed of the random tokens.
        statistic: ``"median"`` or ``"min"`` of the ``repeat`` timings.

    Returns:
        ``{"cached": [...], "uncached": [...]}``, seconds per token, one per context length.

    Raises:
        ValueError: if a length or count is not positive, ``S + steps`` passes the
            model's ``max_len``, ``statistic`` is unknown, or ``seed`` is not in
            ``[0, 2**64)``; all before any work.
        TypeError: if a length, count or ``seed`` is not an int (a Python or NumPy integer,
            not a bool), ``context_lens`` is not a list, or ``model`` lacks ``new_caches``,
            ``vocab_size`` or ``max_len``.
    """
    missing = [n for n in ("new_caches", "vocab_size", "max_len") if not hasattr(model, n)]
    if missing:
        raise TypeError(
            f"model must be an AttentionOnlyTransformer (with {', '.join(missing)}); got "
            f"{arguments.describe(model)}"
        )
    steps, repeat = arguments.counts(steps=steps, repeat=repeat).values()
    seed = arguments.seed("seed", seed)
    reducers: dict[str, Callable[[list[float]], float]] = {
        "median": statistics.median,
        "min": min,
    }
    if not isinstance(statistic, str) or statistic not in reducers:
        raise ValueError(f"statistic must be 'median' or 'min'; got statistic={statistic!r}")
    reduce = reducers[statistic]
    context_lens = arguments.size_list("context_lens", context_lens, nonempty=False)
    for i, S in enumerate(context_lens):
        if S + steps > model.max_len:
            raise ValueError(
                f"context_lens[{i}] + steps must stay within max_len={model.max_len}; "
                f"got {S} + {steps}"
            )
    tick = clock_named(clock)
    gen = torch.Generator().manual_seed(seed)
    out: dict[str, list[float]] = {"cached": [], "uncached": []}
    with one_thread(), torch.no_grad():
        first = context_lens[0] if context_lens else 1
        warm = torch.randint(model.vocab_size, (1, first + steps), generator=gen)
        for _ in range(2 if context_lens else 0):  # untimed: the first calls pay for set-up
            caches = model.new_caches(1)
            model(warm[:, :first], caches=caches)
            for t in range(first, first + steps):
                model(warm[:, t : t + 1], caches=caches)
            model(warm[:, : first + 1])
        tokens = [
            torch.randint(model.vocab_size, (1, S + steps), generator=gen) for S in context_lens
        ]
        cached: list[list[float]] = [[] for _ in context_lens]
        uncached: list[list[float]] = [[] for _ in context_lens]
        for _ in range(repeat):  # each round times every length in turn
            for i, S in enumerate(context_lens):
                caches = model.new_caches(1)
                model(tokens[i][:, :S], caches=caches)  # prefill, not timed
                start = tick()
                for t in range(S, S + steps):
                    model(tokens[i][:, t : t + 1], caches=caches)
                cached[i].append((tick() - start) / steps)
                start = tick()
                model(tokens[i][:, : S + 1])  # the whole prefix again, for one more token
                uncached[i].append(tick() - start)
        out["cached"] = [reduce(times) for times in cached]
        out["uncached"] = [reduce(times) for times in uncached]
    return out


def cached_step_times(
    d_model: int,
    num_heads: int,
    kv_heads: list[int],
    kv_lens: list[int],
    *,
    rounds: int = 10,
    flush_bytes: int | None = None,
    clock: str = "cpu",
    seed: int = 0,
) -> dict[tuple[int, int], float]:
    """Seconds of one cached decoding step of one layer, for each H_kv and cache length S.

    For every pair of ``kv_heads`` and ``kv_lens`` a layer and a :class:`mha.core.kv_cache.KVCache`
    holding S random keys and values are made (not timed). Then, in each of ``rounds``
    rounds, every pair in turn runs one new token through
    :func:`mha.backends.torch_backend.multi_head_attention` with its cache (projections, attention
    over everything cached, output projection), in float32 on one thread; the fastest of a
    pair's steps is reported, since other processes only ever add time, and taking turns
    spreads a slow spell of the machine over every pair. One untimed round comes first.

    Before each timed step a buffer of ``flush_bytes`` is written, which evicts the layer's
    weights and cache from the processor's caches, as the other layers of a deep model
    would: every step then reads its weights and its ``2 S H_kv Dh`` cached elements from
    main memory. By default the buffer is twice the processor's largest cache
    (:func:`mha.cost.measure.last_level_cache_bytes`) and at least 256 MiB; ``flush_bytes=0`` skips
    it.

    Args:
        d_model: the model width, D.
        num_heads: the number of heads, H.
        kv_heads: the values of H_kv to time, each dividing H.
        kv_lens: the values of S, the positions cached before the first step.
        rounds: timed steps per pair (each step appends its token to the cache).
        flush_bytes: bytes written before each timed step (``None``: twice the largest
            cache, at least 256 MiB), or 0 for none.
        clock: ``"cpu"`` or ``"wall"``.
        seed: seed of the layers and the cached values.

    Returns:
        ``{(H_kv, S): seconds per step}``.

    Raises:
        ValueError: if a list is empty, a size is not positive, an H_kv does not divide H,
            ``flush_bytes`` is negative, ``seed`` is not in ``[0, 2**64)``, or the clock is
            unknown; all before any work.
        TypeError: if a size or ``seed`` is not an int (a Python or NumPy integer, not a
            bool), or a list of sizes is not a list.
    """
    d_model, num_heads, _ = arguments.layer_sizes(d_model, num_heads)
    for name, values in (("kv_heads", kv_heads), ("kv_lens", kv_lens)):
        if not arguments.items(name, values):
            raise ValueError(f"{name} must name at least one value; got {name}={values!r}")
    kv_heads = arguments.size_list("kv_heads", kv_heads)
    kv_lens = arguments.size_list("kv_lens", kv_lens)
    for h_kv in kv_heads:
        arguments.layer_sizes(d_model, num_heads, h_kv)
    rounds = arguments.size("rounds", rounds)
    if flush_bytes is None:
        flush_bytes = default_flush_bytes()
    flush_bytes = arguments.size("flush_bytes", flush_bytes, 0)
    seed = arguments.seed("seed", seed)
    tick = clock_named(clock)
    gen = torch.Generator().manual_seed(seed)
    Dh = d_model // num_heads
    flush = torch.zeros(flush_bytes // 4, dtype=torch.float32)
    x = torch.randn(1, 1, d_model, generator=gen)  # (B, 1, D): the new token
    with one_thread(), torch.no_grad():
        layers = {}
        for h_kv in kv_heads:
            params = init_params(d_model, num_heads, num_kv_heads=h_kv, seed=seed)
            for s in kv_lens:
                cache = KVCache(1, h_kv, Dh, s + rounds + 1, dtype=torch.float32)
                filler = torch.randn(1, h_kv, s, Dh, generator=gen)  # (B, H_kv, S, Dh)
                cache.append(filler, filler)
                del filler
                layers[h_kv, s] = (params.to_torch(torch.float32), cache)
        times: dict[tuple[int, int], list[float]] = {pair: [] for pair in layers}
        for round_ in range(rounds + 1):
            for pair, (params, cache) in layers.items():
                flush.add_(1.0)
                start = tick()
                torch_backend.multi_head_attention(x, x, x, params, cache=cache, need_weights=False)
                if round_:  # round 0 is the warm-up
                    times[pair].append(tick() - start)
    return {pair: min(t) for pair, t in times.items()}


def latent_step_times(
    params: MLAParams,
    kv_len: int,
    *,
    rounds: int = 7,
    rotary: Rotary | None = None,
    clock: str = "cpu",
    seed: int = 0,
) -> dict[str, float]:
    """Seconds of one cached decoding step of a latent layer, by each route.

    A :class:`mha.core.kv_cache.LatentCache` holding ``kv_len`` random latents and rotary
    keys is made (not timed). In each of ``rounds`` rounds, the two routes take turns: each
    runs one new token through :func:`mha.backends.latent.multi_head_latent_attention` with
    the cache (in the parameters' dtype, on one thread, no weights returned), and the cache
    is cut back to ``kv_len`` positions after it, so every step attends to ``kv_len + 1``.
    The fastest of each route's steps is reported; one untimed round comes first. Taking
    turns spreads a slow spell of the machine over both routes, so their ratio is
    meaningful on a shared machine.

    Args:
        params: the layer, PyTorch tensors.
        kv_len: S - 1, the positions cached before each step.
        rounds: timed steps per route.
        rotary: the layer's rotary positions, or ``None``.
        clock: ``"cpu"`` or ``"wall"``.
        seed: seed of the cached values and the new token.

    Returns:
        ``{"explicit": seconds, "absorbed": seconds}``.

    Raises:
        ValueError: if ``kv_len`` or ``rounds`` is not positive, ``seed`` is negative or not
            below ``2**64``, or the clock is unknown.
        TypeError: if ``params`` is not :class:`MLAParams` of PyTorch tensors, ``rotary`` is
            not a :class:`Rotary` or ``None``, or a size or ``seed`` is not an int.
    """
    if not isinstance(params, MLAParams) or not isinstance(params.w_dkv, torch.Tensor):
        raise TypeError(f"params must be MLAParams of torch tensors; got {type(params).__name__}")
    arguments.check_positive("kv_len", kv_len)
    arguments.check_positive("rounds", rounds)
    arguments.instance("rotary", rotary, (Rotary, type(None)), "a Rotary or None")
    tick = clock_named(clock)
    gen = torch.Generator().manual_seed(arguments.seed("seed", seed))
    dtype = params.dtype
    x = torch.randn(1, 1, params.d_model, generator=gen, dtype=dtype)  # (B, 1, D): one token
    cache = LatentCache(1, params.d_latent, params.d_rope, kv_len + 1, dtype=dtype)
    filler = torch.randn(1, kv_len, params.cached_width(), generator=gen, dtype=dtype)
    cache.append(filler[..., : params.d_latent], filler[..., params.d_latent :])
    times: dict[str, list[float]] = {route: [] for route in latent.ROUTES}
    with one_thread(), torch.no_grad():
        for round_ in range(rounds + 1):
            for route in latent.ROUTES:
                start = tick()
                latent.multi_head_latent_attention(
                    x, params, route=route, cache=cache, rotary=rotary, need_weights=False
                )
                if round_:  # round 0 is the warm-up
                    times[route].append(tick() - start)
                cache.truncate(kv_len)
    return {route: min(t) for route, t in times.items()}
