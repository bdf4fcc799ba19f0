"""Both backends, one suite: heads, softmax, attention, masks, every form, LayerNorm, blocks.

Every test here runs once with :mod:`mha.backends.np_backend` and once with
:mod:`mha.backends.torch_backend` (the ``backend`` fixture): the inputs are written in NumPy
and converted, and the results are read back as NumPy arrays, so one assertion holds both to
the same reference. What only one backend has (autograd, bfloat16, the fast path's kernels,
``torch.func``, the CPU shortcuts; the tiled form) is tested in ``test_torch_backend.py`` and
``test_tiled.py``.
"""

from __future__ import annotations

import inspect
import math
import warnings
from itertools import product
from typing import Any

import numpy as np
import pytest
import torch

from mha import MHAParams, init_params
from mha.backends import np_backend, torch_backend
from mha.core._checks import layer
from mha.core.kv_cache import KVCache
from mha.core.mask_rules import AmbiguousMaskWarning
from mha.numerics import tolerance

F64 = np.float64
B, L, S, D, H = 2, 5, 7, 12, 3
WEIGHTED = ("per_head", "fused", "packed")  # the forms of both backends, which form weights
BACKENDS = {"numpy": np_backend, "torch": torch_backend}


class Backend:
    """One backend, and the conversions between its arrays and NumPy's."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.mod = BACKENDS[name]
        self.forms = WEIGHTED

    def __call__(self, a: Any) -> Any:
        """A NumPy array (or None) as this backend's array."""
        if self.name == "numpy" or a is None:
            return a
        return torch.from_numpy(np.ascontiguousarray(a))

    def params(self, p: MHAParams) -> MHAParams:
        return p if self.name == "numpy" else p.to_torch()

    @staticmethod
    def numpy(x: Any) -> Any:
        """This backend's array (or None) as a NumPy array."""
        return x.detach().numpy() if isinstance(x, torch.Tensor) else x

    def mha(self, q, k, v, p, mask=None, **kw) -> tuple[np.ndarray, np.ndarray | None]:
        """``multi_head_attention`` on NumPy inputs, its results as NumPy arrays."""
        kv = self(k)
        args = (self(q), kv, kv if v is k else self(v)) if q is not k else (self(q),) * 3
        out, w = self.mod.multi_head_attention(*args, self.params(p), self(mask), **kw)
        return self.numpy(out), self.numpy(w)


@pytest.fixture(params=["numpy", "torch"])
def backend(request: pytest.FixtureRequest) -> Backend:
    return Backend(request.param)


def rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


def reference_mha(q_in, k_in, v_in, p, mask=None):
    """Multi-head attention written out with einsum, head by head (no package code)."""
    Dh = p.d_model // p.num_heads

    def bias(b):
        return 0.0 if b is None else b

    q = q_in @ p.w_qkv[:, : p.d_model] + bias(p.b_q)
    k = k_in @ p.w_qkv[:, p.d_model : 2 * p.d_model] + bias(p.b_k)
    v = v_in @ p.w_qkv[:, 2 * p.d_model :] + bias(p.b_v)
    outs, weights = [], []
    for h in range(p.num_heads):
        c = slice(h * Dh, (h + 1) * Dh)
        s = np.einsum("bld,bsd->bls", q[..., c], k[..., c]) / math.sqrt(Dh)
        keep = np.ones(s.shape, bool)
        if mask is not None:
            full = np.broadcast_to(mask, (q.shape[0], p.num_heads, *s.shape[1:]))
            keep = full[:, h]
        e = np.where(keep, np.exp(s - np.where(keep, s, -np.inf).max(-1, keepdims=True)), 0.0)
        e = np.nan_to_num(e)  # fully masked rows: max is -inf
        tot = e.sum(-1, keepdims=True)
        w = np.divide(e, tot, out=np.zeros_like(e), where=tot > 0)
        weights.append(w)
        outs.append(w @ v[..., c])
    out = np.concatenate(outs, -1) @ p.w_o + bias(p.b_o)
    return out, np.stack(weights, 1)


# ---- one API ------------------------------------------------------------------------


# What only the NumPy backend has: the tiled form and the softmax written over its input.
NUMPY_ONLY = {"attention_tiled", "softmax_in_place"}


