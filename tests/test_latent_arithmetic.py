"""The cost of latent attention by arithmetic, held to real buffers and to PyTorch's FLOP count."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from mha.backends import latent
from mha.core.kv_cache import KVCache, LatentCache
from mha.core.latent_params import init_mla_params
from mha.core.rotary import Rotary
from mha.cost import arithmetic, latent_arithmetic

D, H, DC, DR = 32, 4, 12, 4


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32, np.float64])
def test_cache_bytes_are_the_buffers_of_one_latent_cache_per_layer(dtype) -> None:
    device = "meta" if isinstance(dtype, torch.dtype) else None
    caches = [LatentCache(3, DC, DR, 50, dtype=dtype, device=device) for _ in range(5)]
    assert latent_arithmetic.latent_cache_bytes(5, 50, DC, DR, dtype, batch_size=3) == sum(
        c.nbytes for c in caches
    )


def test_deepseek_v2_caches_576_elements_per_token_and_layer() -> None:
    """The paper's figure: (Dc + Dr) l = 9/2 Dh l, as much as GQA with 2.25 groups."""
    v2 = latent_arithmetic.DEEPSEEK_V2
    assert v2.elements_per_token() == 576 and v2.equal_kv_heads() == 2.25  # exact: small ints
    per_layer = LatentCache(1, v2.d_latent, v2.d_rope, 1, dtype=torch.bfloat16, device="meta")
    assert v2.cache_bytes(1, torch.bfloat16) == v2.num_layers * per_layer.nbytes
    mha_layer = KVCache(1, v2.num_heads, v2.d_head, 1, dtype=torch.bfloat16, device="meta")
    assert mha_layer.nbytes // per_layer.nbytes == 56  # 32,768 / 576 elements, rounded down
    assert 2 * v2.num_heads * v2.d_head == 32768  # a check of the arithmetic


def _run(params, route: str, kv_len: int):
    """One cached step of a PyTorch layer, under PyTorch's FLOP counter."""
    cache = LatentCache(1, params.d_latent, params.d_rope, kv_len, dtype=torch.float64)
    filler = torch.randn(1, kv_len - 1, params.cached_width(), dtype=torch.float64)
    cache.append(filler[..., : params.d_latent], filler[..., params.d_latent :])
    x = torch.randn(1, 1, params.d_model, dtype=torch.float64)
    with FlopCounterMode(display=False) as counter:
        latent.multi_head_latent_attention(
            x, params, route=route, cache=cache, rotary=Rotary(), need_weights=False
        )
    return counter.get_total_flops()


@pytest.mark.parametrize("route", latent.ROUTES)
@pytest.mark.parametrize("d_query_latent", [None, 20])
def test_step_flops_are_what_pytorch_counts(route: str, d_query_latent) -> None:
    params = init_mla_params(D, H, DC, DR, d_query_latent=d_query_latent, seed=0).to_torch()
    counted = _run(params, route, 17)
    cost = latent_arithmetic.latent_decode_step_cost(
        D, H, D // H, DC, DR, 17, route=route, d_query_latent=d_query_latent
    )
    assert cost.flops == counted


def test_step_bytes_are_the_buffers_a_step_reads_and_writes() -> None:
    params = init_mla_params(D, H, DC, DR, d_query_latent=20, seed=0)
    S, item = 17, 4
    weights = sum(a.size for a in params.arrays().values()) * item
    cache = LatentCache(1, DC, DR, S, dtype=np.float32).nbytes  # S - 1 read, 1 written
    io = 2 * D * item  # the new token's input and output
    rebuilt = 2 * KVCache(1, H, D // H, S, dtype=np.float32).nbytes  # K and V, out and back
    for route, extra in (("absorbed", 0), ("explicit", rebuilt)):
        cost = latent_arithmetic.latent_decode_step_cost(
            D, H, D // H, DC, DR, S, route=route, d_query_latent=20, dtype=np.float32
        )
        assert cost.bytes == weights + cache + io + extra, route


def test_absorption_saves_more_the_longer_the_context() -> None:
    v2 = latent_arithmetic.DEEPSEEK_V2
    ratios = []
    for S in (1024, 4096, 32768):
        e, a = (
            latent_arithmetic.latent_decode_step_cost(
                v2.d_model,
                v2.num_heads,
                v2.d_head,
                v2.d_latent,
                v2.d_rope,
                S,
                route=route,
                d_query_latent=v2.d_query_latent,
            )
            for route in latent.ROUTES
        )
        ratios.append((e.flops / a.flops, e.bytes / a.bytes))
    assert all(x[0] < y[0] and x[1] < y[1] for x, y in zip(ratios, ratios[1:], strict=False))
    mha = arithmetic.decode_step_cost(v2.num_heads * v2.d_head, v2.num_heads, v2.num_heads, 32768)
    assert mha.bytes > a.bytes  # the absorbed step reads less than multi-head attention's


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"route": "fused"}, ValueError, "route must be one of"),
        ({"d_latent": 2 * H * 8 + 1}, ValueError, "d_latent must be at most 2 H Dh = 64"),
        ({"d_rope": -2}, ValueError, "d_rope must be at least 0"),
        ({"kv_len": 0}, ValueError, "kv_len must be positive"),
        ({"d_query_latent": 0}, ValueError, "d_query_latent must be positive"),
        ({"dtype": "half precision"}, TypeError, "dtype must be a numeric NumPy or PyTorch dtype"),
    ],
)
def test_step_cost_names_bad_arguments(kwargs, error, match) -> None:
    args = {"d_model": D, "num_heads": H, "d_head": 8, "d_latent": DC, "d_rope": DR}
    args |= {"kv_len": 9, "route": "absorbed"} | kwargs
    with pytest.raises(error, match=match):
        latent_arithmetic.latent_decode_step_cost(**args)


def test_step_times_time_both_routes_and_name_bad_arguments() -> None:
    from mha.cost import timings

    params = init_mla_params(D, H, DC, DR, seed=0).to_torch(torch.float32)
    times = timings.latent_step_times(params, 8, rounds=2, rotary=Rotary())
    assert set(times) == set(latent.ROUTES) and all(t > 0 for t in times.values())
    with pytest.raises(TypeError, match="params must be MLAParams of torch tensors"):
        timings.latent_step_times(init_mla_params(D, H, DC), 8)
    with pytest.raises(ValueError, match="kv_len must be positive"):
        timings.latent_step_times(params, 0)
