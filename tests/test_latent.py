"""Multi-head latent attention: two routes, two backends, a latent cache, decoupled rotary keys."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import mha
from mha.analysis import latent_factors
from mha.backends import latent, np_backend, torch_backend
from mha.core.kv_cache import LatentCache
from mha.core.latent_params import init_mla_params
from mha.core.rotary import Rotary, rotate
from mha.numerics import tolerance

D, H, DC, N = 32, 4, 12, 9
ROTARY = Rotary(10_000.0)
BACKENDS = {"numpy": np_backend, "torch": torch_backend}

# (d_rope, d_query_latent, rotary): decoupled rotary keys, with and without a query latent;
# no positions; rotary positions on the rebuilt keys (explicit route only).
LAYERS = {
    "decoupled": (4, None, ROTARY),
    "decoupled, query latent": (8, 20, ROTARY),
    "no positions": (0, 24, None),
    "rotary on rebuilt keys": (0, None, ROTARY),
}


def setup(layer: str, kind: str = "numpy", dtype=np.float64, batch: int = 2, seed: int = 0):
    d_rope, d_query, rotary = LAYERS[layer]
    params = init_mla_params(D, H, DC, d_rope, d_query_latent=d_query, seed=seed)
    x = np.random.default_rng(seed + 1).standard_normal((batch, N, D))
    params, x = params.to_numpy(dtype), x.astype(dtype)
    if kind == "torch":
        params, x = params.to_torch(), torch.from_numpy(x)
    return params, x, rotary


def routes_of(layer: str) -> tuple[str, ...]:
    return ("explicit",) if layer == "rotary on rebuilt keys" else latent.ROUTES


def as_np(a) -> np.ndarray:
    return a if isinstance(a, np.ndarray) else a.detach().numpy()


def reference(x: np.ndarray, params, mask, rotary) -> np.ndarray:
    """The layer from its equations, one head at a time, in float64 NumPy."""
    p = params.to_numpy(np.float64)
    Dh, Dr = p.d_head, p.d_rope
    source = x if p.w_dq is None else x @ p.w_dq  # (B, N, Dc') or (B, N, D)
    c = x @ p.w_dkv  # (B, N, Dc)
    out = 0.0
    for h in range(H):
        cols, rcols = slice(h * Dh, (h + 1) * Dh), slice(h * Dr, (h + 1) * Dr)
        q, k, v = source @ p.w_uq[:, cols], c @ p.w_uk[:, cols], c @ p.w_uv[:, cols]
        if rotary is not None and not Dr:  # positions on the whole query and key
            q, k = rotate(q, rotary), rotate(k, rotary)
        scores = q @ k.swapaxes(-1, -2)  # (B, N, N)
        if Dr:
            q_r, k_r = source @ p.w_qr[:, rcols], x @ p.w_kr  # (B, N, Dr) each
            if rotary is not None:
                q_r, k_r = rotate(q_r, rotary), rotate(k_r, rotary)
            scores = scores + q_r @ k_r.swapaxes(-1, -2)
        a = np_backend.softmax(scores / math.sqrt(Dh + Dr), mask)
        out = out + (a @ v) @ p.w_o[cols]  # head h's part of Concat(heads) W^O
    return out


def test_each_route_computes_the_layers_equations() -> None:
    """Against the equations written out head by head: not the routes' shared pieces."""
    for layer in LAYERS:
        params, x, rotary = setup(layer)
        mask = np_backend.causal_mask(N)
        out_tol, _ = tolerance.latent_tolerance(x, params, mask, rotary=rotary)
        expected = reference(x, params, mask, rotary)
        for route in routes_of(layer):
            out, _ = latent.multi_head_latent_attention(x, params, mask, route=route, rotary=rotary)
            assert tolerance.is_close(out, expected, out_tol), (layer, route)


