"""Rotary positions inside the layer: every form, both backends, the cache, the module, backward.

The layer with ``rotary`` is held to its pieces computed one at a time (projections,
:func:`mha.core.rotary.rotate`, attention with each key/value head repeated for its group, the
output projection); cached decoding, token by token and in blocks, to the full forward; the
cache's bound to the keys it holds once they are turned; ``rotary=None`` to the layer as it
was; the module and its converters; and the gradients by hand to autograd.
"""

from __future__ import annotations

import copy
import math
import pickle
import re
from itertools import product

import numpy as np
import pytest
import torch

from mha import MultiHeadAttention
from mha.backends import np_backend, torch_backend
from mha.backends.module import to_torch_mha
from mha.core.kv_cache import KVCache
from mha.core.params import MHAParams, init_params
from mha.core.rotary import Rotary, rotate, rotated
from mha.numerics import backward, gradcheck, tolerance

B, L, S, D, H = 2, 5, 7, 48, 6  # Dh = 8: four pairs
KV_HEADS = [6, 3, 1]  # multi-head, grouped-query, multi-query
ROTARIES = [Rotary(100.0), Rotary(100.0, "halves")]  # a small base: every pair turns visibly
ROTARY = ROTARIES[0]
BACKENDS = {"numpy": np_backend, "torch": torch_backend}
# (backend, form, need_weights): every form of each backend, and PyTorch's fast path
FORM_CASES = [
    ("numpy", "per_head", True),
    ("numpy", "fused", True),
    ("numpy", "packed", True),
    ("numpy", "tiled", False),
    *(("torch", f, w) for f in ("per_head", "fused", "packed") for w in (True, False)),
]


def draw(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape)


def as_backend(kind: str, *arrays):
    """The arrays as the backend takes them (float64 tensors for PyTorch; None stays None)."""
    if kind == "numpy":
        return arrays
    return tuple(None if a is None else torch.from_numpy(a) for a in arrays)


def numpy_of(x) -> np.ndarray:
    return x.detach().numpy() if isinstance(x, torch.Tensor) else x


def pieces(query, key, value, params: MHAParams, mask, rotary: Rotary):
    """The layer one piece at a time, in NumPy: project, split, turn, repeat each key/value
    head for its group, attend, merge, project."""
    H_kv, G = params.num_kv_heads, params.num_heads // params.num_kv_heads
    q = np_backend.split_heads(query @ params.w_q + params.b_q, params.num_heads)  # (B, H, L, Dh)
    k = np_backend.split_heads(key @ params.w_k + params.b_k, H_kv)  # (B, H_kv, S, Dh)
    v = np_backend.split_heads(value @ params.w_v + params.b_v, H_kv)
    q, k = rotate(q, rotary), rotate(k, rotary)  # positions from 0
    k, v = np.repeat(k, G, axis=1), np.repeat(v, G, axis=1)  # (B, H, S, Dh)
    heads, weights = np_backend.scaled_dot_product_attention(q, k, v, mask)
    return np_backend.merge_heads(heads) @ params.w_o + params.b_o, weights


# ---- every form, both backends, H_kv in {H, 3, 1} ----------------------------------------


@pytest.mark.parametrize(
    ("kind", "form", "need_weights", "h_kv", "cross"),
    [(*case, h_kv, cross) for case in FORM_CASES for h_kv in KV_HEADS for cross in (False, True)],
)
def test_every_form_with_rotary_equals_the_layer_computed_piece_by_piece(
    kind, form, need_weights, h_kv, cross
):
    params = init_params(D, H, num_kv_heads=h_kv, seed=1)
    x = draw(B, L, D)
    kv = draw(B, S, D, seed=2) if cross else x
    mask = np_backend.key_padding_mask([S, 3], S) if cross else np_backend.causal_mask(L)
    for rotary in ROTARIES:
        expected, expected_w = pieces(x, kv, kv, params, mask, rotary)
        out_tol, w_tol = tolerance.attention_tolerance(x, kv, kv, params, mask, rotary=rotary)
        q_in, kv_in, m_in = as_backend(kind, x, kv, mask)
        kv_in = q_in if not cross else kv_in  # self-attention: one array, as packed wants
        p = params if kind == "numpy" else params.to_torch()
        out, w = BACKENDS[kind].multi_head_attention(
            q_in, kv_in, kv_in, p, m_in, form=form, need_weights=need_weights, rotary=rotary
        )
        name = f"{rotary.pairing} output"
        tolerance.assert_close(numpy_of(out), expected, out_tol, name=name)
        if need_weights:
            tolerance.assert_close(numpy_of(w), expected_w, w_tol, name=f"{rotary.pairing} weights")
        # the rotation matters here: the layer without it is far off
        unturned = np_backend.multi_head_attention(x, kv, kv, params, mask)[0]
        assert not tolerance.is_close(unturned, expected, out_tol)


