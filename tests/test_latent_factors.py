"""Grouped-query keys and values through a latent: the SVD factors, what they keep, errors."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import mha
from mha.analysis import latent_factors, rank
from mha.backends import latent, np_backend
from mha.numerics import tolerance

D, H, H_KV = 48, 6, 2


def layer(seed: int = 0):
    return mha.init_params(D, H, num_kv_heads=H_KV, bias=False, seed=seed)


def test_energy_kept_is_the_share_of_squared_singular_values() -> None:
    params = layer()
    kept = latent_factors.energy_kept(params)
    w = latent_factors.key_value_weights(params)  # (D, 2 H_kv Dh) = (48, 32)
    s = rank.singular_values(w)
    assert kept.shape == (33,) and kept[0] == 0.0  # exact: nothing kept at width 0
    share_tol = tolerance.rounding_tolerance(np.float64, terms=32, stages=2)  # two sums
    assert np.all(np.diff(kept) >= 0) and abs(kept[-1] - 1.0) < share_tol
    assert abs(kept[10] - (s[:10] ** 2).sum() / (s**2).sum()) < share_tol


@pytest.mark.parametrize("d_latent", [1, 8, 20])
def test_the_low_rank_layer_loses_what_the_left_out_singular_values_hold(d_latent: int) -> None:
    """Eckart-Young: the rank-Dc product is off by exactly the singular values left out."""
    params = layer()
    low = latent_factors.low_rank_gqa(params, d_latent)
    w, w_low = (latent_factors.key_value_weights(p) for p in (params, low))
    s = rank.singular_values(w)
    lost = np.linalg.norm(w - w_low) ** 2
    svd_tol = tolerance.rounding_tolerance(np.float64, terms=w.size, scale=(s**2).sum(), stages=2)
    assert abs(lost - (s[d_latent:] ** 2).sum()) < svd_tol
    assert np.linalg.matrix_rank(w_low) == d_latent
    assert np.array_equal(low.w_q, params.w_q)  # exact: W^Q is kept as it was
    assert np.array_equal(low.w_o, params.w_o)  # exact: W^O too


@pytest.mark.parametrize("d_latent", [8, 32])
def test_the_latent_layer_computes_the_low_rank_layer(d_latent: int) -> None:
    params = layer(1)
    x = np.random.default_rng(2).standard_normal((2, 7, D))
    mask = np_backend.causal_mask(7)
    mla = latent_factors.latent_from_gqa(params, d_latent)
    assert (mla.d_latent, mla.d_rope, mla.d_head, mla.num_heads) == (d_latent, 0, D // H, H)
    low, _ = np_backend.multi_head_attention(
        x, x, x, latent_factors.low_rank_gqa(params, d_latent), mask
    )
    out_tol, _ = tolerance.latent_tolerance(x, mla, mask)
    for route in latent.ROUTES:
        out, _ = latent.multi_head_latent_attention(x, mla, mask, route=route)
        assert tolerance.is_close(out, low, out_tol), route
    full, _ = np_backend.multi_head_attention(x, x, x, params, mask)
    assert (tolerance.max_abs_diff(low, full) > 10 * out_tol.max()) == (d_latent < 32)


def test_each_query_head_reads_its_key_value_heads_up_projection() -> None:
    mla = latent_factors.latent_from_gqa(layer(), 12)
    Dh = D // H
    heads = mla.w_uk.reshape(12, H, Dh)  # (Dc, H, Dh)
    for h in range(H):  # G = 3 query heads per key/value head
        group_first = (h // 3) * 3
        assert np.array_equal(heads[:, h], heads[:, group_first])  # exact: repeated columns
    assert not np.allclose(heads[:, 0], heads[:, 3])


def test_torch_layers_give_torch_factors_of_their_dtype() -> None:
    params = layer().to_torch(torch.float32)
    mla = latent_factors.latent_from_gqa(params, 8)
    low = latent_factors.low_rank_gqa(params, 8)
    assert isinstance(mla.w_dkv, torch.Tensor) and mla.dtype == torch.float32
    assert isinstance(low.w_qkv, torch.Tensor) and low.dtype == torch.float32


@pytest.mark.parametrize(
    ("params", "d_latent", "error", "match"),
    [
        (mha.init_params(D, H, num_kv_heads=H_KV), 8, ValueError, "params must have no biases"),
        (layer(), 33, ValueError, r"d_latent must be at most min\(D, 2 H_kv Dh\) = 32"),
        (layer(), 0, ValueError, "d_latent must be positive"),
        (layer(), 8.0, TypeError, "d_latent must be an int"),
        ("layer", 8, TypeError, "params must be MHAParams; got str"),
    ],
)
def test_conversion_names_what_it_refuses(params, d_latent, error, match) -> None:
    for convert in (latent_factors.latent_from_gqa, latent_factors.low_rank_gqa):
        with pytest.raises(error, match=match):
            convert(params, d_latent)


def test_latent_tolerance_names_what_it_refuses() -> None:
    mla = latent_factors.latent_from_gqa(layer(), 8)
    x = np.zeros((1, 3, D))
    with pytest.raises(TypeError, match="params must be MLAParams; got MHAParams"):
        tolerance.latent_tolerance(x, layer())
    with pytest.raises(TypeError, match="params must have the input's dtype float32"):
        tolerance.latent_tolerance(x.astype(np.float32), mla)
    with pytest.raises(TypeError, match="x must be a floating array or tensor"):
        tolerance.latent_tolerance(np.zeros((1, 3, D), int), mla)
