"""Laws of attention that hold for all inputs, checked with hypothesis.

Shapes, seeds and permutations are drawn by hypothesis; the arrays themselves come from a
seeded NumPy generator (cheaper to draw, and hypothesis still shrinks the seed and shapes).
"""

from __future__ import annotations

import numpy as np
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mha import MHAParams, init_params
from mha.backends import np_backend, torch_backend
from mha.numerics import tolerance

FORMS = ("per_head", "fused", "packed")
SETTINGS = settings(max_examples=30, deadline=None)
ATOL = 1e-12


@st.composite
def configs(draw, cross: bool | None = None):
    """A random problem: sizes, a seed, a form, bias on/off, self or cross attention."""
    cross = draw(st.booleans()) if cross is None else cross
    c = {
        "B": draw(st.integers(1, 3)),
        "L": draw(st.integers(1, 6)),
        "H": draw(st.integers(1, 4)),
        "Dh": draw(st.integers(1, 4)),
        "seed": draw(st.integers(0, 2**16)),
        "form": draw(st.sampled_from(FORMS)),
        "bias": draw(st.booleans()),
        "cross": cross,
    }
    c["S"] = draw(st.integers(1, 6)) if cross else c["L"]
    return c


def problem(c):
    g = np.random.default_rng(c["seed"])
    q = g.standard_normal((c["B"], c["L"], c["H"] * c["Dh"]))
    kv = g.standard_normal((c["B"], c["S"], c["H"] * c["Dh"])) if c["cross"] else q
    p = init_params(c["H"] * c["Dh"], c["H"], bias=c["bias"], seed=c["seed"])
    return q, kv, p


@SETTINGS
@given(c=configs(cross=False), data=st.data())
def test_self_attention_is_equivariant_to_permuting_tokens(c, data) -> None:
    x, _, p = problem(c)
    perm = np.array(data.draw(st.permutations(range(c["L"]))))
    out, w = np_backend.multi_head_attention(x, x, x, p, form=c["form"])
    xp = x[:, perm]
    out_p, w_p = np_backend.multi_head_attention(xp, xp, xp, p, form=c["form"])
    np.testing.assert_allclose(out_p, out[:, perm], rtol=0, atol=ATOL)
    np.testing.assert_allclose(w_p, w[:, :, perm][..., perm], rtol=0, atol=ATOL)


@SETTINGS
@given(c=configs(cross=True), data=st.data())
def test_cross_attention_permutes_with_queries_and_ignores_key_order(c, data) -> None:
    q, kv, p = problem(c)
    q_perm = np.array(data.draw(st.permutations(range(c["L"]))))
    kv_perm = np.array(data.draw(st.permutations(range(c["S"]))))
    out, w = np_backend.multi_head_attention(q, kv, kv, p, form=c["form"])
    kvp = kv[:, kv_perm]
    out_p, w_p = np_backend.multi_head_attention(q[:, q_perm], kvp, kvp, p, form=c["form"])
    np.testing.assert_allclose(out_p, out[:, q_perm], rtol=0, atol=ATOL)
    np.testing.assert_allclose(w_p, w[:, :, q_perm][..., kv_perm], rtol=0, atol=ATOL)


def permute_heads(p: MHAParams, perm: np.ndarray) -> MHAParams:
    """Reorder the heads: column blocks of W_q, W_k, W_v (and b_qkv), row blocks of W_o."""
    D, Dh = p.d_model, p.d_head
    cols = np.concatenate([np.arange(h * Dh, (h + 1) * Dh) for h in perm])  # (D,)
    qkv_cols = np.concatenate([cols, D + cols, 2 * D + cols])  # (3D,)
    b_qkv = None if p.b_qkv is None else p.b_qkv[qkv_cols]
    return MHAParams(p.w_qkv[:, qkv_cols], p.w_o[cols, :], b_qkv, p.b_o, p.num_heads)


@SETTINGS
@given(c=configs(), data=st.data())
def test_output_is_invariant_to_permuting_heads_with_their_weight_blocks(c, data) -> None:
    q, kv, p = problem(c)
    perm = np.array(data.draw(st.permutations(range(c["H"]))))
    out, w = np_backend.multi_head_attention(q, kv, kv, p, form=c["form"])
    out_p, w_p = np_backend.multi_head_attention(q, kv, kv, permute_heads(p, perm), form=c["form"])
    np.testing.assert_allclose(out_p, out, rtol=0, atol=ATOL)
    np.testing.assert_allclose(w_p, w[:, perm], rtol=0, atol=ATOL)