def turned_by_complex_numbers(x: np.ndarray, base: float, pairing: str) -> np.ndarray:
    """Rotary positions written apart from the library: each pair of coordinates is a complex
    number, multiplied by ``exp(1j * p * base ** (-2 i / Dh))`` at position ``p``."""
    n, d_head = x.shape[-2:]
    half = d_head // 2
    first, second = (x[..., 0::2], x[..., 1::2]) if pairing == "interleaved" else (
        x[..., :half], x[..., half:])  # fmt: skip
    angle = np.arange(n)[:, None] * base ** (-2.0 * np.arange(half) / d_head)  # (n, Dh / 2)
    z = (first + 1j * second) * np.exp(1j * angle)  # (..., n, Dh / 2)
    out = np.empty_like(x)
    if pairing == "interleaved":
        out[..., 0::2], out[..., 1::2] = z.real, z.imag
    else:
        out[..., :half], out[..., half:] = z.real, z.imag
    return out


def pytorch_attention(query, key, value, params: MHAParams, mask, rotary: Rotary):
    """The layer by PyTorch's own attention (``F.scaled_dot_product_attention``, key/value
    heads shared by ``enable_gqa``) on queries and keys turned by complex numbers; the
    weights by ``torch.softmax`` of the masked scores."""
    F = torch.nn.functional
    H, H_kv, Dh = params.num_heads, params.num_kv_heads, params.d_head

    def heads(x, w, b, n):  # (B, T, D) -> (B, n, T, Dh), float64 tensors
        y = (x @ w + b).reshape(*x.shape[:2], n, Dh).transpose(0, 2, 1, 3)
        return torch.from_numpy(np.ascontiguousarray(y))

    def turn(t):  # the queries' or keys' positions from 0
        return torch.from_numpy(turned_by_complex_numbers(t.numpy(), rotary.base, rotary.pairing))

    q = turn(heads(query, params.w_q, params.b_q, H))
    k = turn(heads(key, params.w_k, params.b_k, H_kv))
    v = heads(value, params.w_v, params.b_v, H_kv)
    allowed = torch.from_numpy(np.asarray(mask, dtype=bool))
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, enable_gqa=True)
    k_rep = k.repeat_interleave(H // H_kv, dim=1)  # (B, H, S, Dh)
    scores = (q @ k_rep.transpose(-1, -2) / math.sqrt(Dh)).masked_fill(~allowed, -math.inf)
    merged = out.transpose(1, 2).reshape(*query.shape[:2], H * Dh).numpy()  # (B, L, D)
    return merged @ params.w_o + params.b_o, torch.softmax(scores, dim=-1).numpy()


@pytest.mark.parametrize(
    ("kind", "form", "need_weights", "h_kv", "cross"),
    [(*case, h_kv, cross) for case in FORM_CASES for h_kv in KV_HEADS for cross in (False, True)],
)
def test_every_form_with_rotary_equals_pytorch_attention_on_complex_rotations(
    kind, form, need_weights, h_kv, cross
):
    """Independent of the library: the rotation by complex multiplication, the attention by
    PyTorch's ``scaled_dot_product_attention``."""
    params = init_params(D, H, num_kv_heads=h_kv, seed=3)
    x = draw(B, L, D, seed=4)
    kv = draw(B, S, D, seed=5) if cross else x
    mask = np_backend.key_padding_mask([S, 4], S) if cross else np_backend.causal_mask(L)
    for rotary in ROTARIES:
        expected, expected_w = pytorch_attention(x, kv, kv, params, mask, rotary)
        out_tol, w_tol = tolerance.attention_tolerance(x, kv, kv, params, mask, rotary=rotary)
        q_in, kv_in, m_in = as_backend(kind, x, kv, mask)
        kv_in = q_in if not cross else kv_in
        p = params if kind == "numpy" else params.to_torch()
        out, w = BACKENDS[kind].multi_head_attention(
            q_in, kv_in, kv_in, p, m_in, form=form, need_weights=need_weights, rotary=rotary
        )
        tolerance.assert_close(numpy_of(out), expected, out_tol, name=f"{rotary.pairing} output")
        if need_weights:
            tolerance.assert_close(numpy_of(w), expected_w, w_tol, name=f"{rotary.pairing} weights")


@pytest.mark.parametrize(("kind", "form", "need_weights"), FORM_CASES)
def test_rotary_none_leaves_the_layer_as_it_was_bit_for_bit(kind, form, need_weights):
    """``rotated`` hands ``q`` and ``k`` back untouched, so no form computes anything new."""
    params = init_params(D, H, num_kv_heads=3, seed=1)
    x, mask = draw(B, L, D), np_backend.causal_mask(L)
    x, mask = as_backend(kind, x, mask)
    p = params if kind == "numpy" else params.to_torch()
    backend = BACKENDS[kind]
    plain = backend.multi_head_attention(x, x, x, p, mask, form=form, need_weights=need_weights)
    none = backend.multi_head_attention(
        x, x, x, p, mask, form=form, need_weights=need_weights, rotary=None
    )
    for a, b in zip(plain, none, strict=True):
        assert (a is None and b is None) or np.array_equal(
            numpy_of(a), numpy_of(b)
        )  # exact: one path
    q, k = x[:, None], x[:, None, :3]
    q2, k2 = rotated(q, k, None, KVCache(B, 1, D, 4))
    assert q2 is q and k2 is k  # the same objects: not even a copy


# ---- the key/value cache --------------------------------------------------------------------

T = 9  # positions decoded
CACHE_CASES = [
    (kind, h_kv, form)
    for kind, h_kv, form in product(["numpy", "torch"], KV_HEADS, ["fused", "packed", "tiled"])
    if (kind, form) != ("torch", "tiled")
]


def _decoder(kind: str, h_kv: int, seed: int = 0):
    params = init_params(D, H, num_kv_heads=h_kv, seed=seed)
    x = draw(B, T, D, seed=seed + 1)
    full = np_backend.multi_head_attention(
        x, x, x, params, np_backend.causal_mask(T), rotary=ROTARY
    )[0]
    out_tol, _ = tolerance.attention_tolerance(
        x, x, x, params, np_backend.causal_mask(T), rotary=ROTARY
    )
    dtype = np.float64 if kind == "numpy" else torch.float64
    cache = KVCache(B, h_kv, D // H, T, dtype=dtype)
    (x_in,) = as_backend(kind, x)
    return params if kind == "numpy" else params.to_torch(), x_in, full, out_tol, cache


def _step(kind, params, x, cache, form, mask=None):
    backend = BACKENDS[kind]
    mask = None if mask is None else as_backend(kind, mask)[0]
    out, _ = backend.multi_head_attention(
        x, x, x, params, mask, form=form, need_weights=form != "tiled", cache=cache, rotary=ROTARY
    )
    return numpy_of(out)


@pytest.mark.parametrize(("kind", "h_kv", "form"), CACHE_CASES)
def test_decoding_token_by_token_with_rotary_equals_the_full_forward(kind, h_kv, form):
    """Each new token is turned to the cache's length, and attends to keys turned before."""
    params, x, full, out_tol, cache = _decoder(kind, h_kv)
    for t in range(T):
        out = _step(kind, params, x[:, t : t + 1], cache, form)
        assert cache.length == t + 1
        tolerance.assert_close(out[:, 0], full[:, t], out_tol[:, t], name=f"position {t}")


@pytest.mark.parametrize(("kind", "h_kv", "form"), CACHE_CASES)
def test_a_prefill_a_step_and_a_block_with_rotary_equal_the_full_forward(kind, h_kv, form):
    params, x, full, out_tol, cache = _decoder(kind, h_kv, seed=4)
    out = _step(kind, params, x[:, :4], cache, form, np_backend.causal_mask(4))  # prefill
    tolerance.assert_close(out, full[:, :4], out_tol[:, :4], name="prefill")
    out = _step(kind, params, x[:, 4:5], cache, form)  # one token at position 4
    tolerance.assert_close(out, full[:, 4:5], out_tol[:, 4:5], name="step")
    block = np_backend.causal_mask(4, 9, align="bottom_right")  # positions 5 to 8 after 5
    out = _step(kind, params, x[:, 5:9], cache, form, block)
    tolerance.assert_close(out, full[:, 5:9], out_tol[:, 5:9], name="block")
    assert cache.length == T


@pytest.mark.parametrize("kind", ["numpy", "torch"])
def test_the_cache_holds_the_keys_turned_to_their_positions(kind):
    """Keys are turned before they are cached: a cached key is never turned again."""
    params, x, _, _, cache = _decoder(kind, 3)
    _step(kind, params, x[:, :3], cache, "fused", np_backend.causal_mask(3))
    _step(kind, params, x[:, 3:4], cache, "fused")
    p, x64 = init_params(D, H, num_kv_heads=3, seed=0), numpy_of(x)[:, :4]
    projected = np_backend.split_heads(x64 @ p.w_k + p.b_k, 3)  # (B, H_kv, 4, Dh)
    scale = float((np.abs(x64) @ np.abs(p.w_k)).max() + np.abs(p.b_k).max())
    tol = tolerance.rounding_tolerance(np.float64, terms=D, scale=scale, stages=3)
    tolerance.assert_close(numpy_of(cache.keys), rotate(projected, ROTARY), tol)
    assert not tolerance.is_close(numpy_of(cache.keys), projected, tol)


def _uniform_layer(kind: str, dtype, w_q: float, w_k: float, w_v: float):
    """One head of width 4 whose every weight of Q, K and V is one number, and W^O = I."""
    w_qkv = np.concatenate([np.full((4, 4), w) for w in (w_q, w_k, w_v)], axis=1)  # (4, 12)
    params = MHAParams(w_qkv, np.eye(4), None, None, num_heads=1).to_numpy(dtype)
    if kind == "torch":
        params = params.to_torch({np.float32: torch.float32, np.float64: torch.float64}[dtype])
    cache_dtype = dtype if kind == "numpy" else params.dtype
    return params, KVCache(1, 1, 4, 4, dtype=cache_dtype)


@pytest.mark.parametrize("kind", ["numpy", "torch"])
def test_the_cache_bound_covers_keys_grown_by_their_rotation(kind):
    """Every projected key entry equals the bound D |x| |W| = 2 here; turned by 1 radian, the
    first pair becomes (2 cos 1 - 2 sin 1, 2 cos 1 + 2 sin 1): 2.76, above that bound."""
    params, cache = _uniform_layer(kind, np.float64, 0.5, 0.5, 0.5)
    x, mask = as_backend(kind, np.ones((1, 2, 4)), np_backend.causal_mask(2))
    BACKENDS[kind].multi_head_attention(x, x, x, params, mask, cache=cache, rotary=Rotary())
    held = float(np.abs(numpy_of(cache.keys)).max())
    assert held == pytest.approx(2 * (math.cos(1) + math.sin(1)), rel=1e-12)
    assert 2.0 < held <= cache.max_abs  # a bound on what it holds, as a layer relies on


@pytest.mark.parametrize(
    ("kind", "need_weights"), [("numpy", True), ("torch", True), ("torch", False)]
)
def test_keys_that_overflow_only_once_turned_are_refused_not_cached(kind, need_weights):
    """Key 1 projects to 2.8e38 in float32 (finite) and turns to 3.9e38 (infinite); the mask
    hides it from the one query, whose output stays finite. It must not reach the cache."""
    params, cache = _uniform_layer(kind, np.float32, 1e-3, 0.7e38, 1.0)
    query, key = np.full((1, 1, 4), 1e-3, np.float32), np.ones((1, 2, 4), np.float32)
    query, key, mask = as_backend(kind, query, key, np.array([[True, False]]))
    before = (cache.length, cache.max_abs)
    with pytest.raises(ValueError, match="turned by rotary positions reach 3.87e"):
        BACKENDS[kind].multi_head_attention(
            query, key, key, params, mask, cache=cache, need_weights=need_weights, rotary=Rotary()
        )
    assert (cache.length, cache.max_abs) == before  # exact: nothing appended


# ---- precision, errors ------------------------------------------------------------------------


@pytest.mark.parametrize(("kind", "form", "need_weights"), FORM_CASES)
def test_float32_with_rotary_stays_within_the_tolerance_of_float64(kind, form, need_weights):
    """Over 64 positions, base 10,000: the float32 layer against the float64 one."""
    params = init_params(D, H, num_kv_heads=3, seed=5)
    x, mask = draw(1, 64, D, seed=6).astype(np.float32), np_backend.causal_mask(64)
    p32 = params.to_numpy(np.float32)
    out_tol, _ = tolerance.attention_tolerance(x, x, x, p32, mask, rotary=Rotary())
    expected = np_backend.multi_head_attention(
        x.astype(np.float64), x.astype(np.float64), x.astype(np.float64), params, mask,
        rotary=Rotary(),
    )[0]  # fmt: skip
    x_in, m_in = as_backend(kind, x, mask)
    p_in = p32 if kind == "numpy" else p32.to_torch()
    out, _ = BACKENDS[kind].multi_head_attention(
        x_in, x_in, x_in, p_in, m_in, form=form, need_weights=need_weights, rotary=Rotary()
    )
    assert numpy_of(out).dtype == np.float32
    tolerance.assert_close(numpy_of(out), expected, out_tol)


def _sparse_layer(dtype) -> tuple[MHAParams, np.ndarray]:
    """One head whose projections are exact: q = (8, 0, 0, 0) and k = (0, 8, 0, 0) at every
    position, so that every score comes from the rotation alone, 32 sin(i - j)."""
    w = np.zeros((4, 12))
    w[0, 0], w[0, 5], w[2, 8:] = 8.0, 8.0, (1.0, -1.0, 2.0, 0.5)  # W^Q, W^K, W^V
    x = np.zeros((1, 8, 4))
    x[0, :, 0], x[0, :, 2] = 1.0, np.arange(8) / 8  # value i / 8 at position i
    return MHAParams(w, np.eye(4), None, None, num_heads=1).to_numpy(dtype), x.astype(dtype)


@pytest.mark.parametrize("kind", ["numpy", "torch"])
def test_the_tolerance_covers_the_rounding_of_the_rotation_itself(kind):
    """Without the rotation's terms, the bound would see exact scores (q and k share no
    coordinate) and the float32 weights would use it several times over."""
    (p32, x32), (p64, x64) = _sparse_layer(np.float32), _sparse_layer(np.float64)
    mask = np_backend.causal_mask(8)
    ref, ref_w = np_backend.multi_head_attention(x64, x64, x64, p64, mask, rotary=Rotary())
    out_tol, w_tol = tolerance.attention_tolerance(x32, x32, x32, p32, mask, rotary=Rotary())
    x_in, m_in = as_backend(kind, x32, mask)
    p_in = p32 if kind == "numpy" else p32.to_torch()
    out, w = BACKENDS[kind].multi_head_attention(x_in, x_in, x_in, p_in, m_in, rotary=Rotary())
    tolerance.assert_close(numpy_of(out), ref, out_tol, name="output")
    tolerance.assert_close(numpy_of(w), ref_w, w_tol, name="weights")


def test_the_gradient_magnitudes_bound_the_gradients_through_the_rotation():
    """Each magnitude bounds its gradient: the rotation moves a key into the query's
    coordinate, so magnitudes that ignored it would be 0 where the gradient is not."""
    params, x = _sparse_layer(np.float64)
    d_out = draw(1, 8, 4, seed=11)
    _, saved = backward.multi_head_attention_forward(
        x, x, x, params, np_backend.causal_mask(8), rotary=Rotary()
    )
    grads = backward.multi_head_attention(saved, d_out)
    bounds = backward.gradient_magnitudes(saved, d_out)[0]
    for name in ("d_query", "d_key", "d_value"):
        assert (np.abs(getattr(grads, name)) <= getattr(bounds, name)).all(), name
    assert (np.abs(grads.d_params.w_qkv) <= bounds.d_params.w_qkv).all()


ODD = init_params(15, 5, seed=0)  # Dh = 3


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (
            lambda: np_backend.multi_head_attention(
                *[draw(1, 2, D)] * 3, init_params(D, H), rotary="interleaved"
            ),
            TypeError,
            "rotary must be a mha.core.rotary.Rotary or None; got str",
        ),
        (
            lambda: torch_backend.multi_head_attention(
                *[torch.zeros(1, 2, D, dtype=torch.float64)] * 3,
                init_params(D, H).to_torch(),
                rotary=10_000.0,
            ),
            TypeError,
            "rotary must be a mha.core.rotary.Rotary or None; got float",
        ),
        (
            lambda: np_backend.multi_head_attention(*[draw(1, 2, 15)] * 3, ODD, rotary=Rotary()),
            ValueError,
            re.escape("d_head must be even; got d_head=3 (d_model=15, num_heads=5)"),
        ),
        (
            lambda: np_backend.attention_block(draw(1, 2, 15), ODD, rotary=Rotary()),
            ValueError,
            "d_head must be even",
        ),
        (
            lambda: MultiHeadAttention(15, 5, rotary=Rotary()),
            ValueError,
            "d_head must be even; got d_head=3",
        ),
        (
            lambda: MultiHeadAttention(D, H, rotary="halves"),
            TypeError,
            "rotary must be a mha.core.rotary.Rotary or None; got str",
        ),
        (
            lambda: MultiHeadAttention.from_params(init_params(D, H), rotary=1),
            TypeError,
            "rotary must be a mha.core.rotary.Rotary or None; got int",
        ),
        (
            lambda: backward.multi_head_attention_forward(
                *[draw(1, 2, 15)] * 3, ODD, rotary=Rotary()
            ),
            ValueError,
            "d_head must be even",
        ),
        (
            lambda: tolerance.attention_tolerance(*[draw(1, 2, 15)] * 3, ODD, rotary=Rotary()),
            ValueError,
            "d_head must be even",
        ),
        (
            lambda: to_torch_mha(MultiHeadAttention(D, H, rotary=Rotary())),
            ValueError,
            "source must have no rotary positions: nn.MultiheadAttention does not turn",
        ),
    ],
)
def test_rotary_errors_name_the_argument(call, error, match):
    with pytest.raises(error, match=match):
        call()


