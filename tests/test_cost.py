"""Tests of mha.cost: the FLOP, matmul-call and memory models, checked against measurements."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

import mha
from mha.backends import torch_backend
from mha.cost import arithmetic, measure

# (B, L, S, D, H): self- and cross-attention, one head and many, Dh = 1 included.
SHAPES = [(1, 4, 4, 8, 1), (2, 5, 7, 16, 4), (1, 9, 9, 8, 8), (2, 3, 11, 24, 6)]


def _inputs(B, L, S, D):
    gen = torch.Generator().manual_seed(0)
    query = torch.randn(B, L, D, generator=gen, dtype=torch.float64)
    kv = query if S == L else torch.randn(B, S, D, generator=gen, dtype=torch.float64)
    return query, kv


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("need_weights", [True, False])
@pytest.mark.parametrize("form", ["per_head", "fused", "packed"])
@pytest.mark.parametrize(("B", "L", "S", "D", "H"), SHAPES)
def test_matmul_flops_equal_flop_counter_mode_for_every_form(
    B, L, S, D, H, form, need_weights, bias
):
    params = mha.init_params(D, H, bias=bias, seed=0).to_torch()
    query, kv = _inputs(B, L, S, D)
    counted = measure.count_flops(
        lambda: torch_backend.multi_head_attention(
            query, kv, kv, params, form=form, need_weights=need_weights
        )
    )
    assert sum(counted.values()) == arithmetic.attention_flops(B, L, S, D, H, bias=bias).matmul


@pytest.mark.parametrize(("B", "L", "S", "D", "H"), SHAPES)
def test_matmul_flops_equal_flop_counter_mode_for_torch_multihead_attention(B, L, S, D, H):
    module = mha.to_torch_mha(mha.init_params(D, H, seed=0))  # training mode: no fast path
    query, kv = _inputs(B, L, S, D)
    counted = measure.count_flops(lambda: module(query, kv, kv))
    assert sum(counted.values()) == arithmetic.attention_flops(B, L, S, D, H).matmul


@pytest.mark.parametrize(("B", "L", "S", "D", "H"), SHAPES)
def test_flops_of_each_stage_equal_flop_counter_mode_of_that_stage(B, L, S, D, H):
    params = mha.init_params(D, H, bias=False, seed=0).to_torch()
    query, kv = _inputs(B, L, S, D)
    model = arithmetic.attention_flops(B, L, S, D, H, bias=False)
    q = torch_backend.split_heads(query @ params.w_q, H)
    k = torch_backend.split_heads(kv @ params.w_k, H)
    weights = torch.softmax(q @ k.transpose(-1, -2), dim=-1)
    v = torch_backend.split_heads(kv @ params.w_v, H)
    merged = torch_backend.merge_heads(weights @ v)  # (B, L, D)
    stages = {
        "q_proj": lambda: query @ params.w_q,
        "k_proj": lambda: kv @ params.w_k,
        "v_proj": lambda: kv @ params.w_v,
        "scores": lambda: q @ k.transpose(-1, -2),
        "weighted_sum": lambda: weights @ v,
        "out_proj": lambda: merged @ params.w_o,
    }
    for name, fn in stages.items():
        assert sum(measure.count_flops(fn).values()) == getattr(model, name), name


@pytest.mark.parametrize(("H", "G"), [(4, 1), (4, 2), (8, 4), (6, 3)])
def test_grouped_query_flops_equal_flop_counter_mode(H, G):
    B, L, S, Dh = 2, 5, 7, 3
    D = H * Dh
    gen = torch.Generator().manual_seed(1)
    x_kv = torch.randn(B, S, D, generator=gen)
    w_k = torch.randn(D, G * Dh, generator=gen)
    q = torch.randn(B, H, L, Dh, generator=gen)
    k, v = torch.randn(B, G, S, Dh, generator=gen), torch.randn(B, G, S, Dh, generator=gen)
    model = arithmetic.attention_flops(B, L, S, D, H, num_kv_heads=G)
    full = arithmetic.attention_flops(B, L, S, D, H)
    assert sum(measure.count_flops(lambda: x_kv @ w_k).values()) == model.k_proj
    sdpa = measure.count_flops(lambda: F.scaled_dot_product_attention(q, k, v, enable_gqa=True))
    assert sum(sdpa.values()) == model.attention == full.attention
    assert model.q_proj == full.q_proj and model.out_proj == full.out_proj
    assert full.k_proj == (H // G) * model.k_proj


@pytest.mark.parametrize("form", ["per_head", "fused", "packed"])
@pytest.mark.parametrize(("H", "G"), [(4, 1), (6, 3)])
def test_grouped_query_flops_of_every_form_equal_flop_counter_mode(H, G, form):
    """The per-head loop projects each query head's key and value block for the head itself
    (H projections of width Dh); the other forms project the H_kv key/value heads once."""
    B, L, S, D = 2, 3, 5, 2 * H
    params = mha.init_params(D, H, num_kv_heads=G, seed=0).to_torch()
    query, kv = _inputs(B, L, S, D)
    counted = measure.count_flops(
        lambda: torch_backend.multi_head_attention(query, kv, kv, params, form=form)
    )
    model = arithmetic.attention_flops(B, L, S, D, H, num_kv_heads=G, form=form)
    assert sum(counted.values()) == model.matmul


@given(
    st.integers(1, 3),
    st.integers(1, 40),
    st.integers(1, 40),
    st.sampled_from([(8, 1), (8, 2), (8, 8), (12, 4), (16, 4)]),
)
@settings(max_examples=60, deadline=None)
def test_matmul_flops_do_not_depend_on_the_number_of_heads_but_softmax_does(B, L, S, dh):
    D, H = dh
    multi = arithmetic.attention_flops(B, L, S, D, H)
    single = arithmetic.attention_flops(B, L, S, D, 1)
    assert multi.matmul == single.matmul
    assert multi.bias == single.bias
    assert multi.softmax == H * single.softmax and multi.scale == H * single.scale


@given(st.integers(1, 300), st.integers(1, 64))
@settings(max_examples=80, deadline=None)
def test_attention_flops_overtake_projection_flops_exactly_past_twice_d_model(N, D):
    flops = arithmetic.attention_flops(1, N, N, D, 1, bias=False)
    linear = flops.projections + flops.out_proj  # 8 N D^2
    assert linear == 8 * N * D * D and flops.attention == 4 * N * N * D
    assert np.sign(flops.attention - linear) == np.sign(N - 2 * D)


@given(st.integers(1, 4), st.integers(1, 20), st.integers(1, 20), st.integers(1, 4))
@settings(max_examples=40, deadline=None)
def test_elementwise_counts_follow_their_definitions(B, L, S, H):
    D = 2 * H
    with_bias = arithmetic.attention_flops(B, L, S, D, H)
    without = arithmetic.attention_flops(B, L, S, D, H, bias=False)
    longer = arithmetic.attention_flops(B, L, S + 1, D, H, bias=False)
    assert without.bias == 0 and with_bias.bias == 2 * B * L * D + 2 * B * S * D
    assert longer.softmax - without.softmax == 5 * B * H * L  # 5 more operations per row
    assert without.scale == B * H * L * S
    totals = with_bias.as_dict()
    assert totals["total"] == totals["matmul"] + totals["elementwise"]
    assert totals["matmul"] == sum(
        totals[k] for k in ("q_proj", "k_proj", "v_proj", "scores", "weighted_sum", "out_proj")
    )
    assert totals["elementwise"] == totals["bias"] + totals["scale"] + totals["softmax"]


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"batch_size": 0}, ValueError, "batch_size must be positive; got batch_size=0"),
        ({"q_len": 2.0}, TypeError, "q_len must be an int; got float 2.0"),
        ({"kv_len": -1}, ValueError, "kv_len must be positive; got kv_len=-1"),
        ({"num_heads": 3}, ValueError, "num_heads must divide d_model; got d_model=8"),
        ({"num_kv_heads": 3}, ValueError, "num_kv_heads must divide num_heads; got num_heads=4"),
        ({"num_kv_heads": 0}, ValueError, "num_kv_heads must be positive"),
    ],
)
def test_attention_flops_rejects_bad_sizes(kwargs, error, match):
    args = {"batch_size": 1, "q_len": 2, "kv_len": 2, "d_model": 8, "num_heads": 4} | kwargs
    with pytest.raises(error, match=match):
        arithmetic.attention_flops(**args)


@pytest.mark.parametrize("H", [1, 2, 4])
@pytest.mark.parametrize("form", ["per_head", "fused", "packed"])
@pytest.mark.parametrize("self_attention", [True, False])
def test_matmul_calls_equal_dispatched_matrix_products(H, form, self_attention):
    params = mha.init_params(8, H, seed=0).to_torch()
    query, kv = _inputs(2, 3, 3 if self_attention else 5, 8)
    ops = measure.count_aten_ops(
        lambda: torch_backend.multi_head_attention(query, kv, kv, params, form=form)
    )
    counted = sum(ops[name] for name in measure.MATMUL_OPS)
    assert counted == arithmetic.matmul_calls(H, form, self_attention=self_attention)


def test_matmul_calls_rejects_unknown_form_and_bad_heads():
    with pytest.raises(ValueError, match="form must be one of"):
        arithmetic.matmul_calls(2, "looped")
    with pytest.raises(ValueError, match="num_heads must be positive; got num_heads=0"):
        arithmetic.matmul_calls(0, "fused")
    with pytest.raises(ValueError, match="form='tiled' has no explicit scores to count"):
        arithmetic.matmul_calls(2, "tiled")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, np.float32, "f8"])
def test_score_tensor_bytes_equal_the_bytes_of_a_real_score_tensor(dtype):
    B, L, S, H = 2, 3, 5, 4
    torch_dtype = {np.float32: torch.float32, "f8": torch.float64}.get(dtype, dtype)
    assert (
        arithmetic.score_tensor_bytes(B, L, S, H, dtype)
        == torch.empty(B, H, L, S, dtype=torch_dtype).nbytes
    )


def test_score_tensor_bytes_rejects_bad_arguments():
    with pytest.raises(TypeError, match="dtype must be a numeric NumPy or PyTorch dtype; got str"):
        arithmetic.score_tensor_bytes(1, 2, 2, 1, "bogus")
    with pytest.raises(TypeError, match="dtype must be a numeric NumPy or PyTorch dtype; got None"):
        arithmetic.score_tensor_bytes(1, 2, 2, 1, None)  # np.dtype(None) would be float64
    with pytest.raises(ValueError, match="num_heads must be positive; got num_heads=0"):
        arithmetic.score_tensor_bytes(1, 2, 2, 0)


def test_matmul_flops_count_a_multiply_add_as_two_and_equal_flop_counter_mode():
    a, b = torch.randn(3, 4), torch.randn(4, 5)
    assert (
        arithmetic.matmul_flops(3, 4, 5) == 120 == sum(measure.count_flops(lambda: a @ b).values())
    )
    with pytest.raises(ValueError, match="k must be positive; got k=0"):
        arithmetic.matmul_flops(3, 0, 5)


# ---- inference: the key/value cache ---------------------------------------------------


def test_kv_cache_bytes_is_the_known_half_megabyte_per_token_of_llama_2_7b() -> None:
    llama = next(c for c in arithmetic.PUBLISHED_CONFIGS if c.name == "Llama 2 7B")
    per_token = arithmetic.kv_cache_bytes(llama.num_layers, 1, llama.num_kv_heads, llama.d_head)
    assert per_token == 2 * 32 * 32 * 128 * 2 == 512 * 1024  # float16: 0.5 MiB per token
    assert arithmetic.kv_cache_bytes(32, 4096, 32, 128, batch_size=2) == 2 * 4096 * per_token


def test_kv_cache_bytes_shrinks_by_h_over_h_kv() -> None:
    mha_bytes = arithmetic.kv_cache_bytes(80, 1000, 64, 128)
    assert mha_bytes == 8 * arithmetic.kv_cache_bytes(80, 1000, 8, 128)  # Llama 2 70B's GQA
    assert mha_bytes == 64 * arithmetic.kv_cache_bytes(80, 1000, 1, 128)  # MQA


def test_kv_cache_bytes_equals_a_real_cache() -> None:
    from mha.core.kv_cache import KVCache

    layers = [KVCache(2, 3, 8, 50, dtype=torch.float32) for _ in range(4)]
    assert sum(c.nbytes for c in layers) == arithmetic.kv_cache_bytes(
        4, 50, 3, 8, torch.float32, batch_size=2
    )


def test_published_configs_have_whole_groups() -> None:
    for c in arithmetic.PUBLISHED_CONFIGS:
        assert c.num_heads % c.num_kv_heads == 0, c.name


@pytest.mark.parametrize("h_kv", [1, 2, 8])
def test_decode_step_flops_match_flop_counter_mode_for_the_cached_step(h_kv: int) -> None:
    """One new token attending to S positions (S - 1 cached and itself), counted as matmuls."""
    D, H, S, B = 32, 8, 20, 3
    Dh = D // H
    x = torch.randn(B, 1, D)
    w_q, w_o = torch.randn(D, D), torch.randn(D, D)
    w_kv = torch.randn(D, 2 * h_kv * Dh)
    keys, values = torch.randn(B, h_kv, S, Dh), torch.randn(B, h_kv, S, Dh)  # after the append
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter:
        q = (x @ w_q).view(B, h_kv, H // h_kv, Dh)  # (B, H_kv, H / H_kv, Dh): one query per head
        _ = x @ w_kv  # the new token's keys and values
        scores = q @ keys.transpose(-1, -2)  # (B, H_kv, H / H_kv, S)
        out = scores.softmax(-1) @ values  # (B, H_kv, H / H_kv, Dh)
        _ = out.reshape(B, 1, D) @ w_o
    assert (
        counter.get_total_flops() == arithmetic.decode_step_cost(D, H, h_kv, S, batch_size=B).flops
    )


def test_decode_step_flops_uncached_are_the_full_forward_over_kv_len_tokens() -> None:
    """Without a cache the step is a forward over all S tokens (L = S), counted as matmuls."""
    D, H, S, B = 32, 8, 7, 2
    x = torch.randn(B, S, D)
    w_qkv, w_o = torch.randn(D, 3 * D), torch.randn(D, D)
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter:
        q, k, v = (x @ w_qkv).view(B, S, 3, H, D // H).permute(2, 0, 3, 1, 4)  # (B, H, S, Dh)
        out = (q @ k.transpose(-1, -2)).softmax(-1) @ v  # (B, H, S, Dh)
        _ = out.transpose(1, 2).reshape(B, S, D) @ w_o
    step = arithmetic.decode_step_cost(D, H, H, S, batch_size=B, cached=False)
    assert counter.get_total_flops() == step.flops


def test_decode_step_bytes_are_the_weights_and_the_cache_buffers_read() -> None:
    """The bytes of a cached step, counted from real buffers: the S - 1 cached positions."""
    from mha.core.kv_cache import KVCache

    D, H, h_kv, S, B = 32, 8, 2, 10, 3
    params = mha.init_params(D, H, num_kv_heads=h_kv, bias=False, dtype=np.float32)
    weights = sum(a.nbytes for a in (params.w_q, params.w_k, params.w_v, params.w_o))
    cache = KVCache(B, h_kv, D // H, S - 1, dtype=np.float32)  # exactly the cached positions
    new_kv = 2 * B * h_kv * (D // H) * 4  # the new token's keys and values, written
    x_and_out = 2 * B * D * 4  # the new token's input, read, and its output, written
    step = arithmetic.decode_step_cost(D, H, h_kv, S, np.float32, batch_size=B)
    assert step.bytes == weights + cache.nbytes + new_kv + x_and_out


def test_decode_step_intensity_grows_with_h_over_h_kv_and_the_cache_is_memory_bound() -> None:
    long = {h: arithmetic.decode_step_cost(4096, 32, h, 1_000_000) for h in (32, 8, 1)}
    assert long[32].intensity < long[8].intensity < long[1].intensity
    assert long[32].intensity < 1.05  # MHA: about one FLOP per byte, far below any CPU or GPU
    # once the cache outweighs the weights, intensity grows as H / H_kv (4 for Llama 2 70B)
    assert 3.9 < long[8].intensity / long[32].intensity < 4.0
    short = arithmetic.decode_step_cost(4096, 32, 32, 32_000)
    uncached = arithmetic.decode_step_cost(4096, 32, 32, 32_000, cached=False)
    assert uncached.flops > 1000 * short.flops and uncached.intensity > 1000 * short.intensity


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"num_kv_heads": 3}, ValueError, "num_kv_heads must divide num_heads"),
        ({"kv_len": 0}, ValueError, "kv_len must be positive"),
        ({"cached": "yes"}, TypeError, "cached must be a bool"),
    ],
)
def test_decode_step_cost_names_the_bad_argument(kwargs, error, match) -> None:
    args = {"d_model": 32, "num_heads": 8, "num_kv_heads": 2, "kv_len": 5} | kwargs
    with pytest.raises(error, match=match):
        arithmetic.decode_step_cost(**args)


# ---- published configurations: weights, caches, and where one outweighs the other ----------


@pytest.mark.parametrize(
    ("name", "billions"),
    [
        ("Llama 2 7B", 6.74),
        ("Llama 2 70B", 68.98),
        ("Mistral 7B", 7.24),
        ("Llama 3.1 8B", 8.03),
        ("TinyLlama 1.1B", 1.10),
    ],
)
def test_published_parameter_counts_match_the_models_announced_sizes(name, billions) -> None:
    config = next(c for c in arithmetic.PUBLISHED_CONFIGS if c.name == name)
    assert abs(config.num_params() / 1e9 - billions) < 0.01
    assert config.weight_bytes() == 2 * config.num_params()  # float16


def test_cache_bytes_stop_growing_at_the_sliding_window() -> None:
    mistral = next(c for c in arithmetic.PUBLISHED_CONFIGS if c.name == "Mistral 7B")
    assert mistral.cache_bytes(4096) == mistral.cache_bytes(8192) == 4096 * mistral.cache_bytes(1)
    llama = next(c for c in arithmetic.PUBLISHED_CONFIGS if c.name == "Llama 2 7B")
    assert llama.cache_bytes(4096) == 4096 * llama.cache_bytes(1)


def test_the_cache_outweighs_the_weights_only_where_the_context_allows() -> None:
    by_name = {c.name: c for c in arithmetic.PUBLISHED_CONFIGS}
    llama = by_name["Llama 2 7B"]
    S = llama.cache_outweighs_weights_at()
    assert S == 25_706 > llama.max_context  # 13.5 GB of weights / 0.5 MiB per token
    assert llama.cache_bytes(S) > llama.weight_bytes() >= llama.cache_bytes(S - 1)
    assert by_name["Mistral 7B"].cache_outweighs_weights_at() is None  # window of 4,096
    llama3 = by_name["Llama 3.1 8B"]
    S3 = llama3.cache_outweighs_weights_at()
    assert S3 is not None and llama3.cache_bytes(S3) > llama3.weight_bytes()


def test_roofline_takes_the_slower_of_compute_and_memory() -> None:
    a100 = arithmetic.A100_80GB
    assert abs(a100.ridge - 312e12 / 2039e9) < 1e-9
    step = arithmetic.decode_step_cost(4096, 32, 32, 4096)
    t = arithmetic.roofline_time(step, a100)
    assert t.bound == "memory" and t.seconds == t.memory == step.bytes / a100.bandwidth
    prefill = arithmetic.decode_step_cost(4096, 32, 32, 4096, cached=False)  # a prefill of 4,096
    t = arithmetic.roofline_time(prefill, a100)
    assert t.bound == "compute" and t.seconds == t.compute == prefill.flops / a100.peak_flops
    with pytest.raises(TypeError, match="work must be a DecodeStepCost"):
        arithmetic.roofline_time(1.0, a100)
    with pytest.raises(TypeError, match="accelerator must be an Accelerator"):
        arithmetic.roofline_time(step, "A100")
