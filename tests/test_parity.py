"""Parity over many seeded random configurations.

NumPy against PyTorch, and both against ``torch.nn.functional.scaled_dot_product_attention``
and ``torch.nn.MultiheadAttention`` (through the converters): random batch sizes, lengths,
head counts and widths, self and cross attention, with and without biases, with every mask
shape. float64 must agree to 1e-10 and float32 to 1e-5. With autograd recording, the
PyTorch backend's output and gradients are held to those through PyTorch's attention too.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from mha import init_params, to_torch_attn_mask, to_torch_mha
from mha.backends import np_backend, torch_backend

FORMS = ("per_head", "fused", "packed")
MASK_KINDS = ("none", "causal", "key_padding", "L,S", "1,H,L,S", "B,H,L,S", "S")
TOL = {np.float64: 1e-10, np.float32: 1e-5}
N_CONFIGS = 48
# Random (L, S) masks are meant as (L, S); when B = L some look like key padding and warn.
pytestmark = pytest.mark.filterwarnings("ignore::mha.core.mask_rules.AmbiguousMaskWarning")


@dataclass(frozen=True)
class Config:
    seed: int
    batch_size: int
    q_len: int
    kv_len: int
    num_heads: int
    d_head: int
    cross: bool
    bias: bool
    mask_kind: str
    form: str

    @property
    def d_model(self) -> int:
        return self.num_heads * self.d_head

    def __str__(self) -> str:
        kind = "cross" if self.cross else "self"
        return (
            f"s{self.seed}-B{self.batch_size}-L{self.q_len}-S{self.kv_len}-H{self.num_heads}"
            f"-Dh{self.d_head}-{kind}-{'bias' if self.bias else 'nobias'}-{self.mask_kind}"
            f"-{self.form}"
        )


def make_config(seed: int) -> Config:
    g = np.random.default_rng(1000 + seed)
    cross = bool(g.integers(2))
    q_len = int(g.integers(1, 8))
    return Config(
        seed=seed,
        batch_size=int(g.integers(1, 4)),
        q_len=q_len,
        kv_len=int(g.integers(1, 9)) if cross else q_len,
        num_heads=int(g.choice([1, 2, 3, 4, 6])),
        d_head=int(g.integers(1, 6)),
        cross=cross,
        bias=bool(g.integers(2)),
        mask_kind=MASK_KINDS[seed % len(MASK_KINDS)],  # every kind, evenly
        form=FORMS[seed % len(FORMS)],
    )


CONFIGS = [make_config(i) for i in range(N_CONFIGS)]


def make_case(c: Config, dtype=np.float64):
    """NumPy query, key, value, params and keep-mask (None or bool) for a configuration."""
    g = np.random.default_rng(c.seed)
    B, L, S, D, H = c.batch_size, c.q_len, c.kv_len, c.d_model, c.num_heads
    q = g.standard_normal((B, L, D))
    kv = g.standard_normal((B, S, D)) if c.cross else q
    mask = {
        "none": None,
        "causal": np_backend.causal_mask(L, S),
        "key_padding": np_backend.key_padding_mask(g.integers(0, S + 1, B), S),
        "L,S": g.random((L, S)) < 0.6,
        "1,H,L,S": g.random((1, H, L, S)) < 0.6,
        "B,H,L,S": g.random((B, H, L, S)) < 0.6,
        "S": g.random(S) < 0.6,
    }[c.mask_kind]
    p = init_params(D, H, bias=c.bias, seed=c.seed, dtype=dtype)
    q = q.astype(dtype)
    kv = kv.astype(dtype) if c.cross else q  # self-attention: one array for all three
    return q, kv, kv, p, mask


def full_mask(mask, c: Config) -> np.ndarray:
    shape = (c.batch_size, c.num_heads, c.q_len, c.kv_len)
    return np.ones(shape, bool) if mask is None else np.broadcast_to(mask, shape)


def tt(*arrays):
    """Torch views of NumPy arrays; the same array gives the same tensor (self-attention)."""
    seen: dict[int, torch.Tensor] = {}
    out = []
    for a in arrays:
        if a is not None and id(a) not in seen:
            seen[id(a)] = torch.from_numpy(np.ascontiguousarray(a))
        out.append(None if a is None else seen[id(a)])
    return out


def test_configurations_cover_every_mask_form_and_both_attention_kinds() -> None:
    assert {c.mask_kind for c in CONFIGS} == set(MASK_KINDS)
    assert {c.form for c in CONFIGS} == set(FORMS)
    assert {c.cross for c in CONFIGS} == {True, False} and {c.bias for c in CONFIGS} == {
        True,
        False,
    }
    assert {c.num_heads for c in CONFIGS} >= {1, 2, 3, 4, 6}
    assert any(not full_mask(make_case(c)[4], c).any(-1).all() for c in CONFIGS)  # empty rows


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("c", CONFIGS, ids=str)
def test_numpy_and_torch_agree(c: Config, dtype) -> None:
    q, k, v, p, mask = make_case(c, dtype)
    out_np, w_np = np_backend.multi_head_attention(q, k, v, p, mask, form=c.form)
    tq, tk, tv, tmask = tt(q, k, v, mask)
    assert c.cross or (tq is tk and tk is tv)  # self-attention stays self-attention
    out_t, w_t = torch_backend.multi_head_attention(tq, tk, tv, p.to_torch(), tmask, form=c.form)
    np.testing.assert_allclose(out_t.numpy(), out_np, rtol=0, atol=TOL[dtype])
    np.testing.assert_allclose(w_t.numpy(), w_np, rtol=0, atol=TOL[dtype])
    fast, _ = torch_backend.multi_head_attention(
        tq, tk, tv, p.to_torch(), tmask, form=c.form, need_weights=False
    )
    np.testing.assert_allclose(fast.numpy(), out_np, rtol=0, atol=TOL[dtype])
    if dtype == np.float32:  # float32 results are also within 1e-5 of float64 ones
        ref, _ = np_backend.multi_head_attention(*make_case(c)[:4], mask, form=c.form)
        np.testing.assert_allclose(out_np, ref, rtol=0, atol=1e-5)


def sdpa_layer(tq, tk, tv, t, mask, c: Config) -> tuple[torch.Tensor, list, torch.Tensor]:
    """The layer assembled from PyTorch's ``scaled_dot_product_attention`` on our projections
    (autograd records it): its output ``(B, L, D)``, the heads it attended with (q, k and v,
    ``(B, H, L|S, Dh)``) and SDPA's result ``(B, H, L, Dh)``."""
    lin = lambda x, w, b: x @ w + (0 if b is None else b)  # noqa: E731
    heads = [
        torch_backend.split_heads(lin(x, w, b), c.num_heads)
        for x, w, b in ((tq, t.w_q, t.b_q), (tk, t.w_k, t.b_k), (tv, t.w_v, t.b_v))
    ]
    attn_mask = None if mask is None else torch.from_numpy(full_mask(mask, c).copy())
    sdpa = F.scaled_dot_product_attention(*heads, attn_mask=attn_mask)  # (B, H, L, Dh)
    return lin(torch_backend.merge_heads(sdpa), t.w_o, t.b_o), heads, sdpa


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("c", CONFIGS, ids=str)
def test_both_backends_agree_with_torch_sdpa(c: Config, dtype) -> None:
    """MHA assembled from torch's SDPA on our projections, fully masked rows included."""
    q, k, v, p, mask = make_case(c, dtype)
    t = p.to_torch()
    tq, tk, tv = tt(q, k, v)
    layer, heads, sdpa = sdpa_layer(tq, tk, tv, t, mask, c)
    expected = layer.numpy()
    out_np, _ = np_backend.multi_head_attention(q, k, v, p, mask, form=c.form)
    np.testing.assert_allclose(out_np, expected, rtol=0, atol=TOL[dtype])
    for need_weights in (True, False):
        out_t, _ = torch_backend.multi_head_attention(
            tq, tk, tv, t, *tt(mask), form=c.form, need_weights=need_weights
        )
        np.testing.assert_allclose(out_t.numpy(), expected, rtol=0, atol=TOL[dtype])
    # and our scaled_dot_product_attention on the same per-head tensors
    out_h, _ = np_backend.scaled_dot_product_attention(*(h.numpy() for h in heads), mask)
    np.testing.assert_allclose(out_h, sdpa.numpy(), rtol=0, atol=TOL[dtype])


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("c", CONFIGS, ids=str)
def test_both_backends_agree_with_torch_multihead_attention(c: Config, dtype) -> None:
    """nn.MultiheadAttention on the converted weights and mask (rows it can attend from).

    PyTorch's module returns NaN for a query row with nothing to attend to, where this
    package returns zero weights (output ``b_o``); those rows are compared elsewhere.
    """
    q, k, v, p, mask = make_case(c, dtype)
    keep = full_mask(mask, c)
    live = keep.any(-1).all(1)  # (B, L): rows that attend to something in every head
    batch_first = c.seed % 2 == 0
    m = to_torch_mha(p, batch_first=batch_first)
    tq, tk, tv = tt(q, k, v)
    if not batch_first:
        tq, tk, tv = (x.transpose(0, 1) for x in (tq, tk, tv))
    attn_mask = None
    if mask is not None:
        attn_mask = to_torch_attn_mask(torch.from_numpy(keep.copy()), c.num_heads)
    with torch.no_grad():
        out_m, w_m = m(tq, tk, tv, attn_mask=attn_mask, average_attn_weights=False)
    if not batch_first:
        out_m = out_m.transpose(0, 1)
    out_np, w_np = np_backend.multi_head_attention(q, k, v, p, mask, form=c.form)
    out_t, w_t = torch_backend.multi_head_attention(
        *tt(q, k, v), p.to_torch(), *tt(mask), form=c.form
    )
    for out, w in ((out_np, w_np), (out_t.numpy(), w_t.numpy())):
        np.testing.assert_allclose(out[live], out_m.numpy()[live], rtol=0, atol=TOL[dtype])
        np.testing.assert_allclose(
            w.transpose(0, 2, 1, 3)[live],
            w_m.numpy().transpose(0, 2, 1, 3)[live],
            rtol=0,
            atol=TOL[dtype],
        )


