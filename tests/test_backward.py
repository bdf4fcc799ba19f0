"""mha.numerics.backward: gradients by hand against PyTorch autograd and finite differences, the
tiled backward against the one from stored weights, and the memory each needs."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import mha
import mha.core.params
import mha.numerics.tolerance
from mha.backends import np_backend, tiled, torch_backend
from mha.backends._tiles import tile_mask
from mha.numerics import backward as G
from mha.numerics import gradcheck, tolerance
from mha.numerics.tolerance import assert_close, gamma, matmul_tolerance, unit_roundoff

DTYPES = {np.float64: torch.float64, np.float32: torch.float32}


def arrays(*shapes, dtype=np.float64, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s).astype(dtype) for s in shapes]


def torch_leaves(*xs):
    return [torch.from_numpy(x.copy()).requires_grad_() for x in xs]


# ---- softmax and scaled dot-product attention -----------------------------------------


@pytest.mark.parametrize("dtype", list(DTYPES))
def test_softmax_gradient_equals_autograd(dtype) -> None:
    scores, d_weights = arrays((3, 4, 6), (3, 4, 6), dtype=dtype)
    mask = np.random.default_rng(1).random((4, 6)) < 0.6
    mask[1] = False
    s = torch_leaves(scores)[0]
    w = torch_backend.softmax(s, torch.from_numpy(mask))
    w.backward(torch.from_numpy(d_weights))
    weights = w.detach().numpy()
    got = G.softmax(weights, d_weights)
    # rowsum(dA * A) sums S products, then a subtraction and a product: each route errs by
    # gamma_S A (|dA| + rowsum(|dA| A)) at most (the weights are the same array for both).
    magnitude = weights * (np.abs(d_weights) + (np.abs(d_weights) * weights).sum(-1, keepdims=True))
    tol = 2 * 2 * gamma(dtype, 6) * magnitude
    assert_close(got, s.grad.numpy(), tol, name="softmax gradient")
    # exact: a fully masked row passes nothing back
    np.testing.assert_array_equal(got[:, 1], 0.0)  # a fully masked row passes nothing back
    np.testing.assert_array_equal(got[:, ~mask], 0.0)  # exact: masked entries pass nothing back


@pytest.mark.parametrize("dtype", list(DTYPES))
def test_sdpa_gradients_equal_autograd_with_masks_and_broadcast_keys(dtype) -> None:
    q, k, v, d_out = arrays((2, 3, 5, 4), (3, 7, 4), (3, 7, 6), (2, 3, 5, 6), dtype=dtype, seed=2)
    mask = np_backend.causal_mask(5, 7)
    mask[0] = False  # a fully masked query row
    out, weights = np_backend.scaled_dot_product_attention(q, k, v, mask)
    dq, dk, dv = G.scaled_dot_product_attention(q, k, v, weights, d_out)
    tq, tk, tv = torch_leaves(q, k, v)
    t_out, t_w = torch_backend.scaled_dot_product_attention(tq, tk, tv, torch.from_numpy(mask))
    t_out.backward(torch.from_numpy(d_out))
    assert dq.shape == q.shape and dk.shape == k.shape and dv.shape == v.shape
    bound_q, bound_k, bound_v = tolerance.attention_gradient_tolerance(q, k, v, weights, d_out)
    assert bound_k.shape == k.shape  # summed over the batch the keys were broadcast along
    assert_close(dq, tq.grad.numpy(), bound_q, name="d_query")
    assert_close(dk, tk.grad.numpy(), bound_k, name="d_key")
    assert_close(dv, tv.grad.numpy(), bound_v, name="d_value")
    # exact: a fully masked row passes nothing back
    np.testing.assert_array_equal(dq[..., 0, :], 0.0)


@settings(max_examples=60, deadline=None)
@given(
    L=st.integers(1, 20),
    S=st.integers(1, 20),
    block_q=st.integers(1, 25),
    block_kv=st.integers(1, 25),
    causal=st.booleans(),
    masked=st.booleans(),
    dtype=st.sampled_from(list(DTYPES)),
    seed=st.integers(0, 2**31 - 1),
)
def test_tiled_backward_equals_the_backward_from_stored_weights(
    L, S, block_q, block_kv, causal, masked, dtype, seed
) -> None:
    q, k, v, d_out = arrays((2, L, 4), (2, S, 4), (2, S, 3), (2, L, 3), dtype=dtype, seed=seed)
    rng = np.random.default_rng(seed)
    mask = rng.random((2, L, S)) < 0.6 if masked else None
    out, lse = tiled.attention(q, k, v, mask, causal=causal, block_q=block_q, block_kv=block_kv)
    full = mask
    if causal:
        full = np_backend.causal_mask(L, S) if mask is None else mask & np_backend.causal_mask(L, S)
    _, weights = np_backend.scaled_dot_product_attention(q, k, v, full)
    ref = G.scaled_dot_product_attention(q, k, v, weights, d_out)
    got = G.tiled_attention(
        q, k, v, out, lse, d_out, mask, causal=causal, block_q=block_q, block_kv=block_kv
    )
    bounds = tolerance.attention_gradient_tolerance(q, k, v, weights, d_out)
    for name, g, r, b in zip(("d_query", "d_key", "d_value"), got, ref, bounds, strict=True):
        assert_close(g, r, b, name=name)


def tiled_backward_io(L, S, Dh, Dv, block_q, block_kv, visited):
    """The elements the tiled backward moves, counted from the algorithm: a first pass reads
    O and dO and writes delta; each key block loads K^(j), V^(j) once and stores dK^(j),
    dV^(j) once; each visited tile loads Q^(i), dO^(i), lse^(i), delta^(i) and reads and
    writes back dQ^(i)."""
    tiles = [min(i + block_q, L) - i for i in range(0, L, block_q) for j in range(0, S, block_kv)]
    rows = [br for br, seen in zip(tiles, visited, strict=True) if seen]  # Br of each tile
    reads = 2 * L * Dv + S * (Dh + Dv) + sum(rows) * (2 * Dh + Dv + 2)
    writes = L + S * (Dh + Dv) + sum(rows) * Dh
    return reads, writes


@pytest.mark.parametrize(
    "L, S, Dh, Dv, block_q, block_kv, causal",
    [(50, 37, 8, 8, 8, 6, False), (13, 29, 4, 3, 5, 7, False), (29, 29, 4, 3, 5, 7, True)],
)
def test_tiled_backward_counts_the_elements_it_moves(L, S, Dh, Dv, block_q, block_kv, causal):
    batch = (2, 3)
    q, k, v, d_out = arrays((*batch, L, Dh), (*batch, S, Dh), (*batch, S, Dv), (*batch, L, Dv))
    out, lse = tiled.attention(q, k, v, causal=causal, block_q=block_q, block_kv=block_kv)
    io = tiled.IOCounter()
    blocks = {"block_q": block_q, "block_kv": block_kv}
    counted = G.tiled_attention(q, k, v, out, lse, d_out, causal=causal, io_counter=io, **blocks)
    plain = G.tiled_attention(q, k, v, out, lse, d_out, causal=causal, **blocks)
    visited = [
        tile_mask(None, causal, slice(i, i + block_q), slice(j, j + block_kv)) is not False
        for i in range(0, L, block_q)
        for j in range(0, S, block_kv)
    ]
    assert any(visited) and (all(visited) != causal)  # the causal case skips tiles
    reads, writes = tiled_backward_io(L, S, Dh, Dv, block_q, block_kv, visited)
    entries = batch[0] * batch[1]
    assert (io["read"], io["write"]) == (entries * reads, entries * writes)
    for g, h in zip(counted, plain, strict=True):
        np.testing.assert_array_equal(g, h)  # exact: the same arithmetic, counted or not


def test_tiled_backward_refuses_an_io_counter_of_another_kind_and_counts_no_refused_call():
    q, k, v, d_out = arrays((3, 2), (4, 2), (4, 2), (3, 2))
    out, lse = tiled.attention(q, k, v)
    with pytest.raises(
        TypeError, match="io_counter must be a collections.Counter or None; got dict"
    ):
        G.tiled_attention(q, k, v, out, lse, d_out, io_counter={})
    io = tiled.IOCounter()
    with pytest.raises(ValueError, match="block_q must be at least 1"):
        G.tiled_attention(q, k, v, out, lse, d_out, block_q=0, io_counter=io)
    assert io == tiled.IOCounter()


# ---- the whole layer ---------------------------------------------------------------------


def layer_inputs(B, L, S, D, H, *, dtype, bias, seed, self_attention):
    params = mha.init_params(D, H, seed=seed, bias=bias, dtype=dtype)
    rng = np.random.default_rng(seed)
    query = rng.standard_normal((B, L, D)).astype(dtype)
    if self_attention:
        key = value = query
    else:
        key, value = (rng.standard_normal((B, S, D)).astype(dtype) for _ in range(2))
    d_out = rng.standard_normal((B, L, D)).astype(dtype)
    return params, query, key, value, d_out


def autograd_gradients(params, query, key, value, mask, d_out):
    """Gradients from PyTorch autograd through mha.backends.torch_backend (the explicit path)."""
    p = params.to_torch().map(lambda t: t.requires_grad_())
    xs = {id(x): torch.from_numpy(x.copy()).requires_grad_() for x in (query, key, value)}
    tq, tk, tv = xs[id(query)], xs[id(key)], xs[id(value)]
    out, _ = torch_backend.multi_head_attention(
        tq, tk, tv, p, None if mask is None else torch.from_numpy(mask)
    )
    out.backward(torch.from_numpy(d_out))
    grads = {"w_qkv": p.w_qkv.grad, "w_o": p.w_o.grad, "b_qkv": None, "b_o": None}
    if p.b_qkv is not None:
        grads |= {"b_qkv": p.b_qkv.grad, "b_o": p.b_o.grad}
    dk = None if tk is tq else tk.grad.numpy()
    dv = None if tv is tq else tv.grad.numpy()
    params_grads = {k: None if g is None else g.numpy() for k, g in grads.items()}
    return out.detach().numpy(), params_grads, tq.grad.numpy(), dk, dv


LAYER_CASES = [
    # B, L, S, D, H, bias, self-attention, mask kind
    (2, 5, 5, 12, 3, True, True, "causal"),
    (2, 4, 6, 8, 2, True, False, "padding"),
    (1, 6, 3, 8, 4, False, False, None),
    (2, 3, 3, 6, 1, True, True, "rows"),
]


def make_mask(kind, B, H, L, S):
    if kind == "causal":
        return np_backend.causal_mask(L, S)
    if kind == "padding":
        return np_backend.key_padding_mask([0, S - 2], S)  # batch 0: every row fully masked
    if kind == "rows":
        mask = np.ones((B, H, L, S), bool)
        mask[1, 0, 1] = False  # one fully masked row in one head
        return mask
    return None


@pytest.mark.parametrize("form", G.BACKWARD_FORMS)
@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize(("B", "L", "S", "D", "H", "bias", "self_attention", "kind"), LAYER_CASES)
def test_layer_gradients_equal_autograd(B, L, S, D, H, bias, self_attention, kind, dtype, form):
    params, query, key, value, d_out = layer_inputs(
        B, L, S, D, H, dtype=dtype, bias=bias, seed=B + L + S, self_attention=self_attention
    )
    mask = make_mask(kind, B, H, L, S)
    out, saved = G.multi_head_attention_forward(
        query, key, value, params, mask, form=form, block_q=2, block_kv=3
    )
    grads = G.multi_head_attention(saved, d_out)
    tol = tolerance.gradient_tolerance(saved, d_out)
    t_out, t_params, t_dq, t_dk, t_dv = autograd_gradients(params, query, key, value, mask, d_out)
    ref_out, _ = np_backend.multi_head_attention(query, key, value, params, mask)
    if form == "fused":
        out_tol, _ = mha.numerics.tolerance.attention_tolerance(query, key, value, params, mask)
        mha.numerics.tolerance.assert_close(out, ref_out, out_tol)  # the reference's forward
    if self_attention:  # one input: its gradient is the sum of the three
        grads = G.MHAGradients(
            grads.d_query + grads.d_key + grads.d_value, None, None, grads.d_params
        )
        assert_close(grads.d_query, t_dq, tol.d_query + tol.d_key + tol.d_value, name="d_x")
    else:
        for name, g, r, t in (
            ("d_query", grads.d_query, t_dq, tol.d_query),
            ("d_key", grads.d_key, t_dk, tol.d_key),
            ("d_value", grads.d_value, t_dv, tol.d_value),
        ):
            assert_close(g, r, t, name=name)
    for name in ("w_qkv", "w_o", "b_qkv", "b_o"):
        g, r, t = getattr(grads.d_params, name), t_params[name], getattr(tol.d_params, name)
        if r is None:
            assert g is None and t is None
        else:
            assert_close(g, r, t, name=f"d_params.{name}")
    if dtype == np.float64:  # and within 1e-10 of the largest gradient entry, everywhere
        for name in ("w_qkv", "w_o"):
            g, r = getattr(grads.d_params, name), t_params[name]
            assert np.abs(g - r).max() <= 1e-10 * np.abs(r).max()
        assert np.abs(grads.d_query - t_dq).max() <= 1e-10 * np.abs(t_dq).max()


@pytest.mark.parametrize("form", G.BACKWARD_FORMS)
@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("align", ["top_left", "bottom_right"])
@pytest.mark.parametrize(("L", "S", "num_kv_heads"), [(9, 9, 4), (5, 11, 2), (11, 5, 4)])
def test_the_causal_flag_gives_the_forward_and_gradients_of_the_causal_mask(
    L, S, num_kv_heads, align, dtype, form, monkeypatch
) -> None:
    params = mha.init_params(8, 4, num_kv_heads=num_kv_heads, seed=L + S, dtype=dtype)
    query, key, value, d_out = arrays((2, L, 8), (2, S, 8), (2, S, 8), (2, L, 8), dtype=dtype)
    keep = np_backend.causal_mask(L, S, align=align)  # (L, S)
    out, saved = G.multi_head_attention_forward(query, key, value, params, keep)
    grads, tol = G.multi_head_attention(saved, d_out), tolerance.gradient_tolerance(saved, d_out)
    computed = []  # whether the backward computes each tile, in the tiled form

    def counted(*args, **kwargs):
        kept = tile_mask(*args, **kwargs)
        computed.append(kept is not False)
        return kept

    monkeypatch.setattr(G, "tile_mask", counted)
    flags = {"causal": True, "align": align, "form": form, "block_q": 2, "block_kv": 3}
    out_flag, saved_flag = G.multi_head_attention_forward(query, key, value, params, **flags)
    grads_flag = G.multi_head_attention(saved_flag, d_out)
    out_tol, _ = tolerance.attention_tolerance(query, key, value, params, keep)
    assert_close(out_flag, out, out_tol, name="output")
    for name in ("d_query", "d_key", "d_value"):
        assert_close(getattr(grads_flag, name), getattr(grads, name), getattr(tol, name), name=name)
    for name in ("w_qkv", "w_o", "b_qkv", "b_o"):
        g, t = getattr(grads_flag.d_params, name), getattr(tol.d_params, name)
        assert_close(g, getattr(grads.d_params, name), t, name=f"d_params.{name}")
    if form == "tiled":  # every tile with a key its queries see, and no other
        tiles = [keep[i : i + 2, j : j + 3] for j in range(0, S, 3) for i in range(0, L, 2)]
        assert computed == [bool(t.any()) for t in tiles]


def test_gradient_tolerance_catches_a_wrong_gradient() -> None:
    params, query, key, value, d_out = layer_inputs(
        2, 4, 4, 8, 2, dtype=np.float32, bias=True, seed=0, self_attention=False
    )
    _, saved = G.multi_head_attention_forward(query, key, value, params)
    grads = G.multi_head_attention(saved, d_out)
    tol = tolerance.gradient_tolerance(saved, d_out)
    # Leaving out the rowsum term of the softmax backward moves d_query far outside.
    k, v, w = saved.k, saved.v, saved.weights
    d_heads = G.merge_heads(d_out @ params.w_o.T, 2)
    wrong_ds = w * (d_heads @ v.swapaxes(-1, -2)) / np.sqrt(4)
    wrong_dq = G.split_heads(wrong_ds @ k) @ params.w_q.T
    assert np.any(np.abs(wrong_dq - grads.d_query) > tol.d_query)


def test_layer_gradients_match_finite_differences() -> None:
    params, query, key, value, d_out = layer_inputs(
        1, 3, 4, 6, 2, dtype=np.float64, bias=True, seed=7, self_attention=False
    )
    mask = np_backend.causal_mask(3, 4)
    _, saved = G.multi_head_attention_forward(query, key, value, params, mask, form="tiled")
    grads = G.multi_head_attention(saved, d_out)

    def loss(q_in, k_in, v_in, p):
        return float((np_backend.multi_head_attention(q_in, k_in, v_in, p, mask)[0] * d_out).sum())

    rng = np.random.default_rng(0)
    h = unit_roundoff(np.float64) ** (1 / 3)  # central differences: error ~ h^2 + u / h
    checks = []
    for name, x, g in (("query", query, grads.d_query), ("value", value, grads.d_value)):
        direction = rng.standard_normal(x.shape)
        args = {"query": query, "key": key, "value": value}

        def along(t, name=name, x=x, direction=direction, args=args):
            moved = dict(args, **{name: x + t * direction})
            return loss(moved["query"], moved["key"], moved["value"], params)

        checks.append(((along(h) - along(-h)) / (2 * h), float((g * direction).sum())))
    direction = rng.standard_normal(params.w_qkv.shape)

    def along_w(t):
        moved = mha.MHAParams(params.w_qkv + t * direction, params.w_o, params.b_qkv, params.b_o, 2)
        return loss(query, key, value, moved)

    checks.append(
        ((along_w(h) - along_w(-h)) / (2 * h), float((grads.d_params.w_qkv * direction).sum()))
    )
    for numeric, analytic in checks:
        # truncation h^2 |f'''| and rounding u |f| / h, both below 1e3 u^(2/3) (1 + |f'|) here
        assert abs(numeric - analytic) <= 1e3 * h**2 * (1 + abs(analytic))


def test_linear_and_head_gradients_are_the_transposes() -> None:
    x, w, d_y = arrays((2, 3, 4), (4, 5), (2, 3, 5))
    d_x, d_w, d_b = G.linear(x, w, d_y)
    tol = mha.numerics.tolerance.rounding_tolerance(d_y, terms=6, scale=6 * np.abs(d_y).max())
    assert_close(d_b, d_y.sum((0, 1)), tol)  # a sum of 6 rows, perhaps in another order
    assert_close(
        d_w,
        np.einsum("bld,ble->de", x, d_y),
        2 * matmul_tolerance(np.abs(x.reshape(6, 4)).T, np.abs(d_y.reshape(6, 5))),
    )
    assert_close(d_x, d_y @ w.T, matmul_tolerance(d_y, w.T))
    assert G.linear(x, w, d_y, bias=False)[2] is None
    heads = np.arange(2 * 3 * 4 * 2, dtype=float).reshape(2, 3, 4, 2)
    np.testing.assert_array_equal(G.merge_heads(G.split_heads(heads), 3), heads)  # exact: reshapes


# ---- errors ------------------------------------------------------------------------------


def test_backward_functions_reject_bad_arguments() -> None:
    q, k, v, d_out = arrays((3, 2), (4, 2), (4, 2), (3, 2))
    _, w = np_backend.scaled_dot_product_attention(q, k, v)
    with pytest.raises(ValueError, match=r"d_out must have shape \(\.\.\., L, Dv\) = \(3, 2\)"):
        G.scaled_dot_product_attention(q, k, v, w, d_out[:2])
    with pytest.raises(ValueError, match=r"weights must have shape \(\.\.\., L, S\) = \(3, 4\)"):
        G.scaled_dot_product_attention(q, k, v, w.T, d_out)
    with pytest.raises(ValueError, match=r"d_weights must have shape weights.shape"):
        G.softmax(w, w.T)
    with pytest.raises(TypeError, match="all inputs and parameters must share one dtype"):
        G.softmax(w, w.astype(np.float32))
    out, lse = tiled.attention(q, k, v)
    with pytest.raises(ValueError, match="lse must be finite or -inf"):
        G.tiled_attention(q, k, v, out, np.full(3, np.inf), d_out)
    with pytest.raises(ValueError, match=r"lse must have shape \(\.\.\., L\) = \(3,\)"):
        G.tiled_attention(q, k, v, out, lse[:2], d_out)
    with pytest.raises(ValueError, match="block_kv must be at least 1"):
        G.tiled_attention(q, k, v, out, lse, d_out, block_kv=0)
    params = mha.init_params(4, 2)
    x = np.zeros((1, 3, 4))
    with pytest.raises(
        ValueError, match=r"form must be one of \('fused', 'tiled'\); got form='packed'"
    ):
        G.multi_head_attention_forward(x, x, x, params, form="packed")
    with pytest.raises(TypeError, match="params must be MHAParams; got dict"):
        G.multi_head_attention_forward(x, x, x, {})
    _, saved = G.multi_head_attention_forward(x, x, x, params)
    with pytest.raises(ValueError, match=r"d_out must have shape \(B, L, D\) = \(1, 3, 4\)"):
        G.multi_head_attention(saved, np.zeros((1, 2, 4)))
    with pytest.raises(TypeError, match="saved must be MHASaved; got tuple"):
        G.multi_head_attention((), x)
    with pytest.raises(ValueError, match="weight must have shape"):
        G.linear(x, np.zeros(4), x)


@pytest.mark.parametrize("form", G.BACKWARD_FORMS)
@pytest.mark.parametrize("self_attention", [True, False])
def test_compare_with_autograd_reports_every_gradient_within_its_tolerance(form, self_attention):
    params, query, key, value, d_out = layer_inputs(
        2, 5, 5 if self_attention else 7, 8, 2, dtype=np.float64, bias=True, seed=3,
        self_attention=self_attention,
    )  # fmt: skip
    mask = np_backend.causal_mask(5) if self_attention else np_backend.key_padding_mask([0, 6], 7)
    checks = gradcheck.compare_with_autograd(
        query, key, value, params, d_out, mask, form=form, block_q=2, block_kv=3
    )
    inputs = ["d inputs"] if self_attention else ["d query", "d key", "d value"]
    assert list(checks) == [*inputs, "d w_qkv", "d w_o", "d b_qkv", "d b_o"]
    for name, check in checks.items():
        assert check.within and 0 <= check.used <= 1, name
        assert check.largest > 0 and check.relative == check.difference / check.largest


def test_compare_with_autograd_leaves_out_missing_biases_and_sums_a_repeated_input() -> None:
    params, query, key, _, d_out = layer_inputs(
        1, 4, 6, 8, 2, dtype=np.float32, bias=False, seed=4, self_attention=False
    )
    checks = gradcheck.compare_with_autograd(query, key, key, params, d_out)  # key is value
    assert list(checks) == ["d query", "d key", "d w_qkv", "d w_o"]
    assert all(c.within for c in checks.values())


def test_compare_with_autograd_takes_an_empty_batch() -> None:
    """B = 0: no input entries (they differ by 0) and zero parameter gradients, as autograd's."""
    params = mha.init_params(8, 2, seed=0)
    x = np.zeros((0, 3, 8))
    checks = gradcheck.compare_with_autograd(x, x, x, params, x)
    assert checks["d inputs"].difference == 0.0 and checks["d inputs"].largest == 0.0
    assert all(c.within for c in checks.values()), {n: c.used for n, c in checks.items()}


