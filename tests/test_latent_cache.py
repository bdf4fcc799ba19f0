"""The latent cache: appends, bytes per position, and the refusals and undo of ``KVCache``."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from mha.core.kv_cache import KVCache, LatentCache, atomic

B, DC, DR = 2, 6, 4


def make(kind: str, capacity: int = 8, d_rope: int = DR) -> LatentCache:
    dtype = np.float64 if kind == "numpy" else torch.float64
    return LatentCache(B, DC, d_rope, capacity, dtype=dtype)


def block(kind: str, n: int, width: int, seed: int = 0):
    a = np.random.default_rng(seed).standard_normal((B, n, width))
    return a if kind == "numpy" else torch.from_numpy(a)


def pair(kind: str, n: int, seed: int = 0, d_rope: int = DR):
    return block(kind, n, DC, seed), block(kind, n, d_rope, seed + 100)


def snapshot(cache: LatentCache):
    def copy(a):
        return a.copy() if isinstance(a, np.ndarray) else a.detach().clone().numpy()

    return cache.length, copy(cache.latents), copy(cache.rotary_keys), cache.max_abs


def assert_unchanged(cache: LatentCache, before) -> None:
    length, latents, rotary_keys, max_abs = snapshot(cache)
    assert length == before[0]
    assert np.array_equal(latents, before[1])  # exact: untouched memory
    assert np.array_equal(rotary_keys, before[2])  # exact: untouched memory
    assert max_abs == before[3]  # exact: the same float


@pytest.mark.parametrize("kind", ["numpy", "torch"])
def test_appends_concatenate_along_the_positions(kind: str) -> None:
    cache = make(kind)
    assert cache.length == 0 and cache.latents.shape == (B, 0, DC)
    (c1, r1), (c2, r2) = pair(kind, 3, 0), pair(kind, 2, 1)
    cache.append(c1, r1)
    latents, rotary_keys = cache.extend(c2, r2)
    cat = np.concatenate if kind == "numpy" else torch.cat
    equal = np.array_equal if kind == "numpy" else torch.equal
    assert cache.length == len(cache) == 5
    assert equal(latents, cat([c1, c2], 1)) and equal(cache.latents, latents)  # exact: copies
    assert equal(rotary_keys, cat([r1, r2], 1)) and rotary_keys.shape == (B, 5, DR)
    assert (cache.batch_size, cache.d_latent, cache.d_rope, cache.capacity) == (B, DC, DR, 8)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, torch.float32, torch.bfloat16])
def test_bytes_per_position_are_the_latent_and_the_rotary_key(dtype) -> None:
    """``(Dc + Dr)`` elements per position and sequence: the formula, against the buffers."""
    cache = LatentCache(3, DC, DR, 10, dtype=dtype)
    item = dtype.itemsize if isinstance(dtype, torch.dtype) else np.dtype(dtype).itemsize
    assert cache.nbytes == 3 * 10 * (DC + DR) * item
    keys = KVCache(3, 2, 5, 10, dtype=dtype)  # 2 H_kv Dh = 20 elements per position
    assert keys.nbytes == 3 * 10 * 2 * 2 * 5 * item


@pytest.mark.parametrize("kind", ["numpy", "torch"])
def test_a_layer_without_rotary_keys_caches_latents_only(kind: str) -> None:
    cache = make(kind, d_rope=0)
    c, r = pair(kind, 3, d_rope=0)
    cache.append(c, r)
    assert cache.rotary_keys.shape == (B, 3, 0) and cache.nbytes == B * 8 * DC * 8


@pytest.mark.parametrize("kind", ["numpy", "torch"])
@pytest.mark.parametrize(
    ("case", "error", "match"),
    [
        ("latent width", ValueError, r"latent must have shape \(B, n, Dc\) = \(2, n, 6\)"),
        ("rotary width", ValueError, r"rotary_key must have shape \(B, n, Dr\) = \(2, n, 4\)"),
        ("batch", ValueError, r"latent must have shape"),
        ("positions", ValueError, "latent and rotary_key must hold the same number of positions"),
        ("capacity", ValueError, "holds at most capacity=8 positions; it holds 5 and got 4"),
        ("dtype", TypeError, "latent must have the cache's dtype"),
        ("library", TypeError, "rotary_key must be a"),
        ("nan", ValueError, "rotary_key must be finite; got NaN or infinite values"),
        ("max_abs", ValueError, "max_abs must be finite and at least 0"),
    ],
)
def test_a_refused_append_names_the_problem_and_changes_nothing(kind, case, error, match) -> None:
    cache = make(kind)
    cache.append(*pair(kind, 5))
    before = snapshot(cache)
    c, r = pair(kind, 1, 7)
    max_abs = None
    if case == "latent width":
        c = block(kind, 1, DC + 1)
    elif case == "rotary width":
        r = block(kind, 1, DR - 2)
    elif case == "batch":
        c = c[:1]
    elif case == "positions":
        r = block(kind, 2, DR)
    elif case == "capacity":
        c, r = pair(kind, 4)
    elif case == "dtype":
        c = c.astype(np.float32) if kind == "numpy" else c.float()
    elif case == "library":
        r = r.numpy() if kind == "torch" else torch.from_numpy(r)
    elif case == "nan":
        r[0, 0, 0] = math.nan
    elif case == "max_abs":
        max_abs = -1.0
    with pytest.raises(error, match=match):
        cache.append(c, r, max_abs=max_abs)
    assert_unchanged(cache, before)


@pytest.mark.parametrize("kind", ["numpy", "torch"])
def test_an_appending_block_keeps_its_positions_only_when_it_succeeds(kind: str) -> None:
    cache = make(kind)
    cache.append(*pair(kind, 2))
    before = snapshot(cache)
    refused = pytest.raises(RuntimeError, match="the layer refused")
    with refused, cache.appending(*pair(kind, 3, 1)) as (latents, rotary_keys):
        assert latents.shape == (B, 5, DC) and rotary_keys.shape == (B, 5, DR)
        assert cache.length == 2  # read, not yet changed
        raise RuntimeError("the layer refused")
    assert_unchanged(cache, before)
    locked = pytest.raises(ValueError, match="cannot truncate the cache inside an open")
    with cache.appending(*pair(kind, 3, 1)), locked:
        cache.truncate(0)
    assert cache.length == 5


def test_atomic_undoes_the_appends_of_latent_and_key_value_caches_alike() -> None:
    latent = make("numpy")
    keys = KVCache(B, 3, 4, 8)
    latent.append(*pair("numpy", 2))
    before = snapshot(latent)
    with pytest.raises(RuntimeError, match="a later layer refused"), atomic([latent, keys]):
        latent.append(*pair("numpy", 1, 3))
        keys.append(np.ones((B, 3, 1, 4)), np.ones((B, 3, 1, 4)))
        raise RuntimeError("a later layer refused")
    assert_unchanged(latent, before)
    assert keys.length == 0
    with atomic([latent]), pytest.raises(ValueError, match=r"length must be in \[2, 2\]"):
        latent.truncate(1)


def test_while_autograd_records_an_append_writes_a_new_buffer() -> None:
    cache = make("torch")
    c, r = (t.requires_grad_() for t in pair("torch", 2))
    cache.append(c, r)
    first = cache.latents
    cache.append(*(t.requires_grad_() for t in pair("torch", 1, 1)))
    (cache.latents.sum() + cache.rotary_keys.sum()).backward()
    assert first.data_ptr() != cache.latents.data_ptr()  # a copy per recorded append
    ones = torch.ones_like(c), torch.ones_like(r)
    assert torch.equal(c.grad, ones[0]) and torch.equal(r.grad, ones[1])  # exact: sums of ones


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"d_latent": 0}, ValueError, "d_latent must be positive; got d_latent=0"),
        ({"d_rope": -1}, ValueError, "d_rope must be at least 0"),
        ({"capacity": 2.0}, TypeError, "capacity must be an int"),
        ({"dtype": torch.float16}, TypeError, "dtype must be one of the dtypes a layer computes"),
        ({"dtype": np.float64, "device": "meta"}, ValueError, "device must be None or 'cpu'"),
    ],
)
def test_the_constructor_names_the_bad_argument(kwargs, error, match) -> None:
    args = {"batch_size": B, "d_latent": DC, "d_rope": DR, "capacity": 4} | kwargs
    with pytest.raises(error, match=match):
        LatentCache(**args)