@pytest.mark.parametrize("layer", list(LAYERS))
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_both_routes_in_both_backends_agree_within_the_tolerance(layer, dtype) -> None:
    params, x, rotary = setup(layer, dtype=dtype)
    mask = np_backend.causal_mask(N)
    out_tol, w_tol = tolerance.latent_tolerance(x, params, mask, rotary=rotary)
    outs, weights = {}, {}
    for kind, route in ((k, r) for k in BACKENDS for r in routes_of(layer)):
        p = params if kind == "numpy" else params.to_torch()
        xi = x if kind == "numpy" else torch.from_numpy(x)
        m = mask if kind == "numpy" else torch.from_numpy(mask)
        out, w = latent.multi_head_latent_attention(xi, p, m, route=route, rotary=rotary)
        outs[kind, route], weights[kind, route] = as_np(out), as_np(w)
    reference = outs["numpy", "explicit"]
    for key, out in outs.items():
        assert tolerance.is_close(out, reference, out_tol), key
        assert tolerance.is_close(weights[key], weights["numpy", "explicit"], w_tol), key
    exact, _ = latent.multi_head_latent_attention(
        x.astype(np.float64), params.to_numpy(np.float64), mask, rotary=rotary, route="explicit"
    )
    assert tolerance.is_close(reference, exact, out_tol)  # each route is near exact too


def test_the_tolerance_is_not_met_by_a_wrong_route() -> None:
    """The bound is tight enough to catch a route that drops the rotary part of the scores."""
    params, x, rotary = setup("decoupled")
    mask = np_backend.causal_mask(N)
    out_tol, _ = tolerance.latent_tolerance(x, params, mask, rotary=rotary)
    right, _ = latent.multi_head_latent_attention(x, params, mask, rotary=rotary)
    wrong, _ = latent.multi_head_latent_attention(x, params, mask, rotary=None)  # no rotation
    assert not tolerance.is_close(wrong, right, out_tol)


@pytest.mark.parametrize("kind", list(BACKENDS))
@pytest.mark.parametrize("layer", list(LAYERS))
def test_decoding_through_a_latent_cache_equals_the_full_forward(kind: str, layer: str) -> None:
    params, x, rotary = setup(layer, kind)
    backend = BACKENDS[kind]
    full_mask = backend.causal_mask(N)
    full, _ = latent.multi_head_latent_attention(
        x, params, full_mask, route="explicit", rotary=rotary
    )
    out_tol, _ = tolerance.latent_tolerance(x, params, full_mask, rotary=rotary)
    dtype = np.float64 if kind == "numpy" else torch.float64
    for route in routes_of(layer):
        cache = LatentCache(2, DC, params.d_rope, N, dtype=dtype)
        steps = [
            latent.multi_head_latent_attention(
                x[:, t : t + 1], params, route=route, cache=cache, rotary=rotary
            )[0]
            for t in range(N)
        ]  # one token at a time
        cat = np.concatenate if kind == "numpy" else torch.cat
        assert tolerance.is_close(cat(steps, 1), full, out_tol), route
        cache = LatentCache(2, DC, params.d_rope, N, dtype=dtype)
        blocks = [(0, 4), (4, 5), (5, N)]  # a prefill, one token, a block
        outs = []
        for a, b in blocks:
            mask = backend.causal_mask(b - a, b, align="bottom_right")
            out, w = latent.multi_head_latent_attention(
                x[:, a:b], params, mask, route=route, cache=cache, rotary=rotary
            )
            assert tuple(w.shape) == (2, H, b - a, b)
            outs.append(out)
        assert tolerance.is_close(cat(outs, 1), full, out_tol), route
        assert cache.length == N


def test_the_cache_holds_the_latents_and_the_rotated_rotary_keys() -> None:
    params, x, rotary = setup("decoupled")
    cache = LatentCache(2, DC, params.d_rope, N)
    latent.multi_head_latent_attention(
        x, params, np_backend.causal_mask(N), cache=cache, rotary=rotary
    )
    c, k_r = latent.latents(x, params, rotary, 0)
    assert np.array_equal(cache.latents, c) and np.array_equal(cache.rotary_keys, k_r)  # exact
    assert np.array_equal(c, x @ params.w_dkv)  # exact: one product, computed alike
    assert np.array_equal(k_r, rotate(x @ params.w_kr, rotary))  # exact: rotated alike
    assert cache.nbytes == 2 * N * (DC + params.d_rope) * 8  # (Dc + Dr) per position