def test_a_gradient_check_fails_outside_its_tolerance() -> None:
    ours, theirs = np.array([1.0, 2.0]), np.array([1.0, 2.5])
    check = gradcheck._check_against(ours, theirs, np.array([0.1, 0.1]))
    assert not check.within and check.used == pytest.approx(5.0)
    assert check.difference == 0.5 and check.largest == 2.5  # exact: 2.5 - 2.0 in binary


# ---- grouped-query attention ---------------------------------------------------------------


def _gqa_masks(B, H, L, S):
    rng = np.random.default_rng(5)
    rows = rng.random((B, H, L, S)) < 0.7
    rows[1, 2, 0] = False  # one fully masked row in one head of the second group
    return {
        "none": None,
        "causal": np_backend.causal_mask(L, S),
        "padding": np_backend.key_padding_mask([S, 2], S),
        "per head": rows,
    }


@pytest.mark.parametrize("form", G.BACKWARD_FORMS)
@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("num_kv_heads", [4, 2, 1])  # every H_kv dividing H = 4: MHA, GQA, MQA
@pytest.mark.parametrize("mask_kind", ["none", "causal", "padding", "per head"])
def test_grouped_query_gradients_equal_autograd(num_kv_heads, dtype, form, mask_kind) -> None:
    B, L, S, D, H = 2, 5, 6, 16, 4
    params = mha.init_params(D, H, num_kv_heads=num_kv_heads, seed=3, dtype=dtype)
    query, key, value, d_out = arrays((B, L, D), (B, S, D), (B, S, D), (B, L, D), dtype=dtype)
    mask = _gqa_masks(B, H, L, S)[mask_kind]
    out, saved = G.multi_head_attention_forward(
        query, key, value, params, mask, form=form, block_q=2, block_kv=4
    )
    ref, _ = np_backend.multi_head_attention(query, key, value, params, mask)
    assert_close(
        out, ref, mha.numerics.tolerance.attention_tolerance(query, key, value, params, mask)[0]
    )
    grads = G.multi_head_attention(saved, d_out)
    Dkv = D // H * num_kv_heads
    assert grads.d_params.w_qkv.shape == (D, D + 2 * Dkv)
    assert grads.d_params.num_kv_heads == num_kv_heads
    tol = tolerance.gradient_tolerance(saved, d_out)
    t_out, t_params, t_dq, t_dk, t_dv = autograd_gradients(params, query, key, value, mask, d_out)
    for name, g, r, t in (
        ("d_query", grads.d_query, t_dq, tol.d_query),
        ("d_key", grads.d_key, t_dk, tol.d_key),
        ("d_value", grads.d_value, t_dv, tol.d_value),
        *((f"d_params.{n}", getattr(grads.d_params, n), t_params[n], getattr(tol.d_params, n))
          for n in ("w_qkv", "w_o", "b_qkv", "b_o")),
    ):  # fmt: skip
        assert_close(g, r, t, name=name)
    checks = gradcheck.compare_with_autograd(
        query, key, value, params, d_out, mask, form=form, block_q=2, block_kv=4
    )
    assert all(c.within for c in checks.values())


