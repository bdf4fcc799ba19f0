"""The error contract of the modules that measure heads, case by case.

Each case is one that returned a wrong answer without an error, or failed inside NumPy,
PyTorch or Python, before these modules checked their arguments: the same cache object
shared by every layer, an integer ``where``, grouped-query parameters in the analyses,
token ids outside MiniLM's vocabulary, NumPy integers in the cost arithmetic, NaN in the
detectors and rank tolerances, and seeds, sizes and rates of the models, training and
timing functions. ``tests/test_api_search.py`` searches the whole public API beyond them.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from mha import init_params
from mha.analysis import rank, subspaces
from mha.backends import np_backend, torch_backend
from mha.core import kv_cache
from mha.core.params import repeat_kv_heads
from mha.cost import arithmetic, measure, timings
from mha.detectors import circuits, patterns
from mha.models import examples, smollm2_heads
from mha.models.attention_only import AttentionOnlyTransformer, next_token_loss
from mha.numerics.tolerance import assert_close, rounding_tolerance
from mha.training import ablation, runs, tasks

# ---- one cache object for every layer -----------------------------------------------------


def _model() -> AttentionOnlyTransformer:
    return AttentionOnlyTransformer(10, 16, 8, 2, 2, seed=0, dtype=torch.float64)


def test_one_cache_object_shared_by_the_layers_is_refused_and_changes_nothing():
    """``[KVCache(...)] * num_layers`` repeats one object: layer 1 would attend to layer 0's
    keys and the length would grow by 2 a token. It is refused before any append."""
    model = _model()
    cache = kv_cache.KVCache(1, 2, 4, 16, dtype=torch.float64)
    model(torch.tensor([[1, 2]]), caches=model.new_caches(1))  # a model that decodes
    tokens = torch.tensor([[3]])
    with pytest.raises(ValueError, match=r"caches must hold a separate object per entry; got "
                       r"the same KVCache at caches\[0\] and caches\[1\]"):  # fmt: skip
        model(tokens, caches=[cache] * 2)
    assert cache.length == 0 and cache.max_abs == 0.0
    with (
        pytest.raises(ValueError, match=r"caches must hold a separate object per entry"),
        kv_cache.atomic([cache, cache]),
    ):
        pass


def test_separate_caches_decode_what_the_full_forward_computes():
    model = _model()
    tokens = torch.tensor([[1, 2, 3, 4, 5, 6]])
    with torch.no_grad():
        full, _ = model(tokens)
        caches = model.new_caches(1)
        steps = [model(tokens[:, t : t + 1], caches=caches)[0] for t in range(6)]
    assert [c.length for c in caches] == [6, 6]
    tol = rounding_tolerance(torch.float64, terms=8, scale=100.0, stages=8)  # 2 layers of 4
    assert_close(torch.cat(steps, 1), full, tol, name="logits")


# ---- next_token_loss ----------------------------------------------------------------------


def _loss_inputs():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 4, 5, generator=g, dtype=torch.float64)
    tokens = torch.randint(5, (3, 4), generator=g)
    return logits, tokens


def test_an_integer_where_is_refused_not_used_as_indices():
    """Indexing with a 0/1 integer tensor picks positions 0 and 1 (1.637 where the loss is
    1.867 in the issue's case); only a boolean ``where`` selects."""
    logits, tokens = _loss_inputs()
    where = torch.tensor([[1, 0, 1, 0], [0, 1, 1, 0], [1, 1, 0, 0]])
    with pytest.raises(TypeError, match=r"where must be a boolean torch.Tensor .*got torch.int64"):
        next_token_loss(logits, tokens, where)
    chosen = next_token_loss(logits, tokens, where.bool())
    log_p = torch.log_softmax(logits, -1)
    picked = [
        -log_p[b, i, tokens[b, i + 1]] for b in range(3) for i in range(3) if where[b, i] == 1
    ]
    tol = rounding_tolerance(torch.float64, terms=6, scale=10.0, stages=2)  # log-softmax, mean
    assert_close(chosen, torch.stack(picked).mean(), tol, name="loss")


@pytest.mark.parametrize(
    ("slicer", "match"),
    [
        (lambda x: x[:, :1], r"logits must hold a position with a next token .*L=1"),
        (lambda x: x[:0], r"logits must hold a position with a next token .*B=0"),
    ],
)
def test_a_loss_over_no_position_is_refused_not_nan(slicer, match):
    logits, tokens = _loss_inputs()
    with pytest.raises(ValueError, match=match):
        next_token_loss(slicer(logits), slicer(tokens))


def test_token_ids_outside_the_vocabulary_and_nan_logits_are_refused():
    logits, tokens = _loss_inputs()
    with pytest.raises(ValueError, match=r"tokens must lie in \[0, V=5\); got values in"):
        next_token_loss(logits, tokens - 5)
    with pytest.raises(TypeError, match=r"tokens must have an integer dtype; got dtype"):
        next_token_loss(logits, tokens.double())
    nan_out_of_the_loss = logits.clone()
    nan_out_of_the_loss[0, -1, 0] = math.nan  # the last position predicts nothing
    with pytest.raises(ValueError, match=r"logits must not hold NaN or \+inf"):
        next_token_loss(nan_out_of_the_loss, tokens)
    masked = torch.where(torch.arange(5) == tokens[0, 1], -math.inf, logits)
    with pytest.raises(ValueError, match=r"logits must give every counted target a finite"):
        next_token_loss(masked, tokens)  # the target of position 0 has probability 0


# ---- grouped-query layers in the analyses and detectors -----------------------------------

GQA = [(4, 1), (4, 2), (6, 3)]  # (H, H_kv)


def _route_tolerance(x: np.ndarray, params) -> float:
    """Two float64 routes to one attention (grouped or repeated heads): four stages of sums of
    at most D terms (projection, scores, softmax, weighted sum), summands bounded by the
    square of the largest projected entry."""
    D = params.d_model
    top = float(np.abs(x).max() * max(np.abs(params.w_qkv).max(), np.abs(params.w_o).max()) * D)
    return rounding_tolerance(np.float64, terms=D, scale=max(1.0, top) ** 2, stages=4)


@pytest.mark.parametrize(("H", "H_kv"), GQA)
def test_grouped_query_analyses_equal_the_per_head_computation(H, H_kv):
    """Every analysis that takes parameters gives, for a grouped-query layer, what it gives
    for the multi-head layer that computes the same (each key/value head repeated)."""
    D = 2 * H
    params = init_params(D, H, num_kv_heads=H_kv, seed=3)
    per_head = repeat_kv_heads(params)
    x = np.random.default_rng(1).standard_normal((2, 5, D))
    parts, want = rank.attention_parts(x, params), rank.attention_parts(x, per_head)
    assert parts["heads"].shape == (2, H, 5, 2) and parts["concat"].shape == (2, 5, D)
    for name in ("weights", "heads", "concat", "output"):
        assert_close(parts[name], want[name], _route_tolerance(x, params), name=name)
    np.testing.assert_array_equal(  # exact: the same float64 arithmetic on the same blocks
        parts["concat"], np_backend.merge_heads(parts["heads"])
    )
    bounds, want_bounds = rank.rank_bounds(x[0], params), rank.rank_bounds(x[0], per_head)
    assert bounds["head"].tolist() == want_bounds["head"].tolist()
    assert (bounds["concat"], bounds["output"]) == (want_bounds["concat"], want_bounds["output"])
    for name, got in rank.circuit_singular_values(params).items():
        want_sv = rank.circuit_singular_values(per_head)[name]
        np.testing.assert_array_equal(got, want_sv)  # exact: the same blocks, the same SVD
    terms, want_terms = circuits.score_terms(x, params), circuits.score_terms(x, per_head)
    for name in terms:
        np.testing.assert_array_equal(terms[name], want_terms[name])  # exact: same blocks
    np.testing.assert_array_equal(  # exact: the same blocks, the same arithmetic
        circuits.value_norms(x, params), circuits.value_norms(x, per_head)
    )
    for which in ("w_q", "w_k", "w_v", "w_o"):
        np.testing.assert_array_equal(  # exact: copies of the same blocks
            subspaces.head_blocks(params, which), subspaces.head_blocks(per_head, which)
        )


@pytest.mark.parametrize(("H", "H_kv"), GQA)
def test_grouped_query_scores_sum_to_the_layer_scores(H, H_kv):
    """An independent check of score_terms: its four terms sum to the scores of the layer,
    whose softmax is the backend's weights."""
    D = 2 * H
    params = init_params(D, H, num_kv_heads=H_kv, seed=4)
    x = np.random.default_rng(2).standard_normal((1, 4, D))
    scores = sum(circuits.score_terms(x, params).values())
    _, weights = np_backend.multi_head_attention(x, x, x, params)
    assert_close(np_backend.softmax(scores), weights, _route_tolerance(x, params), name="weights")


# ---- MiniLM's ids --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def minilm():
    from mha.models.minilm import load_minilm

    return load_minilm(check_hash=False)


@pytest.mark.parametrize(
    ("change", "error", "match"),
    [
        (dict(ids=[[101, -1, 102]]), ValueError, r"input_ids must lie in \[0, 30522\); got"),
        (dict(ids=[[101, 30522, 102]]), ValueError, r"input_ids must lie in \[0, 30522\)"),
        (dict(types=[[0, -1, 0]]), ValueError, r"token_type_ids must lie in \[0, 2\); got"),
        (dict(types=[[0, 2, 0]]), ValueError, r"token_type_ids must lie in \[0, 2\)"),
        (dict(float_ids=True), TypeError, r"input_ids must have an integer dtype"),
        (dict(numpy_ids=True), TypeError, r"input_ids must be a torch.Tensor; got ndarray"),
        (dict(mask=[[0, 0, 0]]), ValueError, r"attention_mask must keep at least one token"),
        (dict(float_mask=True), TypeError, r"attention_mask must have an integer dtype"),
    ],
)
def test_minilm_refuses_ids_it_would_read_wrongly(minilm, change, error, match):
    """A token id of -1 embedded the last word-piece and a segment id of -1 the second
    segment; ids past the vocabulary, float and NumPy ids failed inside torch."""
    ids = torch.tensor(change.get("ids", [[101, 7592, 102]]))
    types = torch.tensor(change["types"]) if "types" in change else None
    mask = torch.tensor(change["mask"]) if "mask" in change else None
    if change.get("float_ids"):
        ids = ids.double()
    if change.get("numpy_ids"):
        ids = ids.numpy()
    if change.get("float_mask"):
        mask = torch.ones(1, 3)
    with pytest.raises(error, match=match):
        minilm.forward(ids, mask, types)


def test_minilm_reads_int32_ids_and_integer_masks_as_the_int64_and_bool_ones(minilm):
    ids = torch.tensor([[101, 7592, 2088, 102]])
    keep = torch.tensor([[True, True, True, False]])
    want = minilm.forward(ids, keep).hidden_states[-1]
    got = minilm.forward(ids.int(), keep.long()).hidden_states[-1]
    torch.testing.assert_close(got, want, rtol=0, atol=0)  # exact: the same ids and mask


# ---- cost arithmetic with NumPy integers ---------------------------------------------------


def test_numpy_integer_sizes_give_exact_python_integers():
    """int32 sizes stayed fixed-width: (8, 4096, 4096, 32) gave 0 bytes instead of 2**34."""
    sizes = [np.int32(v) for v in (8, 4096, 4096, 32)]
    got = arithmetic.score_tensor_bytes(*sizes)
    assert got == 2**34 and type(got) is int
    flops = arithmetic.matmul_flops(np.int32(4096), np.int32(4096), np.int32(4096))
    assert flops == 2 * 4096**3 and type(flops) is int
    big = arithmetic.attention_flops(*(np.int32(v) for v in (64, 4096, 4096, 4096, 32)))
    assert big == arithmetic.attention_flops(64, 4096, 4096, 4096, 32)
    assert type(big.total) is int
    cost = arithmetic.decode_step_cost(*(np.int32(v) for v in (8192, 64, 8, 100000)))
    assert cost == arithmetic.decode_step_cost(8192, 64, 8, 100000)


def test_a_bool_is_not_a_size_and_none_is_not_a_dtype():
    with pytest.raises(TypeError, match=r"m must be an int; got bool True"):
        arithmetic.matmul_flops(True, 2, 3)
    with pytest.raises(TypeError, match=r"dtype must be a numeric NumPy or PyTorch dtype; got"):
        arithmetic.score_tensor_bytes(1, 2, 3, 4, None)


# ---- rank tolerances and extreme entries ---------------------------------------------------


@pytest.mark.parametrize(
    "tolerance", [dict(rtol=math.nan), dict(atol=math.nan), dict(atol=math.inf)]
)
def test_a_tolerance_that_is_not_finite_is_refused(tolerance):
    with pytest.raises(ValueError, match=r"(rtol|atol) must be finite; got"):
        rank.numerical_rank(np.eye(3), **tolerance)


@pytest.mark.parametrize(
    ("matrix", "expected"),
    [
        (np.array([[1e308, 1e308], [1e308, -1e308]]), 2),  # sigma = 1.41e308: near the top
        (np.full((3, 3), 1.5e308) * np.eye(3), 3),
        (np.array([[1e308, 1e308], [1e308, 1e308]]), 1),  # sigma_max = 2e308 overflows
        (np.array([[5e-324, 0.0], [0.0, 5e-324]]), 2),  # subnormal
    ],
)
def test_the_rank_of_matrices_near_the_ends_of_float64(matrix, expected):
    """Their singular values were inf (or lost), and the rank came out 0."""
    assert rank.numerical_rank(matrix) == expected
    assert rank.numerical_rank(matrix / np.abs(matrix).max()) == expected  # scale-free


def test_singular_values_near_float64s_largest_value():
    s = rank.singular_values(np.array([[1e308, 1e308], [1e308, -1e308]]))
    assert_close(s, np.full(2, 2**0.5 * 1e308), 1e-15 * 1e308, name="singular values")
    with pytest.raises(ValueError, match=r"a's largest singular value exceeds the range"):
        rank.singular_values(np.full((2, 2), 1e308))  # sigma = 2e308


# ---- NaN in the detectors -----------------------------------------------------------------


def test_nan_in_the_detectors_is_refused_not_turned_into_a_score():
    weights = np.full((1, 1, 2, 3), 1 / 3)
    with pytest.raises(ValueError, match=r"norms must be finite; got NaN or infinite values"):
        circuits.value_weighted_attention(weights, np.array([[[np.nan, 1.0, 1.0]]]))
    word_weights = np.array([[0.0, np.nan, 1.0], [1.0, 0.0, 0.0], [0.0, 1.0, 0.0]])
    with pytest.raises(ValueError, match=r"word_weights must be finite; got NaN"):
        patterns.head_accuracy(word_weights, [1, None, 1])
    with pytest.raises(TypeError, match=r"heads\[0\] must be an int; got float 1.5"):
        patterns.head_accuracy(np.eye(3), [1.5, None, 1])


# ---- seeds, sizes and rates ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (lambda: AttentionOnlyTransformer(10, 8, 8, 2, seed=-1), ValueError,
         r"seed must be a non-negative int; got seed=-1"),
        (lambda: AttentionOnlyTransformer(10, 8, 8, 2, seed=2**64), ValueError,
         r"seed must be below 2\*\*64"),
        (lambda: AttentionOnlyTransformer(10, 8, 0, 2), ValueError, r"d_model must be positive"),
        (lambda: AttentionOnlyTransformer(10, 8, 8, 2, dtype=torch.int64), TypeError,
         r"dtype must be one of"),
        (lambda: runs.TrainConfig(lr="0.1"), TypeError, r"lr must be a real number"),
        (lambda: runs.TrainConfig(lr=math.inf), ValueError, r"lr must be finite; got lr=inf"),
        (lambda: runs.TrainConfig(seed=-1), ValueError, r"seed must be a non-negative int"),
        (lambda: runs.TrainConfig(num_heads=3), ValueError, r"num_heads must divide d_model"),
        (lambda: tasks.repeated_segments(2, 8, 10, min_period=2, max_period=4, rng=0.5),
         TypeError, r"rng must be a numpy.random.Generator or a seed"),
        (lambda: examples.fit_two_targets(2, -1, steps=1), ValueError,
         r"seed must be a non-negative int"),
        (lambda: ablation.head_gates(2, 2, [(0.5, 1)]), TypeError, r"off\[0\]\[0\] must be an int"),
        (lambda: ablation.with_kv_heads(_model(), 1, init="random", seed=2**64), ValueError,
         r"seed must be below 2\*\*64"),
        (lambda: timings.projection_times(2, 8, 2, seed=-2), ValueError,
         r"seed must be a non-negative int"),
        (lambda: timings.time_forms(1, 2, 8, 2, threads=0), ValueError,
         r"threads must be positive"),
        (lambda: timings.time_tiled(1, 4, 8, 2, blocks=[(2,)]), TypeError,
         r"blocks\[0\] must be a pair of ints"),
        (lambda: measure.median_time(lambda: None, min_time="1"), TypeError,
         r"min_time must be a real number"),
        (lambda: measure.calibrate(lambda: None, math.nan), ValueError, r"min_time must be finite"),
    ],
)  # fmt: skip
def test_seeds_sizes_and_rates_are_checked_before_any_work(call, error, match):
    with pytest.raises(error, match=match):
        call()


