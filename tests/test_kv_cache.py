"""The key/value cache: appends, views, capacity, reset, errors, and no copies of the history."""

from __future__ import annotations

import math
import re
import tracemalloc
from itertools import product

import numpy as np
import pytest
import torch

from mha import init_params
from mha.backends import np_backend, torch_backend, torch_checks
from mha.core.kv_cache import KVCache, atomic
from mha.numerics import tolerance

B, H_KV, DH = 2, 3, 4


def make(kind: str, capacity: int = 8) -> KVCache:
    dtype = np.float64 if kind == "numpy" else torch.float64
    return KVCache(B, H_KV, DH, capacity, dtype=dtype)


def block(kind: str, n: int, seed: int = 0):
    a = np.random.default_rng(seed).standard_normal((B, H_KV, n, DH))
    return a if kind == "numpy" else torch.from_numpy(a)


@pytest.mark.parametrize("kind", ["numpy", "torch"])
def test_appends_concatenate_along_the_positions(kind: str) -> None:
    cache = make(kind)
    assert cache.length == len(cache) == 0 and cache.keys.shape == (B, H_KV, 0, DH)
    k1, v1, k2, v2 = block(kind, 3, 0), block(kind, 3, 1), block(kind, 2, 2), block(kind, 2, 3)
    cache.append(k1, v1)
    cache.append(k2, v2)
    assert cache.length == 5 and cache.keys.shape == (B, H_KV, 5, DH)
    cat = np.concatenate if kind == "numpy" else torch.cat
    equal = np.array_equal if kind == "numpy" else torch.equal
    assert equal(cache.keys, cat([k1, k2], 2))  # exact: copies into the buffer
    assert equal(cache.values, cat([v1, v2], 2))  # exact: copies into the buffer


@pytest.mark.parametrize("kind", ["numpy", "torch"])
def test_extend_appends_and_returns_every_cached_position(kind: str) -> None:
    """A form's decoding step: ``cache.extend(k, v)`` is what it attends to, and is kept."""
    cache = make(kind)
    k1, v1, k2, v2 = block(kind, 3, 0), block(kind, 3, 1), block(kind, 1, 2), block(kind, 1, 3)
    cache.extend(k1, v1)
    keys, values = cache.extend(k2, v2)
    cat = np.concatenate if kind == "numpy" else torch.cat
    equal = np.array_equal if kind == "numpy" else torch.equal
    assert equal(keys, cat([k1, k2], 2)) and equal(values, cat([v1, v2], 2))  # exact: copies
    assert cache.length == 4 and equal(cache.keys, keys)  # exact: the same positions
    with pytest.raises(ValueError, match="capacity=8"):
        cache.extend(block(kind, 5), block(kind, 5, 1))
    assert cache.length == 4  # refused: nothing appended


@pytest.mark.parametrize("kind", ["numpy", "torch"])
def test_keys_and_values_are_views_of_one_buffer(kind: str) -> None:
    cache = make(kind)
    cache.append(block(kind, 2), block(kind, 2, 1))
    first = cache.keys
    cache.append(block(kind, 1, 2), block(kind, 1, 3))
    if kind == "numpy":
        assert np.shares_memory(first, cache.keys)
    else:
        assert first.data_ptr() == cache.keys.data_ptr()


def test_an_append_allocates_nothing_that_grows_with_the_history() -> None:
    """Measured: NumPy reports its allocations to tracemalloc; a concatenating cache would
    allocate the whole history at every step."""
    cache = KVCache(1, 2, 64, 4096, dtype=np.float64)
    step = np.random.default_rng(0).standard_normal((1, 2, 1, 64))
    peaks = {}
    for length in (16, 1024, 4000):
        while cache.length < length:
            cache.append(step, step)
        tracemalloc.start()
        cache.append(step, step)
        peaks[length] = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    history_bytes = 2 * 2 * 4000 * 64 * 8
    assert max(peaks.values()) < 4096 < history_bytes / 100  # constant, and tiny
    assert peaks[4000] <= peaks[16] + 1024


@pytest.mark.parametrize("kind", ["numpy", "torch"])
def test_reset_forgets_and_keeps_the_buffers(kind: str) -> None:
    cache = make(kind)
    cache.append(block(kind, 4), block(kind, 4))
    nbytes = cache.nbytes
    cache.reset()
    assert cache.length == 0 and cache.nbytes == nbytes == 2 * B * H_KV * 8 * DH * 8
    cache.append(block(kind, 8), block(kind, 8))  # the whole capacity is free again
    assert cache.length == 8


@pytest.mark.parametrize("kind", ["numpy", "torch"])
def test_appending_past_the_capacity_is_refused_and_leaves_the_cache_alone(kind: str) -> None:
    cache = make(kind, capacity=4)
    cache.append(block(kind, 3), block(kind, 3))
    with pytest.raises(
        ValueError, match="holds at most capacity=4 positions; it holds 3 and got 2"
    ):
        cache.append(block(kind, 2), block(kind, 2))
    assert cache.length == 3


