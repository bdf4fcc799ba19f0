"""What only the PyTorch backend has: PyTorch's kernels and modules, autograd, torch.func, bfloat16.

Also meta tensors and traced graphs, the explicit path without autograd and its CPU shortcuts,
the switch of the value checks, and the private names read under ``torch.func``. What both
backends share runs in both, in ``test_backends.py``.
"""

from __future__ import annotations

import importlib
import math
import warnings
from itertools import product

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention.bias import (
    CausalBias,
    CausalVariant,
    causal_lower_right,
    causal_upper_left,
)

import mha
from mha import init_params, to_torch_attn_mask, to_torch_mha
from mha.backends import cpu_shortcuts, np_backend, torch_backend, torch_checks
from mha.numerics import backward, tolerance

FORMS = ("per_head", "fused", "packed")
B, L, S, D, H = 2, 5, 7, 12, 3
f64 = torch.float64


def randn(*shape: int, seed: int = 0, dtype: torch.dtype = f64) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=f64).to(dtype)


def reference_mha(q_in, k_in, v_in, p, mask=None):
    """Multi-head attention written out head by head with plain torch ops (no package code)."""
    Dh = p.d_model // p.num_heads

    def lin(x, w, b):
        return x @ w + (0.0 if b is None else b)

    q, k, v = lin(q_in, p.w_q, p.b_q), lin(k_in, p.w_k, p.b_k), lin(v_in, p.w_v, p.b_v)
    outs, weights = [], []
    for h in range(p.num_heads):
        c = slice(h * Dh, (h + 1) * Dh)
        s = q[..., c] @ k[..., c].transpose(-1, -2) / math.sqrt(Dh)  # (B, L, S)
        if mask is not None:
            keep = mask.expand(q.shape[0], p.num_heads, *s.shape[1:])[:, h]
            e = torch.where(keep, (s - s.masked_fill(~keep, -1e300).amax(-1, True)).exp(), 0.0)
        else:
            e = (s - s.amax(-1, True)).exp()
        tot = e.sum(-1, keepdim=True)
        w = e / torch.where(tot > 0, tot, 1.0)
        weights.append(w)
        outs.append(w @ v[..., c])
    return lin(torch.cat(outs, -1), p.w_o, p.b_o), torch.stack(weights, 1)


def masks_for(batch: int, heads: int, q_len: int, kv_len: int) -> dict[str, torch.Tensor | None]:
    """One mask of each broadcastable shape; "B,H,L,S" has a fully masked row."""
    g = torch.Generator().manual_seed(42)
    full = torch.rand(batch, heads, q_len, kv_len, generator=g) < 0.6
    full[0, 1, 0] = False
    return {
        "none": None,
        "L,S": torch_backend.causal_mask(q_len, kv_len),
        "B,1,1,S": torch_backend.key_padding_mask([kv_len - 2, 1], kv_len),
        "1,H,L,S": torch.rand(1, heads, q_len, kv_len, generator=g) < 0.5,
        "B,H,L,S": full,
        "S": torch.arange(kv_len) % 3 != 1,
    }


def inputs(kind: str, seed: int = 0, dtype: torch.dtype = f64):
    x = randn(B, L, D, seed=seed, dtype=dtype)
    if kind == "self":
        return x, x, x
    kv = randn(B, S, D, seed=seed + 1, dtype=dtype)
    return x, kv, kv


# ---- softmax and scaled dot-product attention ----------------------------------------


@pytest.mark.parametrize("dtype", [torch.bfloat16])  # float32 and float64: test_backends.py
def test_softmax_of_huge_logits_is_finite_and_normalised(dtype: torch.dtype) -> None:
    scores = (torch.rand(4, 6, generator=torch.Generator().manual_seed(0)) * 2e4 - 1e4).to(dtype)
    w = torch_backend.softmax(scores)
    assert w.dtype == dtype and torch.isfinite(w).all()
    # bfloat16 keeps 8 significant bits: a sum of 6 rounded weights is within 6 * 2^-9 of 1
    tol = 6 * 2**-9 if dtype == torch.bfloat16 else 1e-6
    torch.testing.assert_close(w.double().sum(-1), torch.ones(4, dtype=f64), rtol=0, atol=tol)


def test_scaled_dot_product_attention_matches_torch_sdpa_with_masks() -> None:
    q, k, v = randn(2, 3, 5, 4, seed=0), randn(2, 3, 6, 4, seed=1), randn(2, 3, 6, 4, seed=2)
    for mask in masks_for(2, 3, 5, 6).values():
        out, w = torch_backend.scaled_dot_product_attention(q, k, v, mask)
        sdpa_mask = mask if mask is None or mask.ndim > 1 else mask.expand(5, 6)  # SDPA: >= 2-D
        expected = F.scaled_dot_product_attention(q, k, v, attn_mask=sdpa_mask)
        torch.testing.assert_close(out, expected, rtol=0, atol=1e-12)
        tolerance.assert_close(w @ v, out, tolerance.matmul_tolerance(w, v))


def test_fully_masked_row_is_zero_in_both_backends_and_in_torch_sdpa() -> None:
    q, k, v = randn(1, 2, 4, 3, seed=0), randn(1, 2, 6, 3, seed=1), randn(1, 2, 6, 3, seed=2)
    mask = torch.ones(4, 6, dtype=torch.bool)
    mask[2] = False
    out, w = torch_backend.scaled_dot_product_attention(q, k, v, mask)
    sdpa = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    out_np, w_np = np_backend.scaled_dot_product_attention(
        q.numpy(), k.numpy(), v.numpy(), mask.numpy()
    )
    assert (w[..., 2, :] == 0).all() and (out[..., 2, :] == 0).all()
    assert (sdpa[..., 2, :] == 0).all()
    # exact: fully masked rows are set to zero
    np.testing.assert_array_equal(w_np[..., 2, :], w[..., 2, :].numpy())
    # exact: fully masked rows are set to zero
    np.testing.assert_array_equal(out_np[..., 2, :], out[..., 2, :].numpy())


SHAPES_LS = [(1, 1), (3, 3), (2, 5), (5, 2), (1, 7), (7, 1)]