def _functions(module: Any) -> dict[str, Any]:
    """The public functions ``module`` defines (not those it imports)."""
    return {
        name: value
        for name, value in vars(module).items()
        if callable(value)
        and not name.startswith("_")
        and getattr(value, "__module__", None) == module.__name__
    }


def _arguments(function: Any) -> list[tuple[str, Any, Any]]:
    """``function``'s arguments: name, kind and default, not their types (which differ)."""
    return [(p.name, p.kind, p.default) for p in inspect.signature(function).parameters.values()]


def test_the_two_backends_have_the_same_functions_with_the_same_arguments() -> None:
    """Switching backend is changing one import: each function of one is in the other, with
    the same arguments in the same order and the same defaults. PyTorch's may add keyword-only
    arguments of its own (``device``); what only NumPy has is listed (``NUMPY_ONLY``)."""
    numpy_functions, torch_functions = _functions(np_backend), _functions(torch_backend)
    assert set(numpy_functions) - set(torch_functions) == NUMPY_ONLY
    assert set(torch_functions) <= set(numpy_functions)
    for name, function in torch_functions.items():
        ours = _arguments(numpy_functions[name])
        theirs = _arguments(function)
        extra = [a for a in theirs if a not in ours]
        assert [a for a in theirs if a in ours] == ours, name
        assert all(kind is inspect.Parameter.KEYWORD_ONLY for _, kind, _ in extra), (name, extra)


# ---- heads ---------------------------------------------------------------------------


@pytest.mark.parametrize("contiguous", [True, False])
def test_split_heads_puts_each_column_block_in_its_own_head(backend, contiguous) -> None:
    x = rng().standard_normal((B, L, D)) if contiguous else rng().standard_normal((L, B, D))
    x = backend(x) if contiguous else backend(x).swapaxes(0, 1)  # (B, L, D), a strided view
    heads = backend.mod.split_heads(x, H)
    assert tuple(heads.shape) == (B, H, L, D // H)
    x, heads = backend.numpy(x), backend.numpy(heads)
    for h in range(H):
        np.testing.assert_array_equal(heads[:, h], x[..., h * 4 : (h + 1) * 4])  # exact: a reshape
    if backend.name == "numpy":
        assert heads.flags.c_contiguous  # NumPy's heads are copied contiguously


def test_merge_heads_inverts_split_heads(backend) -> None:
    x = backend(rng().standard_normal((B, L, D)))
    merged = backend.mod.merge_heads(backend.mod.split_heads(x, H))
    np.testing.assert_array_equal(backend.numpy(merged), backend.numpy(x))  # exact: reshapes
    y = backend(rng(1).standard_normal((B, H, L, 4)))
    again = backend.mod.split_heads(backend.mod.merge_heads(y), H)
    np.testing.assert_array_equal(backend.numpy(again), backend.numpy(y))  # exact: reshapes


# ---- softmax and scaled dot-product attention ----------------------------------------


def test_softmax_rows_sum_to_one_and_leave_the_input_unchanged(backend) -> None:
    scores = rng().standard_normal((3, 4, 6))
    before = scores.copy()
    w = backend.numpy(backend.mod.softmax(backend(scores)))
    tolerance.assert_close(w.sum(-1), np.ones((3, 4)), tolerance.rounding_tolerance(F64, terms=6))
    np.testing.assert_array_equal(scores, before)  # exact: the input is left unchanged
    e = np.exp(scores)  # without the max subtraction: another route to the same weights
    # each route's weights are within a relative (S + 2) u of the exact ones
    tolerance.assert_close(
        w, e / e.sum(-1, keepdims=True), tolerance.rounding_tolerance(F64, terms=8)
    )


def test_softmax_gives_masked_entries_exactly_zero_and_full_masks_zero_rows(backend) -> None:
    scores = rng().standard_normal((4, 5))
    mask = rng(1).random((4, 5)) < 0.5
    mask[0] = False
    mask[1] = True
    w = backend.numpy(backend.mod.softmax(backend(scores), backend(mask)))
    assert (w[~mask] == 0.0).all()
    np.testing.assert_array_equal(w[0], 0.0)  # exact: masked weights are set to zero
    tolerance.assert_close(w[1:].sum(-1), np.ones(3), tolerance.rounding_tolerance(F64, terms=5))
    whole_row = backend.numpy(backend.mod.softmax(backend(scores[1])))
    tolerance.assert_close(w[1], whole_row, tolerance.rounding_tolerance(F64, terms=5))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_softmax_of_huge_logits_is_finite(backend, dtype) -> None:
    scores = (rng().uniform(-1, 1, (4, 6)) * 1e4).astype(dtype)
    scores[0] = [1e4, 1e4 - 1, -1e4, 0, 5, 1e4]
    w = backend.numpy(backend.mod.softmax(backend(scores)))
    assert w.dtype == dtype and np.isfinite(w).all()
    np.testing.assert_allclose(w.sum(-1), 1.0, rtol=1e-6)
    e = math.exp(-1)
    np.testing.assert_allclose(w[0], np.array([1, e, 0, 0, 0, 1]) / (2 + e), rtol=1e-6)


def test_scaled_dot_product_attention_matches_a_hand_computation(backend) -> None:
    q = np.array([[1.0, 0.0], [0.0, 2.0]])  # (L=2, Dh=2)
    k = np.array([[1.0, 1.0], [0.0, 1.0], [2.0, 0.0]])  # (S=3, Dh=2)
    v = np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [7.0, 8.0, 9.0]])  # (S=3, Dv=3)
    out, w = map(backend.numpy, backend.mod.scaled_dot_product_attention(*map(backend, (q, k, v))))
    r = 1 / math.sqrt(2)
    for i, scores in enumerate([[r, 0, 2 * r], [2 * r, 2 * r, 0]]):
        e = [math.exp(s) for s in scores]
        expected_w = [x / sum(e) for x in e]
        # by hand in Python floats: the same sums in another order (scores: 2 terms,
        # softmax: 3, weighted sum: 3, values at most 9)
        tolerance.assert_close(
            w[i], expected_w, tolerance.rounding_tolerance(F64, terms=3, stages=3)
        )
        tol = tolerance.rounding_tolerance(F64, terms=3, scale=9.0, stages=4)
        tolerance.assert_close(out[i], np.array(expected_w) @ v, tol)