def test_a_refused_call_leaves_the_latent_cache_as_it_was() -> None:
    params, x, rotary = setup("decoupled", dtype=np.float32)
    cache = LatentCache(2, DC, params.d_rope, N, dtype=np.float32)
    latent.multi_head_latent_attention(
        x[:, :3], params, np_backend.causal_mask(3), cache=cache, rotary=rotary
    )
    before = (cache.length, cache.latents.copy(), cache.rotary_keys.copy(), cache.max_abs)
    huge = np.full((2, 1, D), 1e20, np.float32)  # the scores overflow float32
    nan = x[:, 3:4].copy()
    nan[0, 0, 0] = math.nan
    calls = [
        (huge, None, "overflowed"),
        (nan, None, "x must be finite"),
        (x[:, 3:4], np_backend.causal_mask(1, 3), r"mask must broadcast to \(B, H, L, S\)"),
        (np.concatenate([x, x], 1)[:, :7], None, "capacity=9 positions; it holds 3 and got 7"),
    ]
    for new, mask, match in calls:
        with pytest.raises(ValueError, match=match):
            latent.multi_head_latent_attention(new, params, mask, cache=cache, rotary=rotary)
        assert cache.length == before[0] and cache.max_abs == before[3]  # exact: unchanged
        assert np.array_equal(cache.latents, before[1])  # exact: untouched memory
        assert np.array_equal(cache.rotary_keys, before[2])  # exact: untouched memory


def naive_absorbed(x, params, rotary, mask):
    """Absorption tried on rotary positions turned on the rebuilt keys (``Dr = 0``): the
    rotated query is multiplied by ``(W^UK_h)^T`` and scored against unrotated latents, the
    only thing a latent cache holds. It leaves out the keys' rotations, which no fixed matrix
    can carry: the rotation ``R_(j-i)`` by each key's distance sits between the query and
    ``W^UK_h``."""
    q, _ = latent.latent_queries(x, params, None, 0)  # (B, H, N, Dh)
    c, _ = latent.latents(x, params, None, 0)  # (B, N, Dc)
    w_uk = params.w_uk.reshape(DC, H, -1).swapaxes(0, 1)  # (H, Dc, Dh)
    folded = rotate(q, rotary) @ w_uk.swapaxes(-1, -2)  # (B, H, N, Dc)
    scale = math.sqrt(DC / params.d_head)
    out, _ = np_backend.attention_heads(folded * scale, c[:, None], c[:, None], mask)
    w_uv = params.w_uv.reshape(DC, H, -1).swapaxes(0, 1)  # (H, Dc, Dh)
    return np_backend.merge_heads(out @ w_uv) @ params.w_o


def test_absorbing_needs_decoupled_rotary_keys() -> None:
    """With rotations on the rebuilt keys, absorption gives other scores; decoupled, it agrees."""
    mask = np_backend.causal_mask(N)
    params, x, rotary = setup("rotary on rebuilt keys")
    explicit, _ = latent.multi_head_latent_attention(
        x, params, mask, route="explicit", rotary=rotary
    )
    out_tol, _ = tolerance.latent_tolerance(x, params, mask, rotary=rotary)
    naive = naive_absorbed(x, params, rotary, mask)
    assert tolerance.max_abs_diff(naive, explicit) > 100 * out_tol.max()
    no_positions, _ = latent.multi_head_latent_attention(x, params, mask, route="explicit")
    with pytest.raises(ValueError, match="needs decoupled rotary keys"):
        latent.multi_head_latent_attention(x, params, mask, route="absorbed", rotary=rotary)
    assert tolerance.max_abs_diff(no_positions, explicit) > 100 * out_tol.max()  # rotation matters
    params, x, rotary = setup("decoupled")
    out_tol, _ = tolerance.latent_tolerance(x, params, mask, rotary=rotary)
    explicit, _ = latent.multi_head_latent_attention(
        x, params, mask, route="explicit", rotary=rotary
    )
    absorbed, _ = latent.multi_head_latent_attention(
        x, params, mask, route="absorbed", rotary=rotary
    )
    assert tolerance.is_close(absorbed, explicit, out_tol)