@pytest.mark.parametrize(("L_", "S_"), SHAPES_LS)
def test_causal_mask_alignments_equal_pytorchs_causal_biases(L_: int, S_: int) -> None:
    with warnings.catch_warnings():  # PyTorch warns that lower-right with L > S gives NaN rows
        warnings.simplefilter("ignore", UserWarning)
        lower_right = causal_lower_right(L_, S_)._materialize()
    assert torch.equal(
        torch_backend.causal_mask(L_, S_, align="top_left"),
        causal_upper_left(L_, S_)._materialize(),
    )
    assert torch.equal(torch_backend.causal_mask(L_, S_, align="bottom_right"), lower_right)


@pytest.mark.parametrize(("L_", "S_"), SHAPES_LS)
def test_top_left_is_the_alignment_of_is_causal(L_: int, S_: int) -> None:
    """``scaled_dot_product_attention(is_causal=True)`` is documented as top-left aligned."""
    q, k, v = randn(2, H, L_, 4, seed=1), randn(2, H, S_, 4, seed=2), randn(2, H, S_, 4, seed=3)
    expected = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    out, _ = torch_backend.scaled_dot_product_attention(q, k, v, torch_backend.causal_mask(L_, S_))
    torch.testing.assert_close(out, expected, rtol=0, atol=1e-12)


@pytest.mark.parametrize(("L_", "S_"), [(1, 7), (2, 5), (3, 3)])
def test_bottom_right_equals_pytorchs_lower_right_bias_in_attention(L_: int, S_: int) -> None:
    q, k, v = randn(2, H, L_, 4, seed=1), randn(2, H, S_, 4, seed=2), randn(2, H, S_, 4, seed=3)
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=causal_lower_right(L_, S_))
    out, _ = torch_backend.scaled_dot_product_attention(
        q, k, v, torch_backend.causal_mask(L_, S_, align="bottom_right")
    )
    torch.testing.assert_close(out, expected, rtol=0, atol=1e-12)


# ---- multi-head attention: the three forms -------------------------------------------

CASES = list(product(["self", "cross"], [True, False], list(masks_for(B, H, L, S))))


@pytest.mark.parametrize(("form", "need_weights"), list(product(FORMS, [True, False])))
def test_gradients_through_a_fully_masked_row_are_finite(form: str, need_weights: bool) -> None:
    x = randn(B, L, D).requires_grad_()
    p = init_params(D, H).to_torch().map(lambda a: a.requires_grad_())
    mask = torch_backend.causal_mask(L).clone()
    mask[2] = False  # query 2 attends to nothing
    out, w = torch_backend.multi_head_attention(
        x, x, x, p, mask, form=form, need_weights=need_weights
    )
    # the masked row's output is the constant b_o, so its gradient is exactly zero
    (g_row,) = torch.autograd.grad(out[:, 2].sum(), x, retain_graph=True)
    # exact: the row is the constant b_o, so each term of its gradient has a zero factor
    assert torch.equal(g_row, torch.zeros_like(x))
    loss = out.square().sum() + (0 if w is None else w.square().sum())
    loss.backward()
    for name, t in [("x", x), ("w_qkv", p.w_qkv), ("w_o", p.w_o), ("b_qkv", p.b_qkv)]:
        assert torch.isfinite(t.grad).all(), name
        assert t.grad.abs().sum() > 0, name


# ---- dtypes --------------------------------------------------------------------------


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize(("form", "need_weights"), list(product(FORMS, [True, False])))
def test_bfloat16_is_close_to_a_float64_reference(form: str, need_weights: bool, causal) -> None:
    bf = torch.bfloat16
    p = init_params(32, 4, seed=1).to_torch(bf)
    x = randn(2, 9, 32, seed=1, dtype=bf)
    mask = torch_backend.causal_mask(9)
    out, w = torch_backend.multi_head_attention(  # causal: the flag instead of the mask
        x, x, x, p, None if causal else mask, causal=causal, form=form, need_weights=need_weights
    )
    assert out.dtype == bf and (w is None or w.dtype == bf)
    # The reference runs in float64 on the same bf16-rounded inputs and weights, so only
    # arithmetic rounding differs. bf16 keeps 8 significant bits (unit roundoff u = 2^-8)
    # and the result is rounded at about four stages (projection, attention, merge, output
    # projection), so we allow 4u of the output's largest magnitude (measured: under 1.5u).
    ref, ref_w = torch_backend.multi_head_attention(
        x.double(), x.double(), x.double(), p.map(torch.Tensor.double), mask
    )
    tol = 4 * 2**-8 * ref.abs().max().item()
    torch.testing.assert_close(out.double(), ref, rtol=0, atol=tol)
    if w is not None:
        torch.testing.assert_close(w.double(), ref_w, rtol=0, atol=4 * 2**-8)


def test_float32_attention_with_scores_up_to_1e4_is_finite() -> None:
    q = torch.full((1, 3, 4), 50.0)  # q.k / sqrt(4) = 5000
    q[0, 1] *= -2  # scores of -1e4
    k = torch.full((1, 5, 4), 50.0)
    k[0, 0] = 0.0
    v = randn(1, 5, 4, dtype=torch.float32)
    out, w = torch_backend.scaled_dot_product_attention(q, k, v)
    assert torch.isfinite(out).all() and torch.isfinite(w).all()
    torch.testing.assert_close(w.sum(-1), torch.ones(1, 3), rtol=0, atol=1e-6)
    # exact: exp(-1e4) is 0 in float64, so the weights are one-hot
    assert torch.equal(w[0, 1], torch.tensor([1.0, 0, 0, 0, 0]))
    fast = F.scaled_dot_product_attention(q, k, v)
    torch.testing.assert_close(out, fast, rtol=0, atol=1e-5)


# ---- LayerNorm and the residual block ------------------------------------------------


def test_layer_norm_matches_torch_layer_norm_and_a_hand_computation() -> None:
    x = randn(B, L, D)
    ln = torch.nn.LayerNorm(D, eps=1e-6, dtype=f64)
    with torch.no_grad():
        ln.weight.copy_(randn(D, seed=1))
        ln.bias.copy_(randn(D, seed=2))
    out = torch_backend.layer_norm(x, ln.weight, ln.bias, eps=1e-6)
    # mean, variance and the affine map, each a sum over D terms, in two implementations
    scale = out.abs().max().item() + ln.bias.abs().max().item()
    tolerance.assert_close(
        out, ln(x), tolerance.rounding_tolerance(f64, terms=D, scale=scale, stages=3)
    )
    y = torch.tensor([[1.0, 2.0, 3.0, 6.0]], dtype=f64)
    by_hand = (y - 3.0) / math.sqrt((4 + 1 + 0 + 9) / 4 + 1e-5)
    tol = tolerance.rounding_tolerance(f64, terms=4, scale=by_hand.abs().max().item(), stages=3)
    tolerance.assert_close(torch_backend.layer_norm(y), by_hand, tol)


