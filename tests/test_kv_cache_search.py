"""Generated inputs for the key/value cache and cached layer calls: every call is answered
correctly or refused by the package's own error, and a refused call leaves the cache as it was.

The search of ``test_errors.py`` (calls without a cache) extended to :mod:`mha.core.kv_cache` and to
layer calls with a cache, in both backends and every form that takes one: grouped-query caches
(``num_kv_heads``), causal alignment of a chunk after the cached prompt, caches that do not fit
the layer or the call, bounds that are no magnitude, devices, and inputs that overflow.
"""

from __future__ import annotations

import linecache
import math
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch
from hypothesis import event, given, settings
from hypothesis import strategies as st

import mha
from mha import init_params
from mha.backends import np_backend, torch_backend
from mha.core.kv_cache import KVCache
from mha.core.mask_rules import AmbiguousMaskWarning
from mha.numerics import tolerance

BACKENDS = {"numpy": np_backend, "torch": torch_backend}
_MHA_DIR = Path(mha.__file__).parent
LAYER_EXAMPLES = 250
APPEND_EXAMPLES = 200


def _raised_by_mha(error: BaseException) -> bool:
    """True when a ``raise`` statement of the ``mha`` package raised ``error`` (as in
    ``test_errors.py``: not a NumPy ufunc's TypeError called from a line of mha)."""
    tb = error.__traceback__
    while tb.tb_next is not None:
        tb = tb.tb_next
    path = tb.tb_frame.f_code.co_filename
    line = linecache.getline(path, tb.tb_lineno).strip()
    return _MHA_DIR in Path(path).parents and line.startswith("raise ")


def _outcome(call) -> tuple[str, Any]:
    """``("ok", result)`` or ``("error", exception type)``; an error not ours fails the test."""
    try:
        with warnings.catch_warnings(), np.errstate(over="ignore", invalid="ignore"):
            warnings.simplefilter("ignore", AmbiguousMaskWarning)
            return "ok", call()
    except (ValueError, TypeError) as error:
        assert _raised_by_mha(error), f"{type(error).__name__} from outside mha: {error}"
        return "error", type(error)


def _mostly(draw: st.DrawFn, bad: list[str], what: str, valid: list, invalid: list) -> Any:
    """One of ``valid`` seven times in eight, else one of ``invalid`` (``what`` joins ``bad``)."""
    if draw(st.integers(0, 7)):
        return draw(st.sampled_from(valid))
    bad.append(what)
    return draw(st.sampled_from(invalid))


def _snapshot(cache: Any) -> Any:
    if not isinstance(cache, KVCache):
        return None
    keys, values = cache.keys, cache.values
    if isinstance(keys, torch.Tensor):
        if keys.device.type == "meta":
            return cache.length, None, None, cache.max_abs
        keys, values = keys.detach().clone().numpy(), values.detach().clone().numpy()
    return cache.length, keys.copy(), values.copy(), cache.max_abs


def _same(before: Any, after: Any) -> bool:
    if before is None:
        return after is None
    if before[0] != after[0] or before[3] != after[3]:  # exact: a length and a float kept
        return False
    for a, b in zip(before[1:3], after[1:3], strict=True):
        if a is None and b is None:  # a meta cache: no contents
            continue
        if not np.array_equal(a, b, equal_nan=True):  # exact: memory left untouched
            return False
    return True


# ---- cached layer calls --------------------------------------------------------------------