def test_scaled_dot_product_attention_broadcasts_shared_keys_over_heads(backend) -> None:
    q = rng().standard_normal((2, 3, 5, 4))  # (B, H, L, Dh)
    k = rng(1).standard_normal((2, 1, 6, 4))  # one key/value head shared by all heads
    v = rng(2).standard_normal((2, 1, 6, 4))
    sdpa = backend.mod.scaled_dot_product_attention
    out, w = map(backend.numpy, sdpa(*map(backend, (q, k, v))))
    full = map(backend, (q, np.repeat(k, 3, axis=1), np.repeat(v, 3, axis=1)))
    out_full, w_full = map(backend.numpy, sdpa(*full))
    # broadcasting a key head or repeating it: the same products, perhaps in other kernels
    scale = 2 * np.abs(q).max() * np.abs(k).max() * 4
    tol = tolerance.rounding_tolerance(F64, terms=6, scale=scale * np.abs(v).max(), stages=3)
    tolerance.assert_close(w, w_full, tolerance.rounding_tolerance(F64, terms=6, scale=scale))
    tolerance.assert_close(out, out_full, tol)


def test_fully_masked_row_gives_zero_weights_and_zero_output(backend) -> None:
    q, k, v = (rng(i).standard_normal((2, 4, 3)) for i in range(3))
    mask = np.ones((4, 4), bool)
    mask[2] = False
    out, w = backend.mod.scaled_dot_product_attention(*map(backend, (q, k, v, mask)))
    out, w = backend.numpy(out), backend.numpy(w)
    np.testing.assert_array_equal(w[:, 2], 0.0)  # exact: fully masked rows are set to zero
    np.testing.assert_array_equal(out[:, 2], 0.0)  # exact: fully masked rows are set to zero
    assert np.isfinite(out).all()


def test_bottom_right_with_more_queries_than_keys_gives_zero_rows_not_nan(backend) -> None:
    q, k, v = (rng(i).standard_normal((1, 1, n, 4)) for i, n in ((1, 5), (2, 2), (3, 2)))
    mask = backend.mod.causal_mask(5, 2, align="bottom_right")
    out, w = backend.mod.scaled_dot_product_attention(*map(backend, (q, k, v)), mask)
    out, w = backend.numpy(out), backend.numpy(w)
    assert (w[..., :3, :] == 0).all() and (out[..., :3, :] == 0).all()  # positions -3..-1
    assert not np.isnan(out).any()
    tolerance.assert_close(
        w[..., 3:, :].sum(-1), np.ones((1, 1, 2)), tolerance.rounding_tolerance(F64, terms=2)
    )


