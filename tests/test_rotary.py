"""Tests for mha.core.rotary: rotary position embeddings in NumPy and PyTorch.

The rotation is held to two independent implementations (complex multiplication, as in
Meta's LLaMA code, for the interleaved pairing; ``rotate_half``, as in Hugging Face
``transformers``, for the halves), to the property that makes it useful (a score depends
only on the distance between the query's and the key's positions), and to what cached
decoding needs (positions that continue from an offset give the rows of the whole sequence,
and attention over a cache of rotated keys equals the full causal attention).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mha.backends import np_backend, torch_backend
from mha.core.kv_cache import KVCache
from mha.core.rotary import PAIRINGS, Rotary, interleave_permutation, rotate
from mha.numerics import tolerance


def complex_rotation(x: np.ndarray, base: float, offset: int = 0) -> np.ndarray:
    """Interleaved pairs as complex numbers, each multiplied by ``exp(i p theta_j)``."""
    n, d_head = x.shape[-2:]
    z = x[..., 0::2] + 1j * x[..., 1::2]  # (..., n, Dh / 2)
    theta = 1.0 / base ** (np.arange(0, d_head, 2) / d_head)
    turned = z * np.exp(1j * np.outer(offset + np.arange(n), theta))
    out = np.empty_like(x)
    out[..., 0::2], out[..., 1::2] = turned.real, turned.imag
    return out


def rotate_half_rotation(x: torch.Tensor, base: float, offset: int = 0) -> torch.Tensor:
    """Hugging Face's formula: ``x cos + rotate_half(x) sin`` with the frequencies twice."""
    n, d_head = x.shape[-2:]
    inv_freq = 1.0 / base ** (torch.arange(0, d_head, 2, dtype=torch.float64) / d_head)
    freqs = torch.outer(torch.arange(offset, offset + n, dtype=torch.float64), inv_freq)
    emb = torch.cat([freqs, freqs], dim=-1)  # (n, Dh)
    x1, x2 = x[..., : d_head // 2], x[..., d_head // 2 :]
    half_turned = torch.cat([-x2, x1], dim=-1)
    return x * emb.cos().to(x.dtype) + half_turned * emb.sin().to(x.dtype)


def draw(*shape: int, seed: int = 0, dtype=np.float64) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def rotation_tolerance(x: np.ndarray, dtype, max_position: int) -> float:
    """Two routes to a rotated row: a few roundings of ``|x|`` and of an angle ``<= p``.

    The angle ``p theta_i`` is rounded relatively, so its absolute error grows with the
    position: a route's cosine and sine are off by about ``(p + 1) u`` each.
    """
    scale = float(np.abs(x).max()) * (2 + max_position)
    return tolerance.rounding_tolerance(dtype, terms=2, scale=scale, stages=3)


@pytest.mark.parametrize("offset", [0, 7, 1000])
def test_interleaved_rotation_equals_complex_multiplication(offset):
    x = draw(2, 3, 6, 16)
    ours = rotate(x, Rotary(10_000.0), offset=offset)
    ref = complex_rotation(x, 10_000.0, offset)
    tolerance.assert_close(ours, ref, rotation_tolerance(x, np.float64, offset + 6))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_halves_rotation_equals_transformers_rotate_half(dtype):
    x = torch.from_numpy(draw(2, 9, 5, 64)).to(dtype)
    ours = rotate(x, Rotary(100_000.0, "halves"), offset=3)
    ref = rotate_half_rotation(x, 100_000.0, offset=3)
    assert ours.dtype == dtype
    tol = rotation_tolerance(x.double().numpy(), dtype, 8)
    tolerance.assert_close(ours.double().numpy(), ref.double().numpy(), tol)


@pytest.mark.parametrize("pairing", PAIRINGS)
def test_numpy_and_torch_rotate_alike(pairing):
    x = draw(1, 2, 7, 12, dtype=np.float32)
    ours = rotate(x, Rotary(500.0, pairing), offset=5)
    theirs = rotate(torch.from_numpy(x), Rotary(500.0, pairing), offset=5)
    assert isinstance(ours, np.ndarray) and isinstance(theirs, torch.Tensor)
    assert ours.dtype == np.float32 and theirs.dtype == torch.float32
    tolerance.assert_close(theirs.numpy(), ours, rotation_tolerance(x, np.float32, 12))


def test_the_two_pairings_are_one_rotation_of_permuted_coordinates():
    x = draw(3, 4, 10)
    perm = interleave_permutation(10)
    assert perm.tolist() == [0, 5, 1, 6, 2, 7, 3, 8, 4, 9]
    interleaved = rotate(x[..., perm], Rotary(1e4, "interleaved"), offset=2)
    halves = rotate(x, Rotary(1e4, "halves"), offset=2)[..., perm]
    tolerance.assert_close(interleaved, halves, rotation_tolerance(x, np.float64, 6))


@pytest.mark.parametrize("pairing", PAIRINGS)
@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_the_inverse_rotation_turns_back_and_is_the_transpose(backend, pairing):
    """``inverse=True`` undoes :func:`rotate` and is its transpose: ``(R x) . y = x . (R^T y)``,
    which is why it carries a gradient back through the rotation."""
    x, y = draw(2, 3, 6, 16), draw(2, 3, 6, 16, seed=1)
    r = Rotary(1e4, pairing)
    if backend == "torch":
        x, y = torch.from_numpy(x), torch.from_numpy(y)
    back = rotate(rotate(x, r, offset=5), r, offset=5, inverse=True)
    tol = rotation_tolerance(np.asarray(x), np.float64, 11)
    tolerance.assert_close(np.asarray(back), np.asarray(x), 2 * tol)
    turned_x = (rotate(x, r, offset=5) * y).sum(-1)
    turned_y = (x * rotate(y, r, offset=5, inverse=True)).sum(-1)
    scale = float(np.abs(np.asarray(x)).max() * np.abs(np.asarray(y)).max()) * 2 * 16
    dot_tol = tolerance.rounding_tolerance(np.float64, terms=16, scale=scale * 11, stages=4)
    tolerance.assert_close(np.asarray(turned_x), np.asarray(turned_y), dot_tol)
    assert (
        np.abs(np.asarray(rotate(x, r, offset=5, inverse=True) - rotate(x, r, offset=5))).max()
        > 0.1
    )


@pytest.mark.parametrize("pairing", PAIRINGS)
def test_rotation_keeps_norms_and_leaves_position_zero_unchanged(pairing):
    x = draw(2, 5, 8)
    y = rotate(x, Rotary(1e4, pairing))
    tol = rotation_tolerance(x, np.float64, 5)
    tolerance.assert_close(np.linalg.norm(y, axis=-1), np.linalg.norm(x, axis=-1), 4 * tol)
    # exact: cos 0 = 1 and sin 0 = 0, so row 0 is x * 1 + partner * 0
    np.testing.assert_array_equal(y[..., 0, :], x[..., 0, :])
    assert np.abs(y[..., 1:, :] - x[..., 1:, :]).max() > 0.1  # later rows do turn


def test_frequencies_fall_from_one_radian_per_position():
    theta = Rotary(100_000.0).frequencies(64)
    assert theta.shape == (32,)
    assert theta[0] == 1.0  # exact: base ** 0
    tolerance.assert_close(theta[-1], 100_000.0 ** (-62 / 64), 4e-16)
    assert np.all(np.diff(theta) < 0)


@pytest.mark.parametrize("pairing", PAIRINGS)
def test_partners_pair_each_coordinate_with_one_other(pairing):
    partners = Rotary(pairing=pairing).partners(8)
    np.testing.assert_array_equal(partners[partners], np.arange(8))  # its own inverse
    assert np.all(partners != np.arange(8))
    expected = [1, 0, 3, 2, 5, 4, 7, 6] if pairing == "interleaved" else [4, 5, 6, 7, 0, 1, 2, 3]
    assert partners.tolist() == expected


@settings(max_examples=60, deadline=None)
@given(
    p=st.integers(0, 3000),
    s=st.integers(0, 3000),
    shift=st.integers(0, 3000),
    seed=st.integers(0, 2**16),
    pairing=st.sampled_from(PAIRINGS),
)
def test_a_score_depends_only_on_the_distance_between_positions(p, s, shift, seed, pairing):
    """``(R_p q) . (R_s k) = (R_(p+t) q) . (R_(s+t) k)`` for every shift ``t``."""
    rot = Rotary(10_000.0, pairing)
    q, k = draw(1, 32, seed=seed), draw(1, 32, seed=seed + 1)
    before = (rotate(q, rot, offset=p) @ rotate(k, rot, offset=s).T).item()
    after = (rotate(q, rot, offset=p + shift) @ rotate(k, rot, offset=s + shift).T).item()
    # two routes: each rotation off by a few roundings of an angle up to 6,000 radians
    bound = np.abs(q).sum() * np.abs(k).max() * 32 * (2 + p + s + 2 * shift)
    tol = tolerance.rounding_tolerance(np.float64, terms=32, scale=float(bound), stages=4)
    assert abs(before - after) <= tol


def test_scores_at_shifted_positions_differ_only_by_rounding_for_whole_sequences():
    rot = Rotary(100_000.0)
    q, k = draw(1, 9, 12, 64, seed=1), draw(1, 9, 12, 64, seed=2)
    near = rotate(q, rot) @ rotate(k, rot).swapaxes(-1, -2)  # positions 0..11
    far = rotate(q, rot, offset=500) @ rotate(k, rot, offset=500).swapaxes(-1, -2)
    scale = float(np.abs(q).max() * np.abs(k).max() * 64 * 520)
    tolerance.assert_close(
        far, near, tolerance.rounding_tolerance(np.float64, terms=64, scale=scale, stages=4)
    )
    # and the scores do depend on the distance: the rotation is not a no-op
    assert np.abs(near - q @ k.swapaxes(-1, -2)).max() > 1.0


@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_rows_rotated_from_an_offset_are_the_rows_of_the_whole_sequence(backend):
    x = draw(2, 3, 10, 16)
    if backend == "torch":
        x = torch.from_numpy(x)
    whole = rotate(x, Rotary(1e4))
    tail = rotate(x[..., 6:, :], Rotary(1e4), offset=6)
    head = rotate(x[..., :6, :], Rotary(1e4))
    as_np = (lambda a: a.numpy()) if backend == "torch" else (lambda a: a)
    tol = rotation_tolerance(np.asarray(as_np(x)), np.float64, 10)
    tolerance.assert_close(as_np(tail), as_np(whole)[..., 6:, :], tol)
    tolerance.assert_close(as_np(head), as_np(whole)[..., :6, :], tol)


def test_attention_over_a_cache_of_rotated_keys_equals_the_full_causal_attention():
    """Token by token: rotate the new query and key at the cache's length, cache the key."""
    rot, B, H, L, Dh = Rotary(100_000.0), 2, 3, 9, 8
    q, k, v = draw(B, H, L, Dh, seed=3), draw(B, H, L, Dh, seed=4), draw(B, H, L, Dh, seed=5)
    full, _ = np_backend.scaled_dot_product_attention(
        rotate(q, rot), rotate(k, rot), v, np_backend.causal_mask(L)
    )
    cache = KVCache(B, H, Dh, L)
    steps = []
    for t in range(L):
        offset = cache.length  # the new token's position
        cache.append(rotate(k[:, :, t : t + 1], rot, offset=offset), v[:, :, t : t + 1])
        step, _ = np_backend.scaled_dot_product_attention(
            rotate(q[:, :, t : t + 1], rot, offset=offset), cache.keys, cache.values
        )
        steps.append(step)
    cached = np.concatenate(steps, axis=2)  # (B, H, L, Dh)
    scale = float(np.abs(q).max() * np.abs(k).max() * Dh)
    tol = tolerance.rounding_tolerance(np.float64, terms=Dh * L, scale=scale * (2 + L), stages=6)
    tolerance.assert_close(cached, full, tol * np.abs(v).max())
    # rotating the keys at the wrong positions (all at 0) gives another attention
    wrong, _ = np_backend.scaled_dot_product_attention(
        rotate(q, rot), k, v, np_backend.causal_mask(L)
    )
    assert np.abs(wrong - full).max() > 1e-3


def test_torch_rotation_is_differentiable_and_stays_on_its_device():
    x = torch.from_numpy(draw(1, 2, 4, 6)).requires_grad_()
    assert torch.autograd.gradcheck(lambda t: rotate(t, Rotary(1e4), offset=3), (x,))
    meta = rotate(torch.empty(2, 3, 5, 8, device="meta", dtype=torch.bfloat16), Rotary())
    assert (
        meta.device.type == "meta" and meta.dtype == torch.bfloat16 and meta.shape == (2, 3, 5, 8)
    )


def test_the_grouped_query_rotation_needs_no_copy_per_query_head():
    """Keys of a key/value head rotated once serve every query head of its group."""
    rot = Rotary(100_000.0)
    q = torch.from_numpy(draw(1, 6, 5, 8, seed=6))
    k = torch.from_numpy(draw(1, 2, 5, 8, seed=7))
    v = torch.from_numpy(draw(1, 2, 5, 8, seed=8))
    qr, kr = rotate(q, rot), rotate(k, rot)
    grouped, _ = torch_backend.scaled_dot_product_attention(
        qr.reshape(1, 2, 3, 5, 8), kr[:, :, None], v[:, :, None], torch_backend.causal_mask(5)
    )  # (1, 2, 3, 5, 8)
    repeated, _ = torch_backend.scaled_dot_product_attention(
        qr,
        rotate(k.repeat_interleave(3, dim=1), rot),
        v.repeat_interleave(3, dim=1),
        torch_backend.causal_mask(5),
    )
    tol = tolerance.rounding_tolerance(np.float64, terms=8 * 5, scale=50.0, stages=4)
    tolerance.assert_close(grouped.reshape(1, 6, 5, 8).numpy(), repeated.numpy(), tol)


@pytest.mark.parametrize(
    ("call", "exc", "match"),
    [
        (lambda: Rotary(base=1.0), ValueError, r"base must be finite and above 1; got base=1.0"),
        (lambda: Rotary(base=np.inf), ValueError, r"base must be finite and above 1; got base=inf"),
        (lambda: Rotary(base="1e4"), TypeError, r"base must be a real number .*got str '1e4'"),
        (lambda: Rotary(base=True), TypeError, r"base must be a real number .*got bool True"),
        (lambda: Rotary(pairing="gptj"), ValueError, r"pairing must be 'interleaved' or 'halves'"),
        (lambda: Rotary(pairing=None), TypeError, r"pairing must be a str; got NoneType None"),
        (lambda: Rotary().frequencies(7), ValueError, r"d_head must be even.*got d_head=7"),
        (lambda: Rotary().frequencies(0), ValueError, r"d_head must be positive; got d_head=0"),
        (lambda: Rotary().angles(4, -1), ValueError, r"length must be at least 0; got length=-1"),
        (lambda: Rotary().angles(4, 2, 1.5), TypeError, r"offset must be an int; got float 1.5"),
        (lambda: interleave_permutation(3), ValueError, r"d_head must be even"),
        (lambda: rotate(draw(2, 5), Rotary(), offset=-1), ValueError, r"offset must be at least 0"),
        (lambda: rotate(draw(2, 4), "rope"), TypeError, r"rotary must be a Rotary; got str 'rope'"),
        (
            lambda: rotate(draw(2, 4), Rotary(), inverse=1),
            TypeError,
            r"inverse must be a bool; got int 1",
        ),
        (lambda: rotate(draw(4), Rotary()), ValueError, r"x must have shape \(\.\.\., n, Dh\)"),
        (lambda: rotate(draw(3, 5), Rotary()), ValueError, r"x must have an even, positive head"),
        (lambda: rotate(draw(3, 0), Rotary()), ValueError, r"x must have an even, positive head"),
        (lambda: rotate([[1.0, 2.0]], Rotary()), TypeError, r"x must be a numpy.ndarray or a"),
        (
            lambda: rotate(np.ones((2, 4), int), Rotary()),
            TypeError,
            r"x must have a floating dtype \(float32, float64\); got dtype int64",
        ),
        (
            lambda: rotate(torch.ones(2, 4, dtype=torch.int64), Rotary()),
            TypeError,
            r"x must be a floating tensor; got dtype torch.int64",
        ),
        (
            lambda: rotate(np.ma.masked_array(draw(2, 4)), Rotary()),
            TypeError,
            r"x must be a plain numpy.ndarray; got a numpy.ma.MaskedArray",
        ),
    ],
)
def test_bad_arguments_are_refused_with_a_clear_error(call, exc, match):
    with pytest.raises(exc, match=match):
        call()