@pytest.mark.parametrize("form", FORMS)
def test_attention_block_is_torch_layer_norm_of_x_plus_multi_head(form: str) -> None:
    x = randn(B, L, D)
    p = init_params(D, H).to_torch()
    ln = torch.nn.LayerNorm(D, dtype=f64)
    with torch.no_grad():
        ln.weight.copy_(randn(D, seed=1))
        ln.bias.copy_(randn(D, seed=2))
    mask = torch_backend.causal_mask(L)
    out, w = torch_backend.attention_block(
        x, p, mask, ln_weight=ln.weight, ln_bias=ln.bias, form=form
    )
    attn, ref_w = reference_mha(x, x, x, p, mask)
    torch.testing.assert_close(out, ln(x + attn), rtol=0, atol=1e-12)
    torch.testing.assert_close(w, ref_w, rtol=0, atol=1e-12)
    out_np, _ = np_backend.attention_block(
        x.numpy(),
        p.to_numpy(),
        mask.numpy(),
        ln_weight=ln.weight.detach().numpy(),
        ln_bias=ln.bias.detach().numpy(),
        form=form,
    )
    np.testing.assert_allclose(out.detach().numpy(), out_np, rtol=0, atol=1e-12)


@pytest.mark.parametrize("form", FORMS)
def test_pre_norm_block_is_x_plus_torch_multihead_attention_of_torch_layer_norm(form: str) -> None:
    x = randn(B, L, D)
    params = init_params(D, H)
    p = params.to_torch()
    ln = torch.nn.LayerNorm(D, dtype=f64)
    with torch.no_grad():
        ln.weight.copy_(randn(D, seed=1))
        ln.bias.copy_(randn(D, seed=2))
        mask = torch_backend.causal_mask(L)
        out, w = torch_backend.attention_block(
            x, p, mask, ln_weight=ln.weight, ln_bias=ln.bias, form=form, norm_first=True
        )
        normed = ln(x)
        attn, _ = to_torch_mha(params)(
            normed, normed, normed, attn_mask=to_torch_attn_mask(mask, H), need_weights=False
        )
    torch.testing.assert_close(out, x + attn, rtol=0, atol=1e-12)
    out_np, w_np = np_backend.attention_block(
        x.numpy(),
        params,
        mask.numpy(),
        ln_weight=ln.weight.detach().numpy(),
        ln_bias=ln.bias.detach().numpy(),
        form=form,
        norm_first=True,
    )
    np.testing.assert_allclose(out.numpy(), out_np, rtol=0, atol=1e-12)
    np.testing.assert_allclose(w.numpy(), w_np, rtol=0, atol=1e-12)


# ---- the explicit path without autograd ----------------------------------------------


@pytest.mark.parametrize("mask_name", list(masks_for(B, H, L, S)))
def test_attention_without_autograd_equals_the_recorded_computation(mask_name: str) -> None:
    # Heads split from a projection are strided views, as in multi_head_attention.
    q = torch_backend.split_heads(randn(B, L, D, seed=0), H)
    k, v = torch_backend.split_heads(randn(B, S, 2 * D, seed=1), 2 * H).split(H, dim=1)
    mask = masks_for(B, H, L, S)[mask_name]
    kept = [t.clone() for t in (q, k, v)]
    recorded = [t.clone().requires_grad_() for t in (q, k, v)]
    out_g, w_g = torch_backend.scaled_dot_product_attention(*recorded, mask)
    assert out_g.requires_grad and w_g.requires_grad
    with torch.no_grad():
        out, w = torch_backend.scaled_dot_product_attention(q, k, v, mask)
    # two routes (contiguous copies and buffers, or not): scores of 4 products, then the
    # softmax, then a weighted sum of 7 values
    scale = 2 * q.abs().max().item() * k.abs().max().item() * 4
    tol_w = tolerance.rounding_tolerance(f64, terms=7, scale=scale, stages=2)
    tol_out = tolerance.rounding_tolerance(
        f64, terms=7, scale=scale * v.abs().max().item(), stages=3
    )
    tolerance.assert_close(w, w_g.detach(), tol_w)
    tolerance.assert_close(out, out_g.detach(), tol_out)
    for t, before in zip((q, k, v), kept, strict=True):
        # exact: the inputs are left unchanged
        assert torch.equal(t, before)  # the inputs are not overwritten
    if mask_name == "B,H,L,S":
        assert (w[0, 1, 0] == 0).all() and (out[0, 1, 0] == 0).all()
    assert not w.isnan().any()


@pytest.mark.parametrize("form", FORMS)
def test_weights_in_inference_mode_equal_the_weights_with_autograd(form: str) -> None:
    q, k, v = inputs("cross")
    mask = masks_for(B, H, L, S)["B,H,L,S"]
    p = init_params(D, H, seed=2).to_torch()
    p_g = p.map(lambda a: a.clone().requires_grad_())
    out_g, w_g = torch_backend.multi_head_attention(q, k, v, p_g, mask, form=form)
    assert w_g.requires_grad
    with torch.inference_mode():
        out, w = torch_backend.multi_head_attention(q, k, v, p, mask, form=form)
    out_tol, w_tol = tolerance.attention_tolerance(q, k, v, p, mask)
    tolerance.assert_close(out, out_g.detach(), out_tol)
    tolerance.assert_close(w, w_g.detach(), w_tol)
    assert (w[0, 1, 0] == 0).all()


# ---- the causal flag: SDPA's causal kernel -------------------------------------------


class _SpySDPA:
    """``torch.nn.functional`` as the backend sees it, recording each SDPA call's options."""

    def __init__(self) -> None:
        self.calls: list[dict] = []

    def __getattr__(self, name: str):
        return getattr(F, name)

    def scaled_dot_product_attention(self, q, k, v, attn_mask=None, **kw):
        self.calls.append({"attn_mask": attn_mask, "L": q.shape[-2], **kw})
        return F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, **kw)