@pytest.mark.parametrize("kind", ["numpy", "torch"])
def test_a_call_refused_for_its_rotary_leaves_the_cache_as_it_was(kind):
    params, x, _, _, cache = _decoder(kind, 3)
    _step(kind, params, x[:, :2], cache, "fused", np_backend.causal_mask(2))
    keys = numpy_of(cache.keys).copy()
    with pytest.raises(TypeError, match="rotary must be"):
        BACKENDS[kind].multi_head_attention(
            x[:, 2:3], x[:, 2:3], x[:, 2:3], params, cache=cache, rotary="interleaved"
        )
    assert cache.length == 2 and np.array_equal(numpy_of(cache.keys), keys)  # exact: untouched


# ---- the module -----------------------------------------------------------------------------


def test_the_module_applies_its_rotary_and_keeps_it_through_copies_and_round_trips():
    module = MultiHeadAttention(D, H, num_kv_heads=3, seed=2, dtype=torch.float64, rotary=ROTARY)
    assert module.rotary == ROTARY and "rotary=Rotary(base=100.0" in repr(module)
    x = torch.from_numpy(draw(B, L, D, seed=3))
    mask = torch_backend.causal_mask(L)
    out, _ = module(x, mask=mask)
    same, _ = torch_backend.multi_head_attention(
        x, x, x, module.params(), mask, form="packed", need_weights=False, rotary=ROTARY
    )
    assert torch.equal(out, same)  # exact: the same call
    p64 = module.params().map(lambda t: t.detach().numpy())
    expected = pieces(x.numpy(), x.numpy(), x.numpy(), p64, mask.numpy(), ROTARY)[0]
    out_tol, _ = tolerance.attention_tolerance(x, x, x, module.params(), mask, rotary=ROTARY)
    tolerance.assert_close(out.detach().numpy(), expected, out_tol)
    rebuilt = MultiHeadAttention.from_params(module.params(), rotary=module.rotary)
    loaded = MultiHeadAttention(D, H, num_kv_heads=3, dtype=torch.float64, rotary=ROTARY)
    loaded.load_state_dict(module.state_dict())
    assert not any("rotary" in name for name in module.state_dict())  # a setting, not a weight
    for other in (rebuilt, loaded, copy.deepcopy(module), pickle.loads(pickle.dumps(module))):
        assert other.rotary == ROTARY
        assert torch.equal(other(x, mask=mask)[0], out)  # exact: the same weights and path
    plain = MultiHeadAttention.from_params(module.params())
    assert plain.rotary is None
    assert not tolerance.is_close(plain(x, mask=mask)[0].detach().numpy(), expected, out_tol)