# ---- masks ---------------------------------------------------------------------------


def test_causal_mask_blocks_future_positions(backend) -> None:
    m = backend.numpy(backend.mod.causal_mask(3, 5))
    expected = np.array([[1, 0, 0, 0, 0], [1, 1, 0, 0, 0], [1, 1, 1, 0, 0]], bool)
    assert m.dtype == bool
    np.testing.assert_array_equal(m, expected)
    np.testing.assert_array_equal(
        backend.numpy(backend.mod.causal_mask(4)), np.tril(np.ones((4, 4), bool))
    )


def test_causal_mask_bottom_right_puts_the_queries_at_the_last_positions(backend) -> None:
    m = backend.numpy(backend.mod.causal_mask(2, 5, align="bottom_right"))  # queries at 3, 4
    np.testing.assert_array_equal(m, np.array([[1, 1, 1, 1, 0], [1, 1, 1, 1, 1]], bool))
    tall = backend.numpy(backend.mod.causal_mask(4, 2, align="bottom_right"))  # at -2 .. 1
    np.testing.assert_array_equal(tall, np.array([[0, 0], [0, 0], [1, 0], [1, 1]], bool))


@pytest.mark.parametrize(("L_", "S_"), [(1, 1), (3, 3), (2, 5), (5, 2), (1, 7), (7, 1)])
def test_causal_mask_alignments_follow_the_position_rule(backend, L_: int, S_: int) -> None:
    i, j = np.arange(L_)[:, None], np.arange(S_)[None, :]

    def mask(**kw: Any) -> np.ndarray:
        return backend.numpy(backend.mod.causal_mask(L_, S_, **kw))

    np.testing.assert_array_equal(mask(align="top_left"), j <= i)
    np.testing.assert_array_equal(mask(align="bottom_right"), j <= S_ - L_ + i)
    np.testing.assert_array_equal(mask(), mask(align="top_left"))
    if L_ == S_:  # square: the two alignments are the same lower triangle
        np.testing.assert_array_equal(mask(align="top_left"), mask(align="bottom_right"))


def test_decoding_the_last_queries_with_bottom_right_equals_full_causal_attention(backend) -> None:
    """A key/value cache: the last L of S queries, bottom-right aligned, see what they saw."""
    S_, L_, p = 7, 3, init_params(D, H, seed=4)
    x = rng(5).standard_normal((B, S_, D))
    square = np_backend.causal_mask(S_)
    full, w_full = backend.mha(x, x, x, p, square)
    np.testing.assert_array_equal(  # the mask of the new queries is the square mask's last rows
        backend.numpy(backend.mod.causal_mask(L_, S_, align="bottom_right")), square[-L_:]
    )
    last = x[:, -L_:]
    new, w_new = backend.mha(last, x, x, p, np_backend.causal_mask(L_, S_, align="bottom_right"))
    out_tol, w_tol = tolerance.attention_tolerance(x, x, x, p, square)
    tolerance.assert_close(new, full[:, -L_:], out_tol[:, -L_:], name="cached decoding")
    tolerance.assert_close(w_new, w_full[:, :, -L_:], w_tol[:, :, -L_:], name="cached weights")
    wrong, _ = backend.mha(last, x, x, p, np_backend.causal_mask(L_, S_))
    assert np.abs(wrong - full[:, -L_:]).max() > 0.1  # top-left hides keys the queries saw


@pytest.mark.parametrize("as_array", [False, True])
def test_key_padding_mask_keeps_the_first_lengths_keys(backend, as_array: bool) -> None:
    lengths = [2, 0, 4]
    m = backend.mod.key_padding_mask(backend(np.array(lengths)) if as_array else lengths, 4)
    m = backend.numpy(m)
    assert m.shape == (3, 1, 1, 4) and m.dtype == bool
    expected = np.array([[1, 1, 0, 0], [0, 0, 0, 0], [1, 1, 1, 1]], bool)
    np.testing.assert_array_equal(m[:, 0, 0], expected)
    np.testing.assert_array_equal(backend.numpy(backend.mod.key_padding_mask([3], 3)), True)