def test_the_folded_query_key_matrix_depends_on_the_distance() -> None:
    """A query at 0 scores a key at ``n`` through ``W^UQ_h M_0 M_n^T (W^UK_h)^T``, with
    ``x M_p`` the row ``x`` rotated to position ``p``: one matrix per distance, none to fold."""
    params, _, rotary = setup("rotary on rebuilt keys")
    Dh = params.d_head
    w_uq, w_uk = params.w_uq[:, :Dh], params.w_uk[:, :Dh]  # head 1's (D, Dh), (Dc, Dh)

    def turn(position: int) -> np.ndarray:  # M_p: row i is e_i rotated to the position
        return rotate(np.eye(Dh)[:, None], rotary, offset=position)[:, 0]  # (Dh, Dh)

    def folded(distance: int) -> np.ndarray:  # (D, Dc)
        return w_uq @ turn(0) @ turn(distance).T @ w_uk.T

    assert np.array_equal(turn(0), np.eye(Dh))  # exact: cos 0 = 1, sin 0 = 0
    near, far = folded(0), folded(5)
    shifted = w_uq @ turn(7) @ turn(10).T @ w_uk.T  # the same distance, 3, further on
    scale = float((np.abs(w_uq) @ np.abs(turn(7)) @ np.abs(turn(10)).T @ np.abs(w_uk).T).max())
    tol = tolerance.rounding_tolerance(np.float64, terms=Dh, scale=scale, stages=6)
    assert tolerance.max_abs_diff(folded(3), shifted) < tol
    assert tolerance.max_abs_diff(near, far) > 0.1 * np.abs(near).max()


def test_latent_attention_with_the_conversions_full_latent_is_the_gqa_layer() -> None:
    params = mha.init_params(D, H, num_kv_heads=2, bias=False, seed=5)
    x = np.random.default_rng(6).standard_normal((2, N, D))
    mask = np_backend.causal_mask(N)
    gqa, _ = np_backend.multi_head_attention(x, x, x, params, mask)
    converted = latent_factors.latent_from_gqa(params, 2 * 2 * params.d_head)  # 2 H_kv Dh
    out_tol, _ = tolerance.latent_tolerance(x, converted, mask)
    for route in latent.ROUTES:
        out, _ = latent.multi_head_latent_attention(x, converted, mask, route=route)
        assert tolerance.is_close(out, gqa, out_tol), route


@pytest.mark.parametrize("route", latent.ROUTES)
def test_autograd_differentiates_each_route(route: str) -> None:
    params = init_mla_params(8, 2, 6, 4, d_query_latent=6, seed=7).to_torch()
    x = torch.from_numpy(np.random.default_rng(8).standard_normal((1, 4, 8))).requires_grad_()
    mask = torch_backend.causal_mask(4)

    def layer(t: torch.Tensor) -> torch.Tensor:
        return latent.multi_head_latent_attention(t, params, mask, route=route, rotary=ROTARY)[0]

    assert torch.autograd.gradcheck(layer, (x,))


@pytest.mark.parametrize("kind", list(BACKENDS))
def test_need_weights_false_returns_the_same_output_without_weights(kind: str) -> None:
    params, x, rotary = setup("decoupled", kind)
    mask = BACKENDS[kind].causal_mask(N)
    with_w, w = latent.multi_head_latent_attention(x, params, mask, rotary=rotary)
    without, none = latent.multi_head_latent_attention(
        x, params, mask, rotary=rotary, need_weights=False
    )
    out_tol, _ = tolerance.latent_tolerance(x, params, mask, rotary=rotary)
    assert none is None and w is not None and tolerance.is_close(without, with_w, out_tol)