def test_grouped_query_key_gradients_sum_over_their_group() -> None:
    """d W_k of a grouped layer is the sum, over each group, of the d W_k of the multi-head
    layer with that key head repeated (the repeated heads are tied copies)."""
    B, L, S, D, H, H_kv = 1, 3, 4, 8, 4, 2
    params = mha.init_params(D, H, num_kv_heads=H_kv, seed=1)
    query, key, value, d_out = arrays((B, L, D), (B, S, D), (B, S, D), (B, L, D), seed=2)
    _, saved = G.multi_head_attention_forward(query, key, value, params)
    grads, tol = G.multi_head_attention(saved, d_out), tolerance.gradient_tolerance(saved, d_out)
    wide = mha.core.params.repeat_kv_heads(params)
    _, wide_saved = G.multi_head_attention_forward(query, key, value, wide)
    wide_grads = G.multi_head_attention(wide_saved, d_out)
    wide_tol = tolerance.gradient_tolerance(wide_saved, d_out)
    Dh, G_ = D // H, H // H_kv

    def group_sum(x):  # (D, H Dh) -> (D, H_kv Dh), summed over the G copies of each head
        return x.reshape(D, H_kv, G_, Dh).sum(axis=2).reshape(D, H_kv * Dh)

    for block in ("w_k", "w_v"):  # each route within half its tolerance of the exact value
        d_wide = group_sum(getattr(wide_grads.d_params, block))
        bound = getattr(tol.d_params, block) + group_sum(getattr(wide_tol.d_params, block))
        assert_close(getattr(grads.d_params, block), d_wide, bound, name=f"d {block}")
    assert_close(grads.d_query, wide_grads.d_query, tol.d_query + wide_tol.d_query)


