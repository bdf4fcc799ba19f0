"""mha.cost's IO model of the tiled and naive algorithms, checked against instrumented runs,
and the measured memory and time of the tiled and backward passes."""

from __future__ import annotations

import collections
import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mha.backends import np_backend, tiled
from mha.cost import arithmetic, peak_memory, tiled_io, timings


def qkv(shape_q, shape_k, *, seed=0):
    rng = np.random.default_rng(seed)
    return rng.standard_normal(shape_q), rng.standard_normal(shape_k), rng.standard_normal(shape_k)


# ---- IO: instrumented runs against the model in mha.cost ---------------------------------


@settings(max_examples=60, deadline=None)
@given(
    L=st.integers(1, 40),
    S=st.integers(1, 40),
    Dh=st.integers(1, 6),
    block_q=st.integers(1, 45),
    block_kv=st.integers(1, 45),
    causal=st.booleans(),
    batch=st.integers(1, 3),
)
def test_tiled_io_counted_in_a_run_equals_the_model(L, S, Dh, block_q, block_kv, causal, batch):
    q, k, v = qkv((batch, L, Dh), (batch, S, Dh), seed=L * S)
    io = collections.Counter()
    tiled.attention(q, k, v, causal=causal, block_q=block_q, block_kv=block_kv, io_counter=io)
    model = tiled_io.tiled_attention_io(L, S, Dh, blocks=(block_q, block_kv), causal=causal)
    assert (io["read"], io["write"]) == (batch * model.reads, batch * model.writes)


@settings(max_examples=60, deadline=None)
@given(
    L=st.integers(1, 30),
    S=st.integers(1, 30),
    Dh=st.integers(1, 6),
    block_q=st.integers(1, 35),
    block_kv=st.integers(1, 35),
    softmax_rows=st.one_of(st.none(), st.integers(1, 35)),
)
def test_three_pass_io_counted_in_a_run_equals_the_model(L, S, Dh, block_q, block_kv, softmax_rows):
    q, k, v = qkv((L, Dh), (S, Dh), seed=L + S)
    io = collections.Counter()
    tiled.three_pass_attention(q, k, v, block_q=block_q, block_kv=block_kv,
                               softmax_rows=softmax_rows, io_counter=io)  # fmt: skip
    model = tiled_io.naive_attention_io(
        L, S, Dh, blocks=(block_q, block_kv), softmax_rows=softmax_rows
    )
    assert (io["read"], io["write"]) == (model.reads, model.writes)