@pytest.mark.parametrize(
    ("key", "value", "error", "match"),
    [
        (np.zeros((B, H_KV, 1, 5)), np.zeros((B, H_KV, 1, 5)), ValueError, r"key must have shape"),
        (np.zeros((B + 1, H_KV, 1, DH)), np.zeros((B, H_KV, 1, DH)), ValueError, "key must have"),
        (np.zeros((B, H_KV, 2, DH)), np.zeros((B, H_KV, 1, DH)), ValueError, "same number"),
        (np.zeros((B, H_KV, 1, DH), np.float32), np.zeros((B, H_KV, 1, DH)), TypeError, "dtype"),
        (torch.zeros(B, H_KV, 1, DH), np.zeros((B, H_KV, 1, DH)), TypeError, "numpy.ndarray"),
    ],
)
def test_append_names_what_is_wrong(key, value, error, match) -> None:
    with pytest.raises(error, match=match):
        make("numpy").append(key, value)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"capacity": 0}, ValueError, "capacity must be positive; got capacity=0"),
        ({"num_kv_heads": 2.0}, TypeError, "num_kv_heads must be an int"),
        ({"dtype": np.int32}, TypeError, "dtype must be float32 or float64"),
        ({"dtype": torch.int64}, TypeError, "dtype must be one of the dtypes a layer computes"),
        ({"dtype": torch.float16}, TypeError, r"computes in \(torch.float64, .*\); got dtype tor"),
        ({"dtype": None}, TypeError, "dtype must be np.float32, np.float64 or a torch dtype"),
        ({"dtype": np.float64, "device": "meta"}, ValueError, "device must be None or 'cpu'"),
    ],
)
def test_constructor_names_the_bad_argument(kwargs, error, match) -> None:
    args = {"batch_size": B, "num_kv_heads": H_KV, "d_head": DH, "capacity": 4} | kwargs
    with pytest.raises(error, match=match):
        KVCache(**args)


# ---- decoding with the cache equals the full causal forward -------------------------------

D_MODEL, HEADS, SEQ = 24, 6, 9
BACKENDS = {"numpy": np_backend, "torch": torch_backend}