def test_linear_refuses_an_input_width_other_than_the_weights_rows() -> None:
    x, w, d_y = arrays((2, 3, 4), (3, 5), (2, 3, 5))
    with pytest.raises(ValueError, match=r"x must have shape \(\.\.\., D_in\) with D_in = "):
        G.linear(x, w, d_y)
    with pytest.raises(ValueError, match=r"d_y must have shape \(\.\.\., D_out\)"):
        G.linear(x[..., :3], w, d_y[..., :4])


# ---- underflow ------------------------------------------------------------------------------


def _underflowing_layer():
    """float32, H = 1, W_q = W_k = I: key 2 scores about 97 below key 0 for every query, so
    its weights are about e^-97 = 1e-42 (subnormal in float32) and so are its gradients."""
    rng = np.random.default_rng(2)
    D, L, S, f = 4, 3, 3, np.float32
    eye = np.eye(D)
    w_v, w_o = rng.standard_normal((D, D)), rng.standard_normal((D, D))
    params = mha.MHAParams(
        np.concatenate([eye, eye, w_v], 1).astype(f), w_o.astype(f), None, None, 1
    )
    q = np.zeros((1, L, D))
    q[..., 0] = 10.0
    q[..., 1:] = 0.1 * rng.standard_normal((1, L, D - 1))
    k = 0.1 * rng.standard_normal((1, S, D))
    k[0, :, 0] = [10.0, 0.3, -9.3]
    v, d_out = rng.standard_normal((1, S, D)), rng.standard_normal((1, L, D))
    return params, *(x.astype(f) for x in (q, k, v, d_out))


