"""Tests of mha.cost.measure: FLOP and operator counters, peak memory and the timers."""

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

import mha
import mha.cost.peak_memory
from mha.backends import torch_backend
from mha.cost import arithmetic, measure, peak_memory, timings


def test_flop_counter_counts_cpu_sdpa_that_plain_flop_counter_mode_misses():
    q, k, v = (torch.randn(2, 4, 6, 8) for _ in range(3))
    with torch.utils.flop_counter.FlopCounterMode(display=False) as plain:
        F.scaled_dot_product_attention(q, k, v)
    ours = measure.count_flops(lambda: F.scaled_dot_product_attention(q, k, v))
    assert plain.get_total_flops() == 0
    assert sum(ours.values()) == 2 * (2 * 2 * 4 * 6 * 6 * 8)


def test_count_aten_ops_sees_the_same_operators_inside_inference_mode():
    params = mha.init_params(8, 2, seed=0).to_torch()
    query = torch.randn(1, 3, 8, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    outside = measure.count_aten_ops(
        lambda: torch_backend.multi_head_attention(query, query, query, params)
    )
    with torch.inference_mode():
        inside = measure.count_aten_ops(
            lambda: torch_backend.multi_head_attention(query, query, query, params)
        )
    assert inside == outside and outside["aten.bmm"] == 2


def test_count_aten_ops_sees_torch_fast_path_as_one_operator():
    module = mha.to_torch_mha(mha.init_params(8, 2, seed=0)).eval()
    query = torch.randn(1, 3, 8, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    assert measure.count_aten_ops(lambda: module(query, query, query, need_weights=False)) == {
        "aten._native_multi_head_attention": 1
    }


def test_peak_rss_increase_sees_a_touched_allocation_and_not_an_untouched_one():
    code = (
        "import numpy as np\n"
        "from mha.cost.measure import peak_rss_increase\n"
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
    monkeypatch.setattr(measure, "_PROC_SELF", tmp_path / "nowhere")
    with pytest.raises(RuntimeError, match="peak_rss_increase needs Linux"):
        measure.peak_rss_increase(lambda: None)


def test_explicit_attention_stores_score_tensors_and_sdpa_does_not():
    B, L, D, H = 1, 512, 32, 8
    paths = ("explicit", "explicit, autograd", "sdpa")
    measured = peak_memory.attention_peak_memory(B, [L], D, H, paths=paths)
    score = arithmetic.score_tensor_bytes(B, L, L, H)
    slack = 2**20  # the kernel's resident-page counters are approximate (per-CPU batches)
    # Without autograd the softmax overwrites the scores: one tensor, not two.
    assert score - slack <= measured["explicit"][0] < 1.5 * score
    assert measured["explicit, autograd"][0] >= 2 * score - slack  # scores and weights
    assert measured["sdpa"][0] < score / 4


def test_attention_peak_memory_rejects_bad_arguments():
    with pytest.raises(ValueError, match="paths must be among"):
        peak_memory.attention_peak_memory(1, [8], 8, 2, paths=("flash",))
    with pytest.raises(ValueError, match="dtype must be 'float32' or 'float64'; got dtype='half'"):
        peak_memory.attention_peak_memory(1, [8], 8, 2, dtype="half")
    with pytest.raises(ValueError, match=r"q_lens\[1\] must be positive; got q_lens\[1\]=0"):
        peak_memory.attention_peak_memory(1, [8, 0], 8, 2)


def test_median_time_is_at_least_the_time_of_a_sleep():
    assert measure.median_time(lambda: time.sleep(2e-3), repeat=3, number=2) >= 2e-3
    assert measure.median_time(lambda: time.sleep(1e-3), repeat=3) >= 1e-3


def test_cpu_clock_does_not_count_sleeping():
    assert measure.median_time(lambda: time.sleep(2e-3), repeat=3, number=2, clock="cpu") < 1e-3


def test_median_time_rejects_bad_arguments():
    with pytest.raises(ValueError, match="repeat must be positive; got repeat=0"):
        measure.median_time(lambda: None, repeat=0)
    with pytest.raises(ValueError, match="number must be positive; got number=0"):
        measure.median_time(lambda: None, number=0)
    with pytest.raises(ValueError, match="min_time must be positive; got min_time=0"):
        measure.median_time(lambda: None, min_time=0)
    with pytest.raises(ValueError, match=r"clock must be one of .*; got clock='gpu'"):
        measure.median_time(lambda: None, clock="gpu")


def test_form_runners_compute_the_same_attention():
    params = mha.init_params(16, 4, seed=5).to_torch(torch.float32)
    x = torch.randn(2, 6, 16, generator=torch.Generator().manual_seed(0))
    with torch.inference_mode():
        outs = {name: fn() for name, fn in timings.form_runners(params, x).items()}
    assert tuple(outs) == timings.FORMS_TIMED
    for name, out in outs.items():
        torch.testing.assert_close(out, outs["fused"], atol=1e-5, rtol=1e-5, msg=name)


def test_form_runners_reject_numpy_params():
    with pytest.raises(TypeError, match="params must be MHAParams of torch tensors"):
        timings.form_runners(mha.init_params(8, 2), torch.zeros(1, 2, 8))


def test_time_forms_times_every_form_and_restores_threads():
    threads = torch.get_num_threads()
    times = timings.time_forms(1, 4, 8, 2, repeat=2, min_time=1e-4, threads=1, clock="cpu")
    assert tuple(times) == timings.FORMS_TIMED
    assert all(t > 0 for t in times.values())
    assert torch.get_num_threads() == threads


def test_count_flops_is_empty_for_work_without_matrix_products():
    x = torch.randn(4, 5)
    assert measure.count_flops(lambda: torch.softmax(x + 1.0, dim=-1)) == {}


def test_attention_peak_memory_reports_a_failed_child(monkeypatch):
    monkeypatch.setattr(measure.sys, "executable", "/bin/false")
    with pytest.raises(
        RuntimeError, match="measurement failed in mha.cost.peak_memory._memory_child"
    ):
        peak_memory.attention_peak_memory(1, [8], 8, 2)


def test_peak_rss_increase_names_a_missing_status_line(monkeypatch, tmp_path):
    (tmp_path / "clear_refs").write_text("")
    (tmp_path / "status").write_text("Name:\tpython\n")
    monkeypatch.setattr(measure, "_PROC_SELF", tmp_path)
    with pytest.raises(RuntimeError, match="status has no VmRSS line"):
        measure.peak_rss_increase(lambda: None, warmup=False)


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
    assert all(len(r) == 3 + len(timings.FORMS_TIMED) and float(r[4]) == 1.0 for r in rows)


def test_interleaved_times_runs_every_callable_in_each_round_in_turn():
    calls = []
    fns = {"a": lambda: calls.append("a"), "b": lambda: calls.append("b")}
    times = measure.interleaved_times(fns, 3, warmup=2)
    assert calls == ["a", "b"] * 5  # two warm-up rounds, then three timed ones
    assert {name: len(t) for name, t in times.items()} == {"a": 3, "b": 3}
    assert all(t >= 0 for ts in times.values() for t in ts)


def test_interleaved_times_calls_often_enough_to_fill_min_time():
    slept = measure.interleaved_times({"sleep": lambda: time.sleep(1e-3)}, 2, min_time=5e-3)
    assert all(t >= 1e-3 for t in slept["sleep"])
    calls = []
    measure.interleaved_times({"count": lambda: calls.append(1)}, 2, min_time=1e-3, warmup=0)
    assert len(calls) > 3  # one calibration call, then many per round


def test_interleaved_times_rejects_bad_arguments():
    with pytest.raises(ValueError, match="repeat must be positive; got repeat=0"):
        measure.interleaved_times({}, 0)
    with pytest.raises(ValueError, match="warmup must be at least 0; got warmup=-1"):
        measure.interleaved_times({}, 1, warmup=-1)
    with pytest.raises(ValueError, match="min_time must be finite; got min_time=nan"):
        measure.interleaved_times({}, 1, min_time=float("nan"))
    with pytest.raises(TypeError, match=r"fns\['a'\] must be callable; got int 3"):
        measure.interleaved_times({"a": 3}, 1)
    with pytest.raises(ValueError, match="clock must be one of"):
        measure.interleaved_times({}, 1, clock="gpu")


def test_decode_times_reports_cached_and_uncached_seconds_per_token():
    from mha.models.attention_only import AttentionOnlyTransformer

    model = AttentionOnlyTransformer(16, 80, 16, 4, 2, num_kv_heads=2)
    times = timings.decode_times(model, [8, 64], steps=2, repeat=2)
    assert set(times) == {"cached", "uncached"}
    assert all(len(v) == 2 and min(v) > 0 for v in times.values())
    # Which is faster is a measurement (the inference chapter and scripts/bench_decode.py),
    # not something a unit test on a busy machine can assert.


def test_decode_times_takes_turns_over_the_lengths_in_each_round():
    """A slow spell falls on every length alike: round r times every length before round
    r + 1 starts, so the uncached calls (one per length and round) come in turns."""
    from mha.models.attention_only import AttentionOnlyTransformer

    class Recording(AttentionOnlyTransformer):
        def forward(self, tokens, caches=None):
            if caches is None:
                uncached_lengths.append(tokens.shape[1])
            return super().forward(tokens, caches=caches)

    uncached_lengths: list[int] = []
    model = Recording(16, 80, 16, 4, 2)
    timings.decode_times(model, [8, 32, 64], steps=2, repeat=3)
    warmup, timed = uncached_lengths[:2], uncached_lengths[2:]
    assert warmup == [9, 9]  # two untimed rounds at the first length
    assert timed == [9, 33, 65] * 3


def test_decode_times_rejects_contexts_past_the_positional_embedding():
    from mha.models.attention_only import AttentionOnlyTransformer

    model = AttentionOnlyTransformer(16, 10, 16, 4, 2)
    with pytest.raises(ValueError, match=r"context_lens\[1\] \+ steps must stay within max_len=10"):
        timings.decode_times(model, [4, 8], steps=4)
    with pytest.raises(ValueError, match="steps must be positive"):
        timings.decode_times(model, [4], steps=0)
    with pytest.raises(ValueError, match="statistic must be 'median' or 'min'"):
        timings.decode_times(model, [4], statistic="mean")


def test_decode_times_takes_the_minimum_on_request_and_accepts_no_lengths():
    from mha.models.attention_only import AttentionOnlyTransformer

    model = AttentionOnlyTransformer(16, 80, 16, 4, 2)
    fastest = timings.decode_times(model, [32], steps=2, repeat=3, statistic="min")
    assert all(len(v) == 1 and v[0] > 0 for v in fastest.values())
    assert timings.decode_times(model, [], statistic="min") == {"cached": [], "uncached": []}


def test_time_form_rounds_returns_every_round_of_every_form():
    rounds = timings.time_form_rounds(1, 4, 8, 2, repeat=3, min_time=1e-4, clock="cpu")
    assert list(rounds) == list(timings.FORMS_TIMED)
    assert all(len(r) == 3 and min(r) > 0 for r in rounds.values())
    with pytest.raises(ValueError, match="min_time must be positive"):
        timings.time_form_rounds(1, 4, 8, 2, min_time=0)


def test_trivial_op_time_is_a_small_positive_time_per_call():
    t = timings.trivial_op_time(calls=200, repeat=3)
    assert 0 < t < 1e-3  # far below a millisecond on any machine
    with pytest.raises(ValueError, match="calls must be positive"):
        timings.trivial_op_time(calls=0)


def test_projection_times_times_both_ways_of_projecting():
    times = timings.projection_times(8, 16, 4, repeat=3, min_time=1e-4)
    assert sorted(times) == ["narrow", "wide"] and min(times.values()) > 0
    with pytest.raises(ValueError, match="min_time must be positive"):
        timings.projection_times(8, 16, 4, min_time=0)
    with pytest.raises(ValueError, match="num_heads must divide d_model"):
        timings.projection_times(8, 16, 3)


def test_cpu_model_names_the_processor():
    name = measure.cpu_model()
    assert isinstance(name, str) and name.strip() == name and name


def test_plain_path_holds_scores_and_weights_and_the_loop_one_head_at_a_time():
    B, L, D, H = 1, 512, 32, 8
    paths = ("explicit, plain", "per_head")
    measured = peak_memory.attention_peak_memory(B, [L], D, H, paths=paths)
    score = arithmetic.score_tensor_bytes(B, L, L, H)
    assert measured["explicit, plain"][0] >= 2 * score - 2**20  # the softmax's own output
    # The loop frees each head's (B, L, S) weights before the next head's scores exist.
    assert measured["per_head"][0] < 1.5 * score / H + 2**20


def test_cached_step_times_times_each_pair_of_key_value_heads_and_cache_length():
    times = timings.cached_step_times(32, 4, [4, 1], [64, 128], rounds=2, flush_bytes=2**20)
    assert sorted(times) == [(1, 64), (1, 128), (4, 64), (4, 128)]
    assert min(times.values()) > 0
    assert list(timings.cached_step_times(32, 4, [2], [16], rounds=1, flush_bytes=0)) == [(2, 16)]


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"kv_heads": [3]}, ValueError, "num_kv_heads must divide num_heads"),
        ({"kv_heads": []}, ValueError, "kv_heads must name at least one value"),
        ({"kv_lens": [0]}, ValueError, r"kv_lens\[0\] must be positive; got kv_lens\[0\]=0"),
        ({"kv_lens": [8.0]}, TypeError, r"kv_lens\[0\] must be an int; got float 8.0"),
        ({"rounds": 0}, ValueError, "rounds must be positive"),
        ({"flush_bytes": -1}, ValueError, "flush_bytes must be at least 0"),
        ({"clock": "tsc"}, ValueError, "clock must be one of"),
    ],
)
def test_cached_step_times_names_the_bad_argument(kwargs, error, match):
    args = {"kv_heads": [4], "kv_lens": [8], "rounds": 1, "flush_bytes": 0} | kwargs
    with pytest.raises(error, match=match):
        timings.cached_step_times(32, 4, **args)