@st.composite
def _cached_calls(draw: st.DrawFn) -> dict[str, Any]:
    """A cached prompt, then a chunk of new positions, valid or not, with ``bad``: the reasons
    the chunk's call must be refused (empty when it may be accepted)."""
    bad: list[str] = []
    kind = draw(st.sampled_from(["numpy", "torch"]))
    B, D = draw(st.sampled_from([1, 2])), draw(st.sampled_from([4, 8]))
    H = draw(st.sampled_from([h for h in (1, 2, 4) if D % h == 0]))
    H_kv = draw(st.sampled_from([g for g in (1, 2, 4) if H % g == 0]))
    dtype = draw(st.sampled_from([np.float64, np.float32]))
    P, n = draw(st.sampled_from([1, 2, 3])), draw(st.sampled_from([1, 2]))  # prompt, chunk
    capacity = _mostly(draw, bad, "capacity", [P + n, P + n + 2], [P, P + n - 1])
    cache_sizes = _mostly(
        draw,
        bad,
        "cache sizes",
        [(B, H_kv, D // H)],
        [(B + 1, H_kv, D // H), (B, H_kv * 2, D // H), (B, H_kv, D // H + 1)],
    )
    cache_dtype = _mostly(
        draw, bad, "cache dtype", ["same"], ["other float", "other library", "float16", None]
    )
    cache_device = "cpu"
    if kind == "torch":
        cache_device = _mostly(draw, bad, "cache device", ["cpu"], ["meta"])
    forms = ["fused", "packed"] + (["tiled"] if kind == "numpy" else [])  # tiled: NumPy's only
    refused = ["per_head", "bogus"] + ([] if kind == "numpy" else ["tiled"])
    form = _mostly(draw, bad, "form", forms, refused)
    # how the chunk's queries sit after the prompt: bottom-right causal is decoding's alignment;
    # the others are valid masks of other meanings, (n, n) covers the new positions only
    align = _mostly(
        draw,
        bad,
        "mask shape",
        ["bottom_right", "top_left", None, "padding"],
        ["new positions only", "too long"],
    )
    trouble = _mostly(
        draw, bad, "chunk", ["none"], ["NaN", "infinity", "huge", "NaN written into the cache"]
    )
    # 1e20 overflows float32's scores where the chunk's queries see the chunk's keys (not
    # always under top-left alignment); NaN written at cached position 0 reaches the output
    # unless padding hides it. Where it may not, an answer must equal the reference.
    if trouble == "huge" and (dtype == np.float64 or align == "top_left"):
        bad.remove("chunk")
    if align == "new positions only" and n == 1:
        bad.remove("mask shape")  # a (1, 1) mask broadcasts to every key: valid
    if trouble == "NaN written into the cache" and align == "padding":
        bad.remove("chunk")
    seed = draw(st.integers(0, 2**16))
    return {
        "kind": kind,
        "sizes": (B, D, H, H_kv, P, n),
        "dtype": dtype,
        "cache": (capacity, cache_sizes, cache_dtype, cache_device),
        "form": form,
        "align": align,
        "trouble": trouble,
        "seed": seed,
        "bad": bad,
    }


def _make_cache(kind: str, dtype: Any, spec: tuple) -> KVCache:
    capacity, (b, h_kv, dh), which, device = spec
    torch_dtype = {np.float64: torch.float64, np.float32: torch.float32}[dtype]
    other = {np.float64: np.float32, np.float32: np.float64}[dtype]
    chosen = {
        "same": dtype if kind == "numpy" else torch_dtype,
        "other float": other
        if kind == "numpy"
        else {np.float64: torch.float32}.get(dtype, torch.float64),
        "other library": torch_dtype if kind == "numpy" else dtype,
        "float16": np.float16 if kind == "numpy" else torch.float16,
        None: None,
    }[which]
    return KVCache(b, h_kv, dh, capacity, dtype=chosen, device=device if kind == "torch" else None)


def _mask(kind: str, align: Any, B: int, n: int, S: int, rng: np.random.Generator) -> Any:
    if align is None:
        return None
    if align == "padding":
        mask = np.ones((B, 1, 1, S), dtype=bool)
        mask[:, :, :, : int(rng.integers(0, S))] = False  # left padding, never every key
    elif align == "new positions only":
        mask = np_backend.causal_mask(n)
    elif align == "too long":
        mask = np_backend.causal_mask(n, S + 1, align="bottom_right")
    else:
        mask = np_backend.causal_mask(n, S, align=align)
    return mask if kind == "numpy" else torch.from_numpy(mask)


@settings(max_examples=LAYER_EXAMPLES, deadline=None)
@given(case=_cached_calls())
def test_cached_calls_are_answered_correctly_or_refused_and_then_change_nothing(case) -> None:
    kind, dtype, form = case["kind"], case["dtype"], case["form"]
    B, D, H, H_kv, P, n = case["sizes"]
    backend = BACKENDS[kind]
    rng = np.random.default_rng(case["seed"])
    params = init_params(D, H, num_kv_heads=H_kv, seed=case["seed"]).to_numpy(dtype)
    x = rng.standard_normal((B, P + n, D)).astype(dtype)
    chunk = x[:, P:].copy()
    if case["trouble"] in ("NaN", "infinity"):
        chunk[0, -1, 0] = math.nan if case["trouble"] == "NaN" else math.inf
    elif case["trouble"] == "huge":
        chunk *= dtype(1e20)
    convert = (lambda a: a) if kind == "numpy" else torch.from_numpy
    tparams = params if kind == "numpy" else params.to_torch()
    made = _outcome(lambda: _make_cache(kind, dtype, case["cache"]))
    if made[0] == "error":  # refused at construction (float16, None): by our own error
        assert case["bad"], "a valid cache was refused"
        event(f"KVCache refused: {made[1].__name__}")
        return
    cache = made[1]
    weights = form != "tiled"
    prompt = convert(x[:, :P])
    prefill = _outcome(
        lambda: backend.multi_head_attention(
            prompt,
            prompt,
            prompt,
            tparams,
            backend.causal_mask(P),
            cache=cache,
            form=form,
            need_weights=weights,
        )
    )
    if prefill[0] == "error":  # the cache does not fit the layer, or the form is refused
        assert case["bad"], "a valid prefill was refused"
        assert cache.length == 0 and cache.max_abs == 0.0
        event(f"prefill refused: {prefill[1].__name__}")
        return
    if case["trouble"] == "NaN written into the cache":
        cache.values[0, 0, 0, 0] = math.nan
    mask = _mask(kind, case["align"], B, n, P + n, rng)
    before = _snapshot(cache)
    step = convert(chunk)
    ours = _outcome(
        lambda: backend.multi_head_attention(
            step, step, step, tparams, mask, cache=cache, form=form, need_weights=weights
        )[0]
    )
    event(f"{kind} {form}: {ours[1].__name__ if ours[0] == 'error' else 'answered'}")
    if case["bad"]:
        assert ours[0] == "error", f"accepted although {case['bad']} are wrong"
    if ours[0] == "error":
        assert _same(before, _snapshot(cache)), "a refused call changed the cache"
        return
    assert cache.length == P + n
    out = ours[1] if kind == "numpy" else ours[1].numpy()
    keys = np.concatenate([x[:, :P], chunk], axis=1)  # every position, uncached
    np_mask = None if mask is None else np.asarray(mask)
    ref, _ = np_backend.multi_head_attention(chunk, keys, keys, params, np_mask)
    tol, _ = tolerance.attention_tolerance(chunk, keys, keys, params, np_mask)
    tolerance.assert_close(out, ref, tol, name=f"{kind} {form} cached output")


# ---- KVCache itself ------------------------------------------------------------------------


@st.composite
def _appends(draw: st.DrawFn) -> dict[str, Any]:
    bad: list[str] = []
    kind = draw(st.sampled_from(["numpy", "torch"]))
    B, H_kv, Dh = draw(st.sampled_from([1, 2])), draw(st.sampled_from([1, 2, 4])), 3
    n = _mostly(draw, bad, "n", [1, 2], [5])  # capacity 4, one position already cached
    shape = _mostly(
        draw,
        bad,
        "shape",
        [(B, H_kv, n, Dh)],
        [(B, H_kv, n, Dh + 1), (B + 1, H_kv, n, Dh), (H_kv, n, Dh), (B, 2 * H_kv, n, Dh)],
    )
    value_n = _mostly(draw, bad, "value length", [n], [n + 1])
    dtype = _mostly(draw, bad, "dtype", ["same"], ["other", "int", "None"])
    device = "cpu" if kind == "numpy" else _mostly(draw, bad, "device", ["cpu"], ["meta"])
    max_abs = _mostly(
        draw, bad, "max_abs", [None, "bound"], [-1.0, math.nan, math.inf, 10**400, "big", True]
    )
    content = _mostly(draw, bad, "content", ["finite"], ["NaN", "infinity"])
    if content != "finite" and max_abs == "bound":
        bad.remove("content")  # a given bound is trusted: the values are not read
    truncate = _mostly(draw, bad, "truncate", [0, 1], ["past the end", -1, 1.0, None])
    return {
        "kind": kind,
        "sizes": (B, H_kv, Dh),
        "shape": shape,
        "value_n": value_n,
        "dtype": dtype,
        "device": device,
        "max_abs": max_abs,
        "content": content,
        "truncate": truncate,
        "seed": draw(st.integers(0, 2**16)),
        "bad": bad,
    }


@settings(max_examples=APPEND_EXAMPLES, deadline=None)
@given(case=_appends())
def test_appends_and_truncations_are_done_exactly_or_refused_and_change_nothing(case) -> None:
    kind = case["kind"]
    B, H_kv, Dh = case["sizes"]
    rng = np.random.default_rng(case["seed"])
    cache = KVCache(B, H_kv, Dh, 4, dtype=np.float64 if kind == "numpy" else torch.float64)
    first = rng.standard_normal((B, H_kv, 1, Dh))
    cache.append(*(a if kind == "numpy" else torch.from_numpy(a) for a in (first, 2 * first)))
    key = rng.standard_normal(case["shape"])
    value_shape = (*case["shape"][:-2], case["value_n"], case["shape"][-1])
    value = rng.standard_normal(value_shape)
    if case["content"] != "finite":
        key.flat[-1] = math.nan if case["content"] == "NaN" else math.inf
    largest = float(max(np.abs(key).max(), np.abs(value).max()))
    max_abs = {"bound": largest}.get(case["max_abs"], case["max_abs"])
    if case["dtype"] == "other":
        key, value = key.astype(np.float32), value.astype(np.float32)
    elif case["dtype"] == "int":
        with np.errstate(invalid="ignore"):  # NaN content has no int: any int will do
            key, value = key.astype(np.int64), value.astype(np.int64)
    if kind == "torch":
        key, value = (torch.from_numpy(a).to(case["device"]) for a in (key, value))
    if case["dtype"] == "None":
        key = None
    before = _snapshot(cache)
    ours = _outcome(lambda: cache.append(key, value, max_abs=max_abs))
    event(f"append {kind}: {ours[1].__name__ if ours[0] == 'error' else 'done'}")
    append_bad = [b for b in case["bad"] if b != "truncate"]
    if append_bad:
        assert ours[0] == "error", f"accepted although {append_bad} are wrong"
    if ours[0] == "error":
        assert _same(before, _snapshot(cache)), "a refused append changed the cache"
    else:
        n = case["shape"][2]
        after = _snapshot(cache)
        held = np.concatenate([first, np.asarray(key if kind == "numpy" else key.numpy())], 2)
        assert after[0] == 1 + n and np.array_equal(after[1], held, equal_nan=True)  # exact
        assert after[3] == max(before[3], largest)  # exact: the bound given or measured
    before = _snapshot(cache)
    length = cache.length + 1 if case["truncate"] == "past the end" else case["truncate"]
    cut = _outcome(lambda: (cache.truncate(length),))
    if "truncate" in case["bad"]:
        assert cut[0] == "error" and _same(before, _snapshot(cache))
    else:
        assert cut[0] == "ok" and cache.length == case["truncate"]