def test_the_module_decodes_with_a_cache_as_the_full_forward():
    module = MultiHeadAttention(D, H, num_kv_heads=1, seed=4, dtype=torch.float64, rotary=ROTARY)
    x, causal = draw(1, 6, D, seed=5), np_backend.causal_mask(6)
    p64 = module.params().map(lambda t: t.detach().numpy())
    full = pieces(x, x, x, p64, causal, ROTARY)[0]
    tol, _ = tolerance.attention_tolerance(x, x, x, p64, causal, rotary=ROTARY)
    cache = KVCache(1, 1, D // H, 6, dtype=torch.float64)
    with torch.no_grad():
        steps = [module(torch.from_numpy(x[:, t : t + 1]), cache=cache)[0] for t in range(6)]
    tolerance.assert_close(torch.cat(steps, 1).numpy(), full, tol)


# ---- gradients by hand ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("form", "h_kv", "cross"), list(product(["fused", "tiled"], [6, 1], [False, True]))
)
def test_gradients_by_hand_with_rotary_agree_with_autograd(form, h_kv, cross):
    """The rotation's gradient is the inverse rotation: by hand, within the bound."""
    params = init_params(D, H, num_kv_heads=h_kv, seed=7)
    x = draw(B, L, D, seed=8)
    kv = draw(B, S, D, seed=9) if cross else x
    mask = np_backend.key_padding_mask([S, 4], S) if cross else np_backend.causal_mask(L)
    d_out = draw(B, L, D, seed=10)
    checks = gradcheck.compare_with_autograd(
        x, kv, kv, params, d_out, mask, form=form, block_q=2, block_kv=3, rotary=ROTARY
    )
    assert checks and all(c.within for c in checks.values()), checks
    _, saved = backward.multi_head_attention_forward(x, kv, kv, params, mask, rotary=ROTARY)
    plain = backward.multi_head_attention_forward(x, kv, kv, params, mask)[1]
    assert saved.rotary == ROTARY and plain.rotary is None
    turned = backward.multi_head_attention(saved, d_out).d_params.w_qkv
    unturned = backward.multi_head_attention(plain, d_out).d_params.w_qkv
    assert not np.allclose(turned, unturned)  # the rotation changes the gradients