def test_kv_cache_peak_memory_counts_the_positions_written_not_the_capacity():
    layers, h_kv, d_head, positions = 2, 4, 16, 8192
    resident = arithmetic.kv_cache_bytes(layers, positions, h_kv, d_head, torch.float32)
    reserved = arithmetic.kv_cache_bytes(layers, 32 * positions, h_kv, d_head, torch.float32)
    block = h_kv * positions * d_head * 4  # the block appended, held while filling
    slack = 2**20  # the kernel's resident-page counters are approximate (per-CPU batches)
    full, partial = peak_memory.kv_cache_peak_memory(
        layers, h_kv, d_head, [(positions, positions), (32 * positions, positions)]
    )
    assert resident - slack <= full <= resident + block + slack
    # Pages never written stay unbacked; huge pages may back up to 2 MiB per head and buffer.
    huge_pages = 2 * layers * h_kv * 2**21
    assert resident - slack <= partial <= resident + block + huge_pages + slack < reserved / 4


def test_kv_cache_peak_memory_rejects_bad_fills():
    with pytest.raises(ValueError, match=r"fills\[0\] positions must not pass capacity"):
        peak_memory.kv_cache_peak_memory(1, 1, 8, [(4, 5)])
    with pytest.raises(ValueError, match=r"fills\[1\] capacity must be positive"):
        peak_memory.kv_cache_peak_memory(1, 1, 8, [(4, 4), (0, 1)])
    with pytest.raises(ValueError, match="num_layers must be positive"):
        peak_memory.kv_cache_peak_memory(0, 1, 8, [(4, 4)])