@pytest.mark.parametrize("c", CONFIGS, ids=str)
def test_torch_backend_with_autograd_agrees_with_torch_sdpa_and_its_gradients(c: Config) -> None:
    """When autograd records, the PyTorch backend takes its explicit path (no CPU shortcut):
    its output and the gradients of the inputs and weights agree with those through PyTorch's
    own attention, in float64, with and without weights."""
    q, k, v, p, mask = make_case(c)
    cotangent = torch.from_numpy(np.random.default_rng(c.seed).standard_normal(q.shape))
    for need_weights in (True, False):
        grads = []
        for ours in (True, False):
            fresh: dict[int, torch.Tensor] = {}  # one leaf per distinct input, as tt gives
            tq, tk, tv = (fresh.setdefault(id(x), x.clone().requires_grad_()) for x in tt(q, k, v))
            t = p.to_torch().map(lambda w: w.clone().requires_grad_())
            if ours:
                out, _ = torch_backend.multi_head_attention(
                    tq, tk, tv, t, *tt(mask), form=c.form, need_weights=need_weights
                )
            else:
                out = sdpa_layer(tq, tk, tv, t, mask, c)[0]
            weights = (t.w_qkv, t.w_o, t.b_qkv, t.b_o)  # the layer's leaves; w_q... are views
            leaves = [x for x in (tq, tk, tv, *weights) if x is not None]
            (out * cotangent).sum().backward()
            grads.append([out.detach().numpy()] + [x.grad.numpy() for x in dict.fromkeys(leaves)])
        for a, b in zip(*grads, strict=True):
            np.testing.assert_allclose(a, b, rtol=0, atol=TOL[np.float64])
