"""The key/value cache: appends, views, capacity, reset, errors, and no copies of the history."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest
import torch

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