def test_a_padding_like_2d_mask_with_b_equal_l_warns_and_mask_none_none_does_not(backend) -> None:
    p = init_params(D, H)
    x, kv = rng().standard_normal((4, 4, D)), rng(1).standard_normal((4, S, D))
    padding = np_backend.key_padding_mask([7, 2, 5, 3], S)[:, 0, 0, :]  # (B, S), B = L = 4
    with pytest.warns(AmbiguousMaskWarning, match="B = L = 4 and its rows look"):
        backend.mha(x, kv, kv, p, padding)
    assert not hasattr(backend.mod, "AmbiguousMaskWarning")  # one import path
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        backend.mha(x, kv, kv, p, padding[None, None])  # (1, 1, L, S)
        backend.mha(x, kv, kv, p, np_backend.causal_mask(4, S))
        backend.mha(x, kv, kv, p, np_backend.causal_mask(4, S, align="bottom_right"))


# ---- multi-head attention: every form ------------------------------------------------


def masks_for(batch: int, heads: int, q_len: int, kv_len: int) -> dict[str, np.ndarray | None]:
    """One mask of each broadcastable shape, with at least one fully masked row."""
    g = rng(42)
    full = g.random((batch, heads, q_len, kv_len)) < 0.6
    full[0, 1, 0] = False  # one query of one head attends to nothing
    return {
        "none": None,
        "L,S": np_backend.causal_mask(q_len, kv_len),
        "B,1,1,S": np_backend.key_padding_mask([kv_len - 2, 1] + [kv_len] * (batch - 2), kv_len),
        "1,H,L,S": g.random((1, heads, q_len, kv_len)) < 0.5,
        "B,H,L,S": full,
        "S": np.arange(kv_len) % 3 != 1,
    }


CASES = list(product(["self", "cross"], [True, False], list(masks_for(B, H, L, S))))


def inputs(kind: str, seed: int = 0):
    x = rng(seed).standard_normal((B, L, D))
    if kind == "self":
        return x, x, x
    kv = rng(seed + 1).standard_normal((B, S, D))
    return x, kv, kv


@pytest.mark.parametrize(("kind", "bias", "mask_name"), CASES)
def test_every_form_agrees_with_the_reference(backend, kind, bias, mask_name) -> None:
    q, k, v = inputs(kind)
    S_ = k.shape[1]
    mask = masks_for(B, H, L, S_)[mask_name]
    p = init_params(D, H, bias=bias, seed=3)
    ref_out, ref_w = reference_mha(q, k, v, p, mask)
    for form in backend.forms:
        out, w = backend.mha(q, k, v, p, mask, form=form)
        assert out.shape == (B, L, D) and w.shape == (B, H, L, S_)
        np.testing.assert_allclose(out, ref_out, rtol=0, atol=1e-12, err_msg=form)
        np.testing.assert_allclose(w, ref_w, rtol=0, atol=1e-12, err_msg=form)
        if mask is not None:
            assert (w[~np.broadcast_to(mask, w.shape)] == 0.0).all()
        fast, none = backend.mha(q, k, v, p, mask, form=form, need_weights=False)
        assert none is None  # PyTorch: scaled_dot_product_attention, the fast path
        np.testing.assert_allclose(fast, ref_out, rtol=0, atol=1e-12, err_msg=form)


def test_packed_form_with_distinct_key_and_value_arrays_matches_fused(backend) -> None:
    q = rng(0).standard_normal((B, L, D))
    k, v = rng(1).standard_normal((B, S, D)), rng(2).standard_normal((B, S, D))
    p = init_params(D, H, seed=4)
    out_p, _ = backend.mha(q, k, v, p, form="packed")
    out_f, _ = backend.mha(q, k, v, p, form="fused")
    np.testing.assert_allclose(out_p, out_f, atol=1e-12)
    np.testing.assert_allclose(out_p, reference_mha(q, k, v, p)[0], atol=1e-12)
    # the same values held in separate arrays give the same result as one shared array
    out_same, _ = backend.mha(q, k, k.copy(), p, form="packed")
    np.testing.assert_allclose(out_same, backend.mha(q, k, k, p, form="packed")[0])