@pytest.mark.parametrize(
    ("L_", "S_", "align", "kernel"),
    [
        (5, 5, "top_left", "is_causal"),
        (5, 5, "bottom_right", "is_causal"),  # L = S: the same diagonal
        (3, 7, "top_left", "is_causal"),
        (3, 7, "bottom_right", "lower_right"),
        (7, 3, "bottom_right", "is_causal"),  # on the last 3 queries; the first 4 see nothing
        (1, 7, "bottom_right", "no mask"),  # a decoding step sees every key
    ],
)
@pytest.mark.parametrize("num_kv_heads", [H, 1])
def test_the_causal_fast_path_runs_sdpa_causal_kernel_without_a_mask_tensor(
    monkeypatch, L_: int, S_: int, align: str, kernel: str, num_kv_heads: int
) -> None:
    spy = _SpySDPA()
    monkeypatch.setattr(torch_backend, "F", spy)
    p = init_params(D, H, num_kv_heads=num_kv_heads, seed=2).to_torch()
    x, kv = randn(B, L_, D, seed=3), randn(B, S_, D, seed=4)
    for form in ("fused", "packed"):
        spy.calls.clear()
        out, _ = torch_backend.multi_head_attention(
            x, kv, kv, p, causal=True, align=align, form=form, need_weights=False
        )
        (call,) = spy.calls
        bias = call["attn_mask"]
        if kernel == "is_causal":
            assert call.get("is_causal") is True and bias is None
            assert call["L"] == min(L_, S_)
        elif kernel == "lower_right":
            assert isinstance(bias, CausalBias) and bias.variant == CausalVariant.LOWER_RIGHT
        else:
            assert bias is None and not call.get("is_causal", False)
        keep = torch_backend.causal_mask(L_, S_, align=align)
        ref, _ = torch_backend.multi_head_attention(x, kv, kv, p, keep, form=form)
        tolerance.assert_close(out, ref, tolerance.attention_tolerance(x, kv, kv, p, keep)[0])


class _NaNRowsSDPA(_SpySDPA):
    """SDPA as a fused GPU kernel may behave: NaN in every row whose mask allows no key."""

    def scaled_dot_product_attention(self, q, k, v, attn_mask=None, **kw):
        out = super().scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, **kw)
        if not isinstance(attn_mask, torch.Tensor):
            return out
        empty = ~attn_mask.any(dim=-1, keepdim=True)  # (..., L, 1)
        self.calls[-1]["empty_rows"] = int(empty.expand(*out.shape[:-1], 1).sum())
        return torch.where(empty, math.nan, out)


def _padded_left(lengths: list[int], kv_len: int) -> torch.Tensor:
    """``(B, 1, 1, S)``: sequence b's last ``lengths[b]`` positions are real, the rest padding."""
    return torch.stack([torch.arange(kv_len) >= kv_len - n for n in lengths])[:, None, None]


@pytest.mark.parametrize(
    ("L_", "S_", "mask", "causal"),
    [
        (5, 5, _padded_left([5, 3], 5), True),  # left padding: the first two queries see nothing
        (1, 7, _padded_left([7, 0], 7), False),  # a decoding step over an empty sequence
        (4, 6, torch.arange(4)[:, None] != 2, False),  # (L, 1): query 2 sees nothing
        (3, 6, torch.zeros(6, dtype=torch.bool), False),  # (S,): no key at all
    ],
)
@pytest.mark.parametrize("num_kv_heads", [H, 1])
def test_the_fast_path_zeroes_fully_masked_rows_whatever_sdpa_returns_there(
    monkeypatch, L_: int, S_: int, mask: torch.Tensor, causal: bool, num_kv_heads: int
) -> None:
    p = init_params(D, H, num_kv_heads=num_kv_heads, bias=False, seed=2).to_torch()
    x, kv = randn(B, L_, D, seed=3), randn(B, S_, D, seed=4)
    keep = mask & torch_backend.causal_mask(L_, S_) if causal else mask
    empty = ~keep.expand(B, 1, L_, S_).any(dim=-1)[:, 0]  # (B, L): the same in every head
    assert empty.any() and not empty.all() or not keep.any()
    for form in ("fused", "packed"):
        plain, _ = torch_backend.multi_head_attention(
            x, kv, kv, p, mask, causal=causal, form=form, need_weights=False
        )
        spy = _NaNRowsSDPA()
        monkeypatch.setattr(torch_backend, "F", spy)
        out, _ = torch_backend.multi_head_attention(
            x, kv, kv, p, mask, causal=causal, form=form, need_weights=False
        )
        monkeypatch.undo()
        assert sum(call.get("empty_rows", 0) for call in spy.calls) > 0  # NaN rows were returned
        assert (out[empty] == 0).all()  # exact: the rows are set to zero, not computed
        # exact: the same kernel on the same inputs gives the other rows
        assert torch.equal(out[~empty], plain[~empty])


@pytest.mark.parametrize("align", ["top_left", "bottom_right"])
@pytest.mark.parametrize(("L_", "S_"), [(5, 5), (3, 7), (7, 3)])
def test_gradients_through_the_causal_kernel_equal_those_through_the_causal_mask(
    align: str, L_: int, S_: int
) -> None:
    p = init_params(D, H, seed=2)
    x, kv = randn(B, L_, D, seed=3), randn(B, S_, D, seed=4)
    keep = np_backend.causal_mask(L_, S_, align=align)
    out, saved = backward.multi_head_attention_forward(x.numpy(), kv.numpy(), kv.numpy(), p, keep)
    tol = tolerance.gradient_tolerance(saved, np.ones_like(out))  # d(sum out) / d out = 1

    def grads(**flags) -> list[torch.Tensor]:
        leaves = [x.clone().requires_grad_(), kv.clone().requires_grad_()]
        pt = p.to_torch().map(lambda a: a.requires_grad_())
        q_in, kv_in = leaves
        out, _ = torch_backend.multi_head_attention(
            q_in, kv_in, kv_in, pt, form="packed", need_weights=False, **flags
        )
        out.sum().backward()
        return [q_in.grad, kv_in.grad, pt.w_qkv.grad, pt.w_o.grad]

    by_flag = grads(causal=True, align=align)
    by_mask = grads(mask=torch.from_numpy(keep))
    bounds = {"query": tol.d_query, "kv": tol.d_key + tol.d_value}
    bounds |= {"w_qkv": tol.d_params.w_qkv, "w_o": tol.d_params.w_o}
    for (name, t), a, b in zip(bounds.items(), by_flag, by_mask, strict=True):
        tolerance.assert_close(a, b, t, name=name)