def test_a_refused_train_runs_call_stores_nothing(tmp_path):
    small = runs.TrainConfig(
        vocab_size=10, seq_len=8, min_period=2, max_period=4, d_model=8, num_heads=2, steps=1,
        eval_every=1, eval_size=2, batch_size=2,
    )  # fmt: skip
    with pytest.raises(TypeError, match=r"configs\[1\] must be a TrainConfig"):
        runs.train_runs([small, "bogus"], 1, store=tmp_path)
    with pytest.raises(TypeError, match=r"store must be a path"):
        runs.train_runs([small], 1, store=3)
    assert list(tmp_path.iterdir()) == []


def test_the_flop_model_of_a_grouped_query_per_head_form_matches_the_counter():
    """The issue's numbers: H = 4, H_kv = 1, where the formula ignored the per-head form."""
    params = init_params(8, 4, num_kv_heads=1, seed=0).to_torch()
    x = torch.randn(2, 3, 8, dtype=torch.float64)
    counted = measure.count_flops(
        lambda: torch_backend.multi_head_attention(x, x, x, params, form="per_head")
    )
    per_head = arithmetic.attention_flops(2, 3, 3, 8, 4, num_kv_heads=1, form="per_head")
    fused = arithmetic.attention_flops(2, 3, 3, 8, 4, num_kv_heads=1)
    assert sum(counted.values()) == per_head.matmul > fused.matmul


