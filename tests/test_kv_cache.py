"""The key/value cache: appends, views, capacity, reset, errors, and no copies of the history."""

from __future__ import annotations

import tracemalloc
from itertools import product

import numpy as np
import pytest
import torch

from mha import init_params, np_backend, tolerance, torch_backend
from mha.kv_cache import KVCache

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
        ({"dtype": torch.int64}, TypeError, "dtype must be a floating dtype"),
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
            r"want \(B, H_kv, Dh, dtype\) = \(2, 2, 4, dtype\('float64'\)\); got \(2, 3, 4",
        ),
        (KVCache(3, 2, 4, 9), ValueError, r"cache must have the inputs' batch size"),
        (KVCache(2, 2, 4, 9, dtype=np.float32), ValueError, r"got \(2, 2, 4, dtype\('float32'\)\)"),
        (
            KVCache(2, 2, 4, 9, dtype=torch.float64),
            TypeError,
            "cache must hold numpy.ndarray buffers",
        ),
        ("cache", TypeError, "cache must be a mha.kv_cache.KVCache; got str"),
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
