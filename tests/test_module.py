"""The nn.Module and the converters to and from torch.nn.MultiheadAttention."""

from __future__ import annotations

from itertools import product

import numpy as np
import pytest
import torch
from torch import nn

from mha import (
    MHAParams,
    MultiHeadAttention,
    from_torch_mha,
    init_params,
    to_torch_attn_mask,
    to_torch_mha,
)
from mha.backends import torch_backend
from mha.numerics import tolerance

B, L, S, D, H = 3, 5, 6, 12, 4
f64 = torch.float64


def randn(*shape: int, seed: int = 0, dtype: torch.dtype = f64) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=f64).to(dtype)


def tensors(p: MHAParams) -> dict[str, torch.Tensor | None]:
    return {n: getattr(p, n) for n in ("w_qkv", "w_o", "b_qkv", "b_o")}


@pytest.mark.parametrize(("seed", "dtype"), [(0, f64), (7, f64), (7, torch.float32)])
def test_module_with_a_seed_equals_init_params_with_that_seed(seed, dtype) -> None:
    module = MultiHeadAttention(D, H, seed=seed, dtype=dtype)
    expected = init_params(D, H, seed=seed).to_torch(dtype)
    for name, t in tensors(expected).items():
        # exact: the same seeded draw, cast once
        assert torch.equal(getattr(module, name).detach(), t), name
    assert MultiHeadAttention(D, H, seed=seed + 1, dtype=dtype).w_o.ne(module.w_o).any()


def test_module_without_a_seed_draws_from_torch_and_follows_manual_seed() -> None:
    torch.manual_seed(1)
    a, b = MultiHeadAttention(D, H), MultiHeadAttention(D, H)
    torch.manual_seed(1)
    again = MultiHeadAttention(D, H)
    assert a.w_qkv.ne(b.w_qkv).any()  # layers built one after another differ
    for name, t in tensors(a.params()).items():
        # exact: the same seed drawn from the same generator state
        assert torch.equal(getattr(again, name), t), name


def test_a_refused_module_leaves_torch_generator_alone() -> None:
    state = torch.get_rng_state()
    with pytest.raises(TypeError, match="rotary must be"):
        MultiHeadAttention(D, H, rotary="halves")
    assert torch.equal(torch.get_rng_state(), state)  # exact: the generator's bytes
    MultiHeadAttention.from_params(init_params(D, H, seed=0))
    assert torch.equal(torch.get_rng_state(), state)  # exact: the generator's bytes