@pytest.mark.parametrize(
    ("form", "need_weights"), list(product(Backend("torch").forms, [True, False]))
)
def test_fully_masked_query_row_outputs_the_output_bias(backend, form, need_weights) -> None:
    q, k, v = inputs("cross")
    p = init_params(D, H, seed=5)
    mask = np.ones((B, 1, L, S), bool)
    mask[1, 0, 3] = False  # query 3 of batch 1 may attend to nothing, in every head
    out, w = backend.mha(q, k, v, p, mask, form=form, need_weights=need_weights)
    if need_weights:
        np.testing.assert_array_equal(w[1, :, 3], 0.0)  # exact: fully masked rows are zero
    np.testing.assert_array_equal(out[1, 3], p.b_o)  # exact: zeros @ W^O + b_o
    no_bias = init_params(D, H, bias=False, seed=5)
    # exact: fully masked rows are set to zero
    np.testing.assert_array_equal(backend.mha(q, k, v, no_bias, mask, form=form)[0][1, 3], 0.0)


@pytest.mark.parametrize("form", WEIGHTED)
def test_need_weights_false_returns_the_same_output_and_no_weights(backend, form: str) -> None:
    q, k, v = inputs("self")
    p = init_params(D, H)
    mask = np_backend.causal_mask(L)
    out, w = backend.mha(q, k, v, p, mask, form=form, need_weights=False)
    assert w is None
    with_weights = backend.mha(q, k, v, p, mask, form=form)[0]
    if backend.name == "numpy" or form == "per_head":
        # exact: need_weights only drops the weights; the arithmetic is the same
        np.testing.assert_array_equal(out, with_weights)
    else:  # PyTorch's fast path is another kernel: the same to rounding
        tolerance.assert_close(
            out, with_weights, tolerance.attention_tolerance(q, k, v, p, mask)[0]
        )


@pytest.mark.parametrize(
    ("form", "need_weights"), list(product(Backend("torch").forms, [True, False]))
)
def test_float32_inputs_give_float32_results_close_to_float64(backend, form, need_weights) -> None:
    q, k, v = inputs("cross")
    p = init_params(D, H)
    out64, w64 = backend.mha(q, k, v, p, form=form)
    f32 = [a.astype(np.float32) for a in (q, k, v)]
    p32 = init_params(D, H, dtype=np.float32)
    out32, w32 = backend.mha(*f32, p32, form=form, need_weights=need_weights)
    assert out32.dtype == np.float32 and (w32 is None or w32.dtype == np.float32)
    np.testing.assert_allclose(out32, out64, rtol=0, atol=1e-5)
    if need_weights:
        np.testing.assert_allclose(w32, w64, rtol=0, atol=1e-5)


def test_float32_attention_with_scores_up_to_1e4_is_finite(backend) -> None:
    q = np.full((1, 3, 4), 50.0, np.float32)  # q.k / sqrt(4) = 50 * 50 * 4 / 2 = 5000
    q[0, 1] *= -2  # scores of -1e4
    k = np.full((1, 5, 4), 50.0, np.float32)
    k[0, 0] = 0.0
    v = rng().standard_normal((1, 5, 4)).astype(np.float32)
    out, w = map(backend.numpy, backend.mod.scaled_dot_product_attention(*map(backend, (q, k, v))))
    assert np.isfinite(out).all() and np.isfinite(w).all()
    np.testing.assert_allclose(w.sum(-1), 1.0, rtol=1e-6)
    np.testing.assert_allclose(w[0, 1], [1, 0, 0, 0, 0], atol=0)  # key 0 scores 0 > -1e4


EVERY_FORM = [(name, form) for name in ("numpy", "torch") for form in BACKENDS[name].FORMS]


@pytest.mark.parametrize(("name", "form"), EVERY_FORM)
def test_an_empty_batch_gives_empty_outputs(name: str, form: str) -> None:
    backend = Backend(name)
    p = init_params(8, 2)
    q, kv = np.zeros((0, 3, 8)), np.zeros((0, 4, 8))
    mask = backend.numpy(backend.mod.key_padding_mask([], 4))
    assert mask.shape == (0, 1, 1, 4) and mask.dtype == bool
    for need_weights in [False] if form == "tiled" else [True, False]:
        out, w = backend.mha(q, kv, kv, p, mask, form=form, need_weights=need_weights)
        assert out.shape == (0, 3, 8)
        assert (w is None) != need_weights and (w is None or w.shape == (0, 2, 3, 4))


