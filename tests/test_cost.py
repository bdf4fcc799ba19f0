"""Tests of mha.cost: the FLOP and memory models against measurements, and the timers."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

import mha
from mha import cost
from mha import torch_backend as T

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
    counted = cost.count_flops(
        lambda: T.multi_head_attention(query, kv, kv, params, form=form, need_weights=need_weights)
    )
    assert sum(counted.values()) == cost.attention_flops(B, L, S, D, H, bias=bias).matmul


@pytest.mark.parametrize(("B", "L", "S", "D", "H"), SHAPES)
def test_matmul_flops_equal_flop_counter_mode_for_torch_multihead_attention(B, L, S, D, H):
    module = mha.to_torch_mha(mha.init_params(D, H, seed=0))  # training mode: no fast path
    query, kv = _inputs(B, L, S, D)
    counted = cost.count_flops(lambda: module(query, kv, kv))
    assert sum(counted.values()) == cost.attention_flops(B, L, S, D, H).matmul


@pytest.mark.parametrize(("B", "L", "S", "D", "H"), SHAPES)
def test_flops_of_each_stage_equal_flop_counter_mode_of_that_stage(B, L, S, D, H):
    params = mha.init_params(D, H, bias=False, seed=0).to_torch()
    query, kv = _inputs(B, L, S, D)
    model = cost.attention_flops(B, L, S, D, H, bias=False)
    q = T.split_heads(query @ params.w_q, H)
    k = T.split_heads(kv @ params.w_k, H)
    weights = torch.softmax(q @ k.transpose(-1, -2), dim=-1)
    v = T.split_heads(kv @ params.w_v, H)
    merged = T.merge_heads(weights @ v)  # (B, L, D)
    stages = {
        "q_proj": lambda: query @ params.w_q,
        "k_proj": lambda: kv @ params.w_k,
        "v_proj": lambda: kv @ params.w_v,
        "scores": lambda: q @ k.transpose(-1, -2),
        "weighted_sum": lambda: weights @ v,
        "out_proj": lambda: merged @ params.w_o,
    }
    for name, fn in stages.items():
        assert sum(cost.count_flops(fn).values()) == getattr(model, name), name


def test_flop_counter_counts_cpu_sdpa_that_plain_flop_counter_mode_misses():
    q, k, v = (torch.randn(2, 4, 6, 8) for _ in range(3))
    with torch.utils.flop_counter.FlopCounterMode(display=False) as plain:
        F.scaled_dot_product_attention(q, k, v)
    ours = cost.count_flops(lambda: F.scaled_dot_product_attention(q, k, v))
    assert plain.get_total_flops() == 0
    assert sum(ours.values()) == 2 * (2 * 2 * 4 * 6 * 6 * 8)


@pytest.mark.parametrize(("H", "G"), [(4, 1), (4, 2), (8, 4), (6, 3)])
def test_grouped_query_flops_equal_flop_counter_mode(H, G):
    B, L, S, Dh = 2, 5, 7, 3
    D = H * Dh
    gen = torch.Generator().manual_seed(1)
    x_kv = torch.randn(B, S, D, generator=gen)
    w_k = torch.randn(D, G * Dh, generator=gen)
    q = torch.randn(B, H, L, Dh, generator=gen)
    k, v = torch.randn(B, G, S, Dh, generator=gen), torch.randn(B, G, S, Dh, generator=gen)
    model = cost.attention_flops(B, L, S, D, H, num_kv_heads=G)
    full = cost.attention_flops(B, L, S, D, H)
    assert sum(cost.count_flops(lambda: x_kv @ w_k).values()) == model.k_proj
    sdpa = cost.count_flops(lambda: F.scaled_dot_product_attention(q, k, v, enable_gqa=True))
    assert sum(sdpa.values()) == model.attention == full.attention
    assert model.q_proj == full.q_proj and model.out_proj == full.out_proj
    assert full.k_proj == (H // G) * model.k_proj


@given(
    st.integers(1, 3),
    st.integers(1, 40),
    st.integers(1, 40),
    st.sampled_from([(8, 1), (8, 2), (8, 8), (12, 4), (16, 4)]),
)
@settings(max_examples=60, deadline=None)
def test_matmul_flops_do_not_depend_on_the_number_of_heads_but_softmax_does(B, L, S, dh):
    D, H = dh
    multi = cost.attention_flops(B, L, S, D, H)
    single = cost.attention_flops(B, L, S, D, 1)
    assert multi.matmul == single.matmul
    assert multi.bias == single.bias
    assert multi.softmax == H * single.softmax and multi.scale == H * single.scale


@given(st.integers(1, 300), st.integers(1, 64))
@settings(max_examples=80, deadline=None)
def test_attention_flops_overtake_projection_flops_exactly_past_twice_d_model(N, D):
    flops = cost.attention_flops(1, N, N, D, 1, bias=False)
    linear = flops.projections + flops.out_proj  # 8 N D^2
    assert linear == 8 * N * D * D and flops.attention == 4 * N * N * D
    assert np.sign(flops.attention - linear) == np.sign(N - 2 * D)


@given(st.integers(1, 4), st.integers(1, 20), st.integers(1, 20), st.integers(1, 4))
@settings(max_examples=40, deadline=None)
def test_elementwise_counts_follow_their_definitions(B, L, S, H):
    D = 2 * H
    with_bias = cost.attention_flops(B, L, S, D, H)
    without = cost.attention_flops(B, L, S, D, H, bias=False)
    longer = cost.attention_flops(B, L, S + 1, D, H, bias=False)
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
        cost.attention_flops(**args)


@pytest.mark.parametrize("H", [1, 2, 4])
@pytest.mark.parametrize("form", ["per_head", "fused", "packed"])
@pytest.mark.parametrize("self_attention", [True, False])
def test_matmul_calls_equal_dispatched_matrix_products(H, form, self_attention):
    params = mha.init_params(8, H, seed=0).to_torch()
    query, kv = _inputs(2, 3, 3 if self_attention else 5, 8)
    ops = cost.count_aten_ops(lambda: T.multi_head_attention(query, kv, kv, params, form=form))
    counted = sum(ops[name] for name in cost.MATMUL_OPS)
    assert counted == cost.matmul_calls(H, form, self_attention=self_attention)


def test_count_aten_ops_sees_the_same_operators_inside_inference_mode():
    params = mha.init_params(8, 2, seed=0).to_torch()
    query, _ = _inputs(1, 3, 3, 8)
    outside = cost.count_aten_ops(lambda: T.multi_head_attention(query, query, query, params))
    with torch.inference_mode():
        inside = cost.count_aten_ops(lambda: T.multi_head_attention(query, query, query, params))
    assert inside == outside and outside["aten.bmm"] == 2


def test_count_aten_ops_sees_torch_fast_path_as_one_operator():
    module = mha.to_torch_mha(mha.init_params(8, 2, seed=0)).eval()
    query, _ = _inputs(1, 3, 3, 8)
    assert cost.count_aten_ops(lambda: module(query, query, query, need_weights=False)) == {
        "aten._native_multi_head_attention": 1
    }


def test_matmul_calls_rejects_unknown_form_and_bad_heads():
    with pytest.raises(ValueError, match="form must be one of"):
        cost.matmul_calls(2, "looped")
    with pytest.raises(ValueError, match="num_heads must be positive; got num_heads=0"):
        cost.matmul_calls(0, "fused")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, np.float32, "f8"])
def test_score_tensor_bytes_equal_the_bytes_of_a_real_score_tensor(dtype):
    B, L, S, H = 2, 3, 5, 4
    torch_dtype = {np.float32: torch.float32, "f8": torch.float64}.get(dtype, dtype)
    assert (
        cost.score_tensor_bytes(B, L, S, H, dtype)
        == torch.empty(B, H, L, S, dtype=torch_dtype).nbytes
    )


def test_score_tensor_bytes_rejects_bad_arguments():
    with pytest.raises(TypeError, match="dtype must be a NumPy or PyTorch dtype; got 'bogus'"):
        cost.score_tensor_bytes(1, 2, 2, 1, "bogus")
    with pytest.raises(ValueError, match="num_heads must be positive; got num_heads=0"):
        cost.score_tensor_bytes(1, 2, 2, 0)


def test_peak_rss_increase_sees_a_touched_allocation_and_not_an_untouched_one():
    code = (
        "import numpy as np\n"
        "from mha.cost import peak_rss_increase\n"
        "n = 64 * 2**20\n"
        "print(peak_rss_increase(lambda: np.ones(n, dtype=np.uint8)))\n"
        "print(peak_rss_increase(lambda: np.empty(n, dtype=np.uint8)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    touched, untouched = (int(line) for line in out.stdout.split())
    # The kernel's resident-set counters are per-CPU approximations: allow 1 MiB of slack.
    assert 63 * 2**20 <= touched < 72 * 2**20
    assert untouched < 2**20


def test_peak_rss_increase_needs_proc(monkeypatch, tmp_path):
    monkeypatch.setattr(cost, "_PROC_SELF", tmp_path / "nowhere")
    with pytest.raises(RuntimeError, match="peak_rss_increase needs Linux"):
        cost.peak_rss_increase(lambda: None)


def test_explicit_attention_stores_score_tensors_and_sdpa_does_not():
    B, L, D, H = 1, 512, 32, 8
    paths = ("explicit", "explicit, autograd", "sdpa")
    measured = cost.attention_peak_memory(B, [L], D, H, paths=paths)
    score = cost.score_tensor_bytes(B, L, L, H)
    slack = 2**20  # the kernel's resident-page counters are approximate (per-CPU batches)
    # Without autograd the softmax overwrites the scores: one tensor, not two.
    assert score - slack <= measured["explicit"][0] < 1.5 * score
    assert measured["explicit, autograd"][0] >= 2 * score - slack  # scores and weights
    assert measured["sdpa"][0] < score / 4


def test_attention_peak_memory_rejects_bad_arguments():
    with pytest.raises(ValueError, match="paths must be among"):
        cost.attention_peak_memory(1, [8], 8, 2, paths=("flash",))
    with pytest.raises(ValueError, match="dtype must be 'float32' or 'float64'; got dtype='half'"):
        cost.attention_peak_memory(1, [8], 8, 2, dtype="half")
    with pytest.raises(ValueError, match=r"q_lens\[i\] must be positive"):
        cost.attention_peak_memory(1, [8, 0], 8, 2)


def test_median_time_is_at_least_the_time_of_a_sleep():
    assert cost.median_time(lambda: time.sleep(2e-3), repeat=3, number=2) >= 2e-3
    assert cost.median_time(lambda: time.sleep(1e-3), repeat=3) >= 1e-3


def test_cpu_clock_does_not_count_sleeping():
    assert cost.median_time(lambda: time.sleep(2e-3), repeat=3, number=2, clock="cpu") < 1e-3


def test_median_time_rejects_bad_arguments():
    with pytest.raises(ValueError, match="repeat must be positive; got repeat=0"):
        cost.median_time(lambda: None, repeat=0)
    with pytest.raises(ValueError, match="number must be positive; got number=0"):
        cost.median_time(lambda: None, number=0)
    with pytest.raises(ValueError, match="min_time must be positive; got min_time=0"):
        cost.median_time(lambda: None, min_time=0)
    with pytest.raises(ValueError, match=r"clock must be one of .*; got clock='gpu'"):
        cost.median_time(lambda: None, clock="gpu")


def test_form_runners_compute_the_same_attention():
    params = mha.init_params(16, 4, seed=5).to_torch(torch.float32)
    x = torch.randn(2, 6, 16, generator=torch.Generator().manual_seed(0))
    with torch.inference_mode():
        outs = {name: fn() for name, fn in cost.form_runners(params, x).items()}
    assert tuple(outs) == cost.FORMS_TIMED
    for name, out in outs.items():
        torch.testing.assert_close(out, outs["fused"], atol=1e-5, rtol=1e-5, msg=name)


def test_form_runners_reject_numpy_params():
    with pytest.raises(TypeError, match="params must be MHAParams of torch tensors"):
        cost.form_runners(mha.init_params(8, 2), torch.zeros(1, 2, 8))


def test_time_forms_times_every_form_and_restores_threads():
    threads = torch.get_num_threads()
    times = cost.time_forms(1, 4, 8, 2, repeat=2, min_time=1e-4, threads=1, clock="cpu")
    assert tuple(times) == cost.FORMS_TIMED
    assert all(t > 0 for t in times.values())
    assert torch.get_num_threads() == threads


def test_count_flops_is_empty_for_work_without_matrix_products():
    x = torch.randn(4, 5)
    assert cost.count_flops(lambda: torch.softmax(x + 1.0, dim=-1)) == {}


def test_attention_peak_memory_reports_a_failed_child(monkeypatch):
    monkeypatch.setattr(cost.sys, "executable", "/bin/false")
    with pytest.raises(RuntimeError, match="memory measurement failed"):
        cost.attention_peak_memory(1, [8], 8, 2)


def test_peak_rss_increase_names_a_missing_status_line(monkeypatch, tmp_path):
    (tmp_path / "clear_refs").write_text("")
    (tmp_path / "status").write_text("Name:\tpython\n")
    monkeypatch.setattr(cost, "_PROC_SELF", tmp_path)
    with pytest.raises(RuntimeError, match="status has no VmRSS line"):
        cost.peak_rss_increase(lambda: None, warmup=False)


def test_bench_forms_script_prints_one_row_of_ratios_per_shape(capsys):
    path = Path(__file__).resolve().parents[1] / "scripts" / "bench_forms.py"
    spec = importlib.util.spec_from_file_location("bench_forms", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    args = "--d-model 8 --heads 1 2 --lengths 4 --repeat 1 --min-time 1e-4 --clock cpu"
    bench.main(args.split())
    lines = capsys.readouterr().out.splitlines()
    assert "cpu clock" in lines[0]
    rows = [line.split() for line in lines[3:]]
    assert [(r[0], r[1]) for r in rows] == [("1", "4"), ("2", "4")]
    assert all(len(r) == 3 + len(cost.FORMS_TIMED) and float(r[4]) == 1.0 for r in rows)


# ---- inference: the key/value cache ---------------------------------------------------


def test_kv_cache_bytes_is_the_known_half_megabyte_per_token_of_llama_2_7b() -> None:
    llama = next(c for c in cost.PUBLISHED_CONFIGS if c.name == "Llama 2 7B")
    per_token = cost.kv_cache_bytes(llama.num_layers, 1, llama.num_kv_heads, llama.d_head)
    assert per_token == 2 * 32 * 32 * 128 * 2 == 512 * 1024  # float16: 0.5 MiB per token
    assert cost.kv_cache_bytes(32, 4096, 32, 128, batch_size=2) == 2 * 4096 * per_token


def test_kv_cache_bytes_shrinks_by_h_over_h_kv() -> None:
    mha_bytes = cost.kv_cache_bytes(80, 1000, 64, 128)
    assert mha_bytes == 8 * cost.kv_cache_bytes(80, 1000, 8, 128)  # Llama 2 70B's GQA
    assert mha_bytes == 64 * cost.kv_cache_bytes(80, 1000, 1, 128)  # MQA


def test_kv_cache_bytes_equals_a_real_cache() -> None:
    from mha.kv_cache import KVCache

    layers = [KVCache(2, 3, 8, 50, dtype=torch.float32) for _ in range(4)]
    assert sum(c.nbytes for c in layers) == cost.kv_cache_bytes(
        4, 50, 3, 8, torch.float32, batch_size=2
    )


def test_published_configs_have_whole_groups() -> None:
    for c in cost.PUBLISHED_CONFIGS:
        assert c.num_heads % c.num_kv_heads == 0, c.name


@pytest.mark.parametrize("h_kv", [1, 2, 8])
def test_decode_step_flops_match_flop_counter_mode_for_the_cached_step(h_kv: int) -> None:
    """One new token attending to S cached positions, written out as matmuls and counted."""
    D, H, S, B = 32, 8, 20, 3
    Dh = D // H
    x = torch.randn(B, 1, D)
    w_q, w_o = torch.randn(D, D), torch.randn(D, D)
    w_kv = torch.randn(D, 2 * h_kv * Dh)
    cache_k, cache_v = torch.randn(B, h_kv, S + 1, Dh), torch.randn(B, h_kv, S + 1, Dh)
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter:
        q = (x @ w_q).view(B, h_kv, H // h_kv, Dh)  # (B, H_kv, G, Dh): one query per head
        _ = x @ w_kv  # the new token's keys and values
        scores = q @ cache_k.transpose(-1, -2)  # (B, H_kv, G, S + 1)
        out = scores.softmax(-1) @ cache_v  # (B, H_kv, G, Dh)
        _ = out.reshape(B, 1, D) @ w_o
    assert counter.get_total_flops() == cost.decode_step_cost(D, H, h_kv, S, batch_size=B).flops


def test_decode_step_intensity_grows_with_h_over_h_kv_and_the_cache_is_memory_bound() -> None:
    long = {h: cost.decode_step_cost(4096, 32, h, 1_000_000) for h in (32, 8, 1)}
    assert long[32].intensity < long[8].intensity < long[1].intensity
    assert long[32].intensity < 1.05  # MHA: about one FLOP per byte, far below any CPU or GPU
    # once the cache outweighs the weights, intensity grows as H / H_kv (4 for Llama 2 70B)
    assert 3.9 < long[8].intensity / long[32].intensity < 4.0
    short = cost.decode_step_cost(4096, 32, 32, 32_000)
    uncached = cost.decode_step_cost(4096, 32, 32, 32_000, cached=False)
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
        cost.decode_step_cost(**args)