def test_the_module_takes_the_causal_flag_forward_and_backward() -> None:
    m = mha.MultiHeadAttention(D, H, dtype=f64, seed=3)
    x = randn(B, L, D, seed=5)
    out = m(x, causal=True)[0]
    out.sum().backward()
    by_flag = {name: t.grad.clone() for name, t in m.named_parameters()}
    m.zero_grad()
    ref = m(x, mask=torch_backend.causal_mask(L))[0]
    ref.sum().backward()
    keep = np_backend.causal_mask(L)
    tolerance.assert_close(out, ref, tolerance.attention_tolerance(x, x, x, m.params(), keep)[0])
    _, saved = backward.multi_head_attention_forward(
        x.numpy(), x.numpy(), x.numpy(), m.params().to_numpy(), keep
    )
    tol = tolerance.gradient_tolerance(saved, np.ones((B, L, D))).d_params
    for name, t in m.named_parameters():
        tolerance.assert_close(by_flag[name], t.grad, getattr(tol, name), name=name)


# ---- finiteness checks ---------------------------------------------------------------


@pytest.mark.parametrize("shortcuts", [True, False])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_a_single_non_finite_entry_anywhere_is_rejected(
    dtype: torch.dtype, bad: float, shortcuts: bool
) -> None:
    p = init_params(4, 2, seed=0).to_torch(dtype)
    with cpu_shortcuts.use(shortcuts):
        _check_non_finite_entries_are_rejected(p, dtype, bad)


def _check_non_finite_entries_are_rejected(p, dtype: torch.dtype, bad: float) -> None:
    for pos in range(8):
        # a strided view (a column block), and a tensor that requires grad
        x = randn(2, 8, 3 * 4, seed=pos, dtype=dtype)[..., 4:8]
        x[1, pos, pos % 4] = bad
        with pytest.raises(ValueError, match="query must be finite; got NaN or infinite values"):
            torch_backend.multi_head_attention(x, x, x, p)
        w_o = p.w_o.clone()
        w_o.view(-1)[2 * pos] = bad
        bad_p = type(p)(p.w_qkv, w_o.requires_grad_(), p.b_qkv, p.b_o, p.num_heads)
        x = randn(2, 8, 4, seed=pos, dtype=dtype)
        with pytest.raises(ValueError, match="params.w_o must be finite; got NaN or infinite"):
            torch_backend.multi_head_attention(x, x, x, bad_p)
    with torch.inference_mode():
        out, _ = torch_backend.multi_head_attention(x, x, x, p)  # finite inputs pass
    assert torch.isfinite(out).all()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("mask_name", ["none", "S", "B,H,L,S"])
def test_attention_without_autograd_broadcasts_batches_and_returns_fresh_weights(
    dtype: torch.dtype, mask_name: str
) -> None:
    q = randn(2, 1, 5, 4, seed=0, dtype=dtype)
    k, v = randn(1, 3, 7, 4, seed=1, dtype=dtype), randn(1, 3, 7, 6, seed=2, dtype=dtype)
    mask = masks_for(2, 3, 5, 7)[mask_name]
    recorded = [t.clone().requires_grad_() for t in (q, k, v)]
    out_g, w_g = torch_backend.scaled_dot_product_attention(*recorded, mask)
    with torch.no_grad():
        out, w = torch_backend.scaled_dot_product_attention(q, k, v, mask)
        out2, w2 = torch_backend.scaled_dot_product_attention(q, k, v, mask)
    assert out.shape == (2, 3, 5, 6) and w.shape == (2, 3, 5, 7) and w.dtype == dtype
    tol = 1e-6 if dtype == torch.float32 else 1e-14
    torch.testing.assert_close(out, out_g.detach(), rtol=0, atol=tol)
    torch.testing.assert_close(w, w_g.detach(), rtol=0, atol=tol)
    assert w.data_ptr() != w2.data_ptr()  # each call returns its own weights
    kept = w.clone()
    w2.zero_()
    assert torch.equal(w, kept)  # exact: ... so writing one leaves the other as it was


# ---- the in-place softmax of the path without autograd -------------------------------

LOW_AND_FULL = [torch.float16, torch.bfloat16, torch.float32, torch.float64]