@pytest.mark.parametrize("fast_memory", [300, 2**12, 2**15])
def test_three_pass_io_from_fast_memory_equals_a_run_with_the_rows_that_fit(fast_memory):
    L, Dh = 200, 16
    q, k, v = qkv((L, Dh), (L, Dh), seed=fast_memory)
    blocks = tiled_io.tiled_block_sizes(Dh, fast_memory)
    rows = tiled_io.naive_softmax_rows(L, fast_memory)
    assert rows == (None if fast_memory < L + 2 else fast_memory // (L + 2))
    io = collections.Counter()
    tiled.three_pass_attention(q, k, v, block_q=blocks[0], block_kv=blocks[1],
                               softmax_rows=rows, io_counter=io)  # fmt: skip
    model = tiled_io.naive_attention_io(L, L, Dh, fast_memory)
    assert (io["read"], io["write"]) == (model.reads, model.writes)
    extra = model.total - tiled_io.tiled_attention_io(L, L, Dh, fast_memory).total
    assert extra == (4 if rows else 5) * L * L - L  # scores read once when a row fits


def test_a_causal_mask_array_skips_the_same_tiles_as_the_causal_flag() -> None:
    q, k, v = qkv((1, 30, 4), (1, 30, 4), seed=10)
    flag, array = collections.Counter(), collections.Counter()
    tiled.attention(q, k, v, causal=True, block_q=8, block_kv=8, io_counter=flag)
    tiled.attention(q, k, v, np_backend.causal_mask(30), block_q=8, block_kv=8, io_counter=array)
    assert flag == array
    assert flag["read"] < tiled_io.tiled_attention_io(30, 30, 4, blocks=(8, 8)).reads


# ---- memory: measured, not read off the code ---------------------------------------------


def test_tiled_forward_never_holds_an_l_by_s_array_measured() -> None:
    L, D, H = 4096, 64, 1
    score = arithmetic.score_tensor_bytes(1, L, L, H)  # 64 MiB: one (L, S) float32 array
    peak = peak_memory.tiled_peak_memory(1, [L], D, H, paths=("numpy", "numpy tiled"))
    assert peak["numpy"][0] >= 0.9 * score  # the measurement sees an (L, S) array
    assert peak["numpy tiled"][0] < score / 8


# ---- memory: the tiled backward holds no (L, S) array ------------------------------------


def test_tiled_backward_needs_no_l_by_s_array_measured() -> None:
    L, D, H = 2048, 64, 1
    score = arithmetic.score_tensor_bytes(1, L, L, H)  # 16 MiB: one (L, S) float32 array
    peak = peak_memory.tiled_peak_memory(
        1, [L], D, H, paths=("numpy backward", "numpy tiled backward")
    )
    assert peak["numpy backward"][0] >= 1.9 * score  # A stored, then dA and dS beside it
    assert peak["numpy tiled backward"][0] < score / 2


@pytest.mark.parametrize("d_head", [1, 16, 64, 128])
@pytest.mark.parametrize("fast_memory", [600, 4096, 10**5, 10**6])
def test_tiled_block_sizes_fit_fast_memory_and_one_more_query_row_does_not(d_head, fast_memory):
    if fast_memory < tiled_io.tiled_fast_memory(1, 1, d_head):
        with pytest.raises(ValueError, match="fast_memory must hold at least one row"):
            tiled_io.tiled_block_sizes(d_head, fast_memory)
        return
    block_q, block_kv = tiled_io.tiled_block_sizes(d_head, fast_memory)
    assert 1 <= block_kv <= d_head
    assert tiled_io.tiled_fast_memory(block_q, block_kv, d_head) <= fast_memory
    assert tiled_io.tiled_fast_memory(block_q + 1, block_kv, d_head) > fast_memory


def test_tiled_io_without_a_mask_has_its_closed_form() -> None:
    L, S, Dh, Br, Bc = 1000, 700, 64, 96, 50
    io = tiled_io.tiled_attention_io(L, S, Dh, blocks=(Br, Bc))
    assert io.reads == L * Dh + 2 * math.ceil(L / Br) * S * Dh
    assert io.writes == L * Dh + L and io.total == io.reads + io.writes


def test_causal_tiled_io_reads_about_half_the_keys() -> None:
    full = tiled_io.tiled_attention_io(4096, 4096, 64, blocks=(128, 64))
    causal = tiled_io.tiled_attention_io(4096, 4096, 64, blocks=(128, 64), causal=True)
    keys_full = full.reads - 4096 * 64
    keys_causal = causal.reads - 4096 * 64
    assert 0.5 < keys_causal / keys_full < 0.52


def test_naive_io_is_the_tiled_io_plus_the_scores_and_weights_round_trips() -> None:
    L, S, Dh = 512, 300, 32
    for blocks, passes in (((64, 32), 2), ((64, 300), 1)):
        naive = tiled_io.naive_attention_io(L, S, Dh, blocks=blocks)
        tiled = tiled_io.tiled_attention_io(L, S, Dh, blocks=blocks)
        assert naive.reads - tiled.reads == (passes + 1) * L * S
        assert naive.writes - tiled.writes == 2 * L * S - L


def test_tiled_io_falls_as_one_over_m_and_follows_the_flash_bound() -> None:
    N, d = 8192, 64
    ratios = []
    for M in (2**15, 2**16, 2**17, 2**18):  # from 8 d^2 to N d / 2
        io = tiled_io.tiled_attention_io(N, N, d, M)
        ratios.append(io.total / tiled_io.flash_io_bound(N, N, d, M))
        assert tiled_io.naive_attention_io(N, N, d, M).total > 3 * N * N  # about flat in M
    # Theta(N^2 d^2 / M) with Br = (M - 2 d^2) / (3 d + 2): about
    # 6 (1 + 2 / (3 d)) M / (M - 2 d^2), plus the rounding up of N / Br to whole blocks.
    for M, r in zip((2**15, 2**16, 2**17, 2**18), ratios, strict=True):
        approx = 6 * (1 + 2 / (3 * d)) * M / (M - 2 * d * d)
        block_q, _ = tiled_io.tiled_block_sizes(d, M)
        rounding = 2 * (math.ceil(N / block_q) - N / block_q) * M / (N * d)  # whole blocks
        edges = (2 * N * d + N) * M / (N * N * d * d)  # Q read and O, lse written once
        assert approx <= r <= approx * (1 + 3 * d / M) + rounding + edges + 1e-9


def test_tiled_io_ratio_tends_to_six_for_long_rows_and_a_large_fast_memory() -> None:
    N, d, M = 2**22, 128, 2**24  # M = 1024 d^2, N / Br about 97
    ratio = tiled_io.tiled_attention_io(N, N, d, M).total / tiled_io.flash_io_bound(N, N, d, M)
    assert 6 < ratio < 6.2


def test_io_functions_reject_bad_arguments() -> None:
    with pytest.raises(ValueError, match="give exactly one of fast_memory and blocks"):
        tiled_io.tiled_attention_io(4, 4, 2)
    with pytest.raises(ValueError, match="give exactly one of fast_memory and blocks"):
        tiled_io.naive_attention_io(4, 4, 2, 100, blocks=(2, 2))
    with pytest.raises(ValueError, match=r"blocks\[1\] must be positive; got blocks\[1\]=0"):
        tiled_io.tiled_attention_io(4, 4, 2, blocks=(2, 0))
    with pytest.raises(TypeError, match="q_len must be an int"):
        tiled_io.flash_io_bound(4.0, 4, 2, 100)
    with pytest.raises(ValueError, match="softmax_rows goes with blocks, not fast_memory"):
        tiled_io.naive_attention_io(4, 4, 2, 100, softmax_rows=2)
    with pytest.raises(ValueError, match="softmax_rows must be positive; got softmax_rows=0"):
        tiled_io.naive_attention_io(4, 4, 2, blocks=(2, 2), softmax_rows=0)
    with pytest.raises(ValueError, match="fast_memory must be positive"):
        tiled_io.naive_softmax_rows(4, 0)


def test_time_tiled_times_every_implementation_in_a_child() -> None:
    times = timings.time_tiled(1, 32, 16, 2, blocks=[(8, 16), (32, 32)], backward=True,
                            repeat=2, min_time=1e-3)  # fmt: skip
    assert set(times) == {
        "naive",
        "naive, deferred",
        "sdpa",
        "tiled 8x16",
        "tiled 32x32",
        "layer forward",
        "layer forward, fused, saving",
        "layer forward, tiled, saving",
        "layer backward, fused",
        "layer backward, tiled",
    }
    assert all(t > 0 for t in times.values())
    only_layer = timings.time_tiled(1, 16, 8, 2, blocks=[], backward=True, attention=False,
                                 repeat=1, min_time=1e-3)  # fmt: skip
    assert set(only_layer) == {name for name in times if name.startswith("layer")}


def test_tiled_measurements_reject_bad_arguments() -> None:
    with pytest.raises(ValueError, match="paths must be among"):
        peak_memory.tiled_peak_memory(1, [8], 8, 2, paths=("flash",))
    with pytest.raises(ValueError, match="dtype must be 'float32' or 'float64'"):
        timings.time_tiled(1, 8, 8, 2, blocks=[], dtype="float16")
    with pytest.raises(
        ValueError, match=r"blocks\[0\]\[0\] must be positive; got blocks\[0\]\[0\]=0"
    ):
        timings.time_tiled(1, 8, 8, 2, blocks=[(0, 4)])


def _key_rows_by_loop(L: int, S: int, Br: int, Bc: int, causal: bool) -> int:
    """The key rows read, block by block, as the tiled forward visits them."""
    rows = 0
    for start in range(0, L, Br):
        seen = min(start + Br, L, S) if causal else S
        rows += min(S, math.ceil(seen / Bc) * Bc)
    return rows


def test_the_closed_form_io_count_equals_the_count_block_by_block():
    """Every L, S up to 12 and block up to 5, with and without the causal mask; then sizes
    far past any loop (a query block count of 10**15), where only the closed form answers."""
    for L, S, Br, Bc in itertools.product(range(1, 13), range(1, 13), range(1, 6), range(1, 6)):
        for causal in (False, True):
            io = tiled_io.tiled_attention_io(L, S, 3, blocks=(Br, Bc), causal=causal)
            assert io.reads == L * 3 + 2 * 3 * _key_rows_by_loop(L, S, Br, Bc, causal)
    huge = tiled_io.tiled_attention_io(10**15, 7, 1, blocks=(1, 2), causal=True)
    assert huge.reads == 10**15 + 2 * (2 + 2 + 4 + 4 + 6 + 6 + (10**15 - 6) * 7)