def _setup(kind: str, h_kv: int, batch: int = 2, seed: int = 0):
    backend = BACKENDS[kind]
    params = init_params(D_MODEL, HEADS, num_kv_heads=h_kv, seed=seed)
    x = np.random.default_rng(seed + 1).standard_normal((batch, SEQ, D_MODEL))
    if kind == "torch":
        params, x = params.to_torch(), torch.from_numpy(x)
    dtype = np.float64 if kind == "numpy" else torch.float64
    cache = KVCache(batch, h_kv, D_MODEL // HEADS, SEQ, dtype=dtype)
    return backend, params, x, cache


def _full(backend, params, x):
    """The full causal forward over every position."""
    return backend.multi_head_attention(x, x, x, params, backend.causal_mask(x.shape[1]))[0]


@pytest.mark.parametrize(
    ("kind", "h_kv", "form"), list(product(["numpy", "torch"], [6, 2, 1], ["fused", "packed"]))
)
def test_decoding_token_by_token_equals_the_full_causal_forward_at_every_prefix(kind, h_kv, form):
    backend, params, x, cache = _setup(kind, h_kv)
    full = _full(backend, params, x)
    out_tol, _ = tolerance.attention_tolerance(x, x, x, params, np_backend.causal_mask(SEQ))
    for t in range(SEQ):
        step = x[:, t : t + 1]  # (B, 1, D): the new token attends to all it has seen
        out, w = backend.multi_head_attention(step, step, step, params, cache=cache, form=form)
        assert cache.length == t + 1 and w.shape == (2, HEADS, 1, t + 1)
        tolerance.assert_close(out[:, 0], full[:, t], out_tol[:, t], name=f"position {t}")


@pytest.mark.parametrize(("kind", "h_kv"), list(product(["numpy", "torch"], [6, 3, 1])))
def test_a_prefilled_prompt_then_single_steps_and_chunks_equal_the_full_forward(kind, h_kv):
    backend, params, x, cache = _setup(kind, h_kv)
    full = _full(backend, params, x)
    out_tol, _ = tolerance.attention_tolerance(x, x, x, params, np_backend.causal_mask(SEQ))
    prompt = x[:, :4]  # prefill: 4 positions, causal among themselves
    out, _ = backend.multi_head_attention(
        prompt, prompt, prompt, params, backend.causal_mask(4), cache=cache, need_weights=False
    )
    tolerance.assert_close(out, full[:, :4], out_tol[:, :4])
    step = x[:, 4:5]
    out, _ = backend.multi_head_attention(step, step, step, params, cache=cache)
    tolerance.assert_close(out, full[:, 4:5], out_tol[:, 4:5])
    chunk = x[:, 5:9]  # 4 new positions after 5 cached: bottom-right causal (4, 9)
    mask = backend.causal_mask(4, 9, align="bottom_right")
    out, _ = backend.multi_head_attention(chunk, chunk, chunk, params, mask, cache=cache)
    tolerance.assert_close(out, full[:, 5:9], out_tol[:, 5:9])
    assert cache.length == SEQ


@pytest.mark.parametrize(("kind", "h_kv"), list(product(["numpy", "torch"], [6, 2, 1])))
def test_left_padded_prompts_of_different_lengths_decode_as_each_prompt_alone(kind, h_kv):
    backend, params, x, cache = _setup(kind, h_kv)
    lengths, prompt_len, steps = [5, 2], 5, 3
    pads = [prompt_len - n for n in lengths]
    keep = np.arange(SEQ)[None, :] >= np.array(pads)[:, None]  # (B, S): pads never attended
    batch = x[:, : prompt_len + steps]
    causal = np_backend.causal_mask(prompt_len + steps)
    as_mask = (lambda a: a) if kind == "numpy" else torch.from_numpy
    outs = []
    prefill_mask = as_mask(causal[:prompt_len, :prompt_len] & keep[:, None, None, :prompt_len])
    p = batch[:, :prompt_len]
    outs.append(backend.multi_head_attention(p, p, p, params, prefill_mask, cache=cache)[0])
    for t in range(prompt_len, prompt_len + steps):
        s = batch[:, t : t + 1]
        step_mask = as_mask(keep[:, None, None, : t + 1])  # (B, 1, 1, t + 1)
        outs.append(backend.multi_head_attention(s, s, s, params, step_mask, cache=cache)[0])
    decoded = torch.cat(outs, 1) if kind == "torch" else np.concatenate(outs, 1)
    for b in range(len(lengths)):
        alone = batch[b : b + 1, pads[b] :]  # the prompt without its padding, and its steps
        ref = _full(backend, params, alone)
        out_tol, _ = tolerance.attention_tolerance(alone, alone, alone, params, None)
        tolerance.assert_close(decoded[b : b + 1, pads[b] :], ref, out_tol, name=f"prompt {b}")


def test_the_cache_must_fit_the_layer_and_the_call() -> None:
    backend, params, x, cache = _setup("numpy", 2)
    step = x[:, :1]
    cases = [
        (
            KVCache(2, 3, 4, 9),
            ValueError,
            re.escape("want (B, H_kv, Dh) = (2, 2, 4); got (2, 3, 4)"),
        ),
        (KVCache(3, 2, 4, 9), ValueError, r"cache must have the inputs' batch size"),
        (
            KVCache(2, 2, 4, 9, dtype=np.float32),
            TypeError,
            "cache must have the inputs' dtype float64; got a cache of dtype float32",
        ),
        (
            KVCache(2, 2, 4, 9, dtype=torch.float64),
            TypeError,
            "cache must hold numpy.ndarray buffers",
        ),
        ("cache", TypeError, "cache must be a mha.core.kv_cache.KVCache; got str"),
    ]
    for bad, error, match in cases:
        with pytest.raises(error, match=match):
            backend.multi_head_attention(step, step, step, params, cache=bad)
    with pytest.raises(ValueError, match="form='per_head' does not take a cache"):
        backend.multi_head_attention(step, step, step, params, cache=cache, form="per_head")
    full = KVCache(2, 2, 4, 1)
    backend.multi_head_attention(step, step, step, params, cache=full)
    with pytest.raises(
        ValueError, match="holds at most capacity=1 positions; it holds 1 and got 1"
    ):
        backend.multi_head_attention(step, step, step, params, cache=full)
    assert full.length == 1  # refused before anything was appended


def test_a_mask_must_cover_the_cached_positions_too() -> None:
    backend, params, x, cache = _setup("numpy", 2)
    p = x[:, :3]
    backend.multi_head_attention(p, p, p, params, backend.causal_mask(3), cache=cache)
    chunk = x[:, 3:5]
    wrong = backend.causal_mask(2)  # (2, 2): the alignment of the new positions only
    with pytest.raises(
        ValueError,
        match=r"mask must broadcast to \(B, H, L, S\) = \(2, 6, 2, 5\); got shape \(2, 2\)",
    ):
        backend.multi_head_attention(chunk, chunk, chunk, params, wrong, cache=cache)
    assert cache.length == 3


@pytest.mark.parametrize("kind", ["numpy", "torch"])
def test_truncate_drops_the_last_positions_and_appends_after_them(kind: str) -> None:
    cache = make(kind)
    k, v = block(kind, 5), block(kind, 5, 1)
    cache.append(k, v)
    cache.truncate(3)  # e.g. two rejected draft tokens
    assert cache.length == 3
    equal = np.array_equal if kind == "numpy" else torch.equal
    assert equal(cache.keys, k[:, :, :3])  # exact: a view of what was written
    cache.append(block(kind, 2, 2), block(kind, 2, 3))
    assert cache.length == 5 and equal(cache.values[:, :, :3], v[:, :, :3])  # exact: kept
    with pytest.raises(ValueError, match=r"length must be in \[0, 5\], the positions cached"):
        cache.truncate(6)
    with pytest.raises(TypeError, match="length must be an int"):
        cache.truncate(2.0)


@pytest.mark.parametrize("kind", ["numpy", "torch"])
def test_max_abs_bounds_everything_appended_until_reset(kind: str) -> None:
    cache = make(kind)
    assert cache.max_abs == 0.0  # exact: nothing appended
    k, v = block(kind, 2), block(kind, 2, 1)
    cache.append(k, v)
    largest = max(float(abs(k).max()), float(abs(v).max()))
    assert cache.max_abs == largest  # exact: the largest entry itself
    cache.truncate(1)
    assert cache.max_abs == largest  # exact: still a bound on what is left
    cache.reset()
    assert cache.max_abs == 0.0  # exact: nothing cached


@pytest.mark.parametrize("kind", ["numpy", "torch"])
def test_a_layer_appends_with_a_bound_on_what_it_caches(kind: str) -> None:
    backend, params, x, cache = _setup(kind, 2)
    backend.multi_head_attention(x[:, :3], x[:, :3], x[:, :3], params, cache=cache)
    held = max(float(abs(cache.keys).max()), float(abs(cache.values).max()))
    assert held <= cache.max_abs < math.inf  # a bound from the inputs' magnitudes


# ---- a refused call leaves the cache exactly as it was -----------------------------------

FORMS = ["fused", "packed", "tiled"]
KIND_FORMS = [(kind, form) for kind in ("numpy", "torch") for form in FORMS]
KIND_FORMS.remove(("torch", "tiled"))  # the tiled form is NumPy's only
# PyTorch's paths with a cache: the explicit one (weights), scaled_dot_product_attention
# (no weights), and either while autograd records (each append then writes a new buffer)
TORCH_PATHS = ["weights", "sdpa", "weights, recorded", "sdpa, recorded"]
KIND_FORM_PATHS = [(k, f, "weights") for k, f in KIND_FORMS if k == "numpy"] + [
    (k, f, path) for k, f in KIND_FORMS if k == "torch" for path in TORCH_PATHS
]
DECODE_D, DECODE_H, DECODE_HKV = 8, 2, 1


def _float32_layer(kind: str, path: str = "weights"):
    """A float32 grouped-query layer, its cache holding a 2-position prompt, and a step."""
    backend = BACKENDS[kind]
    params = init_params(DECODE_D, DECODE_H, num_kv_heads=DECODE_HKV, seed=3)
    x = np.random.default_rng(4).standard_normal((1, 4, DECODE_D)).astype(np.float32)
    dtype = np.float32 if kind == "numpy" else torch.float32
    if kind == "torch":
        params, x = params.to_torch(torch.float32), torch.from_numpy(x)
        if path.endswith("recorded"):
            params = params.map(lambda t: t.requires_grad_())
    else:
        params = params.to_numpy(np.float32)
    cache = KVCache(1, DECODE_HKV, DECODE_D // DECODE_H, 4, dtype=dtype)
    return backend, params, x, cache


def _call(backend, params, x, cache, form, mask=None, path="weights"):
    weights = form != "tiled" and path.startswith("weights")
    return backend.multi_head_attention(
        x, x, x, params, mask, cache=cache, form=form, need_weights=weights
    )[0]


def _snapshot(cache: KVCache):
    def copy(a):
        return a.copy() if isinstance(a, np.ndarray) else a.detach().clone().numpy()

    return cache.length, copy(cache.keys), copy(cache.values), cache.max_abs


def _assert_unchanged(cache: KVCache, before, what: str = "") -> None:
    length, keys, values, max_abs = _snapshot(cache)
    assert length == before[0], what
    assert np.array_equal(keys, before[1], equal_nan=True), what  # exact: untouched memory
    assert np.array_equal(values, before[2], equal_nan=True), what  # exact: untouched memory
    assert max_abs == before[3], what  # exact: the same float


def _refusals(kind: str, x, cache: KVCache):
    """(what, call arguments (x, mask, form or None), error) that a layer call must refuse."""
    ones = np.ones if kind == "numpy" else torch.ones
    huge = 1e20 * ones((1, 1, DECODE_D), dtype=x.dtype)  # the scores overflow float32
    nan = x[:, 2:3].clone() if kind == "torch" else x[:, 2:3].copy()
    nan[0, 0, 0] = math.nan
    wrong_mask = BACKENDS[kind].causal_mask(1, 2)  # covers the new position only, not S = 3
    cases = [
        ("overflow", (huge, None, None), ValueError),
        ("NaN input", (nan, None, None), ValueError),
        ("mask", (x[:, 2:3], wrong_mask, None), ValueError),
        ("capacity", (x[:, :3], None, None), ValueError),
        ("per_head", (x[:, 2:3], None, "per_head"), ValueError),
    ]
    if kind == "torch":
        cases.append(("device", (x[:, 2:3].to("meta"), None, None), TypeError))
    return cases


@pytest.mark.parametrize(("kind", "form", "path"), KIND_FORM_PATHS)
def test_a_refused_layer_call_leaves_the_cache_exactly_as_it_was(kind, form, path) -> None:
    """Length, contents and max_abs, and the next step equals that of a cache never refused."""
    backend, params, x, cache = _float32_layer(kind, path)
    _, _, _, untouched = _float32_layer(kind, path)
    prompt = x[:, :2]
    for c in (cache, untouched):
        _call(backend, params, prompt, c, form, backend.causal_mask(2), path)
    for what, (bad, mask, bad_form), error in _refusals(kind, x, cache):
        before = _snapshot(cache)
        with pytest.raises(error), np.errstate(over="ignore", invalid="ignore"):
            _call(backend, params, bad, cache, bad_form or form, mask, path)
        _assert_unchanged(cache, before, what)
    step = x[:, 2:3]
    out = _call(backend, params, step, cache, form, path=path)
    ref = _call(backend, params, step, untouched, form, path=path)
    equal = np.array_equal if kind == "numpy" else torch.equal
    assert cache.length == untouched.length == 3
    assert equal(out, ref)  # exact: the same call on the same cache contents


def test_the_reported_overflow_no_longer_corrupts_the_next_step() -> None:
    """The report's case: a refused call took the length from 2 to 3, and the next step
    gave weight 1 to the overflowed position, finite and about 1e21 off."""
    for kind in ("numpy", "torch"):
        backend, params, x, cache = _float32_layer(kind)
        ones = np.ones if kind == "numpy" else torch.ones
        _call(backend, params, x[:, :2], cache, "fused", backend.causal_mask(2))
        huge = 1e20 * ones((1, 1, DECODE_D), dtype=x.dtype)
        with pytest.raises(ValueError, match="overflowed"), np.errstate(over="ignore"):
            _call(backend, params, huge, cache, "fused")
        assert cache.length == 2
        out = _call(backend, params, x[:, 2:3], cache, "fused")
        full = _call(backend, params, x[:, :3], None, "fused", backend.causal_mask(3))
        tol, _ = tolerance.attention_tolerance(x[:, :3], x[:, :3], x[:, :3], params)
        tolerance.assert_close(out[:, 0], full[:, 2], tol[:, 2], name=f"{kind} next step")


def test_a_refused_module_call_leaves_the_cache_as_it_was() -> None:
    from mha import MultiHeadAttention

    layer = MultiHeadAttention(DECODE_D, DECODE_H, num_kv_heads=DECODE_HKV)
    cache = KVCache(1, DECODE_HKV, DECODE_D // DECODE_H, 4, dtype=torch.float32)
    x = torch.from_numpy(np.random.default_rng(5).standard_normal((1, 2, DECODE_D))).float()
    layer(x, mask=torch_backend.causal_mask(2), cache=cache)
    before = _snapshot(cache)
    with pytest.raises(ValueError, match="overflowed"):
        layer(1e20 * torch.ones(1, 1, DECODE_D), cache=cache)
    _assert_unchanged(cache, before)


@pytest.mark.parametrize(("kind", "form", "path"), KIND_FORM_PATHS)
@pytest.mark.parametrize("how", ["written into its view", "appended under a false max_abs"])
def test_nan_in_the_cache_is_reported_as_nan_in_the_cache(kind, form, path, how) -> None:
    backend, params, x, cache = _float32_layer(kind, path)
    _call(backend, params, x[:, :2], cache, form, backend.causal_mask(2), path)
    if how == "written into its view":
        cache.values[0, 0, 1, 0] = math.nan
    else:
        bad = cache.keys[:, :, :1] * math.nan
        cache.append(bad, bad, max_abs=1.0)  # the caller vouches for what it did not read
    before = _snapshot(cache)
    name = "values" if how == "written into its view" else "keys"
    with pytest.raises(
        ValueError,
        match=f"cache must hold finite keys and values; got NaN or infinite values in cache.{name}",
    ):
        _call(backend, params, x[:, 3:4], cache, form, path=path)
    _assert_unchanged(cache, before)


@pytest.mark.parametrize(("kind", "form", "path"), KIND_FORM_PATHS)
@pytest.mark.parametrize("how", ["written into its view", "appended under a false max_abs"])
def test_finite_entries_beyond_max_abs_that_overflow_the_output_are_named(
    kind, form, path, how
) -> None:
    """Finite keys and values of 3e38 that the cache's bound does not cover: the output
    overflows, and the call is refused naming the cache, never returning NaN or infinity."""
    backend, params, x, cache = _float32_layer(kind, path)
    _call(backend, params, x[:, :2], cache, form, backend.causal_mask(2), path)
    step = 10 * x[:, 3:4]
    p64 = params.to_numpy(np.float64)
    q = np.asarray(step, dtype=np.float64) @ p64.w_q + p64.b_q  # (1, 1, D)
    key = 3e38 * np.sign(q[..., : DECODE_D // DECODE_H])  # head 0's score: beyond float32
    key, value = key.astype(np.float32), np.full(key.shape, 3e38, np.float32)
    if kind == "torch":
        key, value = torch.from_numpy(key), torch.from_numpy(value)
    if how == "written into its view":
        with torch.no_grad():  # the recorded paths' buffers require grad
            cache.keys[0, 0, 1], cache.values[0, 0, 1] = key[0, 0], value[0, 0]
    else:  # the caller vouches for what it did not read
        cache.append(key[:, None], value[:, None], max_abs=1.0)
    before = _snapshot(cache)
    match = (  # every form, the tiled one too: no form reads the cached keys again
        rf"cache must hold keys and values within its max_abs={cache.max_abs:.3g}, the "
        r"bound a layer relies on; got entries up to 3e\+38 \(written into its views, or "
        r"appended with a max_abs that did not bound them\?\), and the output overflowed"
    )
    with pytest.raises(ValueError, match=match), np.errstate(over="ignore", invalid="ignore"):
        _call(backend, params, step, cache, form, path=path)
    _assert_unchanged(cache, before)


# ---- append: magnitudes, devices, finiteness, atomic ---------------------------------------


@pytest.mark.parametrize(
    ("max_abs", "error", "match"),
    [
        (-1.0, ValueError, r"max_abs must be finite and at least 0; got max_abs=-1.0"),
        (math.nan, ValueError, r"max_abs must be finite and at least 0; got max_abs=nan"),
        (math.inf, ValueError, r"max_abs must be finite and at least 0; got max_abs=inf"),
        pytest.param(
            10**400, ValueError, "max_abs must be finite and at least 0", id="int-beyond-float"
        ),
        ("big", TypeError, r"max_abs must be a real number \(int or float\); got str 'big'"),
        (True, TypeError, r"max_abs must be a real number \(int or float\); got bool True"),
        (np.array(2.0), TypeError, r"got ndarray array\(2\.\); pass max_abs.item\(\)"),
    ],
)
@pytest.mark.parametrize("kind", ["numpy", "torch"])
def test_append_refuses_a_bound_that_is_no_magnitude(kind, max_abs, error, match) -> None:
    cache = make(kind)
    cache.append(block(kind, 2), block(kind, 2, 1))
    before = _snapshot(cache)
    with pytest.raises(error, match=match):
        cache.append(block(kind, 1, 2), block(kind, 1, 3), max_abs=max_abs)
    _assert_unchanged(cache, before)


@pytest.mark.parametrize("kind", ["numpy", "torch"])
def test_a_given_bound_is_kept_and_a_measured_one_refuses_nan(kind: str) -> None:
    cache = make(kind)
    cache.append(block(kind, 1), block(kind, 1, 1), max_abs=np.float64(100.0))
    assert cache.max_abs == 100.0  # exact: the bound given
    before = _snapshot(cache)
    inf, nan = block(kind, 1, 2), block(kind, 1, 3)
    inf[0, 0, 0, 0], nan[1, 2, 0, 3] = math.inf, math.nan
    for key, value, name in ((inf, block(kind, 1), "key"), (block(kind, 1), nan, "value")):
        with pytest.raises(ValueError, match=f"{name} must be finite; got NaN or infinite values"):
            cache.append(key, value)
        _assert_unchanged(cache, before)


def test_append_refuses_tensors_on_another_device_than_the_cache() -> None:
    cache = make("torch")
    on_meta = r"key must be on the cache's device \(cpu\); got key on meta"
    with pytest.raises(TypeError, match=on_meta):
        cache.append(block("torch", 1).to("meta"), block("torch", 1))
    with pytest.raises(TypeError, match=r"value must be on the cache's device \(cpu\); got value"):
        cache.append(block("torch", 1), block("torch", 1).to("meta"))
    assert cache.length == 0
    meta = KVCache(B, H_KV, DH, 8, dtype=torch.float64, device="meta")
    on_cpu = r"key must be on the cache's device \(meta\); got key on cpu"
    with pytest.raises(TypeError, match=on_cpu):
        meta.append(block("torch", 1), block("torch", 1))  # it would drop the values
    assert meta.length == 0
    meta.append(block("torch", 2).to("meta"), block("torch", 2).to("meta"))  # shape inference
    assert meta.length == 2 and meta.keys.device.type == "meta" and meta.device.type == "meta"


@pytest.mark.parametrize(
    ("kind", "bad", "error", "match"),
    [
        ("numpy", None, TypeError, "key must be a numpy.ndarray like the cache; got NoneType"),
        ("torch", None, TypeError, "key must be a torch.Tensor like the cache; got NoneType"),
        ("numpy", np.ma.zeros((B, H_KV, 1, DH)), TypeError, "key must be a plain numpy.ndarray"),
        ("torch", torch.zeros(B, H_KV, 1, DH).to_sparse(), TypeError, "key must be a dense"),
        ("numpy", np.zeros((H_KV, 1, DH)), ValueError, r"key must have shape \(B, H_kv, n, Dh\)"),
    ],
)
def test_append_refuses_what_is_not_a_block_of_the_cache(kind, bad, error, match) -> None:
    cache = make(kind)
    if isinstance(bad, torch.Tensor) and bad.layout == torch.strided:
        bad = bad.double()
    with pytest.raises(error, match=match):
        cache.append(bad, block(kind, 1))
    assert cache.length == 0 and cache.max_abs == 0.0


def test_the_torch_dtypes_of_a_cache_are_those_a_layer_computes_in() -> None:
    from mha.core import kv_cache

    assert tuple(getattr(torch, n) for n in kv_cache.TORCH_FLOATS) == torch_checks.FLOATS
    for dtype in torch_checks.FLOATS:  # each one makes a cache a layer takes
        backend, params, x, _ = _setup("torch", 2)
        cache = KVCache(2, 2, D_MODEL // HEADS, 2, dtype=dtype)
        step = x[:, :1].to(dtype)
        backend.multi_head_attention(step, step, step, params.to_torch(dtype), cache=cache)
        assert cache.length == 1


# ---- gradients through cached steps ------------------------------------------------------


@pytest.mark.parametrize(("h_kv", "need_weights"), list(product([4, 2, 1], [False, True])))
def test_gradients_through_cached_steps_equal_the_full_causal_forwards(h_kv, need_weights):
    """A prefill and three steps with autograd recording: the gradients of every parameter
    and input equal those of the full causal forward (no in-place error from PyTorch)."""
    from mha import MultiHeadAttention

    layer = MultiHeadAttention(8, 4, num_kv_heads=h_kv, dtype=torch.float64, seed=1)
    x = torch.from_numpy(np.random.default_rng(6).standard_normal((2, 5, 8))).requires_grad_()
    weight = torch.from_numpy(np.random.default_rng(7).standard_normal((2, 5, 8)))
    full = layer(x, mask=torch_backend.causal_mask(5), need_weights=need_weights)[0]
    (full * weight).sum().backward()
    expected = [p.grad.clone() for p in layer.parameters()] + [x.grad.clone()]
    layer.zero_grad()
    x.grad = None
    cache = KVCache(2, h_kv, 2, 5, dtype=torch.float64)
    prefill = layer(x[:, :2], mask=torch_backend.causal_mask(2), cache=cache)[0]
    steps = [layer(x[:, t : t + 1], cache=cache, need_weights=need_weights)[0] for t in (2, 3, 4)]
    decoded = torch.cat([prefill, *steps], dim=1)
    (decoded * weight).sum().backward()
    got = [p.grad for p in layer.parameters()] + [x.grad]
    names = [n for n, _ in layer.named_parameters()] + ["x"]
    tol, _ = tolerance.attention_tolerance(x.detach(), x.detach(), x.detach(), layer.params())
    tolerance.assert_close(decoded.detach(), full.detach(), tol, name="decoded")
    for name, a, b in zip(names, got, expected, strict=True):
        scale = float(b.abs().max()) + 1.0
        assert float((a - b).abs().max()) <= 1e-12 * scale, name  # float64, a few roundings


def test_decoding_without_autograd_still_writes_in_place() -> None:
    """Copy-on-write is for recorded steps only: a plain decoding step moves n positions."""
    from mha import MultiHeadAttention

    layer = MultiHeadAttention(8, 2, dtype=torch.float64)
    cache = KVCache(1, 2, 4, 4, dtype=torch.float64)
    x = torch.zeros(1, 1, 8, dtype=torch.float64)
    with torch.no_grad():
        layer(x, cache=cache)
        first = cache.keys.data_ptr()
        layer(x, cache=cache)
    assert cache.keys.data_ptr() == first
    layer(x, cache=cache)  # recorded: the parameters require grad
    assert cache.keys.data_ptr() != first and cache.keys.requires_grad
    cache.reset()  # the recorded buffers are left to their graph
    assert not cache.keys.requires_grad


# ---- no change inside an open appending block; several caches appended atomically ----------


@pytest.mark.parametrize("kind", ["numpy", "torch"])
@pytest.mark.parametrize("change", ["append", "appending", "truncate", "reset", "layer call"])
def test_an_open_appending_block_refuses_every_other_change_of_its_cache(kind, change) -> None:
    """The block's commit would write over it: a nested append was lost, and the outer
    commit kept the inner positions' contents under its own length."""
    cache = make(kind)
    cache.append(block(kind, 1), block(kind, 1, 1))
    before = _snapshot(cache)
    backend = BACKENDS[kind]
    layer = init_params(H_KV * DH, H_KV, seed=2)  # D = 12, H = H_KV: the cache's Dh
    layer = layer.to_numpy() if kind == "numpy" else layer.to_torch()
    x = np.random.default_rng(6).standard_normal((B, 1, H_KV * DH))  # one new position
    x = x if kind == "numpy" else torch.from_numpy(x)

    def appending() -> None:
        with cache.appending(block(kind, 1, 2), block(kind, 1, 3)):
            pass

    changes = {
        "append": lambda: cache.append(block(kind, 1, 2), block(kind, 1, 3)),
        "appending": appending,
        "truncate": lambda: cache.truncate(0),
        "reset": cache.reset,
        "layer call": lambda: backend.multi_head_attention(x, x, x, layer, cache=cache),
    }
    what = {"truncate": "truncate", "reset": "reset"}.get(change, "append to")
    match = f"cannot {what} the cache inside an open appending block of the same cache"
    with (
        pytest.raises(ValueError, match=match),
        cache.appending(block(kind, 1, 4), block(kind, 1, 5)),
    ):
        changes[change]()
    _assert_unchanged(cache, before, change)  # the block raised: nothing was committed
    with cache.appending(block(kind, 1, 4), block(kind, 1, 5)) as (keys, _):
        assert keys.shape[2] == 2 and cache.length == 1  # read, not changed, inside
    changes[change]()  # once the block has ended, the cache changes again
    assert cache.length == (0 if change in ("truncate", "reset") else 3)


@pytest.mark.parametrize("kind", ["numpy", "torch", "torch, recorded"])
def test_atomic_undoes_every_append_of_a_block_that_raises_and_keeps_those_that_succeed(kind):
    torch_kind = kind.startswith("torch")
    lib = "torch" if torch_kind else "numpy"
    caches = [make(lib), make(lib)]

    def new(n: int, seed: int):
        a = block(lib, n, seed)
        return a.requires_grad_() if kind.endswith("recorded") else a

    caches[0].append(new(2, 0), new(2, 1))
    before = [_snapshot(c) for c in caches]
    buffers = [c.keys.data_ptr() if torch_kind else None for c in caches]
    with pytest.raises(RuntimeError, match="a later layer refused"), atomic(caches):
        caches[0].append(new(1, 2), new(1, 3))
        caches[1].append(new(3, 4), new(3, 5), max_abs=100.0)
        raise RuntimeError("a later layer refused")
    for c, b, ptr in zip(caches, before, buffers, strict=True):
        _assert_unchanged(c, b)
        if torch_kind:  # the buffers before the block, not the copies recorded appends made
            assert c.keys.data_ptr() == ptr
    with atomic(caches):  # kept when the block succeeds
        caches[1].append(new(1, 6), new(1, 7))
    assert [c.length for c in caches] == [2, 1]


def test_atomic_refuses_what_an_undo_could_not_restore() -> None:
    caches = [make("numpy"), make("numpy")]
    caches[0].append(block("numpy", 2), block("numpy", 2, 1))
    for bad, got in ((caches[0], "KVCache"), ([None], "NoneType")):
        match = f"caches must be a list or tuple of KVCache or LatentCache; got {got}"
        with pytest.raises(TypeError, match=match), atomic(bad):
            pass
    with atomic(caches):
        caches[0].append(block("numpy", 1, 2), block("numpy", 1, 3))
        caches[0].truncate(2)  # the positions appended in the block may go
        with pytest.raises(ValueError, match=r"length must be in \[2, 2\], the positions cached "):
            caches[0].truncate(1)  # not those an undo must restore
        with pytest.raises(ValueError, match="cannot reset the cache inside an atomic block"):
            caches[0].reset()
        caches[1].reset()  # empty when the block began: nothing to restore
        with atomic(caches[:1]):  # nested: the inner block's start is the floor
            caches[0].append(block("numpy", 1, 4), block("numpy", 1, 5))
            with pytest.raises(ValueError, match=r"length must be in \[2, 3\]"):
                caches[0].truncate(1)
    caches[0].truncate(0)  # outside every block, anything again
    opened = caches[0].appending(block("numpy", 1), block("numpy", 1))
    match = "cannot begin an atomic block of the cache inside"
    with pytest.raises(ValueError, match=match), opened, atomic(caches):
        pass