@SETTINGS
@given(c=configs(cross=False), data=st.data(), use_torch=st.booleans())
def test_changing_future_tokens_never_changes_past_outputs(c, data, use_torch) -> None:
    x, _, p = problem(c)
    t = data.draw(st.integers(0, c["L"] - 1))  # the last position kept
    y = x.copy()
    y[:, t + 1 :] = np.random.default_rng(c["seed"] + 1).standard_normal(y[:, t + 1 :].shape)
    if use_torch:  # also covers the scaled_dot_product_attention fast path
        mask, pt = torch_backend.causal_mask(c["L"]), p.to_torch()
        need = data.draw(st.booleans())
        mha_torch = torch_backend.multi_head_attention
        outs = [
            mha_torch(a, a, a, pt, mask, form=c["form"], need_weights=need)[0].numpy()
            for a in (torch.from_numpy(x), torch.from_numpy(y))
        ]
    else:
        mask = np_backend.causal_mask(c["L"])
        outs = [
            np_backend.multi_head_attention(a, a, a, p, mask, form=c["form"])[0] for a in (x, y)
        ]
    np.testing.assert_allclose(outs[1][:, : t + 1], outs[0][:, : t + 1], rtol=0, atol=ATOL)


@st.composite
def masked_problems(draw):
    c = draw(configs())
    shape = draw(
        st.sampled_from(
            [
                (c["L"], c["S"]),
                (c["B"], 1, 1, c["S"]),
                (1, c["H"], c["L"], c["S"]),
                (c["B"], c["H"], c["L"], c["S"]),
                (c["S"],),
            ]
        )
    )
    density = draw(st.sampled_from([0.0, 0.3, 0.7, 1.0]))
    mask = np.random.default_rng(c["seed"] + 2).random(shape) < density
    return c, mask


@SETTINGS
@given(cm=masked_problems(), use_torch=st.booleans())
def test_weight_rows_sum_to_one_and_masked_keys_get_exactly_zero(cm, use_torch) -> None:
    c, mask = cm
    q, kv, p = problem(c)
    if use_torch:
        tq = torch.from_numpy(q)
        tkv = tq if not c["cross"] else torch.from_numpy(kv)
        _, w = torch_backend.multi_head_attention(
            tq, tkv, tkv, p.to_torch(), torch.from_numpy(mask), form=c["form"]
        )
        w = w.numpy()
    else:
        _, w = np_backend.multi_head_attention(q, kv, kv, p, mask, form=c["form"])
    keep = np.broadcast_to(mask, w.shape)
    assert (w[~keep] == 0.0).all()
    assert (w >= 0).all()
    live = keep.any(-1)  # rows with at least one key allowed sum to one; the others to zero
    sums = w.sum(-1)[live]
    tolerance.assert_close(
        sums, np.ones_like(sums), tolerance.rounding_tolerance(w, terms=w.shape[-1])
    )
    assert (w.sum(-1)[~live] == 0.0).all()


@SETTINGS
@given(
    shape=st.tuples(st.integers(1, 3), st.integers(1, 8)),
    scale=st.sampled_from([1.0, 1e2, 1e4]),
    seed=st.integers(0, 2**16),
    dtype=st.sampled_from([np.float32, np.float64]),
)
def test_softmax_of_large_logits_stays_finite_and_normalised(shape, scale, seed, dtype) -> None:
    scores = (np.random.default_rng(seed).uniform(-1, 1, shape) * scale).astype(dtype)
    for w in (np_backend.softmax(scores), torch_backend.softmax(torch.from_numpy(scores)).numpy()):
        assert np.isfinite(w).all() and (w >= 0).all()
        np.testing.assert_allclose(w.sum(-1), 1.0, rtol=0, atol=1e-6)
        # exp is monotone, so the largest score keeps the largest weight
        top = np.take_along_axis(w, scores.argmax(-1)[:, None], -1)[:, 0]
        np.testing.assert_array_equal(top, w.max(-1))  # exact: both pick the same entry