def test_inputs_up_to_the_bound_are_computed_without_a_second_pass(backend, monkeypatch) -> None:
    """Magnitudes far inside float32's range never trigger the float64 recomputation."""

    def fail(*args, **kwargs):
        raise AssertionError("the overflow search ran")

    monkeypatch.setattr(layer, "mha_overflow", fail)
    p = init_params(8, 2, dtype=np.float32)
    x = (rng().standard_normal((2, 3, 8)) * 1e6).astype(np.float32)
    out, _ = backend.mha(x, x, x, p)
    assert np.isfinite(out).all()


# ---- the causal flag -----------------------------------------------------------------

# (L, S, positions cached): cross-attention without a cache, then self-attention of L new
# positions after an empty cache and after a cache of S - L positions.
CAUSAL_STATES = {
    "L = S": (5, 5, None),
    "L < S": (3, 7, None),
    "L > S": (7, 3, None),
    "empty cache": (4, 4, 0),
    "cache of 5": (3, 8, 5),
}


def causal_routes(backend: Backend, cached: int | None) -> list[tuple[str, bool]]:
    """Every ``(form, need_weights)`` of the backend (a cache takes every form but per-head)."""
    forms = [f for f in backend.mod.FORMS if cached is None or f != "per_head"]
    return [(f, w) for f in forms for w in (True, False) if not (w and f == "tiled")]


def causal_run(backend: Backend, x, kv, p, mask, cached, **kw):
    """The layer from ``x`` to ``kv``; with a cache, it holds the first ``cached`` of them."""
    if cached is None:
        return backend.mha(x, kv, kv, p, mask, **kw)
    dtype = x.dtype if backend.name == "numpy" else getattr(torch, x.dtype.name)
    cache = KVCache(B, p.num_kv_heads, p.d_head, kv.shape[1], dtype=dtype)
    if cached:
        prefix = kv[:, :cached]  # its causal attention is not compared here
        backend.mha(prefix, prefix, prefix, p, form="fused", need_weights=False, cache=cache)
    out = backend.mha(x, x, x, p, mask, cache=cache, **kw)
    assert cache.length == kv.shape[1]
    return out


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("num_kv_heads", [H, 1])
@pytest.mark.parametrize("align", ["top_left", "bottom_right"])
@pytest.mark.parametrize("state", list(CAUSAL_STATES))
def test_the_causal_flag_equals_the_explicit_causal_mask(
    backend, dtype, num_kv_heads: int, align: str, state: str
) -> None:
    L_, S_, cached = CAUSAL_STATES[state]
    p = init_params(D, H, num_kv_heads=num_kv_heads, seed=6, dtype=dtype)
    kv = rng(7).standard_normal((B, S_, D)).astype(dtype)  # the inputs of all S positions
    x = kv[:, -L_:] if cached is not None else rng(8).standard_normal((B, L_, D)).astype(dtype)
    keep = np_backend.causal_mask(L_, S_, align=align)  # (L, S)
    for pad in (None, np_backend.key_padding_mask([S_, S_ - 2], S_)):
        explicit = keep if pad is None else pad & keep  # (B, 1, L, S)
        out_tol, w_tol = tolerance.attention_tolerance(x, kv, kv, p, explicit)
        for form, need_weights in causal_routes(backend, cached):
            kw = {"form": form, "need_weights": need_weights}
            out, w = causal_run(backend, x, kv, p, pad, cached, causal=True, align=align, **kw)
            ref, ref_w = causal_run(backend, x, kv, p, explicit, cached, **kw)
            name = f"{form}, need_weights={need_weights}, mask={pad is not None}"
            assert out.dtype == dtype and (w is None) == (not need_weights)
            tolerance.assert_close(out, ref, out_tol, name=name)
            if need_weights:
                tolerance.assert_close(w, ref_w, w_tol, name=name)
                assert (w[..., ~keep] == 0).all()  # exact: what the diagonal hides is zero