# ---- SmolLM2 and the digit-sum task ------------------------------------------------------


def _smol():
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parent))
    from api_cases import tiny_smollm2

    return tiny_smollm2()


def test_smollm2_refuses_one_cache_for_every_layer_and_caches_of_another_batch():
    """The list slip of the issue, on SmolLM2: refused, and no cache changes."""
    model = _smol()
    tokens = torch.tensor([[0, 30, 31], [0, 32, 33]])
    cache = model.new_caches(2)[0]
    with pytest.raises(ValueError, match=r"caches must hold a separate object per entry"):
        model(tokens, caches=[cache] * 2)
    assert cache.length == 0
    small = model.new_caches(3)
    with pytest.raises(ValueError, match=r"caches\[0\] must hold \(B, H_kv, Dh\) = \(2, 2, 2\)"):
        model(tokens, caches=small)
    assert [c.length for c in small] == [0, 0]


@pytest.mark.parametrize(
    ("ids", "want"),
    [([], ""), (np.array([], dtype=np.int64), ""), (range(4, 7), "abc")],
)
def test_smollm2_decodes_no_id_and_a_range(ids, want):
    assert _smol().decode(ids) == want


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (lambda m: m.tokens([1.7]), TypeError, r"ids must be integer token ids"),
        (lambda m: m.decode([-1]), ValueError, r"ids must be in \[0, "),
        (lambda m: m.generate(torch.tensor([[0, 30]]), 15), ValueError,
         r"max_new_tokens must keep the positions within max_len=16"),
        (lambda m: m.forward(torch.tensor([[0, 30]]), torch.full((2, 4), math.nan)), ValueError,
         r"gates must be finite"),
        (lambda m: m.unembed(torch.ones(2, 6, dtype=torch.float64)), ValueError,
         r"hidden must have shape \(\.\.\., D\) with D=8"),
        (lambda m: m.generate(torch.zeros(0, 2, dtype=torch.int64), 2), ValueError,
         r"tokens must hold at least one prompt; got B=0"),
        (lambda m: smollm2_heads.copy_losses(m, torch.zeros(0, 5, dtype=torch.int64)),
         ValueError, r"tokens must hold at least one sequence"),
        (lambda m: smollm2_heads.head_distances(np.zeros((0, 1, 2, 3, 3))), ValueError,
         r"weights must hold at least one sequence and one query"),
    ],
)  # fmt: skip
def test_smollm2_refuses_ids_gates_and_lengths_it_would_misread(call, error, match):
    with pytest.raises(error, match=match):
        call(_smol())