def test_gradient_tolerance_covers_gradients_below_the_normal_range() -> None:
    params, query, key, value, d_out = _underflowing_layer()
    _, saved = G.multi_head_attention_forward(query, key, value, params)
    grads, tol = G.multi_head_attention(saved, d_out), tolerance.gradient_tolerance(saved, d_out)
    info = np.finfo(np.float32)
    assert saved.weights[..., 2].max() < info.tiny  # the weights of key 2 are subnormal
    assert 0 < np.abs(grads.d_key[0, 2]).max() < info.tiny  # and so is its gradient
    # A subnormal result is rounded to a multiple of the smallest subnormal: two routes can
    # differ by one at least, and the bound must allow it (without the underflow term it was
    # 0.2 of that here, and autograd's gradient differed from this one by 5 times the bound).
    assert tol.d_key[0, 2].min() >= info.smallest_subnormal
    assert tol.d_value[0, 2].min() >= info.smallest_subnormal
    checks = gradcheck.compare_with_autograd(query, key, value, params, d_out)
    assert all(c.within for c in checks.values()), {n: c.used for n, c in checks.items()}


def test_gradient_tolerance_refuses_the_d_out_that_the_backward_refuses() -> None:
    params, query, key, value, d_out = layer_inputs(
        1, 3, 4, 8, 2, dtype=np.float64, bias=True, seed=0, self_attention=False
    )
    _, saved = G.multi_head_attention_forward(query, key, value, params)
    for fn in (G.multi_head_attention, tolerance.gradient_tolerance):
        with pytest.raises(TypeError, match="all inputs and parameters must share one dtype"):
            fn(saved, d_out.astype(np.float32))
        with pytest.raises(ValueError, match=r"d_out must have shape \(B, L, D\)"):
            fn(saved, d_out[:, :2])
        with pytest.raises(ValueError, match="d_out must be finite"):
            fn(saved, np.full_like(d_out, np.nan))
        with pytest.raises(TypeError, match="saved must be MHASaved; got NoneType"):
            fn(None, d_out)


@pytest.mark.parametrize("form", G.BACKWARD_FORMS)
def test_grouped_query_self_attention_gradients_within_the_tolerance(form) -> None:
    params = mha.init_params(12, 6, num_kv_heads=2, seed=5, dtype=np.float32)
    x, d_out = arrays((2, 5, 12), (2, 5, 12), dtype=np.float32, seed=6)
    checks = gradcheck.compare_with_autograd(
        x, x, x, params, d_out, np_backend.causal_mask(5), form=form, block_q=2, block_kv=2
    )
    assert list(checks) == ["d inputs", "d w_qkv", "d w_o", "d b_qkv", "d b_o"]
    assert all(c.within for c in checks.values()), {n: c.used for n, c in checks.items()}