def test_fit_growth_recovers_a_cost_curve_and_keeps_its_terms_non_negative():
    lengths = [128, 256, 512, 1024, 2048]
    exact = [2e-3 + 3e-6 * s + 5e-9 * s * s for s in lengths]
    np.testing.assert_allclose(timings.fit_growth(lengths, exact, 2), [2e-3, 3e-6, 5e-9], rtol=1e-9)
    linear = [1e-3 + 2e-6 * s for s in lengths]
    np.testing.assert_allclose(timings.fit_growth(lengths, linear, 1), [1e-3, 2e-6], rtol=1e-9)
    # A curve an unconstrained fit bends with a negative linear term: here it stays at 0.
    bent = [1e-3 - 2e-7 * s + 3e-9 * s * s for s in lengths]
    assert np.polyfit(lengths, bent, 2)[1] < 0
    coef = timings.fit_growth(lengths, bent, 2)
    assert (coef >= 0).all() and coef[1] == 0  # exact: nnls's active set pins it at zero


@pytest.mark.parametrize(
    ("args", "error", "match"),
    [
        (([1, 2], [1.0], 1), ValueError, "lengths and seconds must be two sequences"),
        (([1, 2], [1.0, 2.0], 2), ValueError, "a fit of degree 2 needs at least 3 lengths"),
        (([1, 2], [1.0, 0.0], 1), ValueError, "seconds must be positive and finite"),
        (([1, 2], [1.0, 2.0], 0), ValueError, "degree must be positive"),
        (([1, 2], [1.0, 2.0], 1.0), TypeError, "degree must be an int"),
    ],
)
def test_fit_growth_names_the_bad_argument(args, error, match):
    with pytest.raises(error, match=match):
        timings.fit_growth(*args)