def test_a_diverging_digit_sum_run_says_training_diverged():
    config = runs.DigitSumConfig(
        base=3, seq_len=6, d_model=8, num_heads=2, batch_size=4, steps=30, lr=1e6,
        eval_every=10, eval_size=4,
    )  # fmt: skip
    with pytest.raises(ValueError, match=r"the training loss must stay finite at step \d+ "
                       r"\(lr=1000000.0\): training diverged"):  # fmt: skip
        runs.train_digit_sums(config)


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (lambda: runs.DigitSumConfig(lr=math.inf), ValueError, r"lr must be finite"),
        (lambda: runs.DigitSumConfig(seed=-1), ValueError, r"seed must be a non-negative int"),
        (lambda: runs.DigitSumConfig(num_heads=3), ValueError, r"num_heads must divide d_model"),
        (lambda: runs.DigitSumConfig(base=2**32), ValueError, r"base must be below 3037000500"),
        (lambda: tasks.digit_sums(2, 4, 3, rng=-1), ValueError, r"rng must be at least 0"),
        (lambda: tasks.digit_sum_answers(torch.tensor([[1, 2]]), np.int64(2**40)), ValueError,
         r"base must be below"),
    ],
)  # fmt: skip
def test_digit_sum_sizes_seeds_and_rates_are_checked_before_any_work(call, error, match):
    with pytest.raises(error, match=match):
        call()


def test_numpy_int32_base_reads_ids_past_int32():
    """``base ** 2`` in int32 wraps for base 50,000; the base is read as a Python int."""
    tokens = torch.tensor([[2**31 + 5, 7]])
    got = tasks.digit_sum_answers(tokens, np.int32(50_000))
    assert got.tolist() == [[-1, (2**31 + 5) // 50_000 + (2**31 + 5) % 50_000]]