@pytest.mark.parametrize(
    ("causal", "align", "exc", "match"),
    [
        ("yes", "top_left", TypeError, "causal must be a bool; got str"),
        (1, "top_left", TypeError, "causal must be a bool; got int"),
        (True, "bottom", ValueError, "align must be one of"),
        (False, "bottom_right", ValueError, "align='bottom_right' applies only with causal=True"),
    ],
)
def test_a_bad_causal_flag_or_alignment_is_refused_and_the_cache_is_kept(
    backend, causal, align, exc, match
) -> None:
    p = init_params(D, H, seed=6)
    x = rng().standard_normal((B, 3, D))
    dtype = np.float64 if backend.name == "numpy" else torch.float64
    cache = KVCache(B, H, D // H, 8, dtype=dtype)
    with pytest.raises(exc, match=match):
        backend.mha(x, x, x, p, causal=causal, align=align, cache=cache)
    assert cache.length == 0  # a refused call changes nothing


# ---- LayerNorm and the residual block ------------------------------------------------


def test_layer_norm_matches_a_hand_computation(backend) -> None:
    x = np.array([[1.0, 2.0, 3.0, 6.0]])
    mean, var = 3.0, (4 + 1 + 0 + 9) / 4
    expected = (x - mean) / math.sqrt(var + 1e-5)
    tol = tolerance.rounding_tolerance(F64, terms=4, scale=np.abs(expected).max(), stages=3)
    tolerance.assert_close(backend.numpy(backend.mod.layer_norm(backend(x))), expected, tol)
    w, b = np.array([1.0, 2.0, 0.5, -1.0]), np.array([0.0, 1.0, -1.0, 2.0])
    np.testing.assert_allclose(
        backend.numpy(backend.mod.layer_norm(backend(x), backend(w), backend(b), eps=1e-3)),
        (x - mean) / math.sqrt(var + 1e-3) * w + b,
        rtol=1e-15,
    )


def _block(backend: Backend, x, p, mask, g, beta, **kw) -> tuple[np.ndarray, np.ndarray]:
    out, w = backend.mod.attention_block(
        backend(x),
        backend.params(p),
        backend(mask),
        ln_weight=backend(g),
        ln_bias=backend(beta),
        **kw,
    )
    return backend.numpy(out), backend.numpy(w)


@pytest.mark.parametrize("form", WEIGHTED)
def test_attention_block_is_layer_norm_of_x_plus_multi_head(backend, form: str) -> None:
    x = rng().standard_normal((B, L, D))
    p = init_params(D, H)
    g, beta = rng(1).standard_normal(D), rng(2).standard_normal(D)
    mask = np_backend.causal_mask(L)
    out, w = _block(backend, x, p, mask, g, beta, eps=1e-6, form=form)
    attn, ref_w = reference_mha(x, x, x, p, mask)
    y = x + attn
    by_hand = (y - y.mean(-1, keepdims=True)) / np.sqrt(y.var(-1, keepdims=True) + 1e-6) * g + beta
    np.testing.assert_allclose(out, by_hand, rtol=0, atol=1e-12)
    np.testing.assert_allclose(w, ref_w, atol=1e-12)


@pytest.mark.parametrize("form", WEIGHTED)
def test_pre_norm_attention_block_is_x_plus_multi_head_of_layer_norm(backend, form: str) -> None:
    x = rng().standard_normal((B, L, D))
    p = init_params(D, H)
    g, beta = rng(1).standard_normal(D), rng(2).standard_normal(D)
    mask = np_backend.causal_mask(L)
    out, w = _block(backend, x, p, mask, g, beta, form=form, norm_first=True)
    normed = backend.numpy(backend.mod.layer_norm(backend(x), backend(g), backend(beta)))
    attn, ref_w = reference_mha(normed, normed, normed, p, mask)
    np.testing.assert_allclose(out, x + attn, rtol=0, atol=1e-12)
    np.testing.assert_allclose(w, ref_w, rtol=0, atol=1e-12)


def test_with_a_zero_output_projection_pre_norm_is_the_identity_and_post_norm_is_not(
    backend,
) -> None:
    x = rng().standard_normal((B, L, D))
    p = init_params(D, H)
    silent = backend.params(MHAParams(p.w_qkv, np.zeros_like(p.w_o), p.b_qkv, np.zeros(D), H))
    pre, _ = backend.mod.attention_block(backend(x), silent, norm_first=True)
    post, _ = backend.mod.attention_block(backend(x), silent)
    np.testing.assert_array_equal(backend.numpy(pre), x)  # exact: x + (zero rows @ 0 + 0)
    normed = backend.numpy(backend.mod.layer_norm(backend(x)))
    np.testing.assert_array_equal(backend.numpy(post), normed)  # exact: x + 0, the same call
    assert np.abs(backend.numpy(post) - x).max() > 0.1