@pytest.mark.parametrize("dtype", LOW_AND_FULL)
@pytest.mark.parametrize("mask_name", list(masks_for(B, H, L, S)))
def test_in_place_softmax_equals_the_recorded_softmax_exactly(
    dtype: torch.dtype, mask_name: str
) -> None:
    scores = randn(B, H, L, S, seed=3, dtype=dtype) * 4
    mask = masks_for(B, H, L, S)[mask_name]
    kept = None if mask is None else mask.clone()
    expected = torch_backend._softmax(scores, mask)  # the recording path's softmax, out of place
    buffer = scores.clone()
    weights = cpu_shortcuts.softmax_in_place(buffer, mask)
    assert weights.data_ptr() == buffer.data_ptr()  # written over the scores
    # exact: the same softmax kernel on the same values
    assert weights.dtype == dtype and torch.equal(weights, expected)
    assert mask is None or torch.equal(mask, kept)  # the mask is read, never written
    if mask_name == "B,H,L,S":
        assert (weights[0, 1, 0] == 0).all()  # a fully masked row is all zeros
    assert not weights.isnan().any()


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("mask_name", list(masks_for(B, H, L, S)))
def test_attention_without_autograd_leaves_inputs_alone_and_returns_its_scores_buffer(
    dtype: torch.dtype, mask_name: str
) -> None:
    q = torch_backend.split_heads(randn(B, L, D, seed=0, dtype=dtype), H)
    k, v = torch_backend.split_heads(randn(B, S, 2 * D, seed=1, dtype=dtype), 2 * H).split(H, dim=1)
    mask = masks_for(B, H, L, S)[mask_name]
    kept = [None if t is None else t.clone() for t in (q, k, v, mask)]
    with torch.no_grad():
        out, w = torch_backend.scaled_dot_product_attention(q, k, v, mask)
        q_scaled = (q * (1.0 / math.sqrt(D // H))).contiguous()
        scores = q_scaled @ k.contiguous().transpose(-1, -2)
    assert w.dtype == dtype and w.is_contiguous()
    # The softmax of the same scores, to rounding: the buffers of the fast path may take
    # another matmul kernel, and a weight moves by at most twice the largest score change.
    score_bound = tolerance.matmul_tolerance(q_scaled, k.transpose(-1, -2)).max()
    bound = 2 * score_bound + tolerance.unit_roundoff(dtype)
    tolerance.assert_close(w, torch_backend._softmax(scores, mask), bound, name="weights")
    for t, before in zip((q, k, v, mask), kept, strict=True):
        assert t is None or torch.equal(t, before)  # exact: the inputs are left unchanged
    if mask_name == "B,H,L,S":
        assert (w[0, 1, 0] == 0).all() and (out[0, 1, 0] == 0).all()


# ---- the CPU shortcuts and the plain path --------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, f64])
@pytest.mark.parametrize(("form", "mask_name"), list(product(FORMS, ["none", "S", "B,H,L,S"])))
def test_plain_path_gives_the_shortcut_paths_results_to_rounding(form, mask_name, dtype) -> None:
    q, k, v = inputs("cross", dtype=dtype)
    mask = masks_for(B, H, L, S)[mask_name]
    p = init_params(D, H, seed=4).to_torch(dtype)
    with torch.inference_mode():
        out, w = torch_backend.multi_head_attention(q, k, v, p, mask, form=form)
        with cpu_shortcuts.use(False):
            out_plain, w_plain = torch_backend.multi_head_attention(q, k, v, p, mask, form=form)
    out_tol, w_tol = tolerance.attention_tolerance(q, k, v, p, mask)
    tolerance.assert_close(out, out_plain, out_tol)
    tolerance.assert_close(w, w_plain, w_tol)


def test_cpu_shortcuts_decide_which_path_runs(monkeypatch) -> None:
    buffers = []
    real_buffer = cpu_shortcuts._empty
    monkeypatch.setattr(cpu_shortcuts, "_empty", lambda *a: buffers.append(1) or real_buffer(*a))
    x = randn(B, L, D, dtype=torch.float32)
    p = init_params(D, H).to_torch(torch.float32)
    with torch.inference_mode(), cpu_shortcuts.use(False):
        torch_backend.multi_head_attention(x, x, x, p)
    assert buffers == []
    with torch.inference_mode():
        torch_backend.multi_head_attention(x, x, x, p)
    assert buffers == [1]
    x_g = x.clone().requires_grad_()
    torch_backend.multi_head_attention(x_g, x_g, x_g, p)  # autograd records: plain path
    assert buffers == [1]
    with torch.inference_mode():  # torch.func's vmap wraps the tensors: plain path
        torch.func.vmap(lambda a: torch_backend.multi_head_attention(a, a, a, p)[0])(x[:, None])
    assert buffers == [1]


@pytest.mark.parametrize(("dtype", "by_numpy"), [(torch.float32, True), (torch.bfloat16, False)])
def test_float_tensors_on_the_cpu_are_read_by_numpy(monkeypatch, dtype, by_numpy) -> None:
    """A float32/float64 CPU tensor is reduced through a NumPy view; others by aminmax."""
    reads = []
    aminmax = torch.aminmax
    monkeypatch.setattr(torch, "aminmax", lambda *a, **k: reads.append(1) or aminmax(*a, **k))
    x = randn(B, L, D, dtype=dtype)
    assert torch_checks.TENSORS.max_abs(x) == x.abs().max().item()  # exact: the largest entry
    assert reads == ([] if by_numpy else [1])
    x[1, 2, 3] = math.nan
    assert torch_checks.TENSORS.max_abs(x) == math.inf


def test_cpu_shortcuts_restore_the_setting_and_take_a_bool() -> None:
    assert cpu_shortcuts._SHORTCUTS.get() is True
    with cpu_shortcuts.use(False):
        assert cpu_shortcuts._SHORTCUTS.get() is False
        with cpu_shortcuts.use(True):
            assert cpu_shortcuts._SHORTCUTS.get() is True
        assert cpu_shortcuts._SHORTCUTS.get() is False
    assert cpu_shortcuts._SHORTCUTS.get() is True
    with pytest.raises(TypeError, match="enabled must be a bool; got int 0"):
        cpu_shortcuts.use(0).__enter__()


# ---- the edges of the contract: meta tensors, torch.func, views, empty batches -------------


@pytest.mark.parametrize(("form", "need_weights"), list(product(FORMS, [True, False])))
def test_meta_tensors_give_shapes_without_values(form: str, need_weights: bool) -> None:
    p = init_params(D, H).to_torch(device="meta")
    q = torch.empty(B, L, D, dtype=f64, device="meta")
    kv = torch.empty(B, S, D, dtype=f64, device="meta")
    mask = torch_backend.causal_mask(L, S, device="meta")
    out, w = torch_backend.multi_head_attention(
        q, kv, kv, p, mask, form=form, need_weights=need_weights
    )
    assert out.device.type == "meta" and out.shape == (B, L, D)
    assert (w is None) != need_weights
    if need_weights:
        assert w.shape == (B, H, L, S)
    assert torch_backend.layer_norm(q).shape == (B, L, D)


def test_a_meta_module_infers_shapes() -> None:
    m = mha.MultiHeadAttention(D, H, device="meta")
    out, _ = m(torch.empty(B, L, D, device="meta"))
    assert out.shape == (B, L, D) and out.device.type == "meta"


@pytest.mark.parametrize(("form", "need_weights"), list(product(FORMS, [True, False])))
def test_vmap_over_the_batch_equals_a_loop(form: str, need_weights: bool) -> None:
    p = init_params(D, H, seed=1).to_torch()
    x = randn(4, B, L, D)
    mask = torch_backend.causal_mask(L)

    def layer(a: torch.Tensor) -> torch.Tensor:
        return torch_backend.multi_head_attention(
            a, a, a, p, mask, form=form, need_weights=need_weights
        )[0]

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # PyTorch: SDPA has no batching rule
        mapped = torch.func.vmap(layer)(x)
    looped = torch.stack([layer(a) for a in x])
    out_tol, _ = tolerance.attention_tolerance(x[0], x[0], x[0], p, mask)
    for i in range(len(x)):
        tolerance.assert_close(mapped[i], looped[i], out_tol)


def test_vmap_checks_every_mapped_slice() -> None:
    p = init_params(D, H).to_torch()
    x = randn(3, B, L, D)
    x[2, 0, 0, 0] = math.nan  # only the last slice is bad
    with pytest.raises(ValueError, match="query must be finite; got NaN or infinite values"):
        torch.func.vmap(lambda a: torch_backend.multi_head_attention(a, a, a, p)[0])(x)


@pytest.mark.parametrize(("form", "need_weights"), list(product(FORMS, [True, False])))
def test_torch_func_grad_equals_autograd(form: str, need_weights: bool) -> None:
    p = init_params(D, H, seed=2)
    x = randn(B, L, D, seed=3)

    def loss(a: torch.Tensor) -> torch.Tensor:
        out = torch_backend.multi_head_attention(
            a, a, a, p.to_torch(), form=form, need_weights=need_weights
        )[0]
        return (out**2).sum()

    by_func = torch.func.grad(loss)(x)
    x_g = x.clone().requires_grad_()
    (by_autograd,) = torch.autograd.grad(loss(x_g), x_g)
    out, saved = backward.multi_head_attention_forward(x.numpy(), x.numpy(), x.numpy(), p)
    tol = tolerance.gradient_tolerance(saved, 2 * out)  # d(sum out^2) / d out = 2 out
    tolerance.assert_close(by_func, by_autograd, tol.d_query + tol.d_key + tol.d_value)


def test_torch_func_grad_reaches_the_modules_parameters() -> None:
    m = mha.MultiHeadAttention(D, H, dtype=f64)
    x = randn(B, L, D)
    params = {name: t.detach() for name, t in m.named_parameters()}
    grads = torch.func.grad(lambda ps: torch.func.functional_call(m, ps, (x,))[0].sum())(params)
    (m(x)[0].sum()).backward()
    out, saved = backward.multi_head_attention_forward(
        x.numpy(), x.numpy(), x.numpy(), m.params().to_numpy()
    )
    tol = tolerance.gradient_tolerance(saved, np.ones_like(out)).d_params
    for name, t in m.named_parameters():
        tolerance.assert_close(grads[name], t.grad, getattr(tol, name), name=name)


def test_negative_views_are_read_through() -> None:
    z = torch.complex(randn(B, L, D), randn(B, L, D, seed=1))
    x = z.conj().imag  # a real tensor with the negative bit set
    assert x.is_neg()
    p = init_params(D, H).to_torch()
    out, w = torch_backend.multi_head_attention(x, x, x, p)
    plain = x.resolve_neg()
    ref, ref_w = torch_backend.multi_head_attention(plain, plain, plain, p)
    out_tol, w_tol = tolerance.attention_tolerance(plain, plain, plain, p)
    tolerance.assert_close(out, ref, out_tol)
    tolerance.assert_close(w, ref_w, w_tol)
    with pytest.raises(ValueError, match="query must be finite"):
        bad = torch.complex(randn(B, L, D), torch.full((B, L, D), math.inf, dtype=f64))
        torch_backend.multi_head_attention(bad.conj().imag, x, x, p)


@pytest.mark.parametrize("mask_shape", [(3, 5), (1, 3, 5), (2, 1, 5), (2, 3, 5)])
@pytest.mark.parametrize("requires_grad", [False, True])
def test_a_value_batch_larger_than_the_query_batch_gives_one_answer(
    mask_shape: tuple[int, ...], requires_grad: bool
) -> None:
    g = torch.Generator().manual_seed(0)
    q = torch.randn(1, 3, 4, generator=g, dtype=f64).requires_grad_(requires_grad)
    k = torch.randn(1, 5, 4, generator=g, dtype=f64)
    v = torch.randn(2, 5, 4, generator=g, dtype=f64)
    mask = torch.rand(mask_shape, generator=g) < 0.7
    out, w = torch_backend.scaled_dot_product_attention(q, k, v, mask)
    out_np, w_np = np_backend.scaled_dot_product_attention(
        *(t.detach().numpy() for t in (q, k, v)), mask.numpy()
    )
    assert out.shape == out_np.shape == (2, 3, 4)
    assert w.shape == w_np.shape == torch.broadcast_shapes((1, 3, 5), mask_shape)
    tolerance.assert_close(out, out_np, tolerance.rounding_tolerance(f64, terms=5, stages=4))
    tolerance.assert_close(w, w_np, tolerance.rounding_tolerance(f64, terms=5, stages=3))


def test_double_backward_needs_the_explicit_path() -> None:
    """Documented: PyTorch's CPU SDPA kernel behind the fast path has no double backward."""
    p = init_params(4, 2, seed=5).to_torch().map(lambda t: t.requires_grad_())
    x = randn(1, 3, 4, seed=6).requires_grad_()
    mask = torch_backend.causal_mask(3)

    def layer(a, w_qkv, w_o, b_qkv, b_o, need_weights):
        params = mha.MHAParams(w_qkv, w_o, b_qkv, b_o, 2)
        return torch_backend.multi_head_attention(a, a, a, params, mask, need_weights=need_weights)[
            0
        ]

    arrays = (x, p.w_qkv, p.w_o, p.b_qkv, p.b_o)
    assert torch.autograd.gradgradcheck(lambda *a: layer(*a, True), arrays)
    out = layer(*arrays, False)
    (g,) = torch.autograd.grad(out.pow(2).sum(), x, create_graph=True)
    with pytest.raises(RuntimeError, match="derivative for .* is not implemented"):
        g.sum().backward()


# ---- the switch for the checks that read values ---------------------------------------------


def _huge_and_nan() -> tuple[mha.MHAParams, torch.Tensor, torch.Tensor]:
    """float32 parameters, an input whose scores overflow, and an input holding NaN."""
    params = init_params(D, H, seed=0).to_torch(torch.float32)
    huge = 1e20 * torch.ones(1, 3, D)
    nan = torch.randn(1, 3, D)
    nan[0, 1, 2] = math.nan
    return params, huge, nan


def test_value_checks_refuse_overflow_and_nan_by_default_and_skip_them_when_off() -> None:
    params, huge, nan = _huge_and_nan()
    call = torch_backend.multi_head_attention
    with pytest.raises(ValueError, match="multi_head_attention output overflowed torch.float32"):
        call(huge, huge, huge, params)
    with pytest.raises(ValueError, match="query must be finite; got NaN or infinite values"):
        call(nan, nan, nan, params)
    with torch_checks.value_checks(False):
        out, _ = call(huge, huge, huge, params)  # accepted: PyTorch's answer, unchecked
        assert out.shape == huge.shape
        out, weights = call(nan, nan, nan, params)
        assert torch.isnan(out).any() and torch.isnan(weights).any()
        with pytest.raises(ValueError, match="form must be one of"):  # options are still checked
            call(nan, nan, nan, params, form="flash")
        with pytest.raises(TypeError, match="must have a floating dtype"):  # and dtypes
            call(nan.long(), nan.long(), nan.long(), params)
        inner, _ = torch_backend.scaled_dot_product_attention(nan, nan, nan)
        assert torch.isnan(inner).any()
        assert torch.isnan(torch_backend.softmax(nan)).any()
        assert torch.isnan(torch_backend.layer_norm(nan)).any()


def test_value_checks_off_read_no_values(monkeypatch: pytest.MonkeyPatch) -> None:
    """The checks' reductions do not run: no synchronisation."""
    params, _, _ = _huge_and_nan()
    x = torch.randn(2, 5, D)
    reads = []
    read = torch_checks._extremes_max_abs
    monkeypatch.setattr(torch_checks, "_extremes_max_abs", lambda t: reads.append(1) or read(t))
    checked, _ = torch_backend.multi_head_attention(x, x, x, params)
    arrays = [getattr(params, name) for name in ("w_qkv", "w_o", "b_qkv", "b_o")]
    assert len(reads) == 1 + sum(a is not None for a in arrays)  # x once, each parameter
    reads.clear()
    with torch_checks.value_checks(False):
        unchecked, _ = torch_backend.multi_head_attention(x, x, x, params)
        torch_backend.layer_norm(x)
    assert reads == []
    assert torch.equal(checked, unchecked)  # exact: the checks only read, the same code computes


def test_value_checks_are_restored_after_the_block_even_on_an_exception() -> None:
    params, _, nan = _huge_and_nan()
    with pytest.raises(RuntimeError, match="inside the block"), torch_checks.value_checks(False):
        torch_backend.multi_head_attention(nan, nan, nan, params)  # accepted: checks off
        raise RuntimeError("inside the block")
    with pytest.raises(ValueError, match="query must be finite"):
        torch_backend.multi_head_attention(nan, nan, nan, params)
    with (
        torch_checks.value_checks(False),
        torch_checks.value_checks(True),  # the inner block wins
        pytest.raises(ValueError, match="query must be finite"),
    ):
        torch_backend.multi_head_attention(nan, nan, nan, params)


def test_value_checks_apply_to_the_thread_that_switched_them() -> None:
    from concurrent.futures import ThreadPoolExecutor

    params, _, nan = _huge_and_nan()

    def refused() -> bool:
        try:
            torch_backend.multi_head_attention(nan, nan, nan, params)
        except ValueError:
            return True
        return False

    with torch_checks.value_checks(False), ThreadPoolExecutor(1) as pool:
        assert not refused()
        assert pool.submit(refused).result()  # another thread keeps the default: on


def test_value_checks_take_a_bool() -> None:
    with (
        pytest.raises(TypeError, match="enabled must be a bool; got"),
        torch_checks.value_checks(0),
    ):
        pass


# ---- the private PyTorch names behind torch.func support -----------------------------------


def test_the_private_torch_func_names_the_backend_reads_exist_and_work() -> None:
    """Fails (never skips), naming each missing name, if a PyTorch version removes one."""
    internals = torch_checks.functorch_internals()  # ImportError names what is missing
    assert torch_checks._functorch() is not None
    seen = []

    def look(row: torch.Tensor) -> torch.Tensor:
        with internals.disable():
            plain = internals.unwrap(row)
            seen.append((internals.level() is not None, internals.is_wrapped(row), plain.shape))
        return row

    torch.func.vmap(look)(torch.ones(2, 3))
    assert seen == [(True, True, (2, 3))]  # inside vmap: a wrapped row, every row's values
    assert internals.level() is None and not internals.is_wrapped(torch.ones(3))


MEASURE_PRIVATE_NAMES = (  # the private PyTorch names mha.cost.measure uses
    "torch.utils._python_dispatch.TorchDispatchMode",
    "torch.ops.aten._scaled_dot_product_flash_attention_for_cpu",
)


def test_the_private_torch_names_cost_measure_uses_exist() -> None:
    """Fails (never skips), naming each missing name, if a PyTorch version removes one."""
    missing = []
    for path in MEASURE_PRIVATE_NAMES:
        module, _, name = path.rpartition(".")
        try:
            aten = module == "torch.ops.aten"
            owner = torch.ops.aten if aten else importlib.import_module(module)
            getattr(owner, name)
        except (ImportError, AttributeError, RuntimeError):
            missing.append(path)
    assert not missing, f"torch {torch.__version__} lacks what mha.cost.measure uses: {missing}"


def test_a_missing_private_torch_func_name_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(torch._C._functorch, "get_unwrapped")
    with pytest.raises(
        ImportError,
        match=r"lacks the private torch.func names .*: torch\._C\._functorch\.get_unwrapped$",
    ):
        torch_checks.functorch_internals()


def test_the_default_path_reads_no_private_torch_names(monkeypatch: pytest.MonkeyPatch) -> None:
    """Only a tensor that torch.func wraps is read through torch._C._functorch."""
    looked_up = []
    real = torch_checks._functorch

    def functorch():
        looked_up.append(1)
        return real()

    monkeypatch.setattr(torch_checks, "_functorch", functorch)
    p = init_params(D, H).to_torch()
    x = randn(B, L, D)
    for need_weights in (True, False):
        torch_backend.multi_head_attention(x, x, x, p, need_weights=need_weights)
        torch_backend.layer_norm(x * 1e18)  # the variance's pass over the rows too
    with torch.inference_mode():
        torch_backend.multi_head_attention(
            x.float(), x.float(), x.float(), p.to_torch(torch.float32)
        )
    assert looked_up == []
    torch.func.vmap(lambda a: torch_backend.multi_head_attention(a, a, a, p)[0])(x[:, None])
    assert looked_up  # under vmap the wrapped values are read through them


class _Layer(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.params = init_params(D, H, seed=1).to_torch(torch.float32)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch_backend.multi_head_attention(x, x, x, self.params, form="packed")[1]


def test_a_graph_is_traced_with_the_checks_and_shortcuts_on() -> None:
    """torch.export traces tensors without values: the value checks and the CPU shortcuts
    step aside by themselves, and the graph computes the weights of the plain path."""
    x = randn(B, L, D, dtype=torch.float32)
    with torch.no_grad():  # no autograd: outside a trace, the CPU shortcuts would run
        length = torch.export.Dim("L", min=2, max=64)  # a graph for every length, as in ONNX
        program = torch.export.export(_Layer(), (x,), dynamic_shapes=({1: length},))
        weights = program.module()(x)
        expected = _Layer()(x)
    tolerance.assert_close(
        weights, expected, tolerance.attention_tolerance(x, x, x, _Layer().params)[1]
    )
    with pytest.raises(ValueError, match="query must be finite"):  # outside the trace: checked
        _Layer()(x.clone().fill_(math.nan))