@pytest.mark.skipif(not hasattr(__import__("os"), "sched_getaffinity"), reason="Linux only")
def test_memory_is_measured_on_one_cpu_and_the_affinity_restored():
    import os

    allowed = os.sched_getaffinity(0)
    with measure._on_one_cpu():
        assert len(os.sched_getaffinity(0)) == 1
    assert os.sched_getaffinity(0) == allowed


def test_the_last_level_cache_is_read_from_sysfs(monkeypatch, tmp_path):
    for index, (level, size) in enumerate([(1, "48K"), (2, "2048K"), (3, "32768K"), (3, "96M")]):
        folder = tmp_path / f"index{index}"
        folder.mkdir()
        (folder / "level").write_text(f"{level}\n")
        (folder / "size").write_text(f"{size}\n")
    monkeypatch.setattr(measure, "_CPU_CACHES", tmp_path)
    assert measure.last_level_cache_bytes() == 96 * 2**20
    assert measure.default_flush_bytes() == 256 * 2**20  # twice 96 MiB is below the least, 256 MiB
    (tmp_path / "index9").mkdir()
    (tmp_path / "index9" / "level").write_text("3\n")
    (tmp_path / "index9" / "size").write_text("512M\n")  # a server's large last-level cache
    assert measure.default_flush_bytes() == 1024 * 2**20
    monkeypatch.setattr(measure, "_CPU_CACHES", tmp_path / "missing")
    assert measure.last_level_cache_bytes() is None
    assert measure.default_flush_bytes() == measure.CACHE_FLUSH_BYTES