def test_module_without_bias_has_no_bias_parameters() -> None:
    module = MultiHeadAttention(D, H, bias=False)
    assert module.b_qkv is None and module.b_o is None
    assert sum(p.numel() for p in module.parameters()) == 4 * D * D
    assert sum(p.numel() for p in MultiHeadAttention(D, H).parameters()) == 4 * D * D + 4 * D
    assert (module.d_model, module.d_head, module.num_heads) == (D, D // H, H)


@pytest.mark.parametrize(
    ("form", "need_weights"), list(product(["per_head", "packed"], [True, False]))
)
def test_forward_is_the_torch_backend_on_the_module_params(form: str, need_weights: bool) -> None:
    module = MultiHeadAttention(D, H, seed=1, dtype=f64)
    x, kv = randn(B, L, D), randn(B, S, D, seed=1)
    mask = torch_backend.key_padding_mask([6, 3, 1], S)
    out, w = module(x, kv, kv, mask=mask, need_weights=need_weights, form=form)
    ref, ref_w = torch_backend.multi_head_attention(
        x, kv, kv, init_params(D, H, seed=1).to_torch(), mask
    )
    torch.testing.assert_close(out, ref, rtol=0, atol=1e-12)
    assert (w is None) != need_weights
    if need_weights:
        torch.testing.assert_close(w, ref_w, rtol=0, atol=1e-12)
    # omitted key and value mean self-attention; an omitted value means value = key
    self_out, _ = module(x)
    # exact: omitted key and value make the same call
    torch.testing.assert_close(self_out, module(x, x, x)[0], rtol=0, atol=0)
    # exact: an omitted value makes the same call
    torch.testing.assert_close(module(x, kv)[0], module(x, kv, kv)[0], rtol=0, atol=0)


def test_params_share_the_module_tensors_so_gradients_reach_the_module() -> None:
    module = MultiHeadAttention(D, H, dtype=f64)
    p = module.params()
    assert p.w_qkv is module.w_qkv and p.b_o is module.b_o
    out, _ = module(randn(B, L, D))
    out.sum().backward()
    for name, param in module.named_parameters():
        assert param.grad is not None and param.grad.abs().sum() > 0, name


@pytest.mark.parametrize("bias", [True, False])
def test_from_params_copies_numpy_or_torch_params(bias: bool) -> None:
    p = init_params(D, H, bias=bias, seed=3)
    for source in (p, p.to_torch()):
        module = MultiHeadAttention.from_params(source)
        assert module.w_qkv.dtype == f64
        for name, t in tensors(module.params()).items():
            expected = getattr(p, name)
            assert (t is None) == (expected is None)
            if t is not None:
                np.testing.assert_array_equal(t.detach().numpy(), expected)  # exact: a copy
    module32 = MultiHeadAttention.from_params(p, torch.float32)
    assert module32.w_o.dtype == torch.float32
    # exact: the same values rounded to float32 once
    assert torch.equal(module32.w_o.detach(), torch.from_numpy(p.w_o).float())


@pytest.mark.parametrize("dtype", [f64, torch.float32, torch.bfloat16])
def test_module_runs_in_each_dtype(dtype: torch.dtype) -> None:
    module = MultiHeadAttention(D, H, dtype=dtype)
    out, w = module(randn(B, L, D, dtype=dtype), need_weights=True)
    assert out.dtype == dtype and w.dtype == dtype and torch.isfinite(out).all()


# ---- converters ----------------------------------------------------------------------


def torch_call(m: nn.MultiheadAttention, q, k, v, batch_first: bool, **kw):
    """Call ``m`` with batch-first tensors, transposing for a sequence-first module."""
    if not batch_first:
        q, k, v = (t.transpose(0, 1) for t in (q, k, v))
    out, w = m(q, k, v, **kw)
    return (out if batch_first else out.transpose(0, 1)), w


MASKS = ["none", "causal", "per_batch_head", "key_padding"]


@pytest.mark.parametrize(
    ("batch_first", "mask_name", "kind"),
    list(product([True, False], MASKS, ["self", "cross"])),
)
def test_to_torch_mha_gives_the_same_outputs_and_weights(batch_first, mask_name, kind) -> None:
    module = MultiHeadAttention(D, H, seed=2, dtype=f64)
    m = to_torch_mha(module, batch_first=batch_first)
    assert m.batch_first == batch_first and m.in_proj_weight.dtype == f64
    q = randn(B, L, D)
    k = q if kind == "self" else randn(B, S, D, seed=1)
    S_ = k.shape[1]
    kw: dict = {}
    mask = None
    if mask_name == "causal":
        mask = torch_backend.causal_mask(L, S_)
        kw["attn_mask"] = to_torch_attn_mask(mask, H)
    elif mask_name == "per_batch_head":
        mask = torch.rand(B, H, L, S_, generator=torch.Generator().manual_seed(3)) < 0.7
        mask[..., 0] = True  # nn.MultiheadAttention gives NaN for a fully masked row
        kw["attn_mask"] = to_torch_attn_mask(mask, H)
    elif mask_name == "key_padding":
        mask = torch_backend.key_padding_mask([S_, 2, 1], S_)  # (B, 1, 1, S), True = may attend
        kw["key_padding_mask"] = ~mask[:, 0, 0, :]  # (B, S), True = blocked
    out, w = module(q, k, k, mask=mask, need_weights=True)
    t_out, t_w = torch_call(m, q, k, k, batch_first, average_attn_weights=False, **kw)
    torch.testing.assert_close(out, t_out, rtol=0, atol=1e-12)
    torch.testing.assert_close(w, t_w, rtol=0, atol=1e-12)
    _, t_avg = torch_call(m, q, k, k, batch_first, **kw)  # averaged over heads
    torch.testing.assert_close(w.mean(1), t_avg, rtol=0, atol=1e-12)


def test_to_torch_attn_mask_expands_a_key_padding_mask_like_key_padding_mask() -> None:
    module = MultiHeadAttention(D, H, dtype=f64)
    m = to_torch_mha(module)
    x = randn(B, L, D)
    keep = torch_backend.key_padding_mask([5, 2, 3], L)  # (B, 1, 1, S)
    attn_mask = to_torch_attn_mask(keep, H, q_len=L)
    assert attn_mask.shape == (B * H, L, L)
    via_attn, _ = m(x, x, x, attn_mask=attn_mask)
    via_kpm, _ = m(x, x, x, key_padding_mask=~keep[:, 0, 0, :])
    out_tol, _ = tolerance.attention_tolerance(x, x, x, module.params(), keep)
    tolerance.assert_close(via_attn, via_kpm, out_tol)
    tolerance.assert_close(via_attn, module(x, mask=keep)[0], out_tol)


def test_the_mask_is_keyword_only_so_a_key_padding_mask_cannot_land_there_by_position() -> None:
    """``nn.MultiheadAttention``'s fourth positional argument is ``key_padding_mask`` (True =
    may not attend); ours means the opposite, so it is refused by position."""
    module = MultiHeadAttention(D, H, dtype=f64)
    x = randn(1, L, D)
    ignore = torch.zeros(1, L, dtype=torch.bool)  # (B, S): a key padding mask, True = ignore
    with pytest.raises(TypeError, match="positional"):
        module(x, x, x, ignore)


def test_to_torch_attn_mask_negates_and_lays_out_heads_batch_major() -> None:
    keep = torch.rand(2, 3, 4, 5, generator=torch.Generator().manual_seed(0)) < 0.5
    blocked = to_torch_attn_mask(keep, 3)
    assert blocked.shape == (6, 4, 5)
    for b, h in product(range(2), range(3)):
        assert torch.equal(blocked[b * 3 + h], ~keep[b, h])
    assert torch.equal(to_torch_attn_mask(keep[0, 0], 3), ~keep[0, 0])
    shared = to_torch_attn_mask(keep[:1, :1], 3, batch_size=2)  # (1, 1, L, S) -> (2 * 3, L, S)
    assert shared.shape == (6, 4, 5) and all(torch.equal(s, ~keep[0, 0]) for s in shared)
    row = to_torch_attn_mask(keep[0, 0, :1], 3, q_len=4)  # (1, S) -> (L, S)
    assert row.shape == (4, 5) and torch.equal(row[3], ~keep[0, 0, 0])


def test_torch_eval_fast_path_agrees_too() -> None:
    module = MultiHeadAttention(D, H, seed=4, dtype=f64)
    m = to_torch_mha(module).eval()
    x = randn(B, L, D)
    mask = torch_backend.causal_mask(L)
    with torch.no_grad():
        t_out, _ = m(x, x, x, attn_mask=to_torch_attn_mask(mask, H), need_weights=False)
        out, _ = module(x, mask=mask)
    torch.testing.assert_close(out, t_out, rtol=0, atol=1e-12)


@pytest.mark.parametrize(("bias", "batch_first"), list(product([True, False], [True, False])))
def test_from_torch_mha_matches_the_torch_module(bias: bool, batch_first: bool) -> None:
    torch.manual_seed(5)
    m = nn.MultiheadAttention(D, H, bias=bias, batch_first=batch_first, dtype=f64)
    if bias:  # PyTorch initialises biases to zero; make them count
        with torch.no_grad():
            m.in_proj_bias.normal_()
            m.out_proj.bias.normal_()
    module = from_torch_mha(m)
    assert (module.b_qkv is None) == (not bias)
    q, kv = randn(B, L, D), randn(B, S, D, seed=1)
    out, w = module(q, kv, kv, need_weights=True)
    t_out, t_w = torch_call(m, q, kv, kv, batch_first, average_attn_weights=False)
    torch.testing.assert_close(out, t_out, rtol=0, atol=1e-12)
    torch.testing.assert_close(w, t_w, rtol=0, atol=1e-12)


@pytest.mark.parametrize("bias", [True, False])
def test_round_trips_are_exact(bias: bool) -> None:
    module = MultiHeadAttention(D, H, bias=bias, seed=6, dtype=f64)
    back = from_torch_mha(to_torch_mha(module, batch_first=False))
    for name, t in tensors(module.params()).items():
        u = getattr(back, name)
        # exact: transposed copies
        assert (t is None and u is None) or torch.equal(t.detach(), u.detach()), name
    m = nn.MultiheadAttention(D, H, bias=bias, dtype=torch.float32)
    again = to_torch_mha(from_torch_mha(m))
    for (name, a), (_, b) in zip(m.state_dict().items(), again.state_dict().items(), strict=True):
        assert torch.equal(a, b), name  # exact: transposed copies


def test_to_torch_mha_fills_a_missing_bias_with_zeros() -> None:
    p = init_params(D, H, seed=8)
    only_in = MHAParams(p.w_qkv, p.w_o, p.b_qkv, None, H)
    m = to_torch_mha(only_in)
    assert torch.equal(m.out_proj.bias, torch.zeros(D, dtype=f64))  # exact: a zero fill
    x = randn(B, L, D)
    ours, _ = torch_backend.multi_head_attention(x, x, x, only_in.to_torch())
    torch.testing.assert_close(m(x, x, x)[0], ours, rtol=0, atol=1e-12)


def test_to_torch_mha_uses_the_packed_left_multiplied_layout() -> None:
    p = init_params(D, H, seed=9)
    m = to_torch_mha(p)
    w_qkv = torch.from_numpy(p.w_qkv)
    assert m.in_proj_weight.shape == (3 * D, D) and m.out_proj.weight.shape == (D, D)
    # exact: transposed copies
    assert torch.equal(m.in_proj_weight, w_qkv.T)  # rows [W_q^T; W_k^T; W_v^T]
    # exact: transposed copies
    assert torch.equal(m.in_proj_weight[D : 2 * D], torch.from_numpy(p.w_k).T)
    assert torch.equal(m.in_proj_bias, torch.from_numpy(p.b_qkv))  # exact: a copy
    assert torch.equal(m.out_proj.weight, torch.from_numpy(p.w_o).T)  # exact: a transposed copy
    assert torch.equal(m.out_proj.bias, torch.from_numpy(p.b_o))  # exact: a copy


def test_from_torch_mha_keeps_the_device_training_mode_and_frozen_parameters() -> None:
    m = nn.MultiheadAttention(D, H, dtype=f64).eval()
    m.in_proj_weight.requires_grad_(False)
    module = from_torch_mha(m)
    assert not module.training
    assert not module.w_qkv.requires_grad and module.w_o.requires_grad
    assert not to_torch_mha(module).training
    meta = from_torch_mha(nn.MultiheadAttention(D, H, device="meta"))
    assert meta.w_qkv.device.type == "meta"
    assert to_torch_mha(meta).in_proj_weight.device.type == "meta"
    out, _ = meta(torch.empty(B, L, D, device="meta"))
    assert out.shape == (B, L, D)


def test_to_torch_attn_mask_expands_a_mask_that_is_the_same_for_every_key() -> None:
    keep = torch.rand(2, H, L, 1, generator=torch.Generator().manual_seed(1)) < 0.5
    blocked = to_torch_attn_mask(keep, H, kv_len=S)
    assert blocked.shape == (2 * H, L, S)
    assert torch.equal(blocked, ~keep.expand(2, H, L, S).reshape(2 * H, L, S))  # exact: bools
    square = to_torch_attn_mask(torch.ones(1, 1, dtype=torch.bool), H, q_len=L, kv_len=S)
    assert square.shape == (L, S) and not square.any()