def _call(change: dict):
    params, x, rotary = setup("decoupled")
    args = {"x": x, "params": params, "mask": None, "route": "absorbed", "rotary": rotary}
    args |= change
    return lambda: latent.multi_head_latent_attention(
        args["x"],
        args["params"],
        args["mask"],
        route=args["route"],
        rotary=args["rotary"],
        **{k: v for k, v in args.items() if k in ("cache", "need_weights")},
    )


@pytest.mark.parametrize(
    ("change", "error", "match"),
    [
        ({"params": mha.init_params(D, H)}, TypeError, "params must be MLAParams; got MHAParams"),
        ({"route": "fused"}, ValueError, r"route must be one of \('explicit', 'absorbed'\)"),
        ({"x": np.zeros((2, N, D + 1))}, ValueError, "x width must equal d_model=32"),
        ({"x": np.zeros((N, D))}, ValueError, r"x must have shape \(B, L, D\)"),
        ({"x": np.zeros((2, 0, D))}, ValueError, "x must"),
        ({"x": np.zeros((2, N, D), np.float32)}, TypeError, "share one dtype"),
        ({"x": [[0.0]]}, TypeError, "x must be a numpy.ndarray or a torch.Tensor; got list"),
        ({"rotary": "rope"}, TypeError, "rotary must be a Rotary or None; got str"),
        ({"need_weights": 1}, TypeError, "need_weights must be a bool"),
        ({"mask": np.ones((3, 3), bool)}, ValueError, r"mask must broadcast to \(B, H, L, S\)"),
        ({"cache": LatentCache(2, DC + 1, 4, N)}, ValueError, r"want \(B, Dc, Dr\) = \(2, 12, 4\)"),
        ({"cache": LatentCache(2, DC, 4, N - 1)}, ValueError, "holds at most capacity=8"),
        ({"cache": LatentCache(2, DC, 4, N, dtype=np.float32)}, TypeError, "input's dtype"),
        (
            {"cache": LatentCache(2, DC, 4, N, dtype=torch.float64)},
            TypeError,
            "cache must hold numpy.ndarray buffers",
        ),
        ({"cache": "latents"}, TypeError, "cache must be a mha.core.kv_cache.LatentCache"),
    ],
)
def test_each_bad_argument_is_named(change, error, match) -> None:
    with pytest.raises(error, match=match):
        _call(change)()


def test_the_absorbed_route_refuses_rotations_on_rebuilt_keys_and_odd_heads() -> None:
    params, x, _ = setup("rotary on rebuilt keys")
    with pytest.raises(ValueError, match="route='absorbed' needs decoupled rotary keys"):
        latent.multi_head_latent_attention(x, params, rotary=ROTARY)
    odd = init_mla_params(D, 2, DC, d_head=5)
    with pytest.raises(ValueError, match="d_head must be even for rotary positions"):
        latent.multi_head_latent_attention(x, odd, route="explicit", rotary=ROTARY)


@pytest.mark.parametrize("kind", list(BACKENDS))
@pytest.mark.parametrize("buffer", ["latents", "rotary_keys"])
def test_nan_written_into_a_latent_cache_is_reported_as_nan_in_the_cache(kind, buffer) -> None:
    params, x, rotary = setup("decoupled", kind)
    dtype = np.float64 if kind == "numpy" else torch.float64
    cache = LatentCache(2, DC, params.d_rope, N, dtype=dtype)
    latent.multi_head_latent_attention(x[:, :2], params, cache=cache, rotary=rotary)
    getattr(cache, buffer)[0, 1, 0] = math.nan  # through the view: an append would refuse it
    with pytest.raises(
        ValueError,
        match=rf"cache must hold finite latents and rotary keys; got NaN or infinite values in "
        rf"cache\.{buffer} \(appends refuse them: were they written into its views\?\)",
    ):
        latent.multi_head_latent_attention(x[:, 2:3], params, cache=cache, rotary=rotary)
    assert cache.length == 2
